/**
 * Operations on many processes at once: suspend, resume, or one step, on a group of pids or
 * {@link CudaProcess}es, all at once (or a few at a time), with a result per process, an optional
 * all-or-nothing rollback, a deadline or `AbortSignal` for the whole group, and progress events.
 *
 * The driver works on each process on its own thread, so N processes checkpoint together in
 * about the time of the largest, not the sum (4 x 4 GiB on an H200: 2.4 s against 8-12 s one
 * after another).
 *
 * @module
 */

import { CUDA_ERROR_ILLEGAL_STATE, type ProcessState } from "./codes.ts";
import type { GpuPair } from "./driver.ts";
import { CudaError } from "./errors.ts";
import type { CheckpointDriver } from "./driver.ts";
import type { HostProcesses } from "./listing.ts";
import { clockOf, CudaProcess, inTurn, isGone, type ProcessSteps } from "./process.ts";
import { gpuMemoryNow, heldWhenCheckpointed } from "./room.ts";
import type { DriverSource } from "./sources.ts";
import { type Step, wayBetween } from "./steps.ts";
import { describeValue } from "./uuid.ts";
import {
  checkGpuMapping,
  checkInteger,
  checkOptionsObject,
  checkPid,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./validate.ts";

/** What a group does to each process. */
export type GroupAction = "suspend" | "resume" | "lock" | "checkpoint" | "restore" | "unlock";

/** One driver call of a process's plan. */
export type GroupStep = Step;

/** Options of {@link runGroup}, {@link suspendAll} and {@link resumeAll}. */
export interface GroupOptions {
  /** The driver for targets given as pids; the default driver when left out. */
  driver?: DriverSource;
  /** How many processes are worked on at once: an integer from 1; all of them by default. */
  concurrency?: number;
  /**
   * When any process fails (or is not started because the deadline passed or the signal
   * aborted), bring every process that succeeded back to the state it was in before the call,
   * and start no more. Default `false`: each process stands alone.
   */
  allOrNothing?: boolean;
  /**
   * When the signal aborts before the group is over, bring every process it moved back to the
   * state it was in before the call, as `allOrNothing` does, even those that are done: an
   * interrupted call leaves the processes as they were. A step inside the driver cannot be
   * interrupted: its process is brought back when the step ends. Default `false`: only
   * `allOrNothing` rolls back. The command line uses it for Ctrl-C.
   */
  rollBackOnAbort?: boolean;
  /**
   * A deadline for the whole group, in ms from the call (on the driver's clock). Lock timeouts
   * are cut to what is left of it, and no step starts after it has passed. A call already inside
   * the driver cannot be interrupted: a checkpoint under way when the deadline passes finishes.
   */
  timeoutMs?: number;
  /**
   * Stops the group: no step starts after it aborts (calls inside the driver finish), and a
   * process between steps is brought back to its initial state (`stopped`). See
   * `rollBackOnAbort` for the processes that are done.
   */
  signal?: AbortSignal;
  /** Each process's lock timeout, in ms (0 waits forever); 10 000 by default, cut by `timeoutMs`. */
  lockTimeoutMs?: number;
  /**
   * Where to restore: one mapping for every process, or a function giving each pid's (or
   * `undefined` to restore it in place). See `RestoreOptions.gpuMapping`.
   */
  gpuMapping?: GpuMapping | ((pid: number) => GpuMapping | undefined);
  /**
   * Called as each process's steps start and end, for a progress display. Must not throw. When it
   * is given, the group first asks the host for each process's GPU memory (one NVML query on
   * Linux, a few ms), so that the events can say how much each process holds.
   */
  onProgress?: (event: GroupEvent) => void;
  /**
   * Whether the progress events carry each process's GPU memory: `true` (the default) asks the
   * host first, as `onProgress` says; `false` skips that query, for a program that follows the
   * steps without showing memory.
   */
  gpuMemory?: boolean;
  /**
   * Where the events' GPU memory comes from: the driver's own host (the simulator's), else the
   * machine's (NVML, installed by the main module) when left out. Read only with `onProgress`.
   */
  host?: HostProcesses;
}

/**
 * A step of one process starting or ending. Times are ms since the group started.
 * `gpuMemoryMiB` is the GPU memory the process held when the group started, summed over its GPUs,
 * its CUDA context included (what a checkpoint copies out): from the host (NVML on Linux) for a
 * process that holds GPU memory, or, for a checkpointed process, what it held when a group
 * through the same driver last checkpointed it. Left out where it is not known (no NVML, or a
 * process checkpointed elsewhere).
 */
export type GroupEvent =
  | {
    readonly type: "step-start";
    readonly pid: number;
    readonly step: GroupStep;
    readonly at: number;
    /** The process's GPU memory in MiB, where known (see {@link GroupEvent}). */
    readonly gpuMemoryMiB?: number;
  }
  | {
    readonly type: "step-end";
    readonly pid: number;
    readonly step: GroupStep;
    readonly at: number;
    /** How long the step took. */
    readonly ms: number;
    /** Whether it succeeded. */
    readonly ok: boolean;
    /** Whether it was part of a rollback. */
    readonly rollback: boolean;
    /** The process's GPU memory in MiB, where known (see {@link GroupEvent}). */
    readonly gpuMemoryMiB?: number;
  };

/** One step a process went through, and how long it took. */
export interface StepRecord {
  /** The step. */
  readonly step: GroupStep;
  /** Its time in ms. */
  readonly ms: number;
  /** Whether it succeeded. */
  readonly ok: boolean;
}

/** Why a process was never started. */
export type NotStartedReason = "deadline" | "aborted" | "another-failed";

/** What the group did to one process. */
export interface ProcessOutcome {
  /** The pid. */
  readonly pid: number;
  /**
   * `done`: its steps ran; `unchanged`: it was already in the wanted state and was left alone;
   * `failed`: a step failed (see `error`; what it had done is undone where possible);
   * `stopped`: it was between steps when the deadline passed, the signal aborted or (all or
   * nothing) another process failed, so its next step was not made and what it had done was
   * undone (see `stopped` and `rollback`); `not-started` (see `notStarted`).
   */
  readonly status: "done" | "unchanged" | "failed" | "stopped" | "not-started";
  /** The state before the call, where it was read. */
  readonly initialState?: ProcessState;
  /** The state after the call (and any rollback), where known. */
  readonly state?: ProcessState;
  /** The steps it went through, in order (rollback steps are in `rollback`). */
  readonly steps: readonly StepRecord[];
  /** Why it failed. */
  readonly error?: Error;
  /** Why it never started. */
  readonly notStarted?: NotStartedReason;
  /** Why it was stopped between steps. */
  readonly stopped?: NotStartedReason;
  /**
   * Its rollback, where one was made: after its own failed step, or (all-or-nothing) because
   * another process failed. `ok` says whether it is back in its initial state.
   */
  readonly rollback?: {
    readonly ok: boolean;
    readonly steps: readonly StepRecord[];
    readonly error?: Error;
  };
}

/** What a group operation did. */
export interface GroupResult {
  /** The action. */
  readonly action: GroupAction;
  /** Whether every process is now in the wanted state (`done` or `unchanged`). */
  readonly ok: boolean;
  /** One outcome per target, in the order given. */
  readonly processes: readonly ProcessOutcome[];
  /** Whether the deadline passed before every process was done. */
  readonly deadlinePassed: boolean;
  /** Whether the signal aborted the group. */
  readonly aborted: boolean;
  /** Whether all-or-nothing (or `rollBackOnAbort`) rolled processes back that were done. */
  readonly rolledBack: boolean;
  /** The whole group's time in ms, on the driver's clock. */
  readonly ms: number;
}

/** The state each action leaves a process in. */
const WANTED: Readonly<Record<GroupAction, ProcessState>> = {
  suspend: "checkpointed",
  resume: "running",
  lock: "locked",
  checkpoint: "checkpointed",
  restore: "locked",
  unlock: "running",
};

/** The steps from each state to each action's wanted state; a state not listed has no way. */
const PLANS: Readonly<Record<GroupAction, Partial<Record<ProcessState, readonly GroupStep[]>>>> = {
  suspend: { running: ["lock", "checkpoint"], locked: ["checkpoint"] },
  resume: { checkpointed: ["restore", "unlock"], locked: ["unlock"] },
  lock: { running: ["lock"] },
  checkpoint: { locked: ["checkpoint"] },
  restore: { checkpointed: ["restore"] },
  unlock: { locked: ["unlock"] },
};

/** The steps from a state to the action's wanted state; `undefined` where there is no way. */
function plan(action: GroupAction, from: ProcessState): readonly GroupStep[] | undefined {
  return from === WANTED[action] ? [] : PLANS[action][from];
}

/** The step that undoes a step. */
const UNDO: Readonly<Record<GroupStep, GroupStep>> = {
  lock: "unlock",
  checkpoint: "restore",
  restore: "checkpoint",
  unlock: "lock",
};

/**
 * Runs `action` on every target at once (or `concurrency` at a time) and resolves to what
 * happened to each; it rejects only for bad input. Each process is first asked its state: one
 * already in the wanted state is left alone; otherwise the steps from its state are made (suspend
 * from `locked` only checkpoints). A process whose step fails is brought back to its initial
 * state where the steps it made can be undone, and with `allOrNothing` so is every other.
 *
 * @example
 * ```ts
 * import { runGroup } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver();
 * const pids = [sim.spawn({ memoryMiB: 4096 }).pid, sim.spawn({ memoryMiB: 4096 }).pid];
 * const result = await runGroup("suspend", pids, { driver: sim, allOrNothing: true });
 * console.log(result.ok, result.processes.map((p) => p.status)); // true [ "done", "done" ]
 * ```
 */
export async function runGroup(
  action: GroupAction,
  targets: readonly (number | CudaProcess)[],
  options: GroupOptions = {},
): Promise<GroupResult> {
  if (typeof action !== "string" || !Object.hasOwn(WANTED, action)) {
    throw new RangeError(
      `action must be one of ${Object.keys(WANTED).map((a) => `"${a}"`).join(", ")}, got ${
        describeValue(action)
      }`,
    );
  }
  const settings = checkOptions(options);
  const { procs, owned } = handles(targets, options.driver);
  try {
    return await new Group(action, procs, settings).run();
  } finally {
    await Promise.all(owned.map((p) => p.close()));
  }
}

/**
 * Suspends (lock + checkpoint) every target at once; see {@link runGroup}.
 *
 * @example
 * ```ts ignore
 * const result = await suspendAll([4101, 4102, 4103], { allOrNothing: true, timeoutMs: 30_000 });
 * if (!result.ok) console.error(result.processes.filter((p) => p.status === "failed"));
 * ```
 */
export function suspendAll(
  targets: readonly (number | CudaProcess)[],
  options: GroupOptions = {},
): Promise<GroupResult> {
  return runGroup("suspend", targets, options);
}

/** Resumes (restore + unlock) every target at once; see {@link runGroup}. */
export function resumeAll(
  targets: readonly (number | CudaProcess)[],
  options: GroupOptions = {},
): Promise<GroupResult> {
  return runGroup("resume", targets, options);
}

interface Settings {
  concurrency: number;
  allOrNothing: boolean;
  rollBackOnAbort: boolean;
  timeoutMs: number | undefined;
  signal: AbortSignal | undefined;
  lockTimeoutMs: number;
  pairsFor: (pid: number) => GpuPair[] | null;
  onProgress: (event: GroupEvent) => void;
  /** Whether the events want GPU memory (an onProgress was given). */
  wantsMemory: boolean;
  host?: HostProcesses;
}

/** Every option of {@link GroupOptions}: a key not among them is a mistake, said as one. */
const GROUP_OPTION_KEYS = [
  "driver",
  "concurrency",
  "allOrNothing",
  "rollBackOnAbort",
  "timeoutMs",
  "signal",
  "lockTimeoutMs",
  "gpuMapping",
  "onProgress",
  "gpuMemory",
  "host",
];

function checkOptions(options: GroupOptions): Settings {
  checkOptionsObject(options, "{ allOrNothing: true }");
  for (const key of Object.keys(options)) {
    if (!GROUP_OPTION_KEYS.includes(key)) {
      throw new TypeError(
        `runGroup has no option ${JSON.stringify(key)}; it takes ${GROUP_OPTION_KEYS.join(", ")}`,
      );
    }
  }
  const concurrency = options.concurrency === undefined
    ? Infinity
    : checkInteger(options.concurrency, "concurrency", 1);
  const timeoutMs = options.timeoutMs === undefined
    ? undefined
    : checkInteger(options.timeoutMs, "timeoutMs (ms for the whole group)", 0);
  const lockTimeoutMs = options.lockTimeoutMs === undefined
    ? DEFAULT_LOCK_TIMEOUT_MS
    : checkTimeoutMs(options.lockTimeoutMs);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(`signal must be an AbortSignal, got ${describeValue(options.signal)}`);
  }
  if (options.onProgress !== undefined && typeof options.onProgress !== "function") {
    throw new TypeError(`onProgress must be a function, got ${describeValue(options.onProgress)}`);
  }
  const mapping = options.gpuMapping;
  let pairsFor: (pid: number) => GpuPair[] | null = () => null;
  if (typeof mapping === "function") {
    pairsFor = (pid) => {
      const m = mapping(pid);
      return m === undefined ? null : checkGpuMapping(m);
    };
  } else if (mapping !== undefined) {
    const pairs = checkGpuMapping(mapping); // checked once, before anything starts
    pairsFor = () => pairs;
  }
  if (options.gpuMemory !== undefined) checkFlag(options.gpuMemory, "gpuMemory");
  const onProgress = options.onProgress ?? (() => {});
  const host = options.host as unknown;
  if (
    host !== undefined &&
    (typeof host !== "object" || host === null ||
      typeof (host as HostProcesses).scan !== "function")
  ) {
    throw new TypeError(`host must be an object with a scan() method, got ${describeValue(host)}`);
  }
  return {
    wantsMemory: options.onProgress !== undefined &&
      (options.gpuMemory === undefined || options.gpuMemory),
    ...(options.host ? { host: options.host } : {}),
    concurrency,
    allOrNothing: checkFlag(options.allOrNothing, "allOrNothing"),
    rollBackOnAbort: checkFlag(options.rollBackOnAbort, "rollBackOnAbort"),
    timeoutMs,
    signal: options.signal,
    lockTimeoutMs,
    pairsFor,
    onProgress: (event) => {
      try {
        onProgress(event);
      } catch {
        // A progress display that throws must not break the group.
      }
    },
  };
}

