/**
 * The seam below a snapshot's directory: where snapshots live and how one is read and written,
 * opened once so that no path is looked up twice. The Linux store is `os/snapshot_store.ts`; what
 * a directory holds, and in which order, is `layout.ts`'s.
 *
 * @module
 */

/** A file of a snapshot, by its path inside the snapshot's directory. */
export interface SnapshotFile {
  /** Its path relative to the snapshot's directory, `/`-separated (`tree-4242/pages-1.img`). */
  readonly path: string;
  /** Its size in bytes. */
  readonly bytes: number;
  /**
   * Its chunked SHA-256, hex: the SHA-256 of the SHA-256s of its 8 MiB pieces in order
   * (docs/SNAPSHOTS.md says how to compute it with coreutils).
   */
  readonly chunkedSha256: string;
}

/**
 * A snapshot's directory, opened once: every name below is looked up from the open directory, so
 * no rename of a directory above it redirects a later step (on Linux, through
 * `/proc/<pid>/fd/<n>`). Names are single path components (`tree-4242`, `manifest.json`).
 */
export interface SnapshotDir {
  /** Its absolute path, for messages. */
  readonly path: string;
  /** Makes the private subdirectory `name` (mode 0700); {@link removeCreated} removes it. */
  subdir(name: string): Promise<void>;
  /**
   * The path the engine is given for the subdirectory `name`: one that leads to the directory
   * checked here, whatever is renamed meanwhile. Refuses a link, or one others may write.
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
   * and digest, by name. Refuses a link, or a file another user owns or others may write.
   */
  seal(sub: string, signal?: AbortSignal): Promise<SnapshotFile[]>;
  /**
   * Checks everything inside against `files` (a manifest's): nothing but `options.topFiles` and
   * the files' subdirectories at the top, nothing but the files in those, each a directory or
   * regular file of root's or this user's that nobody else may write, no link, each file of its
   * size and, with `digests`, its digest: before it resolves, or, for the files `later` picks,
   * from then on ({@link Checked.later}). Throws an error naming the first path that differs.
   */
  check(files: readonly SnapshotFile[], options: CheckOptions): Promise<Checked>;
  /** Removes what this opening made (its subdirectories, files, the directory itself where it made it); resolves to their paths. */
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
  /**
   * The files whose digests are compared after `check` resolves, while the caller goes on (the
   * memory images a restore loads into processes it keeps stopped until they matched); the
   * others' are compared before. Their sizes and the rest are checked before, as for every file.
   */
  readonly later?: (file: SnapshotFile) => boolean;
}

/** What {@link SnapshotDir.check} found; the digests it left for later go on. */
export interface Checked {
  /** Whether digests are compared (a store that keeps none, a benchmark's, compares none). */
  readonly digests: boolean;
  /**
   * Resolves once every file left for later in the subdirectory `sub` matched its digest (at once
   * where none was left); rejects, as soon as any file left for later differs or cannot be read,
   * with the error naming it.
   */
  later(sub: string): Promise<void>;
  /** Resolves once every digest left for later matched; rejects as {@link later} does. */
  readonly all: Promise<void>;
}

/**
 * Where snapshots live: private directories, opened once (see {@link SnapshotDir}). The Linux one
 * (`os/snapshot_store.ts`) uses the file system; the simulated engine's snapshots use it too.
 */
export interface SnapshotStore {
  /**
   * Makes `dir` for a new snapshot, mode 0700, and opens it. Refuses (with a message that says
   * why) a path that is a symbolic link, a file, a directory that is not empty, or one that lies
   * where others could swap it (a directory above owned by another user, or that others may write
   * and is not sticky); an empty directory is taken if it belongs to this user and no one else may
   * write in it.
   */
  create(dir: string): Promise<SnapshotDir>;
  /**
   * Opens an existing snapshot directory. Refuses one that is a symbolic link, not a directory,
   * owned by another user, writable by others, or that lies where others could swap it.
   */
  open(dir: string): Promise<SnapshotDir>;
}
