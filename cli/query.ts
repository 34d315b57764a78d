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
import { C_FUNCTIONS, type DriverOperation, unsupportedError } from "../core/gate.ts";
import { stateName } from "../core/states.ts";
import { errorReport, type PidReport, type Printer, printOne } from "./report.ts";

/** The driver call behind each operation, as this path makes it. */
const CALL: Readonly<Record<CliOperation, DriverOperation>> = {
  "get-state": "getState",
  "get-restore-tid": "getRestoreThreadId",
  toggle: "getState",
  lock: "lock",
  checkpoint: "checkpoint",
  restore: "restore",
  unlock: "unlock",
};

/** Makes the operation's one driver call on `pid`, prints what came of it, resolves to the exit code. */
export async function runQuery(
  operation: CliOperation,
  pid: number,
  driver: CheckpointDriver,
  print: Printer,
  json: boolean,
): Promise<number> {
  return printOne(await query(operation, pid, driver), print, json);
}

/** Makes the operation's one driver call on `pid` and says what came of it; never rejects. */
export async function query(
  operation: CliOperation,
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  const call = CALL[operation];
  const fail = (error: unknown): PidReport => ({
    pid,
    operation,
    ok: false,
    error: errorReport(operation, pid, error),
  });
  if (driver.missingFunctions?.includes(C_FUNCTIONS[call])) {
    const version = await driver.driverVersion();
    return fail(unsupportedError(call, pid, version, { missing: C_FUNCTIONS[call] }));
  }
  let result: DriverResult;
  try {
    result = await ask(driver, call, pid);
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

/** The driver call, as a {@link DriverResult}. */
async function ask(
  driver: CheckpointDriver,
  call: DriverOperation,
  pid: number,
): Promise<DriverResult> {
  switch (call) {
    case "getState":
      return await driver.getState(pid);
    case "getRestoreThreadId":
      return await driver.getRestoreThreadId(pid);
    case "lock":
      return { code: await driver.lock(pid, { timeoutMs: 0 }), value: 0 };
    case "restore":
      return { code: await driver.restore(pid, null), value: 0 };
    default:
      return { code: await driver[call](pid), value: 0 };
  }
}
