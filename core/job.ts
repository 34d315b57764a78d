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
 * two jobs never wait for each other in a circle; where its processes come into being over time
 * (a snapshot's restore), each is taken as it comes.
 *
 * @module
 */

import {
  type ActionHooks,
  type ActionReport,
  type ActionSettings,
  broughtBack,
  planGoal,
  timed,
  wayBack,
} from "./action.ts";
import { asError, CudaError, withDetail } from "./errors.ts";
import type { StopReason } from "./group_types.ts";
import type { Handle, Turn } from "./process.ts";
import { type Action, jobPhase, type Step, stepTo } from "./states.ts";

/** A process's part in a job, filled in as it goes (the group's entry). */
export interface JobMember {
  readonly proc: Handle;
  report: ActionReport | undefined;
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
  /**
   * Where the members come into being over time (a snapshot's processes, as criu brings each
   * tree back): resolves once `pid` may be acted on; a rejection fails it, and the job. Each member
   * then makes its first step as soon as it is ready; every first step is still made before any
   * second one.
   */
  ready?(pid: number): Promise<void>;
}

/** A member as the job works on it. */
interface Working {
  readonly member: JobMember;
  readonly target: Turn;
  readonly report: ActionReport;
  left: Step[];
  /** The step that failed, and how. */
  failure?: { step: Step; err: unknown };
}

/**
 * Runs `ctx.action` on every member as one job (see the module documentation) and fills in each
 * member's report. Resolves to whether processes that had moved were brought back; never rejects.
 */
export async function runJob(members: readonly JobMember[], ctx: JobContext): Promise<boolean> {
  const releases: (() => void)[] = [];
  try {
    const working = ctx.ready
      ? await asReady(members, ctx, releases)
      : await allAtOnce(members, ctx, releases);
    if (!working) return false;
    // A member whose restore the driver refused is, most often, lost (an importer of CUDA IPC
    // memory, a restore out of memory on 580): the others go on rather than back to checkpointed.
    const lost = working.filter((w) =>
      w.failure?.step === "restore" && w.failure.err instanceof CudaError
    );
    const rest = lost.length > 0 && lost.length < working.length &&
        working.every((w) => !w.failure || lost.includes(w))
      ? working.filter((w) => !lost.includes(w))
      : working;
    let stopped: StopReason | undefined;
    let failed = rest.some((w) => w.failure);
    if (!failed) {
      stopped = ctx.stopReason();
      if (!stopped) failed = await phase(rest, 2, ctx);
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
        w.report.state = stepTo(w.report.steps[w.report.steps.length - 1].step);
      }
    }
    if (rest !== working) await setAside(working.filter((w) => !rest.includes(w)));
    return failed || stopped ? await rollBack(rest, ctx) : false;
  } finally {
    for (const release of releases) release();
  }
}

/**
 * The members whose restore the driver refused, set aside while the others went on: each error
 * says where its process is and that the others were resumed.
 */
async function setAside(lost: readonly Working[]): Promise<void> {
  for (const w of lost) {
    w.report.state = await w.target.state().catch(() => undefined);
    w.report.error = withDetail(
      w.failure!.err,
      `the process is ${w.report.state ?? "of unknown state"}; a process whose restore the ` +
        `driver refuses is most often lost (on driver 580, one that imported CUDA IPC memory or ` +
        `ran out of memory), so the job's other processes were resumed rather than checkpointed ` +
        `again`,
    );
  }
}

/**
 * Every member's turn, taken one after another in pid order (so that two jobs never wait for
 * each other in a circle), then every plan, then every first step. Where a member cannot be read
 * or its goal is refused, or the job is stopped first, nothing starts (`undefined`).
 */
async function allAtOnce(
  members: readonly JobMember[],
  ctx: JobContext,
  releases: (() => void)[],
): Promise<Working[] | undefined> {
  const targets = new Map<JobMember, Turn>();
  const failed = new Map<JobMember, Error>();
  for (const m of [...members].sort((a, b) => a.proc.pid - b.proc.pid)) {
    const taken = await turnOf(m, releases);
    if (taken instanceof Error) failed.set(m, taken);
    else targets.set(m, taken);
  }
  const stop = ctx.stopReason();
  const planned = failed.size > 0 || stop
    ? []
    : await Promise.all(members.map((m) => planOf(m, targets.get(m)!, ctx)));
  const refused = planned.filter((w) => w.failure);
  if (failed.size === 0 && !stop && refused.length === 0) {
    for (const w of planned) w.member.report = w.report;
    await phase(planned, 1, ctx);
    return planned;
  }
  for (const m of members) {
    const refusal = refused.find((w) => w.member === m);
    const error = failed.get(m);
    if (error) m.report = { status: "failed", steps: [], error };
    else if (refusal) m.report = refusal.report;
    else m.notStarted = stop ?? "another-failed";
  }
  return undefined;
}

