/**
 * The seam below a snapshot's directory: where snapshots live and how one is read and written,
 * opened once so that no path is looked up twice (the Linux store is `os/snapshot_store.ts`).
 *
 * @module
 */

/**
 * A file of a snapshot: its path inside the snapshot's directory, `/`-separated
 * (`tree-4242/pages-1.img`), its size in bytes, and its SHA-256 of the SHA-256s of its 8 MiB
 * pieces, hex (docs/SNAPSHOTS.md shows how).
 */
export type SnapshotFile = Readonly<{ path: string; bytes: number; chunkedSha256: string }>;

/** A snapshot's directory, opened once: names below it never lead elsewhere after a rename. */
export interface SnapshotDir {
  /** Its absolute path, for messages. */
  readonly path: string;
  /** Makes the private subdirectory `name` (mode 0700). */
  subdir(name: string): Promise<void>;
  /** The path the engine is given for the subdirectory `name`, leading to the one checked here. */
  enginePath(name: string): Promise<string>;
  /** Writes the file `name` whole and on disk (a temporary file, fsynced, renamed), mode 0600. */
  writeFile(name: string, text: string): Promise<void>;
  /** Reads the file `name`, if any; refuses a link, another's, or one over `maxBytes`. */
  readFile(name: string, maxBytes: number): Promise<string | undefined>;
  /** Removes the file or subdirectory `name` (with all it holds), where there is one. */
  remove(name: string): Promise<void>;
  /**
   * Puts every file of `sub` on disk and resolves to each with its size and digest. Given the dump
   * that writes them (`writing`), it may begin at once, and resolves only after `writing` has; it
   * rejects, having let go of every file, once `writing` rejects or `signal` aborts.
   */
  seal(
    sub: string,
    o?: { signal?: AbortSignal; writing?: Promise<unknown> },
  ): Promise<SnapshotFile[]>;
  /**
   * Checks everything inside against `files` (nothing else, no link, nothing others may write,
   * sizes, digests), the digests of `later`'s after it resolves; names the first that differs.
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
  /** Their digests begin once this settles (a restore's other checks ended) or `signal` aborts. */
  readonly laterFrom?: Promise<unknown>;
  /** The cores other work needs now (the engine's restores running): theirs take the rest. */
  readonly busy?: () => number;
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
  /** Makes `dir` (mode 0700; an empty one of this user's will do) and opens it, or says why not. */
  create(dir: string): Promise<SnapshotDir>;
  /** Opens a snapshot directory; refuses one others could write or swap, saying why. */
  open(dir: string): Promise<SnapshotDir>;
}
