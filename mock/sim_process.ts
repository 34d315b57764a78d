// A process of the simulated machine: its state, GPU memory, CUDA work and faults.

import { INITIAL_STATE, isFinal, memoryOnHost } from "../core/states.ts";
import { type ProcessState, stateName, stateNumber as numberOfState } from "../core/states.ts";
import { checkAmount, mustBe } from "../core/options.ts";
import type { IpcImport, NcclRank, ProcessFields } from "./fields.ts";
import type { AnswerFault, ExitFault, FaultTiming, InjectedFault, PendingFault } from "./faults.ts";
import { checkFault, type FaultableOperation, FaultPlan, type QueryOperation } from "./faults.ts";
import { checkRange, MemoryImage, type SavedPages } from "./memory.ts";
import type { SimulatedGpu } from "./sim_gpu.ts";
import { mibToBytes, type TimingModel } from "./timing.ts";
import type { CopyLink } from "./waits.ts";

/** The machine as its parts see it (documented there): none imports simulator.ts. @internal */
export interface MachineView {
  readonly gpus: readonly SimulatedGpu[];
  readonly version: number;
  readonly timing: TimingModel;
  readonly processes: readonly SimulatedProcess[];
  readonly nextStart: number;
  readonly disk: Readonly<Record<"dump" | "restore", CopyLink>>;
  now(): number;
  process(id: number): SimulatedProcess | undefined;
  tree(root: number): SimulatedProcess[] | undefined;
  adopt(proc: SimulatedProcess): SimulatedProcess;
  forget(proc: SimulatedProcess): void;
  startTimer(ms: number, fn: () => void, passive?: boolean): () => void;
  holdClock(): () => void;
  closedError(what: string): Error | undefined;
  waitOn<T>(what: string, work: () => Promise<T>): Promise<T>;
  instantly<T>(what: string, fn: () => T): Promise<T>;
}

/** A kernel launch: awaiting it (`onWait`, once) is waiting on the simulator, moving time. */
class KernelLaunch extends Promise<void> {
  static override get [Symbol.species](): PromiseConstructor {
    return Promise;
  }
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

type Kernel = { settle(error?: Error): void; cancel?: () => void };

/** A process of the simulated machine. Its CUDA work blocks while it is locked or checkpointed. */
export class SimulatedProcess {
  /** Its process id. */
  readonly pid: number;
  /** Its start number, larger than any before (a restored process gets a new one). */
  readonly start: number;
  /** Its restore thread (`getRestoreThreadId`): the driver's own, last; 0 without CUDA. */
  readonly tid: number;
  /** All its thread ids, the main thread (= pid) first, the driver's last; any works as a pid. */
  readonly threads: readonly number[];
  /** Its GPU memory in MiB (its CUDA contexts not included). */
  readonly memoryMiB: number;
  /** Whether it ever initialised CUDA. */
  readonly usesCuda: boolean;
  /** Its command line, as `/proc/PID/cmdline` gives it, spaces between the arguments. */
  readonly command: string;
  /** Whether the caller may look at it (`false`: another user's process). */
  readonly inspectable: boolean;
  /** Whether it has the CUDA driver library mapped (every CUDA process has; others may). */
  readonly libcudaLoaded: boolean;
  /** GPU memory it imported from another process (CUDA IPC), where it did. */
  readonly ipcImport: IpcImport | undefined;
  /** The NCCL rank it is, where it is one (`SpawnOptions.nccl`). */
  readonly nccl: NcclRank | undefined;
  /** A TCP socket it holds (criu dumps an established one only when told), where it holds one. */
  readonly tcp: "listening" | "established" | undefined;
  /** @internal the GPUs it has or had memory on */
  gpus: SimulatedGpu[];
  /** @internal */
  stateNumber: number = numberOfState(INITIAL_STATE);
  /** @internal the state-changing call under way */
  busy: string | undefined;
  /** @internal when its last kernel ends */
  kernelsUntil = 0;
  /** @internal */
  readonly faultPlan: FaultPlan = new FaultPlan();
  /** @internal */
  readonly exitListeners: Set<() => void> = new Set();
  readonly #machine: MachineView;
  /** Its GPU memory, wherever it is (`#on`); none without CUDA or once it exited. */
  #memory: MemoryImage | undefined;
  #on: "gpu" | "host" = "gpu";
  /** CUDA work waiting for it to run, or not done yet. */
  #queued = 0;
  #held = new Map<SimulatedGpu, number>();
  #parent: number;
  #exited = false;
  #stopped = false;
  #wakes = 0;
  #restoreRefused = false;
  #runWaiters: (() => void)[] = [];
  #kernels = new Set<Kernel>();
  /** The kernel launched last: a copy waits for it, as for every kernel before it (one stream). */
  #lastKernel: Promise<void> | undefined;
  #tail: Promise<void> = Promise.resolve();

