/**
 * Input checks of the simulated driver: every option and argument a test gives it is checked at
 * once, with an error that names the bad value and what was expected.
 *
 * @module
 */

import { checkKeys as checkOptionKeys } from "../core/options.ts";
import { describeValue } from "../core/uuid.ts";
import type { CopyTiming, TimingModel } from "./timing.ts";

/** One of `choices`, else a RangeError naming the value and the choices: the package's own. */
export { checkChoice } from "../core/options.ts";

/** `value`, or `fallback` when it is left out (`undefined`; `null` is a value, and checked). */
export function orDefault<T>(value: T | undefined, fallback: T): T {
  return value === undefined ? fallback : value;
}

/**
 * Throws unless `value` is undefined or a plain object with no keys but `allowed`: the package's
 * one options check (core/options.ts).
 */
export function checkKeys(value: unknown, what: string, allowed: readonly string[]): void {
  checkOptionKeys(value as object | undefined, what, allowed as never[]);
}

/** Throws unless `value` is an integer from `min` to `max`; returns it. */
export function checkInteger(
  value: unknown,
  what: string,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw new RangeError(`${what} must be an integer ${range}, got ${describeValue(value)}`);
  }
  return value;
}

/** Throws unless `value` is a finite number >= 0 (> 0 with `positive`); returns it. */
export function checkAmount(value: unknown, what: string, positive = false): number {
  if (
    typeof value !== "number" || !Number.isFinite(value) || value < 0 || (positive && value === 0)
  ) {
    throw new RangeError(
      `${what} must be a finite number ${positive ? "> 0" : ">= 0"}, got ${describeValue(value)}`,
    );
  }
  return value;
}

/** Throws unless `value` is a boolean; returns it. */
export function checkBoolean(value: unknown, what: string): boolean {
  if (typeof value !== "boolean") {
    throw new TypeError(`${what} must be true or false, got ${describeValue(value)}`);
  }
  return value;
}

/** Throws unless `value` is a non-empty string; returns it. */
export function checkName(value: unknown, what: string): string {
  if (typeof value !== "string" || value.trim() === "") {
    throw new TypeError(`${what} must be a non-empty string, got ${describeValue(value)}`);
  }
  return value;
}

const TIMING_FIELDS = [
  "migrationMs",
  "lockMs",
  "unlockMs",
  "queryMs",
  "rejectMs",
  "oomMs",
  "exitNoticeMs",
] as const;

/** Throws unless `timing` is a whole {@link TimingModel} of sensible numbers; returns it. */
export function checkTiming(timing: unknown): TimingModel {
  checkKeys(timing, "timing", ["checkpoint", "restore", ...TIMING_FIELDS, "refusedMs"]);
  const t = timing as TimingModel;
  for (const field of TIMING_FIELDS) checkAmount(t[field], `timing.${field}`);
  if (t.refusedMs !== undefined) checkAmount(t.refusedMs, "timing.refusedMs");
  for (const kind of ["checkpoint", "restore"] as const) checkCopyTiming(t[kind], `timing.${kind}`);
  return t;
}

function checkCopyTiming(c: CopyTiming, what: string): void {
  checkKeys(c, what, ["fixedMs", "points", "aggregateBytesPerSecond", "slowdownPerProcess"]);
  if (c === undefined) throw new TypeError(`${what} is missing`);
  checkAmount(c.fixedMs, `${what}.fixedMs`);
  checkAmount(c.slowdownPerProcess, `${what}.slowdownPerProcess`);
  const cap = c.aggregateBytesPerSecond;
  if (cap !== Infinity) checkAmount(cap, `${what}.aggregateBytesPerSecond`, true);
  if (!Array.isArray(c.points) || c.points.length === 0) {
    throw new TypeError(`${what}.points must be a non-empty array of [memoryMiB, ms]`);
  }
  let [lastMiB, lastMs] = [0, c.fixedMs];
  c.points.forEach(([mib, ms], i) => {
    checkAmount(mib, `${what}.points[${i}][0] (MiB)`, true);
    checkAmount(ms, `${what}.points[${i}][1] (ms)`);
    if (mib <= lastMiB || ms < lastMs) {
      throw new RangeError(
        `${what}.points must ascend in memory and time from [0, fixedMs]; [${mib}, ${ms}] follows [${lastMiB}, ${lastMs}]`,
      );
    }
    [lastMiB, lastMs] = [mib, ms];
  });
}
