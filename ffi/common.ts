/**
 * What the Deno and Bun bindings share: the {@link NativeDriver} type, its options, and the checks
 * and messages that do not depend on the runtime.
 *
 * @module
 */

import {
  CHECKPOINT_MIN_DRIVER_VERSION,
  CUDA_SUCCESS,
  formatDriverVersion,
  GPU_PAIRS_MIN_DRIVER_VERSION,
} from "../core/codes.ts";
import type { CheckpointDriver, DriverResult } from "../core/driver.ts";
import { CheckpointUnsupportedError, type Operation } from "../core/errors.ts";
import type { CudaSymbolName } from "./symbols.ts";

/** `CUDA_ERROR_STUB_LIBRARY`: every call of the toolkit's link-only stub `libcuda.so` fails so. */
export const CUDA_ERROR_STUB_LIBRARY = 34;

/** Options of the native drivers. */
export interface NativeDriverOptions {
  /**
   * The libcuda to load. Left out: the environment variable `CKPT_LIBCUDA_PATH`, else
   * `libcuda.so.1` through the system loader, else the usual driver locations.
   */
  libraryPath?: string;
}

/** A {@link CheckpointDriver} backed by libcuda, with what it loaded and a way to let go of it. */
export interface NativeDriver extends CheckpointDriver {
  /** The library path (or `libcuda.so.1` for the system loader) that opened. */
  readonly libraryPath: string;
  /** Whether the library has all six checkpoint functions (driver 570, CUDA 12.8, or later). */
  readonly checkpointSupported: boolean;
  /**
   * Closes the library (and, on Bun, its worker threads). Calls made afterwards reject. Calls still
   * running finish first: the library is unloaded when the last of them settles.
   */
  close(): void;
}

/**
 * Checks that a pid fits a C `int` exactly. Values outside it would be wrapped by the FFI into some
 * other, possibly real, process id, so they are refused instead of passed on.
 */
export function checkPid(pid: number): void {
  if (!Number.isInteger(pid) || pid < -0x8000_0000 || pid > 0x7fff_ffff) {
    throw new RangeError(`pid must be an integer that fits a C int, got ${String(pid)}`);
  }
}

/** Describes the driver version for messages: `version 12.4, from cuDriverGetVersion 12040`. */
export function describeVersion(version: DriverResult): string {
  return version.code === CUDA_SUCCESS
    ? `version ${formatDriverVersion(version.value)}, from cuDriverGetVersion ${version.value}`
    : `version unknown: cuDriverGetVersion failed with CUresult ${version.code}`;
}

/** The error for a checkpoint function the library lacks. */
export function missingSymbolError(
  operation: Operation,
  pid: number,
  symbol: CudaSymbolName,
  version: DriverResult,
): CheckpointUnsupportedError {
  const old = version.code !== CUDA_SUCCESS || version.value < CHECKPOINT_MIN_DRIVER_VERSION;
  const detail = old
    ? `this driver (${
      describeVersion(version)
    }) has no CUDA checkpoint support; NVIDIA driver 570 ` +
      `or later is needed`
    : `this driver (${
      describeVersion(version)
    }) reports a version with checkpoint support but lacks ${symbol}: the library looks ` +
      `incomplete or mismatched; point CKPT_LIBCUDA_PATH at the driver's own libcuda.so.1`;
  return new CheckpointUnsupportedError({
    operation,
    pid,
    detail,
    driverVersion: version.code === CUDA_SUCCESS ? version.value : undefined,
  });
}

/**
 * The error for GPU pairs given to a driver older than 13.0, whose `CUcheckpointRestoreArgs` is
 * all reserved; `undefined` when the pairs may be passed (a version that could not be read lets
 * the driver decide).
 */
export function gpuPairsError(
  pid: number,
  pairCount: number,
  version: DriverResult,
): CheckpointUnsupportedError | undefined {
  if (pairCount === 0 || version.code !== CUDA_SUCCESS) return undefined;
  if (version.value >= GPU_PAIRS_MIN_DRIVER_VERSION) return undefined;
  return new CheckpointUnsupportedError({
    operation: "restore",
    pid,
    detail: `restoring onto other GPUs (GPU pairs) needs NVIDIA driver 580 (CUDA 13.0) or later; ` +
      `this driver is ${describeVersion(version)}`,
    driverVersion: version.value,
  });
}

/** The error for a call on a closed driver. */
export function closedError(kind: string, operation: Operation): Error {
  return new Error(`${operation}: this ${kind} driver has been closed`);
}

/**
 * Copies bytes into a buffer of their own `ArrayBuffer`, for memory whose address is written into
 * a struct: a small typed array made by length may live inside the JS heap, where a garbage
 * collector is free to move it; an `ArrayBuffer`'s backing store stays where it is.
 */
export function pinnedCopy(bytes: Uint8Array): Uint8Array {
  const copy = new Uint8Array(new ArrayBuffer(bytes.byteLength));
  copy.set(bytes);
  return copy;
}
