/**
 * A job: processes that share GPU state (NCCL ranks) move together, since a rank locked while
 * another runs can hang it: every first step (lock, restore) before any second ({@link jobPhase}),
 * and all brought back in the same order. It holds every turn, taken in pid order so that two jobs
 * never wait for each other in a circle.
 *
 * @module
 */

import { type ActionHooks, type ActionReport, type ActionSettings, broughtBack } from "./action.ts";
import { planGoal, timed, wayBack } from "./action.ts";
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
  readonly action: Action;
  settingsFor(pid: number): ActionSettings;
  hooks(pid: number): ActionHooks;
  /** Why nothing more may start now (a deadline, an abort), if so. */
  stopReason(): StopReason | undefined;
  /** Where members come into being over time: resolves once `pid` may start (rejects: fails it). */
  ready?(pid: number): Promise<void>;
}

/** A member as the job works on it. */
interface Working {
  readonly member: JobMember;
  readonly target: Turn;
  readonly report: ActionReport;
  left: Step[];
  failure?: { step: Step; err: unknown };
}

/** Runs `ctx.action` on all members as one job; resolves to whether any moved were brought back. */
export async function runJob(members: readonly JobMember[], ctx: JobContext): Promise<boolean> {
  const releases: (() => void)[] = [];
  try {
    const working = ctx.ready
      ? await asReady(members, ctx, releases)
      : await allAtOnce(members, ctx, releases);
    if (!working) return false;
    // A member whose restore the driver refused is, most often, lost (an importer of CUDA IPC
    // memory, a restore out of memory on 580): the others go on rather than back to checkpointed.
    const lost = working.filter(isLost);
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
    // Those set aside: each error says where its process is, and that the others went on.
    for (const w of rest === working ? [] : lost) {
      w.report.state = await w.target.state().catch(() => undefined);
      w.report.error = withDetail(
        w.failure!.err,
        `the process is ${w.report.state ?? "of unknown state"}; a process whose restore the ` +
          `driver refuses is most often lost (on driver 580, one that imported CUDA IPC memory or ` +
          `ran out of memory), so the job's other processes were resumed rather than checkpointed ` +
          `again`,
      );
    }
    return failed || stopped ? await rollBack(rest, ctx) : false;
  } finally {
    for (const release of releases) release();
  }
}

/** Every turn in pid order, every plan, every first step; `undefined` where one cannot start. */
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

/** Each member as soon as it is ready: its turn, plan and first step; one failing fails all. */
/** Whether the driver refused a member's restore: it is, most often, lost (see `runJob`). */
function isLost(w: Working): boolean {
  return w.failure?.step === "restore" && w.failure.err instanceof CudaError;
}

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
    // A lost member stops no other: the others that come are restored, and go on without it.
    if ((w.failure || await phase([w], 1, ctx)) && !isLost(w)) failed = true;
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

/** Brings every member that moved back, phase by phase; resolves to whether a done one was. */
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
