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
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
  PROCESS_STATE_NAMES,
  type ProcessState,
  stateName,
} from "./codes.ts";
import type { CheckpointDriver, GpuPair } from "./driver.ts";
import {
  capitalize,
  CheckpointUnsupportedError,
  CudaError,
  errorFor,
  type Operation,
} from "./errors.ts";
import { describeValue } from "./uuid.ts";
import {
  checkCapability,
  checkMapping,
  type DriverOperation,
  explainRejectedMapping,
} from "./gate.ts";
import { inProcessOrder } from "./order.ts";
import {
  beforeSelfLock,
  forgetHeld,
  GpuRoomError,
  heldNow,
  isOwnPid,
  rememberHeld,
  reserveRoom,
  selfRunning,
} from "./room.ts";
import { wayBetween } from "./steps.ts";
import {
  checkSource,
  currentDefaultSource,
  type DriverLease,
  type DriverSource,
  lease,
} from "./sources.ts";
import {
  checkGpuMapping,
  checkInteger,
  checkOptionsObject,
  checkPid,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./validate.ts";

export { type DriverSource, getDefaultDriver, setDefaultDriver } from "./sources.ts";

/** Options of {@link CudaProcess}'s constructor. */
export interface CudaProcessOptions {
  /**
   * The driver to use; the default driver ({@link getDefaultDriver}) when left out. A driver given
   * as an object is yours to close; one given as a function that opens it is opened on first use,
   * shared by every process given the same function, and closed when the last of them is closed.
   */
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
   * GPU must be the same chip. Where the driver can list its GPUs the mapping is checked before the
   * call, and the error names what is wrong. Needs driver 580 (CUDA 13.0) or later.
   */
  gpuMapping?: GpuMapping;
  /**
   * Whether to check, before asking the driver, that the GPUs the process goes to have as much
   * free memory as it held when this package checkpointed it (default `true`). Too little, and the
   * restore is refused with a {@link GpuRoomError}: the process stays checkpointed and can be
   * resumed once there is room. On driver 580 a restore that runs out of GPU memory inside the
   * driver leaves the process unrestorable for good, so turn this off only to see the driver's
   * own answer. Nothing is checked for a process checkpointed by another program or an earlier
   * run, or where the host cannot tell GPU memory (no NVML).
   */
  checkRoom?: boolean;
}

/**
 * Options of {@link CudaProcess.toggle}: those of a suspend and of a resume. Both are checked
 * first; then only the half that runs uses its own (`timeoutMs` a suspend, `gpuMapping` a
 * resume), so one set of options serves a toggle both ways, as NVIDIA's utility takes them.
 */
export interface ToggleOptions extends LockOptions, RestoreOptions {}

/** Options of {@link CudaProcess.waitForState}. */
export interface WaitOptions {
  /** How long to wait at most, in ms (an integer from 0); left out, as long as it takes. */
  timeoutMs?: number;
  /** Stops the wait: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** How often to ask the driver, in ms (an integer from 1); 50 by default. */
  intervalMs?: number;
}

/**
 * A wait for a state that did not come in time. `state` is the last state seen (or why it could
 * not be read).
 */
export class WaitTimeoutError extends Error {
  /** The pid waited on. */
  readonly pid: number;
  /** The state waited for. */
  readonly wanted: ProcessState;
  /** The last state seen. */
  readonly state: ProcessState | undefined;

  /** Makes the error; the message names the process, the state wanted and the one seen. */
  constructor(
    pid: number,
    wanted: ProcessState,
    timeoutMs: number,
    state: ProcessState | undefined,
  ) {
    super(
      `process ${pid} did not become ${wanted} within ${timeoutMs} ms; it is ${
        state ?? "of unknown state"
      }`,
    );
    this.name = "WaitTimeoutError";
    this.pid = pid;
    this.wanted = wanted;
    this.state = state;
  }
}

/** The steps of {@link CudaProcess}, one driver call each, for a caller that holds its turn. */
export interface ProcessSteps {
  /** The driver the steps go to. */
  readonly driver: CheckpointDriver;
  /** `getState`, by name. */
  state(): Promise<ProcessState>;
  /** `lock` with this timeout. */
  lock(timeoutMs: number): Promise<void>;
  /** `checkpoint`. */
  checkpoint(): Promise<void>;
  /** `restore`, with GPU pairs (checked first) or without. */
  restore(pairs: GpuPair[] | null): Promise<void>;
  /** `unlock`. */
  unlock(): Promise<void>;
}

/**
 * Runs `body` with the process's steps while holding its turn: no other operation on the pid
 * through the driver runs in between. For the group operations of this package; not exported from
 * its main module.
 */
export function inTurn<T>(
  proc: CudaProcess,
  body: (steps: ProcessSteps) => Promise<T>,
): Promise<T> {
  return turns.get(proc)!(body) as Promise<T>;
}

/** Each process's way into its turn; kept off the class so that it is no public member. */
const turns = new WeakMap<
  CudaProcess,
  (body: (steps: ProcessSteps) => Promise<unknown>) => Promise<unknown>
>();

/**
 * A CUDA process whose GPU state can be checkpointed and restored.
 *
 * Every call that reaches the driver returns a Promise and rejects with a {@link CudaError} that
 * carries the driver's `CUresult` as `code`. Bad input rejects with a `TypeError` or `RangeError`
 * that names the value and what was expected, before any driver call.
 *
 * Operations on one pid through one driver run one after another, in the order they were made:
 * a `state()` asked during a `suspend()` answers once the suspend is done, and two `resume()`s
 * made at once restore the process once, and the second then says it was not checkpointed.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * await using proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();   // lock + checkpoint: GPU memory is now in host memory
 * await proc.resume();    // restore + unlock
 * console.log(await proc.state()); // "running"
 * ```
 */
export class CudaProcess {
  /** The process id (a thread id of the process works as well). */
  readonly pid: number;
  readonly #source: DriverSource | undefined;
  #lease: DriverLease | undefined;
  #closed = false;
  readonly #running = new Set<Promise<unknown>>();

  /**
   * A handle on a process. Nothing is called yet: the driver is opened on first use.
   *
   * @param pid the process id, or the id of one of its threads: an integer from 1 to 2^31-1.
   * @param options the driver to use; the default driver when left out.
   */
  constructor(pid: number, options: CudaProcessOptions = {}) {
    this.pid = checkPid(pid);
    checkOptionsObject(options, "{ driver }");
    if (options.driver !== undefined) checkSource(options.driver, "options.driver");
    this.#source = options.driver;
    turns.set(this, (body) =>
      this.#run(true, (driver) =>
        body({
          driver,
          state: () => this.#getState(driver),
          lock: (timeoutMs) => this.#lock(driver, checkTimeoutMs(timeoutMs)),
          checkpoint: () => this.#step(driver, "checkpoint"),
          restore: (pairs) => this.#restore(driver, pairs, true),
          unlock: () => this.#step(driver, "unlock"),
        })));
  }

  /** The driver this process talks to, opened on first use. */
  driver(): Promise<CheckpointDriver> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (!this.#lease) {
      const taken = lease(this.#source ?? currentDefaultSource());
      this.#lease = taken;
      // A driver that failed to open is not kept: the next call tries again.
      taken.driver.catch(() => {
        if (this.#lease === taken) this.#lease = undefined;
        taken.release().catch(() => {});
      });
    }
    return this.#lease.driver;
  }

  /**
   * The process's checkpoint state: `"running"`, `"locked"`, `"checkpointed"` or `"failed"`.
   * Rejects with `CUDA_ERROR_NOT_INITIALIZED` for a process that never used CUDA and
   * `CUDA_ERROR_OPERATING_SYSTEM` for a pid that does not exist.
   */
  state(): Promise<ProcessState> {
    return this.#run(true, (driver) => this.#getState(driver));
  }

  /**
   * The id of the thread the driver uses to restore the process (what CRIU needs). The driver
   * answers at once even while another operation is under way, and so does this.
   */
  restoreThreadId(): Promise<number> {
    return this.#run(false, async (driver) => {
      await checkCapability(driver, "getRestoreThreadId", this.pid);
      const { code, value } = await driver.getRestoreThreadId(this.pid);
      if (code !== CUDA_SUCCESS) throw await this.#failure(driver, "getRestoreThreadId", code);
      return value;
    });
  }

  /**
   * Locks the process: its CUDA calls block and work already submitted finishes. Waits at most
   * `timeoutMs` (10 s by default; 0 waits forever) and then fails with `CUDA_ERROR_NOT_READY`,
   * leaving the process running.
   */
  lock(options: LockOptions = {}): Promise<void> {
    return this.#checked(
      () => timeoutOf(options),
      (timeoutMs, driver) => this.#lock(driver, timeoutMs),
    );
  }

  /** Checkpoints a locked process: copies its GPU memory into host memory and releases the GPU. */
  checkpoint(): Promise<void> {
    return this.#run(true, (driver) => this.#step(driver, "checkpoint"));
  }

  /**
   * Restores a checkpointed process onto the GPUs it came from, or onto others with
   * `gpuMapping`. The process is then locked: call {@link CudaProcess.unlock} to let it run.
   */
  restore(options: RestoreOptions = {}): Promise<void> {
    return this.#checked(
      () => restoreInputsOf(options),
      ({ pairs, checkRoom }, driver) => this.#restore(driver, pairs, checkRoom),
    );
  }

  /** Unlocks a locked process so that its CUDA calls run again. */
  unlock(): Promise<void> {
    return this.#run(true, (driver) => this.#step(driver, "unlock"));
  }

  /**
   * Lock and checkpoint. If the checkpoint fails, the process is unlocked again and the error
   * says that it was left running (or, if even that failed, the state it is in).
   */
  suspend(options: LockOptions = {}): Promise<void> {
    return this.#checked(
      () => timeoutOf(options),
      (timeoutMs, driver) => this.#suspend(driver, timeoutMs),
    );
  }

  /**
   * Restore and unlock. A restore that would not fit in the free GPU memory is refused before the
   * driver is asked ({@link GpuRoomError}; see {@link RestoreOptions.checkRoom}): the process stays
   * checkpointed and resume can be tried again once there is room, or onto other GPUs with
   * `gpuMapping`. Where the driver's own restore fails the error says what state that left, and
   * whether a retry can work. If the unlock fails, the error says that the process is restored but
   * locked.
   */
  resume(options: RestoreOptions = {}): Promise<void> {
    return this.#checked(
      () => restoreInputsOf(options),
      ({ pairs, checkRoom }, driver) => this.#resume(driver, pairs, checkRoom),
    );
  }

  /**
   * Does what NVIDIA's `cuda-checkpoint --toggle` does: suspends a running process, resumes a
   * checkpointed one, and refuses any other state. Resolves to the new state. A `gpuMapping` is
   * used by a resume only (a suspend has nothing to map), a `timeoutMs` by a suspend only.
   */
  toggle(options: ToggleOptions = {}): Promise<ProcessState> {
    // Both halves' options are checked before anything is asked of the driver.
    const inputs = () => ({ timeoutMs: timeoutOf(options), ...restoreInputsOf(options) });
    return this.#checked(inputs, async ({ timeoutMs, pairs, checkRoom }, driver) => {
      const state = await this.#getState(driver);
      if (state === "running") {
        await this.#suspend(driver, timeoutMs);
        return "checkpointed";
      }
      if (state === "checkpointed") {
        await this.#resume(driver, pairs, checkRoom);
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
    });
  }

  /**
   * Lets go of the driver: waits for this handle's operations to finish, then closes the driver
   * if this handle opened it (a driver given as a function, shared with other handles given the
   * same function, is closed by the last of them). Later operations reject. Idempotent.
   */
  async close(): Promise<void> {
    this.#closed = true;
    while (this.#running.size > 0) {
      await Promise.allSettled([...this.#running]);
    }
    const held = this.#lease;
    this.#lease = undefined;
    await held?.release();
  }

  /** {@link CudaProcess.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Resolves once the process is in `state` (asking the driver every `intervalMs`); rejects with
   * {@link WaitTimeoutError} when `timeoutMs` passes first, with the signal's reason when it is
   * aborted, and with the driver's error when the process cannot be read (it exited, or never used
   * CUDA). Useful when another program (CRIU, NVIDIA's utility) changes the state.
   *
   * @example
   * ```ts ignore
   * await proc.waitForState("checkpointed", { timeoutMs: 30_000 });
   * ```
   */
  async waitForState(state: ProcessState, options: WaitOptions = {}): Promise<void> {
    if (!(PROCESS_STATE_NAMES as readonly unknown[]).includes(state)) {
      throw new RangeError(
        `state must be one of ${PROCESS_STATE_NAMES.map((n) => `"${n}"`).join(", ")}, got ${
          describeValue(state)
        }`,
      );
    }
    checkOptionsObject(options, "{ timeoutMs: 5000 }");
    const timeoutMs = options.timeoutMs === undefined
      ? undefined
      : checkInteger(options.timeoutMs, "timeoutMs", 0);
    const intervalMs = options.intervalMs === undefined
      ? 50
      : checkInteger(options.intervalMs, "intervalMs", 1);
    const signal = options.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new TypeError(`signal must be an AbortSignal, got ${describeValue(signal)}`);
    }
    const driver = await this.driver();
    const clock = clockOf(driver);
    const start = clock.now();
    for (;;) {
      signal?.throwIfAborted();
      const seen = await this.state();
      if (seen === state) return;
      if (seen === "failed") {
        throw new Error(
          `process ${this.pid} is in the failed state, which is final: it will never be ${state}`,
        );
      }
      signal?.throwIfAborted();
      const left = timeoutMs === undefined ? Infinity : timeoutMs - (clock.now() - start);
      if (left <= 0) throw new WaitTimeoutError(this.pid, state, timeoutMs!, seen);
      await clock.sleep(Math.min(intervalMs, left), signal);
    }
  }

  /** `CudaProcess(pid)`, for logs. */
  toString(): string {
    return `CudaProcess(${this.pid})`;
  }

  // ---- running operations ----

  /** Checks the inputs, then runs the operation in this process's order. */
  #checked<I, T>(
    inputs: () => I,
    body: (input: I, driver: CheckpointDriver) => Promise<T>,
  ): Promise<T> {
    let input: I;
    try {
      input = inputs();
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#run(true, (driver) => body(input, driver));
  }

  /** Runs `body` with the driver: after this pid's earlier operations when `ordered`. */
  #run<T>(ordered: boolean, body: (driver: CheckpointDriver) => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closedError());
    const run = this.driver().then((driver) =>
      ordered ? inProcessOrder(driver, this.pid, () => body(driver)) : body(driver)
    );
    this.#running.add(run);
    const forget = () => this.#running.delete(run);
    run.then(forget, forget);
    return run;
  }

  #closedError(): Error {
    return new Error(`${this}: this handle has been closed; make a new CudaProcess to go on`);
  }

  // ---- the steps, each one driver call (callers hold this pid's turn) ----

  async #getState(driver: CheckpointDriver): Promise<ProcessState> {
    await checkCapability(driver, "getState", this.pid);
    const { code, value } = await driver.getState(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure(driver, "getState", code);
    const name = stateName(value);
    if (name === undefined) {
      const known = PROCESS_STATE_NAMES.map((n, i) => `${i} ${n}`).join(", ");
      throw new RangeError(
        `getState of process ${this.pid} returned process state ${value}, which this version of @ckpt/cuda does not know (known: ${known}); a newer driver may have added it`,
      );
    }
    return name;
  }

  async #lock(driver: CheckpointDriver, timeoutMs: number): Promise<void> {
    await checkCapability(driver, "lock", this.pid);
    // Locking this very process: the room check's NVML reads stop until it runs again.
    const self = isOwnPid(this.pid);
    if (self) await beforeSelfLock();
    const code = await driver.lock(this.pid, { timeoutMs });
    if (code !== CUDA_SUCCESS) {
      if (self) selfRunning();
      throw await this.#failure(driver, "lock", code);
    }
    // Locked from running: what it held when last checkpointed is no longer what it holds.
    forgetHeld(driver, this.pid);
  }

  async #step(driver: CheckpointDriver, operation: "checkpoint" | "unlock"): Promise<void> {
    await checkCapability(driver, operation, this.pid);
    // What a checkpoint takes off the GPU is what its restore will need there (core/room.ts).
    const held = operation === "checkpoint" ? await heldNow(driver, this.pid) : undefined;
    const code = await driver[operation](this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure(driver, operation, code);
    if (held) rememberHeld(driver, this.pid, held);
    if (operation === "unlock" && isOwnPid(this.pid)) selfRunning();
  }

  /** Checks that the driver can take the mapping and that it can work; throws before any call. */
  async #checkRestore(driver: CheckpointDriver, pairs: GpuPair[] | null): Promise<void> {
    await checkCapability(driver, "restore", this.pid, pairs?.length ?? 0);
    if (pairs) await checkMapping(driver, this.pid, pairs);
  }

  /**
   * The restore call itself, the room for it checked and claimed first (unless `checkRoom` is
   * false); {@link CudaProcess.#checkRestore} has been made.
   */
  async #restoreCall(
    driver: CheckpointDriver,
    pairs: GpuPair[] | null,
    checkRoom: boolean,
  ): Promise<void> {
    let release = () => {};
    if (checkRoom) {
      try {
        release = await reserveRoom(driver, this.pid, pairs);
      } catch (err) {
        if (!(err instanceof GpuRoomError)) throw err;
        // What it held is remembered from its checkpoint: refuse only while it is checkpointed
        // still; else the record is old, and the driver's own answer says what is wrong.
        if (await this.#checkpointedNow(driver)) throw err;
        forgetHeld(driver, this.pid);
      }
    }
    let code: number;
    try {
      code = await driver.restore(this.pid, pairs === null ? null : { gpuPairs: pairs });
    } finally {
      release();
    }
    if (code === CUDA_SUCCESS) {
      forgetHeld(driver, this.pid);
      return;
    }
    const detail = code === CUDA_ERROR_INVALID_VALUE && pairs !== null && pairs.length > 0
      ? await explainRejectedMapping(driver, pairs)
      : code === CUDA_ERROR_OUT_OF_MEMORY
      ? RAN_OUT
      : undefined;
    throw await this.#failure(driver, "restore", code, detail);
  }

  async #restore(
    driver: CheckpointDriver,
    pairs: GpuPair[] | null,
    checkRoom: boolean,
  ): Promise<void> {
    await this.#checkRestore(driver, pairs);
    await this.#restoreCall(driver, pairs, checkRoom);
  }

  async #suspend(driver: CheckpointDriver, timeoutMs: number): Promise<void> {
    await checkCapability(driver, "checkpoint", this.pid);
    await checkCapability(driver, "unlock", this.pid);
    for (const step of ["lock", "checkpoint"] as const) {
      try {
        if (step === "lock") await this.#lock(driver, timeoutMs);
        else await this.#step(driver, "checkpoint");
      } catch (err) {
        // No process (it exited) or no CUDA in it: nothing is left to undo, and the error says
        // so. A missing capability reached no process.
        if (isGone(err) || err instanceof CheckpointUnsupportedError) throw err;
        throw restate(err, await this.#afterFailedSuspend(driver, step, err));
      }
    }
  }

  /**
   * Brings a process whose lock or checkpoint failed inside suspend back to running, from the
   * state the failure left it in, where the driver allows it; says what was done and where the
   * process is.
   */
  async #afterFailedSuspend(
    driver: CheckpointDriver,
    step: "lock" | "checkpoint",
    err: unknown,
  ): Promise<string> {
    const state = await this.#getState(driver).catch(() => undefined);
    // An illegal state means the call changed nothing: the error names the state, and a process
    // another program moved (a lock refused, a checkpoint of a process no longer locked) is not
    // ours to move back. A checkpoint refused while the process is still locked leaves our lock.
    if (
      err instanceof CudaError && err.code === CUDA_ERROR_ILLEGAL_STATE &&
      (step === "lock" || state !== "locked")
    ) {
      return "";
    }
    if (state === undefined && step === "lock") {
      return `nothing was checkpointed; ${await this.#stateSentence(driver)}`;
    }
    // Not known (the state could not be read) after our lock: the lock is ours to undo.
    const back = state === undefined ? ["unlock" as const] : wayBetween(state, "running");
    if (back === undefined) {
      return `the failed ${step} left the process in the failed state: ${FAILED_IS_FINAL}`;
    }
    if (back.length === 0) {
      return step === "lock"
        ? "nothing was checkpointed: the process is running"
        : "the failed checkpoint left the process running";
    }
    try {
      for (const s of back) {
        if (s === "restore") await this.#restore(driver, null, true);
        else await this.#step(driver, "unlock");
      }
    } catch (undoErr) {
      return `suspend could not bring it back to running (${messageOf(undoErr)}); ${await this
        .#stateSentence(driver)}`;
    }
    return back.length === 1
      ? "suspend unlocked the process again: it was left running"
      : "suspend restored and unlocked the process again: it was left running";
  }

  async #resume(
    driver: CheckpointDriver,
    pairs: GpuPair[] | null,
    checkRoom: boolean,
  ): Promise<void> {
    await this.#checkRestore(driver, pairs);
    await checkCapability(driver, "unlock", this.pid);
    try {
      await this.#restoreCall(driver, pairs, checkRoom);
    } catch (err) {
      throw restate(err, await this.#afterFailedRestore(driver, err));
    }
    try {
      await this.#step(driver, "unlock");
    } catch (err) {
      const state = await this.#describeState(driver);
      throw restate(
        err,
        state === "locked"
          ? "resume restored the process but could not unlock it: it is locked; call unlock() to let it run"
          : `resume restored the process but could not unlock it; the process is ${state}`,
      );
    }
  }

  /** What a failed restore inside resume left behind, as a sentence. */
  async #afterFailedRestore(driver: CheckpointDriver, err: unknown): Promise<string> {
    // The restore's own code already says there is no process, or no CUDA in it, or that the
    // driver refuses it; a GpuRoomError says that nothing was asked.
    if (isGone(err) || err instanceof GpuRoomError) return "";
    const state = err instanceof CudaError && err.state !== undefined
      ? err.state
      : await this.#describeState(driver);
    // An illegal state means the restore changed nothing; anything else was the restore's doing.
    const illegal = err instanceof CudaError && err.code === CUDA_ERROR_ILLEGAL_STATE;
    switch (state) {
      case "checkpointed":
        // The restore's error says what running out of memory left (RAN_OUT).
        return err instanceof CudaError && err.code === CUDA_ERROR_OUT_OF_MEMORY
          ? ""
          : "resume left the process checkpointed, its GPU memory still held in host memory; " +
            "resume can be tried again, onto other GPUs with gpuMapping if these cannot take it";
      case "running":
        return illegal
          ? "nothing was restored: it was not checkpointed"
          : "the failed restore left the process running";
      case "locked":
        return illegal
          ? "nothing was restored: it is locked, not checkpointed; call unlock() to let it run"
          : "the failed restore left the process locked; call unlock() to let it run";
      case "failed":
        return `the failed restore left the process in the failed state: ${FAILED_IS_FINAL}`;
      default:
        return `the process is ${state}`;
    }
  }

  /** "the process is running", or what else is known of its state, for a message. */
  async #stateSentence(driver: CheckpointDriver): Promise<string> {
    const state = await this.#describeState(driver);
    return state === "failed"
      ? `the process is in the failed state: ${FAILED_IS_FINAL}`
      : `the process is ${state}`;
  }

  /** Whether the driver says, now, that the process is there and checkpointed; never rejects. */
  async #checkpointedNow(driver: CheckpointDriver): Promise<boolean> {
    const now = await driver.getState(this.pid).catch(() => undefined);
    return now?.code === CUDA_SUCCESS && now.value === CU_PROCESS_STATE_CHECKPOINTED;
  }

  /** The process's state for a message: its name, or why it cannot be read. */
  async #describeState(driver: CheckpointDriver): Promise<string> {
    try {
      return await this.#getState(driver);
    } catch (err) {
      if (err instanceof CudaError && err.code === CUDA_ERROR_OPERATING_SYSTEM) {
        return "gone (no process has this pid any more)";
      }
      if (err instanceof CudaError && err.code === CUDA_ERROR_NOT_INITIALIZED) {
        return "not a CUDA process";
      }
      return `of unknown state (getState failed: ${messageOf(err)})`;
    }
  }

  /** The error for a failed call: the state for an illegal state, and why it may have happened. */
  async #failure(
    driver: CheckpointDriver,
    operation: DriverOperation,
    code: number,
    detail?: string,
  ): Promise<CudaError> {
    let state: ProcessState | undefined;
    if (code === CUDA_ERROR_ILLEGAL_STATE && operation !== "getState") {
      const described = await this.#describeState(driver);
      state = (PROCESS_STATE_NAMES as readonly string[]).includes(described)
        ? described as ProcessState
        : undefined;
      // Refused as illegal in a state the operation accepts: something else changed it meanwhile.
      if (state !== undefined && ACCEPTS[operation] === state) {
        detail = "another program, or a handle on another thread id of this process, changed its " +
          "state while this call was made";
      }
      if (state === "failed") detail = FAILED_IS_FINAL;
    }
    // A restore refused although the process is there and checkpointed: what driver 580 does
    // after a restore of it ran out of GPU memory.
    if (
      code === CUDA_ERROR_OPERATING_SYSTEM && operation === "restore" && !detail &&
      await this.#checkpointedNow(driver)
    ) {
      detail = REFUSED;
    }
    return errorFor(driver, code, { operation, pid: this.pid, state, detail })!;
  }
}

