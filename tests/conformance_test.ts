// Regression tests: every row of the state table (tests/conformance/scenarios.ts, written from
// docs/DRIVER.md#state-machine) run on the simulated driver through the raw driver interface. They
// catch a simulator that drifts from the table; they do not prove the table right. That proof is
// the same scenarios run on a real GPU (tests/gpu/conformance.ts, reports in tests/gpu/reports/),
// where the runner's own expectations meet the real driver.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { Machine } from "../core/machine.ts";
import { forward } from "./support/forward.ts";
import { notThroughProcess, runScenario, timesAgree } from "./conformance/runner.ts";
import { SCENARIOS } from "./conformance/scenarios.ts";
import { simulatedEnv } from "./conformance/sim_env.ts";

describe("regression: the simulator still follows the recorded state table", () => {
  for (const s of SCENARIOS) {
    test(s.name, async () => {
      const env = simulatedEnv({ gpus: s.minGpus ?? 1 });
      const out = await runScenario(env, s);
      assert.equal(out.skipped, undefined);
      assert.deepEqual(out.problems, [], `${s.name}: ${out.problems.join("; ")}`);
      // Where two calls race, the runner's check stands: one SUCCESS and one ILLEGAL_STATE.
      if (!s.expect.eitherWins) assert.equal(out.code, s.expect.code);
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

describe("the runner's own checks can fail", () => {
  test("a driver that answers getState at once during a checkpoint is caught", async () => {
    const env = simulatedEnv();
    const sim = env.sim;
    // Answers from the state it saw last, without waiting for the checkpoint in flight.
    const impatient: Machine = forward(sim, {
      getState: (pid: number) => {
        const p = sim.process(pid);
        return Promise.resolve(
          p ? { code: 0, value: ["running", "locked", "checkpointed"].indexOf(p.state) } : {
            code: 304,
            value: 0,
          },
        );
      },
    });
    const s = SCENARIOS.find((s) => s.name === "getState issued 100 ms into a 4 GiB checkpoint")!;
    const out = await runScenario({ ...env, machine: impatient }, s);
    assert.deepEqual(out.problems, [
      "getState returned locked, expected checkpointed",
      "the call ended before the other call, expected after it (it waits)",
    ]);
  });

  test("two racing calls that both succeed are caught", async () => {
    const env = simulatedEnv();
    const s = SCENARIOS.find((s) => s.name === "two lock calls at the same moment: one wins")!;
    const lenient: Machine = forward(env.sim, {
      lock: () => Promise.resolve(0),
    });
    const out = await runScenario({ ...env, machine: lenient }, s);
    assert.match(
      out.problems[0],
      /gave CUDA_SUCCESS and CUDA_SUCCESS, expected one CUDA_SUCCESS and one CUDA_ERROR_ILLEGAL_STATE/,
    );
  });

  test("an unknown old UUID is refused for itself, not for another fault of the mapping", async () => {
    const env = simulatedEnv({ gpus: 2 });
    const s = SCENARIOS.find((s) => s.name === "restore with an unknown old GPU UUID")!;
    const out = await runScenario(env, s);
    assert.deepEqual(out.problems, []);
    const restore = env.sim.driver.calls.find((c) => c.op === "restore")!;
    assert.match(restore.note ?? "", /GPU-0badc0de-0000-4000-8000-00000000dead/);
  });
});

describe("times: the band in which the simulator agrees with the real driver", () => {
  test("half to twice the native time agrees; outside it does not", () => {
    assert.equal(timesAgree(752, 752), true);
    assert.equal(timesAgree(380, 752), true);
    assert.equal(timesAgree(360, 752), false);
    assert.equal(timesAgree(1500, 752), true);
    assert.equal(timesAgree(1600, 752), false);
  });

  test("two quick calls agree whatever their ratio; a quick and a slow one do not", () => {
    assert.equal(timesAgree(0.05, 0.3), true);
    assert.equal(timesAgree(0.05, 200), false);
    assert.equal(timesAgree(200, 0.3), false);
  });
});

describe("regression: the recorded state table through the public API (CudaProcess)", () => {
  for (const s of SCENARIOS) {
    const why = notThroughProcess(s);
    test(s.name, { skip: why ? `raw driver only: ${why}` : false }, async () => {
      const env = simulatedEnv({ gpus: s.minGpus ?? 1 });
      const out = await runScenario(env, s, "process");
      assert.deepEqual(out.problems, [], `${s.name}: ${out.problems.join("; ")}`);
      // Where two calls race, the runner's check stands: one SUCCESS and one ILLEGAL_STATE.
      if (!s.expect.eitherWins) assert.equal(out.code, s.expect.code);
      assert.equal(out.state, s.expect.state);
    });
  }
});
