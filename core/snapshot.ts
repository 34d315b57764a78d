/**
 * Snapshots: whole process trees, their CUDA processes included, to a directory on disk and back,
 * through an engine (CRIU; `engine.ts`).
 *
 * {@link snapshot} checks everything first (the engine and its prerequisites, the trees, the CUDA
 * state of each process, the directory), suspends every CUDA process of the trees at once (as one
 * job where asked), has the engine dump every tree (leaving the processes running), writes the
 * manifest, and only then ends the processes (or resumes them, `leaveRunning`). A failure at any
 * point before the end puts every process back as it was, running.
 *
 * {@link restoreSnapshot} reads the manifest strictly and checks everything before changing
 * anything: the image files, the engine, the driver (the one the snapshot was taken with), every
 * pid free, the GPUs (a mapping given, or the snapshot's GPUs onto this machine's by index, the
 * same chip), room on each for what its processes held. Then the engine restores every tree, and
 * the CUDA processes are restored onto the GPUs and unlocked (as one job where the snapshot was
 * one). A failure of the engine ends what it made; a failure of the GPU restore leaves the
 * processes checkpointed, with what to do in the error.
 *
 * @module
 */

import type { CheckpointDriver, GpuInfo, GpuPair } from "./driver.ts";
import { fallbackSnapshotParts } from "./defaults.ts";
import {
  type DumpedProcess,
  EngineError,
  type EngineProbe,
  type SnapshotEngine,
  type SnapshotFile,
  type SnapshotStore,
} from "./engine.ts";
import { RefusedError, SnapshotError, type SnapshotFailure } from "./errors.ts";
import {
  type GroupEvent,
  type GroupOptions,
  type GroupResult,
  resumeAll,
  runGroup,
} from "./group.ts";
import type { GpuMemoryReport, HostProcesses, PidUse, TreeProcess } from "./host.ts";
import { checkHost } from "./listing.ts";
import {
  type Manifest,
  MANIFEST_FILE,
  MANIFEST_FORMAT,
  type ManifestGpu,
  type ManifestProcess,
  type ManifestTree,
  parseManifest,
  serializeManifest,
  treeDirName,
} from "./manifest.ts";
import {
  checkFlag,
  checkFunction,
  checkGpuMapping,
  checkInteger,
  checkOptions,
  checkPid,
  checkSignal,
  checkTimeoutMs,
  DEFAULT_LOCK_TIMEOUT_MS,
  type GpuMapping,
} from "./options.ts";
import { clockOf } from "./process.ts";
import { checkSource, currentDefaultSource, type DriverSource, lease } from "./sources.ts";
import { CUDA_SUCCESS, formatDriverVersion } from "./codes.ts";
import {
  cudaRuns,
  isSnapshotState,
  memoryOnHost,
  plan,
  SNAPSHOT_STATES,
  stateName,
  type Step,
} from "./states.ts";
import { describeValue, formatGpuUuid, parseGpuUuid } from "./uuid.ts";
import { VERSION } from "./version.ts";

/** What takes snapshots, written into manifests. */
const TOOL = { name: "@ckpt/cuda", version: VERSION };

/** A part of a snapshot or of its restore, as progress events name it. */
export type SnapshotPhase =
  /** Checking everything before anything changes. */
  | "check"
  /** Suspending the CUDA processes (lock and checkpoint). */
  | "suspend"
  /** The engine dumping every tree. */
  | "dump"
  /** Writing the manifest. */
  | "write"
  /** Ending the processes (or resuming them, `leaveRunning`). */
  | "end"
  /** The engine restoring every tree. */
  | "restore"
  /** Restoring the CUDA processes onto the GPUs and unlocking them. */
  | "resume"
  /** Putting things back after a failure. */
  | "rollback";

/**
 * Progress of a snapshot or a restore: a phase starting, image bytes written so far by one tree's
 * dump, or a step of one CUDA process (the group operations' events). Times are ms since the call.
 */
export type SnapshotEvent =
  | { readonly type: "phase"; readonly phase: SnapshotPhase; readonly at: number }
  | { readonly type: "bytes"; readonly root: number; readonly bytes: number; readonly at: number }
  | GroupEvent;

/** What snapshots and their restores are done with. */
export interface SnapshotParts {
  /**
   * The driver; the default driver when left out. A driver given as an object stays open.
   */
  driver?: DriverSource;
  /**
   * The engine: the driver's own (the simulator's), else the installed `criu` (installed as the
   * default by `@ckpt/cuda/snapshot`).
   */
  engine?: SnapshotEngine;
  /** Where snapshots live: the file system by default (installed by `@ckpt/cuda/snapshot`). */
  store?: SnapshotStore;
  /**
   * The machine's processes: the driver's own host (the simulator's), else the machine's (`/proc`,
   * NVML, the records of held GPU memory). A host given here is the caller's to close.
   */
  host?: HostProcesses;
}

/** Options of {@link snapshot}. */
export interface SnapshotOptions extends SnapshotParts {
  /**
   * Keep the processes running after the dump (CRIU's leave-running): a periodic checkpoint of a
   * job that must go on. Default `false`: once every tree is on disk, its processes are ended.
   */
  leaveRunning?: boolean;
  /**
   * The CUDA processes share GPU state (NCCL ranks, CUDA IPC): lock all before checkpointing any,
   * and (recorded in the manifest) restore all before unlocking any. Default `false`.
   */
  job?: boolean;
  /**
   * A deadline for the whole snapshot in ms (on the driver's clock): lock timeouts are cut to it,
   * a dump still running when it passes is stopped, and every process is put back.
   */
  timeoutMs?: number;
  /** Stops the snapshot: every process is put back as it was, running. */
  signal?: AbortSignal;
  /** Each CUDA process's lock timeout in ms (0 waits forever); 10 000 by default. */
  lockTimeoutMs?: number;
  /** Called as the snapshot goes ({@link SnapshotEvent}). Must not throw. */
  onProgress?: (event: SnapshotEvent) => void;
}

