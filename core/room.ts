/**
 * Room for a restore, checked before the driver is asked: on driver 580 a restore that runs out of
 * GPU memory loses the process (docs/DRIVER.md#an-out-of-memory-restore-loses-the-process). What a
 * process holds is recorded at its checkpoint, in records every program of this package shares,
 * and a restore refused where the GPUs' free memory, less other restores' claims, is too little.
 * A process criu brought back finds its record by its lasting mark. Unreadable records refuse a
 * checked restore: the check fails closed.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";
import { messageOf, RefusedError } from "./errors.ts";
import type { GpuMemoryReport, HeldRecord, HeldRecords } from "./host.ts";
import { type HostProcesses, MemoryHeldRecords, type ProcessIdentity } from "./host.ts";
import { sameProcess, withoutClaim } from "./host.ts";
import { formatGpuUuid } from "./options.ts";

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
 * A restore refused (`NO_ROOM`): its GPUs have less free memory than the process held. It is still
 * checkpointed: resume it once there is room, or onto other GPUs with `gpuMapping`.
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

  /** Makes the error for a restore of `pid`, or for the processes `who` names (a snapshot's). */
  constructor(init: { operation: string; pid?: number; shortage: RoomShortage; who?: string }) {
    const s = init.shortage;
    const claimed = s.claimedMiB > 0
      ? `, ${mib(s.claimedMiB)} of it claimed by other restores`
      : "";
    const who = init.who ? `${init.who} need` : "it needs";
    super({
      code: "NO_ROOM",
      ...placeOf(init),
      reason: `${who} ${mib(s.neededMiB)} on ${s.gpu}, which has ${mib(s.freeMiB)} free${claimed}`,
      detail: init.pid !== undefined
        ? UNTOUCHED
        : "nothing was changed: free memory there, or restore onto other GPUs with a mapping",
    });
    this.name = "GpuRoomError";
    this.shortage = s;
  }
}

const mib = (n: number) => `${Math.round(n)} MiB`;

/** Where a room refusal is: a restore of `pid`, or of the processes `who` names. */
type RoomPlace = { operation: string; pid?: number; who?: string };

const UNTOUCHED = "nothing was asked of the driver: the process is still checkpointed";

const placeOf = (w: RoomPlace) => ({
  operation: w.operation,
  ...(w.pid !== undefined ? { pid: w.pid, state: "checkpointed" as const } : {}),
});

/** The refusal (`PREREQUISITE`) of a checked restore whose records cannot be read or written. */
function roomUnknownError(where: RoomPlace, err: unknown): RefusedError {
  return new RefusedError({
    code: "PREREQUISITE",
    ...placeOf(where),
    reason: `the GPU room for ${where.who ?? "its restore"} cannot be checked, and a restore ` +
      `that runs out of GPU memory can lose the process: ${messageOf(err)}`,
    detail: `${where.pid !== undefined ? UNTOUCHED : "nothing was changed"}; checkRoom: false ` +
      `(cuda-checkpoint --no-room-check) skips the check`,
    cause: err,
  });
}

/** Whether a restore's room was `"checked"`, `"skipped"` (`checkRoom: false`), or why not. */
export type RoomCheck = "checked" | "skipped" | { readonly unknown: string };

/** A restore's claim, until it has returned. */
export interface Reservation {
  readonly check: RoomCheck;
  /** The restore has returned: `ok` removes the process's record, else its claim only. */
  done(ok: boolean): Promise<void>;
}

/** The room check of one session, as the module documentation says. */
export class RoomGuard {
  readonly #host: HostProcesses | undefined;
  readonly #self: () => Promise<ProcessIdentity | undefined>;
  readonly #ownRecords = new MemoryHeldRecords();
  /** Whether this package may hold the calling process locked or checkpointed. */
  #selfHeld = false;
  /** Reads of the host under way: a lock of the calling process waits for them. */
  readonly #reads = new Set<Promise<unknown>>();

  /** A guard for one session: its machine's host (`undefined`: none), and this program. */
  constructor(host: HostProcesses | undefined, self: () => Promise<ProcessIdentity | undefined>) {
    this.#host = host;
    this.#self = self;
  }

