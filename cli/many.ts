/**
 * An operation on several pids, or on every CUDA process (`--all`): all at once, through the group
 * operations (`runGroup`: a step, or `toggle`), a `<pid> <result>` line each, exit 1 if any failed;
 * a step the driver refuses fails, as with one pid, and `--all-or-nothing` brings the others back.
 * An interrupt (SIGINT, SIGTERM, SIGHUP) stops the group: no new step starts, each process the
 * command changed is brought back once its step inside the driver ends, one more line says what
 * was left changed, and the exit code is 128 + the signal's number; a second exits at once, naming
 * the steps still inside the driver. One pid keeps NVIDIA's default: the interrupt ends it.
 *
 * @module
 */

import type { CliOperation, OperationCommand } from "./args.ts";
import { type GroupResult, listCudaProcesses, type ProcessOutcome, runGroup } from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { Action, GroupEvent, StepRecord } from "../types.ts";
import { roundMs } from "../core/time.ts";
import { isGone } from "../core/process.ts";
import { type Interrupts, watchInterrupts } from "./io.ts";
import { progressOf } from "./progress.ts";
import {
  errorReport,
  type PidReport,
  type Printer,
  printReports,
  query,
  warnUninspectable,
} from "./report.ts";

/** Runs the command on several pids (or all), prints a line each, resolves to the exit code. */
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
  const { operation, json } = command;
  if (operation === "get-state" || operation === "get-restore-tid") {
    const reports = await Promise.all(pids.map((p) => query(operation, p, machine.driver)));
    return printReports(reports, print, json, true);
  }
  const acting = pids.length > 0;
  const expect = operation === "restore" ? "restore" : "checkpoint";
  const progress = acting
    ? progressOf(print, json, machine, { total: pids.length, expect })
    : undefined;
  progress?.event({ type: "phase", phase: operation, at: 0 });
  const underWay = new Map<number, string>(); // for a second interrupt to name
  const sim = simulated ? " --simulate" : "";
  const watch = acting && interrupts
    ? watchInterrupts(interrupts, print, {
      simulated,
      meanwhile: "no new step starts, and each process this command changed is brought back " +
        "once its step inside the driver ends (interrupt again to exit without waiting)",
      leftBehind: () => {
        const under = [...underWay].map(([pid, step]) => `${pid} (${step})`).join(", ");
        return [
          ` for the driver${under ? `; still under way, their state unknown: ${under}` : ""}`,
          `check each process with: cuda-checkpoint --get-state --pid ${pids}${sim}`,
        ];
      },
    })
    : undefined;
  const onProgress = (event: GroupEvent) => {
    if (event.type === "step-start") underWay.set(event.pid, event.step);
    else if (event.type === "step-end") underWay.delete(event.pid);
    progress?.event(event);
  };
  // NVIDIA's utility hands pid 0 to the driver, which says no process has it; so does this, and
  // the group works on the others.
  const members = pids.filter((pid) => pid !== 0);
  const { allOrNothing, job, checkRoom, allowIpcImport, gpuMapping } = command; // or the default
  const options = { machine, allOrNothing, job, checkRoom, allowIpcImport, gpuMapping };
  let result: GroupResult, zero: PidReport | undefined;
  try {
    result = await runGroup(operation as Action, members, {
      ...options,
      lockTimeoutMs: command.timeoutMs ?? 0, // as with one pid: no timeout unless given
      ...(progress || watch ? { onProgress, gpuMemory: progress !== undefined } : {}),
      ...(watch ? { signal: watch.signal, rollBackOnAbort: true } : {}),
    });
    zero = pids.includes(0) ? await query(operation, 0, machine.driver) : undefined;
  } finally {
    progress?.stop();
    watch?.stop();
  }
  const reports = pids.map((pid) =>
    pid === 0 ? zero! : fromOutcome(operation, result.processes[members.indexOf(pid)])
  );
  const code = printReports(reports, print, json, true);
  if (!watch?.signal.aborted) return code;
  print.err(`cuda-checkpoint: interrupted: ${leftChanged(result.processes)}`);
  return watch.exitCode(code);
}

/** A group's outcome for one process, as reported (undefined keys are left out of its JSON). */
function fromOutcome(operation: CliOperation, o: ProcessOutcome): PidReport {
  const { pid, status, rollback } = o;
  const steps = ({ steps }: { steps: readonly StepRecord[] }) =>
    steps.map(({ step, ms, ok }) => ({ step, ms, ok }));
  return {
    pid,
    operation,
    ok: status === "done" || status === "unchanged",
    // A process that failed before any step (its state has no way to the action's) is as it was.
    state: o.state ?? (status === "failed" && o.steps.length === 0 ? o.initialState : undefined),
    status,
    reason: o.notStarted ?? o.stopped,
    ms: roundMs([...o.steps, ...(rollback?.steps ?? [])].reduce((sum, s) => sum + s.ms, 0)),
    steps: steps(o),
    error: o.error && errorReport(operation, pid, o.error),
    roomCheck: o.roomCheck,
    rollback: rollback && {
      ok: rollback.ok,
      steps: steps(rollback),
      error: rollback.error && errorReport(operation, pid, rollback.error),
    },
  };
}

/** What an interrupted command left changed: each such process's state, or that none is. */
function leftChanged(outcomes: readonly ProcessOutcome[]): string {
  const changed = outcomes.filter((o) =>
    o.status !== "not-started" &&
    !(o.status === "failed" && o.steps.length === 0 && o.rollback === undefined) &&
    (o.initialState === undefined || o.state !== o.initialState)
  );
  if (changed.length === 0) return "every process is as it was before";
  return `left changed: ${
    changed.map((o) => {
      const gone = isGone(o.error) || isGone(o.rollback?.error);
      const was = o.initialState === undefined ? "" : ` (was ${o.initialState})`;
      return `${o.pid} ${gone ? "gone" : o.state ?? "in an unknown state"}${was}`;
    }).join(", ")
  }`;
}
