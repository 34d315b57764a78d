/**
 * What a group operation takes and gives: its options, checked once where they enter
 * ({@link checkGroupOptions}), its progress events and its result.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";
import { describeValue } from "./options.ts";
import type { Machine } from "./machine.ts";
import {
  checkFlag,
  checkFunction,
  checkGpuMapping,
  checkInteger,
  checkLockTimeout,
  checkOptions,
  checkSignal,
  type GpuMapping,
} from "./options.ts";
import type { RoomCheck } from "./room.ts";
import type { Action, ProcessState, Step } from "./states.ts";

/** One driver call an operation made, and how long it took. */
export interface StepRecord {
  /** The step. */
  readonly step: Step;
  /** Its time in ms, on the machine's clock. */
  readonly ms: number;
  /** Whether it succeeded. */
  readonly ok: boolean;
}

/** Why an action was stopped between steps. */
export type StopReason = "deadline" | "aborted" | "another-failed";

/** Options of `runGroup`. */
export interface GroupOptions {
  /**
   * The machine of the processes given as pids: a `SimulatedMachine`, or one `openMachine`
   * opened; this machine when left out. A `CudaProcess` keeps its own.
   */
  machine?: Machine;
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
   * A deadline for the whole group, in ms from the call (on the machine's clock). Lock timeouts
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
   * `undefined` to restore it in place). See `StepOptions.gpuMapping`.
   */
  gpuMapping?: GpuMapping | ((pid: number) => GpuMapping | undefined);
  /** Whether to record and check GPU room (see `StepOptions.checkRoom`); default `true`. */
  checkRoom?: boolean;
  /** Checkpoint processes that imported GPU memory (see `StepOptions.allowIpcImport`); default `false`. */
  allowIpcImport?: boolean;
  /**
   * Called as each process's steps start and end, for a progress display. Must not throw. When it
   * is given, the group first asks the machine's host for each process's GPU memory (one NVML
   * query on Linux, a few ms), so that the events can say how much each process holds.
   */
  onProgress?: (event: GroupEvent) => void;
  /**
   * Whether the progress events carry each process's GPU memory: `true` (the default) asks the
   * host first, as `onProgress` says; `false` skips that query.
   */
  gpuMemory?: boolean;
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
    readonly step: Step;
    readonly at: number;
    /** The process's GPU memory in MiB, where known (see {@link GroupEvent}). */
    readonly gpuMemoryMiB?: number;
  }
  | {
    readonly type: "step-end";
    readonly pid: number;
    readonly step: Step;
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

/** What the group did to one process. */
export interface ProcessOutcome {
  /** The pid, as given. */
  readonly pid: number;
  /**
   * `done`: its steps ran; `unchanged`: a goal found it already where it leads; `failed`: it was
   * refused, or a step failed (see `error`; what it had done is undone where possible);
   * `stopped`: it was between steps when the deadline passed, the signal aborted or (all or
   * nothing) another process failed, so its next step was not made and what it had done was
   * undone; `rolled-back`: its steps ran, then all or nothing (another process failed) or
   * `rollBackOnAbort` brought it back (`rollback.ok` says whether that worked); `not-started` (see
   * `notStarted`).
   */
  readonly status: "done" | "unchanged" | "failed" | "stopped" | "rolled-back" | "not-started";
  /** The state before the call, where it was read. */
  readonly initialState?: ProcessState;
  /** The state after the call (and any rollback), where known. */
  readonly state?: ProcessState;
  /** The steps it went through, in order (rollback steps are in `rollback`). */
  readonly steps: readonly StepRecord[];
  /** Why it failed. */
  readonly error?: Error;
  /** Why it never started. */
  readonly notStarted?: StopReason;
  /** Why it was stopped between steps. */
  readonly stopped?: StopReason;
  /**
   * Its rollback, where one was made: after its own failed step, or (all-or-nothing) because
   * another process failed. `ok` says whether it is back in its initial state.
   */
  readonly rollback?: {
    readonly ok: boolean;
    readonly steps: readonly StepRecord[];
    readonly error?: Error;
  };
  /**
   * Where a restore was made: whether its room was checked, and if not, why. Where a checkpoint
   * was made whose record of GPU memory could not be written: `{ unknown }`, saying why its
   * restore's room cannot be checked (a warning).
   */
  readonly roomCheck?: RoomCheck;
}

/** What a group operation did. */
export interface GroupResult {
  /** The action. */
  readonly action: Action;
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
  /** The whole group's time in ms, on the machine's clock. */
  readonly ms: number;
}

/** A group's options, checked: what {@link checkGroupOptions} makes. */
export interface GroupSettings {
  concurrency: number;
  allOrNothing: boolean;
  rollBackOnAbort: boolean;
  job: boolean;
  timeoutMs: number | undefined;
  signal: AbortSignal | undefined;
  lockTimeoutMs: number;
  pairsFor: (pid: number) => readonly GpuPair[] | null;
  checkRoom: boolean;
  allowIpcImport: boolean;
  onProgress: (event: GroupEvent) => void;
  /** Whether the events want GPU memory (an onProgress was given). */
  wantsMemory: boolean;
  /** A job's members that come into being over time: see `JobContext.ready`. */
  ready?: (pid: number) => Promise<void>;
}

/**
 * Checks a group's options, once, where they enter (`runGroup`'s); `machine` is left to the
 * caller. Every setting left out has its default, so a caller of {@link runGroup} inside this
 * package builds its settings from `checkGroupOptions({ ... })` of its own values.
 */
export function checkGroupOptions(options: GroupOptions | undefined): GroupSettings {
  const o = checkOptions(options, "runGroup", [
    "machine",
    "concurrency",
    "allOrNothing",
    "rollBackOnAbort",
    "job",
    "timeoutMs",
    "signal",
    "lockTimeoutMs",
    "gpuMapping",
    "checkRoom",
    "allowIpcImport",
    "onProgress",
    "gpuMemory",
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
  const job = checkFlag(o.job, "job", false);
  if (job && o.concurrency !== undefined) {
    throw new RangeError(
      `a job works on every process at once: concurrency cannot be given with job: true, got ${
        describeValue(o.concurrency)
      }`,
    );
  }
  return {
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
    lockTimeoutMs: checkLockTimeout(o.lockTimeoutMs, "lockTimeoutMs"),
    pairsFor,
    checkRoom: checkFlag(o.checkRoom, "checkRoom", true),
    allowIpcImport: checkFlag(o.allowIpcImport, "allowIpcImport", false),
    wantsMemory: onProgress !== undefined && gpuMemory,
    onProgress: (event) => {
      try {
        onProgress?.(event);
      } catch {
        // A progress display that throws must not break the group.
      }
    },
  };
}
