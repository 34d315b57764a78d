/**
 * {@link CudaProcess}: one CUDA process, locked, checkpointed, restored and unlocked through a
 * {@link CheckpointDriver}; and {@link runAction}, the one executor of an action (a step or a
 * goal) on one process, which the methods of `CudaProcess` and the group operations share, so that
 * `suspend()` and `suspendAll` cannot disagree.
 *
 * @module
 */

import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
} from "./codes.ts";
import type { CheckpointDriver, GpuPair } from "./driver.ts";
import { capitalize, CudaError, driverError, RefusedError, WaitTimeoutError } from "./errors.ts";
import { checkCapability, checkMapping, explainRejectedMapping } from "./gate.ts";
import {
  type GpuMemoryReport,
  type HeldRecord,
  type HostProcesses,
  type ProcessIdentity,
  sameProcess,
} from "./host.ts";
import {
  checkFlag,
  checkGpuMapping,
  checkInteger,
  checkOptions,
  checkPid,
  checkSignal,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./options.ts";
import type { RoomCheck } from "./room.ts";
import type { Session } from "./session.ts";
import {
  type Action,
  isFinal,
  isProcessState,
  isStep,
  plan,
  PROCESS_STATES,
  type ProcessState,
  rollbackWay,
  stateName,
  type Step,
  stepAllowed,
  stepTo,
  undoOf,
} from "./states.ts";
import {
  checkSource,
  currentDefaultSource,
  type DriverLease,
  type DriverSource,
  lease,
} from "./sources.ts";
import { describeValue } from "./uuid.ts";

export { type DriverSource, setDefaultDriver } from "./sources.ts";

/** Options of {@link CudaProcess}'s constructor. */
export interface CudaProcessOptions {
  /**
   * The driver to use; the default driver when left out (the native one, unless
   * `setDefaultDriver` named another). A driver given as an object is yours to close; one given as
   * a function that opens it is opened on first use, shared by every process given the same
   * function, and closed when the last of them is closed.
   */
  driver?: DriverSource;
}

/** Options of {@link CudaProcess.lock}. */
export interface LockOptions {
  /**
   * How long to wait for work already submitted to the GPU to finish, in milliseconds: an integer
   * from 0 to 2^32-1, where 0 waits forever. Defaults to 10 000 ms (the command line's default is
   * 0, as NVIDIA's utility's; docs/API.md says why). A lock that times out fails with
   * `CUDA_ERROR_NOT_READY` and leaves the process running.
   */
  timeoutMs?: number;
}

/** Options of {@link CudaProcess.checkpoint}. */
export interface CheckpointOptions {
  /**
   * Whether to read the GPU memory the process holds before its checkpoint (NVML on Linux, about
   * a millisecond once loaded) and record it for the room check of its restore (default `true`).
   * `false` skips the read; its restore then cannot be checked for room, by any program.
   */
  checkRoom?: boolean;
}

/** Options of {@link CudaProcess.suspend}: a lock's and a checkpoint's. */
export interface SuspendOptions extends LockOptions, CheckpointOptions {}

/** Options of {@link CudaProcess.restore} and {@link CudaProcess.resume}. */
export interface RestoreOptions {
  /**
   * Restore onto other GPUs: from the UUID of each GPU the process was checkpointed on to the UUID
   * of the GPU to restore onto (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` or 32 hex digits). The
   * driver wants every GPU it sees named, and the same chip; where the driver can list its GPUs
   * the mapping is checked before the call. Needs driver 580 (CUDA 13.0) or later.
   */
  gpuMapping?: GpuMapping;
  /**
   * Whether to check, before asking the driver, that the GPUs the process goes to have as much
   * free memory as it held when a program of this package checkpointed it (default `true`): see
   * {@link GpuRoomError}. On driver 580 a restore that runs out of GPU memory inside the driver
   * leaves the process unrestorable for good, so turn this off only to see the driver's own
   * answer. {@link Outcome.roomCheck} says whether the room could be checked.
   */
  checkRoom?: boolean;
}

/**
 * Options of {@link CudaProcess.toggle}: a suspend's and a resume's. All are checked first; then
 * the half that runs uses its own (`timeoutMs` a suspend, `gpuMapping` a resume, `checkRoom`
 * both), so one set of options serves a toggle both ways, as NVIDIA's utility takes them.
 */
export interface ToggleOptions extends SuspendOptions, RestoreOptions {}

/** Options of {@link CudaProcess.waitForState}. */
export interface WaitOptions {
  /** How long to wait at most, in ms (an integer from 0); left out, as long as it takes. */
  timeoutMs?: number;
  /** Stops the wait: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** How often to ask the driver, in ms (an integer from 1); 50 by default. */
  intervalMs?: number;
}

/** One driver call an operation made, and how long it took. */
export interface StepRecord {
  /** The step. */
  readonly step: Step;
  /** Its time in ms, on the driver's clock. */
  readonly ms: number;
  /** Whether it succeeded. */
  readonly ok: boolean;
}

/** What a state-changing operation of {@link CudaProcess} did. */
export interface Outcome {
  /** `done`: its steps ran; `unchanged`: the process was already where it leads (a goal only). */
  readonly status: "done" | "unchanged";
  /** The state the process is in now. */
  readonly state: ProcessState;
  /** The driver calls made, in order. */
  readonly steps: readonly StepRecord[];
  /**
   * Where a restore was made: whether its room was checked first (`"checked"`), not asked for
   * (`"skipped"`), or could not be, and why (`{ unknown }`).
   */
  readonly roomCheck?: RoomCheck;
}

/**
 * A CUDA process whose GPU state can be checkpointed and restored.
 *
 * Every call that reaches the driver returns a Promise. A driver failure rejects with a
 * {@link CudaError} (`code` is the driver's `CUresult`); an operation refused before the driver
 * was asked rejects with a {@link RefusedError} (`code` is a string: no room, a mapping that
 * cannot work, a state with no way there); bad input rejects with a `TypeError` or `RangeError`
 * that names the value.
 *
 * Operations on one process run one after another, in the order they were made, whichever handle
 * and whichever of its thread ids they were made through: a `state()` asked during a `suspend()`
 * answers once the suspend is done.
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
  /** The process id (a thread id of the process works as well), as given. */
  readonly pid: number;
  readonly #source: DriverSource | undefined;
  #lease: DriverLease | undefined;
  #closed = false;
  /** The process this handle was first used on: a pid that later names another is refused. */
  #identity: ProcessIdentity | undefined;
  readonly #running = new Set<Promise<unknown>>();

  /**
   * A handle on a process. Nothing is called yet: the driver is opened on first use.
   *
   * @param pid the process id, or the id of one of its threads: an integer from 1 to 2^31-1.
   * @param options the driver to use; the default driver when left out.
   */
  constructor(pid: number, options?: CudaProcessOptions) {
    this.pid = checkPid(pid);
    const o = checkOptions(options, "CudaProcess", ["driver"]);
    if (o.driver !== undefined) checkSource(o.driver, "options.driver");
    this.#source = o.driver;
    turns.set(this, (body) => this.#ordered(body));
  }

  /** The driver this process talks to, opened on first use. */
  async driver(): Promise<CheckpointDriver> {
    return (await this.#session()).driver;
  }

  /**
   * The process's checkpoint state: `"running"`, `"locked"`, `"checkpointed"` or `"failed"`.
   * Rejects with `CUDA_ERROR_NOT_INITIALIZED` for a process that never used CUDA and
   * `CUDA_ERROR_OPERATING_SYSTEM` for a pid that does not exist.
   */
  state(): Promise<ProcessState> {
    return this.#ordered((target) => target.state());
  }

  /**
   * The id of the thread the driver uses to restore the process (what CRIU needs). The driver
   * answers at once even while another operation is under way, and so does this.
   */
  restoreThreadId(): Promise<number> {
    return this.#track(async () => {
      const session = await this.#session();
      const driver = session.driver;
      await checkCapability(driver, "getRestoreThreadId", this.pid);
      const { code, value } = await driver.getRestoreThreadId(this.pid);
      if (code !== CUDA_SUCCESS) {
        throw driverError(driver, code, { operation: "getRestoreThreadId", pid: this.pid })!;
      }
      return value;
    });
  }

  /**
   * Locks the process: its CUDA calls block and work already submitted finishes. Waits at most
   * `timeoutMs` (10 s by default; 0 waits forever) and then fails with `CUDA_ERROR_NOT_READY`,
   * leaving the process running.
   */
  lock(options?: LockOptions): Promise<Outcome> {
    return this.#act("lock", () => settingsOf(options, "lock", ["timeoutMs"]));
  }

  /** Checkpoints a locked process: copies its GPU memory into host memory and releases the GPU. */
  checkpoint(options?: CheckpointOptions): Promise<Outcome> {
    return this.#act("checkpoint", () => settingsOf(options, "checkpoint", ["checkRoom"]));
  }

  /**
   * Restores a checkpointed process onto the GPUs it came from, or onto others with
   * `gpuMapping`, after checking their room ({@link RestoreOptions.checkRoom}). The process is
   * then locked: {@link CudaProcess.unlock} lets it run.
   */
  restore(options?: RestoreOptions): Promise<Outcome> {
    return this.#act("restore", () => settingsOf(options, "restore", ["gpuMapping", "checkRoom"]));
  }

  /** Unlocks a locked process so that its CUDA calls run again. */
  unlock(): Promise<Outcome> {
    return this.#act("unlock", () => settingsOf(undefined, "unlock", []));
  }

  /**
   * Takes the process to checkpointed: lock and checkpoint from running, checkpoint from locked,
   * nothing from checkpointed (`status: "unchanged"`). If a step fails, what this call did is
   * undone and the error says where the process was left.
   */
  suspend(options?: SuspendOptions): Promise<Outcome> {
    return this.#act(
      "suspend",
      () => settingsOf(options, "suspend", ["timeoutMs", "checkRoom"]),
    );
  }

  /**
   * Takes the process to running: restore and unlock from checkpointed, unlock from locked,
   * nothing from running (`status: "unchanged"`). A restore that would not fit in the free GPU
   * memory is refused before the driver is asked ({@link GpuRoomError}). If a step fails, the
   * error says where the process was left (a failed restore leaves it checkpointed, to be tried
   * again).
   */
  resume(options?: RestoreOptions): Promise<Outcome> {
    return this.#act("resume", () => settingsOf(options, "resume", ["gpuMapping", "checkRoom"]));
  }

  /**
   * Does what NVIDIA's `cuda-checkpoint --toggle` does: suspends a running process, resumes a
   * checkpointed one, and refuses any other state (a {@link RefusedError} with code `"STATE"`).
   */
  toggle(options?: ToggleOptions): Promise<Outcome> {
    return this.#act(
      "toggle",
      () => settingsOf(options, "toggle", ["timeoutMs", "checkRoom", "gpuMapping"]),
    );
  }

  /**
   * Lets go of the driver: waits for this handle's operations to finish, then closes the driver
   * if this handle opened it (a driver given as a function, shared with other handles given the
   * same function, is closed by the last of them). Later operations reject. Idempotent.
   */
  async close(): Promise<void> {
    this.#closed = true;
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
    const held = this.#lease;
    this.#lease = undefined;
    await held?.release();
  }

  /** {@link CudaProcess.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Resolves once the process is in `state` (asking the driver every `intervalMs`); rejects with a
   * {@link WaitTimeoutError} when `timeoutMs` passes first, with the signal's reason when it is
   * aborted, with a {@link RefusedError} (`"STATE"`) when the process is in the failed state, and
   * with the driver's error when the process cannot be read. Useful when another program (CRIU,
   * NVIDIA's utility) changes the state.
   *
   * @example
   * ```ts ignore
   * await proc.waitForState("checkpointed", { timeoutMs: 30_000 });
   * ```
   */
  async waitForState(state: ProcessState, options?: WaitOptions): Promise<void> {
    if (!isProcessState(state)) {
      throw new RangeError(
        `state must be one of ${PROCESS_STATES.map((n) => `"${n}"`).join(", ")}, got ${
          describeValue(state)
        }`,
      );
    }
    const o = checkOptions(options, "waitForState", ["timeoutMs", "signal", "intervalMs"]);
    const timeoutMs = o.timeoutMs === undefined
      ? undefined
      : checkInteger(o.timeoutMs, "timeoutMs", 0);
    const intervalMs = o.intervalMs === undefined
      ? 50
      : checkInteger(o.intervalMs, "intervalMs", 1);
    const signal = checkSignal(o.signal);
    const clock = clockOf(await this.driver());
    const start = clock.now();
    for (;;) {
      signal?.throwIfAborted();
      const seen = await this.state();
      if (seen === state) return;
      if (isFinal(seen)) {
        throw new RefusedError({
          code: "STATE",
          operation: "waitForState",
          pid: this.pid,
          state: seen,
          reason: `it is ${seen}, which is final: it will never be ${state}`,
        });
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

  /** The session of this handle's driver, leased on first use. */
  #session(): Promise<Session> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (!this.#lease) {
      const taken = lease(this.#source ?? currentDefaultSource());
      this.#lease = taken;
      // A driver that failed to open is not kept: the next call tries again.
      taken.session.catch(() => {
        if (this.#lease === taken) this.#lease = undefined;
        taken.release().catch(() => {});
      });
    }
    return this.#lease.session;
  }

  /** Checks the inputs first, then runs the action in this process's order. */
  #act(action: Action, inputs: () => ActionSettings): Promise<Outcome> {
    let settings: ActionSettings;
    try {
      settings = inputs();
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#ordered(async (target) => {
      const report = await runAction(target, action, settings);
      if (report.error) throw report.error;
      return {
        status: report.status === "unchanged" ? "unchanged" : "done",
        state: report.state!,
        steps: report.steps,
        ...(report.roomCheck !== undefined ? { roomCheck: report.roomCheck } : {}),
      };
    });
  }

  /** Runs `body` with the process's target, after the operations queued before it on the process. */
  #ordered<T>(body: (target: Target) => Promise<T>): Promise<T> {
    return this.#track(async () => {
      const session = await this.#session();
      const found = await session.identify(this.pid);
      if (found && this.#identity && !sameProcess(this.#identity, found)) {
        throw new RefusedError({
          code: "REPLACED",
          operation: "getState",
          pid: this.pid,
          reason: `the process this handle was made for has ended, and ${this.pid} now names ` +
            `another process`,
        });
      }
      this.#identity ??= found;
      // No process has the id now (the driver will say so): the process it named, or the number.
      const identity = found ?? this.#identity ?? { pid: this.pid };
      const self = identity.pid === await session.selfPid();
      return await session.inOrder(
        identity,
        () => body(new Target(this.pid, identity, session, self)),
      );
    });
  }

  /** Keeps `run` among this handle's operations until it settles (close waits for them). */
  #track<T>(run: () => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closedError());
    const running = run();
    this.#running.add(running);
    const forget = () => this.#running.delete(running);
    running.then(forget, forget);
    return running;
  }

  #closedError(): Error {
    return new Error(`${this}: this handle has been closed; make a new CudaProcess to go on`);
  }
}

