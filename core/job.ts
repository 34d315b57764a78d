/**
 * A job: processes that share GPU state (NCCL ranks, CUDA IPC, the ranks of one inference server)
 * and so must move together. A rank locked while another still runs can hang the other in a
 * collective, and one unlocked before another is back on the GPU can fail; vLLM and NVIDIA's
 * Dynamo order it so, and so does this: every process makes its first step (lock, restore) before
 * any makes its second (checkpoint, unlock) ({@link jobPhase}). If any step fails, or the deadline
 * passes or the signal aborts between the phases, every process is brought back to where it was,
 * in the same order: all restores before any unlock, all locks before any checkpoint.
 *
 * While a job runs it holds the turn of every one of its processes, taken in pid order so that
 * two jobs never wait for each other in a circle.
 *
 * @module
 */

import { capitalize, CudaError, RefusedError } from "./errors.ts";
import {
  type ActionHooks,
  type ActionReport,
  type ActionSettings,
  type CudaProcess,
  inTurn,
  isGone,
  planGoal,
  type StopReason,
  type Target,
  timed,
} from "./process.ts";
import { DEFAULT_LOCK_TIMEOUT_MS } from "./options.ts";
import { type Action, jobPhase, rollbackWay, type Step, stepTo } from "./states.ts";
import { CUDA_ERROR_ILLEGAL_STATE } from "./codes.ts";

/** A process's part in a job, filled in as it goes (the group's entry). */
export interface JobMember {
  /** The process. */
  readonly proc: CudaProcess;
  /** What was done to it. */
  report: ActionReport | undefined;
  /** Why it was never started. */
  notStarted?: StopReason;
}

/** What a job needs from the group that runs it. */
export interface JobContext {
  /** The goal or step. */
  readonly action: Action;
  /** The settings of one process's steps (its lock timeout, cut to a deadline; its mapping). */
  settingsFor(pid: number): ActionSettings;
  /** The progress hooks of one process. */
  hooks(pid: number): ActionHooks;
  /** Why nothing more may start now (a deadline, an abort), if so. */
  stopReason(): StopReason | undefined;
}

/** A member as the job works on it. */
interface Working {
  readonly member: JobMember;
  readonly target: Target;
  readonly report: ActionReport;
  /** The steps still to make. */
  left: Step[];
  /** The steps made. */
  readonly done: Step[];
  /** The step that failed, and how. */
  failure?: { step: Step; err: unknown };
}

/**
 * Runs `ctx.action` on every member as one job (see the module documentation) and fills in each
 * member's report. Resolves to whether processes that had moved were brought back; never rejects.
 */
export async function runJob(members: readonly JobMember[], ctx: JobContext): Promise<boolean> {
  const held = await holdTurns(members);
  try {
    if (held.failed.size > 0) {
      for (const m of members) {
        const err = held.failed.get(m);
        if (err) m.report = { status: "failed", steps: [], error: err };
        else m.notStarted = "another-failed";
      }
      return false;
    }
    const stop = ctx.stopReason();
    if (stop) {
      for (const m of members) m.notStarted = stop;
      return false;
    }
    const working = await plans(members, held.targets, ctx.action);
    if (!working) return false;
    let failed = false;
    let stopped: StopReason | undefined;
    for (const phase of [1, 2] as const) {
      if (phase === 2) {
        stopped = ctx.stopReason();
        if (stopped) break;
      }
      await Promise.all(working.map(async (w) => {
        const step = w.left[0];
        if (step === undefined || jobPhase(step) !== phase) return;
        try {
          await timed(
            w.target,
            step,
            ctx.settingsFor(w.member.proc.pid),
            w.report,
            w.report.steps,
            false,
            ctx.hooks(w.member.proc.pid),
            ctx.action,
          );
          w.done.push(w.left.shift()!);
        } catch (err) {
          w.failure = { step, err };
          w.left = [];
          failed = true;
        }
      }));
      if (failed) break;
    }
    if (!failed && !stopped) {
      for (const w of working) {
        if (w.report.status === "unchanged") continue;
        w.report.status = "done";
        w.report.state = stepTo(w.done[w.done.length - 1]);
      }
      return false;
    }
    for (const w of working) {
      if (w.report.status === "unchanged") continue;
      if (w.failure) {
        w.report.status = "failed";
      } else if (w.left.length > 0) {
        w.report.status = "stopped";
        w.report.stopped = stopped ?? "another-failed";
      } else {
        w.report.status = "done";
        w.report.state = stepTo(w.done[w.done.length - 1]);
      }
    }
    return await rollBack(working, ctx);
  } finally {
    held.release();
  }
}

