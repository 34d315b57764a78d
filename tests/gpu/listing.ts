/**
 * The listing of CUDA processes on a real GPU:
 *
 *   deno run -A tests/gpu/listing.ts <target binary>      (or: bun tests/gpu/listing.ts <target>)
 *
 * Starts two 1 GiB CUDA targets and one that never uses CUDA, checkpoints one target, then lists:
 * both targets must be there (one running with its GPU memory as nvidia-smi shows it, one
 * checkpointed with none), the non-CUDA process must not. Times nine listings. Prints one JSON
 * line; exits 1 on any failure.
 */

import process from "node:process";
import { execFileSync } from "node:child_process";
import { CudaProcess, listCudaProcesses } from "../../mod.ts";
import { openMachine } from "../../driver.ts";
import { checks, startTarget } from "./native_env.ts";

const [targetPath] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: listing.ts <target binary>");
  process.exit(2);
}
const machine = await openMachine();
const driver = machine.driver;
const [a, b] = await Promise.all([1, 2].map(() => startTarget(targetPath, "cuda", 1024)));
const plain = await startTarget(targetPath, "nocuda");
const { check, ok } = checks();
try {
  await new CudaProcess(b.pid, { machine }).suspend();
  const smi = execFileSync("nvidia-smi", [
    "--query-compute-apps=pid,gpu_uuid,used_memory",
    "--format=csv,noheader,nounits",
  ], { encoding: "utf8" }).trim().split("\n").map((l) => l.split(",").map((x) => x.trim()));
  const listing = await listCudaProcesses({ machine });
  const byPid = new Map(listing.processes.map((p) => [p.pid, p]));
  const la = byPid.get(a.pid), lb = byPid.get(b.pid);
  check("running target listed", la?.state === "running");
  check("checkpointed target listed", lb?.state === "checkpointed");
  check("non-CUDA process not listed", !byPid.has(plain.pid));
  const smiA = smi.find((row) => Number(row[0]) === a.pid);
  const memA = la && la.gpuMemory !== "unknown" ? la.gpuMemory : undefined;
  check(
    "GPU memory as nvidia-smi shows it",
    smiA !== undefined && memA !== undefined && memA[smiA[1]] === Number(smiA[2]),
  );
  check(
    "no GPU memory while checkpointed",
    lb?.gpuMemory !== "unknown" && Object.keys(lb?.gpuMemory ?? { x: 1 }).length === 0,
  );
  const times: number[] = [];
  for (let i = 0; i < 9; i++) {
    const t = performance.now();
    await listCudaProcesses({ machine });
    times.push(performance.now() - t);
  }
  times.sort((x, y) => x - y);
  await new CudaProcess(b.pid, { machine }).resume();
  console.log(JSON.stringify({
    ok: ok(),
    runtime: driver.kind,
    scanned: listing.scanned,
    asked: listing.asked,
    processes: listing.processes,
    uninspectable: listing.uninspectable.length,
    gpuMemoryUnknown: listing.gpuMemoryUnknown,
    nvidiaSmi: smi,
    listingMs: { min: times[0], median: times[4], max: times[8] },
  }));
} finally {
  for (const t of [a, b, plain]) await t.exit();
  await machine.close();
}
process.exit(ok() ? 0 : 1);
