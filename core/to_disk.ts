/**
 * A snapshot to disk ({@link takeSnapshot}): process trees, their CUDA processes included, into a
 * directory, through the machine's engine (criu). Everything is checked first (the engine and its
 * prerequisites, the trees, the CUDA state of each process, the directory); then the CUDA
 * processes are suspended through the group operations (one group per tree, each tree dumped as
 * soon as its own are suspended; or, as a job, one group of all of them), the engine dumps every
 * tree (leaving the processes running), the manifest is written, and only then are the processes
 * ended (or resumed, `leaveRunning`). A failure at any point before the end puts every process
 * back as it was, running, through the group operations again.
 *
 * @module
 */

import { CUDA_SUCCESS } from "./driver.ts";
import {
  checkDir,
  checkWhole,
  firstError,
  FirstFailure,
  groupFailure,
  partOf,
  partsOf,
  prerequisite,
  Progress,
  type SnapshotOptions,
  type SnapshotResult,
  storeRefusal,
  untilFree,
} from "./disk.ts";
import type { GpuInfo } from "./driver.ts";
import {
  type DumpedProcess,
  logOf,
  type SnapshotDir,
  type SnapshotEngine,
  type SnapshotFile,
} from "./engine.ts";
import {
  describeValue,
  messageOf,
  RefusedError,
  SnapshotError,
  type SnapshotFailure,
} from "./errors.ts";
import { checkCapability } from "./calls.ts";
import { runGroup } from "./group.ts";
import type { GroupResult } from "./group_types.ts";
import type { GpuMemoryReport, HostProcesses, TreeProcess } from "./host.ts";
import { askGpuMemory } from "./listing.ts";
import type { Machine } from "./machine.ts";
import { sessionOf } from "./process.ts";
import { clockOf } from "./time.ts";
import {
  type Manifest,
  MANIFEST_FILE,
  MANIFEST_FORMAT,
  type ManifestGpu,
  type ManifestProcess,
  type ManifestTree,
  serializeManifest,
  TRACE_FILE,
  treeDirName,
} from "./manifest.ts";
import { checkFlag, checkLockTimeout, checkOptions, checkPid } from "./options.ts";
import { cudaRuns, isSnapshotState, memoryOnHost, SNAPSHOT_STATES, stateName } from "./states.ts";
import { serializeTrace } from "./trace.ts";
import { VERSION } from "./version.ts";

/** A snapshot's options, checked. */
export interface SnapshotSettings extends ReturnType<typeof checkWhole> {
  readonly leaveRunning: boolean;
  readonly job: boolean;
  readonly lockTimeoutMs: number;
}

/** Checks a snapshot's arguments where they enter; the machine is left to the caller. */
export function checkSnapshotArgs(
  roots: unknown,
  dir: unknown,
  options: SnapshotOptions | undefined,
): { roots: number[]; dir: string; settings: SnapshotSettings } {
  const o = checkOptions(options, "snapshot", [
    "machine",
    "leaveRunning",
    "job",
    "timeoutMs",
    "signal",
    "lockTimeoutMs",
    "onProgress",
  ]);
  return {
    roots: checkRoots(roots),
    dir: checkDir(dir),
    settings: {
      ...checkWhole(o, "snapshot"),
      leaveRunning: checkFlag(o.leaveRunning, "leaveRunning", false),
      job: checkFlag(o.job, "job", false),
      lockTimeoutMs: checkLockTimeout(o.lockTimeoutMs, "lockTimeoutMs"),
    },
  };
}

