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
 * await proc.resume();                           // restore + unlock
 * ```
 *
 * Without a GPU, pass a simulated driver from `@ckpt/cuda/mock` as `{ driver }`. To choose the
 * library yourself, `openNativeDriver({ libraryPath })` and pass the result as `{ driver }`.
 *
 * @module
 */

import { setFallbackDriverOpener } from "./core/sources.ts";
import { setFallbackHostOpener } from "./core/listing.ts";
import { openLinuxHost, openNativeDriver } from "./ffi/mod.ts";

// The native driver and this machine's /proc are the defaults: core/ itself loads no runtime's
// FFI and reads no files.
setFallbackDriverOpener(openNativeDriver);
setFallbackHostOpener(() => openLinuxHost());

export {
  CudaProcess,
  type CudaProcessOptions,
  type DriverSource,
  getDefaultDriver,
  type LockOptions,
  ProcessStates,
  type RestoreOptions,
  setDefaultDriver,
  type ToggleOptions,
  type WaitOptions,
  WaitTimeoutError,
} from "./core/process.ts";
export {
  type CandidateRule,
  type ClosableHost,
  type CudaProcessInfo,
  type CudaProcessListing,
  type GpuMemory,
  type GpuMemoryReport,
  type HostProcesses,
  listCudaProcesses,
  type ListCudaProcessesOptions,
  type ScannedProcess,
  type UninspectedProcess,
} from "./core/listing.ts";
export { LinuxHost, type LinuxHostOptions, openLinuxHost, type ProcReader } from "./ffi/mod.ts";
export {
  type GroupAction,
  type GroupEvent,
  type GroupOptions,
  type GroupResult,
  type GroupStep,
  type NotStartedReason,
  type ProcessOutcome,
  resumeAll,
  runGroup,
  type StepRecord,
  suspendAll,
} from "./core/group.ts";
export { GpuRoomError, type RoomShortage } from "./core/room.ts";
export {
  CheckpointUnsupportedError,
  CudaError,
  type CudaErrorInit,
  DriverLoadError,
  type Operation,
} from "./core/errors.ts";
export type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "./core/driver.ts";
export * from "./core/codes.ts";
export { describeValue, formatGpuUuid, parseGpuUuid } from "./core/uuid.ts";
export {
  checkGpuMapping,
  checkPid,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
  MAX_PID,
  MAX_TIMEOUT_MS,
} from "./core/validate.ts";
export {
  LIBCUDA_ENV_VAR,
  type NativeDriver,
  nativeDriverAvailable,
  type NativeDriverOptions,
  openNativeDriver,
} from "./ffi/mod.ts";
