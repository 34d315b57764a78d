// A snapshot's restore, in phases over one record ({@link Restoring}): all checked first; each
// tree restored, held stopped until its memory images matched, its CUDA processes resumed as one
// job as soon as it is back. A failure ends what the engine made (or, in the GPU half, leaves the
// processes checkpointed).

import { readState } from "../calls.ts";
import { CUDA_SUCCESS, formatDriverVersion, type GpuPair } from "../driver.ts";
import { EngineError } from "../engine.ts";
import { messageOf, RefusedError, SnapshotError } from "../errors.ts";
import { runGroup } from "../group.ts";
import type { GroupResult, ProcessOutcome } from "../group_types.ts";
import type { Machine } from "../machine.ts";
import { completed, derivedMapping, mappingProblems, mappingRefused } from "../mapping.ts";
import { checkGpuMapping, checkSignal, flag, formatGpuUuid } from "../options.ts";
import { checkFunction, type GpuMapping, type Settings, wholeTimeout } from "../options.ts";
import { sessionOf } from "../process.ts";
import { onto } from "../room.ts";
import { roundMs } from "../time.ts";
import { olderVersion } from "../version.ts";
import { openSnapshot } from "./layout.ts";
import type { Manifest, ManifestProcess, ManifestTree } from "./manifest.ts";
import { bytesOf, firstError, groupFailure, heldMiB } from "./run.ts";
import { prerequisite, Run, type SnapshotEvent, started, type WholeSettings } from "./run.ts";
import { checkPidsFree, recorded, treesNow, untilFree, usesOf, watchHeld } from "./trees.ts";
import type { Disturbed } from "./trees.ts";

/** Options of `restoreSnapshot`. */
export interface RestoreSnapshotOptions {
  /** The machine to restore onto; this machine when left out. */
  machine?: Machine;
  /** Where the snapshot's GPUs go (left out: by index, each onto one of its chip). */
  gpuMapping?: GpuMapping;
  /** Whether to check the GPUs' room for what each process held first (default `true`). */
  checkRoom?: boolean;
  /** A deadline for the whole restore in ms (on the machine's clock; 0: none). */
  timeoutMs?: number;
  /** Stops the restore: processes the engine made are ended. */
  signal?: AbortSignal;
  /** Called as the restore goes ({@link SnapshotEvent}). Must not throw. */
  onProgress?: (event: SnapshotEvent) => void;
}

/** What `restoreSnapshot` did. */
export interface RestoreSnapshotResult {
  /** The snapshot's directory, absolute. */
  readonly dir: string;
  /** Its manifest. */
  readonly manifest: Manifest;
  /** The GPU pairs the CUDA processes were restored with (empty: in place). */
  readonly gpuMapping: Readonly<Record<string, string>>;
  /** Every process of the snapshot, back with its pid. */
  readonly pids: readonly number[];
  /** The whole restore's time in ms. */
  readonly ms: number;
  /** Its parts in ms: the checks, the engine's restores, the CUDA processes' restore and unlock. */
  readonly timings: Readonly<{ checkMs: number; restoreMs: number; resumeMs: number }>;
}

/** The options of `restoreSnapshot` and their checks, for `checkTable` where they enter. */
export const RESTORE_OPTIONS = {
  gpuMapping: (v: unknown) => v === undefined ? undefined : checkGpuMapping(v),
  checkRoom: flag(true),
  timeoutMs: wholeTimeout("restore"),
  signal: checkSignal,
  onProgress: checkFunction<WholeSettings["onProgress"]>,
};
/** A restore's options, checked, and what its errors call it (`restore-snapshot`). */
export type RestoreSettings = Settings<typeof RESTORE_OPTIONS> & { readonly operation: string };

/**
 * The snapshot as opened and what its restore did, for its phases and rollback: whether trees are
 * `held` stopped until their images matched, the GPU `pairs` (empty: in place), the CUDA processes
 * `running` when taken, the trees `made` and `begun` (a failed one may leave some behind), each
 * held tree's watch and what showed it `ran`, the trees back `whole`, an image that `differs`,
 * and `times` (ms).
 */
