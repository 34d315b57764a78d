/**
 * The native driver, written once for both runtimes: libcuda's checkpoint API behind the
 * {@link CheckpointDriver} seam, on an {@link FfiAdapter} that supplies the runtime's FFI (Deno's
 * `Deno.dlopen`, Bun's `bun:ffi` with worker threads).
 *
 * What lives here: opening libcuda (the search of `find.ts`, the system loader asked for a bare
 * name, a relative path made absolute, the toolkit's stub refused), the driver version, error
 * names, gating (a missing checkpoint function or GPU pairs on a driver before 13.0 answer
 * `CUDA_ERROR_NOT_SUPPORTED` without a call; a pid that no C `int` holds answers
 * `CUDA_ERROR_OPERATING_SYSTEM`), `cuInit` once per process before the first lock, restore or GPU
 * list, the GPU list read right after it, a cap on the calls in flight, and closing.
 *
 * Drivers only report codes: this module throws no `CheckpointUnsupportedError` and no
 * `RangeError` for a pid. It rejects only when a call cannot be made at all: the driver was
 * closed, or the thread running the call ended.
 *
 * @module
 */

import { driverError } from "../core/errors.ts";
import {
  CUDA_ERROR_NO_DEVICE,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_SUCCESS,
  GPU_PAIRS_MIN_DRIVER_VERSION,
} from "../core/codes.ts";
import type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
import {
  CUUUID_SIZE,
  encodeGpuPairs,
  encodeLockArgs,
  encodeRestoreArgs,
  nativeBuffer,
  RESTORE_ARGS_PAIRS_OFFSET,
} from "../core/structs.ts";
import { formatGpuUuid } from "../core/uuid.ts";
import type { FfiAdapter, FfiLibrary, NativeArg, NativeCall, NativeLink } from "./adapter.ts";
import { findLibcuda } from "./find.ts";
import { absolutePath, askSystemLoader } from "./loader.ts";
import { CHECKPOINT_SYMBOL_NAMES, CUDA_SYMBOLS, type CudaSymbolName } from "./symbols.ts";

/** `CUDA_ERROR_STUB_LIBRARY`: every call of the toolkit's link-only stub `libcuda.so` fails so. */
export const CUDA_ERROR_STUB_LIBRARY = 34;

/** How many calls that can wait one native driver runs at once, by default. */
export const DEFAULT_MAX_WORKERS = 16;
/** The most {@link NativeDriverOptions.maxWorkers} may be. */
export const MAX_WORKERS_LIMIT = 1024;

/** Options of {@link openLibcudaDriver} (and `openNativeDriver`). */
export interface NativeDriverOptions {
  /**
   * The libcuda to load. Left out: the environment variable `CKPT_LIBCUDA_PATH`, else
   * `libcuda.so.1` through the system loader, else the usual driver locations. A path with a `/`
   * that is relative gets the current directory put in front of it once, when the driver opens;
   * a bare name (no `/`) is looked up by the system loader only, never in the current directory.
   */
  libraryPath?: string;
  /**
   * How many calls that can wait (lock, checkpoint, restore, unlock, getState,
   * getRestoreThreadId, cuInit, the device queries) run at once; more wait their turn in order.
   * On Deno each runs on a thread of Deno's; on Bun it is the size of the worker pool. An integer
   * from 1 to 1024; {@link DEFAULT_MAX_WORKERS} (16) by default.
   */
  maxWorkers?: number;
  /**
   * Make every call on the calling thread, which waits until the driver answers: a lock with a
   * timeout, a checkpoint, or a getState while another program checkpoints the process can take
   * seconds, and nothing else of the program runs meanwhile. On Bun no worker thread is started,
   * which saves a worker's start-up: for a short program that makes one call and has nothing
   * else to do, such as a command line. On Deno it changes nothing (its calls off the main thread
   * start no thread of this package's). Default false.
   */
  callingThread?: boolean;
}

