/**
 * The state table of docs/DRIVER.md#state-machine as data: each scenario puts a target process in a
 * state, makes one driver call, and says the CUresult and the state after it that the real driver
 * gives. The unit tests run every scenario against the simulated driver; tests/gpu/ runs the same
 * scenarios against the native driver on a GPU and reports where the two agree.
 */

import {
  CUDA_ERROR_ILLEGAL_STATE as ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE as INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED as NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY as NOT_READY,
  CUDA_ERROR_OPERATING_SYSTEM as OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY as OUT_OF_MEMORY,
  CUDA_SUCCESS as SUCCESS,
} from "../../core/driver.ts";
import type { ProcessState } from "../../core/states.ts";

/** A driver call a scenario makes. */
export type Call =
  | { op: "getState" }
  | { op: "getRestoreThreadId" }
  | { op: "lock"; timeoutMs?: number; nullArgs?: boolean; reservedByte?: number }
  | { op: "checkpoint" }
  | {
    op: "restore";
    /** none: NULL args; empty: a pairs pointer with count 0; same: each GPU to itself; others name unknown UUIDs. */
    pairs?:
      | "none"
      | "empty"
      | "same"
      | "unknown-old"
      | "unknown-new"
      | "rotate"
      | "move-one"
      | "two-onto-one";
  }
  | { op: "unlock" };

/** One row of the state table. */
export interface Scenario {
  /** A short unique name, used in reports. */
  name: string;
  /** The target: a CUDA process, a live process that never used CUDA, or no process at all. */
  target: "cuda" | "no-cuda" | "none";
  /** Which id the call is given: the pid, another thread's id, or a pid that cannot exist. */
  id?: "pid" | "thread" | "missing" | "zero" | "negative";
  /** GPU memory of the target in MiB (default 16). */
  memoryMiB?: number;
  /** Calls that bring the target into the scenario's starting state; each must succeed. */
  setup?: Call[];
  /** A kernel of this many ms is launched just before the call. */
  kernelMs?: number;
  /** The target exits this many ms after the call starts. */
  exitAfterMs?: number;
  /** Other processes take all but this many MiB of the GPU after setup (restore without room). */
  fillGpuLeavingMiB?: number;
  /**
   * Another call on the same process, started just before the call under test, which is made
   * `afterMs` later while it is still in flight (docs/DRIVER.md#overlapping-calls).
   */
  during?: { call: Call; afterMs: number };
  /** The call under test. */
  call: Call;
  /** What the real driver does. */
  expect: {
    code: number;
    /** The state after the call; `null` when the process does not exist (or never used CUDA). */
    state: ProcessState | null;
    /** For calls with an out-value: a thread id of the target. */
    value?: "thread-of-target";
    /** The target's GPU memory is the same after the call (checked after unlocking it). */
    memoryIntact?: boolean;
    /** Roughly how long the call takes, where that is the point (lock timeouts). */
    ms?: { min: number; max: number };
    /** For getState: the state it returns (which may differ from the state when it was asked). */
    returns?: ProcessState;
    /** With `during`: the code the other call gives. */
    duringCode?: number;
    /**
     * With `during`: whether the call under test ends after the other call (it waited for it),
     * or before it (it did not wait).
     */
    ends?: "after-other" | "before-other";
    /**
     * With `during`: the two calls are the same and race; one gives SUCCESS and the other
     * ILLEGAL_STATE, in either order. `code` and `duringCode` are then not checked one by one.
     */
    eitherWins?: boolean;
  };
  /**
   * Where the row comes from: measured on the real driver (docs/DRIVER.md#state-machine: the
   * probes or this project's own runs), NVIDIA's header, or assumed until a GPU run measures it.
   */
  source: "measured" | "header" | "assumed";
  /**
   * Whether the time the call takes, on the simulator, is compared with the real driver's in the
   * GPU run (false where the time is the environment's, such as a process killed at a set time).
   * Default true.
   */
  timed?: boolean;
  /** The fewest GPUs the scenario needs (migration); it is skipped on a machine with fewer. */
  minGpus?: number;
}

const lock: Call = { op: "lock", timeoutMs: 1000 };
const checkpoint: Call = { op: "checkpoint" };
const restore: Call = { op: "restore" };
const unlock: Call = { op: "unlock" };

/** What a call issued while another is in flight gives. */
interface Overlap {
  call: Call;
  code: number;
  /** The state after both; the state the other call leaves when left out. */
  state?: ProcessState;
  returns?: ProcessState;
  ends: "after-other" | "before-other";
}

