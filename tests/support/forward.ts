// A driver that forwards every call to another (bound, so private fields keep working), with some
// calls replaced: for tests that need a driver which misbehaves in one way, or counts calls.
import type { CheckpointDriver } from "../../core/driver.ts";

/**
 * `driver`'s methods, bound to it, with `replaced` put in their place. No `listGpus`. Its host
 * (the simulator's processes and records) is forwarded where it has one, so that nothing falls
 * back to this machine's /proc.
 */
export function forward(
  driver: CheckpointDriver,
  replaced: Partial<CheckpointDriver> = {},
): CheckpointDriver {
  return {
    ...(driver.hostProcesses ? { hostProcesses: () => driver.hostProcesses!() } : {}),
    kind: driver.kind,
    driverVersion: () => driver.driverVersion(),
    getState: (pid) => driver.getState(pid),
    getRestoreThreadId: (pid) => driver.getRestoreThreadId(pid),
    lock: (pid, args) => driver.lock(pid, args),
    checkpoint: (pid) => driver.checkpoint(pid),
    restore: (pid, args) => driver.restore(pid, args),
    unlock: (pid) => driver.unlock(pid),
    errorName: (code) => driver.errorName(code),
    errorString: (code) => driver.errorString(code),
    ...replaced,
  };
}
