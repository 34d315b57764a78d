/**
 * A snapshot's manifest, a versioned contract (docs/SNAPSHOTS.md) parsed strictly: what is not
 * exactly what this version writes is refused in one sentence.
 *
 * @module
 */

import { RefusedError } from "../errors.ts";
import type { TreeProcess } from "../host.ts";
import { StrictReader } from "../json.ts";
import { MAX_PID, mustBe } from "../options.ts";
import { SNAPSHOT_STATES, type SnapshotState } from "../states.ts";
import type { SnapshotFile } from "./store.ts";

/** The format this version writes and reads. */
export const MANIFEST_FORMAT: Manifest["format"] = "ckpt-cuda-snapshot/2";

/**
 * One process of a dumped tree, as it was found there: it comes back with its pid, and each of its
 * thread ids must be free for the restore.
 */
export interface ManifestProcess extends TreeProcess {
  /** Its CUDA side; left out for a process that does not use CUDA. */
  readonly cuda?: {
    /** Its CUDA state when the snapshot was asked for: running or checkpointed. */
    readonly state: SnapshotState;
    /** The thread the driver restores it on (what CRIU's plugin asks for). */
    readonly restoreThreadId: number;
    /** The GPU memory it held before its checkpoint, MiB by GPU UUID; `null` where unknown. */
    readonly gpuMemoryMiB: Readonly<Record<string, number>> | null;
  };
}

/**
 * One dumped process tree: the pid of its root, the subdirectory its images are in
 * (`tree-<root>`), its processes (the root first, each after its parent).
 */
export type ManifestTree = Readonly<
  { root: number; images: string; processes: readonly ManifestProcess[] }
>;

/**
 * One GPU of the machine the snapshot was taken on: its index as the driver numbers it, its UUID
 * (`GPU-…`), its name (`NVIDIA H100 80GB HBM3`: a restore maps it only onto a GPU of that name),
 * its total memory in MiB where it could be read.
 */
export type ManifestGpu = Readonly<
  { index: number; uuid: string; name: string; totalMiB?: number }
>;

/** A snapshot's manifest, as {@link parseManifest} gives it. */
export interface Manifest {
  /** The format, always `"ckpt-cuda-snapshot/2"` in this version. */
  readonly format: "ckpt-cuda-snapshot/2";
  /** When the snapshot was taken (ISO 8601). */
  readonly createdAt: string;
  /** What took it. */
  readonly tool: { readonly name: string; readonly version: string };
  /** The machine it was taken on. */
  readonly host: { readonly hostname: string; readonly kernel: string };
  /** The driver: its `cuDriverGetVersion` (13000) and, where known, its release (`580.159.04`). */
  readonly driver: { readonly cudaVersion: number; readonly release?: string };
  /** The engine that dumped the trees, and its version. */
  readonly engine: { readonly kind: string; readonly version?: string };
  /** Every GPU the driver saw. */
  readonly gpus: readonly ManifestGpu[];
  /** The dumped trees. */
  readonly trees: readonly ManifestTree[];
  /** How it was taken: the options of `snapshot` (`tcpEstablished` left out where not given). */
  readonly options: Readonly<{ leaveRunning: boolean; job: boolean; tcpEstablished?: true }>;
  /** How long its parts took, in ms. */
  readonly timings: Readonly<{ suspendMs: number; dumpMs: number; totalMs: number }>;
  /** Every file of its trees with its size and digest: a restore refuses any other, or a change. */
  readonly files: readonly SnapshotFile[];
}

/** A refusal (`SNAPSHOT`) of `operation`: not a snapshot this version can use. */
export const snapshotRefusal = (operation: string, reason: string): RefusedError =>
  new RefusedError({ code: "SNAPSHOT", operation, reason });

/** The subdirectory of a tree's images. */
export const treeDirName = (root: number): string => `tree-${root}`;

const TOP_FIELDS = "format createdAt tool host driver engine gpus trees options timings files"
  .split(" ");
