/**
 * The seam below snapshots (only its shapes; the flows are in `snapshot/`): what dumps whole
 * process trees to disk and brings them back (CRIU on Linux, `os/criu.ts`; a simulated one for
 * tests, `mock/sim_criu.ts`). Where a snapshot's files live is `snapshot/layout.ts`'s. The GPU half is not the
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
  /** Dump established TCP connections too (criu's `--tcp-established`); else they are refused. */
  readonly tcpEstablished?: boolean;
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
  /** Restore the established TCP connections the dump took (criu's `--tcp-established`). */
  readonly tcpEstablished?: boolean;
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