/**
 * Runs `body` with the target of `proc` while holding its turn: no other operation on the process
 * through the same driver runs in between. For the group operations of this package.
 */
export function inTurn<T>(proc: CudaProcess, body: (target: Target) => Promise<T>): Promise<T> {
  return turns.get(proc)!(body) as Promise<T>;
}

// Each handle's way into its turn, kept off the class so that it is no public member.
const turns = new WeakMap<
  CudaProcess,
  (body: (target: Target) => Promise<unknown>) => Promise<unknown>
>();

/** What an action needs besides the process: each input, checked. */
export interface ActionSettings {
  /** The lock timeout, in ms; a function where it is cut to a deadline as the action goes. */
  readonly lockTimeoutMs: number | (() => number);
  /** The GPU pairs of a restore (`null`: in place). */
  readonly pairs: GpuPair[] | null;
  /** Whether to record what a checkpoint takes off the GPU, and to check a restore's room. */
  readonly checkRoom: boolean;
}

/** Checks the options of `where` and turns them into {@link ActionSettings}. */
export function settingsOf(
  options: ToggleOptions | undefined,
  where: string,
  keys: readonly (keyof ToggleOptions)[],
): ActionSettings {
  const o = checkOptions(options, where, keys);
  return {
    lockTimeoutMs: o.timeoutMs === undefined
      ? DEFAULT_LOCK_TIMEOUT_MS
      : checkTimeoutMs(o.timeoutMs),
    pairs: o.gpuMapping === undefined ? null : checkGpuMapping(o.gpuMapping),
    checkRoom: checkFlag(o.checkRoom, "checkRoom", true),
  };
}