/** Takes a snapshot of the trees rooted at `roots` into `dir`: see the module documentation. */
export async function takeSnapshot(
  machine: Machine,
  roots: readonly number[],
  dir: string,
  o: SnapshotSettings,
): Promise<SnapshotResult> {
  const progress = new Progress(machine, o);
  const driver = machine.driver;

  // 1. Check everything, change nothing.
  progress.phase("check");
  const { engine, store, host, probing, listing, slots } = partsOf(machine, "snapshot");
  // Before 570 every getState fails, and each process would pass for one without CUDA.
  await checkCapability(driver, "getState", undefined, 0, "snapshot");
  const trees = await Promise.all(roots.map(async (root) => {
    const tree = await host.processTree!(root);
    if (!tree || tree.length === 0) {
      throw prerequisite("snapshot", `no process has pid ${root} (give the pid of a live process)`);
    }
    return { root, processes: tree };
  }));
  checkDisjoint(trees);
  const probe = await probing;
  const report = await askGpuMemory(machine);
  const listed = await Promise.all(trees.map((t) => describeTree(t, machine, report)));
  // Each tree's CUDA processes that run: those the snapshot suspends, and puts back on failure.
  const running = listed.map((t) =>
    t.processes.filter((p) => p.cuda && cudaRuns(p.cuda.state)).map((p) => p.pid)
  );
  const everyRunning = running.flat();
  const gpus = describeGpus(await listing, report);
  const version = await driver.driverVersion();
  const facts = host.facts ? await host.facts() : { hostname: host.kind, kernel: "unknown" };
  const cannotHold = (where: string, err: unknown) =>
    storeRefusal("snapshot", where, "cannot hold a snapshot", err);
  const snap = await store.create(dir).catch((err) => {
    throw cannotHold(dir, err);
  });
  try {
    return await intoDir(snap);
  } finally {
    await snap.close();
  }

  async function intoDir(snap: SnapshotDir): Promise<SnapshotResult> {
    const where = snap.path;
    const session = sessionOf(machine);
    const names = trees.map((t) => treeDirName(t.root));
    /** Removes what the snapshot made in its directory, and says so: a retry finds it as it was. */
    const cleanUp = async (): Promise<string> => {
      const removed = await snap.removeCreated().catch((err) => {
        return `; what it had written in ${where} could not all be removed: ${messageOf(err)}`;
      });
      return typeof removed === "string"
        ? removed
        : removed.length > 0
        ? `; what it had written in ${where} was removed`
        : "";
    };
    // Every tree's directory first, and the trace that names what is suspended, before anything
    // changes.
    let imageDirs: string[];
    try {
      progress.notBegun("snapshot", "snapshot");
      // The trace first: a snapshot killed at any later point leaves a directory recover reads.
      const identities = await Promise.all(
        everyRunning.map(async (pid) => await session.identify(pid) ?? { pid }),
      );
      const by = await session.selfIdentity();
      await snap.writeFile(
        TRACE_FILE,
        serializeTrace({
          ...(by ? { by } : {}),
          startedAt: new Date().toISOString(),
          processes: identities,
          made: names,
        }),
      );
      for (const name of names) await snap.subdir(name);
      imageDirs = await Promise.all(names.map((name) => snap.enginePath(name)));
    } catch (err) {
      await cleanUp();
      throw err instanceof SnapshotError ? err : cannotHold(where, err);
    }

    // 2 and 3. Suspend the CUDA processes and dump each tree once its own are suspended, leaving its
    // processes running. The first failure stops the rest, and every process is put back.
    progress.phase("suspend");
    const parts = new FirstFailure<
      { suspend: GroupResult } | { dump: unknown } | { write: unknown }
    >(o.signal);
    // The engine's slots (criu: one per core): none taken after a failure.
    const sealed: SnapshotFile[][] = trees.map(() => []);
    // As a job, one group of every CUDA process, which core/job.ts orders: every lock first.
    const group = (pids: readonly number[]) =>
      runGroup(machine, "suspend", pids, {
        ...partOf(progress, parts.signal),
        lockTimeoutMs: o.lockTimeoutMs,
        rollBackOnAbort: true,
        job: o.job,
      });
    /** Puts every process back, running, and makes the error that says so. */
    const rollBack = async (code: SnapshotFailure, message: string, cause: unknown) => {
      progress.phase("rollback");
      const back = await resumeAll(machine, everyRunning, o.job, progress);
      return new SnapshotError({
        code,
        operation: "snapshot",
        message,
        detail: !back || back.ok
          ? `every process was put back as it was, and keeps running${await cleanUp()}`
          : `the CUDA processes could not all be resumed: ${groupFailure(back)}; ${where}/` +
            `${TRACE_FILE} names them: \`cuda-checkpoint recover ${where}\` resumes them once the ` +
            `cause is fixed`,
        cause,
        ...logOf(cause),
      });
    };
    const t1 = progress.at();
    let suspendEnd = t1;
    let dumpStart: number | undefined;
    let dumpEnd = t1;
    const suspendTree = async (pids: readonly number[]) => {
      if (pids.length === 0) return true;
      const suspended = await group(pids);
      suspendEnd = progress.at();
      if (!suspended.ok) parts.fail({ suspend: suspended });
      return suspended.ok;
    };
    const dumpTree = (i: number): Promise<readonly DumpedProcess[]> =>
      slots.run(async () => {
        if (parts.signal.aborted) throw new Error("stopped before its dump");
        if (dumpStart === undefined) {
          dumpStart = progress.at();
          progress.phase("dump");
        }
        const left = progress.deadline.left();
        let dumped: readonly DumpedProcess[];
        try {
          dumped = await engine.dump({
            root: trees[i].root,
            imagesDir: imageDirs[i],
            signal: parts.signal,
            ...(left !== undefined ? { timeoutMs: left } : {}),
            onBytes: (bytes) => progress.tell({ type: "bytes", root: trees[i].root, bytes, at: 0 }),
          });
        } catch (err) {
          parts.fail({ dump: err });
          throw err;
        } finally {
          dumpEnd = progress.at();
        }
        // Its images on disk and digested, while other trees' dumps go on.
        try {
          sealed[i] = await snap.seal(names[i], parts.signal);
        } catch (err) {
          parts.fail({ write: err });
          throw err;
        } finally {
          dumpEnd = progress.at();
        }
        return dumped;
      });
    const dumps = o.job
      ? await (async () => {
        // A job: every CUDA process is locked before any is checkpointed (core/job.ts).
        if (!(await suspendTree(everyRunning))) return [];
        return await Promise.allSettled(trees.map((_, i) => dumpTree(i)));
      })()
      : await Promise.allSettled(trees.map(async (_, i) => {
        if (!(await suspendTree(running[i]))) throw new Error("its suspend failed");
        return await dumpTree(i);
      }));
    const f = parts.first;
    const stopped = progress.stopped();
    if (stopped) {
      const doing = dumpStart === undefined ? "suspending its CUDA processes" : "dumping";
      throw await rollBack("STOPPED", `snapshot stopped while ${doing}: ${stopped}`, undefined);
    }
    if (f && "dump" in f) {
      const why = `snapshot failed: the ${engine.kind} dump failed: ${messageOf(f.dump)}`;
      throw await rollBack("DUMP_FAILED", why, f.dump);
    }
    if (f && "write" in f) {
      const why = `snapshot failed: its images could not be put on disk: ${messageOf(f.write)}`;
      throw await rollBack("WRITE_FAILED", why, f.write);
    }
    if (f || dumps.length < trees.length) {
      const why = `snapshot failed while suspending its CUDA processes: ${
        f ? groupFailure(f.suspend) : "it was stopped"
      }`;
      throw await rollBack("SUSPEND_FAILED", why, f && firstError(f.suspend));
    }
    const suspendMs = suspendEnd - t1;
    const dumpMs = dumpStart === undefined ? 0 : dumpEnd - dumpStart;
    // The trees as dumped: a process may have come or gone since they were listed.
    const dumpedTrees = listed.map((t, i) =>
      asDumped(t, (dumps[i] as PromiseFulfilledResult<readonly DumpedProcess[]>).value)
    );

    // 4. The manifest, last: a directory without one is no snapshot.
    progress.phase("write");
    let manifest: Manifest;
    try {
      const files = sealed.flat();
      manifest = {
        format: MANIFEST_FORMAT,
        createdAt: new Date().toISOString(),
        tool: { name: "@ckpt/cuda", version: VERSION },
        host: { hostname: facts.hostname, kernel: facts.kernel },
        driver: {
          cudaVersion: version.code === CUDA_SUCCESS ? version.value : 0,
          ...(facts.driverRelease ? { release: facts.driverRelease } : {}),
        },
        engine: { kind: engine.kind, ...(probe.version ? { version: probe.version } : {}) },
        gpus,
        trees: dumpedTrees,
        options: { leaveRunning: o.leaveRunning, job: o.job },
        timings: { suspendMs, dumpMs, totalMs: progress.at() },
        files: files.sort((a, b) => a.path < b.path ? -1 : a.path > b.path ? 1 : 0),
      };
      await snap.writeFile(MANIFEST_FILE, serializeManifest(manifest));
    } catch (err) {
      const why = `snapshot failed: its manifest could not be written: ${messageOf(err)}`;
      throw await rollBack("WRITE_FAILED", why, err);
    }

    // 5. End the processes, or let them go on.
    progress.phase("end");
    if (o.leaveRunning) {
      const resumed = await resumeAll(machine, everyRunning, o.job, progress);
      if (resumed && !resumed.ok) {
        throw new SnapshotError({
          code: "RESUME_FAILED",
          operation: "snapshot",
          message: `the snapshot in ${where} is complete, but its CUDA processes could not be ` +
            `resumed: ${groupFailure(resumed)}`,
          detail: `they are checkpointed: \`cuda-checkpoint recover ${where}\` resumes them ` +
            `once the cause is fixed`,
          cause: firstError(resumed),
        });
      }
    } else {
      await endTrees(engine, host, dumpedTrees, clockOf(machine).sleep);
    }
    await snap.remove(TRACE_FILE);
    return { dir: where, manifest, ms: progress.at() };
  }
}

