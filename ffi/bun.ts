/**
 * The native driver on Bun: libcuda through `bun:ffi`.
 *
 * `bun:ffi` has no optional symbols, so each checkpoint function is probed with a `dlopen` of its
 * own. Its calls are synchronous, one at a time per thread, so the long calls (lock, checkpoint,
 * restore, unlock) run in a small pool of worker threads (`bun_worker.ts`): one worker per call in
 * flight, created when first needed, up to a cap; further calls wait in a queue. Idle workers do not
 * keep the process alive. The quick calls (getState, getRestoreThreadId, the version, error names)
 * run synchronously on the calling thread.
 *
 * `bun:ffi` is imported through a variable so that Deno's checker and JSR never resolve `bun:`.
 *
 * @module
 */

import { CUDA_SUCCESS, GPU_PAIRS_MIN_DRIVER_VERSION } from "../core/codes.ts";
import type { DriverResult, LockArgs, RestoreArgs } from "../core/driver.ts";
import type { Operation } from "../core/errors.ts";
import { encodeGpuPairs, encodeLockArgs } from "../core/structs.ts";
import {
  type BunFfi,
  type BunLibrary,
  importBunFfi,
  type WorkerOperation,
  type WorkerReply,
  type WorkerRequest,
} from "./bun_types.ts";
import {
  checkPid,
  closedError,
  CUDA_ERROR_STUB_LIBRARY,
  gpuPairsError,
  missingSymbolError,
  type NativeDriver,
  type NativeDriverOptions,
} from "./common.ts";
import { findLibcuda } from "./find.ts";
import {
  BASE_SYMBOL_NAMES,
  bunDefinition,
  CHECKPOINT_SYMBOL_NAMES,
  type CudaSymbolName,
} from "./symbols.ts";

/** The most worker threads one Bun driver starts, by default. */
export const BUN_MAX_WORKERS = 16;

/** Options of {@link BunNativeDriver}. */
export interface BunNativeDriverOptions extends NativeDriverOptions {
  /** The most worker threads, hence calls running at once ({@link BUN_MAX_WORKERS} by default). */
  maxWorkers?: number;
}

/** A Worker as Bun has it: `ref`/`unref` decide whether it keeps the process alive. */
type RefWorker = Worker & { ref?(): void; unref?(): void };

/** A call waiting for, or running in, a worker. */
interface Job {
  request: WorkerRequest;
  resolve(code: number): void;
  reject(error: Error): void;
}

interface Slot {
  worker: RefWorker;
  job: Job | undefined;
}

/** The worker script, next to this module, with this module's extension (.ts, or .js once built). */
function workerUrl(): URL {
  return import.meta.url.endsWith(".js")
    ? new URL("./bun_worker.js", import.meta.url)
    : new URL("./bun_worker.ts", import.meta.url);
}

/** Worker threads, created as concurrency needs them, one call each at a time. */
class WorkerPool {
  #slots: Slot[] = [];
  #queue: Job[] = [];
  #max: number;
  #closing = false;

  constructor(max: number) {
    this.#max = max;
  }

  /** How many workers exist (for tests and reports). */
  get size(): number {
    return this.#slots.length;
  }

  run(request: WorkerRequest): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const job: Job = { request, resolve, reject };
      const idle = this.#slots.find((slot) => slot.job === undefined);
      if (idle) this.#start(idle, job);
      else if (this.#slots.length < this.#max) this.#start(this.#spawn(), job);
      else this.#queue.push(job);
    });
  }

  /** Ends idle workers now and busy ones when their call returns; queued calls still run. */
  close(): void {
    this.#closing = true;
    for (const slot of [...this.#slots]) {
      if (slot.job === undefined) this.#remove(slot);
    }
  }

  #spawn(): Slot {
    const worker: RefWorker = new Worker(workerUrl(), { type: "module" });
    const slot: Slot = { worker, job: undefined };
    worker.onmessage = (event: MessageEvent<WorkerReply>) => this.#reply(slot, event.data);
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      const job = slot.job;
      this.#remove(slot);
      job?.reject(new Error(`a Bun FFI worker failed: ${event.message}`));
      this.#next();
    };
    this.#slots.push(slot);
    return slot;
  }

  #start(slot: Slot, job: Job): void {
    slot.job = job;
    slot.worker.ref?.(); // a call in flight keeps the process alive, as a pending FFI call would
    slot.worker.postMessage(job.request);
  }

  #reply(slot: Slot, reply: WorkerReply): void {
    const job = slot.job;
    if (!job || job.request.id !== reply.id) return;
    slot.job = undefined;
    slot.worker.unref?.();
    if ("code" in reply) job.resolve(reply.code);
    else job.reject(new Error(`${job.request.symbol} could not be called: ${reply.error}`));
    const next = this.#queue.shift();
    if (next) this.#start(slot, next);
    else if (this.#closing) this.#remove(slot);
  }

  /** After a worker was lost: start the next queued call on a new one. */
  #next(): void {
    const next = this.#queue.shift();
    if (next) this.#start(this.#spawn(), next);
  }

  #remove(slot: Slot): void {
    const i = this.#slots.indexOf(slot);
    if (i >= 0) this.#slots.splice(i, 1);
    slot.worker.terminate();
  }
}

