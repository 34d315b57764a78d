/**
 * What a group operation takes and gives: its options (checked where they enter), events, result.
 *
 * @module
 */

import type { GpuPair } from "./driver.ts";
import type { Machine } from "./machine.ts";
import { checkFlag, checkFunction, checkGpuMapping, checkInteger } from "./options.ts";
import { checkLockTimeout, checkOptions, checkSignal, describeValue } from "./options.ts";
import type { GpuMapping } from "./options.ts";
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
  /** The machine of targets given as pids (a `CudaProcess` keeps its own); this one by default. */
  machine?: Machine;
  /** How many processes are worked on at once: an integer from 1; all of them by default. */
  concurrency?: number;
  /** When one fails, bring every process that succeeded back, start no more (default `false`). */
  allOrNothing?: boolean;
  /** When the signal aborts, bring every process moved back, done ones too (default `false`). */
  rollBackOnAbort?: boolean;
  /** A deadline for the whole group in ms: lock timeouts are cut to it, no step starts after. */
  timeoutMs?: number;
  /**
   * The processes share GPU state: every lock before any checkpoint, every restore before any
   * unlock, all brought back if any fails (implies `allOrNothing`; docs/API.md#jobs).
   */
  job?: boolean;
  /** Stops the group: no step starts after it aborts; a process between steps is brought back. */
  signal?: AbortSignal;
  /** Each process's lock timeout in ms (0: forever); 10 000 by default, cut by `timeoutMs`. */
  lockTimeoutMs?: number;
  /** Where to restore: one mapping, or each pid's (`undefined`: in place). See `StepOptions`. */
  gpuMapping?: GpuMapping | ((pid: number) => GpuMapping | undefined);
  /** Whether to record and check GPU room (see `StepOptions.checkRoom`); default `true`. */
  checkRoom?: boolean;
  /** Checkpoint processes that imported GPU memory (see `StepOptions`); default `false`. */
  allowIpcImport?: boolean;
  /** Called as each process's steps start and end. Must not throw. */
  onProgress?: (event: GroupEvent) => void;
  /** Whether events carry each process's GPU memory (one NVML query first); default `true`. */
  gpuMemory?: boolean;
}

/** A step of one process starting or ending, or its part ending; `at` is ms since the start. */
export type GroupEvent =
  | {
    readonly type: "step-start";
    readonly pid: number;
    readonly step: Step;
    readonly at: number;
    /** The process's GPU memory in MiB, where known. */
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
    /** The process's GPU memory in MiB, where known. */
    readonly gpuMemoryMiB?: number;
  }
  | {
    /** A process's part ended (before any rollback that all-or-nothing may make later). */
    readonly type: "process-end";
    readonly pid: number;
    readonly at: number;
    /** How it ended. */
    readonly status: ProcessOutcome["status"];
  };

/** What the group did to one process. */
export interface ProcessOutcome {
  /** The pid, as given. */
  readonly pid: number;
  /** How it ended (`stopped`: between steps when stopped; `rolled-back`: done, then undone). */
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
  /** Its rollback, where one was made; `ok`: it is back in its initial state. */
  readonly rollback?: {
    readonly ok: boolean;
    readonly steps: readonly StepRecord[];
    readonly error?: Error;
  };
  /** Whether a restore's room was checked, or why not; or a checkpoint's unwritten record. */
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
  /** A job's members that come into being over time (`JobContext.ready`). */
  ready?: (pid: number) => Promise<void>;
}

/** Checks a group's options, each left out given its default (the machine is the caller's). */
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
  const pairsOf = (m: GpuMapping | undefined) => m === undefined ? null : checkGpuMapping(m);
  const pairs = typeof mapping === "function" ? null : pairsOf(mapping); // once, before anything
  const onProgress = checkFunction(o.onProgress, "onProgress");
  const gpuMemory = checkFlag(o.gpuMemory, "gpuMemory", true);
  const job = checkFlag(o.job, "job", false);
  if (job && o.concurrency !== undefined) {
    throw new RangeError(
      "a job works on every process at once: concurrency cannot be given with job: true, got " +
        describeValue(o.concurrency),
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
    pairsFor: typeof mapping === "function" ? (pid) => pairsOf(mapping(pid)) : () => pairs,
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
