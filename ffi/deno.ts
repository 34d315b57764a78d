/**
 * The native driver on Deno: libcuda through `Deno.dlopen`. The checkpoint functions are optional
 * symbols (a driver older than 570 lacks them) and nonblocking: each call runs on a thread of its
 * own, so several processes can be checkpointed at once and the event loop keeps running.
 *
 * Needs `--allow-ffi` (and `--allow-env=CKPT_LIBCUDA_PATH` for the environment variable to count).
 *
 * @module
 */

import { CUDA_SUCCESS, GPU_PAIRS_MIN_DRIVER_VERSION } from "../core/codes.ts";
import type { DriverResult, LockArgs, RestoreArgs } from "../core/driver.ts";
import type { Operation } from "../core/errors.ts";
import { encodeGpuPairs, encodeLockArgs, encodeRestoreArgs } from "../core/structs.ts";
import {
  checkPid,
  closedError,
  CUDA_ERROR_STUB_LIBRARY,
  gpuPairsError,
  missingSymbolError,
  type NativeDriver,
  type NativeDriverOptions,
  pinnedCopy,
} from "./common.ts";
import { findLibcuda } from "./find.ts";
import { CHECKPOINT_SYMBOL_NAMES, CUDA_SYMBOLS, type CudaSymbolName } from "./symbols.ts";

/** The table as `Deno.dlopen` takes it; `satisfies` checks it against Deno's own FFI types. */
const SYMBOLS = CUDA_SYMBOLS satisfies Deno.ForeignLibraryInterface;

type Library = Deno.DynamicLibrary<typeof SYMBOLS>;
type Symbols = Library["symbols"];

/**
 * The checkpoint symbols again, synchronous, to tell which exist. Deno 2.9.6 gives a missing
 * symbol that is both `optional` and `nonblocking` as a function that throws "Invalid FFI symbol
 * name" when called, not as `null`; a synchronous optional symbol is `null` as documented.
 */
const PROBE: Deno.ForeignLibraryInterface = Object.fromEntries(
  CHECKPOINT_SYMBOL_NAMES.map((name) => {
    const { parameters, result } = CUDA_SYMBOLS[name];
    return [name, { parameters, result, optional: true }];
  }),
);

/** An opened libcuda and which of the checkpoint symbols it has. */
interface Opened {
  lib: Library;
  present: ReadonlySet<CudaSymbolName>;
}

/** Opens one candidate; rejects the CUDA toolkit's link-only stub so the search goes on. */
function openCandidate(path: string): Opened {
  const lib = Deno.dlopen(path, SYMBOLS);
  const version = new Int32Array(1);
  if (lib.symbols.cuDriverGetVersion(version) === CUDA_ERROR_STUB_LIBRARY) {
    lib.close();
    throw new Error(
      "this is the CUDA toolkit's stub library (cuDriverGetVersion fails with " +
        "CUDA_ERROR_STUB_LIBRARY), which only links; the driver's libcuda.so.1 is needed",
    );
  }
  const present = new Set<CudaSymbolName>();
  try {
    const probe = Deno.dlopen(path, PROBE);
    for (const name of CHECKPOINT_SYMBOL_NAMES) {
      if (probe.symbols[name] !== null) present.add(name);
    }
    probe.close();
  } catch (error) {
    lib.close();
    throw error;
  }
  return { lib, present };
}

/**
 * Reads an environment variable only where permission is already granted, so that an optional
 * variable never triggers a permission prompt; otherwise throws `NotCapable` (counted as not set).
 */
function readEnv(name: string): string | undefined {
  const status = Deno.permissions.querySync({ name: "env", variable: name });
  if (status.state !== "granted") {
    throw new Deno.errors.NotCapable(`no permission to read ${name}`);
  }
  return Deno.env.get(name);
}

/** The address of a buffer, for a pointer field of a struct. */
function addressOf(buf: Uint8Array): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(buf)));
}

/**
 * The {@link CheckpointDriver} of libcuda on Deno.
 *
 * @example
 * ```ts ignore
 * import { DenoNativeDriver } from "./deno.ts";
 * const driver = DenoNativeDriver.open(); // finds libcuda; needs --allow-ffi
 * const { code, value } = await driver.getState(1234);
 * driver.close();
 * ```
 */
