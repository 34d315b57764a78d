/**
 * The seam between this package and a driver: a method for each C checkpoint call, reporting raw
 * `CUresult` codes (so one suite compares the native and simulated drivers), and the codes.
 *
 * @module
 */

/** The C function behind each driver operation. */
export const C_FUNCTIONS = {
  getState: "cuCheckpointProcessGetState",
  getRestoreThreadId: "cuCheckpointProcessGetRestoreThreadId",
  lock: "cuCheckpointProcessLock",
  checkpoint: "cuCheckpointProcessCheckpoint",
  restore: "cuCheckpointProcessRestore",
  unlock: "cuCheckpointProcessUnlock",
} as const;

/** The C names of the six checkpoint functions, which drivers older than 570 lack. */
export const CHECKPOINT_FUNCTIONS = Object.freeze(Object.values(C_FUNCTIONS));

/** A driver operation that calls one C checkpoint function. */
export type DriverOperation = keyof typeof C_FUNCTIONS;

/**
 * Arguments of `cuCheckpointProcessLock` (`CUcheckpointLockArgs`, 64 bytes): `timeoutMs` at offset
 * 0, how long to wait for submitted work to finish (0 waits forever); bytes 4 to 63 must be zero
 * (left out, they are: tests set `reserved` to see it refused).
 */
export type LockArgs = { readonly timeoutMs: number; readonly reserved?: Uint8Array };

/** One `CUcheckpointGpuPair`: restore what was on `oldUuid` onto `newUuid` (16 raw bytes each). */
export type GpuPair = { readonly oldUuid: Uint8Array; readonly newUuid: Uint8Array };

/**
 * Arguments of `cuCheckpointProcessRestore` (`CUcheckpointRestoreArgs`, 64 bytes): the GPU pairs
 * (`gpuPairs`, `gpuPairsCount`); an empty list is the same as no mapping.
 */
export type RestoreArgs = { readonly gpuPairs: readonly GpuPair[] };

/**
 * A raw `CUresult` (`code`) together with what the call wrote to its out-parameter (`value`: a
 * state number, a thread id or a version; 0 when the call failed).
 */
export type DriverResult = { readonly code: number; readonly value: number };

/**
 * A GPU the driver sees: its ordinal as `cuDeviceGet` numbers it (`CUDA_VISIBLE_DEVICES`
 * renumbers them), its UUID as nvidia-smi prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`),
 * its chip's name (`NVIDIA H200`: restore onto another GPU needs the same chip).
 */
export type GpuInfo = { readonly index: number; readonly uuid: string; readonly name: string };

/**
 * A CUDA checkpoint driver: each method mirrors one C call and resolves to its raw `CUresult`
 * (checks happen above the seam); it rejects only where the call cannot be made at all.
 */
export interface CheckpointDriver {
  /** What this driver is, for messages: "native (Deno)", "native (Bun)", "simulated". */
  readonly kind: string;
  /** `cuDriverGetVersion`: the driver's CUDA version number (13000 for 13.0). */
  driverVersion(): Promise<DriverResult>;
  /** `cuCheckpointProcessGetState`: the value is a `CUprocessState` number. */
  getState(pid: number): Promise<DriverResult>;
  /** `cuCheckpointProcessGetRestoreThreadId`: the value is a thread id. */
  getRestoreThreadId(pid: number): Promise<DriverResult>;
  /** `cuCheckpointProcessLock`; `null` passes NULL args (no timeout). */
  lock(pid: number, args: LockArgs | null): Promise<number>;
  /** `cuCheckpointProcessCheckpoint` with NULL args. */
  checkpoint(pid: number): Promise<number>;
  /** `cuCheckpointProcessRestore`; `null` passes NULL args (restore onto the same GPUs). */
  restore(pid: number, args: RestoreArgs | null): Promise<number>;
  /** `cuCheckpointProcessUnlock` with NULL args. */
  unlock(pid: number): Promise<number>;
  /** `cuGetErrorName`, or `undefined` when the driver does not know the code. */
  errorName(code: number): string | undefined;
  /** `cuGetErrorString`, or `undefined` when the driver does not know the code. */
  errorString(code: number): string | undefined;
  /** The C names of the checkpoint functions it lacks (all six before 570); left out: none. */
  readonly missingFunctions?: readonly string[];
  /** Every GPU the driver sees, by ordinal; left out, a mapping is not checked before the call. */
  listGpus?(): Promise<readonly GpuInfo[]>;
  /** Whether `listGpus` gives every GPU (none hidden): only then is a mapping checked first. */
  readonly listsEveryGpu?: boolean;
}

