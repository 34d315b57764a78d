/**
 * An operation on one pid, as NVIDIA's utility makes it: the driver's own rules (a lock of a
 * locked process is an error), its output (`running`, a thread id, nothing for a step that
 * succeeded) and its error lines. Also what the operations on several pids use to ask each pid's
 * state or restore thread.
 *
 * @module
 */

import type { CliOperation, OperationCommand } from "./args.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import type { ProcessState } from "../core/codes.ts";
import { clockOf, CudaProcess } from "../core/process.ts";
import type { ProgressLine } from "./progress.ts";
import { errorReport, type PidReport, type Printer } from "./report.ts";

/** The state each step leaves a process in. */
const AFTER: Readonly<Record<string, ProcessState>> = {
  lock: "locked",
  checkpoint: "checkpointed",
  restore: "locked",
  unlock: "running",
};

/** Runs the command on one pid, prints NVIDIA's output for it, and resolves to the exit code. */
export async function runOne(
  command: OperationCommand,
  pid: number,
  driver: CheckpointDriver,
  print: Printer,
): Promise<number> {
  const long = command.operation !== "get-state" && command.operation !== "get-restore-tid";
  let progress: ProgressLine | undefined;
  if (long && print.terminal) {
    const { ProgressLine } = await import("./progress.ts");
    progress = new ProgressLine({ write: (t) => print.raw(t), total: 1 });
    progress.event({ type: "step-start", pid, step: command.operation });
  }
  let report: PidReport;
  try {
    report = await operateOne(command, pid, driver);
  } finally {
    progress?.stop();
  }
  if (command.json) print.json(report);
  else if (report.ok && report.state !== undefined && command.operation === "get-state") {
    print.out(report.state);
  } else if (report.ok && report.restoreThreadId !== undefined) {
    print.out(String(report.restoreThreadId));
  }
  if (report.error) print.failure(report.error);
  return report.ok ? 0 : 1;
}

/** Makes the operation on one pid and says what became of it; never rejects. */
export async function operateOne(
  command: Pick<OperationCommand, "operation" | "timeoutMs" | "gpuMapping">,
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  const operation: CliOperation = command.operation;
  const proc = new CudaProcess(pid, { driver });
  // The driver's clock: the simulator's virtual time, as the group operations measure it.
  const clock = clockOf(driver);
  const start = clock.now();
  const ms = () => Math.round((clock.now() - start) * 1000) / 1000;
  try {
    if (operation === "get-state") return { pid, operation, ok: true, state: await proc.state() };
    if (operation === "get-restore-tid") {
      return { pid, operation, ok: true, restoreThreadId: await proc.restoreThreadId() };
    }
    const mapping = command.gpuMapping ? { gpuMapping: command.gpuMapping } : {};
    let state: ProcessState;
    switch (operation) {
      case "lock":
        // NVIDIA's utility locks without a timeout unless --timeout is given (CRIU leaves it out
        // for "no timeout").
        await proc.lock({ timeoutMs: command.timeoutMs ?? 0 });
        break;
      case "checkpoint":
        await proc.checkpoint();
        break;
      case "restore":
        await proc.restore(mapping);
        break;
      case "unlock":
        await proc.unlock();
        break;
    }
    if (operation === "toggle") state = await proc.toggle({ timeoutMs: 0, ...mapping });
    else state = AFTER[operation];
    return { pid, operation, ok: true, state, status: "done", ms: ms() };
  } catch (error) {
    const report = errorReport(operation, pid, error);
    if (operation === "get-state" || operation === "get-restore-tid") {
      return { pid, operation, ok: false, error: report };
    }
    const took = ms();
    // Where the failed step left the process, for --json.
    const state = await proc.state().catch(() => undefined);
    return {
      pid,
      operation,
      ok: false,
      ...(state ? { state } : {}),
      status: "failed",
      ms: took,
      error: report,
    };
  } finally {
    await proc.close();
  }
}
