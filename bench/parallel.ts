/**
 * Many processes at once against one after another, on the real driver, in one run:
 *
 *   deno run -A bench/parallel.ts <target binary> [processes=4] [MiB=4096]
 *   bun bench/parallel.ts <target binary> [processes=4] [MiB=4096]
 *
 * Starts the targets, then times suspend (lock + checkpoint) and resume (restore + unlock) of all
 * of them one after another (the baseline), then all at once with Promise.all, and checks every
 * target's memory hash at the end. On Deno the calls are nonblocking FFI calls; on Bun they run
 * on the native driver's worker threads.
 */

import process from "node:process";
import { CudaProcess } from "../mod.ts";
import { openMachine } from "../driver.ts";
import { startTarget } from "../tests/gpu/native_env.ts";

const [targetPath, n = "4", mib = "4096"] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: parallel.ts <target binary> [processes] [MiB]");
  process.exit(2);
}
const count = Number(n), memoryMiB = Number(mib);
const machine = await openMachine();
const driver = machine.driver;
const targets = await Promise.all(
  Array.from({ length: count }, () => startTarget(targetPath, "cuda", memoryMiB)),
);
try {
  const procs = targets.map((t) => new CudaProcess(t.pid, { machine }));
  const time = async (fn: () => Promise<unknown>) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const serialSuspend = await time(async () => {
    for (const p of procs) await p.suspend();
  });
  const serialResume = await time(async () => {
    for (const p of procs) await p.resume();
  });
  const parallelSuspend = await time(() => Promise.all(procs.map((p) => p.suspend())));
  const parallelResume = await time(() => Promise.all(procs.map((p) => p.resume())));
  let intact = 0;
  for (const t of targets) if ((await t.ask("hash")) === `hash ${t.readyHash}`) intact++;
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  console.log(
    `${driver.kind}, ${count} x ${memoryMiB} MiB: suspend one after another ${s(serialSuspend)}, ` +
      `all at once ${s(parallelSuspend)} (${(serialSuspend / parallelSuspend).toFixed(1)}x); ` +
      `resume one after another ${s(serialResume)}, all at once ${s(parallelResume)} ` +
      `(${(serialResume / parallelResume).toFixed(1)}x); memory intact in ${intact} of ${count}`,
  );
  if (intact !== count) process.exitCode = 1;
} finally {
  for (const t of targets) await t.exit();
  await machine.close();
}
