/**
 * Clocks for the simulated driver: a virtual clock that jumps from one pending timer to the next
 * while the program waits on the simulator (tests take no real time, and timings are exact), and
 * the real clock (for demos).
 *
 * @module
 */

import { clearTimeout, setImmediate, setTimeout } from "node:timers";
import { describeValue } from "../core/uuid.ts";

/** How a timer takes part in moving time; see {@link SimClock.setTimer}. */
export interface TimerOptions {
  /**
   * A passive timer (a kernel nobody waits on) fires in its turn, but does not by itself make
   * virtual time move, and does not keep the program alive on the real clock. Default `false`:
   * a driving timer, which someone waits on (a driver call, `sleep`).
   */
  passive?: boolean;
}

/** A clock the simulated driver schedules its work on. Times are in milliseconds. */
export interface SimClock {
  /** `"virtual"` or `"real"`. */
  readonly kind: string;
  /** The current time in milliseconds. */
  now(): number;
  /** Calls `fn` after `ms` milliseconds; returns a handle for {@link SimClock.clearTimer}. */
  setTimer(ms: number, fn: () => void, options?: TimerOptions): number;
  /** Cancels a timer that has not fired. */
  clearTimer(handle: number): void;
  /**
   * Says that the program waits on the simulator until the returned function is called (a
   * driver call under way, an awaited kernel). A virtual clock moves only while something holds
   * it or a driving timer is pending. Clocks without it move as they please.
   */
  hold?(): () => void;
}

/** Holds `clock` if it can be held; returns the function that lets go (idempotent). */
export function holdClock(clock: SimClock): () => void {
  return clock.hold?.() ?? (() => {});
}

interface VirtualTimer {
  at: number;
  seq: number;
  fn: () => void;
  driving: boolean;
}

/**
 * Virtual time. It moves only while the program waits on the simulator: while a driving timer is
 * pending (a driver call's work, `sleep`) or something holds the clock (a call queued behind
 * another, an awaited kernel). Then, whenever the program has nothing else to do (the microtask
 * queue is empty and a macrotask turn comes), the clock moves to the earliest pending timer of
 * any kind and fires it. Work started together (`Promise.all`) therefore overlaps in virtual time
 * exactly as it would in real time, and an unrelated wait (a file read, a real `setTimeout`) moves
 * nothing.
 */
export class VirtualClock implements SimClock {
  /** Always `"virtual"`. */
  readonly kind: string = "virtual";
  #now = 0;
  #seq = 0;
  #timers = new Map<number, VirtualTimer>();
  #driving = 0;
  #holds = 0;
  #scheduled = false;

  /** The virtual time in milliseconds since the clock was made. */
  now(): number {
    return this.#now;
  }

  /** Calls `fn` once virtual time reaches now + `ms`. */
  setTimer(ms: number, fn: () => void, options: TimerOptions = {}): number {
    const seq = ++this.#seq;
    const driving = !options.passive;
    this.#timers.set(seq, { at: this.#now + Math.max(0, ms), seq, fn, driving });
    if (driving) this.#driving++;
    this.#schedule();
    return seq;
  }

  /** Cancels a pending timer. */
  clearTimer(handle: number): void {
    const t = this.#timers.get(handle);
    if (!t) return;
    this.#timers.delete(handle);
    if (t.driving) this.#driving--;
  }

  /** Holds the clock: time moves (through every pending timer) until the returned function is called. */
  hold(): () => void {
    this.#holds++;
    this.#schedule();
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.#holds--;
    };
  }

  /** How many timers are pending. */
  get pending(): number {
    return this.#timers.size;
  }

  /** Whether anything waits on the clock now, so that it moves. */
  get moving(): boolean {
    return this.#driving + this.#holds > 0;
  }

  #schedule(): void {
    if (this.#scheduled || !this.moving || this.#timers.size === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      if (this.moving) this.#fireNext();
      this.#schedule();
    });
  }

  #fireNext(): void {
    let next: VirtualTimer | undefined;
    for (const t of this.#timers.values()) {
      if (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq)) next = t;
    }
    if (!next) return;
    this.clearTimer(next.seq);
    this.#now = Math.max(this.#now, next.at);
    next.fn();
  }
}

interface RealTimer {
  handle: ReturnType<typeof setTimeout>;
  driving: boolean;
}

/**
 * Real time, optionally sped up: with `speed` 10, an operation measured at 750 ms takes 75 ms,
 * while {@link RealClock.now} still reports the simulated 750 ms. Passive timers do not keep the
 * program alive unless something holds the clock.
 */
export class RealClock implements SimClock {
  /** Always `"real"`. */
  readonly kind: string = "real";
  /** How many times faster than the measured driver the simulation runs. */
  readonly speed: number;
  readonly #start = performance.now();
  #seq = 0;
  #holds = 0;
  #timers = new Map<number, RealTimer>();

  /**
   * The real clock, sped up `speed` times.
   *
   * @param speed how many times faster than the real driver to run; 1 by default.
   */
  constructor(speed = 1) {
    if (!(typeof speed === "number" && speed > 0 && Number.isFinite(speed))) {
      throw new RangeError(`speed must be a positive finite number, got ${describeValue(speed)}`);
    }
    this.speed = speed;
  }

  /** Simulated milliseconds since the clock was made. */
  now(): number {
    return (performance.now() - this.#start) * this.speed;
  }

  /** Calls `fn` after `ms` simulated milliseconds. */
  setTimer(ms: number, fn: () => void, options: TimerOptions = {}): number {
    const seq = ++this.#seq;
    const handle = setTimeout(() => {
      this.#timers.delete(seq);
      fn();
    }, Math.max(0, ms) / this.speed);
    const driving = !options.passive;
    if (!driving && this.#holds === 0) handle.unref();
    this.#timers.set(seq, { handle, driving });
    return seq;
  }

  /** Cancels a pending timer. */
  clearTimer(handle: number): void {
    const t = this.#timers.get(handle);
    if (t) clearTimeout(t.handle);
    this.#timers.delete(handle);
  }

  /** While held, passive timers keep the program alive too (someone waits on a kernel). */
  hold(): () => void {
    if (this.#holds++ === 0) { for (const t of this.#timers.values()) t.handle.ref(); }
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (--this.#holds > 0) return;
      for (const t of this.#timers.values()) if (!t.driving) t.handle.unref();
    };
  }
}

/** Resolves after `ms` milliseconds of the clock's time (a driving timer). */
export function sleep(clock: SimClock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimer(ms, resolve));
}
