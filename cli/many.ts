/**
 * An operation on several pids, or on every CUDA process (`--all`): all at once, through the group
 * operations (`runGroup`: a step, or `toggle`), one `<pid> <result>` line each, and exit 1 if any
 * failed. Each process gets what it would get alone (a step the driver refuses fails, as with one
 * pid); `--all-or-nothing` brings the others back when one fails. On a terminal a progress line
 * shows which step runs on which pid.
 *
 * Ctrl-C (SIGINT), SIGTERM or SIGHUP meanwhile: the first interrupt stops the group (its
 * `AbortSignal`): no new step starts, and every process the command changed is brought back to
 * where it was (`rollBackOnAbort`), each as soon as its step inside the driver ends. The command
 * then prints its lines as usual, one more saying what was left changed, and exits 128 + the
 * signal's number (130, 143, 129). A second interrupt, of any of the three, exits at once, naming
 * the steps still inside the driver, whose processes' states it cannot know. One pid keeps the
 * default: the program ends at the interrupt, as NVIDIA's utility does.
 *
 * @module
 */

import type { CliOperation, OperationCommand } from "./args.ts";
import {
  type GroupOptions,
  type GroupResult,
  listCudaProcesses,
  type ProcessOutcome,
  runGroup,
} from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { Action, GroupEvent, StepRecord } from "../types.ts";
import { roundMs } from "../core/time.ts";
import { isGone } from "../core/process.ts";
import type { Interrupts } from "./io.ts";
import { interruptedExitCode, InterruptWatch, type Signal } from "./signals.ts";
import { ProgressLine } from "./progress.ts";
import {
  errorReport,
  type PidReport,
  type Printer,
  printReports,
  type StepReport,
  warnUninspectable,
} from "./report.ts";
import { query } from "./query.ts";

/**
 * Runs the command on several pids (or all), prints a line each, resolves to the exit code. With
 * `interrupts`, an interrupt during a step stops the group and brings back what it changed (exit
 * code 128 + the signal's number; see the module documentation).
 */
export async function runMany(
  command: OperationCommand,
  machine: Machine,
  print: Printer,
  interrupts?: Interrupts,
  simulated = false,
): Promise<number> {
  let pids = command.targets;
  if (pids === "all") {
    const listing = await listCudaProcesses({ machine, gpuMemory: false })
      .catch((error) => print.error(error));
    if (!listing) return 1;
    warnUninspectable(listing.uninspectable, print);
    pids = listing.processes.map((p) => p.pid);
    if (pids.length === 0) print.more("no CUDA processes on this machine");
  }
  const { operation } = command;
  if (operation === "get-state" || operation === "get-restore-tid") {
    const reports = await Promise.all(pids.map((p) => query(operation, p, machine.driver)));
    return printReports(reports, print, command.json, true);
  }
  const acting = pids.length > 0;
  const line = acting && print.terminal
    ? new ProgressLine({ write: (t) => print.raw(t), total: pids.length })
    : undefined;
  const interruption = acting && interrupts
    ? new Interruption(interrupts, print, pids, simulated)
    : undefined;
  // NVIDIA's utility hands pid 0 to the driver, which says no process has it; so does this, and
  // the group works on the others.
  const members = pids.filter((pid) => pid !== 0);
  let result: GroupResult, zero: PidReport | undefined;
  try {
    const options = groupOptions(command, machine, line, interruption);
    result = await runGroup(operation as Action, members, options);
    zero = pids.includes(0) ? await query(operation, 0, machine.driver) : undefined;
  } finally {
    line?.stop();
    interruption?.stop();
  }
  const reports = pids.map((pid) =>
    pid === 0 ? zero! : fromOutcome(operation, result.processes[members.indexOf(pid)])
  );
  const code = printReports(reports, print, command.json, true);
  if (!interruption?.interrupted) return code;
  interruption.closing(result.processes);
  return interruptedExitCode(interruption.interrupted);
}

/**
 * The group's settings: as with one pid, no lock timeout unless --timeout gives one; an interrupt
 * stops the group and brings back what it changed.
 */
