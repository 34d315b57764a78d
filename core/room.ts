// Room for a restore, checked before the driver is asked: on driver 580 a restore that runs out of
// GPU memory loses the process (docs/DRIVER.md#an-out-of-memory-restore-loses-the-process). What a
// process holds is recorded at its checkpoint, in records every program of this package shares,
// and a restore is refused where the GPUs' free memory, less other restores' claims, is too little.
// A process criu brought back finds its record by its lasting mark; where several ended processes
// share the mark, it is checked against the most any of them held, and none is moved. Unreadable
// records refuse a checked restore: the check fails closed.

import type { GpuPair } from "./driver.ts";
import { messageOf, RefusedError } from "./errors.ts";
import type { GpuMemoryReport, HeldRecord, HeldRecords, HostProcesses } from "./host.ts";
import { identityKey, MemoryHeldRecords, type ProcessIdentity } from "./host.ts";
import { sameProcess, withoutClaim } from "./host.ts";
import { formatGpuUuid } from "./options.ts";
import { settlesWithin } from "./time.ts";

/** Where a restore would not fit: what {@link GpuRoomError} carries. */
export interface RoomShortage {
  /** The GPU (UUID, `GPU-…`) without room. */
  readonly gpu: string;
  /** The GPU memory the process held there (or on the GPU mapped there) when checkpointed, MiB. */
  readonly neededMiB: number;
  /** The GPU's free memory when checked, MiB. */
  readonly freeMiB: number;
  /** GPU memory that other restores under way are about to take there, MiB. */
  readonly claimedMiB: number;
}

/**
 * A restore refused before the driver was asked: the GPUs it would go to have less free memory
 * than the process held when it was checkpointed. A {@link RefusedError} with code `"NO_ROOM"`:
 * nothing happened to the process; it is still checkpointed and can be resumed once there is room,
 * or onto other GPUs with `gpuMapping`. (A restore the driver itself runs out of memory in leaves
 * the process unrestorable on driver 580: docs/ERRORS.md.)
 *
 * @example
 * ```ts
 * import { CudaProcess, GpuRoomError } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const proc = new CudaProcess(sim.spawn({ memoryMiB: 4096 }).pid, { machine: sim });
 * await proc.suspend();
 * const filler = sim.fillGpu(0);
 * try {
 *   await proc.resume();
 * } catch (err) {
 *   if (err instanceof GpuRoomError) console.log(err.shortage.neededMiB, err.shortage.freeMiB);
 * }
 * filler.exit();
 * await proc.resume(); // it fits now
 * ```
 */
export class GpuRoomError extends RefusedError {
  /** The GPU without room, what was needed there and what was free. */
  readonly shortage: RoomShortage;

  /**
   * Makes the error for a restore (or a resume or toggle) of `pid`, or, without a pid, for the
   * processes of a snapshot (`who` names them).
   */
  constructor(
    init: { operation: string; pid?: number; shortage: RoomShortage; who?: string; note?: string },
  ) {
    const s = init.shortage, note = init.note ? `; ${init.note}` : "";
    const others = s.claimedMiB > 0 ? `, ${mib(s.claimedMiB)} of it claimed by other restores` : "";
    const needs = `${init.who ?? "it"} need${init.who ? "" : "s"} ${mib(s.neededMiB)} on ${s.gpu}`;
    const reason = `${needs}, which has ${mib(s.freeMiB)} free${others}${note}`;
    const free = "free memory there, or restore onto other GPUs with a mapping";
    const detail = init.pid !== undefined ? STILL_CHECKPOINTED : `nothing was changed: ${free}`;
    super({ ...untouched(init), code: "NO_ROOM", reason, detail });
    this.name = "GpuRoomError";
    this.shortage = s;
  }
}

const mib = (n: number) => `${Math.round(n)} MiB`;

const STILL_CHECKPOINTED = "nothing was asked of the driver: the process is still checkpointed";

/** Where a room refusal is: the operation on a checkpointed process (`pid`), or a snapshot's. */
const untouched = ({ operation, pid }: { operation: string; pid?: number }) =>
  pid === undefined ? { operation } : { operation, pid, state: "checkpointed" as const };

/** A checked restore refused (`PREREQUISITE`): the records cannot be read or written (`cause`). */
function roomUnknownError(at: { operation: string; pid?: number; who?: string }, cause: unknown) {
  const left = at.pid !== undefined ? STILL_CHECKPOINTED : "nothing was changed";
  const lose = `a restore that runs out of GPU memory can lose the process: ${messageOf(cause)}`;
  const reason = `the GPU room for ${at.who ?? "its restore"} cannot be checked, and ${lose}`;
  const detail = `${left}; checkRoom: false (cuda-checkpoint --no-room-check) skips the check`;
  return new RefusedError({ ...untouched(at), code: "PREREQUISITE", reason, detail, cause });
}

