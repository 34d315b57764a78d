/**
 * GPUs and processes of the simulated machine: who holds how much GPU memory, and a process's
 * CUDA work (kernels, memory reads and writes), which blocks while the process is not running.
 *
 * @module
 */

import {
  cudaRuns,
  INITIAL_STATE,
  isFinal,
  memoryOnHost,
  type ProcessState,
  stateName,
  stateNumber as numberOfState,
} from "../core/states.ts";
import type { Operation } from "../core/errors.ts";
import { describeValue, parseGpuUuid } from "../core/uuid.ts";
import { checkAmount } from "./checks.ts";
import {
  type AnswerFault,
  checkFault,
  type ExitFault,
  type FaultableOperation,
  FaultPlan,
  type FaultTiming,
  type InjectedFault,
  type PendingFault,
  type QueryOperation,
} from "./faults.ts";
import { checkRange, MemoryImage, PAGE_SIZE } from "./memory.ts";
import { mibToBytes } from "./timing.ts";

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
  /** GPU memory a CUDA context takes on it, per process, in MiB. */
  readonly contextMiB: number;
  /** @internal the UUID's 16 bytes, as lowercase hex */
  readonly key: string;
  #usedMiB = 0;

  /** @internal made by {@link SimulatedDriver} */
  constructor(index: number, name: string, uuid: string, memoryMiB: number, contextMiB: number) {
    this.index = index;
    this.name = name;
    this.uuid = uuid;
    this.memoryMiB = memoryMiB;
    this.contextMiB = contextMiB;
    this.key = uuidKey(parseGpuUuid(uuid));
  }

  /** GPU memory in use by processes (memory and contexts, and what restores under way hold), in MiB. */
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

/** GPU memory in MiB that a process needs on each GPU: its share of `memoryMiB` plus a context. */
export type GpuNeeds = Map<SimulatedGpu, number>;

/** What a process of `memoryMiB` needs on `gpus` (a GPU named twice needs both shares). */
export function needsOn(memoryMiB: number, gpus: readonly SimulatedGpu[]): GpuNeeds {
  const need: GpuNeeds = new Map();
  for (const g of gpus) {
    need.set(g, (need.get(g) ?? 0) + memoryMiB / gpus.length + g.contextMiB);
  }
  return need;
}

/** Why `need` does not fit on its GPUs, or `undefined` when it fits. */
export function shortage(need: GpuNeeds, memoryMiB: number): string | undefined {
  for (const [g, mib] of need) {
    if (mib > g.freeMiB) {
      return `GPU ${g.index} has ${g.freeMiB} MiB free, too little for ${mib} MiB more (${
        mib - g.contextMiB
      } MiB of ${memoryMiB} MiB of memory and ${g.contextMiB} MiB of CUDA context)`;
    }
  }
  return undefined;
}

/** What a process needs from its driver. @internal */
export interface ProcessHost {
  /** The clock's time in ms. */
  now(): number;
  /** Starts a timer; returns its cancel function. */
  startTimer(ms: number, fn: () => void, passive?: boolean): () => void;
  /** Holds the clock: the program waits on the simulator. */
  holdClock(): () => void;
  /** The error for `what` once the driver is closed, else `undefined`. */
  closedError(what: string): Error | undefined;
  /** Forgets an exited process. */
  forget(proc: SimulatedProcess): void;
  /** A start number no process of the machine has had: the next of an increasing count. */
  nextStart(): number;
}

/** How a process is seen from outside, as {@link SimulatedProcess}'s constructor takes it. @internal */
export interface ProcessLooks {
  /** Its command line. */
  command: string;
  /** Whether the caller may look at it. */
  inspectable: boolean;
  /** Whether it has libcuda mapped. */
  libcudaLoaded: boolean;
  /** Its parent's pid; 0 (the default) for none. */
  parent?: number;
  /** Its start number; a new one from its host (`nextStart`) when left out. */
  start?: number;
}