/**
 * Each member as soon as it is ready: its turn, its plan and its first step; a member that is
 * not ready (or cannot be read, or refused) fails the job, and members ready after that do not
 * start.
 */
async function asReady(
  members: readonly JobMember[],
  ctx: JobContext,
  releases: (() => void)[],
): Promise<Working[]> {
  let failed = false;
  const working: Working[] = [];
  await Promise.all(members.map(async (m) => {
    const pid = m.proc.pid;
    const error = await ctx.ready!(pid).then(() => undefined, (err) => asError(err));
    const stop = failed ? "another-failed" : ctx.stopReason();
    if (!error && stop) return void (m.notStarted = stop);
    const taken = error ?? await turnOf(m, releases);
    if (taken instanceof Error) {
      m.report = { status: "failed", steps: [], error: taken };
      failed = true;
      return;
    }
    const w = await planOf(m, taken, ctx);
    working.push(w);
    m.report = w.report;
    if (w.failure || await phase([w], 1, ctx)) failed = true;
  }));
  if (failed) {
    // Those that have not started are left so; the others are brought back with the job.
    for (const m of members) if (!m.report && !m.notStarted) m.notStarted = "another-failed";
  }
  return members.flatMap((m) => working.filter((w) => w.member === m));
}

/** Holds the turn of `m` until the job lets go of it; the error where it cannot be taken. */
function turnOf(m: JobMember, releases: (() => void)[]): Promise<Turn | Error> {
  return new Promise((taken) => {
    m.proc.ordered((target) => {
      taken(target);
      return new Promise<void>((release) => releases.push(release));
    }).catch((err) => taken(asError(err)));
  });
}

/** A member's plan from its state; a refusal or a state that cannot be read is its failure. */
async function planOf(m: JobMember, target: Turn, ctx: JobContext): Promise<Working> {
  const report: ActionReport = { status: "failed", steps: [] };
  try {
    const steps = await planGoal(target, ctx.action, report, ctx.settingsFor(m.proc.pid));
    return { member: m, target, report, left: [...steps] };
  } catch (err) {
    report.error = asError(err);
    return { member: m, target, report, left: [], failure: { step: "lock", err } };
  }
}

/** Makes each member's next step where it is of `phase`, all at once; true where one failed. */
async function phase(working: readonly Working[], n: 1 | 2, ctx: JobContext): Promise<boolean> {
  let failed = false;
  await Promise.all(working.map(async (w) => {
    const step = w.left[0];
    if (step === undefined || jobPhase(step) !== n) return;
    const pid = w.member.proc.pid;
    try {
      await timed(w.target, step, w.report, ctx.hooks(pid), {
        action: ctx.action,
        settings: ctx.settingsFor(pid),
      });
      w.left.shift();
    } catch (err) {
      w.failure = { step, err };
      w.left = [];
      failed = true;
    }
  }));
  return failed;
}

/**
 * Brings every member that moved back to its initial state, as a job: first every lock and
 * restore of the way back, then every checkpoint and unlock. Resolves to whether any member that
 * had succeeded was brought back.
 */
async function rollBack(working: readonly Working[], ctx: JobContext): Promise<boolean> {
  const ways = new Map<Working, { way: Step[]; steps: ActionReport["steps"] }>();
  const errors = new Map<Working, Error>();
  let rolledBackDone = false;
  await Promise.all(working.map(async (w) => {
    if (w.report.status === "unchanged") return;
    const way = await wayBack(w.target, w.report, w.failure);
    if (way) ways.set(w, { way, steps: [] });
  }));
  for (const phase of [1, 2] as const) {
    await Promise.all([...ways].map(async ([w, { way, steps }]) => {
      const step = way[0];
      if (step === undefined || jobPhase(step) !== phase || errors.has(w)) return;
      try {
        await timed(w.target, step, w.report, ctx.hooks(w.member.proc.pid), { rollback: steps });
        way.shift();
      } catch (err) {
        errors.set(w, asError(err));
      }
    }));
  }
  for (const [w, { steps }] of ways) {
    const error = errors.get(w);
    w.report.rollback = { ok: !error, steps, ...(error ? { error } : {}) };
    w.report.state = error ? await w.target.state().catch(() => undefined) : w.report.initialState;
    if (w.report.status === "done" && !error) rolledBackDone = true;
  }
  // The failed step's error says where its process, and the job, were left.
  for (const w of working) {
    if (!w.failure) continue;
    const error = errors.get(w);
    const initial = w.report.initialState!;
    const others = working.some((o) => o !== w && ways.has(o));
    const detail = error
      ? broughtBack(initial, error, w.report.state)
      : ways.has(w)
      ? `${broughtBack(initial)}${others ? ", as was every other process of the job" : ""}`
      : others
      ? `every other process of the job was brought back`
      : "";
    w.report.error = withDetail(w.failure.err, detail);
  }
  return rolledBackDone;
}
