// A job: processes that share GPU state (NCCL ranks) move together, since a rank locked while
// another runs can hang it: every first step (lock, restore) before any second ({@link jobPhase}),
// and all brought back in the same order. It holds every turn, taken in pid order so that two jobs
// never wait for each other in a circle.

import { type ActionHooks, type ActionReport, type ActionSettings, broughtBack } from "./action.ts";
import { planGoal, roomForAll, timed, wayBack } from "./action.ts";
import { asError, CudaError, withDetail } from "./errors.ts";
import type { StepRecord, StopReason } from "./group_types.ts";
import { gaveUp, type Handle, sessionOf, Turn } from "./process.ts";
import { type Action, jobPhase, type ProcessState, type Step, stepTo } from "./states.ts";

/** A process's part in a job, filled in as it goes (the group's entry). */
export interface JobMember {
  readonly proc: Handle;
  report: ActionReport | undefined;
  notStarted?: StopReason;
  planned?: ProcessState; // the state its plan read, for an outcome not started
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
  /** Aborts where a wait for a turn is given up (then `stopReason` says why). */
  readonly giveUp: AbortSignal;
}

/** A member as the job works on it: the steps left, and where it moved, its way back. */
interface Working {
  readonly member: JobMember;
  readonly target: Turn;
  readonly report: ActionReport;
  left: Step[];
  failure?: { step: Step; err: unknown };
  back?: { way: Step[]; steps: StepRecord[]; error?: Error };
}

/** A job under way: its context, and the turns it holds until it ends. */
type Job = JobContext & { readonly releases: (() => void)[]; failed?: boolean };

/** Runs `ctx.action` on all members as one job; resolves to whether any moved were brought back. */
export async function runJob(members: readonly JobMember[], ctx: JobContext): Promise<boolean> {
  const job: Job = { ...ctx, releases: [] };
  try {
    const working = await (ctx.ready ? asReady : allAtOnce)(members, job);
    if (!working) return false;
    // Its restore refused, a member is most often lost: the others resume rather than go back.
    const lost = working.filter(isLost);
    const rest = lost.length > 0 && lost.length < working.length &&
        working.every((w) => !w.failure || lost.includes(w))
      ? working.filter((w) => !lost.includes(w))
      : working;
    const refused = job.failed || rest.some((w) => w.failure);
    const stopped = refused ? undefined : ctx.stopReason();
    const failed = refused || (!stopped && await phase(rest, 2, ctx));
    // An abort while the second steps ran brings the job back once they have (all or nothing).
    const late = !failed && !stopped && ctx.stopReason() === "aborted";
    for (const { report: r, failure, left } of working) {
      if (r.status === "unchanged") continue;
      r.status = failure ? "failed" : left.length > 0 ? "stopped" : "done";
      if (r.status === "stopped") r.stopped = stopped ?? "another-failed";
      if (r.status === "done") r.state = stepTo(r.steps[r.steps.length - 1].step);
    }
    const back = failed || stopped || late ? await rollBack(rest, ctx) : undefined;
    const others = back === undefined ? "resumed rather than checkpointed again" : "brought back";
    // Those set aside: each error says where its process is, and where the others went.
    for (const w of rest === working ? [] : lost) {
      w.report.state = await w.target.state().catch(() => undefined);
      const lost = `the process is ${w.report.state ?? "of unknown state"}; a process whose ` +
        `restore the driver refuses is most often lost (on driver 580, one that imported CUDA ` +
        `IPC memory or ran out of memory), so the job's other processes were ${others}`;
      w.report.error = withDetail(w.failure!.err, lost, w.report.state);
    }
    return back ?? false;
  } finally {
    for (const release of job.releases) release();
  }
}

/** Every turn in pid order, every plan, every first step; `undefined` where one cannot start. */
async function allAtOnce(members: readonly JobMember[], ctx: Job): Promise<Working[] | undefined> {
  const taken = new Map<JobMember, Turn | Error>();
  // In the order of the processes (a thread id stands for its own), the same for every job.
  const of = (m: JobMember) => m.proc.machine().then((x) => sessionOf(x).identify(m.proc.pid));
  const pid = async (m: JobMember) => (await of(m).catch(() => undefined))?.pid ?? m.proc.pid;
  const by = new Map(await Promise.all(members.map(async (m) => [m, await pid(m)] as const)));
  for (const m of [...members].sort((a, b) => by.get(a)! - by.get(b)!)) {
    const turn = await turnOf(m, ctx);
    if (!turn) break; // given up: not started, as those after it
    taken.set(m, turn);
  }
  const stop = ctx.stopReason(), turnless = members.some((m) => !(taken.get(m) instanceof Turn));
  const planned = turnless || stop
    ? []
    : await Promise.all(members.map((m) => planOf(m, taken.get(m) as Turn, ctx)));
  const planOk = !turnless && !stop && planned.every((w) => !w.failure);
  // The restores planned, together, before any first step (each checks its own again).
  const plan = (w: Working) => ({
    turn: w.target,
    steps: w.left,
    settings: ctx.settingsFor(w.member.proc.pid),
  });
  const refused = planOk ? await roomForAll(ctx.action, planned.map(plan)) : undefined;
  if (refused) {
    const w = planned[refused.at];
    [w.report.error, w.failure] = [refused.error, { step: "restore", err: refused.error }];
  } else if (planOk) {
    for (const w of planned) w.member.report = w.report;
    await phase(planned, 1, ctx);
    return planned;
  }
  for (const [i, m] of members.entries()) {
    const turn = taken.get(m);
    if (turn instanceof Error) m.report = { status: "failed", steps: [], error: turn };
    else if (planned[i]?.failure) m.report = planned[i].report;
    else [m.notStarted, m.planned] = [stop ?? "another-failed", planned[i]?.report.initialState];
  }
  return undefined;
}