interface Restoring extends Awaited<ReturnType<typeof openSnapshot>> {
  readonly run: Run;
  readonly o: RestoreSettings;
  readonly held: boolean;
  pairs: readonly GpuPair[];
  readonly running: readonly ManifestProcess[];
  readonly made: ManifestTree[];
  readonly begun: Map<number, string>; // the pids of the trees it began on (free then): images
  claimed?: readonly number[]; // the pids it brings back, which no other restore may (checked)
  readonly watches: (() => Promise<Disturbed | undefined>)[];
  ran?: Disturbed;
  whole: number;
  differs?: RefusedError;
  readonly times: { checked: number; restored: number; resume?: number };
}

/** Restores the snapshot in `dir` onto `machine`. */
export async function restoreFrom(
  machine: Machine,
  dir: string,
  o: RestoreSettings,
): Promise<RestoreSnapshotResult> {
  const run = new Run(machine, o.operation, o);
  // The digests left for later go on until the restore ends, or stops.
  const ended = new AbortController(), verify = AbortSignal.any([run.signal, ended.signal]);
  try {
    run.phase("check");
    // Where the engine can hold trees stopped, memory images are digested while it loads them.
    const engine = run.engine, holds = engine.inertFile !== undefined && engine.wake !== undefined;
    const checksEnded = Promise.withResolvers<void>();
    const opened = await openSnapshot(run.store, dir, o.operation, {
      digests: true,
      signal: verify,
      laterFrom: checksEnded.promise,
      busy: () => run.slots.busy,
      ...(holds ? { later: (f) => engine.inertFile!(f.path.split("/").pop()!) } : {}),
    }).catch((err) => {
      run.notBegun("restore"); // an abort or the deadline, met while the files were checked
      throw err;
    });
    const running = opened.manifest.trees.flatMap((t) => t.processes)
      .filter((p) => p.cuda?.state === "running");
    const held = holds && opened.checked.digests, times = { checked: 0, restored: 0 };
    const nothingYet = { pairs: [], made: [], begun: new Map(), watches: [], whole: 0 };
    const r: Restoring = { run, o, ...opened, held, running, times, ...nothingYet };
    try {
      // A memory image that differs, found while the engine runs.
      r.checked.all.catch((err) => err instanceof RefusedError && (r.differs ??= err));
      // The memory images' digests begin once the checks passed; refused, they never begin.
      await check(r).catch((err) => {
        ended.abort(new Error("the restore was refused before it began"));
        throw err;
      }).finally(checksEnded.resolve);
      return await outcome(r, await bringBack(r));
    } finally {
      for (const pid of r.claimed ?? []) sessionOf(machine).restoring.delete(pid);
      await r.dir.close();
    }
  } finally {
    ended.abort(new Error("the restore ended"));
    run.close();
  }
}

