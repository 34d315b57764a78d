/**
 * The simulated driver: the CUDA checkpoint state machine, its error codes and its timing, in pure
 * TypeScript, with GPUs, processes and GPU memory contents that tests can inspect.
 *
 * @module
 */

import {
  CHECKPOINT_MIN_DRIVER_VERSION,
  CU_PROCESS_STATE_CHECKPOINTED,
  CU_PROCESS_STATE_FAILED,
  CU_PROCESS_STATE_LOCKED,
  CU_PROCESS_STATE_RUNNING,
  CU_RESULTS,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
  formatDriverVersion,
  GPU_PAIRS_MIN_DRIVER_VERSION,
  PROCESS_STATE_NAMES,
  type ProcessState,
} from "../core/codes.ts";
import type { CheckpointDriver, DriverResult, LockArgs, RestoreArgs } from "../core/driver.ts";
import { CheckpointUnsupportedError, type Operation } from "../core/errors.ts";
import { formatGpuUuid, parseGpuUuid } from "../core/uuid.ts";
import { RealClock, type SimClock, sleep, VirtualClock } from "./clock.ts";
import { MemoryImage } from "./memory.ts";
import { CopyLink, H200_TIMING, mibToBytes, singleRate, type TimingModel } from "./timing.ts";

/** A GPU of the simulated machine, as given to {@link SimulatedDriver}'s constructor. */
export interface SimulatedGpuSpec {
  /** The chip's name; restore onto another GPU needs the same chip. Default `"NVIDIA H200"`. */
  name?: string;
  /** Its memory in MiB. Default 143771, an H200's. */
  memoryMiB?: number;
  /** Its UUID (`GPU-…`); made up from the driver's seed when left out. */
  uuid?: string;
}

/** Options of {@link SimulatedDriver}. */
export interface SimulatedDriverOptions {
  /** How many H200s, or a description of each GPU. Default 1. */
  gpus?: number | readonly SimulatedGpuSpec[];
  /**
   * `"virtual"` (the default): time jumps from one event to the next, so tests take no real time
   * and timings are exact. `"real"`: operations take as long as they did on the real driver,
   * divided by `speed`. Or any {@link SimClock}.
   */
  clock?: "virtual" | "real" | SimClock;
  /** With the real clock: how many times faster than the measured driver to run. Default 1. */
  speed?: number;
  /**
   * What `cuDriverGetVersion` reports. Default 13000 (CUDA 13.0, driver 580). Below 12080 the
   * checkpoint calls are missing, as in a driver older than 570; below 13000 restore takes no
   * GPU pairs.
   */
  driverVersion?: number;
  /** Seeds the made-up GPU UUIDs, so that two simulators can have different GPUs. Default 1. */
  seed?: number;
  /** The first pid handed out. Default 4000. */
  firstPid?: number;
  /** Timing figures; the H200 measurements by default. */
  timing?: TimingModel;
}

/** What {@link SimulatedDriver.spawn} takes. */
export interface SpawnOptions {
  /** GPU memory the process has allocated, in MiB (split evenly over its GPUs). Default 16. */
  memoryMiB?: number;
  /** The index of its GPU, or of each of its GPUs. Default 0. */
  gpu?: number | readonly number[];
  /** `false` for a live process that never initialised CUDA. Default true. */
  cuda?: boolean;
  /** How many threads besides the main one (the driver's restore thread is one of them). Default 2. */
  extraThreads?: number;
}

/** A failure to inject into the next call of an operation on a process. */
export interface InjectedFault {
  /** The `CUresult` the call returns. */
  code: number;
  /** The state the process is left in; unchanged when left out. `"failed"` is final. */
  state?: ProcessState;
}

/** One call the simulated driver answered, for tests that check what their code did. */
export interface SimulatedCall {
  /** Virtual (or simulated real) time in ms at which the call ended. */
  at: number;
  /** The C call, without the `cuCheckpointProcess` prefix: `"lock"`, `"getState"`, … */
  op: Operation;
  /** The pid it was given. */
  pid: number;
  /** The `CUresult` it returned. */
  code: number;
}