/** Options of {@link restoreSnapshot}. */
export interface RestoreSnapshotOptions extends SnapshotParts {
  /**
   * Where the snapshot's GPUs go: from each GPU of the snapshot (its UUID, as the manifest names
   * it) to a GPU of this machine. Left out: the snapshot's GPUs onto this machine's by index
   * (restored in place where they are the same GPUs), each onto one of the same chip.
   */
  gpuMapping?: GpuMapping;
  /**
   * Whether to check, before anything changes, that the GPUs have room for what each process held
   * (default `true`). On driver 580 a restore that runs out of GPU memory loses the process.
   */
  checkRoom?: boolean;
  /** A deadline for the whole restore in ms (on the driver's clock). */
  timeoutMs?: number;
  /** Stops the restore: processes the engine made are ended. */
  signal?: AbortSignal;
  /** Called as the restore goes ({@link SnapshotEvent}). Must not throw. */
  onProgress?: (event: SnapshotEvent) => void;
}

/** What {@link snapshot} made. */
export interface SnapshotResult {
  /** The snapshot's directory, absolute. */
  readonly dir: string;
  /** Its manifest, as written. */
  readonly manifest: Manifest;
  /** The whole snapshot's time in ms. */
  readonly ms: number;
}

/** What {@link restoreSnapshot} did. */
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
  /**
   * Its parts, in ms: the checks; the engine's restore of every tree (`criu restore`), from its
   * start to the last tree's end; the GPU half, from the first tree's GPU restore to the unlock of
   * every CUDA process. The two overlap: a tree's GPU restore begins as soon as it is back.
   */
  readonly timings: {
    readonly checkMs: number;
    readonly restoreMs: number;
    readonly resumeMs: number;
  };
}

/**
 * Takes a snapshot of the process trees rooted at `roots` into `dir`: see the module
 * documentation. Resolves once the manifest is written and the processes are ended (or resumed,
 * `leaveRunning`).
 *
 * @throws {RefusedError} (as a rejection) before anything changes: code `PREREQUISITE` (no engine,
 * not root, a kernel feature missing, a pid that is no process), `STATE` (a CUDA process that is
 * locked or failed), `SNAPSHOT` (a directory that cannot be used), `UNSUPPORTED`.
 * @throws {SnapshotError} (as a rejection) when a part fails after things began to change; every
 * process was put back as it was, and the error says so.
 * @throws {TypeError} or {RangeError} for bad input, naming it.
 *
 * @example
 * ```ts
 * import { snapshot, restoreSnapshot } from "@ckpt/cuda/snapshot";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver();
 * const job = sim.spawn({ memoryMiB: 1024 });
 * const dir = "/var/lib/snapshots/job-1"; // a new (or empty) directory
 * await snapshot([job.pid], dir, { driver: sim }); // the process is on disk, and ended
 * await restoreSnapshot(dir, { driver: sim }); // back, with its pid and its GPU memory
 * ```
 */
