/**
 * The errors this package throws, told apart by type and `code` (docs/ERRORS.md); a `CUresult`
 * becomes one only in {@link driverError}, so no refusal carries a code the driver never gave.
 *
 * @module
 */

import { CU_RESULTS, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_OPERATING_SYSTEM } from "./driver.ts";
import { type CheckpointDriver, resultName } from "./driver.ts";
import type { ProcessState } from "./states.ts";

/** Why an operation was refused before the driver was asked. */
export type RefusalCode =
  /** No way from the process's state to what was asked (a toggle of a locked process). */
  | "STATE"
  /** The GPUs the restore would go to lack the memory the process held ({@link GpuRoomError}). */
  | "NO_ROOM"
  /** The GPU mapping cannot work here: an unknown UUID, a GPU left out, two onto one. */
  | "MAPPING"
  /** The driver lacks the function, or is too old for it ({@link CheckpointUnsupportedError}). */
  | "UNSUPPORTED"
  /** The pid now belongs to another process than the one this handle was made for. */
  | "REPLACED"
  /** Something the machine must have is missing: criu, root, a kernel feature, the driver. */
  | "PREREQUISITE"
  /** A pid a snapshot's processes must come back with is taken by another process. */
  | "PID_TAKEN"
  /** Not a snapshot this version can read (no manifest, corrupt, files changed). */
  | "SNAPSHOT"
  /** It holds GPU memory imported through CUDA IPC, which drivers before 610 never restore. */
  | "IPC";

/** Where an error happened. */
export interface ErrorPlace {
  /** The operation: a step, a goal, a query, a snapshot's, or a C function (`cuInit`). */
  operation: string;
  /** The pid (or thread id) it was given, where there is one. */
  pid?: number;
  /** The process's state where known: after what followed (a rollback), else when it was made. */
  state?: ProcessState;
  /** A sentence added to the message: what was left behind. */
  detail?: string;
  /** The error that led to this one. */
  cause?: unknown;
}

/** Any error of a checkpoint operation: {@link CudaError}, {@link RefusedError}, and the rest. */
export abstract class CheckpointError extends Error {
  /** A number for a driver failure (its `CUresult`), a string otherwise. */
  abstract readonly code: number | string;
  /** The operation. */
  readonly operation: string;
  /** The pid (or thread id) the operation was given, if any. */
  readonly pid: number | undefined;
  /** The process's state where known: after what followed (a rollback), else when it was made. */
  readonly state: ProcessState | undefined;
  /** The sentence the message adds: what was left behind. */
  readonly detail: string | undefined;

  /** Makes the error; `message` is what happened, {@link ErrorPlace.detail} is added to it. */
  protected constructor(message: string, place: ErrorPlace) {
    const text = place.detail ? `${message}. ${capitalize(place.detail)}` : message;
    super(text, place.cause === undefined ? undefined : { cause: place.cause });
    ({ operation: this.operation, pid: this.pid, state: this.state, detail: this.detail } = place);
  }

  /** The same error (its class, its code) with a sentence about what was left, and its `state`. */
  withDetail(detail: string, state?: ProcessState): this {
    const more = capitalize(detail), message = `${this.message}. ${more}`;
    const copy = Object.create(Object.getPrototypeOf(this), Object.getOwnPropertyDescriptors(this));
    return Object.defineProperties(copy, {
      message: { value: message },
      stack: { value: this.stack?.replace(this.message, () => message) },
      detail: { value: this.detail ? `${this.detail}. ${more}` : detail },
      state: { value: state ?? this.state },
      cause: { value: this, configurable: true, writable: true },
    });
  }
}

/**
 * The driver was asked and failed: `code` is the `CUresult` it returned. The message gives the
 * operation, the pid, the code's name and description, the state, and what was left behind.
 *
 * @example
 * ```ts
 * import { CudaError, CudaProcess } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
 * try {
 *   await proc.unlock(); // it is running
 * } catch (e) {
 *   if (e instanceof CudaError) console.log(e.code, e.codeName); // 401 CUDA_ERROR_ILLEGAL_STATE
 * }
 * ```
 */
