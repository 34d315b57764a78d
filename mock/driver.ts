/**
 * The simulated driver: the CUDA checkpoint state machine, its error codes and its timing, in pure
 * TypeScript, with GPUs, processes and GPU memory contents that tests can inspect.
 *
 * @module
 */

import {
  CHECKPOINT_MIN_DRIVER_VERSION,
  CU_RESULTS,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
  formatDriverVersion,
  GPU_PAIRS_MIN_DRIVER_VERSION,
} from "../core/codes.ts";
import { isFinal, memoryOnHost, type Step, stepAllowed, stepFrom, stepTo } from "../core/states.ts";
import type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
import type { Operation } from "../core/errors.ts";
import {
  type GpuMemoryReport,
  type HostProcesses,
  type MachineFacts,
  MemoryHeldRecords,
  type ProcessIdentity,
  type ScannedProcess,
  type TreeProcess,
} from "../core/host.ts";
import { CHECKPOINT_FUNCTIONS } from "../core/gate.ts";
import { describeValue, formatGpuUuid, parseGpuUuid } from "../core/uuid.ts";
import {
  checkAmount,
  checkBoolean,
  checkInteger,
  checkKeys,
  checkName,
  checkTiming,
  orDefault,
} from "./checks.ts";
import { holdClock, RealClock, type SimClock, VirtualClock } from "./clock.ts";
import { SimulatedCriu } from "./criu.ts";
import type { FaultableOperation, PendingFault, QueryOperation } from "./faults.ts";
import {
  type GpuNeeds,
  needsOn,
  type ProcessHost,
  shortage,
  SimulatedGpu,
  SimulatedProcess,
  uuidKey,
} from "./process.ts";
import {
  CONTEXT_MIB,
  CopyLink,
  CRIU_TIMING,
  mibToBytes,
  singleRate,
  timingForChip,
  type TimingModel,
} from "./timing.ts";

/** A GPU of the simulated machine, as given to {@link SimulatedDriver}'s constructor. */
export interface SimulatedGpuSpec {
  /**
   * The chip's name; restore onto another GPU needs the same chip, and the name picks the timing
   * model ({@link H100_TIMING} for an H100). Default `"NVIDIA H200"`.
   */
  name?: string;
  /** Its memory in MiB. Default 143771 (an H200's), or 81559 for an H100. */
  memoryMiB?: number;
  /** Its UUID (`GPU-…`); made up from the driver's seed when left out. */
  uuid?: string;
  /** GPU memory each process's CUDA context takes on it, in MiB. Default {@link CONTEXT_MIB}. */
  contextMiB?: number;
}

/** Options of {@link SimulatedDriver}. */
export interface SimulatedDriverOptions {
  /** How many H200s (an integer >= 1), or a description of each GPU. Default 1. */
  gpus?: number | readonly SimulatedGpuSpec[];
  /**
   * `"virtual"` (the default): time moves from one event to the next while the program waits on
   * the simulator, so tests take no real time and timings are exact. `"real"`: operations take
   * as long as they did on the real driver, divided by `speed`. Or any {@link SimClock}.
   */
  clock?: "virtual" | "real" | SimClock;
  /** With `clock: "real"` only: how many times faster than the measured driver to run. Default 1. */
  speed?: number;
  /**
   * What `cuDriverGetVersion` reports. Default 13000 (CUDA 13.0, driver 580). Below 12080 the
   * checkpoint functions are missing, as in a driver older than 570: their calls resolve
   * `CUDA_ERROR_NOT_SUPPORTED`. Below 13000 a restore with GPU pairs resolves the same.
   */
  driverVersion?: number;
  /** Seeds the made-up GPU UUIDs, so that two simulators can have different GPUs. Default 1. */
  seed?: number;
  /** The first pid handed out. Default 4000. */
  firstPid?: number;
  /** Timing figures; by default the model of GPU 0's chip ({@link H200_TIMING}, {@link H100_TIMING}). */
  timing?: TimingModel;
}

/** What {@link SimulatedDriver.spawn} takes. */
export interface SpawnOptions {
  /** GPU memory the process has allocated, in MiB (split evenly over its GPUs). Default 16. */
  memoryMiB?: number;
  /** The index of its GPU, or of each of its GPUs (no GPU twice). Default 0. */
  gpu?: number | readonly number[];
  /** `false` for a live process that never initialised CUDA (it has no GPU memory). Default true. */
  cuda?: boolean;
  /**
   * Threads the program started besides its main one, an integer >= 0. Default 1. A CUDA process
   * has one more, the driver's own, which is its restore thread.
   */
  extraThreads?: number;
  /** Its command line, as a process listing shows it. Default `simulated-process <pid>`. */
  command?: string;
  /**
   * `false` for a process the caller may not look at (another user's, seen without privilege):
   * a listing reports it as not inspectable. The driver still answers for it. Default true.
   */
  inspectable?: boolean;
  /**
   * The pid of its parent, a live simulated process (not one of its thread ids): the process is
   * part of that process's tree (`processTree`, what a snapshot dumps). Default none (0).
   */
  parent?: number;
  /**
   * Whether it has the CUDA driver library mapped. Default: as `cuda`. `cuda: false` with
   * `libcuda: true` is a process that loaded libcuda but never called `cuInit`, which the driver
   * answers `CUDA_ERROR_NOT_INITIALIZED` for. A CUDA process always has it.
   */
  libcuda?: boolean;
}

/** One call the simulated driver answered, for tests that check what their code did. */
export interface SimulatedCall {
  /** Virtual (or simulated real) time in ms at which the call ended. */
  at: number;
  /** Time in ms at which the call was made. */
  started: number;
  /** The C call, without the `cuCheckpointProcess` prefix: `"lock"`, `"getState"`, … */
  op: Operation;
  /** The pid it was given. */
  pid: number;
  /** The `CUresult` it returned. */
  code: number;
  /** Why, where the code alone does not say: which mapping rule failed, what it waited for, … */
  note?: string;
}