/**
 * A kernel launch: a Promise that resolves when the kernel has finished. Awaiting it (or calling
 * `then`, `catch` or `finally`) is waiting on the simulator, so virtual time moves until the kernel
 * ends; a launch nobody waits on lets time stand still, and never reports an unhandled rejection
 * when its process exits.
 */
class KernelLaunch extends Promise<void> {
  static override get [Symbol.species](): PromiseConstructor {
    return Promise;
  }

  /** Called the first time someone waits on the kernel. */
  onWait: (() => void) | undefined;

  override then<A = void, B = never>(
    onFulfilled?: ((value: void) => A | PromiseLike<A>) | null,
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    const wait = this.onWait;
    this.onWait = undefined;
    wait?.();
    return super.then(onFulfilled, onRejected);
  }
}

interface Kernel {
  settle(error?: Error): void;
  cancel?: () => void;
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
  /**
   * Its start number, which tells it from an earlier process with the same pid: what the host's
   * `identify` gives as the process's `start`, as Linux gives its start time. Every process the
   * machine starts gets a new one, larger than any before, also one that a snapshot restore
   * brings back with the pid it had (which the simulated machine otherwise never gives twice).
   */
  readonly start: number;
  /**
   * The id of the thread the driver restores it from (`getRestoreThreadId`): the driver's own
   * thread, never the main one. 0 for a process that never initialised CUDA (it has none).
   */
  readonly tid: number;
  /** All its thread ids, the main thread (= pid) first, the driver's last; any of them works as a pid. */
  readonly threads: readonly number[];
  /** Its GPU memory in MiB (its CUDA contexts not included). */
  readonly memoryMiB: number;
  /** Whether it ever initialised CUDA. */
  readonly usesCuda: boolean;
  /** @internal */
  readonly sim: ProcessHost;
  /** @internal the GPUs it has or had memory on */
  gpus: SimulatedGpu[];
  /** @internal */
  stateNumber: number = numberOfState(INITIAL_STATE);
  /** @internal */
  deviceMemory: MemoryImage | undefined;
  /** @internal */
  hostMemory: MemoryImage | undefined;
  /** @internal the state-changing operation under way, one at a time */
  busy: Operation | undefined;
  /** @internal virtual time at which the last kernel launched ends */
  kernelsUntil = 0;
  /** @internal the faults injected into its calls, waiting for them */
  readonly faultPlan: FaultPlan = new FaultPlan();
  /** @internal called when the process exits */
  exitListeners: Set<() => void> = new Set();
  /**
   * @internal the pages of its memory that {@link SimulatedProcess.write} has written: all that a
   * snapshot needs to save, the others being zero
   */
  writtenPages: Set<number> = new Set();
  #held: GpuNeeds = new Map();
  #exited = false;
  #runWaiters: Waiter[] = [];
  #kernels = new Set<Kernel>();
  #tail: Promise<void> = Promise.resolve();

  /** Its command line, as `/proc/PID/cmdline` gives it with spaces between the arguments. */
  readonly command: string;
  /** Whether the caller may look at it (`false`: another user's process, seen without privilege). */
  readonly inspectable: boolean;
  /** Whether it has the CUDA driver library mapped (every CUDA process has; others may). */
  readonly libcudaLoaded: boolean;
  #parent: number;

  /**
   * Its parent's pid: the live simulated process it was spawned (or restored) as a child of, or
   * 0 for none. When the parent exits, its children get 0, as Linux gives them to init.
   */
  get parent(): number {
    return this.#parent;
  }

  /** @internal its parent exited: it has none now */
  orphan(): void {
    this.#parent = 0;
  }

  /** @internal made by {@link SimulatedDriver.spawn}, which then claims its GPU memory */
  constructor(
    sim: ProcessHost,
    pid: number,
    threads: number[],
    memoryMiB: number,
    gpus: SimulatedGpu[],
    usesCuda: boolean,
    seen: ProcessLooks = {
      command: `simulated-process ${pid}`,
      inspectable: true,
      libcudaLoaded: usesCuda,
    },
  ) {
    this.command = seen.command;
    this.inspectable = seen.inspectable;
    this.libcudaLoaded = seen.libcudaLoaded;
    this.#parent = seen.parent ?? 0;
    this.start = seen.start ?? sim.nextStart();
    this.sim = sim;
    this.pid = pid;
    this.threads = threads;
    this.tid = usesCuda ? threads[threads.length - 1] : 0;
    this.memoryMiB = memoryMiB;
    this.gpus = gpus;
    this.usesCuda = usesCuda;
    if (usesCuda) this.deviceMemory = new MemoryImage(mibToBytes(memoryMiB));
  }

