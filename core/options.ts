/**
 * Input checks, one set for every entry point of this package (`CudaProcess` and its methods, the
 * group operations, the listing, the drivers, the simulator). Each error names the bad value and
 * what was expected; an options object with a key that is not an option is refused, naming the
 * key, so that `lock({ timeout: 5 })` does not pass for `lock()`. GPU UUIDs are parsed here from
 * the text forms users write, and formatted as nvidia-smi prints them.
 *
 * Internal: not exported from the main module.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";

/** The largest pid a C `int` holds (Linux hands out at most 2^22). */
export const MAX_PID = 2 ** 31 - 1;
/** The largest lock timeout: `timeoutMs` is a C `unsigned int`. */
export const MAX_TIMEOUT_MS = 2 ** 32 - 1;
/**
 * The library's lock timeout when none is given: 10 s, as CRIU's CUDA plugin uses. The command
 * line's is 0 (wait as long as it takes), as NVIDIA's utility's: docs/API.md says why.
 */
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/**
 * Checks an options argument of `where` (`"lock"`, `"runGroup"`, ...): `undefined` (no options)
 * or a plain object whose keys are all in `keys`. Returns it (`{}` for `undefined`).
 *
 * @example
 * ```ts
 * import { checkOptions } from "./options.ts";
 *
 * checkOptions({ timeout: 5 } as { timeoutMs?: number }, "lock", ["timeoutMs"]);
 * // TypeError: lock has no option "timeout" (did you mean "timeoutMs"?); it takes timeoutMs
 * ```
 */
export function checkOptions<T extends object>(
  options: T | undefined,
  where: string,
  keys: readonly (keyof T & string)[],
): T {
  return checkKeys(options, where, keys, `${where}'s options`);
}

/**
 * Checks an object of named values (`what`: "SimulatedCriu options", "gpus[0]"): `undefined`
 * or a plain object whose keys are all in `keys`; returns it (`{}` for `undefined`). The one
 * check behind every options argument of this package and its simulator.
 */
export function checkKeys<T extends object>(
  value: T | undefined,
  what: string,
  keys: readonly (keyof T & string)[],
  whatAsObject: string = what,
): T {
  if (value === undefined) return {} as T;
  if (typeof value !== "object" || value === null || Array.isArray(value) || !isPlain(value)) {
    throw new TypeError(
      `${whatAsObject} must be an object${keys.length > 0 ? ` with ${keys.join(", ")}` : ""}, got ${
        describeValue(value)
      }`,
    );
  }
  for (const key of Object.keys(value)) {
    if (!(keys as readonly string[]).includes(key)) {
      const near = nearest(key, keys);
      throw new TypeError(
        `${what} has no option ${JSON.stringify(key)}${
          near ? ` (did you mean ${JSON.stringify(near)}?)` : ""
        }; it takes ${keys.length > 0 ? keys.join(", ") : "none"}`,
      );
    }
  }
  return value;
}

/** Whether a value is a plain object (made by `{}` or `Object.create(null)`), not a class's. */
function isPlain(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** The key of `keys` nearest to `key` (case aside, or at most two edits away), if any. */
export function nearest(key: string, keys: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const k of keys) {
    const a = key.toLowerCase(), b = k.toLowerCase();
    const d = a === b ? 0 : b.startsWith(a) || a.startsWith(b) ? 1 : editDistance(a, b);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length];
}

/**
 * Checks a process id (a thread id of the process is accepted too): an integer from 1 to
 * 2^31-1.
 */
export function checkPid(pid: unknown, what = "pid"): number {
  return checkBetween(pid, what, 1, MAX_PID, `process or thread id from 1 to ${MAX_PID}`);
}

/** An integer from `min` to `max`: a TypeError for what is no integer, else a RangeError. */
function checkBetween(value: unknown, what: string, min: number, max: number, expected: string) {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    const Err = typeof value === "number" && Number.isInteger(value) ? RangeError : TypeError;
    throw new Err(`${what} must be an integer ${expected}, got ${describeValue(value)}`);
  }
  return value;
}

/** Checks an integer from `min` (to `max`); the error names the option and the value. */
export function checkInteger(
  value: unknown,
  what: string,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `from ${min}` : `from ${min} to ${max}`;
    throw new RangeError(`${what} must be an integer ${range}, got ${describeValue(value)}`);
  }
  return value;
}

/** Checks a lock timeout in milliseconds: an integer from 0 (wait forever) to 2^32-1. */
export function checkTimeoutMs(timeoutMs: unknown, what = "timeoutMs"): number {
  const expected = `number of milliseconds from 0 (no timeout) to ${MAX_TIMEOUT_MS}`;
  return checkBetween(timeoutMs, what, 0, MAX_TIMEOUT_MS, expected);
}

/** A lock timeout option, checked as {@link checkTimeoutMs}; the default where left out. */
export function checkLockTimeout(value: unknown, what: string): number {
  return value === undefined ? DEFAULT_LOCK_TIMEOUT_MS : checkTimeoutMs(value, what);
}