/**
 * The simulated machine's facts (`hostProcesses().facts()`). Its NVIDIA driver is the one the
 * timings were measured with, 580.159.04, for a driver version of 13.0; for another version it
 * is left out, as nothing says which release that would be.
 */
const SIMULATED_HOST = { hostname: "simulated", kernel: "6.8.0-simulated" } as const;
const SIMULATED_DRIVER_RELEASES: Readonly<Record<number, string>> = { 13000: "580.159.04" };

/** Default memory by chip, in MiB, as nvidia-smi reports it. */
const CHIP_MEMORY_MIB: Readonly<Record<string, number>> = {
  "NVIDIA H200": 143771,
  "NVIDIA H100 80GB HBM3": 81559,
};

/** What a driver call answers, before it becomes a code or a {@link DriverResult}. */
interface Answer {
  code: number;
  value?: number;
  note?: string;
}

type Cancel = () => void;

/**
 * One state-changing operation under way. Its waits (timers, copies) are cancelled together when
 * the process exits; then its promises never settle, and the operation is abandoned.
 */
class OpRun {
  readonly #cancels = new Set<Cancel>();
  readonly #start: (ms: number, fn: () => void) => Cancel;
  #aborted = false;

  constructor(start: (ms: number, fn: () => void) => Cancel) {
    this.#start = start;
  }

  sleep(ms: number): Promise<void> {
    return this.#wait((done) => this.#start(ms, done));
  }

  copy(link: CopyLink, bytes: number, rate: number): Promise<void> {
    return this.#wait((done) => link.transfer(bytes, rate, done));
  }

  abort(): void {
    this.#aborted = true;
    for (const cancel of this.#cancels) cancel();
    this.#cancels.clear();
  }

  #wait(begin: (done: () => void) => Cancel): Promise<void> {
    return new Promise((resolve) => {
      if (this.#aborted) return;
      const cancel: Cancel = begin(() => {
        this.#cancels.delete(cancel);
        resolve();
      });
      this.#cancels.add(cancel);
    });
  }
}

interface Waiting {
  reject(error: Error): void;
  release(): void;
}

/**
 * A simulated CUDA driver with GPUs and processes. It implements {@link CheckpointDriver} with the
 * state machine, error codes and timing measured on the real driver (docs/DRIVER.md), so
 * code written against {@link CudaProcess} can be tested without a GPU. Like the real driver it
 * serialises calls on each process: a call made while a lock, checkpoint, restore or unlock of
 * the same process is under way waits for it, then acts on the state it left.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * await using sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * await target.write(0, new TextEncoder().encode("hello"));
 * const proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();
 * console.log(target.memoryLocation, sim.gpus[0].usedMiB); // "host" 0
 * await proc.resume({ gpuMapping: { [sim.gpus[0].uuid]: sim.gpus[1].uuid, [sim.gpus[1].uuid]: sim.gpus[0].uuid } });
 * console.log(target.gpuUuids[0] === sim.gpus[1].uuid); // true
 * ```
 */
export class SimulatedDriver implements CheckpointDriver, AsyncDisposable {
  /** Always `"simulated"`. */
  readonly kind: string = "simulated";
  /** The clock operations are timed on. */
  readonly clock: SimClock;
  /** The simulated machine's GPUs. */
  readonly gpus: readonly SimulatedGpu[];
  /** What `cuDriverGetVersion` reports. */
  readonly version: number;
  /** The timing figures in use. */
  readonly timing: TimingModel;
  /** The seed its made-up GPU UUIDs came from. */
  readonly seed: number;
  /** The checkpoint functions this driver lacks: all six below version 12080, else none. */
  readonly missingFunctions: readonly string[];
  /** Always true: {@link SimulatedDriver.listGpus} gives every simulated GPU. */
  readonly listsEveryGpu: boolean = true;
  /** Every call answered so far, oldest first. */
  readonly calls: SimulatedCall[] = [];
  readonly #byPid = new Map<number, SimulatedProcess>();
  readonly #processes = new Set<SimulatedProcess>();
  readonly #checkpointLink: CopyLink;
  readonly #restoreLink: CopyLink;
  readonly #timers = new Set<number>();
  readonly #waiting = new Set<Waiting>();
  readonly #host: ProcessHost;
  /**
   * The records of held GPU memory that programs of this package keep on the simulated machine;
   * the programs that claim room are those using the simulator, alive as long as it is.
   */
  readonly #records = new MemoryHeldRecords((p) => this.#alive(p));
  /**
   * The simulated process that stands for the program using this driver, if any: a test of a
   * program that checkpoints itself names it here (its host's `self`). Default none.
   */
  selfPid: number | undefined = undefined;
  #nextPid: number;
  #nextStart = 1;
  #disk: CopyLink | undefined;
  #engine: SimulatedCriu | undefined;
  #closed = false;

  /** A simulated machine; one H200, virtual time and driver 13.0 unless told otherwise. */
  constructor(options: SimulatedDriverOptions = {}) {
    checkKeys(options, "SimulatedDriver options", [
      "gpus",
      "clock",
      "speed",
      "driverVersion",
      "seed",
      "firstPid",
      "timing",
    ]);
    this.clock = makeClock(orDefault(options.clock, "virtual"), options.speed);
    this.version = checkInteger(orDefault(options.driverVersion, 13000), "driverVersion");
    const seed = this.seed = checkInteger(orDefault(options.seed, 1), "seed", 0, 2 ** 32 - 1);
    this.#nextPid = checkInteger(orDefault(options.firstPid, 4000), "firstPid", 1, 2 ** 31 - 1);
    this.gpus = gpuSpecs(options.gpus).map((spec, i) => makeGpu(spec, i, seed));
    const keys = new Set(this.gpus.map((g) => g.key));
    if (keys.size !== this.gpus.length) {
      throw new RangeError("two simulated GPUs have the same UUID");
    }
    this.timing = options.timing === undefined
      ? timingForChip(this.gpus[0].name)
      : checkTiming(options.timing);
    this.missingFunctions = this.version < CHECKPOINT_MIN_DRIVER_VERSION
      ? [...CHECKPOINT_FUNCTIONS]
      : [];
    const timers = {
      now: () => this.now(),
      start: (ms: number, fn: () => void) => this.#start(ms, fn),
    };
    this.#checkpointLink = new CopyLink(timers, this.timing.checkpoint);
    this.#restoreLink = new CopyLink(timers, this.timing.restore);
    this.#host = {
      now: () => this.now(),
      startTimer: (ms, fn, passive) => this.#start(ms, fn, passive),
      holdClock: () => holdClock(this.clock),
      closedError: (what) => this.#closedError(what),
      forget: (proc) => {
        this.#processes.delete(proc);
        for (const t of proc.threads) this.#byPid.delete(t);
        // Its children are orphans now: a later process with its pid (a restore) is no parent of
        // theirs.
        for (const p of this.#processes) if (p.parent === proc.pid) p.orphan();
      },
      nextStart: () => this.#nextStart++,
    };
  }

