/**
 * The simulated driver's timing model, taken from the figures measured on an H200 with driver 580
 * (shared/DRIVER_FACTS.md): a fixed cost per call, then a copy whose speed for one process falls
 * out of the measured table, while copies of several processes at once share the host link up to
 * the best aggregate rate measured.
 *
 * @module
 */

import type { SimClock } from "./clock.ts";

const MIB = 1024 * 1024;

/** One measured point: GPU memory in MiB and the time in ms for the whole operation. */
export type TimingPoint = readonly [memoryMiB: number, ms: number];

/** Timing figures for one kind of copy (checkpoint or restore). */
export interface CopyTiming {
  /** The fixed cost of the call in ms, spent before any copy (measured with 16 MiB). */
  readonly fixedMs: number;
  /** Measured whole-operation times for one process, by memory size, ascending. */
  readonly points: readonly TimingPoint[];
  /** The best aggregate rate seen with many processes at once, in bytes per second. */
  readonly aggregateBytesPerSecond: number;
}

/** The timing model of the simulated driver. Every figure can be overridden. */
export interface TimingModel {
  /** Lock+checkpoint of one process. */
  readonly checkpoint: CopyTiming;
  /** Restore+unlock of one process. */
  readonly restore: CopyTiming;
  /** Extra cost of a restore that moves the process to another GPU, in ms. */
  readonly migrationMs: number;
  /** Lock of an idle process, in ms. */
  readonly lockMs: number;
  /** Unlock, in ms. */
  readonly unlockMs: number;
  /** getState and getRestoreThreadId, in ms. */
  readonly queryMs: number;
  /** A restore rejected for its GPU mapping, in ms. */
  readonly rejectMs: number;
  /** A restore refused for want of free GPU memory, in ms. */
  readonly oomMs: number;
}

/** The figures measured on one H200, driver 580.159.04 (midpoints of the measured ranges). */
export const H200_TIMING: TimingModel = {
  checkpoint: {
    fixedMs: 340,
    points: [[16, 350], [1024, 752], [4096, 1880], [8192, 4700], [16384, 16500], [32768, 22100]],
    aggregateBytesPerSecond: 11e9,
  },
  restore: {
    fixedMs: 280,
    points: [[16, 290], [1024, 350], [4096, 830], [8192, 1490], [16384, 3500], [32768, 7200]],
    aggregateBytesPerSecond: 16e9,
  },
  // A separate 1 GiB process rotated onto the other H200 restored in 357 ms against about 335 ms in
  // place (tests/gpu/reports); a process migrating itself took 600-630 ms (DRIVER_FACTS.md).
  migrationMs: 25,
  lockMs: 0.2,
  unlockMs: 1.5,
  queryMs: 0.05,
  // DRIVER_FACTS measured 2 ms for an unknown UUID; this project's runs saw 23-34 ms for every
  // rejected mapping, and 8-24 ms for OUT_OF_MEMORY (docs/DRIVER_NOTES.md).
  rejectMs: 25,
  oomMs: 15,
};

/** The time one process alone takes for the whole operation, interpolated from the table. */
export function singleProcessMs(timing: CopyTiming, memoryMiB: number): number {
  const pts = timing.points;
  if (memoryMiB <= 0) return timing.fixedMs;
  let [x0, y0] = [0, timing.fixedMs];
  for (const [x1, y1] of pts) {
    if (memoryMiB <= x1) return y0 + (y1 - y0) * (memoryMiB - x0) / (x1 - x0);
    [x0, y0] = [x1, y1];
  }
  const [xa, ya] = pts.length > 1 ? pts[pts.length - 2] : [0, timing.fixedMs];
  return y0 + (y0 - ya) / (x0 - xa) * (memoryMiB - x0);
}

interface Transfer {
  remaining: number;
  singleRate: number;
  done: (completed: boolean) => void;
}

/**
 * A shared copy link. Each transfer runs at the rate one process alone would get, unless the
 * transfers under way together exceed the aggregate rate, which they then share equally. Rates are
 * recomputed whenever a transfer starts or ends.
 */
export class CopyLink {
  readonly #clock: SimClock;
  readonly #aggregate: number;
  readonly #active = new Set<Transfer>();
  #last = 0;
  #timer: number | undefined;

  /** @param aggregateBytesPerSecond the most all transfers together can move. */
  constructor(clock: SimClock, aggregateBytesPerSecond: number) {
    this.#clock = clock;
    this.#aggregate = aggregateBytesPerSecond / 1000;
  }

  /** How many transfers are under way. */
  get active(): number {
    return this.#active.size;
  }

  /**
   * Moves `bytes` at up to `singleRate` bytes per ms. Resolves `true` when done, `false` when
   * cancelled through `signal`.
   */
  transfer(bytes: number, singleRate: number, signal?: { onAbort?: () => void }): Promise<boolean> {
    if (bytes <= 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      this.#advance();
      const t: Transfer = { remaining: bytes, singleRate, done: resolve };
      this.#active.add(t);
      if (signal) {
        signal.onAbort = () => {
          if (!this.#active.has(t)) return;
          this.#advance();
          this.#active.delete(t);
          this.#reschedule();
          resolve(false);
        };
      }
      this.#reschedule();
    });
  }

  #rate(t: Transfer): number {
    return Math.min(t.singleRate, this.#aggregate / this.#active.size);
  }

  #advance(): void {
    const now = this.#clock.now();
    const dt = now - this.#last;
    this.#last = now;
    if (dt <= 0) return;
    for (const t of this.#active) t.remaining -= this.#rate(t) * dt;
  }

  #reschedule(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    let soonest = Infinity;
    for (const t of this.#active) {
      soonest = Math.min(soonest, Math.max(0, t.remaining) / this.#rate(t));
    }
    if (soonest === Infinity) return;
    this.#timer = this.#clock.setTimer(soonest, () => {
      this.#timer = undefined;
      this.#advance();
      for (const t of [...this.#active]) {
        // Within a byte of the end counts as done (floating-point rests).
        if (t.remaining <= 1) {
          this.#active.delete(t);
          t.done(true);
        }
      }
      this.#reschedule();
    });
  }
}

/** The copy rate one process of `memoryMiB` gets alone, in bytes per ms. */
export function singleRate(timing: CopyTiming, memoryMiB: number): number {
  const copyMs = Math.max(1, singleProcessMs(timing, memoryMiB) - timing.fixedMs);
  return (memoryMiB * MIB) / copyMs;
}

/** Bytes in `memoryMiB` MiB. */
export function mibToBytes(memoryMiB: number): number {
  return memoryMiB * MIB;
}
