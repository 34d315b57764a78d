/**
 * Input checks, one set for every entry point of this package and its simulator: each error names
 * the bad value and what was expected, and an options object with a key that is not an option is
 * refused, naming the key, so that `lock({ timeout: 5 })` does not pass for `lock()`. GPU UUIDs
 * are parsed here, and formatted as nvidia-smi prints them.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";

/** The largest pid a C `int` holds (Linux hands out at most 2^22). */
export const MAX_PID = 2 ** 31 - 1;
/** The largest lock timeout: `timeoutMs` is a C `unsigned int`. */
export const MAX_TIMEOUT_MS = 2 ** 32 - 1;
/**
 * The library's lock timeout when none is given: 10 s, as CRIU's CUDA plugin uses (the command
 * line's is 0, as NVIDIA's utility's: docs/API.md says why).
 */
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/** Checks an options argument of `where`: `undefined` (`{}`) or a plain object of `keys`. */
export function checkOptions<T extends object>(
  options: T | undefined,
  where: string,
  keys: readonly (keyof T & string)[],
): T {
  return checkKeys(options, where, keys, `${where}'s options`);
}

/** A table of option checks: each option's check, given its value (`undefined`: left out). */
export type OptionChecks = Readonly<Record<string, (value: unknown, name: string) => unknown>>;
/** What a table of checks makes of the options: each option's value, checked. */
export type Settings<T extends OptionChecks> = { readonly [K in keyof T]: ReturnType<T[K]> };

/** Checks the options of `where` by a table: no key but `machine` and the table's, then each. */
export function checkTable<T extends OptionChecks>(
  options: object | undefined,
  where: string,
  table: T,
): Settings<T> {
  const keys = ["machine", ...Object.keys(table)];
  const o: Record<string, unknown> = checkOptions(options as Record<string, unknown>, where, keys);
  return Object.fromEntries(keys.slice(1).map((k) => [k, table[k](o[k], k)])) as Settings<T>;
}

/** A check of a boolean option for {@link checkTable}: `fallback` where left out. */
export function flag(fallback: boolean): (value: unknown, name: string) => boolean {
  return (value, name) => checkFlag(value, name, fallback);
}

/** A check of a whole operation's `timeoutMs` (`what`: "group"; 0: none, as a lock's). */
export function wholeTimeout(what: string): (value: unknown) => number | undefined {
  const name = `timeoutMs (ms for the whole ${what})`;
  return (v) => v === undefined ? undefined : checkInteger(v, name, 0, MAX_TIMER_MS) || undefined;
}

/** The longest wait a timer holds (2^31-1 ms, 24.8 days): a longer one would fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Checks an object of named values (`what`: "gpus[0]"), as {@link checkOptions} does. */
export function checkKeys<T extends object>(
  value: T | undefined,
  what: string,
  keys: readonly (keyof T & string)[],
  whatAsObject: string = what,
): T {
  if (value === undefined) return {} as T;
  if (typeof value !== "object" || !isPlain(value)) {
    const fields = keys.length > 0 ? ` with ${keys.join(", ")}` : "";
    mustBe(TypeError, whatAsObject, `a plain object${fields}`, value);
  }
  for (const key of Object.keys(value)) {
    if ((keys as readonly string[]).includes(key)) continue;
    const near = nearest(key, keys), takes = `; it takes ${keys.join(", ") || "none"}`;
    const hint = near ? ` (did you mean ${JSON.stringify(near)}?)` : "";
    throw new TypeError(`${what} has no option ${JSON.stringify(key)}${hint}${takes}`);
  }
  return value;
}

/** Whether a value is a plain object (`{}` or `Object.create(null)`), not an array or a class's. */
const isPlain = (value: object | null): value is object =>
  value !== null && [Object.prototype, null].includes(Object.getPrototypeOf(value));

/**
 * The key of `keys` nearest to `key`: the same but for case, at most two edits away, or else one
 * that begins the other (after any one edit away: `--all-or-nothng` is `--all-or-nothing`'s).
 */