/** Why an action was stopped between steps. */
export type StopReason = "deadline" | "aborted" | "another-failed";

/** What a caller of {@link runAction} follows. */
export interface ActionHooks {
  /** Before each step but the first of a plan: a reason to stop there, if there is one. */
  stopBefore?(): StopReason | undefined;
  /** A step starts (`rollback`: to undo what the action did). */
  stepStarted?(step: Step, rollback: boolean): void;
  /** A step ended. */
  stepEnded?(record: StepRecord, rollback: boolean): void;
}

/** What {@link runAction} did to one process. */
export interface ActionReport {
  /**
   * `done`: its steps ran; `unchanged`: a goal found it already there; `failed`: it was refused or
   * a step failed (see `error`; what it did is undone where it can be); `stopped`: a hook stopped
   * it between steps, and what it did was undone.
   */
  status: "done" | "unchanged" | "failed" | "stopped";
  /** The state before the first step, where it was read (a goal reads it; a step does not). */
  initialState?: ProcessState;
  /** The state after it (and its rollback), where known. */
  state?: ProcessState;
  /** The steps made, in order (rollback steps are in `rollback`). */
  steps: StepRecord[];
  /** Why it failed. */
  error?: Error;
  /** Why it was stopped. */
  stopped?: StopReason;
  /** Its rollback, where one was made; `ok` says whether the process is back where it was. */
  rollback?: { ok: boolean; steps: StepRecord[]; error?: Error };
  /** Whether a restore's room was checked. */
  roomCheck?: RoomCheck;
}

