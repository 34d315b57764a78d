/**
 * The command line's fast path: `--get-state` and `--get-restore-tid` of one pid are one driver
 * call each, made here through the one way to call the driver (`core/calls.ts`) without a
 * session, a host or a queue (nothing else runs in this program), so that the program loads
 * little before it answers. Also any operation on pid 0, which NVIDIA's utility hands to the
 * driver as it is (the driver answers that no process has it).
 *
 * @module
 */

import type { CliOperation } from "./args.ts";
import { callDriver, stateOf } from "../core/calls.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import { errorReport, type PidReport } from "./report.ts";

/** Makes the operation's one driver call on `pid` and says what came of it; never rejects. */
export async function query(
  operation: CliOperation,
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  try {
    if (operation === "get-restore-tid") {
      const restoreThreadId = await callDriver(driver, "getRestoreThreadId", pid);
      return { pid, operation, ok: true, restoreThreadId };
    }
    if (operation === "get-state" || operation === "toggle") {
      const state = stateOf(await callDriver(driver, "getState", pid), pid);
      if (operation === "get-state") return { pid, operation, ok: true, state };
    } else {
      await callDriver(driver, operation, pid, operation === "lock" ? { timeoutMs: 0 } : null);
    }
    // Only pid 0 comes here, and the driver knows no process 0: this is not reached on a driver
    // that keeps to the seam's rules.
    throw new Error(`the driver answered CUDA_SUCCESS for ${operation} of process ${pid}`);
  } catch (error) {
    return { pid, operation, ok: false, error: errorReport(operation, pid, error) };
  }
}
