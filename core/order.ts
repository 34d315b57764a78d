/**
 * One operation at a time per process: operations on the same pid through the same driver run
 * one after another, in the order they were asked for. The real driver serialises calls on a
 * process as well (a call made during a checkpoint waits for it, then acts on the state it left),
 * but a composite operation such as `suspend()` is several driver calls, and without a queue a
 * second operation could slip in between them.
 *
 * @module
 */

import type { CheckpointDriver } from "./driver.ts";

/** The last operation queued for each pid, per driver. */
const tails = new WeakMap<CheckpointDriver, Map<number, Promise<unknown>>>();

/**
 * Runs `operation` once every operation queued before it for the same `pid` on the same `driver`
 * has settled (resolved or rejected), and resolves or rejects as it does.
 *
 * @example
 * ```ts
 * import { inProcessOrder } from "./order.ts";
 * import type { CheckpointDriver } from "./driver.ts";
 * declare const driver: CheckpointDriver;
 * const a = inProcessOrder(driver, 42, () => driver.lock(42, { timeoutMs: 1000 }));
 * const b = inProcessOrder(driver, 42, () => driver.checkpoint(42)); // starts when a settles
 * ```
 */
export function inProcessOrder<T>(
  driver: CheckpointDriver,
  pid: number,
  operation: () => Promise<T>,
): Promise<T> {
  let byPid = tails.get(driver);
  if (!byPid) tails.set(driver, byPid = new Map());
  const before = byPid.get(pid);
  const run = before ? before.then(operation, operation) : operation();
  // The queue holds a promise that never rejects, so that one failure does not fail the rest.
  const tail = run.then(() => {}, () => {});
  byPid.set(pid, tail);
  tail.then(() => {
    if (byPid.get(pid) === tail) byPid.delete(pid);
  });
  return run;
}

/** How many pids have operations queued or running on `driver` (for tests). */
export function queuedPids(driver: CheckpointDriver): number {
  return tails.get(driver)?.size ?? 0;
}
