// A step or goal on many processes at once, each through the executor `CudaProcess` uses (a job
// through `job.ts`): N processes checkpoint in about the time of the largest
// (docs/DRIVER.md#many-processes-at-once).

import { type ActionHooks, type ActionReport, type ActionSettings, planGoal } from "./action.ts";
import { defined, type Planned, roomForAll, runAction, stepEvents, undo } from "./action.ts";
import { CUDA_ERROR_NOT_READY } from "./driver.ts";
import { asError, type CudaError } from "./errors.ts";
import type { GroupEvent, GroupResult, GroupSettings, ProcessOutcome } from "./group_types.ts";
import type { StopReason } from "./group_types.ts";
import { type JobMember, runJob } from "./job.ts";
import type { Machine, MachineSource } from "./machine.ts";
import { checkPid, mustBe } from "./options.ts";
import { gaveUp, Handle, sessionOf, type Turn } from "./process.ts";
import { sameProcess } from "./host.ts";
import type { Action } from "./states.ts";
import { clockOf, Deadline } from "./time.ts";

/** Runs `action` on every target (`runGroup` of the main module); rejects only for bad targets. */
export async function runGroup(
  source: MachineSource,
  action: Action,
  targets: readonly (number | Handle)[],
  settings: GroupSettings,
): Promise<GroupResult> {
  const pids = "an array of pids or CudaProcess";
  if (!Array.isArray(targets)) mustBe(TypeError, "targets", pids, targets);
  const handles = [...targets].map((t, i) =>
    t instanceof Handle ? t.fork() : new Handle(checkPid(t, `targets[${i}]`), source)
  );
  try {
    // A process given twice is refused: by one number, or by its pid and a thread id (one queue).
    const ids = await Promise.all(handles.map(async (h) => {
      const session = await h.machine().then(sessionOf, () => undefined); // its run says why
      return { pid: h.pid, session, who: await session?.identify(h.pid) ?? { pid: h.pid } };
    }));
    for (const [i, { pid, session, who }] of ids.entries()) {
      const j = ids.findIndex((o) => o.session === session && sameProcess(o.who, who));
      if (j === i) continue;
      const what = ids[j].pid === pid
        ? `targets names process ${pid} twice (targets[${i}])`
        : `pids ${ids[j].pid} and ${pid} are one process, ${who.pid}`;
      throw new RangeError(`${what}: give each process once`);
    }
    return await new Group(action, handles, settings).run();
  } finally {
    await Promise.all(handles.map((h) => h.close()));
  }
}

/** A process's part in the group, as it goes (a job's member), and its rollback under way. */
type Entry = JobMember & { rollingBack?: Promise<unknown> };

class Group {
  readonly #entries: Entry[];
  #deadline = new Deadline({ now: () => performance.now() }, undefined);
  #deadlinePassed = false;
  /** The pids whose lock timeout the deadline cut. */
  readonly #cut = new Set<number>();
  #failed = false;
  #doomed = false;
  #rolledBack = false;
  readonly #rollbacks: Promise<unknown>[] = [];
  readonly #memory = new Map<number, { gpuMemoryMiB: number }>();
  readonly #stop = new AbortController(); // aborted at the deadline, with the reason "deadline"
  /** Aborts at the deadline or the caller's abort: a wait for a process's turn then ends. */
  #giveUp = this.#stop.signal;

  constructor(private readonly action: Action, procs: Handle[], private readonly s: GroupSettings) {
    this.#entries = procs.map((proc) => ({ proc, report: undefined }));
  }

  async run(): Promise<GroupResult> {
    // One that does not open (no libcuda) is each member's failure, told by its own work.
    const machine = await this.#entries[0]?.proc.machine().catch(() => undefined);
    this.#deadline = new Deadline(clockOf(machine ?? {}), this.s.timeoutMs); // for the whole group
    const cancel = this.#deadline.onPassed(machine?.clock, () => this.#stop.abort("deadline"));
    if (this.s.signal) this.#giveUp = AbortSignal.any([this.s.signal, this.#stop.signal]);
    return await this.#run(machine).finally(cancel);
  }

