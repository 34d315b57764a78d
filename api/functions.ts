/**
 * The public functions: many processes at once, listings, and snapshots to disk and back. Each
 * checks its input once, here, and runs on the machine given, or on this machine, opened for the
 * call and let go of after it.
 *
 * @module
 */

import { CudaProcess, handleOf, machineOf } from "./cuda_process.ts";
import type { RestoreSnapshotOptions, RestoreSnapshotResult } from "../core/snapshot/restore.ts";
import type { SnapshotOptions, SnapshotResult } from "../core/snapshot/take.ts";
import type { GpuInfo } from "../core/driver.ts";
import { checkRestoreArgs, inspectIn, restoreFrom } from "../core/snapshot/restore.ts";
import { runGroup as runOn } from "../core/group.ts";
import {
  checkGroupOptions,
  type GroupEvent,
  type GroupOptions,
  type GroupResult,
} from "../core/group_types.ts";
import {
  checkListOptions,
  type CudaProcessListing,
  type ListCudaProcessesOptions,
  listOn,
} from "../core/listing.ts";
import { type Machine, withMachine } from "../core/machine.ts";
import type { Manifest } from "../core/snapshot/manifest.ts";
import { checkChoice, checkFlag, checkFunction, checkOptions } from "../core/options.ts";
import { recoverFrom, type RecoverResult } from "../core/snapshot/recover.ts";
import { type Action, ACTIONS } from "../core/states.ts";
import { checkSnapshotArgs, takeSnapshot } from "../core/snapshot/take.ts";
import { checkDir } from "../core/snapshot/run.ts";
import { storeOf } from "../os/snapshot_store.ts";

/**
 * Runs `action` (a step: `lock`, `checkpoint`, `restore`, `unlock`; or a goal: `suspend`,
 * `resume`, `toggle`) on every target at once (or `concurrency` at a time), and resolves to what
 * happened to each; it rejects only for bad input. A goal reads each process's state and makes the
 * steps the state table plans from there (a suspend of a locked process only checkpoints it; one
 * already where the goal leads is `unchanged`); a step is made as asked, and the driver has the
 * last word on it. A process whose step fails is brought back to its initial state where the
 * steps it made can be undone, and with `allOrNothing` so is every other; `job` orders the whole
 * group as one job (every lock before any checkpoint, every restore before any unlock).
 *
 * @example
 * ```ts
 * import { runGroup } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const pids = [sim.spawn({ memoryMiB: 4096 }).pid, sim.spawn({ memoryMiB: 4096 }).pid];
 * const result = await runGroup("suspend", pids, { machine: sim, allOrNothing: true });
 * console.log(result.ok, result.processes.map((p) => p.status)); // true [ "done", "done" ]
 * ```
 */
export function runGroup(
  action: Action,
  targets: readonly (number | CudaProcess)[],
  options?: GroupOptions,
): Promise<GroupResult> {
  try {
    checkChoice(action, "action", ACTIONS);
    const settings = checkGroupOptions(options);
    const source = machineOf(options?.machine, "runGroup");
    // Each CudaProcess acts through its own handle (its machine, its order, its process); the
    // rest is checked by the group, naming it.
    const given = Array.isArray(targets)
      ? targets.map((t) => t instanceof CudaProcess ? handleOf(t) : t as number)
      : targets as unknown as number[];
    return runOn(source, action, given, settings);
  } catch (err) {
    return Promise.reject(err);
  }
}

/**
 * Lists the CUDA processes of the machine: the host's processes (from `/proc` on this machine),
 * the candidates among them confirmed by the driver, each with its state, restore thread id,
 * command line and GPU memory per GPU. Thread ids fold into their process. A process the driver
 * says never initialised CUDA (`CUDA_ERROR_NOT_INITIALIZED`: it may have the library loaded) or
 * that has ended (`CUDA_ERROR_OPERATING_SYSTEM`) is left out; a process that merely called
 * `cuInit` counts as a CUDA process, as the driver counts it. Processes that could not be looked
 * at are reported in `uninspectable`, with the reason, not skipped.
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
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * await using sim = new SimulatedMachine({ gpus: 2 });
 * sim.spawn({ memoryMiB: 1024, command: "python train.py" });
 * const { processes } = await listCudaProcesses({ machine: sim });
 * console.log(processes[0].state, processes[0].command, processes[0].gpuMemory);
 * // "running" "python train.py" { "GPU-…": 1544 }
 * ```
 */
