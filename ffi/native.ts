/**
 * The native driver, written once for both runtimes: libcuda's checkpoint API behind the
 * {@link CheckpointDriver} seam, on an {@link FfiAdapter} that supplies the runtime's FFI.
 *
 * It opens libcuda (`find.ts`; the toolkit's stub refused), gates calls (a missing checkpoint
 * function, or GPU pairs before driver 13.0, answer `CUDA_ERROR_NOT_SUPPORTED` without a call; a
 * pid no C `int` holds answers `CUDA_ERROR_OPERATING_SYSTEM`), calls `cuInit` once per process
 * before the first lock, restore or GPU list, caps the calls in flight, and closes. It only
 * reports codes: it rejects only when a call cannot be made (the driver was closed, or the thread
 * running the call ended).
 *
 * @module
 */

import { asError, driverError, messageOf } from "../core/errors.ts";
import {
  CUDA_ERROR_NO_DEVICE,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_SUCCESS,
  GPU_PAIRS_MIN_DRIVER_VERSION,
} from "../core/driver.ts";
import type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
import { checkFlag, checkInteger } from "../core/options.ts";
import {
  CUUUID_SIZE,
  encodeGpuPairs,
  encodeLockArgs,
  encodeRestoreArgs,
  RESTORE_ARGS_PAIRS_OFFSET,
} from "./structs.ts";
import { formatGpuUuid } from "../core/options.ts";
import { Slots } from "../core/time.ts";
import {
  cText,
  type FfiAdapter,
  type FfiLibrary,
  type NativeArg,
  nativeBuffer,
  type NativeCall,
  type NativeLink,
} from "./adapter.ts";
import { findLibcuda, openCandidate } from "./find.ts";
import { CHECKPOINT_SYMBOL_NAMES, CUDA_SYMBOLS, type CudaSymbolName } from "./symbols.ts";
import { runtimeAdapter } from "./runtime.ts";

/** `CUDA_ERROR_STUB_LIBRARY`: every call of the toolkit's link-only stub `libcuda.so` fails so. */
export const CUDA_ERROR_STUB_LIBRARY = 34;

/** How many calls that can wait one native driver runs at once, by default. */
const DEFAULT_MAX_WORKERS = 16;

/** Options of `openMachine`'s driver: which libcuda, and how its calls are made. */
export interface NativeDriverOptions {
  /**
   * The libcuda to load. Left out: the environment variable `CKPT_LIBCUDA_PATH`, else
   * `libcuda.so.1` through the system loader, else the usual driver locations. A relative path
   * (with a `/`) is made absolute against the current directory once; a bare name goes to the
   * system loader only, never the current directory.
   */
  libraryPath?: string;
  /**
   * How many calls that can wait (lock, checkpoint, restore, unlock, getState,
   * getRestoreThreadId, cuInit, the device queries) run at once; more wait their turn in order.
   * On Deno each runs on a thread of Deno's; on Bun it is the size of the worker pool. An integer
   * from 1 to 1024; 16 by default.
   */
  maxWorkers?: number;
  /**
   * Make every call on the calling thread, which waits until the driver answers (a lock with a
   * timeout or a checkpoint can take seconds, and nothing else of the program runs meanwhile). On
   * Bun no worker thread is started, which saves a worker's start-up: for a short program that
   * makes one call, such as a command line. On Deno it changes nothing. Default false.
   */
  callingThread?: boolean;
}

