/**
 * What `main()` is given: where it writes, and the machine, environment and interrupts it works
 * with; how a process's text (a command line, a manifest) is made safe for a terminal; and the one
 * watch over interrupts (Ctrl-C's SIGINT, and the SIGTERM and SIGHUP that systemd, `timeout` and a
 * dropped SSH session send) that a snapshot, a restore, several processes and `--simulate`'s save share;
 * and the program's own, from Deno or Bun.
 *
 * @module
 */

import type { Machine } from "../driver.ts";
import { messageOf } from "../core/errors.ts";
import { orElse } from "../core/options.ts";

/** Where `main()` writes and what it works on. */
export interface CliIo {
  /** Writes text to standard output (results: states, thread ids, `--json` lines, tables). */
  stdout(text: string): void;
  /** Writes text to standard error (errors, the help after a usage error, progress). */
  stderr(text: string): void;
  /**
   * Whether standard error is a terminal: then errors get a second line that says more, long work
   * shows a live line, and `--simulate` says that it is simulated. Default false: the output is
   * NVIDIA's utility's, line for line.
   */
  isTerminal?: boolean;
  /** The terminal's width in columns, where it tells (the live line fits it). Default 80. */
  columns?(): number | undefined;
  /**
   * The name the program was run by (its `argv[0]`), which starts getopt's line for an unknown
   * option or a missing value, as with NVIDIA's utility. Default `cuda-checkpoint`.
   */
  programName?: string;
  /**
   * The environment `--simulate` (`CKPT_SIM_*`) and criu (`CKPT_CRIU_PATH`) read; left out,
   * `--simulate` sees none and criu this process's. `CKPT_LIBCUDA_PATH` and `CKPT_RECORDS_DIR` are
   * always this process's.
   */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * The machine to work on instead of this one (a `SimulatedMachine` in tests); it stays open: it
   * is the caller's. `--simulate` uses the state file's machine instead.
   */
  machine?: Machine;
  /**
   * Where interrupts come from (SIGINT, SIGTERM, SIGHUP for the program). During an operation on
   * several processes, a snapshot or a restore, the first brings back every process the command
   * changed, and `main` resolves to 128 + its number (130, 143, 129; a program then ends by it), or
   * to its own code where it came too late, once a snapshot is ending its processes; a second exits
   * at once through `interrupts.exit(code)`. Left out (in-process use): unwatched. One pid ends by
   * the signal, as NVIDIA's does (on a terminal through `interrupts.raise`, its live line erased).
   * With `--simulate`, one that comes while the machine is saved after the command waits for it.
   */
  interrupts?: Interrupts;
}

/** Where a program's interrupts come from (SIGINT, SIGTERM, SIGHUP for `cuda-checkpoint`). */
export interface Interrupts {
  /**
   * Calls `onInterrupt` at each interrupt (not within `watch`) with its signal (SIGINT where left
   * out) till the returned function is called (again: nothing); meanwhile none ends the program.
   */
  watch(onInterrupt: (signal?: "SIGINT" | "SIGTERM" | "SIGHUP") => void): () => void;
  /** Ends the program at once with `code` (a second interrupt's), by its signal in a program. */
  exit(code: number): void;
  /** Sends `signal` to the program, its watch removed (one pid's; left out: one pid unwatched). */
  raise?(signal: "SIGINT" | "SIGTERM" | "SIGHUP"): void;
}

/**
 * Text as it may go to a terminal: every control character but the newline (C0, DEL, and C1,
 * which some terminals obey too), the bidirectional controls (U+202A-U+202E, U+2066-U+2069,
 * U+200E, U+200F, U+061C: they reorder what follows on screen) and the line and paragraph
 * separators (U+2028, U+2029) written as `\uXXXX` escapes; a JSON line stays valid JSON.
 */
