/**
 * A snapshot's restore ({@link restoreFrom}). The manifest is read strictly and everything is
 * checked before anything changes: the image files, the engine, the driver (the one the snapshot
 * was taken with), every pid free, the GPUs (a mapping given, or the snapshot's GPUs onto this
 * machine's by index, the same chip, the one mapping check), room on each for what its processes
 * held (the one room check). Then the engine restores every tree, and the CUDA processes go back
 * onto the GPUs through the group operations, as one job (every restore before any unlock). A
 * failure of the engine ends what it made; a failure of the GPU half leaves the processes
 * checkpointed (the job's rollback), with what to do in the error.
 *
 * @module
 */

import { CUDA_SUCCESS, formatDriverVersion } from "./driver.ts";
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
  readSnapshot,
  type RestoreSnapshotOptions,
  type RestoreSnapshotResult,
  started,
  untilFree,
  usesOf,
} from "./disk.ts";
import type { GpuInfo, GpuPair } from "./driver.ts";
import { type Checked, logOf, type SnapshotDir, type SnapshotStore } from "./engine.ts";
import { messageOf, RefusedError, SnapshotError } from "./errors.ts";
import { mappingProblems } from "./mapping.ts";
import { runGroup } from "./group.ts";
import type { HostProcesses } from "./host.ts";
import type { Machine } from "./machine.ts";
import { sessionOf } from "./process.ts";
import { clockOf } from "./time.ts";
import type { Manifest, ManifestProcess } from "./manifest.ts";
import { checkFlag, checkGpuMapping, checkOptions } from "./options.ts";
import { onto } from "./room.ts";
import { cudaRuns, memoryOnHost, stateName } from "./states.ts";
import { formatGpuUuid, parseGpuUuid } from "./options.ts";
import { olderVersion } from "./version.ts";

/** A restore's options, checked. */
export interface RestoreSettings extends ReturnType<typeof checkWhole> {
  /** The GPU pairs given (`undefined`: derived from the snapshot's GPUs and this machine's). */
  readonly pairs: GpuPair[] | undefined;
  readonly checkRoom: boolean;
  /** What its errors call it: `restoreSnapshot`, or the command line's `restore-snapshot`. */
  readonly operation: string;
}

/** Checks a restore's arguments where they enter; the machine is left to the caller. */
export function checkRestoreArgs(
  dir: unknown,
  options: RestoreSnapshotOptions | undefined,
): { dir: string; settings: RestoreSettings } {
  const o = checkOptions(options, "restoreSnapshot", [
    "machine",
    "gpuMapping",
    "checkRoom",
    "timeoutMs",
    "signal",
    "onProgress",
  ]);
  return {
    dir: checkDir(dir),
    settings: {
      ...checkWhole(o, "restore"),
      pairs: o.gpuMapping === undefined ? undefined : checkGpuMapping(o.gpuMapping),
      checkRoom: checkFlag(o.checkRoom, "checkRoom", true),
      operation: "restoreSnapshot",
    },
  };
}

/**
 * The manifest of the snapshot in `dir`, checked against everything in the directory (with
 * `verify`, every file's digest too); nothing is changed. `operation` names it in errors.
 */
export async function inspectIn(
  store: SnapshotStore,
  dir: string,
  verify: boolean,
  operation = "inspectSnapshot",
): Promise<{ dir: string; manifest: Manifest; verified: boolean }> {
  const { snap, manifest, checked } = await readSnapshot(store, dir, operation, {
    digests: verify,
  });
  await snap.close();
  return { dir: snap.path, manifest, verified: checked.digests };
}

