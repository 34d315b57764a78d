// The checkpoint state machine, written down once (docs/DRIVER.md#state-machine): which step is
// legal in which state, the steps a goal makes, the way back after a failure.
//
// A goal asked of a process already where it leads does nothing ("unchanged"); from elsewhere it
// makes the steps of the chain running - locked - checkpointed that lead there, so a suspend of a
// locked process only checkpoints it. `toggle` goes between running and checkpointed only, as
// NVIDIA's `cuda-checkpoint --toggle` does.

/** A process's checkpoint state by name, as NVIDIA's utility prints it. */
export type ProcessState = "running" | "locked" | "checkpointed" | "failed";

/** One driver call that changes a process's state. */
export type Step = "lock" | "checkpoint" | "restore" | "unlock";

/** What can be asked of a process: one step, or a goal (`suspend`, `resume`, `toggle`) of steps. */
export type Action = Step | "suspend" | "resume" | "toggle";

/** A goal: an action that is not one step. */
export type Goal = Exclude<Action, Step>;

/** The states of the chain a process goes along (running - locked - checkpointed), in order. */
const CHAIN: readonly ProcessState[] = ["running", "locked", "checkpointed"];
/** Every state, by its `CUprocessState` number (`CU_PROCESS_STATE_RUNNING` is 0, ...). */
export const PROCESS_STATES: readonly ProcessState[] = Object.freeze([...CHAIN, "failed"]);

/** Every step, in the order lock and checkpoint, then restore and unlock, make them. */
export const STEPS: readonly Step[] = Object.freeze(["lock", "checkpoint", "restore", "unlock"]);

/** Every goal. */
export const GOALS: readonly Goal[] = Object.freeze(["suspend", "resume", "toggle"]);

/** Every action: the steps, then the goals. */
export const ACTIONS: readonly Action[] = Object.freeze([...STEPS, ...GOALS]);

const TRANSITIONS: Readonly<Record<Step, { from: ProcessState; to: ProcessState }>> = {
  lock: { from: "running", to: "locked" },
  checkpoint: { from: "locked", to: "checkpointed" },
  restore: { from: "checkpointed", to: "locked" },
  unlock: { from: "locked", to: "running" },
};

/** The state a step needs. */
export const stepFrom = (step: Step): ProcessState => TRANSITIONS[step].from;

/** The state a step leaves a process in when it succeeds. */
export const stepTo = (step: Step): ProcessState => TRANSITIONS[step].to;

/** Whether the driver takes `step` in `state`; in any other it answers ILLEGAL_STATE. */
export const stepAllowed = (step: Step, state: ProcessState): boolean => stepFrom(step) === state;

/** The step that undoes `step`. */
export const undoOf = (step: Step): Step => stepBetween(stepTo(step), stepFrom(step));

const stepBetween = (from: ProcessState, to: ProcessState): Step =>
  STEPS.find((s) => TRANSITIONS[s].from === from && TRANSITIONS[s].to === to)!;

/** The steps from one state to another along the chain; `undefined` from or to failed. */
export function wayBetween(from: ProcessState, to: ProcessState): Step[] | undefined {
  const i = CHAIN.indexOf(from), j = CHAIN.indexOf(to);
  if (i < 0 || j < 0) return undefined;
  const states = i <= j ? CHAIN.slice(i, j + 1) : CHAIN.slice(j, i + 1).reverse();
  return states.slice(1).map((state, k) => stepBetween(states[k], state));
}

/** What an action does to a process in a given state: steps to make, nothing, or a refusal. */
export type Plan =
  | { readonly kind: "steps"; readonly steps: readonly Step[]; readonly to: ProcessState }
  | { readonly kind: "unchanged"; readonly to: ProcessState }
  | { readonly kind: "refused"; readonly why: string };

/**
 * What `action` does to a process in state `from`: a step is made (the driver has the last word on
 * it, as with NVIDIA's utility) unless `strict` (an all-or-nothing group's check before any step)
 * and the state rules it out; a goal is planned as the module documentation says.
 */
