/**
 * A snapshot to disk, in phases over one record ({@link Taken}): all checked; the directory made;
 * each tree dumped as soon as its CUDA processes are suspended (a group per tree, or one job) and
 * sealed; the manifest last; the processes ended. A failure before the end puts all back.
 *
 * @module
 */

import { checkCapability } from "../calls.ts";
import { CUDA_SUCCESS } from "../driver.ts";
import { type DumpedProcess, EngineError } from "../engine.ts";
import { messageOf, SnapshotError, type SnapshotFailure } from "../errors.ts";
import { runGroup } from "../group.ts";
import type { GroupResult } from "../group_types.ts";
import type { ProcessIdentity, TreeProcess } from "../host.ts";
import { askGpuMemory } from "../listing.ts";
import type { Machine } from "../machine.ts";
import { checkLockTimeout, checkPid, checkSignal, checkTable, flag, mustBe } from "../options.ts";
import { checkFunction, type Settings, wholeTimeout } from "../options.ts";
import { importRefusal, sessionOf } from "../process.ts";
import { roundMs } from "../time.ts";
import { VERSION } from "../version.ts";
import { SnapshotWriter, TRACE_FILE } from "./layout.ts";
import { type Manifest, MANIFEST_FORMAT, type ManifestProcess, treeDirName } from "./manifest.ts";
import type { SnapshotFile } from "./store.ts";
import { bytesOf, checkDir, firstError, groupFailure, heldMiB } from "./run.ts";
import { prerequisite, Run, type SnapshotEvent, started, type WholeSettings } from "./run.ts";
import { asDumped, describeTree, endTrees } from "./trees.ts";

/** Options of `snapshot`. */
export interface SnapshotOptions {
  /** The machine (one `openMachine` opened names criu, say); this machine when left out. */
  machine?: Machine;
  /** Keep the processes running after the dump; default `false`: once on disk, they are ended. */
  leaveRunning?: boolean;
  /** The CUDA processes share GPU state: suspend (and restore) them as one job. Default `false`. */
  job?: boolean;
  /** A deadline for the whole snapshot in ms (0: none); every process is put back if it passes. */
  timeoutMs?: number;
  /** Stops the snapshot: every process is put back as it was, running. */
  signal?: AbortSignal;
  /** Each CUDA process's lock timeout in ms (0 waits forever); 10 000 by default. */
  lockTimeoutMs?: number;
  /** Suspend processes that imported GPU memory anyway (see `StepOptions.allowIpcImport`). */
  allowIpcImport?: boolean;
  /**
   * Take established TCP connections too (else a tree with one is refused); both ends must be in
   * the snapshot, or the peer gone: one left running resets the restored connection.
   */
  tcpEstablished?: boolean;
  /** Called as the snapshot goes ({@link SnapshotEvent}). Must not throw. */
  onProgress?: (event: SnapshotEvent) => void;
}

/** What `snapshot` made: its directory (absolute), its manifest as written, its time in ms. */
export type SnapshotResult = Readonly<{ dir: string; manifest: Manifest; ms: number }>;

const SNAPSHOT_OPTIONS = {
  leaveRunning: flag(false),
  job: flag(false),
  timeoutMs: wholeTimeout("snapshot"),
  signal: checkSignal,
  lockTimeoutMs: checkLockTimeout,
  allowIpcImport: flag(false),
  tcpEstablished: flag(false),
  onProgress: checkFunction<WholeSettings["onProgress"]>,
};
/** A snapshot's options, checked. */
export type SnapshotSettings = Settings<typeof SNAPSHOT_OPTIONS>;

/** Checks a snapshot's arguments where they enter; the machine is left to the caller. */
export function checkSnapshotArgs(
  roots: unknown,
  dir: unknown,
  options: SnapshotOptions | undefined,
): { roots: number[]; dir: string; settings: SnapshotSettings } {
  const settings = checkTable(options, "snapshot", SNAPSHOT_OPTIONS);
  const what = "a non-empty array of pids (the roots of the trees to snapshot)";
  if (!Array.isArray(roots) || roots.length === 0) mustBe(TypeError, "roots", what, roots);
  for (const [i, pid] of roots.entries()) {
    checkPid(pid, `roots[${i}]`);
    const twice = `roots names pid ${pid} twice: give each tree once`;
    if (roots.indexOf(pid) < i) throw new RangeError(twice);
  }
  return { roots: [...roots], dir: checkDir(dir), settings };
}