/**
 * Whether a restore's room was checked: `"checked"` (it fits), `"skipped"` (`checkRoom: false`),
 * or why it could not be checked (`{ unknown }`): no record of what the process held (another
 * tool checkpointed it), no GPU memory readings (no NVML), or this very process.
 */
export type RoomCheck = "checked" | "skipped" | { readonly unknown: string };

/** A restore's claim, until it has returned (`done`), and whether its room was checked. */
export type Reservation = { readonly check: RoomCheck; done(ok: boolean): Promise<void> };

/** The room check of one session: what a process holds, recorded; its restore's room, claimed. */
export class RoomGuard {
  /** Records for a host that keeps none: this session's own. */
  readonly #ownRecords = new MemoryHeldRecords();
  /** Whether this package may be holding the calling process locked or checkpointed. */
  #selfHeld = false;
  /** This session's claims under way, in the order made; the key of each it made (see `fits`). */
  readonly #mine = new Map<ProcessIdentity, HeldRecord>();
  readonly #made = new Set<string>();
  /** Reads of the host under way: a lock of the calling process waits for them. */
  readonly #reads = new Set<Promise<unknown>>();
  /** The records, those of ended processes and the GPU report, one read at a time (`sharedReads`). */
  readonly #listing = sharedReads(() => this.#records().list());
  readonly #ended = sharedReads(async () => await this.#records().ended?.() ?? []);
  readonly #report = sharedReads(() => this.report());

  /** A guard for one session: its machine's host (`undefined`: none), and this program. */
  constructor(
    private readonly host: HostProcesses | undefined,
    /** This program, as the host identifies it: the owner of its claims. */
    private readonly self: () => Promise<ProcessIdentity | undefined>,
  ) {}

  /**
   * The GPU memory of `process` in MiB, summed: what `report` (if any) says it holds now, else what
   * it held when last checkpointed, where recorded.
   */
  async totalMiB(process: ProcessIdentity, report?: GpuMemoryReport): Promise<number | undefined> {
    const held = heldIn(report, process) ?? (await this.record(process))?.heldMiB;
    return held && Object.values(held).reduce((a, b) => a + b, 0);
  }

