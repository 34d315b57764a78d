/**
 * The few CUDA driver calls a program needs to *be* a CUDA process, beside the checkpoint API:
 * a context on one GPU, GPU memory, copies both ways, a PTX module and kernel launches. The
 * examples use them to own the GPU memory they checkpoint (`examples/`), so that no compiler is
 * needed: kernels are PTX text, compiled by the driver when the module is loaded.
 *
 * The table is bound through the same runtime adapters as the checkpoint functions
 * (`ffi/adapter.ts`: `Deno.dlopen` on Deno, `bun:ffi` on Bun), on the libcuda the native driver
 * opened ({@link NativeDriver.libraryPath}), and a failed call becomes a `CudaError` through the
 * package's one choke point (`driverError`), with that driver's name and description of the code,
 * as the checkpoint calls' errors have. Not published: the examples' own, beside them.
 *
 * Unlike the checkpoint calls, these run **on the calling thread**: a CUDA context is current on
 * one thread, and every call here needs it. So they block that thread while the driver works (a
 * copy of 4 GiB takes about a second), and, like any CUDA call, forever while this process is
 * locked or checkpointed: a program that checkpoints itself makes them only before its lock and
 * after its unlock (the checkpoint calls themselves run on other threads).
 *
 * @example
 * ```ts ignore
 * import { openMachine } from "../driver.ts";
 * import { openCudaContext } from "./cuda.ts";
 * await using machine = await openMachine();
 * const ctx = await openCudaContext({ driver: machine.driver, device: 0 });
 * const buf = ctx.alloc(1 << 20);
 * ctx.upload(buf, new Uint8Array(1 << 20).fill(7));
 * ctx.download(buf, 0, 16); // Uint8Array of 7s
 * ctx.close();
 * ```
 *
 * @module
 */

import { CUDA_SUCCESS } from "../core/driver.ts";
import { type CudaError, driverError } from "../core/errors.ts";
import { CUUUID_SIZE } from "../ffi/structs.ts";
import { nativeBuffer } from "../ffi/adapter.ts";
import { formatGpuUuid } from "../core/options.ts";
import type { FfiLibrary, NativeArg, NativeLink } from "../ffi/adapter.ts";
import type { NativeDriver } from "../ffi/native.ts";
import { runtimeAdapter } from "../ffi/runtime.ts";
import type { CudaForeignFunction } from "../ffi/symbols.ts";

/**
 * The functions bound, by their exact C names; each returns a `CUresult`. None is `nonblocking`:
 * they run on the calling thread, where the context is current (see the module documentation).
 * Handles (`CUcontext`, `CUmodule`, `CUfunction`, `CUstream`) and `CUdeviceptr` are 64-bit.
 */
