// The native driver, written once for both runtimes: libcuda's checkpoint API behind the
// `CheckpointDriver` seam, on an `FfiAdapter`. It answers without a call where it can
// (a missing function, GPU pairs before driver 13.0, a pid no C `int` holds), calls `cuInit` once
// per process, and caps the calls in flight. It only reports codes: it rejects only when a call
// cannot be made (the driver closed, or the thread running it ended).

import process from "node:process";
import { C_FUNCTIONS, CHECKPOINT_FUNCTIONS, type DriverOperation } from "../core/driver.ts";
import { asError, driverError, messageOf } from "../core/errors.ts";
import { CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_SUPPORTED, CUDA_SUCCESS } from "../core/driver.ts";
import { CUDA_ERROR_OPERATING_SYSTEM, GPU_PAIRS_MIN_DRIVER_VERSION } from "../core/driver.ts";
import type { CheckpointDriver, DriverResult, GpuInfo } from "../core/driver.ts";
import type { LockArgs, RestoreArgs } from "../core/driver.ts";
import { checkFlag, checkInteger, checkName, formatGpuUuid, orElse } from "../core/options.ts";
import { Slots } from "../core/time.ts";
import type { FfiAdapter, FfiLibrary, NativeArg, NativeLink } from "./adapter.ts";
import { cText, nativeBuffer, readInt } from "./adapter.ts";
import { findLibcuda, openCandidate } from "./find.ts";
import { runtimeAdapter } from "./runtime.ts";
import { CUUUID_SIZE, encodeGpuPairs, encodeLockArgs, encodeRestoreArgs } from "./structs.ts";
import { RESTORE_ARGS_PAIRS_OFFSET } from "./structs.ts";
import { CUDA_SYMBOLS, type CudaSymbolName } from "./symbols.ts";

/** `CUDA_ERROR_STUB_LIBRARY`: every call of the toolkit's link-only stub `libcuda.so` fails so. */
export const CUDA_ERROR_STUB_LIBRARY = 34;