export async function snapshot(
  roots: readonly number[],
  dir: string,
  options?: SnapshotOptions,
): Promise<SnapshotResult> {
  const o = checkOptions(options, "snapshot", [
    "driver",
    "engine",
    "store",
    "host",
    "leaveRunning",
    "job",
    "timeoutMs",
    "signal",
    "lockTimeoutMs",
    "onProgress",
  ]);
  checkRoots(roots);
  checkDir(dir);
  const leaveRunning = checkFlag(o.leaveRunning, "leaveRunning", false);
  const job = checkFlag(o.job, "job", false);
  const lockTimeoutMs = o.lockTimeoutMs === undefined
    ? DEFAULT_LOCK_TIMEOUT_MS
    : checkTimeoutMs(o.lockTimeoutMs, "lockTimeoutMs");
  const run = new Run(o, "snapshot");
  const taken = lease(o.driver ?? currentDefaultSource());
  try {
    const session = await taken.session;
    const driver = session.driver;
    const clock = run.start(driver);
    const { signal, progress } = run;
    const at = () => run.at();
    const left = () => run.left();
    const phase = (p: SnapshotPhase) => run.phase(p);
    const stopped = () => run.stopped();

    // 1. Check everything, change nothing.
    phase("check");
    const host = o.host ?? await session.host();
    const { engine, store } = partsOf(o, driver);
    if (!host?.processTree) {
      throw prerequisite(
        "snapshot",
        `the ${host?.kind ?? driver.kind} host cannot tell process trees, which a snapshot needs`,
      );
    }
    const probing = probeEngine(engine, "snapshot");
    // cuInit, the first time (about 0.2 s on an H100), runs off the main thread beside the rest.
    const listing = started(driver.listGpus ? driver.listGpus() : Promise.resolve([]));
    const trees = await Promise.all(roots.map(async (root) => {
      const tree = await host.processTree!(root);
      if (!tree || tree.length === 0) {
        throw prerequisite(
          "snapshot",
          `no process has pid ${root} (give the pid of a live process)`,
        );
      }
      return { root, processes: tree };
    }));
    checkDisjoint(trees);
    const probe = await probing;
    const report = host.gpuMemory
      ? await host.gpuMemory().catch((e): GpuMemoryReport => ({ unknown: String(e) }))
      : { unknown: `the ${host.kind} host cannot tell GPU memory` } as GpuMemoryReport;
    const manifestTrees = await Promise.all(
      trees.map((t) => describeTree(t.root, t.processes, driver, host, report)),
    );
    const cuda = manifestTrees.flatMap((t) => t.processes).filter((p) => p.cuda !== undefined);
    const toSuspend = cuda.filter((p) => cudaRuns(p.cuda!.state)).map((p) => p.pid);
    const gpus = describeGpus(await listing, report);
    const version = await driver.driverVersion();
    const facts = host.facts ? await host.facts() : { hostname: host.kind, kernel: "unknown" };
    const where = await store.create(dir).catch((err) => {
      throw new RefusedError({
        code: "SNAPSHOT",
        operation: "snapshot",
        reason: `${dir} cannot hold a snapshot: ${messageOf(err)}`,
      });
    });
    const why = stopped();
    if (why) {
      throw new SnapshotError({
        code: "STOPPED",
        operation: "snapshot",
        message: `snapshot stopped before it began: ${why}`,
        detail: "nothing was changed",
      });
    }

    // Every tree's directory first, before anything changes (and, on the simulator, so that
    // virtual time does not run on while a directory is being made).
    const imageDirs = await Promise.all(trees.map((t) => store.subdir(where, treeDirName(t.root))))
      .catch((err) => {
        throw new RefusedError({
          code: "SNAPSHOT",
          operation: "snapshot",
          reason: `${where} cannot hold a snapshot: ${messageOf(err)}`,
        });
      });
    const putBack = async (code: SnapshotFailure, message: string, cause: unknown) => {
      phase("rollback");
      const resumed = toSuspend.length === 0
        ? undefined
        : await resumeAll(toSuspend, { ...run.groupOptions(driver, host, undefined), job });
      return new SnapshotError({
        code,
        operation: "snapshot",
        message,
        detail: !resumed || resumed.ok
          ? "every process was put back as it was, and keeps running"
          : `the CUDA processes could not all be resumed: ${groupFailure(resumed)}`,
        cause,
        ...(cause instanceof EngineError && cause.log ? { log: cause.log } : {}),
      });
    };

    // 2 and 3. Suspend every CUDA process, all at once, and dump each tree as soon as its own
    // CUDA processes are suspended (a tree's dump waits for no other tree's suspend), leaving its
    // processes running. As a job, every process is locked before any is checkpointed. The first
    // failure stops the rest, and every process is put back.
    phase("suspend");
    const t1 = clock.now();
    const parts = new FirstFailure<{ suspend: GroupResult } | { dump: unknown }>(signal);
    const group = (action: "lock" | "checkpoint" | "suspend", pids: number[]) =>
      runGroup(action, pids, {
        ...run.groupOptions(driver, host, parts.signal),
        lockTimeoutMs,
        rollBackOnAbort: true,
        checkRoom: true,
      });
    let suspendEnd = t1;
    let dumpStart: number | undefined;
    let dumpEnd = t1;
    const dumpTree = async (t: typeof trees[number], i: number) => {
      const inTree = new Set(t.processes.map((p) => p.pid));
      const mine = toSuspend.filter((pid) => inTree.has(pid));
      if (mine.length > 0) {
        const suspended = await group(job ? "checkpoint" : "suspend", mine);
        if (!suspended.ok) throw parts.fail({ suspend: suspended });
      }
      suspendEnd = Math.max(suspendEnd, clock.now());
      if (parts.signal.aborted) throw new Error("stopped before its dump");
      if (dumpStart === undefined) {
        dumpStart = clock.now();
        phase("dump");
      }
      try {
        return await engine.dump({
          root: t.root,
          imagesDir: imageDirs[i],
          signal: parts.signal,
          ...(left() !== undefined ? { timeoutMs: left() } : {}),
          onBytes: (bytes) => progress({ type: "bytes", root: t.root, bytes, at: at() }),
        });
      } catch (err) {
        throw parts.fail({ dump: err });
      } finally {
        dumpEnd = Math.max(dumpEnd, clock.now());
      }
    };
    const dumps = await (async () => {
      if (job && toSuspend.length > 0) {
        const locked = await group("lock", toSuspend);
        if (!locked.ok) {
          parts.fail({ suspend: locked });
          return [];
        }
      }
      return await Promise.allSettled(trees.map(dumpTree));
    })().finally(() => parts.close());
    const f = parts.first;
    if (f || dumps.some((d) => d.status === "rejected")) {
      const why = stopped();
      const doing = dumpStart === undefined ? "suspending its CUDA processes" : "dumping";
      const [code, message, cause]: [SnapshotFailure, string, unknown] = why
        ? ["STOPPED", `snapshot stopped while ${doing}: ${why}`, undefined]
        : f && "dump" in f
        ? [
          "DUMP_FAILED",
          `snapshot failed: the ${engine.kind} dump failed: ${messageOf(f.dump)}`,
          f.dump,
        ]
        : [
          "SUSPEND_FAILED",
          `snapshot failed while suspending its CUDA processes: ${
            f ? groupFailure(f.suspend) : "it was stopped"
          }`,
          f && firstError(f.suspend),
        ];
      throw await putBack(code, message, cause);
    }
    const suspendMs = suspendEnd - t1;
    const dumpMs = dumpStart === undefined ? 0 : dumpEnd - dumpStart;
    // The trees as dumped: a process may have come or gone since they were listed.
    const dumpedTrees = manifestTrees.map((t, i) =>
      asDumped(t, (dumps[i] as PromiseFulfilledResult<readonly DumpedProcess[]>).value)
    );

    // 4. The manifest, last: a directory without one is no snapshot.
    phase("write");
    let manifest: Manifest;
    try {
      const files: SnapshotFile[] = [];
      for (const t of dumpedTrees) files.push(...await store.files(where, t.images));
      manifest = {
        format: MANIFEST_FORMAT,
        createdAt: new Date().toISOString(),
        tool: TOOL,
        host: { hostname: facts.hostname, kernel: facts.kernel },
        driver: {
          cudaVersion: version.code === CUDA_SUCCESS ? version.value : 0,
          ...(facts.driverRelease ? { release: facts.driverRelease } : {}),
        },
        engine: { kind: engine.kind, ...(probe.version ? { version: probe.version } : {}) },
        gpus,
        trees: dumpedTrees,
        options: { leaveRunning, job },
        timings: { suspendMs, dumpMs, totalMs: run.at() },
        files: files.sort((a, b) => a.path < b.path ? -1 : a.path > b.path ? 1 : 0),
      };
      await store.writeManifest(where, serializeManifest(manifest));
    } catch (err) {
      throw await putBack(
        "WRITE_FAILED",
        `snapshot failed: its manifest could not be written: ${messageOf(err)}`,
        err,
      );
    }

    // 5. End the processes, or let them go on.
    phase("end");
    if (leaveRunning) {
      const resumed = toSuspend.length === 0
        ? undefined
        : await resumeAll(toSuspend, { ...run.groupOptions(driver, host, undefined), job });
      if (resumed && !resumed.ok) {
        throw new SnapshotError({
          code: "RESUME_FAILED",
          operation: "snapshot",
          message: `the snapshot in ${where} is complete, but its CUDA processes could not be ` +
            `resumed: ${groupFailure(resumed)}`,
          detail: "they are checkpointed: resume them (cuda-checkpoint --toggle) once the cause " +
            "is fixed",
          cause: firstError(resumed),
        });
      }
    } else {
      await endTrees(engine, host, dumpedTrees, clock.sleep);
    }
    return { dir: where, manifest, ms: run.at() };
  } finally {
    await taken.release();
  }
}

