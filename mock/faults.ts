/**
 * Faults to inject into the simulated driver's calls on a process: a call that fails with a code
 * (and leaves the process in a state), a process that exits during a call, a call that hangs until
 * released, a query that answers a value this package does not know. {@link SimulatedProcess}'s
 * `failNext`, `exitDuring`, `hangNext` and `answerNext` make them; this module holds what they
 * share: the types, the checks of every input, and each process's list of faults waiting for
 * their call.
 *
 * @module
 */

import { PROCESS_STATES, type ProcessState, type Step, STEPS } from "../core/states.ts";
import { checkAmount, checkChoice, checkInteger, checkKeys } from "./checks.ts";

/** The driver calls a fault can be injected into, by their C names without `cuCheckpointProcess`. */
export type FaultableOperation =
  | "getState"
  | "getRestoreThreadId"
  | "lock"
  | "checkpoint"
  | "restore"
  | "unlock";

/** Every {@link FaultableOperation}. */
export const FAULTABLE_OPERATIONS: readonly FaultableOperation[] = [
  "getState",
  "getRestoreThreadId",
  "lock",
  "checkpoint",
  "restore",
  "unlock",
];

/** The operations that change a process's state: the steps of the state table. */
export const STATE_CHANGING: readonly Step[] = STEPS;

/** The queries, whose answer {@link SimulatedProcess.answerNext} can replace. */
export type QueryOperation = "getState" | "getRestoreThreadId";

/** The largest `nth`: far more calls than any test makes. */
const MAX_NTH = 1_000_000;

/** Which call of an operation a fault hits. */
export interface FaultTiming {
  /**
   * Which call of the operation, counted from now: 1 (the default) the next, 2 the one after it,
   * and so on. Only calls the driver carries out count: a lock, checkpoint, restore or unlock
   * that the process's state refuses (`CUDA_ERROR_ILLEGAL_STATE`) passes the fault by and is not
   * counted, as is a call on a process that has exited. Every getState and getRestoreThreadId of
   * a live CUDA process counts.
   */
  nth?: number;
}

/** A failure, for {@link SimulatedProcess.failNext}. */
export interface InjectedFault extends FaultTiming {
  /**
   * The `CUresult` the call returns: an integer from 1 (`CUDA_SUCCESS`, 0, is no failure). A code
   * the driver does not know (7777) is allowed: that is what a newer driver may return.
   */
  code: number;
  /**
   * The state the process is left in; unchanged when left out. `"failed"` is final, as on the
   * real driver. A state that puts checkpointed memory back on the GPU needs room there: without
   * it the call returns `CUDA_ERROR_OUT_OF_MEMORY` instead and the process stays checkpointed.
   */
  state?: ProcessState;
}

/** A process that exits during a call, for {@link SimulatedProcess.exitDuring}. */
export interface ExitFault extends FaultTiming {
  /**
   * How far into the call the process exits, in ms of the simulator's clock: 0 (the default) as
   * the call starts its work. A call that would end sooner waits for the exit, as a lock waits on
   * a busy process: `exitDuring("lock", { afterMs: 5000 })` is a lock that hangs for 5 s and then
   * finds its process killed. The call returns `CUDA_ERROR_OPERATING_SYSTEM` a little after the
   * exit, as the real driver does (measured: 67-75 ms after a SIGKILL during a checkpoint).
   */
  afterMs?: number;
}

/** A query's answer, for {@link SimulatedProcess.answerNext}. */
export interface AnswerFault extends FaultTiming {
  /**
   * What the call writes to its out-parameter, with `CUDA_SUCCESS`: for getState a
   * `CUprocessState` number (4 and 5 are CUDA 13.4's CHECKPOINTING and RESTORING, which this
   * package does not know), for getRestoreThreadId a thread id. An integer from 0 to 2^31-1.
   */
  value: number;
}

/** A fault waiting for its call, as {@link SimulatedProcess.pendingFaults} lists it. */
export type PendingFault =
  | {
    /** The call fails with `code` and leaves the process in `state` (see {@link InjectedFault}). */
    readonly kind: "fail";
    /** The operation whose call it hits. */
    readonly operation: FaultableOperation;
    /** How many of its calls from now: 1 is the next. */
    readonly nth: number;
    /** The `CUresult` the call returns. */
    readonly code: number;
    /** The state it leaves the process in, where given. */
    readonly state?: ProcessState;
  }
  | {
    /** The process exits `afterMs` into the call (see {@link ExitFault}). */
    readonly kind: "exit";
    /** The operation whose call it hits. */
    readonly operation: FaultableOperation;
    /** How many of its calls from now: 1 is the next. */
    readonly nth: number;
    /** How far into the call, in ms. */
    readonly afterMs: number;
  }
  | {
    /** The call waits until released (see {@link SimulatedProcess.hangNext}). */
    readonly kind: "hang";
    /** The operation whose call it hits. */
    readonly operation: FaultableOperation;
    /** How many of its calls from now: 1 is the next. */
    readonly nth: number;
  }
  | {
    /** The query answers `value` (see {@link AnswerFault}). */
    readonly kind: "answer";
    /** The query whose call it hits. */
    readonly operation: QueryOperation;
    /** How many of its calls from now: 1 is the next. */
    readonly nth: number;
    /** The value it answers. */
    readonly value: number;
  };