/** The name of a tree's directory, `tree-<pid>` (see {@link treeDirName}); its root, captured. */
export const TREE_DIR = /^tree-([1-9][0-9]{0,9})$/;
const DIGEST = /^[0-9a-f]{64}$/;
const FILE_PATH = /^tree-[1-9][0-9]{0,9}\/[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$/;

/** Turns a manifest into the text written to disk (stable key order, one trailing newline). */
export const serializeManifest = (manifest: Manifest): string =>
  JSON.stringify(manifest, null, 2) + "\n";

/**
 * Parses a manifest strictly (`path` names it in messages): a {@link RefusedError} with code
 * `"SNAPSHOT"` names the field that is wrong and the value found.
 *
 * @example
 * ```ts
 * import { parseManifest } from "@ckpt/cuda/snapshot";
 * try {
 *   parseManifest('{"format":"ckpt-cuda-snapshot/9"}', "/srv/snap/manifest.json");
 * } catch (err) {
 *   console.log((err as Error).message); // "... written in format ckpt-cuda-snapshot/9 ..."
 * }
 * ```
 */
export function parseManifest(text: string, path: string, operation = "parseManifest"): Manifest {
  if (typeof text !== "string") mustBe(TypeError, "text", "the manifest's JSON text", text);
  const r = new StrictReader((_field, reason) => snapshotRefusal(operation, `${path}: ${reason}`));
  const data = r.parse(text, "it");
  checkFormat(r, data);
  const m = r.object(data, "", TOP_FIELDS);
  const createdAt = r.string(m.createdAt, "createdAt");
  if (Number.isNaN(Date.parse(createdAt))) r.fail("createdAt", "a date (ISO 8601)", createdAt);
  const gpus = readGpus(r, m.gpus, "gpus");
  const trees = readTrees(r, m.trees, new Set(gpus.map((g) => g.uuid)));
  const str = (v: unknown, at: string) => r.string(v, at);
  const flag = (v: unknown, at: string) => r.boolean(v, at);
  const ms = (v: unknown, at: string) => r.amount(v, at);
  return {
    format: MANIFEST_FORMAT,
    createdAt,
    tool: r.fields(m.tool, "tool", { name: str, version: str }),
    host: r.fields(m.host, "host", { hostname: str, kernel: str }),
    driver: r.fields(m.driver, "driver", {
      cudaVersion: (v, at) => r.integer(v, at, 1, 1_000_000),
      release: str,
    }, ["release"]),
    engine: r.fields(m.engine, "engine", { kind: str, version: str }, ["version"]),
    gpus,
    trees,
    options: r.fields(m.options, "options", {
      leaveRunning: flag,
      job: flag,
      tcpEstablished: (v, at) => v === true ? v : r.fail(at, "true (or left out)", v),
    }, ["tcpEstablished"]),
    timings: r.fields(m.timings, "timings", { suspendMs: ms, dumpMs: ms, totalMs: ms }),
    files: readFiles(r, m.files, trees),
  };
}

/** Refuses what is not a manifest of this format, saying what it is instead. */
function checkFormat(r: StrictReader, data: unknown): void {
  const tag = (data as { format?: unknown } | null | undefined)?.format;
  const none = `it is not a snapshot manifest of @ckpt/cuda: it has no "format" field`;
  if (typeof tag !== "string") r.refuse("format", `${none} (expected "${MANIFEST_FORMAT}")`);
  const other = " (it was written by another version)";
  const newer = /^ckpt-cuda-snapshot\/[0-9]+$/.test(tag) ? other : "";
  const only = `this version of @ckpt/cuda reads only "${MANIFEST_FORMAT}"${newer}`;
  const written = `it is written in format ${JSON.stringify(tag)}, and ${only}`;
  if (tag !== MANIFEST_FORMAT) r.refuse("format", written);
}

/** The trees, each with its processes; every pid and thread id once over all of them. */
function readTrees(r: StrictReader, value: unknown, gpus: ReadonlySet<string>): ManifestTree[] {
  const trees = r.array(value, "trees").map((t, i) => {
    const at = `trees[${i}]`, o = r.object(t, at, ["root", "images", "processes"]);
    const root = r.integer(o.root, `${at}.root`, 1, MAX_PID);
    const images = r.string(o.images, `${at}.images`);
    if (images !== treeDirName(root)) r.fail(`${at}.images`, `"${treeDirName(root)}"`, images);
    const processes = r.array(o.processes, `${at}.processes`).map((p, j) =>
      readProcess(r, p, `${at}.processes[${j}]`, gpus)
    );
    const first = processes[0]?.pid; // none in an empty list
    if (first !== root) r.fail(`${at}.processes[0].pid`, `the root, ${root}`, first);
    return { root, images, processes };
  });
  if (trees.length === 0) r.fail("trees", "at least one tree", []);
  const pids = new Set<number>();
  for (const t of trees) {
    for (const id of t.processes.flatMap((p) => p.threads)) {
      if (pids.has(id)) r.fail(`trees (root ${t.root})`, "every pid and thread id once", id);
      pids.add(id);
    }
  }
  return trees;
}

/** The files, each once, each inside one of the trees' directories, every tree with some. */
function readFiles(r: StrictReader, value: unknown, trees: readonly ManifestTree[]) {
  const treeDirs = new Map(trees.map((t) => [t.images, 0])), paths = new Set<string>();
  const files = r.array(value, "files").map((f, i): SnapshotFile => {
    const at = `files[${i}]`, o = r.object(f, at, ["path", "bytes", "chunkedSha256"]);
    const path = r.string(o.path, `${at}.path`);
    const inside = "a file inside a tree's images directory (tree-<pid>/<name>)";
    if (!FILE_PATH.test(path) || path.includes("..")) r.fail(`${at}.path`, inside, path);
    // Listed twice, a file would be checked against one entry only, the other's digest unread.
    if (paths.has(path)) r.fail(`${at}.path`, "a file not listed before", path);
    paths.add(path);
    const tree = path.slice(0, path.indexOf("/")), count = treeDirs.get(tree);
    if (count === undefined) r.fail(`${at}.path`, "a file of one of the manifest's trees", path);
    treeDirs.set(tree, count! + 1);
    const digest = r.string(o.chunkedSha256, `${at}.chunkedSha256`);
    if (!DIGEST.test(digest)) r.fail(`${at}.chunkedSha256`, "64 lowercase hex digits", digest);
    return { path, bytes: r.integer(o.bytes, `${at}.bytes`, 0), chunkedSha256: digest };
  });
  for (const [images, count] of treeDirs) {
    const reason = `it lists no file of ${images}: a tree without its images cannot come back`;
    if (count === 0) r.refuse("files", reason);
  }
  return files;
}

function readProcess(r: StrictReader, value: unknown, at: string, gpus: ReadonlySet<string>) {
  const pid = (v: unknown, field: string) => r.integer(v, field, 1, MAX_PID);
  const known = { uuids: gpus, where: "a GPU of the manifest's gpus" };
  const p = r.fields<ManifestProcess>(value, at, {
    pid,
    parent: (v, field) => r.integer(v, field, 0, MAX_PID),
    threads: (v, field) => r.array(v, field).map((t, i) => pid(t, `${field}[${i}]`)),
    command: (v, field) => r.string(v, field),
    cuda: (v, field) =>
      r.fields(v, field, {
        state: (s, field) => {
          const state = r.string(s, field);
          if ((SNAPSHOT_STATES as readonly string[]).includes(state)) return state as SnapshotState;
          return r.fail(field, SNAPSHOT_STATES.map((s) => `"${s}"`).join(" or "), state);
        },
        restoreThreadId: pid,
        gpuMemoryMiB: (m, field) => m === null ? null : r.mibByGpu(m, field, known),
      }),
  }, ["command", "cuda"]);
  if (p.threads[0] !== p.pid) r.fail(`${at}.threads[0]`, `the pid, ${p.pid}`, p.threads[0]);
  return p;
}

/** GPUs as a manifest (or the simulated criu) lists them, each once, `min` at least. @internal */
export function readGpus(r: StrictReader, value: unknown, field: string, min = 0): ManifestGpu[] {
  const gpus = r.array(value, field, min, 1024).map((g, i) =>
    r.fields<ManifestGpu>(g, `${field}[${i}]`, {
      index: (v, at) => r.integer(v, at, 0, 1023),
      uuid: (v, at) => r.uuid(v, at),
      name: (v, at) => r.string(v, at),
      totalMiB: (v, at) => r.amount(v, at),
    }, ["totalMiB"])
  );
  const i = gpus.findIndex((g, i) => gpus.findIndex((e) => e.uuid === g.uuid) !== i);
  if (i >= 0) r.refuse(`${field}[${i}]`, `${field} names ${gpus[i].uuid} twice`);
  return gpus;
}