/**
 * Reads a snapshot's manifest and checks it against its files, without changing anything.
 *
 * @throws {RefusedError} (as a rejection) with code `SNAPSHOT` where `dir` is not a snapshot this
 * version can read, saying why.
 */
export async function inspectSnapshot(
  dir: string,
  options?: { store?: SnapshotStore },
): Promise<{ dir: string; manifest: Manifest }> {
  const o = checkOptions(options, "inspectSnapshot", ["store"]);
  checkDir(dir);
  const store = o.store ?? fallbackSnapshotParts().store;
  if (!store) throw noPart("store", "inspectSnapshot");
  return await readSnapshot(store, dir, "inspectSnapshot");
}

/**
 * Restores the snapshot in `dir`: see the module documentation. Resolves once every process is
 * back with its pid, its CUDA processes restored onto the GPUs and unlocked (those that were
 * running when the snapshot was taken).
 *
 * @throws {RefusedError} (as a rejection) before anything changes: code `SNAPSHOT` (not a snapshot,
 * corrupt, truncated, files changed), `PREREQUISITE` (no engine, not root, another driver),
 * `PID_TAKEN`, `MAPPING` (no GPU of the same chip, a mapping that cannot work), `NO_ROOM`.
 * @throws {SnapshotError} (as a rejection) when a part fails after things began to change: the
 * engine's restore (what it made was ended), or the GPU restore (the processes are checkpointed,
 * and the error says how to go on).
 */
