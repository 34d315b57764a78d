// The simulated machine: it owns what its parts share (processes, GPUs, clock, work under way).

import type { SnapshotStore } from "../core/snapshot/store.ts";
import type { Machine } from "../core/machine.ts";
import type { Clock } from "../core/time.ts";
import { type HostProcesses, MemoryHeldRecords, ncclRank, type PidUse } from "../core/host.ts";
import { sameProcess } from "../core/host.ts";
import { checkAmount, checkChoice, checkFlag, checkInteger, checkSignal } from "../core/options.ts";
import { checkKeys, checkName, describeValue, MAX_PID, mustBe, or } from "../core/options.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import { makeClock, type SimClock } from "./clock.ts";
import { type CriuOperation, SimulatedCriu } from "./sim_criu.ts";
import { SimulatedDriver } from "./sim_driver.ts";
import { makeGpus, type SimulatedGpu, type SimulatedGpuSpec } from "./sim_gpu.ts";
import { SimulatedProcess } from "./sim_process.ts";
import { IPC_KINDS, type IpcImport, NCCL_KEYS, TCP_STATES } from "./fields.ts";
import { checkTiming, CRIU_TIMING, timingForChip, type TimingModel } from "./timing.ts";
import { CopyLink } from "./waits.ts";

const DISK = CRIU_TIMING.diskBytesPerSecond;

/** Options of {@link SimulatedMachine}. */
export interface SimulatedMachineOptions {
  /** How many H200s (an integer >= 1), or a description of each GPU. Default 1. */
  gpus?: number | readonly SimulatedGpuSpec[];
  /** `"virtual"` (the default: no real waiting), `"real"` (divided by `speed`), or a SimClock. */
  clock?: "virtual" | "real" | SimClock;
  /** With `clock: "real"` only: how many times faster than the measured driver. Default 1. */
  speed?: number;
  /** What `cuDriverGetVersion` reports. Default 13000; below it GPU pairs, below 12080 all fail. */
  driverVersion?: number;
  /** Seeds the made-up GPU UUIDs (two simulators, different GPUs). Default 1. */
  seed?: number;
  /** The first pid handed out. Default 4000. */
  firstPid?: number;
  /** Timing figures, by default GPU 0's chip's; a whole model: `{ ...H200_TIMING, lockMs: 5 }`. */
  timing?: TimingModel;
}

/** What {@link SimulatedMachine.spawn} takes. */
export interface SpawnOptions {
  /** GPU memory the process has allocated, in MiB (split evenly over its GPUs). Default 16. */
  memoryMiB?: number;
  /** The index of its GPU, or of each of its GPUs (no GPU twice). Default 0. */
  gpu?: number | readonly number[];
  /** `false` for a live process that never initialised CUDA (no GPU memory). Default true. */
  cuda?: boolean;
  /** Threads besides its main one. Default 1. A CUDA process has one more, its restore thread. */
  extraThreads?: number;
  /** Its command line, as a process listing shows it. Default `simulated-process <pid>`. */
  command?: string;
  /** `false` for a process a listing may not look at (another user's). Default true. */
  inspectable?: boolean;
  /** The pid of its parent, a live process: it is part of that one's tree. Default none (0). */
  parent?: number;
  /** Whether it has libcuda mapped (default: as `cuda`); with `cuda: false`, no `cuInit` yet. */
  libcuda?: boolean;
  /**
   * GPU memory it opened from process `exporter` (a live CUDA process) through CUDA IPC: `legacy`
   * (default) or `cumem` show the sign the Linux host reads, `fd` none; a checkpoint of it never
   * restores, as on driver 580.
   */
  ipcImport?: { exporter: number; through?: "legacy" | "cumem" | "fd" };
  /**
   * An NCCL rank of a job with `localRanks` ranks on this host, started with NCCL's P2P or
   * shared-memory transport off (`p2pDisable`, `shmDisable`: `NCCL_P2P_DISABLE=1`...) or on (the
   * default). With more ranks than one and either on, it shows the sign the Linux host reads of its
   * environment (docs/API.md#jobs), and a checkpoint of it never restores, as on driver 580.
   */
  nccl?: { localRanks: number; p2pDisable?: boolean; shmDisable?: boolean };
  /** A TCP socket it holds: criu dumps an `established` one only when told (`tcpEstablished`). */
  tcp?: "listening" | "established";
}