/** A GPU of the simulated machine. */
export class SimulatedGpu {
  /** Its index, as `nvidia-smi` numbers it. */
  readonly index: number;
  /** Its chip name. */
  readonly name: string;
  /** Its UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly uuid: string;
  /** Its memory in MiB. */
  readonly memoryMiB: number;
  /** @internal the UUID's 16 bytes, as lowercase hex */
  readonly key: string;
  #usedMiB = 0;

  /** @internal made by {@link SimulatedDriver} */
  constructor(index: number, name: string, uuid: string, memoryMiB: number) {
    this.index = index;
    this.name = name;
    this.uuid = uuid;
    this.memoryMiB = memoryMiB;
    this.key = uuidKey(parseGpuUuid(uuid));
  }

  /** GPU memory in use by processes (and held for restores under way), in MiB. */
  get usedMiB(): number {
    return this.#usedMiB;
  }

  /** Free GPU memory in MiB. */
  get freeMiB(): number {
    return this.memoryMiB - this.#usedMiB;
  }

  /** @internal */
  take(mib: number): void {
    this.#usedMiB += mib;
  }

  /** @internal */
  give(mib: number): void {
    this.#usedMiB = Math.max(0, this.#usedMiB - mib);
  }
}

type Waiter = () => void;

/**
 * A process of the simulated machine. Its CUDA work (kernels, memory reads and writes) blocks while
 * it is locked or checkpointed, as CUDA calls in a real process do, and goes on once it is
 * unlocked.
 */
export class SimulatedProcess {
  /** Its process id. */
  readonly pid: number;
  /** The id of the thread the driver restores it from (`getRestoreThreadId`). */
  readonly tid: number;
  /** All its thread ids, the main thread (= pid) first; any of them works as a pid. */
  readonly threads: readonly number[];
  /** Its GPU memory in MiB. */
  readonly memoryMiB: number;
  /** Whether it ever initialised CUDA. */
  readonly usesCuda: boolean;
  /** @internal */
  readonly sim: SimulatedDriver;
  /** @internal the GPUs it has or had memory on */
  gpus: SimulatedGpu[];
  /** @internal */
  stateNumber: number = CU_PROCESS_STATE_RUNNING;
  /** @internal */
  deviceMemory: MemoryImage | undefined;
  /** @internal */
  hostMemory: MemoryImage | undefined;
  /** @internal the operation under way, one at a time */
  busy: Operation | undefined;
  /** @internal virtual time at which the last kernel launched ends */
  kernelsUntil = 0;
  /** @internal */
  faults: Map<Operation, InjectedFault> = new Map();
  /** @internal called when the process exits */
  exitListeners: Set<() => void> = new Set();
  #exited = false;
  #runWaiters: Waiter[] = [];

  /** @internal made by {@link SimulatedDriver.spawn} */
  constructor(
    sim: SimulatedDriver,
    pid: number,
    threads: number[],
    memoryMiB: number,
    gpus: SimulatedGpu[],
    usesCuda: boolean,
  ) {
    this.sim = sim;
    this.pid = pid;
    this.threads = threads;
    this.tid = threads[1] ?? pid;
    this.memoryMiB = memoryMiB;
    this.gpus = gpus;
    this.usesCuda = usesCuda;
    if (usesCuda) this.deviceMemory = new MemoryImage(mibToBytes(memoryMiB));
  }

  /** Its checkpoint state by name. */
  get state(): ProcessState {
    return PROCESS_STATE_NAMES[this.stateNumber] ?? "failed";
  }

  /** Whether it has exited. */
  get exited(): boolean {
    return this.#exited;
  }

  /** The UUIDs of the GPUs it runs on (or ran on, while checkpointed). */
  get gpuUuids(): string[] {
    return this.gpus.map((g) => g.uuid);
  }

  /** Where its GPU memory is now: on the GPU, in host memory (checkpointed), or nowhere. */
  get memoryLocation(): "gpu" | "host" | "none" {
    return this.deviceMemory ? "gpu" : this.hostMemory ? "host" : "none";
  }