export class DenoNativeDriver implements NativeDriver {
  /** What this driver is, for messages: `native (Deno)`. */
  readonly kind: string = "native (Deno)";
  /** The library path (or bare name) that opened. */
  readonly libraryPath: string;
  /** Whether all six checkpoint functions are present. */
  readonly checkpointSupported: boolean;

  #lib: Library;
  #symbols: Symbols;
  #present: ReadonlySet<CudaSymbolName>;
  #version: DriverResult;
  /** Every buffer handed to a call that has not settled yet: kept reachable until it does. */
  #inFlight = new Set<ArrayBufferView>();
  #running = 0;
  #closed = false;
  #unloaded = false;
  #init: Promise<number> | undefined;

  /**
   * Finds libcuda (see `findLibcuda`: `libraryPath`, then `CKPT_LIBCUDA_PATH`, then the system
   * loader, then the usual locations) and opens it.
   *
   * @throws {DriverLoadError} when it cannot be found or opened, or `--allow-ffi` is missing.
   */
  static open(options: NativeDriverOptions = {}): DenoNativeDriver {
    const found = findLibcuda({
      tryOpen: openCandidate,
      libraryPath: options.libraryPath,
      getEnv: readEnv,
      platform: Deno.build.os,
      runtime: "deno",
    });
    return new DenoNativeDriver(found.library, found.path);
  }

  private constructor(opened: Opened, libraryPath: string) {
    this.#lib = opened.lib;
    this.#symbols = opened.lib.symbols;
    this.#present = opened.present;
    this.libraryPath = libraryPath;
    this.checkpointSupported = CHECKPOINT_SYMBOL_NAMES.every((name) => opened.present.has(name));
    const out = new Int32Array(1);
    const code = this.#symbols.cuDriverGetVersion(out);
    this.#version = { code, value: code === CUDA_SUCCESS ? out[0] : 0 };
  }