/** `nth`, checked: an integer from 1, 1 when left out. */
export function checkNth(nth: unknown, what: string): number {
  return nth === undefined
    ? 1
    : checkInteger(nth, `${what}.nth (which call, 1 = the next)`, 1, MAX_NTH);
}

/** A {@link PendingFault} from a method's arguments; throws a TypeError or RangeError naming the bad input. */
export function checkFault(
  method: "failNext" | "exitDuring" | "hangNext" | "answerNext",
  operation: unknown,
  options: unknown,
): PendingFault {
  const ops = method === "answerNext"
    ? ["getState", "getRestoreThreadId"] as const
    : FAULTABLE_OPERATIONS;
  const op = checkChoice(operation, `${method}: the operation`, ops);
  const what = `${method}: the ${method === "failNext" ? "fault" : "options"}`;
  switch (method) {
    case "failNext": {
      if (options === undefined) {
        throw new TypeError(`${method}: the fault is missing; give { code, state?, nth? }`);
      }
      checkKeys(options, what, ["code", "state", "nth"]);
      const f = options as InjectedFault;
      const code = checkInteger(
        f.code,
        `${method}: fault.code (a CUresult other than CUDA_SUCCESS)`,
        1,
        2 ** 31 - 1,
      );
      const nth = checkNth(f.nth, `${method}: fault`);
      if (f.state === undefined) return { kind: "fail", operation: op, nth, code };
      const state = checkChoice(f.state, `${method}: fault.state`, PROCESS_STATES);
      return { kind: "fail", operation: op, nth, code, state };
    }
    case "exitDuring": {
      checkKeys(options, what, ["afterMs", "nth"]);
      const f = (options ?? {}) as ExitFault;
      const afterMs = f.afterMs === undefined
        ? 0
        : checkAmount(f.afterMs, `${method}: options.afterMs`);
      return { kind: "exit", operation: op, nth: checkNth(f.nth, `${method}: options`), afterMs };
    }
    case "hangNext": {
      checkKeys(options, what, ["nth"]);
      const f = (options ?? {}) as FaultTiming;
      return { kind: "hang", operation: op, nth: checkNth(f.nth, `${method}: options`) };
    }
    case "answerNext": {
      if (options === undefined) {
        throw new TypeError(`${method}: the answer is missing; give { value, nth? }`);
      }
      checkKeys(options, what, ["value", "nth"]);
      const f = options as AnswerFault;
      const value = checkInteger(f.value, `${method}: options.value`, 0, 2 ** 31 - 1);
      return {
        kind: "answer",
        operation: op as QueryOperation,
        nth: checkNth(f.nth, `${method}: options`),
        value,
      };
    }
  }
}

/** One injected hang: released before its call comes, or holding the call it hit. */
interface Hang {
  released: boolean;
  resume?: () => void;
}

/**
 * The faults waiting on one process, one per operation (a new one for an operation replaces the
 * one waiting), and the calls an injected hang holds. @internal
 */
export class FaultPlan {
  readonly #waiting = new Map<FaultableOperation, { fault: PendingFault; hang?: Hang }>();
  readonly #held = new Set<Hang>();

  /** The faults waiting, in the order of {@link FAULTABLE_OPERATIONS}. */
  get pending(): PendingFault[] {
    return FAULTABLE_OPERATIONS.flatMap((op) => {
      const entry = this.#waiting.get(op);
      return entry ? [entry.fault] : [];
    });
  }

  /** How many calls an injected hang holds now. */
  get held(): number {
    return this.#held.size;
  }

  /**
   * Adds a fault, replacing the one waiting for the same operation. For a hang, returns the
   * function that releases it: it lets the call go on if the hang holds it, or lets the call
   * through at once if it has not come yet.
   */
  add(fault: PendingFault): () => void {
    const hang: Hang | undefined = fault.kind === "hang" ? { released: false } : undefined;
    this.#waiting.set(fault.operation, { fault, hang });
    return () => {
      if (!hang || hang.released) return;
      hang.released = true;
      if (this.#held.delete(hang)) hang.resume?.();
    };
  }

  /** Forgets the faults waiting (a call a hang already holds stays held). */
  clear(): void {
    this.#waiting.clear();
  }

  /**
   * Counts a call of `op` that the driver carries out; returns the fault that hits it, if one
   * does (and forgets it), with `hold`: for a hang, what the call waits on.
   */
  take(op: FaultableOperation): { fault: PendingFault; hold: () => Promise<void> } | undefined {
    const entry = this.#waiting.get(op);
    if (!entry) return undefined;
    if (entry.fault.nth > 1) {
      entry.fault = { ...entry.fault, nth: entry.fault.nth - 1 };
      return undefined;
    }
    this.#waiting.delete(op);
    const hang = entry.hang;
    const hold = () =>
      !hang || hang.released ? Promise.resolve() : new Promise<void>((resolve) => {
        hang.resume = resolve;
        this.#held.add(hang);
      });
    return { fault: entry.fault, hold };
  }

  /** Lets every call a hang holds go on; returns how many there were. */
  releaseAll(): number {
    const held = [...this.#held];
    this.#held.clear();
    for (const hang of held) {
      hang.released = true;
      hang.resume?.();
    }
    return held.length;
  }
}