  /** The clock's current time in ms. */
  now(): number {
    return this.clock.now();
  }

  /** Resolves after `ms` of the simulator's time (virtual by default); virtual time moves meanwhile. */
  sleep(ms: number): Promise<void> {
    checkAmount(ms, "sleep: ms");
    return this.#waitOn("sleep", () => new Promise<void>((resolve) => this.#start(ms, resolve)));
  }

  /** The live processes. */
  get processes(): SimulatedProcess[] {
    return [...this.#processes];
  }

  /** The live process that has `pid` as its pid or as one of its thread ids. */
  process(pid: number): SimulatedProcess | undefined {
    return this.#byPid.get(pid);
  }

  /**
   * The pid the next {@link SimulatedDriver.spawn} gives; spawn never gives a pid twice (a
   * snapshot restore brings a process back with the pid it had).
   */
  get nextPid(): number {
    return this.#nextPid;
  }

  /** The start number the next process started gets (see {@link SimulatedProcess.start}). */
  get nextStart(): number {
    return this.#nextStart;
  }

  /** @internal makes the next start number at least `next` (what loading a machine does) */
  reserveStarts(next: number): void {
    this.#nextStart = Math.max(this.#nextStart, next);
  }

  /**
   * @internal why the machine cannot be saved now (closed, or a call, sleep, kernel or blocked
   * CUDA work under way), or `undefined` when it is quiescent
   */
  busyWith(): string | undefined {
    if (this.#closed) return "the simulated driver was closed";
    if (this.#waiting.size > 0) {
      return `${this.#waiting.size} driver call(s) or sleep(s) are under way`;
    }
    for (const p of this.#processes) {
      const work = p.pendingWork;
      if (work) return `process ${p.pid} has ${work}`;
    }
    return undefined;
  }

  /**
   * @internal adds a process that `make` builds on this driver's host (what loading a snapshot
   * does); throws a RangeError if one of its thread ids is taken or the driver is closed
   */
  adopt(make: (host: ProcessHost) => SimulatedProcess): SimulatedProcess {
    const closed = this.#closedError("adopt a process");
    if (closed) throw closed;
    const proc = make(this.#host);
    const taken = proc.threads.find((t) => this.#byPid.has(t));
    if (taken !== undefined) throw new RangeError(`pid ${taken} is taken by another process`);
    this.#processes.add(proc);
    for (const t of proc.threads) this.#byPid.set(t, proc);
    // Neither a pid nor a start number it has is given again.
    for (const t of proc.threads) this.#nextPid = Math.max(this.#nextPid, t + 1);
    this.#nextStart = Math.max(this.#nextStart, proc.start + 1);
    return proc;
  }

  /**
   * Starts a simulated process: a CUDA process with `memoryMiB` of GPU memory, by default. A CUDA
   * process takes its memory and a CUDA context ({@link SimulatedGpu.contextMiB}) on each of its
   * GPUs; a spawn that does not fit throws.
   */
  spawn(options: SpawnOptions = {}): SimulatedProcess {
    const closed = this.#closedError("spawn a process");
    if (closed) throw closed;
    checkKeys(options, "spawn options", [
      "memoryMiB",
      "gpu",
      "cuda",
      "extraThreads",
      "command",
      "inspectable",
      "libcuda",
      "parent",
    ]);
    const parent = this.#parentFor(options.parent);
    const usesCuda = checkBoolean(orDefault(options.cuda, true), "spawn: cuda");
    if (!usesCuda && options.memoryMiB) {
      throw new TypeError(
        `spawn: a process with cuda: false has no GPU memory, got memoryMiB ${
          describeValue(options.memoryMiB)
        }`,
      );
    }
    const memoryMiB = usesCuda
      ? checkAmount(orDefault(options.memoryMiB, 16), "spawn: memoryMiB")
      : 0;
    const gpus = this.#gpusFor(options.gpu);
    const extra = checkInteger(
      orDefault(options.extraThreads, 1),
      "spawn: extraThreads",
      0,
      100_000,
    );
    const loadsLibcuda = checkBoolean(orDefault(options.libcuda, usesCuda), "spawn: libcuda");
    if (usesCuda && !loadsLibcuda) {
      throw new TypeError(
        "spawn: a CUDA process has libcuda mapped; libcuda: false needs cuda: false",
      );
    }
    const need: GpuNeeds = usesCuda ? needsOn(memoryMiB, gpus) : new Map();
    const short = shortage(need, memoryMiB);
    if (short) throw new RangeError(`spawn: ${short}`);
    const pid = this.#nextPid;
    const count = 1 + extra + (usesCuda ? 1 : 0);
    if (pid + count > 2 ** 31 - 1) throw new RangeError(`spawn: no pids left after ${pid}`);
    const threads = Array.from({ length: count }, (_, i) => pid + i);
    this.#nextPid += Math.max(10, count + 7);
    const proc = new SimulatedProcess(this.#host, pid, threads, memoryMiB, gpus, usesCuda, {
      command: options.command === undefined
        ? `simulated-process ${pid}`
        : checkName(options.command, "spawn: command"),
      inspectable: checkBoolean(orDefault(options.inspectable, true), "spawn: inspectable"),
      libcudaLoaded: loadsLibcuda,
      parent,
    });
    proc.claim(need);
    this.#processes.add(proc);
    for (const t of threads) this.#byPid.set(t, proc);
    return proc;
  }

  /**
   * Fills GPU `gpu` so that only `leaveMiB` of its memory stays free (0 by default): starts a
   * process that holds the rest, its CUDA context included, as `target fill` does on a real GPU.
   * A restore onto that GPU that needs more than is left then fails with
   * `CUDA_ERROR_OUT_OF_MEMORY` and leaves its process checkpointed, as on the real driver; the
   * filler's `exit()` frees the GPU again. As on driver 580, the driver then refuses every later
   * restore of that process (`CUDA_ERROR_OPERATING_SYSTEM`, still checkpointed): `CudaProcess`
   * checks the room first where it knows what the process held, and refuses without asking the
   * driver, so that the process can still be resumed once there is room.
   *
   * @example
   * ```ts
   * import { CudaProcess } from "@ckpt/cuda";
   * import { SimulatedDriver } from "@ckpt/cuda/mock";
   * const sim = new SimulatedDriver();
   * const proc = new CudaProcess(sim.spawn({ memoryMiB: 4096 }).pid, { driver: sim });
   * await proc.suspend();
   * const filler = sim.fillGpu(0, { leaveMiB: 1024 });
   * await proc.resume().catch((e) => console.log(e.name)); // "GpuRoomError": the driver not asked
   * filler.exit();
   * await proc.resume(); // now it fits
   * ```
   */
  fillGpu(gpu: number, options: { leaveMiB?: number } = {}): SimulatedProcess {
    const closed = this.#closedError("fill a GPU");
    if (closed) throw closed;
    const index = checkInteger(gpu, "fillGpu: gpu (an index)", 0, this.gpus.length - 1);
    checkKeys(options, "fillGpu options", ["leaveMiB"]);
    const leave = checkAmount(orDefault(options.leaveMiB, 0), "fillGpu: leaveMiB");
    const g = this.gpus[index];
    const memoryMiB = g.freeMiB - leave - g.contextMiB;
    if (memoryMiB < 0) {
      throw new RangeError(
        `fillGpu: GPU ${index} has ${g.freeMiB} MiB free, less than the ${leave} MiB to leave ` +
          `and a CUDA context (${g.contextMiB} MiB)`,
      );
    }
    return this.spawn({ memoryMiB, gpu: index, command: `simulated GPU filler (GPU ${index})` });
  }

  /**
   * The simulated machine as a host: each live process with its command line, whether it has
   * libcuda mapped (or could not be looked at), the GPU memory it holds per GPU and each GPU's
   * free and total memory (as NVML would report them), which process a thread id belongs to
   * (with its start number, {@link SimulatedProcess.start}), process trees (`spawn`'s `parent`),
   * the machine's facts (hostname `simulated`), and the records of held GPU memory that
   * `CudaProcess` keeps for the room check. Every `CudaProcess`, group, listing and snapshot on
   * this driver uses it by itself. Reading it takes no simulated time.
   */
  hostProcesses(): HostProcesses {
    return {
      kind: "simulated",
      scan: () =>
        this.#now(
          "list processes",
          () =>
            this.processes.map((p): ScannedProcess =>
              p.inspectable ? { pid: p.pid, command: p.command, cudaLibrary: p.libcudaLoaded } : {
                pid: p.pid,
                command: p.command,
                notInspectable: `permission denied reading /proc/${p.pid}/maps (simulated: ` +
                  `spawned with inspectable: false)`,
              }
            ),
        ),
      gpuMemory: () =>
        this.#now("read GPU memory", (): GpuMemoryReport => ({
          byPid: new Map(
            this.processes.map((p) => [p.pid, p.gpuMemoryMiB] as const)
              .filter(([, mib]) => Object.keys(mib).length > 0),
          ),
          freeMiB: new Map(this.gpus.map((g) => [g.uuid, g.freeMiB])),
          totalMiB: new Map(this.gpus.map((g) => [g.uuid, g.memoryMiB])),
        })),
      identify: (id) =>
        this.#now("identify a process", () => {
          const p = this.#byPid.get(id);
          return p ? { pid: p.pid, start: p.start } : undefined;
        }),
      processTree: (root) =>
        this.#now("read a process tree", () =>
          this.tree(root)?.map((p): TreeProcess => ({
            pid: p.pid,
            parent: p.parent,
            threads: [...p.threads],
            command: p.command,
          }))),
      facts: () =>
        this.#now("read the machine's facts", (): MachineFacts => {
          const release = SIMULATED_DRIVER_RELEASES[this.version];
          return { ...SIMULATED_HOST, ...(release ? { driverRelease: release } : {}) };
        }),
      heldRecords: this.#records,
      ...(this.selfPid !== undefined ? { self: this.selfPid } : {}),
    };
  }

  /**
   * @internal the records of held GPU memory kept on the simulated machine (`CudaProcess` writes
   * them through {@link SimulatedDriver.hostProcesses}); a snapshot keeps them
   */
  get heldRecords(): MemoryHeldRecords {
    return this.#records;
  }

  /**
   * @internal the live process `root` (a pid, not a thread id) and every process descended from
   * it, each after its parent (breadth first, children in the order they started); `undefined`
   * where no live process has the pid `root`
   */
  tree(root: number): SimulatedProcess[] | undefined {
    const top = this.#byPid.get(root);
    if (!top || top.pid !== root) return undefined;
    const children = new Map<number, SimulatedProcess[]>();
    for (const p of this.#processes) {
      if (p.parent === 0) continue;
      const siblings = children.get(p.parent);
      if (siblings) siblings.push(p);
      else children.set(p.parent, [p]);
    }
    const out = [top];
    for (let i = 0; i < out.length; i++) out.push(...children.get(out[i].pid) ?? []);
    return out;
  }

  /**
   * What dumps and restores this machine's process trees: its simulated CRIU, made on the first
   * call (one per driver, with its defaults; make a {@link SimulatedCriu} yourself for others).
   */
  snapshotEngine(): SimulatedCriu {
    return this.#engine ??= new SimulatedCriu(this);
  }

  /**
   * @internal the disk that snapshot images are written to and read from, shared by every
   * dump and restore of this machine under way (`CRIU_TIMING.diskBytesPerSecond`)
   */
  get disk(): CopyLink {
    return this.#disk ??= new CopyLink(
      { now: () => this.now(), start: (ms, fn) => this.#start(ms, fn) },
      { aggregateBytesPerSecond: CRIU_TIMING.diskBytesPerSecond, slowdownPerProcess: 0 },
    );
  }

  /** @internal starts a timer of the simulator's time, cancelled if the driver closes; returns its cancel */
  startTimer(ms: number, fn: () => void): () => void {
    return this.#start(ms, fn);
  }

  /**
   * @internal runs `work` as something the program waits on (a snapshot engine's dump or
   * restore): the clock is held meanwhile, the machine is busy, and closing the driver rejects it
   */
  waitOn<T>(what: string, work: () => Promise<T>): Promise<T> {
    return this.#waitOn(what, work);
  }

  /**
   * Whether a simulated process with this identity lives: its pid is a live process's, and so is
   * its start number where it has one (a restored process has its pid, with a new start number).
   */
  #alive(process: ProcessIdentity): boolean {
    const p = this.#byPid.get(process.pid);
    return p?.pid === process.pid && (process.start === undefined || p.start === process.start);
  }

  /** Every GPU the driver sees, by index: what `cuDeviceGet`, `cuDeviceGetUuid` and `cuDeviceGetName` give. */
  listGpus(): Promise<GpuInfo[]> {
    return this.#now(
      "list GPUs",
      () => this.gpus.map((g) => ({ index: g.index, uuid: g.uuid, name: g.name })),
    );
  }

  /**
   * Closes the driver: its pending timers are cancelled, calls and sleeps under way and kernels
   * being waited on reject, and every later call rejects, saying that the driver was closed.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const handle of this.#timers) this.clock.clearTimer(handle);
    this.#timers.clear();
    const error = new Error("the simulated driver was closed while this was under way");
    for (const w of this.#waiting) {
      w.release();
      w.reject(error);
    }
    this.#waiting.clear();
    for (const p of this.#processes) p.stopKernels(error);
  }

  /** {@link SimulatedDriver.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  // ---- CheckpointDriver ----

  /** `cuDriverGetVersion`. */
  driverVersion(): Promise<DriverResult> {
    return this.#now(
      "call cuDriverGetVersion",
      () => ({ code: CUDA_SUCCESS, value: this.version }),
    );
  }

  /** `cuCheckpointProcessGetState`: waits for a state change of the process under way. */
  getState(pid: number): Promise<DriverResult> {
    return this.#call(
      "getState",
      pid,
      result,
      (proc) =>
        this.#serially(proc, () =>
          this.#query(proc, "getState", async () => {
            await this.#sleep(this.timing.queryMs);
            return { code: CUDA_SUCCESS, value: proc.stateNumber };
          })),
    );
  }

  /** `cuCheckpointProcessGetRestoreThreadId`: answers at once, even while the process is busy. */
  getRestoreThreadId(pid: number): Promise<DriverResult> {
    return this.#call(
      "getRestoreThreadId",
      pid,
      result,
      (proc) =>
        this.#query(
          proc,
          "getRestoreThreadId",
          () => this.#after({ code: CUDA_SUCCESS, value: proc.tid }),
        ),
    );
  }

  /** `cuCheckpointProcessLock`. */
  lock(pid: number, args: LockArgs | null): Promise<number> {
    const timeoutMs = args?.timeoutMs ?? 0;
    if (args?.reserved?.some((b) => b !== 0)) {
      return this.#call("lock", pid, code, () =>
        this.#after({
          code: CUDA_ERROR_INVALID_VALUE,
          note: "a reserved field of CUcheckpointLockArgs is nonzero",
        }));
    }
    return this.#transition("lock", pid, async (proc, run) => {
      const busyFor = proc.kernelsUntil - this.now();
      if (busyFor > 0) {
        if (timeoutMs > 0 && busyFor > timeoutMs) {
          await run.sleep(timeoutMs);
          return {
            code: CUDA_ERROR_NOT_READY,
            note: `its kernels had ${busyFor} ms to run, more than the ${timeoutMs} ms timeout`,
          };
        }
        await run.sleep(busyFor);
      }
      await run.sleep(this.timing.lockMs);
      proc.enter(stepTo("lock"));
      return { code: CUDA_SUCCESS };
    });
  }

  /** `cuCheckpointProcessCheckpoint`. */
  checkpoint(pid: number): Promise<number> {
    return this.#transition("checkpoint", pid, async (proc, run) => {
      const t = this.timing.checkpoint;
      await run.sleep(t.fixedMs);
      const bytes = mibToBytes(proc.memoryMiB);
      await run.copy(this.#checkpointLink, bytes, singleRate(t, proc.memoryMiB));
      proc.moveToHost();
      proc.enter(stepTo("checkpoint"));
      return { code: CUDA_SUCCESS };
    });
  }

  /** `cuCheckpointProcessRestore`. */
  restore(pid: number, args: RestoreArgs | null): Promise<number> {
    const pairs = args?.gpuPairs ?? [];
    if (pairs.length > 0 && this.version < GPU_PAIRS_MIN_DRIVER_VERSION) {
      return this.#call("restore", pid, code, () =>
        this.#after({
          code: CUDA_ERROR_NOT_SUPPORTED,
          note: `driver ${formatDriverVersion(this.version)} takes no GPU pairs; 13.0 (580) does`,
        }));
    }
    return this.#transition("restore", pid, async (proc, run) => {
      if (proc.restoreRefused) {
        // Driver 580.159.04 after a restore that ran out of memory: every later restore, in place
        // or mapped, fails in 5-8 ms with OPERATING_SYSTEM and the state stays checkpointed.
        await run.sleep(this.timing.refusedMs ?? 6);
        return {
          code: CUDA_ERROR_OPERATING_SYSTEM,
          note: "an earlier restore of this process ran out of GPU memory; the driver refuses " +
            "every restore of it since",
        };
      }
      const targets = this.#mapGpus(proc, pairs);
      if (typeof targets === "string") {
        await run.sleep(this.timing.rejectMs);
        return { code: CUDA_ERROR_INVALID_VALUE, note: targets };
      }
      const need = needsOn(proc.memoryMiB, targets);
      const short = shortage(need, proc.memoryMiB);
      if (short) {
        await run.sleep(this.timing.oomMs);
        proc.refuseRestores();
        return { code: CUDA_ERROR_OUT_OF_MEMORY, note: short };
      }
      proc.claim(need);
      const t = this.timing.restore;
      const moved = targets.some((g, i) => g !== proc.gpus[i]);
      await run.sleep(t.fixedMs + (moved ? this.timing.migrationMs : 0));
      const bytes = mibToBytes(proc.memoryMiB);
      await run.copy(this.#restoreLink, bytes, singleRate(t, proc.memoryMiB));
      proc.moveToGpu(targets);
      proc.enter(stepTo("restore"));
      return { code: CUDA_SUCCESS };
    });
  }

  /** `cuCheckpointProcessUnlock`. */
  unlock(pid: number): Promise<number> {
    return this.#transition("unlock", pid, async (proc, run) => {
      await run.sleep(this.timing.unlockMs);
      proc.enter(stepTo("unlock"));
      return { code: CUDA_SUCCESS };
    });
  }

  /** `cuGetErrorName`. */
  errorName(code: number): string | undefined {
    return CU_RESULTS[code]?.name;
  }

  /** `cuGetErrorString`. */
  errorString(code: number): string | undefined {
    return CU_RESULTS[code]?.description;
  }

  /** A short description for logs: `simulated driver 13.0, 2 GPUs (NVIDIA H200)`. */
  toString(): string {
    return `simulated driver ${formatDriverVersion(this.version)}, ${this.gpus.length} GPU${
      this.gpus.length === 1 ? "" : "s"
    } (${[...new Set(this.gpus.map((g) => g.name))].join(", ")})`;
  }

  // ---- internals ----

  #closedError(what: string): Error | undefined {
    return this.#closed ? new Error(`the simulated driver was closed: cannot ${what}`) : undefined;
  }

  /** Starts a timer the driver cancels when closed; returns its cancel function. */
  #start(ms: number, fn: () => void, passive = false): Cancel {
    if (this.#closed) return () => {};
    const handle = this.clock.setTimer(ms, () => {
      this.#timers.delete(handle);
      fn();
    }, { passive });
    this.#timers.add(handle);
    return () => {
      if (this.#timers.delete(handle)) this.clock.clearTimer(handle);
    };
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.#start(ms, resolve));
  }

  /** `answer` after the time a query takes. */
  async #after(answer: Answer): Promise<Answer> {
    await this.#sleep(this.timing.queryMs);
    return answer;
  }

  /** Something that takes no simulated time, unless the driver is closed. */
  #now<T>(what: string, fn: () => T): Promise<T> {
    const closed = this.#closedError(what);
    return closed ? Promise.reject(closed) : Promise.resolve(fn());
  }

  /**
   * Runs `work` as something the program waits on: the clock is held meanwhile, and closing the
   * driver rejects it (which is no unhandled rejection when nobody awaits it).
   */
  #waitOn<T>(what: string, work: () => Promise<T>): Promise<T> {
    const closed = this.#closedError(what);
    if (closed) return Promise.reject(closed);
    const release = holdClock(this.clock);
    const promise = new Promise<T>((resolve, reject) => {
      const entry: Waiting = { reject, release };
      this.#waiting.add(entry);
      // Done before the caller hears the answer: a call that has answered is no longer under way.
      const done = () => {
        this.#waiting.delete(entry);
        release();
      };
      work().then((value) => {
        done();
        resolve(value);
      }, (err) => {
        done();
        reject(err);
      });
    });
    promise.catch(() => {});
    return promise;
  }

  /**
   * One driver call: gated by the driver version, the pid looked up (a pid no CUDA process has
   * is answered at once), `body` run for the process, the answer logged and turned into `out`.
   */
  #call<T>(
    op: Operation,
    pid: number,
    out: (answer: Answer) => T,
    body: (proc: SimulatedProcess) => Promise<Answer>,
  ): Promise<T> {
    const name = `cuCheckpointProcess${op[0].toUpperCase()}${op.slice(1)}`;
    return this.#waitOn(`call ${name} on pid ${pid}`, async () => {
      const started = this.now();
      let answer: Answer;
      if (this.missingFunctions.includes(name)) {
        answer = {
          code: CUDA_ERROR_NOT_SUPPORTED,
          note: `driver ${formatDriverVersion(this.version)} has no ${name}; 12.8 (570) has`,
        };
      } else {
        const proc = this.#find(pid);
        answer = typeof proc === "number" ? await this.#after({ code: proc }) : await body(proc);
      }
      this.calls.push({
        at: this.now(),
        started,
        op,
        pid,
        code: answer.code,
        ...(answer.note === undefined ? {} : { note: answer.note }),
      });
      return out(answer);
    });
  }

  /** The process for a pid or thread id, or the code the real driver gives. */
  #find(pid: number): SimulatedProcess | number {
    const proc = Number.isInteger(pid) && pid > 0 ? this.#byPid.get(pid) : undefined;
    if (!proc) return CUDA_ERROR_OPERATING_SYSTEM;
    if (!proc.usesCuda) return CUDA_ERROR_NOT_INITIALIZED;
    return proc;
  }

  /**
   * Runs `fn` in the process's turn: the driver serialises calls on a process, so a call made while
   * another is under way waits for it, then acts on the state it left.
   */
  async #serially(proc: SimulatedProcess, fn: () => Promise<Answer>): Promise<Answer> {
    const waitingFor = proc.busy;
    const issued = this.now();
    const done = await proc.turn();
    try {
      const waited = this.now() - issued;
      const answer = proc.exited
        ? await this.#after({ code: CUDA_ERROR_OPERATING_SYSTEM, note: "the process exited" })
        : await fn();
      if (waitingFor === undefined || waited <= 0) return answer;
      const note = `waited ${+waited.toFixed(3)} ms for the ${waitingFor} under way`;
      return { ...answer, note: answer.note ? `${note}; ${answer.note}` : note };
    } finally {
      done();
    }
  }

  /**
   * A state-changing call: in the process's turn, checks the state (`from`), applies an injected
   * fault, else runs `body` with the process marked busy. If the process exits meanwhile, `body`
   * is abandoned and the call returns OPERATING_SYSTEM `exitNoticeMs` after the exit.
   */
  #transition(
    op: Step,
    pid: number,
    body: (proc: SimulatedProcess, run: OpRun) => Promise<Answer>,
  ): Promise<number> {
    return this.#call(op, pid, code, (proc) =>
      this.#serially(proc, async () => {
        // Legal or not, as the state table (core/states.ts) says.
        if (!stepAllowed(op, proc.state)) {
          return await this.#after({
            code: CUDA_ERROR_ILLEGAL_STATE,
            note: `${op} needs a ${stepFrom(op)} process; it is ${proc.state}`,
          });
        }
        const hit = proc.faultPlan.take(op as FaultableOperation);
        if (hit?.fault.kind === "fail") return await this.#applyFault(proc, op, hit.fault);
        const run = new OpRun((ms, fn) => this.#start(ms, fn));
        let onExit = () => {};
        proc.busy = op;
        try {
          return await new Promise<Answer>((resolve, reject) => {
            onExit = () => {
              run.abort();
              const note = `the process exited during the ${op}`;
              this.#start(this.timing.exitNoticeMs, () =>
                resolve({ code: CUDA_ERROR_OPERATING_SYSTEM, note }));
            };
            proc.exitListeners.add(onExit);
            const work = async () => {
              await hit?.hold(); // an injected hang holds the call here
              return await body(proc, run);
            };
            if (hit?.fault.kind !== "exit") {
              return void work().then(resolve, reject);
            }
            // An injected exit, `afterMs` into the call: a call that would end sooner waits for
            // it (onExit answers).
            this.#start(hit.fault.afterMs, () =>
              proc.exit());
            work().then((answer) => proc.exited && resolve(answer), reject);
          });
        } finally {
          proc.busy = undefined;
          proc.exitListeners.delete(onExit);
          proc.wake();
        }
      }));
  }

  /**
   * A query (getState, getRestoreThreadId) with the faults injected into it: a failure, an
   * exit, a hang, or another answer; else `answer`.
   */
  async #query(
    proc: SimulatedProcess,
    op: QueryOperation,
    answer: () => Promise<Answer>,
  ): Promise<Answer> {
    const hit = proc.faultPlan.take(op);
    if (!hit) return await answer();
    const fault = hit.fault;
    switch (fault.kind) {
      case "fail":
        return await this.#applyFault(proc, op, fault);
      case "answer":
        await this.#sleep(this.timing.queryMs);
        return { code: CUDA_SUCCESS, value: fault.value, note: `injected by answerNext("${op}")` };
      case "exit":
        proc.exit();
        return await this.#after({
          code: CUDA_ERROR_OPERATING_SYSTEM,
          note: `injected by exitDuring("${op}"): the process exited`,
        });
      case "hang": {
        let exited = () => {};
        const gone = new Promise<"exited">((resolve) => exited = () => resolve("exited"));
        proc.exitListeners.add(exited);
        try {
          if (await Promise.race([hit.hold(), gone]) === "exited") {
            return await this.#after({
              code: CUDA_ERROR_OPERATING_SYSTEM,
              note: "the process exited",
            });
          }
        } finally {
          proc.exitListeners.delete(exited);
        }
        return await answer();
      }
    }
  }

  /** Answers with an injected failure, moving memory where its state keeps it. */
  async #applyFault(
    proc: SimulatedProcess,
    op: Operation,
    fault: PendingFault & { kind: "fail" },
  ): Promise<Answer> {
    await this.#sleep(this.timing.queryMs);
    const note = `injected by failNext(${JSON.stringify(op)})`;
    // The failed state is final: a fault cannot bring a process back from it.
    const state = isFinal(proc.state) ? undefined : fault.state;
    if (state !== undefined && memoryOnHost(state)) proc.moveToHost();
    if (
      state !== undefined && !memoryOnHost(state) && !isFinal(state) &&
      proc.memoryLocation === "host"
    ) {
      // Memory goes back onto the GPU only where it fits, as a restore's would.
      const need = needsOn(proc.memoryMiB, proc.gpus);
      const short = shortage(need, proc.memoryMiB);
      if (short) {
        return {
          code: CUDA_ERROR_OUT_OF_MEMORY,
          note: `${note} to leave the process ${state}, but ${short}; it stays checkpointed`,
        };
      }
      proc.claim(need);
      proc.moveToGpu(proc.gpus);
    }
    if (state !== undefined) proc.enter(state);
    return { code: fault.code, note };
  }

  /** The GPUs to restore onto, or why the mapping is rejected (INVALID_VALUE). */
  #mapGpus(proc: SimulatedProcess, pairs: readonly GpuPair[]): SimulatedGpu[] | string {
    if (pairs.length === 0) return proc.gpus;
    const byKey = new Map(this.gpus.map((g) => [g.key, g]));
    const map = new Map<SimulatedGpu, SimulatedGpu>();
    for (const pair of pairs) {
      const from = byKey.get(uuidKey(pair.oldUuid));
      const to = byKey.get(uuidKey(pair.newUuid));
      if (!from) return `old UUID ${formatGpuUuid(pair.oldUuid)} is not a GPU of this machine`;
      if (!to) return `new UUID ${formatGpuUuid(pair.newUuid)} is not a GPU of this machine`;
      if (map.has(from)) return `GPU ${from.index} (${from.uuid}) is mapped twice`;
      map.set(from, to);
    }
    // Measured on two H200s: a mapping that leaves out a GPU the driver sees is INVALID_VALUE,
    // even a GPU the process never used, and so is one that sends two GPUs onto one.
    const left = this.gpus.find((g) => !map.has(g));
    if (left) {
      return `the mapping leaves out GPU ${left.index} (${left.uuid}); it must name every GPU`;
    }
    const onto = new Map<SimulatedGpu, SimulatedGpu>();
    for (const [from, to] of map) {
      const other = onto.get(to);
      if (other) {
        return `GPUs ${other.index} and ${from.index} are both mapped onto GPU ${to.index}`;
      }
      onto.set(to, from);
    }
    const targets = proc.gpus.map((g) => map.get(g)!);
    // The process's memory must land on the same chip (NVIDIA's documentation; not measured here,
    // where every GPU is an H200). GPUs the process never used are not checked.
    for (const [i, to] of targets.entries()) {
      const from = proc.gpus[i];
      if (to.name !== from.name) {
        return `the process's GPU ${from.index} (${from.name}) would move onto GPU ${to.index} (${to.name}): restore needs the same chip`;
      }
    }
    return targets;
  }

  /** The pid of `spawn`'s `parent` option (0 for none), a live process's. */
  #parentFor(parent: unknown): number {
    if (parent === undefined || parent === 0) return 0;
    const pid = checkInteger(parent, "spawn: parent (a pid)", 1, 2 ** 31 - 1);
    const p = this.#byPid.get(pid);
    if (!p) throw new RangeError(`spawn: parent ${pid} is no live simulated process`);
    if (p.pid !== pid) {
      throw new RangeError(
        `spawn: parent ${pid} is a thread of process ${p.pid}, not a process: give its pid`,
      );
    }
    return pid;
  }

  /** The GPUs of `spawn`'s `gpu` option. */
  #gpusFor(gpu: SpawnOptions["gpu"]): SimulatedGpu[] {
    const last = this.gpus.length - 1;
    const indexes = gpu === undefined ? [0] : typeof gpu === "number" ? [gpu] : gpu;
    if (!Array.isArray(indexes) || indexes.length === 0) {
      throw new TypeError(
        `spawn: gpu must be a GPU index or a non-empty array of them, got ${describeValue(gpu)}`,
      );
    }
    const seen = new Set<number>();
    return indexes.map((i: unknown) => {
      if (typeof i !== "number" || !Number.isInteger(i) || i < 0 || i > last) {
        throw new RangeError(
          `spawn: gpu ${describeValue(i)} does not exist: this simulator has GPUs 0 to ${last}`,
        );
      }
      if (seen.has(i)) throw new RangeError(`spawn: gpu lists GPU ${i} twice`);
      seen.add(i);
      return this.gpus[i];
    });
  }
}