export async function listCudaProcesses(
  options?: ListCudaProcessesOptions,
): Promise<CudaProcessListing> {
  const settings = checkListOptions(options);
  return await withMachine(
    machineOf(options?.machine, "listCudaProcesses"),
    (machine) => listOn(machine, settings),
  );
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
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const gpus = await listGpus({ machine: new SimulatedMachine({ gpus: 2 }) });
 * const swapped = { [gpus[0].uuid]: gpus[1].uuid, [gpus[1].uuid]: gpus[0].uuid };
 * console.log(swapped); // a gpuMapping that swaps the two GPUs
 * ```
 */
export async function listGpus(options?: { machine?: Machine }): Promise<readonly GpuInfo[]> {
  const o = checkOptions(options, "listGpus", ["machine"]);
  return await withMachine(machineOf(o.machine, "listGpus"), async ({ driver }) => {
    if (!driver.listGpus) throw new Error(`this ${driver.kind} driver cannot list its GPUs`);
    return await driver.listGpus();
  });
}

/**
 * Takes a snapshot of the process trees rooted at `roots` into `dir` (a new, or empty, private
 * directory): suspends every CUDA process of the trees (as one job with `job`), has criu dump the
 * trees, writes a manifest (docs/SNAPSHOTS.md) and ends the processes (or lets them go on,
 * `leaveRunning`). Resolves once the manifest is written and the processes are ended. A failure
 * at any point before the end puts every process back as it was, running, and says so.
 *
 * @throws {RefusedError} (as a rejection) before anything changes: code `PREREQUISITE` (no engine,
 * not root, a kernel feature missing, a pid that is no process), `STATE` (a CUDA process that is
 * locked or failed), `SNAPSHOT` (a directory that cannot be used), `UNSUPPORTED`.
 * @throws {SnapshotError} (as a rejection) when a part fails after things began to change; every
 * process was put back as it was, and the error says so.
 * @throws {TypeError} or {RangeError} for bad input, naming it.
 *
 * @example
 * ```ts
 * import { restoreSnapshot, snapshot } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine(); // without it: this machine's driver and criu, as root
 * const job = sim.spawn({ memoryMiB: 1024 });
 * const dir = "/var/lib/snapshots/job-1"; // a new (or empty) directory
 * await snapshot([job.pid], dir, { machine: sim }); // the process is on disk, and ended
 * await restoreSnapshot(dir, { machine: sim }); // back, with its pid and its GPU memory
 * ```
 */
export async function snapshot(
  roots: readonly number[],
  dir: string,
  options?: SnapshotOptions,
): Promise<SnapshotResult> {
  const args = checkSnapshotArgs(roots, dir, options);
  return await withMachine(
    machineOf(options?.machine, "snapshot"),
    (machine) => takeSnapshot(machine, args.roots, args.dir, args.settings),
  );
}

/**
 * Restores the snapshot in `dir`. Everything is checked before anything changes (criu, root, the
 * driver, every pid free, GPUs of the same chip with room); then criu brings the trees back, and
 * the CUDA processes are restored onto the GPUs, in place or elsewhere, and unlocked. Resolves once
 * every process is back with its pid, its CUDA processes running again (those that were running
 * when the snapshot was taken).
 *
 * @throws {RefusedError} (as a rejection) before anything changes: code `SNAPSHOT` (not a snapshot,
 * corrupt, truncated, files changed), `PREREQUISITE` (no engine, not root, another driver),
 * `PID_TAKEN`, `MAPPING` (no GPU of the same chip, a mapping that cannot work), `NO_ROOM` (a
 * `GpuRoomError`).
 * @throws {SnapshotError} (as a rejection) when a part fails after things began to change: the
 * engine's restore (what it made was ended), or the GPU restore (the processes are checkpointed,
 * and the error says how to go on).
 */
export function restoreSnapshot(
  dir: string,
  options?: RestoreSnapshotOptions,
): Promise<RestoreSnapshotResult> {
  return restoreSnapshotAs("restoreSnapshot", dir, options);
}

/** {@link restoreSnapshot}, its errors naming `operation` (the command line's subcommand). */
export async function restoreSnapshotAs(
  operation: string,
  dir: string,
  options?: RestoreSnapshotOptions,
): Promise<RestoreSnapshotResult> {
  const args = checkRestoreArgs(dir, options);
  return await withMachine(
    machineOf(options?.machine, operation),
    (machine) => restoreFrom(machine, args.dir, { ...args.settings, operation }),
  );
}

/**
 * Reads a snapshot's manifest and checks everything in its directory against it (who owns and may
 * write each file, no link, nothing it does not list, each file's size), without changing anything
 * and without opening the driver (on this machine, only the file system is read). With `verify`,
 * every file's digest is checked too, as a restore checks it.
 *
 * @throws {RefusedError} (as a rejection) with code `SNAPSHOT` where `dir` is not a snapshot this
 * version can read, or a file differs, saying which.
 *
 * @example
 * ```ts
 * import { inspectSnapshot } from "@ckpt/cuda";
 * const { manifest } = await inspectSnapshot("/var/lib/snapshots/job-1", { verify: true });
 * console.log(manifest.trees.length, "trees, every file as written");
 * ```
 */
export function inspectSnapshot(
  dir: string,
  options?: { machine?: Machine; verify?: boolean },
): Promise<{ dir: string; manifest: Manifest; verified: boolean }> {
  return inspectSnapshotAs("inspectSnapshot", dir, options);
}

/** {@link inspectSnapshot}, its errors naming `operation` (the command line's subcommand). */
export async function inspectSnapshotAs(
  operation: string,
  dir: string,
  options?: { machine?: Machine; verify?: boolean },
): Promise<{ dir: string; manifest: Manifest; verified: boolean }> {
  const o = checkOptions(options, operation, ["machine", "verify"]);
  checkDir(dir);
  if (o.machine !== undefined) machineOf(o.machine, operation); // a Machine, checked
  return await inspectIn(storeOf(o.machine), dir, checkFlag(o.verify, "verify", false), operation);
}

/**
 * Recovers from a snapshot that was killed outright (SIGKILL, a power cut) while it had processes
 * suspended: reads the trace it left in `dir` (`in-progress.json`), resumes every process it
 * names that is still the same process (pid and start time), and removes what the snapshot had
 * written (the partial images; a complete snapshot is kept). Each resume's room is checked, as a
 * resume's is, unless `checkRoom` is `false`. `cuda-checkpoint recover DIR` does the same.
 *
 * @throws {RefusedError} (as a rejection) with code `SNAPSHOT`: no trace in `dir`, the snapshot
 * still under way, or a process that could not be resumed (the trace is then kept).
 *
 * @example
 * ```ts
 * import { recoverSnapshot } from "@ckpt/cuda/snapshot";
 * const { resumed, gone } = await recoverSnapshot("/var/lib/snapshots/job-1");
 * console.log(`resumed ${resumed.join(", ")}; gone: ${gone.join(", ")}`);
 * ```
 */
export function recoverSnapshot(
  dir: string,
  options?: RecoverOptions,
): Promise<RecoverResult> {
  return recoverSnapshotAs("recoverSnapshot", dir, options);
}

/** {@link recoverSnapshot}, its errors naming `operation` (the command line's subcommand). */
export async function recoverSnapshotAs(
  operation: string,
  dir: string,
  options?: RecoverOptions,
): Promise<RecoverResult> {
  const o = checkOptions(options, operation, ["machine", "checkRoom", "onProgress"]);
  checkDir(dir);
  const checkRoom = checkFlag(o.checkRoom, "checkRoom", true);
  const onProgress = checkFunction(o.onProgress, "onProgress");
  return await withMachine(
    machineOf(o.machine, operation),
    (m) => recoverFrom(m, storeOf(m), dir, checkRoom, operation, onProgress),
  );
}

/** Options of {@link recoverSnapshot}. */
export interface RecoverOptions {
  /** The machine; this machine when left out. */
  machine?: Machine;
  /** Whether each resume's room is checked first; default `true`. */
  checkRoom?: boolean;
  /** Called as each resume's steps start and end ({@link GroupEvent}). Must not throw. */
  onProgress?: (event: GroupEvent) => void;
}
