/**
 * Room for a restore, checked before the driver is asked.
 *
 * On driver 580 a restore that runs out of GPU memory is not the end of one call: the driver keeps
 * reporting the process checkpointed, but refuses every later restore of it, in place or onto
 * another GPU, even once memory is free (`CUDA_ERROR_OPERATING_SYSTEM`, measured on two H200s,
 * tests/gpu/reports/oom-probe-2xh200.txt). The process's GPU state is then lost. So this package
 * remembers the GPU memory a process held when it checkpointed it (from the host: NVML on Linux),
 * and before a restore compares it with the free memory of the GPUs it would go to, less what
 * other restores under way through this package are about to take there. Too little, and the
 * restore is refused with a {@link GpuRoomError} without a driver call: the process stays
 * checkpointed, and can be resumed once there is room.
 *
 * Nothing is checked where nothing is known: a process this package did not checkpoint (another
 * program, an earlier run of the command line), a host that cannot tell GPU memory, or this very
 * process (NVML waits in a program that has checkpointed itself).
 */

import type { CheckpointDriver, GpuPair } from "./driver.ts";
import { CudaError } from "./errors.ts";
import { askGpuMemory, chooseHost, type GpuMemoryReport, type HostProcesses } from "./listing.ts";
import { CUDA_ERROR_OUT_OF_MEMORY } from "./codes.ts";
import { formatGpuUuid } from "./uuid.ts";

/** Where a restore would not fit: what {@link GpuRoomError} carries. */
export interface RoomShortage {
  /** The GPU (UUID, `GPU-…`) without room. */
  readonly gpu: string;
  /** The GPU memory the process held there (or on the GPU mapped there) when checkpointed, MiB. */
  readonly neededMiB: number;
  /** The GPU's free memory when checked, MiB. */
  readonly freeMiB: number;
  /** GPU memory that other restores under way through this package are about to take there, MiB. */
  readonly pendingMiB: number;
}

/**
 * A restore refused before the driver was asked: the GPUs it would go to have less free memory
 * than the process held when it was checkpointed. Its `code` is `CUDA_ERROR_OUT_OF_MEMORY`, as the
 * driver's own would be, but nothing happened to the process: it is still checkpointed and can be
 * resumed once there is room (free GPU memory there, or restore onto other GPUs with
 * `gpuMapping`). A restore the driver itself runs out of memory in leaves the process unrestorable
 * on driver 580, hence the check; `checkRoom: false` skips it.
 *
 * @example
 * ```ts
 * import { CudaProcess, GpuRoomError } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver();
 * const proc = new CudaProcess(sim.spawn({ memoryMiB: 4096 }).pid, { driver: sim });
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
export class GpuRoomError extends CudaError {
  /** The GPU without room, what was needed there and what was free. */
  readonly shortage: RoomShortage;

  /** Makes the error for `pid`'s restore. */
  constructor(init: { operation: "restore"; pid: number; shortage: RoomShortage }) {
    const s = init.shortage;
    const pending = s.pendingMiB > 0
      ? `, ${mib(s.pendingMiB)} of it about to be taken by other restores under way`
      : "";
    super({
      code: CUDA_ERROR_OUT_OF_MEMORY,
      operation: init.operation,
      pid: init.pid,
      description: "not enough free GPU memory, found before asking the driver",
      state: "checkpointed",
      detail: `it held ${mib(s.neededMiB)} for ${s.gpu} when it was checkpointed, and that GPU ` +
        `has ${mib(s.freeMiB)} free${pending}. Nothing was asked of the driver, and the ` +
        `process can be resumed once there is room: free GPU memory there, or resume onto other ` +
        `GPUs with gpuMapping. (A restore that runs out of GPU memory inside the driver leaves ` +
        `the process unrestorable on driver 580, so the room is checked first; checkRoom: false ` +
        `skips the check)`,
    });
    this.name = "GpuRoomError";
    this.shortage = s;
  }
}

function mib(n: number): string {
  return `${Math.round(n)} MiB`;
}

/** What each process held when this package checkpointed it, by driver and pid: MiB by GPU UUID. */
const held = new WeakMap<CheckpointDriver, Map<number, Readonly<Record<string, number>>>>();

/**
 * A restore's claim on GPU memory: from its check until the host's reports show what it took.
 * `doneAfter` is the number of the last report started before the restore returned: a report
 * numbered above it started after, and sees the memory itself.
 */
interface Claim {
  readonly need: ReadonlyMap<string, number>;
  doneAfter?: number;
}

/** What each driver's restores under way (or just done) claim. */
const claims = new WeakMap<CheckpointDriver, Set<Claim>>();

