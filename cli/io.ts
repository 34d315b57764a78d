/**
 * What `main()` writes to and works on ({@link CliIo}), apart from `main.ts` so that the
 * modules of each command can name it without importing the entry point.
 *
 * @module
 */

import type { CheckpointDriver } from "../core/driver.ts";
import type { HostProcesses } from "../core/host.ts";

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
  /** The environment: `CKPT_SIM_STATE` (the simulated machine's file). Default: none. */
  env?: Readonly<Record<string, string | undefined>>;
  /**
   * The driver to work with instead of this machine's libcuda (a `SimulatedDriver` in tests).
   * It stays open: it is the caller's. `--simulate` uses the state file's machine instead.
   */
  driver?: CheckpointDriver;
  /**
   * Where `list` and `--all` find processes, instead of the driver's own (the simulator's) or
   * this machine's `/proc`. It stays open: it is the caller's.
   */
  host?: HostProcesses;
  /**
   * Where interrupts come from: SIGINT, when `cuda-checkpoint` runs as a program. During an
   * operation on several processes, the first interrupt stops the group, brings back every
   * process the command changed, prints the lines and what was left changed, and the command
   * exits 130; a second exits at once through `interrupts.exit(130)`. Left out (in-process use):
   * interrupts are not watched. An operation on one pid never watches them: the program ends at
   * the interrupt, as NVIDIA's utility does.
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