/** Restores the snapshot in `dir` onto `machine`: see the module documentation. */
export async function restoreFrom(
  machine: Machine,
  dir: string,
  o: RestoreSettings,
): Promise<RestoreSnapshotResult> {
  const progress = new Progress(machine, o);
  const driver = machine.driver;
  const session = sessionOf(machine);

  // 1. Check everything, change nothing.
  progress.phase("check");
  const { engine, store, host, probing, listing, slots } = partsOf(machine, o.operation);
  // Every file checked, its digest included, before anything changes; but where the engine can
  // keep the processes it restores stopped, the memory images' digests are compared while it
  // loads them, and each tree is let go only once every one of its images matched.
  const holds = engine.inertFile !== undefined && engine.wake !== undefined;
  const verifying = new AbortController();
  const stop = () => verifying.abort(o.signal!.reason);
  if (o.signal?.aborted) stop();
  o.signal?.addEventListener("abort", stop, { once: true });
  try {
    const { snap, manifest, checked } = await readSnapshot(store, dir, o.operation, {
      digests: true,
      signal: verifying.signal,
      ...(holds ? { later: (f) => engine.inertFile!(f.path.split("/").pop()!) } : {}),
    });
    try {
      return await fromDir(snap, manifest, checked);
    } finally {
      verifying.abort(new Error("the restore ended"));
      await snap.close();
    }
  } finally {
    o.signal?.removeEventListener("abort", stop);
  }

  async function fromDir(
    snap: SnapshotDir,
    manifest: Manifest,
    checked: Checked,
  ): Promise<RestoreSnapshotResult> {
    const where = snap.path;
    // A memory image that differs, found while the checks below go on (or the engine runs).
    let found: RefusedError | undefined;
    checked.all.catch((err) => {
      if (err instanceof RefusedError) found = err;
    });
    const differs = (): RefusedError | undefined => found;
    const probe = await probing;
    const dumped = manifest.engine;
    if (
      dumped.kind === engine.kind && dumped.version && probe.version &&
      olderVersion(probe.version, dumped.version, 2)
    ) {
      throw prerequisite(
        o.operation,
        `the snapshot's images were written by ${dumped.kind} ${dumped.version}, and this ` +
          `machine's ${engine.kind} is ${probe.version}, which cannot read images of a newer ` +
          `release, so restore it with ${dumped.kind} ${dumped.version} or later`,
      );
    }
    const version = await driver.driverVersion();
    const taken = manifest.driver;
    if (version.code === CUDA_SUCCESS && version.value !== taken.cudaVersion) {
      const wanted = `CUDA ${formatDriverVersion(taken.cudaVersion)}${
        taken.release ? ` (${taken.release})` : ""
      }`;
      throw prerequisite(
        o.operation,
        `the snapshot was taken with a driver of ${wanted}, and this machine's is CUDA ${
          formatDriverVersion(version.value)
        }: a process comes back with the libcuda it had, which needs the same driver, so ` +
          `restore it on a machine whose driver is ${wanted}`,
      );
    }
    await checkPidsFree(manifest, host, o.operation);
    const gpus = await listing;
    const pairs = o.pairs ?? derivedMapping(manifest, gpus, o.operation);
    const problems = mappingProblems(pairs, gpus, manifest.gpus);
    if (problems.length > 0) {
      throw mappingRefused(o.operation, `the GPU mapping cannot work: ${problems.join("; ")}`);
    }
    const running = manifest.trees.flatMap((t) => t.processes)
      .filter((p) => p.cuda !== undefined && cudaRuns(p.cuda.state));
    if (o.checkRoom) {
      const need: Record<string, number> = {};
      for (const p of running) {
        for (const [gpu, mib] of Object.entries(onto(p.cuda!.gpuMemoryMiB ?? {}, pairs))) {
          need[gpu] = (need[gpu] ?? 0) + mib;
        }
      }
      await session.room.fits(need, {
        operation: o.operation,
        who: "the snapshot's processes",
      });
    }
    if (o.signal?.aborted) progress.notBegun(o.operation, "restore", "it was aborted");

    // 2 and 3. The engine brings every tree back, its CUDA processes checkpointed; the CUDA
    // processes that ran go back onto the GPUs as one job, each tree's as soon as it is back (a
    // tree waits for no other tree's criu), what each held recorded first for the room check of
    // its restore; every restore before any unlock. Each goes from where the driver says it is:
    // criu leaves it checkpointed, but an engine that restores the GPU half itself (criu with its
    // CUDA plugin) leaves it running, with nothing left to do.
    progress.phase("restore");
    const checkMs = progress.at();
    const parts = new FirstFailure<unknown>(o.signal);
    // The digests left for later: a tree is restored stopped, and let go once they matched.
    const held = holds && checked.digests;
    if (differs()) throw differs();
    // The first failure ends the digests too.
    parts.signal.addEventListener("abort", () => verifying.abort(parts.signal.reason), {
      once: true,
    });
    const made: number[][] = [];
    let restoreEnd = checkMs;
    let resumeStart: number | undefined;
    const treeOf = new Map<number, Promise<void>>();
    // The engine's slots (criu: one per core): none taken after a failure.
    const notStarted = new Error("stopped before its restore began, or before it was let go");
    // Trees back whole (restored, and let go where held).
    let whole = 0;
    const partsStopped = started(
      new Promise<never>((_, reject) => {
        const stop = () => reject(notStarted);
        if (parts.signal.aborted) stop();
        else parts.signal.addEventListener("abort", stop, { once: true });
      }),
    );
    const restoring = manifest.trees.map((t) => {
      const back = (async () => {
        try {
          await slots.run(async () => {
            if (parts.signal.aborted) throw notStarted;
            const left = progress.deadline.left();
            await engine.restore({
              root: t.root,
              imagesDir: await snap.enginePath(t.images),
              signal: parts.signal,
              ...(left !== undefined ? { timeoutMs: left } : {}),
              ...(held ? { leaveStopped: true } : {}),
            });
          });
          const pids = t.processes.map((p) => p.pid);
          made.push(pids);
          if (held) {
            // Stopped, having run nothing: let go once every image of the tree matched, unless
            // the whole must stop meanwhile.
            await Promise.race([checked.later(t.images), partsStopped]);
            if (progress.stopped()) throw notStarted;
            await engine.wake!(pids);
          }
          whole++;
        } catch (err) {
          // A digest that differs (the tree's images, compared while it was held) is the refusal.
          if (err instanceof RefusedError) found ??= err;
          if (err !== notStarted) parts.fail(err);
          throw err;
        } finally {
          restoreEnd = Math.max(restoreEnd, progress.at());
        }
        // What each of its CUDA processes held, recorded as its checkpoint would have recorded it.
        await Promise.all(
          running.filter((p) => t.processes.includes(p)).map(async ({ pid, cuda }) => {
            if (!cuda?.gpuMemoryMiB) return;
            const identity = await session.identify(pid);
            if (identity) await session.room.recorded(identity, cuda.gpuMemoryMiB);
          }),
        );
        if (resumeStart === undefined) {
          resumeStart = progress.at();
          progress.phase("resume");
        }
      })();
      for (const p of t.processes) treeOf.set(p.pid, back);
      return started(back);
    });
    const resumed = running.length === 0 ? undefined : runGroup(
      machine,
      "resume",
      running.map((p) => p.pid),
      {
        ...partOf(progress, parts.signal),
        job: true,
        checkRoom: o.checkRoom,
        pairsFor: () => pairs.length === 0 ? null : pairs,
        ready: (pid) => treeOf.get(pid)!,
      },
    );
    await Promise.allSettled(restoring);
    const result = await resumed;
    const restoreMs = restoreEnd - checkMs;
    const stopped = progress.stopped();
    if (parts.first !== undefined || (stopped && whole < manifest.trees.length)) {
      // Every tree the engine made is ended, and the snapshot, unchanged, can be restored again.
      progress.phase("rollback");
      await engine.kill(made.flat()).catch(() => {});
      // So that the snapshot can be restored again at once.
      await untilFree(host, made.flat(), clockOf(machine).sleep).catch(() => {});
      const refusal = differs();
      if (refusal) {
        // An image that differs is the refusal, whatever else failed meanwhile.
        throw new RefusedError({
          code: "SNAPSHOT",
          operation: o.operation,
          reason: refusal.reason,
          detail: made.length === 0
            ? "no process was made"
            : `the processes ${engine.kind} had made, stopped before any of them ran, were ` +
              `ended; the snapshot is unchanged`,
        });
      }
      const err = parts.first;
      throw new SnapshotError({
        code: err === undefined ? "STOPPED" : "RESTORE_FAILED",
        operation: o.operation,
        message: `restore of the snapshot in ${where} failed: ${
          err === undefined
            ? `it was stopped: ${stopped}`
            : `the ${engine.kind} restore failed: ${messageOf(err)}`
        }`,
        detail: made.length === 0
          ? "no process was made"
          : "the processes it had made were ended; the snapshot is unchanged",
        ...(err === undefined ? {} : { cause: err }),
        ...logOf(err),
      });
    }
    if (result && !result.ok) {
      // A process the job never started (its tree let go after another's restore failed) is as
      // criu left it: the driver says where.
      const states = await Promise.all(
        result.processes.map(async (p) =>
          p.state ?? await driver.getState(p.pid).then(
            ({ code, value }) => code === CUDA_SUCCESS ? stateName(value) : undefined,
            () => undefined,
          )
        ),
      );
      const left = result.processes.map((p, i) => `${p.pid} ${states[i] ?? "of unknown state"}`);
      const checkpointed = states.every((state) => state && memoryOnHost(state));
      throw new SnapshotError({
        code: result.aborted || result.deadlinePassed ? "STOPPED" : "RESUME_FAILED",
        operation: o.operation,
        message: `the processes of the snapshot in ${where} are back, but their GPU restore ` +
          `failed: ${groupFailure(result)}`,
        detail: checkpointed
          ? `they are checkpointed: once the cause is fixed, resume them (cuda-checkpoint ` +
            `--toggle --pid ${running.map((p) => p.pid).join(",")}), or end them (kill ${
              manifest.trees.map((t) => t.root).join(" ")
            })`
          : `they are left so: ${left.join(", ")}`,
        ...(firstError(result) ? { cause: firstError(result) } : {}),
      });
    }
    const ms = progress.at();
    return {
      dir: where,
      manifest,
      gpuMapping: Object.fromEntries(
        pairs.map((p) => [formatGpuUuid(p.oldUuid), formatGpuUuid(p.newUuid)]),
      ),
      pids: manifest.trees.flatMap((t) => t.processes.map((p) => p.pid)),
      ms,
      timings: { checkMs, restoreMs, resumeMs: resumeStart === undefined ? 0 : ms - resumeStart },
    };
  }
}

