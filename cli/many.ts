/**
 * An operation on several pids, or on every CUDA process (`--all`): all at once, through the group
 * operations (`runGroup`: a step, or `toggle`), one `<pid> <result>` line each, and exit 1 if any
 * failed. Each process gets what it would get alone (a step the driver refuses fails, as with one
 * pid); `--all-or-nothing` brings the others back when one fails. On a terminal a progress line
 * shows which step runs on which pid.
 *
 * @module
 */

import type { CliOperation, OperationCommand } from "./args.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import { isGone } from "../core/process.ts";
import {
  type GroupAction,
  type GroupEvent,
  type GroupOptions,
  type ProcessOutcome,
  runGroup,
  type StepRecord,
} from "../core/group.ts";
import type { HostProcesses } from "../core/host.ts";
import { listCudaProcesses } from "../core/listing.ts";
import { INTERRUPTED_EXIT_CODE, Interruption, type Left } from "./interrupt.ts";
import type { Interrupts } from "./io.ts";
import type { Machine } from "./machine.ts";
import { ProgressLine } from "./progress.ts";
import {
  errorReport,
  type PidReport,
  type Printer,
  resultWord,
  roomNote,
  type StepReport,
  warnUninspectable,
} from "./report.ts";
import { query } from "./query.ts";

/**
 * What follows the group's steps: the progress line of a terminal (and where the group reads
 * each process's GPU memory for it), and the watch over interrupts.
 */
interface Progress {
  readonly line?: ProgressLine;
  readonly host?: HostProcesses;
  readonly interruption?: Interruption;
}

/** The reports, and where each process was left, for the closing line of an interrupt. */
interface Acted {
  readonly reports: PidReport[];
  readonly left: Left[];
}

/** Why a process was not started or was stopped, in words. */
const REASONS: Readonly<Record<string, string>> = {
  "another-failed": "another process failed and --all-or-nothing was given",
  deadline: "the deadline passed",
  aborted: "it was aborted",
};

/**
 * Runs the command on several pids (or all), prints a line each, resolves to the exit code. With
 * `interrupts`, an interrupt during a step stops the group and brings back what it changed (exit
 * code 130); see interrupt.ts.
 */
export async function runMany(
  command: OperationCommand,
  machine: Machine,
  print: Printer,
  interrupts?: Interrupts,
): Promise<number> {
  let pids: readonly number[];
  if (command.targets === "all") {
    try {
      pids = await everyCudaProcess(machine, print);
    } catch (error) {
      print.err(`cuda-checkpoint: ${error instanceof Error ? error.message : String(error)}`);
      return 1;
    }
    if (pids.length === 0) print.more("no CUDA processes on this machine");
  } else {
    pids = command.targets;
  }
  const querying = command.operation === "get-state" || command.operation === "get-restore-tid";
  let progress: Progress | undefined;
  if (!querying && pids.length > 0 && (print.terminal || interrupts)) {
    // The host tells each process's GPU memory for the line (NVML on Linux; a few ms).
    const host = print.terminal ? await machine.host(true) : undefined;
    progress = {
      ...(print.terminal
        ? { line: new ProgressLine({ write: (t) => print.raw(t), total: pids.length }) }
        : {}),
      ...(host ? { host } : {}),
      ...(interrupts
        ? { interruption: new Interruption(interrupts, print, pids, !!machine.simulated) }
        : {}),
    };
  }
  let acted: Acted;
  try {
    acted = querying
      ? {
        reports: await Promise.all(pids.map((p) => query(command.operation, p, machine.driver))),
        left: [],
      }
      : await act(command, pids, machine.driver, progress);
  } finally {
    progress?.line?.stop();
    progress?.interruption?.stop();
  }
  const { reports } = acted;
  for (const report of reports) {
    if (command.json) print.json(report);
    else print.out(`${report.pid} ${resultWord(report)}`);
  }
  for (const report of reports) explain(report, print);
  for (const report of reports) {
    const note = roomNote(report);
    if (note) print.more(note);
  }
  if (progress?.interruption?.interrupted) {
    progress.interruption.closing(acted.left);
    return INTERRUPTED_EXIT_CODE;
  }
  return reports.every((r) => r.ok) ? 0 : 1;
}

/** Where a group left each process. */
function leftBy(outcomes: Iterable<ProcessOutcome>): Left[] {
  return [...outcomes].map((o) => ({
    pid: o.pid,
    ...(o.initialState !== undefined ? { was: o.initialState } : {}),
    ...(o.state !== undefined ? { now: o.state } : {}),
    untouched: o.status === "not-started" ||
      (o.status === "failed" && o.steps.length === 0 && o.rollback === undefined),
    gone: isGone(o.error) || isGone(o.rollback?.error),
  }));
}

