/**
 * The command line's fast path: `--get-state` and `--get-restore-tid` of one pid are one driver
 * call each, made here without `CudaProcess` (no session, no host, no queue: nothing else runs in
 * this program), so that the program loads little before it answers. Also any operation on pid 0,
 * which NVIDIA's utility hands to the driver as it is (the driver answers that no process has it).
 *
 * @module
 */

import type { CliOperation } from "./args.ts";
import { CUDA_SUCCESS } from "../core/codes.ts";
import type { CheckpointDriver, DriverResult } from "../core/driver.ts";
import { driverError } from "../core/errors.ts";
import { checkCapability, type DriverOperation } from "../core/gate.ts";
import { stateName } from "../core/states.ts";
import { errorReport, type PidReport } from "./report.ts";

/** Makes the operation's one driver call on `pid` and says what came of it; never rejects. */
export async function query(
  operation: CliOperation,
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  // The driver call behind the operation, as this path makes it (a toggle asks the state).
  const call: DriverOperation = operation === "get-restore-tid"
    ? "getRestoreThreadId"
    : operation === "get-state" || operation === "toggle"
    ? "getState"
    : operation;
  const fail = (error: unknown): PidReport => ({
    pid,
    operation,
    ok: false,
    error: errorReport(operation, pid, error),
  });
  let result: DriverResult;
  try {
    await checkCapability(driver, call, pid);
    result = call === "getState" || call === "getRestoreThreadId" ? await driver[call](pid) : {
      code: await (call === "lock"
        ? driver.lock(pid, { timeoutMs: 0 })
        : call === "restore"
        ? driver.restore(pid, null)
        : driver[call](pid)),
      value: 0,
    };
  } catch (error) {
    return fail(error);
  }
  if (result.code !== CUDA_SUCCESS) {
    return fail(driverError(driver, result.code, { operation: call, pid }));
  }
  if (operation === "get-restore-tid") {
    return { pid, operation, ok: true, restoreThreadId: result.value };
  }
  if (operation !== "get-state") {
    // Only pid 0 comes here, and the driver knows no process 0: this is not reached on a driver
    // that keeps to the seam's rules.
    return fail(new Error(`the driver answered CUDA_SUCCESS for ${call} of process ${pid}`));
  }
  const state = stateName(result.value);
  if (state === undefined) {
    return fail(
      new RangeError(
        `getState of process ${pid} gave state ${result.value}, which this version of ` +
          `@ckpt/cuda does not know (a newer driver's)`,
      ),
    );
  }
  return { pid, operation, ok: true, state };
}