/**
 * What the checks found (the trees as listed, what the manifest says of the machine) and what the
 * snapshot has done since, for its phases and its rollback: the processes it suspends, each tree as
 * dumped, when the suspends and dumps began and last ended (ms); its run keeps its first failure.
 */
interface Taken extends Awaited<ReturnType<typeof check>> {
  readonly run: Run<Failure>;
  readonly o: SnapshotSettings;
  readonly out: SnapshotWriter;
  /** The CUDA processes it suspends, as identified when it began (a pid may be reused since). */
  readonly who: readonly ProcessIdentity[];
  /** What it ends, by their own pids (not a thread's process): roots at the start, dumped after. */
  readonly ours: { roots: readonly ProcessIdentity[]; members: ProcessIdentity[] };
  readonly dumped: (readonly DumpedProcess[] | undefined)[];
  readonly sealed: SnapshotFile[][];
  readonly times: { suspend: number; suspended: number; dump?: number; dumped: number };
  readonly untouched: Set<number>; // the pids its suspend never started on: not put back
}

/** Why a snapshot failed, as its error says it. */
type Failure = Readonly<{ code: SnapshotFailure; message: string; cause?: unknown }>;

/** Takes a snapshot of the trees rooted at `roots` into `dir`. */
export async function takeSnapshot(
  machine: Machine,
  roots: readonly number[],
  dir: string,
  o: SnapshotSettings,
): Promise<SnapshotResult> {
  const run = new Run<Failure>(machine, "snapshot", o);
  try {
    run.phase("check");
    const plan = await check(run, roots, o.allowIpcImport);
    run.notBegun("snapshot");
    const session = sessionOf(machine), by = await session.selfIdentity();
    const identify = async (pid: number) => ({ ...await session.identify(pid), pid });
    const who = await Promise.all(plan.running.flat().map((p) => identify(p.pid)));
    const ours = { roots: await Promise.all(roots.map(identify)), members: [] };
    const startedAt = new Date().toISOString();
    const trace = { ...(by ? { by } : {}), startedAt, processes: who, roots: ours.roots };
    const out = await SnapshotWriter.begin(run.store, dir, roots, trace);
    const at = run.at(), times = { suspend: at, suspended: at, dumped: at };
    const [dumped, sealed] = [roots.map(() => undefined), roots.map(() => [])];
    const untouched = new Set<number>();
    const t: Taken = { ...plan, run, o, out, who, ours, dumped, sealed, times, untouched };
    await suspendAndDump(t);
    const manifest = await writeManifest(t);
    await end(t, manifest);
    return { dir: out.dir.path, manifest, ms: run.at() };
  } finally {
    run.close();
  }
}

