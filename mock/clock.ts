// Clocks for the simulated machine: a virtual one, and the real one (for demos).

import { clearTimeout, setImmediate, setTimeout } from "node:timers";
import { describeValue, mustBe } from "../core/options.ts";

/** How a timer takes part in moving time; see {@link SimClock.setTimer}. */
export interface TimerOptions {
  /** A passive timer (a kernel nobody waits on) moves no virtual time by itself. Default false. */
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
  /** Holds the clock (the program waits on the simulator) until the returned function is called. */
  hold?(): () => void;
}

type VirtualTimer = { at: number; seq: number; fn: () => void; driving: boolean };

/**
 * Virtual time: while the program waits on the simulator, at each macrotask turn the clock moves
 * to the earliest timer and fires it; an unrelated wait (a file read, a real timer) moves nothing.
 */
export class VirtualClock implements SimClock {
  /** Always `"virtual"`. */
  readonly kind: string = "virtual";
  #now = 0;
  #seq = 0;
  #timers = new Map<number, VirtualTimer>();
  #holds = 0;
  #scheduled = false;

  /** The virtual time in milliseconds since the clock was made. */
  now(): number {
    return this.#now;
  }

  /** Calls `fn` once virtual time reaches now + `ms`. */
  setTimer(ms: number, fn: () => void, options: TimerOptions = {}): number {
    if (typeof ms !== "number" || ms !== ms) mustBe(TypeError, "setTimer: ms", "a number", ms); // NaN
    if (typeof fn !== "function") mustBe(TypeError, "setTimer: fn", "a function", fn);
    const seq = ++this.#seq;
    this.#timers.set(seq, { at: this.#now + Math.max(0, ms), seq, fn, driving: !options.passive });
    this.#schedule();
    return seq;
  }

  /** Cancels a pending timer. */
  clearTimer(handle: number): void {
    this.#timers.delete(handle);
  }

  /** Holds the clock: time moves until the returned function is called. */
  hold(): () => void {
    this.#holds++;
    this.#schedule();
    return once(() => this.#holds--);
  }

  /** How many timers are pending. */
  get pending(): number {
    return this.#timers.size;
  }

  /** Whether anything waits on the clock now (a hold, a timer not passive), so that it moves. */
  get moving(): boolean {
    return this.#holds > 0 || [...this.#timers.values()].some((t) => t.driving);
  }

  #schedule(): void {
    if (this.#scheduled || !this.moving || this.#timers.size === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      // The earliest timer fires, the first set of those due at once (the map keeps that order).
      let next: VirtualTimer | undefined;
      const due = this.moving ? this.#timers.values() : [];
      for (const t of due) if (!next || t.at < next.at) next = t;
      if (next) {
        this.clearTimer(next.seq);
        this.#now = Math.max(this.#now, next.at);
        next.fn();
      }
      this.#schedule();
    });
  }
}

/** Real time, optionally sped up: with `speed` 10, 750 ms take 75, and `now()` says 750. */
export class RealClock implements SimClock {
  /** Always `"real"`. */
  readonly kind: string = "real";
  /** How many times faster than the measured driver the simulation runs. */
  readonly speed: number;
  readonly #start = performance.now();
  #seq = 0;
  #holds = 0;
  #timers = new Map<number, { handle: ReturnType<typeof setTimeout>; driving: boolean }>();

  /** The real clock, sped up `speed` times (1 by default). */
  constructor(speed = 1) {
    const ok = typeof speed === "number" && speed > 0 && Number.isFinite(speed);
    if (!ok) mustBe(RangeError, "speed", "a positive finite number", speed);
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
    clearTimeout(this.#timers.get(handle)?.handle);
    this.#timers.delete(handle);
  }

  /** While held, passive timers keep the program alive too (someone waits on a kernel). */
  hold(): () => void {
    const timers = this.#timers.values.bind(this.#timers);
    if (this.#holds++ === 0) { for (const t of timers()) t.handle.ref(); }
    return once(() => {
      if (--this.#holds === 0) { for (const t of timers()) if (!t.driving) t.handle.unref(); }
    });
  }
}

function once(fn: () => void): () => void {
  let done = false;
  return () => void (done || (done = true, fn()));
}

/** The clock a simulated machine's `clock` (and `speed`) option asks for. */
export function makeClock(clock: unknown = "virtual", speed?: unknown): SimClock {
  const only = `speed ${describeValue(speed)} is used only with clock: "real"`;
  if (speed !== undefined && clock !== "real") throw new TypeError(only);
  if (clock === "virtual") return new VirtualClock();
  if (clock === "real") return new RealClock(speed as number | undefined);
  const c = clock as Partial<SimClock> | null;
  const methods = ["now", "setTimer", "clearTimer"] as const;
  if (typeof c === "object" && c !== null && methods.every((m) => typeof c[m] === "function")) {
    return c as SimClock;
  }
  const a = `"virtual", "real" or a SimClock (with now, setTimer and clearTimer)`;
  return mustBe(TypeError, "clock", a, clock);
}
