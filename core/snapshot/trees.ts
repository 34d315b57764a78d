/**
 * Process trees as snapshots see them: listed, as dumped, ended; the pids a restore needs.
 *
 * @module
 */

import { readState } from "../calls.ts";
import { CUDA_SUCCESS } from "../driver.ts";
import type { DumpedProcess } from "../engine.ts";
import { RefusedError } from "../errors.ts";
import type { GpuMemoryReport, HostProcesses, PidUse, TreeProcess } from "../host.ts";
import type { ProcessIdentity } from "../host.ts";
import type { Run } from "./run.ts";
import type { Machine } from "../machine.ts";
import { refuseStopped, sessionOf } from "../process.ts";
import { SNAPSHOT_STATES } from "../states.ts";
import { clockOf } from "../time.ts";
import { type Manifest, type ManifestProcess, type ManifestTree, treeDirName } from "./manifest.ts";

/** A tree for the manifest: each process, and the CUDA side of those that use CUDA. */
export async function describeTree(
  root: number,
  tree: readonly TreeProcess[],
  machine: Machine,
  report: GpuMemoryReport,
): Promise<ManifestTree> {
  const processes = await Promise.all(tree.map(async (p): Promise<ManifestProcess> => {
    const base: ManifestProcess = {
      pid: p.pid,
      parent: p.parent,
      threads: p.threads.length > 0 ? [...p.threads] : [p.pid],
      ...(p.command ? { command: recorded(p.command) } : {}),
    };
    // Stopped: a CUDA process would not answer its state (refused); another comes back running.
    const tid = await machine.driver.getRestoreThreadId(p.pid).catch(() => undefined);
    const cuda = tid?.code === CUDA_SUCCESS;
    if (cuda) await refuseStopped(machine, "snapshot", p.pid);
    // Not a CUDA process (it never initialised CUDA); a state this version does not know refuses.
    const name = await readState(machine.driver, p.pid)
      .catch((err) => err instanceof RangeError ? Promise.reject(err) : undefined);
    if (name === undefined) return base;
    const takes = `a snapshot takes processes that are ${SNAPSHOT_STATES.join(" or ")}`;
    const reason = `its CUDA state is ${name}; ${takes}`, pid = p.pid;
    if (name !== "running" && name !== "checkpointed") {
      throw new RefusedError({ code: "STATE", operation: "snapshot", pid, state: name, reason });
    }
    const restoreThreadId = cuda ? tid.value : p.pid;
    // What it holds: now where it runs; as recorded at its checkpoint where checkpointed.
    const session = sessionOf(machine);
    const now = "byPid" in report ? report.byPid.get(p.pid) : undefined;
    const memory = name === "running"
      ? (now === "unknown" ? undefined : now)
      : (await session.room.record(await session.identify(p.pid) ?? { pid: p.pid }))?.heldMiB;
    const gpuMemoryMiB = memory ? { ...memory } : null;
    return { ...base, cuda: { state: name, restoreThreadId, gpuMemoryMiB } };
  }));
  return { root, images: treeDirName(root), processes };
}

/** A command line as a manifest records it: as much of it as a manifest holds. */
export const recorded = (command: string | undefined): string | undefined =>
  command?.slice(0, 4096);

/** A tree as the engine dumped it, with what was learnt of each process when it was listed. */
export function asDumped(listed: ManifestTree, dumped: readonly DumpedProcess[]): ManifestTree {
  if (!Array.isArray(dumped) || dumped.length === 0) return listed;
  const byPid = new Map(listed.processes.map((p) => [p.pid, p]));
  return {
    ...listed,
    processes: dumped.map((d, i) => {
      const before = byPid.get(d.pid); // its command and CUDA side, as listed
      return {
        ...before,
        pid: d.pid,
        parent: i === 0 ? (before?.parent ?? d.parent) : d.parent,
        threads: d.threads.length > 0 ? [...d.threads] : [d.pid],
      };
    }),
  };
}

/** Ends the trees of `roots` and the `members`, those still theirs: stops all, kills, waits. */
export async function endTrees(
  run: Pick<Run, "machine" | "engine" | "host">,
  ours: { roots: readonly ProcessIdentity[]; members: readonly ProcessIdentity[] },
): Promise<void> {
  // Ours where the host says so, or cannot tell processes apart; not where it failed to read one.
  const { engine, host } = run, session = sessionOf(run.machine);
  const still = async (p: ProcessIdentity) => await session.isStill(p) ?? !host.identify;
  const alive = async (ps: readonly ProcessIdentity[]) =>
    (await Promise.all(ps.map(async (p) => await still(p) ? [p.pid] : []))).flat();
  const known = new Set(await alive(ours.members)), roots = await alive(ours.roots);
  for (let round = 0; round < 10; round++) {
    const now = await treesNow(host, roots);
    await engine.stop(now);
    const before = known.size;
    for (const pid of now) known.add(pid);
    if (round > 0 && known.size === before) break;
  }
  await engine.kill([...known]);
  await untilFree(run, [...known]);
}

