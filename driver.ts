/**
 * `@ckpt/cuda/driver`: the driver seam and what sits at it. For a program that opens the native
 * driver itself (to name the library, or to size its thread pool), talks to the driver's raw calls,
 * writes a driver of its own, or needs the driver's result codes and state numbers.
 *
 * Every method of a {@link CheckpointDriver} mirrors one C call of libcuda's checkpoint API and
 * resolves to the raw `CUresult`; `CudaProcess` (from `@ckpt/cuda`) turns those into errors.
 *
 * @example
 * ```ts ignore
 * import { CudaProcess } from "@ckpt/cuda";
 * import { CU_PROCESS_STATE_LOCKED, openNativeDriver } from "@ckpt/cuda/driver";
 *
 * await using driver = await openNativeDriver({ libraryPath: "/usr/lib64/libcuda.so.1" });
 * const { code, value } = await driver.getState(4242); // the raw call
 * console.log(code, value === CU_PROCESS_STATE_LOCKED);
 * const proc = new CudaProcess(4242, { driver });
 * ```
 *
 * @module
 */

export type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "./core/driver.ts";
export type {
  ClosableHost,
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
export {
  CHECKPOINT_MIN_DRIVER_VERSION,
  CU_RESULTS,
  CUDA_ERROR_DEINITIALIZED,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_DEVICE,
  CUDA_ERROR_INVALID_HANDLE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NO_DEVICE,
  CUDA_ERROR_NOT_FOUND,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_ERROR_UNKNOWN,
  CUDA_SUCCESS,
  formatDriverVersion,
  GPU_PAIRS_MIN_DRIVER_VERSION,
  resultName,
} from "./core/codes.ts";
export {
  CU_PROCESS_STATE_CHECKPOINTED,
  CU_PROCESS_STATE_FAILED,
  CU_PROCESS_STATE_LOCKED,
  CU_PROCESS_STATE_RUNNING,
  type ProcessState,
  stateName,
} from "./core/states.ts";
export { DriverLoadError } from "./core/errors.ts";
export {
  LIBCUDA_ENV_VAR,
  LinuxHost,
  type LinuxHostOptions,
  type NativeDriver,
  nativeDriverAvailable,
  type NativeDriverOptions,
  openLinuxHost,
  openNativeDriver,
  type ProcReader,
} from "./ffi/mod.ts";