/** Resumes `pids` (a rollback, or `leaveRunning`): as a job where the snapshot is one. */
function resumeAll(
  machine: Machine,
  pids: readonly number[],
  job: boolean,
  progress: Progress,
): Promise<GroupResult | undefined> {
  if (pids.length === 0) return Promise.resolve(undefined);
  return runGroup(machine, "resume", pids, { ...partOf(progress, undefined), job });
}

function checkRoots(roots: unknown): number[] {
  if (!Array.isArray(roots) || roots.length === 0) {
    throw new TypeError(
      `roots must be a non-empty array of pids (the roots of the trees to snapshot), got ${
        describeValue(roots)
      }`,
    );
  }
  const seen = new Set<number>();
  return roots.map((pid, i) => {
    checkPid(pid, `roots[${i}]`);
    if (seen.has(pid)) throw new RangeError(`roots names pid ${pid} twice: give each tree once`);
    seen.add(pid);
    return pid;
  });
}

/** No tree may hold another's root. */
function checkDisjoint(trees: readonly { root: number; processes: readonly TreeProcess[] }[]) {
  for (const a of trees) {
    for (const b of trees) {
      if (a !== b && a.processes.some((p) => p.pid === b.root)) {
        throw new RangeError(
          `roots ${b.root} and ${a.root}: process ${b.root} is in the tree of ${a.root}; give ` +
            `the root of each tree once`,
        );
      }
    }
  }
}