/** What the main thread opened: the base functions, and the checkpoint functions it has. */
interface Opened {
  base: BunLibrary;
  /** One library per checkpoint function present (each probed on its own). */
  checkpoint: Map<CudaSymbolName, BunLibrary>;
}

function openCandidate(ffi: BunFfi, path: string): Opened {
  const base = ffi.dlopen(
    path,
    Object.fromEntries(BASE_SYMBOL_NAMES.map((name) => [name, bunDefinition(name)])),
  );
  const version = new Int32Array(1);
  if (base.symbols.cuDriverGetVersion(version) === CUDA_ERROR_STUB_LIBRARY) {
    base.close();
    throw new Error(
      "this is the CUDA toolkit's stub library (cuDriverGetVersion fails with " +
        "CUDA_ERROR_STUB_LIBRARY), which only links; the driver's libcuda.so.1 is needed",
    );
  }
  const checkpoint = new Map<CudaSymbolName, BunLibrary>();
  for (const name of CHECKPOINT_SYMBOL_NAMES) {
    try {
      checkpoint.set(name, ffi.dlopen(path, { [name]: bunDefinition(name) }));
    } catch {
      // Absent: a driver older than 570. Reported when the function is called.
    }
  }
  return { base, checkpoint };
}

/** Reads the process environment, where there is one. */
function readEnv(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name];
}

/** The operating system, as Node and Bun name it. */
function platform(): string | undefined {
  return (globalThis as { process?: { platform?: string } }).process?.platform;
}

/**
 * The {@link CheckpointDriver} of libcuda on Bun.
 *
 * @example
 * ```ts ignore
 * import { BunNativeDriver } from "./bun.ts";
 * const driver = await BunNativeDriver.open();
 * await Promise.all([101, 102, 103].map((pid) => driver.lock(pid, { timeoutMs: 5000 })));
 * driver.close();
 * ```
 */
export class BunNativeDriver implements NativeDriver {
  /** What this driver is, for messages: `native (Bun)`. */
  readonly kind: string = "native (Bun)";
  /** The library path (or bare name) that opened. */
  readonly libraryPath: string;
  /** Whether all six checkpoint functions are present. */
  readonly checkpointSupported: boolean;

  #ffi: BunFfi;
  #opened: Opened;
  #version: DriverResult;
  #pool: WorkerPool;
  #nextId = 1;
  #closed = false;

  /**
   * Finds libcuda (see `findLibcuda`: `libraryPath`, then `CKPT_LIBCUDA_PATH`, then the system
   * loader, then the usual locations) and opens it. No worker starts until a call needs one.
   *
   * @throws {DriverLoadError} when it cannot be found or opened.
   */
  static async open(options: BunNativeDriverOptions = {}): Promise<BunNativeDriver> {
    const ffi = await importBunFfi();
    const found = findLibcuda({
      tryOpen: (path) => openCandidate(ffi, path),
      libraryPath: options.libraryPath,
      getEnv: readEnv,
      platform: platform(),
      runtime: "bun",
    });
    const max = options.maxWorkers ?? BUN_MAX_WORKERS;
    if (!Number.isInteger(max) || max < 1) {
      for (const lib of [found.library.base, ...found.library.checkpoint.values()]) lib.close();
      throw new RangeError(`maxWorkers must be a positive integer, got ${String(max)}`);
    }
    return new BunNativeDriver(ffi, found.library, found.path, max);
  }

  private constructor(ffi: BunFfi, opened: Opened, libraryPath: string, maxWorkers: number) {
    this.#ffi = ffi;
    this.#opened = opened;
    this.libraryPath = libraryPath;
    this.checkpointSupported = CHECKPOINT_SYMBOL_NAMES.every((name) => opened.checkpoint.has(name));
    this.#pool = new WorkerPool(maxWorkers);
    const out = new Int32Array(1);
    const code = opened.base.symbols.cuDriverGetVersion(out);
    this.#version = { code, value: code === CUDA_SUCCESS ? out[0] : 0 };
  }

  /** How many worker threads exist now (they start as concurrent calls need them). */
  get workerCount(): number {
    return this.#pool.size;
  }