/** Phase 1: checks everything, changes nothing. */
async function check(run: Run, roots: readonly number[], allowIpcImport: boolean) {
  const { machine, host } = run;
  // Before 570 every getState fails, and each process would pass for one without CUDA.
  await checkCapability(machine.driver, "getState", undefined, 0, "snapshot");
  const listed = await Promise.all(roots.map(async (root) => {
    const tree = await host.processTree!(root);
    if (!tree || tree.length === 0) {
      const of = (await host.identify?.(root).catch(() => undefined))?.pid;
      const why = of && of !== root
        ? `${root} is a thread of process ${of}, not a process: give ${of}`
        : `no process has pid ${root} (give the pid of a live process)`;
      throw prerequisite("snapshot", why);
    }
    return { root, tree: tree as readonly TreeProcess[] };
  }));
  // No tree may hold another's root.
  for (const a of listed) {
    const b = listed.find((o) => o !== a && a.tree.some((p) => p.pid === o.root));
    const twice = `process ${b?.root} is in the tree of ${a.root}; give the root of each tree once`;
    if (b) throw prerequisite("snapshot", twice);
  }
  const probe = await run.probing, report = await askGpuMemory(machine);
  const trees = await Promise.all(listed.map((t) => describeTree(t.root, t.tree, machine, report)));
  // Each tree's running CUDA processes: those it suspends, and puts back on failure.
  const running = trees.map((t) => t.processes.filter((p) => p.cuda?.state === "running"));
  // Memory on a GPU the driver hides from us (CUDA_VISIBLE_DEVICES): no restore could take it.
  const shown = new Set((await run.listing).map((g) => g.uuid));
  for (const p of trees.flatMap((t) => t.processes)) {
    const gpu = Object.keys(p.cuda?.gpuMemoryMiB ?? {}).find((uuid) => !shown.has(uuid));
    const why = `process ${p.pid} holds memory on ${gpu}, a GPU the driver hides from us`;
    if (gpu) throw prerequisite("snapshot", `${why} (is CUDA_VISIBLE_DEVICES set?)`);
  }
  for (const { pid } of allowIpcImport ? [] : running.flat()) {
    const imported = await sessionOf(machine).gpuImport(pid);
    if (imported) throw importRefusal("snapshot", pid, imported);
  }
  const version = await machine.driver.driverVersion();
  const facts = host.facts ? await host.facts() : { hostname: host.kind, kernel: "unknown" };
  return { trees, running, report, probe, version, facts };
}

/** Suspends, dumps and seals each tree; the first failure stops the rest, all put back. */
async function suspendAndDump(t: Taken): Promise<void> {
  t.run.phase("suspend", { gpuMemoryMiB: heldMiB(t.running.flat()) });
  const trees = t.trees.map((_, i) => i);
  if (t.o.job) {
    // A job: every CUDA process is locked before any is checkpointed (core/job.ts).
    if (await suspend(t, t.running.flat())) await Promise.allSettled(trees.map((i) => dump(t, i)));
  } else {
    await Promise.allSettled(trees.map(async (i) => {
      if (await suspend(t, t.running[i])) await dump(t, i);
    }));
  }
  const stopped = t.run.stopped();
  const doing = t.times.dump === undefined ? "suspending its CUDA processes" : "dumping";
  const message = `snapshot stopped while ${doing}: ${stopped}`;
  if (stopped) throw await rollBack(t, { code: "STOPPED", message });
  if (t.run.failure) throw await rollBack(t, t.run.failure.error);
}

/** What failed (`snapshot failed: what: the cause`), as a {@link Failure} of `code`. */
function failure(code: SnapshotFailure, what: string, cause: unknown): Failure {
  return { code, message: `snapshot failed: ${what}: ${messageOf(cause)}`, cause };
}

/** Suspends `running` as one group (a job's, or a tree's); false, and the run failed, where not. */
async function suspend(t: Taken, running: readonly ManifestProcess[]): Promise<boolean> {
  if (running.length === 0) return true;
  const result = await runGroup(t.run.machine, "suspend", running.map((p) => p.pid), {
    ...t.run.group(true),
    lockTimeoutMs: t.o.lockTimeoutMs,
    allowIpcImport: true, // each was checked once, by check()
    rollBackOnAbort: true,
    job: t.o.job,
  });
  t.times.suspended = t.run.at();
  for (const o of result.processes) if (o.status === "not-started") t.untouched.add(o.pid);
  if (result.ok) return true;
  const message = `snapshot failed while suspending its CUDA processes: ${groupFailure(result)}`;
  t.run.fail({ code: "SUSPEND_FAILED", message, cause: firstError(result) });
  return false;
}

