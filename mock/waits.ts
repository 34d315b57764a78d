// What an operation of the simulated machine waits on: timers, and copies over shared links.

import type { CopyTiming } from "./timing.ts";

/** What waits run on (the machine): the time in ms, and a timer that returns its cancel. */
type Timers = { now(): number; startTimer(ms: number, fn: () => void): () => void };

type Transfer = { remaining: number; singleRate: number; done: () => void };

/** A link copies share: each at its rate alone, slowed by the others, all capped together. */
export class CopyLink {
  readonly #active = new Set<Transfer>();
  #last = 0;
  #cancelTimer: (() => void) | undefined;

  /** A link with the aggregate rate and slowdown of `rates`; `inTurn`: one copy at a time. */
  constructor(
    private readonly timers: Timers,
    private readonly rates: Omit<CopyTiming, "fixedMs" | "points"> & { inTurn?: true },
  ) {}

  /** Moves `bytes` at up to `singleRate` bytes per ms, then calls `done`; returns a cancel. */
  transfer(bytes: number, singleRate: number, done: () => void): () => void {
    if (bytes <= 1) return this.timers.startTimer(0, done); // nothing to move: no turn to wait
    this.#advance();
    const t: Transfer = { remaining: bytes, singleRate, done };
    this.#active.add(t);
    this.#reschedule();
    return () => {
      this.#advance();
      this.#active.delete(t);
      this.#reschedule();
    };
  }

  #rate(t: Transfer): number {
    const n = this.#active.size, { rates } = this, aggregate = rates.aggregateBytesPerSecond / 1e3;
    if (rates.inTurn) return t.singleRate; // the first alone moves (#moving)
    return Math.min(t.singleRate / (1 + rates.slowdownPerProcess * (n - 1)), aggregate / n);
  }

  /** The transfers that move now: in turn the first alone, else every one. */
  #moving(): Iterable<Transfer> {
    return this.rates.inTurn ? this.#active.values().take(1) : this.#active;
  }

  #advance(): void {
    const now = this.timers.now(), dt = now - this.#last;
    this.#last = now;
    if (dt > 0) { for (const t of this.#moving()) t.remaining -= this.#rate(t) * dt; }
  }

  #reschedule(): void {
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    // Within a byte of the end is the end (floating-point rests: a copy of nothing never comes in).
    const ends = [...this.#moving()].map((t) => t.remaining <= 1 ? 0 : t.remaining / this.#rate(t));
    const soonest = Math.min(...ends);
    if (soonest === Infinity) return;
    this.#cancelTimer = this.timers.startTimer(soonest, () => {
      this.#cancelTimer = undefined;
      this.#advance();
      for (const t of [...this.#moving()].filter((t) => t.remaining <= 1)) {
        this.#active.delete(t);
        t.done();
      }
      this.#reschedule();
    });
  }
}

/** One operation's waits, stopped together: with an error (they reject), or abandoned. */
export class Waits {
  readonly #under = new Map<() => void, (error: Error) => void>();
  /** Why it was stopped: an error, or `null` when abandoned; `undefined` while it runs. */
  #stopped: Error | null | undefined;

  /** The waits of an operation whose timers `timers` starts. */
  constructor(private readonly timers: Pick<Timers, "startTimer">) {}

  /** Resolves after `ms`. */
  sleep(ms: number): Promise<void> {
    return this.#wait((done) => this.timers.startTimer(ms, done));
  }

  /** Moves `bytes` through `link` at up to `rate` bytes per ms. */
  copy(link: CopyLink, bytes: number, rate: number): Promise<void> {
    return this.#wait((done) => link.transfer(bytes, rate, done));
  }

  /** Throws the error it was stopped with, if any. */
  check(): void {
    if (this.#stopped) throw this.#stopped;
  }

  /** Stops every wait under way and later: see {@link Waits}. Only the first stop counts. */
  stop(error?: Error): void {
    if (this.#stopped !== undefined) return;
    this.#stopped = error ?? null;
    const under = [...this.#under];
    this.#under.clear();
    for (const [cancel, reject] of under) {
      cancel();
      if (error) reject(error);
    }
  }

  #wait(begin: (done: () => void) => () => void): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.#stopped) return reject(this.#stopped);
      if (this.#stopped === null) return;
      const cancel = begin(() => {
        this.#under.delete(cancel);
        resolve();
      });
      this.#under.set(cancel, reject);
    });
  }
}