export function escapeControls(text: string): string {
  return text.replace(
    // deno-lint-ignore no-control-regex
    /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** The one line that says an unexpected error (not the user's input, not a process's failure). */
export const internalError = (err: unknown): string =>
  `cuda-checkpoint: internal error: ${messageOf(err).split("\n")[0]}\n`;

/** `text` with each command it advises one of the simulated machine's, where `simulated`. */
export function advised(text: string, simulated: boolean): string {
  const advice = /\b(kill )(?=[0-9])|cuda-checkpoint /g, simulate = "cuda-checkpoint --simulate $1";
  return simulated ? text.replace(advice, simulate) : text; // `kill 4000`: a simulated pid's
}

/** A signal that interrupts a command: as {@link Interrupts.watch} names it. */
export type Signal = NonNullable<Parameters<Parameters<Interrupts["watch"]>[0]>[0]>;

/** The exit code of a command that each signal interrupted: 128 + Linux's number, as shells say. */
const EXIT_CODES: Readonly<Record<Signal, number>> = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 };
const SIGNALS = Object.keys(EXIT_CODES) as Signal[];

/**
 * What a command says when interrupted: what was interrupted (`snapshot`), named before
 * "interrupted"; what happens after the first interrupt, the end of its line; what a second leaves
 * (none where left out; the first line ends the line `interrupted again: exiting without waiting`,
 * the rest follow); and whether the machine is the state file's (then unsaved).
 */
export interface InterruptHooks {
  readonly subject?: string;
  readonly meanwhile: string;
  leftBehind?(): readonly string[];
  readonly simulated: boolean;
}

/**
 * Watches a command's interrupts. The first is remembered, said (`interrupted`, with ` by SIGTERM`
 * or ` by SIGHUP`) and aborts `signal`; a second, of any of the three, says what may be left and
 * exits at once with its own exit code. Without `interrupts` nothing is watched.
 */
export function watchInterrupts(
  interrupts: Interrupts | undefined,
  print: { err(line: string): void },
  { subject, meanwhile, leftBehind, simulated }: InterruptHooks,
): {
  /** Aborts at the first interrupt, its reason `interrupted (SIGX)`. */
  readonly signal: AbortSignal;
  /** The exit code: the first interrupt's, if one came, else `code`. */
  exitCode(code: number): number;
  /** Stops watching: an interrupt ends the program again. Idempotent. */
  stop(): void;
} {
  const controller = new AbortController();
  let first: Signal | undefined;
  const say = (line: string) => print.err(`cuda-checkpoint: ${line}`);
  let unwatch = interrupts?.watch((signal = "SIGINT") => {
    if (first === undefined) {
      first = signal;
      const by = signal === "SIGINT" ? "" : ` by ${signal}`;
      say(`${subject ? `${subject} ` : ""}interrupted${by}: ${meanwhile}`);
      return controller.abort(new Error(`interrupted (${signal})`));
    }
    const [rest = "", ...lines] = (leftBehind?.() ?? []).map((line) => advised(line, simulated));
    say(`interrupted again: exiting without waiting${rest}`);
    lines.forEach(say);
    const unsaved = "the simulated machine was not saved: its state file is as before this command";
    if (simulated) say(unsaved);
    interrupts!.exit(EXIT_CODES[signal]);
  });
  return {
    signal: controller.signal,
    exitCode: (code) => first ? EXIT_CODES[first] : code,
    stop: () => void (unwatch?.(), unwatch = undefined),
  };
}

/**
 * This runtime's arguments and `CliIo`: stdout and stderr, the environment, the name it was run by,
 * whether stderr is a terminal (read once, when first asked), and SIGINT, SIGTERM and SIGHUP.
 */
export function programIo(): {
  readonly args: readonly string[];
  readonly io: CliIo;
  /** Exits once what was written has gone out: by the signal where an interrupt gave `code`. */
  exit(code: number): Promise<void>;
} {
  const host = runtime();
  let terminal: boolean | undefined, read = true, heard = false; // heard: an interrupt came
  // Signals it was started with ignored (`cmd &` in a script: SIGINT) it lets be, as NVIDIA's
  // does, through a listener kept for good that does nothing (Deno and Bun end it at one unheard).
  let ignored: Signal[] | undefined;
  const listening = new Set<readonly [Signal, () => void]>();
  // Where an interrupt ended the command, by the signal of its code (its listeners gone first): a
  // calling shell's loop stops only at a program a signal ended, and runs on after an exit 130.
  const end = (code: number) => {
    listening.forEach((each) => host.off(...each));
    const signal = SIGNALS.find((s) => heard && EXIT_CODES[s] === code);
    if (signal) host.raise(signal); // it ends here, or (Deno, in a listener) once that returns
    signal ? setTimeout(() => host.exit(code), 100) : host.exit(code); // 100 ms: the signal ignored
  };
  const io: CliIo = {
    ...host, // its programName and env (the rest unread)
    stderr: (text) => orElse(() => host.stderr(text), undefined), // gone: an interrupt still acts
    // A reader that has gone (`| head -1`) ends stdout, not the command: stderr still tells.
    stdout(text) {
      try {
        if (read) host.stdout(text);
      } catch (err) {
        const { code, name } = err as { code?: string; name?: string };
        if (code !== "EPIPE" && name !== "BrokenPipe") throw err;
        read = false;
      }
    },
    get isTerminal() {
      return terminal ??= host.terminal();
    },
    interrupts: {
      watch(onInterrupt) {
        ignored ??= ignoredIn(orElse(host.status, "")).map((s) => (host.on(s, () => {}), s));
        const listeners = SIGNALS.filter((s) => !ignored!.includes(s)).map((signal) =>
          [signal, () => (heard = true, onInterrupt(signal))] as const
        );
        for (const each of listeners) host.on(...each), listening.add(each);
        return () => listeners.forEach((each) => (host.off(...each), listening.delete(each)));
      },
      exit: end,
      raise: host.raise,
    },
  };
  const exit = (code: number) =>
    host.flushed().then(() => end(code), (err) => {
      io.stderr(escapeControls(internalError(err))); // stdout's failure, once written out
      end(code || 1);
    });
  return { args: host.args, io, exit };
}

/** The signals of the three that `status` (/proc/self/status) says are ignored. */
function ignoredIn(status: string): Signal[] {
  const mask = parseInt(/SigIgn:\s*[0-9a-f]*?([0-9a-f]{1,8})\n/.exec(status)?.[1] ?? "0", 16);
  return SIGNALS.filter((s) => mask >> (EXIT_CODES[s] - 129) & 1);
}

/** What the program takes of its runtime, Deno or Bun (its writers, name and env: `CliIo`'s). */
interface Runtime extends Required<Omit<CliIo, "isTerminal" | "machine" | "interrupts">> {
  readonly args: string[];
  terminal(): boolean;
  status(): string; // /proc/self/status
  on(signal: Signal, listener: () => void): void;
  off(signal: Signal, listener: () => void): void;
  /** Exits at once. */
  exit(code: number): void;
  /** Sends `signal` to this program. */
  raise(signal: Signal): void;
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
    return {
      env: orElse(() => deno.env.toObject(), {}), // without --allow-env: empty
      args: deno.args,
      programName: programName(() =>
        new TextDecoder().decode(deno.readFileSync("/proc/self/cmdline")).split("\0")[0]
      ),
      stdout: writer(deno.stdout),
      stderr: writer(deno.stderr),
      terminal: () => deno.stderr.isTerminal(),
      columns: () => orElse(() => deno.consoleSize().columns, undefined),
      status: () => deno.readTextFileSync("/proc/self/status"),
      on: (signal, listener) => deno.addSignalListener(signal, listener),
      off: (signal, listener) => deno.removeSignalListener(signal, listener),
      exit: (code) => deno.exit(code),
      raise: (signal) => deno.kill(deno.pid, signal),
      flushed: () => Promise.resolve(),
    };
  }
  // Bun: its own writers (FileSinks: write() and flush() give a promise where the pipe is full) and
  // globals, typed here (Deno's checker has no `Bun`). node:fs is loaded only to tell a terminal:
  // it, and node:tty more so (12-15 ms), weigh on the start-up of `--get-state`.
  type Sink = { write(chunk: string): unknown; flush(): unknown };
  const { Bun, process } = globalThis as unknown as {
    Bun: { stdout: { writer(): Sink }; stderr: { writer(): Sink } };
    process: Omit<Runtime, "programName"> & { argv: string[]; argv0: string; pid: number } & {
      kill(pid: number, signal: Signal): void;
    };
  };
  const pending: Promise<unknown>[] = [];
  let failed: { code?: string } | undefined; // stdout's, but where its reader left (EPIPE)
  const writer = (sink: Sink, out = false) => (text: string) => {
    // Each gives a promise where the pipe is full, which fails (EPIPE) where its reader left.
    const full = [sink.write(text), sink.flush()].filter((p) => p instanceof Promise);
    pending.push(...full.map((p) => p.catch((e) => out && e?.code !== "EPIPE" && (failed = e))));
  };
  const require = (import.meta as unknown as { require(id: string): unknown }).require;
  const fs = () => require("node:fs") as typeof import("node:fs");
  return {
    args: process.argv.slice(2),
    programName: programName(() => process.argv0),
    stdout: writer(Bun.stdout.writer(), true),
    stderr: writer(Bun.stderr.writer()),
    // Whether stderr is a terminal, from what /proc/self/fd/2 names (/dev/pts/N, /dev/ttyN).
    terminal() {
      const tty = /^\/dev\/(pts\/[0-9]+|tty[A-Za-z0-9]*|console)$/;
      return orElse(() => tty.test(fs().readlinkSync("/proc/self/fd/2", "utf8")), false);
    },
    status: () => fs().readFileSync("/proc/self/status", "utf8"),
    columns: () => (process.stderr as unknown as { columns?: number }).columns, // on a terminal
    env: process.env,
    on: (signal, listener) => process.on(signal, listener),
    off: (signal, listener) => process.off(signal, listener),
    exit: (code) => process.exit(code),
    raise: (signal) => process.kill(process.pid, signal),
    flushed: () => Promise.allSettled(pending).then(() => failed && Promise.reject(failed)),
  };
}

/**
 * `argv[0]` as this program was run, as getopt names a program; or `cuda-checkpoint` where that is
 * a runtime running this file as a script (`deno`, `bun`, npm's `bun.exe`, `node`), or is unread.
 */
function programName(argv0: () => string): string {
  const name = orElse(argv0, ""); // no /proc here: the plain name
  return name !== "" && !/(^|\/)(deno|bun|node)(\.exe)?$/.test(name) ? name : "cuda-checkpoint";
}
