// The simulated driver's timing model, one per chip, from driver 580's figures (docs/DRIVER.md),
// and the simulated CRIU's: a fixed cost, then a copy at the rate the measured time implies.

import { checkAmount, checkKeys } from "../core/options.ts";

/** GPU memory a CUDA context takes, in MiB (H200: 536 MiB held with 16 allocated, 2026-11-21). */
export const CONTEXT_MIB = 520;

/** One measured point: GPU memory in MiB and the time in ms for the whole operation. */
export type TimingPoint = readonly [memoryMiB: number, ms: number];

/** Timing figures for one kind of copy (checkpoint or restore). */
export interface CopyTiming {
  /** The fixed cost of the call in ms (the table's time at 0 MiB), before the copy but serialMs. */
  readonly fixedMs: number;
  /** Its part the host runs one call at a time: after a checkpoint's copy, before a restore's. */
  readonly serialMs?: number;
  /** Added to serialMs for each other call of its kind under way on one of its GPUs at its turn. */
  readonly serialPerOtherMs?: number;
  /** Whole-operation times for one process alone, by memory size, ascending. */
  readonly points: readonly TimingPoint[];
  /** The most all copies at once move together, in bytes per second (`Infinity`: no cap). */
  readonly aggregateBytesPerSecond: number;
  /** With N copies under way, each runs at its single-process rate / `1 + this * (N - 1)`. */
  readonly slowdownPerProcess: number;
  /** With G GiB already checkpointed into host memory, a copy runs at its rate / `1 + this * G`. */
  readonly heldSlowdownPerGiB?: number;
}

/** The timing model of the simulated driver, in ms where not said; every figure can be set. */
export interface TimingModel {
  /** Lock+checkpoint of one process (the lock itself is `lockMs`). */
  readonly checkpoint: CopyTiming;
  /** Restore of one process (the unlock after it is `unlockMs`). */
  readonly restore: CopyTiming;
  /** Extra cost of a restore that moves the process to another GPU. */
  readonly migrationMs: number;
  /** Lock of an idle process. */
  readonly lockMs: number;
  /** Unlock. */
  readonly unlockMs: number;
  /** getState and getRestoreThreadId. */
  readonly queryMs: number;
  /** A restore rejected for its GPU mapping. */
  readonly rejectMs: number;
  /** A restore refused for want of free GPU memory. */
  readonly oomMs: number;
  /** A restore refused after an earlier one ran out of GPU memory; 6 when left out. */
  readonly refusedMs?: number;
  /** How long after the target exits a checkpoint or restore under way returns. */
  readonly exitNoticeMs: number;
}

/**
 * One H200, driver 580.159.04: midpoints of the measured ranges. Single process: 16 MiB
 * checkpoint 283-309 ms and restore 173-222 ms (this project's runs); 1 GiB to 32 GiB from
 * the probes (docs/DRIVER.md#one-process-on-one-h200). Many at once: fitted to 4 x 4 GiB
 * (2.36 s, 1.17 s) and to 256 MiB processes: 64's checkpoints on one GPU and spread over two
 * (7.95 s, 6.51-6.73 s), 16's and 64's restores on one (2.40 s, 15.9-16.0 s).
 */
