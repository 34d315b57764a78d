/**
 * The signals that interrupt a command of `cuda-checkpoint` (Ctrl-C's SIGINT, and the SIGTERM and
 * SIGHUP that systemd, `timeout` and a dropped SSH session send), the exit code each gives, and the
 * one watch over them that a snapshot, a restore and an operation on several processes share.
 *
 * @module
 */

import type { Interrupts } from "./io.ts";
import type { Printer } from "./report.ts";

/** A signal that interrupts a command: as {@link Interrupts.watch} names it. */
export type Signal = NonNullable<Parameters<Parameters<Interrupts["watch"]>[0]>[0]>;

/** Linux's number of each. */
const NUMBERS: Readonly<Record<Signal, number>> = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 };

/** The signals that interrupt a command. */
export const SIGNALS = Object.keys(NUMBERS) as readonly Signal[];

/** The exit code of a command that `signal` interrupted: 128 + its number, as shells report it. */
export function interruptedExitCode(signal: Signal): number {
  return 128 + NUMBERS[signal];
}

/** What a command says when interrupted; the rest is the watch's. */
export interface InterruptHooks {
  /** What was interrupted, named before "interrupted" (`snapshot`); left out, nothing is. */
  readonly subject?: string;
  /** What happens after the first interrupt: the first line's end, after `interrupted: `. */
  readonly meanwhile: string;
  /**
   * What a second interrupt leaves: `rest` ends the line `interrupted again: exiting without
   * waiting`, and `lines` follow it (each after `cuda-checkpoint: `).
   */
  leftBehind(): { rest: string; lines?: readonly string[] };
}

/**
 * The watch over a command's interrupts. The first is remembered, said (`interrupted`, with ` by
 * SIGTERM` or ` by SIGHUP`) and aborts `signal` with `interrupted (SIGX)`; a second, of any of the
 * three, says what may be left (and, on a simulated machine, that its state file was not saved)
 * and exits at once with its own exit code. Without `interrupts` nothing is watched.
 */
export class InterruptWatch {
  readonly #controller = new AbortController();
  /** Aborts at the first interrupt, its reason `interrupted (SIGX)`. */
  readonly signal: AbortSignal = this.#controller.signal;
  readonly #interrupts: Interrupts | undefined;
  readonly #print: Pick<Printer, "err">;
  readonly #simulated: boolean;
  readonly #hooks: InterruptHooks;
  #first: Signal | undefined;
  #unwatch: (() => void) | undefined;

  constructor(
    interrupts: Interrupts | undefined,
    print: Pick<Printer, "err">,
    simulated: boolean,
    hooks: InterruptHooks,
  ) {
    this.#interrupts = interrupts;
    this.#print = print;
    this.#simulated = simulated;
    this.#hooks = hooks;
    this.#unwatch = interrupts?.watch((signal) => this.#onInterrupt(signal ?? "SIGINT"));
  }

  /** The first interrupt's signal, if one came. */
  get first(): Signal | undefined {
    return this.#first;
  }

  /** The exit code: the first interrupt's, if one came, else `code`. */
  exitCode(code: number): number {
    return this.#first ? interruptedExitCode(this.#first) : code;
  }

  /** Stops watching: an interrupt ends the program again. Idempotent. */
  stop(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
  }

  #onInterrupt(signal: Signal): void {
    const { subject, meanwhile, leftBehind } = this.#hooks;
    if (this.#first === undefined) {
      this.#first = signal;
      this.#print.err(
        `cuda-checkpoint: ${subject ? `${subject} ` : ""}interrupted${
          signal === "SIGINT" ? "" : ` by ${signal}`
        }: ${meanwhile}`,
      );
      this.#controller.abort(new Error(`interrupted (${signal})`));
      return;
    }
    const { rest, lines = [] } = leftBehind();
    this.#print.err(`cuda-checkpoint: interrupted again: exiting without waiting${rest}`);
    for (const line of lines) this.#print.err(`cuda-checkpoint: ${line}`);
    if (this.#simulated) {
      this.#print.err(
        "cuda-checkpoint: the simulated machine was not saved: its state file is as before " +
          "this command",
      );
    }
    this.#interrupts!.exit(interruptedExitCode(signal));
  }
}