/** A {@link CheckpointDriver} backed by libcuda, with what it loaded and a way to let go of it. */
export interface NativeDriver extends CheckpointDriver {
  /** The absolute path of the library that opened (for `libcuda.so.1`, the loader's pick). */
  readonly libraryPath: string;
  /** Whether the library has all six checkpoint functions (driver 570, CUDA 12.8, or later). */
  readonly checkpointSupported: boolean;
  /** The C names of the checkpoint functions the library lacks (all six before driver 570). */
  readonly missingFunctions: readonly string[];
  /**
   * Every GPU the driver sees, by ordinal, read once right after `cuInit` (a process that has
   * locked itself could not read them later: its every CUDA call blocks). Rejects when the list
   * cannot be read.
   */
  listGpus(): Promise<readonly GpuInfo[]>;
  /**
   * Whether {@link NativeDriver.listGpus} gives every GPU of the machine: true when
   * `CUDA_VISIBLE_DEVICES` is not set for this process (on Deno an unreadable variable counts as
   * set), so that a GPU mapping can be checked before the call.
   */
  readonly listsEveryGpu: boolean;
  /**
   * Closes the library (and Bun's worker threads) once the calls already made finish; calls made
   * afterwards reject. Idempotent.
   */
  close(): void;
  /** {@link NativeDriver.close}, resolving once the calls in flight have settled and all is let go. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What `cuInit` (its `CUresult`) and the GPU list (or why it could not be read) came to. */
interface Initialization {
  readonly code: number;
  readonly gpus?: readonly GpuInfo[];
  readonly gpuError?: Error;
}

/** One library's use in this process: how many drivers have it open, and its `cuInit`. */
interface LibraryUse {
  drivers: number;
  init: Promise<Initialization> | undefined;
}

/**
 * `cuInit` is per process: drivers on the same library share one call (and its GPU list). The
 * entry goes when the last driver on the library closes, as the library may be unloaded then.
 */
const libraryUses = new Map<string, LibraryUse>();

/** A library that opened, its absolute path and its version. */
interface Opened {
  readonly lib: FfiLibrary<CudaSymbolName>;
  readonly path: string;
  readonly version: DriverResult;
}

/** Opens one candidate of the search; the CUDA toolkit's stub is refused, so the search goes on. */
function openLibcuda(adapter: FfiAdapter, candidate: string): Opened {
  const { lib, path } = openCandidate(adapter, candidate, CUDA_SYMBOLS);
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
 * Finds libcuda (see {@link NativeDriverOptions.libraryPath}) and opens it with `adapter`. A
 * driver older than 570 still opens: its checkpoint calls answer `CUDA_ERROR_NOT_SUPPORTED`. No
 * thread starts until a call needs one.
 *
 * @throws {RangeError} when `maxWorkers` is not an integer from 1 to 1024.
 * @throws {DriverLoadError} when libcuda cannot be found or opened.
 */
export function openLibcudaDriver(
  adapter: FfiAdapter,
  options: NativeDriverOptions = {},
): LibcudaDriver {
  const maxWorkers = options.maxWorkers === undefined
    ? DEFAULT_MAX_WORKERS
    : checkInteger(options.maxWorkers, "maxWorkers", 1, 1024);
  const found = findLibcuda({
    tryOpen: (candidate) => openLibcuda(adapter, candidate),
    libraryPath: options.libraryPath,
    getEnv: (name) => adapter.getEnv(name),
    platform: adapter.platform,
    runtime: adapter.runtime,
  });
  return new LibcudaDriver(adapter, found.library, maxWorkers);
}

/** {@link openLibcudaDriver} with the FFI of the current runtime (rejects where it has none). */
export async function openNativeDriver(options: NativeDriverOptions = {}): Promise<NativeDriver> {
  const callingThread = checkFlag(options.callingThread, "callingThread", false);
  return openLibcudaDriver(await runtimeAdapter({ callingThread }), options);
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

/** The native driver (see the module documentation), made by {@link openLibcudaDriver}. */
export class LibcudaDriver implements NativeDriver {
  /** `native (Deno)` or `native (Bun)`. */
  readonly kind: string;
  readonly libraryPath: string;
  readonly checkpointSupported: boolean;
  readonly missingFunctions: readonly string[];
  readonly listsEveryGpu: boolean;

  #adapter: FfiAdapter;
  #lib: FfiLibrary<CudaSymbolName>;
  #version: DriverResult;
  #use: LibraryUse;
  #slots: Slots;
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
    // CUDA_VISIBLE_DEVICES hides and renumbers GPUs, while a restore mapping must name them all.
    try {
      this.listsEveryGpu = adapter.getEnv("CUDA_VISIBLE_DEVICES") === undefined;
    } catch {
      this.listsEveryGpu = false; // unreadable: it may be set
    }
    this.#slots = new Slots(maxWorkers);
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

  /** `cuCheckpointProcessGetRestoreThreadId`, off the main thread. */
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
   * `cuCheckpointProcessRestore`; `null` passes NULL args. Before driver 13.0 (580) the args
   * struct is all reserved: GPU pairs answer `CUDA_ERROR_NOT_SUPPORTED` without a call, and an
   * empty list is passed as NULL. `cuInit` comes first, once, as NVIDIA's header asks.
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

  listGpus(): Promise<readonly GpuInfo[]> {
    return this.#span("listGpus", async () => {
      const init = await this.#initialize();
      if (init.gpus) return init.gpus;
      throw init.gpuError ?? new Error("listGpus: the GPUs could not be read");
    });
  }

  close(): void {
    this.#closed = true;
    this.#releaseIfIdle();
  }

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
        const why = messageOf(error);
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
    return this.#slots.run(async () => {
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
   * `cuInit(0)` and the GPU list, once per library in this process. A failed `cuInit` (other than
   * "no device") is not kept, so a later call tries again.
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
      return { code, gpuError: asError(error) };
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
      gpus.push(Object.freeze({ index, uuid: formatGpuUuid(uuid), name: cText(name) }));
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
