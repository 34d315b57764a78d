/**
 * The trace a snapshot keeps in its directory while it runs (`in-progress.json`): who is taking it
 * and which processes it suspends. A snapshot that ends, well or not, removes it; one killed
 * outright (SIGKILL, a power cut) leaves it, and {@link recoverFrom} (`cuda-checkpoint recover
 * DIR`) reads it, resumes every process it names that is still the same process and still
 * suspended, and removes what the snapshot had written.
 *
 * @module
 */

import { groupFailure, openToRead } from "./disk.ts";
import type { SnapshotStore } from "./engine.ts";
import { RefusedError } from "./errors.ts";
import { checkGroupOptions, type GroupResult } from "./group_types.ts";
import { runGroup } from "./group.ts";
import { type ProcessIdentity, sameProcess } from "./host.ts";
import { StrictReader } from "./json.ts";
import type { Machine } from "./machine.ts";
import { sessionOf } from "./process.ts";
import { MANIFEST_FILE, MANIFEST_MAX_BYTES, TRACE_FILE, TRACE_MAX_BYTES } from "./manifest.ts";

const FORMAT = "ckpt-cuda-in-progress/1";

/** A snapshot under way: who takes it, what it suspends, what it made in its directory. */
export interface Trace {
  /** The program taking it, where the host knows it. */
  readonly by?: ProcessIdentity;
  /** When it began (ISO 8601). */
  readonly startedAt: string;
  /** The CUDA processes it suspends. */
  readonly processes: readonly ProcessIdentity[];
  /** The subdirectories it makes (`tree-<pid>`). */
  readonly made: readonly string[];
}

/** The trace as written to disk. */
export function serializeTrace(trace: Trace): string {
  return JSON.stringify({ format: FORMAT, ...trace }, null, 2) + "\n";
}

/** Parses a trace strictly; `where` names it in messages. */
function parseTrace(text: string, where: string, operation: string): Trace {
  const r = new StrictReader((_field, reason) =>
    new RefusedError({ code: "SNAPSHOT", operation, reason: `${where}: ${reason}` })
  );
  const o = r.object(r.parse(text, "it"), "", ["format", "startedAt", "processes", "made"], [
    "by",
  ]);
  if (o.format !== FORMAT) r.fail("format", JSON.stringify(FORMAT), o.format);
  return {
    ...(o.by !== undefined ? { by: r.identity(o.by, "by") } : {}),
    startedAt: r.string(o.startedAt, "startedAt"),
    processes: r.array(o.processes, "processes").map((p, i) => r.identity(p, `processes[${i}]`)),
    made: r.array(o.made, "made").map((m, i) => {
      const name = r.string(m, `made[${i}]`);
      if (!/^tree-[1-9][0-9]{0,9}$/.test(name)) r.fail(`made[${i}]`, '"tree-<pid>"', name);
      return name;
    }),
  };
}

/** What {@link recoverFrom} did. */
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

/**
 * Recovers from a snapshot killed outright: see the module documentation. Refuses a directory
 * without a trace, and one whose snapshot is still under way; where a process cannot be resumed,
 * refuses naming it and its error, the trace kept for another try.
 */
export async function recoverFrom(
  machine: Machine,
  store: SnapshotStore,
  dir: string,
  checkRoom: boolean,
  operation: string,
): Promise<RecoverResult> {
  const refuse = (reason: string) => new RefusedError({ code: "SNAPSHOT", operation, reason });
  const { snap, read } = await openToRead(
    store,
    dir,
    operation,
    "cannot be read as a snapshot's directory",
  );
  try {
    const where = snap.path;
    const text = await read(TRACE_FILE, TRACE_MAX_BYTES);
    if (text === undefined) {
      throw refuse(
        `${where} holds no ${TRACE_FILE}: no snapshot taken there was interrupted, so there is ` +
          `nothing to recover`,
      );
    }
    const trace = parseTrace(text, `${where}/${TRACE_FILE}`, operation);
    const session = sessionOf(machine);
    /** Whether the process `p` still lives (its pid is no other process's now). */
    const same = async (p: ProcessIdentity) => {
      const now = await session.identify(p.pid);
      return now !== undefined && sameProcess(now, p);
    };
    if (trace.by && await same(trace.by)) {
      const by = trace.by.pid;
      throw refuse(
        `the snapshot in ${where} is still under way: process ${by} is taking it (stop it with ` +
          `Ctrl-C or kill -TERM ${by}: it puts the processes back itself)`,
      );
    }
    const alive: number[] = [];
    const gone: number[] = [];
    for (const p of trace.processes) (await same(p) ? alive : gone).push(p.pid);
    let result: GroupResult | undefined;
    if (alive.length > 0) {
      // Killed while it was ending its trees, the snapshot may have left them stopped (SIGSTOP).
      await machine.engine?.wake?.(alive);
      result = await runGroup(machine, "resume", alive, checkGroupOptions({ checkRoom }));
    }
    if (result && !result.ok) {
      const failed = result.processes.find((p) => p.error);
      throw refuse(
        `not every process of the interrupted snapshot in ${where} could be resumed: ${
          failed ? `${failed.pid}: ` : ""
        }${groupFailure(result)}; ${TRACE_FILE} is kept, so that this can be tried again`,
      );
    }
    const complete = await read(MANIFEST_FILE, MANIFEST_MAX_BYTES) !== undefined;
    const removed: string[] = [];
    for (const name of complete ? [] : trace.made) {
      await snap.remove(name);
      removed.push(`${where}/${name}`);
    }
    await snap.remove(TRACE_FILE);
    removed.push(`${where}/${TRACE_FILE}`);
    return { dir: where, resumed: alive, gone, removed, complete };
  } finally {
    await snap.close();
  }
}