/** Phase 1: checks everything, changes nothing; the mapping and what runs go in the record. */
async function check(r: Restoring): Promise<void> {
  const { run, o, manifest } = r, probe = await run.probing;
  const { engine } = run, dumped = manifest.engine;
  const older = dumped.kind === engine.kind && dumped.version && probe.version &&
    olderVersion(probe.version, dumped.version, 2);
  const newer = `the snapshot's images were written by ${dumped.kind} ${dumped.version}, and ` +
    `this machine's ${engine.kind} is ${probe.version}, which cannot read images of a newer ` +
    `release, so restore it with ${dumped.kind} ${dumped.version} or later`;
  if (older) throw prerequisite(o.operation, newer);
  // A process comes back with the libcuda it had: the driver must be the snapshot's.
  const version = await run.machine.driver.driverVersion(), taken = manifest.driver;
  if (version.code === CUDA_SUCCESS && version.value !== taken.cudaVersion) {
    const release = taken.release ? ` (${taken.release})` : "";
    const wanted = `CUDA ${formatDriverVersion(taken.cudaVersion)}${release}`;
    const other = `the snapshot was taken with a driver of ${wanted}, and this machine's is CUDA ` +
      `${formatDriverVersion(version.value)}: a process comes back with the libcuda it had, ` +
      `which needs the same driver, so restore it on a machine whose driver is ${wanted}`;
    throw prerequisite(o.operation, other);
  }
  await checkPidsFree(manifest, run.host, o.operation);
  const gpus = await run.listing;
  r.pairs = o.gpuMapping ?? derivedMapping(manifest.gpus, gpus, o.operation);
  // From the snapshot's GPUs; then, completed, as the GPU half will check it (every GPU here).
  let problems = mappingProblems(r.pairs, gpus, manifest.gpus);
  if (problems.length === 0) problems = mappingProblems(r.pairs = completed(r.pairs, gpus), gpus);
  const cannot = `the GPU mapping cannot work: ${problems.join("; ")}`;
  if (problems.length > 0) throw mappingRefused(o.operation, cannot);
  if (o.checkRoom) {
    const need = onto(r.running.map((p) => p.cuda!.gpuMemoryMiB ?? {}), r.pairs);
    const who = "the snapshot's processes";
    await sessionOf(run.machine).room.fits(need, { operation: o.operation, who });
  }
  // Last, as it may wait: the engine asked whether each tree can come back here (criu: its ports
  // free); one refused stops the others' waits, and the restore is refused (`PREREQUISITE`).
  const refused = new AbortController(), signal = AbortSignal.any([run.signal, refused.signal]);
  await Promise.all(manifest.trees.map(async (t) => {
    await engine.ready?.({
      ...run.tree(t.root),
      imagesDir: await r.dir.enginePath(t.images),
      signal,
      onWait: (ms, why) => run.tell({ type: "wait", root: t.root, ms, why, at: 0 }),
    }).catch((err) => {
      refused.abort();
      run.notBegun("restore");
      throw err instanceof EngineError ? prerequisite(o.operation, err.message) : err;
    });
  }));
  if (o.signal?.aborted) run.notBegun("restore", "it was aborted");
  // Not while another restore of this program brings one back: each would end what the other made.
  const pids = manifest.trees.flatMap((t) => t.processes.map((p) => p.pid)), { operation } = o;
  const restoring = sessionOf(run.machine).restoring, pid = pids.find((p) => restoring.has(p));
  const reason = `pid ${pid} must be free for the snapshot's process to come back, and another ` +
    `restore under way in this program is bringing it back; wait for that one to end`;
  if (pid !== undefined) throw new RefusedError({ code: "PID_TAKEN", operation, pid, reason });
  for (const p of r.claimed = pids) restoring.add(p);
  r.times.checked = r.times.restored = run.at();
}

/** Phase 2: every tree back, the CUDA processes resumed as one job, each as its tree is back. */
async function bringBack(r: Restoring): Promise<GroupResult | undefined> {
  const { run, manifest } = r;
  const all = heldMiB(manifest.trees.flatMap((t) => t.processes)); // those taken checkpointed too
  run.phase("restore", { imageBytes: bytesOf(manifest.files), gpuMemoryMiB: all });
  const treeOf = new Map<number, Promise<void>>();
  const trees = manifest.trees.map((t) => {
    const back = started(restoreTree(r, t));
    for (const p of t.processes) treeOf.set(p.pid, back);
    return back;
  });
  const pids = r.running.map((p) => p.pid), pairs = r.pairs.length === 0 ? null : r.pairs;
  const resumed = pids.length === 0 ? undefined : runGroup(run.machine, "resume", pids, {
    ...run.group(true),
    job: true,
    checkRoom: r.o.checkRoom,
    gpuMapping: () => pairs,
    ready: (pid) => treeOf.get(pid)!,
  });
  await Promise.allSettled(trees);
  return await resumed;
}

/** Why a tree was not restored, or not let go: the restore stopped first. */
const NOT_STARTED = new Error("stopped before its restore began, or before it was let go");