export async function restoreSnapshot(
  dir: string,
  options?: RestoreSnapshotOptions,
): Promise<RestoreSnapshotResult> {
  const o = checkOptions(options, "restoreSnapshot", [
    "driver",
    "engine",
    "store",
    "host",
    "gpuMapping",
    "checkRoom",
    "timeoutMs",
    "signal",
    "onProgress",
  ]);
  checkDir(dir);
  const given = o.gpuMapping === undefined ? undefined : checkGpuMapping(o.gpuMapping);
  const checkRoom = checkFlag(o.checkRoom, "checkRoom", true);
  const run = new Run(o, "restore");
  const taken = lease(o.driver ?? currentDefaultSource());
  try {
    const session = await taken.session;
    const driver = session.driver;
    run.start(driver);
    const { signal } = run;
    const left = () => run.left();
    const phase = (p: SnapshotPhase) => run.phase(p);

    // 1. Check everything, change nothing.
    phase("check");
    const { engine, store } = partsOf(o, driver);
    const probing = probeEngine(engine, "restoreSnapshot");
    const listing = started(driver.listGpus ? driver.listGpus() : Promise.resolve([]));
    const { dir: where, manifest } = await readSnapshot(store, dir, "restoreSnapshot");
    const host = o.host ?? await session.host();
    if (!host) throw prerequisite("restoreSnapshot", `the ${driver.kind} driver has no host`);
    await probing;
    const version = await driver.driverVersion();
    checkDriver(manifest, version.code === CUDA_SUCCESS ? version.value : undefined);
    await checkPidsFree(manifest, host);
    const gpus = await listing;
    const pairs = given ?? derivedMapping(manifest, gpus);
    checkMappingOnto(manifest, pairs, gpus);
    if (checkRoom) await checkRoomFor(manifest, pairs, host);
    if (signal?.aborted) {
      throw new SnapshotError({
        code: "STOPPED",
        operation: "restoreSnapshot",
        message: "restore stopped before it began: it was aborted",
        detail: "nothing was changed",
      });
    }

    // 2 and 3. The engine brings every tree back, its CUDA processes checkpointed; each tree's
    // running CUDA processes are restored onto the GPUs as soon as it is back (a tree waits for
    // no other tree's criu), what each held recorded first for the room check; once every one is
    // restored, all are unlocked (the order of a job: every restore before any unlock).
    phase("restore");
    const checkMs = run.at();
    const mapping = Object.fromEntries(
      pairs.map((p) => [formatGpuUuid(p.oldUuid), formatGpuUuid(p.newUuid)]),
    );
    const parts = new FirstFailure<{ engine: unknown } | { gpu: GroupResult }>(signal);
    const group = (action: "restore" | "unlock" | "checkpoint", pids: number[]) =>
      runGroup(action, pids, {
        // Checkpointing back after a failure is a rollback: it runs to its end.
        ...run.groupOptions(driver, host, action === "checkpoint" ? undefined : parts.signal),
        ...(action === "restore" && pairs.length > 0 ? { gpuMapping: mapping } : {}),
        checkRoom,
      });
    const made = new Set<ManifestTree>(); // trees the engine brought back
    const onGpu: number[] = []; // CUDA processes restored onto the GPUs here, not yet unlocked
    const toUnlock: number[] = []; // every CUDA process that is locked, to unlock at the end
    let restoreEnd = checkMs;
    let resumeStart: number | undefined;
    const restoreTree = async (t: ManifestTree) => {
      try {
        await engine.restore({
          root: t.root,
          imagesDir: `${where}/${t.images}`,
          signal: parts.signal,
          ...(left() !== undefined ? { timeoutMs: left() } : {}),
        });
        made.add(t);
      } catch (err) {
        throw parts.fail({ engine: err });
      } finally {
        restoreEnd = Math.max(restoreEnd, run.at());
      }
      const cuda = t.processes.filter((p) => p.cuda !== undefined);
      const running = cuda.filter((p) => cudaRuns(p.cuda!.state)).map((p) => p.pid);
      if (running.length === 0 || parts.signal.aborted) return;
      if (resumeStart === undefined) {
        resumeStart = run.at();
        phase("resume");
      }
      await recordHeld(cuda, host);
      // From where the driver says each is, the way to running (the state table's): criu leaves
      // it checkpointed, but an engine that brings the GPU half back itself (criu with its CUDA
      // plugin) leaves it running, with nothing left to do.
      const ways = await Promise.all(running.map(async (pid) => {
        const now = await driver.getState(pid);
        const from = now.code === CUDA_SUCCESS ? stateName(now.value) : undefined;
        const way = from === undefined ? undefined : plan("resume", from);
        const steps: readonly Step[] = way?.kind === "steps"
          ? way.steps
          : way?.kind === "unchanged"
          ? []
          : ["restore", "unlock"]; // the driver has the last word
        return { pid, steps };
      }));
      const toRestore = ways.filter((w) => w.steps.includes("restore")).map((w) => w.pid);
      if (toRestore.length > 0) {
        const restored = await group("restore", toRestore);
        if (!restored.ok) throw parts.fail({ gpu: restored });
        onGpu.push(...toRestore);
      }
      toUnlock.push(...ways.filter((w) => w.steps.includes("unlock")).map((w) => w.pid));
    };
    const settled = await Promise.allSettled(manifest.trees.map(restoreTree))
      .finally(() => parts.close());
    const f = parts.first;
    const why = run.stopped();
    if (f && "engine" in f || (why && made.size < manifest.trees.length)) {
      // The engine failed (or was stopped) on a tree: every tree it made is ended, and the
      // snapshot, unchanged, can be restored again.
      phase("rollback");
      await engine.kill([...made].flatMap((t) => t.processes.map((p) => p.pid))).catch(() => {});
      const err = f && "engine" in f ? f.engine : undefined;
      throw new SnapshotError({
        code: why ? "STOPPED" : "RESTORE_FAILED",
        operation: "restoreSnapshot",
        message: `restore of the snapshot in ${where} failed: ${
          why ? `it was stopped: ${why}` : `the ${engine.kind} restore failed: ${messageOf(err)}`
        }`,
        detail: made.size === 0
          ? "no process was made"
          : "the processes it had made were ended; the snapshot is unchanged",
        ...(err === undefined ? {} : { cause: err }),
        ...(err instanceof EngineError && err.log ? { log: err.log } : {}),
      });
    }
    const allRunning = manifest.trees.flatMap((t) => t.processes)
      .filter((p) => p.cuda !== undefined && cudaRuns(p.cuda.state)).map((p) => p.pid);
    const notStarted = settled.some((r) => r.status === "rejected") || why !== undefined;
    const unlocked = !notStarted && toUnlock.length > 0
      ? await group("unlock", toUnlock)
      : undefined;
    if (notStarted || (unlocked && !unlocked.ok)) {
      // The GPU half failed or was stopped: every process is back, and each CUDA process is put
      // back checkpointed (where it is not already), which loses nothing.
      phase("rollback");
      if (onGpu.length > 0 && !unlocked) await group("checkpoint", onGpu);
      const g = f && "gpu" in f ? f.gpu : unlocked;
      throw new SnapshotError({
        code: why ? "STOPPED" : "RESUME_FAILED",
        operation: "restoreSnapshot",
        message: `the processes of the snapshot in ${where} are back, but their GPU restore ` +
          `failed: ${why ? `it was stopped: ${why}` : g ? groupFailure(g) : "it was stopped"}`,
        detail: unlocked
          ? `they are restored onto the GPUs and locked: unlock them (cuda-checkpoint --action ` +
            `unlock --pid P, for each of ${toUnlock.join(", ")}), or end them (kill ${
              manifest.trees.map((t) => t.root).join(" ")
            })`
          : `they are checkpointed: once the cause is fixed, resume ` +
            `them (cuda-checkpoint --toggle --pid ${allRunning.join(",")}, or resumeAll), or ` +
            `end them (kill ${manifest.trees.map((t) => t.root).join(" ")})`,
        ...(g && firstError(g) ? { cause: firstError(g) } : {}),
      });
    }
    const ms = run.at();
    return {
      dir: where,
      manifest,
      gpuMapping: mapping,
      pids: manifest.trees.flatMap((t) => t.processes.map((p) => p.pid)),
      ms,
      timings: {
        checkMs,
        restoreMs: restoreEnd - checkMs,
        resumeMs: resumeStart === undefined ? 0 : ms - resumeStart,
      },
    };
  } finally {
    await taken.release();
  }
}

/**
 * One snapshot or restore under way: its options for the whole (a deadline, a signal, progress),
 * checked, and its clock (the driver's).
 */
class Run {
  readonly timeoutMs: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly progress: (event: SnapshotEvent) => void;
  #now: () => number = () => 0;
  #t0 = 0;

