// A timing model of another host, given as the `timing` option, against measurements that were NOT
// used to build it: a model of a 4 x H200 host made from one process's times alone (bench/reports/
// growth-deno-4xh200, 2026-11-21) and its restores' aggregate rate predicts 4 x 8 GiB at once, one
// per GPU (docs/DRIVER.md#four-h200s: lock+checkpoint 3.9-4.2 s, restore+unlock 1.78-1.87 s), as the
// simulator slows and caps copies at once; the default H200 model, of a one-GPU host, for contrast.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runGroup } from "../mod.ts";
import { SimulatedMachine, type TimingModel } from "../mock/mod.ts";
import { H200_TIMING } from "../mock/timing.ts";

/** One process alone on a 4 x H200 host with 512 GiB of memory (driver 580.159.04). */
const H200_X4_HOST_TIMING: TimingModel = {
  ...H200_TIMING,
  checkpoint: {
    fixedMs: 300,
    points: [[16, 318], [256, 443], [1024, 820], [4096, 2092], [16384, 8125], [32768, 15833]],
    aggregateBytesPerSecond: Infinity,
    slowdownPerProcess: 0.1,
  },
  restore: {
    fixedMs: 210,
    points: [[16, 225], [256, 242], [1024, 345], [4096, 847], [16384, 2931], [32768, 5593]],
    // 8 x 4 GiB (36.9 GB of GPU memory with contexts) restored in 1.78-2.37 s.
    aggregateBytesPerSecond: 19e9,
    slowdownPerProcess: 0,
  },
};

async function fourByEight(timing: TimingModel): Promise<{ suspend: number; resume: number }> {
  const sim = new SimulatedMachine({ gpus: 4, timing });
  const pids = [0, 1, 2, 3].map((gpu) => sim.spawn({ memoryMiB: 8192, gpu }).pid);
  const s = await runGroup("suspend", pids, { machine: sim });
  const r = await runGroup("resume", pids, { machine: sim });
  assert.ok(s.ok && r.ok);
  return { suspend: s.ms, resume: r.ms };
}

test("a 4 x H200 host model given as timing predicts 4 x 8 GiB at once within 1.35x of the measured host", async () => {
  const { suspend, resume } = await fourByEight(H200_X4_HOST_TIMING);
  const within = (ms: number, lo: number, hi: number) => ms >= lo / 1.35 && ms <= hi * 1.35;
  assert.ok(within(suspend, 3900, 4200), `suspend ${suspend} ms against 3900-4200 measured`);
  assert.ok(within(resume, 1780, 1870), `resume ${resume} ms against 1780-1870 measured`);
  // The one-GPU host's model is further off for this host: that is why the second model exists.
  const oneGpuHost = await fourByEight(H200_TIMING);
  assert.ok(
    Math.abs(oneGpuHost.suspend - 4050) > Math.abs(suspend - 4050),
    `one-GPU-host model ${oneGpuHost.suspend} ms, host model ${suspend} ms`,
  );
});