/** A clock: the driver's own where it keeps one (the simulator's virtual time), else real time. */
export interface Clock {
  /** Now, in ms. */
  now(): number;
  /** Resolves after `ms`; rejects with the signal's reason when it is aborted first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The clock of `driver`: its own `now`/`sleep` where it has them, else the real clock. */
export function clockOf(driver: CheckpointDriver): Clock {
  const now = driver.now ? () => driver.now!() : () => performance.now();
  const sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const slept = driver.sleep
      ? driver.sleep(ms)
      : new Promise<void>((resolve) => timer = setTimeout(resolve, ms));
    if (!signal) return slept;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        if (timer !== undefined) clearTimeout(timer);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      slept.then(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, reject);
    });
  };
  return { now, sleep };
}

/** Whether an error says there is no process, or no CUDA in it: nothing is left to undo. */
export function isGone(err: unknown): boolean {
  return err instanceof CudaError &&
    (err.code === CUDA_ERROR_OPERATING_SYSTEM || err.code === CUDA_ERROR_NOT_INITIALIZED);
}

/** The lock timeout an options object asks for; throws a TypeError or RangeError naming it. */
function timeoutOf(options: LockOptions): number {
  checkOptionsObject(options, "{ timeoutMs: 10000 }");
  return options.timeoutMs === undefined
    ? DEFAULT_LOCK_TIMEOUT_MS
    : checkTimeoutMs(options.timeoutMs);
}