  /**
   * Records what `process` held at its checkpoint (`back`: a process a restore brought back, whose
   * record replaces the ended one's it succeeds); where it cannot, resolves to the warning.
   */
  async recorded(
    process: ProcessIdentity,
    heldMiB: Readonly<Record<string, number>>,
    back = false,
  ): Promise<RoomCheck | undefined> {
    const mark = await this.host?.lastingMark?.(process).catch(() => undefined);
    const record = { process, heldMiB, at: Date.now(), ...(mark ? { mark } : {}) };
    const on = this.#records();
    return await Promise.try(() => on.put(record)).then(async () => {
      const was = back ? await endedWith(mark, this.#ended).catch(() => []) : [];
      if (was.length === 1) await on.remove(was[0].process).catch(() => {});
      return undefined;
    }, (err) => ({
      unknown: `what it held was not recorded (${messageOf(err)}), so its restore's GPU ` +
        `room cannot be checked: a checked resume is refused until the records can be read, or ` +
        `made with checkRoom: false`,
    }));
  }

  /** What `process` held when last checkpointed, where recorded and the records can be read. */
  record(process: ProcessIdentity): Promise<HeldRecord | undefined> {
    return this.#records().get(process).catch(() => undefined);
  }

  /** Forgets the record of `process` (it was locked from running, or restored). Never rejects. */
  async forget(process: ProcessIdentity): Promise<void> {
    this.#mine.delete(process);
    await this.#records().remove(process).catch(() => {});
  }

  /**
   * Checks that a restore of `turn`'s process (onto `pairs`) fits and claims its room until done:
   * a {@link GpuRoomError} where it does not fit, unless the process is no longer checkpointed
   * (the record was old: forgotten); a `PREREQUISITE` refusal where the records fail.
   */
  async reserve(
    turn: { identity: ProcessIdentity; pid: number; self: boolean },
    operation: string,
    pairs: readonly GpuPair[] | null,
    stillCheckpointed: () => Promise<boolean>,
  ): Promise<Reservation> {
    const process = turn.identity, where = { operation, pid: turn.pid }, records = this.#records();
    let by: ProcessIdentity = { pid: 0 };
    const unclaim = async () => {
      this.#mine.delete(process);
      const now = await records.get(process).catch(() => undefined);
      if (now?.claim && sameProcess(now.claim.by, by)) {
        await records.put(withoutClaim(now)).catch(() => {});
      }
    };
    // Once the restore has returned: `ok` removes the process's record, else its claim (if any).
    const held = (check: RoomCheck, failed = unclaim): Reservation => ({
      check,
      done: (ok) => ok ? this.forget(process) : failed(),
    });
    const none = (why: string) => held({ unknown: why }, async () => {});
    const waits = "NVML would wait for it";
    if (turn.self) return none(`a process's restore of itself is not checked: ${waits}`);
    if (this.#selfHeld) return none(`this process is checkpointed or locked itself, and ${waits}`);
    let record: HeldRecord | undefined, shared = 0, need: Record<string, number>;
    try {
      record = await records.get(process);
      if (!record) ({ record, shared } = await this.#cameBack(process, records));
      const kept = `no record of the GPU memory it held (kept in ${records.where})`;
      const elsewhere = "it was checkpointed on another machine or without the record";
      if (!record) return none(`${kept}: another program checkpointed it, or ${elsewhere}`);
      need = onto([record.heldMiB], pairs);
      // Claim first, then read: two programs' restores that check at once each see the other's
      // claim (both refused, none lost); this session's own are known here before written.
      by = await this.self() ?? by;
      const claim = { needMiB: need, by, since: Date.now() };
      this.#mine.set(process, { ...record, claim });
      this.#made.add(claimKey(process, claim));
      // Kept while the records may show them: past 10 000, the oldest go.
      while (this.#made.size > 10_000) this.#made.delete(this.#made.values().next().value!);
      await records.put({ ...record, claim });
    } catch (err) {
      this.#mine.delete(process);
      throw roomUnknownError(where, err);
    }
    const note = shared > 1
      ? `${shared} ended processes have its lasting mark, and which it was cannot be told, so ` +
        `it is checked against the most any of them held on each GPU`
      : undefined;
    let check: RoomCheck;
    try {
      check = await this.fits(need, { ...where, note }, process);
    } catch (err) {
      // Shared: nothing of it is kept, so that a retry weighs every one of them again.
      await (shared > 1 ? this.forget(process) : unclaim());
      if (err instanceof GpuRoomError && !(await stillCheckpointed())) {
        await this.forget(process);
        return none("its record was old: the process is no longer checkpointed");
      }
      throw err;
    }
    if (check === "checked") return held(check);
    await unclaim();
    return none(check === "skipped" ? "not checked" : check.unknown);
  }

  /**
   * The one room check: a {@link GpuRoomError} (about `where`'s pid, or `who`) where `need` (MiB by
   * GPU UUID) does not fit in a GPU's free memory less the claims of restores of processes other
   * than `except` (a claim that is no amount from 0 left out); else whether it could be told.
   */
  async fits(
    need: Readonly<Record<string, number>>,
    where: { operation: string; pid?: number; who?: string; note?: string },
    except?: ProcessIdentity,
  ): Promise<RoomCheck> {
    const listed = await this.#listing().catch((err) => {
      throw roomUnknownError(where, err);
    });
    // Every claim is read before the GPU's memory: one that ends meanwhile took its memory first.
    const mine = [...this.#mine], at = except ? mine.findIndex(([p]) => p === except) : -1;
    const report = await this.#report();
    const free = report && "byPid" in report ? report.freeMiB : undefined;
    const unknown = report && "unknown" in report
      ? `the free GPU memory is unknown: ${report.unknown}`
      : "the host cannot tell free GPU memory";
    if (!free || free.size === 0) return { unknown };
    // A claim is what a restore under way is still to take (what its process holds is already out
    // of the free memory); this session's, as made (not as the files show them when read): those
    // before `except`'s, so that of two at once with room for one, one resumes.
    const others = [
      ...listed.filter((r) => !r.claim || !this.#made.has(claimKey(r.process, r.claim))),
      ...mine.slice(0, at < 0 ? undefined : at).map(([, r]) => r),
    ];
    const claimed: Record<string, number> = {};
    for (const other of others) {
      if (!other.claim || (except && sameProcess(other.process, except))) continue;
      const holds = "byPid" in report! ? report.byPid.get(other.process.pid) : undefined;
      for (const [gpu, mib] of Object.entries(other.claim.needMiB)) {
        if (!Number.isFinite(mib) || mib < 0) continue;
        const has = typeof holds === "object" ? holds[gpu] ?? 0 : 0;
        claimed[gpu] = (claimed[gpu] ?? 0) + Math.max(0, mib - has);
      }
    }
    const freeOf = new Map([...free].map(([gpu, mib]) => [gpu.toLowerCase(), mib]));
    for (const [gpu, neededMiB] of Object.entries(need)) {
      const freeMiB = freeOf.get(gpu.toLowerCase()), claimedMiB = claimed[gpu] ?? 0;
      if (freeMiB !== undefined && neededMiB > freeMiB - claimedMiB) {
        throw new GpuRoomError({ ...where, shortage: { gpu, neededMiB, freeMiB, claimedMiB } });
      }
    }
    return "checked";
  }

  /**
   * Before this package locks the calling process: no read starts, those under way end, and the
   * host lets go of NVML (which would wait for the restore of the process it is initialised in).
   */
  async beforeSelfLock(): Promise<void> {
    this.#selfHeld = true;
    await Promise.allSettled([...this.#reads]);
    await this.host?.release?.();
  }

  /** The calling process runs again (its unlock succeeded, or its lock failed). */
  selfRunning(): void {
    this.#selfHeld = false;
  }

  /**
   * The record of the process `process` was before criu brought it back: an ended one's with its
   * lasting mark, moved to it. Where several have it (`shared`), none is moved, and the figure is
   * the most any held on each GPU (a restore refused for room is safe, one out of memory is not).
   */
  async #cameBack(process: ProcessIdentity, records: HeldRecords) {
    const mark = records.ended && await this.host?.lastingMark?.(process).catch(() => undefined);
    const was = await endedWith(mark || undefined, this.#ended);
    if (was.length === 0) return { shared: 0 };
    const heldMiB: Record<string, number> = {};
    for (const [gpu, mib] of was.flatMap((r) => Object.entries(r.heldMiB))) {
      heldMiB[gpu] = Math.max(heldMiB[gpu] ?? 0, mib);
    }
    const record: HeldRecord = { process, heldMiB, at: Math.max(...was.map((r) => r.at)), mark };
    if (was.length === 1) {
      await records.put(record);
      await records.remove(was[0].process);
    }
    return { record, shared: was.length };
  }

  #records(): HeldRecords {
    return this.host?.heldRecords ?? this.#ownRecords;
  }

  /** The host's GPU memory report; none while this process is held, or without one. */
  async report(): Promise<GpuMemoryReport | undefined> {
    const host = this.host;
    if (this.#selfHeld || !host?.gpuMemory) return undefined;
    const read = host.gpuMemory().catch((err): GpuMemoryReport => ({ unknown: messageOf(err) }));
    this.#reads.add(read);
    read.then(() => this.#reads.delete(read));
    return await read;
  }
}

/** A claim as this session knows it among those in the records: its process and when made. */
const claimKey = (p: ProcessIdentity, c: { since: number }) => `${identityKey(p)}@${c.since}`;

/** What `process` holds by `report`, MiB by GPU UUID, where it tells (and it holds some). */
export function heldIn(
  report: GpuMemoryReport | undefined,
  process: ProcessIdentity,
): Readonly<Record<string, number>> | undefined {
  const memory = report && "byPid" in report ? report.byPid.get(process.pid) : undefined;
  if (memory === undefined || memory === "unknown") return undefined;
  return Object.values(memory).some((m) => m > 0) ? memory : undefined;
}

/** Where GPU memory goes: MiB by GPU of all the records, moved by the mapping where it has one. */
export function onto(
  held: readonly Readonly<Record<string, number>>[],
  pairs: readonly GpuPair[] | null,
): Record<string, number> {
  const to = new Map(
    (pairs ?? []).map((p) => [formatGpuUuid(p.oldUuid).toLowerCase(), formatGpuUuid(p.newUuid)]),
  );
  const need: Record<string, number> = {};
  for (const [gpu, mib] of held.flatMap((h) => Object.entries(h))) {
    const target = to.get(gpu.toLowerCase()) ?? gpu;
    need[target] = (need[target] ?? 0) + mib;
  }
  return need;
}

/** The records kept of ended processes whose lasting mark is `mark` (none without a mark). */
const endedWith = async (mark: string | undefined, ended: () => Promise<HeldRecord[]>) =>
  mark ? (await ended()).filter((r) => r.mark === mark) : [];

/**
 * `read`, one at a time: calls made before the next begins share it (each asked after its claim was
 * made, its claims read), so N restores at once read the records and NVML a few times, not N. The
 * next waits 1 s at most for the one before: a read that never settles holds no later call.
 */
function sharedReads<T>(read: () => Promise<T>): () => Promise<T> {
  let last: Promise<unknown> = Promise.resolve(), next: Promise<T> | undefined;
  const begin = () => (next = undefined, read());
  return () => next ??= (last = settlesWithin(last, 1000).then(begin)) as Promise<T>;
}
