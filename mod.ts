/**
 * `@ckpt/cuda`: checkpoint and restore the GPU state of running CUDA processes from TypeScript,
 * on Deno and Bun, through the CUDA driver's checkpoint API (NVIDIA driver 570 or later).
 *
 * A process is locked (its CUDA calls block and submitted work finishes), checkpointed (its GPU
 * memory is copied into host memory and the GPU is released), restored (onto the same or other
 * GPUs, at the same addresses) and unlocked. Whole process trees go to disk and back through CRIU.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 *
 * const proc = new CudaProcess(12345);          // this machine's driver, opened on first use
 * await proc.suspend({ timeoutMs: 10_000 });     // the lock waits up to 10 s for its kernels
 * // the GPU is free now; CRIU may dump the process
 * await proc.resume();                           // restore + unlock, after checking the GPU's room
 * ```
 *
 * This module holds what a program needs to checkpoint, restore, snapshot, list and handle
 * errors, on this machine unless it is given another (`{ machine }`). What the machine is made of
 * (the driver seam, hosts, codes, `openMachine`) is on `@ckpt/cuda/driver`; the snapshot engine
 * and the manifest on `@ckpt/cuda/snapshot`; the types of results and events on
 * `@ckpt/cuda/types`; the simulated machine, for tests without a GPU, on `@ckpt/cuda/mock`; the
 * command line on `@ckpt/cuda/cli`.
 *
 * @module
 */

export { CudaProcess, type CudaProcessOptions } from "./api/cuda_process.ts";
export { listCudaProcesses, listGpus, runGroup } from "./api/functions.ts";
export { inspectSnapshot, restoreSnapshot, snapshot } from "./api/functions.ts";
export type { Outcome, StepOptions } from "./core/action.ts";
export type { ProcessState } from "./core/states.ts";
export type { GpuMapping } from "./core/options.ts";
export type { GroupOptions, GroupResult, ProcessOutcome } from "./core/group_types.ts";
export type { RestoreSnapshotOptions } from "./core/snapshot/restore.ts";
export type { SnapshotOptions } from "./core/snapshot/take.ts";
export { CheckpointError, CheckpointUnsupportedError, CudaError } from "./core/errors.ts";
export { DriverLoadError, RefusedError, SnapshotError, WaitTimeoutError } from "./core/errors.ts";
export { GpuRoomError } from "./core/room.ts";