  /** `cuDriverGetVersion`, read once when the library was opened. */
  driverVersion(): Promise<DriverResult> {
    if (this.#closed) return Promise.reject(closedError(this.kind, "driverVersion"));
    return Promise.resolve(this.#version);
  }

  /** `cuCheckpointProcessGetState`, synchronous (well under a millisecond) in a resolved Promise. */
  getState(pid: number): Promise<DriverResult> {
    return settle(() => this.#outParam("getState", pid, "cuCheckpointProcessGetState"));
  }

  /** `cuCheckpointProcessGetRestoreThreadId`, synchronous, in a resolved Promise. */
  getRestoreThreadId(pid: number): Promise<DriverResult> {
    return settle(() =>
      this.#outParam("getRestoreThreadId", pid, "cuCheckpointProcessGetRestoreThreadId")
    );
  }

  /** `cuCheckpointProcessLock` in a worker; `null` passes NULL args (no timeout). */
  lock(pid: number, args: LockArgs | null): Promise<number> {
    return this.#inWorker("lock", pid, "cuCheckpointProcessLock", () => ({
      args: args === null ? null : encodeLockArgs(args),
      pairs: null,
      pairCount: 0,
    }));
  }

  /** `cuCheckpointProcessCheckpoint` in a worker, with NULL args. */
  checkpoint(pid: number): Promise<number> {
    return this.#inWorker("checkpoint", pid, "cuCheckpointProcessCheckpoint", () => NO_ARGS);
  }

  /**
   * `cuCheckpointProcessRestore` in a worker; `null` passes NULL args. GPU pairs need driver 13.0
   * (580); before it the args struct is all reserved, so an empty list is passed as NULL there. The
   * worker calls `cuInit(0)` before its first lock or restore.
   */
  restore(pid: number, args: RestoreArgs | null): Promise<number> {
    return this.#inWorker("restore", pid, "cuCheckpointProcessRestore", () => {
      if (args === null) return NO_ARGS;
      const count = args.gpuPairs.length;
      const unsupported = gpuPairsError(pid, count, this.#version);
      if (unsupported) throw unsupported;
      const pairsAllowed = this.#version.code !== CUDA_SUCCESS ||
        this.#version.value >= GPU_PAIRS_MIN_DRIVER_VERSION;
      if (!pairsAllowed) return NO_ARGS;
      return { args: null, pairs: encodeGpuPairs(args.gpuPairs), pairCount: count };
    });
  }

  /** `cuCheckpointProcessUnlock` in a worker, with NULL args. */
  unlock(pid: number): Promise<number> {
    return this.#inWorker("unlock", pid, "cuCheckpointProcessUnlock", () => NO_ARGS);
  }

  /** `cuGetErrorName`, or `undefined` for a code the driver does not know (or a closed driver). */
  errorName(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorName");
  }

  /** `cuGetErrorString`, or `undefined` for a code the driver does not know (or a closed driver). */
  errorString(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorString");
  }

  /**
   * Closes the library on this thread and ends the workers: idle ones at once, busy ones when their
   * call returns (calls already made still run). Later calls reject.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pool.close();
    this.#opened.base.close();
    for (const lib of this.#opened.checkpoint.values()) lib.close();
  }

  #describe(code: number, symbol: "cuGetErrorName" | "cuGetErrorString"): string | undefined {
    if (this.#closed || !Number.isInteger(code) || code < -0x8000_0000 || code > 0x7fff_ffff) {
      return undefined;
    }
    const out = new BigUint64Array(1);
    if (this.#opened.base.symbols[symbol](code, out) !== CUDA_SUCCESS || out[0] === 0n) {
      return undefined;
    }
    return new this.#ffi.CString(Number(out[0])).toString();
  }

  /** Checks the pid and that the driver is open and has the function. */
  #check(operation: Operation, pid: number, name: CudaSymbolName): BunLibrary {
    checkPid(pid);
    if (this.#closed) throw closedError(this.kind, operation);
    const lib = this.#opened.checkpoint.get(name);
    if (!lib) throw missingSymbolError(operation, pid, name, this.#version);
    return lib;
  }

  /** A synchronous call with an `int` out-parameter. */
  #outParam(operation: Operation, pid: number, name: CudaSymbolName): DriverResult {
    const fn = this.#check(operation, pid, name).symbols[name];
    const out = new Int32Array(1);
    const code = fn(pid, out);
    return { code, value: code === CUDA_SUCCESS ? out[0] : 0 };
  }

  async #inWorker(
    operation: Operation,
    pid: number,
    symbol: WorkerOperation,
    buffers: () => Pick<WorkerRequest, "args" | "pairs" | "pairCount">,
  ): Promise<number> {
    this.#check(operation, pid, symbol);
    const request: WorkerRequest = {
      id: this.#nextId++,
      path: this.libraryPath,
      symbol,
      pid,
      ...buffers(),
    };
    return await this.#pool.run(request);
  }
}

/** The result of a synchronous function as a Promise: resolved with it, or rejected with its throw. */
function settle<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}

const NO_ARGS: Pick<WorkerRequest, "args" | "pairs" | "pairCount"> = {
  args: null,
  pairs: null,
  pairCount: 0,
};
