/**
 * What `main()` is given (where it writes, and the machine, environment and interrupts it works
 * with), and the one place every line the command line prints goes through on its way there
 * ({@link GuardedIo}), which escapes the control characters that a process's strings (a command
 * line, a manifest) could carry to a terminal.
 *
 * @module
 */

import type { Machine } from "../driver.ts";

/** Where `main()` writes and what it works on. */
export interface CliIo {
  /** Writes text to standard output (results: states, thread ids, `--json` lines, tables). */
  stdout(text: string): void;
  /** Writes text to standard error (errors, the help after a usage error, progress). */
  stderr(text: string): void;
  /**
   * Whether standard error is a terminal. Then errors get a second line that says more, long
   * operations show their progress, and `--simulate` says that it is simulated. Default false:
   * the output is NVIDIA's utility's, line for line.
   */
  isTerminal?: boolean;
  /**
   * The name the program was run by (its `argv[0]`), which starts the line `getopt` would print
   * for an unknown option or a missing value, as NVIDIA's utility does. Default `cuda-checkpoint`.
   */
  programName?: string;
  /**
   * The environment that `--simulate` (`CKPT_SIM_STATE`, the simulated machine's file) and criu
   * (`CKPT_CRIU_PATH`) are read from; left out, `--simulate` sees none and criu this process's.
   * libcuda (`CKPT_LIBCUDA_PATH`) and the records (`CKPT_RECORDS_DIR`) are always this process's.
   */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * The machine to work on instead of this one (a `SimulatedMachine` in tests): its driver, its
   * processes, its criu. It stays open: it is the caller's. `--simulate` uses the state file's
   * machine instead.
   */
  machine?: Machine;
  /**
   * Where interrupts come from (SIGINT, SIGTERM and SIGHUP, when `cuda-checkpoint` runs as a
   * program). During an operation on several processes, a snapshot or a restore, the first brings
   * back every process the command changed, and it exits 128 + the signal's number (130 for
   * SIGINT, 143 for SIGTERM, 129 for SIGHUP); a second, of any of the three, exits at once through
   * `interrupts.exit(code)`. Left out (in-process use): not watched. One pid never watches them:
   * as with NVIDIA's utility, the program ends.
   */
  interrupts?: Interrupts;
}

/** Where a program's interrupts come from (SIGINT, SIGTERM, SIGHUP for `cuda-checkpoint`). */
export interface Interrupts {
  /**
   * Calls `onInterrupt` at each interrupt, with the signal's name (SIGINT where left out), until
   * the returned function is called; meanwhile an interrupt does not end the program.
   */
  watch(onInterrupt: (signal?: "SIGINT" | "SIGTERM" | "SIGHUP") => void): () => void;
  /** Ends the program at once with `code` (a second interrupt, which does not wait). */
  exit(code: number): void;
}

/**
 * Text as it may go to a terminal: every control character but the newline (C0, DEL, and C1,
 * U+0080 to U+009F, which some terminals obey as well), the bidirectional controls (U+202A to
 * U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C: they reorder what follows on screen) and the
 * line and paragraph separators (U+2028, U+2029) written as a `\uXXXX` escape. A JSON line stays
 * valid JSON, and means the same.
 */
export function escapeControls(text: string): string {
  return text.replace(
    // deno-lint-ignore no-control-regex
    /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * One line as it is written: a newline within it escaped (`\u000a`), so that a process's text (a
 * command line may hold one) cannot start a line of its own that reads as the command's. Its other
 * control characters are {@link GuardedIo}'s to escape, as everything written through it.
 */
export function oneLine(line: string): string {
  return line.replaceAll("\n", "\\u000a");
}

/**
 * The output `main()` writes through: the given {@link CliIo} with every character written to
 * stdout and stderr escaped ({@link escapeControls}), except what `control()` writes: the
 * command line's own terminal controls (a progress line and its erasing), never a process's text.
 */
export class GuardedIo implements CliIo {
  readonly #io: CliIo;

  /** Guards `io`; a `GuardedIo` given is not guarded twice. */
  static of(io: CliIo): GuardedIo {
    return io instanceof GuardedIo ? io : new GuardedIo(io);
  }

  private constructor(io: CliIo) {
    this.#io = io;
  }

  /** Writes `text` to stdout, its control characters escaped. */
  readonly stdout = (text: string): void => this.#io.stdout(escapeControls(text));
  /** Writes `text` to stderr, its control characters escaped. */
  readonly stderr = (text: string): void => this.#io.stderr(escapeControls(text));
  /** Writes the command line's own terminal controls to stderr, as they are. */
  readonly control = (text: string): void => this.#io.stderr(text);

  /** See {@link CliIo.isTerminal}. */
  get isTerminal(): boolean | undefined {
    return this.#io.isTerminal;
  }
  /** See {@link CliIo.programName}. */
  get programName(): string | undefined {
    return this.#io.programName;
  }
  /** See {@link CliIo.env}. */
  get env(): Readonly<Record<string, string | undefined>> | undefined {
    return this.#io.env;
  }
  /** See {@link CliIo.machine}. */
  get machine(): Machine | undefined {
    return this.#io.machine;
  }
  /** See {@link CliIo.interrupts}. */
  get interrupts(): Interrupts | undefined {
    return this.#io.interrupts;
  }
}