/**
 * A simulated machine with GPUs and processes, for testing code that checkpoints GPU processes
 * without a GPU: pass it as `{ machine: sim }`. Its driver has the real driver's states, codes and
 * timing (driver 580), its engine dumps and restores trees as criu does; its clock is virtual by
 * default, moving only while the program waits on the simulator (a driver call, a kernel, `sleep`).
 */
export class SimulatedMachine implements Machine, AsyncDisposable {
  /** The simulated driver. */
  readonly driver: SimulatedDriver;
  /** The machine's processes, as a host gives them (`/proc` and NVML on Linux). */
  readonly host: HostProcesses;
  /** Its simulated CRIU, which dumps and restores its process trees. */
  readonly engine: SimulatedCriu;
  /** Where its snapshots live: the file system, as on a real machine. */
  readonly store: SnapshotStore = new FileSnapshotStore();
  /** Its clock, as this package's deadlines and waits read it. */
  readonly clock: Clock = {
    now: () => this.now(),
    sleep: (ms, signal) => this.sleep(ms, signal),
    timer: (ms, fn) => this.startTimer(ms, fn, true),
  };
  /** The clock operations are timed on: a {@link VirtualClock} unless told otherwise. */
  readonly time: SimClock;
  /** The machine's GPUs. */
  readonly gpus: readonly SimulatedGpu[];
  /** What `cuDriverGetVersion` reports. */
  readonly version: number;
  /** The timing figures in use. */
  readonly timing: TimingModel;
  /** The seed its made-up GPU UUIDs came from. */
  readonly seed: number;
  /** The simulated process that stands for the program using the machine (the host's `self`). */
  selfPid: number | undefined = undefined;
  /** @internal the records of held GPU memory, kept as long as the machine */
  readonly heldRecords: MemoryHeldRecords = new MemoryHeldRecords((who) => {
    const p = this.#byPid.get(who.pid); // alive where the same (pid, and start where given)
    return p?.pid === who.pid && sameProcess(who, p);
  });
  /** @internal the disk the dumps of its CRIUs share, and the one their restores share */
  readonly disk: Readonly<Record<CriuOperation, CopyLink>> = {
    dump: new CopyLink(this, { aggregateBytesPerSecond: DISK.dump, slowdownPerProcess: 0 }),
    restore: new CopyLink(this, { aggregateBytesPerSecond: DISK.restore, slowdownPerProcess: 0 }),
  };
  readonly #byPid = new Map<number, SimulatedProcess>();
  readonly #timers = new Set<number>();
  /** What the program waits on, each stopped (the clock let go, rejected) at close. */
  readonly #waiting = new Set<(error: Error) => void>();
  #nextPid: number;
  #nextStart = 1;
  #closed = false;
  #callerGone = false;

  /** A simulated machine; one H200, virtual time and driver 13.0 unless told otherwise. */
  constructor(options: SimulatedMachineOptions = {}) {
    const keys = ["gpus", "clock", "speed", "driverVersion", "seed", "firstPid", "timing"] as const;
    const o = checkKeys(options, "SimulatedMachine options", keys);
    this.time = makeClock(o.clock, o.speed);
    this.version = checkInteger(or(o.driverVersion, 13000), "driverVersion");
    this.seed = checkInteger(or(o.seed, 1), "seed", 0, 2 ** 32 - 1);
    this.#nextPid = checkInteger(or(o.firstPid, 4000), "firstPid", 1, MAX_PID);
    this.gpus = makeGpus(o.gpus, this.seed);
    this.timing = o.timing === undefined ? timingForChip(this.gpus[0].name) : checkTiming(o.timing);
    this.driver = new SimulatedDriver(this);
    this.host = simulatedHost(this);
    this.engine = new SimulatedCriu(this);
  }

