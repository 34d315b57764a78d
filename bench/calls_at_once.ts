// How many driver calls that wait run at once, whatever maxWorkers allows: N checkpoints of a fake
// libcuda (each sleeps --delay-ms) made together through openMachine({ maxWorkers }), for N in
// --counts. On Deno they run on the runtime's 32 threads for blocking work, which its file
// operations share, so the package makes 24 at most; on Bun, in the package's workers (as many as
// maxWorkers). No GPU: it measures the runtimes and that bound, not the driver.
//
//   deno run -A bench/calls_at_once.ts [--counts 16,32,64,128] [--delay-ms 100] [--workers 128]
//   bun bench/calls_at_once.ts ...
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { openMachine } from "../driver.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    counts: { type: "string", default: "16,32,64,128" },
    "delay-ms": { type: "string", default: "100" },
    workers: { type: "string", default: "128" },
  },
});
const dir = mkdtempSync(join(tmpdir(), "ckpt-calls-"));
try {
  const lib = join(dir, "libcuda.so.1");
  const source = new URL("../tests/fixtures/fake_libcuda.c", import.meta.url).pathname;
  const delay = `-DFAKE_CUDA_DELAY_MS=${Number(values["delay-ms"])}`;
  execFileSync("cc", ["-shared", "-fPIC", "-O2", delay, "-o", lib, source, "-lpthread"]);
  await using machine = await openMachine({ libraryPath: lib, maxWorkers: +values.workers });
  const runtime = "Deno" in globalThis ? "deno" : "bun";
  for (const n of values.counts.split(",").map(Number)) {
    const pids = Array.from({ length: n }, (_, i) => 100_000 + i);
    await Promise.all(pids.map((pid) => machine.driver.lock(pid, null)));
    const t0 = performance.now();
    await Promise.all(pids.map((pid) => machine.driver.checkpoint(pid)));
    const ms = performance.now() - t0;
    await Promise.all(pids.map((pid) => machine.driver.restore(pid, null)));
    await Promise.all(pids.map((pid) => machine.driver.unlock(pid)));
    const rounds = Math.round(ms / Number(values["delay-ms"]));
    console.log(
      `${runtime}: ${n} checkpoints together ${ms.toFixed(0)} ms (${rounds} turn${
        rounds === 1 ? "" : "s"
      })`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
