// The 4 x H200 host's timing model (mock/timing.ts H200_X4_HOST_TIMING) against measurements that
// were NOT used to build it: docs/DRIVER.md#four-h200s, 4 x 8 GiB, one per GPU, on a 4 x H200 host
// (lock+checkpoint all at once 3.9-4.2 s, restore+unlock 1.78-1.87 s), and the default H200 model
// for contrast. The model's points come from bench/reports/growth-deno-4xh200 (one process).
import { test } from "node:test";
import assert from "node:assert/strict";
import { runGroup } from "../mod.ts";
import { SimulatedMachine, type TimingModel } from "../mock/mod.ts";
import { H200_TIMING, H200_X4_HOST_TIMING } from "../mock/timing.ts";

async function fourByEight(timing: TimingModel): Promise<{ suspend: number; resume: number }> {
  const sim = new SimulatedMachine({ gpus: 4, timing });
  const pids = [0, 1, 2, 3].map((gpu) => sim.spawn({ memoryMiB: 8192, gpu }).pid);
  const s = await runGroup("suspend", pids, { machine: sim });
  const r = await runGroup("resume", pids, { machine: sim });
  assert.ok(s.ok && r.ok);
  return { suspend: s.ms, resume: r.ms };
}

test("the 4 x H200 host model predicts 4 x 8 GiB at once within 1.35x of the measured host", async () => {
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