/** The `CUresult` codes by their C names (`err.code === CUresult.CUDA_ERROR_NOT_READY`). */
export const CUresult = {
  CUDA_SUCCESS: 0,
  CUDA_ERROR_INVALID_VALUE: 1,
  CUDA_ERROR_OUT_OF_MEMORY: 2,
  CUDA_ERROR_NOT_INITIALIZED: 3,
  CUDA_ERROR_DEINITIALIZED: 4,
  CUDA_ERROR_NO_DEVICE: 100,
  CUDA_ERROR_INVALID_DEVICE: 101,
  CUDA_ERROR_OPERATING_SYSTEM: 304,
  CUDA_ERROR_INVALID_HANDLE: 400,
  CUDA_ERROR_ILLEGAL_STATE: 401,
  CUDA_ERROR_NOT_FOUND: 500,
  CUDA_ERROR_NOT_READY: 600,
  CUDA_ERROR_NOT_SUPPORTED: 801,
  CUDA_ERROR_UNKNOWN: 999,
} as const;

/** The codes one by one, for this package's own modules. */
export const { CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY } = CUresult;
export const { CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NO_DEVICE } = CUresult;
export const { CUDA_ERROR_OPERATING_SYSTEM, CUDA_ERROR_ILLEGAL_STATE } = CUresult;
export const { CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_UNKNOWN } = CUresult;

/** What `cuGetErrorString` says of each code. */
const DESCRIPTIONS: Readonly<Record<keyof typeof CUresult, string>> = {
  CUDA_SUCCESS: "no error",
  CUDA_ERROR_INVALID_VALUE: "invalid argument",
  CUDA_ERROR_OUT_OF_MEMORY: "out of memory",
  CUDA_ERROR_NOT_INITIALIZED: "initialization error",
  CUDA_ERROR_DEINITIALIZED: "driver shutting down",
  CUDA_ERROR_NO_DEVICE: "no CUDA-capable device is detected",
  CUDA_ERROR_INVALID_DEVICE: "invalid device ordinal",
  CUDA_ERROR_OPERATING_SYSTEM: "OS call failed or operation not supported on this OS",
  CUDA_ERROR_INVALID_HANDLE: "invalid resource handle",
  CUDA_ERROR_ILLEGAL_STATE: "the operation cannot be performed in the present state",
  CUDA_ERROR_NOT_FOUND: "named symbol not found",
  CUDA_ERROR_NOT_READY: "device not ready",
  CUDA_ERROR_NOT_SUPPORTED: "operation not supported",
  CUDA_ERROR_UNKNOWN: "unknown error",
};

const NAMES = Object.keys(CUresult) as (keyof typeof CUresult)[];

/** Name and driver description of every `CUresult` this package knows, keyed by code. */
export const CU_RESULTS: Readonly<Record<number, { name: string; description: string }>> = Object
  .fromEntries(NAMES.map((name) => [CUresult[name], { name, description: DESCRIPTIONS[name] }]));

/** The name of a `CUresult` (`CUDA_ERROR_ILLEGAL_STATE`), or `CUresult <n>` for one not known. */
export function resultName(code: number): string {
  return CU_RESULTS[code]?.name ?? `CUresult ${code}`;
}

/** The first driver versions of the checkpoint API (12.8, driver 570) and GPU pairs (13.0, 580). */
export const CHECKPOINT_MIN_DRIVER_VERSION = 12080, GPU_PAIRS_MIN_DRIVER_VERSION = 13000;

/** Formats a `cuDriverGetVersion` number as text: 13000 -> "13.0", 12080 -> "12.8". */
export const formatDriverVersion = (version: number): string =>
  `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