  /** What `process` holds now, MiB by GPU UUID; `undefined` where none or unknown. */
  async heldNow(process: ProcessIdentity): Promise<Readonly<Record<string, number>> | undefined> {
    const report = await this.report();
    if (!report || !("byPid" in report)) return undefined;
    const memory = report.byPid.get(process.pid);
    if (memory === undefined || memory === "unknown") return undefined;
    return Object.values(memory).some((m) => m > 0) ? memory : undefined;
  }

  /** Records what `process` held after its checkpoint; never rejects, resolves to a warning. */
  async recorded(
    process: ProcessIdentity,
    heldMiB: Readonly<Record<string, number>>,
  ): Promise<RoomCheck | undefined> {
    const records = this.#records();
    const mark = await this.#host?.lastingMark?.(process).catch(() => undefined);
    try {
      await records.put({ process, heldMiB, at: Date.now(), ...(mark ? { mark } : {}) });
      return undefined;
    } catch (err) {
      return {
        unknown: `what it held was not recorded (${messageOf(err)}), so its restore's GPU room ` +
          `cannot be checked: a checked resume is refused until the records can be read, or ` +
          `made with checkRoom: false`,
      };
    }
  }

  /** The record of `process`; `undefined` too where the records cannot be read. */
  record(process: ProcessIdentity): Promise<HeldRecord | undefined> {
    return this.#records().get(process).catch(() => undefined);
  }

  /** Forgets the record of `process` (it was locked from running, or restored). Never rejects. */
  async forget(process: ProcessIdentity): Promise<void> {
    await this.#records().remove(process).catch(() => {});
  }

  /**
   * Checks that a restore of `process` fits and claims the room until done; throws a
   * {@link GpuRoomError} unless `stillCheckpointed` says the record is old (then forgotten).
   */
  async reserve(
    process: ProcessIdentity,
    pairs: readonly GpuPair[] | null,
    where: { operation: string; pid: number; self: boolean },
    stillCheckpointed: () => Promise<boolean>,
  ): Promise<Reservation> {
    const none = (why: string): Reservation => ({
      check: { unknown: why },
      done: async (ok) => {
        if (ok) await this.forget(process);
      },
    });
    if (where.self) {
      return none("a process's restore of itself is not checked: NVML would wait for it");
    }
    if (this.#selfHeld) {
      return none("this process is checkpointed or locked itself, and NVML would wait for it");
    }
    const records = this.#records();
    let record: HeldRecord | undefined, need: Record<string, number>, by: ProcessIdentity;
    try {
      record = await records.get(process) ?? await this.#cameBack(process, records);
      if (!record) {
        return none(
          `no record of the GPU memory it held (kept in ${records.where}): another program ` +
            `checkpointed it, or it was checkpointed on another machine or without the record`,
        );
      }
      need = onto(record.heldMiB, pairs);
      by = await this.#self() ?? { pid: 0 };
      // Claim first, then read: two restores that check at once each see the other's claim.
      await records.put({ ...record, claim: { needMiB: need, by, since: Date.now() } });
    } catch (err) {
      throw roomUnknownError(where, err);
    }
    const unclaim = async () => {
      const now = await records.get(process).catch(() => undefined);
      if (now?.claim && sameProcess(now.claim.by, by)) {
        await records.put(withoutClaim(now)).catch(() => {});
      }
    };
    let check: RoomCheck;
    try {
      check = await this.fits(need, where, process);
    } catch (err) {
      await unclaim();
      if (err instanceof GpuRoomError && !(await stillCheckpointed())) {
        await this.forget(process);
        return none("its record was old: the process is no longer checkpointed");
      }
      throw err;
    }
    if (check !== "checked") {
      await unclaim();
      return none(check === "skipped" ? "not checked" : check.unknown);
    }
    return {
      check,
      done: async (ok) => {
        if (ok) await this.forget(process);
        else await unclaim();
      },
    };
  }