  /** `cuDriverGetVersion`, read once when the library was opened. */
  driverVersion(): Promise<DriverResult> {
    if (this.#closed) return Promise.reject(closedError(this.kind, "driverVersion"));
    return Promise.resolve(this.#version);
  }

  /** `cuCheckpointProcessGetState` (nonblocking); the value is a `CUprocessState` number. */
  async getState(pid: number): Promise<DriverResult> {
    const fn = this.#checkpointSymbol("getState", pid, "cuCheckpointProcessGetState");
    const out = new Int32Array(1);
    const code = await this.#track([out], () => fn(pid, out));
    return { code, value: code === CUDA_SUCCESS ? out[0] : 0 };
  }

  /** `cuCheckpointProcessGetRestoreThreadId` (nonblocking); the value is a thread id. */
  async getRestoreThreadId(pid: number): Promise<DriverResult> {
    const fn = this.#checkpointSymbol(
      "getRestoreThreadId",
      pid,
      "cuCheckpointProcessGetRestoreThreadId",
    );
    const out = new Int32Array(1);
    const code = await this.#track([out], () => fn(pid, out));
    return { code, value: code === CUDA_SUCCESS ? out[0] : 0 };
  }

  /** `cuCheckpointProcessLock`; `null` passes NULL args (no timeout). */
  async lock(pid: number, args: LockArgs | null): Promise<number> {
    const fn = this.#checkpointSymbol("lock", pid, "cuCheckpointProcessLock");
    const buf = args === null ? null : encodeLockArgs(args);
    // cuInit before the first lock as well as before restore: a process that checkpoints itself
    // could not make that call later, while its own CUDA is locked (it would block).
    return await this.#track(buf ? [buf] : [], async () => {
      await this.#initOnce();
      return await fn(pid, buf);
    });
  }

  /** `cuCheckpointProcessCheckpoint` with NULL args. */
  async checkpoint(pid: number): Promise<number> {
    const fn = this.#checkpointSymbol("checkpoint", pid, "cuCheckpointProcessCheckpoint");
    return await this.#track([], () => fn(pid, null));
  }

  /**
   * `cuCheckpointProcessRestore`; `null` passes NULL args. GPU pairs need driver 13.0 (580);
   * before it the args struct is all reserved, so an empty pairs list is passed as NULL there.
   * `cuInit(0)` is called once before the first lock or restore, as NVIDIA's header asks of the
   * process that restores.
   */
  async restore(pid: number, args: RestoreArgs | null): Promise<number> {
    const fn = this.#checkpointSymbol("restore", pid, "cuCheckpointProcessRestore");
    let keep: ArrayBufferView[] = [];
    let argsBuf: Uint8Array | null = null;
    if (args !== null) {
      const count = args.gpuPairs.length;
      const unsupported = gpuPairsError(pid, count, this.#version);
      if (unsupported) throw unsupported;
      const pairsAllowed = this.#version.code !== CUDA_SUCCESS ||
        this.#version.value >= GPU_PAIRS_MIN_DRIVER_VERSION;
      if (pairsAllowed) {
        const pairs = pinnedCopy(encodeGpuPairs(args.gpuPairs));
        argsBuf = encodeRestoreArgs(addressOf(pairs), count);
        keep = [pairs, argsBuf];
      }
    }
    // One tracked span over cuInit and the call, so that close() cannot unload in between.
    return await this.#track(keep, async () => {
      await this.#initOnce();
      return await fn(pid, argsBuf);
    });
  }

  /** `cuCheckpointProcessUnlock` with NULL args. */
  async unlock(pid: number): Promise<number> {
    const fn = this.#checkpointSymbol("unlock", pid, "cuCheckpointProcessUnlock");
    return await this.#track([], () => fn(pid, null));
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
   * Closes the library. Later calls reject; calls still running finish first, and the library is
   * unloaded when the last of them settles.
   */
  close(): void {
    this.#closed = true;
    this.#unloadIfIdle();
  }

  #describe(code: number, symbol: "cuGetErrorName" | "cuGetErrorString"): string | undefined {
    if (this.#closed || !Number.isInteger(code) || code < -0x8000_0000 || code > 0x7fff_ffff) {
      return undefined;
    }
    const out = new BigUint64Array(1);
    if (this.#symbols[symbol](code, out) !== CUDA_SUCCESS || out[0] === 0n) return undefined;
    const ptr = Deno.UnsafePointer.create(out[0]);
    return ptr === null ? undefined : Deno.UnsafePointerView.getCString(ptr);
  }

  /** The checkpoint symbol to call, after checking the pid, that the driver is open and has it. */
  #checkpointSymbol<K extends CudaSymbolName & keyof Symbols>(
    operation: Operation,
    pid: number,
    name: K,
  ): NonNullable<Symbols[K]> {
    checkPid(pid);
    if (this.#closed) throw closedError(this.kind, operation);
    const fn = this.#symbols[name];
    if (fn === null || !this.#present.has(name)) {
      throw missingSymbolError(operation, pid, name, this.#version);
    }
    return fn as NonNullable<Symbols[K]>;
  }

  /** `cuInit(0)`, once per driver; a failure is not cached, so a later restore tries again. */
  #initOnce(): Promise<number> {
    if (this.#init === undefined) {
      const init = this.#track([], () => this.#symbols.cuInit(0));
      this.#init = init;
      init.then((code) => {
        if (code !== CUDA_SUCCESS) this.#init = undefined;
      }, () => {
        this.#init = undefined;
      });
    }
    return this.#init;
  }

  /** Runs a nonblocking call, keeping its buffers and the library alive until it settles. */
  async #track<T>(buffers: readonly ArrayBufferView[], call: () => Promise<T>): Promise<T> {
    for (const buf of buffers) this.#inFlight.add(buf);
    this.#running++;
    try {
      return await call();
    } finally {
      for (const buf of buffers) this.#inFlight.delete(buf);
      this.#running--;
      this.#unloadIfIdle();
    }
  }

  #unloadIfIdle(): void {
    if (this.#closed && this.#running === 0 && !this.#unloaded) {
      this.#unloaded = true;
      this.#lib.close();
    }
  }
}
