/**
 * What `main()` is given: where it writes, and the machine, environment and interrupts it works
 * with. Types only, so that the command line's modules share them without importing `main()`.
 *
 * @module
 */

import type { Machine } from "../core/machine.ts";

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
   * Where interrupts come from (SIGINT, when `cuda-checkpoint` runs as a program). During an
   * operation on several processes the first brings back every process the command changed, and
   * it exits 130; a second exits at once through `interrupts.exit(130)`. Left out (in-process
   * use): not watched. One pid never watches them: as with NVIDIA's utility, the program ends.
   */
  interrupts?: Interrupts;
}

/** Where a program's interrupts come from (SIGINT, when `cuda-checkpoint` runs as a program). */
export interface Interrupts {
  /**
   * Calls `onInterrupt` at each interrupt until the returned function is called; meanwhile an
   * interrupt does not end the program.
   */
  watch(onInterrupt: () => void): () => void;
  /** Ends the program at once with `code` (a second interrupt, which does not wait). */
  exit(code: number): void;
}