export const CUDA_COMPUTE_SYMBOLS = {
  // CUresult cuInit(unsigned int Flags)
  cuInit: { parameters: ["u32"], result: "i32" },
  // CUresult cuDeviceGetCount(int *count)
  cuDeviceGetCount: { parameters: ["buffer"], result: "i32" },
  // CUresult cuDeviceGet(CUdevice *device, int ordinal)
  cuDeviceGet: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
  cuDeviceGetName: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
  cuDeviceGetUuid_v2: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
  cuDeviceGetAttribute: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  // CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
  cuDeviceTotalMem_v2: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
  cuDevicePrimaryCtxRetain: { parameters: ["buffer", "i32"], result: "i32" },
  // CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
  cuDevicePrimaryCtxRelease_v2: { parameters: ["i32"], result: "i32" },
  // CUresult cuCtxSetCurrent(CUcontext ctx)
  cuCtxSetCurrent: { parameters: ["u64"], result: "i32" },
  // CUresult cuCtxGetDevice(CUdevice *device): after a restore onto another GPU, the new one
  cuCtxGetDevice: { parameters: ["buffer"], result: "i32" },
  // CUresult cuCtxSynchronize(void)
  cuCtxSynchronize: { parameters: [], result: "i32" },
  // CUresult cuMemGetInfo_v2(size_t *free, size_t *total): of the context's GPU
  cuMemGetInfo_v2: { parameters: ["buffer", "buffer"], result: "i32" },
  // CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
  cuMemAlloc_v2: { parameters: ["buffer", "u64"], result: "i32" },
  // CUresult cuMemFree_v2(CUdeviceptr dptr)
  cuMemFree_v2: { parameters: ["u64"], result: "i32" },
  // CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
  cuMemcpyHtoD_v2: { parameters: ["u64", "buffer", "u64"], result: "i32" },
  // CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
  cuMemcpyDtoH_v2: { parameters: ["buffer", "u64", "u64"], result: "i32" },
  // CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
  //   CUjit_option *options, void **optionValues): image is NUL-terminated PTX text here
  cuModuleLoadDataEx: {
    parameters: ["buffer", "buffer", "u32", "buffer", "buffer"],
    result: "i32",
  },
  // CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
  cuModuleGetFunction: { parameters: ["buffer", "u64", "buffer"], result: "i32" },
  // CUresult cuModuleUnload(CUmodule hmod)
  cuModuleUnload: { parameters: ["u64"], result: "i32" },
  // CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX,
  //   blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream, void **kernelParams,
  //   void **extra)
  cuLaunchKernel: {
    parameters: ["u64", "u32", "u32", "u32", "u32", "u32", "u32", "u32", "u64", "buffer", "buffer"],
    result: "i32",
  },
} as const satisfies Record<string, CudaForeignFunction>;

/** The C names of {@link CUDA_COMPUTE_SYMBOLS}. */
export type CudaComputeSymbolName = keyof typeof CUDA_COMPUTE_SYMBOLS;

/** `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`. */
const ATTRIBUTE_CC_MAJOR = 75;
const ATTRIBUTE_CC_MINOR = 76;
/** `CU_JIT_ERROR_LOG_BUFFER` and `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`. */
const JIT_ERROR_LOG_BUFFER = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
/** Room for the JIT compiler's error log. */
const JIT_LOG_SIZE = 8192;
/** Room for a GPU's name, with its NUL. */
const NAME_SIZE = 256;
/** Copies are made in pieces of at most this many bytes (a host buffer of its own each). */
export const COPY_CHUNK_BYTES = 64 * 1024 * 1024;

/** A GPU, as the context's calls describe it. */
export interface CudaDevice {
  /** Its ordinal, as `cuDeviceGet` numbers the GPUs this process sees. */
  readonly ordinal: number;
  /** Its name, such as `NVIDIA H200`. */
  readonly name: string;
  /** Its UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly uuid: string;
  /** Its compute capability, such as `9.0`, which PTX `.target sm_90` names. */
  readonly computeCapability: { readonly major: number; readonly minor: number };
  /** Its memory in bytes. */
  readonly totalBytes: number;
}

/** GPU memory allocated by {@link CudaContext.alloc}. */
export interface DeviceBuffer {
  /** Its device address. */
  readonly address: bigint;
  /** Its size in bytes. */
  readonly bytes: number;
}

/** A kernel argument: its C type and its value. */
export type KernelArg =
  | { readonly u64: bigint | DeviceBuffer }
  | { readonly u32: number };

/** A kernel of a loaded module. */
export interface CudaKernel {
  /** Its name (the PTX `.entry`). */
  readonly name: string;
  /** Its `CUfunction` handle. */
  readonly handle: bigint;
}

/** Options of {@link openCudaContext}. */
export interface CudaContextOptions {
  /** The native driver whose library serves the calls, and whose error names the errors use. */
  driver: NativeDriver;
  /** The GPU's ordinal. Default 0. */
  device?: number;
}

/**
 * A CUDA context of this process on one GPU (its primary context), current on the calling thread.
 * Every method is a synchronous driver call on this thread (see the module documentation) and
 * throws a `CudaError` when the driver fails.
 */
