/**
 * The host ({@link HostProcesses}): what this package asks of the machine besides the driver, so
 * that queues and records follow processes, not numbers, and a restore that would not fit is
 * refused before the driver by whichever program of this package makes it. The Linux host is
 * `os/linux_host.ts`; the simulator brings its own.
 *
 * @module
 */

/** One process a host found (a process, never a thread of one), as far as the host could see it. */
export interface ScannedProcess {
  /** Its process id. */
  readonly pid: number;
  /** Its command line, arguments joined by spaces; left out where it is empty or unreadable. */
  readonly command?: string;
  /**
   * Whether it has the CUDA driver library (`libcuda.so`) mapped. Left out where the process could
   * not be looked at ({@link ScannedProcess.notInspectable} says why).
   */
  readonly cudaLibrary?: boolean;
  /** Why the process could not be looked at (another user's process, seen without privilege). */
  readonly notInspectable?: string;
}

/** One process of a process tree ({@link HostProcesses.processTree}). */
export interface TreeProcess {
  /** Its pid. */
  readonly pid: number;
  /** Its parent's pid (0 for a process without one). */
  readonly parent: number;
  /** Its thread ids, its pid first. */
  readonly threads: readonly number[];
  /** Its command line, where it could be read. */
  readonly command?: string;
}

/** What a snapshot's manifest says of the machine it was taken on. */
export interface MachineFacts {
  /** The host's name. */
  readonly hostname: string;
  /** The kernel's release (`uname -r`). */
  readonly kernel: string;
  /** The NVIDIA kernel module's version (`580.159.04`), where it can be read. */
  readonly driverRelease?: string;
}

/** What shows that a process imported GPU memory from another ({@link HostProcesses.gpuImport}). */
export interface GpuImport {
  /** The process that exported it, as the sign names it. */
  readonly exporter: number;
  /** The sign, as a clause: `it maps /dev/shm/cuda.shm.0.92b.1, which process 2347 made`. */
  readonly sign: string;
}

/** GPU memory of one process: MiB by GPU UUID, or `"unknown"`. */
export type GpuMemory = Readonly<Record<string, number>> | "unknown";

/**
 * What a host knows of GPU memory: the GPU memory of every process that holds some, by pid (a
 * process left out holds none), or why it cannot be known.
 */
export type GpuMemoryReport =
  | {
    readonly byPid: ReadonlyMap<number, GpuMemory>;
    /** Free memory of each GPU in MiB, by GPU UUID (`GPU-…`); left out where the host cannot tell. */
    readonly freeMiB?: ReadonlyMap<string, number>;
    /** Total memory of each GPU in MiB, by GPU UUID; left out where the host cannot tell. */
    readonly totalMiB?: ReadonlyMap<string, number>;
  }
  | { readonly unknown: string };

/**
 * Which process an id belongs to. The driver acts on a process for any of its thread ids, so a
 * thread id and its pid are one process; and a pid that is reused later is another process,
 * told apart by its start time.
 */
export interface ProcessIdentity {
  /** Its process id (thread-group id): the same for every thread id of the process. */
  readonly pid: number;
  /** When it started, in the host's own units (clock ticks since boot on Linux); left out where unknown. */
  readonly start?: number;
}

/** An id that a process uses ({@link HostProcesses.pidsInUse}). */
export interface PidUse {
  /** The id asked about. */
  readonly id: number;
  /** The pid of the process that uses it. */
  readonly holder: number;
  /** How: as its pid, as one of its thread ids, as its process group, or as its session. */
  readonly as: "pid" | "thread" | "group" | "session";
}

/** A key for a process: `pid` and its start time, where known (`4242-183877`, or `4242`). */
export function identityKey(id: ProcessIdentity): string {
  return id.start === undefined ? `${id.pid}` : `${id.pid}-${id.start}`;
}

/** Whether two identities are one process. */
export function sameProcess(a: ProcessIdentity, b: ProcessIdentity): boolean {
  return a.pid === b.pid && (a.start === undefined || b.start === undefined || a.start === b.start);
}

/** A restore under way claims the room it is about to take, until it has returned. */
export interface RoomClaim {
  /** MiB it is about to take, by GPU UUID. */
  readonly needMiB: Readonly<Record<string, number>>;
  /** The program restoring it, so that a claim of a program that died is ignored. */
  readonly by: ProcessIdentity;
  /** When it was made, in ms since the epoch. */
  readonly since: number;
}