export function nearest(key: string, keys: readonly string[]): string | undefined {
  let best: string | undefined, bestDistance = 3;
  for (const k of keys) {
    const a = key.toLowerCase(), b = k.toLowerCase();
    const d = Math.min(editDistance(a, b), b.startsWith(a) || a.startsWith(b) ? 1.5 : 3);
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

/** Checks a process id (or a thread id of one): an integer from 1 to 2^31-1. */
export function checkPid(pid: unknown, what = "pid"): number {
  return checkInteger(pid, what, 1, MAX_PID, `process or thread id from 1 to ${MAX_PID}`);
}

/** Throws the error for `got` of `what`, which must be `expected`: one way to word them all. */
export function mustBe(Err: ErrorConstructor, what: string, expected: string, got: unknown): never {
  throw new Err(`${what} must be ${expected}, got ${describeValue(got)}`);
}

/** Checks an integer from `min` (to `max`): a TypeError for no number ("3"), else a RangeError. */
export function checkInteger(
  value: unknown,
  what: string,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
  expected = max === Number.MAX_SAFE_INTEGER ? `from ${min}` : `from ${min} to ${max}`,
): number {
  const ok = typeof value === "number" && Number.isInteger(value) && value >= min && value <= max;
  const Err = typeof value === "number" ? RangeError : TypeError;
  return ok ? value : mustBe(Err, what, `an integer ${expected}`, value);
}

/** Checks a lock timeout in milliseconds: an integer from 0 (wait forever) to 2^32-1. */
export function checkTimeoutMs(timeoutMs: unknown, what = "timeoutMs"): number {
  const expected = `number of milliseconds from 0 (no timeout) to ${MAX_TIMEOUT_MS}`;
  return checkInteger(timeoutMs, what, 0, MAX_TIMEOUT_MS, expected);
}

/** A lock timeout option, checked as {@link checkTimeoutMs}; the default where left out. */
export function checkLockTimeout(value: unknown, what: string): number {
  return value === undefined ? DEFAULT_LOCK_TIMEOUT_MS : checkTimeoutMs(value, what);
}

/** Checks a finite number from 0 (above 0 with `positive`); returns it. */
export function checkAmount(value: unknown, what: string, positive = false): number {
  const ok = typeof value === "number" && Number.isFinite(value) && value >= 0 &&
    !(positive && value === 0);
  const Err = typeof value === "number" ? RangeError : TypeError;
  return ok ? value : mustBe(Err, what, `a finite number ${positive ? ">" : ">="} 0`, value);
}

/** An absolute path (from `/`, without NUL), where given: `what` names it in the refusal. */
export function checkPath(value: unknown, what: string, expected = "an absolute path"): void {
  const path = typeof value === "string" && value.startsWith("/") && !value.includes("\0");
  if (value !== undefined && !path) mustBe(TypeError, what, expected, value);
}

/** Whether `value` is a non-empty string without NUL (which would cut a C string short). */
export const isName = (value: unknown): value is string =>
  typeof value === "string" && value.trim() !== "" && !value.includes("\0");
/** Checks a non-empty string without NUL ({@link isName}); returns it. */
export const checkName = (value: unknown, what: string): string =>
  isName(value) ? value : mustBe(TypeError, what, "a non-empty string without NUL", value);

/** `value`, or `fallback` where it is left out (`undefined`; `null` is a value, to be refused). */
export const or = <T>(value: T | undefined, fallback: T): T =>
  value === undefined ? fallback : value;

/** A boolean option: `fallback` when left out; anything else is a TypeError naming it. */
export function checkFlag(value: unknown, what: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  return typeof value === "boolean" ? value : mustBe(TypeError, what, "true or false", value);
}

/** An `AbortSignal` option, where given. */
export function checkSignal(value: unknown, what = "signal"): AbortSignal | undefined {
  if (value === undefined || value instanceof AbortSignal) return value;
  return mustBe(TypeError, what, "an AbortSignal", value);
}

/** A function option (of type `F`), where given: a check for a table, as the others are. */
export function checkFunction<F>(value: unknown, what: string): F | undefined {
  if (value === undefined || typeof value === "function") return value as F | undefined;
  return mustBe(TypeError, what, "a function", value);
}

/** One of `choices`, where given. */
export function checkChoice<T extends string>(
  value: unknown,
  what: string,
  choices: readonly T[],
): T {
  if ((choices as readonly unknown[]).includes(value)) return value as T;
  const expected = `one of ${choices.map((c) => JSON.stringify(c)).join(", ")}`;
  return mustBe(RangeError, what, expected, value);
}

/** A GPU mapping for restore: from each checkpointed GPU's UUID to the restore GPU's UUID. */
export type GpuMapping = Readonly<Record<string, string>> | ReadonlyMap<string, string>;

/** Checks a GPU mapping (GPU UUIDs, no key twice) and turns it into GPU pairs. */
export function checkGpuMapping(mapping: unknown): GpuPair[] {
  if (!(mapping instanceof Map) && !(typeof mapping === "object" && isPlain(mapping))) {
    const expected = "an object or Map from checkpointed GPU UUID to restore GPU UUID";
    mustBe(TypeError, "gpuMapping", expected, mapping);
  }
  const seen = new Map<string, unknown>();
  const entries = mapping instanceof Map ? [...mapping.entries()] : Object.entries(mapping);
  return entries.map(([from, to]) => {
    const oldUuid = parseGpuUuid(from, "gpuMapping key");
    const newUuid = parseGpuUuid(to, `gpuMapping[${describeValue(from)}]`);
    const norm = formatGpuUuid(oldUuid), also = `(also as ${describeValue(seen.get(norm))})`;
    const twice = `gpuMapping names GPU ${describeValue(from)} twice ${also}`;
    if (seen.has(norm)) throw new RangeError(`${twice}: each checkpointed GPU must be mapped once`);
    seen.set(norm, from);
    return { oldUuid, newUuid };
  });
}

const BARE = /^[0-9a-fA-F]{32}$/;
const DASHED = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * Parses a GPU UUID as nvidia-smi prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), without
 * `GPU-` (as cuda.core gives it), or as 32 hex digits, into the 16 bytes of a `CUuuid`. Throws a
 * TypeError for what is no string, a RangeError naming the forms for any other string.
 */
export function parseGpuUuid(text: unknown, what = "GPU UUID"): Uint8Array {
  const form = '"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"';
  if (typeof text !== "string") mustBe(TypeError, what, `a string such as ${form}`, text);
  const body = text.startsWith("GPU-") ? text.slice(4) : text;
  const mig = " (MIG instance UUIDs cannot be remapped; give the UUID of the whole GPU)";
  const expected = `expected ${form} or 32 hex digits${text.startsWith("MIG-") ? mig : ""}`;
  const not = `${what} ${JSON.stringify(text)} is not a GPU UUID: ${expected}`;
  if (!BARE.test(body) && !DASHED.test(body)) throw new RangeError(not);
  return Uint8Array.from(body.replaceAll("-", "").match(/../g)!, (hex) => parseInt(hex, 16));
}

/** Formats the 16 bytes of a `CUuuid` as nvidia-smi prints them (`GPU-xxxxxxxx-…`). */
export function formatGpuUuid(bytes: Uint8Array): string {
  if (bytes.length !== 16) throw new RangeError(`a CUuuid has 16 bytes, got ${bytes.length}`);
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `GPU-${hex.replace(/^(.{8})(.{4})(.{4})(.{4})/, "$1-$2-$3-$4-")}`;
}

/** A GPU UUID in a form {@link parseGpuUuid} takes, as nvidia-smi prints it; else `undefined`. */
export const gpuUuidOf = (text: unknown): string | undefined =>
  orElse(() => formatGpuUuid(parseGpuUuid(text)), undefined);

/** What `read` gives, or `fallback` where it throws (what cannot be read counts as `fallback`). */
export function orElse<T>(read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    return fallback;
  }
}

/** Describes a value for an error message: strings quoted, other types named. */
export function describeValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  if (Array.isArray(value)) return value.length ? "an array" : "an empty array";
  if (typeof value === "object" && value !== null) return "an object";
  if (typeof value === "function") return "a function";
  return String(value);
}
