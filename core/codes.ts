/**
 * Named constants for the CUDA driver's result codes (`CUresult`) that the checkpoint API uses,
 * with their names and the driver's own descriptions (what `cuGetErrorName` and
 * `cuGetErrorString` return), and the driver versions that brought the API. The process states
 * (`CUprocessState`) are in `states.ts`, with the state machine.
 *
 * @module
 */

/** `CUDA_SUCCESS`: the call succeeded. */
export const CUDA_SUCCESS = 0;
/** `CUDA_ERROR_INVALID_VALUE`: an argument was out of range (bad reserved field, unknown GPU UUID). */
export const CUDA_ERROR_INVALID_VALUE = 1;
/** `CUDA_ERROR_OUT_OF_MEMORY`: the GPU chosen for restore has too little free memory. */
export const CUDA_ERROR_OUT_OF_MEMORY = 2;
/** `CUDA_ERROR_NOT_INITIALIZED`: the target process exists but never initialised CUDA. */
export const CUDA_ERROR_NOT_INITIALIZED = 3;
/** `CUDA_ERROR_DEINITIALIZED`: the driver is shutting down. */
export const CUDA_ERROR_DEINITIALIZED = 4;
/** `CUDA_ERROR_NO_DEVICE`: no CUDA-capable device was found. */
export const CUDA_ERROR_NO_DEVICE = 100;
/** `CUDA_ERROR_INVALID_DEVICE`: a device ordinal or device was not valid. */
export const CUDA_ERROR_INVALID_DEVICE = 101;
/** `CUDA_ERROR_OPERATING_SYSTEM`: the pid does not exist (or is 0 or negative), or the process exited. */
export const CUDA_ERROR_OPERATING_SYSTEM = 304;
/** `CUDA_ERROR_INVALID_HANDLE`: a handle was not valid. */
export const CUDA_ERROR_INVALID_HANDLE = 400;
/** `CUDA_ERROR_ILLEGAL_STATE`: the process is not in a state that allows this operation. */
export const CUDA_ERROR_ILLEGAL_STATE = 401;
/** `CUDA_ERROR_NOT_FOUND`: a named symbol was not found. */
export const CUDA_ERROR_NOT_FOUND = 500;
/** `CUDA_ERROR_NOT_READY`: a lock timed out while work was still running on the GPU. */
export const CUDA_ERROR_NOT_READY = 600;
/** `CUDA_ERROR_NOT_SUPPORTED`: the driver does not support the operation. */
export const CUDA_ERROR_NOT_SUPPORTED = 801;
/** `CUDA_ERROR_UNKNOWN`: an unknown internal error. */
export const CUDA_ERROR_UNKNOWN = 999;

/** Name and driver description of every `CUresult` this package knows, keyed by code. */
export const CU_RESULTS: Readonly<Record<number, { name: string; description: string }>> = {
  [CUDA_SUCCESS]: { name: "CUDA_SUCCESS", description: "no error" },
  [CUDA_ERROR_INVALID_VALUE]: { name: "CUDA_ERROR_INVALID_VALUE", description: "invalid argument" },
  [CUDA_ERROR_OUT_OF_MEMORY]: { name: "CUDA_ERROR_OUT_OF_MEMORY", description: "out of memory" },
  [CUDA_ERROR_NOT_INITIALIZED]: {
    name: "CUDA_ERROR_NOT_INITIALIZED",
    description: "initialization error",
  },
  [CUDA_ERROR_DEINITIALIZED]: {
    name: "CUDA_ERROR_DEINITIALIZED",
    description: "driver shutting down",
  },
  [CUDA_ERROR_NO_DEVICE]: {
    name: "CUDA_ERROR_NO_DEVICE",
    description: "no CUDA-capable device is detected",
  },
  [CUDA_ERROR_INVALID_DEVICE]: {
    name: "CUDA_ERROR_INVALID_DEVICE",
    description: "invalid device ordinal",
  },
  [CUDA_ERROR_OPERATING_SYSTEM]: {
    name: "CUDA_ERROR_OPERATING_SYSTEM",
    description: "OS call failed or operation not supported on this OS",
  },
  [CUDA_ERROR_INVALID_HANDLE]: {
    name: "CUDA_ERROR_INVALID_HANDLE",
    description: "invalid resource handle",
  },
  [CUDA_ERROR_ILLEGAL_STATE]: {
    name: "CUDA_ERROR_ILLEGAL_STATE",
    description: "the operation cannot be performed in the present state",
  },
  [CUDA_ERROR_NOT_FOUND]: { name: "CUDA_ERROR_NOT_FOUND", description: "named symbol not found" },
  [CUDA_ERROR_NOT_READY]: { name: "CUDA_ERROR_NOT_READY", description: "device not ready" },
  [CUDA_ERROR_NOT_SUPPORTED]: {
    name: "CUDA_ERROR_NOT_SUPPORTED",
    description: "operation not supported",
  },
  [CUDA_ERROR_UNKNOWN]: { name: "CUDA_ERROR_UNKNOWN", description: "unknown error" },
};

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