/** A boolean option, `false` when left out; anything else is a TypeError naming it. */
function checkFlag(value: unknown, what: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== "boolean") {
    throw new TypeError(`${what} must be true or false, got ${describeValue(value)}`);
  }
  return value;
}

/** The handles for the targets; those made here from pids are closed by the caller. */
function handles(
  targets: readonly (number | CudaProcess)[],
  driver: DriverSource | undefined,
): { procs: CudaProcess[]; owned: CudaProcess[] } {
  if (!Array.isArray(targets)) {
    throw new TypeError(
      `targets must be an array of pids or CudaProcess, got ${describeValue(targets)}`,
    );
  }
  const owned: CudaProcess[] = [];
  const seen = new Set<number>();
  const procs = targets.map((t, i) => {
    let proc: CudaProcess;
    if (t instanceof CudaProcess) {
      proc = t;
    } else {
      checkPid(t, `targets[${i}]`);
      proc = new CudaProcess(t, { driver });
      owned.push(proc);
    }
    if (seen.has(proc.pid)) {
      throw new RangeError(
        `targets names process ${proc.pid} twice (targets[${i}]): give each process once`,
      );
    }
    seen.add(proc.pid);
    return proc;
  });
  return { procs, owned };
}

/** A process's part in the group, as it goes. */
interface Entry {
  proc: CudaProcess;
  status: ProcessOutcome["status"];
  initialState?: ProcessState;
  state?: ProcessState;
  steps: StepRecord[];
  error?: Error;
  notStarted?: NotStartedReason;
  stopped?: NotStartedReason;
  rollback?: { ok: boolean; steps: StepRecord[]; error?: Error };
}

