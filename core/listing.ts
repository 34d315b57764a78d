/**
 * Finding the CUDA processes of a machine: {@link listCudaProcesses}. A host (`core/host.ts`)
 * says which processes exist, which of them have the CUDA driver library mapped, which could not
 * be looked at, and how much GPU memory each holds; the driver has the last word on which are CUDA
 * processes (`cuCheckpointProcessGetState`), and gives their state and restore thread.
 *
 * @module
 */

import { CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_OPERATING_SYSTEM, CUDA_SUCCESS } from "./codes.ts";
import type { DriverResult, GpuInfo } from "./driver.ts";
import { driverError } from "./errors.ts";
import { C_FUNCTIONS, unsupportedError } from "./gate.ts";
import type { GpuMemory, GpuMemoryReport, HostProcesses, ScannedProcess } from "./host.ts";
import { checkChoice, checkFlag, checkOptions, checkPid } from "./options.ts";
import { checkSource, currentDefaultSource, type DriverSource, lease } from "./sources.ts";
import { type ProcessState, stateName } from "./states.ts";
import { describeValue } from "./uuid.ts";

/** Which processes the driver is asked about. */
export type CandidateRule = "libcuda" | "all";

/** Options of {@link listCudaProcesses}. */
export interface ListCudaProcessesOptions {
  /**
   * The driver that confirms each process and gives its state; the default driver when left out
   * (a lease, let go of when the listing ends). A driver given as an object stays open.
   */
  driver?: DriverSource;
  /**
   * Where the processes come from. Left out: the driver's own ({@link CheckpointDriver.hostProcesses},
   * the simulator's), else the machine's (`/proc` and NVML, installed by the main module), opened
   * for this listing and closed after it. A host given here is the caller's to close.
   */
  host?: HostProcesses;
  /**
   * `"libcuda"` (the default): the driver is asked only about processes with the CUDA driver
   * library mapped; a CUDA process always has it, checkpointed or not. `"all"`: about every process
   * that could be looked at (hundreds of driver calls; for a libcuda under another file name).
   */
  candidates?: CandidateRule;
  /** Whether to ask the host for GPU memory (NVML on Linux). Default true. */
  gpuMemory?: boolean;
}

/** A CUDA process, as {@link listCudaProcesses} reports it. */
export interface CudaProcessInfo {
  /** Its process id (never one of its other thread ids). */
  readonly pid: number;
  /** Its checkpoint state (`cuCheckpointProcessGetState`); `"unknown"` for a number this package does not know. */
  readonly state: ProcessState | "unknown";
  /** The thread to restore it from (`cuCheckpointProcessGetRestoreThreadId`), where the driver gave one. */
  readonly restoreThreadId?: number;
  /** Its command line, arguments joined by spaces; left out where it could not be read. */
  readonly command?: string;
  /**
   * GPU memory it holds, in MiB by GPU UUID (`GPU-…`), its CUDA context included; a GPU it holds
   * none on is left out (`{}` for a checkpointed process). `"unknown"` where the host cannot tell
   * ({@link CudaProcessListing.gpuMemoryUnknown} says why).
   */
  readonly gpuMemory: GpuMemory;
}

/** A process that could not be looked at, or about which the driver gave no clear answer. */
export interface UninspectedProcess {
  /** Its process id. */
  readonly pid: number;
  /** Its command line, where it could be read. */
  readonly command?: string;
  /** Why it is not known whether it is a CUDA process. */
  readonly reason: string;
}

/** What {@link listCudaProcesses} found. */
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

/** Checks the options; throws a TypeError naming what is wrong. */
function checkListOptions(options: ListCudaProcessesOptions | undefined): ListCudaProcessesOptions {
  const o = checkOptions(options, "listCudaProcesses", [
    "driver",
    "host",
    "candidates",
    "gpuMemory",
  ]);
  if (o.driver !== undefined) checkSource(o.driver, "listCudaProcesses's driver");
  if (o.candidates !== undefined) checkChoice(o.candidates, "candidates", ["libcuda", "all"]);
  checkFlag(o.gpuMemory, "gpuMemory", true);
  checkHost(o.host, "listCudaProcesses's host");
  return o;
}

/** Checks a host option, where given: an object with a `scan()` method. */
export function checkHost(host: unknown, what: string): void {
  if (
    host !== undefined &&
    (typeof host !== "object" || host === null ||
      typeof (host as HostProcesses).scan !== "function")
  ) {
    throw new TypeError(
      `${what} must be an object with a scan() method, got ${describeValue(host)}`,
    );
  }
}

/** The host's GPU memory report, never rejecting: a failure becomes the reason it is unknown. */
export async function askGpuMemory(host: HostProcesses, wanted: boolean): Promise<GpuMemoryReport> {
  if (!wanted) return { unknown: "GPU memory was not asked for (gpuMemory: false)" };
  if (!host.gpuMemory) return { unknown: `the ${host.kind} host cannot tell GPU memory` };
  try {
    return await host.gpuMemory();
  } catch (error) {
    return { unknown: error instanceof Error ? error.message : String(error) };
  }
}

/** What the driver said of one candidate. */
interface Confirmation {
  readonly scanned: ScannedProcess;
  readonly state: DriverResult;
  readonly tid: DriverResult;
}