/** A report of the host's GPU memory, numbered in the order the reports were started. */
interface NumberedReport {
  readonly report: Extract<GpuMemoryReport, { byPid: unknown }> | undefined;
  readonly number: number;
}

/** The report under way, per driver: asks made meanwhile share it. */
const reading = new WeakMap<CheckpointDriver, Promise<NumberedReport>>();
const started = new WeakMap<CheckpointDriver, number>();

/** The GPU memory `pid` held when this package checkpointed it, where known. */
export function heldWhenCheckpointed(
  driver: CheckpointDriver,
  pid: number,
): Readonly<Record<string, number>> | undefined {
  return held.get(driver)?.get(pid);
}

/** Forgets what `pid` held (it was restored, or is gone). */
export function forgetHeld(driver: CheckpointDriver, pid: number): void {
  held.get(driver)?.delete(pid);
}

/**
 * The machine's host (`/proc` and NVML), opened for the first ask and kept while asks come: let go
 * of once none has come for {@link KEEP_HOST_MS}, so that a run of suspends and resumes loads NVML
 * once. Its timer does not keep a program alive.
 */
let kept: Promise<HostProcesses> | undefined;
let keptClose: (() => Promise<void>) | undefined;
let keptUsers = 0;
let keptTimer: ReturnType<typeof setTimeout> | undefined;
const KEEP_HOST_MS = 5000;

/** Runs `ask` with the driver's own host (the simulator's), else the machine's, kept a while. */
async function withHost<T>(
  driver: CheckpointDriver,
  ask: (host: HostProcesses) => Promise<T>,
): Promise<T> {
  const own = driver.hostProcesses?.();
  if (own) return await ask(own);
  if (keptTimer !== undefined) clearTimeout(keptTimer);
  keptTimer = undefined;
  keptUsers++;
  const opening = kept ??= chooseHost({}, driver).then(({ host, opened }) => {
    keptClose = async () => await opened?.close?.();
    return host;
  });
  try {
    return await ask(await opening);
  } catch (err) {
    if (kept === opening) kept = undefined;
    throw err;
  } finally {
    keptUsers--;
    if (keptUsers === 0 && kept === opening) {
      keptTimer = setTimeout(letGoOfHost, KEEP_HOST_MS);
      unrefTimer(keptTimer);
    }
  }
}

function letGoOfHost(): Promise<void> {
  if (keptTimer !== undefined) clearTimeout(keptTimer);
  keptTimer = undefined;
  const close = keptClose;
  kept = undefined;
  keptClose = undefined;
  return Promise.resolve(close?.()).catch(() => {});
}

/**
 * Whether this package may be holding the calling process locked or checkpointed: from just
 * before a lock of its own pid until an unlock of it succeeds (or the lock fails). NVML called in
 * a process that is checkpointed waits for that process's restore, which the program would make
 * only after the call returned; so no read starts meanwhile, and nothing is checked.
 */
let selfHeld = false;
/** Reads under way, of every driver: a lock of the calling process waits for them. */
const underWay = new Set<Promise<unknown>>();

/**
 * Before this package locks the calling process: no read starts from now on, the reads under way
 * end first, and the machine's host lets go of NVML (nothing of it stays initialised in a process
 * that is about to be checkpointed).
 */
export async function beforeSelfLock(): Promise<void> {
  selfHeld = true;
  await Promise.allSettled([...underWay]);
  if (keptUsers === 0) await letGoOfHost();
}

/** The calling process runs again (its unlock succeeded, or its lock failed): reads may start. */
export function selfRunning(): void {
  selfHeld = false;
}

/** Lets a timer not keep the program alive: Node's and Bun's `unref`, Deno's `unrefTimer`. */
function unrefTimer(timer: ReturnType<typeof setTimeout>): void {
  const t = timer as unknown as { unref?: () => void };
  if (typeof t.unref === "function") return t.unref();
  const deno = (globalThis as { Deno?: { unrefTimer?: (id: number) => void } }).Deno;
  if (typeof timer === "number") deno?.unrefTimer?.(timer);
}

/**
 * The host's GPU memory report (one NVML session on Linux), shared by the asks made while it is
 * read; its report is `undefined` where there is none (no host, no NVML); never rejects.
 */
function memoryReport(driver: CheckpointDriver): Promise<NumberedReport> {
  if (selfHeld) return Promise.resolve({ report: undefined, number: started.get(driver) ?? 0 });
  let under = reading.get(driver);
  if (!under) {
    const number = (started.get(driver) ?? 0) + 1;
    started.set(driver, number);
    under = (async () => {
      try {
        const r = await withHost(driver, (host) => askGpuMemory(host, true));
        return { report: "byPid" in r ? r : undefined, number };
      } catch {
        return { report: undefined, number };
      } finally {
        reading.delete(driver);
      }
    })();
    reading.set(driver, under);
    const tracked = under;
    underWay.add(tracked);
    void tracked.finally(() => underWay.delete(tracked));
  }
  return under;
}