  async #run(machine: Machine | undefined): Promise<GroupResult> {
    if (machine && this.s.gpuMemory) await this.#readMemory();
    if (this.s.job) {
      this.#rolledBack = await runJob(this.#entries, {
        action: this.action,
        settingsFor: (pid) => this.#settingsFor(pid),
        hooks: (pid) => this.#hooks(pid),
        stopReason: () => this.#stopReason(),
        ready: this.s.ready,
        giveUp: this.#giveUp,
      });
      for (const e of this.#entries) this.#ended(e);
      return this.#result();
    }
    // All or nothing: a goal or step some member's state rules out fails the group before any
    // step (the driver still has the last word on each step made).
    if (this.s.allOrNothing && !(await this.#allCanStart())) return this.#result();
    let next = 0;
    const lane = async () => {
      while (next < this.#entries.length) {
        const entry = this.#entries[next++];
        entry.notStarted = this.#stopReason();
        if (!entry.notStarted) await this.#work(entry);
        this.#ended(entry);
        if (!entry.notStarted) this.#failed ||= !succeeded(entry);
        if (this.s.allOrNothing && !succeeded(entry)) this.#doom();
        this.#rollBackIfDone(entry);
      }
    };
    const signal = this.s.signal;
    const onAbort = () => (this.s.allOrNothing || this.s.rollBackOnAbort) && this.#doom();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      if (signal?.aborted) onAbort();
      const lanes = Math.min(this.s.concurrency, this.#entries.length);
      await Promise.all(Array.from({ length: lanes }, lane));
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    // Rollbacks started as soon as the group could no longer succeed; wait for every one.
    while (this.#rollbacks.length > 0) await Promise.all(this.#rollbacks.splice(0));
    return this.#result();
  }

  #ended(e: Entry): void {
    const at = this.#deadline.elapsed();
    this.s.onProgress({ type: "process-end", pid: e.proc.pid, at, status: outcome(e).status });
  }

  #result(): GroupResult {
    return {
      action: this.action,
      ok: this.#entries.every(succeeded) && !this.#rolledBack,
      processes: this.#entries.map(outcome),
      // A lock the deadline cut short fails (NOT_READY) rather than stopping: passed all the same.
      deadlinePassed: this.#deadlinePassed ||
        this.#entries.some((e) =>
          this.#cut.has(e.proc.pid) && (e.report?.error as CudaError)?.code === CUDA_ERROR_NOT_READY
        ),
      aborted: this.s.signal?.aborted === true,
      rolledBack: this.#rolledBack ||
        this.#entries.some((e) => e.report?.stopped && e.report.rollback),
      ms: this.#deadline.elapsed(),
    };
  }

  /** Plans every member (strictly), and the room of their restores; one refused, none starts. */
  async #allCanStart(): Promise<boolean> {
    const plans: Planned[] = [];
    const reports = this.#entries.map((): ActionReport => ({ status: "failed", steps: [] }));
    const checks = await Promise.all(this.#entries.map((e, i) =>
      this.#inTurn(e, async (turn) => {
        const settings = this.#settingsFor(e.proc.pid);
        const steps = await planGoal(turn, this.action, reports[i], settings, true);
        plans[i] = { turn, steps, settings };
      }).catch((err) =>
        gaveUp(err, this.#giveUp) ? undefined : { ...reports[i], error: asError(err) }
      )
    ));
    this.#entries.forEach((e, i) => e.planned = reports[i].initialState); // for one not started
    if (this.#giveUp.aborted && !checks.some(Boolean)) return true; // stopped: each says why
    const refused = checks.some(Boolean) ? undefined : await roomForAll(this.action, plans);
    if (refused) checks[refused.at] = { ...reports[refused.at], error: refused.error };
    if (checks.every((c) => c === undefined)) return true;
    this.#failed = true;
    for (const [i, e] of this.#entries.entries()) {
      if (checks[i]) e.report = checks[i];
      else e.notStarted = "another-failed";
    }
    return false;
  }

  /** The group can no longer succeed: every process done is brought back, now or once done. */
  #doom(): void {
    this.#doomed = true;
    for (const entry of this.#entries) this.#rollBackIfDone(entry);
  }

  #rollBackIfDone(entry: Entry): void {
    if (!this.#doomed || entry.report?.status !== "done" || entry.rollingBack) return;
    this.#rolledBack = true;
    const r = entry.report;
    entry.rollingBack = entry.proc.ordered((target) => undo(target, r, this.#hooks(entry.proc.pid)))
      .catch((err) =>
        void (r.rollback = { ok: false, steps: r.rollback?.steps ?? [], error: asError(err) })
      );
    this.#rollbacks.push(entry.rollingBack);
  }

  #stopReason(): StopReason | undefined {
    if (this.s.signal?.aborted) return "aborted";
    if (this.#deadline.passed()) {
      this.#deadlinePassed = true;
      return "deadline";
    }
    return this.s.allOrNothing && this.#failed ? "another-failed" : undefined;
  }

  /** One process, in its turn, through the one executor. */
  async #work(entry: Entry): Promise<void> {
    const pid = entry.proc.pid;
    const hooks = { ...this.#hooks(pid), stopBefore: () => this.#stopReason() };
    const act = (turn: Turn) => runAction(turn, this.action, this.#settingsFor(pid), hooks, true);
    try {
      entry.report = await this.#inTurn(entry, act);
    } catch (err) {
      // Its turn never came in time; or the handle could not be used (no driver, closed).
      if (gaveUp(err, this.#giveUp)) entry.notStarted = this.#stopReason();
      else entry.report = { status: "failed", steps: [], error: asError(err) };
    }
  }

  /** Runs `body` in the turn of `e`'s process; the wait for it is given up at a stop. */
  #inTurn<T>(e: Entry, body: (turn: Turn) => Promise<T>): Promise<T> {
    return e.proc.ordered(body, this.action, true, this.#giveUp);
  }

  #hooks(pid: number): ActionHooks {
    const tell = (e: GroupEvent) => this.s.onProgress({ ...e, at: this.#deadline.elapsed() });
    return stepEvents(pid, tell, this.#memory.get(pid));
  }

  /** One process's settings, its lock timeout cut to what is left of the deadline. */
  #settingsFor(pid: number): ActionSettings {
    const { lockTimeoutMs: lock, checkRoom, allowIpcImport } = this.s;
    const lockTimeoutMs = () => {
      const ms = this.#deadline.cut(lock);
      if (ms !== lock) this.#cut.add(pid);
      return ms;
    };
    return { lockTimeoutMs, pairs: this.s.gpuMapping(pid), checkRoom, allowIpcImport };
  }

  /** Keeps each target's GPU memory where known (the host's report, or its record), for events. */
  async #readMemory(): Promise<void> {
    const first = this.#entries[0];
    const report = await this.#inTurn(first, (t) => t.session.room.report()).catch(() => undefined);
    await Promise.all(this.#entries.map((e) =>
      this.#inTurn(e, async (target) => {
        const mib = await target.session.room.totalMiB(target.identity, report);
        if (mib !== undefined) this.#memory.set(e.proc.pid, { gpuMemoryMiB: mib });
      }).catch(() => {})
    ));
  }
}

const succeeded = (e: Entry) => e.report?.status === "done" || e.report?.status === "unchanged";

function outcome({ proc: { pid }, report: r, notStarted, planned }: Entry): ProcessOutcome {
  const was = { initialState: planned, state: planned }; // as its plan read it, where one did
  if (!r) return defined({ pid, status: "not-started", steps: [], notStarted, ...was });
  // A done process that all or nothing (or an interrupt) then brought back says so.
  const status = r.status === "done" && r.rollback ? "rolled-back" : r.status;
  const { initialState, state, steps, error, stopped, rollback, roomCheck } = r;
  return defined({ pid, status, initialState, state, steps, error, stopped, rollback, roomCheck });
}