/** Dumps the `i`th tree in one of the engine's slots, sealing its images as they are written. */
async function dump(t: Taken, i: number): Promise<void> {
  const { run } = t, root = t.trees[i].root, session = sessionOf(run.machine);
  await run.slots.run(async () => {
    if (run.signal.aborted) return;
    if (await session.isStill(t.ours.roots[i]) === false) { // its pid may be another's now
      const message = `snapshot failed: process ${root}, the root of a tree, ended before its dump`;
      return run.fail({ code: "DUMP_FAILED", message });
    }
    if (t.times.dump === undefined) {
      t.times.dump = run.at();
      run.phase("dump");
    }
    let part: [SnapshotFailure, string] = ["DUMP_FAILED", `the ${run.engine.kind} dump failed`];
    let sealing: Promise<SnapshotFile[]> | undefined;
    try {
      const writing = run.engine.dump({
        ...run.tree(root),
        imagesDir: t.out.imagesDirs[i],
        ...(t.o.tcpEstablished ? { tcpEstablished: true } : {}),
      });
      // On disk and digested as they are written, while this and other trees' dumps go on.
      sealing = started(t.out.dir.seal(t.trees[i].images, { signal: run.signal, writing }));
      const dumped = await writing;
      for (const { pid } of dumped) t.ours.members.push({ ...await session.identify(pid), pid });
      part = ["WRITE_FAILED", "its images could not be put on disk"];
      t.sealed[i] = await sealing;
      t.dumped[i] = dumped;
      const [bytes, gpuMemoryMiB] = [bytesOf(t.sealed[i]), heldMiB(t.trees[i].processes)];
      run.tell({ type: "tree-end", root, how: "dumped", bytes, gpuMemoryMiB, at: 0 });
    } catch (err) {
      // Nothing of the tree's is left open once its part has failed.
      await sealing?.catch(() => {});
      run.fail(failure(...part, err));
    } finally {
      t.times.dumped = run.at();
    }
  });
}

/** Phase 4: the manifest, last: a directory without one is no snapshot. */
async function writeManifest(t: Taken): Promise<Manifest> {
  const { run, o, facts, version, probe } = t;
  run.phase("write");
  try {
    const manifest: Manifest = {
      format: MANIFEST_FORMAT,
      createdAt: new Date().toISOString(),
      tool: { name: "@ckpt/cuda", version: VERSION },
      host: { hostname: facts.hostname, kernel: facts.kernel },
      driver: {
        cudaVersion: version.code === CUDA_SUCCESS ? version.value : 0,
        ...(facts.driverRelease ? { release: facts.driverRelease } : {}),
      },
      engine: { kind: run.engine.kind, ...(probe.version ? { version: probe.version } : {}) },
      gpus: (await run.listing).map(({ index, uuid, name }) => {
        const totalMiB = "byPid" in t.report ? t.report.totalMiB?.get(uuid) : undefined;
        return { index, uuid, name, ...(totalMiB !== undefined ? { totalMiB } : {}) };
      }),
      // The trees as dumped: a process may have come or gone since they were listed.
      trees: t.trees.map((tree, i) => asDumped(tree, t.dumped[i]!)),
      options: {
        leaveRunning: o.leaveRunning,
        job: o.job,
        ...(o.tcpEstablished ? { tcpEstablished: true as const } : {}),
      },
      timings: {
        suspendMs: roundMs(t.times.suspended - t.times.suspend),
        dumpMs: t.times.dump === undefined ? 0 : roundMs(t.times.dumped - t.times.dump),
        totalMs: run.at(),
      },
      files: t.sealed.flat().sort((a, b) => a.path < b.path ? -1 : a.path > b.path ? 1 : 0),
    };
    await t.out.writeManifest(manifest);
    return manifest;
  } catch (err) {
    throw await rollBack(t, failure("WRITE_FAILED", "its manifest could not be written", err));
  }
}