/**
 * Runs `action` on one process, whose turn the caller holds: a goal reads the state and follows
 * the plan of the state table (core/states.ts); a step is one driver call. A step of a goal that
 * fails is undone as the table's {@link rollbackWay} says, and so is a goal stopped between
 * steps. Never rejects: the report says what happened.
 */
export async function runAction(
  target: Target,
  action: Action,
  settings: ActionSettings,
  hooks: ActionHooks = {},
  readInitial = false,
): Promise<ActionReport> {
  const report: ActionReport = { status: "failed", steps: [] };
  try {
    let steps: readonly Step[];
    if (isStep(action)) {
      // One driver call, as asked; with `readInitial` (a group), the state first, so that a
      // failure or an all-or-nothing rollback can bring the process back to it.
      if (readInitial) report.initialState = await target.state();
      steps = [action];
    } else {
      steps = await planGoal(target, action, report);
      if (report.status === "unchanged") return report;
    }
    const done: Step[] = [];
    for (const step of steps) {
      const stop = done.length > 0 ? hooks.stopBefore?.() : undefined;
      if (stop) {
        report.status = "stopped";
        report.stopped = stop;
        await undo(target, report, done, undefined, hooks);
        return report;
      }
      try {
        await timed(target, step, settings, report, report.steps, false, hooks, action);
      } catch (err) {
        // A goal brings the process back from wherever the failure left it; a process that is
        // gone, or a refusal that changed nothing, has nothing to undo.
        if (report.initialState !== undefined && !isGone(err) && !(err instanceof RefusedError)) {
          const detail = await undo(target, report, done, { step, err }, hooks);
          if (!detail) throw err;
          if (err instanceof CudaError) throw err.withDetail(detail);
          throw new Error(`${messageOf(err)}. ${capitalize(detail)}`, { cause: err });
        }
        throw err;
      }
      done.push(step);
    }
    report.status = "done";
    report.state = stepTo(steps[steps.length - 1]);
  } catch (err) {
    report.status = "failed";
    report.error = err instanceof Error ? err : new Error(String(err));
    // Where the failure left it, for a report that says states (a group's; a goal's has it).
    if (readInitial) report.state ??= await target.state().catch(() => undefined);
  }
  return report;
}