  /**
   * Launches a kernel that runs for `ms`. Like a CUDA launch it returns at once, and blocks first
   * while the process is locked or checkpointed. Resolves when the kernel has finished.
   */
  launch(ms: number): Promise<void> {
    if (!(ms >= 0)) {
      return Promise.reject(new RangeError(`kernel duration must be >= 0 ms, got ${ms}`));
    }
    const enqueue = () => {
      // Kernels on one stream run one after another.
      this.kernelsUntil = Math.max(this.sim.now(), this.kernelsUntil) + ms;
      return sleep(this.sim.clock, this.kernelsUntil - this.sim.now());
    };
    // Launched at once when the process runs, as a CUDA launch returns at once; else it blocks.
    if (this.#canRun()) return enqueue();
    return this.#whenRunning("launch a kernel").then(enqueue);
  }

  /** Writes `data` into its GPU memory at `offset` (a `cudaMemcpy`: blocks while not running). */
  async write(offset: number, data: Uint8Array): Promise<void> {
    await this.#whenRunning("write GPU memory");
    this.deviceMemory!.write(offset, data);
  }

  /** Reads its GPU memory (a `cudaMemcpy`: blocks while not running). */
  async read(offset: number, length: number): Promise<Uint8Array> {
    await this.#whenRunning("read GPU memory");
    return this.deviceMemory!.read(offset, length);
  }

  /**
   * SHA-256 of its GPU memory contents wherever they are held now (on the GPU or, checkpointed,
   * in host memory). An inspection for tests, not a CUDA call: it never blocks.
   */
  memoryDigest(): Promise<string> {
    const image = this.deviceMemory ?? this.hostMemory;
    if (!image) {
      return Promise.reject(
        new Error(`process ${this.pid} has no GPU memory (it never used CUDA, or it exited)`),
      );
    }
    return image.digest();
  }

  /** Makes the next `op` call on this process fail with `fault.code`, leaving it in `fault.state`. */
  failNext(op: "lock" | "checkpoint" | "restore" | "unlock", fault: InjectedFault): void {
    this.faults.set(op, { ...fault });
  }

  /** Ends the process: its GPU memory is freed, calls under way fail, its pid stops existing. */
  exit(): void {
    if (this.#exited) return;
    this.#exited = true;
    if (this.deviceMemory) { for (const g of this.gpus) g.give(this.memoryMiB / this.gpus.length); }
    this.deviceMemory = undefined;
    this.hostMemory = undefined;
    for (const fn of [...this.exitListeners]) fn();
    this.sim.forget(this);
    this.wake();
  }

  /** @internal its GPU memory into host memory, freeing the GPU (what a checkpoint does) */
  moveToHost(): void {
    if (!this.deviceMemory) return;
    this.hostMemory = this.deviceMemory.copy();
    this.deviceMemory = undefined;
    for (const g of this.gpus) g.give(this.memoryMiB / this.gpus.length);
  }

  /**
   * @internal its host memory back onto `gpus` (what a restore does); with `reserved`, that GPU
   * memory was already taken for it
   */
  moveToGpu(gpus: SimulatedGpu[] = this.gpus, reserved = false): void {
    if (!this.hostMemory) return;
    this.deviceMemory = this.hostMemory.copy();
    this.hostMemory = undefined;
    this.gpus = gpus;
    if (!reserved) { for (const g of gpus) g.take(this.memoryMiB / gpus.length); }
  }

  /** @internal */
  setState(state: number): void {
    this.stateNumber = state;
    this.wake();
  }

  async #whenRunning(what: string): Promise<void> {
    if (!this.usesCuda) {
      throw new Error(`process ${this.pid} never initialised CUDA; cannot ${what}`);
    }
    while (!this.#canRun()) {
      if (this.#exited) throw new Error(`process ${this.pid} has exited; cannot ${what}`);
      if (this.stateNumber === CU_PROCESS_STATE_FAILED) {
        throw new Error(`process ${this.pid} is in the failed state; cannot ${what}`);
      }
      await new Promise<void>((resolve) => this.#runWaiters.push(resolve));
    }
    if (this.#exited) throw new Error(`process ${this.pid} has exited; cannot ${what}`);
  }

  #canRun(): boolean {
    return this.usesCuda && !this.#exited && this.stateNumber === CU_PROCESS_STATE_RUNNING &&
      this.busy !== "lock";
  }

  /** @internal wakes blocked CUDA work to look again (after a state change, a failed lock, an exit) */
  wake(): void {
    const waiters = this.#runWaiters;
    this.#runWaiters = [];
    for (const w of waiters) w();
  }
}

/**
 * A simulated CUDA driver with GPUs and processes. It implements {@link CheckpointDriver} with the
 * state machine, error codes and timing measured on the real driver (shared/DRIVER_FACTS.md), so
 * code written against {@link CudaProcess} can be tested without a GPU.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * await target.write(0, new TextEncoder().encode("hello"));
 * const proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();
 * console.log(target.memoryLocation, sim.gpus[0].usedMiB); // "host" 0
 * await proc.resume({ gpuMapping: { [sim.gpus[0].uuid]: sim.gpus[1].uuid, [sim.gpus[1].uuid]: sim.gpus[0].uuid } });
 * console.log(target.gpuUuids[0] === sim.gpus[1].uuid); // true
 * ```
 */
export class SimulatedDriver implements CheckpointDriver {
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
  /** Every call answered so far, oldest first. */
  readonly calls: SimulatedCall[] = [];
  readonly #byPid = new Map<number, SimulatedProcess>();
  readonly #processes = new Set<SimulatedProcess>();
  readonly #checkpointLink: CopyLink;
  readonly #restoreLink: CopyLink;
  #nextPid: number;

  /** A simulated machine; one H200, virtual time and driver 13.0 unless told otherwise. */
  constructor(options: SimulatedDriverOptions = {}) {
    const clock = options.clock ?? "virtual";
    this.clock = clock === "virtual"
      ? new VirtualClock()
      : clock === "real"
      ? new RealClock(options.speed ?? 1)
      : clock;
    this.version = options.driverVersion ?? 13000;
    this.timing = options.timing ?? H200_TIMING;
    this.#nextPid = options.firstPid ?? 4000;
    const seed = options.seed ?? 1;
    const specs = typeof options.gpus === "number" || options.gpus === undefined
      ? Array.from({ length: options.gpus ?? 1 }, () => ({}))
      : options.gpus;
    if (!Number.isInteger(specs.length) || specs.length < 1) {
      throw new RangeError(`gpus must be at least 1, got ${options.gpus}`);
    }
    this.gpus = specs.map((spec: SimulatedGpuSpec, i: number) => {
      const memoryMiB = spec.memoryMiB ?? 143771;
      if (!(memoryMiB > 0)) {
        throw new RangeError(`GPU ${i}: memoryMiB must be > 0, got ${memoryMiB}`);
      }
      const uuid = spec.uuid === undefined
        ? madeUpUuid(seed, i)
        : formatGpuUuid(parseGpuUuid(spec.uuid, `GPU ${i} uuid`));
      return new SimulatedGpu(i, spec.name ?? "NVIDIA H200", uuid, memoryMiB);
    });
    const keys = new Set(this.gpus.map((g) => g.key));
    if (keys.size !== this.gpus.length) {
      throw new RangeError("two simulated GPUs have the same UUID");
    }
    this.#checkpointLink = new CopyLink(this.clock, this.timing.checkpoint.aggregateBytesPerSecond);
    this.#restoreLink = new CopyLink(this.clock, this.timing.restore.aggregateBytesPerSecond);
  }

  /** The clock's current time in ms. */
  now(): number {
    return this.clock.now();
  }

  /** Resolves after `ms` of the simulator's time (virtual by default). */
  sleep(ms: number): Promise<void> {
    return sleep(this.clock, ms);
  }

  /** The live processes. */
  get processes(): SimulatedProcess[] {
    return [...this.#processes];
  }

  /** The live process that has `pid` as its pid or as one of its thread ids. */
  process(pid: number): SimulatedProcess | undefined {
    return this.#byPid.get(pid);
  }

  /** Starts a simulated process: a CUDA process with `memoryMiB` of GPU memory, by default. */
  spawn(options: SpawnOptions = {}): SimulatedProcess {
    const usesCuda = options.cuda ?? true;
    const memoryMiB = usesCuda ? options.memoryMiB ?? 16 : 0;
    if (!(Number.isFinite(memoryMiB) && memoryMiB >= 0)) {
      throw new RangeError(`memoryMiB must be a non-negative number, got ${options.memoryMiB}`);
    }
    const indexes = options.gpu === undefined
      ? [0]
      : typeof options.gpu === "number"
      ? [options.gpu]
      : [...options.gpu];
    const gpus = indexes.map((i) => {
      const gpu = this.gpus[i];
      if (!Number.isInteger(i) || !gpu) {
        throw new RangeError(
          `gpu ${i} does not exist: this simulator has GPUs 0 to ${this.gpus.length - 1}`,
        );
      }
      return gpu;
    });
    if (usesCuda) {
      for (const g of gpus) {
        const share = memoryMiB / gpus.length;
        if (share > g.freeMiB) {
          throw new RangeError(
            `GPU ${g.index} has ${g.freeMiB} MiB free, too little for ${share} MiB more`,
          );
        }
      }
      for (const g of gpus) g.take(memoryMiB / gpus.length);
    }
    const extra = options.extraThreads ?? 2;
    const pid = this.#nextPid;
    const threads = Array.from({ length: 1 + extra }, (_, i) => pid + i);
    this.#nextPid += Math.max(10, extra + 1 + 7);
    const proc = new SimulatedProcess(this, pid, threads, memoryMiB, gpus, usesCuda);
    this.#processes.add(proc);
    for (const t of threads) this.#byPid.set(t, proc);
    return proc;
  }

  /** @internal called when a process exits */
  forget(proc: SimulatedProcess): void {
    this.#processes.delete(proc);
    for (const t of proc.threads) this.#byPid.delete(t);
  }

  // ---- CheckpointDriver ----

  /** `cuDriverGetVersion`. */
  driverVersion(): Promise<DriverResult> {
    return Promise.resolve({ code: CUDA_SUCCESS, value: this.version });
  }

  /** `cuCheckpointProcessGetState`. */
  async getState(pid: number): Promise<DriverResult> {
    this.#requireCheckpointApi("getState", pid);
    await this.sleep(this.timing.queryMs);
    const found = this.#find(pid);
    const result = typeof found === "number"
      ? { code: found, value: 0 }
      : { code: CUDA_SUCCESS, value: found.stateNumber };
    this.#log("getState", pid, result.code);
    return result;
  }

  /** `cuCheckpointProcessGetRestoreThreadId`. */
  async getRestoreThreadId(pid: number): Promise<DriverResult> {
    this.#requireCheckpointApi("getRestoreThreadId", pid);
    await this.sleep(this.timing.queryMs);
    const found = this.#find(pid);
    const result = typeof found === "number"
      ? { code: found, value: 0 }
      : { code: CUDA_SUCCESS, value: found.tid };
    this.#log("getRestoreThreadId", pid, result.code);
    return result;
  }

  /** `cuCheckpointProcessLock`. */
  async lock(pid: number, args: LockArgs | null): Promise<number> {
    this.#requireCheckpointApi("lock", pid);
    return await this.#logged("lock", pid, async () => {
      const reserved = args?.reserved;
      if (reserved && reserved.some((b) => b !== 0)) return CUDA_ERROR_INVALID_VALUE;
      const timeoutMs = args?.timeoutMs ?? 0;
      return await this.#transition(pid, "lock", CU_PROCESS_STATE_RUNNING, async (proc, exited) => {
        const busyFor = proc.kernelsUntil - this.now();
        if (busyFor > 0) {
          if (timeoutMs > 0 && busyFor > timeoutMs) {
            await this.sleep(timeoutMs);
            return exited() ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_ERROR_NOT_READY;
          }
          await this.sleep(busyFor);
        }
        await this.sleep(this.timing.lockMs);
        if (exited()) return CUDA_ERROR_OPERATING_SYSTEM;
        proc.setState(CU_PROCESS_STATE_LOCKED);
        return CUDA_SUCCESS;
      });
    });
  }

