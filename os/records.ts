/**
 * The records of what checkpointed processes held, in a private directory that every program of
 * this package on the machine shares (the command line that suspends a process, the one that
 * resumes it, a library user). One file per process, `<pid>-<start>.json` (start: its start time
 * in clock ticks since boot, so that a reused pid never finds an old record), written whole, mode
 * 0600. A record goes when its process is restored, or a listing finds it gone.
 *
 * @module
 */

import { readdir, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { HeldRecord, HeldRecords, ProcessIdentity, RoomClaim } from "../core/host.ts";
import { identityKey, withoutDeadClaim } from "../core/host.ts";
import { StrictReader } from "../core/json.ts";
import { messageOf } from "../core/errors.ts";
import { errorCode, myUid, privateDirectory, writePrivately } from "./private.ts";

/** The environment variable that names the directory of records, overriding the default. */
const RECORDS_ENV_VAR = "CKPT_RECORDS_DIR";

/** The format written in each record, to refuse what another version wrote differently. */
const FORMAT = "ckpt-cuda-held/1";

/**
 * The directory of records (mode 0700, this user's): `$CKPT_RECORDS_DIR` where set, else
 * `/run/ckpt-cuda` as root (a tmpfs, emptied at boot, as pids are), else
 * `$XDG_RUNTIME_DIR/ckpt-cuda`, else `<temp dir>/ckpt-cuda-<uid>/held`.
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
  /** The directory. */
  readonly where: string;
  readonly #alive: (process: ProcessIdentity) => Promise<boolean>;
  #checked: Promise<void> | undefined;

  /** Records in `dir`, made (mode 0700) on the first write. */
  constructor(dir: string, alive: (process: ProcessIdentity) => Promise<boolean>) {
    this.where = dir;
    this.#alive = alive;
  }

  /** The record of a process; `undefined` where there is none (or it cannot be read as one). */
  async get(process: ProcessIdentity): Promise<HeldRecord | undefined> {
    await this.#directory();
    return await this.#read(this.#file(process));
  }

  /** Writes the record of its process, whole. */
  async put(record: HeldRecord): Promise<void> {
    await this.#directory();
    const text = JSON.stringify({ format: FORMAT, ...record }) + "\n";
    await writePrivately(this.#file(record.process), text);
  }

  /** Removes the record of a process. */
  async remove(process: ProcessIdentity): Promise<void> {
    await rm(this.#file(process), { force: true });
  }

  /** Every record whose process lives; the others are removed. */
  async list(): Promise<HeldRecord[]> {
    await this.#directory();
    const out: HeldRecord[] = [];
    for (const name of await readdir(this.where)) {
      if (!/^[0-9]+(-[0-9]+)?\.json$/.test(name)) continue;
      const file = path.join(this.where, name);
      const record = await this.#read(file);
      if (!record || !(await this.#alive(record.process))) {
        await rm(file, { force: true });
        continue;
      }
      const claimAlive = record.claim ? await this.#alive(record.claim.by) : true;
      out.push(withoutDeadClaim(record, () => claimAlive));
    }
    return out;
  }

  #file(process: ProcessIdentity): string {
    return path.join(this.where, `${identityKey(process)}.json`);
  }

  /** Makes and checks the directory once: private to this user, mode 0700. */
  #directory(): Promise<void> {
    this.#checked ??= privateDirectory(this.where, {
      strict: true,
      hint: `remove it, or name another in ${RECORDS_ENV_VAR}`,
    }).catch((err) => {
      this.#checked = undefined;
      throw new Error(`the records of held GPU memory cannot be kept: ${messageOf(err)}`, {
        cause: err,
      });
    });
    return this.#checked;
  }

  /** A record file, strictly read: anything that is not one counts as none. */
  async #read(file: string): Promise<HeldRecord | undefined> {
    const text = await readFile(file, "utf8").catch((err) => {
      if (errorCode(err) !== "ENOENT") throw err;
    });
    try {
      return text === undefined ? undefined : parseRecord(text);
    } catch {
      return undefined;
    }
  }
}

/** A record's text as written by {@link FileHeldRecords.put}; throws for anything else. */
function parseRecord(text: string): HeldRecord {
  const r = new StrictReader((_field, reason) => new Error(`not a record of ${FORMAT}: ${reason}`));
  const v = r.object(r.parse(text, "it"), "", ["format", "process", "heldMiB", "at"], ["claim"]);
  r.choice(v.format, "format", [FORMAT]);
  const identity = (value: unknown, field: string): ProcessIdentity => {
    const o = r.object(value, field, ["pid"], ["start"]);
    const pid = r.integer(o.pid, `${field}.pid`, 0);
    return o.start === undefined
      ? { pid }
      : { pid, start: r.integer(o.start, `${field}.start`, 0) };
  };
  const record: HeldRecord = {
    process: identity(v.process, "process"),
    heldMiB: r.mibByGpu(v.heldMiB, "heldMiB"),
    at: r.integer(v.at, "at", 0),
  };
  if (v.claim === undefined) return record;
  const c = r.object(v.claim, "claim", ["needMiB", "by", "since"]);
  const claim: RoomClaim = {
    needMiB: r.mibByGpu(c.needMiB, "claim.needMiB"),
    by: identity(c.by, "claim.by"),
    since: r.integer(c.since, "claim.since", 0),
  };
  return { ...record, claim };
}
