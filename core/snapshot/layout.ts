/**
 * A snapshot directory's layout, written in order: the trace (`in-progress.json`: who takes it,
 * what it suspends), each `tree-<root>/` sealed, `manifest.json`, the trace removed. One with a
 * trace was interrupted.
 *
 * @module
 */

import { messageOf, type RefusedError } from "../errors.ts";
import type { ProcessIdentity } from "../host.ts";
import { StrictReader } from "../json.ts";
import { type Manifest, parseManifest, serializeManifest, snapshotRefusal } from "./manifest.ts";
import { TREE_DIR, treeDirName } from "./manifest.ts";
import type { Checked, CheckOptions, SnapshotDir, SnapshotStore } from "./store.ts";

/** The file names of the manifest and of the trace. */
export const MANIFEST_FILE = "manifest.json", TRACE_FILE = "in-progress.json";
/** The largest manifest this version reads, in bytes. */
export const MANIFEST_MAX_BYTES = 16 * 2 ** 20;
const TRACE_MAX_BYTES = 4 * 2 ** 20, TRACE_FORMAT = "ckpt-cuda-in-progress/1";

/** A snapshot under way, as its trace says: who takes it, what it suspends, what it made. */
export interface Trace {
  /** The program taking it, where the host knows it. */
  readonly by?: ProcessIdentity;
  /** When it began (ISO 8601). */
  readonly startedAt: string;
  /** The CUDA processes it suspends. */
  readonly processes: readonly ProcessIdentity[];
  /** The roots of its trees, as identified then (none in a trace of an earlier version). */
  readonly roots: readonly ProcessIdentity[];
  /** The subdirectories it makes (`tree-<pid>`). */
  readonly made: readonly string[];
}

/** The refusal of `op` where the store fails on `path` (said once where its words name it). */
export function storeRefusal(op: string, path: string, what: string, err: unknown): RefusedError {
  const said = messageOf(err);
  return snapshotRefusal(op, said.startsWith(`${path} `) ? said : `${path} ${what}: ${said}`);
}

/** A snapshot being written, in the layout's order. */
export class SnapshotWriter {
  /** The directory, and the engine's path for each tree's directory, in the order of the roots. */
  private constructor(readonly dir: SnapshotDir, readonly imagesDirs: readonly string[]) {}

  /** Makes `path`, its trace and each tree's directory, or refuses (`SNAPSHOT`), leaving none. */
  static async begin(
    store: SnapshotStore,
    path: string,
    roots: readonly number[],
    trace: Omit<Trace, "made">,
  ): Promise<SnapshotWriter> {
    const cannotHold = (where: string, err: unknown) =>
      storeRefusal("snapshot", where, "cannot hold a snapshot", err);
    const dir = await store.create(path).catch((err) => Promise.reject(cannotHold(path, err)));
    const names = roots.map(treeDirName);
    try {
      // The trace first: a snapshot killed at any later point leaves a directory recover reads.
      const text = JSON.stringify({ format: TRACE_FORMAT, ...trace, made: names }, null, 2);
      await dir.writeFile(TRACE_FILE, text + "\n");
      for (const name of names) await dir.subdir(name);
      return new SnapshotWriter(dir, await Promise.all(names.map((name) => dir.enginePath(name))));
    } catch (err) {
      await dir.removeCreated().catch(() => {});
      await dir.close();
      throw cannotHold(dir.path, err);
    }
  }

  /** Writes the manifest (refused here, where a restore would refuse it): then a snapshot. */
  async writeManifest(manifest: Manifest): Promise<void> {
    const text = serializeManifest(manifest);
    parseManifest(text, `${this.dir.path}/${MANIFEST_FILE}`, "snapshot");
    const bytes = new TextEncoder().encode(text).length, most = MANIFEST_MAX_BYTES;
    if (bytes > most) throw new Error(`${bytes} bytes, more than a restore reads (${most})`);
    await this.dir.writeFile(MANIFEST_FILE, text);
  }

  /** Checks the directory holds what `manifest` lists (of its sizes), and no more but the trace. */
  async checkWhole(manifest: Manifest): Promise<void> {
    await this.dir.check(manifest.files, { digests: false, topFiles: [MANIFEST_FILE, TRACE_FILE] });
  }

  /** The snapshot is over: its trace goes, and the directory is let go. */
  async finish(): Promise<void> {
    await this.dir.remove(TRACE_FILE);
    await this.dir.close();
  }

  /** Removes all the snapshot wrote and lets go; resolves to a clause for the error. */
  async discard(): Promise<string> {
    const where = this.dir.path;
    const said = await this.dir.removeCreated().then(
      (removed) => removed.length > 0 ? `; what it had written in ${where} was removed` : "",
      (err) => `; what it had written in ${where} could not all be removed: ${messageOf(err)}`,
    );
    await this.dir.close();
    return said;
  }
}

