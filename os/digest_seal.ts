// A tree's images sealed: every file digested and put on disk (fdatasync), then its directory.
// Given the dump that writes them (`writing`), the seal follows it: every 150 ms it opens the files
// that appeared, hashes each piece of a file once the file has grown past the piece's end, and
// syncs what a file has gained since its last sync (8 MiB or more, one sync at a time per file), so
// that once the dump ends only the last pieces and bytes are left. Then every file is opened again
// and checked as it would have been without following, the same file keeps what was hashed of it,
// and each file is synced once more. A piece changed after it was hashed no longer matches its
// digest: a restore's check refuses that file.

import type { FileHandle } from "node:fs/promises";
import type { SnapshotFile } from "../core/snapshot/store.ts";
import { digestOf, PIECE_BYTES, PieceHasher } from "./digest.ts";

/** The directory to seal (`sub` inside the snapshot's, `shown` in messages), as its store opens it. */
export interface SealDir {
  readonly sub: string;
  readonly shown: string;
  /** The names in it now, sorted. */
  list(): Promise<string[]>;
  /** Opens the file `name` as a seal must (its size and identity then), or throws why it cannot. */
  open(name: string): Promise<SealOpened>;
  /** Puts the directory itself on disk. */
  sync(): Promise<void>;
}

/** A file opened by {@link SealDir.open}: its size then, its device and inode. */
export type SealOpened = { handle: FileHandle; size: number; dev: number; ino: number };

/** A file followed: opened once, each whole piece's digest asked once, its bytes synced. */
interface Followed {
  readonly file: SealOpened;
  readonly name: string;
  /** The digest of each piece asked, whole when asked; undefined where it could not be read. */
  readonly pieces: Promise<Uint8Array | undefined>[];
  synced: number;
  syncing?: Promise<void>;
  failed?: { error: unknown };
}

/**
 * Seals `dir` (see the module documentation): each file with its size and chunked SHA-256 (zeros
 * without `digests`), in the order of the names; rejects at once, having let go of every file,
 * where `writing` rejects or `signal` aborts.
 */
export async function seal(
  dir: SealDir,
  o: { digests: boolean; signal?: AbortSignal; writing?: Promise<unknown> },
): Promise<SnapshotFile[]> {
  const hasher = o.digests ? new PieceHasher({ signal: o.signal }) : undefined;
  const all: Followed[] = [], followed = new Map<string, Followed>();
  const follow = (file: SealOpened, name: string) =>
    all[all.push({ file, name: `${dir.shown}/${name}`, pieces: [], synced: 0 }) - 1];
  let done = o.writing === undefined, failure: { error: unknown } | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const wake = Promise.withResolvers<void>(), woken = () => wake.resolve();
  o.writing?.then(() => done = true, (error) => failure = { error }).finally(woken);
  o.signal?.addEventListener("abort", woken);
  const over = () => {
    if (o.signal?.aborted) throw o.signal.reason;
    if (failure) throw failure.error;
    return done;
  };
  try {
    while (!over()) {
      for (const name of await dir.list().catch(() => [])) {
        const file = followed.has(name) ? undefined : await dir.open(name).catch(() => undefined);
        if (file) followed.set(name, follow(file, name));
      }
      for (const f of followed.values()) await step(f, hasher);
      // The files of a dump under way are looked at every 150 ms (at once when it ends or aborts).
      await Promise.race([wake.promise, new Promise((r) => timer = setTimeout(r, 150))]);
      clearTimeout(timer);
    }
    // As without following: every file opened and checked now, the one followed kept if the same.
    const files: [Followed, number, string][] = [];
    for (const name of await dir.list()) {
      const file = await dir.open(name), f = followed.get(name);
      const same = f?.file.dev === file.dev && f.file.ino === file.ino;
      if (same) await file.handle.close();
      files.push([same ? f! : follow(file, name), file.size, `${dir.sub}/${name}`]);
    }
    const synced = Promise.all(files.map(async ([f]) => {
      await f.syncing;
      if (f.failed) throw f.failed.error;
      await (f.syncing = f.file.handle.datasync());
    })).then(() => dir.sync());
    const digests = files.map(([f, bytes]) =>
      hasher ? digestOf(hasher, { ...f.file, bytes, name: f.name }, f.pieces) : "0".repeat(64)
    );
    const [hex] = await Promise.all([Promise.all(digests), synced]);
    return files.map(([, bytes, path], i) => ({ path, bytes, chunkedSha256: hex[i] }));
  } finally {
    clearTimeout(timer);
    o.signal?.removeEventListener("abort", woken);
    await hasher?.close();
    await Promise.allSettled(all.map((f) => f.syncing));
    await Promise.all(all.map((f) => f.file.handle.close()));
  }
}

/** One look at a file a dump writes: its whole pieces asked, and what it gained synced. */
async function step(f: Followed, hasher: PieceHasher | undefined): Promise<void> {
  const bytes = (await f.file.handle.stat().catch(() => undefined))?.size ?? 0;
  // A piece is whole once the file is longer than its end.
  while (hasher && f.pieces.length < Math.floor((bytes - 1) / PIECE_BYTES)) {
    const source = { handle: f.file.handle, bytes, name: f.name };
    f.pieces.push(hasher.hash(source, f.pieces.length).catch(() => undefined));
  }
  if (f.syncing || f.failed || bytes - f.synced < PIECE_BYTES) return;
  f.syncing = f.file.handle.datasync().then(() => void (f.synced = bytes))
    .catch((error) => void (f.failed = { error })).finally(() => f.syncing = undefined);
}