/** Options of `openMachine`'s driver: which libcuda, and how its calls are made. */
export interface NativeDriverOptions {
  /**
   * The libcuda to load; left out, `$CKPT_LIBCUDA_PATH`, else `libcuda.so.1` through the system
   * loader (never the current directory), else the usual driver locations.
   */
  libraryPath?: string;
  /**
   * How many calls that can wait (all but the version and the error names) run at once, each on a
   * thread of Deno's (24 at most: it has 32 for blocking work, its file operations among them) or
   * in one of Bun's workers; more wait their turn in order. 1 to 1024; 64 (restores gain from it).
   */
  maxWorkers?: number;
  /**
   * Make every call on the calling thread, which waits for the driver (on Bun no worker starts:
   * for a short program that makes one call, a command line). On Deno it changes nothing.
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
   * locked itself could not read them later). Rejects when the list cannot be read.
   */
  listGpus(): Promise<readonly GpuInfo[]>;
  /** Whether `listGpus` gives every GPU: `CUDA_VISIBLE_DEVICES` is not set (or unreadable). */
  readonly listsEveryGpu: boolean;
  /** Closes the library (and Bun's workers) once the calls made finish; later calls reject. */
  close(): void;
  /** {@link NativeDriver.close}, resolving once the calls in flight settled and all is let go. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What `cuInit` (its `CUresult`) and the GPU list (or why it could not be read) came to. */
type Initialization = { code: number; gpus: readonly GpuInfo[] | Error };
/** The drivers open on one library, and their one `cuInit` (see {@link libraryUses}). */
type LibraryUse = { drivers: number; init?: Promise<Initialization> };

/**
 * `cuInit` is per process: drivers on the same library share one call (and its GPU list). The
 * entry goes when the last driver on the library closes, as the library may be unloaded then.
 */
const libraryUses = new Map<string, LibraryUse>();

/** A library that opened, its absolute path and its version. */
type Opened = { lib: FfiLibrary<CudaSymbolName>; path: string; version: DriverResult };

/**
 * Finds libcuda ({@link NativeDriverOptions.libraryPath}; the toolkit's stub is passed over) and
 * opens it with `adapter`. A driver older than 570 opens too: its checkpoint calls answer
 * `CUDA_ERROR_NOT_SUPPORTED`. No thread starts until a call needs one.
 *
 * @throws {RangeError} when `maxWorkers` is not an integer from 1 to 1024; a TypeError when
 * `libraryPath` is not a non-empty string without NUL.
 * @throws {DriverLoadError} when libcuda cannot be found or opened.
 */
export function openLibcudaDriver(adapter: FfiAdapter, o: NativeDriverOptions = {}): LibcudaDriver {
  const maxWorkers = checkInteger(o.maxWorkers ?? 64, "maxWorkers", 1, 1024);
  if (o.libraryPath !== undefined) checkName(o.libraryPath, "libraryPath");
  const found = findLibcuda({
    tryOpen: (candidate): Opened => {
      const { lib, path } = openCandidate(adapter, candidate, CUDA_SYMBOLS);
      const out = nativeBuffer(4);
      const code = Number(lib.call({ symbol: "cuDriverGetVersion", args: [out] }));
      if (code === CUDA_ERROR_STUB_LIBRARY) {
        void lib.close();
        const stub = "this is the CUDA toolkit's stub library (cuDriverGetVersion fails with " +
          "CUDA_ERROR_STUB_LIBRARY), which only links; the driver's libcuda.so.1 is needed";
        throw new Error(stub);
      }
      return { lib, path, version: { code, value: code === CUDA_SUCCESS ? readInt(out) : 0 } };
    },
    libraryPath: o.libraryPath,
    getEnv: (name) => adapter.getEnv(name),
    platform: adapter.platform,
  });
  return new LibcudaDriver(adapter, found.library, maxWorkers);
}

/** {@link openLibcudaDriver} with the FFI of the current runtime (rejects where it has none). */
export async function openNativeDriver(options: NativeDriverOptions = {}): Promise<NativeDriver> {
  const callingThread = checkFlag(options.callingThread, "callingThread", false);
  return openLibcudaDriver(await runtimeAdapter({ callingThread }), options);
}

/** The native driver (see the module documentation), made by {@link openLibcudaDriver}. */
export class LibcudaDriver implements NativeDriver {
  /** `native (Deno)` or `native (Bun)`. */
  readonly kind: string;
  readonly libraryPath: string;
  readonly checkpointSupported: boolean;
  readonly missingFunctions: readonly string[];
  readonly listsEveryGpu: boolean;

  readonly #adapter: FfiAdapter;
  readonly #lib: FfiLibrary<CudaSymbolName>;
  readonly #version: DriverResult;
  readonly #use: LibraryUse;
  readonly #slots: Slots;
  /** Public calls not yet settled; the library is let go when this is 0 after close(). */
  #busy = 0;
  #closed = false;
  #released = false;
  readonly #done = Promise.withResolvers<void>();

