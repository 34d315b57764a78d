/**
 * Recovering from a snapshot killed outright (SIGKILL, a power cut): what its trace names is
 * resumed, what it wrote removed (a complete snapshot is kept).
 *
 * @module
 */

import { runGroup } from "../group.ts";
import { checkGroupOptions, type GroupEvent } from "../group_types.ts";
import type { Machine } from "../machine.ts";
import { sessionOf } from "../process.ts";
import { openInterrupted, TRACE_FILE } from "./layout.ts";
import { snapshotRefusal } from "./manifest.ts";
import type { SnapshotStore } from "./store.ts";
import { groupFailure } from "./run.ts";
import { treesNow } from "./trees.ts";

/** What `recoverSnapshot` did. */
export interface RecoverResult {
  /** The snapshot's directory. */
  readonly dir: string;
  /** The processes resumed (or found running already), each the one the snapshot suspended. */
  readonly resumed: readonly number[];
  /** The processes the trace names that are gone (ended, or their pid now another's). */
  readonly gone: readonly number[];
  /** What was removed: the trace, and the partial images where the snapshot had no manifest. */
  readonly removed: readonly string[];
  /** Whether the snapshot is complete (it has its manifest, which was kept). */
  readonly complete: boolean;
}

/** Resumes what the trace names (`onProgress` hears it), removes what was written. */
export async function recoverFrom(
  machine: Machine,
  store: SnapshotStore,
  dir: string,
  checkRoom: boolean,
  operation: string,
  onProgress?: (event: GroupEvent) => void,
): Promise<RecoverResult> {
  const { dir: snap, trace, complete } = await openInterrupted(store, dir, operation);
  try {
    const where = snap.path, session = sessionOf(machine), by = trace.by?.pid;
    const still = `the snapshot in ${where} is still under way: process ${by} is taking it (stop ` +
      `it with Ctrl-C or kill -TERM ${by}: it puts the processes back itself)`;
    if (trace.by && await session.isStill(trace.by)) throw snapshotRefusal(operation, still);
    const alive: number[] = [], gone: number[] = [];
    // Where the host cannot tell, each is taken as there: the driver says where it is not.
    for (const p of trace.processes) {
      ((await session.isStill(p)) !== false ? alive : gone).push(p.pid);
    }
    // Killed while it was ending its trees (its manifest written), the snapshot may have left
    // them stopped (SIGSTOP): every process of a tree whose root is still the one it took is woken.
    const roots = complete && machine.host ? trace.roots : [];
    const ours = await Promise.all(roots.map(async (r) => await session.isStill(r) !== false));
    const trees = await treesNow(machine.host!, roots.filter((_, i) => ours[i]).map((r) => r.pid));
    if (alive.length + trees.length > 0) await machine.engine?.wake?.([...alive, ...trees]);
    if (alive.length > 0) {
      // As a restore: every one back on its GPU before any runs (a job's ranks), room for all.
      const settings = checkGroupOptions({ checkRoom, onProgress, job: true });
      const result = await runGroup(machine, "resume", alive, settings);
      if (!result.ok) {
        const failed = result.processes.find((p) => p.error), who = failed ? `${failed.pid}: ` : "";
        const not = `not every process of the interrupted snapshot in ${where} could be resumed`;
        const kept = `${TRACE_FILE} is kept: all resume or none; end any that cannot, then retry`;
        throw snapshotRefusal(operation, `${not}: ${who}${groupFailure(result)}; ${kept}`);
      }
    }
    // The partial images where the snapshot had no manifest, then the trace.
    const names = [...(complete ? [] : trace.made), TRACE_FILE];
    for (const name of names) await snap.remove(name);
    const removed = names.map((name) => `${where}/${name}`);
    return { dir: where, resumed: alive, gone, removed, complete };
  } finally {
    await snap.close();
  }
}
