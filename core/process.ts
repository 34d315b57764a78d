/**
 * {@link CudaProcess}: one CUDA process, locked, checkpointed, restored and unlocked through a
 * {@link CheckpointDriver}.
 *
 * @module
 */

import {
  CU_PROCESS_STATE_CHECKPOINTED,
  CU_PROCESS_STATE_FAILED,
  CU_PROCESS_STATE_LOCKED,
  CU_PROCESS_STATE_RUNNING,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_SUCCESS,
  PROCESS_STATE_NAMES,
  type ProcessState,
  stateName,
} from "./codes.ts";
import type { CheckpointDriver, LockArgs, RestoreArgs } from "./driver.ts";
import {
  type CallContext,
  capitalize,
  CheckpointUnsupportedError,
  CudaError,
  errorFor,
  type Operation,
} from "./errors.ts";
import {
  checkGpuMapping,
  checkPid,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./validate.ts";
import { openNativeDriver } from "../ffi/mod.ts";

/** A driver, or a function that opens one on first use. */
export type DriverSource = CheckpointDriver | (() => Promise<CheckpointDriver>);

let defaultSource: DriverSource | undefined;
let defaultDriver: Promise<CheckpointDriver> | undefined;

/**
 * Sets the driver that {@link CudaProcess} uses when none is given: for example a
 * `SimulatedDriver` in tests, so that code which says `new CudaProcess(pid)` runs without a GPU.
 * `undefined` restores the default, the native driver for the runtime (opened on first use).
 */
export function setDefaultDriver(driver: DriverSource | undefined): void {
  defaultSource = driver;
  defaultDriver = undefined;
}

/**
 * The driver {@link CudaProcess} uses when none is given: the one set with
 * {@link setDefaultDriver}, else the native driver (libcuda), opened once on first use.
 */
export function getDefaultDriver(): Promise<CheckpointDriver> {
  if (!defaultDriver) {
    const opening = openSource(defaultSource ?? openNativeDriver);
    // A failed open is not cached: the user may fix the cause (a path, a permission) and retry.
    defaultDriver = opening.catch((err) => {
      defaultDriver = undefined;
      throw err;
    });
  }
  return defaultDriver;
}

/** Options of {@link CudaProcess}'s constructor. */
export interface CudaProcessOptions {
  /** The driver to use; the default driver ({@link getDefaultDriver}) when left out. */
  driver?: DriverSource;
}

/** Options of {@link CudaProcess.lock} and {@link CudaProcess.suspend}. */
export interface LockOptions {
  /**
   * How long to wait for work already submitted to the GPU to finish, in milliseconds: an integer
   * from 0 to 2^32-1, where 0 waits forever. Defaults to 10 000 ms, as CRIU uses. A lock that
   * times out fails with `CUDA_ERROR_NOT_READY` and leaves the process running.
   */
  timeoutMs?: number;
}

/** Options of {@link CudaProcess.restore} and {@link CudaProcess.resume}. */
export interface RestoreOptions {
  /**
   * Restore onto other GPUs: from the UUID of each GPU the process was checkpointed on to the UUID
   * of the GPU to restore onto (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` or 32 hex digits). The
   * real driver wants every GPU it sees named, even with `CUDA_VISIBLE_DEVICES` set, and the new
   * GPU must be the same chip. Needs driver 580 (CUDA 13.0) or later.
   */
  gpuMapping?: GpuMapping;
}

/** Options of {@link CudaProcess.toggle}: those of a suspend and of a resume. */
export interface ToggleOptions extends LockOptions, RestoreOptions {}

/**
 * A CUDA process whose GPU state can be checkpointed and restored.
 *
 * Every call that reaches the driver returns a Promise and rejects with a {@link CudaError} that
 * carries the driver's `CUresult` as `code`. Bad input throws a `TypeError` or `RangeError` that
 * names the value and what was expected, before any driver call.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * const proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();   // lock + checkpoint: GPU memory is now in host memory
 * await proc.resume();    // restore + unlock
 * console.log(await proc.state()); // "running"
 * ```
 */
export class CudaProcess {
  /** The process id (a thread id of the process works as well). */
  readonly pid: number;
  readonly #source: DriverSource | undefined;
  #driver: Promise<CheckpointDriver> | undefined;

  /**
   * A handle on a process. Nothing is called yet: the driver is opened on first use.
   *
   * @param pid the process id, or the id of one of its threads: an integer from 1 to 2^31-1.
   * @param options the driver to use; the native driver by default, opened on first use.
   */
  constructor(pid: number, options: CudaProcessOptions = {}) {
    this.pid = checkPid(pid);
    if (typeof options !== "object" || options === null) {
      throw new TypeError(`options must be an object such as { driver }, got ${typeof options}`);
    }
    const driver = options.driver;
    if (
      driver !== undefined && typeof driver !== "function" &&
      (typeof driver !== "object" || driver === null || typeof driver.getState !== "function")
    ) {
      throw new TypeError(
        "options.driver must be a CheckpointDriver (such as a SimulatedDriver) or a function that opens one",
      );
    }
    this.#source = driver;
  }

  /** The driver this process talks to, opened on first use. */
  driver(): Promise<CheckpointDriver> {
    if (!this.#driver) {
      this.#driver = openSource(this.#source ?? getDefaultDriver);
      this.#driver.catch(() => this.#driver = undefined);
    }
    return this.#driver;
  }

  /**
   * The process's checkpoint state: `"running"`, `"locked"`, `"checkpointed"` or `"failed"`.
   * Rejects with `CUDA_ERROR_NOT_INITIALIZED` for a process that never used CUDA and
   * `CUDA_ERROR_OPERATING_SYSTEM` for a pid that does not exist.
   */
  async state(): Promise<ProcessState> {
    const driver = await this.driver();
    const { code, value } = await driver.getState(this.pid);
    this.#throwIfFailed(driver, code, { operation: "getState", pid: this.pid });
    return this.#nameState(value);
  }

  /** The id of the thread the driver uses to restore the process (what CRIU needs). */
  async restoreThreadId(): Promise<number> {
    const driver = await this.driver();
    const { code, value } = await driver.getRestoreThreadId(this.pid);
    this.#throwIfFailed(driver, code, { operation: "getRestoreThreadId", pid: this.pid });
    return value;
  }

  /**
   * Locks the process: its CUDA calls block and work already submitted finishes. Waits at most
   * `timeoutMs` (10 s by default; 0 waits forever) and then fails with `CUDA_ERROR_NOT_READY`,
   * leaving the process running.
   */
  async lock(options: LockOptions = {}): Promise<void> {
    const args: LockArgs = { timeoutMs: this.#timeout(options) };
    const driver = await this.driver();
    await this.#call(driver, "lock", driver.lock(this.pid, args));
  }

  /** Checkpoints a locked process: copies its GPU memory into host memory and releases the GPU. */
  async checkpoint(): Promise<void> {
    const driver = await this.driver();
    await this.#call(driver, "checkpoint", driver.checkpoint(this.pid));
  }

  /**
   * Restores a checkpointed process onto the GPUs it came from, or onto others with
   * `gpuMapping`. The process is then locked: call {@link CudaProcess.unlock} to let it run.
   */
  async restore(options: RestoreOptions = {}): Promise<void> {
    const args = this.#restoreArgs(options);
    const driver = await this.driver();
    await this.#call(driver, "restore", driver.restore(this.pid, args));
  }

  /** Unlocks a locked process so that its CUDA calls run again. */
  async unlock(): Promise<void> {
    const driver = await this.driver();
    await this.#call(driver, "unlock", driver.unlock(this.pid));
  }

  /**
   * Lock and checkpoint. If the checkpoint fails, the process is unlocked again and the error
   * says that it was left running (or, if even that failed, the state it is in).
   */
  async suspend(options: LockOptions = {}): Promise<void> {
    const timeoutMs = this.#timeout(options);
    await this.lock({ timeoutMs });
    try {
      await this.checkpoint();
    } catch (err) {
      // Whatever went wrong (the driver's answer, or a call that could not complete at all), the
      // lock is ours to undo.
      let detail: string;
      try {
        await this.unlock();
        detail = "suspend unlocked the process again: it was left running";
      } catch (unlockErr) {
        const state = await this.#stateOrUndefined();
        detail = `suspend could not unlock it again (${messageOf(unlockErr)}); the process is ${
          state ?? "gone or unreadable"
        }`;
      }
      throw restate(err, detail);
    }
  }

  /**
   * Restore and unlock. If the restore fails, the process is left checkpointed, its GPU memory
   * still in host memory, and resume can be tried again (on other GPUs, with `gpuMapping`). If the
   * unlock fails, the error says that the process is restored but locked.
   */
  async resume(options: RestoreOptions = {}): Promise<void> {
    const args = this.#restoreArgs(options);
    const driver = await this.driver();
    try {
      await this.#call(driver, "restore", driver.restore(this.pid, args));
    } catch (err) {
      // Refused before reaching the process (an old driver): nothing happened to it.
      if (!(err instanceof CudaError) || err instanceof CheckpointUnsupportedError) throw err;
      const state = await this.#stateOrUndefined();
      const detail = state === "checkpointed"
        ? "resume left the process checkpointed, its GPU memory still held in host memory; resume can be tried again"
        : `the process is ${state ?? "gone or unreadable"}`;
      throw restate(err, detail);
    }
    try {
      await this.unlock();
    } catch (err) {
      const state = await this.#stateOrUndefined();
      throw restate(
        err,
        state === "locked"
          ? "resume restored the process but could not unlock it: it is locked; call unlock() to let it run"
          : `resume restored the process but could not unlock it; the process is ${
            state ?? "gone or unreadable"
          }`,
      );
    }
  }

  /**
   * Does what NVIDIA's `cuda-checkpoint --toggle` does: suspends a running process, resumes a
   * checkpointed one, and refuses any other state. Resolves to the new state.
   */
  async toggle(options: ToggleOptions = {}): Promise<ProcessState> {
    // Both halves' options are checked before anything is asked of the driver.
    this.#timeout(options);
    this.#restoreArgs(options);
    const state = await this.state();
    if (state === "running") {
      if (options.gpuMapping !== undefined) {
        throw new RangeError(
          "gpuMapping applies when toggle resumes a checkpointed process, but the process is running",
        );
      }
      await this.suspend(options);
      return "checkpointed";
    }
    if (state === "checkpointed") {
      await this.resume(options);
      return "running";
    }
    throw new CudaError({
      code: CUDA_ERROR_ILLEGAL_STATE,
      operation: "toggle",
      pid: this.pid,
      state,
      detail: state === "locked"
        ? "toggle goes between running and checkpointed; call unlock() or checkpoint() first"
        : "a process in the failed state cannot be recovered",
    });
  }

  /** `CudaProcess(pid)`, for logs. */
  toString(): string {
    return `CudaProcess(${this.pid})`;
  }

  #timeout(options: LockOptions): number {
    if (typeof options !== "object" || options === null) {
      throw new TypeError(`options must be an object such as { timeoutMs: 10000 }, got ${options}`);
    }
    return options.timeoutMs === undefined
      ? DEFAULT_LOCK_TIMEOUT_MS
      : checkTimeoutMs(options.timeoutMs);
  }

  #restoreArgs(options: RestoreOptions): RestoreArgs | null {
    if (typeof options !== "object" || options === null) {
      throw new TypeError(
        `options must be an object such as { gpuMapping: { "GPU-...": "GPU-..." } }, got ${options}`,
      );
    }
    if (options.gpuMapping === undefined) return null;
    return { gpuPairs: checkGpuMapping(options.gpuMapping) };
  }

  async #call(
    driver: CheckpointDriver,
    operation: Operation,
    call: Promise<number>,
  ): Promise<void> {
    const code = await call;
    if (code === CUDA_SUCCESS) return;
    const state = code === CUDA_ERROR_ILLEGAL_STATE ? await this.#stateOrUndefined() : undefined;
    // Refused as illegal in a state the operation accepts: something else changed it meanwhile.
    const detail = state !== undefined && ACCEPTS[operation] === state
      ? "Another operation on this process was under way when this one was made"
      : undefined;
    this.#throwIfFailed(driver, code, { operation, pid: this.pid, state, detail });
  }

  #throwIfFailed(driver: CheckpointDriver, code: number, ctx: CallContext): void {
    const err = errorFor(driver, code, ctx);
    if (err) throw err;
  }

  #nameState(value: number): ProcessState {
    const name = stateName(value);
    if (name === undefined) {
      const known = PROCESS_STATE_NAMES.map((n, i) => `${i} ${n}`).join(", ");
      throw new RangeError(
        `getState of process ${this.pid} returned process state ${value}, which this version of @ckpt/cuda does not know (known: ${known}); a newer driver may have added it`,
      );
    }
    return name;
  }

  async #stateOrUndefined(): Promise<ProcessState | undefined> {
    try {
      return await this.state();
    } catch {
      return undefined;
    }
  }
}