  /** Use {@link openLibcudaDriver}. */
  constructor(adapter: FfiAdapter, opened: Opened, maxWorkers: number) {
    this.kind = adapter.kind;
    this.#adapter = adapter;
    ({ lib: this.#lib, version: this.#version, path: this.libraryPath } = opened);
    const missing = CHECKPOINT_FUNCTIONS.filter((name) => !opened.lib.present.has(name));
    this.missingFunctions = Object.freeze(missing);
    this.checkpointSupported = this.missingFunctions.length === 0;
    // CUDA_VISIBLE_DEVICES hides and renumbers GPUs, while a restore mapping must name them all.
    const visible = orElse(() => adapter.getEnv("CUDA_VISIBLE_DEVICES"), "unreadable: may be set");
    this.listsEveryGpu = visible === undefined;
    this.#slots = new Slots(Math.min(maxWorkers, adapter.mostAtOnce ?? maxWorkers));
    // A library that fails to close is reported to whoever awaits the disposal, and no one else.
    this.#done.promise.catch(() => {});
    this.#use = libraryUses.get(opened.path) ?? { drivers: 0 };
    libraryUses.set(opened.path, this.#use);
    this.#use.drivers++;
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
    return this.#query("getState", pid);
  }

  /** `cuCheckpointProcessGetRestoreThreadId`, off the main thread. */
  getRestoreThreadId(pid: number): Promise<DriverResult> {
    return this.#query("getRestoreThreadId", pid);
  }

  /** `cuCheckpointProcessLock` (`null`: NULL args); `cuInit` first where it locks this process. */
  lock(pid: number, args: LockArgs | null): Promise<number> {
    const self = pid === process.pid; // core locks itself by this pid, whatever id it was given
    return Promise.try(() => args === null ? null : encodeLockArgs(args))
      .then((buf) => this.#checkpointCall("lock", pid, [buf], self));
  }

  /** `cuCheckpointProcessCheckpoint` with NULL args. */
  checkpoint(pid: number): Promise<number> {
    return this.#checkpointCall("checkpoint", pid, [null]);
  }

  /**
   * `cuCheckpointProcessRestore`; `null` passes NULL args. Before driver 13.0 (580) the args
   * struct is all reserved: GPU pairs answer `CUDA_ERROR_NOT_SUPPORTED` without a call, and an
   * empty list is passed as NULL. `cuInit` comes first, once, as NVIDIA's header asks.
   */
  restore(pid: number, args: RestoreArgs | null): Promise<number> {
    const count = args?.gpuPairs.length ?? 0;
    const allowed = this.#version.code !== CUDA_SUCCESS ||
      this.#version.value >= GPU_PAIRS_MIN_DRIVER_VERSION;
    const bare = count > 0 ? CUDA_ERROR_NOT_SUPPORTED : null; // pairs it cannot take, or NULL
    if (args === null || !allowed) return this.#checkpointCall("restore", pid, [bare], true);
    // The pairs' address is filled in by the thread that makes the call.
    const pairs = encodeGpuPairs(args.gpuPairs), buf = encodeRestoreArgs(0n, count);
    const link = { arg: 1, offset: RESTORE_ARGS_PAIRS_OFFSET, target: pairs };
    return this.#checkpointCall("restore", pid, [buf, link], true);
  }

  /** `cuCheckpointProcessUnlock` with NULL args. */
  unlock(pid: number): Promise<number> {
    return this.#checkpointCall("unlock", pid, [null]);
  }

  /** `cuGetErrorName`, or `undefined` for a code the driver does not know (or once closed). */
  errorName(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorName");
  }

  /** `cuGetErrorString`, or `undefined` for a code the driver does not know (or once closed). */
  errorString(code: number): string | undefined {
    return this.#describe(code, "cuGetErrorString");
  }

  listGpus(): Promise<readonly GpuInfo[]> {
    return this.#span("listGpus", async () => {
      const { gpus } = await this.#initialize();
      if (gpus instanceof Error) throw gpus;
      return gpus;
    });
  }

  close(): void {
    this.#closed = true;
    this.#releaseIfIdle();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return this.#done.promise;
  }

  /** Runs a public call: rejects on a closed driver, holds the library open until it settles. */
  async #span<T>(operation: string, body: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new Error(`${operation}: this ${this.kind} driver has been closed`);
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
    if (--this.#use.drivers === 0) libraryUses.delete(this.libraryPath);
    this.#done.resolve(this.#lib.close());
  }

  /**
   * The checkpoint function of `operation`, `(int pid, T *arg)`, its pointer field linked if given.
   * Answers without a call: a pid no C `int` holds (`CUDA_ERROR_OPERATING_SYSTEM`, as the driver
   * answers for a pid no process has), a function the library lacks (`CUDA_ERROR_NOT_SUPPORTED`),
   * or `arg` given as a code.
   */
  #checkpointCall(
    operation: DriverOperation,
    pid: number,
    [arg, link]: [Uint8Array | null | number, NativeLink?],
    needsInit = false,
  ): Promise<number> {
    return this.#span(operation, async () => {
      if (!fitsCInt(pid)) return CUDA_ERROR_OPERATING_SYSTEM;
      if (!this.#lib.present.has(C_FUNCTIONS[operation])) return CUDA_ERROR_NOT_SUPPORTED;
      if (typeof arg === "number") return arg;
      try {
        if (needsInit) await this.#initialize();
        return await this.#offThread(C_FUNCTIONS[operation], [pid, arg], link);
      } catch (cause) {
        const why = `${operation} of process ${pid} could not finish: ${messageOf(cause)}`;
        throw new Error(why, { cause });
      }
    });
  }