/** Each target's GPU memory in MiB, where known (see {@link GroupEvent}); never rejects. */
async function memoryOf(
  driver: CheckpointDriver,
  pids: readonly number[],
  host: HostProcesses | undefined,
): Promise<Map<number, number>> {
  const known = new Map<number, number>();
  const report = await gpuMemoryNow(driver, host);
  if (!report) return known;
  for (const pid of pids) {
    const memory = report.byPid.get(pid);
    const mib = memory === undefined || memory === "unknown"
      ? 0
      : Object.values(memory).reduce((a, b) => a + b, 0);
    // Once checkpointed a process holds none: what it held when this package checkpointed it.
    const was = heldWhenCheckpointed(driver, pid);
    const fallback = was && Object.values(was).reduce((a, b) => a + b, 0);
    if (mib > 0) known.set(pid, mib);
    else if (fallback !== undefined) known.set(pid, fallback);
  }
  return known;
}

class Group {
  readonly #action: GroupAction;
  readonly #entries: Entry[];
  readonly #s: Settings;
  #start = 0;
  #deadline = Infinity;
  #now: () => number = () => performance.now();
  #deadlinePassed = false;
  #failed = false;
  #doomed = false;
  #rolledBack = false;
  readonly #rolling = new Set<Entry>();
  readonly #rollbacks: Promise<void>[] = [];
  #driver: CheckpointDriver | undefined;
  #memory = new Map<number, number>();

