// Calls that overlap on one process (docs/DRIVER.md#overlapping-calls): the
// driver serialises calls on a process, so a call made while another is under way waits for it,
// then acts on the state it left. Each row of the measured tables, through the raw driver.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import {
  CUDA_ERROR_ILLEGAL_STATE as ILLEGAL,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_SUCCESS as OK,
} from "../core/driver.ts";
import { CUprocessState } from "../core/states.ts";

type Op = "getState" | "getRestoreThreadId" | "lock" | "checkpoint" | "restore" | "unlock";

function callOp(
  sim: SimulatedMachine,
  op: Op,
  pid: number,
): Promise<{ code: number; value: number }> {
  switch (op) {
    case "getState":
      return sim.driver.getState(pid);
    case "getRestoreThreadId":
      return sim.driver.getRestoreThreadId(pid);
    case "lock":
      return sim.driver.lock(pid, { timeoutMs: 1000 }).then((code) => ({ code, value: 0 }));
    case "restore":
      return sim.driver.restore(pid, null).then((code) => ({ code, value: 0 }));
    default:
      return sim.driver[op](pid).then((code) => ({ code, value: 0 }));
  }
}

interface Run {
  sim: SimulatedMachine;
  p: SimulatedProcess;
  code: number;
  value: number;
  /** When the other call ended and when this one did, in ms after this one was made. */
  otherEnded: number;
  ended: number;
}

/** Starts `first` on a 4 GiB process in `setup`'s state, then `op` 100 ms into it. */
async function during(first: "checkpoint" | "restore", op: Op): Promise<Run> {
  const sim = new SimulatedMachine();
  const p = sim.spawn({ memoryMiB: 4096 });
  await sim.driver.lock(p.pid, null);
  if (first === "restore") await sim.driver.checkpoint(p.pid);
  let otherEnded = 0;
  const other = callOp(sim, first, p.pid).then((r) => {
    otherEnded = sim.now();
    return r;
  });
  await sim.sleep(100);
  const t = sim.now();
  const { code, value } = await callOp(sim, op, p.pid);
  const ended = sim.now() - t;
  assert.equal((await other).code, OK, `the ${first} itself succeeds`);
  return { sim, p, code, value, otherEnded: otherEnded - t, ended };
}

describe("issued 100 ms into a 4 GiB checkpoint", () => {
  test("getState waits, then returns checkpointed", async () => {
    const r = await during("checkpoint", "getState");
    assert.equal(r.code, OK);
    assert.equal(r.value, CUprocessState.CU_PROCESS_STATE_CHECKPOINTED);
    assert.ok(r.ended >= r.otherEnded && r.otherEnded > 1000, `${r.ended} vs ${r.otherEnded}`);
  });

  for (const op of ["lock", "checkpoint", "unlock"] as const) {
    test(`${op} waits, then gives ILLEGAL_STATE (the state is now checkpointed)`, async () => {
      const r = await during("checkpoint", op);
      assert.equal(r.code, ILLEGAL);
      assert.ok(
        r.ended >= r.otherEnded && r.ended - r.otherEnded < 1,
        `${r.ended} vs ${r.otherEnded}`,
      );
      assert.equal(r.p.state, "checkpointed");
    });
  }

  test("restore waits, then restores: after the checkpoint plus its own time", async () => {
    const r = await during("checkpoint", "restore");
    assert.equal(r.code, OK);
    assert.equal(r.p.state, "locked");
    const own = r.ended - r.otherEnded;
    assert.ok(own > 700 && own < 1000, `restore took ${own} ms after the checkpoint ended`);
  });

  test("getRestoreThreadId does not wait", async () => {
    const r = await during("checkpoint", "getRestoreThreadId");
    assert.equal(r.code, OK);
    assert.equal(r.value, r.p.tid);
    assert.ok(r.ended < 1 && r.otherEnded > 1000);
  });
});

describe("issued 100 ms into a 4 GiB restore", () => {
  test("getState waits, then returns locked", async () => {
    const r = await during("restore", "getState");
    assert.equal(r.value, CUprocessState.CU_PROCESS_STATE_LOCKED);
    assert.ok(r.ended >= r.otherEnded && r.otherEnded > 500);
  });

  for (const op of ["lock", "restore"] as const) {
    test(`${op} waits, then gives ILLEGAL_STATE (the state is now locked)`, async () => {
      const r = await during("restore", op);
      assert.equal(r.code, ILLEGAL);
      assert.ok(r.ended >= r.otherEnded && r.ended - r.otherEnded < 1);
      assert.equal(r.p.state, "locked");
    });
  }

  test("unlock waits, then unlocks", async () => {
    const r = await during("restore", "unlock");
    assert.equal(r.code, OK);
    assert.equal(r.p.state, "running");
    assert.ok(r.ended >= r.otherEnded && r.ended - r.otherEnded < 5);
  });

  test("checkpoint waits, then checkpoints: after the restore plus its own time", async () => {
    const r = await during("restore", "checkpoint");
    assert.equal(r.code, OK);
    assert.equal(r.p.state, "checkpointed");
    const own = r.ended - r.otherEnded;
    assert.ok(own > 1500 && own < 2300, `checkpoint took ${own} ms after the restore ended`);
  });

  test("getRestoreThreadId does not wait", async () => {
    const r = await during("restore", "getRestoreThreadId");
    assert.ok(r.code === OK && r.ended < 1);
  });
});