  /** Checks the options shared by snapshots and restores; `what` names the whole in messages. */
  constructor(
    o: SnapshotParts & Pick<SnapshotOptions, "timeoutMs" | "signal" | "onProgress">,
    what: string,
  ) {
    this.timeoutMs = o.timeoutMs === undefined
      ? undefined
      : checkInteger(o.timeoutMs, `timeoutMs (ms for the whole ${what})`, 0);
    this.signal = checkSignal(o.signal);
    this.progress = progressOf(o.onProgress);
    checkParts(o);
  }

  /** Starts the clock (the driver's), and returns it. */
  start(driver: CheckpointDriver) {
    const clock = clockOf(driver);
    this.#now = clock.now;
    this.#t0 = clock.now();
    return clock;
  }

  /** ms since the start. */
  at(): number {
    return this.#now() - this.#t0;
  }

  /** ms left before the deadline (whole, rounded up), or `undefined` where there is none. */
  left(): number | undefined {
    return this.timeoutMs === undefined
      ? undefined
      : Math.max(0, Math.ceil(this.timeoutMs - this.at()));
  }

  /** Tells the progress that a phase starts. */
  phase(phase: SnapshotPhase): void {
    this.progress({ type: "phase", phase, at: this.at() });
  }

  /** Why the whole must stop now (an abort, the deadline), if it must. */
  stopped(): string | undefined {
    if (this.signal?.aborted) return "it was aborted";
    return this.left() === 0 ? "its deadline passed" : undefined;
  }

  /**
   * The options of a group operation that is one part of the whole: all or nothing, its events'
   * times counted from the whole's start. Given a signal, it stops with it and at the deadline;
   * without one (a rollback), it runs to its end.
   */
  groupOptions(
    driver: CheckpointDriver,
    host: HostProcesses,
    signal: AbortSignal | undefined,
  ): GroupOptions {
    const left = this.left();
    return {
      driver,
      host,
      allOrNothing: true,
      gpuMemory: false,
      onProgress: (e) => this.progress({ ...e, at: this.at() }),
      ...(signal ? { signal, ...(left !== undefined ? { timeoutMs: left } : {}) } : {}),
    };
  }
}

/**
 * Parts of a snapshot or restore under way at once, a tree each: the first failure is kept and
 * stops the others, as the caller's abort does. Each part runs under {@link FirstFailure.signal}.
 */
class FirstFailure<F> {
  readonly #stop = new AbortController();
  readonly #caller: AbortSignal | undefined;
  readonly #onAbort = () => this.#stop.abort(this.#caller?.reason);
  #first: F | undefined;

