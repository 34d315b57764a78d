/**
 * Operations on processes. One pid, through `CudaProcess`, as NVIDIA's utility makes it (the
 * driver's rules: a lock of a locked process is an error; its output and error lines), but a
 * restore that would not fit in the free GPU memory is refused first (driver 580 loses such a
 * process). Several pids, or every CUDA process (`--all`): all at once, through the group
 * operations (`runGroup`: a step, or `toggle`), a `<pid> <result>` line each, exit 1 if any failed;
 * a step the driver refuses fails, as with one pid, and `--all-or-nothing` brings the others back.
 * An interrupt (SIGINT, SIGTERM, SIGHUP) stops the group: no new step starts, each process the
 * command changed is brought back once its step inside the driver ends, one more line says what
 * was left changed, and the exit code is 128 + the signal's number; a second exits at once, naming
 * the steps still inside the driver. One pid keeps NVIDIA's default: the interrupt ends it (on
 * `--simulate`, once its step ends, saved). And `list` (or `ps`): the CUDA processes of the
 * machine, as a table or as JSON lines.
 *
 * @module
 */

import { type CliOperation, type OperationCommand, UsageError } from "./command.ts";
import { CudaProcess, listCudaProcesses, runGroup } from "../mod.ts";
import type { GroupResult, ProcessOutcome } from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { Action, GroupEvent } from "../types.ts";
import { clockOf, roundMs } from "../core/time.ts";
import { isGone, sessionOf } from "../core/process.ts";
import { act, settingsOf, stepEvents } from "../core/action.ts";
import { handleOf } from "../api/cuda_process.ts";
import { type Interrupts, type Signal, watchInterrupts } from "./io.ts";
import { type Progress, progressOf } from "./progress.ts";
import { errorReport, printReports, query, warnUninspectable } from "./report.ts";
import type { PidReport, Printer } from "./report.ts";
import type { SavedMachine } from "./simulate.ts";

/** Runs a state-changing command on one pid (not 0), prints its output, gives the exit code. */
export async function runOne(
  command: OperationCommand,
  pid: number,
  machine: Machine,
  print: Printer,
  interrupts?: Interrupts,
  simulated?: SavedMachine,
): Promise<number> {
  const { operation } = command;
  const labels = { [operation]: `${operation} ${pid}` };
  const progress = await progressOf(print, command.events, machine, { total: 1, labels });
  // As NVIDIA's does, an interrupt ends it by the signal (a shell's loop stops): its line erased;
  // a simulated machine (watched so) is first left as a killed caller leaves the driver, and saved.
  const end = async (s: Signal = "SIGINT") => {
    unwatch?.();
    await progress?.stop(); // its line erased, and drawn no more while a simulated step ends
    await simulated?.machine.callerGone();
    await simulated?.save().catch((error) => print.error(error)).finally(simulated.close);
    interrupts!.raise!(s);
  };
  const watched = (print.terminal || simulated) && interrupts?.raise;
  const unwatch = watched ? interrupts!.watch(end) : undefined;
  const proc = new CudaProcess(pid, { machine });
  const clock = clockOf(machine), start = clock.now(); // the simulator's virtual time, as a group's
  let report: PidReport | undefined;
  try {
    const hooks = progress && await hooksOf(progress, machine, pid, operation);
    // Not a query (main.ts: one call each); as NVIDIA's utility, no lock timeout unless given.
    const { checkRoom, allowIpcImport, gpuMapping } = command, action = operation as Action;
    const timeoutMs = operation === "lock" ? command.timeoutMs ?? 0 : 0;
    const keys = ["timeoutMs", "checkRoom", "allowIpcImport", "gpuMapping"] as const;
    const settings = settingsOf({ timeoutMs, checkRoom, allowIpcImport, gpuMapping }, action, keys);
    const { state, roomCheck, steps } = await act(handleOf(proc), action, settings, hooks);
    const ms = roundMs(clock.now() - start);
    report = { pid, operation, ok: true, state, status: "done", ms, roomCheck, steps };
  } catch (error) {
    const ms = roundMs(clock.now() - start);
    const state = await proc.state().catch(() => undefined); // where the failed step left it
    const e = errorReport(operation, pid, error);
    report = { pid, operation, ok: false, state, status: "failed", ms, error: e };
  } finally {
    progress?.event({ type: "process-end", pid, at: 0, status: report?.ok ? "done" : "failed" });
    unwatch?.(); // the command is done: keeping its rates is no work to stop
    await progress?.stop();
    await proc.close();
  }
  return printReports([report!], print, command.json, false);
}

/**
 * Tells `progress` the operation; the hooks tell it each driver step, with the GPU memory it moves:
 * what the host sees the process hold (NVML), else its checkpoint's record.
 */