/** The calls that overlap on one process (docs/DRIVER.md#overlapping-calls; H100 and H200, 580). */
function overlapping(): Scenario[] {
  const rows: Scenario[] = [];
  const inFlight: {
    name: string;
    setup: Call[];
    call: Call;
    after: ProcessState;
    outcomes: Overlap[];
  }[] = [
    {
      name: "a 4 GiB checkpoint",
      setup: [lock],
      call: checkpoint,
      after: "checkpointed",
      // What each call issued 100 ms in gives, and whether it waited.
      outcomes: [
        {
          call: { op: "getState" },
          code: SUCCESS,
          returns: "checkpointed",
          ends: "after-other",
        },
        { call: lock, code: ILLEGAL_STATE, ends: "after-other" },
        { call: checkpoint, code: ILLEGAL_STATE, ends: "after-other" },
        { call: unlock, code: ILLEGAL_STATE, ends: "after-other" },
        { call: restore, code: SUCCESS, state: "locked", ends: "after-other" },
        {
          call: { op: "getRestoreThreadId" },
          code: SUCCESS,
          ends: "before-other",
        },
      ],
    },
    {
      name: "a 4 GiB restore",
      setup: [lock, checkpoint],
      call: restore,
      after: "locked",
      outcomes: [
        {
          call: { op: "getState" },
          code: SUCCESS,
          returns: "locked",
          ends: "after-other",
        },
        { call: lock, code: ILLEGAL_STATE, ends: "after-other" },
        { call: restore, code: ILLEGAL_STATE, ends: "after-other" },
        { call: unlock, code: SUCCESS, state: "running", ends: "after-other" },
        {
          call: checkpoint,
          code: SUCCESS,
          state: "checkpointed",
          ends: "after-other",
        },
        {
          call: { op: "getRestoreThreadId" },
          code: SUCCESS,
          ends: "before-other",
        },
      ],
    },
  ];
  for (const f of inFlight) {
    for (const o of f.outcomes) {
      rows.push({
        name: `${o.call.op} issued 100 ms into ${f.name}`,
        target: "cuda",
        memoryMiB: 4096,
        setup: f.setup,
        during: { call: f.call, afterMs: 100 },
        call: o.call,
        expect: {
          code: o.code,
          state: o.state ?? f.after,
          duringCode: SUCCESS,
          returns: o.returns,
          ends: o.ends,
        },
        source: "measured",
      });
    }
  }
  const same: [Call, Call[], ProcessState][] = [
    [lock, [], "locked"],
    [checkpoint, [lock], "checkpointed"],
    [restore, [lock, checkpoint], "locked"],
    [unlock, [lock], "running"],
  ];
  for (const [call, setup, state] of same) {
    rows.push({
      name: `two ${call.op} calls at the same moment: one wins`,
      target: "cuda",
      setup,
      during: { call, afterMs: 0 },
      call,
      expect: { code: SUCCESS, state, eitherWins: true },
      source: "measured",
      timed: false,
    });
  }
  return rows;
}