/** Checks `callingThread`: a boolean where given. */
export function checkCallingThread(value: unknown): void {
  if (value !== undefined && typeof value !== "boolean") {
    throw new TypeError(
      `callingThread must be true or false, got ${
        typeof value === "string" ? JSON.stringify(value) : String(value)
      }`,
    );
  }
}

/** A {@link CheckpointDriver} backed by libcuda, with what it loaded and a way to let go of it. */
export interface NativeDriver extends CheckpointDriver {
  /**
   * The absolute path of the library that opened: the one given, made absolute, or the file the
   * system loader picked for `libcuda.so.1`.
   */
  readonly libraryPath: string;
  /** Whether the library has all six checkpoint functions (driver 570, CUDA 12.8, or later). */
  readonly checkpointSupported: boolean;
  /** The C names of the checkpoint functions the library lacks (all six before driver 570). */
  readonly missingFunctions: readonly string[];
  /**
   * Every GPU the driver sees, by ordinal: `cuDeviceGetCount`, `cuDeviceGet`,
   * `cuDeviceGetUuid_v2` (or `cuDeviceGetUuid`) and `cuDeviceGetName`, read once, right after
   * `cuInit` (a process that has locked itself could not read them later: every CUDA call of such
   * a process blocks). Rejects when the list cannot be read.
   */
  listGpus(): Promise<readonly GpuInfo[]>;
  /**
   * Whether {@link NativeDriver.listGpus} gives every GPU of the machine: true when
   * `CUDA_VISIBLE_DEVICES` is not set for this process (read when the driver opened; on Deno an
   * unreadable variable counts as set), so that a GPU mapping can be checked before the call.
   */
  readonly listsEveryGpu: boolean;
  /**
   * Closes the library (and, on Bun, its worker threads, each closing its own handles). Calls
   * made afterwards reject. Calls already made finish first: the library is let go when the last
   * of them settles. Idempotent.
   */
  close(): void;
  /** {@link NativeDriver.close}, resolving once the calls in flight have settled and all is let go. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What `cuInit` and the GPU list came to, for one library in this process. */
interface Initialization {
  /** `cuInit`'s `CUresult`. */
  readonly code: number;
  /** The GPUs, where they could be read. */
  readonly gpus?: readonly GpuInfo[];
  /** Why they could not. */
  readonly gpuError?: Error;
}

/** One library's use in this process: how many drivers have it open, and its `cuInit`. */
interface LibraryUse {
  drivers: number;
  init: Promise<Initialization> | undefined;
}

/**
 * `cuInit` is per process, not per driver or thread: drivers on the same library share one call
 * (and its GPU list). The entry goes when the last driver on the library closes, as the library
 * may be unloaded then.
 */
const libraryUses = new Map<string, LibraryUse>();

/** A library that opened, with its version. */
interface Opened {
  readonly lib: FfiLibrary<CudaSymbolName>;
  readonly path: string;
  readonly version: DriverResult;
}

/**
 * Opens one candidate of the search. A bare name is looked up by the system loader alone (see
 * `loader.ts`); a relative path gets the current directory in front. The CUDA toolkit's link-only stub is refused
 * (closed again, with a reason), so that the search goes on.
 */
function openCandidate(adapter: FfiAdapter, candidate: string): Opened {
  let path = absolutePath(candidate, candidate.startsWith("/") ? "/" : adapter.cwd());
  let located: ReturnType<typeof askSystemLoader> | undefined;
  if (!candidate.includes("/")) {
    try {
      located = askSystemLoader(adapter, candidate);
      path = located.path;
    } catch (error) {
      if (!adapter.bareNamesSafe) throw error;
      path = candidate; // Deno: its own dlopen searches as the system loader does, and only so.
    }
  }
  let lib: FfiLibrary<CudaSymbolName>;
  try {
    lib = adapter.open(path, CUDA_SYMBOLS);
  } finally {
    located?.release();
  }
  const out = nativeBuffer(4);
  const code = Number(lib.call({ symbol: "cuDriverGetVersion", args: [out] }));
  if (code === CUDA_ERROR_STUB_LIBRARY) {
    void lib.close();
    throw new Error(
      "this is the CUDA toolkit's stub library (cuDriverGetVersion fails with " +
        "CUDA_ERROR_STUB_LIBRARY), which only links; the driver's libcuda.so.1 is needed",
    );
  }
  return { lib, path, version: { code, value: code === CUDA_SUCCESS ? readInt(out) : 0 } };
}

/**
 * Whether this process's driver sees every GPU: `CUDA_VISIBLE_DEVICES` hides and renumbers GPUs
 * for `cuDeviceGet`, while a restore mapping must name every GPU of the machine.
 */
function seesEveryGpu(adapter: FfiAdapter): boolean {
  try {
    return adapter.getEnv("CUDA_VISIBLE_DEVICES") === undefined;
  } catch {
    return false; // unreadable: it may be set
  }
}

/** Checks `maxWorkers`; returns it, or the default. */
function checkMaxWorkers(value: unknown): number {
  if (value === undefined) return DEFAULT_MAX_WORKERS;
  if (
    typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_WORKERS_LIMIT
  ) {
    throw new RangeError(
      `maxWorkers must be an integer from 1 to ${MAX_WORKERS_LIMIT}, got ${
        typeof value === "string" ? JSON.stringify(value) : String(value)
      }`,
    );
  }
  return value;
}

/**
 * Finds libcuda (`libraryPath`, else `CKPT_LIBCUDA_PATH`, else the system loader, else the usual
 * locations; see `find.ts`) and opens it with the given runtime's FFI. No thread starts until a
 * call needs one.
 *
 * @throws {RangeError} when `maxWorkers` is not an integer from 1 to 1024.
 * @throws {DriverLoadError} when libcuda cannot be found or opened.
 */
export function openLibcudaDriver(
  adapter: FfiAdapter,
  options: NativeDriverOptions = {},
): LibcudaDriver {
  const maxWorkers = checkMaxWorkers(options.maxWorkers);
  checkCallingThread(options.callingThread);
  const found = findLibcuda({
    tryOpen: (candidate) => openCandidate(adapter, candidate),
    libraryPath: options.libraryPath,
    getEnv: (name) => adapter.getEnv(name),
    platform: adapter.platform,
    runtime: adapter.runtime,
  });
  return new LibcudaDriver(adapter, found.library, maxWorkers);
}

/** Calls in flight, at most `max` at once; the rest wait their turn in order. */
class Limiter {
  #free: number;
  #waiting: (() => void)[] = [];