/** Restores one tree (held until its images matched, where held) and records its room. */
async function restoreTree(r: Restoring, t: ManifestTree): Promise<void> {
  const { run } = r;
  const pids = t.processes.map((p) => p.pid);
  try {
    await run.slots.run(async () => {
      if (run.signal.aborted) throw NOT_STARTED;
      // A pid another process took since the checks (reused) is not the rollback's to end.
      const held = await Promise.all(pids.map((p) => run.host.identify?.(p).catch(() => true)));
      const imagesDir = await r.dir.enginePath(t.images);
      for (const [i, pid] of pids.entries()) if (!held[i]) r.begun.set(pid, imagesDir);
      await run.engine.restore({
        ...run.tree(t.root),
        imagesDir,
        ...(r.held ? { leaveStopped: true } : {}),
        ...(r.manifest.options.tcpEstablished ? { tcpEstablished: true } : {}),
      });
    });
    r.made.push(t);
    const files = r.manifest.files.filter((f) => f.path.startsWith(`${t.images}/`));
    const [bytes, gpuMemoryMiB] = [bytesOf(files), heldMiB(t.processes)];
    run.tell({ type: "tree-end", root: t.root, how: "restored", bytes, gpuMemoryMiB, at: 0 });
    if (r.held) {
      // Stopped, having run nothing: let go once every image of the tree matched, unless the
      // whole must stop meanwhile (an abort, the deadline, another part's failure), or it ran.
      const ran = await watchHeld(run.host, t.root, pids);
      r.watches.push(ran);
      const stop = new Promise((end) => run.signal.addEventListener("abort", end, { once: true }));
      await Promise.race([r.checked.later(t.images), run.signal.aborted || stop]);
      if (run.signal.aborted) throw NOT_STARTED;
      r.ran ??= await ran();
      if (r.ran) throw new Error(r.ran.why);
      await run.engine.wake!(pids);
      r.watches.splice(r.watches.indexOf(ran), 1); // let go: it runs now, as it should
    }
    r.whole++;
  } catch (err) {
    // The engine failed on images that differ (criu on a corrupt image): the difference is the
    // refusal, once the tree's digests are done; so is one that differs while it was held.
    if (!(err instanceof RefusedError) && err !== NOT_STARTED && !run.signal.aborted) {
      await r.checked.later(t.images).catch((e) => e instanceof RefusedError && (r.differs ??= e));
    }
    if (err instanceof RefusedError) r.differs ??= err;
    // Stopped (an abort, the deadline, another part's failure): the stop says why, not this.
    const stopping = err === NOT_STARTED || run.signal.aborted || run.stopped() !== undefined;
    if (err instanceof RefusedError || !stopping) run.fail(err);
    throw err;
  } finally {
    r.times.restored = Math.max(r.times.restored, run.at());
  }
  // What each of its CUDA processes held, recorded as its checkpoint would have recorded it: the
  // ones to resume, and those taken checkpointed, which stay so (a later resume checks its room);
  // the ended process's record goes (it guarded a resume of the tree until now).
  const session = sessionOf(run.machine);
  await Promise.all(t.processes.map(async ({ pid, cuda }) => {
    if (!cuda?.gpuMemoryMiB) return;
    const identity = await session.identify(pid);
    if (identity) await session.room.recorded(identity, cuda.gpuMemoryMiB, true);
  }));
  if (r.times.resume === undefined) {
    r.times.resume = run.at();
    run.phase("resume", { gpuMemoryMiB: heldMiB(r.running) });
  }
}

/** Phase 3: what came of the restore; a failure is undone where it can be, and said. */
async function outcome(r: Restoring, result?: GroupResult): Promise<RestoreSnapshotResult> {
  const { run, manifest } = r, stopped = run.stopped();
  const short = stopped && r.whole < manifest.trees.length;
  if (run.failure !== undefined || short) throw await rollBack(r, stopped);
  if (result && !result.ok) throw await resumeFailed(r, result);
  const ms = run.at();
  return {
    dir: r.dir.path,
    manifest,
    gpuMapping: Object.fromEntries(
      r.pairs.map((p) => [formatGpuUuid(p.oldUuid), formatGpuUuid(p.newUuid)]),
    ),
    pids: manifest.trees.flatMap((t) => t.processes.map((p) => p.pid)),
    ms,
    timings: {
      checkMs: r.times.checked,
      restoreMs: roundMs(r.times.restored - r.times.checked),
      resumeMs: r.times.resume === undefined ? 0 : roundMs(ms - r.times.resume),
    },
  };
}