/**
 * Reads the state of a process whose turn the caller holds and plans `action` from it, as the
 * state table says: the steps to make, or none where the process is already where a goal leads
 * (the report then says `unchanged`). Refuses (`STATE`) a goal the table rules out, and (a driver
 * without a function the plan or its way back needs) refuses before the first step: a suspend
 * never locks a process it could not checkpoint. The report records the initial state.
 */
export async function planGoal(
  target: Target,
  action: Action,
  report: ActionReport,
): Promise<readonly Step[]> {
  const from = await target.state();
  report.initialState = from;
  const p = plan(action, from);
  if (p.kind === "refused") {
    report.state = from;
    throw new RefusedError({
      code: "STATE",
      operation: action,
      pid: target.pid,
      state: from,
      reason: p.why,
    });
  }
  if (p.kind === "unchanged") {
    report.status = "unchanged";
    report.state = from;
    return [];
  }
  if (!isStep(action)) await target.capable([...p.steps, ...p.steps.map(undoOf)], action);
  return p.steps;
}

/**
 * Brings a process that an action took elsewhere back to the state it was in before
 * (all-or-nothing, or an interrupt), recording it as the report's rollback.
 */
export async function returnTo(
  target: Target,
  report: ActionReport,
  hooks: ActionHooks = {},
): Promise<void> {
  const done = report.steps.filter((s) => s.ok).map((s) => s.step);
  await undo(target, report, done, undefined, hooks);
}

