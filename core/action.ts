// The one executor of an action on one process, shared by `CudaProcess` and the group operations
// so that `suspend()` and a group's suspend cannot disagree; and the way back after a failure.

import { CUDA_ERROR_ILLEGAL_STATE, type GpuPair } from "./driver.ts";
import { asError, CudaError, messageOf, RefusedError, withDetail } from "./errors.ts";
import type { GroupEvent, ProcessOutcome, StepRecord, StopReason } from "./group_types.ts";
import { checkFlag, checkGpuMapping, checkLockTimeout, checkOptions } from "./options.ts";
import type { GpuMapping } from "./options.ts";
import { type Handle, importRefusal, isGone, type Turn } from "./process.ts";
import { GpuRoomError, onto, type RoomCheck } from "./room.ts";
import { type Action, isStep, plan, type ProcessState, rollbackWay, type Step } from "./states.ts";
import { stepTo, undoOf } from "./states.ts";
import { clockOf, roundMs } from "./time.ts";

/** What an action needs besides the process, checked. */
export interface ActionSettings {
  /** The lock timeout in ms; a function where it is cut to a deadline as the action goes. */
  readonly lockTimeoutMs: number | (() => number);
  readonly pairs: readonly GpuPair[] | null;
  /** Whether to record what a checkpoint takes off the GPU, and to check a restore's room. */
  readonly checkRoom: boolean;
  /** Whether a process that imported GPU memory (CUDA IPC) is checkpointed anyway. */
  readonly allowIpcImport: boolean;
}

/** What a state-changing operation of `CudaProcess` did. */
export interface Outcome {
  /** `done`: its steps ran; `unchanged`: the process was already where it leads (a goal only). */
  readonly status: "done" | "unchanged";
  /** The state the process is in now. */
  readonly state: ProcessState;
  /** The driver calls made, in order. */
  readonly steps: readonly StepRecord[];
  /** Whether a restore's room was checked, or why not; after a checkpoint, a warning. */
  readonly roomCheck?: RoomCheck;
}

/** Runs an action (checked settings) on one process in its order; rejects with its error. */
export function act(
  handle: Handle,
  action: Action,
  settings: ActionSettings,
  hooks?: ActionHooks,
): Promise<Outcome> {
  return handle.ordered(async (turn) => {
    const report = await runAction(turn, action, settings, hooks);
    if (report.error) throw report.error;
    const { state, steps, roomCheck } = report;
    const status = report.status === "unchanged" ? "unchanged" : "done";
    return defined({ status, state: state!, steps, roomCheck });
  }, action);
}

/** A record without its fields that are `undefined`, as the outcomes give them. */
export const defined = <T extends object>(record: T): T =>
  Object.fromEntries(Object.entries(record).filter(([, v]) => v !== undefined)) as T;

/** A rollback's settings: a restore goes back where the process was, its room checked as any. */
const ROLLBACK_SETTINGS = settingsOf({ allowIpcImport: true }, "rollback", ["allowIpcImport"]);

/** Options of `CudaProcess`'s steps and goals: each takes those it names (a `toggle`, all). */
export interface StepOptions {
  /** How long a lock waits for submitted work, in ms (0: forever; 10 000 by default). */
  timeoutMs?: number;
  /**
   * Whether to record what it holds at a checkpoint and check a restore's room first (default
   * `true`): on driver 580 a restore that runs out of GPU memory loses the process for good.
   */
  checkRoom?: boolean;
  /** Restore onto other GPUs (each GPU named, onto the same chip; driver 580 and later). */
  gpuMapping?: GpuMapping;
  /** Checkpoint a process that imported GPU memory anyway (docs/API.md#shared-gpu-memory). */
  allowIpcImport?: boolean;
}

/** Checks the options of `where` and turns them into {@link ActionSettings}. */
export function settingsOf(
  options: StepOptions | undefined,
  where: string,
  keys: readonly (keyof StepOptions)[],
): ActionSettings {
  const o = checkOptions(options, where, keys);
  return {
    lockTimeoutMs: checkLockTimeout(o.timeoutMs, "timeoutMs"),
    pairs: o.gpuMapping === undefined ? null : checkGpuMapping(o.gpuMapping),
    checkRoom: checkFlag(o.checkRoom, "checkRoom", true),
    allowIpcImport: checkFlag(o.allowIpcImport, "allowIpcImport", false),
  };
}

/** What a caller of {@link runAction} follows. */
export interface ActionHooks {
  /** Before each step of a plan, the first too: a reason to stop there, if there is one. */
  stopBefore?(): StopReason | undefined;
  /** A step starts (`rollback`: one undoing the action). */
  stepStarted?(step: Step, rollback: boolean): void;
  stepEnded?(record: StepRecord, rollback: boolean): void;
}

