/**
 * The errors this package throws, and the one place where a driver's `CUresult` becomes one.
 *
 * @module
 */

import {
  CU_RESULTS,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_NOT_FOUND,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_SUCCESS,
  type ProcessState,
  resultName,
} from "./codes.ts";
import type { CheckpointDriver } from "./driver.ts";

/** The checkpoint operations, as they are named in messages. */
export type Operation =
  | "getState"
  | "getRestoreThreadId"
  | "lock"
  | "checkpoint"
  | "restore"
  | "unlock"
  | "suspend"
  | "resume"
  | "toggle"
  | "driverVersion";

/** What {@link CudaError}'s constructor takes. */
export interface CudaErrorInit {
  /** The `CUresult`. */
  code: number;
  /** The operation that failed. */
  operation: Operation;
  /** The pid the operation was given, where there is one. */
  pid?: number;
  /** The name of the code (`CUDA_ERROR_ILLEGAL_STATE`); looked up when left out. */
  codeName?: string;
  /** The driver's description of the code (`cuGetErrorString`); looked up when left out. */
  description?: string;
  /** The process's state when the error was made, where it could be read. */
  state?: ProcessState;
  /** A sentence added to the message: what was left behind, what to do. */
  detail?: string;
  /** The error that led to this one. */
  cause?: unknown;
}

/**
 * A CUDA driver call failed. `code` is the driver's `CUresult` (`CUDA_ERROR_ILLEGAL_STATE` is 401);
 * the message says the operation, the pid, the code's name and the driver's description, and for an
 * illegal state the state the process is in.
 *
 * @example
 * ```ts
 * import { CudaError, CUDA_ERROR_ILLEGAL_STATE } from "@ckpt/cuda";
 * const err = new CudaError({ code: CUDA_ERROR_ILLEGAL_STATE, operation: "unlock", pid: 42 });
 * err.message; // "unlock of process 42 failed: CUDA_ERROR_ILLEGAL_STATE (401): the operation ..."
 * ```
 */
export class CudaError extends Error {
  /** The driver's `CUresult`. */
  readonly code: number;
  /** The name of {@link CudaError.code}, such as `CUDA_ERROR_NOT_READY`. */
  readonly codeName: string;
  /** The driver's description of the code; empty when neither the driver nor this package knows it. */
  readonly description: string;
  /** The operation that failed. */
  readonly operation: Operation;
  /** The pid the operation was given, if any. */
  readonly pid: number | undefined;
  /** The process's state when the error was made, where it could be read. */
  readonly state: ProcessState | undefined;
  /** What the message adds after the driver's description: what was left behind, what to do. */
  readonly detail: string | undefined;

  /** Makes an error from a `CUresult` and where it happened. */
  constructor(init: CudaErrorInit) {
    const known = CU_RESULTS[init.code];
    const name = init.codeName ?? known?.name;
    const codeName = name ?? resultName(init.code);
    const description = init.description ?? known?.description;
    const subject = init.pid === undefined
      ? init.operation
      : `${init.operation} of process ${init.pid}`;
    let message = name === undefined && description === undefined
      ? `${subject} failed with CUresult ${init.code}, a code that neither the driver nor this ` +
        `version of @ckpt/cuda knows`
      : `${subject} failed: ${codeName} (${init.code}): ${
        description ?? "the driver gives no description"
      }`;
    if (init.state !== undefined) message += ` (the process is ${init.state})`;
    if (init.detail) message += `. ${capitalize(init.detail)}`;
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "CudaError";
    this.code = init.code;
    this.codeName = codeName;
    this.description = description ?? "";
    this.operation = init.operation;
    this.pid = init.pid;
    this.state = init.state;
    this.detail = init.detail;
  }
}

/**
 * The driver has no CUDA checkpoint API: it is older than 570 (CUDA 12.8), or the operation needs a
 * newer one (GPU remapping needs 580, CUDA 13.0). `code` is `CUDA_ERROR_NOT_SUPPORTED`.
 */
export class CheckpointUnsupportedError extends CudaError {
  /** The driver's `cuDriverGetVersion`, where it could be read. */
  readonly driverVersion: number | undefined;

  /** Makes the error; `detail` says what is missing and which driver is needed. */
  constructor(
    init: { operation: Operation; pid?: number; detail: string; driverVersion?: number },
  ) {
    super({
      code: CUDA_ERROR_NOT_SUPPORTED,
      operation: init.operation,
      pid: init.pid,
      description: "not supported by this driver",
      detail: init.detail,
    });
    this.name = "CheckpointUnsupportedError";
    this.driverVersion = init.driverVersion;
  }
}

/** The native driver could not be opened: libcuda was not found, or FFI is not permitted. */
export class DriverLoadError extends Error {
  /** Every library path that was tried, in order. */
  readonly tried: readonly string[];

  /** Makes the error; the message should say what was tried and what to do. */
  constructor(message: string, tried: readonly string[] = [], options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DriverLoadError";
    this.tried = tried;
  }
}

/** Where a failed call happened, for {@link errorFor}. */
export interface CallContext {
  /** The operation that failed. */
  operation: Operation;
  /** The pid it was given. */
  pid?: number;
  /** The process's state after the failure, where it is known. */
  state?: ProcessState;
  /** A sentence to add to the message. */
  detail?: string;
}

/**
 * The one place that turns a driver's `CUresult` into an error: names and descriptions come from
 * the driver where it knows them, from this package's table otherwise. Returns `undefined` for
 * `CUDA_SUCCESS`.
 */
export function errorFor(
  driver: CheckpointDriver,
  code: number,
  ctx: CallContext,
): CudaError | undefined {
  if (code === CUDA_SUCCESS) return undefined;
  const codeName = driver.errorName(code);
  const description = driver.errorString(code);
  let detail = ctx.detail;
  if (code === CUDA_ERROR_NOT_INITIALIZED && ctx.pid !== undefined && !detail) {
    detail = "The process exists but has never initialised CUDA: it has no GPU state to " +
      "checkpoint or restore";
  }
  if (code === CUDA_ERROR_OPERATING_SYSTEM && ctx.pid !== undefined && !detail) {
    detail = "No process has this pid (it may have exited), or this process may not act on it: " +
      "checkpointing needs root or CAP_SYS_PTRACE over the target";
  }
  if (code === CUDA_ERROR_NOT_SUPPORTED || code === CUDA_ERROR_NOT_FOUND) {
    const hint = "The driver does not support this for this process: processes using managed " +
      "(UVM) memory, or CUDA IPC memory before driver 610, cannot be checkpointed, and drivers " +
      "older than 570 have no checkpoint API";
    detail = detail ? `${detail}. ${hint}` : hint;
  }
  return new CudaError({
    code,
    codeName,
    description,
    operation: ctx.operation,
    pid: ctx.pid,
    state: code === CUDA_ERROR_ILLEGAL_STATE ? ctx.state : undefined,
    detail,
  });
}

/** The sentence with its first letter in upper case. */
export function capitalize(sentence: string): string {
  return sentence.charAt(0).toUpperCase() + sentence.slice(1);
}
