/**
 * One snapshot or restore under way ({@link Run}), and the options every snapshot and restore has.
 *
 * @module
 */

import type { GpuInfo } from "../driver.ts";
import type { EngineProbe, SnapshotEngine, TreeRequest } from "../engine.ts";
import { RefusedError, SnapshotError } from "../errors.ts";
import { checkGroupOptions, type GroupEvent, type GroupResult } from "../group_types.ts";
import type { GroupSettings } from "../group_types.ts";
import type { HostProcesses } from "../host.ts";
import type { Machine } from "../machine.ts";
import { isName, mustBe, orElse } from "../options.ts";
import { clockOf, Deadline, Slots } from "../time.ts";
import type { ManifestProcess } from "./manifest.ts";
import type { SnapshotStore } from "./store.ts";

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
 * Progress of a snapshot or a restore: a phase starting (with what it moves, where known: each CUDA
 * process's GPU memory in MiB by pid for `suspend`, `restore` (those taken checkpointed too) and
 * `resume`, the images' bytes for `restore`), one tree's image bytes dumped or read back so far
 * (the engine's count), one tree done (`tree-end`: its images sealed after its dump, or read back
 * by its restore, `bytes` as the manifest lists its files, its CUDA processes' `gpuMemoryMiB` by
 * pid), the engine waiting `ms` till it can restore a tree, among the checks (`why`: a port in
 * TIME_WAIT), or a step of one CUDA process (a group's events). Times: ms since the call.
 */
export type SnapshotEvent =
  | Readonly<
    | { type: "phase"; phase: SnapshotPhase; at: number; imageBytes?: number } & {
      gpuMemoryMiB?: Readonly<Record<number, number>>;
    }
    | { type: "bytes"; root: number; bytes: number; at: number }
    | { type: "tree-end"; root: number; how: "dumped" | "restored"; bytes: number; at: number } & {
      gpuMemoryMiB: Readonly<Record<number, number>>;
    }
    | { type: "wait"; root: number; ms: number; why: string; at: number }
  >
  | GroupEvent;

/** Each CUDA process's GPU memory in MiB (over its GPUs), by pid, where the manifest knows it. */
export function heldMiB(processes: readonly ManifestProcess[]): Record<number, number> {
  const known = processes.filter((p) => p.cuda?.gpuMemoryMiB);
  return Object.fromEntries(known.map((p) => [p.pid, mibOf(p)]));
}

/** A process's GPU memory in MiB, over its GPUs (0 where unknown). */
export function mibOf(p: ManifestProcess): number {
  return Object.values(p.cuda?.gpuMemoryMiB ?? {}).reduce((a, b) => a + b, 0);
}

/** The bytes of files, as the manifest lists them. */
export function bytesOf(files: readonly { readonly bytes: number }[]): number {
  return files.reduce((sum, f) => sum + f.bytes, 0);
}

/** The options every snapshot and restore has, checked. */
export interface WholeSettings {
  readonly timeoutMs: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly onProgress: ((event: SnapshotEvent) => void) | undefined;
}

/** Checks a snapshot's directory argument: a path. */
export function checkDir(dir: unknown): string {
  if (isName(dir)) return dir; // not blank: "   " names no directory anyone meant
  return mustBe(TypeError, "dir", "a path (a non-empty string without NUL)", dir);
}

/**
 * A snapshot or restore under way: the machine's parts it needs, its deadline, its signal, its
 * events; the engine's probe and the GPU list are asked at once, awaited after other checks.
 */
export class Run<F = unknown> {
  readonly engine: SnapshotEngine;
  readonly store: SnapshotStore;
  readonly host: HostProcesses;
  readonly deadline: Deadline;
  /** The engine's probe, refused where it names a problem. */
  readonly probing: Promise<EngineProbe>;
  readonly listing: Promise<readonly GpuInfo[]>;
  /** At most as many engine runs at once as the engine allows. */
  readonly slots: Slots;
  /** Aborts at the caller's abort, at the deadline, or at the first failure of a part. */
  readonly signal: AbortSignal;
  readonly #settings: WholeSettings;
  readonly #stop = new AbortController();
  /** The first failure of the run's parts (`F`: as its caller words it), where one failed. */
  failure: { readonly error: F } | undefined;
  #cancelTimer: () => void = () => {};

  /** Starts the clock of the whole, now; refuses where the machine lacks a part. */
  constructor(readonly machine: Machine, readonly operation: string, settings: WholeSettings) {
    const { engine, store, host, driver } = machine;
    const kind = driver.kind, none = `this ${kind} machine has no snapshot`;
    if (!engine) throw prerequisite(operation, `${none} engine (criu)`);
    if (!store) throw prerequisite(operation, `${none} store`);
    const trees = "host cannot tell process trees, which a snapshot needs";
    if (!host?.processTree) throw prerequisite(operation, `the ${host?.kind ?? kind} ${trees}`);
    [this.engine, this.store, this.host] = [engine, store, host];
    this.#settings = settings;
    this.deadline = new Deadline(clockOf(machine), settings.timeoutMs);
    this.probing = started(
      engine.probe().then((probe) => {
        if (probe.problems.length === 0) return probe;
        const why = `${engine.kind} cannot work here: ${probe.problems.join(" ")}`;
        throw prerequisite(operation, why);
      }),
    );
    this.listing = started(driver.listGpus ? driver.listGpus() : Promise.resolve([]));
    this.slots = new Slots(engine.parallel ?? 8);
    const caller = settings.signal;
    this.signal = caller ? AbortSignal.any([caller, this.#stop.signal]) : this.#stop.signal;
    // The signal aborts at the deadline, on the machine's clock (its timer, or the real one).
    const passed = () => this.#stop.abort(new Error("its deadline passed"));
    this.#cancelTimer = this.deadline.onPassed(machine.clock, passed);
  }

  at(): number {
    return this.deadline.elapsed();
  }

  /** Tells an event, its time counted from the whole's start; a listener that throws is ignored. */
  tell(event: SnapshotEvent): void {
    orElse(() => this.#settings.onProgress?.({ ...event, at: this.at() }), undefined);
  }

  /** Tells that a phase starts, with what it moves where known. */
  phase(
    phase: SnapshotPhase,
    moves?: { gpuMemoryMiB?: Readonly<Record<number, number>>; imageBytes?: number },
  ): void {
    this.tell({ type: "phase", phase, at: 0, ...moves });
  }

  /** Why the whole must stop now (an abort, the deadline), if it must. */
  stopped(): string | undefined {
    if (this.#settings.signal?.aborted) return "it was aborted";
    return this.deadline.passed() ? "its deadline passed" : undefined;
  }

  /** Refuses to begin `what` where it must stop already (`why`): nothing was changed. */
  notBegun(what: string, why: string | undefined = this.stopped()): void {
    if (!why) return;
    const message = `${what} stopped before it began: ${why}`, detail = "nothing was changed";
    throw new SnapshotError({ code: "STOPPED", operation: this.operation, message, detail });
  }

  /** Keeps `error` where it is the first failure of a part, and stops the others. */
  fail(error: F): void {
    this.failure ??= { error };
    this.#stop.abort(new Error("another part failed"));
  }

  /** A group's settings as a part of the run (all or nothing; `stoppable`: stops with it). */
  group(stoppable: boolean): GroupSettings {
    return {
      ...checkGroupOptions({ allOrNothing: true, gpuMemory: false }),
      onProgress: (e) => this.tell(e),
      ...(stoppable ? { signal: this.signal, timeoutMs: this.deadline.left() } : {}),
    };
  }

  /** What every engine call on the tree of `root` is given: the run's signal, time left, events. */
  tree(root: number): Omit<TreeRequest, "imagesDir"> & { signal: AbortSignal } {
    const left = this.deadline.left(), time = left !== undefined ? { timeoutMs: left } : {};
    const onBytes = (bytes: number) => this.tell({ type: "bytes", root, bytes, at: 0 });
    return { root, signal: this.signal, onBytes, ...time };
  }

  /** Ends the run: its signal aborts, so that nothing stays listening on a caller's signal. */
  close(): void {
    this.#cancelTimer();
    this.#stop.abort(new Error("the operation ended"));
  }
}

/** A refusal for something the machine must have. */
export function prerequisite(operation: string, reason: string): RefusedError {
  return new RefusedError({ code: "PREREQUISITE", operation, reason });
}

/** A promise started now and awaited later: its rejection is not left unhandled meanwhile. */
export function started<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/** What went wrong in a group, in a clause (`stopped`: why its signal aborted, where known). */
export function groupFailure(result: GroupResult, stopped?: string): string {
  const failed = firstError(result);
  if (failed) return failed.message;
  if (result.aborted) return stopped ?? "it was aborted";
  if (result.deadlinePassed) return "its deadline passed";
  return "not every process could be brought there";
}

/** The first error of a group, where one failed. */
export function firstError(result: GroupResult): Error | undefined {
  return result.processes.find((p) => p.error)?.error;
}
