// The libcuda functions this package binds, by their exact C names, in one table for both
// runtimes: Deno's `dlopen` takes it as it is, Bun's definitions come from `bunDefinition`.
// Structs (`structs.ts`) and out-parameters are passed as pointers to buffers.

/** One function of a table, in the shape of `Deno.ForeignFunction`. */
export interface CudaForeignFunction {
  /** The parameters, in order: the FFI types the tables use (a subset of Deno's `NativeType`). */
  readonly parameters: readonly ("i32" | "u32" | "u64" | "buffer")[];
  /** The result: a `CUresult` (`i32`), or a pointer (`u64`, for the C library's `dlopen`). */
  readonly result: "i32" | "u64";
  /** Whether the call can wait, so runs on another thread (Deno's own, a Bun worker). */
  readonly nonblocking?: boolean;
  /** Whether the library may lack the function without failing the whole `dlopen`. */
  readonly optional?: boolean;
}

/** A function that can wait: it runs on another thread, never on the main one. */
export const WAITS = { result: "i32", nonblocking: true } as const;
/** One some libraries lack: checkpoint (before 570), `_v2` (before CUDA 11.4), the GPU list's. */
export const MAY_LACK = { ...WAITS, optional: true } as const;
/** A checkpoint function: `CUresult f(int pid, T *arg)`. */
const CHECKPOINT = { parameters: ["i32", "buffer"], ...MAY_LACK } as const;

/**
 * The symbol table; each returns a `CUresult`. All but the version and the error names can wait:
 * `cuInit` and the device queries in a process that locked itself, a checkpoint function while one
 * of the same process is in flight (3.3 s measured for getState; docs/DRIVER.md).
 */
export const CUDA_SYMBOLS = {
  cuDriverGetVersion: { parameters: ["buffer"], result: "i32" }, // (int *driverVersion)
  cuInit: { parameters: ["u32"], ...WAITS }, // (unsigned int Flags): Flags must be 0
  // (CUresult error, const char **pStr): NULL for an unknown code
  cuGetErrorName: { parameters: ["i32", "buffer"], result: "i32" },
  cuGetErrorString: { parameters: ["i32", "buffer"], result: "i32" },
  cuDeviceGetCount: { parameters: ["buffer"], ...MAY_LACK }, // (int *count)
  // (CUdevice *device, int ordinal): CUdevice is an int
  cuDeviceGet: { parameters: ["buffer", "i32"], ...MAY_LACK },
  // (CUuuid *uuid, CUdevice dev): CUuuid is 16 bytes; the _v2 is preferred where present
  cuDeviceGetUuid: { parameters: ["buffer", "i32"], ...MAY_LACK },
  cuDeviceGetUuid_v2: { parameters: ["buffer", "i32"], ...MAY_LACK },
  // (char *name, int len, CUdevice dev)
  cuDeviceGetName: { parameters: ["buffer", "i32", "i32"], ...MAY_LACK },
  cuCheckpointProcessGetState: CHECKPOINT, // (int pid, CUprocessState *state): a C enum, an int
  cuCheckpointProcessGetRestoreThreadId: CHECKPOINT, // (int pid, int *tid)
  cuCheckpointProcessLock: CHECKPOINT, // (int pid, CUcheckpointLockArgs *args): 64 bytes, or NULL
  cuCheckpointProcessCheckpoint: CHECKPOINT, // (int pid, CUcheckpointCheckpointArgs *): NULL
  cuCheckpointProcessRestore: CHECKPOINT, // (int pid, CUcheckpointRestoreArgs *): 64 bytes, or NULL
  cuCheckpointProcessUnlock: CHECKPOINT, // (int pid, CUcheckpointUnlockArgs *args): NULL
} as const satisfies Record<string, CudaForeignFunction>;

/** The C names of every function in {@link CUDA_SYMBOLS}. */
export type CudaSymbolName = keyof typeof CUDA_SYMBOLS;

/** A function definition as `bun:ffi`'s `dlopen` takes it. */
export interface BunFunctionDefinition {
  /** The argument types, in `bun:ffi` names (`"i32"`, `"u32"`, `"u64"`, `"ptr"`). */
  readonly args: readonly ("i32" | "u32" | "u64" | "ptr")[];
  /** The return type. */
  readonly returns: "i32" | "u64";
}

/**
 * The `bun:ffi` definition of a function: a Deno `"buffer"` is a Bun `"ptr"`. Bun has no
 * `optional` or `nonblocking`: its binding probes functions one by one, and runs waits in workers.
 */
export function bunDefinition(fn: CudaForeignFunction): BunFunctionDefinition {
  return { args: fn.parameters.map((t) => t === "buffer" ? "ptr" : t), returns: fn.result };
}