  constructor(caller: AbortSignal | undefined) {
    this.#caller = caller;
    if (caller?.aborted) this.#onAbort();
    else caller?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** What the parts run under: aborted at the first failure or by the caller. */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  /** The first failure, where there was one. */
  get first(): F | undefined {
    return this.#first;
  }

  /** Keeps `failure` where it is the first and stops the other parts; an error for its part to throw. */
  fail(failure: F): Error {
    if (this.#first === undefined) {
      this.#first = failure;
      this.#stop.abort(new Error("another part failed"));
    }
    return new Error("a part failed");
  }

  /** Lets go of the caller's signal, once every part has settled. */
  close(): void {
    this.#caller?.removeEventListener("abort", this.#onAbort);
  }
}

// ---- checks ----

function checkRoots(roots: unknown): asserts roots is readonly number[] {
  if (!Array.isArray(roots) || roots.length === 0) {
    throw new TypeError(
      `roots must be a non-empty array of pids (the roots of the trees to snapshot), got ${
        describeValue(roots)
      }`,
    );
  }
  const seen = new Set<number>();
  roots.forEach((pid, i) => {
    checkPid(pid, `roots[${i}]`);
    if (seen.has(pid)) throw new RangeError(`roots names pid ${pid} twice: give each tree once`);
    seen.add(pid);
  });
}

function checkDir(dir: unknown): asserts dir is string {
  if (typeof dir !== "string" || dir.length === 0 || dir.includes("\0")) {
    throw new TypeError(`dir must be a path (a non-empty string), got ${describeValue(dir)}`);
  }
}

function checkParts(o: SnapshotParts): void {
  if (o.driver !== undefined) checkSource(o.driver, "the driver");
  checkHost(o.host, "host");
  for (const [name, method] of [["engine", "dump"], ["store", "create"]] as const) {
    const part = o[name] as unknown;
    if (
      part !== undefined &&
      (typeof part !== "object" || part === null ||
        typeof (part as Record<string, unknown>)[method] !== "function")
    ) {
      throw new TypeError(
        `${name} must be an object with a ${method}() method, got ${describeValue(part)}`,
      );
    }
  }
}

function progressOf(onProgress: unknown): (event: SnapshotEvent) => void {
  const f = checkFunction(onProgress as ((e: SnapshotEvent) => void) | undefined, "onProgress");
  return (event) => {
    try {
      f?.(event);
    } catch {
      // A progress display that throws must not break the snapshot.
    }
  };
}

function noPart(part: string, operation: string): Error {
  return new TypeError(
    `${operation} has no ${part}: pass { ${part} }, or import it from @ckpt/cuda/snapshot, ` +
      `which makes the installed criu and the file system the defaults`,
  );
}

/**
 * The engine a driver brings of its own, where it has one: the simulated driver's
 * `snapshotEngine()`, its simulated criu. Not part of the driver seam: the real machine's engine
 * is the installed criu, whatever the driver.
 */
export function ownEngineOf(driver: object): SnapshotEngine | undefined {
  const own = (driver as { snapshotEngine?: unknown }).snapshotEngine;
  return typeof own === "function" ? own.call(driver) as SnapshotEngine : undefined;
}

function partsOf(o: SnapshotParts, driver: object): {
  engine: SnapshotEngine;
  store: SnapshotStore;
} {
  const fallback = fallbackSnapshotParts();
  const engine = o.engine ?? ownEngineOf(driver) ?? fallback.engine?.();
  const store = o.store ?? fallback.store;
  if (!engine) throw noPart("engine", "a snapshot");
  if (!store) throw noPart("store", "a snapshot");
  return { engine, store };
}

function prerequisite(operation: string, reason: string): RefusedError {
  return new RefusedError({ code: "PREREQUISITE", operation, reason });
}

/**
 * A promise started now and awaited later, after other checks: a rejection waits for its turn
 * (the first failed check is the one reported) and is never left unhandled meanwhile.
 */
function started<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/**
 * The engine's probe, refused where it names a problem. Started before the other checks and
 * awaited after them (criu check takes tens of ms): a refusal waits for its turn, so that the
 * first failed check is still the one reported, and is never left unhandled.
 */
function probeEngine(engine: SnapshotEngine, operation: string): Promise<EngineProbe> {
  return started(
    engine.probe().then((probe) => {
      if (probe.problems.length > 0) {
        throw prerequisite(
          operation,
          `${engine.kind} cannot work here: ${probe.problems.join(" ")}`,
        );
      }
      return probe;
    }),
  );
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
  root: number,
  tree: readonly TreeProcess[],
  driver: CheckpointDriver,
  host: HostProcesses,
  report: GpuMemoryReport,
): Promise<ManifestTree> {
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
    } else if (memoryOnHost(name) && host.heldRecords && host.identify) {
      const identity = await host.identify(p.pid);
      const record = identity ? await host.heldRecords.get(identity) : undefined;
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
 * new ones turn up, so that none forks any more, then kills them all, the dumped ones included.
 * A child made between the dump and its end would otherwise live on, holding the tree's session
 * and group ids, which the restore needs free.
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
  // Ended means gone: until its parent (or init) reaps it, a killed process keeps its pid, and
  // its session and process group, and a restore right after would find them taken. Ten seconds
  // at most (init took up to 2 s on one machine); what is left then, the restore's check names.
  for (let i = 0; i < 200; i++) {
    if ((await usesOf(host, [...known])).length === 0) return;
    await sleep(50);
  }
}

/** The manifest, read and checked against the snapshot's files. */
async function readSnapshot(
  store: SnapshotStore,
  dir: string,
  operation: string,
): Promise<{ dir: string; manifest: Manifest }> {
  const refuse = (reason: string) => new RefusedError({ code: "SNAPSHOT", operation, reason });
  let where: string;
  try {
    where = await store.open(dir);
  } catch (err) {
    throw refuse(`${dir} cannot be read as a snapshot: ${messageOf(err)}`);
  }
  let text: string | undefined;
  try {
    text = await store.readManifest(where);
  } catch (err) {
    throw refuse(`${where}/${MANIFEST_FILE} cannot be read: ${messageOf(err)}`);
  }
  if (text === undefined) {
    throw refuse(`${where} is not a snapshot: it has no ${MANIFEST_FILE}`);
  }
  const manifest = parseManifest(text, `${where}/${MANIFEST_FILE}`);
  const found = new Map<string, number>();
  for (const t of manifest.trees) {
    for (const f of await store.files(where, t.images).catch(() => [])) found.set(f.path, f.bytes);
  }
  for (const f of manifest.files) {
    const bytes = found.get(f.path);
    if (bytes === undefined) {
      throw refuse(`${where}/${f.path} is missing: the snapshot is incomplete`);
    }
    if (bytes !== f.bytes) {
      throw refuse(
        `${where}/${f.path} has ${bytes} bytes where the manifest says ${f.bytes}: the ` +
          `snapshot is truncated or was changed`,
      );
    }
  }
  return { dir: where, manifest };
}

function checkDriver(manifest: Manifest, cudaVersion: number | undefined): void {
  if (cudaVersion !== undefined && cudaVersion !== manifest.driver.cudaVersion) {
    throw prerequisite(
      "restoreSnapshot",
      `the snapshot was taken with a driver of CUDA ${
        formatDriverVersion(manifest.driver.cudaVersion)
      }${
        manifest.driver.release ? ` (${manifest.driver.release})` : ""
      }, and this machine's is CUDA ${
        formatDriverVersion(cudaVersion)
      }: a process comes back with the ` +
        `libcuda it had, which needs the same driver`,
    );
  }
}

/**
 * Every pid and thread id of the snapshot must be free: its processes come back with them, and
 * the kernel gives out no id that a process still uses as its pid, a thread id, its process
 * group or its session.
 */
async function checkPidsFree(manifest: Manifest, host: HostProcesses): Promise<void> {
  const owner = new Map<number, ManifestProcess>();
  for (const p of manifest.trees.flatMap((t) => t.processes)) {
    for (const id of [p.pid, ...p.threads]) owner.set(id, p);
  }
  const [use] = await usesOf(host, [...owner.keys()]);
  if (!use) return;
  const p = owner.get(use.id)!;
  const which = `${use.id === p.pid ? "pid" : `thread id ${use.id} of pid`} ${p.pid}${
    p.command ? ` (${p.command})` : ""
  }`;
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
  throw new RefusedError({
    code: "PID_TAKEN",
    operation: "restoreSnapshot",
    pid: use.id,
    reason: `${which} must be free for the snapshot's process to come back, and ${how}${hint}`,
  });
}

/**
 * Which of `ids` a process uses now ({@link HostProcesses.pidsInUse}); by
 * {@link HostProcesses.identify} where the host tells no more, none where it cannot tell at all.
 */
async function usesOf(host: HostProcesses, ids: readonly number[]): Promise<readonly PidUse[]> {
  if (host.pidsInUse) return await host.pidsInUse(ids);
  const uses: PidUse[] = [];
  for (const id of host.identify ? ids : []) {
    const holder = await host.identify!(id);
    if (holder) uses.push({ id, holder: holder.pid, as: holder.pid === id ? "pid" : "thread" });
  }
  return uses;
}

/**
 * The snapshot's GPUs onto this machine's by index: none where they are the same GPUs (in
 * place); each onto the GPU of the same index and chip otherwise.
 */
function derivedMapping(manifest: Manifest, gpus: readonly GpuInfo[]): GpuPair[] {
  const here = new Set(gpus.map((g) => g.uuid.toLowerCase()));
  if (manifest.gpus.every((g) => here.has(g.uuid.toLowerCase()))) return [];
  return manifest.gpus.map((g) => {
    const onto = gpus.find((h) => h.index === g.index);
    if (!onto) {
      throw mapping(
        `the snapshot's GPU ${g.index} (${g.uuid}, ${g.name}) has no GPU of the same index ` +
          `here; this machine has ${gpus.length}: give a gpuMapping (--device-map)`,
      );
    }
    return { oldUuid: parseGpuUuid(g.uuid), newUuid: parseGpuUuid(onto.uuid) };
  });
}

function mapping(reason: string): RefusedError {
  return new RefusedError({ code: "MAPPING", operation: "restoreSnapshot", reason });
}

/** Every GPU a process used is mapped onto a GPU of this machine of the same chip, once. */
function checkMappingOnto(
  manifest: Manifest,
  pairs: readonly GpuPair[],
  gpus: readonly GpuInfo[],
): void {
  if (pairs.length === 0) return;
  const byUuid = new Map(gpus.map((g) => [g.uuid.toLowerCase(), g]));
  const snap = new Map(manifest.gpus.map((g) => [g.uuid.toLowerCase(), g]));
  const onto = new Map<string, string>();
  for (const pair of pairs) {
    const from = formatGpuUuid(pair.oldUuid), to = formatGpuUuid(pair.newUuid);
    const old = snap.get(from.toLowerCase());
    if (!old) {
      throw mapping(
        `the mapping names ${from}, which is not a GPU of the snapshot (${
          manifest.gpus.map((g) => g.uuid).join(", ")
        })`,
      );
    }
    const target = byUuid.get(to.toLowerCase());
    if (!target && gpus.length > 0) {
      throw mapping(`the mapping sends ${from} onto ${to}, which is not a GPU of this machine`);
    }
    if (target && target.name !== old.name) {
      throw mapping(
        `the mapping sends ${from} (${old.name}) onto ${to} (${target.name}): a process is ` +
          `restored only onto GPUs of the chip it was checkpointed on`,
      );
    }
    if (onto.has(to.toLowerCase())) {
      throw mapping(`the mapping sends ${onto.get(to.toLowerCase())} and ${from} onto ${to}`);
    }
    onto.set(to.toLowerCase(), from);
  }
  const left = manifest.gpus.filter((g) =>
    !pairs.some((p) => formatGpuUuid(p.oldUuid).toLowerCase() === g.uuid.toLowerCase())
  );
  if (left.length > 0) {
    throw mapping(
      `the mapping leaves out the snapshot's ${
        left.map((g) => `GPU ${g.index} (${g.uuid})`).join(" and ")
      }: a mapping names every GPU of the snapshot`,
    );
  }
}

/** Room on every GPU for what the snapshot's processes held there, all together. */
async function checkRoomFor(
  manifest: Manifest,
  pairs: readonly GpuPair[],
  host: HostProcesses,
): Promise<void> {
  const onto = new Map(
    pairs.map((p) => [formatGpuUuid(p.oldUuid).toLowerCase(), formatGpuUuid(p.newUuid)]),
  );
  const need = new Map<string, number>();
  for (const t of manifest.trees) {
    for (const p of t.processes) {
      if (!p.cuda || !cudaRuns(p.cuda.state) || !p.cuda.gpuMemoryMiB) continue;
      for (const [uuid, mib] of Object.entries(p.cuda.gpuMemoryMiB)) {
        const target = onto.get(uuid.toLowerCase()) ?? uuid;
        need.set(target, (need.get(target) ?? 0) + mib);
      }
    }
  }
  if (need.size === 0 || !host.gpuMemory) return;
  const report = await host.gpuMemory().catch(() => undefined);
  if (!report || !("byPid" in report) || !report.freeMiB) return;
  const free = new Map([...report.freeMiB].map(([k, v]) => [k.toLowerCase(), v]));
  for (const [gpu, mib] of need) {
    const has = free.get(gpu.toLowerCase());
    if (has !== undefined && has < mib) {
      throw new RefusedError({
        code: "NO_ROOM",
        operation: "restoreSnapshot",
        reason: `the snapshot's processes need ${Math.round(mib)} MiB on ${gpu}, which has ${
          Math.round(has)
        } MiB free; free memory there, or restore onto other GPUs with a mapping`,
        detail: "nothing was changed",
      });
    }
  }
}

/** What each restored CUDA process held, recorded as its checkpoint would have recorded it. */
async function recordHeld(cuda: readonly ManifestProcess[], host: HostProcesses): Promise<void> {
  const records = host.heldRecords;
  if (!records || !host.identify) return;
  await Promise.all(cuda.map(async (p) => {
    if (!p.cuda?.gpuMemoryMiB) return;
    const identity = await host.identify!(p.pid);
    if (!identity) return;
    await records.put({ process: identity, heldMiB: p.cuda.gpuMemoryMiB, at: Date.now() });
  })).catch(() => {});
}

// ---- messages ----

function groupFailure(result: GroupResult): string {
  const failed = result.processes.find((p) => p.error);
  if (failed) return failed.error!.message;
  if (result.aborted) return "it was aborted";
  if (result.deadlinePassed) return "its deadline passed";
  return "not every process could be brought there";
}

function firstError(result: GroupResult): Error | undefined {
  return result.processes.find((p) => p.error)?.error;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