/** The GPU pairs a restore's options ask for (`null` for none), and whether to check the room. */
function restoreInputsOf(
  options: RestoreOptions,
): { pairs: GpuPair[] | null; checkRoom: boolean } {
  checkOptionsObject(options, '{ gpuMapping: { "GPU-...": "GPU-..." } }');
  const pairs = options.gpuMapping === undefined ? null : checkGpuMapping(options.gpuMapping);
  if (options.checkRoom !== undefined && typeof options.checkRoom !== "boolean") {
    throw new TypeError(
      `checkRoom must be true or false, got ${describeValue(options.checkRoom)}`,
    );
  }
  return { pairs, checkRoom: options.checkRoom ?? true };
}

/** What a restore that ran out of GPU memory inside the driver leaves, for messages. */
const RAN_OUT = "the driver ran out of GPU memory restoring the process. It still reports the " +
  "process checkpointed, but driver 580 then refuses every later restore of it, onto any GPU and " +
  "even once memory is free (CUDA_ERROR_OPERATING_SYSTEM): its GPU state cannot be brought back, " +
  "so end it and start it again from a saved state. The room is checked before the driver is " +
  "asked only for a process this package checkpointed (with checkRoom left on)";

/** Why a restore of a checkpointed process may be refused with OPERATING_SYSTEM, for messages. */
const REFUSED = "The process is there and checkpointed, yet the driver refuses to restore it: " +
  "driver 580 does this to every restore after one ran out of GPU memory (onto any GPU, even once " +
  "memory is free), so its GPU state cannot be brought back; end it and start it again from a " +
  "saved state";

/** What the failed state means, for messages. */
const FAILED_IS_FINAL = "a checkpoint or restore failed in it, and the failed state is final; " +
  "no operation can recover the process (restart it)";

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

/**
 * The error again, with a sentence saying what was done about it and what the process is now;
 * the error itself when there is nothing to add.
 */
function restate(err: unknown, detail: string): Error {
  if (!detail) return err instanceof Error ? err : new Error(String(err));
  if (!(err instanceof CudaError)) {
    return new Error(`${messageOf(err)}. ${capitalize(detail)}`, { cause: err });
  }
  return new CudaError({
    code: err.code,
    // An unknown code's placeholder name is not a name the driver gave.
    codeName: err.codeName.startsWith("CUresult ") ? undefined : err.codeName,
    description: err.description || undefined,
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