export const H200_TIMING: TimingModel = {
  checkpoint: {
    fixedMs: 289,
    serialMs: 70,
    serialPerOtherMs: 0.68,
    points: [[16, 296], [1024, 752], [4096, 1880], [8192, 4700], [16384, 16500], [32768, 22100]],
    aggregateBytesPerSecond: Infinity,
    slowdownPerProcess: 0.05,
    // Fitted to 8 x 4 GiB one after another (20.3 s: each slower as host memory fills); the
    // same 4 x 4 GiB (8.2-8.4 s) checks it.
    heldSlowdownPerGiB: 0.03,
  },
  restore: {
    fixedMs: 195,
    serialMs: 110,
    serialPerOtherMs: 4.4,
    points: [[16, 198], [1024, 350], [4096, 830], [8192, 1490], [16384, 3500], [32768, 7200]],
    aggregateBytesPerSecond: 20e9,
    slowdownPerProcess: 0,
  },
  // A 1 GiB process rotated onto the other H200 restored in 357, 394 and 522 ms (424 on average)
  // against 350 in place; one migrating itself took 600-630 ms (DRIVER.md): about the average.
  migrationMs: 75,
  lockMs: 0.2,
  unlockMs: 1.5,
  queryMs: 0.05,
  // Every rejected mapping took 23-34 ms in this project's runs (2 ms in the probes for an unknown
  // UUID), OUT_OF_MEMORY 8-24 ms, every restore after one 5-8 ms (docs/DRIVER.md#state-machine).
  rejectMs: 28,
  oomMs: 16,
  refusedMs: 6,
  // SIGKILL 150 ms into the checkpoint of 4 GiB: OPERATING_SYSTEM 217-241 ms after the call began.
  exitNoticeMs: 71,
};

/**
 * One H100 80GB HBM3, driver 580.159.04: 16 MiB and 4 GiB medians of 9 cycles, 16 GiB the
 * midpoints of the host's rates (9.4-9.9 s; 4.0-5.2 GB/s). 1 GiB and 48 GiB, and two processes at
 * once, are left out of the table so that they check it; the rest is the H200's.
 */
export const H100_TIMING: TimingModel = {
  ...H200_TIMING,
  checkpoint: {
    ...H200_TIMING.checkpoint,
    fixedMs: 316,
    points: [[16, 323], [4096, 2150], [16384, 9650]],
  },
  restore: {
    ...H200_TIMING.restore,
    fixedMs: 212,
    points: [[16, 214], [4096, 885], [16384, 3800]],
  },
};

const FIELDS = ["migrationMs", "lockMs", "unlockMs", "queryMs", "rejectMs", "oomMs"] as const;

/** `timing` checked as a whole {@link TimingModel} of sensible numbers; throws naming the field. */
export function checkTiming(timing: unknown): TimingModel {
  const keys = ["checkpoint", "restore", ...FIELDS, "exitNoticeMs", "refusedMs"] as const;
  const t = checkKeys(timing as TimingModel, "timing", keys);
  for (const k of keys.filter((k) => t[k] !== undefined)) { // those given first, by name
    if (k === "checkpoint" || k === "restore") checkCopyTiming(t[k], `timing.${k}`);
    else checkAmount(t[k], `timing.${k}`);
  }
  const lacks = keys.filter((k) => k !== "refusedMs" && t[k] === undefined).join(", ");
  const whole = "a whole model (to change some figures: { ...H200_TIMING, lockMs: 5 })";
  if (lacks) throw new TypeError(`timing must be ${whole}; it lacks ${lacks}`);
  return t;
}

function checkCopyTiming(c: CopyTiming, what: string): void {
  const keys = ["aggregateBytesPerSecond", "slowdownPerProcess", "heldSlowdownPerGiB"] as const;
  checkKeys(c, what, ["fixedMs", "serialMs", "serialPerOtherMs", "points", ...keys]);
  checkAmount(c.fixedMs, `${what}.fixedMs`);
  for (const f of ["serialMs", "serialPerOtherMs"] as const) checkAmount(c[f] ?? 0, `${what}.${f}`);
  if (c.serialMs! > c.fixedMs) throw new RangeError(`${what}.serialMs is more than its fixedMs`);
  checkAmount(c.slowdownPerProcess, `${what}.slowdownPerProcess`);
  checkAmount(c.heldSlowdownPerGiB ?? 0, `${what}.heldSlowdownPerGiB`);
  const cap = c.aggregateBytesPerSecond;
  if (cap !== Infinity) checkAmount(cap, `${what}.aggregateBytesPerSecond`, true);
  const points = `${what}.points must be a non-empty array of [memoryMiB, ms]`;
  if (!Array.isArray(c.points) || c.points.length === 0) throw new TypeError(points);
  let [lastMiB, lastMs] = [0, c.fixedMs];
  c.points.forEach(([mib, ms], i) => {
    checkAmount(mib, `${what}.points[${i}][0] (MiB)`, true);
    checkAmount(ms, `${what}.points[${i}][1] (ms)`);
    const follows = `[${mib}, ${ms}] follows [${lastMiB}, ${lastMs}]`;
    const ascend = `${what}.points must ascend in memory and time from [0, fixedMs]; ${follows}`;
    if (mib <= lastMiB || ms < lastMs) throw new RangeError(ascend);
    [lastMiB, lastMs] = [mib, ms];
  });
}