/** One step, timed and told to the hooks; its record goes into `record`. */
export async function timed(
  target: Target,
  step: Step,
  settings: ActionSettings,
  report: ActionReport,
  record: StepRecord[],
  rollback: boolean,
  hooks: ActionHooks,
  action: Action,
): Promise<void> {
  const clock = clockOf(target.driver);
  const t0 = clock.now();
  hooks.stepStarted?.(step, rollback);
  let ok = false;
  try {
    switch (step) {
      case "lock": {
        const t = settings.lockTimeoutMs;
        await target.lock(typeof t === "function" ? t() : t);
        break;
      }
      case "checkpoint":
        await target.checkpoint(settings.checkRoom);
        break;
      case "restore":
        report.roomCheck = await target.restore(
          rollback ? null : settings.pairs,
          settings.checkRoom,
          rollback || action === "restore" ? "restore" : action,
        );
        break;
      case "unlock":
        await target.unlock();
        break;
    }
    ok = true;
  } finally {
    const r = { step, ms: clock.now() - t0, ok };
    record.push(r);
    hooks.stepEnded?.(r, rollback);
  }
}

/**
 * Brings the process back to its initial state after the steps `done` (and, where given, a step
 * that failed), as the state table's {@link rollbackWay} says; records it as the report's
 * rollback. Returns a sentence about where the process was left, for the failed step's error.
 */
