/**
 * The one way this package calls the driver: the function checked first, a failure turned into a
 * `CudaError`, states read by name.
 *
 * @module
 */

import { CHECKPOINT_MIN_DRIVER_VERSION, type CheckpointDriver, CUDA_SUCCESS } from "./driver.ts";
import { type DriverResult, formatDriverVersion, GPU_PAIRS_MIN_DRIVER_VERSION } from "./driver.ts";
import { C_FUNCTIONS, type DriverOperation, type LockArgs, type RestoreArgs } from "./driver.ts";
import { CheckpointUnsupportedError, driverError } from "./errors.ts";
import { PROCESS_STATES, type ProcessState, stateName } from "./states.ts";

/** What a failed call's error says besides the code. */
export type FailureDetail = { state?: ProcessState; detail?: string };

/**
 * Calls `operation` on `pid`, resolving to its value (0 for a step); refuses where the driver
 * lacks it; rejects with the driver's `CudaError`, completed by `explain`.
 */
export async function callDriver(
  driver: CheckpointDriver,
  operation: DriverOperation,
  pid: number,
  args: LockArgs | RestoreArgs | null = null,
  explain?: (code: number) => Promise<FailureDetail>,
): Promise<number> {
  const pairs = args && "gpuPairs" in args ? args.gpuPairs.length : 0;
  await checkCapability(driver, operation, pid, pairs);
  const result: DriverResult = operation === "getState" || operation === "getRestoreThreadId"
    ? await driver[operation](pid)
    : operation === "lock" || operation === "restore"
    ? { code: await driver[operation](pid, args as never), value: 0 }
    : { code: await driver[operation](pid), value: 0 };
  if (result.code === CUDA_SUCCESS) return result.value;
  throw driverError(driver, result.code, { operation, pid, ...await explain?.(result.code) });
}

/** The state of `pid`, by name. */
export const readState = async (driver: CheckpointDriver, pid: number): Promise<ProcessState> =>
  stateOf(await callDriver(driver, "getState", pid), pid);

/** A state number by name; one this version does not know is refused: a `RangeError` naming it. */
export function stateOf(value: number, pid: number): ProcessState {
  const name = stateName(value);
  if (name !== undefined) return name;
  const known = PROCESS_STATES.map((n, i) => `${n} ${i}`).join(", ");
  const gave = `getState of process ${pid} gave state ${value}, which this version of @ckpt/cuda`;
  throw new RangeError(`${gave} does not know (a newer driver's; it knows ${known})`);
}

/** Refuses (`UNSUPPORTED`) a function `driver` lacks, or GPU pairs before 13.0. */
export async function checkCapability(
  driver: CheckpointDriver,
  operation: DriverOperation,
  pid: number | undefined,
  gpuPairs = 0,
  shown: string = operation,
): Promise<void> {
  const fn = C_FUNCTIONS[operation], missing = driver.missingFunctions?.includes(fn);
  if (!missing && !(gpuPairs > 0)) return;
  const version = await driver.driverVersion();
  if (missing) throw unsupported(shown, pid, version, fn);
  const old = version.code === CUDA_SUCCESS && version.value < GPU_PAIRS_MIN_DRIVER_VERSION;
  if (old) throw unsupported(shown, pid, version);
}

/** The refusal: the function `missing`, or (without one) a GPU mapping, needs a newer driver. */
function unsupported(
  operation: string,
  pid: number | undefined,
  version: DriverResult,
  missing?: string,
): CheckpointUnsupportedError {
  const known = version.code === CUDA_SUCCESS, driverVersion = known ? version.value : undefined;
  const driverText = known
    ? `this driver (CUDA ${formatDriverVersion(version.value)})`
    : `this driver (its version could not be read)`;
  const reason = missing === undefined
    ? `a GPU mapping needs driver 580 (CUDA 13.0) or later, and ${driverText} is older`
    : !known || version.value < CHECKPOINT_MIN_DRIVER_VERSION
    ? `${driverText} has no checkpoint API (${missing}); driver 570 (CUDA 12.8) or later has`
    : `${driverText} lacks ${missing}: the library looks incomplete or mismatched`;
  return new CheckpointUnsupportedError({ operation, pid, reason, driverVersion });
}
