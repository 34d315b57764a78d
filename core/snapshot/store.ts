/**
 * The seam below a snapshot's directory: where snapshots live and how one is read and written,
 * opened once so that no path is looked up twice (the Linux store is `os/snapshot_store.ts`).
 *
 * @module
 */

/** A file of a snapshot, by its path inside the snapshot's directory. */
export interface SnapshotFile {
  /** Its path relative to the snapshot's directory, `/`-separated (`tree-4242/pages-1.img`). */
  readonly path: string;
  /** Its size in bytes. */
  readonly bytes: number;
  /** Its SHA-256 of the SHA-256s of its 8 MiB pieces, hex (docs/SNAPSHOTS.md shows how). */
  readonly chunkedSha256: string;
}

/**
 * A snapshot's directory, opened once: every name below it (a single path component) is looked
 * up from the open directory, so no rename above it redirects a later step.
 */
export interface SnapshotDir {
  /** Its absolute path, for messages. */
  readonly path: string;
  /** Makes the private subdirectory `name` (mode 0700). */
  subdir(name: string): Promise<void>;
  /**
   * The path the engine is given for the subdirectory `name`, leading to the directory checked
   * here whatever is renamed meanwhile. Refuses a link, or one others may write.
   */
  enginePath(name: string): Promise<string>;
  /** Writes the file `name` whole and on disk (a temporary file, fsynced, renamed), mode 0600. */
  writeFile(name: string, text: string): Promise<void>;
  /**
   * Reads the file `name`; `undefined` where there is none. Refuses a link, a file that is not
   * regular, another user's, one others may write, or one over `maxBytes`.
   */
  readFile(name: string, maxBytes: number): Promise<string | undefined>;
  /** Removes the file or subdirectory `name` (with all it holds), where there is one. */
  remove(name: string): Promise<void>;
  /**
   * Puts every file of the subdirectory `sub` on disk (fsync) and resolves to each with its size
   * and digest. Refuses a link, or a file another user owns or others may write.
   */
  seal(sub: string, signal?: AbortSignal): Promise<SnapshotFile[]>;
  /**
   * Checks everything inside against `files`: nothing else at the top but `topFiles`, nothing
   * but the files in their subdirectories, no link, nothing others may write, each file of its
   * size and (with `digests`) its digest, before it resolves or, for `later`'s, from then on.
   * Throws an error naming the first path that differs.
   */
  check(files: readonly SnapshotFile[], options: CheckOptions): Promise<Checked>;
  /** Removes what this opening made (the directory too where it made it); resolves to the paths. */
  removeCreated(): Promise<string[]>;
  /** Lets go of the directory. */
  close(): Promise<void>;
}

/** What {@link SnapshotDir.check} is asked to check. */
export interface CheckOptions {
  /** Whether digests are compared too (a store that keeps none compares none). */
  readonly digests: boolean;
  /** The files a snapshot has at its top besides its trees' directories (its manifest). */
  readonly topFiles?: readonly string[];
  /** Ends the digests, those left for later too: they then reject with its reason. */
  readonly signal?: AbortSignal;
  /** The files whose digests are compared after `check` resolves (the memory images). */
  readonly later?: (file: SnapshotFile) => boolean;
}

/** What {@link SnapshotDir.check} found; the digests it left for later go on. */
export interface Checked {
  /** Whether digests are compared. */
  readonly digests: boolean;
  /** Resolves once every file left for later in `sub` matched; rejects naming one that differs. */
  later(sub: string): Promise<void>;
  /** Resolves once every digest left for later matched; rejects as {@link later} does. */
  readonly all: Promise<void>;
}

/** Where snapshots live: private directories, opened once (see {@link SnapshotDir}). */
export interface SnapshotStore {
  /**
   * Makes `dir` for a new snapshot, mode 0700, and opens it. Refuses, saying why, a link, a file,
   * a directory that is not empty, or one where others could swap it (a directory above owned by
   * another user, or that others may write and is not sticky); an empty directory of this user's
   * that no one else may write is taken.
   */
  create(dir: string): Promise<SnapshotDir>;
  /**
   * Opens an existing snapshot directory. Refuses a link, a file, one of another user's or that
   * others may write, or one where others could swap it.
   */
  open(dir: string): Promise<SnapshotDir>;
}
