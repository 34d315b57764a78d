/**
 * Operations on many processes at once: a step or a goal (suspend, resume, toggle) on a group of
 * pids or {@link CudaProcess}es, all at once (or a few at a time), with a result per process, an
 * optional all-or-nothing rollback, a deadline or `AbortSignal` for the whole group, and progress
 * events. Each process goes through the same executor as `CudaProcess`'s own methods
 * (`runAction`), so `suspendAll([p])` does to `p` what `p.suspend()` does.
 *
 * The driver works on each process on its own thread, so N processes checkpoint together in
 * about the time of the largest, not the sum (docs/DRIVER.md#many-processes-at-once).
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";
import { RefusedError } from "./errors.ts";
import type { HostProcesses } from "./host.ts";
import { runJob } from "./job.ts";
import { checkHost } from "./listing.ts";
import {
  checkChoice,
  checkFlag,
  checkFunction,
  checkGpuMapping,
  checkInteger,
  checkOptions,
  checkPid,
  checkSignal,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./options.ts";
import {
  type ActionReport,
  type ActionSettings,
  clockOf,
  CudaProcess,
  inTurn,
  returnTo,
  runAction,
  type StepRecord,
  type StopReason,
  type Target,
} from "./process.ts";
import type { RoomCheck } from "./room.ts";
import type { DriverSource } from "./sources.ts";
import { type Action, ACTIONS, isStep, plan, type ProcessState, type Step } from "./states.ts";
import { describeValue } from "./uuid.ts";

export type { StepRecord } from "./process.ts";

/** What a group does to each process: one step, or a goal (`suspend`, `resume`, `toggle`). */
export type GroupAction = Action;

/** One driver call of a process's plan. */
export type GroupStep = Step;

/** Options of {@link runGroup}, {@link suspendAll}, {@link resumeAll} and {@link toggleAll}. */
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
   * state it was in before the call, as `allOrNothing` does, even those that are done. A step
   * inside the driver cannot be interrupted: its process is brought back when the step ends.
   * Default `false`. The command line uses it for Ctrl-C.
   */
  rollBackOnAbort?: boolean;
  /**
   * A deadline for the whole group, in ms from the call (on the driver's clock). Lock timeouts
   * are cut to what is left of it, and no step starts after it has passed. A call already inside
   * the driver cannot be interrupted: a checkpoint under way when the deadline passes finishes.
   */
  timeoutMs?: number;
  /**
   * The processes are one job: they share GPU state (NCCL ranks, CUDA IPC, the ranks of one
   * inference server), so every one is locked before any is checkpointed, and every one restored
   * before any is unlocked; if any step fails, every process is brought back, in the same order.
   * Implies `allOrNothing`, works on all of them at once (`concurrency` cannot be given), and
   * holds every process's turn until the job is over. Default `false`. Drivers before 590 cannot
   * checkpoint processes that share CUDA IPC memory at all (docs/API.md#jobs).
   */
  job?: boolean;
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
  /** Whether to record and check GPU room (see `RestoreOptions.checkRoom`); default `true`. */
  checkRoom?: boolean;
  /**
   * Called as each process's steps start and end, for a progress display. Must not throw. When it
   * is given, the group first asks the host for each process's GPU memory (one NVML query on
   * Linux, a few ms), so that the events can say how much each process holds.
   */
  onProgress?: (event: GroupEvent) => void;
  /**
   * Whether the progress events carry each process's GPU memory: `true` (the default) asks the
   * host first, as `onProgress` says; `false` skips that query.
   */
  gpuMemory?: boolean;
  /**
   * Where the events' GPU memory comes from: the driver's own host (the simulator's), else the
   * machine's (NVML) when left out. Read only with `onProgress`.
   */
  host?: HostProcesses;
}

