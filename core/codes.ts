/**
 * The CUDA driver's result codes (`CUresult`) that the checkpoint API uses, with their names and
 * the driver's own descriptions (what `cuGetErrorName` and `cuGetErrorString` return), and the
 * driver versions that brought the API. The process states (`CUprocessState`) are in `states.ts`.
 *
 * @module
 */

/**
 * The `CUresult` codes of the checkpoint API by their C names, to compare a `CudaError`'s `code`
 * (or a raw driver result) with: `err.code === CUresult.CUDA_ERROR_NOT_READY`. Their meanings are
 * the driver's descriptions in {@link CU_RESULTS}; docs/ERRORS.md says what each means here.
 */
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
export const {
  CUDA_SUCCESS,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NO_DEVICE,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_UNKNOWN,
} = CUresult;

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

/** Name and driver description of every `CUresult` this package knows, keyed by code. */
export const CU_RESULTS: Readonly<Record<number, { name: string; description: string }>> = Object
  .fromEntries(
    Object.entries(CUresult).map(([name, code]) => [
      code,
      { name, description: DESCRIPTIONS[name as keyof typeof CUresult] },
    ]),
  );

/** The name of a `CUresult` (`CUDA_ERROR_ILLEGAL_STATE`), or `CUresult <n>` for one not known. */
export function resultName(code: number): string {
  return CU_RESULTS[code]?.name ?? `CUresult ${code}`;
}

/** The driver version (`cuDriverGetVersion`) from which the checkpoint API exists: 12.8, driver 570. */
export const CHECKPOINT_MIN_DRIVER_VERSION = 12080;
/** The driver version from which restore accepts GPU pairs (migration): 13.0, driver 580. */
export const GPU_PAIRS_MIN_DRIVER_VERSION = 13000;

/** Formats a `cuDriverGetVersion` number as text: 13000 -> "13.0", 12080 -> "12.8". */
export function formatDriverVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}
