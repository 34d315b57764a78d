/**
 * What snapshots to disk and their restores share (`to_disk.ts`, `from_disk.ts`): their options
 * and results, the progress of one under way (its phases, its deadline, its events), the parts of
 * the machine they need, and reading a snapshot's manifest against its files.
 *
 * @module
 */

import type { GpuInfo } from "./driver.ts";
import type {
  Checked,
  CheckOptions,
  EngineProbe,
  SnapshotDir,
  SnapshotEngine,
  SnapshotStore,
} from "./engine.ts";
import { describeValue, messageOf, RefusedError, SnapshotError } from "./errors.ts";
import {
  checkGroupOptions,
  type GroupEvent,
  type GroupResult,
  type GroupSettings,
} from "./group_types.ts";
import type { HostProcesses, PidUse } from "./host.ts";
import type { Machine } from "./machine.ts";
import { clockOf, Deadline, Slots } from "./time.ts";
import {
  type Manifest,
  MANIFEST_FILE,
  MANIFEST_MAX_BYTES,
  parseManifest,
  TRACE_FILE,
  TRACE_MAX_BYTES,
} from "./manifest.ts";
import { checkFunction, checkInteger, checkSignal, type GpuMapping } from "./options.ts";

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

/** Options of `snapshot`. */
export interface SnapshotOptions {
  /**
   * The machine: a `SimulatedMachine`, or one `openMachine` opened (to name criu, say); this
   * machine (libcuda, `/proc` and NVML, the installed criu, the file system) when left out.
   */
  machine?: Machine;
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
   * A deadline for the whole snapshot in ms (on the machine's clock): lock timeouts are cut to it,
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

/** Options of `restoreSnapshot`. */
export interface RestoreSnapshotOptions {
  /** The machine to restore onto; this machine when left out. */
  machine?: Machine;
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
  /** A deadline for the whole restore in ms (on the machine's clock). */
  timeoutMs?: number;
  /** Stops the restore: processes the engine made are ended. */
  signal?: AbortSignal;
  /** Called as the restore goes ({@link SnapshotEvent}). Must not throw. */
  onProgress?: (event: SnapshotEvent) => void;
}

/** What `snapshot` made. */
export interface SnapshotResult {
  /** The snapshot's directory, absolute. */
  readonly dir: string;
  /** Its manifest, as written. */
  readonly manifest: Manifest;
  /** The whole snapshot's time in ms. */
  readonly ms: number;
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
  /**
   * Its parts, in ms: the checks; the engine's restore of every tree (`criu restore`); the GPU
   * half, the restore and unlock of every CUDA process.
   */
  readonly timings: {
    readonly checkMs: number;
    readonly restoreMs: number;
    readonly resumeMs: number;
  };
}

/** The options every snapshot and restore has, checked. */
export interface WholeSettings {
  readonly timeoutMs: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly onProgress: ((event: SnapshotEvent) => void) | undefined;
}

/** Checks the options every snapshot and restore has; `what` names the whole in messages. */
export function checkWhole(
  o: { timeoutMs?: unknown; signal?: unknown; onProgress?: unknown },
  what: string,
): WholeSettings {
  return {
    timeoutMs: o.timeoutMs === undefined
      ? undefined
      : checkInteger(o.timeoutMs, `timeoutMs (ms for the whole ${what})`, 0),
    signal: checkSignal(o.signal),
    onProgress: checkFunction(o.onProgress as WholeSettings["onProgress"], "onProgress"),
  };
}

/** Checks a snapshot's directory argument: a path. */
export function checkDir(dir: unknown): string {
  if (typeof dir !== "string" || dir.length === 0 || dir.includes("\0")) {
    throw new TypeError(`dir must be a path (a non-empty string), got ${describeValue(dir)}`);
  }
  return dir;
}

/**
 * One snapshot or restore under way: its deadline (on the machine's clock), the phases and events
 * it tells, and why it must stop now, if it must.
 */
export class Progress {
  readonly deadline: Deadline;
  readonly #settings: WholeSettings;

  /** Starts the clock of the whole, now. */
  constructor(machine: Machine, settings: WholeSettings) {
    this.deadline = new Deadline(clockOf(machine), settings.timeoutMs);
    this.#settings = settings;
  }

  /** ms since the start. */
  at(): number {
    return this.deadline.elapsed();
  }

  /** Tells an event, its time counted from the whole's start; a listener that throws is ignored. */
  tell(event: SnapshotEvent): void {
    try {
      this.#settings.onProgress?.({ ...event, at: this.at() });
    } catch {
      // A progress display that throws must not break the snapshot.
    }
  }

  /** Tells that a phase starts. */
  phase(phase: SnapshotPhase): void {
    this.tell({ type: "phase", phase, at: 0 });
  }

  /** Why the whole must stop now (an abort, the deadline), if it must. */
  stopped(): string | undefined {
    if (this.#settings.signal?.aborted) return "it was aborted";
    return this.deadline.passed() ? "its deadline passed" : undefined;
  }

  /** Refuses to begin `what` where it must stop already (`why`): nothing was changed. */
  notBegun(operation: string, what: string, why: string | undefined = this.stopped()): void {
    if (!why) return;
    throw new SnapshotError({
      code: "STOPPED",
      operation,
      message: `${what} stopped before it began: ${why}`,
      detail: "nothing was changed",
    });
  }
}

/**
 * The first failure of parts under way at once (a tree each): it stops the others through
 * {@link FirstFailure.signal}, as the caller's abort does.
 */
export class FirstFailure<F> {
  readonly #stop = new AbortController();
  /** The first failure, where there was one. */
  first: F | undefined;

  /** Follows the caller's signal, where there is one. */
  constructor(caller: AbortSignal | undefined) {
    if (caller?.aborted) this.#stop.abort(caller.reason);
    caller?.addEventListener("abort", () => this.#stop.abort(caller.reason), {
      once: true,
      signal: this.#stop.signal,
    });
  }

  /** What the parts run under: aborted at the first failure or by the caller. */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  /** Keeps `failure` where it is the first, and stops the other parts. */
  fail(failure: F): void {
    this.first ??= failure;
    this.#stop.abort(new Error("another part failed"));
  }
}

/** How many engine runs go at once where the engine does not say ({@link SnapshotEngine.parallel}). */
const DEFAULT_PARALLEL = 8;

/**
 * The machine's parts a snapshot needs, or a refusal naming the one missing; and, started now and
 * awaited after the other checks, the engine's probe (refused where it names a problem; criu check
 * takes tens of ms) and the driver's GPUs (cuInit, the first time, takes about 0.2 s on an H100);
 * and the slots the engine's runs take, as many as it allows at once.
 */
export function partsOf(machine: Machine, operation: string): {
  engine: SnapshotEngine;
  store: SnapshotStore;
  host: HostProcesses;
  probing: Promise<EngineProbe>;
  listing: Promise<readonly GpuInfo[]>;
  slots: Slots;
} {
  const { engine, store, host, driver } = machine;
  const kind = driver.kind;
  if (!engine) throw prerequisite(operation, `this ${kind} machine has no snapshot engine (criu)`);
  if (!store) throw prerequisite(operation, `this ${kind} machine has no snapshot store`);
  if (!host?.processTree) {
    throw prerequisite(
      operation,
      `the ${host?.kind ?? kind} host cannot tell process trees, which a snapshot needs`,
    );
  }
  const probing = engine.probe().then((probe) => {
    if (probe.problems.length > 0) {
      throw prerequisite(operation, `${engine.kind} cannot work here: ${probe.problems.join(" ")}`);
    }
    return probe;
  });
  const listing = driver.listGpus ? driver.listGpus() : Promise.resolve([]);
  // At most as many engine runs at once as the engine allows (criu: the cores).
  const slots = new Slots(engine.parallel ?? DEFAULT_PARALLEL);
  return { engine, store, host, probing: started(probing), listing: started(listing), slots };
}

/** A refusal for something the machine must have. */
export function prerequisite(operation: string, reason: string): RefusedError {
  return new RefusedError({ code: "PREREQUISITE", operation, reason });
}

/**
 * A promise started now and awaited later, after other checks: a rejection waits for its turn
 * (the first failed check is the one reported) and is never left unhandled meanwhile.
 */
export function started<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/**
 * The snapshot in `dir`, opened once, its manifest read strictly and everything inside checked
 * against it (with `digests`, every file's digest too, those `later` picks from then on): the open
 * directory, which the caller closes (after the digests left for later end), the manifest, and
 * what the check found. Refused with a sentence naming the first thing that differs, and so are
 * the digests left for later.
 */
export async function readSnapshot(
  store: SnapshotStore,
  dir: string,
  operation: string,
  o: CheckOptions,
): Promise<{ snap: SnapshotDir; manifest: Manifest; checked: Checked }> {
  const refuse = (reason: string) => new RefusedError({ code: "SNAPSHOT", operation, reason });
  const { snap, read } = await openToRead(store, dir, operation, "cannot be read as a snapshot");
  try {
    const where = snap.path;
    const text = await read(MANIFEST_FILE, MANIFEST_MAX_BYTES);
    if (await read(TRACE_FILE, TRACE_MAX_BYTES) !== undefined) {
      throw refuse(
        `${where} holds ${TRACE_FILE}: the snapshot taken there was interrupted${
          text === undefined ? "" : " before it had ended its processes"
        }; \`cuda-checkpoint recover ${where}\` resumes the processes it left suspended`,
      );
    }
    if (text === undefined) {
      throw refuse(
        `${where} is not a snapshot: it has no ${MANIFEST_FILE}, which a snapshot writes last ` +
          `(a copy made before the snapshot ended, or one that left it out, has none)`,
      );
    }
    const manifest = parseManifest(text, `${where}/${MANIFEST_FILE}`, operation);
    const refused = (err: unknown) => {
      throw o.signal?.aborted ? err : refuse(messageOf(err));
    };
    const checked = await snap.check(manifest.files, o).catch(refused);
    const all = started(checked.all.catch(refused));
    return {
      snap,
      manifest,
      checked: {
        digests: checked.digests,
        later: (sub) => checked.later(sub).catch(refused),
        all,
      },
    };
  } catch (err) {
    await snap.close();
    throw err;
  }
}

/**
 * Which of `ids` a process uses now (`HostProcesses.pidsInUse`); by `identify` where the host
 * tells no more, none where it cannot tell at all.
 */
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

/**
 * Waits until no process uses any of `pids` (10 s at most): until its parent (or init) reaps it, a
 * killed process keeps its pid, its session and its process group, which a restore right after
 * needs free. What is left then, the restore's check of free pids names.
 */
export async function untilFree(
  host: HostProcesses,
  pids: readonly number[],
  sleep: (ms: number) => Promise<void>,
): Promise<void> {
  // Init took up to 2 s on one machine.
  for (let i = 0; i < 200 && pids.length > 0; i++) {
    if ((await usesOf(host, pids)).length === 0) return;
    await sleep(50);
  }
}

/**
 * A group that is one part of a snapshot or restore: all or nothing, its events timed from the
 * whole's start; given a signal, it stops with it and at the deadline (a rollback has none).
 */
export function partOf(progress: Progress, signal: AbortSignal | undefined): GroupSettings {
  return {
    ...checkGroupOptions({ allOrNothing: true, gpuMemory: false }),
    onProgress: (e) => progress.tell(e),
    ...(signal ? { signal, timeoutMs: progress.deadline.left() } : {}),
  };
}

/**
 * The snapshot directory `dir` opened from `store` for `operation`, which closes it, and a read of
 * a small file in it (`undefined` where there is none); where the store fails, the refusal of
 * {@link storeRefusal} (`what` says what could not be done with the directory).
 */
export async function openToRead(
  store: SnapshotStore,
  dir: string,
  operation: string,
  what: string,
): Promise<
  { snap: SnapshotDir; read: (name: string, max: number) => Promise<string | undefined> }
> {
  const snap = await store.open(dir).catch((err) => {
    throw storeRefusal(operation, dir, what, err);
  });
  const read = (name: string, max: number) =>
    snap.readFile(name, max).catch((err) => {
      throw storeRefusal(operation, `${snap.path}/${name}`, "cannot be read", err);
    });
  return { snap, read };
}

/**
 * The refusal of `operation` where the store fails on `path`: `<path> <what>: <the store's
 * sentence>`, or the store's sentence alone where it begins with the path (said once).
 */
export function storeRefusal(
  operation: string,
  path: string,
  what: string,
  err: unknown,
): RefusedError {
  const said = messageOf(err);
  return new RefusedError({
    code: "SNAPSHOT",
    operation,
    reason: said.startsWith(`${path} `) ? said : `${path} ${what}: ${said}`,
  });
}

/** What went wrong in a group, in a clause. */
export function groupFailure(result: GroupResult): string {
  const failed = firstError(result);
  if (failed) return failed.message;
  if (result.aborted) return "it was aborted";
  if (result.deadlinePassed) return "its deadline passed";
  return "not every process could be brought there";
}

/** The first error of a group, where one failed. */
export function firstError(result: GroupResult): Error | undefined {
  return result.processes.find((p) => p.error)?.error;
}
