// What the checks of a snapshot's restore cost on a GPU machine, one by one (ms): the driver's
// opening and version, its GPU list (cuInit), NVML's first and second reads, the pid scan, criu's
// probe; then a GPU list and an NVML read in a fresh driver and host at once, to see whether they
// overlap. Run as root from the repo root:
//   BUN_BE_BUN=1 /tmp/ckpt/cuda-checkpoint tests/gpu/exp/check_costs.ts   (or deno run -A)
import process from "node:process";
import { openNativeDriver } from "../../../ffi/native.ts";
import { LinuxHost } from "../../../os/linux_host.ts";
import { openCriuEngine } from "../../../os/criu.ts";

let t = performance.now();
const lap = (what: string) => {
  const now = performance.now();
  console.log(`${what.padEnd(40)} ${(now - t).toFixed(1)} ms`);
  t = now;
};
const driver = await openNativeDriver();
lap("openNativeDriver");
await driver.driverVersion();
lap("driverVersion");
await driver.listGpus();
lap("listGpus (cuInit, first)");
await driver.listGpus();
lap("listGpus (second)");
const host = new LinuxHost();
lap("new LinuxHost");
await host.gpuMemory();
lap("gpuMemory (NVML, first)");
await host.gpuMemory();
lap("gpuMemory (second)");
await host.pidsInUse([process.pid, 4242, 4243]);
lap("pidsInUse (3 ids)");
await openCriuEngine().probe();
lap("criu probe (version, check)");
await host.close();
await driver.close();
t = performance.now();
const [d2, h2] = [await openNativeDriver(), new LinuxHost()];
await Promise.all([d2.listGpus(), h2.gpuMemory()]);
lap("a fresh listGpus and gpuMemory at once");
await h2.close();
await d2.close();