/** Reads a small file of a snapshot's directory: its text, or `undefined` where there is none. */
type Reader = (name: string, max: number) => Promise<string | undefined>;

/**
 * Runs `body` on the snapshot directory `path`, opened, and a reader of its small files, each
 * refused in the store's words; the directory is closed where `body` throws.
 */
async function openedFor<T>(
  store: SnapshotStore,
  { path, operation, what }: { path: string; operation: string; what: string },
  body: (dir: SnapshotDir, read: Reader) => Promise<T>,
): Promise<T> {
  const dir = await store.open(path).catch((err) => {
    throw storeRefusal(operation, path, what, err);
  });
  const read = (name: string, max: number) =>
    dir.readFile(name, max).catch((err) => {
      throw storeRefusal(operation, `${dir.path}/${name}`, "cannot be read", err);
    });
  return await body(dir, read).catch(async (err) => {
    await dir.close();
    throw err;
  });
}

/** The complete snapshot in `path`, all checked against its manifest; the caller closes it. */
export async function openSnapshot(
  store: SnapshotStore,
  path: string,
  operation: string,
  o: CheckOptions,
): Promise<{ dir: SnapshotDir; manifest: Manifest; checked: Checked }> {
  const refuse = (reason: string) => snapshotRefusal(operation, reason);
  const what = "cannot be read as a snapshot";
  return await openedFor(store, { path, operation, what }, async (dir, read) => {
    const where = dir.path, text = await read(MANIFEST_FILE, MANIFEST_MAX_BYTES);
    const interrupted = `${where} holds ${TRACE_FILE}: the snapshot taken there was interrupted`;
    const before = text === undefined ? "" : " before it had ended its processes";
    const recover = `\`cuda-checkpoint recover ${where}\` resumes the processes it left suspended`;
    const traced = await read(TRACE_FILE, TRACE_MAX_BYTES) !== undefined;
    if (traced) throw refuse(`${interrupted}${before}; ${recover}`);
    const last = `it has no ${MANIFEST_FILE}, which a snapshot writes last`;
    const copy = "(a copy made before the snapshot ended, or one that left it out, has none)";
    if (text === undefined) throw refuse(`${where} is not a snapshot: ${last} ${copy}`);
    const manifest = parseManifest(text, `${where}/${MANIFEST_FILE}`, operation);
    const refused = (err: unknown) => {
      throw o.signal?.aborted ? err : refuse(messageOf(err));
    };
    const checked = await dir.check(manifest.files, { ...o, topFiles: [MANIFEST_FILE] })
      .catch(refused);
    const all = checked.all.catch(refused);
    all.catch(() => {});
    const later = (sub: string) => checked.later(sub).catch(refused);
    return { dir, manifest, checked: { digests: checked.digests, later, all } };
  });
}

/** The interrupted snapshot in `path`, for `recover`; refused (`SNAPSHOT`) without a trace. */
export async function openInterrupted(
  store: SnapshotStore,
  path: string,
  operation: string,
): Promise<{ dir: SnapshotDir; trace: Trace; complete: boolean }> {
  const what = "cannot be read as a snapshot's directory";
  return await openedFor(store, { path, operation, what }, async (dir, read) => {
    const text = await read(TRACE_FILE, TRACE_MAX_BYTES);
    const none = `${dir.path} holds no ${TRACE_FILE}: no snapshot taken there was interrupted`;
    const nothing = `${none}, so there is nothing to recover`;
    if (text === undefined) throw snapshotRefusal(operation, nothing);
    const trace = parseTrace(text, `${dir.path}/${TRACE_FILE}`, operation);
    return { dir, trace, complete: await read(MANIFEST_FILE, MANIFEST_MAX_BYTES) !== undefined };
  });
}

/** Parses a trace strictly; `where` names it in messages. */
function parseTrace(text: string, where: string, operation: string): Trace {
  const r = new StrictReader((_field, reason) => snapshotRefusal(operation, `${where}: ${reason}`));
  const fields = "format startedAt processes made".split(" ");
  const o = r.object(r.parse(text, "it"), "", fields, ["by", "roots"]);
  if (o.format !== TRACE_FORMAT) r.fail("format", JSON.stringify(TRACE_FORMAT), o.format);
  return {
    ...(o.by !== undefined ? { by: r.identity(o.by, "by") } : {}),
    startedAt: r.string(o.startedAt, "startedAt"),
    processes: r.array(o.processes, "processes").map((p, i) => r.identity(p, `processes[${i}]`)),
    roots: r.array(o.roots ?? [], "roots").map((p, i) => r.identity(p, `roots[${i}]`)),
    made: r.array(o.made, "made").map((m, i) => {
      const name = r.string(m, `made[${i}]`);
      if (!TREE_DIR.test(name)) r.fail(`made[${i}]`, '"tree-<pid>"', name);
      return name;
    }),
  };
}