  /** @internal running, its GPU memory all zero (not yet claimed) */
  constructor(machine: MachineView, made: ProcessFields & { gpus: SimulatedGpu[]; start: number }) {
    this.#machine = machine;
    ({ pid: this.pid, threads: this.threads, memoryMiB: this.memoryMiB, gpus: this.gpus } = made);
    ({ command: this.command, inspectable: this.inspectable, ipcImport: this.ipcImport } = made);
    ({ nccl: this.nccl, tcp: this.tcp, parent: this.#parent, start: this.start } = made);
    ({ cuda: this.usesCuda, libcuda: this.libcudaLoaded } = made);
    this.tid = made.cuda ? made.threads[made.threads.length - 1] : 0;
    if (made.cuda) this.#memory = new MemoryImage(mibToBytes(made.memoryMiB));
  }

  /** Its parent's pid, or 0 for none (also once the parent exited). */
  get parent(): number {
    return this.#parent;
  }

  /** Its checkpoint state by name. */
  get state(): ProcessState {
    return stateName(this.stateNumber) ?? "failed";
  }

  /** Whether it has exited. */
  get exited(): boolean {
    return this.#exited;
  }

  /**
   * Whether it is stopped (SIGSTOP) until `wake`: the driver then answers none of its calls but
   * `getRestoreThreadId`, each waiting till it runs again, a lock's timeout too (docs/DRIVER.md).
   */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** How often it was let go on after a stop (SIGCONT): its CPU time, as the host reads it. */
  get wakes(): number {
    return this.#wakes;
  }

  /** The UUIDs of the GPUs it runs on (or ran on, while checkpointed). */
  get gpuUuids(): string[] {
    return this.gpus.map((g) => g.uuid);
  }

  /** The GPU memory it holds now, MiB by GPU UUID, its CUDA context included (as NVML says). */
  get gpuMemoryMiB(): Record<string, number> {
    return Object.fromEntries([...this.#held].map(([g, mib]) => [g.uuid, mib]));
  }

  /** @internal whether it holds memory on `gpu` (a restore's, once claimed) */
  holdsOn = (gpu: SimulatedGpu): boolean => this.#held.has(gpu);

  /** Where its GPU memory is now: on the GPU, in host memory (checkpointed), or nowhere. */
  get memoryLocation(): "gpu" | "host" | "none" {
    return this.#memory ? this.#on : "none";
  }

  /** Whether the driver refuses every restore (580: after an importer's, or one out of memory). */
  get restoreRefused(): boolean {
    return this.#restoreRefused;
  }

  /**
   * Launches a kernel that runs for `ms` once the process runs, returning at once as a CUDA launch
   * does; resolves when it ends, rejects if the process exits first. Virtual time moves for it only
   * while someone awaits it; unawaited, it never reports an unhandled rejection. The simulator runs
   * no PTX: `writes` says what the kernel writes once it ends, `length` bytes at `at`, of which
   * `make(from, out)` puts those from `from` on in `out`, each 1 MiB only when it is first read,
   * hashed, saved or written over (so that 1 GiB filled costs nothing till then): the same bytes
   * every time.
   *
   * @example A kernel filling 1 GiB with the byte 7, made when read
   * ```ts
   * import { SimulatedMachine } from "@ckpt/cuda/mock";
   *
   * await using sim = new SimulatedMachine();
   * const proc = sim.spawn({ memoryMiB: 1024 });
   * await proc.launch(2, { at: 0, length: 2 ** 30, make: (_from, out) => void out.fill(7) });
   * ```
   */
  launch(
    ms: number,
    writes?: { at: number; length: number; make: (from: number, out: Uint8Array) => void },
  ): Promise<void> {
    checkAmount(ms, "kernel duration (ms)");
    if (writes) {
      const { at, length, make } = writes;
      if (typeof make !== "function") mustBe(TypeError, "writes.make", "a function", make);
      if (this.usesCuda) checkRange(mibToBytes(this.memoryMiB), at, length);
    }
    let resolve!: () => void, reject!: (e: Error) => void;
    const promise = new KernelLaunch((res, rej) => [resolve, reject] = [res, rej]);
    Promise.prototype.then.call(promise, undefined, () => {}); // handled: nobody has to wait
    let release: (() => void) | undefined;
    const kernel: Kernel = {
      settle: (error) => {
        if (!this.#kernels.delete(kernel)) return;
        kernel.cancel?.();
        release?.();
        try {
          if (!error && writes) this.#memory?.produce(writes.at, writes.length, writes.make);
        } catch (thrown) {
          error = thrown as Error; // make's own, for a launch's part of a chunk: made at its end
        }
        return error ? reject(error) : resolve();
      },
    };
    promise.onWait = () => {
      if (this.#kernels.has(kernel)) release = this.#machine.holdClock();
    };
    this.#kernels.add(kernel);
    this.#lastKernel = promise;
    const enqueue = () => {
      // Kernels on one stream run one after another.
      const now = this.#machine.now();
      this.kernelsUntil = Math.max(now, this.kernelsUntil) + ms;
      kernel.cancel = this.#machine.startTimer(this.kernelsUntil - now, kernel.settle, true);
    };
    if (this.#canRun()) enqueue();
    else this.#whenRunning("launch a kernel", enqueue).catch(kernel.settle);
    return promise;
  }

  /**
   * Writes `data` at `offset`, taken at the call (a `cudaMemcpy`: after the kernels launched before
   * it, and blocked while the process does not run).
   */
  write(offset: number, data: Uint8Array): Promise<void> {
    if (!(data instanceof Uint8Array)) mustBe(TypeError, "data", "a Uint8Array", data);
    if (this.usesCuda) checkRange(mibToBytes(this.memoryMiB), offset, data.length);
    const what = "write GPU memory";
    const ready = this.#queued === 0 && this.#kernels.size === 0 && this.#canRun();
    if (ready && !this.#machine.closedError(what)) {
      return new Promise((resolve) => resolve(this.#memory!.write(offset, data)));
    }
    const copy = data.slice();
    return this.#copy(what, () => this.#memory!.write(offset, copy));
  }

  /** Reads its GPU memory (a `cudaMemcpy`, as {@link write}). */
  read(offset: number, length: number): Promise<Uint8Array> {
    if (this.usesCuda) checkRange(mibToBytes(this.memoryMiB), offset, length);
    return this.#copy("read GPU memory", () => this.#memory!.read(offset, length));
  }

  /** A copy's `fn`, after the kernels launched before it, once the process runs. */
  #copy<T>(what: string, fn: () => T): Promise<T> {
    const run = () => this.#whenRunning(what, fn);
    return this.#kernels.size > 0 ? this.#lastKernel!.then(run, run) : run();
  }

  /** The chunked SHA-256 of its GPU memory, wherever it is; costs what was written since last. */
  memoryChunkedSha256(): Promise<string> {
    const gone = `process ${this.pid} exited, and its GPU memory with it (where a restore ` +
      `brought it back, \`machine.process(${this.pid})\` is the process it made)`;
    const never = `process ${this.pid} has no GPU memory: it never used CUDA`;
    if (this.#memory) return new Promise((resolve) => resolve(this.#memory!.chunkedSha256()));
    return Promise.reject(new Error(this.usesCuda && this.#exited ? gone : never));
  }

  /**
   * Makes the next call of `op` (or the `nth`) return `fault.code` (any) and leave the process in
   * `fault.state` (unchanged when left out). One fault waits per operation: a new one replaces it.
   */
  failNext(op: FaultableOperation, fault: InjectedFault): void {
    this.#inject(checkFault("failNext", op, fault), "failNext");
  }

  /** Makes the process exit `afterMs` into the next call of `op` (or the `nth`): ExitFault. */
  exitDuring(op: FaultableOperation, options: ExitFault = {}): void {
    this.#inject(checkFault("exitDuring", op, options), "exitDuring");
  }

  /**
   * Makes the next call of `op` (or the `nth`) hang, and the calls behind it, whatever a caller's
   * timeout, till the returned function releases it or the process exits (virtual time stands).
   */
  hangNext(op: FaultableOperation, options: FaultTiming = {}): () => void {
    return this.#inject(checkFault("hangNext", op, options), "hangNext");
  }

  /** Makes the next `op` (or the `nth`) answer `CUDA_SUCCESS` with `answer.value`. */
  answerNext(op: QueryOperation, answer: AnswerFault): void {
    this.#inject(checkFault("answerNext", op, answer), "answerNext");
  }

  /** Puts the process in the failed state for good; throws while a call is under way. */
  enterFailedState(): void {
    this.#reachable("enterFailedState");
    const use = `use failNext(${JSON.stringify(this.busy)}, { code, state: "failed" })`;
    const busy = `process ${this.pid} has a ${this.busy} under way; ${use} to make that call fail`;
    if (this.busy) throw new Error(`enterFailedState: ${busy}`);
    this.enter("failed");
    this.stopKernels(new Error(`process ${this.pid} entered the failed state`));
  }

  /** The faults waiting for their calls (one per operation at most). */
  get pendingFaults(): PendingFault[] {
    return this.faultPlan.pending;
  }

  /** Forgets the faults waiting for their calls; calls a hang holds stay held. */
  clearFaults(): void {
    this.faultPlan.clear();
  }

  /** Lets every call held by an injected hang go on; returns how many there were. */
  releaseHung(): number {
    return this.faultPlan.releaseAll();
  }

  /** Ends the process: its GPU memory is freed, calls under way fail, its pid stops existing. */
  exit(): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#stopped = false;
    this.release();
    this.#memory = undefined;
    for (const fn of [...this.exitListeners]) fn();
    this.#machine.forget(this);
    this.stopKernels(new Error(`process ${this.pid} exited before its kernel finished`));
  }

  /** @internal what makes it, as the state file and criu's images keep it */
  get fields(): ProcessFields {
    const { pid, parent, command, inspectable, memoryMiB, usesCuda: cuda, ipcImport, tcp } = this;
    const threads = [...this.threads], libcuda = this.libcudaLoaded, nccl = this.nccl;
    const more = { ...ipcImport && { ipcImport }, ...nccl && { nccl }, ...tcp && { tcp } };
    return { pid, parent, threads, command, cuda, libcuda, inspectable, memoryMiB, ...more };
  }

  /** @internal its parent exited: it has none now */
  orphan(): void {
    this.#parent = 0;
  }

  /** @internal stops it (SIGSTOP), or lets it go on (SIGCONT); nothing once it exited */
  setStopped(stopped: boolean): void {
    if (this.#exited) return;
    if (this.#stopped && !stopped) this.#wakes++;
    this.#stopped = stopped;
    if (!stopped) this.wake();
  }

  /** @internal resolves once it is not stopped: let go on, or exited */
  async running(): Promise<void> {
    while (this.#stopped) await new Promise<void>((resolve) => this.#runWaiters.push(resolve));
  }

  /** @internal the next turn to act on it: the driver serialises calls on a process */
  turn(): Promise<() => void> {
    const { promise: mine, resolve: release } = Promise.withResolvers<void>();
    const before = this.#tail;
    this.#tail = before.then(() => mine);
    return before.then(() => release);
  }

  /** @internal gives back every MiB it holds on GPUs */
  release(): void {
    for (const [g, mib] of this.#held) g.hold(-mib);
    this.#held = new Map();
  }

  /** @internal takes its memory and contexts on `gpus`, or says why they lack room */
  claimOn(gpus: readonly SimulatedGpu[]): string | undefined {
    // MiB on each GPU: its share of its memory plus a context (a GPU named twice needs both).
    const need = new Map<SimulatedGpu, number>(), each = this.memoryMiB / gpus.length;
    for (const g of gpus) need.set(g, (need.get(g) ?? 0) + each + g.contextMiB);
    const short = [...need].find(([g, mib]) => mib > g.freeMiB);
    if (short) {
      const [g, mib] = short;
      const times = gpus.filter((x) => x === g).length;
      const share = (this.memoryMiB * times) / gpus.length;
      const n = (x: number) => String(Math.round(x * 10) / 10);
      const memory = times === gpus.length
        ? `its ${n(share)} MiB of memory`
        : `${n(share)} MiB, its share of ${n(this.memoryMiB)} MiB of memory,`;
      return `GPU ${g.index} has ${n(g.freeMiB)} MiB free, too little for ${n(mib)} MiB more ` +
        `(${memory} and ${n(times * g.contextMiB)} MiB of CUDA context)`;
    }
    this.release();
    for (const [g, mib] of need) g.hold(mib);
    this.#held = need;
    return undefined;
  }

  /** @internal its memory's saved form */
  savedPages(): [number, Uint8Array][] {
    return this.#memory?.save() ?? [];
  }

  /** @internal its memory made of saved pages (`own`: see MemoryImage.load), on its GPUs or host */
  loadPages(on: "gpu" | "host", pages: SavedPages, own = false): void {
    this.#memory = MemoryImage.load(mibToBytes(this.memoryMiB), pages, own);
    this.#on = on;
  }

  /** @internal its memory moved into host memory, freeing the GPU (a checkpoint) */
  moveToHost(): void {
    if (this.memoryLocation !== "gpu") return;
    this.#on = "host";
    this.release();
  }

  /** @internal its memory moved onto `gpus`, claimed already (a restore) */
  moveToGpu(gpus: SimulatedGpu[]): void {
    if (this.memoryLocation !== "host") return;
    this.#on = "gpu";
    this.gpus = gpus;
  }

  /** @internal a restore of it ran out of memory, or failed for memory it imported */
  refuseRestores(): void {
    this.#restoreRefused = true;
  }

  /** @internal puts it in `state` */
  enter(state: ProcessState): void {
    this.stateNumber = numberOfState(state);
    if (!memoryOnHost(state)) this.#restoreRefused = false;
    this.wake();
  }

  /** @internal its kernels fail with `error` */
  stopKernels(error: Error): void {
    for (const k of [...this.#kernels]) k.settle(error);
    this.wake();
  }

  /** @internal wakes blocked CUDA work to look again */
  wake(): void {
    for (const w of this.#runWaiters.splice(0)) w();
  }

  /** @internal what it has under way, or `undefined` */
  get pendingWork(): string | undefined {
    if (this.busy) return `a ${this.busy} under way`;
    if (this.#kernels.size > 0) return `${this.#kernels.size} kernel(s) not finished`;
    return this.#runWaiters.length > 0 ? "CUDA work waiting for it to run again" : undefined;
  }

  #inject(fault: PendingFault, method: string): () => void {
    this.#reachable(method);
    return this.faultPlan.add(fault);
  }

  #reachable(method: string): void {
    const gone = "has exited; no call can reach it any more";
    const noCuda = "never initialised CUDA; the driver answers CUDA_ERROR_NOT_INITIALIZED for it";
    const why = this.#exited ? gone : this.usesCuda ? undefined : `${noCuda} before any fault`;
    if (why) throw new Error(`${method}: process ${this.pid} ${why}`);
  }

  /** `fn`'s result once the process runs, after the CUDA work queued before it. */
  async #whenRunning<T>(what: string, fn: () => T): Promise<T> {
    this.#queued++;
    try {
      for (;;) {
        const closed = this.#machine.closedError(`${what} in process ${this.pid}`);
        if (closed) throw closed;
        const cannot = !this.usesCuda
          ? "never initialised CUDA"
          : this.#exited
          ? "has exited"
          : isFinal(this.state)
          ? "is in the failed state"
          : undefined;
        if (cannot) throw new Error(`process ${this.pid} ${cannot}; cannot ${what}`);
        if (this.#canRun()) return fn();
        await new Promise<void>((resolve) => this.#runWaiters.push(resolve));
      }
    } finally {
      this.#queued--;
    }
  }

  #canRun(): boolean {
    return this.usesCuda && !this.#exited && this.state === "running" && this.busy !== "lock";
  }
}
