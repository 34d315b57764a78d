/**
 * The self-checkpoint on a real GPU: this process owns GPU memory, suspends its own CUDA state,
 * resumes, and checks every byte. Used by examples/self_checkpoint.ts where libcuda is present.
 */

import { type CheckpointDriver, CudaProcess, formatGpuUuid } from "../mod.ts";
import { allocate } from "./cuda_memory.ts";

const pid = (globalThis as { process?: { pid: number } }).process?.pid ??
  (globalThis as { Deno?: { pid: number } }).Deno!.pid;

/**
 * Runs the self-checkpoint with `memoryMiB` of GPU memory through `driver`, whose library (at the
 * absolute `libraryPath`) also serves the example's own CUDA calls; resolves whether the memory
 * survived.
 */
export async function selfCheckpoint(
  memoryMiB: number,
  driver: CheckpointDriver & { readonly libraryPath: string },
): Promise<boolean> {
  const bytes = memoryMiB * 1024 * 1024;
  const mem = await allocate(bytes, driver.libraryPath);
  const pattern = randomBytes(bytes);
  mem.upload(pattern);
  const proc = new CudaProcess(pid, { driver });
  console.log(
    `process ${pid}: ${await proc.state()}, ${memoryMiB} MiB on ${mem.gpuName} ${
      formatGpuUuid(mem.gpuUuid)
    }`,
  );

  let t = performance.now();
  await proc.suspend();
  console.log(
    `suspended in ${(performance.now() - t).toFixed(0)} ms: ${await proc
      .state()}, its GPU memory now in host memory and the GPU released`,
  );
  console.log(`restore thread id: ${await proc.restoreThreadId()}`);

  t = performance.now();
  await proc.resume();
  console.log(`resumed in ${(performance.now() - t).toFixed(0)} ms: ${await proc.state()}`);

  const back = mem.download(bytes);
  let diff = 0;
  for (let i = 0; i < bytes; i++) if (back[i] !== pattern[i]) diff++;
  mem.free();
  console.log(
    diff === 0
      ? `GPU memory (${memoryMiB} MiB of random bytes) intact: every byte the same after the round trip`
      : `GPU memory CHANGED: ${diff} bytes differ`,
  );
  return diff === 0;
}

/** `n` random bytes (getRandomValues gives at most 64 KiB a call). */
export function randomBytes(n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(out.subarray(i, i + 65536));
  return out;
}