/** Every scenario, in the order of the table in docs/DRIVER.md#state-machine. */
export const SCENARIOS: readonly Scenario[] = [
  {
    name: "getState of a process that never initialised CUDA",
    target: "no-cuda",
    call: { op: "getState" },
    expect: { code: NOT_INITIALIZED, state: null },
    source: "measured",
  },
  {
    name: "getRestoreThreadId of a process that never initialised CUDA",
    target: "no-cuda",
    call: { op: "getRestoreThreadId" },
    expect: { code: NOT_INITIALIZED, state: null },
    source: "measured",
  },
  {
    name: "getState of a pid that does not exist",
    target: "none",
    id: "missing",
    call: { op: "getState" },
    expect: { code: OPERATING_SYSTEM, state: null },
    source: "measured",
  },
  {
    name: "getState of pid 0",
    target: "none",
    id: "zero",
    call: { op: "getState" },
    expect: { code: OPERATING_SYSTEM, state: null },
    source: "measured",
  },
  {
    name: "getState of a negative pid",
    target: "none",
    id: "negative",
    call: { op: "getState" },
    expect: { code: OPERATING_SYSTEM, state: null },
    source: "measured",
  },
  {
    name: "getState of a running CUDA process",
    target: "cuda",
    call: { op: "getState" },
    expect: { code: SUCCESS, state: "running" },
    source: "measured",
  },
  {
    name: "getRestoreThreadId of a CUDA process",
    target: "cuda",
    call: { op: "getRestoreThreadId" },
    expect: { code: SUCCESS, state: "running", value: "thread-of-target" },
    source: "measured",
  },
  {
    name: "lock a running process (timeout 1000 ms)",
    target: "cuda",
    call: lock,
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "lock with NULL args",
    target: "cuda",
    call: { op: "lock", nullArgs: true },
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "lock with a nonzero reserved field",
    target: "cuda",
    call: { op: "lock", timeoutMs: 1000, reservedByte: 1 },
    expect: { code: INVALID_VALUE, state: "running" },
    source: "measured",
  },
  {
    name: "lock while locked",
    target: "cuda",
    setup: [lock],
    call: lock,
    expect: { code: ILLEGAL_STATE, state: "locked" },
    source: "measured",
  },
  {
    name: "lock while checkpointed",
    target: "cuda",
    setup: [lock, checkpoint],
    call: lock,
    expect: { code: ILLEGAL_STATE, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "checkpoint while running",
    target: "cuda",
    call: checkpoint,
    expect: { code: ILLEGAL_STATE, state: "running" },
    source: "measured",
  },
  {
    name: "checkpoint while checkpointed",
    target: "cuda",
    setup: [lock, checkpoint],
    call: checkpoint,
    expect: { code: ILLEGAL_STATE, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore while running",
    target: "cuda",
    call: restore,
    expect: { code: ILLEGAL_STATE, state: "running" },
    source: "measured",
  },
  {
    name: "restore while locked",
    target: "cuda",
    setup: [lock],
    call: restore,
    expect: { code: ILLEGAL_STATE, state: "locked" },
    source: "measured",
  },
  {
    name: "unlock while running",
    target: "cuda",
    call: unlock,
    expect: { code: ILLEGAL_STATE, state: "running" },
    source: "measured",
  },
  {
    name: "unlock while checkpointed",
    target: "cuda",
    setup: [lock, checkpoint],
    call: unlock,
    expect: { code: ILLEGAL_STATE, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "checkpoint a locked process",
    target: "cuda",
    setup: [lock],
    call: checkpoint,
    expect: { code: SUCCESS, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore a checkpointed process leaves it locked",
    target: "cuda",
    setup: [lock, checkpoint],
    call: restore,
    expect: { code: SUCCESS, state: "locked", memoryIntact: true },
    source: "measured",
  },
  {
    name: "unlock a locked process",
    target: "cuda",
    setup: [lock],
    call: unlock,
    expect: { code: SUCCESS, state: "running" },
    source: "measured",
  },
  {
    name: "getState given a thread id",
    target: "cuda",
    id: "thread",
    setup: [lock],
    call: { op: "getState" },
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "lock given a thread id locks the process",
    target: "cuda",
    id: "thread",
    call: lock,
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "checkpoint given a thread id",
    target: "cuda",
    id: "thread",
    setup: [lock],
    call: checkpoint,
    expect: { code: SUCCESS, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore with an unknown old GPU UUID",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "unknown-old" },
    expect: { code: INVALID_VALUE, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore with an unknown new GPU UUID",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "unknown-new" },
    expect: { code: INVALID_VALUE, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore with a pairs pointer and count 0",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "empty" },
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "restore mapping every GPU to itself",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "same" },
    expect: { code: SUCCESS, state: "locked" },
    source: "measured",
  },
  {
    name: "lock with timeout 200 ms while a 3 s kernel runs",
    target: "cuda",
    kernelMs: 3000,
    call: { op: "lock", timeoutMs: 200 },
    expect: { code: NOT_READY, state: "running", ms: { min: 150, max: 600 } },
    source: "measured",
  },
  {
    name: "lock with timeout 0 while a 3 s kernel runs",
    target: "cuda",
    kernelMs: 3000,
    call: { op: "lock", timeoutMs: 0 },
    expect: { code: SUCCESS, state: "locked", ms: { min: 1500, max: 4000 } },
    source: "measured",
  },
  {
    name: "the target exits during checkpoint",
    target: "cuda",
    memoryMiB: 4096,
    setup: [lock],
    exitAfterMs: 150,
    call: checkpoint,
    expect: { code: OPERATING_SYSTEM, state: null },
    source: "measured",
  },
  {
    name: "lock a process that never initialised CUDA",
    target: "no-cuda",
    call: lock,
    expect: { code: NOT_INITIALIZED, state: null },
    source: "measured",
  },
  {
    name: "unlock a process that never initialised CUDA",
    target: "no-cuda",
    call: unlock,
    expect: { code: NOT_INITIALIZED, state: null },
    source: "measured",
  },
  {
    name: "lock a pid that does not exist",
    target: "none",
    id: "missing",
    call: lock,
    expect: { code: OPERATING_SYSTEM, state: null },
    source: "measured",
  },
  {
    name: "restore onto a GPU without enough free memory",
    target: "cuda",
    memoryMiB: 4096,
    setup: [lock, checkpoint],
    fillGpuLeavingMiB: 1024,
    call: restore,
    expect: { code: OUT_OF_MEMORY, state: "checkpointed" },
    source: "measured",
  },
  {
    name: "restore with a full rotation moves the process to another GPU",
    target: "cuda",
    memoryMiB: 1024,
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "rotate" },
    expect: { code: SUCCESS, state: "locked", memoryIntact: true },
    source: "measured",
    minGpus: 2,
  },
  {
    name: "restore mapping only the process's GPU onto another",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "move-one" },
    expect: { code: INVALID_VALUE, state: "checkpointed" },
    source: "measured",
    minGpus: 2,
  },
  {
    name: "restore mapping two GPUs onto one",
    target: "cuda",
    setup: [lock, checkpoint],
    call: { op: "restore", pairs: "two-onto-one" },
    expect: { code: INVALID_VALUE, state: "checkpointed" },
    source: "measured",
    minGpus: 2,
  },
  ...overlapping(),
];
