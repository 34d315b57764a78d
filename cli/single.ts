/**
 * An operation on one pid, as NVIDIA's utility makes it, through the public `CudaProcess`: the
 * driver's own rules (a lock of a locked process is an error), its output (`running`, a thread
 * id, nothing for a step that succeeded) and its error lines. One difference on purpose: a restore
 * (or the resume of a toggle) that would not fit in the free GPU memory, as this package recorded
 * what the process held when a program of it checkpointed the process, is refused before the
 * driver is asked; on driver 580 the driver's own out-of-memory restore loses the process.
 *
 * @module
 */

import type { OperationCommand } from "./args.ts";
import { CudaProcess, type Outcome } from "../mod.ts";
import type { Machine } from "../driver.ts";
import { clockOf, roundMs } from "../core/time.ts";
import { errorReport, type PidReport, type Printer, printReports } from "./report.ts";

/**
 * Runs a state-changing command on one pid, prints NVIDIA's output for it, and resolves to the
 * exit code. (Queries, and anything of pid 0, go through `query.ts`.)
 */
export async function runOne(
  command: OperationCommand,
  pid: number,
  machine: Machine,
  print: Printer,
): Promise<number> {
  const operation = command.operation as Exclude<OperationCommand["operation"], `get-${string}`>;
  let progress;
  if (print.terminal) {
    const { ProgressLine } = await import("./progress.ts");
    progress = new ProgressLine({ write: (t) => print.raw(t), total: 1 });
    progress.event({ type: "step-start", pid, step: operation });
  }
  const proc = new CudaProcess(pid, { machine });
  // The machine's clock: the simulator's virtual time, as the group operations measure it.
  const clock = clockOf(machine);
  const start = clock.now();
  let report: PidReport;
  try {
    const outcome = await act(proc, command);
    report = {
      pid,
      operation,
      ok: true,
      state: outcome.state,
      status: "done",
      ms: roundMs(clock.now() - start),
      ...(outcome.roomCheck !== undefined ? { roomCheck: outcome.roomCheck } : {}),
    };
  } catch (error) {
    const ms = roundMs(clock.now() - start);
    // Where the failed step left the process, for --json.
    const state = await proc.state().catch(() => undefined);
    report = {
      pid,
      operation,
      ok: false,
      ...(state ? { state } : {}),
      status: "failed",
      ms,
      error: errorReport(operation, pid, error),
    };
  } finally {
    progress?.stop();
    await proc.close();
  }
  return printReports([report], print, command.json, false);
}

/**
 * The command's call: NVIDIA's utility locks without a timeout unless --timeout is given (CRIU
 * leaves it out for "no timeout"); its toggle, never.
 */
function act(proc: CudaProcess, command: OperationCommand): Promise<Outcome> {
  const checkRoom = command.checkRoom ?? true;
  const gpuMapping = command.gpuMapping;
  const allowIpcImport = command.allowIpcImport ?? false;
  switch (command.operation) {
    case "lock":
      return proc.lock({ timeoutMs: command.timeoutMs ?? 0 });
    case "checkpoint":
      return proc.checkpoint({ checkRoom, allowIpcImport });
    case "restore":
      return proc.restore({ checkRoom, ...(gpuMapping ? { gpuMapping } : {}) });
    case "unlock":
      return proc.unlock();
    default:
      return proc.toggle({
        timeoutMs: 0,
        checkRoom,
        allowIpcImport,
        ...(gpuMapping ? { gpuMapping } : {}),
      });
  }
}