/**
 * A step of one process starting or ending. Times are ms since the group started.
 * `gpuMemoryMiB` is the GPU memory the process held when the group started, summed over its GPUs,
 * its CUDA context included (what a checkpoint copies out): from the host (NVML on Linux) for a
 * process that holds GPU memory, or, for a checkpointed process, what was recorded at its
 * checkpoint. Left out where it is not known.
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
  }
  | {
    /** A process's part ended (before any rollback that all-or-nothing may make later). */
    readonly type: "process-end";
    readonly pid: number;
    readonly at: number;
    /** How it ended (see {@link ProcessOutcome.status}). */
    readonly status: ProcessOutcome["status"];
  };

/** Why a process was never started, or was stopped between steps. */
export type NotStartedReason = StopReason;

/** What the group did to one process. */
export interface ProcessOutcome {
  /** The pid, as given. */
  readonly pid: number;
  /**
   * `done`: its steps ran; `unchanged`: a goal found it already where it leads; `failed`: it was
   * refused, or a step failed (see `error`; what it had done is undone where possible);
   * `stopped`: it was between steps when the deadline passed, the signal aborted or (all or
   * nothing) another process failed, so its next step was not made and what it had done was
   * undone; `not-started` (see `notStarted`).
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
  /** Where a restore was made: whether its room was checked, and if not, why. */
  readonly roomCheck?: RoomCheck;
}

