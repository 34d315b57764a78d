/**
 * Finding the CUDA processes of a machine: the host says which processes exist, which map
 * libcuda and what GPU memory each holds; the driver has the last word on which are CUDA
 * processes, and gives their state and restore thread.
 *
 * @module
 */

import { callDriver, checkCapability, readState } from "./calls.ts";
import { messageOf } from "./errors.ts";
import type { GpuMemory, GpuMemoryReport, ScannedProcess } from "./host.ts";
import type { Machine } from "./machine.ts";
import { checkChoice, checkPid, flag, type Settings } from "./options.ts";
import { isGone, refuseStopped, sessionOf } from "./process.ts";
import type { ProcessState } from "./states.ts";

/** Options of `listCudaProcesses`. */
export interface ListCudaProcessesOptions {
  /** The machine whose processes are listed; this machine when left out. */
  machine?: Machine;
  /**
   * `"libcuda"` (the default): the driver is asked about processes that map libcuda, as every CUDA
   * process does; `"all"`: about every process (for a libcuda under another name).
   */
  candidates?: "libcuda" | "all";
  /** Whether to ask the host for GPU memory (NVML on Linux). Default true. */
  gpuMemory?: boolean;
}

/** A CUDA process, as `listCudaProcesses` reports it. */
export interface CudaProcessInfo {
  /** Its process id (never one of its other thread ids). */
  readonly pid: number;
  /** Its checkpoint state (`cuCheckpointProcessGetState`). */
  readonly state: ProcessState;
  /** The thread it is restored from (`cuCheckpointProcessGetRestoreThreadId`), where given. */
  readonly restoreThreadId?: number;
  /** Its command line, arguments joined by spaces; left out where it could not be read. */
  readonly command?: string;
  /**
   * GPU memory it holds in MiB by GPU UUID, its context included (`{}` when checkpointed);
   * `"unknown"` where the host cannot tell ({@link CudaProcessListing.gpuMemoryUnknown}).
   */
  readonly gpuMemory: GpuMemory;
}

/**
 * A process that could not be looked at, or about which the driver gave no clear answer: its
 * command line where it could be read, and why it is not known whether it is a CUDA process.
 */
export type UninspectedProcess = Readonly<{ pid: number; command?: string; reason: string }>;

/** What `listCudaProcesses` found. */
export interface CudaProcessListing {
  /** The CUDA processes, by pid. */
  readonly processes: readonly CudaProcessInfo[];
  /** The processes that could not be looked at (and may be CUDA processes), by pid. */
  readonly uninspectable: readonly UninspectedProcess[];
  /** Why GPU memory is `"unknown"`, where it is for every process (no NVML, not asked, ...). */
  readonly gpuMemoryUnknown?: string;
  /** How many processes the host found. */
  readonly scanned: number;
  /** How many of them the driver was asked about. */
  readonly asked: number;
}

/** The options of `listCudaProcesses` and their checks, for `checkTable` where they enter. */
export const LIST_OPTIONS = {
  candidates: (v: unknown) =>
    v === undefined ? "libcuda" : checkChoice(v, "candidates", ["libcuda", "all"] as const),
  gpuMemory: flag(true),
};
type ListSettings = Settings<typeof LIST_OPTIONS>;

/** The host's GPU memory report, through the room guard (none while this program is held). */
export async function askGpuMemory(machine: Machine, wanted = true): Promise<GpuMemoryReport> {
  const host = machine.host;
  if (!wanted) return { unknown: "GPU memory was not asked for (gpuMemory: false)" };
  if (!host?.gpuMemory) return { unknown: `the ${host?.kind} host cannot tell GPU memory` };
  return await sessionOf(machine).room.report() ??
    { unknown: "this process is locked or checkpointed itself, and NVML would wait for it" };
}

/** Lists the CUDA processes of `machine` (`listCudaProcesses` of the main module). */
export async function listOn(machine: Machine, o: ListSettings): Promise<CudaProcessListing> {
  const { driver, host } = machine;
  await checkCapability(driver, "getState", undefined);
  if (!host) throw new Error(`No host to list processes of: this ${driver.kind} machine has none`);
  // NVML's start-up runs while /proc is read and the driver is asked.
  const memory = askGpuMemory(machine, o.gpuMemory);
  const scanned = await host.scan();
  const uninspectable: UninspectedProcess[] = [], candidates: ScannedProcess[] = [];
  for (const p of scanned) {
    checkPid(p?.pid, `a pid from the ${host.kind} host's scan`);
    const reason = p.notInspectable ??
      (p.cudaLibrary === undefined ? "the host could not tell whether it maps libcuda" : undefined);
    if (reason !== undefined) uninspectable.push(withCommand(p, { pid: p.pid, reason }));
    else if (p.cudaLibrary || o.candidates === "all") candidates.push(p);
  }
  // A process that never initialised CUDA, or is gone since the scan, is no CUDA process (now).
  const answers = await Promise.all(candidates.map(async (p) => {
    const [state, tid] = await Promise.allSettled([
      refuseStopped(machine, "getState", p.pid).then(() => readState(driver, p.pid)),
      callDriver(driver, "getRestoreThreadId", p.pid),
    ]);
    return { scanned: p, state, tid };
  }));
  const report = await memory;
  const processes: CudaProcessInfo[] = [];
  const gone = (r: PromiseSettledResult<unknown>) => r.status === "rejected" && isGone(r.reason);
  for (const { scanned: p, state, tid } of answers) {
    if (gone(state) || gone(tid)) continue;
    if (state.status === "rejected") {
      uninspectable.push(withCommand(p, { pid: p.pid, reason: messageOf(state.reason) }));
      continue;
    }
    processes.push(withCommand(p, {
      pid: p.pid,
      state: state.value,
      ...(tid.status === "fulfilled" ? { restoreThreadId: tid.value } : {}),
      gpuMemory: "byPid" in report ? report.byPid.get(p.pid) ?? {} : "unknown",
    }));
  }
  const byPid = (a: { pid: number }, b: { pid: number }) => a.pid - b.pid;
  return {
    processes: processes.sort(byPid),
    uninspectable: uninspectable.sort(byPid),
    ...("unknown" in report ? { gpuMemoryUnknown: report.unknown } : {}),
    scanned: scanned.length,
    asked: candidates.length,
  };
}

/** `record` with the scanned process's command line, where it has one. */
const withCommand = <T extends object>(p: ScannedProcess, record: T): T & { command?: string } =>
  p.command === undefined ? record : { ...record, command: p.command };
