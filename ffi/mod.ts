/**
 * The native driver: NVIDIA's libcuda checkpoint API through the runtime's FFI (`Deno.dlopen` on
 * Deno, `bun:ffi` on Bun). Importing this module opens nothing and needs no permission; the
 * library is found and opened by {@link openNativeDriver}.
 *
 * @example
 * ```ts ignore
 * import { openNativeDriver } from "./mod.ts";
 * const driver = await openNativeDriver(); // Deno: --allow-ffi (and --allow-env)
 * const { code, value } = await driver.getState(1234);
 * ```
 *
 * @module
 */

import { DriverLoadError } from "../core/errors.ts";
import type { NativeDriver, NativeDriverOptions } from "./common.ts";

export type { NativeDriver, NativeDriverOptions } from "./common.ts";
// The core types the driver's signatures use, so that this module documents completely on its own.
export type {
  CheckpointDriver,
  DriverResult,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
export {
  CheckpointUnsupportedError,
  CudaError,
  type CudaErrorInit,
  DriverLoadError,
  type Operation,
} from "../core/errors.ts";
export type { ProcessState } from "../core/codes.ts";
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
  BASE_SYMBOL_NAMES,
  CHECKPOINT_SYMBOL_NAMES,
  CUDA_SYMBOLS,
  type CudaForeignFunction,
  type CudaNativeType,
  type CudaSymbolName,
  type CudaSymbols,
} from "./symbols.ts";
export type { DenoNativeDriver } from "./deno.ts";
export type { BunNativeDriver, BunNativeDriverOptions } from "./bun.ts";

/** The JavaScript runtime, as far as the native driver cares. */
export type NativeRuntime = "deno" | "bun" | "other";

/** Which runtime this is: Deno and Bun each have a native binding; anything else has none. */
export function detectRuntime(): NativeRuntime {
  if ("Deno" in globalThis) return "deno";
  if ("Bun" in globalThis) return "bun";
  return "other";
}

/**
 * Finds and opens libcuda with the binding of the current runtime. The search: `libraryPath`, else
 * the environment variable `CKPT_LIBCUDA_PATH`, else `libcuda.so.1` through the system loader,
 * else the usual driver locations.
 *
 * A driver older than 570 still opens: its checkpoint methods reject with
 * `CheckpointUnsupportedError` (see {@link NativeDriver.checkpointSupported}).
 *
 * @throws {DriverLoadError} (as a rejection) when libcuda is not found, Deno lacks `--allow-ffi`,
 * the platform is not Linux, or the runtime is neither Deno nor Bun.
 */
export async function openNativeDriver(options: NativeDriverOptions = {}): Promise<NativeDriver> {
  const runtime = detectRuntime();
  if (runtime === "deno") {
    const { DenoNativeDriver } = await import("./deno.ts");
    return DenoNativeDriver.open(options);
  }
  if (runtime === "bun") {
    const { BunNativeDriver } = await import("./bun.ts");
    return await BunNativeDriver.open(options);
  }
  throw new DriverLoadError(
    "The native CUDA checkpoint driver needs Deno (Deno.dlopen) or Bun (bun:ffi); this runtime " +
      "has neither FFI. On Node.js, use the simulated driver from @ckpt/cuda/mock, or run under " +
      "Deno or Bun.",
  );
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
    driver.close();
    return true;
  } catch {
    return false;
  }
}