  /** `cuCheckpointProcessCheckpoint`. */
  async checkpoint(pid: number): Promise<number> {
    this.#requireCheckpointApi("checkpoint", pid);
    return await this.#logged(
      "checkpoint",
      pid,
      () =>
        this.#transition(
          pid,
          "checkpoint",
          CU_PROCESS_STATE_LOCKED,
          async (proc, exited, abort) => {
            const t = this.timing.checkpoint;
            await this.sleep(t.fixedMs);
            if (exited()) return CUDA_ERROR_OPERATING_SYSTEM;
            const done = await this.#checkpointLink.transfer(
              mibToBytes(proc.memoryMiB),
              singleRate(t, proc.memoryMiB),
              abort,
            );
            if (!done || exited()) return CUDA_ERROR_OPERATING_SYSTEM;
            proc.moveToHost();
            proc.setState(CU_PROCESS_STATE_CHECKPOINTED);
            return CUDA_SUCCESS;
          },
        ),
    );
  }

  /** `cuCheckpointProcessRestore`. */
  async restore(pid: number, args: RestoreArgs | null): Promise<number> {
    this.#requireCheckpointApi("restore", pid);
    const pairs = args?.gpuPairs ?? [];
    if (pairs.length > 0 && this.version < GPU_PAIRS_MIN_DRIVER_VERSION) {
      throw new CheckpointUnsupportedError({
        operation: "restore",
        pid,
        driverVersion: this.version,
        detail: `restoring onto other GPUs needs driver 580 (CUDA 13.0) or later; this driver is ${
          formatDriverVersion(this.version)
        }`,
      });
    }
    return await this.#logged("restore", pid, () =>
      this.#transition(
        pid,
        "restore",
        CU_PROCESS_STATE_CHECKPOINTED,
        async (proc, exited, abort) => {
          const targets = this.#mapGpus(proc, pairs);
          if (typeof targets === "number") {
            await this.sleep(this.timing.rejectMs);
            return targets;
          }
          const share = proc.memoryMiB / targets.length;
          const need = new Map<SimulatedGpu, number>();
          for (const g of targets) need.set(g, (need.get(g) ?? 0) + share);
          for (const [g, mib] of need) {
            if (mib > g.freeMiB) {
              await this.sleep(this.timing.oomMs);
              return CUDA_ERROR_OUT_OF_MEMORY;
            }
          }
          for (const [g, mib] of need) g.take(mib);
          const release = () => {
            for (const [g, mib] of need) g.give(mib);
          };
          const t = this.timing.restore;
          const moved = targets.some((g, i) => g !== proc.gpus[i]);
          await this.sleep(t.fixedMs + (moved ? this.timing.migrationMs : 0));
          const done = !exited() &&
            await this.#restoreLink.transfer(
              mibToBytes(proc.memoryMiB),
              singleRate(t, proc.memoryMiB),
              abort,
            );
          if (!done || exited()) {
            release();
            return CUDA_ERROR_OPERATING_SYSTEM;
          }
          proc.moveToGpu(targets, true);
          proc.setState(CU_PROCESS_STATE_LOCKED);
          return CUDA_SUCCESS;
        },
      ));
  }

  /** `cuCheckpointProcessUnlock`. */
  async unlock(pid: number): Promise<number> {
    this.#requireCheckpointApi("unlock", pid);
    return await this.#logged(
      "unlock",
      pid,
      () =>
        this.#transition(pid, "unlock", CU_PROCESS_STATE_LOCKED, async (proc, exited) => {
          await this.sleep(this.timing.unlockMs);
          if (exited()) return CUDA_ERROR_OPERATING_SYSTEM;
          proc.setState(CU_PROCESS_STATE_RUNNING);
          return CUDA_SUCCESS;
        }),
    );
  }

  /** `cuGetErrorName`. */
  errorName(code: number): string | undefined {
    return CU_RESULTS[code]?.name;
  }

  /** `cuGetErrorString`. */
  errorString(code: number): string | undefined {
    return CU_RESULTS[code]?.description;
  }

  // ---- internals ----

  #requireCheckpointApi(operation: Operation, pid: number): void {
    if (this.version < CHECKPOINT_MIN_DRIVER_VERSION) {
      throw new CheckpointUnsupportedError({
        operation,
        pid,
        driverVersion: this.version,
        detail: `this driver (version ${
          formatDriverVersion(this.version)
        }) has no CUDA checkpoint support; NVIDIA driver 570 or later is needed`,
      });
    }
  }

  /** The process for a pid or thread id, or the code the real driver gives. */
  #find(pid: number): SimulatedProcess | number {
    const proc = Number.isInteger(pid) && pid > 0 ? this.#byPid.get(pid) : undefined;
    if (!proc) return CUDA_ERROR_OPERATING_SYSTEM;
    if (!proc.usesCuda) return CUDA_ERROR_NOT_INITIALIZED;
    return proc;
  }

  /**
   * Runs a state-changing operation: finds the process, checks its state, applies an injected
   * fault, and runs `body` with the process marked busy. `exited()` tells whether the process
   * exited meanwhile; `abort` cancels a copy when it does.
   */
  async #transition(
    pid: number,
    op: Operation,
    from: number,
    body: (
      proc: SimulatedProcess,
      exited: () => boolean,
      abort: { onAbort?: () => void },
    ) => Promise<number>,
  ): Promise<number> {
    const found = this.#find(pid);
    if (typeof found === "number") {
      await this.sleep(this.timing.queryMs);
      return found;
    }
    const proc = found;
    // One state change at a time: a second one while another is under way sees an illegal state.
    // (Assumed: concurrent calls on one process were not measured on the real driver.)
    if (proc.stateNumber !== from || proc.busy !== undefined) {
      await this.sleep(this.timing.queryMs);
      return CUDA_ERROR_ILLEGAL_STATE;
    }
    const fault = proc.faults.get(op);
    if (fault) {
      proc.faults.delete(op);
      await this.sleep(this.timing.queryMs);
      if (fault.state !== undefined) {
        // Memory goes where the new state keeps it: host memory when checkpointed, the GPU when
        // running or locked (a failed process keeps whatever it had).
        if (fault.state === "checkpointed") proc.moveToHost();
        if (fault.state === "running" || fault.state === "locked") proc.moveToGpu();
        proc.setState(PROCESS_STATE_NAMES.indexOf(fault.state));
      }
      return fault.code;
    }
    let gone = false;
    const abort: { onAbort?: () => void } = {};
    const onExit = () => {
      gone = true;
      abort.onAbort?.();
    };
    proc.exitListeners.add(onExit);
    proc.busy = op;
    try {
      return await body(proc, () => gone, abort);
    } finally {
      proc.busy = undefined;
      proc.exitListeners.delete(onExit);
      proc.wake();
    }
  }

  /** The GPUs to restore onto, or the `CUresult` that rejects the mapping. */
  #mapGpus(proc: SimulatedProcess, pairs: readonly { oldUuid: Uint8Array; newUuid: Uint8Array }[]):
    | SimulatedGpu[]
    | number {
    if (pairs.length === 0) return proc.gpus;
    const byKey = new Map(this.gpus.map((g) => [g.key, g]));
    const map = new Map<SimulatedGpu, SimulatedGpu>();
    for (const pair of pairs) {
      const from = byKey.get(uuidKey(pair.oldUuid));
      const to = byKey.get(uuidKey(pair.newUuid));
      if (!from || !to || map.has(from)) return CUDA_ERROR_INVALID_VALUE;
      map.set(from, to);
    }
    // Measured on two H200s: a mapping that leaves out a GPU the driver sees is INVALID_VALUE,
    // even a GPU the process never used, and so is one that sends two GPUs onto one.
    if (map.size !== this.gpus.length) return CUDA_ERROR_INVALID_VALUE;
    if (new Set(map.values()).size !== map.size) return CUDA_ERROR_INVALID_VALUE;
    const targets = proc.gpus.map((g) => map.get(g)!);
    // The process's memory must land on the same chip (NVIDIA's documentation; not measured here,
    // where every GPU is an H200). GPUs the process never used are not checked.
    if (targets.some((to, i) => to.name !== proc.gpus[i].name)) return CUDA_ERROR_INVALID_VALUE;
    return targets;
  }

  async #logged(op: Operation, pid: number, run: () => Promise<number>): Promise<number> {
    const code = await run();
    this.#log(op, pid, code);
    return code;
  }

  #log(op: Operation, pid: number, code: number): void {
    this.calls.push({ at: this.now(), op, pid, code });
  }

  /** A short description for logs: `simulated driver 13.0, 2 GPUs (NVIDIA H200)`. */
  toString(): string {
    return `simulated driver ${formatDriverVersion(this.version)}, ${this.gpus.length} GPU${
      this.gpus.length === 1 ? "" : "s"
    } (${[...new Set(this.gpus.map((g) => g.name))].join(", ")})`;
  }
}

function uuidKey(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
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
