/**
 * The one strict reader of the JSON this package keeps (manifests, records, the simulator's
 * files): field by field, each named by its path (`trees[0].pid`); anything not exactly as
 * expected is refused in one sentence naming the field and the value found.
 *
 * @module
 */

import { messageOf } from "./errors.ts";
import type { ProcessIdentity } from "./host.ts";
import { gpuUuidOf } from "./options.ts";

/** Makes the error for a field: `reason` is a whole sentence that names it. */
export type Refuse = (field: string, reason: string) => Error;

/** Reads fields strictly, each refusal made by `toError`. */
export class StrictReader {
  constructor(private readonly toError: Refuse) {}

  /** Refuses `field`: it must be `expected`, and is `got`. */
  fail(field: string, expected: string, got: unknown): never {
    throw this.toError(field, `${field} must be ${expected}, got ${describe(got)}`);
  }

  /** Refuses `field` with a sentence of the caller's. */
  refuse(field: string, reason: string): never {
    throw this.toError(field, reason);
  }

  /** The text as JSON, or a refusal that says it is not JSON (`what` names the text). */
  parse(text: string, what: string): unknown {
    try {
      return JSON.parse(text);
    } catch (err) {
      const reason = `${what} is not JSON (${messageOf(err)}); it may be truncated or corrupt`;
      return this.refuse("", reason);
    }
  }

  /** An object of every `required` field and perhaps `optional` ones; without `required`, any. */
  object(
    value: unknown,
    field: string,
    required?: readonly string[],
    optional: readonly string[] = [],
  ): Record<string, unknown> {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      this.fail(field || "it", "an object", value);
    }
    const o = value as Record<string, unknown>;
    if (!required) return o;
    const it = field || "it";
    const extra = Object.keys(o).find((key) => !required.includes(key) && !optional.includes(key));
    const unknown = `${it} has a field this version does not know, ${JSON.stringify(extra)}`;
    if (extra !== undefined) this.refuse(join(field, extra), unknown);
    const lacking = required.find((key) => !(key in o));
    if (lacking) this.refuse(join(field, lacking), `${it} lacks ${JSON.stringify(lacking)}`);
    return o;
  }

  /** An object of the fields `read` names (maybe not the `optional` ones), each read by its own. */
  fields<T extends object>(
    value: unknown,
    field: string,
    read: { readonly [K in keyof T]-?: (value: unknown, field: string) => T[K] },
    optional: readonly string[] = [],
  ): T {
    const keys = Object.keys(read) as (keyof T & string)[];
    const o = this.object(value, field, keys.filter((k) => !optional.includes(k)), optional);
    const given = keys.filter((k) => o[k] !== undefined || !optional.includes(k));
    return Object.fromEntries(given.map((k) => [k, read[k](o[k], join(field, k))])) as T;
  }

  array(value: unknown, field: string, min = 0, max = Infinity): unknown[] {
    if (Array.isArray(value) && value.length >= min && value.length <= max) return value;
    const entries = max === Infinity ? `at least ${min}` : `${min} to ${max}`;
    return this.fail(field, `an array of ${entries} entries`, value);
  }

  string(value: unknown, field: string, max = 4096): string {
    if (typeof value === "string" && value.length > 0 && value.length <= max) return value;
    return this.fail(field, `a string of 1 to ${max} characters`, value);
  }

  boolean(value: unknown, field: string): boolean {
    return typeof value === "boolean" ? value : this.fail(field, "true or false", value);
  }

  integer(value: unknown, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
    const ok = typeof value === "number" && Number.isInteger(value) && value >= min && value <= max;
    return ok ? value : this.fail(field, `an integer from ${min} to ${max}`, value);
  }

  /** A finite number from 0 (above 0 with `positive`). */
  amount(value: unknown, field: string, positive = false): number {
    const ok = typeof value === "number" && Number.isFinite(value) && value >= 0 &&
      !(positive && value === 0);
    return ok ? value : this.fail(field, positive ? "a number above 0" : "a number from 0", value);
  }

  choice<T>(value: unknown, field: string, choices: readonly T[]): T {
    if (choices.includes(value as T)) return value as T;
    return this.fail(field, `one of ${choices.map((c) => JSON.stringify(c)).join(", ")}`, value);
  }

  /** A GPU UUID, as nvidia-smi writes it (`GPU-…`, lower case). */
  uuid(value: unknown, field: string): string {
    const uuid = "a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)";
    return gpuUuidOf(value) ?? this.fail(field, uuid, value);
  }

  /** A process identity `{ pid, start? }`, its pid from `minPid` (0: a claim's unnamed owner). */
  identity(value: unknown, field: string, minPid = 1): ProcessIdentity {
    return this.fields<ProcessIdentity>(value, field, {
      pid: (v, at) => this.integer(v, at, minPid, 2 ** 31 - 1),
      start: (v, at) => this.integer(v, at, 0),
    }, ["start"]);
  }

  /** GPU memory, MiB by GPU UUID (`GPU-…`); with `known`, each a GPU of those (`where` says). */
  mibByGpu(
    value: unknown,
    field: string,
    known?: { uuids: ReadonlySet<string>; where: string },
  ): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [key, mib] of Object.entries(this.object(value, field))) {
      const uuid = this.uuid(key, `${field} key`);
      const at = `${field}[${JSON.stringify(key)}]`;
      if (known && !known.uuids.has(uuid)) this.fail(at, known.where, key);
      out[uuid] = this.amount(mib, at);
    }
    return out;
  }
}

/** `path.key`, or `key` at the top. */
const join = (path: string, key: string) => path ? `${path}.${key}` : key;

/**
 * A value as a message shows it: JSON, cut at 80 characters; `nothing` for undefined. Written
 * only as far as it is shown, so that a value nested millions deep costs no more than its start.
 */
function describe(value: unknown): string {
  if (value === undefined) return "nothing";
  // JSON.stringify writes Infinity and NaN (a 1e400 parsed) as null.
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  let text = "";
  const put = (more: string) => (text += more).length <= 80;
  const walk = (v: unknown): boolean => {
    if (typeof v !== "object" || v === null) {
      return put(JSON.stringify(typeof v === "string" ? v.slice(0, 81) : v) ?? String(v));
    }
    const array = Array.isArray(v);
    if (!put(array ? "[" : "{")) return false;
    let first = true;
    for (const key in v) {
      if (!put(first ? "" : ",") || (!array && !put(`${JSON.stringify(key)}:`))) return false;
      if (!walk((v as Record<string, unknown>)[key])) return false;
      first = false;
    }
    return put(array ? "]" : "}");
  };
  walk(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