/** What a checkpointed process held, as one program of this package recorded it. */
export interface HeldRecord {
  /** The process. */
  readonly process: ProcessIdentity;
  /** The GPU memory it held just before its checkpoint, MiB by GPU UUID, its CUDA context included. */
  readonly heldMiB: Readonly<Record<string, number>>;
  /** When it was checkpointed, in ms since the epoch. */
  readonly at: number;
  /** A restore of it under way, where one is. */
  readonly claim?: RoomClaim;
  /**
   * What of the process outlasts criu's dump and restore ({@link HostProcesses.lastingMark}), so
   * that the process criu brings back, with a new start time, finds this record; left out where
   * the host cannot tell.
   */
  readonly mark?: string;
}

/**
 * The records of what checkpointed processes held, keyed by process identity. The Linux host
 * keeps them in a private directory (one file each, written atomically), so that every program
 * of this package on the machine (the command line, a library user, CRIU's plugin through the
 * command line) sees what another recorded.
 */
export interface HeldRecords {
  /** Where they are kept, for messages (`/run/ckpt-cuda`, `memory`). */
  readonly where: string;
  /**
   * The record of a process; `undefined` where there is none. Rejects, naming the path and the
   * fault, where the records cannot be used or the record cannot be read as one: a checked
   * restore is then refused (the room check fails closed).
   */
  get(process: ProcessIdentity): Promise<HeldRecord | undefined>;
  /** Writes the record of its process, replacing any; rejects, saying why, where it cannot. */
  put(record: HeldRecord): Promise<void>;
  /** Removes the record of a process, if there is one. */
  remove(process: ProcessIdentity): Promise<void>;
  /**
   * Every record whose process still lives, with claims of programs that died left out; records
   * of processes that ended are removed on the way, but for those kept for {@link ended}, and
   * what cannot be read as a record is left out (it blocks no restore). Rejects where the records
   * cannot be used at all.
   */
  list(): Promise<HeldRecord[]>;
  /**
   * The records of checkpointed processes that ended, kept because criu may bring them back
   * (a dump through criu's CUDA plugin ends the process it checkpointed): those with a
   * {@link HeldRecord.mark}, for 30 days after their checkpoint; their claims
   * left out. Rejects where the records cannot be used at all. Left out where records keep none:
   * then a process criu brought back is not known by the record of the one it was.
   */
  ended?(): Promise<HeldRecord[]>;
}

/**
 * How long the record of a checkpointed process that ended is kept for criu to bring it back:
 * 30 days (records live in a directory emptied at boot, as the processes are).
 */
export const ENDED_RECORD_KEEP_MS = 30 * 24 * 3600 * 1000;

/** Whether the record of a process that ended is kept for {@link HeldRecords.ended}. */
export function keptEnded(record: HeldRecord, now: number): boolean {
  return record.mark !== undefined && now - record.at <= ENDED_RECORD_KEEP_MS;
}

/**
 * The processes of a machine. The Linux host reads `/proc`, asks NVML for GPU memory and keeps
 * records in a private directory; the simulated driver's host has its simulated processes.
 */