/** What a group operation did. */
export interface GroupResult {
  /** The action. */
  readonly action: GroupAction;
  /** Whether every process is now where the action takes it (`done` or `unchanged`). */
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

/**
 * Runs `action` on every target at once (or `concurrency` at a time) and resolves to what
 * happened to each; it rejects only for bad input. A goal reads each process's state and makes
 * the steps the state table plans from there (suspend of a locked process only checkpoints it;
 * one already where the goal leads is `unchanged`); a step is made as asked, and the driver has
 * the last word on it. A process whose step fails is brought back to its initial state where the
 * steps it made can be undone, and with `allOrNothing` so is every other.
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
  options?: GroupOptions,
): Promise<GroupResult> {
  checkChoice(action, "action", ACTIONS);
  const settings = checkGroupOptions(options);
  const { procs, owned } = handles(targets, settings.driver);
  try {
    return await new Group(action, procs, settings).run();
  } finally {
    await Promise.all(owned.map((p) => p.close()));
  }
}

/**
 * Suspends every target at once (to checkpointed: lock + checkpoint from running); see
 * {@link runGroup}.
 *
 * @example
 * ```ts ignore
 * const result = await suspendAll([4101, 4102, 4103], { allOrNothing: true, timeoutMs: 30_000 });
 * if (!result.ok) console.error(result.processes.filter((p) => p.status === "failed"));
 * ```
 */
export function suspendAll(
  targets: readonly (number | CudaProcess)[],
  options?: GroupOptions,
): Promise<GroupResult> {
  return runGroup("suspend", targets, options);
}

/** Resumes every target at once (to running: restore + unlock from checkpointed); see {@link runGroup}. */
export function resumeAll(
  targets: readonly (number | CudaProcess)[],
  options?: GroupOptions,
): Promise<GroupResult> {
  return runGroup("resume", targets, options);
}

/**
 * Toggles every target at once, as `cuda-checkpoint --toggle` does one: the running ones are
 * suspended and the checkpointed ones resumed; any other state is refused. See {@link runGroup}.
 */
export function toggleAll(
  targets: readonly (number | CudaProcess)[],
  options?: GroupOptions,
): Promise<GroupResult> {
  return runGroup("toggle", targets, options);
}

interface Settings {
  driver: DriverSource | undefined;
  concurrency: number;
  allOrNothing: boolean;
  rollBackOnAbort: boolean;
  job: boolean;
  timeoutMs: number | undefined;
  signal: AbortSignal | undefined;
  lockTimeoutMs: number;
  pairsFor: (pid: number) => GpuPair[] | null;
  checkRoom: boolean;
  onProgress: (event: GroupEvent) => void;
  /** Whether the events want GPU memory (an onProgress was given). */
  wantsMemory: boolean;
  host?: HostProcesses;
}

function checkGroupOptions(options: GroupOptions | undefined): Settings {
  const o = checkOptions(options, "runGroup", [
    "driver",
    "concurrency",
    "allOrNothing",
    "rollBackOnAbort",
    "job",
    "timeoutMs",
    "signal",
    "lockTimeoutMs",
    "gpuMapping",
    "checkRoom",
    "onProgress",
    "gpuMemory",
    "host",
  ]);
  const mapping = o.gpuMapping;
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
  const onProgress = checkFunction(o.onProgress, "onProgress");
  const gpuMemory = checkFlag(o.gpuMemory, "gpuMemory", true);
  checkHost(o.host, "host");
  const job = checkFlag(o.job, "job", false);
  if (job && o.concurrency !== undefined) {
    throw new RangeError(
      `a job works on every process at once: concurrency cannot be given with job: true, got ${
        describeValue(o.concurrency)
      }`,
    );
  }
  return {
    driver: o.driver,
    concurrency: o.concurrency === undefined
      ? Infinity
      : checkInteger(o.concurrency, "concurrency", 1),
    allOrNothing: job || checkFlag(o.allOrNothing, "allOrNothing", false),
    job,
    rollBackOnAbort: checkFlag(o.rollBackOnAbort, "rollBackOnAbort", false),
    timeoutMs: o.timeoutMs === undefined
      ? undefined
      : checkInteger(o.timeoutMs, "timeoutMs (ms for the whole group)", 0),
    signal: checkSignal(o.signal),
    lockTimeoutMs: o.lockTimeoutMs === undefined
      ? DEFAULT_LOCK_TIMEOUT_MS
      : checkTimeoutMs(o.lockTimeoutMs, "lockTimeoutMs"),
    pairsFor,
    checkRoom: checkFlag(o.checkRoom, "checkRoom", true),
    wantsMemory: onProgress !== undefined && gpuMemory,
    ...(o.host ? { host: o.host } : {}),
    onProgress: (event) => {
      try {
        onProgress?.(event);
      } catch {
        // A progress display that throws must not break the group.
      }
    },
  };
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
      proc = new CudaProcess(t, { ...(driver !== undefined ? { driver } : {}) });
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
  readonly proc: CudaProcess;
  report: ActionReport | undefined;
  notStarted?: NotStartedReason;
  rollingBack?: Promise<void>;
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
  readonly #rollbacks: Promise<void>[] = [];
  #memory = new Map<number, number>();

  constructor(action: GroupAction, procs: CudaProcess[], settings: Settings) {
    this.#action = action;
    this.#s = settings;
    this.#entries = procs.map((proc) => ({ proc, report: undefined }));
  }

  async run(): Promise<GroupResult> {
    if (this.#entries.length > 0) {
      const driver = await this.#entries[0].proc.driver();
      this.#now = clockOf(driver).now;
      if (this.#s.wantsMemory) this.#memory = await this.#memoryOf();
    }
    this.#start = this.#now();
    if (this.#s.timeoutMs !== undefined) this.#deadline = this.#start + this.#s.timeoutMs;
    if (this.#s.job) return await this.#runJob();
    // All or nothing: what can be checked is checked before anything changes. A goal that some
    // member's state rules out (a toggle of a locked process), or a member that cannot be read,
    // fails the group before any step.
    if (this.#s.allOrNothing && !isStep(this.#action) && !(await this.#allCanStart())) {
      return this.#result();
    }
    let next = 0;
    const lane = async () => {
      while (next < this.#entries.length) {
        const entry = this.#entries[next++];
        const stop = this.#stopReason();
        if (stop) {
          entry.notStarted = stop;
          if (this.#s.allOrNothing) this.#doom();
          continue;
        }
        await this.#work(entry);
        const status = entry.report!.status;
        this.#s.onProgress({
          type: "process-end",
          pid: entry.proc.pid,
          at: this.#now() - this.#start,
          status,
        });
        if (status !== "done" && status !== "unchanged") {
          this.#failed = true;
          if (this.#s.allOrNothing) this.#doom();
        }
        this.#rollBackIfDone(entry);
      }
    };
    const signal = this.#s.signal;
    const onAbort = () => {
      if (this.#s.allOrNothing || this.#s.rollBackOnAbort) this.#doom();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (signal?.aborted) onAbort();
      const lanes = Math.min(this.#s.concurrency, this.#entries.length);
      await Promise.all(Array.from({ length: lanes }, lane));
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    const incomplete = this.#entries.some((e) => !succeeded(e));
    if ((this.#s.allOrNothing && incomplete) || (this.#s.rollBackOnAbort && signal?.aborted)) {
      this.#doom();
    }
    // Rollbacks started as soon as the group could no longer succeed; wait for every one.
    while (this.#rollbacks.length > 0) await Promise.all(this.#rollbacks.splice(0));
    return this.#result();
  }

  /** The group as one job (core/job.ts). */
  async #runJob(): Promise<GroupResult> {
    this.#rolledBack = await runJob(this.#entries, {
      action: this.#action,
      settingsFor: (pid) => ({
        lockTimeoutMs: () => this.#lockTimeout(),
        pairs: this.#s.pairsFor(pid),
        checkRoom: this.#s.checkRoom,
      }),
      hooks: (pid) => this.#hooks(pid),
      stopReason: () => this.#stopReason(),
    });
    for (const e of this.#entries) {
      this.#s.onProgress({
        type: "process-end",
        pid: e.proc.pid,
        at: this.#now() - this.#start,
        status: outcome(e).status,
      });
    }
    return this.#result();
  }

  #result(): GroupResult {
    const incomplete = this.#entries.some((e) => !succeeded(e));
    return {
      action: this.#action,
      ok: !incomplete && !this.#rolledBack,
      processes: this.#entries.map(outcome),
      deadlinePassed: this.#deadlinePassed,
      aborted: this.#s.signal?.aborted === true,
      rolledBack: this.#rolledBack,
      ms: this.#now() - this.#start,
    };
  }

  /**
   * Reads every member's state and plans the goal from it; where one is refused or cannot be
   * read, that member fails and no other starts (`another-failed`). True where all can start.
   */
  async #allCanStart(): Promise<boolean> {
    const checks = await Promise.all(this.#entries.map((e) =>
      inTurn(e.proc, async (target) => {
        const state = await target.state();
        const p = plan(this.#action, state);
        if (p.kind !== "refused") return undefined;
        return {
          status: "failed",
          steps: [],
          initialState: state,
          state,
          error: new RefusedError({
            code: "STATE",
            operation: this.#action,
            pid: e.proc.pid,
            state,
            reason: p.why,
          }),
        } as ActionReport;
      }).catch((err): ActionReport => ({
        status: "failed",
        steps: [],
        error: err instanceof Error ? err : new Error(String(err)),
      }))
    ));
    if (checks.every((c) => c === undefined)) return true;
    this.#failed = true;
    for (const [i, e] of this.#entries.entries()) {
      if (checks[i]) e.report = checks[i];
      else e.notStarted = "another-failed";
    }
    return false;
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
    if (!this.#doomed || entry.report?.status !== "done" || entry.rollingBack) return;
    this.#rolledBack = true;
    entry.rollingBack = inTurn(
      entry.proc,
      (target) => returnTo(target, entry.report!, this.#hooks(entry.proc.pid)),
    ).catch((err) => {
      entry.report!.rollback = {
        ok: false,
        steps: entry.report!.rollback?.steps ?? [],
        error: err as Error,
      };
    });
    this.#rollbacks.push(entry.rollingBack);
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

  /** One process, in its turn, through the one executor. */
  async #work(entry: Entry): Promise<void> {
    const pid = entry.proc.pid;
    const settings: ActionSettings = {
      lockTimeoutMs: () => this.#lockTimeout(),
      pairs: this.#s.pairsFor(pid),
      checkRoom: this.#s.checkRoom,
    };
    try {
      entry.report = await inTurn(
        entry.proc,
        (target: Target) =>
          runAction(target, this.#action, settings, {
            ...this.#hooks(pid),
            stopBefore: () => this.#stopReason(),
          }, true),
      );
    } catch (err) {
      // The handle could not be used at all (its driver did not open, it was closed).
      entry.report = {
        status: "failed",
        steps: [],
        error: err instanceof Error ? err : new Error(String(err)),
      };
    }
  }

  /** The progress hooks of one process. */
  #hooks(pid: number) {
    const mib = this.#memory.get(pid);
    const memory = mib === undefined ? {} : { gpuMemoryMiB: mib };
    let t0 = 0;
    return {
      stepStarted: (step: Step) => {
        t0 = this.#now();
        this.#s.onProgress({ type: "step-start", pid, step, at: t0 - this.#start, ...memory });
      },
      stepEnded: (r: StepRecord, rollback: boolean) => {
        this.#s.onProgress({
          type: "step-end",
          pid,
          step: r.step,
          at: this.#now() - this.#start,
          ms: r.ms,
          ok: r.ok,
          rollback,
          ...memory,
        });
      },
    };
  }