  constructor(max: number) {
    this.#free = max;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}

/** The driver's GPU-listing functions, of which `cuDeviceGetUuid_v2` may stand for the v1. */
const DEVICE_SYMBOL_NAMES: readonly CudaSymbolName[] = [
  "cuDeviceGetCount",
  "cuDeviceGet",
  "cuDeviceGetUuid",
  "cuDeviceGetName",
];

/** Room for a GPU's name, with its NUL (NVIDIA's tools use 256). */
const GPU_NAME_SIZE = 256;

/**
 * The native driver: see the module documentation. Made by {@link openLibcudaDriver}.
 *
 * @example
 * ```ts ignore
 * import { openNativeDriver } from "./mod.ts";
 * await using driver = await openNativeDriver();
 * const { code, value } = await driver.getState(1234);
 * ```
 */
export class LibcudaDriver implements NativeDriver {
  /** `native (Deno)` or `native (Bun)`. */
  readonly kind: string;
  /** The absolute path of the library that opened (see {@link NativeDriver.libraryPath}). */
  readonly libraryPath: string;
  /** Whether all six checkpoint functions are present. */
  readonly checkpointSupported: boolean;
  /** The C names of the checkpoint functions the library lacks. */
  readonly missingFunctions: readonly string[];
  /** Whether {@link LibcudaDriver.listGpus} gives every GPU (see {@link NativeDriver.listsEveryGpu}). */
  readonly listsEveryGpu: boolean;

  #adapter: FfiAdapter;
  #lib: FfiLibrary<CudaSymbolName>;
  #version: DriverResult;
  #use: LibraryUse;
  #limiter: Limiter;
  /** Every call not yet settled, with its buffers: kept reachable until it settles. */
  #inFlight = new Set<NativeCall>();
  /** Public calls not yet settled; the library is let go when this is 0 after close(). */
  #busy = 0;
  #closed = false;
  #released = false;
  #done: Promise<void>;
  #finish!: (closing: Promise<void>) => void;

  /** Use {@link openLibcudaDriver}. */
  constructor(adapter: FfiAdapter, opened: Opened, maxWorkers: number) {
    this.kind = adapter.kind;
    this.#adapter = adapter;
    this.#lib = opened.lib;
    this.#version = opened.version;
    this.libraryPath = opened.path;
    this.missingFunctions = Object.freeze(
      CHECKPOINT_SYMBOL_NAMES.filter((name) => !opened.lib.present.has(name)),
    );
    this.checkpointSupported = this.missingFunctions.length === 0;
    this.listsEveryGpu = seesEveryGpu(adapter);
    this.#limiter = new Limiter(maxWorkers);
    this.#done = new Promise((resolve) => this.#finish = resolve);
    // A library that fails to close is reported to whoever awaits the disposal, and to no one else.
    this.#done.catch(() => {});
    let use = libraryUses.get(opened.path);
    if (!use) libraryUses.set(opened.path, use = { drivers: 0, init: undefined });
    use.drivers++;
    this.#use = use;
  }

  /** How many worker threads this driver keeps now (Bun; 0 on Deno, whose FFI has its own). */
  get workerCount(): number {
    return this.#lib.threadCount();
  }

  /** `cuDriverGetVersion`, read once when the library was opened. */
  driverVersion(): Promise<DriverResult> {
    return this.#span("driverVersion", () => Promise.resolve(this.#version));
  }

  /** `cuCheckpointProcessGetState`, off the main thread: it waits for a checkpoint in flight. */
  getState(pid: number): Promise<DriverResult> {
    return this.#query("getState", pid, "cuCheckpointProcessGetState");
  }

  /** `cuCheckpointProcessGetRestoreThreadId`, off the main thread; the value is a thread id. */
  getRestoreThreadId(pid: number): Promise<DriverResult> {
    return this.#query("getRestoreThreadId", pid, "cuCheckpointProcessGetRestoreThreadId");
  }

  /** `cuCheckpointProcessLock`; `null` passes NULL args (no timeout). `cuInit` comes first, once. */
  async lock(pid: number, args: LockArgs | null): Promise<number> {
    const buf = args === null ? null : encodeLockArgs(args);
    return await this.#checkpointCall("lock", pid, "cuCheckpointProcessLock", buf, true);
  }

  /** `cuCheckpointProcessCheckpoint` with NULL args. */
  checkpoint(pid: number): Promise<number> {
    return this.#checkpointCall("checkpoint", pid, "cuCheckpointProcessCheckpoint", null, false);
  }

  /**
   * `cuCheckpointProcessRestore`; `null` passes NULL args. GPU pairs need driver 13.0 (580): before
   * it the args struct is all reserved, so pairs answer `CUDA_ERROR_NOT_SUPPORTED` without a call
   * and an empty list is passed as NULL. `cuInit` comes first, once, as NVIDIA's header asks of
   * the process that restores.
   */
  async restore(pid: number, args: RestoreArgs | null): Promise<number> {
    const count = args?.gpuPairs.length ?? 0;
    let arg: Uint8Array | null | number = null;
    let links: NativeLink[] | undefined;
    if (args !== null && this.#pairsAllowed()) {
      const pairs = encodeGpuPairs(args.gpuPairs);
      arg = encodeRestoreArgs(0n, count);
      links = [{ arg: 1, offset: RESTORE_ARGS_PAIRS_OFFSET, target: pairs }];
    } else if (count > 0) {
      arg = CUDA_ERROR_NOT_SUPPORTED;
    }
    return await this.#checkpointCall(
      "restore",
      pid,
      "cuCheckpointProcessRestore",
      arg,
      true,
      links,
    );
  }

  /** `cuCheckpointProcessUnlock` with NULL args. */
  unlock(pid: number): Promise<number> {
    return this.#checkpointCall("unlock", pid, "cuCheckpointProcessUnlock", null, false);
  }

  /** `cuGetErrorName`, or `undefined` for a code the driver does not know (or a closed driver). */
  errorName(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorName");
  }

  /** `cuGetErrorString`, or `undefined` for a code the driver does not know (or a closed driver). */
  errorString(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorString");
  }

  /** Every GPU the driver sees (see {@link NativeDriver.listGpus}). */
  listGpus(): Promise<readonly GpuInfo[]> {
    return this.#span("listGpus", async () => {
      const init = await this.#initialize();
      if (init.gpus) return init.gpus;
      throw init.gpuError ?? new Error("listGpus: the GPUs could not be read");
    });
  }

