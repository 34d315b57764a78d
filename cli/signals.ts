/**
 * The signals that interrupt a command of `cuda-checkpoint` (Ctrl-C's SIGINT, and the SIGTERM and
 * SIGHUP that systemd, `timeout` and a dropped SSH session send), and the exit code each gives.
 *
 * @module
 */

/** A signal that interrupts a command. */
export type Signal = "SIGINT" | "SIGTERM" | "SIGHUP";

/** Linux's number of each. */
const NUMBERS: Readonly<Record<Signal, number>> = { SIGHUP: 1, SIGINT: 2, SIGTERM: 15 };

/** The exit code of a command that `signal` interrupted: 128 + its number, as shells report it. */
export function interruptedExitCode(signal: Signal): number {
  return 128 + NUMBERS[signal];
}
