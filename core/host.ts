/**
 * The host ({@link HostProcesses}): what this package asks of the machine besides the driver, so
 * that queues and records follow processes, not numbers, and every program of this package sees
 * the room other restores claim. The Linux host is `os/linux_host.ts`; the simulator has its own.
 *
 * @module
 */

/** One process a host found (never a thread of one), as far as the host could see it. */
export interface ScannedProcess {
  /** Its process id. */
  readonly pid: number;
  /** Its command line, arguments joined by spaces; left out where empty or unreadable. */
  readonly command?: string;
  /** Whether it maps `libcuda.so`; left out where it could not be looked at. */
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

/** What a host knows of GPU memory (a process left out of `byPid` holds none), or why not. */
export type GpuMemoryReport =
  | {
    readonly byPid: ReadonlyMap<number, GpuMemory>;
    /** Free memory of each GPU in MiB, by GPU UUID (`GPU-…`), where the host can tell. */
    readonly freeMiB?: ReadonlyMap<string, number>;
    /** Total memory of each GPU in MiB, by GPU UUID, where the host can tell. */
    readonly totalMiB?: ReadonlyMap<string, number>;
  }
  | { readonly unknown: string };

/**
 * Which process an id belongs to: the driver acts on a process for any of its thread ids, and a
 * reused pid is another process, told apart by its start time.
 */
export interface ProcessIdentity {
  /** Its process id (thread-group id): the same for every thread id of the process. */
  readonly pid: number;
  /** When it started, in the host's units (clock ticks since boot on Linux), where known. */
  readonly start?: number;
}

/** An id that a process uses ({@link HostProcesses.pidsInUse}). */
export interface PidUse {
  /** The id asked about. */
  readonly id: number;
  /** The pid of the process that uses it. */
  readonly holder: number;
  /** How: as its pid, one of its thread ids, its process group, or its session. */
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
  /** The program restoring it: a claim of a program that died is ignored. */
  readonly by: ProcessIdentity;
  /** When it was made, in ms since the epoch. */
  readonly since: number;
}

/** What a checkpointed process held, as one program of this package recorded it. */
export interface HeldRecord {
  /** The process. */
  readonly process: ProcessIdentity;
  /** The GPU memory it held just before its checkpoint, MiB by GPU UUID, its context included. */
  readonly heldMiB: Readonly<Record<string, number>>;
  /** When it was checkpointed, in ms since the epoch. */
  readonly at: number;
  /** A restore of it under way, where one is. */
  readonly claim?: RoomClaim;
  /** Its {@link HostProcesses.lastingMark}, by which the process criu brings back finds it. */
  readonly mark?: string;
}

/**
 * The records of what checkpointed processes held, by process identity. The Linux host keeps them
 * in a private directory, one file each, so that every program of this package on the machine
 * sees what another recorded.
 */
export interface HeldRecords {
  /** Where they are kept, for messages (`/run/ckpt-cuda`, `memory`). */
  readonly where: string;
  /**
   * The record of a process, if any. Rejects, naming the path and the fault, where the records
   * cannot be used or the record read: a checked restore is then refused (it fails closed).
   */
  get(process: ProcessIdentity): Promise<HeldRecord | undefined>;
  /** Writes the record of its process, replacing any; rejects, saying why, where it cannot. */
  put(record: HeldRecord): Promise<void>;
  /** Removes the record of a process, if there is one. */
  remove(process: ProcessIdentity): Promise<void>;
  /**
   * Every record whose process lives, claims of programs that died left out. Records of ended
   * processes are removed on the way (but those kept for {@link ended}), unreadable ones left
   * out. Rejects where the records cannot be used at all.
   */
  list(): Promise<HeldRecord[]>;
  /**
   * The records of ended processes kept for criu to bring back (a dump through criu's CUDA
   * plugin ends the process): those with a mark, for 30 days, without their claims. Left out:
   * a process criu brought back is not known by the record of the one it was.
   */
  ended?(): Promise<HeldRecord[]>;
}

/** How long the record of an ended checkpointed process is kept: 30 days (emptied at boot). */
export const ENDED_RECORD_KEEP_MS = 30 * 24 * 3600 * 1000;

/** Whether the record of a process that ended is kept for {@link HeldRecords.ended}. */
export function keptEnded(record: HeldRecord, now: number): boolean {
  return record.mark !== undefined && now - record.at <= ENDED_RECORD_KEEP_MS;
}

/** The processes of a machine: `/proc`, NVML and a records directory on Linux. */
export interface HostProcesses {
  /** What the host is, for messages: `"linux"`, `"simulated"`. */
  readonly kind: string;
  /** Every process, those that could not be looked at too; one ending meanwhile may be left out. */
  scan(): Promise<readonly ScannedProcess[]>;
  /** The GPU memory each process holds and each GPU has free. */
  gpuMemory?(): Promise<GpuMemoryReport>;
  /**
   * The process that has `id` as its pid or one of its thread ids, with its start time; `undefined`
   * where none has. Left out: an id is taken for a process of its own.
   */
  identify?(id: number): Promise<ProcessIdentity | undefined>;
  /**
   * The tree rooted at `root`, the root first, each process after its parent; `undefined` where
   * no process has the pid. Left out: no snapshot can be taken.
   */
  processTree?(root: number): Promise<readonly TreeProcess[] | undefined>;
  /**
   * Which of `ids` some process uses now, and how. The kernel gives an id to a new process only
   * while nothing uses it as a pid, thread id, process group or session, so a snapshot's
   * processes come back with their pids only once none is in use (an ended process not yet
   * reaped still holds all three).
   */
  pidsInUse?(ids: readonly number[]): Promise<readonly PidUse[]>;
  /**
   * What of a process outlasts criu's dump and restore, the same string before and after: its pid
   * in its own pid namespace, its user and its command line (its start time, and in a new pid
   * namespace its host pid, change). `undefined` where it is gone or cannot be read.
   */
  lastingMark?(process: ProcessIdentity): Promise<string | undefined>;
  /** The machine's name, kernel and NVIDIA driver release, for a snapshot's manifest. */
  facts?(): Promise<MachineFacts>;
  /**
   * The sign, where there is one, that `pid` holds GPU memory (or an event) another process
   * exported to it through CUDA IPC: on Linux, it maps `/dev/shm/cuda.shm.<gpu>.<pid>.<n>` named
   * after another process and holds no descriptor to it. An import of cuMem memory through a file
   * descriptor (NCCL's) leaves none (docs/DRIVER.md#processes-that-share-gpu-memory).
   */
  gpuImport?(pid: number): Promise<GpuImport | undefined>;
  /** The CPU time `pid` has had, in ns over its threads, to tell that a stopped process ran. */
  cpuTime?(pid: number): Promise<number | undefined>;
  /** The records of what checkpointed processes held; left out: each program keeps its own. */
  readonly heldRecords?: HeldRecords;
  /**
   * The pid of the program using this host, where it is one of its processes: a process that
   * checkpoints itself is handled with care (NVML would wait for its restore).
   */
  readonly self?: number;
  /** Lets go of NVML until it is asked for again: before this package locks its own process. */
  release?(): Promise<void>;
}

/**
 * Records kept in memory, for a host that keeps none: this session's own, seen by no other
 * program. A claim is never taken for dead.
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
