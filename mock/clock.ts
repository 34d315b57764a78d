/**
 * Clocks for the simulated driver: a virtual clock that jumps from one pending timer to the next
 * (tests take no real time, and timings are exact), and the real clock (for demos).
 *
 * @module
 */

import { setImmediate } from "node:timers";

/** A clock the simulated driver schedules its work on. Times are in milliseconds. */
export interface SimClock {
  /** `"virtual"` or `"real"`. */
  readonly kind: string;
  /** The current time in milliseconds. */
  now(): number;
  /** Calls `fn` after `ms` milliseconds; returns a handle for {@link SimClock.clearTimer}. */
  setTimer(ms: number, fn: () => void): number;
  /** Cancels a timer that has not fired. */
  clearTimer(handle: number): void;
}

interface VirtualTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * Virtual time. Whenever the program has nothing else to do (the microtask queue is empty and a
 * macrotask turn comes), the clock moves to the earliest pending timer and fires it. Work started
 * together (`Promise.all`) therefore overlaps in virtual time exactly as it would in real time.
 */
export class VirtualClock implements SimClock {
  /** Always `"virtual"`. */
  readonly kind: string = "virtual";
  #now = 0;
  #seq = 0;
  #timers = new Map<number, VirtualTimer>();
  #scheduled = false;

  /** The virtual time in milliseconds since the clock was made. */
  now(): number {
    return this.#now;
  }

  /** Calls `fn` once virtual time reaches now + `ms`. */
  setTimer(ms: number, fn: () => void): number {
    const seq = ++this.#seq;
    this.#timers.set(seq, { at: this.#now + Math.max(0, ms), seq, fn });
    this.#schedule();
    return seq;
  }

  /** Cancels a pending timer. */
  clearTimer(handle: number): void {
    this.#timers.delete(handle);
  }

  /** How many timers are pending. */
  get pending(): number {
    return this.#timers.size;
  }

  #schedule(): void {
    if (this.#scheduled || this.#timers.size === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#fireNext();
      this.#schedule();
    });
  }

  #fireNext(): void {
    let next: VirtualTimer | undefined;
    for (const t of this.#timers.values()) {
      if (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq)) next = t;
    }
    if (!next) return;
    this.#timers.delete(next.seq);
    this.#now = Math.max(this.#now, next.at);
    next.fn();
  }
}

/**
 * Real time, optionally sped up: with `speed` 10, an operation measured at 750 ms takes 75 ms,
 * while {@link RealClock.now} still reports the simulated 750 ms.
 */
export class RealClock implements SimClock {
  /** Always `"real"`. */
  readonly kind: string = "real";
  /** How many times faster than the measured driver the simulation runs. */
  readonly speed: number;
  readonly #start = performance.now();
  #seq = 0;
  #timers = new Map<number, ReturnType<typeof setTimeout>>();

  /**
   * The real clock, sped up `speed` times.
   *
   * @param speed how many times faster than the real driver to run; 1 by default.
   */
  constructor(speed = 1) {
    if (!(typeof speed === "number" && speed > 0 && Number.isFinite(speed))) {
      throw new RangeError(`speed must be a positive finite number, got ${speed}`);
    }
    this.speed = speed;
  }

  /** Simulated milliseconds since the clock was made. */
  now(): number {
    return (performance.now() - this.#start) * this.speed;
  }

  /** Calls `fn` after `ms` simulated milliseconds. */
  setTimer(ms: number, fn: () => void): number {
    const seq = ++this.#seq;
    this.#timers.set(
      seq,
      setTimeout(() => {
        this.#timers.delete(seq);
        fn();
      }, Math.max(0, ms) / this.speed),
    );
    return seq;
  }

  /** Cancels a pending timer. */
  clearTimer(handle: number): void {
    clearTimeout(this.#timers.get(handle));
    this.#timers.delete(handle);
  }
}

/** Resolves after `ms` milliseconds of the clock's time. */
export function sleep(clock: SimClock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimer(ms, resolve));
}
