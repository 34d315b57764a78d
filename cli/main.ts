/**
 * `cuda-checkpoint`: the command line of `@ckpt/cuda`, a stand-in for NVIDIA's utility of the same
 * name (driver 580) that CRIU's CUDA plugin can run from `PATH`, with more: several pids at once,
 * `--all`, `list`, `--json`, progress on a terminal, and `--simulate`. Run as a program, it exits
 * with the code {@link main} returns; imported, {@link main} runs one command line in-process, on
 * the machine and output given (tests give it the simulated machine).
 *
 * ```sh
 * deno install -g -A -n cuda-checkpoint jsr:@ckpt/cuda/cli
 * cuda-checkpoint --get-state --pid 4242          # running
 * cuda-checkpoint --toggle --pid 4242,4243 --json
 * ```
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
 * This module loads only the command-line parser; each command then loads what it needs (libcuda
 * alone for a query, this machine, the simulator), so that `--get-state` and `--get-restore-tid`
 * start fast.
 *
 * @module
 */

import { parseCommandLine, UsageError } from "./args.ts";
import { type CliIo, escapeControls, type Interrupts } from "./io.ts";
import { type Signal, SIGNALS } from "./signals.ts";
import { messageOf } from "../core/errors.ts";
import { VERSION } from "../core/version.ts";

export type { CliIo, Interrupts } from "./io.ts";

/**
 * Runs one `cuda-checkpoint` command line (the arguments after the program's name) and resolves
 * to its exit code: 0 when everything asked succeeded, 128 + the signal's number when interrupted
 * (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), 1 otherwise. It never rejects: bad input is
 * one line on stderr, then, for NVIDIA's operations, the help as NVIDIA's utility prints it, and
 * for a command line of ours one line that points at `--help`; an unexpected error is one line,
 * `cuda-checkpoint: internal error: ...`. Control characters in anything it writes (a process's
 * command line, say) are escaped, so none reaches a terminal.
 */
export async function main(args: readonly string[], io: CliIo): Promise<number> {
  const say = (text: string) => io.stderr(escapeControls(text));
  try {
    const command = parseCommandLine(args);
    if (command.kind === "help") {
      io.stdout((await import("./help.ts")).helpText());
      return 0;
    }
    if (command.kind === "version") {
      io.stdout(`cuda-checkpoint (@ckpt/cuda) ${VERSION}\n`);
      return 0;
    }
    return await (await import("./run.ts")).run(command, io);
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

/** This process's arguments, output and environment, and the way it exits. */
interface ProcessIo {
  readonly args: string[];
  readonly io: CliIo;
  /** Exits with `code`, once what was written has gone out. */
  exit(code: number): Promise<never>;
}

/** What the Bun branch uses of Bun's globals (typed here: Deno's checker has no `Bun`). */
interface BunGlobals {
  readonly Bun: { readonly stdout: { writer(): Sink }; readonly stderr: { writer(): Sink } };
  readonly process: {
    readonly argv: string[];
    readonly argv0: string;
    readonly env: Record<string, string | undefined>;
    exit(code: number): never;
    on(signal: string, listener: () => void): void;
    off(signal: string, listener: () => void): void;
  };
}

/** A Bun `FileSink`: buffered writes, flushed at once where the file takes them. */
type Sink = { write(chunk: string): number; flush(): number | Promise<number> };

/** This process's arguments, output and environment, on Deno or Bun. */
function processIo(): ProcessIo {
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
      io: {
        programName: programName(() =>
          new TextDecoder().decode(deno.readFileSync("/proc/self/cmdline")).split("\0")[0]
        ),
        stdout: writer(deno.stdout),
        stderr: writer(deno.stderr),
        isTerminal: deno.stderr.isTerminal(),
        env,
        interrupts: interruptsOf(
          (signal, listener) => deno.addSignalListener(signal, listener),
          (signal, listener) => deno.removeSignalListener(signal, listener),
          (code) => deno.exit(code),
        ),
      },
      exit: (code) => Promise.resolve(deno.exit(code)),
    };
  }
  // Bun: its own writers and globals. node:fs (and node:tty for isTTY) cost a millisecond or more
  // to load, a tenth of the start-up of `--get-state`; they are loaded only to tell a terminal.
  const { Bun, process } = globalThis as unknown as BunGlobals;
  const pending: Promise<unknown>[] = [];
  const writer = (sink: Sink) => (text: string) => {
    sink.write(text);
    const flushed = sink.flush(); // a promise only where the pipe is full
    if (typeof flushed !== "number") pending.push(flushed);
  };
  let terminal: boolean | undefined;
  const require = (import.meta as unknown as { require(id: string): unknown }).require;
  return {
    args: process.argv.slice(2),
    io: {
      programName: programName(() => process.argv0),
      stdout: writer(Bun.stdout.writer()),
      stderr: writer(Bun.stderr.writer()),
      get isTerminal() {
        const fs = require("node:fs") as { readlinkSync(path: string): string };
        return terminal ??= isTerminal((path) => fs.readlinkSync(path));
      },
      env: process.env,
      interrupts: interruptsOf(
        (signal, listener) => process.on(signal, listener),
        (signal, listener) => process.off(signal, listener),
        (code) => process.exit(code),
      ),
    },
    exit: async (code) => {
      await Promise.all(pending);
      return process.exit(code);
    },
  };
}

/** Interrupts from this process's SIGINT, SIGTERM and SIGHUP, through the runtime's listeners. */
function interruptsOf(
  on: (signal: Signal, listener: () => void) => void,
  off: (signal: Signal, listener: () => void) => void,
  exit: (code: number) => void,
): Interrupts {
  return {
    watch(onInterrupt) {
      const listeners = SIGNALS.map((signal) => [signal, () => onInterrupt(signal)] as const);
      for (const [signal, listener] of listeners) on(signal, listener);
      return () => {
        for (const [signal, listener] of listeners) off(signal, listener);
      };
    },
    exit,
  };
}

/**
 * `argv[0]` as this program was run (on Deno, from `/proc/self/cmdline`), as getopt names a
 * program; or `cuda-checkpoint` where that is a runtime running this file as a script (`deno`,
 * `bun`, `node`), or cannot be read.
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

/**
 * Whether stderr is a terminal, from what `/proc/self/fd/2` names (a `/dev/pts/N` or `/dev/ttyN`).
 * Bun's `node:tty` and `process.stderr` take 12-15 ms to load, a third of the start-up.
 */
function isTerminal(readlink: (path: string) => string): boolean {
  try {
    return /^\/dev\/(pts\/[0-9]+|tty[A-Za-z0-9]*|console)$/.test(readlink("/proc/self/fd/2"));
  } catch {
    return false;
  }
}

if (import.meta.main) {
  const { args, io, exit } = processIo();
  await exit(await main(args, io));
}