export class CudaError extends CheckpointError {
  /** The driver's `CUresult`. */
  readonly code: number;
  /** Its name, such as `CUDA_ERROR_NOT_READY`, or `CUresult <n>` for one nobody knows. */
  readonly codeName: string;
  /** The driver's description of the code; empty where nobody knows it. */
  readonly description: string;

  /** Made where the driver failed (public for tests); `codeName` and `description` the driver's. */
  constructor(init: ErrorPlace & { code: number; codeName?: string; description?: string }) {
    const known = CU_RESULTS[init.code], name = init.codeName ?? known?.name;
    const description = init.description ?? known?.description;
    const subject = subjectOf(init), said = description ?? "the driver gives no description";
    let message = name === undefined && description === undefined
      ? `${subject} failed with CUresult ${init.code}, a code neither the driver nor this ` +
        `version of @ckpt/cuda knows`
      : `${subject} failed: ${name ?? resultName(init.code)} (${init.code}): ${said}`;
    if (init.state !== undefined) message += ` (the process is ${init.state})`;
    super(message, init);
    this.name = "CudaError";
    this.code = init.code;
    this.codeName = name ?? resultName(init.code);
    this.description = description ?? "";
  }
}

/**
 * Refused before the driver was asked: nothing happened to the process. `code` says why; the
 * message names the operation, the pid and the reason.
 *
 * @example
 * ```ts
 * import { CudaProcess, RefusedError } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const target = sim.spawn();
 * await sim.driver.lock(target.pid, null);
 * try {
 *   await new CudaProcess(target.pid, { machine: sim }).toggle();
 * } catch (err) {
 *   if (err instanceof RefusedError) console.log(err.code); // "STATE"
 * }
 * ```
 */
export class RefusedError extends CheckpointError {
  /** Why it was refused. */
  readonly code: RefusalCode;
  /** The reason, as the message gives it. */
  readonly reason: string;

  /** Makes the error; `reason` is a clause ("it needs 4136 MiB on GPU-…"). */
  constructor(init: ErrorPlace & { code: RefusalCode; reason: string }) {
    super(`${subjectOf(init)} refused: ${init.reason}`, init);
    this.name = "RefusedError";
    ({ code: this.code, reason: this.reason } = init);
  }
}

/** The driver has no checkpoint API (before 570), or is too old for the operation. */
export class CheckpointUnsupportedError extends RefusedError {
  /** The driver's `cuDriverGetVersion`, where it could be read. */
  readonly driverVersion: number | undefined;

  /** Makes the error; `reason` says what is missing and which driver is needed. */
  constructor(init: ErrorPlace & { reason: string; driverVersion?: number }) {
    super({ ...init, code: "UNSUPPORTED" });
    this.name = "CheckpointUnsupportedError";
    this.driverVersion = init.driverVersion;
  }
}

/**
 * A wait for a state that did not come in time (`waitForState`); `state` is the last seen (none
 * where the process was stopped, and so not asked, or never `asked`: its turn did not come).
 */
export class WaitTimeoutError extends CheckpointError {
  /** Always `"TIMEOUT"`. */
  readonly code: "TIMEOUT" = "TIMEOUT";
  /** The state waited for. */
  readonly wanted: ProcessState;

  /** Makes the error: the message names the process, the state wanted and the one last seen. */
  constructor(pid: number, wanted: ProcessState, ms: number, state?: ProcessState, asked = true) {
    const seen = state ??
      (asked
        ? "stopped (SIGSTOP, Ctrl-Z, a debugger, a restore holding it), and the driver answers no " +
          "call on it till it runs again"
        : "unknown: another operation this program made on it held its turn");
    const message = `process ${pid} did not become ${wanted} within ${ms} ms; it is ${seen}`;
    super(message, { operation: "waitForState", pid, state });
    this.name = "WaitTimeoutError";
    this.wanted = wanted;
  }
}

