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
}

/**
 * Where snapshots live: private directories, a manifest written atomically. The Linux one
 * (`os/snapshot_store.ts`) uses the file system; the simulated engine's snapshots use it too.
 */
export interface SnapshotStore {
  /**
   * Makes `dir` for a new snapshot, mode 0700, and resolves to its absolute path. Refuses (with a
   * message that says why) a path that is a symbolic link, a file, or a directory that is not
   * empty; an empty directory is taken if it belongs to this user and no one else may write in it.
   */
  create(dir: string): Promise<string>;
  /**
   * Opens an existing snapshot directory and resolves to its absolute path. Refuses one that is
   * a symbolic link, not a directory, owned by another user, or writable by others.
   */
  open(dir: string): Promise<string>;
  /** Makes a private subdirectory `name` of `dir` (mode 0700) and resolves to its path. */
  subdir(dir: string, name: string): Promise<string>;
  /** Writes the manifest of `dir` atomically (a temporary file and a rename), mode 0600. */
  writeManifest(dir: string, text: string): Promise<void>;
  /**
   * Reads the manifest of `dir`; `undefined` where there is none. Refuses a manifest that is a
   * symbolic link, not a regular file, or larger than a manifest can be.
   */
  readManifest(dir: string): Promise<string | undefined>;
  /** Every regular file under `dir/sub` (symbolic links are not followed), paths from `dir`. */
  files(dir: string, sub: string): Promise<SnapshotFile[]>;
}
