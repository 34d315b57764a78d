/**
 * A process that checkpoints itself and another process at the same time, on a real GPU:
 *
 *   deno run -A tests/gpu/self_concurrent.ts <target binary>
 *   bun tests/gpu/self_concurrent.ts <target binary>
 *
 * This process owns 256 MiB of GPU memory; the target owns 1 GiB. Three rounds, each of them:
 *   1. `Promise.all` of both suspends, then of both resumes;
 *   2. this process locks itself first, and only then are the other calls made, so the driver
 *      must start new threads (Bun: new workers) while this process's own CUDA is locked: a
 *      worker that called `cuInit` then would hang, as the driver blocks it in a locked process.
 * Both memories are checked at the end. Prints one JSON line; exits 1 on any failure.
 */

import process from "node:process";
import { CudaProcess } from "../../mod.ts";
import { openMachine } from "../../driver.ts";
import { openCudaContext } from "../../examples/cuda.ts";
import { startTarget } from "./native_env.ts";

const [targetPath] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: self_concurrent.ts <target binary>");
  process.exit(2);
}

const BYTES = 256 * 1024 * 1024;
const machine = await openMachine();
const ctx = await openCudaContext({ driver: machine.driver });
const mem = ctx.alloc(BYTES);
const pattern = new Uint8Array(BYTES);
for (let i = 0; i < BYTES; i += 65536) crypto.getRandomValues(pattern.subarray(i, i + 65536));
ctx.upload(mem, pattern);
const other = await startTarget(targetPath, "cuda", 1024);
const self = new CudaProcess(process.pid, { machine });
const peer = new CudaProcess(other.pid, { machine });
const rounds: Record<string, number | string>[] = [];
let ok = true;
try {
  for (let round = 0; round < 3; round++) {
    let t = performance.now();
    await Promise.all([self.suspend(), peer.suspend()]);
    const suspendMs = performance.now() - t;
    const states = `${await self.state()}/${await peer.state()}`;
    t = performance.now();
    await Promise.all([self.resume(), peer.resume()]);
    const resumeMs = performance.now() - t;

    // Locked first, then the rest: new threads start while this process is locked.
    t = performance.now();
    await self.lock();
    await Promise.all([self.checkpoint(), peer.suspend(), peer.state(), self.restoreThreadId()]);
    await Promise.all([self.resume(), peer.resume()]);
    const lockedFirstMs = performance.now() - t;
    rounds.push({ round, suspendMs, resumeMs, states, lockedFirstMs });
    if (states !== "checkpointed/checkpointed") ok = false;
  }
  const back = ctx.download(mem, 0, BYTES);
  let differ = 0;
  for (let i = 0; i < BYTES; i++) if (back[i] !== pattern[i]) differ++;
  const otherHash = (await other.ask("hash")).replace(/^hash /, "");
  const intact = differ === 0 && otherHash === other.readyHash;
  ok &&= intact;
  console.log(JSON.stringify({
    runtime: "Bun" in globalThis ? "bun" : "deno",
    ok,
    selfBytesDiffering: differ,
    otherMemoryIntact: otherHash === other.readyHash,
    rounds: rounds.map((r) =>
      Object.fromEntries(
        Object.entries(r).map(([k, v]) => [k, typeof v === "number" ? Math.round(v) : v]),
      )
    ),
  }));
} finally {
  ctx.free(mem);
  ctx.close();
  await other.exit();
  await self.close();
  await peer.close();
  await machine.close();
}
process.exit(ok ? 0 : 1);