  /** The one room check: throws a {@link GpuRoomError} where `need` does not fit beside claims. */
  async fits(
    need: Readonly<Record<string, number>>,
    where: RoomPlace,
    except?: ProcessIdentity,
  ): Promise<RoomCheck> {
    const claimed: Record<string, number> = {};
    let others: HeldRecord[];
    try {
      others = await this.#records().list();
    } catch (err) {
      throw roomUnknownError(where, err);
    }
    for (const other of others) {
      if (!other.claim || (except && sameProcess(other.process, except))) continue;
      for (const [gpu, mib] of Object.entries(other.claim.needMiB)) {
        if (Number.isFinite(mib) && mib >= 0) claimed[gpu] = (claimed[gpu] ?? 0) + mib;
      }
    }
    const report = await this.report();
    const free = report && "byPid" in report ? report.freeMiB : undefined;
    if (!free || free.size === 0) {
      return {
        unknown: report && "unknown" in report
          ? `the free GPU memory is unknown: ${report.unknown}`
          : "the host cannot tell free GPU memory",
      };
    }
    const freeOf = new Map([...free].map(([gpu, mib]) => [gpu.toLowerCase(), mib]));
    for (const [gpu, neededMiB] of Object.entries(need)) {
      const freeMiB = freeOf.get(gpu.toLowerCase());
      if (freeMiB === undefined) continue;
      const claimedMiB = claimed[gpu] ?? 0;
      if (neededMiB > freeMiB - claimedMiB) {
        throw new GpuRoomError({ ...where, shortage: { gpu, neededMiB, freeMiB, claimedMiB } });
      }
    }
    return "checked";
  }

  /** Before the calling process is locked: reads end, and NVML (which would wait) is let go. */
  async beforeSelfLock(): Promise<void> {
    this.#selfHeld = true;
    await Promise.allSettled([...this.#reads]);
    await this.#host?.release?.();
  }

  /** The calling process runs again (its unlock succeeded, or its lock failed). */
  selfRunning(): void {
    this.#selfHeld = false;
  }

  /** The record of the ended process criu brought back as `process` (the largest: safe). */
  async #cameBack(process: ProcessIdentity, records: HeldRecords): Promise<HeldRecord | undefined> {
    if (!records.ended) return undefined;
    const mark = await this.#host?.lastingMark?.(process).catch(() => undefined);
    if (!mark) return undefined;
    const total = (r: HeldRecord) => Object.values(r.heldMiB).reduce((a, b) => a + b, 0);
    const was = (await records.ended()).filter((r) => r.mark === mark)
      .sort((a, b) => total(b) - total(a) || b.at - a.at)[0];
    if (!was) return undefined;
    const moved: HeldRecord = { process, heldMiB: was.heldMiB, at: was.at, mark };
    await records.put(moved);
    await records.remove(was.process);
    return moved;
  }

  #records(): HeldRecords {
    return this.#host?.heldRecords ?? this.#ownRecords;
  }

  /** The host's GPU memory report; `undefined` while this process is held, or without a host. */
  async report(): Promise<GpuMemoryReport | undefined> {
    const host = this.#host;
    if (this.#selfHeld || !host?.gpuMemory) return undefined;
    const read = host.gpuMemory().catch((err): GpuMemoryReport => ({ unknown: messageOf(err) }));
    this.#reads.add(read);
    try {
      return await read;
    } finally {
      this.#reads.delete(read);
    }
  }
}

/** Where each GPU's memory goes: MiB by GPU, moved onto the mapping's new GPU where it has one. */
export function onto(
  heldMiB: Readonly<Record<string, number>>,
  pairs: readonly GpuPair[] | null,
): Record<string, number> {
  const to = new Map<string, string>();
  for (const p of pairs ?? []) {
    to.set(formatGpuUuid(p.oldUuid).toLowerCase(), formatGpuUuid(p.newUuid));
  }
  const need: Record<string, number> = {};
  for (const [gpu, mib] of Object.entries(heldMiB)) {
    const target = to.get(gpu.toLowerCase()) ?? gpu;
    need[target] = (need[target] ?? 0) + mib;
  }
  return need;
}
