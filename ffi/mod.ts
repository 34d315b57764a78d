/**
 * The native driver: NVIDIA's libcuda checkpoint API through the runtime's FFI (`Deno.dlopen` on
 * Deno, `bun:ffi` on Bun). Importing this module opens nothing and needs no permission; the
 * library is found and opened by {@link openNativeDriver}.
 *
 * The driver is written once (`native.ts`) on a small adapter per runtime (`deno.ts`, `bun.ts`;
 * the interface is in `adapter.ts`).
 *
 * @example
 * ```ts ignore
 * import { openNativeDriver } from "./mod.ts";
 * await using driver = await openNativeDriver(); // Deno: --allow-ffi (and --allow-env)
 * const { code, value } = await driver.getState(1234);
 * ```
 *
 * @module
 */

import {
  checkCallingThread,
  type NativeDriver,
  type NativeDriverOptions,
  openLibcudaDriver,
} from "./native.ts";
import { detectRuntime, runtimeAdapter } from "./runtime.ts";

export { detectRuntime, type NativeRuntime, runtimeAdapter } from "./runtime.ts";

export {
  DEFAULT_MAX_WORKERS,
  MAX_WORKERS_LIMIT,
  type NativeDriver,
  type NativeDriverOptions,
} from "./native.ts";
// The core types the driver's signatures use, so that this module documents completely on its own.
export type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
export { DriverLoadError } from "../core/errors.ts";
export {
  findLibcuda,
  type FindLibcudaOptions,
  type FoundLibcuda,
  isPermissionError,
  LIBCUDA_ENV_VAR,
  LIBCUDA_SEARCH_PATHS,
  LIBCUDA_SONAME,
  type LibcudaSource,
  type TriedPath,
} from "./find.ts";
export {
  LinuxHost,
  type LinuxHostOptions,
  openLinuxHost,
  PROC_READS_AT_ONCE,
  type ProcReader,
} from "./host.ts";
export {
  type Nvml,
  NVML_ENV_VAR,
  NVML_SEARCH_PATHS,
  NVML_SONAME,
  NVML_SYMBOLS,
  type NvmlOptions,
  type NvmlSymbolName,
  openNvml,
} from "./nvml.ts";
export {
  CHECKPOINT_SYMBOL_NAMES,
  CUDA_SYMBOLS,
  type CudaForeignFunction,
  type CudaNativeType,
  type CudaSymbolName,
  type CudaSymbols,
} from "./symbols.ts";

/**
 * Finds and opens libcuda with the FFI of the current runtime. The search: `libraryPath`, else
 * the environment variable `CKPT_LIBCUDA_PATH`, else `libcuda.so.1` through the system loader,
 * else the usual driver locations. A relative path (with a `/`) is made absolute against the
 * current directory once; a bare name goes to the system loader only, never the current
 * directory (Bun's own `dlopen` would try it there).
 *
 * A driver older than 570 still opens: its checkpoint calls answer `CUDA_ERROR_NOT_SUPPORTED`
 * without reaching the library (see {@link NativeDriver.missingFunctions}).
 *
 * @throws {RangeError} (as a rejection) when `maxWorkers` is not an integer from 1 to 1024.
 * @throws {TypeError} (as a rejection) when `callingThread` is given and not a boolean.
 * @throws {DriverLoadError} (as a rejection) when libcuda is not found, Deno lacks `--allow-ffi`,
 * the platform is not Linux, or the runtime is neither Deno nor Bun.
 */
export async function openNativeDriver(options: NativeDriverOptions = {}): Promise<NativeDriver> {
  checkCallingThread(options.callingThread);
  return openLibcudaDriver(await runtimeAdapter({ callingThread: options.callingThread }), options);
}

/**
 * Whether the native driver can be opened here: the runtime is Deno or Bun, on Linux, and libcuda
 * opens. It never throws and never prompts: on Deno it answers `false` unless `--allow-ffi` is
 * already granted. The library is closed again; checkpoint support is a separate question
 * ({@link NativeDriver.checkpointSupported}).
 */
export async function nativeDriverAvailable(options: NativeDriverOptions = {}): Promise<boolean> {
  try {
    if (detectRuntime() === "deno") {
      const status = await Deno.permissions.query({ name: "ffi" });
      if (status.state !== "granted") return false;
    }
    const driver = await openNativeDriver(options);
    await driver[Symbol.asyncDispose]();
    return true;
  } catch {
    return false;
  }
}
