/**
 * Checkpoint and restore a CUDA process, and show that its GPU memory survives.
 *
 *   deno run -A examples/self_checkpoint.ts        (or: bun examples/self_checkpoint.ts)
 *
 * Where this machine has an NVIDIA driver with the checkpoint API, the program works on itself:
 * it allocates GPU memory, fills it, suspends its own CUDA state (the GPU memory moves into host
 * memory and the GPU is released), resumes, and checks every byte. Where there is none, it says so
 * and runs the same steps on the simulated driver, with a simulated process.
 */

import { CudaProcess, formatDriverVersion } from "../mod.ts";
import { type NativeDriver, openNativeDriver } from "../ffi/mod.ts";
import { SimulatedDriver } from "../mock/mod.ts";
import { randomBytes, selfCheckpoint } from "./self_checkpoint_native.ts";

const MEMORY_MIB = 16;

async function onSimulator(reason: string): Promise<void> {
  console.log(`No usable NVIDIA driver here (${reason}).`);
  console.log(
    "Running on the SIMULATED driver instead: a simulated process on a simulated H200.\n",
  );
  const sim = new SimulatedDriver({ clock: "real" });
  const target = sim.spawn({ memoryMiB: MEMORY_MIB });
  const pattern = randomBytes(MEMORY_MIB * 1024 * 1024);
  await target.write(0, pattern);
  const before = await target.memoryDigest();
  const proc = new CudaProcess(target.pid, { driver: sim });
  console.log(
    `process ${proc.pid}: ${await proc.state()}, ${sim.gpus[0].usedMiB} MiB on ${
      sim.gpus[0].name
    } ${sim.gpus[0].uuid}`,
  );

  let t = performance.now();
  await proc.suspend();
  console.log(
    `suspended in ${(performance.now() - t).toFixed(0)} ms: ${await proc
      .state()}, GPU memory now in host memory, ${sim.gpus[0].usedMiB} MiB left on the GPU`,
  );

  t = performance.now();
  await proc.resume();
  console.log(
    `resumed in ${(performance.now() - t).toFixed(0)} ms: ${await proc.state()}, ${
      sim.gpus[0].usedMiB
    } MiB back on the GPU`,
  );

  const after = await target.memoryDigest();
  const same = after === before;
  console.log(
    `GPU memory (${MEMORY_MIB} MiB, SHA-256 ${before.slice(0, 16)}…) ${
      same ? "intact" : "CHANGED"
    }`,
  );
  if (!same) throw new Error("GPU memory changed across checkpoint and restore");
}

/** Opens the native driver; resolves why not, where it cannot be used (closing it again). */
async function probeNative(): Promise<
  { driver: NativeDriver; version: number } | { reason: string }
> {
  let driver: NativeDriver;
  try {
    driver = await openNativeDriver();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { reason: message.split("\n")[0].replace(/\. Tried .*$|:$/, "") };
  }
  const { code, value } = await driver.driverVersion();
  let reason: string | undefined;
  if (!driver.checkpointSupported) {
    reason = `the driver at ${driver.libraryPath} (CUDA ${
      formatDriverVersion(value)
    }) has no checkpoint API; 570 or later is needed`;
  } else if (code !== 0) {
    reason = `cuDriverGetVersion failed with CUresult ${code}`;
  }
  if (reason === undefined) return { driver, version: value };
  driver.close();
  return { reason };
}

const probe = await probeNative();
if ("version" in probe) {
  console.log(
    `NVIDIA driver found (CUDA ${
      formatDriverVersion(probe.version)
    }): checkpointing this process itself.\n`,
  );
  try {
    if (!await selfCheckpoint(MEMORY_MIB, probe.driver)) {
      throw new Error("GPU memory changed across checkpoint and restore");
    }
  } finally {
    await probe.driver[Symbol.asyncDispose]();
  }
} else {
  await onSimulator(probe.reason);
}