function code(answer: Answer): number {
  return answer.code;
}

function result(answer: Answer): DriverResult {
  return { code: answer.code, value: answer.code === CUDA_SUCCESS ? answer.value ?? 0 : 0 };
}

function makeClock(clock: unknown, speed: unknown): SimClock {
  if (speed !== undefined && clock !== "real") {
    throw new TypeError(`speed ${describeValue(speed)} is used only with clock: "real"`);
  }
  if (clock === "virtual") return new VirtualClock();
  if (clock === "real") return new RealClock(speed as number | undefined);
  const c = clock as SimClock | null;
  if (
    typeof c === "object" && c !== null && typeof c.now === "function" &&
    typeof c.setTimer === "function" && typeof c.clearTimer === "function"
  ) {
    return c;
  }
  throw new TypeError(
    `clock must be "virtual", "real" or a SimClock (with now, setTimer and clearTimer), got ${
      describeValue(clock)
    }`,
  );
}

function gpuSpecs(gpus: SimulatedDriverOptions["gpus"]): readonly SimulatedGpuSpec[] {
  if (gpus === undefined) return [{}];
  if (typeof gpus === "number") {
    return Array.from({ length: checkInteger(gpus, "gpus (how many)", 1, 1024) }, () => ({}));
  }
  if (!Array.isArray(gpus) || gpus.length === 0) {
    throw new TypeError(
      `gpus must be a number of GPUs or a non-empty array of GPU specs, got ${describeValue(gpus)}`,
    );
  }
  return gpus;
}