export interface CudaContext {
  /** The GPU the context was made on. */
  readonly device: CudaDevice;
  /**
   * The GPU the context runs on now (`cuCtxGetDevice`): after a restore with a GPU mapping, the
   * GPU it was moved to (the PCI bus id would still name the old one).
   */
  currentDevice(): CudaDevice;
  /** Free and total memory of the context's GPU, in bytes (`cuMemGetInfo_v2`). */
  memoryInfo(): { freeBytes: number; totalBytes: number };
  /** Allocates `bytes` of GPU memory. */
  alloc(bytes: number): DeviceBuffer;
  /** Frees memory from {@link CudaContext.alloc}. */
  free(buffer: DeviceBuffer): void;
  /** Copies `data` into the buffer at `offset`. */
  upload(buffer: DeviceBuffer, data: Uint8Array, offset?: number): void;
  /** Copies `length` bytes from `offset` of the buffer into host memory. */
  download(buffer: DeviceBuffer, offset: number, length: number): Uint8Array;
  /**
   * Loads a module from PTX text (the driver compiles it for this GPU) and finds its kernels by
   * name. A PTX the compiler rejects throws with the compiler's log in the message.
   */
  loadModule(ptx: string, kernels: readonly string[]): Record<string, CudaKernel>;
  /** Launches a kernel on the default stream; returns at once (see {@link CudaContext.synchronize}). */
  launch(kernel: CudaKernel, grid: number, block: number, args: readonly KernelArg[]): void;
  /** Waits for every kernel and copy of the context to finish. */
  synchronize(): void;
  /** Unloads the modules, releases the primary context and closes the library. Idempotent. */
  close(): void;
}

/**
 * Opens libcuda again (the file `driver` opened, bound with {@link CUDA_COMPUTE_SYMBOLS}), calls
 * `cuInit`, makes the device's primary context current on this thread, and reads what the device
 * is. Rejects with a `CudaError` when a call fails, or with the adapter's error when the
 * library lacks one of the functions.
 */
export async function openCudaContext(options: CudaContextOptions): Promise<CudaContext> {
  const ordinal = options.device ?? 0;
  if (!Number.isInteger(ordinal) || ordinal < 0) {
    throw new RangeError(`device must be an integer >= 0, got ${String(ordinal)}`);
  }
  const adapter = await runtimeAdapter();
  const lib = adapter.open(options.driver.libraryPath, CUDA_COMPUTE_SYMBOLS);
  try {
    return new Context(lib, options.driver, ordinal);
  } catch (error) {
    void lib.close();
    throw error;
  }
}

class Context implements CudaContext {
  readonly device: CudaDevice;
  #lib: FfiLibrary<CudaComputeSymbolName>;
  #driver: NativeDriver;
  #handle: number;
  #modules: bigint[] = [];
  #closed = false;
  /** Every GPU this process sees, by `CUdevice` handle (which need not be the ordinal). */
  #devices = new Map<number, CudaDevice>();

  constructor(lib: FfiLibrary<CudaComputeSymbolName>, driver: NativeDriver, ordinal: number) {
    this.#lib = lib;
    this.#driver = driver;
    this.#call("cuInit", [0]);
    const count = this.#int("cuDeviceGetCount", (out) => [out]);
    if (ordinal >= count) {
      throw new RangeError(`device ${ordinal} does not exist: this process sees ${count} GPU(s)`);
    }
    for (let i = 0; i < count; i++) this.#describeDevice(i);
    this.#handle = this.#int("cuDeviceGet", (out) => [out, ordinal]);
    this.device = this.#devices.get(this.#handle)!;
    const ctx = nativeBuffer(8);
    this.#call("cuDevicePrimaryCtxRetain", [ctx, this.#handle]);
    this.#call("cuCtxSetCurrent", [readU64(ctx)]);
  }

