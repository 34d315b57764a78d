// The records of what checkpointed processes held, in a private directory every program of this
// package on the machine shares: one file per process, `<pid>-<start>.json` (a reused pid finds
// no old record), written whole, mode 0600, read strictly as a regular file under 64 KiB. A record
// goes when its process is restored or gone; one with a mark stays 30 days, for the process criu
// may bring back. What cannot be used or read is an error (the room check then refuses); a listing
// leaves out a file that is not a record (removed once its process is gone), blocking no restore.
// Beside them, `rates.json`: the rates of steps last measured, for the command line's estimates.

import { readdir, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { HeldRecord, HeldRecords, ProcessIdentity, Rates, RoomClaim } from "../core/host.ts";
import { identityKey, keptEnded, withoutClaim } from "../core/host.ts";
import { StrictReader } from "../core/json.ts";
import { messageOf } from "../core/errors.ts";
import { faultAbove, myUid, privateDirectory, readSmallFile, writePrivately } from "./private.ts";

/** The environment variable that names the directory of records, overriding the default. */
const RECORDS_ENV_VAR = "CKPT_RECORDS_DIR";
/** The format written in each record, and in `rates.json`, to refuse what another version wrote. */
const FORMAT = "ckpt-cuda-held/1", RATES_FORMAT = "ckpt-cuda-rates/1";
/** The most MiB a record may say of one GPU (16 TiB), characters of its mark, bytes of its file. */
const RECORD_MAX_MIB = 2 ** 24, MARK_MAX_CHARS = 512, MAX_BYTES = 64 * 1024;
/** A record's file name: `<pid>-<start>.json` (or `<pid>.json` where the start is unknown). */
const RECORD_NAME = /^([0-9]+)(?:-([0-9]+))?\.json$/;

/**
 * The directory of records: `$CKPT_RECORDS_DIR`, else `/run/ckpt-cuda` as root (emptied at boot,
 * as pids are), else `$XDG_RUNTIME_DIR/ckpt-cuda`, else `<temp dir>/ckpt-cuda-<uid>/held`.
 */
export function recordsDirectory(env: (name: string) => string | undefined): string {
  const given = env(RECORDS_ENV_VAR);
  if (given) return path.resolve(given);
  const uid = myUid();
  if (uid === 0) return "/run/ckpt-cuda";
  const runtime = env("XDG_RUNTIME_DIR");
  if (runtime) return path.join(runtime, "ckpt-cuda");
  return path.join(env("TMPDIR") || os.tmpdir(), `ckpt-cuda-${uid ?? "user"}`, "held");
}

/** Records in a private directory; `alive` says whether a process still lives (start included). */
export class FileHeldRecords implements HeldRecords {
  readonly #alive: (process: ProcessIdentity) => Promise<boolean>;

  /** Records in the directory `where`, made (mode 0700) where missing when first used. */
  constructor(readonly where: string, alive: (process: ProcessIdentity) => Promise<boolean>) {
    this.#alive = alive;
  }

  /** The record of a process, or none; rejects, naming the fault, where it cannot be read. */
  async get(process: ProcessIdentity): Promise<HeldRecord | undefined> {
    const file = await this.#file(process);
    const text = await readSmallFile(file, `the record ${file}`, MAX_BYTES);
    try {
      return text === undefined ? undefined : parseRecord(text);
    } catch (err) {
      throw new Error(`the record ${file} cannot be read: ${messageOf(err)}`, { cause: err });
    }
  }

  /** Writes the record of its process, whole. */
  async put(record: HeldRecord): Promise<void> {
    const text = JSON.stringify({ format: FORMAT, ...record }) + "\n";
    await writePrivately(await this.#file(record.process), text);
  }

  /** Removes the record of a process. */
  async remove(process: ProcessIdentity): Promise<void> {
    await rm(await this.#file(process), { force: true });
  }

  /** The rates kept in `rates.json`, {} where there is none; rejects where it cannot be read. */
  async rates(): Promise<Rates> {
    const file = path.join(await this.#directory(), "rates.json");
    const text = await readSmallFile(file, `the rates ${file}`, MAX_BYTES);
    if (text === undefined) return {};
    const r = new StrictReader((_, reason) => new Error(`${file} cannot be read: ${reason}`));
    const { format, ...rates } = r.object(r.parse(text, "it"), "");
    r.choice(format, "format", [RATES_FORMAT]);
    return Object.fromEntries(Object.entries(rates).map(([k, n]) => [k, r.amount(n, k, true)]));
  }

  /** Keeps `rates` in `rates.json`, whole. */
  async keepRates(rates: Rates): Promise<void> {
    const text = JSON.stringify({ format: RATES_FORMAT, ...rates }) + "\n";
    await writePrivately(path.join(await this.#directory(), "rates.json"), text);
  }

  /**
   * Every record whose process lives; the others are removed but those kept for `ended`, and a
   * file that is not a record left out. Rejects where the directory cannot be used.
   */
  async list(): Promise<HeldRecord[]> {
    const claimed = async ({ record }: { record: HeldRecord }) =>
      !record.claim || await this.#alive(record.claim.by) ? record : withoutClaim(record);
    return await Promise.all((await this.#all()).filter((e) => e.alive).map(claimed));
  }

  /** The records kept of processes that ended (with a mark, 30 days), without their claims. */
  async ended(): Promise<HeldRecord[]> {
    return (await this.#all()).filter((e) => !e.alive).map((e) => withoutClaim(e.record));
  }

  /** Every record, and whether its process lives; what is neither kept nor alive is removed. */
  async #all(): Promise<{ record: HeldRecord; alive: boolean }[]> {
    const dir = await this.#directory(), now = Date.now();
    const names = await readdir(dir).catch((err) => {
      const why = `${this.where} cannot be listed: ${messageOf(err)}`;
      throw new Error(`the records of held GPU memory in ${why}`, { cause: err });
    });
    const out = [];
    for (const name of names) {
      const named = RECORD_NAME.exec(name), file = path.join(dir, name);
      if (!named) continue;
      const record = await readSmallFile(file, `the record ${file}`, MAX_BYTES)
        .then((text) => text === undefined ? undefined : parseRecord(text)).catch(() => null);
      if (record === undefined) continue; // removed meanwhile
      if (record === null) {
        const owner = { pid: +named[1], ...(named[2] === undefined ? {} : { start: +named[2] }) };
        if (!(await this.#alive(owner))) await rm(file, { recursive: true, force: true });
        continue;
      }
      const alive = await this.#alive(record.process);
      if (alive || keptEnded(record, now)) out.push({ record, alive });
      else await rm(file, { force: true });
    }
    return out;
  }

  /** The file of the record of `process`, in the directory checked now. */
  async #file(process: ProcessIdentity): Promise<string> {
    return path.join(await this.#directory(), `${identityKey(process)}.json`);
  }

  /**
   * The directory's real path, made where missing and checked on every use: private to this user,
   * every directory above root's or this user's and written by nobody else unless sticky.
   */
  async #directory(): Promise<string> {
    const hint = `remove it, or name another in ${RECORDS_ENV_VAR}`;
    try {
      await privateDirectory(this.where, { strict: true, hint });
      const real = await realpath(this.where), above = await faultAbove(real);
      if (above) throw new Error(`${above}: another user could swap ${this.where} for their own`);
      return real;
    } catch (err) {
      const why = `the records of held GPU memory cannot be used: ${messageOf(err)}`;
      throw new Error(why, { cause: err });
    }
  }
}

/** A record's text as written by {@link FileHeldRecords.put}; throws for anything else. */
function parseRecord(text: string): HeldRecord {
  const r = new StrictReader((_field, reason) => new Error(`not a record of ${FORMAT}: ${reason}`));
  const fields = ["format", "process", "heldMiB", "at"];
  const v = r.object(r.parse(text, "it"), "", fields, ["claim", "mark"]);
  r.choice(v.format, "format", [FORMAT]);
  // Each MiB finite (JSON's 1e400 parses as Infinity) and at most RECORD_MAX_MIB: a claim of
  // more than any GPU has would block every restore onto its GPU.
  const mib = (value: unknown, field: string): Record<string, number> => {
    const out = r.mibByGpu(value, field);
    const most = `a number from 0 to ${RECORD_MAX_MIB}`;
    for (const [gpu, n] of Object.entries(out)) {
      if (n > RECORD_MAX_MIB) r.fail(`${field}[${JSON.stringify(gpu)}]`, most, n);
    }
    return out;
  };
  const record: HeldRecord = {
    process: r.identity(v.process, "process", 0),
    heldMiB: mib(v.heldMiB, "heldMiB"),
    at: r.integer(v.at, "at", 0),
    ...(v.mark === undefined ? {} : { mark: r.string(v.mark, "mark", MARK_MAX_CHARS) }),
  };
  if (v.claim === undefined) return record;
  const claim = r.fields<RoomClaim>(v.claim, "claim", {
    needMiB: mib,
    by: (by, at) => r.identity(by, at, 0),
    since: (since, at) => r.integer(since, at, 0),
  });
  return { ...record, claim };
}