async function hooksOf(progress: Progress, machine: Machine, pid: number, operation: string) {
  const session = sessionOf(machine), room = session.room;
  const report = await room.report().catch(() => undefined);
  const identity = await session.identify(pid) ?? { pid };
  const mib = await room.totalMiB(identity, report).catch(() => undefined);
  progress.event({ type: "phase", phase: operation, at: 0 });
  return stepEvents(pid, (e) => progress.event(e), mib ? { gpuMemoryMiB: mib } : {});
}

/** Runs the command on several pids (or all), prints a line each, resolves to the exit code. */
export async function runMany(
  command: OperationCommand,
  machine: Machine,
  print: Printer,
  interrupts?: Interrupts,
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
    ? await progressOf(print, command.events, machine, { total: pids.length, expect })
    : undefined;
  progress?.event({ type: "phase", phase: operation, at: 0 });
  const underWay = new Map<number, string>(); // for a second interrupt to name
  const watch = acting && interrupts
    ? watchInterrupts(interrupts, print, {
      simulated: command.simulate,
      meanwhile: "no new step starts, and each process this command changed is brought back " +
        "once its step inside the driver ends (interrupt again to exit without waiting)",
      leftBehind: () => {
        const under = [...underWay].map(([pid, step]) => `${pid} (${step})`).join(", ");
        return [
          ` for the driver${under ? `, which finishes its steps all the same: ${under}` : ""}`,
          `check each process with: cuda-checkpoint --get-state --pid ${pids}`,
        ];
      },
    })
    : undefined;
  const onProgress = (event: GroupEvent) => {
    if (event.type === "step-start") underWay.set(event.pid, event.step);
    else if (event.type === "step-end") underWay.delete(event.pid);
    progress?.event(event);
  };
  // Pid 0 goes to the driver (which says no process has it), as NVIDIA's utility sends it.
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
  } catch (error) {
    // The pids, as the library found them (a pid and a thread id of it): nothing was done.
    throw error instanceof RangeError ? new UsageError(error.message) : error;
  } finally {
    watch?.stop();
    await progress?.stop();
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
  const { pid, rollback } = o, failedBack = o.status === "rolled-back" && !rollback?.ok;
  const status = failedBack ? "rollback-failed" : o.status; // as the text line says it
  return {
    pid,
    operation,
    ok: status === "done" || status === "unchanged",
    // A process that failed before any step (its state has no way to the action's) is as it was.
    state: o.state ?? (status === "failed" && o.steps.length === 0 ? o.initialState : undefined),
    status,
    reason: o.notStarted ?? o.stopped,
    ms: roundMs([...o.steps, ...(rollback?.steps ?? [])].reduce((sum, s) => sum + s.ms, 0)),
    steps: o.steps,
    error: o.error && errorReport(operation, pid, o.error),
    roomCheck: o.roomCheck,
    rollback: rollback &&
      { ...rollback, error: rollback.error && errorReport(operation, pid, rollback.error) },
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
  const states = changed.map((o) => {
    const gone = isGone(o.error) || isGone(o.rollback?.error);
    const was = o.initialState === undefined ? "" : ` (was ${o.initialState})`;
    return `${o.pid} ${gone ? "gone" : o.state ?? "in an unknown state"}${was}`;
  });
  return `left changed: ${states.join(", ")}`;
}

/** Prints the listing; resolves to the exit code. */
export async function runList(machine: Machine, print: Printer, json: boolean): Promise<number> {
  const listing = await listCudaProcesses({ machine }).catch((error) => print.error(error));
  if (!listing) return 1;
  if (json) {
    // GPU memory in MiB by GPU UUID (`"unknown"` without NVML); what else is unknown, left out.
    for (const { pid, state, restoreThreadId, gpuMemory, command } of listing.processes) {
      print.json({ pid, state, restoreThreadId, gpuMemoryMiB: gpuMemory, command });
    }
  } else {
    // Each column as wide as its widest cell; GPU memory in MiB, with each GPU's share of several.
    const rows = [["PID", "STATE", "RESTORE_TID", "GPU_MEMORY", "COMMAND"]];
    for (const p of listing.processes) {
      const mib = p.gpuMemory === "unknown" ? [] : Object.values(p.gpuMemory).map(Math.round);
      const shares = mib.length > 1 ? ` (${mib.join("+")})` : "";
      const total = `${mib.reduce((a, b) => a + b, 0)} MiB${shares}`;
      const memory = p.gpuMemory === "unknown" ? "unknown" : total;
      rows.push([`${p.pid}`, p.state, `${p.restoreThreadId ?? "-"}`, memory, p.command ?? "-"]);
    }
    const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
    for (const row of rows) {
      print.out(row.map((cell, i) => i === 4 ? cell : cell.padEnd(widths[i])).join("  ").trimEnd());
    }
  }
  warnUninspectable(listing.uninspectable, print);
  if (listing.gpuMemoryUnknown) print.more(`GPU memory is unknown: ${listing.gpuMemoryUnknown}`);
  return 0;
}
