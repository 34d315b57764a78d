/**
 * `@ckpt/cuda/snapshot`: whole CUDA processes and jobs to disk and back, through CRIU.
 *
 * {@link snapshot} suspends every CUDA process of the given process trees at once, has criu dump
 * the trees, writes a manifest (docs/SNAPSHOTS.md) and ends the processes (or lets them go on,
 * `leaveRunning`). {@link restoreSnapshot} checks everything the snapshot needs before changing
 * anything (criu, root, the driver, every pid free, GPUs of the same chip with room), has criu
 * bring the trees back, and restores the CUDA processes onto the GPUs, in place or elsewhere.
 * Any failure puts things back where they were, and says where they are.
 *
 * The installed `criu` (4.0 or later, run without its CUDA plugin) and the file system are the
 * defaults here; the simulated driver of `@ckpt/cuda/mock` brings a simulated criu of its own, so
 * that a program's snapshots can be tested without root, criu or a GPU.
 *
 * @example
 * ```ts
 * import { restoreSnapshot, snapshot } from "@ckpt/cuda/snapshot";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver(); // without it: this machine's driver and criu, as root
 * const job = sim.spawn({ memoryMiB: 4096, command: "python train.py" });
 * const dir = "/var/lib/snapshots/job-1"; // a new (or empty) directory
 * const { manifest } = await snapshot([job.pid], dir, { driver: sim });
 * console.log(manifest.trees[0].processes[0].cuda); // { state: "running", gpuMemoryMiB: {...} }
 * await restoreSnapshot(dir, { driver: sim }); // the same pid, its GPU memory as it was
 * ```
 *
 * @module
 */

import "./mod.ts";
import { setFallbackSnapshotParts } from "./core/defaults.ts";
import { openCriuEngine } from "./ffi/criu.ts";
import { FileSnapshotStore } from "./ffi/snapshot_files.ts";

// The installed criu and the file system are the defaults; core/ itself runs no program.
setFallbackSnapshotParts(() => openCriuEngine(), new FileSnapshotStore());

export {
  inspectSnapshot,
  restoreSnapshot,
  type RestoreSnapshotOptions,
  type RestoreSnapshotResult,
  snapshot,
  type SnapshotEvent,
  type SnapshotOptions,
  type SnapshotParts,
  type SnapshotPhase,
  type SnapshotResult,
} from "./core/snapshot.ts";
export {
  type Manifest,
  MANIFEST_FILE,
  MANIFEST_FORMAT,
  type ManifestCuda,
  type ManifestGpu,
  type ManifestProcess,
  type ManifestTree,
  parseManifest,
} from "./core/manifest.ts";
export {
  type DumpedProcess,
  type DumpRequest,
  EngineError,
  type EngineProbe,
  type RestoreRequest,
  type SnapshotEngine,
  type SnapshotFile,
  type SnapshotStore,
} from "./core/engine.ts";
export { CheckpointError, SnapshotError, type SnapshotFailure } from "./core/errors.ts";
export type { SnapshotState, Step } from "./core/states.ts";
export type { Operation } from "./core/errors.ts";
export type { RoomCheck } from "./core/room.ts";
// The types the options and results above name, so that this module documents completely on its
// own (the functions are on @ckpt/cuda).
export type { GpuMapping } from "./core/options.ts";
export type { DriverSource } from "./core/sources.ts";
export type {
  GroupAction,
  GroupEvent,
  GroupResult,
  GroupStep,
  NotStartedReason,
  ProcessOutcome,
  StepRecord,
} from "./core/group.ts";
export type * from "./driver.ts";
export {
  CRIU_ENV_VAR,
  CRIU_MIN_VERSION,
  type CriuEngineOptions,
  openCriuEngine,
} from "./ffi/criu.ts";
export { FileSnapshotStore } from "./ffi/snapshot_files.ts";
