/**
 * The seam below snapshots (only its shapes; the flows are `to_disk.ts` and `from_disk.ts`): what
 * dumps whole process trees to disk and brings them back (CRIU on Linux, `os/criu.ts`; a simulated
 * one for tests, `mock/sim_criu.ts`), and where a snapshot's files live. The GPU half is not the
 * engine's: before a dump this package has already locked and checkpointed every CUDA process of
 * the tree through the driver (their GPU memory is in host memory, the GPUs are free), and after a
 * restore it restores and unlocks them itself. So the engine runs without CRIU's CUDA plugin, on
 * a criu that has it or not.
 *
 * @module
 */

/** What an engine found about what it needs on this machine. */
export interface EngineProbe {
  /** The engine's version (`4.1.1` for criu), where it could be read. */
  readonly version?: string;
  /**
   * Each missing prerequisite as one sentence naming it and what to do: criu not installed or
   * too old, not root, a kernel feature `criu check` reports missing. Empty: ready.
   */
  readonly problems: readonly string[];
}

/** A tree to dump. */
export interface DumpRequest {
  /** The pid of the tree's root: the tree is it and every process descended from it. */
  readonly root: number;
  /** An empty private directory for its images (and the engine's log). */
  readonly imagesDir: string;
  /** Stops the dump: the engine ends its work and leaves the processes running. */
  readonly signal?: AbortSignal;
  /** Stops the dump as `signal` does once this many ms (on the engine's clock) have passed. */
  readonly timeoutMs?: number;
  /** Told, now and then, how many bytes of images are written so far. Must not throw. */
  readonly onBytes?: (bytes: number) => void;
}

/** A tree to restore. */
export interface RestoreRequest {
  /** The pid of the tree's root, as it was dumped: it comes back with the same pid. */
  readonly root: number;
  /** The directory its images are in. */
  readonly imagesDir: string;
  /** Stops the restore: the engine ends its work; processes already made are ended. */
  readonly signal?: AbortSignal;
  /** Stops the restore as `signal` does once this many ms (on the engine's clock) have passed. */
  readonly timeoutMs?: number;
  /**
   * Leaves every process of the tree stopped once it is back (SIGSTOP on Linux; criu's
   * `--leave-stopped`), having run nothing of its own since the dump: the caller lets them go on
   * with {@link SnapshotEngine.wake}, or ends them with {@link SnapshotEngine.kill}. Asked only of
   * an engine with {@link SnapshotEngine.inertFile} and `wake`.
   */
  readonly leaveStopped?: boolean;
}

/** A process as an engine dumped it. */
export interface DumpedProcess {
  /** Its pid. */
  readonly pid: number;
  /** Its parent's pid (0 for the root). */
  readonly parent: number;
  /** Its thread ids, its pid first. */
  readonly threads: readonly number[];
}

/**
 * Dumps and restores process trees. A dump leaves the processes running (CRIU's
 * `--leave-running`): the snapshot ends them itself once every tree of it is on disk, so that a
 * snapshot of several trees whose last dump fails can put every process back as it was. A
 * restored tree is detached: its root is not the caller's child.
 */
export interface SnapshotEngine {
  /** What the engine is, for messages and the manifest: `"criu"`, `"simulated criu"`. */
  readonly kind: string;
  /**
   * How many dumps or restores may run at once (criu: the cores); 8 where left out. A snapshot
   * of more trees runs them in turn, and starts none once one has failed.
   */
  readonly parallel?: number;
  /**
   * Whether the file `name` (of a tree's directory) is one the engine's restore does not act on:
   * an image of the tree's processes' memory, whose bytes it only copies into them (criu:
   * `pages-N.img`), or a file it does not read at all (criu: its `dump.log`). A restore checks the
   * digests of these files while the engine restores, the tree left stopped
   * ({@link RestoreRequest.leaveStopped}) and woken only once every one matched; every other file
   * is checked before the engine starts. Left out (or without `wake`): every file is checked
   * before.
   */
  inertFile?(name: string): boolean;
  /** What it needs on this machine, and what is missing. */
  probe(): Promise<EngineProbe>;
  /**
   * Dumps a tree, and resolves to its processes as dumped (the tree may have changed since it was
   * listed). Rejects with an {@link EngineError} when the engine fails; the processes are then
   * left running, as they were.
   */
  dump(request: DumpRequest): Promise<readonly DumpedProcess[]>;
  /**
   * Restores a tree: resolves once every process of it exists again with its pid, stopped at
   * nothing (CUDA processes stay checkpointed until the caller restores them). Rejects with an
   * {@link EngineError}; processes it made are ended first.
   */
  restore(request: RestoreRequest): Promise<void>;
  /**
   * Stops processes where they are (SIGSTOP on Linux), so that a tree forks no more while it is
   * being ended; a process already gone is no error.
   */
  stop(pids: readonly number[]): Promise<void>;
  /** Ends processes at once (SIGKILL on Linux); a process already gone is no error. */
  kill(pids: readonly number[]): Promise<void>;
  /**
   * Lets stopped processes go on (SIGCONT on Linux): what a snapshot killed while it was ending
   * its trees ({@link stop}) left stopped, or a tree restored with `leaveStopped`; a process not
   * stopped, or gone, is no error.
   */
  wake?(pids: readonly number[]): Promise<void>;
}

/** An engine failed: its own words, and where its log is. */
export class EngineError extends Error {
  /** The engine's log file, where there is one. */
  readonly log: string | undefined;

  /** Makes the error; `message` should carry the engine's own last words. */
  constructor(message: string, options: { log?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "EngineError";
    this.log = options.log;
  }
}

/** The engine's log, where `err` is an engine's error with one, for a `SnapshotError`. */
export function logOf(err: unknown): { log?: string } {
  return err instanceof EngineError && err.log ? { log: err.log } : {};
}

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
   * Checks everything inside against `files` (a manifest's): nothing but `manifest.json` and the
   * files' subdirectories at the top, nothing but the files in those, each a directory or regular
   * file of root's or this user's that nobody else may write, no link, each file of its size and,
   * with `digests`, its digest: before it resolves, or, for the files `later` picks, from then on
   * ({@link Checked.later}). Throws an error naming the first path that differs.
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