/** Every member's turn, taken one after another in pid order; and the members that could not be. */
async function holdTurns(members: readonly JobMember[]) {
  const targets = new Map<JobMember, Target>();
  const failed = new Map<JobMember, Error>();
  const releases: (() => void)[] = [];
  const sorted = [...members].sort((a, b) => a.proc.pid - b.proc.pid);
  for (const m of sorted) {
    await new Promise<void>((taken) => {
      inTurn(m.proc, (target) => {
        targets.set(m, target);
        taken();
        return new Promise<void>((release) => releases.push(release));
      }).catch((err) => {
        failed.set(m, err instanceof Error ? err : new Error(String(err)));
        taken();
      });
    });
  }
  return { targets, failed, release: () => releases.forEach((r) => r()) };
}

/**
 * Each member's state and plan. Where any member cannot be read or its goal is refused, that
 * member fails and no other starts (`undefined`): nothing has changed.
 */
async function plans(
  members: readonly JobMember[],
  targets: ReadonlyMap<JobMember, Target>,
  action: Action,
): Promise<Working[] | undefined> {
  const working: Working[] = [];
  const errors = new Map<JobMember, ActionReport>();
  await Promise.all(members.map(async (m) => {
    const target = targets.get(m)!;
    const report: ActionReport = { status: "failed", steps: [] };
    try {
      const steps = await planGoal(target, action, report);
      working.push({ member: m, target, report, left: [...steps], done: [] });
    } catch (err) {
      report.error = err instanceof Error ? err : new Error(String(err));
      errors.set(m, report);
    }
  }));
  if (errors.size === 0) {
    for (const w of working) w.member.report = w.report;
    // In the order given, as the group reports them.
    return members.map((m) => working.find((w) => w.member === m)!);
  }
  for (const m of members) {
    const report = errors.get(m);
    if (report) m.report = report;
    else m.notStarted = "another-failed";
  }
  return undefined;
}

/**
 * Brings every member that moved back to its initial state, as a job: first every lock and
 * restore of the way back, then every checkpoint and unlock. Resolves to whether any member that
 * had succeeded was brought back.
 */
async function rollBack(working: readonly Working[], ctx: JobContext): Promise<boolean> {
  const settings: ActionSettings = {
    lockTimeoutMs: DEFAULT_LOCK_TIMEOUT_MS,
    pairs: null,
    checkRoom: true,
  };
  const ways = new Map<Working, Step[]>();
  const records = new Map<Working, ActionReport["steps"]>();
  const errors = new Map<Working, Error>();
  let rolledBackDone = false;
  await Promise.all(working.map(async (w) => {
    if (w.report.status === "unchanged") return;
    if (w.done.length === 0 && !w.failure) {
      w.report.state = w.report.initialState; // stopped before any step
      return;
    }
    if (w.failure && isGone(w.failure.err)) return; // nothing is left to bring back
    if (w.done.length === 0 && w.failure?.err instanceof RefusedError) {
      w.report.state = w.report.initialState; // refused before the driver: nothing happened
      return;
    }
    const now = await w.target.state().catch(() => undefined);
    const illegal = w.failure?.err instanceof CudaError &&
      w.failure.err.code === CUDA_ERROR_ILLEGAL_STATE;
    const way = rollbackWay({
      initial: w.report.initialState!,
      done: w.done,
      failed: w.failure?.step,
      illegal,
      now,
    });
    w.report.state = now;
    if (way === undefined || way.length === 0) return;
    ways.set(w, way);
    records.set(w, []);
  }));
  for (const phase of [1, 2] as const) {
    await Promise.all([...ways].map(async ([w, way]) => {
      const step = way[0];
      if (step === undefined || jobPhase(step) !== phase || errors.has(w)) return;
      try {
        await timed(
          w.target,
          step,
          settings,
          w.report,
          records.get(w)!,
          true,
          ctx.hooks(w.member.proc.pid),
          "restore",
        );
        way.shift();
      } catch (err) {
        errors.set(w, err instanceof Error ? err : new Error(String(err)));
      }
    }));
  }
  for (const [w] of ways) {
    const error = errors.get(w);
    const initial = w.report.initialState!;
    w.report.rollback = {
      ok: !error,
      steps: records.get(w)!,
      ...(error ? { error } : {}),
    };
    if (error) w.report.state = await w.target.state().catch(() => undefined);
    else w.report.state = initial;
    if (w.report.status === "done" && !error) rolledBackDone = true;
  }
  // The failed step's error says where its process, and the job, were left.
  for (const w of working) {
    if (!w.failure) continue;
    const error = errors.get(w);
    const initial = w.report.initialState!;
    const others = working.some((o) => o !== w && ways.has(o));
    const detail = error
      ? `it could not be brought back to ${initial} (${error.message}); the process is ${
        w.report.state ?? "of unknown state"
      }`
      : ways.has(w)
      ? `it was brought back to ${initial}${
        others ? ", as was every other process of the job" : ""
      }`
      : others
      ? `every other process of the job was brought back`
      : "";
    const err = w.failure.err;
    w.report.error = !detail
      ? (err instanceof Error ? err : new Error(String(err)))
      : err instanceof CudaError
      ? err.withDetail(detail)
      : new Error(`${err instanceof Error ? err.message : String(err)}. ${capitalize(detail)}`, {
        cause: err,
      });
  }
  return rolledBackDone;
}