  /** The clock's current time in ms. */
  now(): number {
    return this.time.now();
  }

  /**
   * Resolves after `ms` of the simulator's time; virtual time moves meanwhile. An abort of
   * `signal` ends the wait (rejecting with its reason), and its time is not waited for.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    checkAmount(ms, "sleep: ms");
    checkSignal(signal, "sleep: signal");
    return this.waitOn("sleep", () =>
      new Promise<void>((resolve, reject) => {
        signal?.throwIfAborted();
        const stop = () => (cancel(), reject(signal!.reason));
        const done = () => (signal?.removeEventListener("abort", stop), resolve());
        const cancel = this.startTimer(ms, done);
        signal?.addEventListener("abort", stop, { once: true });
      }));
  }

  /** The live processes, in the order they started. */
  get processes(): SimulatedProcess[] {
    return [...new Set(this.#byPid.values())]; // each by its pid and thread ids
  }

  /** The live process that has `pid` as its pid or as one of its thread ids. */
  process(pid: number): SimulatedProcess | undefined {
    return this.#byPid.get(pid);
  }

  /** The pid the next {@link SimulatedMachine.spawn} gives: never one given before. */
  get nextPid(): number {
    return this.#nextPid;
  }

  /** The start number the next process started gets (see {@link SimulatedProcess.start}). */
  get nextStart(): number {
    return this.#nextStart;
  }

  /** Starts a process: by default a CUDA process, with its memory and a context on each GPU. */
  spawn(options: SpawnOptions = {}): SimulatedProcess {
    if (this.#closed) throw this.closedError("spawn a process");
    const o = checkKeys(options, "spawn options", [
      ...["memoryMiB", "gpu", "cuda", "extraThreads"] as const,
      ...["command", "inspectable", "libcuda", "parent", "ipcImport", "nccl", "tcp"] as const,
    ]);
    const parent = o.parent === undefined || o.parent === 0
      ? 0
      : checkInteger(o.parent, "spawn: parent (a pid)", 1, MAX_PID);
    const of = this.#byPid.get(parent);
    if (parent && !of) throw new RangeError(`spawn: parent ${parent} is no live simulated process`);
    const thread = `is a thread of process ${of?.pid}, not a process: give its pid`;
    if (of && of.pid !== parent) throw new RangeError(`spawn: parent ${parent} ${thread}`);
    const cuda = checkFlag(o.cuda, "spawn: cuda", true);
    const noMemory = "spawn: a process with cuda: false has no GPU memory, got memoryMiB";
    if (!cuda && (o.memoryMiB ?? 0) !== 0) {
      throw new TypeError(`${noMemory} ${describeValue(o.memoryMiB)}`);
    }
    const memoryMiB = cuda ? checkAmount(or(o.memoryMiB, 16), "spawn: memoryMiB") : 0;
    const gpus = this.#gpusFor(o.gpu);
    const extra = checkInteger(or(o.extraThreads, 1), "spawn: extraThreads", 0, 100_000);
    const libcuda = checkFlag(o.libcuda, "spawn: libcuda", cuda);
    const noLib = "spawn: a CUDA process has libcuda mapped; libcuda: false needs cuda: false";
    if (cuda && !libcuda) throw new TypeError(noLib);
    const pid = this.#nextPid, count = 1 + extra + (cuda ? 1 : 0);
    if (pid + count - 1 > MAX_PID) throw new RangeError(`spawn: no pids left after ${pid}`);
    const threads = Array.from({ length: count }, (_, i) => pid + i);
    const command = checkName(or(o.command, `simulated-process ${pid}`), "spawn: command");
    const inspectable = checkFlag(o.inspectable, "spawn: inspectable", true);
    let ipcImport: IpcImport | undefined; // from a live CUDA process, of a known kind
    if (o.ipcImport !== undefined) {
      const i = checkKeys(o.ipcImport, "spawn: ipcImport", ["exporter", "through"]);
      const exporter = checkInteger(i.exporter, "spawn: ipcImport.exporter (a pid)", 1, MAX_PID);
      const live = `a CUDA process importing from a live CUDA process, got exporter ${exporter}`;
      const needs = `spawn: ipcImport needs ${live}`;
      if (!cuda || !this.process(exporter)?.usesCuda) throw new RangeError(needs);
      const through = checkChoice(or(i.through, "legacy"), "spawn: ipcImport.through", IPC_KINDS);
      ipcImport = { exporter, through };
    }
    const n = o.nccl === undefined ? undefined : checkKeys(o.nccl, "spawn: nccl", NCCL_KEYS);
    const nccl = n && {
      localRanks: checkInteger(n.localRanks, "spawn: nccl.localRanks", 1, 1 << 20),
      p2pDisable: checkFlag(n.p2pDisable, "spawn: nccl.p2pDisable", false),
      shmDisable: checkFlag(n.shmDisable, "spawn: nccl.shmDisable", false),
    };
    const tcp = o.tcp === undefined ? undefined : checkChoice(o.tcp, "spawn: tcp", TCP_STATES);
    const proc = new SimulatedProcess(this, { // its GPU memory taken if it fits
      ...{ pid, threads, memoryMiB, gpus, cuda, command, inspectable, libcuda, parent, ipcImport },
      ...{ nccl, tcp, start: this.#nextStart },
    });
    const short = cuda ? proc.claimOn(gpus) : undefined;
    if (short) throw new RangeError(`spawn: ${short}`);
    this.adopt(proc);
    this.#nextPid = pid + Math.max(10, count + 7); // a gap between processes, as on Linux
    return proc;
  }

  /**
   * Fills GPU `gpu` so that only `leaveMiB` (0 by default) stays free: starts a process that holds
   * the rest; its `exit()` frees the GPU again. A restore that needs more fails with
   * `CUDA_ERROR_OUT_OF_MEMORY`, and every later one (driver 580) with `CUDA_ERROR_OPERATING_SYSTEM`
   * (`CudaProcess` checks the room first: `GpuRoomError`).
   */
  fillGpu(gpu: number, options: { leaveMiB?: number } = {}): SimulatedProcess {
    if (this.#closed) throw this.closedError("fill a GPU");
    const index = checkInteger(gpu, "fillGpu: gpu (an index)", 0, this.gpus.length - 1);
    const o = checkKeys(options, "fillGpu options", ["leaveMiB"]);
    const leave = checkAmount(or(o.leaveMiB, 0), "fillGpu: leaveMiB");
    const g = this.gpus[index], memoryMiB = g.freeMiB - leave - g.contextMiB;
    const less = `${g.freeMiB} MiB free, less than the ${leave} MiB to leave and a CUDA context`;
    const fill = `fillGpu: GPU ${index} has ${less} (${g.contextMiB} MiB)`;
    if (memoryMiB < 0) throw new RangeError(fill);
    return this.spawn({ memoryMiB, gpu: index, command: `simulated GPU filler (GPU ${index})` });
  }

  /** Closes the machine: timers go; calls, sleeps and kernels under way and later reject. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const handle of this.#timers) this.time.clearTimer(handle);
    this.#timers.clear();
    const error = new Error("the simulated driver was closed while this was under way");
    for (const stop of this.#waiting) stop(error);
    this.#waiting.clear();
    for (const p of this.processes) p.stopKernels(error);
  }

  /** {@link SimulatedMachine.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  /** A short description for logs: `simulated driver 13.0, 2 GPUs (NVIDIA H200)`. */
  toString(): string {
    return this.driver.toString();
  }

  /** @internal makes the next start number at least `next` */
  reserveStarts(next: number): void {
    this.#nextStart = Math.max(this.#nextStart, next);
  }

  /** @internal why the machine cannot be saved now */
  busyWith(): string | undefined {
    if (this.#closed) return "the simulated driver was closed";
    const n = this.#waiting.size;
    if (n > 0) return `${n} driver call(s) or sleep(s) are under way`;
    const p = this.processes.find((p) => p.pendingWork);
    return p && `process ${p.pid} has ${p.pendingWork}`;
  }

  /** @internal adds a process made on it (a RangeError where one of its ids is taken) */
  adopt(proc: SimulatedProcess): SimulatedProcess {
    if (this.#closed) throw this.closedError("adopt a process");
    const taken = proc.threads.find((t) => this.#byPid.has(t));
    if (taken !== undefined) throw new RangeError(`pid ${taken} is taken by another process`);
    for (const t of proc.threads) this.#byPid.set(t, proc);
    for (const t of proc.threads) this.#nextPid = Math.max(this.#nextPid, t + 1);
    this.#nextStart = Math.max(this.#nextStart, proc.start + 1);
    return proc;
  }

  /** @internal forgets a process that exited; its children are orphans now (not a later pid's) */
  forget(proc: SimulatedProcess): void {
    for (const t of proc.threads) this.#byPid.delete(t);
    for (const p of this.processes) if (p.parent === proc.pid) p.orphan();
  }

  /** @internal the live process `root` and its descendants, breadth first */
  tree(root: number): SimulatedProcess[] | undefined {
    const top = this.#byPid.get(root);
    if (!top || top.pid !== root) return undefined;
    const out = [top], all = this.processes;
    for (const o of out) for (const p of all) if (p.parent === o.pid) out.push(p);
    return out;
  }

  /** @internal starts a timer, cancelled if the machine closes (`passive`: it moves no time) */
  startTimer(ms: number, fn: () => void, passive = false): () => void {
    if (this.#closed) return () => {};
    const handle = this.time.setTimer(ms, () => {
      this.#timers.delete(handle);
      fn();
    }, { passive });
    this.#timers.add(handle);
    return () => {
      if (this.#timers.delete(handle)) this.time.clearTimer(handle);
    };
  }

  /** @internal the program dies: calls under way end (as a killed caller's) unanswered, but hung */
  async callerGone(): Promise<void> {
    this.#callerGone = true; // a call with no timer to end it (an injected hang) is not waited for
    while (this.#waiting.size && this.#timers.size) await new Promise((r) => setTimeout(r, 5));
  }

  /** @internal `work`, as something the program waits on (done before its answer is heard) */
  waitOn<T>(what: string, work: () => Promise<T>): Promise<T> {
    if (this.#callerGone) return new Promise(() => {});
    if (this.#closed) return Promise.reject(this.closedError(what));
    const release = this.holdClock();
    const promise = new Promise<T>((resolve, reject) => {
      const stop = (error: Error) => (release(), reject(error));
      this.#waiting.add(stop);
      work().finally(() => {
        this.#waiting.delete(stop);
        release();
      }).then((value) => this.#callerGone || resolve(value), (e) => this.#callerGone || reject(e));
    });
    promise.catch(() => {});
    return promise;
  }

  /** @internal `fn`'s answer at once, taking no simulated time; a rejection once closed */
  instantly<T>(what: string, fn: () => T): Promise<T> {
    return this.#closed ? Promise.reject(this.closedError(what)) : Promise.resolve(fn());
  }

  /** @internal the error for `what` once the machine is closed */
  closedError(what: string): Error | undefined {
    return this.#closed ? new Error(`the simulated driver was closed: cannot ${what}`) : undefined;
  }

  /** @internal holds the clock (the program waits on the simulator) until the returned call */
  holdClock(): () => void {
    return this.time.hold?.() ?? (() => {});
  }

  /** The GPUs of `spawn`'s `gpu` option. */
  #gpusFor(gpu: SpawnOptions["gpu"]): SimulatedGpu[] {
    const last = this.gpus.length - 1;
    const indexes = gpu === undefined ? [0] : typeof gpu === "number" ? [gpu] : gpu;
    const expected = "a GPU index or a non-empty array of them";
    if (!Array.isArray(indexes) || !indexes.length) mustBe(TypeError, "spawn: gpu", expected, gpu);
    return [...indexes].map((i: unknown, k) => {
      const none = `does not exist: this simulator has GPUs 0 to ${last}`;
      if (typeof i !== "number" || !Number.isInteger(i) || i < 0 || i > last) {
        throw new RangeError(`spawn: gpu ${describeValue(i)} ${none}`);
      }
      if (indexes.indexOf(i) < k) throw new RangeError(`spawn: gpu lists GPU ${i} twice`);
      return this.gpus[i];
    });
  }
}

/** `sim.host`: the machine as Linux gives `/proc` and NVML, in no time; its `self` is `selfPid`. */
function simulatedHost(m: SimulatedMachine): HostProcesses {
  const why = "(simulated: spawned with inspectable: false)";
  const scanned = ({ pid, command, inspectable, libcudaLoaded }: SimulatedProcess) =>
    inspectable
      ? { pid, command, cudaLibrary: libcudaLoaded }
      : { pid, command, notInspectable: `permission denied reading /proc/${pid}/maps ${why}` };
  const entry = ({ pid, parent, threads, command }: SimulatedProcess) => {
    return { pid, parent, threads: [...threads], command };
  };
  // `read` of the live process that has `id` as its pid or a thread id (if any), at once.
  const of = <T>(what: string, id: number, read: (p?: SimulatedProcess) => T) =>
    m.instantly(what, () => read(m.process(id)));
  return {
    kind: "simulated",
    get self() {
      return m.selfPid;
    },
    heldRecords: m.heldRecords,
    scan: () => m.instantly("list processes", () => m.processes.map(scanned)),
    gpuMemory: () =>
      m.instantly("read GPU memory", () => ({
        byPid: new Map(
          m.processes.map((p) => [p.pid, p.gpuMemoryMiB] as const)
            .filter(([, mib]) => Object.keys(mib).length > 0),
        ),
        freeMiB: new Map(m.gpus.map((g) => [g.uuid, g.freeMiB])),
        totalMiB: new Map(m.gpus.map((g) => [g.uuid, g.memoryMiB])),
      })),
    identify: (id) => of("identify a process", id, (p) => p && { pid: p.pid, start: p.start }),
    // What of a process outlasts a dump and restore: `<pid>:<command line>`; undefined if gone.
    lastingMark: (was) =>
      of("read what outlasts a restore", was.pid, (p) => {
        return p && sameProcess(was, p) ? `${p.pid}:${p.command}` : undefined;
      }),
    // There are no groups nor sessions.
    pidsInUse: (ids) =>
      m.instantly("look up pids", () =>
        ids.flatMap((id): PidUse[] => {
          const p = m.process(id);
          return p ? [{ id, holder: p.pid, as: p.pid === id ? "pid" : "thread" }] : [];
        })),
    processTree: (root) => m.instantly("read a process tree", () => m.tree(root)?.map(entry)),
    // As the Linux host reads them: an NCCL rank's sign, or an import's (none `through: "fd"`).
    gpuImport: (pid) =>
      m.instantly("read a process's maps", () => {
        const { nccl, ipcImport: imported } = m.process(pid) ?? {};
        // Its environment as torchrun gives it to such a rank, and /proc/PID/environ holds it.
        const environ = nccl && `LOCAL_WORLD_SIZE=${nccl.localRanks}\0NCCL_P2P_DISABLE=` +
            `${Number(nccl.p2pDisable)}\0NCCL_SHM_DISABLE=${Number(nccl.shmDisable)}\0`;
        const found = environ && ncclRank("libnccl.so.2", environ);
        if (found) return found;
        if (!imported || imported.through === "fd") return undefined;
        const file = `cuda.shm.0.${imported.exporter.toString(16)}.1`;
        const sign = `it maps /dev/shm/${file}, named after process ${imported.exporter}`;
        return { exporter: imported.exporter, sign };
      }),
    // Its CPU time: a ms for each time it was let go on after a stop (SIGCONT).
    cpuTime: (pid) =>
      of("read a process's CPU time", pid, (p) => p && !p.exited ? p.wakes * 1_000_000 : undefined),
    stopped: (pid) => of("read a process's state", pid, (p) => p?.stopped === true),
    facts: () =>
      m.instantly("read the machine's facts", () => {
        const release = m.version === 13000 ? { driverRelease: "580.159.04" } : {};
        return { hostname: "simulated", kernel: "6.8.0-simulated", ...release };
      }),
  };
}
