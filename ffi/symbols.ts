/**
 * The libcuda symbols this package binds, keyed by their exact C names, in one table that both
 * runtimes use: Deno passes it to `Deno.dlopen` as it is (`ffi/deno.ts` checks it against
 * `Deno.ForeignLibraryInterface`), and Bun's binding derives its `bun:ffi` definitions from it
 * with {@link bunDefinition}.
 *
 * Every function returns a `CUresult` (a C `int`). Struct arguments are passed as pointers to
 * 64-byte buffers built by `core/structs.ts`; out-parameters are pointers to typed arrays.
 *
 * @module
 */

/** The FFI parameter and result types the table uses (a subset of Deno's `NativeType`). */
export type CudaNativeType = "i32" | "u32" | "buffer";

/**
 * One function of the table, in the shape of `Deno.ForeignFunction`: `nonblocking` calls run on
 * a thread of their own and return a Promise; `optional` symbols are `null` where the library
 * lacks them instead of failing the whole `dlopen`.
 */
export interface CudaForeignFunction {
  /** The parameters, in order. */
  readonly parameters: readonly CudaNativeType[];
  /** The result: always `CUresult`, a C `int`. */
  readonly result: "i32";
  /** Whether Deno runs the call on a thread of its own and returns a Promise. */
  readonly nonblocking?: boolean;
  /** Whether the library may lack the symbol (then it is `null` instead of an error). */
  readonly optional?: boolean;
}

/** The C names of every function in {@link CUDA_SYMBOLS}. */
export type CudaSymbolName =
  | "cuDriverGetVersion"
  | "cuInit"
  | "cuGetErrorName"
  | "cuGetErrorString"
  | "cuCheckpointProcessGetState"
  | "cuCheckpointProcessGetRestoreThreadId"
  | "cuCheckpointProcessLock"
  | "cuCheckpointProcessCheckpoint"
  | "cuCheckpointProcessRestore"
  | "cuCheckpointProcessUnlock";

/**
 * The symbol table. Of the four always-present functions, the version and error-string ones are
 * synchronous (they return at once); `cuInit` is nonblocking, as its first call initialises the GPUs.
 * The six checkpoint functions exist only from driver 570 (CUDA 12.8) and are `optional`; they
 * are `nonblocking` so that several processes can be worked on at once and a long checkpoint never
 * stalls the event loop. That includes getState and getRestoreThreadId: they take well under a
 * millisecond on an idle process, but nothing promises they do not wait on a checkpoint or restore
 * running on another thread, and a thread costs little next to a blocked event loop.
 */
export const CUDA_SYMBOLS = {
  cuDriverGetVersion: {
    parameters: [
      "buffer", // int *driverVersion
    ],
    result: "i32", // CUresult
  },
  cuInit: {
    parameters: [
      "u32", // unsigned int Flags (must be 0)
    ],
    result: "i32", // CUresult
    // Nonblocking: the first cuInit of a process can take a second where persistence mode is off.
    nonblocking: true,
  },
  cuGetErrorName: {
    parameters: [
      "i32", // CUresult error
      "buffer", // const char **pStr (set to NULL for an unknown code)
    ],
    result: "i32", // CUresult
  },
  cuGetErrorString: {
    parameters: [
      "i32", // CUresult error
      "buffer", // const char **pStr (set to NULL for an unknown code)
    ],
    result: "i32", // CUresult
  },
  cuCheckpointProcessGetState: {
    parameters: [
      "i32", // int pid
      "buffer", // CUprocessState *state (a C enum: int)
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
  cuCheckpointProcessGetRestoreThreadId: {
    parameters: [
      "i32", // int pid
      "buffer", // int *tid
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
  cuCheckpointProcessLock: {
    parameters: [
      "i32", // int pid
      "buffer", // CUcheckpointLockArgs *args (64 bytes, or NULL)
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
  cuCheckpointProcessCheckpoint: {
    parameters: [
      "i32", // int pid
      "buffer", // CUcheckpointCheckpointArgs *args (64 bytes, or NULL)
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
  cuCheckpointProcessRestore: {
    parameters: [
      "i32", // int pid
      "buffer", // CUcheckpointRestoreArgs *args (64 bytes, or NULL)
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
  cuCheckpointProcessUnlock: {
    parameters: [
      "i32", // int pid
      "buffer", // CUcheckpointUnlockArgs *args (64 bytes, or NULL)
    ],
    result: "i32", // CUresult
    nonblocking: true,
    optional: true,
  },
} as const satisfies Record<CudaSymbolName, CudaForeignFunction>;

/** The type of {@link CUDA_SYMBOLS}: every literal kept, as `Deno.dlopen` needs for its result types. */
export type CudaSymbols = typeof CUDA_SYMBOLS;

/** The always-present functions (driver version, initialisation, error names and strings). */
export const BASE_SYMBOL_NAMES: readonly CudaSymbolName[] = [
  "cuDriverGetVersion",
  "cuInit",
  "cuGetErrorName",
  "cuGetErrorString",
];

/** The six checkpoint functions (driver 570 and later), optional in the table. */
export const CHECKPOINT_SYMBOL_NAMES: readonly CudaSymbolName[] = [
  "cuCheckpointProcessGetState",
  "cuCheckpointProcessGetRestoreThreadId",
  "cuCheckpointProcessLock",
  "cuCheckpointProcessCheckpoint",
  "cuCheckpointProcessRestore",
  "cuCheckpointProcessUnlock",
];

/** A function definition as `bun:ffi`'s `dlopen` takes it. */
export interface BunFunctionDefinition {
  /** The argument types, in `bun:ffi` names (`"i32"`, `"u32"`, `"ptr"`). */
  readonly args: readonly ("i32" | "u32" | "ptr")[];
  /** The return type: `CUresult`, a C `int`. */
  readonly returns: "i32";
}

/**
 * The `bun:ffi` definition of one symbol of {@link CUDA_SYMBOLS}: the same C signature with Bun's
 * type names (a Deno `"buffer"` is a Bun `"ptr"`, which takes a typed array or `null`). Bun has no
 * `optional` or `nonblocking`: its binding probes symbols one by one and runs long calls in workers.
 */
export function bunDefinition(name: CudaSymbolName): BunFunctionDefinition {
  const fn: CudaForeignFunction = CUDA_SYMBOLS[name];
  return {
    args: fn.parameters.map((type) => type === "buffer" ? "ptr" : type),
    returns: fn.result,
  };
}
