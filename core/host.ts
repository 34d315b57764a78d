/**
 * The host ({@link HostProcesses}): what this package asks of the machine besides the driver, so
 * that queues and records follow processes, not numbers (the Linux host is `os/linux_host.ts`).
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

/**
 * What a snapshot's manifest says of the machine it was taken on: the host's name, the kernel's
 * release (`uname -r`), the NVIDIA kernel module's version (`580.159.04`) where it can be read.
 */
export type MachineFacts = Readonly<{ hostname: string; kernel: string; driverRelease?: string }>;

/**
 * What shows that a process shares GPU memory with others ({@link HostProcesses.gpuImport}), the
 * sign as a clause (`it maps /dev/shm/cuda.shm.0.92b.1, named after process 2347`): the exporter
 * of what it imported through CUDA IPC, as the sign names it, or how many NCCL ranks it is one of
 * on this host, whose P2P or shared-memory transports are on; `unknown` where it cannot be told.
 */
export type GpuImport = Readonly<
  { sign: string; exporter?: number; ncclRanks?: number; unknown?: true }
>;

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
 * Which process an id belongs to: any thread id is its process (its `pid`, the thread-group id);
 * a reused pid is another (its `start`, in the host's units: clock ticks since boot on Linux).
 */
export type ProcessIdentity = Readonly<{ pid: number; start?: number }>;

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
export const identityKey = (id: ProcessIdentity): string =>
  id.start === undefined ? `${id.pid}` : `${id.pid}-${id.start}`;

/** Whether two identities are one process. */
export const sameProcess = (a: ProcessIdentity, b: ProcessIdentity): boolean =>
  a.pid === b.pid && (a.start === undefined || b.start === undefined || a.start === b.start);

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

/** The records of what checkpointed processes held, shared by every program of this package. */
export interface HeldRecords {
  /** Where they are kept, for messages (`/run/ckpt-cuda`, `memory`). */
  readonly where: string;
  /** The record of a process, if any; rejects, naming the path, where it cannot be read. */
  get(process: ProcessIdentity): Promise<HeldRecord | undefined>;
  /** Writes the record of its process, replacing any; rejects, saying why, where it cannot. */
  put(record: HeldRecord): Promise<void>;
  /** Removes the record of a process, if there is one. */
  remove(process: ProcessIdentity): Promise<void>;
  /** Every record whose process lives, without dead programs' claims; ended ones are pruned. */
  list(): Promise<HeldRecord[]>;
  /** The records of ended processes with a mark, kept 30 days for criu to bring them back. */
  ended?(): Promise<HeldRecord[]>;
  /** The rates of steps (bytes per ms by step) last kept, for estimates; {} where none. */
  rates?(): Promise<Readonly<Record<string, number>>>;
  /** Keeps `rates`, replacing those kept. */
  keepRates?(rates: Readonly<Record<string, number>>): Promise<void>;
}

/** Bytes per ms by step (`checkpoint`, `restore`, `images`: criu's restore), as measured. */
export type Rates = Readonly<Record<string, number>>;

/** How long the record of an ended checkpointed process is kept: 30 days (emptied at boot). */
export const ENDED_RECORD_KEEP_MS = 30 * 24 * 3600 * 1000;

/** Whether the record of a process that ended is kept for {@link HeldRecords.ended}. */
export const keptEnded = (record: HeldRecord, now: number): boolean =>
  record.mark !== undefined && now - record.at <= ENDED_RECORD_KEEP_MS;

/** The processes of a machine: `/proc`, NVML and a records directory on Linux. */
export interface HostProcesses {
  /** What the host is, for messages: `"linux"`, `"simulated"`. */
  readonly kind: string;
  /** Every process, those that could not be looked at too; one ending meanwhile may be left out. */
  scan(): Promise<readonly ScannedProcess[]>;
  /** The GPU memory each process holds and each GPU has free. */
  gpuMemory?(): Promise<GpuMemoryReport>;
  /** The process that has `id` as its pid or a thread id; left out, an id is its own process. */
  identify?(id: number): Promise<ProcessIdentity | undefined>;
  /** The tree rooted at `root`, each process after its parent; left out, no snapshot is taken. */
  processTree?(root: number): Promise<readonly TreeProcess[] | undefined>;
  /**
   * Which of `ids` a process uses now as its pid, a thread id, its group or session: the kernel
   * gives none of them out until free, so a snapshot's processes come back only then.
   */
  pidsInUse?(ids: readonly number[]): Promise<readonly PidUse[]>;
  /**
   * What of a process outlasts criu's dump and restore (its pid in its own namespace, user and
   * command line; not its start time), as a string; `undefined` where gone or unreadable.
   */
  lastingMark?(process: ProcessIdentity): Promise<string | undefined>;
  /** The machine's name, kernel and NVIDIA driver release, for a snapshot's manifest. */
  facts?(): Promise<MachineFacts>;
  /**
   * The sign that `pid` holds GPU memory another process exported to it through CUDA IPC (on
   * Linux, it maps `/dev/shm/cuda.shm.<gpu>.<pid>.<n>` of another process), or that it is an NCCL
   * rank with others on this host and NCCL's P2P or shared-memory transport on (its imports leave
   * no sign: docs/DRIVER.md#nccl-jobs-on-two-gpus).
   */
  gpuImport?(pid: number): Promise<GpuImport | undefined>;
  /**
   * The CPU time `pid` has had, in ns over its threads, to tell that a stopped process ran;
   * `undefined` where it is gone or ended.
   */
  cpuTime?(pid: number): Promise<number | undefined>;
  /**
   * Whether every thread of `pid` has entered its stop (SIGSTOP), so that it runs no more until
   * let go, or `"frozen"`: its cgroup is (`docker pause`); `false` where gone. A thread on its way
   * to its stop still runs, on a busy machine for long.
   */
  stopped?(pid: number): Promise<boolean | "frozen">;
  /** The records of what checkpointed processes held; left out: each program keeps its own. */
  readonly heldRecords?: HeldRecords;
  /** The pid of the program using this host: a process checkpointing itself needs care (NVML). */
  readonly self?: number;
  /** Lets go of NVML until it is asked for again: before this package locks its own process. */
  release?(): Promise<void>;
}

/** Records in memory, for a host that keeps none: seen by no other program; no claim is dead. */
export class MemoryHeldRecords implements HeldRecords {
  /** Always `"memory"`. */
  readonly where: string = "memory";
  readonly #records = new Map<string, HeldRecord>();
  /** The rates kept, which {@link HeldRecords.rates} reads and `keepRates` replaces. */
  kept: Rates = {};
  rates = (): Promise<Rates> => Promise.resolve(this.kept);
  keepRates = (rates: Rates): Promise<void> => Promise.resolve(void (this.kept = rates));

  /** Records in memory; `alive` tells live processes. */
  constructor(private readonly alive: (process: ProcessIdentity) => boolean = () => true) {}

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
    return Promise.resolve(this.liveEntries());
  }

  /** The records kept of processes that ended, without their claims. */
  ended(): Promise<HeldRecord[]> {
    this.#prune();
    const ended = [...this.#records.values()].filter((r) => !this.alive(r.process));
    return Promise.resolve(ended.map(withoutClaim));
  }

  #prune(): void {
    const now = Date.now();
    for (const [key, record] of this.#records) {
      if (!this.alive(record.process) && !keptEnded(record, now)) this.#records.delete(key);
    }
  }

  /** The records of live processes as they are kept, claims and all; none is removed. */
  liveEntries(): HeldRecord[] {
    return [...this.#records.values()].filter((r) => this.alive(r.process));
  }
}

/** The record without its claim. */
export function withoutClaim(record: HeldRecord): HeldRecord {
  const { claim, ...rest } = record;
  return claim ? rest : record;
}

/**
 * The sign of an NCCL rank (`lib` loaded) that its environment (`environ`, NUL-separated) says is
 * one of several on this host, P2P or shared memory on (NCCL turns each off at exactly 1): what
 * the Linux host reads, and the simulator shows of its ranks.
 */
export function ncclRank(lib: string, environ: string): GpuImport | undefined {
  const env = new Map<string, string>( // a name given twice: the first, as getenv reads it
    environ.split("\0").reverse().map((v) => [v.split("=", 1)[0], v.slice(v.indexOf("=") + 1)]),
  );
  // The ranks on this host as torchrun, Open MPI, MPICH, PMIx tell them; else all of them.
  const local = "LOCAL_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_SIZE MPI_LOCALNRANKS PMIX_LOCAL_SIZE"
    .split(" ").find((name) => env.get(name));
  const size = local ?? (env.get("WORLD_SIZE") ? "WORLD_SIZE" : undefined);
  const ranks = size ? Number.parseInt(env.get(size)!) : 0;
  const on = (name: string) => Number.parseInt(env.get(name) ?? "") !== 1;
  const missing = ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"].filter(on);
  if (!(ranks > 1) || missing.length === 0) return undefined;
  const where = local ? "" : " (no count of the ranks on this host: all taken as here)";
  const sign = `it has ${lib} loaded, ${size}=${ranks} in its environment${where}, without ` +
    missing.map((name) => `${name}=1`).join(" and ");
  return { ncclRanks: ranks, sign };
}