describe("two identical calls at the same moment: one SUCCESS, the other ILLEGAL_STATE", () => {
  const setups: Record<"lock" | "checkpoint" | "restore" | "unlock", Op[]> = {
    lock: [],
    checkpoint: ["lock"],
    restore: ["lock", "checkpoint"],
    unlock: ["lock"],
  };
  for (const [op, setup] of Object.entries(setups)) {
    test(op, async () => {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 1024 });
      for (const s of setup) assert.equal((await callOp(sim, s, p.pid)).code, OK);
      const codes =
        (await Promise.all([callOp(sim, op as Op, p.pid), callOp(sim, op as Op, p.tid)]))
          .map((r) => r.code);
      assert.deepEqual(
        codes.sort((a, b) => a - b),
        [OK, ILLEGAL],
        "a thread id is the same process",
      );
    });
  }
});

describe("around the queue", () => {
  test("calls on another process are not held up", async () => {
    const sim = new SimulatedMachine();
    const a = sim.spawn({ memoryMiB: 4096 }), b = sim.spawn();
    await sim.driver.lock(a.pid, null);
    const ckpt = sim.driver.checkpoint(a.pid);
    await sim.sleep(100);
    const t = sim.now();
    assert.equal((await sim.driver.getState(b.pid)).code, OK);
    assert.ok(sim.now() - t < 1);
    assert.equal(await ckpt, OK);
  });

  test("a call queued behind a checkpoint whose process exits gives OPERATING_SYSTEM", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 });
    await sim.driver.lock(p.pid, null);
    const ckpt = sim.driver.checkpoint(p.pid);
    await sim.sleep(50);
    const queued = sim.driver.getState(p.pid);
    await sim.sleep(50);
    p.exit();
    assert.equal(await ckpt, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal((await queued).code, CUDA_ERROR_OPERATING_SYSTEM);
  });

  test("the call log says what a call waited for", async () => {
    const r = await during("checkpoint", "lock");
    const lock = r.sim.driver.calls.findLast((c) => c.op === "lock")!;
    assert.match(
      lock.note ?? "",
      /^waited [\d.]+ ms for the checkpoint under way; lock needs a running process; it is checkpointed$/,
    );
  });
});

// One H200, driver 580.159.04 (docs/DRIVER.md, "A stopped process"): while a process is SIGSTOPped
// the driver answers none of its calls but the restore thread id, a lock's own timeout included
// (each call measured was cut off before SIGCONT: that it then acts on the state it finds is the
// simulator's model).
describe("a stopped process (SIGSTOP)", () => {
  /** `op` on a 1 GiB process brought to `setup`, then stopped; 10 s later, woken. */
  async function stoppedFor(setup: Op[], op: Op) {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    for (const s of setup) assert.equal((await callOp(sim, s, p.pid)).code, OK, s);
    await sim.engine.stop([p.pid]);
    const t = sim.now();
    let answeredAt: number | undefined;
    const call = callOp(sim, op, p.pid).then((r) => (answeredAt = sim.now() - t, r));
    await sim.sleep(10_000);
    const whileStopped = answeredAt;
    await sim.engine.wake([p.pid]);
    const { code, value } = await call;
    return { sim, p, code, value, whileStopped, answeredAt: answeredAt! };
  }

  const cases: [Op[], Op, number, string, number?][] = [
    [[], "getState", OK, "running", CUprocessState.CU_PROCESS_STATE_RUNNING],
    [[], "lock", OK, "locked"], // its 1000 ms timeout never ran out
    [["lock"], "getState", OK, "locked", CUprocessState.CU_PROCESS_STATE_LOCKED],
    [["lock"], "checkpoint", OK, "checkpointed"],
    [["lock"], "unlock", OK, "running"],
    [["lock", "checkpoint"], "restore", OK, "locked"],
    [["lock", "checkpoint"], "unlock", ILLEGAL, "checkpointed"],
  ];
  for (const [setup, op, code, state, value] of cases) {
    const from = setup.length === 0
      ? "running"
      : setup.at(-1) === "lock"
      ? "locked"
      : "checkpointed";
    test(`${op} of a ${from} one waits till it runs again, then acts: ${state}`, async () => {
      const r = await stoppedFor(setup, op);
      assert.equal(r.whileStopped, undefined, "no answer in 10 s while stopped");
      assert.equal(r.code, code);
      if (value !== undefined) assert.equal(r.value, value);
      assert.equal(r.p.state, state);
      assert.ok(r.answeredAt >= 10_000, `answered ${r.answeredAt} ms after the call`);
    });
  }

  test("getRestoreThreadId answers at once", async () => {
    const r = await stoppedFor([], "getRestoreThreadId");
    assert.ok(r.code === OK && r.value === r.p.tid && r.answeredAt < 1, `${r.answeredAt} ms`);
  });

  test("a call waiting on it, and those queued behind it, give OPERATING_SYSTEM once it exits", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    await sim.engine.stop([p.pid]);
    const lock = sim.driver.lock(p.pid, null), state = sim.driver.getState(p.pid);
    await sim.sleep(1000);
    p.exit();
    assert.equal(await lock, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal((await state).code, CUDA_ERROR_OPERATING_SYSTEM);
  });
});