/** The pids of every CUDA process of the machine; says on stderr which could not be looked at. */
async function everyCudaProcess(machine: Machine, print: Printer): Promise<number[]> {
  const host = await machine.host(false);
  const listing = await listCudaProcesses({
    driver: machine.driver,
    gpuMemory: false,
    ...(host ? { host } : {}),
  });
  warnUninspectable(listing.uninspectable, print);
  return listing.processes.map((p) => p.pid);
}

/** What went wrong with a process, on stderr: NVIDIA's line, or ours where it has none. */
function explain(report: PidReport, print: Printer): void {
  if (report.error) print.failure(report.error);
  if (report.status === "not-started" || report.status === "stopped") {
    const what = report.status === "stopped" ? "was stopped between steps" : "was not started";
    print.err(`Process ID ${report.pid} ${what}: ${REASONS[report.reason ?? ""] ?? report.reason}`);
  }
  if (report.rollback && report.status === "done") {
    print.more(
      report.rollback.ok
        ? `process ID ${report.pid} was brought back to ${report.state}: another process failed`
        : `process ID ${report.pid} could not be brought back: ${report.rollback.error?.detail}`,
    );
  }
}

/**
 * The group options every action shares. `interruptible`: an interrupt stops the group and
 * brings back what it changed (not for the group that undoes the other half of a toggle).
 */
function groupOptions(
  command: OperationCommand,
  driver: CheckpointDriver,
  progress: Progress | undefined,
): GroupOptions {
  const line = progress?.line;
  const interruption = progress?.interruption;
  const onProgress = (line || interruption) && ((event: GroupEvent) => {
    interruption?.event(event);
    if (!line) return;
    if (event.type !== "process-end") line.event(event);
    else if (event.status === "done" || event.status === "unchanged") line.finished(event.pid);
  });
  return {
    driver,
    allOrNothing: command.allOrNothing,
    job: command.job,
    // As with one pid: no lock timeout unless --timeout gives one.
    lockTimeoutMs: command.timeoutMs ?? 0,
    ...(onProgress ? { onProgress, gpuMemory: line !== undefined } : {}),
    ...(progress?.host ? { host: progress.host } : {}),
    ...(interruption ? { signal: interruption.signal, rollBackOnAbort: true } : {}),
  };
}

/** A step, or a toggle, on every pid at once. */
async function act(
  command: OperationCommand,
  pids: readonly number[],
  driver: CheckpointDriver,
  progress: Progress | undefined,
): Promise<Acted> {
  const action = command.operation as GroupAction;
  // NVIDIA's utility hands pid 0 to the driver, which says no process has it; so does this, and
  // the group works on the others.
  const members = pids.filter((pid) => pid !== 0);
  const result = await runGroup(action, members, {
    ...groupOptions(command, driver, progress),
    ...(command.gpuMapping ? { gpuMapping: command.gpuMapping } : {}),
  });
  const zero = pids.includes(0) ? await query(command.operation, 0, driver) : undefined;
  const reports = result.processes.map((o) => fromOutcome(command.operation, o));
  return {
    reports: pids.map((pid) => pid === 0 ? zero! : reports[members.indexOf(pid)]),
    left: leftBy(result.processes),
  };
}

/** A group's outcome for one process, as reported. */
function fromOutcome(operation: CliOperation, o: ProcessOutcome): PidReport {
  const ok = (o.status === "done" && !o.rollback) || o.status === "unchanged";
  const reason = o.notStarted ?? o.stopped;
  // A process that failed before any step (its state has no way to the action's) is as it was.
  const state = o.state ??
    (o.status === "failed" && o.steps.length === 0 ? o.initialState : undefined);
  return {
    pid: o.pid,
    operation,
    ok,
    ...(state !== undefined ? { state } : {}),
    status: o.status,
    ...(reason ? { reason } : {}),
    ms: round([...o.steps, ...(o.rollback?.steps ?? [])].reduce((sum, s) => sum + s.ms, 0)),
    steps: o.steps.map(stepReport),
    ...(o.error ? { error: errorReport(operation, o.pid, o.error) } : {}),
    ...(o.roomCheck !== undefined ? { roomCheck: o.roomCheck } : {}),
    ...(o.rollback
      ? {
        rollback: {
          ok: o.rollback.ok,
          steps: o.rollback.steps.map(stepReport),
          ...(o.rollback.error ? { error: errorReport(operation, o.pid, o.rollback.error) } : {}),
        },
      }
      : {}),
  };
}

function stepReport(s: StepRecord): StepReport {
  return { step: s.step, ms: round(s.ms), ok: s.ok };
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