/** The timing model for a chip name: {@link H100_TIMING} for an H100, else {@link H200_TIMING}. */
export const timingForChip = (name: string): TimingModel =>
  /\bH100\b/.test(name) ? H100_TIMING : H200_TIMING;

/** The time one process alone takes for the whole operation, interpolated from the table. */
export function singleProcessMs(timing: CopyTiming, memoryMiB: number): number {
  let [x0, y0] = [0, timing.fixedMs];
  for (const [x1, y1] of timing.points) {
    if (memoryMiB <= x1) return y0 + (y1 - y0) * (memoryMiB - x0) / (x1 - x0);
    [x0, y0] = [x1, y1];
  }
  const [xa, ya] = timing.points.at(-2) ?? [0, timing.fixedMs];
  return y0 + (y0 - ya) / (x0 - xa) * (memoryMiB - x0);
}

/** The copy rate one process of `memoryMiB` gets alone, in bytes per ms. */
export const singleRate = (timing: CopyTiming, memoryMiB: number): number =>
  mibToBytes(memoryMiB) / Math.max(1e-3, singleProcessMs(timing, memoryMiB) - timing.fixedMs);

/** Bytes in `memoryMiB` MiB. */
export const mibToBytes = (memoryMiB: number): number => memoryMiB * 1024 * 1024;

/**
 * The simulated CRIU's figures, fitted to criu 4.1.1 on an H100 (driver 580.159.04, 2026-11-24;
 * tests/gpu/reports/snapshot-*-h100.txt) dumping and restoring checkpointed CUDA processes without
 * its CUDA plugin: images of 1.66, 2.73 and 4.88 GB for 1, 2 and 4 GiB of GPU memory; criu's dump
 * alone 0.60-1.02 s, 1.07-1.48 s and 2.13-2.39 s (here 0.99, 1.50, 2.52 s: held to the disk's
 * durable rate, as a snapshot's dump is); its restore at 2 GiB 1.39-1.77 s (here 1.50 s). Rates
 * are in bytes per second; the fixed costs (criu's start, its freeze) and a plain process's image
 * are assumptions.
 */
export const CRIU_TIMING = {
  dumpFixedMs: 200,
  dumpBytesPerSecond: 2.3e9,
  restoreFixedMs: 200,
  restoreBytesPerSecond: 2.1e9,
  /**
   * What every dump under way writes together at most, made durable (a snapshot fsyncs its images:
   * eight of 2 GiB, 21.8 GB, in 9.3 s on an H200 and 10.5-12.3 s on a slower disk; criu alone, into
   * an H100's page cache, 5.9 s), and what every restore reads (those eight: 2.4 s on the H200).
   */
  diskBytesPerSecond: { dump: 2.1e9, restore: 9.8e9 },
  /** Image bytes of a CUDA process besides its GPU memory's. */
  cudaImageBaseBytes: 0.59e9,
  /** Image bytes per MiB of a checkpointed CUDA process's GPU memory. */
  cudaImageBytesPerMiB: 1.07e9 / 1024,
  /** Image bytes of a process without CUDA. */
  plainImageBytes: 4e6,
} as const;

/** The simulated size in bytes of one process's images (its real image files are small). */
export function criuImageBytes(memoryMiB: number, cuda: boolean): number {
  const { cudaImageBaseBytes: base, cudaImageBytesPerMiB: perMiB, plainImageBytes } = CRIU_TIMING;
  return cuda ? base + Math.round(perMiB * memoryMiB) : plainImageBytes; // whole bytes
}
