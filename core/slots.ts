/**
 * Work in flight, at most so much at once: the native driver's calls (its worker threads), a
 * snapshot's criu runs. The rest wait their turn, in the order they came.
 *
 * @module
 */

/** Runs at most `size` tasks at once, in the order asked; each waits for a free slot. */
export class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  /** At most `size` at once (at least one). */
  constructor(size: number) {
    this.#free = Math.max(1, Math.floor(size));
  }

  /** Runs `task` once a slot is free, and frees it when the task settles. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}