/** Which part of a snapshot, or of its restore, failed. */
export type SnapshotFailure =
  /** Suspending its CUDA processes failed; they were brought back. */
  | "SUSPEND_FAILED"
  /** The engine (CRIU) failed to dump a tree; every process was put back. */
  | "DUMP_FAILED"
  /** Writing the manifest failed; every process was put back. */
  | "WRITE_FAILED"
  /** The engine failed to restore a tree; the processes it made were ended. */
  | "RESTORE_FAILED"
  /** The processes are back, but their GPU restore failed: they are still checkpointed. */
  | "RESUME_FAILED"
  /** The deadline passed or the signal aborted; what was done was undone. */
  | "STOPPED";

/** A snapshot or restore failed once begun (or stopped before it began); `detail` says where. */
export class SnapshotError extends CheckpointError {
  /** Which part failed. */
  readonly code: SnapshotFailure;
  /** The engine's log of the failed part, where there is one. */
  readonly log: string | undefined;

  /** Makes the error: `message` is what failed, `detail` where the processes were left. */
  constructor(init: ErrorPlace & { code: SnapshotFailure; message: string; log?: string }) {
    super(init.message, init);
    this.name = "SnapshotError";
    ({ code: this.code, log: this.log } = init);
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

/** The one place a `CUresult` (a failure's, never `CUDA_SUCCESS`) becomes an error. */
export function driverError(
  driver: Pick<CheckpointDriver, "errorName" | "errorString">,
  code: number,
  place: ErrorPlace,
): CudaError {
  const detail = place.detail ?? (place.pid !== undefined ? WHY[code] : undefined);
  const [codeName, description] = [driver.errorName(code), driver.errorString(code)];
  return new CudaError({ ...place, detail, code, codeName, description });
}

/** A sentence for the codes whose name alone would mislead about a process. */
const WHY: Readonly<Record<number, string>> = {
  [CUDA_ERROR_NOT_INITIALIZED]: "the process has never initialised CUDA",
  [CUDA_ERROR_OPERATING_SYSTEM]: "no process has this pid, or this program may not act on it " +
    "(that needs root or CAP_SYS_PTRACE)",
};

/** "lock of process 42", or the operation alone where there is no pid. */
const subjectOf = (place: ErrorPlace): string =>
  place.pid === undefined ? place.operation : `${place.operation} of process ${place.pid}`;

/** `err` with a sentence on what was left (a `CheckpointError` keeps its class, takes `state`). */
export function withDetail(err: unknown, detail: string, state?: ProcessState): Error {
  if (!detail) return asError(err);
  if (err instanceof CheckpointError) return err.withDetail(detail, state);
  return new Error(`${messageOf(err)}. ${capitalize(detail)}`, { cause: err });
}

/** `err` as an `Error`: itself where it is one. */
export const asError = (err: unknown): Error => err instanceof Error ? err : new Error(String(err));

/** An error's message, or the value as text: the one way this package words an unknown error. */
export const messageOf = (err: unknown): string => err instanceof Error ? err.message : String(err);

const capitalize = (sentence: string) => sentence.charAt(0).toUpperCase() + sentence.slice(1);

/** What the system's error codes that a path can meet mean, as the end of a sentence about it. */
export const PATH_ERRORS: Readonly<Record<string, string>> = {
  ENOTDIR: "a part of the path above it is a file, not a directory",
  ENOENT: "it does not exist",
  EACCES: "permission denied",
  EPERM: "the operation is not permitted",
  ELOOP: "it is a symbolic link, or has too many of them on its path",
  ENAMETOOLONG: "its name is too long",
  EROFS: "the file system is read-only",
  ENOSPC: "the disk is full",
};