/** A driver, opened if it is given as a function that opens one. */
function openSource(source: DriverSource): Promise<CheckpointDriver> {
  return typeof source === "function" ? source() : Promise.resolve(source);
}

/** The state each state-changing operation starts from. */
const ACCEPTS: Partial<Record<Operation, ProcessState>> = {
  lock: "running",
  checkpoint: "locked",
  restore: "checkpointed",
  unlock: "locked",
};

/** The process state numbers, for callers that work with the raw driver. */
export const ProcessStates: Readonly<Record<ProcessState, number>> = {
  running: CU_PROCESS_STATE_RUNNING,
  locked: CU_PROCESS_STATE_LOCKED,
  checkpointed: CU_PROCESS_STATE_CHECKPOINTED,
  failed: CU_PROCESS_STATE_FAILED,
};

/** The error again, with a sentence saying what was done about it and what the process is now. */
function restate(err: unknown, detail: string): Error {
  if (!(err instanceof CudaError)) {
    return new Error(`${messageOf(err)}. ${capitalize(detail)}`, { cause: err });
  }
  return new CudaError({
    code: err.code,
    codeName: err.codeName,
    description: err.description,
    operation: err.operation,
    pid: err.pid,
    state: err.state,
    detail: err.detail ? `${err.detail}. ${capitalize(detail)}` : detail,
    cause: err,
  });
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
