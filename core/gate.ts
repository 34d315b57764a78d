/**
 * What is checked above the seam before a driver call, once for every driver: whether the driver
 * has the function at all (a driver older than 570 has none), whether it takes GPU pairs (580 and
 * later), and, where the driver can list its GPUs, whether a GPU mapping can work.
 *
 * @module
 */

import {
  CUDA_ERROR_INVALID_VALUE,
  CUDA_SUCCESS,
  formatDriverVersion,
  GPU_PAIRS_MIN_DRIVER_VERSION,
} from "./codes.ts";
import type { CheckpointDriver, DriverResult, GpuInfo, GpuPair } from "./driver.ts";
import { CheckpointUnsupportedError, CudaError, type Operation } from "./errors.ts";
import { formatGpuUuid } from "./uuid.ts";

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
export const CHECKPOINT_FUNCTIONS: readonly string[] = Object.freeze(Object.values(C_FUNCTIONS));

/** A driver operation that calls one C checkpoint function. */
export type DriverOperation = keyof typeof C_FUNCTIONS;

/**
 * Throws {@link CheckpointUnsupportedError} when `driver` lacks the function behind `operation`,
 * or when GPU pairs are given to a driver older than 13.0. Resolves otherwise.
 */
export async function checkCapability(
  driver: CheckpointDriver,
  operation: DriverOperation,
  pid: number,
  gpuPairs = 0,
): Promise<void> {
  const fn = C_FUNCTIONS[operation];
  if (driver.missingFunctions?.includes(fn)) {
    throw unsupportedError(operation, pid, await driver.driverVersion(), { missing: fn });
  }
  if (gpuPairs > 0) {
    const version = await driver.driverVersion();
    if (version.code === CUDA_SUCCESS && version.value < GPU_PAIRS_MIN_DRIVER_VERSION) {
      throw unsupportedError(operation, pid, version, { gpuPairs });
    }
  }
}

/**
 * The one place that says a driver cannot do something: which function is missing or what needs
 * a newer driver, with the driver's version.
 */
export function unsupportedError(
  operation: Operation,
  pid: number | undefined,
  version: DriverResult,
  what: { missing: string } | { gpuPairs: number },
): CheckpointUnsupportedError {
  const known = version.code === CUDA_SUCCESS;
  const driverText = known
    ? `this driver (CUDA ${
      formatDriverVersion(version.value)
    }, cuDriverGetVersion ${version.value})`
    : `this driver (its version could not be read: cuDriverGetVersion gave CUresult ${version.code})`;
  let detail: string;
  if ("gpuPairs" in what) {
    detail = `restoring onto other GPUs (a GPU mapping) needs NVIDIA driver 580 (CUDA 13.0) or ` +
      `later, and ${driverText} is older`;
  } else if (!known || version.value < 12080) {
    detail = `${driverText} has no CUDA checkpoint API (${what.missing} is missing); NVIDIA ` +
      `driver 570 (CUDA 12.8) or later is needed`;
  } else {
    detail = `${driverText} should have the checkpoint API but lacks ${what.missing}: the ` +
      `library looks incomplete or mismatched; point CKPT_LIBCUDA_PATH at the driver's own ` +
      `libcuda.so.1`;
  }
  return new CheckpointUnsupportedError({
    operation,
    pid,
    detail,
    driverVersion: known ? version.value : undefined,
  });
}

function key(bytes: Uint8Array): string {
  return formatGpuUuid(bytes).toLowerCase();
}

function describeGpu(gpu: GpuInfo): string {
  return `${gpu.uuid} (GPU ${gpu.index}, ${gpu.name})`;
}

/**
 * What is wrong with a GPU mapping on a machine whose GPUs are `gpus`, as sentences; empty when
 * nothing is. The rules are the real driver's (measured on two H200s): every GPU it sees must be
 * named, even one the process never used; every UUID must be one of its GPUs; no two GPUs may be
 * sent onto one.
 */