export interface HostProcesses {
  /** What the host is, for messages: `"linux"`, `"simulated"`. */
  readonly kind: string;
  /**
   * Every process of the machine (processes only: a thread is part of its process), including the
   * ones that could not be looked at. A process that ends meanwhile may be left out.
   */
  scan(): Promise<readonly ScannedProcess[]>;
  /** The GPU memory each process holds and each GPU has free; left out where the host cannot tell. */
  gpuMemory?(): Promise<GpuMemoryReport>;
  /**
   * The process that has `id` as its pid or as one of its thread ids, with its start time;
   * `undefined` where no process has it. Left out where the host cannot tell: then an id is
   * taken for a process of its own.
   */
  identify?(id: number): Promise<ProcessIdentity | undefined>;
  /**
   * The process tree rooted at `root`: the root first, then every process descended from it, each
   * after its parent; `undefined` where no process has the pid. Left out where the host cannot
   * tell (then a snapshot cannot be taken on it).
   */
  processTree?(root: number): Promise<readonly TreeProcess[] | undefined>;
  /**
   * Which of `ids` some process uses now, and how: as its pid, a thread id, its process group or
   * its session. The kernel gives an id to a new process only while nothing uses it in any of
   * these ways, so a snapshot's processes can come back with their pids only once none is in
   * use: a process of an ended tree that its parent or init has not reaped yet still holds its
   * pid, and its session and group. Left out where the host cannot tell more than
   * {@link HostProcesses.identify} does.
   */
  pidsInUse?(ids: readonly number[]): Promise<readonly PidUse[]>;
  /**
   * What of a process outlasts criu's dump and restore, as one string that is the same before
   * and after: criu gives a process back its pid in its own pid namespace, its user and its
   * command line, but a new start time (and, restored into a new pid namespace, as a container
   * is, another pid on the host). `undefined` where the process is gone (or is no longer the one
   * named) or cannot be read. Left out where the host cannot tell: then a process criu brought
   * back is not known by the record of the one it was.
   */
  lastingMark?(process: ProcessIdentity): Promise<string | undefined>;
  /** The machine's name, kernel and NVIDIA driver release, for a snapshot's manifest. */
  facts?(): Promise<MachineFacts>;
  /**
   * The sign, where the host finds one, that `pid` holds GPU memory (or an event) another process
   * exported to it through CUDA IPC: on Linux, it maps `/dev/shm/cuda.shm.<gpu>.<pid>.<n>` named
   * after another process and holds no descriptor to it, as the importers of legacy CUDA IPC and
   * of PyTorch's CUDA tensors do. An import of cuMem memory through a file descriptor (NCCL's)
   * leaves no sign (docs/DRIVER.md, "Processes that share GPU memory").
   */
  gpuImport?(pid: number): Promise<GpuImport | undefined>;
  /**
   * The CPU time `pid` has had so far, in ns over all its threads (Linux: `schedstat`), to tell
   * that a process held stopped ran meanwhile; `undefined` where it is gone or cannot be read.
   */
  cpuTime?(pid: number): Promise<number | undefined>;
  /**
   * The records of what checkpointed processes held, shared by every program of this package on
   * the machine. Left out where the host keeps none: then a program remembers only what it
   * checkpointed itself.
   */
  readonly heldRecords?: HeldRecords;
  /**
   * The pid of the program using this host, where it is one of the host's processes: this
   * program's own on Linux; on the simulated machine, the simulated process a test names. A
   * process that checkpoints itself is treated with care (NVML would wait for its restore).
   */
  readonly self?: number;
  /**
   * Lets go of what reading GPU memory keeps open (NVML), until it is asked for again: before
   * this package locks the program itself, in which NVML would wait for its restore.
   */
  release?(): Promise<void>;
}

/**
 * Records kept in memory, for a host that keeps none of its own: they last as long as the
 * session that made them, and no other program sees them. `alive` says whether a process still
 * lives (left out, all do); a claim is never taken for dead.
 */
export class MemoryHeldRecords implements HeldRecords {
  /** Always `"memory"`. */
  readonly where: string = "memory";
  readonly #records = new Map<string, HeldRecord>();
  readonly #alive: (process: ProcessIdentity) => boolean;
  readonly #now: () => number;

  /** Records in memory; `alive` tells live processes, `now` the time in ms since the epoch. */
  constructor(
    alive: (process: ProcessIdentity) => boolean = () => true,
    now: () => number = Date.now,
  ) {
    this.#alive = alive;
    this.#now = now;
  }

  get(process: ProcessIdentity): Promise<HeldRecord | undefined> {
    return Promise.resolve(this.#records.get(identityKey(process)));
  }

  put(record: HeldRecord): Promise<void> {
    this.#records.set(identityKey(record.process), record);
    return Promise.resolve();
  }

  remove(process: ProcessIdentity): Promise<void> {
    this.#records.delete(identityKey(process));
    return Promise.resolve();
  }

  /** The records of live processes; those of processes that ended are removed, but kept ones. */
  list(): Promise<HeldRecord[]> {
    this.#prune();
    return Promise.resolve([...this.#records.values()].filter((r) => this.#alive(r.process)));
  }

  /** The records kept of processes that ended, without their claims. */
  ended(): Promise<HeldRecord[]> {
    this.#prune();
    return Promise.resolve(
      [...this.#records.values()].filter((r) => !this.#alive(r.process)).map(withoutClaim),
    );
  }

  #prune(): void {
    const now = this.#now();
    for (const [key, record] of this.#records) {
      if (!this.#alive(record.process) && !keptEnded(record, now)) this.#records.delete(key);
    }
  }

  /** The records of live processes as they are kept, claims and all; none is removed. */
  liveEntries(): HeldRecord[] {
    return [...this.#records.values()].filter((r) => this.#alive(r.process));
  }
}

/** The record without its claim. */
export function withoutClaim(record: HeldRecord): HeldRecord {
  if (!record.claim) return record;
  const { claim: _, ...rest } = record;
  return rest;
}

/** The record, with its claim left out where the claiming program is gone. */
export function withoutDeadClaim(
  record: HeldRecord,
  alive: (process: ProcessIdentity) => boolean,
): HeldRecord {
  return !record.claim || alive(record.claim.by) ? record : withoutClaim(record);
}
