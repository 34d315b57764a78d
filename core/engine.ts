/**
 * The seam below snapshots: what dumps process trees and brings them back (criu). The GPU half is
 * not the engine's: this package suspends and resumes the CUDA processes, so criu needs no plugin.
 *
 * @module
 */

/**
 * What an engine found about what it needs on this machine: its version (`4.1.1` for criu) where it
 * could be read, and each missing prerequisite (criu, root, a kernel feature) in a sentence.
 */
export type EngineProbe = { readonly version?: string; readonly problems: readonly string[] };

/** A tree to dump or restore: what a {@link DumpRequest} and a {@link RestoreRequest} share. */
export interface TreeRequest {
  /** The pid of the tree's root: the tree is it and every process descended from it. */
  readonly root: number;
  /** Its images' directory: for a dump, an empty private one (for the engine's log too). */
  readonly imagesDir: string;
  /** Stops the work: a dump leaves the processes running, a restore ends those it made. */
  readonly signal?: AbortSignal;
  /** Stops the work as `signal` does once this many ms (on the engine's clock) have passed. */
  readonly timeoutMs?: number;
  /** Established TCP connections too (criu's `--tcp-established`); else a dump refuses them. */
  readonly tcpEstablished?: boolean;
  /** Told now and then the image bytes written, or read back, so far (not by `ready`). No throw. */
  readonly onBytes?: (bytes: number) => void;
}

/** A tree to dump. */
export type DumpRequest = TreeRequest;

/** A tree to restore: it comes back with the pids it was dumped with. */
export interface RestoreRequest extends TreeRequest {
  /** Leaves the tree stopped once back (`--leave-stopped`) for the caller to wake or kill. */
  readonly leaveStopped?: boolean;
  /** Told before it waits `ms` to look again (criu: a port in TIME_WAIT; 0 if ended), and why. */
  readonly onWait?: (ms: number, why: string) => void;
}

/** A process as dumped: its parent's pid (0 for the root), its thread ids, pid first. */
export type DumpedProcess = Readonly<{ pid: number; parent: number; threads: readonly number[] }>;

/**
 * Dumps and restores process trees. A dump leaves them running: the snapshot ends them once all
 * are on disk, so one whose last dump fails can put everything back. A restored tree is detached.
 */
export interface SnapshotEngine {
  /** What the engine is, for messages and the manifest: `"criu"`, `"simulated criu"`. */
  readonly kind: string;
  /** How many dumps or restores may run at once (criu: the cores); 8 where left out. */
  readonly parallel?: number;
  /**
   * Whether the restore does not act on the file `name` of a tree (criu: `pages-N.img`, which it
   * only copies, and its log): such files are digested while the tree is held stopped.
   */
  inertFile?(name: string): boolean;
  /** What it needs on this machine, and what is missing. */
  probe(): Promise<EngineProbe>;
  /** Dumps a tree, resolving to its processes as dumped; rejects, leaving them running. */
  dump(request: DumpRequest): Promise<readonly DumpedProcess[]>;
  /** Restores a tree, each process with its pid; rejects once what it made is ended. */
  restore(request: RestoreRequest): Promise<void>;
  /**
   * Asked of every tree before any is restored: waits till this machine can take the tree (criu:
   * till the ports its sockets bind are free), or rejects saying why not.
   */
  ready?(request: RestoreRequest): Promise<void>;
  /** Stops processes (SIGSTOP), so that a tree being ended forks no more; gone is no error. */
  stop(pids: readonly number[]): Promise<void>;
  /** Ends processes at once (SIGKILL); a process already gone is no error. */
  kill(pids: readonly number[]): Promise<void>;
  /** Lets stopped processes go on (SIGCONT); a process not stopped, or gone, is no error. */
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