/**
 * Every pid and thread id of the snapshot must be free: its processes come back with them, and
 * the kernel gives out no id that a process still uses as its pid, a thread id, its process
 * group or its session.
 */
async function checkPidsFree(
  manifest: Manifest,
  host: HostProcesses,
  operation: string,
): Promise<void> {
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
    operation,
    pid: use.id,
    reason: `${which} must be free for the snapshot's process to come back, and ${how}${hint}; ` +
      `end that process, or restore where ${use.id} is free`,
  });
}

/**
 * The snapshot's GPUs onto this machine's by index: none where they are the same GPUs (in
 * place); each onto the GPU of the same index otherwise, which must be of the same chip (the
 * mapping check then checks the rest). Refused, in one sentence naming both sides, where this
 * machine has fewer GPUs than the snapshot or GPUs of another chip at those indices.
 */
function derivedMapping(
  manifest: Manifest,
  gpus: readonly GpuInfo[],
  operation: string,
): GpuPair[] {
  const here = new Set(gpus.map((g) => g.uuid.toLowerCase()));
  if (manifest.gpus.every((g) => here.has(g.uuid.toLowerCase()))) return [];
  const taken = `${manifest.gpus.length} GPU${manifest.gpus.length === 1 ? "" : "s"}`;
  const chips = chipsOf(manifest.gpus);
  if (gpus.length < manifest.gpus.length) {
    throw mappingRefused(
      operation,
      `the snapshot was taken where the driver saw ${taken} (${chips}), and this machine has ` +
        `${gpus.length} (${chipsOf(gpus) || "none"}): each of the snapshot's GPUs is restored ` +
        `onto one of its own, so restore it on a machine with at least ${taken} of its chip`,
    );
  }
  const pairs = manifest.gpus.map((g) => ({ from: g, to: gpus.find((h) => h.index === g.index) }));
  const crossing = pairs.find(({ from, to }) => to && to.name !== from.name);
  if (crossing || pairs.some(({ to }) => !to)) {
    // Enough GPUs of the snapshot's chips, at other indices: a mapping can say which.
    const enough = [...new Set(manifest.gpus.map((g) => g.name))].every((name) =>
      gpus.filter((h) => h.name === name).length >=
        manifest.gpus.filter((g) => g.name === name).length
    );
    const { from, to } = crossing ?? pairs.find(({ to }) => !to)!;
    throw mappingRefused(
      operation,
      `the snapshot's GPU ${from.index} (${from.uuid}) is an ${from.name}, and this machine's ${
        to ? `GPU ${to.index} (${to.uuid}) is an ${to.name}` : `GPUs are ${chipsOf(gpus)}`
      }: a process is restored only onto GPUs of the chip it was checkpointed on, so ${
        enough
          ? "give a gpuMapping (--device-map) onto GPUs of that chip"
          : `restore it on a machine with ${taken} of that chip (${chips})`
      }`,
    );
  }
  return pairs.map(({ from, to }) => ({
    oldUuid: parseGpuUuid(from.uuid),
    newUuid: parseGpuUuid(to!.uuid),
  }));
}

/** GPUs by chip, counted: `2 x NVIDIA H200`, `1 x NVIDIA H200 and 1 x NVIDIA H100 80GB HBM3`. */
function chipsOf(gpus: readonly GpuInfo[]): string {
  const count = new Map<string, number>();
  for (const g of gpus) count.set(g.name, (count.get(g.name) ?? 0) + 1);
  return [...count].map(([name, n]) => `${n} x ${name}`).join(" and ");
}

function mappingRefused(operation: string, reason: string): RefusedError {
  return new RefusedError({
    code: "MAPPING",
    operation,
    reason,
    detail: "nothing was changed",
  });
}