/** Checks a finite number from 0 (above 0 with `positive`); returns it. */
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

/** Checks a non-empty string; returns it. */
export function checkName(value: unknown, what: string): string {
  if (typeof value !== "string" || value.trim() === "") {
    throw new TypeError(`${what} must be a non-empty string, got ${describeValue(value)}`);
  }
  return value;
}

/** A boolean option: `fallback` when left out; anything else is a TypeError naming it. */
export function checkFlag(value: unknown, what: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") {
    throw new TypeError(`${what} must be true or false, got ${describeValue(value)}`);
  }
  return value;
}

/** An `AbortSignal` option, where given. */
export function checkSignal(value: unknown, what = "signal"): AbortSignal | undefined {
  if (value !== undefined && !(value instanceof AbortSignal)) {
    throw new TypeError(`${what} must be an AbortSignal, got ${describeValue(value)}`);
  }
  return value;
}

/** A function option, where given. */
export function checkFunction<F>(value: F | undefined, what: string): F | undefined {
  if (value !== undefined && typeof value !== "function") {
    throw new TypeError(`${what} must be a function, got ${describeValue(value)}`);
  }
  return value;
}

/** One of `choices`, where given. */
export function checkChoice<T extends string>(
  value: unknown,
  what: string,
  choices: readonly T[],
): T {
  if (!(choices as readonly unknown[]).includes(value)) {
    throw new RangeError(
      `${what} must be one of ${choices.map((c) => JSON.stringify(c)).join(", ")}, got ${
        describeValue(value)
      }`,
    );
  }
  return value as T;
}

/**
 * A GPU mapping for restore: from the UUID of each GPU the process was checkpointed on to the UUID
 * of the GPU to restore it onto, as a plain object or a `Map`.
 */
export type GpuMapping = Readonly<Record<string, string>> | ReadonlyMap<string, string>;

/**
 * Checks a GPU mapping and turns it into GPU pairs. Keys and values must be GPU UUIDs
 * (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` or 32 hex digits); no GPU may appear twice as a key.
 */
export function checkGpuMapping(mapping: unknown): GpuPair[] {
  let entries: [unknown, unknown][];
  if (mapping instanceof Map) {
    entries = [...mapping.entries()];
  } else if (
    typeof mapping === "object" && mapping !== null && !Array.isArray(mapping) && isPlain(mapping)
  ) {
    entries = Object.entries(mapping);
  } else {
    throw new TypeError(
      `gpuMapping must be an object or Map from checkpointed GPU UUID to restore GPU UUID, got ${
        describeValue(mapping)
      }`,
    );
  }
  const seen = new Map<string, unknown>();
  return entries.map(([from, to]) => {
    const oldUuid = parseGpuUuid(from, "gpuMapping key");
    const newUuid = parseGpuUuid(to, `gpuMapping[${describeValue(from)}]`);
    const norm = Array.from(oldUuid, (b) => b.toString(16).padStart(2, "0")).join("");
    if (seen.has(norm)) {
      throw new RangeError(
        `gpuMapping names GPU ${describeValue(from)} twice (also as ${
          describeValue(seen.get(norm))
        }): each checkpointed GPU must be mapped once`,
      );
    }
    seen.set(norm, from);
    return { oldUuid, newUuid };
  });
}

const BARE = /^[0-9a-fA-F]{32}$/;
const DASHED = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * Parses a GPU UUID written as nvidia-smi prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`),
 * without the `GPU-` prefix (as cuda.core's `Device.uuid` gives it), or as 32 bare hex digits.
 * Returns the 16 raw bytes of a `CUuuid`.
 *
 * @throws {TypeError} when the value is not a string.
 * @throws {RangeError} naming the value and the forms accepted, when it is in none of them.
 */
export function parseGpuUuid(text: unknown, what = "GPU UUID"): Uint8Array {
  if (typeof text !== "string") {
    throw new TypeError(
      `${what} must be a string such as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", got ${
        describeValue(text)
      }`,
    );
  }
  const body = text.startsWith("GPU-") ? text.slice(4) : text;
  if (!BARE.test(body) && !DASHED.test(body)) {
    const hint = text.startsWith("MIG-")
      ? " (MIG instance UUIDs cannot be remapped; give the UUID of the whole GPU)"
      : "";
    throw new RangeError(
      `${what} ${
        JSON.stringify(text)
      } is not a GPU UUID: expected "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or 32 hex digits${hint}`,
    );
  }
  const hex = body.replaceAll("-", "");
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 16; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

/** Formats 16 raw `CUuuid` bytes as nvidia-smi prints them: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
export function formatGpuUuid(bytes: Uint8Array): string {
  if (bytes.length !== 16) {
    throw new RangeError(`a CUuuid has 16 bytes, got ${bytes.length}`);
  }
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${
    hex.slice(20)
  }`;
}

/** Describes a value for an error message: strings quoted, other types named. */
export function describeValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "function") return "a function";
  return String(value);
}