  /** Its checkpoint state by name. */
  get state(): ProcessState {
    return stateName(this.stateNumber) ?? "failed";
  }

  /** Whether it has exited. */
  get exited(): boolean {
    return this.#exited;
  }

  /** The UUIDs of the GPUs it runs on (or ran on, while checkpointed). */
  get gpuUuids(): string[] {
    return this.gpus.map((g) => g.uuid);
  }

  /**
   * The GPU memory it holds now, in MiB by GPU UUID, its CUDA context included, as NVML reports
   * it: nothing while checkpointed, after it exits, or for a process that never used CUDA.
   */
  get gpuMemoryMiB(): Record<string, number> {
    const held: Record<string, number> = {};
    for (const [g, mib] of this.#held) held[g.uuid] = mib;
    return held;
  }

  /** Where its GPU memory is now: on the GPU, in host memory (checkpointed), or nowhere. */
  get memoryLocation(): "gpu" | "host" | "none" {
    return this.deviceMemory ? "gpu" : this.hostMemory ? "host" : "none";
  }

  /**
   * Launches a kernel that runs for `ms` (of the simulator's time). Like a CUDA launch it returns
   * at once, and blocks first while the process is locked or checkpointed. The Promise resolves
   * when the kernel has finished, and rejects if the process exits first. Virtual time moves for
   * the kernel only while someone waits on it (awaits it) or on the driver; a launch nobody awaits
   * never reports an unhandled rejection.
   */
  launch(ms: number): Promise<void> {
    checkAmount(ms, "kernel duration (ms)");
    let resolve!: () => void, reject!: (e: Error) => void;
    const promise = new KernelLaunch((res, rej) => [resolve, reject] = [res, rej]);
    Promise.prototype.then.call(promise, undefined, () => {}); // handled: nobody has to wait
    let release: (() => void) | undefined;
    const kernel: Kernel = {
      settle: (error) => {
        if (!this.#kernels.delete(kernel)) return;
        kernel.cancel?.();
        release?.();
        if (error) reject(error);
        else resolve();
      },
    };
    promise.onWait = () => {
      if (this.#kernels.has(kernel)) release = this.sim.holdClock();
    };
    this.#kernels.add(kernel);
    const enqueue = () => {
      // Kernels on one stream run one after another.
      const now = this.sim.now();
      this.kernelsUntil = Math.max(now, this.kernelsUntil) + ms;
      kernel.cancel = this.sim.startTimer(this.kernelsUntil - now, () => {
        kernel.cancel = undefined;
        kernel.settle();
      }, true);
    };
    // Launched at once when the process runs, as a CUDA launch returns at once; else it blocks.
    if (this.#canRun()) enqueue();
    else this.#whenRunning("launch a kernel").then(enqueue, kernel.settle);
    return promise;
  }

  /** Writes `data` into its GPU memory at `offset` (a `cudaMemcpy`: blocks while not running). */
  write(offset: number, data: Uint8Array): Promise<void> {
    if (!(data instanceof Uint8Array)) {
      throw new TypeError(`data must be a Uint8Array, got ${describeValue(data)}`);
    }
    this.#checkBytes(offset, data.length);
    const copy = data.slice();
    return this.#whenRunning("write GPU memory").then(() => {
      this.deviceMemory!.write(offset, copy);
      const last = Math.floor((offset + copy.length - 1) / PAGE_SIZE);
      for (let page = Math.floor(offset / PAGE_SIZE); page <= last; page++) {
        this.writtenPages.add(page);
      }
    });
  }

  /** Reads its GPU memory (a `cudaMemcpy`: blocks while not running). */
  read(offset: number, length: number): Promise<Uint8Array> {
    this.#checkBytes(offset, length);
    return this.#whenRunning("read GPU memory").then(() => this.deviceMemory!.read(offset, length));
  }

  /**
   * The chunked SHA-256 of every byte of its GPU memory (zeros included), as 64 lowercase hex
   * digits, wherever the memory is held now (on the GPU or, checkpointed, in host memory): the
   * SHA-256 of the SHA-256s of its 1 MiB chunks, defined at `ChunkedSha256`, the same as
   * `chunkedSha256()` of what `read(0, memoryMiB * 2 ** 20)` returns, and as a `ChunkedSha256`
   * fed a real GPU's memory piece by piece. It is not the SHA-256 of the
   * bytes. An inspection for tests, not a CUDA call: it never waits for the process and takes no
   * simulated time. Its cost follows what was written, not the size: it hashes the chunks written
   * since the last call, plus 32 bytes per 1 MiB chunk (a few ms for 40 GiB with a few writes;
   * bench/digest.ts); memory written all over still costs a full pass, on the calling thread, the
   * first time. It rejects when the process has no GPU memory.
   */
  memoryChunkedSha256(): Promise<string> {
    const image = this.deviceMemory ?? this.hostMemory;
    if (!image) {
      return Promise.reject(
        new Error(`process ${this.pid} has no GPU memory (it never used CUDA, or it exited)`),
      );
    }
    return Promise.resolve(image.chunkedSha256());
  }

  // ---- faults: what a test can make go wrong (see mock/faults.ts) ----

  /**
   * Makes the next call of `op` on this process (or the `nth`) fail: it returns `fault.code` and
   * leaves the process in `fault.state` (unchanged when left out; `"failed"` is final). A code the
   * driver does not know is allowed, as a newer driver may return one. One fault waits per
   * operation: a new one for the same operation replaces it. The fault is kept in snapshots.
   *
   * @example
   * ```ts
   * import { CudaProcess, CUDA_ERROR_OUT_OF_MEMORY } from "@ckpt/cuda";
   * import { SimulatedDriver } from "@ckpt/cuda/mock";
   *
   * const sim = new SimulatedDriver();
   * const target = sim.spawn({ memoryMiB: 1024 });
   * target.failNext("checkpoint", { code: CUDA_ERROR_OUT_OF_MEMORY });
   * const proc = new CudaProcess(target.pid, { driver: sim });
   * await proc.suspend().catch((e) => console.log(e.message)); // "... Suspend unlocked the process again: it was left running"
   * target.failNext("restore", { code: 999, state: "failed", nth: 2 }); // the second restore from now
   * ```
   */
  failNext(op: FaultableOperation, fault: InjectedFault): void {
    this.#inject(checkFault("failNext", op, fault), "failNext");
  }

  /**
   * Makes the process exit during the next call of `op` (or the `nth`), `afterMs` into it (as the
   * call starts, by default; a call that would end sooner waits for the exit, as a lock waits on
   * a busy process): the call returns `CUDA_ERROR_OPERATING_SYSTEM` shortly after, its GPU memory
   * is freed, and its pid stops existing, as when a target is killed during a checkpoint or while
   * a lock waits on it.
   *
   * @example
   * ```ts
   * import { SimulatedDriver } from "@ckpt/cuda/mock";
   * const sim = new SimulatedDriver();
   * const target = sim.spawn({ memoryMiB: 4096 });
   * target.exitDuring("checkpoint", { afterMs: 150 });
   * await sim.lock(target.pid, null);
   * await sim.checkpoint(target.pid); // 304: CUDA_ERROR_OPERATING_SYSTEM, about 220 ms in
   * ```
   */
  exitDuring(op: FaultableOperation, options: ExitFault = {}): void {
    this.#inject(checkFault("exitDuring", op, options), "exitDuring");
  }

  /**
   * Makes the next call of `op` (or the `nth`) hang: it is under way, and holds up the calls on
   * this process that the driver serialises behind it, until the returned function releases it
   * (it then does what it would have done) or the process exits (it then returns
   * `CUDA_ERROR_OPERATING_SYSTEM`). Releasing before the call comes lets it through at once.
   * {@link SimulatedProcess.releaseHung} releases every held call (after a snapshot was loaded,
   * say). Virtual time does not move for a hung call: only other waits move it.
   *
   * @example
   * ```ts
   * import { SimulatedDriver } from "@ckpt/cuda/mock";
   * const sim = new SimulatedDriver();
   * const target = sim.spawn();
   * const release = target.hangNext("lock"); // a lock that never returns: a rank stuck in a kernel
   * const lock = sim.lock(target.pid, { timeoutMs: 0 });
   * await sim.sleep(60_000);
   * release();
   * await lock; // 0: CUDA_SUCCESS, a minute later
   * ```
   */
  hangNext(op: FaultableOperation, options: FaultTiming = {}): () => void {
    return this.#inject(checkFault("hangNext", op, options), "hangNext");
  }

  /**
   * Makes the next `getState` (or `getRestoreThreadId`), or the `nth`, answer `CUDA_SUCCESS` with
   * `answer.value` as its out-parameter: a process state number this package does not know (4
   * and 5 are CUDA 13.4's CHECKPOINTING and RESTORING), or another thread id.
   *
   * @example
   * ```ts
   * import { CudaProcess } from "@ckpt/cuda";
   * import { SimulatedDriver } from "@ckpt/cuda/mock";
   * const sim = new SimulatedDriver();
   * const target = sim.spawn();
   * target.answerNext("getState", { value: 5 });
   * await new CudaProcess(target.pid, { driver: sim }).state().catch((e) => console.log(e.message));
   * // "getState of process 4000 returned process state 5, which this version of @ckpt/cuda does not know ..."
   * ```
   */
  answerNext(op: QueryOperation, answer: AnswerFault): void {
    this.#inject(checkFault("answerNext", op, answer), "answerNext");
  }

  /**
   * Puts the process in the FAILED state now, as a failed checkpoint or restore can leave it for
   * good: every later lock, checkpoint, restore and unlock is refused with
   * `CUDA_ERROR_ILLEGAL_STATE`, and its CUDA work fails. Its memory stays where it is. Throws while
   * a call is under way on it (fail that call with `failNext(op, { code, state: "failed" })`).
   */
  enterFailedState(): void {
    this.#reachable("enterFailedState");
    if (this.busy) {
      throw new Error(
        `enterFailedState: process ${this.pid} has a ${this.busy} under way; use failNext(` +
          `${JSON.stringify(this.busy)}, { code, state: "failed" }) to make that call fail`,
      );
    }
    this.enter("failed");
    this.stopKernels(new Error(`process ${this.pid} entered the failed state`));
  }

  /** The faults waiting for their calls (one per operation at most), oldest operation first. */
  get pendingFaults(): PendingFault[] {
    return this.faultPlan.pending;
  }

  /** Forgets the faults waiting for their calls; calls already held by a hang stay held. */
  clearFaults(): void {
    this.faultPlan.clear();
  }

  /** Lets every call held by an injected hang go on; returns how many there were. */
  releaseHung(): number {
    return this.faultPlan.releaseAll();
  }

  #inject(fault: PendingFault, method: string): () => void {
    this.#reachable(method);
    return this.faultPlan.add(fault);
  }

  #reachable(method: string): void {
    if (this.#exited) {
      throw new Error(`${method}: process ${this.pid} has exited; no call can reach it any more`);
    }
    if (!this.usesCuda) {
      throw new Error(
        `${method}: process ${this.pid} never initialised CUDA; the driver answers ` +
          `CUDA_ERROR_NOT_INITIALIZED for it before any fault`,
      );
    }
  }