/**
 * Lists the CUDA processes of the machine: the host's processes (from `/proc` by default, or the
 * simulator's), the candidates among them confirmed by the driver, each with its state, restore
 * thread id, command line and GPU memory per GPU. Thread ids fold into their process. A process
 * the driver says never initialised CUDA (`CUDA_ERROR_NOT_INITIALIZED`: it may have the library
 * loaded) or that has ended (`CUDA_ERROR_OPERATING_SYSTEM`) is left out; a process that merely
 * called `cuInit` counts as a CUDA process, as the driver counts it. Processes that could not be
 * looked at are reported in `uninspectable`, with the reason, not skipped.
 *
 * The driver calls for all candidates are made at once, off the main thread on the native
 * driver. A process being checkpointed or restored answers when that ends (the driver makes
 * `cuCheckpointProcessGetState` wait), so the listing may take that long. A program that has
 * checkpointed itself should not list with GPU memory until it is restored: NVML waits for that
 * restore (measured on two H200s); pass `gpuMemory: false`, or list from another process.
 *
 * @throws {CheckpointUnsupportedError} (as a rejection) when the driver has no
 * `cuCheckpointProcessGetState` (a driver older than 570).
 * @throws {TypeError} (as a rejection) for an option that is not one, naming it.
 *
 * @example
 * ```ts
 * import { listCudaProcesses } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * await using sim = new SimulatedDriver({ gpus: 2 });
 * sim.spawn({ memoryMiB: 1024, command: "python train.py" });
 * const { processes } = await listCudaProcesses({ driver: sim });
 * console.log(processes[0].state, processes[0].command, processes[0].gpuMemory);
 * // "running" "python train.py" { "GPU-…": 1544 }
 * ```
 */
export async function listCudaProcesses(
  options?: ListCudaProcessesOptions,
): Promise<CudaProcessListing> {
  const o = checkListOptions(options);
  const taken = lease(o.driver ?? currentDefaultSource());
  try {
    const session = await taken.session;
    const driver = session.driver;
    const missing = C_FUNCTIONS.getState;
    if (driver.missingFunctions?.includes(missing)) {
      throw unsupportedError("getState", undefined, await driver.driverVersion(), { missing });
    }
    const host = o.host ?? await session.host();
    if (!host) {
      throw new Error(
        `No host to list processes of: this ${driver.kind} driver has none of its own; pass ` +
          `{ host }, or import listCudaProcesses from @ckpt/cuda's main module, which makes the ` +
          `machine's own (/proc) the default`,
      );
    }
    // NVML's start-up runs while /proc is read and the driver is asked.
    const memory = askGpuMemory(host, o.gpuMemory ?? true);
    const scanned = await host.scan();
    const rule = o.candidates ?? "libcuda";
    const uninspectable: UninspectedProcess[] = [];
    const candidates: ScannedProcess[] = [];
    for (const p of scanned) {
      checkPid(p?.pid, `a pid from the ${host.kind} host's scan`);
      if (p.notInspectable !== undefined || p.cudaLibrary === undefined) {
        uninspectable.push(withCommand(p, {
          pid: p.pid,
          reason: p.notInspectable ?? "the host could not tell whether it maps libcuda",
        }));
      } else if (p.cudaLibrary || rule === "all") {
        candidates.push(p);
      }
    }
    const answers: Confirmation[] = await Promise.all(candidates.map(async (p) => {
      const [state, tid] = await Promise.all([
        driver.getState(p.pid),
        driver.getRestoreThreadId(p.pid),
      ]);
      return { scanned: p, state, tid };
    }));
    const report = await memory;
    const processes: CudaProcessInfo[] = [];
    for (const { scanned: p, state, tid } of answers) {
      const codes = [state.code, tid.code];
      // Never initialised CUDA, or gone since the scan: not a CUDA process (now).
      if (codes.includes(CUDA_ERROR_OPERATING_SYSTEM)) continue;
      if (state.code === CUDA_ERROR_NOT_INITIALIZED) continue;
      if (state.code !== CUDA_SUCCESS) {
        uninspectable.push(withCommand(p, {
          pid: p.pid,
          reason: driverError(driver, state.code, { operation: "getState", pid: p.pid })!.message,
        }));
        continue;
      }
      processes.push(withCommand(p, {
        pid: p.pid,
        state: stateName(state.value) ?? "unknown",
        ...(tid.code === CUDA_SUCCESS ? { restoreThreadId: tid.value } : {}),
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
  } finally {
    await taken.release();
  }
}

/** `record` with the scanned process's command line, where it has one. */
function withCommand<T extends object>(p: ScannedProcess, record: T): T & { command?: string } {
  return p.command === undefined ? record : { ...record, command: p.command };
}

/** Options of {@link listGpus}. */
export interface ListGpusOptions {
  /** The driver to ask; the default driver when left out. */
  driver?: DriverSource;
}

/**
 * Every GPU the driver sees, by ordinal, with its UUID and chip: what a GPU mapping for
 * `restore({ gpuMapping })` is built from (`cuDeviceGet`, `cuDeviceGetUuid`, `cuDeviceGetName`).
 *
 * @throws {Error} (as a rejection) when the driver cannot list its GPUs.
 *
 * @example
 * ```ts
 * import { listGpus } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const gpus = await listGpus({ driver: new SimulatedDriver({ gpus: 2 }) });
 * const swapped = { [gpus[0].uuid]: gpus[1].uuid, [gpus[1].uuid]: gpus[0].uuid };
 * ```
 */
export async function listGpus(options?: ListGpusOptions): Promise<readonly GpuInfo[]> {
  const o = checkOptions(options, "listGpus", ["driver"]);
  if (o.driver !== undefined) checkSource(o.driver, "listGpus's driver");
  const taken = lease(o.driver ?? currentDefaultSource());
  try {
    const driver = (await taken.session).driver;
    if (!driver.listGpus) throw new Error(`this ${driver.kind} driver cannot list its GPUs`);
    return await driver.listGpus();
  } finally {
    await taken.release();
  }
}
