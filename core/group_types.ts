// What a group operation takes and gives: its options (checked where they enter), events, result.

import type { GpuPair } from "./driver.ts";
import type { Machine } from "./machine.ts";
import { checkFunction, checkGpuMapping, checkInteger, checkLockTimeout } from "./options.ts";
import { checkSignal, checkTable, describeValue, flag, type Settings } from "./options.ts";
import { type GpuMapping, orElse, wholeTimeout } from "./options.ts";
import type { RoomCheck } from "./room.ts";
import type { Action, ProcessState, Step } from "./states.ts";

/** One driver call an operation made: its time in ms on the machine's clock, whether it worked. */
export type StepRecord = { readonly step: Step; readonly ms: number; readonly ok: boolean };

/** Why an action was stopped before a step (or not started). */
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
  /** A deadline for the whole group in ms (0: none): lock timeouts are cut to it, no step after. */
  timeoutMs?: number;
  /**
   * The processes share GPU state: every lock before any checkpoint, every restore before any
   * unlock, all brought back if any fails (`allOrNothing`, never `concurrency`; docs/API.md#jobs).
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

/**
 * A step of one process starting or ending (how long it took, whether it succeeded, whether it was
 * part of a rollback; the process's GPU memory in MiB where known), or its part ending (before any
 * rollback that all-or-nothing may make later), and how; `at` is ms since the start.
 */
export type GroupEvent = Readonly<
  | { type: "step-start"; pid: number; step: Step; at: number; gpuMemoryMiB?: number } & {
    rollback?: boolean;
  }
  | { type: "step-end"; pid: number; step: Step; at: number; ms: number; ok: boolean } & {
    rollback: boolean;
    gpuMemoryMiB?: number;
  }
  | { type: "process-end"; pid: number; at: number; status: ProcessOutcome["status"] }
>;

/** What the group did to one process. */
export interface ProcessOutcome {
  /** The pid, as given. */
  readonly pid: number;
  /** How it ended (`stopped`: held back by the deadline or signal; `rolled-back`: done, undone). */
  readonly status: "done" | "unchanged" | "failed" | "stopped" | "rolled-back" | "not-started";
  /** The state before the call, where it was read. */
  readonly initialState?: ProcessState;
  /** The state after the call (and any rollback), where known; not started: as its plan read it. */
  readonly state?: ProcessState;
  /** The steps it went through, in order (rollback steps are in `rollback`). */
  readonly steps: readonly StepRecord[];
  /** Why it failed. */
  readonly error?: Error;
  /** Why it never started. */
  readonly notStarted?: StopReason;
  /** Why it was stopped before a step (its first, or a later one). */
  readonly stopped?: StopReason;
  /** Its rollback, where one was made; `ok`: it is back in its initial state. */
  readonly rollback?: Readonly<{ ok: boolean; steps: readonly StepRecord[]; error?: Error }>;
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
  /** Whether the deadline held back a step or cut a lock short (steps under way ran on). */
  readonly deadlinePassed: boolean;
  /** Whether the signal aborted the group. */
  readonly aborted: boolean;
  /**
   * Whether processes were brought back to where they began: done ones by all-or-nothing (or
   * `rollBackOnAbort`), or ones stopped between steps (`stopped`), whose first steps were undone.
   */
  readonly rolledBack: boolean;
  /** The whole group's time in ms, on the machine's clock. */
  readonly ms: number;
}

const GROUP_OPTIONS = {
  concurrency: (v: unknown) => v === undefined ? Infinity : checkInteger(v, "concurrency", 1),
  allOrNothing: flag(false),
  rollBackOnAbort: flag(false),
  job: flag(false),
  timeoutMs: wholeTimeout("group"),
  signal: checkSignal,
  lockTimeoutMs: checkLockTimeout,
  // A mapping given as such is checked once, before anything; each pid's as it is asked for.
  gpuMapping: (m: unknown): (pid: number) => readonly GpuPair[] | null => {
    const pairsOf = (m: unknown) => m === undefined ? null : checkGpuMapping(m);
    if (typeof m === "function") return (pid) => pairsOf(m(pid));
    const pairs = pairsOf(m);
    return () => pairs;
  },
  checkRoom: flag(true),
  allowIpcImport: flag(false),
  onProgress: checkFunction<GroupOptions["onProgress"]>,
  gpuMemory: flag(true),
};

/**
 * A group's options, checked: what {@link checkGroupOptions} makes (`gpuMemory`: the events want
 * it, as an onProgress was given); a job's members may come into being over time (`ready`).
 */
export type GroupSettings = Omit<Settings<typeof GROUP_OPTIONS>, "onProgress"> & {
  readonly onProgress: (event: GroupEvent) => void;
  readonly ready?: (pid: number) => Promise<void>;
};

/** Checks a group's options, each left out given its default (the machine is the caller's). */
export function checkGroupOptions(options: GroupOptions | undefined): GroupSettings {
  const s = checkTable(options, "runGroup", GROUP_OPTIONS); // each of the right type first
  for (const key of ["concurrency", "allOrNothing"] as const) {
    const v = s.job ? options![key] : undefined; // a job: all at once, all or none
    const both = `a job works on all at once, all or none: ${key} cannot be given with job: true`;
    if (v !== undefined && v !== true) throw new RangeError(`${both}, got ${describeValue(v)}`);
  }
  return {
    ...s,
    allOrNothing: s.job || s.allOrNothing,
    gpuMemory: s.onProgress !== undefined && s.gpuMemory,
    // A progress display that throws must not break the group.
    onProgress: (event) => orElse(() => s.onProgress?.(event), undefined),
  };
}
