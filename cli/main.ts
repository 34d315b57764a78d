/**
 * `cuda-checkpoint`: the command line of `@ckpt/cuda`, a stand-in for NVIDIA's utility (driver 580)
 * that CRIU's CUDA plugin can run from `PATH`, with more: several pids, `--all`, `list`, `--json`,
 * progress, snapshots to disk and `--simulate`. Run as a program, it exits with the code of
 * {@link main}; imported, {@link main} runs one command line on the machine and output given. It
 * loads only its parser until the command is known (libcuda alone for a query), to start fast.
 *
 * @example
 * ```ts
 * import { main } from "@ckpt/cuda/cli";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const { pid } = sim.spawn({ memoryMiB: 1024 });
 * let out = "";
 * const io = { machine: sim, stdout: (t: string) => out += t, stderr: () => {} };
 * await main(["--toggle", "--pid", String(pid)], io); // 0
 * await main(["--get-state", "--pid", String(pid)], io); // 0, and out is "checkpointed\n"
 * ```
 *
 * @module
 */

import { parseCommandLine, UsageError } from "./args.ts";
import { type CliIo, escapeControls, type Signal, SIGNALS } from "./io.ts";
import { messageOf } from "../core/errors.ts";
import { VERSION } from "../core/version.ts";

export type { CliIo, Interrupts } from "./io.ts";

/**
 * Runs one `cuda-checkpoint` command line (the arguments after the program's name); resolves to
 * its exit code: 0 when everything asked succeeded, 128 + the signal's number when interrupted
 * (130, 143, 129), 1 otherwise. Never rejects: bad input is its line on stderr, then NVIDIA's help
 * (for NVIDIA's operations) or a line pointing at `--help`; an unexpected error is one line. No
 * control character of what it writes (a process's command line, say) reaches a terminal.
 */
export async function main(args: readonly string[], io: CliIo): Promise<number> {
  const say = (text: string) => io.stderr(escapeControls(text));
  try {
    const command = parseCommandLine(args);
    if (command.kind === "help") io.stdout((await import("./help.ts")).helpText());
    else if (command.kind === "version") io.stdout(`cuda-checkpoint (@ckpt/cuda) ${VERSION}\n`);
    else return await (await import("./run.ts")).run(command, io);
    return 0;
  } catch (error) {
    try {
      if (error instanceof UsageError) {
        // NVIDIA's shape: getopt's line (where it has one), the message, a blank line, the help.
        if (error.getopt) say(`${io.programName ?? "cuda-checkpoint"}: ${error.getopt}\n`);
        say(`${error.message}\n`);
        if (error.detail && io.isTerminal) say(`cuda-checkpoint: ${error.detail}\n`);
        say(error.tail ? `${error.tail}\n` : `\n${(await import("./help.ts")).helpText()}`);
      } else {
        say(`cuda-checkpoint: internal error: ${messageOf(error).split("\n")[0]}\n`);
      }
    } catch {
      // Nowhere left to say it: the exit code says it.
    }
    return 1;
  }
}

/** What the program takes of its runtime, Deno or Bun. */
interface Runtime {
  readonly args: string[];
  readonly programName: string;
  stdout(text: string): void;
  stderr(text: string): void;
  terminal(): boolean;
  readonly env: Record<string, string | undefined>;
  on(signal: Signal, listener: () => void): void;
  off(signal: Signal, listener: () => void): void;
  /** Exits at once. */
  exit(code: number): void;
  /** Resolves once what was written has gone out. */
  flushed(): Promise<unknown>;
}

/** This runtime's arguments, output, environment, signals and exit. */
function runtime(): Runtime {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  if (deno) {
    const encoder = new TextEncoder();
    const writer = (file: { writeSync(data: Uint8Array): number }) => (text: string) => {
      let data = encoder.encode(text);
      while (data.length > 0) data = data.subarray(file.writeSync(data));
    };
    let env: Record<string, string> = {};
    try {
      env = deno.env.toObject();
    } catch {
      // Without --allow-env the environment counts as empty.
    }
    return {
      args: deno.args,
      programName: programName(() =>
        new TextDecoder().decode(deno.readFileSync("/proc/self/cmdline")).split("\0")[0]
      ),
      stdout: writer(deno.stdout),
      stderr: writer(deno.stderr),
      terminal: () => deno.stderr.isTerminal(),
      env,
      on: (signal, listener) => deno.addSignalListener(signal, listener),
      off: (signal, listener) => deno.removeSignalListener(signal, listener),
      exit: (code) => deno.exit(code),
      flushed: () => Promise.resolve(),
    };
  }
  // Bun: its own writers (FileSinks: flush() gives a promise only where the pipe is full) and
  // globals, typed here (Deno's checker has no `Bun`). node:fs is loaded only to tell a terminal:
  // it, and node:tty more so (12-15 ms), weigh on the start-up of `--get-state`.
  type Sink = { write(chunk: string): number; flush(): number | Promise<number> };
  const { Bun, process } = globalThis as unknown as {
    Bun: { stdout: { writer(): Sink }; stderr: { writer(): Sink } };
    process: Omit<Runtime, "programName"> & { argv: string[]; argv0: string };
  };
  const pending: Promise<unknown>[] = [];
  const writer = (sink: Sink) => (text: string) => {
    sink.write(text);
    const flushed = sink.flush();
    if (typeof flushed !== "number") pending.push(flushed);
  };
  const require = (import.meta as unknown as { require(id: string): unknown }).require;
  return {
    args: process.argv.slice(2),
    programName: programName(() => process.argv0),
    stdout: writer(Bun.stdout.writer()),
    stderr: writer(Bun.stderr.writer()),
    // Whether stderr is a terminal, from what /proc/self/fd/2 names (/dev/pts/N, /dev/ttyN).
    terminal() {
      const { readlinkSync } = require("node:fs") as { readlinkSync(p: string): string };
      const tty = /^\/dev\/(pts\/[0-9]+|tty[A-Za-z0-9]*|console)$/;
      try {
        return tty.test(readlinkSync("/proc/self/fd/2"));
      } catch {
        return false;
      }
    },
    env: process.env,
    on: (signal, listener) => process.on(signal, listener),
    off: (signal, listener) => process.off(signal, listener),
    exit: (code) => process.exit(code),
    flushed: () => Promise.all(pending),
  };
}

/**
 * `argv[0]` as this program was run, as getopt names a program; or `cuda-checkpoint` where that is
 * a runtime running this file as a script (`deno`, `bun`, `node`), or cannot be read.
 */
function programName(argv0: () => string): string {
  try {
    const name = argv0();
    if (name !== "" && !/(^|\/)(deno|bun|node)$/.test(name)) return name;
  } catch {
    // No /proc here: the plain name.
  }
  return "cuda-checkpoint";
}

if (import.meta.main) {
  const host = runtime();
  let terminal: boolean | undefined;
  const code = await main(host.args, {
    ...host, // its programName, stdout, stderr and env (the rest unread)
    get isTerminal() {
      return terminal ??= host.terminal();
    },
    interrupts: {
      watch(onInterrupt) {
        const listeners = SIGNALS.map((signal) => [signal, () => onInterrupt(signal)] as const);
        for (const [signal, listener] of listeners) host.on(signal, listener);
        return () => listeners.forEach(([signal, listener]) => host.off(signal, listener));
      },
      exit: host.exit,
    },
  });
  await host.flushed();
  host.exit(code);
}