export function plan(action: Action, from: ProcessState, strict = false): Plan {
  const final = "the failed state is final: no operation can recover it";
  if (isStep(action)) {
    if (!strict || stepAllowed(action, from)) {
      return { kind: "steps", steps: [action], to: TRANSITIONS[action].to };
    }
    const why = `${action} needs a ${stepFrom(action)} process, and it is ${from}`;
    return { kind: "refused", why: isFinal(from) ? final : why };
  }
  if (from === "failed") return { kind: "refused", why: final };
  if (action === "toggle" && from !== "running" && from !== "checkpointed") {
    const why = `toggle goes between running and checkpointed, and the process is ${from}`;
    return { kind: "refused", why };
  }
  const to = action === "suspend" || (action === "toggle" && from === "running")
    ? "checkpointed"
    : "running";
  const steps = wayBetween(from, to)!;
  return steps.length === 0 ? { kind: "unchanged", to } : { kind: "steps", steps, to };
}

/** Whether an action is one step (a driver call) rather than a goal. */
export const isStep = (action: Action): action is Step =>
  (STEPS as readonly string[]).includes(action);

/** What is known after a step of a plan failed, for {@link rollbackWay}. */
export interface AfterFailure {
  readonly initial: ProcessState;
  readonly done: readonly Step[];
  /** The step that failed (`undefined`: stopped between steps). */
  readonly failed?: Step;
  /** Whether the driver refused the failed step as illegal in the state it found. */
  readonly illegal?: boolean;
  /** The state now; `undefined` where it could not be read. */
  readonly now: ProcessState | undefined;
}

/**
 * The steps that bring a process back to where it was after a plan stopped or failed; only what
 * this package did is undone. State unknown: the steps done, undone newest first. The failed step
 * refused as illegal (the driver changed nothing, something else moved the process): brought back
 * only if it is still where the steps done left it. Any other failure: the way from where it is.
 * `undefined` where there is no way back (the failed state).
 *
 * @example
 * ```ts
 * import { rollbackWay } from "./states.ts";
 * // A suspend whose checkpoint failed and left the process locked: ["unlock"] brings it back.
 * rollbackWay({ initial: "running", done: ["lock"], failed: "checkpoint", now: "locked" });
 * ```
 */
export function rollbackWay(after: AfterFailure): Step[] | undefined {
  const { initial, done, now } = after;
  if (now === undefined) return [...done].reverse().map(undoOf);
  if (after.failed !== undefined && after.illegal) {
    const left = done.length === 0 ? initial : TRANSITIONS[done[done.length - 1]].to;
    return now === left ? wayBetween(now, initial) : [];
  }
  return wayBetween(now, initial);
}

/**
 * Which of a job's two phases a step belongs to. Processes that share GPU state must all stop
 * before any is taken off the GPU, and all be back on it before any runs: every lock before any
 * checkpoint, every restore before any unlock. A plan or a way back is at most one step of each.
 */
export const jobPhase = (step: Step): 1 | 2 => step === "lock" || step === "restore" ? 1 : 2;

/** The states a snapshot takes a CUDA process in (suspended and resumed, or as it is). */
export const SNAPSHOT_STATES: readonly SnapshotState[] = Object.freeze(["running", "checkpointed"]);

/** A state a snapshot takes a CUDA process in: suspended and resumed, or as it is. */
export type SnapshotState = "running" | "checkpointed";

/** The `CUprocessState` numbers by their C names, as `cuCheckpointProcessGetState` gives them. */
export const CUprocessState = {
  CU_PROCESS_STATE_RUNNING: 0,
  CU_PROCESS_STATE_LOCKED: 1,
  CU_PROCESS_STATE_CHECKPOINTED: 2,
  CU_PROCESS_STATE_FAILED: 3,
} as const;

/** The name of a `CUprocessState` number; `undefined` if unknown. */
export function stateName(state: number): ProcessState | undefined {
  return Number.isInteger(state) ? PROCESS_STATES[state] : undefined;
}

/** The `CUprocessState` number of a state name. */
export const stateNumber = (state: ProcessState): number => PROCESS_STATES.indexOf(state);

/** Whether the process's GPU memory is in host memory in this state (it holds none on a GPU). */
export const memoryOnHost = (state: ProcessState): boolean => state === "checkpointed";

/** Whether no operation can take a process out of this state. */
export const isFinal = (state: ProcessState): boolean => state === "failed";

/** The state a new CUDA process is in. */
export const INITIAL_STATE: ProcessState = "running";