/**
 * The GPU memory report to use now: from `host` where the caller names one, else the driver's own
 * host or the machine's (shared, kept); `undefined` where the host cannot tell, and while this
 * package holds the calling process (NVML would wait there). Never rejects.
 */
export async function gpuMemoryNow(
  driver: CheckpointDriver,
  host?: HostProcesses,
): Promise<NumberedReport["report"]> {
  if (!host) return (await memoryReport(driver)).report;
  if (selfHeld) return undefined;
  const asked = askGpuMemory(host, true);
  underWay.add(asked);
  try {
    const r = await asked;
    return "byPid" in r ? r : undefined;
  } finally {
    underWay.delete(asked);
  }
}

/**
 * What `pid` holds now, for {@link rememberHeld} once its checkpoint succeeds; `undefined` where
 * the host cannot tell, and for this very process (NVML waits in a process that has checkpointed
 * itself, and its resume would ask).
 */
export async function heldNow(
  driver: CheckpointDriver,
  pid: number,
): Promise<Readonly<Record<string, number>> | undefined> {
  if (isOwnPid(pid)) return undefined;
  const { report } = await memoryReport(driver);
  const memory = report?.byPid.get(pid);
  if (memory === undefined || memory === "unknown") return undefined;
  return Object.values(memory).some((m) => m > 0) ? memory : undefined;
}

/** Remembers what `pid` held when it was checkpointed. */
export function rememberHeld(
  driver: CheckpointDriver,
  pid: number,
  memory: Readonly<Record<string, number>>,
): void {
  let byPid = held.get(driver);
  if (!byPid) held.set(driver, byPid = new Map());
  byPid.set(pid, memory);
}

/**
 * Checks that a restore of `pid` (onto the GPUs `pairs` name, or where it was) fits, less what
 * other restores under way claim, and claims the room until the returned function is called (when
 * the restore has returned). Throws a {@link GpuRoomError} where it does not fit. Where nothing is
 * known, checks nothing.
 */
export async function reserveRoom(
  driver: CheckpointDriver,
  pid: number,
  pairs: readonly GpuPair[] | null,
): Promise<() => void> {
  const was = heldWhenCheckpointed(driver, pid);
  if (!was) return () => {};
  const { report, number } = await memoryReport(driver);
  const free = report?.freeMiB;
  if (!free || free.size === 0) return () => {};
  // Where each GPU's memory goes: the mapping's new GPU, else the same one.
  const to = new Map<string, string>();
  for (const p of pairs ?? []) to.set(formatGpuUuid(p.oldUuid), formatGpuUuid(p.newUuid));
  const need = new Map<string, number>();
  for (const [gpu, mib] of Object.entries(was)) {
    const target = to.get(gpu) ?? gpu;
    need.set(target, (need.get(target) ?? 0) + mib);
  }
  let all = claims.get(driver);
  if (!all) claims.set(driver, all = new Set());
  // A claim counts until a report started after its restore returned: this one, if numbered
  // above. One report more is kept, for asks that shared the report before this one.
  const claimed = new Map<string, number>();
  for (const c of all) {
    if (c.doneAfter !== undefined && c.doneAfter < number - 1) {
      all.delete(c);
      continue;
    }
    if (c.doneAfter !== undefined && c.doneAfter < number) continue;
    for (const [gpu, mib] of c.need) claimed.set(gpu, (claimed.get(gpu) ?? 0) + mib);
  }
  for (const [gpu, neededMiB] of need) {
    const freeMiB = free.get(gpu);
    if (freeMiB === undefined) continue;
    const pendingMiB = claimed.get(gpu) ?? 0;
    if (neededMiB > freeMiB - pendingMiB) {
      throw new GpuRoomError({
        operation: "restore",
        pid,
        shortage: { gpu, neededMiB, freeMiB, pendingMiB },
      });
    }
  }
  const claim: Claim = { need };
  all.add(claim);
  return () => {
    claim.doneAfter ??= started.get(driver) ?? 0;
  };
}

/** Whether `pid` is this very process (NVML would wait for its own restore). */
export function isOwnPid(pid: number): boolean {
  const g = globalThis as { process?: { pid?: number }; Deno?: { pid?: number } };
  return pid === (g.process?.pid ?? g.Deno?.pid);
}