async function undo(
  target: Target,
  report: ActionReport,
  done: readonly Step[],
  failure: { step: Step; err: unknown } | undefined,
  hooks: ActionHooks,
): Promise<string> {
  const initial = report.initialState!;
  if (done.length === 0 && failure === undefined) {
    report.state = initial; // stopped before any step: it is as it was
    return "";
  }
  const now = await target.state().catch(() => undefined);
  const illegal = failure?.err instanceof CudaError &&
    failure.err.code === CUDA_ERROR_ILLEGAL_STATE;
  const way = rollbackWay({ initial, done, failed: failure?.step, illegal, now });
  if (way === undefined) {
    report.state = now;
    return `the process is ${now}, which is final`;
  }
  if (way.length === 0) {
    report.state = now;
    // Nothing to undo; the state is said once (an illegal state's error says it already).
    const said = failure?.err instanceof CudaError && failure.err.state === now;
    return now === undefined || said ? "" : `the process is ${now}`;
  }
  const record: StepRecord[] = [];
  // A rollback restore goes back where the process was, its room checked as any restore's.
  const settings: ActionSettings = {
    lockTimeoutMs: DEFAULT_LOCK_TIMEOUT_MS,
    pairs: null,
    checkRoom: true,
  };
  try {
    for (const step of way) {
      await timed(target, step, settings, report, record, true, hooks, "restore");
    }
    report.rollback = { ok: true, steps: record };
    report.state = initial;
    return `it was brought back to ${initial}`;
  } catch (err) {
    report.rollback = { ok: false, steps: record, error: err as Error };
    report.state = await target.state().catch(() => undefined);
    return `it could not be brought back to ${initial} (${messageOf(err)}); the process is ${
      report.state ?? "of unknown state"
    }`;
  }
}

/**
 * One process, while its turn is held: each step is one driver call, through the checks that
 * come before it (capability, mapping, room) and the one choke point from its result to an error.
 */
export class Target {
  /** The pid (or thread id) as given: what the driver is called with. */
  readonly pid: number;
  /** The process it belongs to. */
  readonly identity: ProcessIdentity;
  /** Whether the process is the program making the calls (it checkpoints itself). */
  readonly self: boolean;
  readonly #session: Session;

  /** A target in `session`. */
  constructor(pid: number, identity: ProcessIdentity, session: Session, self: boolean) {
    this.pid = pid;
    this.identity = identity;
    this.#session = session;
    this.self = self;
  }

  /** The driver. */
  get driver(): CheckpointDriver {
    return this.#session.driver;
  }

  /** The host's GPU memory report (`host`, else the session's); `undefined` where unknown. */
  memoryReport(host?: HostProcesses): Promise<GpuMemoryReport | undefined> {
    return this.#session.room.report(host);
  }

  /** What a program of this package recorded the process held at its checkpoint, if it did. */
  heldRecord(): Promise<HeldRecord | undefined> {
    return this.#session.room.record(this.identity);
  }

  /** Refuses (`UNSUPPORTED`) where the driver lacks the function of one of `steps`. */
  async capable(steps: readonly Step[], shown: string): Promise<void> {
    for (const step of new Set(steps)) {
      await checkCapability(this.driver, step, this.pid, 0, shown);
    }
  }