  /** The lock timeout: the option, cut to what is left of the deadline. */
  #lockTimeout(): number {
    if (this.#deadline === Infinity) return this.#s.lockTimeoutMs;
    // Rounded up: a lock that times out ends at the deadline, not a fraction of a ms before it.
    const left = Math.max(1, Math.ceil(this.#deadline - this.#now()));
    return this.#s.lockTimeoutMs === 0 ? left : Math.min(this.#s.lockTimeoutMs, left);
  }

  /**
   * Each target's GPU memory in MiB, where known (see {@link GroupEvent}): from one report of the
   * host, or what was recorded at its checkpoint. Never rejects.
   */
  async #memoryOf(): Promise<Map<number, number>> {
    const known = new Map<number, number>();
    const sum = (m: Readonly<Record<string, number>>) =>
      Object.values(m).reduce((a, b) => a + b, 0);
    const first = this.#entries[0].proc;
    const report = await inTurn(first, (t) => t.memoryReport(this.#s.host)).catch(() => undefined);
    await Promise.all(this.#entries.map((e) =>
      inTurn(e.proc, async (target) => {
        const now = report && "byPid" in report ? report.byPid.get(target.identity.pid) : undefined;
        if (now !== undefined && now !== "unknown" && sum(now) > 0) {
          known.set(e.proc.pid, sum(now));
          return;
        }
        const record = await target.heldRecord();
        if (record) known.set(e.proc.pid, sum(record.heldMiB));
      }).catch(() => {})
    ));
    return known;
  }
}

function succeeded(e: Entry): boolean {
  return e.report?.status === "done" || e.report?.status === "unchanged";
}

function outcome(e: Entry): ProcessOutcome {
  const r = e.report;
  if (!r) {
    return { pid: e.proc.pid, status: "not-started", steps: [], notStarted: e.notStarted };
  }
  return {
    pid: e.proc.pid,
    status: r.status,
    ...(r.initialState !== undefined ? { initialState: r.initialState } : {}),
    ...(r.state !== undefined ? { state: r.state } : {}),
    steps: r.steps,
    ...(r.error ? { error: r.error } : {}),
    ...(r.stopped ? { stopped: r.stopped } : {}),
    ...(r.rollback ? { rollback: r.rollback } : {}),
    ...(r.roomCheck !== undefined ? { roomCheck: r.roomCheck } : {}),
  };
}
