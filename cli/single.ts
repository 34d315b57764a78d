/**
 * An operation on one pid, as NVIDIA's utility makes it: the driver's own rules (a lock of a
 * locked process is an error), its output (`running`, a thread id, nothing for a step that
 * succeeded) and its error lines. One difference on purpose: a restore (or the resume of a
 * toggle) that would not fit in the free GPU memory, as this package recorded what the process
 * held when a program of it checkpointed the process, is refused before the driver is asked; on
 * driver 580 the driver's own out-of-memory restore loses the process.
 *
 * @module
 */

import type { CliOperation, OperationCommand } from "./args.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import { clockOf, CudaProcess, type Outcome } from "../core/process.ts";
import type { ProgressLine } from "./progress.ts";
import { errorReport, type PidReport, type Printer, printOne } from "./report.ts";

/** The operations that change a process's state (the queries go through `query.ts`). */
export type StepOperation = Exclude<CliOperation, "get-state" | "get-restore-tid">;

/**
 * Runs a state-changing command on one pid, prints NVIDIA's output for it, and resolves to the
 * exit code. (Queries, and anything of pid 0, go through `query.ts`.)
 */
export async function runOne(
  command: OperationCommand & { readonly operation: StepOperation },
  pid: number,
  driver: CheckpointDriver,
  print: Printer,
): Promise<number> {
  let progress: ProgressLine | undefined;
  if (print.terminal) {
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
  return printOne(report, print, command.json);
}

/** Makes the operation on one pid and says what became of it; never rejects. */
async function operateOne(
  command: Pick<OperationCommand, "timeoutMs" | "gpuMapping"> & { operation: StepOperation },
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  const operation = command.operation;
  const proc = new CudaProcess(pid, { driver });
  // The driver's clock: the simulator's virtual time, as the group operations measure it.
  const clock = clockOf(driver);
  const start = clock.now();
  const ms = () => Math.round((clock.now() - start) * 1000) / 1000;
  try {
    const mapping = command.gpuMapping ? { gpuMapping: command.gpuMapping } : {};
    let outcome: Outcome;
    switch (operation) {
      case "lock":
        // NVIDIA's utility locks without a timeout unless --timeout is given (CRIU leaves it out
        // for "no timeout").
        outcome = await proc.lock({ timeoutMs: command.timeoutMs ?? 0 });
        break;
      case "checkpoint":
        outcome = await proc.checkpoint();
        break;
      case "restore":
        outcome = await proc.restore(mapping);
        break;
      case "unlock":
        outcome = await proc.unlock();
        break;
      case "toggle":
        outcome = await proc.toggle({ timeoutMs: 0, ...mapping });
        break;
    }
    return {
      pid,
      operation,
      ok: true,
      state: outcome.state,
      status: "done",
      ms: ms(),
      ...(outcome.roomCheck !== undefined ? { roomCheck: outcome.roomCheck } : {}),
    };
  } catch (error) {
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
      error: errorReport(operation, pid, error),
    };
  } finally {
    await proc.close();
  }
}
