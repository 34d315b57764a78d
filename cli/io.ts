/**
 * What `main()` is given: where it writes, and the machine, environment and interrupts it works
 * with; and how a process's text (a command line, a manifest) is made safe for a terminal.
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
   * Whether standard error is a terminal: then errors get a second line that says more, long work
   * shows a live line, and `--simulate` says that it is simulated. Default false: the output is
   * NVIDIA's utility's, line for line.
   */
  isTerminal?: boolean;
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
   * changed, and it exits 128 + the signal's number (130, 143, 129); a second exits at once through
   * `interrupts.exit(code)`. Left out (in-process use): not watched. One pid never watches them: as
   * with NVIDIA's utility, the program ends.
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
 * which some terminals obey too) written as a `\u00XX` escape; a JSON line stays valid JSON.
 */
export function escapeControls(text: string): string {
  return text.replace(
    // deno-lint-ignore no-control-regex
    /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
