// How long a whole-host listing of CUDA processes takes (listCudaProcesses, core/listing.ts) with
// a few hundred idle processes present: the /proc scan alone, the listing that asks the driver
// about processes with libcuda mapped (the default), and the one that asks about every process.
//
//   deno run -A bench/listing.ts [--processes 300] [--runs 9] [--libcuda PATH] [--nvml PATH]
//   bun bench/listing.ts ...
//
// Where the native driver opens (a GPU machine), it is used, and NVML is loaded from the system.
// Where it does not, a fake libcuda (tests/fixtures/fake_libcuda.c, every pid a running CUDA
// process) is compiled and used, and the figures measure this package's own cost: /proc, the FFI
// calls, the bookkeeping, not the real driver's. Some of the idle processes get the library
// mapped (LD_PRELOAD of the fake; on a GPU machine, start a few CUDA programs beforehand).
// Reference: NVIDIA's cuda-checkpoint needs about 0.9 s for one --get-state on a 4-GPU H200 host.

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import type { CheckpointDriver } from "../core/driver.ts";
import { listCudaProcesses, setFallbackHostOpener } from "../core/listing.ts";
import { openLinuxHost } from "../ffi/host.ts";
import { openNativeDriver } from "../ffi/mod.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    processes: { type: "string", default: "300" },
    runs: { type: "string", default: "9" },
    libcuda: { type: "string" },
    nvml: { type: "string" },
  },
});
const count = Number(values.processes);
const runs = Number(values.runs);

let fakeDir: string | undefined;
let driver: CheckpointDriver & AsyncDisposable;
let preload: string | undefined;
try {
  driver = await openNativeDriver(values.libcuda ? { libraryPath: values.libcuda } : {});
  console.log(`driver: ${driver.kind}, ${(driver as { libraryPath?: string }).libraryPath}`);
} catch (error) {
  fakeDir = mkdtempSync(join(tmpdir(), "ckpt-bench-listing-"));
  preload = join(fakeDir, "libcuda.so.1");
  const source = new URL("../tests/fixtures/fake_libcuda.c", import.meta.url).pathname;
  execFileSync("cc", ["-shared", "-fPIC", "-O2", "-o", preload, source, "-lpthread"]);
  driver = await openNativeDriver({ libraryPath: preload });
  console.log(
    `driver: no libcuda here (${(error as Error).message.split("\n")[0]}); using the fake ` +
      `libcuda (every pid a CUDA process): these figures are this package's own cost`,
  );
}

// As the main module does: the Linux host is the default.
setFallbackHostOpener(() => openLinuxHost({ nvmlPath: values.nvml }));

const kids: ChildProcess[] = [];
for (let i = 0; i < count; i++) {
  // Every 50th idle process has the fake libcuda mapped, so the default rule has candidates.
  const env = preload && i % 50 === 0 ? { ...process.env, LD_PRELOAD: preload } : process.env;
  kids.push(spawn("sleep", ["3600"], { stdio: "ignore", env }));
}
await new Promise((r) => setTimeout(r, 300 + count));

async function time(label: string, fn: () => Promise<string>): Promise<void> {
  const times: number[] = [];
  let note = "";
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    note = await fn();
    times.push(performance.now() - start);
  }
  const first = times[0];
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(
    `${label.padEnd(44)} median ${median.toFixed(1).padStart(6)} ms, min ${
      times[0].toFixed(1).padStart(6)
    }, first ${first.toFixed(1).padStart(6)}  (${note})`,
  );
}

try {
  await using host = openLinuxHost({ nvmlPath: values.nvml });
  const scanned = (await host.scan()).length;
  console.log(`${scanned} processes in /proc (${count} idle sleeps started), ${runs} runs each`);
  await time("/proc scan alone", async () => `${(await host.scan()).length} processes`);
  await time("NVML GPU memory alone", async () => {
    const report = await host.gpuMemory();
    return "byPid" in report ? `${report.byPid.size} pids` : `unknown: ${report.unknown}`;
  });
  for (const candidates of ["libcuda", "all"] as const) {
    for (const gpuMemory of [false, true]) {
      await time(`listing, candidates ${candidates}, gpuMemory ${gpuMemory}`, async () => {
        const l = await listCudaProcesses({ driver, host, candidates, gpuMemory });
        return `${l.processes.length} CUDA, ${l.asked} asked, ${l.uninspectable.length} uninspectable`;
      });
    }
  }
  await time("listing with a host opened and closed per call", async () => {
    const l = await listCudaProcesses({ driver });
    return `${l.processes.length} CUDA; memory ${l.gpuMemoryUnknown ?? "known"}`.slice(0, 90);
  });
} finally {
  for (const kid of kids) kid.kill();
  await driver[Symbol.asyncDispose]();
  if (fakeDir) rmSync(fakeDir, { recursive: true, force: true });
}