/** Hooks that tell each step of `pid` as an event (`at` 0), with its GPU memory where known. */
export function stepEvents(pid: number, tell: (e: GroupEvent) => void, memory = {}): ActionHooks {
  return {
    stepStarted: (step, rollback) =>
      tell({ type: "step-start", pid, step, at: 0, rollback, ...memory }),
    stepEnded: ({ step, ms, ok }, rollback) =>
      tell({ type: "step-end", pid, step, at: 0, ms, ok, rollback, ...memory }),
  };
}

/** What {@link runAction} did to one process, as it goes: a {@link ProcessOutcome}'s fields. */
export type ActionReport =
  & {
    -readonly [K in "initialState" | "state" | "error" | "stopped" | "rollback" | "roomCheck"]?:
      ProcessOutcome[K];
  }
  & { status: Exclude<ProcessOutcome["status"], "not-started">; steps: StepRecord[] };

/** Runs `action` on one process whose turn is held, undone where it fails; never rejects. */
export async function runAction(
  target: Turn,
  action: Action,
  settings: ActionSettings,
  hooks: ActionHooks = {},
  readInitial = false,
): Promise<ActionReport> {
  const report: ActionReport = { status: "failed", steps: [] };
  try {
    let steps: readonly Step[];
    // A group's step (`readInitial`) is planned as a goal is, its state read first to go back to.
    if (isStep(action) && !readInitial) {
      await target.refuseStopped(action);
      steps = [action];
      await refuseImporter(target, steps, action, settings);
    } else {
      steps = await planGoal(target, action, report, settings);
      if (report.status === "unchanged") return report;
    }
    for (const step of steps) {
      const stop = hooks.stopBefore?.(); // the first too: its turn may come long after the stop
      if (stop) {
        report.status = "stopped";
        report.stopped = stop;
        await undo(target, report, hooks);
        return report;
      }
      await timed(target, step, report, hooks, { action, settings }).catch(async (err) => {
        // A goal brings the process back; a process gone, or a refusal, has nothing to undo.
        if (!report.initialState || isGone(err) || err instanceof RefusedError) throw err;
        throw withDetail(err, await undo(target, report, hooks, { step, err }), report.state);
      });
    }
    report.status = "done";
    report.state = stepTo(steps[steps.length - 1]);
  } catch (err) {
    report.status = "failed";
    report.error = asError(err);
    // Not where it was refused before its state was read (stopped: the driver would not answer).
    const known = readInitial && report.initialState !== undefined;
    if (known) report.state ??= await target.state().catch(() => undefined);
  }
  return report;
}

/**
 * Reads the state and plans `action`; refuses a goal ruled out, or one the driver could not
 * finish or undo, before any step: a suspend never locks what it could not checkpoint. `strict`
 * refuses a step its state rules out too (an all-or-nothing group's check, see `plan`).
 */
export async function planGoal(
  target: Turn,
  action: Action,
  report: ActionReport,
  settings: ActionSettings,
  strict = false,
): Promise<readonly Step[]> {
  await target.refuseStopped(action);
  const { pid } = target, from = await target.state();
  report.initialState = from;
  const p = plan(action, from, strict);
  if (p.kind !== "steps") report.state = from;
  if (p.kind === "refused") {
    throw new RefusedError({ code: "STATE", operation: action, pid, state: from, reason: p.why });
  }
  if (p.kind === "unchanged") {
    report.status = "unchanged";
    return [];
  }
  if (!isStep(action)) await target.capable([...p.steps, ...p.steps.map(undoOf)], action);
  await refuseImporter(target, p.steps, action, settings);
  return p.steps;
}

/** A member's plan, made in its turn: the steps planned and its settings. */
export type Planned = { turn: Turn; steps: readonly Step[]; settings: ActionSettings };

/**
 * Whether the restores `plans` make fit together, before any step (each step checks its own
 * again): `undefined`, or the refusal and the plan it goes to (the last needing the GPU short).
 */
export async function roomForAll(
  operation: Action,
  plans: readonly Planned[],
): Promise<{ at: number; error: Error } | undefined> {
  // A checkpoint planned may free what a restore needs (a toggle that swaps): left to the steps.
  if (plans.some((p) => p.steps.includes("checkpoint"))) return undefined;
  const needs = await Promise.all(plans.map(async ({ turn, steps, settings }) => {
    if (!settings.checkRoom || !steps.includes("restore") || turn.self) return undefined;
    const record = await turn.session.room.record(turn.identity);
    return record && onto([record.heldMiB], settings.pairs);
  }));
  const restoring = needs.flatMap((need, i) => need ? [i] : []);
  if (restoring.length === 0) return undefined;
  const all = onto(restoring.map((i) => needs[i]!), null); // each onto its GPUs already
  const one = plans[restoring[0]].turn, who = `the ${restoring.length} processes it restores`;
  const where = restoring.length === 1 ? { operation, pid: one.pid } : { operation, who };
  return await one.session.room.fits(all, where, one.identity).then(() => undefined, (err) => {
    const { shortage } = err as GpuRoomError;
    const on = restoring.filter((i) => shortage?.gpu in needs[i]!);
    const at = on.at(-1) ?? restoring.at(-1)!, pid = plans[at].turn.pid;
    // The only one needing the GPU short of room is named, as its step would name it.
    const alone = on.length === 1 && new GpuRoomError({ operation, pid, shortage });
    return { at, error: alone || asError(err) };
  });
}