  /** `getState`, by name. */
  async state(): Promise<ProcessState> {
    const driver = this.driver;
    await checkCapability(driver, "getState", this.pid);
    const { code, value } = await driver.getState(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("getState", code);
    const name = stateName(value);
    if (name === undefined) {
      throw new RangeError(
        `getState of process ${this.pid} gave state ${value}, which this version of @ckpt/cuda ` +
          `does not know (a newer driver's)`,
      );
    }
    return name;
  }

  /** `lock` with this timeout. */
  async lock(timeoutMs: number): Promise<void> {
    const driver = this.driver;
    await checkCapability(driver, "lock", this.pid);
    // Locking this very process: the room check's NVML reads stop until it runs again.
    const self = this.self;
    if (self) await this.#session.room.beforeSelfLock();
    const code = await driver.lock(this.pid, { timeoutMs });
    if (code !== CUDA_SUCCESS) {
      if (self) this.#session.room.selfRunning();
      throw await this.#failure("lock", code);
    }
    // Locked from running: what it held when last checkpointed is no longer what it holds.
    await this.#session.room.forget(this.identity);
  }

  /** `checkpoint`; with `checkRoom`, what it held is read first and recorded after. */
  async checkpoint(checkRoom: boolean): Promise<void> {
    const driver = this.driver;
    await checkCapability(driver, "checkpoint", this.pid);
    const room = this.#session.room;
    const held = checkRoom ? await room.heldNow(this.identity, this.self) : undefined;
    const code = await driver.checkpoint(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("checkpoint", code);
    if (held) await room.recorded(this.identity, held);
  }

  /**
   * `restore`, with GPU pairs (checked first) or without, its room checked and claimed first
   * unless `checkRoom` is false. `shown` is the operation errors name (`resume` for its restore).
   */
  async restore(
    pairs: GpuPair[] | null,
    checkRoom: boolean,
    shown: string,
  ): Promise<RoomCheck> {
    const driver = this.driver;
    await checkCapability(driver, "restore", this.pid, pairs?.length ?? 0, shown);
    if (pairs) await checkMapping(driver, shown, this.pid, pairs);
    const reservation = checkRoom
      ? await this.#session.room.reserve(
        this.identity,
        pairs,
        { operation: shown, pid: this.pid, self: this.self },
        () => this.#checkpointedNow(),
      )
      : undefined;
    let code: number;
    try {
      code = await driver.restore(this.pid, pairs === null ? null : { gpuPairs: pairs });
    } catch (err) {
      await reservation?.done(false);
      throw err;
    }
    await reservation?.done(code === CUDA_SUCCESS);
    if (code === CUDA_SUCCESS) return reservation?.check ?? "skipped";
    const detail = code === CUDA_ERROR_INVALID_VALUE && pairs !== null && pairs.length > 0
      ? await explainRejectedMapping(driver, pairs)
      : code === CUDA_ERROR_OUT_OF_MEMORY
      ? RAN_OUT
      : undefined;
    throw await this.#failure("restore", code, detail);
  }

  /** `unlock`. */
  async unlock(): Promise<void> {
    const driver = this.driver;
    await checkCapability(driver, "unlock", this.pid);
    const code = await driver.unlock(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("unlock", code);
    if (this.self) this.#session.room.selfRunning();
  }

  /** Whether the driver says, now, that the process is there and may be restored; never rejects. */
  async #checkpointedNow(): Promise<boolean> {
    const now = await this.state().catch(() => undefined);
    return now !== undefined && stepAllowed("restore", now);
  }

  /**
   * The error for a failed call, through the one choke point: with the state for an illegal
   * state, and a sentence where the code alone would mislead.
   */
  async #failure(operation: Step | "getState", code: number, detail?: string): Promise<CudaError> {
    let state: ProcessState | undefined;
    if (code === CUDA_ERROR_ILLEGAL_STATE && operation !== "getState") {
      state = await this.state().catch(() => undefined);
      // Refused as illegal in a state the step accepts: something else changed it meanwhile.
      if (state !== undefined && stepAllowed(operation, state)) {
        detail = "another program (or another thread id of this process) changed its state " +
          "meanwhile";
      }
      if (state !== undefined && isFinal(state)) detail = "the failed state is final";
    }
    // A restore refused although the process is there and checkpointed: what driver 580 does
    // after a restore of it ran out of GPU memory.
    if (
      code === CUDA_ERROR_OPERATING_SYSTEM && operation === "restore" && !detail &&
      await this.#checkpointedNow()
    ) {
      detail = REFUSED;
    }
    return driverError(this.driver, code, { operation, pid: this.pid, state, detail })!;
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

/** What a restore that ran out of GPU memory inside the driver leaves, for messages. */
const RAN_OUT = "on driver 580 the process cannot be restored after this, even once memory is " +
  "free (docs/ERRORS.md#out-of-memory)";

/** Why a restore of a checkpointed process may be refused with OPERATING_SYSTEM, for messages. */
const REFUSED =
  "the process is checkpointed, yet the driver refuses to restore it, as driver 580 " +
  "does after a restore of it ran out of memory (docs/ERRORS.md#out-of-memory)";

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