/** Ends every tree the engine made; resolves to the error (an image that differs first). */
async function rollBack(r: Restoring, stopped: string | undefined): Promise<Error> {
  const { run, o } = r;
  run.phase("rollback");
  for (const watch of r.watches) r.ran ??= await watch();
  // Every process the engine made: its trees as they are now, and the pids of those it failed on
  // (free when it began) that a process holds running the snapshot's command line, the engine's run
  // on those images (a task criu forked and had not restored yet) or none (a zombie, or a task criu
  // was remapping when it died): one that took such a pid since (criu's "Can't fork") runs its own,
  // and is not ours to end.
  const listed = r.made.flatMap((t) => t.processes.map((p) => p.pid));
  const left = [...r.begun.keys()].filter((pid) => !listed.includes(pid));
  const was = new Map(r.manifest.trees.flatMap((t) => t.processes.map((p) => [p.pid, p.command])));
  let unread = "";
  const uses = left.length === 0 ? [] : await usesOf(run.host, left).catch((err) => {
    unread = `; who holds ${left} could not be read (${messageOf(err)}): any was left`;
    return [];
  });
  const held = await Promise.all(uses.map(async ({ id, holder, as }) => {
    const tree = as === "pid" && holder === id && await run.host.processTree?.(id).catch(() => []);
    const command = tree ? tree[0]?.command : undefined;
    const ours = !command || recorded(command) === was.get(id) ||
      command.includes(r.begun.get(id)!);
    return tree && ours ? tree.map((p) => p.pid) : [];
  }));
  const now = await treesNow(run.host, r.made.map((t) => t.root));
  const made = [...new Set([...listed, ...held.flat(), ...now])];
  const failed = await run.engine.kill(made).then(() => undefined, messageOf);
  await untilFree(run, made).catch(() => {});
  const ended =
    (made.length === 0
      ? `no process ${unread ? "it made was found" : "was made"}`
      : failed !== undefined
      ? `the processes it had made could not all be ended (${failed}); the snapshot is unchanged`
      : r.ran
      ? `${r.ran.why}: every process of its tree was ended; the snapshot is unchanged`
      : r.whole > 0 || !r.held // a tree let go (its images matched), or never held, ran
      ? "the processes it had made were ended; the snapshot is unchanged"
      : `the processes ${run.engine.kind} had made, stopped before any of them ran, were ended; ` +
        `the snapshot is unchanged`) + unread;
  if (r.differs) {
    const { reason } = r.differs;
    return new RefusedError({ code: "SNAPSHOT", operation: o.operation, reason, detail: ended });
  }
  const err = run.failure?.error;
  const why = err === undefined
    ? `it was stopped: ${stopped}`
    : r.ran && messageOf(err) === r.ran.why
    ? `a tree ${r.ran.how} before its images were verified`
    : `the ${run.engine.kind} restore failed: ${messageOf(err)}`;
  return new SnapshotError({
    code: err === undefined ? "STOPPED" : "RESTORE_FAILED",
    operation: o.operation,
    message: `restore of the snapshot in ${r.dir.path} failed: ${why}`,
    detail: ended,
    cause: err,
    log: (err instanceof EngineError && err.log) || undefined,
  });
}

/** The processes are back, but their GPU restore failed: where each is left, and what to do. */
async function resumeFailed(r: Restoring, result: GroupResult): Promise<SnapshotError> {
  const stateOf = async (p: ProcessOutcome) =>
    p.state ?? await readState(r.run.machine.driver, p.pid).catch(() => undefined);
  const states = await Promise.all(result.processes.map(stateOf));
  const left = result.processes.map((p, i) => `${p.pid} ${states[i] ?? "of unknown state"}`);
  const pids = r.running.map((p) => p.pid).join(",");
  const roots = r.manifest.trees.map((t) => `kill ${t.root}`).join("; ");
  return new SnapshotError({
    code: result.aborted || result.deadlinePassed ? "STOPPED" : "RESUME_FAILED",
    operation: r.o.operation,
    message: `the processes of the snapshot in ${r.dir.path} are back, but their GPU restore ` +
      `failed: ${groupFailure(result, r.run.stopped())}`,
    detail: states.every((state) => state === "checkpointed")
      ? `they are checkpointed: once the cause is fixed, resume them (cuda-checkpoint --toggle ` +
        `--pid ${pids}), or end them (${roots})`
      : `they are left so: ${left.join(", ")}`,
    cause: firstError(result),
  });
}