export function mappingProblems(pairs: readonly GpuPair[], gpus: readonly GpuInfo[]): string[] {
  if (pairs.length === 0) return [];
  const byKey = new Map(gpus.map((g) => [g.uuid.toLowerCase(), g]));
  const problems: string[] = [];
  const named = new Set<string>();
  const onto = new Map<string, string[]>();
  for (const pair of pairs) {
    const from = key(pair.oldUuid), to = key(pair.newUuid);
    if (!byKey.has(from)) {
      problems.push(`${formatGpuUuid(pair.oldUuid)} is not a GPU of this machine`);
    }
    if (!byKey.has(to)) {
      problems.push(
        `${formatGpuUuid(pair.newUuid)} (the GPU given for ${
          formatGpuUuid(pair.oldUuid)
        }) is not a GPU of this machine`,
      );
    }
    named.add(from);
    onto.set(to, [...onto.get(to) ?? [], formatGpuUuid(pair.oldUuid)]);
  }
  const left = gpus.filter((g) => !named.has(g.uuid.toLowerCase()));
  if (left.length > 0) {
    problems.push(
      `it leaves out ${left.map(describeGpu).join(" and ")}: the driver wants every GPU it sees ` +
        `named, even one the process never used and even with CUDA_VISIBLE_DEVICES set (map a ` +
        `GPU to itself to leave it where it is)`,
    );
  }
  for (const [to, froms] of onto) {
    if (froms.length > 1 && byKey.has(to)) {
      problems.push(
        `it sends ${froms.join(" and ")} onto the same GPU, ${
          describeGpu(byKey.get(to)!)
        }: each GPU can take the place of one`,
      );
    }
  }
  if (problems.length > 0) {
    problems.push(`this machine's GPUs are ${gpus.map(describeGpu).join(", ")}`);
  }
  return problems;
}

/**
 * Checks a mapping against the driver's GPUs, where the driver can list all of them, and throws the
 * error the driver would give (`CUDA_ERROR_INVALID_VALUE`) with what exactly is wrong, before any
 * call reaches the process.
 */
export async function checkMapping(
  driver: CheckpointDriver,
  pid: number,
  pairs: readonly GpuPair[],
): Promise<void> {
  if (pairs.length === 0 || !driver.listGpus || driver.listsEveryGpu !== true) return;
  // A list that cannot be read, or is empty, proves nothing: the driver will say.
  const gpus = await driver.listGpus().catch(() => []);
  if (gpus.length === 0) return;
  const problems = mappingProblems(pairs, gpus);
  if (problems.length === 0) return;
  throw new CudaError({
    code: CUDA_ERROR_INVALID_VALUE,
    operation: "restore",
    pid,
    description: "invalid argument",
    detail: `the GPU mapping cannot work, so it was not sent to the driver: ${
      problems.join("; ")
    }. The process is unchanged`,
  });
}

/**
 * Why the driver may have refused a mapping with `CUDA_ERROR_INVALID_VALUE`: the chips that
 * differ where the GPUs are known, otherwise what usually causes it.
 */
export async function explainRejectedMapping(
  driver: CheckpointDriver,
  pairs: readonly GpuPair[],
): Promise<string> {
  const gpus = driver.listGpus ? await driver.listGpus().catch(() => undefined) : undefined;
  if (gpus) {
    const byKey = new Map(gpus.map((g) => [g.uuid.toLowerCase(), g]));
    const crossing = pairs.flatMap((p) => {
      const from = byKey.get(key(p.oldUuid)), to = byKey.get(key(p.newUuid));
      return from && to && from.name !== to.name
        ? [`${describeGpu(from)} onto ${describeGpu(to)}`]
        : [];
    });
    if (crossing.length > 0) {
      return `the driver refused the GPU mapping: it moves ${
        crossing.join(" and ")
      }, and a process's memory can only move to the same chip`;
    }
  }
  return "the driver refused the GPU mapping. It does so when the mapping leaves out a GPU it " +
    "sees (every GPU must be named, even with CUDA_VISIBLE_DEVICES set), names a UUID no GPU " +
    "has, sends two GPUs onto one, or moves a process's memory onto a different chip";
}
