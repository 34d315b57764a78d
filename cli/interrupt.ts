/**
 * Ctrl-C (SIGINT) during an operation on several processes. The first interrupt stops the group
 * (its `AbortSignal`): no new step starts, and every process the command changed is brought back
 * to where it was (`rollBackOnAbort`), each as soon as its step inside the driver ends. The
 * command then prints its lines as usual, one more saying what was left changed, and exits 130.
 * A second interrupt exits at once, naming the steps still inside the driver, whose processes'
 * states it cannot know. One pid keeps the default: the program ends at the interrupt, as
 * NVIDIA's utility does.
 *
 * @module
 */

import type { ProcessState } from "../core/states.ts";
import type { GroupEvent } from "../core/group.ts";
import type { Interrupts } from "./io.ts";
import type { Printer } from "./report.ts";

/** The exit code of a command that was interrupted: 128 + SIGINT, as shells report it. */
export const INTERRUPTED_EXIT_CODE = 130;

/** Where a process ended up, as the closing line needs it. */
export interface Left {
  /** The pid. */
  readonly pid: number;
  /** Its state before the command, where it was read. */
  readonly was?: ProcessState;
  /** Its state now, where known. */
  readonly now?: ProcessState;
  /** Whether the command never touched it (not started). */
  readonly untouched: boolean;
  /** Whether it is gone (it exited). */
  readonly gone: boolean;
}

/** One operation's watch over interrupts (see the module documentation). */
export class Interruption {
  readonly #controller = new AbortController();
  readonly #print: Printer;
  readonly #interrupts: Interrupts;
  readonly #pids: readonly number[];
  readonly #simulated: boolean;
  readonly #underWay = new Map<number, string>();
  #count = 0;
  #unwatch: (() => void) | undefined;

  /** Starts watching; {@link Interruption.stop} ends it. */
  constructor(interrupts: Interrupts, print: Printer, pids: readonly number[], simulated: boolean) {
    this.#interrupts = interrupts;
    this.#print = print;
    this.#pids = pids;
    this.#simulated = simulated;
    this.#unwatch = interrupts.watch(() => this.#onInterrupt());
  }

  /** Aborts at the first interrupt. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether an interrupt came. */
  get interrupted(): boolean {
    return this.#count > 0;
  }

  /** Follows the group's steps, to name those still inside the driver on a forced exit. */
  event(event: GroupEvent): void {
    if (event.type === "step-start") this.#underWay.set(event.pid, event.step);
    else if (event.type === "step-end") this.#underWay.delete(event.pid);
  }

  /** Stops watching: an interrupt ends the program again. Idempotent. */
  stop(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
  }

  /** The closing line of an interrupted command: what it left changed, if anything. */
  closing(left: readonly Left[]): void {
    const changed = left.filter((l) => !l.untouched && (l.was === undefined || l.now !== l.was));
    if (changed.length === 0) {
      this.#print.err("cuda-checkpoint: interrupted: every process is as it was before");
      return;
    }
    const each = changed.map((l) =>
      `${l.pid} ${l.gone ? "gone" : l.now ?? "in an unknown state"}${
        l.was === undefined ? "" : ` (was ${l.was})`
      }`
    );
    this.#print.err(`cuda-checkpoint: interrupted: left changed: ${each.join(", ")}`);
  }

  #onInterrupt(): void {
    this.#count++;
    if (this.#count === 1) {
      this.#print.err(
        "cuda-checkpoint: interrupted: no new step starts, and each process this command " +
          "changed is brought back once its step inside the driver ends (interrupt again to " +
          "exit without waiting)",
      );
      this.#controller.abort(new Error("interrupted (SIGINT)"));
      return;
    }
    const under = [...this.#underWay].map(([pid, step]) => `${pid} (${step})`);
    this.#print.err(
      "cuda-checkpoint: interrupted again: exiting without waiting for the driver" +
        (under.length > 0 ? `; still under way, their state unknown: ${under.join(", ")}` : ""),
    );
    this.#print.err(
      `cuda-checkpoint: check each process with: cuda-checkpoint --get-state --pid ${
        this.#pids.join(",")
      }${this.#simulated ? " --simulate" : ""}`,
    );
    if (this.#simulated) {
      this.#print.err(
        "cuda-checkpoint: the simulated machine was not saved: its state file is as before " +
          "this command",
      );
    }
    this.#interrupts.exit(INTERRUPTED_EXIT_CODE);
  }
}