/** A tree for the manifest: each process, and the CUDA side of those that use CUDA. */
async function describeTree(
  { root, processes: tree }: { root: number; processes: readonly TreeProcess[] },
  machine: Machine,
  report: GpuMemoryReport,
): Promise<ManifestTree> {
  const driver = machine.driver;
  const processes = await Promise.all(tree.map(async (p): Promise<ManifestProcess> => {
    const base: ManifestProcess = {
      pid: p.pid,
      parent: p.parent,
      threads: p.threads.length > 0 ? [...p.threads] : [p.pid],
      ...(p.command ? { command: p.command } : {}),
    };
    const [state, tid] = await Promise.all([
      driver.getState(p.pid),
      driver.getRestoreThreadId(p.pid),
    ]);
    if (state.code !== CUDA_SUCCESS) return base; // not a CUDA process (never initialised CUDA)
    const name = stateName(state.value);
    if (!isSnapshotState(name)) {
      throw new RefusedError({
        code: "STATE",
        operation: "snapshot",
        pid: p.pid,
        ...(name ? { state: name } : {}),
        reason: `its CUDA state is ${name ?? `number ${state.value}`}; a snapshot takes ` +
          `processes that are ${SNAPSHOT_STATES.join(" or ")}`,
      });
    }
    let memory: Record<string, number> | null = null;
    if (cudaRuns(name) && "byPid" in report) {
      const m = report.byPid.get(p.pid);
      if (m && m !== "unknown") memory = { ...m };
    } else if (memoryOnHost(name)) {
      // What was recorded at its checkpoint, as its restore's room check will read it.
      const session = sessionOf(machine);
      const identity = await session.identify(p.pid) ?? { pid: p.pid };
      const record = await session.room.record(identity);
      if (record) memory = { ...record.heldMiB };
    }
    return {
      ...base,
      cuda: {
        state: name,
        restoreThreadId: tid.code === CUDA_SUCCESS ? tid.value : p.pid,
        gpuMemoryMiB: memory,
      },
    };
  }));
  return { root, images: treeDirName(root), processes };
}