/** Refuses (`IPC`) to checkpoint a process that imported GPU memory, unless allowed. */
async function refuseImporter(t: Turn, steps: readonly Step[], action: Action, o: ActionSettings) {
  if (o.allowIpcImport || !steps.includes("checkpoint")) return;
  const imported = await t.session.gpuImport(t.identity.pid);
  if (imported) throw importRefusal(action, t.pid, imported);
}

/** One step, timed and told to the hooks: the action's, or (`of.rollback`) a rollback's. */
export async function timed(
  target: Turn,
  step: Step,
  report: ActionReport,
  hooks: ActionHooks,
  of: { action: Action; settings: ActionSettings } | { rollback: StepRecord[] },
): Promise<void> {
  const rollback = "rollback" in of;
  const settings = rollback ? ROLLBACK_SETTINGS : of.settings;
  const clock = clockOf(target.machine), t0 = clock.now();
  hooks.stepStarted?.(step, rollback);
  let ok = false;
  try {
    const t = settings.lockTimeoutMs;
    if (step === "lock") await target.lock(typeof t === "function" ? t() : t);
    else if (step === "unlock") await target.unlock();
    else if (step === "checkpoint") {
      // A record that could not be written: the warning, in the outcome's roomCheck.
      const unrecorded = await target.checkpoint(settings.checkRoom);
      if (unrecorded && !rollback) report.roomCheck = unrecorded;
    } else {
      const shown = rollback || of.action === "restore" ? "restore" : of.action;
      report.roomCheck = await target.restore(settings.pairs, settings.checkRoom, shown);
    }
    ok = true;
  } finally {
    const r = { step, ms: roundMs(clock.now() - t0), ok };
    (rollback ? of.rollback : report.steps).push(r);
    hooks.stepEnded?.(r, rollback);
  }
}

/** The way back after the steps the report says succeeded (and `failure`); none: `undefined`. */
export async function wayBack(
  target: Turn,
  report: ActionReport,
  failure?: { step: Step; err: unknown },
): Promise<Step[] | undefined> {
  const done = report.steps.filter((s) => s.ok).map((s) => s.step);
  const initial = report.initialState;
  if (initial === undefined || (failure && isGone(failure.err))) return undefined;
  if (done.length === 0 && (!failure || failure.err instanceof RefusedError)) {
    report.state = initial; // nothing happened to it
    return undefined;
  }
  report.state = await target.state().catch(() => undefined);
  const illegal = failure?.err instanceof CudaError &&
    failure.err.code === CUDA_ERROR_ILLEGAL_STATE;
  const way = rollbackWay({ initial, done, failed: failure?.step, illegal, now: report.state });
  return way?.length ? way : undefined;
}

/** Brings the process back (its report's rollback); resolves to where it was left, for errors. */
export async function undo(
  target: Turn,
  report: ActionReport,
  hooks: ActionHooks,
  failure?: { step: Step; err: unknown },
): Promise<string> {
  const initial = report.initialState!;
  const way = await wayBack(target, report, failure);
  const now = report.state;
  if (!way) {
    if (!failure && report.steps.length === 0) return ""; // stopped before any step
    if (now === "failed") return `the process is ${now}, which is final`;
    // Nothing to undo; the state is said once (an illegal state's error says it already).
    const said = failure?.err instanceof CudaError && failure.err.state === now;
    return now === undefined || said ? "" : `the process is ${now}`;
  }
  const record: StepRecord[] = [];
  try {
    for (const step of way) await timed(target, step, report, hooks, { rollback: record });
    report.rollback = { ok: true, steps: record };
    report.state = initial;
    return broughtBack(initial);
  } catch (err) {
    report.rollback = { ok: false, steps: record, error: asError(err) };
    report.state = await target.state().catch(() => undefined);
    return broughtBack(initial, err, report.state);
  }
}

/** What a rollback came to, as an error says it (`err`: the rollback's failure). */
export function broughtBack(initial: ProcessState, err?: unknown, now?: ProcessState): string {
  if (err === undefined) return `it was brought back to ${initial}`;
  const state = now ?? "of unknown state";
  return `it could not be brought back to ${initial} (${messageOf(err)}); the process is ${state}`;
}
