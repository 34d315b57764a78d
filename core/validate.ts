/**
 * Input checks. Each error names the bad value and what was expected.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";
import { describeValue, parseGpuUuid } from "./uuid.ts";

/** The largest pid Linux can hand out (`PID_MAX_LIMIT` is 2^22; a C `int` holds up to 2^31-1). */
export const MAX_PID = 2 ** 31 - 1;
/** The largest lock timeout: `timeoutMs` is a C `unsigned int`. */
export const MAX_TIMEOUT_MS = 2 ** 32 - 1;
/** The lock timeout used when none is given: 10 s, as CRIU's CUDA plugin uses. */
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/**
 * Checks a process id (a thread id of the process is accepted too): a safe integer from 1 to
 * 2^31-1.
 */
export function checkPid(pid: unknown, what = "pid"): number {
  if (typeof pid !== "number" || !Number.isInteger(pid)) {
    throw new TypeError(
      `${what} must be an integer process or thread id from 1 to ${MAX_PID}, got ${
        describeValue(pid)
      }`,
    );
  }
  if (pid < 1 || pid > MAX_PID) {
    throw new RangeError(
      `${what} must be an integer process or thread id from 1 to ${MAX_PID}, got ${pid}`,
    );
  }
  return pid;
}

/**
 * Checks an options argument: a plain object, not an array. The error shows an example of one
 * (`{ timeoutMs: 5000 }`) and names what was given.
 */
export function checkOptionsObject(value: unknown, example: string): void {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(
      `options must be an object such as ${example}, got ${describeValue(value)}`,
    );
  }
}

/** Checks an integer option with a lower bound; the error names the option and the value. */
export function checkInteger(value: unknown, what: string, min: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min) {
    throw new RangeError(`${what} must be an integer from ${min}, got ${describeValue(value)}`);
  }
  return value;
}

/** Checks a lock timeout in milliseconds: an integer from 0 (wait forever) to 2^32-1. */
export function checkTimeoutMs(timeoutMs: unknown): number {
  if (typeof timeoutMs !== "number" || !Number.isInteger(timeoutMs)) {
    throw new TypeError(
      `timeoutMs must be an integer number of milliseconds from 0 (no timeout) to ${MAX_TIMEOUT_MS}, got ${
        describeValue(timeoutMs)
      }`,
    );
  }
  if (timeoutMs < 0 || timeoutMs > MAX_TIMEOUT_MS) {
    throw new RangeError(
      `timeoutMs must be an integer number of milliseconds from 0 (no timeout) to ${MAX_TIMEOUT_MS}, got ${timeoutMs}`,
    );
  }
  return timeoutMs;
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
    typeof mapping === "object" && mapping !== null && !Array.isArray(mapping) &&
    (Object.getPrototypeOf(mapping) === Object.prototype || Object.getPrototypeOf(mapping) === null)
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