  currentDevice(): CudaDevice {
    const handle = this.#int("cuCtxGetDevice", (out) => [out]);
    const known = this.#devices.get(handle);
    if (!known) {
      throw new Error(`cuCtxGetDevice gave a device this process did not see: ${handle}`);
    }
    // Described afresh: after a restore onto another GPU the handle stays the same, but the
    // driver answers with the new GPU's UUID (measured on two H200s, driver 580).
    this.#describeDevice(known.ordinal);
    return this.#devices.get(handle)!;
  }

  memoryInfo(): { freeBytes: number; totalBytes: number } {
    const free = nativeBuffer(8), total = nativeBuffer(8);
    this.#call("cuMemGetInfo_v2", [free, total]);
    return { freeBytes: Number(readU64(free)), totalBytes: Number(readU64(total)) };
  }

  alloc(bytes: number): DeviceBuffer {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) {
      throw new RangeError(`alloc: bytes must be a positive integer, got ${String(bytes)}`);
    }
    const out = nativeBuffer(8);
    this.#call("cuMemAlloc_v2", [out, BigInt(bytes)], `asked for ${bytes} bytes`);
    return Object.freeze({ address: readU64(out), bytes });
  }

  free(buffer: DeviceBuffer): void {
    this.#call("cuMemFree_v2", [buffer.address]);
  }

  upload(buffer: DeviceBuffer, data: Uint8Array, offset = 0): void {
    checkSpan(buffer, offset, data.length);
    for (let done = 0; done < data.length; done += COPY_CHUNK_BYTES) {
      const piece = data.subarray(done, Math.min(data.length, done + COPY_CHUNK_BYTES));
      const host = nativeBuffer(piece.length);
      host.set(piece);
      this.#call("cuMemcpyHtoD_v2", [
        buffer.address + BigInt(offset + done),
        host,
        BigInt(piece.length),
      ]);
    }
  }

  download(buffer: DeviceBuffer, offset: number, length: number): Uint8Array {
    checkSpan(buffer, offset, length);
    const out = nativeBuffer(length);
    this.#call("cuMemcpyDtoH_v2", [out, buffer.address + BigInt(offset), BigInt(length)]);
    return out;
  }

  loadModule(ptx: string, kernels: readonly string[]): Record<string, CudaKernel> {
    const module = nativeBuffer(8);
    const log = nativeBuffer(JIT_LOG_SIZE);
    const options = new Int32Array(new ArrayBuffer(8));
    options.set([JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES]);
    const values = nativeBuffer(16); // [0]: the log's address (linked), [1]: its size, as a value
    new DataView(values.buffer).setBigUint64(8, BigInt(JIT_LOG_SIZE), true);
    const code = this.#raw("cuModuleLoadDataEx", [
      module,
      cString(ptx),
      2,
      new Uint8Array(options.buffer),
      values,
    ], [{ arg: 4, offset: 0, target: log }]);
    if (code !== CUDA_SUCCESS) {
      const text = decodeCString(log).trim();
      throw this.#error("cuModuleLoadDataEx", code, text ? `The JIT compiler said: ${text}` : "");
    }
    const handle = readU64(module);
    this.#modules.push(handle);
    const found: Record<string, CudaKernel> = {};
    for (const name of kernels) {
      const fn = nativeBuffer(8);
      this.#call("cuModuleGetFunction", [fn, handle, cString(name)], `kernel ${name}`);
      found[name] = Object.freeze({ name, handle: readU64(fn) });
    }
    return found;
  }

  launch(kernel: CudaKernel, grid: number, block: number, args: readonly KernelArg[]): void {
    // kernelParams is an array of pointers, one to each argument's value.
    const params = nativeBuffer(8 * Math.max(1, args.length));
    const links: NativeLink[] = args.map((arg, i) => {
      const value = nativeBuffer(8);
      const view = new DataView(value.buffer);
      if ("u32" in arg) view.setUint32(0, arg.u32, true);
      else view.setBigUint64(0, typeof arg.u64 === "bigint" ? arg.u64 : arg.u64.address, true);
      return { arg: 9, offset: 8 * i, target: value };
    });
    this.#call(
      "cuLaunchKernel",
      [kernel.handle, grid, 1, 1, block, 1, 1, 0, 0n, params, null],
      `kernel ${kernel.name}`,
      links,
    );
  }

  synchronize(): void {
    this.#call("cuCtxSynchronize", []);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      for (const handle of this.#modules) this.#raw("cuModuleUnload", [handle]);
      this.#raw("cuDevicePrimaryCtxRelease_v2", [this.#handle]);
    } finally {
      void this.#lib.close();
    }
  }

  #describeDevice(ordinal: number): void {
    const handle = this.#int("cuDeviceGet", (out) => [out, ordinal]);
    const name = nativeBuffer(NAME_SIZE);
    this.#call("cuDeviceGetName", [name, NAME_SIZE, handle]);
    const uuid = nativeBuffer(CUUUID_SIZE);
    this.#call("cuDeviceGetUuid_v2", [uuid, handle]);
    const major = this.#int("cuDeviceGetAttribute", (out) => [out, ATTRIBUTE_CC_MAJOR, handle]);
    const minor = this.#int("cuDeviceGetAttribute", (out) => [out, ATTRIBUTE_CC_MINOR, handle]);
    const total = nativeBuffer(8);
    this.#call("cuDeviceTotalMem_v2", [total, handle]);
    this.#devices.set(
      handle,
      Object.freeze({
        ordinal,
        name: decodeCString(name),
        uuid: formatGpuUuid(uuid),
        computeCapability: Object.freeze({ major, minor }),
        totalBytes: Number(readU64(total)),
      }),
    );
  }

  /** A call whose `int` out-parameter is the first argument; returns it. */
  #int(symbol: CudaComputeSymbolName, args: (out: Uint8Array) => NativeArg[]): number {
    const out = nativeBuffer(4);
    this.#call(symbol, args(out));
    return new DataView(out.buffer).getInt32(0, true);
  }

  #call(
    symbol: CudaComputeSymbolName,
    args: NativeArg[],
    detail = "",
    links?: readonly NativeLink[],
  ): void {
    const code = this.#raw(symbol, args, links);
    if (code !== CUDA_SUCCESS) throw this.#error(symbol, code, detail);
  }

  #raw(symbol: CudaComputeSymbolName, args: NativeArg[], links?: readonly NativeLink[]): number {
    if (this.#closed && symbol !== "cuModuleUnload" && symbol !== "cuDevicePrimaryCtxRelease_v2") {
      throw new Error(`${symbol}: this CUDA context has been closed`);
    }
    return Number(this.#lib.call({ symbol, args, links }));
  }

  #error(call: string, code: number, detail: string): CudaError {
    return driverError(this.#driver, code, { operation: call, ...(detail ? { detail } : {}) })!;
  }
}

function checkSpan(buffer: DeviceBuffer, offset: number, length: number): void {
  if (
    !Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 ||
    offset + length > buffer.bytes
  ) {
    throw new RangeError(
      `bytes ${offset}..${offset + length} are outside the buffer of ${buffer.bytes} bytes`,
    );
  }
}

function readU64(buf: Uint8Array): bigint {
  return new DataView(buf.buffer, buf.byteOffset).getBigUint64(0, true);
}

/** A NUL-terminated copy of a string, for a `const char *` argument. */
function cString(text: string): Uint8Array {
  const bytes = new TextEncoder().encode(text);
  const buf = nativeBuffer(bytes.length + 1);
  buf.set(bytes);
  return buf;
}

/** The text of a NUL-terminated buffer. */
function decodeCString(buf: Uint8Array): string {
  return new TextDecoder().decode(buf).split("\0", 1)[0];
}
