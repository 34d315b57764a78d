/**
 * An operation on one pid through `CudaProcess`, as NVIDIA's utility makes it (the driver's rules:
 * a lock of a locked process is an error; its output and error lines), but a restore that would
 * not fit in the free GPU memory is refused first (driver 580 loses such a process).
 *
 * @module
 */

import type { OperationCommand } from "./args.ts";
import { CudaProcess, type Outcome } from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { Step } from "../types.ts";
import { sessionOf } from "../core/process.ts";
import { clockOf, roundMs } from "../core/time.ts";
import { errorReport, type PidReport, type Printer, printReports } from "./report.ts";
import { type Progress, progressOf } from "./progress.ts";

/** Runs a command that changes the state of one pid (not 0), prints its output, gives the exit code. */
export async function runOne(
  command: OperationCommand,
  pid: number,
  machine: Machine,
  print: Printer,
): Promise<number> {
  const operation = command.operation as Exclude<OperationCommand["operation"], `get-${string}`>;
  const progress = progressOf(print, command.json, machine, {
    total: 1,
    labels: { [operation]: `${operation} ${pid}` },
  });
  const proc = new CudaProcess(pid, { machine });
  const clock = clockOf(machine); // the simulator's virtual time, as the group operations measure it
  const start = clock.now();
  let report: PidReport | undefined;
  let step: Step | undefined;
  try {
    if (progress) step = await begin(progress, proc, machine, operation);
    const { state, roomCheck } = await act(proc, command);
    const ms = roundMs(clock.now() - start);
    report = { pid, operation, ok: true, state, status: "done", ms, roomCheck };
  } catch (error) {
    const ms = roundMs(clock.now() - start);
    const state = await proc.state().catch(() => undefined); // where the failed step left it
    const e = errorReport(operation, pid, error);
    report = { pid, operation, ok: false, state, status: "failed", ms, error: e };
  } finally {
    if (step && report) {
      const { ok, status = "failed" } = report;
      const ms = clock.now() - start;
      progress!.event({ type: "step-end", pid, step, at: 0, ms, ok, rollback: false });
      progress!.event({ type: "process-end", pid, at: 0, status });
    }
    progress?.stop();
    await proc.close();
  }
  return printReports([report!], print, command.json, false);
}

/**
 * Tells `progress` the operation and its driver step (a toggle's, as the state says) with the GPU
 * memory it moves: what the host sees the process hold (NVML), else its checkpoint's record.
 */
async function begin(progress: Progress, proc: CudaProcess, machine: Machine, operation: string) {
  const pid = proc.pid;
  const session = sessionOf(machine);
  const sum = (m: Readonly<Record<string, number>>) => Object.values(m).reduce((a, b) => a + b, 0);
  const report = await session.room.report().catch(() => undefined);
  const held = report && "byPid" in report ? report.byPid.get(pid) : undefined;
  let mib = held && held !== "unknown" && sum(held) > 0 ? sum(held) : undefined;
  if (mib === undefined) {
    const identity = await session.identify(pid).catch(() => undefined);
    const record = identity && await session.room.record(identity).catch(() => undefined);
    if (record) mib = sum(record.heldMiB);
  }
  const now = operation === "toggle" ? await proc.state().catch(() => "running") : undefined;
  const step = (now ? (now === "checkpointed" ? "restore" : "checkpoint") : operation) as Step;
  progress.event({ type: "phase", phase: operation, at: 0 });
  progress.event({ type: "step-start", pid, step, at: 0, ...(mib ? { gpuMemoryMiB: mib } : {}) });
  return step;
}

/** The command's call: as NVIDIA's utility, a lock without a timeout unless one is given. */
function act(proc: CudaProcess, command: OperationCommand): Promise<Outcome> {
  const { checkRoom, allowIpcImport, gpuMapping } = command; // left out where undefined
  switch (command.operation) {
    case "lock":
      return proc.lock({ timeoutMs: command.timeoutMs ?? 0 });
    case "checkpoint":
      return proc.checkpoint({ checkRoom, allowIpcImport });
    case "restore":
      return proc.restore({ checkRoom, gpuMapping });
    case "unlock":
      return proc.unlock();
    default:
      return proc.toggle({ timeoutMs: 0, checkRoom, allowIpcImport, gpuMapping });
  }
}
