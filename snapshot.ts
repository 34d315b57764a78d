/**
 * `@ckpt/cuda/snapshot`: what snapshots to disk are made of. For a program that reads a
 * snapshot's manifest, follows a snapshot's progress, or brings an engine or a store of its own.
 * The functions that take and restore snapshots (`snapshot`, `restoreSnapshot`,
 * `inspectSnapshot`) are on `@ckpt/cuda`; {@link recoverSnapshot}, which resumes what a snapshot
 * killed outright left suspended, is here.
 *
 * A snapshot is a directory: one subdirectory of images per process tree, written by the
 * machine's {@link SnapshotEngine} (criu, run without its CUDA plugin: the package suspends and
 * resumes the CUDA processes itself), and a {@link Manifest} (docs/SNAPSHOTS.md), written last.
 *
 * @example
 * ```ts
 * import { snapshot } from "@ckpt/cuda";
 * import type { SnapshotEvent } from "@ckpt/cuda/snapshot";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 * import { mkdtemp } from "node:fs/promises";
 * import { tmpdir } from "node:os";
 *
 * const sim = new SimulatedMachine();
 * const job = sim.spawn({ memoryMiB: 4096, command: "python train.py" });
 * const onProgress = (e: SnapshotEvent) => e.type === "phase" && console.log(e.phase, e.at);
 * // The simulator's images are real files: a new (or empty) directory, whose parent exists.
 * const dir = `${await mkdtemp(`${tmpdir()}/snapshots-`)}/job-1`;
 * const { manifest } = await snapshot([job.pid], dir, { machine: sim, onProgress });
 * console.log(manifest.trees[0].processes[0].cuda); // { state: "running", restoreThreadId, gpuMemoryMiB }
 * ```
 *
 * @module
 */

export type { RestoreSnapshotResult } from "./core/snapshot/restore.ts";
export type { SnapshotEvent, SnapshotPhase } from "./core/snapshot/run.ts";
export type { SnapshotResult } from "./core/snapshot/take.ts";
export type { Manifest, ManifestGpu, ManifestProcess } from "./core/snapshot/manifest.ts";
export { type ManifestTree, parseManifest } from "./core/snapshot/manifest.ts";
export type { SnapshotState } from "./core/states.ts";
export type { Checked, CheckOptions, SnapshotDir } from "./core/snapshot/store.ts";
export type { SnapshotFile, SnapshotStore } from "./core/snapshot/store.ts";
export type { DumpedProcess, DumpRequest, EngineProbe, TreeRequest } from "./core/engine.ts";
export { EngineError, type RestoreRequest, type SnapshotEngine } from "./core/engine.ts";
export { type RecoverOptions, recoverSnapshot } from "./api/functions.ts";
export type { RecoverResult } from "./core/snapshot/recover.ts";
export type { CriuEngineOptions } from "./os/criu.ts";