function makeGpu(spec: SimulatedGpuSpec, i: number, seed: number): SimulatedGpu {
  const what = `gpus[${i}]`;
  checkKeys(spec, what, ["name", "memoryMiB", "uuid", "contextMiB"]);
  const name = checkName(orDefault(spec?.name, "NVIDIA H200"), `${what}.name`);
  const memoryMiB = checkAmount(
    orDefault(spec?.memoryMiB, CHIP_MEMORY_MIB[name] ?? CHIP_MEMORY_MIB["NVIDIA H200"]),
    `${what}.memoryMiB`,
    true,
  );
  const contextMiB = checkAmount(orDefault(spec?.contextMiB, CONTEXT_MIB), `${what}.contextMiB`);
  const uuid = spec?.uuid === undefined
    ? madeUpUuid(seed, i)
    : formatGpuUuid(parseGpuUuid(spec.uuid, `${what}.uuid`));
  return new SimulatedGpu(i, name, uuid, memoryMiB, contextMiB);
}

/** A stable, made-up GPU UUID for GPU `index` of a simulator seeded with `seed`. */
function madeUpUuid(seed: number, index: number): string {
  const bytes = new Uint8Array(16);
  let x = (Math.imul(seed, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b)) >>> 0;
  for (let i = 0; i < 16; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    bytes[i] = x & 0xff;
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x40; // shaped like a version-4 UUID, as NVIDIA's are
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return formatGpuUuid(bytes);
}
