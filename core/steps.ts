/**
 * The steps of the checkpoint state machine: lock takes a running process to locked, checkpoint
 * a locked one to checkpointed, restore a checkpointed one back to locked, unlock a locked one to
 * running. Nothing leaves the failed state. What a rollback needs to find its way back from
 * wherever a failure left a process.
 *
 * @module
 */

import type { ProcessState } from "./codes.ts";

/** One driver call that changes a process's state. */
export type Step = "lock" | "checkpoint" | "restore" | "unlock";

/** The states a process goes through, in the order lock and checkpoint take it. */
const CHAIN: readonly ProcessState[] = ["running", "locked", "checkpointed"];
/** The step from each state of {@link CHAIN} to the next one, and back to the one before. */
const FORWARD: readonly Step[] = ["lock", "checkpoint"];
const BACKWARD: readonly Step[] = ["unlock", "restore"];

/**
 * The steps from one state to another, in order (none when they are the same); `undefined` from
 * or to the failed state, which no step leaves or reaches on purpose.
 *
 * @example
 * ```ts
 * import { wayBetween } from "./steps.ts";
 * wayBetween("checkpointed", "running"); // ["restore", "unlock"]
 * wayBetween("failed", "running"); // undefined
 * ```
 */
export function wayBetween(from: ProcessState, to: ProcessState): Step[] | undefined {
  let i = CHAIN.indexOf(from);
  const j = CHAIN.indexOf(to);
  if (i < 0 || j < 0) return undefined;
  const way: Step[] = [];
  for (; i < j; i++) way.push(FORWARD[i]);
  for (; i > j; i--) way.push(BACKWARD[i - 1]);
  return way;
}