  /** Closes the driver (see {@link NativeDriver.close}). */
  close(): void {
    this.#closed = true;
    this.#releaseIfIdle();
  }

  /** Closes the driver and resolves once the calls in flight have settled and all is let go. */
  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return this.#done;
  }

  /** Runs a public call: rejects on a closed driver, and holds the library open until it settles. */
  async #span<T>(operation: string, body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new Error(`${operation}: this ${this.kind} driver has been closed`);
    }
    this.#busy++;
    try {
      return await body();
    } finally {
      this.#busy--;
      this.#releaseIfIdle();
    }
  }

  #releaseIfIdle(): void {
    if (!this.#closed || this.#busy > 0 || this.#released) return;
    this.#released = true;
    if (--this.#use.drivers === 0 && libraryUses.get(this.libraryPath) === this.#use) {
      libraryUses.delete(this.libraryPath);
    }
    this.#finish(this.#lib.close());
  }

  /**
   * A checkpoint function with `(int pid, T *arg)`. Answers without a call: a pid no C `int` holds
   * (`CUDA_ERROR_OPERATING_SYSTEM`, as the driver answers for a pid no process has), a function the
   * library lacks (`CUDA_ERROR_NOT_SUPPORTED`), or `arg` given as a code.
   */
  #checkpointCall(
    operation: string,
    pid: number,
    symbol: CudaSymbolName,
    arg: Uint8Array | null | number,
    needsInit: boolean,
    links?: readonly NativeLink[],
  ): Promise<number> {
    return this.#span(operation, async () => {
      if (!fitsCInt(pid)) return CUDA_ERROR_OPERATING_SYSTEM;
      if (!this.#lib.present.has(symbol)) return CUDA_ERROR_NOT_SUPPORTED;
      if (typeof arg === "number") return arg;
      try {
        if (needsInit) await this.#initialize();
        return await this.#offThread({ symbol, args: [pid, arg], links });
      } catch (error) {
        const why = error instanceof Error ? error.message : String(error);
        throw new Error(`${operation} of process ${pid} could not finish: ${why}`, {
          cause: error,
        });
      }
    });
  }

  /** A checkpoint function with an `int` out-parameter. */
  async #query(operation: string, pid: number, symbol: CudaSymbolName): Promise<DriverResult> {
    const out = nativeBuffer(4);
    const code = await this.#checkpointCall(operation, pid, symbol, out, false);
    return { code, value: code === CUDA_SUCCESS ? readInt(out) : 0 };
  }

  /** A call that can wait, on another thread, when its turn comes. */
  #offThread(call: NativeCall<CudaSymbolName>): Promise<number> {
    return this.#limiter.run(async () => {
      this.#inFlight.add(call);
      try {
        return await this.#lib.callOffThread(call);
      } finally {
        this.#inFlight.delete(call);
      }
    });
  }

  #pairsAllowed(): boolean {
    return this.#version.code !== CUDA_SUCCESS ||
      this.#version.value >= GPU_PAIRS_MIN_DRIVER_VERSION;
  }

  /**
   * `cuInit(0)` and the GPU list, once per library in this process, before the first lock,
   * restore or listGpus. A failed `cuInit` (other than "no device") is not kept, so a later call
   * tries again.
   */
  #initialize(): Promise<Initialization> {
    const use = this.#use;
    if (use.init === undefined) {
      const init = this.#runInit();
      use.init = init;
      const forget = () => {
        if (use.init === init) use.init = undefined;
      };
      init.then((result) => {
        if (result.code !== CUDA_SUCCESS && result.code !== CUDA_ERROR_NO_DEVICE) forget();
      }, forget);
    }
    return use.init;
  }

  async #runInit(): Promise<Initialization> {
    const code = await this.#offThread({ symbol: "cuInit", args: [0] });
    if (code === CUDA_ERROR_NO_DEVICE) return { code, gpus: Object.freeze([]) };
    if (code !== CUDA_SUCCESS) return { code, gpuError: this.#failure("cuInit", code) };
    try {
      return { code, gpus: await this.#readGpus() };
    } catch (error) {
      return { code, gpuError: error instanceof Error ? error : new Error(String(error)) };
    }
  }

  async #readGpus(): Promise<readonly GpuInfo[]> {
    const present = this.#lib.present;
    const missing = DEVICE_SYMBOL_NAMES.filter((name) =>
      !present.has(name) && !(name === "cuDeviceGetUuid" && present.has("cuDeviceGetUuid_v2"))
    );
    if (missing.length > 0) {
      throw new Error(`listGpus: this libcuda (${this.libraryPath}) lacks ${missing.join(", ")}`);
    }
    const uuidSymbol = present.has("cuDeviceGetUuid_v2") ? "cuDeviceGetUuid_v2" : "cuDeviceGetUuid";
    const count = nativeBuffer(4);
    await this.#device("cuDeviceGetCount", [count]);
    const gpus: GpuInfo[] = [];
    for (let index = 0; index < readInt(count); index++) {
      const device = nativeBuffer(4);
      await this.#device("cuDeviceGet", [device, index]);
      const uuid = nativeBuffer(CUUUID_SIZE);
      await this.#device(uuidSymbol, [uuid, readInt(device)]);
      const name = nativeBuffer(GPU_NAME_SIZE);
      await this.#device("cuDeviceGetName", [name, GPU_NAME_SIZE, readInt(device)]);
      const end = name.indexOf(0);
      gpus.push(Object.freeze({
        index,
        uuid: formatGpuUuid(uuid),
        name: new TextDecoder().decode(name.subarray(0, end < 0 ? name.length : end)),
      }));
    }
    return Object.freeze(gpus);
  }

  /** A device query; throws when it fails. */
  async #device(symbol: CudaSymbolName, args: NativeArg[]): Promise<void> {
    const code = await this.#offThread({ symbol, args });
    if (code !== CUDA_SUCCESS) throw this.#failure(symbol, code);
  }

  /** The error for a call made for the driver's own needs (cuInit, the device queries). */
  #failure(symbol: string, code: number): Error {
    return driverError(this, code, { operation: symbol, detail: "the GPUs could not be listed" })!;
  }

  #describe(code: number, symbol: "cuGetErrorName" | "cuGetErrorString"): string | undefined {
    if (this.#closed || !fitsCInt(code)) return undefined;
    const out = nativeBuffer(8);
    if (Number(this.#lib.call({ symbol, args: [code, out] })) !== CUDA_SUCCESS) return undefined;
    const address = new DataView(out.buffer).getBigUint64(0, true);
    return address === 0n ? undefined : this.#adapter.cString(address);
  }
}

/** Whether a value is an integer that a C `int` holds exactly (anything else would be wrapped). */
function fitsCInt(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= -0x8000_0000 &&
    value <= 0x7fff_ffff;
}

/** The C `int` at the start of a buffer. */
function readInt(buf: Uint8Array): number {
  return new DataView(buf.buffer, buf.byteOffset).getInt32(0, true);
}