/** What disturbed a tree held stopped: `how` it changed, and `why` in a sentence naming the pid. */
export type Disturbed = { how: "ran" | "lost a process"; why: string };

/** Watches a tree held stopped: resolves to a function that says later whether it ran or lost one. */
export async function watchHeld(
  host: HostProcesses,
  root: number,
  pids: readonly number[],
): Promise<() => Promise<Disturbed | undefined>> {
  const cpu = (pid: number) => host.cpuTime?.(pid).catch(() => undefined);
  const read = async () =>
    new Map(await Promise.all(pids.map(async (p) => [p, await cpu(p)] as const)));
  // Taken once it holds still: a thread of the tree may take a moment to enter its stop (on a
  // machine busy with the digests, long enough for two readings alike), so first every thread
  // stopped where the host tells, then two readings alike.
  const stopped = (p: number) => host.stopped?.(p).catch(() => true) ?? true;
  const pause = () => new Promise((resolve) => setTimeout(resolve, 50));
  for (let i = 0; i < 40; i++) {
    if ((await Promise.all(pids.map(stopped))).every(Boolean)) break;
    await pause();
  }
  let before = await read();
  for (let i = 0; i < 20; i++) {
    const again = await read();
    if ([...again].every(([pid, t]) => before.get(pid) === t)) break;
    before = again;
    await pause();
  }
  return async () => {
    const now = (await host.processTree?.(root).catch(() => undefined)) ?? [];
    const extra = now.find((p) => !before.has(p.pid));
    const held = "while it was held", woken = `${held} (something sent it SIGCONT)`;
    const ran = (why: string): Disturbed => ({ how: "ran", why });
    if (extra) return ran(`process ${extra.pid} was made in the tree of ${root} ${woken}`);
    for (const [pid, was] of before) {
      const is = was === undefined ? undefined : await cpu(pid);
      const killed = `process ${pid} ended ${held} (something killed it)`;
      if (was !== undefined && is === undefined) return { how: "lost a process", why: killed };
      if (is !== was) return ran(`process ${pid} ran ${woken}`);
    }
    return undefined;
  };
}

/** Every process of the trees rooted at `roots` now, as the host sees them. */
export async function treesNow(host: HostProcesses, roots: readonly number[]): Promise<number[]> {
  const trees = await Promise.all(roots.map((root) => host.processTree?.(root).catch(() => [])));
  return trees.flatMap((t) => (t ?? []).map((p) => p.pid));
}

/** Which of `ids` a process uses now; by `identify` where the host tells no more. */
export async function usesOf(
  host: HostProcesses,
  ids: readonly number[],
): Promise<readonly PidUse[]> {
  if (host.pidsInUse) return await host.pidsInUse(ids);
  const uses: PidUse[] = [];
  for (const id of host.identify ? ids : []) {
    const holder = await host.identify!(id);
    if (holder) uses.push({ id, holder: holder.pid, as: holder.pid === id ? "pid" : "thread" });
  }
  return uses;
}

/** Waits (10 s at most) until `pids` are free: a killed process holds them until reaped. */
export async function untilFree(
  run: Pick<Run, "machine" | "host">,
  pids: readonly number[],
): Promise<void> {
  // Init took up to 2 s on one machine.
  for (let i = 0; i < 200 && pids.length > 0; i++) {
    if ((await usesOf(run.host, pids)).length === 0) return;
    await clockOf(run.machine).sleep(50);
  }
}

/** Refuses (`PID_TAKEN`) a snapshot a pid or thread id of which some process uses. */
export async function checkPidsFree(
  manifest: Manifest,
  host: HostProcesses,
  operation: string,
): Promise<void> {
  const processes = manifest.trees.flatMap((t) => t.processes);
  const owner = new Map(processes.flatMap((p) => p.threads.map((id) => [id, p] as const)));
  const [use] = await usesOf(host, [...owner.keys()]);
  if (!use) return;
  const p = owner.get(use.id)!;
  const command = p.command ? ` (${p.command})` : "";
  const which = `${use.id === p.pid ? "pid" : `thread id ${use.id} of pid`} ${p.pid}${command}`;
  const how = {
    pid: use.holder === p.pid
      ? "process " + use.holder + " has it now (if that is the snapshot's own process, ended but " +
        "not yet reaped by its parent, it holds the pid until its parent waits for it)"
      : `process ${use.holder} has it now`,
    thread: `a thread of process ${use.holder} has it now`,
    group: `process ${use.holder} still has it as its process group`,
    session: `process ${use.holder} still has it as its session`,
  }[use.as];
  const hint = use.as === "group" || use.as === "session"
    ? ` (a process left over from the snapshot's tree, not yet reaped, or one that left the ` +
      `tree; see it with ps -o pid,stat,pgid,sid,args -p ${use.holder})`
    : "";
  const back = `${which} must be free for the snapshot's process to come back`;
  const reason = `${back}, and ${how}${hint}; end that process, or restore where ${use.id} is free`;
  throw new RefusedError({ code: "PID_TAKEN", operation, pid: use.id, reason });
}
