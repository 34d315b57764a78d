// Every row of the state table (tests/conformance/scenarios.ts, from shared/DRIVER_FACTS.md),
// reproduced by the simulated driver through the raw driver interface.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { notThroughProcess, runScenario } from "./conformance/runner.ts";
import { SCENARIOS } from "./conformance/scenarios.ts";
import { simulatedEnv } from "./conformance/sim_env.ts";

describe("the simulated driver reproduces the state table", () => {
  for (const s of SCENARIOS) {
    test(s.name, async () => {
      const env = simulatedEnv({ gpus: s.minGpus ?? 1 });
      const out = await runScenario(env, s);
      assert.equal(out.skipped, undefined);
      assert.deepEqual(out.problems, [], `${s.name}: ${out.problems.join("; ")}`);
      assert.equal(out.code, s.expect.code);
      assert.equal(out.state, s.expect.state);
      // Nothing is left behind: every target and filler exited.
      assert.equal(env.sim.processes.length, 0);
      assert.ok(env.sim.gpus.every((g) => g.usedMiB === 0), "GPU memory given back");
    });
  }

  test("a scenario that needs more GPUs than there are is skipped, not failed", async () => {
    const s = SCENARIOS.find((s) => s.minGpus === 2)!;
    const out = await runScenario(simulatedEnv({ gpus: 1 }), s);
    assert.equal(out.skipped, "needs 2 GPUs, this machine has 1");
  });

  test("the runner notices GPU memory that changed", async () => {
    const env = simulatedEnv({ gpus: 2 });
    const s = SCENARIOS.find((s) => s.expect.memoryIntact && s.minGpus === 2)!;
    const spawn = env.spawn;
    env.spawn = async (o) => {
      const t = await spawn(o);
      let calls = 0;
      return { ...t, memoryHash: async () => `${await t.memoryHash()}${calls++}` };
    };
    const out = await runScenario(env, s);
    assert.equal(out.problems.length, 1);
    assert.match(out.problems[0], /^GPU memory hash .* after, .* before$/);
  });

  test("scenario names are unique", () => {
    assert.equal(new Set(SCENARIOS.map((s) => s.name)).size, SCENARIOS.length);
  });

  test("the runner notices a driver that disagrees", async () => {
    const env = simulatedEnv();
    const wrong = { ...SCENARIOS.find((s) => s.name === "unlock while running")! };
    wrong.expect = { code: 0, state: "running" };
    const out = await runScenario(env, wrong);
    assert.equal(out.problems.length, 1);
    assert.match(out.problems[0], /CUDA_ERROR_ILLEGAL_STATE, expected CUDA_SUCCESS/);
  });
});

describe("the state table through the public API (CudaProcess)", () => {
  for (const s of SCENARIOS) {
    const why = notThroughProcess(s);
    test(s.name, { skip: why ? `raw driver only: ${why}` : false }, async () => {
      const env = simulatedEnv({ gpus: s.minGpus ?? 1 });
      const out = await runScenario(env, s, "process");
      assert.deepEqual(out.problems, [], `${s.name}: ${out.problems.join("; ")}`);
      assert.equal(out.code, s.expect.code);
      assert.equal(out.state, s.expect.state);
    });
  }
});