  constructor(action: GroupAction, procs: CudaProcess[], settings: Settings) {
    this.#action = action;
    this.#s = settings;
    this.#entries = procs.map((proc) => ({ proc, status: "not-started", steps: [] }));
  }

  async run(): Promise<GroupResult> {
    if (this.#entries.length > 0) {
      this.#driver = await this.#entries[0].proc.driver();
      this.#now = clockOf(this.#driver).now;
      if (this.#s.wantsMemory) {
        this.#memory = await memoryOf(
          this.#driver,
          this.#entries.map((e) => e.proc.pid),
          this.#s.host,
        );
      }
    }
    this.#start = this.#now();
    if (this.#s.timeoutMs !== undefined) this.#deadline = this.#start + this.#s.timeoutMs;
    let next = 0;
    const worker = async () => {
      while (next < this.#entries.length) {
        const entry = this.#entries[next++];
        const stop = this.#stopReason();
        if (stop) {
          entry.notStarted = stop;
          if (this.#s.allOrNothing) this.#doom();
          continue;
        }
        await this.#work(entry);
        if (this.#s.allOrNothing && entry.status !== "done" && entry.status !== "unchanged") {
          this.#doom();
        }
        this.#rollBackIfDone(entry);
      }
    };
    const lanes = Math.min(this.#s.concurrency, this.#entries.length);
    const signal = this.#s.signal;
    const onAbort = () => {
      if (this.#s.allOrNothing || this.#s.rollBackOnAbort) this.#doom();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (signal?.aborted) onAbort();
      await Promise.all(Array.from({ length: lanes }, worker));
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    const incomplete = this.#entries.some((e) => e.status !== "done" && e.status !== "unchanged");
    if (
      (this.#s.allOrNothing && incomplete) || (this.#s.rollBackOnAbort && signal?.aborted)
    ) {
      this.#doom();
    }
    // Rollbacks started as soon as the group could no longer succeed; wait for every one.
    while (this.#rollbacks.length > 0) await Promise.all(this.#rollbacks.splice(0));
    const rolledBack = this.#rolledBack;
    return {
      action: this.#action,
      ok: !incomplete && !rolledBack,
      processes: this.#entries.map(outcome),
      deadlinePassed: this.#deadlinePassed,
      aborted: signal?.aborted === true,
      rolledBack,
      ms: this.#now() - this.#start,
    };
  }

  /**
   * The group can no longer succeed (all or nothing, or interrupted): every process that is done
   * is brought back now, without waiting for the others, and each one that becomes done later is
   * brought back as it does.
   */
  #doom(): void {
    this.#doomed = true;
    for (const entry of this.#entries) this.#rollBackIfDone(entry);
  }

  #rollBackIfDone(entry: Entry): void {
    if (!this.#doomed || entry.status !== "done" || this.#rolling.has(entry)) return;
    this.#rolling.add(entry);
    this.#rolledBack = true;
    this.#rollbacks.push(this.#rollBack(entry));
  }

  /** Why nothing more may start now, if so. */
  #stopReason(): NotStartedReason | undefined {
    if (this.#s.signal?.aborted) return "aborted";
    if (this.#now() >= this.#deadline) {
      this.#deadlinePassed = true;
      return "deadline";
    }
    if (this.#s.allOrNothing && this.#failed) return "another-failed";
    return undefined;
  }

  /** One process: its state, then its plan's steps, each undone in turn if a later one fails. */
  async #work(entry: Entry): Promise<void> {
    try {
      await inTurn(entry.proc, async (steps) => {
        const from = await steps.state();
        entry.initialState = from;
        const todo = plan(this.#action, from);
        if (todo === undefined) {
          throw this.#illegal(
            entry,
            from,
            `${this.#action} takes a process to ${WANTED[this.#action]}, and there is no way ` +
              `there from ${from}; it was left as it was`,
          );
        }
        if (todo.length === 0) {
          entry.status = "unchanged";
          entry.state = from;
          return;
        }
        entry.status = "failed"; // until the last step succeeds
        const done: GroupStep[] = [];
        for (const step of todo) {
          const stop = this.#stopReason();
          if (stop) {
            entry.status = "stopped";
            entry.stopped = stop;
            await this.#undo(entry, steps, done, false);
            return;
          }
          try {
            await this.#step(entry, steps, step, entry.steps, false);
          } catch (err) {
            // Bring it back from wherever the failure left it, so a failure leaves it as it was
            // (a suspend whose checkpoint failed is unlocked again); a process that is gone has
            // nothing left to undo.
            if (!isGone(err)) await this.#undo(entry, steps, done, true);
            throw err;
          }
          done.push(step);
        }
        entry.status = "done";
        entry.state = WANTED[this.#action];
      });
    } catch (err) {
      entry.status = "failed";
      entry.error = err instanceof Error ? err : new Error(String(err));
      this.#failed = true;
    }
  }

  /** Makes one step, timing it and telling the progress display. */
  async #step(
    entry: Entry,
    steps: ProcessSteps,
    step: GroupStep,
    record: StepRecord[],
    rollback: boolean,
  ): Promise<void> {
    const pid = entry.proc.pid;
    const t0 = this.#now();
    const mib = this.#memory.get(pid);
    const memory = mib === undefined ? {} : { gpuMemoryMiB: mib };
    this.#s.onProgress({ type: "step-start", pid, step, at: t0 - this.#start, ...memory });
    let ok = false;
    try {
      switch (step) {
        case "lock":
          await steps.lock(this.#lockTimeout(rollback));
          break;
        case "checkpoint":
          await steps.checkpoint();
          break;
        case "restore":
          await steps.restore(rollback ? null : this.#s.pairsFor(pid));
          break;
        case "unlock":
          await steps.unlock();
          break;
      }
      ok = true;
    } finally {
      const t1 = this.#now();
      record.push({ step, ms: t1 - t0, ok });
      this.#s.onProgress({
        type: "step-end",
        pid,
        step,
        at: t1 - this.#start,
        ms: t1 - t0,
        ok,
        rollback,
        ...memory,
      });
    }
  }

  /** The lock timeout: the option, cut to what is left of the deadline (not for a rollback). */
  #lockTimeout(rollback: boolean): number {
    if (rollback || this.#deadline === Infinity) return this.#s.lockTimeoutMs;
    // Rounded up: a lock that times out ends at the deadline, not a fraction of a ms before it.
    const left = Math.max(1, Math.ceil(this.#deadline - this.#now()));
    return this.#s.lockTimeoutMs === 0 ? left : Math.min(this.#s.lockTimeoutMs, left);
  }

  /**
   * Brings the process back to its initial state within the caller's turn, after it made the
   * steps `done` (and, `afterFailure`, a step that failed); records it as the entry's rollback.
   * The way back starts from the state the driver reports now, which a failed step may have
   * left elsewhere than `done` says (a failed checkpoint that left the process checkpointed is
   * restored and unlocked, a failed lock that locked it is unlocked); where the state cannot be
   * read, `done` is undone newest first. A failed process is left alone: the failed state is
   * final, and no step can bring it back.
   */
  async #undo(
    entry: Entry,
    steps: ProcessSteps,
    done: readonly GroupStep[],
    afterFailure: boolean,
  ): Promise<void> {
    if (done.length === 0 && !afterFailure) {
      entry.state = entry.initialState; // stopped before any step: it is as it was
      return;
    }
    const record: StepRecord[] = [];
    try {
      const now = await steps.state().catch(() => undefined);
      if (now === undefined && done.length === 0) return; // nothing known to undo
      const back = now === undefined
        ? [...done].reverse().map((step) => UNDO[step])
        : wayBetween(now, entry.initialState!);
      if (back === undefined) {
        throw this.#illegal(
          entry,
          now,
          `the failed state is final: it cannot be brought back to ${entry.initialState}`,
        );
      }
      if (back.length === 0 && done.length === 0) {
        entry.state = now; // the failed step changed nothing
        return;
      }
      for (const step of back) await this.#step(entry, steps, step, record, true);
      entry.rollback = { ok: true, steps: record };
      entry.state = entry.initialState;
    } catch (err) {
      entry.rollback = { ok: false, steps: record, error: err as Error };
      entry.state = await steps.state().catch(() => undefined);
    }
  }

  /** The error for a process in a state the group cannot move it from; `detail` says why. */
  #illegal(entry: Entry, state: ProcessState | undefined, detail: string): CudaError {
    return new CudaError({
      code: CUDA_ERROR_ILLEGAL_STATE,
      operation: this.#action,
      pid: entry.proc.pid,
      state,
      description: "the operation cannot be performed in the present state",
      detail,
    });
  }

  /** All-or-nothing: takes a process that succeeded back to its initial state. */
  async #rollBack(entry: Entry): Promise<void> {
    const done = entry.steps.filter((s) => s.ok).map((s) => s.step);
    try {
      await inTurn(entry.proc, (steps) => this.#undo(entry, steps, done, false));
    } catch (err) {
      entry.rollback = { ok: false, steps: entry.rollback?.steps ?? [], error: err as Error };
    }
  }
}

function outcome(e: Entry): ProcessOutcome {
  return {
    pid: e.proc.pid,
    status: e.status,
    ...(e.initialState !== undefined ? { initialState: e.initialState } : {}),
    ...(e.state !== undefined ? { state: e.state } : {}),
    steps: e.steps,
    ...(e.error ? { error: e.error } : {}),
    ...(e.notStarted ? { notStarted: e.notStarted } : {}),
    ...(e.stopped ? { stopped: e.stopped } : {}),
    ...(e.rollback ? { rollback: e.rollback } : {}),
  };
}
