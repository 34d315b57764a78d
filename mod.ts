/**
 * `@ckpt/cuda`: checkpoint and restore the GPU state of running CUDA processes from TypeScript,
 * on Deno and Bun, through the CUDA driver's checkpoint API (NVIDIA driver 570 or later).
 *
 * A process is locked (its CUDA calls block and submitted work finishes), checkpointed (its GPU
 * memory is copied into host memory and the GPU is released), restored (onto the same or other
 * GPUs, at the same addresses) and unlocked.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 *
 * const proc = new CudaProcess(12345);          // the native driver, opened on first use
 * await proc.suspend({ timeoutMs: 10_000 });     // lock + checkpoint; unlocks again on failure
 * // the GPU is free now; CRIU may dump the process
 * await proc.resume();                           // restore + unlock, after checking the GPU's room
 * ```
 *
 * This module holds what a program needs to checkpoint, restore, list and handle errors. The
 * driver seam and the driver's codes are on `@ckpt/cuda/driver`; the simulated driver, for tests
 * without a GPU, on `@ckpt/cuda/mock`; the command line on `@ckpt/cuda/cli`.
 *
 * @module
 */

import { setFallbackDriverOpener, setFallbackHostOpener } from "./core/defaults.ts";
import { openLinuxHost, openNativeDriver } from "./ffi/mod.ts";

// The native driver and this machine's /proc, NVML and records are the defaults: core/ itself
// loads no runtime's FFI and reads no files.
setFallbackDriverOpener(openNativeDriver);
setFallbackHostOpener(() => openLinuxHost());

export {
  type CheckpointOptions,
  CudaProcess,
  type CudaProcessOptions,
  type DriverSource,
  type LockOptions,
  type Outcome,
  type RestoreOptions,
  setDefaultDriver,
  type StepRecord,
  type SuspendOptions,
  type ToggleOptions,
  type WaitOptions,
} from "./core/process.ts";
export type { ProcessState, Step } from "./core/states.ts";
export type { GroupStep } from "./core/group.ts";
export type { GpuMapping } from "./core/options.ts";
export {
  type GroupAction,
  type GroupEvent,
  type GroupOptions,
  type GroupResult,
  type NotStartedReason,
  type ProcessOutcome,
  resumeAll,
  runGroup,
  suspendAll,
  toggleAll,
} from "./core/group.ts";
export {
  type CandidateRule,
  type CudaProcessInfo,
  type CudaProcessListing,
  listCudaProcesses,
  type ListCudaProcessesOptions,
  listGpus,
  type ListGpusOptions,
  type UninspectedProcess,
} from "./core/listing.ts";
export { GpuRoomError, type RoomCheck, type RoomShortage } from "./core/room.ts";
export {
  CheckpointError,
  CheckpointUnsupportedError,
  CudaError,
  DriverLoadError,
  type Operation,
  type RefusalCode,
  RefusedError,
  WaitTimeoutError,
} from "./core/errors.ts";
// The driver seam's types, which the options above name (the seam itself: @ckpt/cuda/driver).
export type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "./core/driver.ts";
export type {
  GpuMemory,
  GpuMemoryReport,
  HeldRecord,
  HeldRecords,
  HostProcesses,
  MachineFacts,
  PidUse,
  ProcessIdentity,
  RoomClaim,
  ScannedProcess,
  TreeProcess,
} from "./core/host.ts";