  /** A checkpoint function with an `int` out-parameter. */
  async #query(operation: DriverOperation, pid: number): Promise<DriverResult> {
    const out = nativeBuffer(4);
    const code = await this.#checkpointCall(operation, pid, [out]);
    return { code, value: code === CUDA_SUCCESS ? readInt(out) : 0 };
  }

  /** A call that can wait, on another thread, when its turn comes. */
  #offThread(symbol: CudaSymbolName, args: NativeArg[], link?: NativeLink): Promise<number> {
    const call = { symbol, args, ...(link ? { links: [link] } : {}) };
    return this.#slots.run(() => this.#lib.callOffThread(call));
  }

  /**
   * `cuInit(0)` and the GPU list, once per library in this process. A failed `cuInit` (other than
   * "no device") is not kept, so a later call tries again.
   */
  #initialize(): Promise<Initialization> {
    const use = this.#use;
    if (use.init) return use.init;
    const init = use.init = (async (): Promise<Initialization> => {
      const code = await this.#offThread("cuInit", [0]);
      if (code === CUDA_ERROR_NO_DEVICE) return { code, gpus: Object.freeze([]) };
      if (code !== CUDA_SUCCESS) return { code, gpus: this.#failure("cuInit", code) };
      return { code, gpus: await this.#readGpus().catch(asError) };
    })();
    const forget = () => use.init === init && (use.init = undefined);
    const kept = (r: Initialization) => r.code === CUDA_SUCCESS || r.code === CUDA_ERROR_NO_DEVICE;
    init.then((r) => kept(r) || forget(), forget);
    return init;
  }

  /** The GPU list, through `cuDeviceGetUuid_v2` where the library has it, else the v1. */
  async #readGpus(): Promise<readonly GpuInfo[]> {
    const present = this.#lib.present;
    const uuidOf = present.has("cuDeviceGetUuid_v2") ? "cuDeviceGetUuid_v2" : "cuDeviceGetUuid";
    const needed = ["cuDeviceGetCount", "cuDeviceGet", uuidOf, "cuDeviceGetName"] as const;
    const missing = needed.filter((n) => !present.has(n));
    const lacks = `listGpus: this libcuda (${this.libraryPath}) lacks ${missing.join(", ")}`;
    if (missing.length > 0) throw new Error(lacks);
    const device = async (symbol: CudaSymbolName, args: NativeArg[]) => {
      const code = await this.#offThread(symbol, args);
      if (code !== CUDA_SUCCESS) throw this.#failure(symbol, code);
    };
    const count = nativeBuffer(4);
    await device("cuDeviceGetCount", [count]);
    const gpus: GpuInfo[] = [];
    for (let index = 0; index < readInt(count); index++) {
      const ordinal = nativeBuffer(4), uuid = nativeBuffer(CUUUID_SIZE);
      const name = nativeBuffer(256); // room for a name and its NUL (NVIDIA's tools use 256)
      await device("cuDeviceGet", [ordinal, index]);
      await device(uuidOf, [uuid, readInt(ordinal)]);
      await device("cuDeviceGetName", [name, name.length, readInt(ordinal)]);
      gpus.push(Object.freeze({ index, uuid: formatGpuUuid(uuid), name: cText(name) }));
    }
    return Object.freeze(gpus);
  }

  /** The error for a call made for the driver's own needs (cuInit, the device queries). */
  #failure(symbol: string, code: number): Error {
    return driverError(this, code, { operation: symbol, detail: "the GPUs could not be listed" });
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
const fitsCInt = (n: number) => Number.isInteger(n) && n >= -0x8000_0000 && n <= 0x7fff_ffff;