function describeGpus(gpus: readonly GpuInfo[], report: GpuMemoryReport): ManifestGpu[] {
  const total = "byPid" in report ? report.totalMiB : undefined;
  return gpus.map((g) => ({
    index: g.index,
    uuid: g.uuid,
    name: g.name,
    ...(total?.get(g.uuid) !== undefined ? { totalMiB: total.get(g.uuid)! } : {}),
  }));
}

/**
 * A tree as the engine dumped it: its processes are those dumped (with what was learnt of each
 * when the tree was listed: its command line, its CUDA side).
 */
function asDumped(listed: ManifestTree, dumped: readonly DumpedProcess[]): ManifestTree {
  if (!Array.isArray(dumped) || dumped.length === 0) return listed;
  const byPid = new Map(listed.processes.map((p) => [p.pid, p]));
  return {
    ...listed,
    processes: dumped.map((d, i) => {
      const before = byPid.get(d.pid);
      return {
        pid: d.pid,
        parent: i === 0 ? (before?.parent ?? d.parent) : d.parent,
        threads: d.threads.length > 0 ? [...d.threads] : [d.pid],
        ...(before?.command ? { command: before.command } : {}),
        ...(before?.cuda ? { cuda: before.cuda } : {}),
      };
    }),
  };
}

/**
 * Ends the processes of the dumped trees: stops every process of each tree (SIGSTOP), again while
 * new ones turn up, so that none forks any more, then kills them all, the dumped ones included,
 * and waits until they are gone ({@link untilFree}).
 */
async function endTrees(
  engine: SnapshotEngine,
  host: HostProcesses,
  trees: readonly ManifestTree[],
  sleep: (ms: number) => Promise<void>,
): Promise<void> {
  const known = new Set(trees.flatMap((t) => t.processes.map((p) => p.pid)));
  for (let round = 0; round < 10; round++) {
    const now: number[] = [];
    for (const t of trees) {
      for (const p of (await host.processTree?.(t.root).catch(() => undefined)) ?? []) {
        now.push(p.pid);
      }
    }
    await engine.stop(now);
    const before = known.size;
    for (const pid of now) known.add(pid);
    if (round > 0 && known.size === before) break;
  }
  await engine.kill([...known]);
  await untilFree(host, [...known], sleep);
}