/** Whether the driver refused a member's restore: it is, most often, lost (see `runJob`). */
const isLost = (w: Working) => w.failure?.step === "restore" && w.failure.err instanceof CudaError;

/** Each member as soon as it is ready: its turn, plan and first step; one failing fails all. */
async function asReady(members: readonly JobMember[], ctx: Job): Promise<Working[]> {
  const working: Working[] = [];
  await Promise.all(members.map(async (m) => {
    const error = await ctx.ready!(m.proc.pid).then(() => undefined, (err) => asError(err));
    const stop = ctx.failed ? "another-failed" : ctx.stopReason();
    if (!error && stop) return void (m.notStarted = stop);
    const taken = error ?? await turnOf(m, ctx);
    if (taken instanceof Error) {
      m.report = { status: "failed", steps: [], error: taken };
      ctx.failed = true;
      return;
    }
    // Given up, or taken after a stop (a turn behind none is not given up): nothing started.
    if (!taken || ctx.stopReason()) return void (m.notStarted = ctx.stopReason());
    const w = await planOf(m, taken, ctx);
    working.push(w);
    m.report = w.report;
    // Stopped while its plan read its state: no step (stopped). A lost member stops no other:
    // the others that come are restored, and go on without it.
    const failed = w.failure || (!ctx.stopReason() && await phase([w], 1, ctx));
    if (failed && !isLost(w)) ctx.failed = true;
  }));
  if (ctx.failed) {
    // Those that have not started are left so; the others are brought back with the job.
    for (const m of members) if (!m.report && !m.notStarted) m.notStarted = "another-failed";
  }
  return members.flatMap((m) => working.filter((w) => w.member === m));
}

/** Holds the turn of `m` until the job lets go of it; the error where it cannot be taken. */
function turnOf(m: JobMember, job: Job): Promise<Turn | Error | undefined> {
  return new Promise((taken) => {
    const hold = (target: Turn) => {
      taken(target);
      return new Promise<void>((release) => job.releases.push(release));
    };
    m.proc.ordered(hold, job.action, true, job.giveUp)
      .catch((err) => taken(gaveUp(err, job.giveUp) ? undefined : asError(err)));
  });
}

/** A member's plan from its state; a refusal or a state that cannot be read is its failure. */
async function planOf(m: JobMember, target: Turn, ctx: JobContext): Promise<Working> {
  const w: Working = { member: m, target, report: { status: "failed", steps: [] }, left: [] };
  try {
    w.left = [...await planGoal(target, ctx.action, w.report, ctx.settingsFor(m.proc.pid), true)];
  } catch (err) {
    w.report.error = asError(err);
    w.failure = { step: "lock", err };
  }
  return w;
}

/**
 * Makes each member's next step where it is of phase `n`, all at once, or (`back`) the next step
 * of its way back; resolves to whether one failed, which makes no more steps.
 */
async function phase(working: readonly Working[], n: 1 | 2, ctx: JobContext, back = false) {
  let failed = false;
  await Promise.all(working.map(async (w) => {
    const left = back ? w.back?.way : w.left, step = left?.[0];
    if (step === undefined || jobPhase(step) !== n) return;
    const pid = w.member.proc.pid;
    try {
      const of = back
        ? { rollback: w.back!.steps }
        : { action: ctx.action, settings: ctx.settingsFor(pid) };
      await timed(w.target, step, w.report, ctx.hooks(pid), of);
      left!.shift();
    } catch (err) {
      if (back) w.back!.error = asError(err);
      else w.failure = { step, err };
      left!.length = 0;
      failed = true;
    }
  }));
  return failed;
}

/** Brings every member that moved back, phase by phase; resolves to whether a done one was. */
async function rollBack(working: readonly Working[], ctx: JobContext): Promise<boolean> {
  await Promise.all(working.map(async (w) => {
    const way = w.report.status !== "unchanged" && await wayBack(w.target, w.report, w.failure);
    if (way) w.back = { way, steps: [] };
  }));
  for (const n of [1, 2] as const) await phase(working, n, ctx, true);
  for (const { back, report, target } of working) {
    if (!back) continue;
    const { steps, error } = back;
    report.rollback = { ok: !error, steps, ...(error ? { error } : {}) };
    report.state = error ? await target.state().catch(() => undefined) : report.initialState;
  }
  // The failed step's error says where its process, and the job, were left.
  for (const w of working) {
    if (!w.failure) continue;
    // "Every other" only where each other one's way back succeeded.
    const initial = w.report.initialState!, rest = working.filter((o) => o !== w && o.back);
    const others = rest.length > 0 && rest.every((o) => !o.back!.error);
    const detail = w.back?.error
      ? broughtBack(initial, w.back.error, w.report.state)
      : w.back
      ? `${broughtBack(initial)}${others ? ", as was every other process of the job" : ""}`
      : others
      ? `every other process of the job was brought back`
      : "";
    w.report.error = withDetail(w.failure.err, detail, w.report.state);
  }
  return working.some(({ back, report }) => report.status === "done" && back && !back.error);
}
