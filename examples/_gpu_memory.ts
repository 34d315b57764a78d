/**
 * Prints, as one JSON object, the GPU memory (MiB by GPU UUID) each pid given holds, as NVML sees
 * it, or `{"unknown": "why"}`. Not an example: self_checkpoint.ts runs it as a child process to
 * ask about itself while it is checkpointed, when it cannot ask NVML itself (see
 * `ExampleMachine.gpuMemoryFromOutside`).
 *
 *   npx deno run -A examples/_gpu_memory.ts PID...
 */

import process from "node:process";
// NVML alone, without libcuda: the host part of this machine (not published; the examples' own
// helper). A process that has checkpointed itself asks through this child.
import { LinuxHost } from "../os/linux_host.ts";

const pids = process.argv.slice(2).map(Number);
const bad = process.argv.slice(2).find((arg) => !/^[1-9][0-9]*$/.test(arg));
if (bad !== undefined || pids.length === 0) {
  console.error(
    `_gpu_memory.ts: expected one or more pids (positive integers), got ${
      bad === undefined ? "none" : JSON.stringify(bad)
    }`,
  );
  process.exit(2);
}
await using host = new LinuxHost();
const report = await host.gpuMemory();
if ("unknown" in report) {
  console.log(JSON.stringify({ unknown: report.unknown }));
} else {
  console.log(
    JSON.stringify(Object.fromEntries(pids.map((pid) => [pid, report.byPid.get(pid) ?? {}]))),
  );
}
