/**
 * The few CUDA driver calls the examples need to own some GPU memory in this very process:
 * a context on GPU 0, an allocation, copies both ways. Deno.dlopen on Deno, bun:ffi on Bun.
 * (The checkpoint calls themselves go through the package's native driver.)
 */

/** GPU memory owned by this process. */
export interface CudaMemory {
  /** The GPU's name, e.g. "NVIDIA H200". */
  readonly gpuName: string;
  /** The GPU's UUID bytes. */
  readonly gpuUuid: Uint8Array;
  /** Copies `data` to the start of the allocation. */
  upload(data: Uint8Array): void;
  /** Copies the first `length` bytes of the allocation back. */
  download(length: number): Uint8Array;
  /** Frees the allocation. */
  free(): void;
}

// Each symbol's parameters ("buf": a pointer to a typed array we pass) and result.
const SIGNATURES = {
  cuInit: ["u32"], // (unsigned flags)
  cuDeviceGet: ["buf", "i32"], // (CUdevice*, int ordinal)
  cuDeviceGetName: ["buf", "i32", "i32"], // (char*, int len, CUdevice)
  cuDeviceGetUuid_v2: ["buf", "i32"], // (CUuuid*, CUdevice)
  cuDevicePrimaryCtxRetain: ["buf", "i32"], // (CUcontext*, CUdevice)
  cuCtxSetCurrent: ["u64"], // (CUcontext)
  cuMemAlloc_v2: ["buf", "u64"], // (CUdeviceptr*, size_t)
  cuMemFree_v2: ["u64"], // (CUdeviceptr)
  cuMemcpyHtoD_v2: ["u64", "buf", "u64"], // (CUdeviceptr, const void*, size_t)
  cuMemcpyDtoH_v2: ["buf", "u64", "u64"], // (void*, CUdeviceptr, size_t)
} as const;

type Calls = { [K in keyof typeof SIGNATURES]: (...args: unknown[]) => number };

function check(what: string, code: number): void {
  if (code !== 0) throw new Error(`${what} failed with CUresult ${code}`);
}

/**
 * Makes a context on GPU 0 current on this thread and allocates `bytes` there, through the libcuda
 * at `libraryPath`: an absolute path, the one the package's native driver opened
 * (`driver.libraryPath`), never a bare name (Bun would try the current directory for one).
 */
export async function allocate(bytes: number, libraryPath: string): Promise<CudaMemory> {
  if (!libraryPath.startsWith("/")) {
    throw new RangeError(`libraryPath must be absolute, got ${JSON.stringify(libraryPath)}`);
  }
  const s = "Deno" in globalThis ? openDeno(libraryPath) : await openBun(libraryPath);
  check("cuInit", s.cuInit(0));
  const dev = new Int32Array(1);
  check("cuDeviceGet", s.cuDeviceGet(dev, 0));
  const name = new Uint8Array(256);
  check("cuDeviceGetName", s.cuDeviceGetName(name, name.length, dev[0]));
  const uuid = new Uint8Array(16);
  check("cuDeviceGetUuid_v2", s.cuDeviceGetUuid_v2(uuid, dev[0]));
  const ctx = new BigUint64Array(1);
  check("cuDevicePrimaryCtxRetain", s.cuDevicePrimaryCtxRetain(ctx, dev[0]));
  check("cuCtxSetCurrent", s.cuCtxSetCurrent(ctx[0]));
  const ptr = new BigUint64Array(1);
  check("cuMemAlloc_v2", s.cuMemAlloc_v2(ptr, BigInt(bytes)));
  const dptr = ptr[0];
  const end = name.indexOf(0);
  return {
    gpuName: new TextDecoder().decode(name.subarray(0, end < 0 ? name.length : end)),
    gpuUuid: uuid,
    upload: (data) => check("cuMemcpyHtoD_v2", s.cuMemcpyHtoD_v2(dptr, data, BigInt(data.length))),
    download(length) {
      const out = new Uint8Array(length);
      check("cuMemcpyDtoH_v2", s.cuMemcpyDtoH_v2(out, dptr, BigInt(length)));
      return out;
    },
    free: () => check("cuMemFree_v2", s.cuMemFree_v2(dptr)),
  };
}

function openDeno(path: string): Calls {
  const symbols = Object.fromEntries(
    Object.entries(SIGNATURES).map(([name, params]) => [
      name,
      { parameters: params.map((p) => p === "buf" ? "buffer" : p), result: "i32" },
    ]),
  ) as Record<string, Deno.ForeignFunction>;
  return Deno.dlopen(path, symbols).symbols as unknown as Calls;
}

interface BunFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => number> };
}

async function openBun(path: string): Promise<Calls> {
  const specifier = "bun:ffi";
  const ffi = await import(specifier) as BunFfi;
  const symbols = Object.fromEntries(
    Object.entries(SIGNATURES).map(([name, params]) => [
      name,
      { args: params.map((p) => p === "buf" ? "ptr" : p), returns: "i32" },
    ]),
  );
  return ffi.dlopen(path, symbols).symbols as unknown as Calls;
}
