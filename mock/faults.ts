// Faults to inject into a process's calls (`SimulatedProcess.failNext` and its neighbours): their
// types and checks, and each process's faults waiting for their call.

import { checkAmount, checkChoice, checkInteger, checkKeys, MAX_PID, or } from "../core/options.ts";
import { PROCESS_STATES, type ProcessState, STEPS } from "../core/states.ts";

/** The queries, whose answer {@link SimulatedProcess.answerNext} can replace. */
export type QueryOperation = "getState" | "getRestoreThreadId";

/** The driver calls a fault can be injected into, their C names less `cuCheckpointProcess`. */
export type FaultableOperation = QueryOperation | "lock" | "checkpoint" | "restore" | "unlock";

const QUERIES: readonly QueryOperation[] = ["getState", "getRestoreThreadId"];
/** Every {@link FaultableOperation}. */
export const FAULTABLE_OPERATIONS: readonly FaultableOperation[] = [...QUERIES, ...STEPS];

/** Which call of an operation a fault hits. */
export interface FaultTiming {
  /** Which call from now: 1 (the default) the next; calls the state refuses do not count. */
  nth?: number;
}

/** A failure, for {@link SimulatedProcess.failNext}. */
export interface InjectedFault extends FaultTiming {
  /** The `CUresult` the call returns, from 1; an unknown one is what a newer driver may return. */
  code: number;
  /** The state the process is left in (unchanged when left out); memory put back needs room. */
  state?: ProcessState;
}

/** A process that exits during a call, for {@link SimulatedProcess.exitDuring}. */
export interface ExitFault extends FaultTiming {
  /** How far into the call it exits, in ms (0 by default); the call returns OPERATING_SYSTEM. */
  afterMs?: number;
}

/** A query's answer, for {@link SimulatedProcess.answerNext}. */
export interface AnswerFault extends FaultTiming {
  /** What the call answers with `CUDA_SUCCESS`: a state number (4 and 5 are CUDA 13.4's), a tid. */
  value: number;
}

/** A fault waiting for its call ({@link SimulatedProcess.pendingFaults}): its kind and fields. */
export type PendingFault =
  & { readonly operation: FaultableOperation; readonly nth: number }
  & (
    | { readonly kind: "fail"; readonly code: number; readonly state?: ProcessState }
    | { readonly kind: "exit"; readonly afterMs: number }
    | { readonly kind: "hang" }
    | { readonly kind: "answer"; readonly operation: QueryOperation; readonly value: number }
  );

/** By method: its kind of fault, its field but `nth` (and `state`), its error without options. */
const METHODS: Record<string, readonly [PendingFault["kind"], string?, string?]> = {
  failNext: ["fail", "code", "the fault is missing; give { code, state?, nth? }"],
  exitDuring: ["exit", "afterMs"],
  hangNext: ["hang"],
  answerNext: ["answer", "value", "the answer is missing; give { value, nth? }"],
};

/** A {@link PendingFault} from a method's arguments; throws naming the bad input. */
export function checkFault(
  method: "failNext" | "exitDuring" | "hangNext" | "answerNext",
  operation: unknown,
  options: unknown,
): PendingFault {
  const ops = method === "answerNext" ? QUERIES : FAULTABLE_OPERATIONS;
  const op = checkChoice(operation, `${method}: the operation`, ops);
  const [kind, key, missing] = METHODS[method], noun = kind === "fail" ? "fault" : "options";
  if (options === undefined && missing) throw new TypeError(`${method}: ${missing}`);
  const keys = [...key ? [key] : [], ...kind === "fail" ? ["state"] : [], "nth"];
  const f = checkKeys(options as Record<string, unknown>, `${method}: the ${noun}`, keys);
  const at = `${method}: ${noun}.`;
  const checks: Record<string, () => number> = {
    code: () => checkInteger(f.code, `${at}code (a CUresult other than CUDA_SUCCESS)`, 1, MAX_PID),
    afterMs: () => checkAmount(or(f.afterMs, 0), `${at}afterMs`),
    value: () => checkInteger(f.value, `${at}value`, 0, MAX_PID),
  };
  const more = key && { [key]: checks[key]() };
  // At most 1 000 000: far more calls than any test makes.
  const nth = checkInteger(or(f.nth, 1), `${at}nth (which call, 1 = the next)`, 1, 1_000_000);
  const state = f.state === undefined
    ? {}
    : { state: checkChoice(f.state, `${at}state`, PROCESS_STATES) };
  return { kind, operation: op, nth, ...more, ...state } as PendingFault;
}

/** One injected hang: released before its call comes, or holding the call it hit. */
type Hang = { released: boolean; resume?: () => void };

/** The faults waiting on one process, one per operation, and the calls a hang holds. @internal */
export class FaultPlan {
  readonly #waiting = new Map<FaultableOperation, { fault: PendingFault; hang?: Hang }>();
  readonly #held = new Set<Hang>();

  /** The faults waiting, in the order of {@link FAULTABLE_OPERATIONS}. */
  get pending(): PendingFault[] {
    return FAULTABLE_OPERATIONS.flatMap((op) => this.#waiting.get(op)?.fault ?? []);
  }

  /** Adds a fault, replacing the one waiting for its operation; returns what releases a hang. */
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

  /** Counts a call of `op`; returns the fault that hits it, if any, with what a hang waits on. */
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
