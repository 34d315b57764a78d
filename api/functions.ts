/**
 * The public functions: each checks its input here and runs on the machine given, or this one.
 *
 * @module
 */

import { CudaProcess, handleOf, machineOf } from "./cuda_process.ts";
import type { GpuInfo } from "../core/driver.ts";
import { runGroup as runOn } from "../core/group.ts";
import { checkGroupOptions, type GroupEvent, type GroupOptions } from "../core/group_types.ts";
import type { GroupResult } from "../core/group_types.ts";
import { type CudaProcessListing, LIST_OPTIONS } from "../core/listing.ts";
import { type ListCudaProcessesOptions, listOn } from "../core/listing.ts";
import { type Machine, withMachine } from "../core/machine.ts";
import { checkChoice, checkFlag, checkFunction, checkOptions } from "../core/options.ts";
import { checkTable } from "../core/options.ts";
import { openSnapshot } from "../core/snapshot/layout.ts";
import type { Manifest } from "../core/snapshot/manifest.ts";
import { recoverFrom, type RecoverResult } from "../core/snapshot/recover.ts";
import type { RestoreSnapshotOptions, RestoreSnapshotResult } from "../core/snapshot/restore.ts";
import { RESTORE_OPTIONS, restoreFrom } from "../core/snapshot/restore.ts";
import { checkDir } from "../core/snapshot/run.ts";
import type { SnapshotOptions, SnapshotResult } from "../core/snapshot/take.ts";
import { checkSnapshotArgs, takeSnapshot } from "../core/snapshot/take.ts";
import { type Action, ACTIONS } from "../core/states.ts";
import { storeOf } from "../os/snapshot_store.ts";

/**
 * Runs `action` on every target at once (or `concurrency` at a time), resolving to what happened
 * to each; rejects only for bad input. A goal (`suspend`, `resume`, `toggle`) makes the steps the
 * state table plans (`unchanged` where there already), a step is made as asked. A process whose
 * step fails is brought back where it can be, with `allOrNothing` every other; `job`: one job.
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
export async function runGroup(
  action: Action,
  targets: readonly (number | CudaProcess)[],
  options?: GroupOptions,
): Promise<GroupResult> {
  checkChoice(action, "action", ACTIONS);
  if (options?.gpuMapping !== undefined && !["restore", "resume", "toggle"].includes(action)) {
    throw new TypeError(`runGroup: gpuMapping is for restore, resume and toggle, not ${action}`);
  }
  const settings = checkGroupOptions(options);
  // A CudaProcess acts through its own handle (machine, order, process); the group checks the rest.
  const given = Array.isArray(targets)
    ? targets.map((t) => t instanceof CudaProcess ? handleOf(t) : t as number)
    : targets as unknown as number[];
  return await runOn(machineOf(options?.machine, "runGroup"), action, given, settings);
}

/**
 * Lists the machine's CUDA processes: the host's processes that the driver confirms (not one that
 * never initialised CUDA, or ended), each with its state, restore thread, command line and GPU
 * memory per GPU; those that could not be looked at in `uninspectable`. One being checkpointed
 * answers when that ends; one that checkpointed itself, only with `gpuMemory: false` (NVML waits).
 *
 * @throws {CheckpointUnsupportedError} (as a rejection) for a driver older than 570.
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
  const settings = checkTable(options, "listCudaProcesses", LIST_OPTIONS);
  const source = machineOf(options?.machine, "listCudaProcesses");
  return await withMachine(source, (machine) => listOn(machine, settings));
}

/**
 * Every GPU the driver sees, by ordinal, with its UUID and chip: what a `gpuMapping` is built
 * from. Rejects where the driver cannot list its GPUs.
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
 * Takes a snapshot of the process trees rooted at `roots` into `dir` (a new or empty private
 * directory): suspends their CUDA processes, has criu dump the trees, writes a manifest
 * (docs/SNAPSHOTS.md) and ends the processes (or not, `leaveRunning`). A failure before the end
 * puts every process back as it was, running, and says so.
 *
 * @throws {RefusedError} (as a rejection) before anything changes: `PREREQUISITE`, `STATE`,
 * `SNAPSHOT`, `UNSUPPORTED`, `IPC`.
 * @throws {SnapshotError} (as a rejection) when a part fails after things began to change.
 *
 * @example
 * ```ts
 * import { restoreSnapshot, snapshot } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 * import { mkdtemp } from "node:fs/promises";
 * import { tmpdir } from "node:os";
 *
 * const sim = new SimulatedMachine(); // without it: this machine's driver and criu, as root
 * const job = sim.spawn({ memoryMiB: 1024 });
 * // The simulator's images are real files: a new (or empty) directory, whose parent exists.
 * const dir = `${await mkdtemp(`${tmpdir()}/snapshots-`)}/job-1`;
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
  const source = machineOf(options?.machine, "snapshot");
  return await withMachine(source, (m) => takeSnapshot(m, args.roots, args.dir, args.settings));
}

/**
 * Restores the snapshot in `dir`: everything checked first (criu, root, the driver, every pid
 * free, GPUs of the same chip with room), then criu brings the trees back and the CUDA processes
 * that ran are restored onto the GPUs and unlocked. Resolves once every process is back.
 *
 * @throws {RefusedError} (as a rejection) before anything changes: `SNAPSHOT`, `PREREQUISITE`,
 * `PID_TAKEN`, `MAPPING`, `NO_ROOM` (a `GpuRoomError`).
 * @throws {SnapshotError} (as a rejection) when the engine's restore (what it made is ended) or
 * the GPU restore (the processes are left checkpointed) fails.
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
  const settings = checkTable(options, "restoreSnapshot", RESTORE_OPTIONS), checked = checkDir(dir);
  const source = machineOf(options?.machine, operation);
  return await withMachine(source, (m) => restoreFrom(m, checked, { ...settings, operation }));
}

/**
 * Reads a snapshot's manifest and checks everything in its directory against it (owners, no link,
 * nothing unlisted, sizes; with `verify`, digests), changing nothing and opening no driver.
 * Rejects (`SNAPSHOT`) where it is no snapshot this version reads, or a file differs.
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
  const digests = checkFlag(o.verify, "verify", false);
  const opened = await openSnapshot(storeOf(o.machine), dir, operation, { digests });
  await opened.dir.close();
  return { dir: opened.dir.path, manifest: opened.manifest, verified: opened.checked.digests };
}

/**
 * Recovers from a snapshot killed outright (SIGKILL, a power cut): resumes every process its trace
 * names that is still the same process (room checked unless `checkRoom: false`), and removes what
 * it wrote (a complete snapshot is kept), as `cuda-checkpoint recover DIR` does. Rejects
 * (`SNAPSHOT`) without a trace, while it is under way, or where a process cannot be resumed.
 *
 * @example
 * ```ts
 * import { recoverSnapshot } from "@ckpt/cuda/snapshot";
 * const { resumed, gone } = await recoverSnapshot("/var/lib/snapshots/job-1");
 * console.log(`resumed ${resumed.join(", ")}; gone: ${gone.join(", ")}`);
 * ```
 */
export function recoverSnapshot(dir: string, options?: RecoverOptions): Promise<RecoverResult> {
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
  const onProgress = checkFunction<RecoverOptions["onProgress"]>(o.onProgress, "onProgress");
  const recover = (m: Machine) => recoverFrom(m, storeOf(m), dir, checkRoom, operation, onProgress);
  return await withMachine(machineOf(o.machine, operation), recover);
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