  /** Ends the process: its GPU memory is freed, calls under way fail, its pid stops existing. */
  exit(): void {
    if (this.#exited) return;
    this.#exited = true;
    this.release();
    this.deviceMemory = undefined;
    this.hostMemory = undefined;
    for (const fn of [...this.exitListeners]) fn();
    this.sim.forget(this);
    this.stopKernels(new Error(`process ${this.pid} exited before its kernel finished`));
  }

  /** @internal the next turn to act on this process: the driver serialises calls on a process */
  turn(): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((r) => release = r);
    const before = this.#tail;
    this.#tail = before.then(() => mine);
    return before.then(() => release);
  }

  /** @internal gives back every MiB it holds on GPUs */
  release(): void {
    for (const [g, mib] of this.#held) g.give(mib);
    this.#held = new Map();
  }

  /** @internal takes what `need` says (checked with {@link shortage} first) */
  claim(need: GpuNeeds): void {
    this.release();
    for (const [g, mib] of need) g.take(mib);
    this.#held = need;
  }

  /** @internal its GPU memory into host memory, freeing the GPU (what a checkpoint does) */
  moveToHost(): void {
    if (!this.deviceMemory) return;
    this.hostMemory = this.deviceMemory.copy();
    this.deviceMemory = undefined;
    this.release();
  }

  /** @internal its host memory back onto `gpus`, whose memory it has claimed (what a restore does) */
  moveToGpu(gpus: SimulatedGpu[]): void {
    if (!this.hostMemory) return;
    this.deviceMemory = this.hostMemory.copy();
    this.hostMemory = undefined;
    this.gpus = gpus;
  }

  /**
   * Whether the driver refuses every restore of this process: a restore of it ran out of GPU
   * memory, which on driver 580 leaves it reported checkpointed but never restorable again
   * (tests/gpu/reports/oom-probe-2xh200.txt). Cleared once it leaves the checkpointed state.
   */
  get restoreRefused(): boolean {
    return this.#restoreRefused;
  }
  #restoreRefused = false;

  /** @internal a restore of it ran out of memory */
  refuseRestores(): void {
    this.#restoreRefused = true;
  }

  /** @internal puts it in `state` (a step the state table allows, or an injected fault) */
  enter(state: ProcessState): void {
    this.stateNumber = numberOfState(state);
    if (!memoryOnHost(state)) this.#restoreRefused = false;
    this.wake();
  }

  /** @internal its kernels fail with `error` (the process exited, or the driver was closed) */
  stopKernels(error: Error): void {
    for (const k of [...this.#kernels]) k.settle(error);
    this.wake();
  }

  async #whenRunning(what: string): Promise<void> {
    for (;;) {
      const closed = this.sim.closedError(`${what} in process ${this.pid}`);
      if (closed) throw closed;
      if (!this.usesCuda) {
        throw new Error(`process ${this.pid} never initialised CUDA; cannot ${what}`);
      }
      if (this.#exited) throw new Error(`process ${this.pid} has exited; cannot ${what}`);
      if (isFinal(this.state)) {
        throw new Error(`process ${this.pid} is in the failed state; cannot ${what}`);
      }
      if (this.#canRun()) return;
      await new Promise<void>((resolve) => this.#runWaiters.push(resolve));
    }
  }

  /** @internal what it has under way (a call, a kernel, blocked CUDA work), or `undefined` */
  get pendingWork(): string | undefined {
    if (this.busy) return `a ${this.busy} under way`;
    if (this.#kernels.size > 0) return `${this.#kernels.size} kernel(s) not finished`;
    if (this.#runWaiters.length > 0) return "CUDA work waiting for it to run again";
    return undefined;
  }

  #canRun(): boolean {
    return this.usesCuda && !this.#exited && cudaRuns(this.state) &&
      this.busy !== "lock";
  }

  #checkBytes(offset: number, length: number): void {
    if (this.usesCuda) checkRange(mibToBytes(this.memoryMiB), offset, length);
  }

  /** @internal wakes blocked CUDA work to look again (after a state change, a failed lock, an exit) */
  wake(): void {
    const waiters = this.#runWaiters;
    this.#runWaiters = [];
    for (const w of waiters) w();
  }
}

/** The 16 bytes of a UUID as lowercase hex, for lookups. */
export function uuidKey(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
