/**
 * The seam between {@link CudaProcess} and a driver: one method for each C checkpoint call,
 * reporting raw `CUresult` codes. The native driver (libcuda) and the simulated driver both
 * implement it, so one conformance suite can compare them code for code.
 *
 * @module
 */

/** Arguments of `cuCheckpointProcessLock` (`CUcheckpointLockArgs`, 64 bytes). */
export interface LockArgs {
  /** `timeoutMs` at offset 0: how long to wait for submitted work to finish; 0 waits forever. */
  readonly timeoutMs: number;
  /**
   * Bytes 4 to 63 of the struct, which must be zero. Left out, they are zero. Only tests set them,
   * to show that the driver rejects a nonzero reserved field with `CUDA_ERROR_INVALID_VALUE`.
   */
  readonly reserved?: Uint8Array;
}

/** One `CUcheckpointGpuPair`: restore what was on `oldUuid` onto `newUuid` (16 raw bytes each). */
export interface GpuPair {
  /** The UUID of the GPU the process was checkpointed on. */
  readonly oldUuid: Uint8Array;
  /** The UUID of the GPU to restore onto. */
  readonly newUuid: Uint8Array;
}

/** Arguments of `cuCheckpointProcessRestore` (`CUcheckpointRestoreArgs`, 64 bytes). */
export interface RestoreArgs {
  /** The GPU pairs (`gpuPairs`, `gpuPairsCount`); an empty list is the same as no mapping. */
  readonly gpuPairs: readonly GpuPair[];
}

/** A `CUresult` together with what the call wrote to its out-parameter (meaningful on success). */
export interface DriverResult {
  /** The raw `CUresult`. */
  readonly code: number;
  /** The out-parameter: a state number, a thread id or a version; 0 when the call failed. */
  readonly value: number;
}

/**
 * A CUDA checkpoint driver. Every method mirrors one C call and resolves to the raw `CUresult`;
 * none throws for a driver error. A method may throw (reject) only when the call cannot be made
 * at all: the library is missing, or it has no checkpoint support
 * ({@link CheckpointUnsupportedError}).
 */
export interface CheckpointDriver {
  /** What this driver is, for messages and reports: "native (Deno)", "native (Bun)", "simulated". */
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
}
