// The one state table (core/states.ts), and what derives from it agrees wherever it is used: one
// process's methods and the group operations on every initial state, the plans' steps with the
// driver's own rule for each step.
// Runs unchanged under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  CudaError,
  CudaProcess,
  type Outcome,
  type ProcessState,
  RefusedError,
  runGroup,
} from "../mod.ts";
import type { Action } from "../types.ts";
import {
  ACTIONS,
  GOALS,
  plan,
  PROCESS_STATES,
  rollbackWay,
  stepAllowed,
  stepFrom,
  STEPS,
  stepTo,
  undoOf,
  wayBetween,
} from "../core/states.ts";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";

describe("one table decides what is legal in which state", () => {
  test("each step goes between neighbours of the chain, and undoing it comes back", () => {
    for (const step of STEPS) {
      assert.deepEqual(wayBetween(stepFrom(step), stepTo(step)), [step], step);
      assert.equal(stepFrom(undoOf(step)), stepTo(step));
      assert.equal(stepTo(undoOf(step)), stepFrom(step));
      for (const state of PROCESS_STATES) {
        assert.equal(stepAllowed(step, state), state === stepFrom(step), `${step} in ${state}`);
      }
    }
  });

  test("every goal's plan is a way of legal steps that ends where the goal leads", () => {
    for (const goal of GOALS) {
      for (const from of PROCESS_STATES) {
        const p = plan(goal, from);
        if (p.kind !== "steps") continue;
        let at: ProcessState = from;
        for (const step of p.steps) {
          assert.ok(stepAllowed(step, at), `${goal} from ${from}: ${step} in ${at}`);
          at = stepTo(step);
        }
        assert.equal(at, p.to, `${goal} from ${from}`);
      }
    }
    // The rules the issue asked for, one each for suspend and resume, everywhere.
    assert.deepEqual(plan("suspend", "locked"), {
      kind: "steps",
      steps: ["checkpoint"],
      to: "checkpointed",
    });
    assert.deepEqual(plan("resume", "running"), { kind: "unchanged", to: "running" });
    assert.equal(plan("toggle", "locked").kind, "refused");
    assert.equal(plan("suspend", "failed").kind, "refused");
  });

  test("a rollback undoes only what was done", () => {
    // A checkpoint that failed and left the process locked: unlock it.
    assert.deepEqual(
      rollbackWay({ initial: "running", done: ["lock"], failed: "checkpoint", now: "locked" }),
      ["unlock"],
    );
    // Refused as illegal, and no longer where our lock left it: another program moved it.
    assert.deepEqual(
      rollbackWay({
        initial: "running",
        done: ["lock"],
        failed: "checkpoint",
        illegal: true,
        now: "checkpointed",
      }),
      [],
    );
    // State unknown: what was done, undone newest first.
    assert.deepEqual(
      rollbackWay({ initial: "running", done: ["lock", "checkpoint"], now: undefined }),
      ["restore", "unlock"],
    );
    assert.equal(rollbackWay({ initial: "running", done: [], now: "failed" }), undefined);
  });
});

/** A simulated process brought into `state` through the raw driver. */
async function into(sim: SimulatedMachine, state: ProcessState): Promise<SimulatedProcess> {
  const p = sim.spawn({ memoryMiB: 64 });
  if (state === "failed") {
    p.enterFailedState();
    return p;
  }
  if (state !== "running") assert.equal(await sim.driver.lock(p.pid, null), 0);
  if (state === "checkpointed") assert.equal(await sim.driver.checkpoint(p.pid), 0);
  return p;
}

/** What an operation did, in words both ways can give. */
type Seen = { status: string; state: string; steps: string; error?: string };

describe("one process and a group of one do the same, from every initial state", () => {
  for (const action of ACTIONS) {
    test(`${action}`, async () => {
      for (const from of PROCESS_STATES) {
        // The same machine twice: once through CudaProcess, once through runGroup.
        const alone = new SimulatedMachine();
        const single = await into(alone, from);
        let seenAlone: Seen;
        const proc = new CudaProcess(single.pid, { machine: alone });
        try {
          const o: Outcome = await (proc[action] as () => Promise<Outcome>).call(proc);
          seenAlone = {
            status: o.status,
            state: o.state,
            steps: o.steps.map((s) => s.step).join("+"),
          };
        } catch (err) {
          assert.ok(err instanceof CudaError || err instanceof RefusedError, String(err));
          seenAlone = {
            status: "failed",
            state: single.state,
            steps: "",
            error: `${err.constructor.name} ${err.code}`,
          };
        }
        const grouped = new SimulatedMachine();
        const member = await into(grouped, from);
        const result = await runGroup(action as Action, [member.pid], { machine: grouped });
        const o = result.processes[0];
        const error = o.error as CudaError | RefusedError | undefined;
        const seenGrouped: Seen = {
          status: o.status,
          state: member.state,
          steps: o.steps.filter((s) => s.ok).map((s) => s.step).join("+"),
          ...(error ? { error: `${error.constructor.name} ${error.code}` } : {}),
        };
        if (seenAlone.status === "failed") seenAlone.steps = seenGrouped.steps;
        assert.deepEqual(seenGrouped, seenAlone, `${action} from ${from}`);
        // The same driver calls, in the same order, with the same answers.
        const calls = (sim: SimulatedMachine) =>
          sim.driver.calls.filter((c) => c.op !== "getState").map((c) => `${c.op}:${c.code}`);
        assert.deepEqual(calls(grouped), calls(alone), `${action} from ${from}: driver calls`);
        // And both left the process where they say.
        assert.equal(single.state, member.state, `${action} from ${from}: the state after`);
        if (o.state !== undefined) assert.equal(o.state, member.state);
        await proc.close();
      }
    });
  }
});