function groupOptions(
  command: OperationCommand,
  machine: Machine,
  line: ProgressLine | undefined,
  interruption: Interruption | undefined,
): GroupOptions {
  const onProgress = (line || interruption) && ((event: GroupEvent) => {
    interruption?.event(event);
    if (!line) return;
    if (event.type !== "process-end") line.event(event);
    else if (event.status === "done" || event.status === "unchanged") line.finished(event.pid);
  });
  return {
    machine,
    allOrNothing: command.allOrNothing,
    job: command.job,
    lockTimeoutMs: command.timeoutMs ?? 0,
    checkRoom: command.checkRoom ?? true,
    allowIpcImport: command.allowIpcImport ?? false,
    ...(command.gpuMapping ? { gpuMapping: command.gpuMapping } : {}),
    ...(onProgress ? { onProgress, gpuMemory: line !== undefined } : {}),
    ...(interruption ? { signal: interruption.signal, rollBackOnAbort: true } : {}),
  };
}

/** A group's outcome for one process, as reported. */
function fromOutcome(operation: CliOperation, o: ProcessOutcome): PidReport {
  const ok = o.status === "done" || o.status === "unchanged";
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
    ms: roundMs([...o.steps, ...(o.rollback?.steps ?? [])].reduce((sum, s) => sum + s.ms, 0)),
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

const stepReport = ({ step, ms, ok }: StepRecord): StepReport => ({ step, ms, ok });

/**
 * One operation's watch over interrupts (see the module documentation): an {@link InterruptWatch}
 * that follows the group's steps, to name those still inside the driver on a forced exit.
 */
class Interruption {
  readonly #watch: InterruptWatch;
  /** Aborts at the first interrupt. */
  readonly signal: AbortSignal;
  readonly #print: Printer;
  readonly #underWay = new Map<number, string>();

  constructor(interrupts: Interrupts, print: Printer, pids: readonly number[], simulated: boolean) {
    this.#print = print;
    this.#watch = new InterruptWatch(interrupts, print, simulated, {
      meanwhile: "no new step starts, and each process this command changed is brought back " +
        "once its step inside the driver ends (interrupt again to exit without waiting)",
      leftBehind: () => {
        const under = [...this.#underWay].map(([pid, step]) => `${pid} (${step})`);
        return {
          rest: " for the driver" +
            (under.length > 0 ? `; still under way, their state unknown: ${under.join(", ")}` : ""),
          lines: [
            `check each process with: cuda-checkpoint --get-state --pid ${pids.join(",")}${
              simulated ? " --simulate" : ""
            }`,
          ],
        };
      },
    });
    this.signal = this.#watch.signal;
  }

  /** The first interrupt's signal, if one came. */
  get interrupted(): Signal | undefined {
    return this.#watch.first;
  }

  /** Follows the group's steps, to name those still inside the driver on a forced exit. */
  event(event: GroupEvent): void {
    if (event.type === "step-start") this.#underWay.set(event.pid, event.step);
    else if (event.type === "step-end") this.#underWay.delete(event.pid);
  }

  /** Stops watching: an interrupt ends the program again. Idempotent. */
  stop(): void {
    this.#watch.stop();
  }

  /** The closing line of an interrupted command: what it left changed, if anything. */
  closing(outcomes: readonly ProcessOutcome[]): void {
    const changed = outcomes.filter((o) =>
      o.status !== "not-started" &&
      !(o.status === "failed" && o.steps.length === 0 && o.rollback === undefined) &&
      (o.initialState === undefined || o.state !== o.initialState)
    );
    if (changed.length === 0) {
      this.#print.err("cuda-checkpoint: interrupted: every process is as it was before");
      return;
    }
    const each = changed.map((o) =>
      `${o.pid} ${
        isGone(o.error) || isGone(o.rollback?.error) ? "gone" : o.state ?? "in an unknown state"
      }${o.initialState === undefined ? "" : ` (was ${o.initialState})`}`
    );
    this.#print.err(`cuda-checkpoint: interrupted: left changed: ${each.join(", ")}`);
  }
}