/** Phase 5: ends the processes, or lets them go on; then the snapshot is over. */
async function end(t: Taken, manifest: Manifest): Promise<void> {
  const { run, o, out } = t;
  // Before the processes are ended, what was sealed is there still, whole, and can all be open at
  // once (as a restore holds it, within the open-file limit): else none is ended.
  const whole = "its files could not be confirmed whole before the processes were ended";
  const changed = !o.leaveRunning && await out.checkWhole(manifest)
    .then(() => undefined, (err) => failure("WRITE_FAILED", whole, err));
  if (changed) throw await rollBack(t, changed);
  // Until the processes are ended, a stop (one during that wait too) still puts everything back.
  const stopped = run.stopped(), message = `snapshot stopped at its end: ${stopped}`;
  if (stopped) throw await rollBack(t, { code: "STOPPED", message });
  run.phase("end");
  if (o.leaveRunning) {
    const { resumed } = await resumeAll(t);
    if (resumed && !resumed.ok) {
      const where = out.dir.path;
      await out.dir.close();
      const message = `the snapshot in ${where} is complete, but not every CUDA process could be ` +
        `resumed: ${groupFailure(resumed)}`;
      const left = resumed.processes.filter((p) => p.status !== "done" && p.status !== "unchanged")
        .map((p) => `${p.pid} ${p.state ?? "of unknown state"}`).join(", ");
      const detail = `left so: ${left}; \`cuda-checkpoint recover ${where}\` resumes them ` +
        `once the cause is fixed (the others run)`;
      const code = "RESUME_FAILED", cause = firstError(resumed);
      throw new SnapshotError({ code, operation: "snapshot", message, detail, cause });
    }
  } else await endTrees(run, t.ours);
  await out.finish();
}

/**
 * Resumes every process the snapshot suspends that is still there, each as far as it can go (as a
 * job where the snapshot is one): one that ended since holds back no other. Says which ended.
 */
async function resumeAll(t: Taken): Promise<{ resumed?: GroupResult; gone: number[] }> {
  const session = sessionOf(t.run.machine), gone: number[] = [];
  const ended = async (p: ProcessIdentity) => (await session.isStill(p)) === false;
  for (const p of t.who) if (await ended(p)) gone.push(p.pid);
  const alive = t.who.filter((p) => !gone.includes(p.pid) && !t.untouched.has(p.pid));
  if (alive.length === 0) return { gone };
  const settings = { ...t.run.group(false), allOrNothing: false, job: t.o.job };
  const all = await runGroup(t.run.machine, "resume", alive.map((p) => p.pid), settings);
  // One that ended as it was resumed (a kill takes a while to let go of GPU memory) is gone too.
  for (const p of alive) {
    const failed = all.processes.find((o) => o.pid === p.pid)?.status === "failed";
    if (failed && await ended(p)) gone.push(p.pid);
  }
  const processes = all.processes.filter((o) => !gone.includes(o.pid));
  const ok = processes.every((o) => o.status === "done" || o.status === "unchanged");
  return { resumed: { ...all, processes, ok }, gone };
}

/** Puts every process back and removes what was written (the trace kept where one is not back). */
async function rollBack(t: Taken, { code, message, cause }: Failure): Promise<SnapshotError> {
  t.run.phase("rollback");
  const { resumed: back, gone } = await resumeAll(t);
  const where = t.out.dir.path, who = `process${gone[1] ? "es" : ""} ${gone.join(", ")}`;
  const ended = gone.length > 0 ? ` (${who} had ended)` : "";
  const removed = !back || back.ok; // the snapshot's directory with it
  let detail: string;
  if (removed) {
    const each = gone.length === 0 ? "every process" : back ? "every other process" : "";
    const put = `${each} was put back as it was, and keeps running`;
    detail = `${each ? put : "no process was left to resume"}${ended}${await t.out.discard()}`;
  } else {
    await t.out.dir.close();
    detail = `the CUDA processes could not all be resumed${ended}: ${groupFailure(back)}; ` +
      `${where}/${TRACE_FILE} names them: \`cuda-checkpoint recover ${where}\` resumes them ` +
      `once the cause is fixed`;
  }
  // A log in a tree's directory (the simulator's; real criu's is kept beside): gone with it, or
  // named by the directory's own path (the engine's is through our descriptor, closed now).
  let log = (cause instanceof EngineError && cause.log) || undefined;
  const i = t.out.imagesDirs.findIndex((d) => log?.startsWith(`${d}/`)), d = t.out.imagesDirs[i];
  if (d) {
    log = removed ? undefined : `${where}/${treeDirName(t.trees[i].root)}${log!.slice(d.length)}`;
  }
  return new SnapshotError({ code, operation: "snapshot", message, detail, cause, log });
}
