// The library's reliability guarantees (README "Reliability", docs/RELIABILITY.md), one describe
// each, on the simulator with injected faults:
//   1. a failed suspend leaves the process as it was where the driver allows it, and says its state;
//   2. a failed resume leaves it checkpointed (a room refusal before the driver is even asked), and
//      says where it is;
//   3. operations on one process never interleave;
//   4. all-or-nothing leaves every process as it was (or says why one could not be);
//   5. a process in the failed state is reported as such, and nothing pretends to fix it;
//   6. an unknown state number or code is a clear error that names the number.
// No unhandled rejection: tests/unhandled_test.ts. Interrupts: tests/interrupt_test.ts.
// Runs unchanged under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  CudaError,
  CudaProcess,
  GpuRoomError,
  type ProcessState,
  RefusedError,
  runGroup,
} from "../mod.ts";
import type { Action } from "../types.ts";
import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_ERROR_UNKNOWN,
} from "../core/driver.ts";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import { cli } from "./cli_support.ts";

/** A machine with one target, some bytes written into it, and a handle on it. */
async function setup(options: { gpus?: number; memoryMiB?: number } = {}) {
  const sim = new SimulatedMachine({ gpus: options.gpus ?? 1 });
  const target = sim.spawn({ memoryMiB: options.memoryMiB ?? 64 });
  await target.write(4096, new Uint8Array([1, 2, 3, 4]));
  const digest = await target.memoryChunkedSha256();
  return { sim, target, digest, proc: new CudaProcess(target.pid, { machine: sim }) };
}

/** The error `p` rejects with. */
async function failure(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof Error, String(err));
    return err;
  }
  assert.fail("it should have failed");
}

/** Asserts that the message says the state the process is really in. */
function saysState(err: Error, target: SimulatedProcess): void {
  if (target.exited) {
    assert.match(err.message, /[Tt]he process has exited$/, err.message);
    return;
  }
  const said = target.state === "failed"
    ? /[Tt]he process is failed, which is final|the failed state is final/
    : new RegExp(
      `[Bb]rought back to ${target.state}|[Tt]he process is ${target.state}|\\(the process is ${target.state}\\)`,
    );
  assert.match(err.message, said, `${target.state}: ${err.message}`);
}

describe("1. a failed suspend: running again where the driver allows it, and the error says so", () => {
  const cases: [
    string,
    (s: SimulatedMachine, t: SimulatedProcess) => void,
    ProcessState | "gone",
  ][] = [
    ["a lock that times out", (_, t) => void t.launch(60_000), "running"],
    ["a lock that fails", (_, t) => t.failNext("lock", { code: CUDA_ERROR_UNKNOWN }), "running"],
    [
      "a lock that leaves the process failed",
      (_, t) => t.failNext("lock", { code: CUDA_ERROR_UNKNOWN, state: "failed" }),
      "failed",
    ],
    [
      "a checkpoint that fails",
      (_, t) => t.failNext("checkpoint", { code: CUDA_ERROR_OUT_OF_MEMORY }),
      "running",
    ],
    [
      "a checkpoint that fails but leaves it checkpointed: restored and unlocked",
      (_, t) => t.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN, state: "checkpointed" }),
      "running",
    ],
    [
      "a checkpoint that fails and leaves it running",
      (_, t) => t.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN, state: "running" }),
      "running",
    ],
    [
      "a checkpoint that fails, then an unlock that fails: it says locked",
      (_, t) => {
        t.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
        t.failNext("unlock", { code: CUDA_ERROR_UNKNOWN });
      },
      "locked",
    ],
    [
      "a checkpoint that leaves the process failed",
      (_, t) => t.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN, state: "failed" }),
      "failed",
    ],
    ["the process exits during the checkpoint", (_, t) => t.exitDuring("checkpoint"), "gone"],
  ];
  for (const [what, arrange, after] of cases) {
    test(what, async () => {
      const { sim, target, digest, proc } = await setup();
      arrange(sim, target);
      const err = await failure(proc.suspend({ timeoutMs: 1000 }));
      assert.equal(target.exited ? "gone" : target.state, after);
      saysState(err, target);
      if (after === "running") assert.equal(await target.memoryChunkedSha256(), digest);
    });
  }

  test("a suspend of a locked process checkpoints it; a failed checkpoint leaves it locked", async () => {
    const { target, proc } = await setup();
    await proc.lock();
    const done = await proc.suspend();
    assert.deepEqual([done.status, done.state], ["done", "checkpointed"]);
    assert.deepEqual(done.steps.map((s) => s.step), ["checkpoint"]);
    await proc.resume();
    await proc.lock();
    target.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    const err = await failure(proc.suspend());
    assert.equal(target.state, "locked", "as it was: its lock was not this suspend's");
    saysState(err, target);
  });
});

describe("2. a failed resume: still checkpointed, and the error says how to try again", () => {
  test("out of GPU memory: refused before the driver; free it, or go to another GPU; both work", async () => {
    const { sim, target, digest, proc } = await setup({ gpus: 2 });
    await proc.suspend();
    const filler = sim.fillGpu(0);
    const err = await failure(proc.resume());
    assert.ok(err instanceof GpuRoomError, `a GpuRoomError: ${err}`);
    assert.ok(err instanceof RefusedError && !(err instanceof CudaError), "no driver error");
    assert.equal(err.code, "NO_ROOM", "a code of its own: the driver never returned one");
    assert.equal(target.state, "checkpointed");
    assert.equal(target.restoreRefused, false, "the driver was not asked");
    assert.equal(err.shortage.gpu, sim.gpus[0].uuid);
    assert.equal(err.shortage.freeMiB, 0);
    assert.equal(err.shortage.neededMiB, target.memoryMiB + sim.gpus[0].contextMiB);
    assert.match(
      err.message,
      /^resume of process \d+ refused: it needs \d+ MiB on GPU-[0-9a-f-]+, which has 0 MiB free\. Nothing was asked of the driver: the process is still checkpointed$/,
    );
    // Onto the other GPU, with the first one still full.
    const [a, b] = sim.gpus.map((g) => g.uuid);
    await proc.resume({ gpuMapping: { [a]: b, [b]: a } });
    assert.deepEqual(target.gpuUuids, [b]);
    assert.equal(await target.memoryChunkedSha256(), digest);
    // And back where it was, once that GPU is free again.
    await proc.suspend();
    filler.exit();
    await proc.resume({ gpuMapping: { [a]: b, [b]: a } });
    assert.deepEqual(target.gpuUuids, [a]);
    assert.equal(await target.memoryChunkedSha256(), digest);
  });

  test("out of GPU memory inside the driver (checkRoom: false): the error says the process is lost", async () => {
    const { sim, target, proc } = await setup({ gpus: 2 });
    await proc.suspend();
    const filler = sim.fillGpu(0);
    const err = await failure(proc.resume({ checkRoom: false }));
    assert.ok(err instanceof CudaError && !(err instanceof GpuRoomError), `${err}`);
    assert.equal(err.code, CUDA_ERROR_OUT_OF_MEMORY);
    assert.equal(target.state, "checkpointed");
    assert.match(
      err.message,
      /^restore of process \d+ failed: CUDA_ERROR_OUT_OF_MEMORY \(2\): out of memory\. On driver 580 the process cannot be restored after this, even once memory is free \(docs\/ERRORS\.md#out-of-memory\)\. The process is checkpointed$/,
    );
    // As driver 580 does: every later restore is refused, here or elsewhere, room or not.
    filler.exit();
    const [a, b] = sim.gpus.map((g) => g.uuid);
    for (const options of [{}, { gpuMapping: { [a]: b, [b]: a } }]) {
      const again = await failure(proc.resume(options));
      assert.ok(
        again instanceof CudaError && again.code === CUDA_ERROR_OPERATING_SYSTEM,
        `${again}`,
      );
      assert.match(
        again.message,
        /\. The process is checkpointed, yet the driver refuses to restore it, as driver 580 does after a restore of it ran out of memory \(docs\/ERRORS\.md#out-of-memory\)$/,
      );
      assert.equal(target.state, "checkpointed");
    }
  });

  const others: [string, "restore" | "unlock", number, "failed" | undefined, string, RegExp][] = [
    [
      "any other failure: checkpointed, and it says so",
      "restore",
      CUDA_ERROR_INVALID_VALUE,
      undefined,
      "checkpointed",
      /^restore of process \d+ failed: CUDA_ERROR_INVALID_VALUE \(1\): invalid argument\. The process is checkpointed$/,
    ],
    [
      "restored but not unlocked: checkpointed again, as it was, and it says so",
      "unlock",
      CUDA_ERROR_UNKNOWN,
      undefined,
      "checkpointed",
      /^unlock of process \d+ failed: CUDA_ERROR_UNKNOWN \(999\): unknown error\. It was brought back to checkpointed$/,
    ],
    [
      "a restore that leaves the process failed says the state is final",
      "restore",
      CUDA_ERROR_UNKNOWN,
      "failed",
      "failed",
      /\. The process is failed, which is final$/,
    ],
  ];
  for (const [what, op, code, state, after, said] of others) {
    test(what, async () => {
      const { target, proc } = await setup();
      await proc.suspend();
      target.failNext(op, state ? { code, state } : { code });
      const err = await failure(proc.resume());
      assert.equal(target.state, after);
      assert.match(err.message, said);
      if (after !== "failed") await proc.resume();
      if (after !== "failed") assert.equal(target.state, "running", "and it goes on from there");
    });
  }
});

describe("3. operations on one process never interleave", () => {
  test("one made after the first has ended, while the second runs, still waits for the second", async () => {
    const { sim, target, proc } = await setup();
    const other = new CudaProcess(target.pid, { machine: sim });
    const before = sim.driver.calls.length;
    const suspended = proc.suspend();
    const resumed = proc.resume();
    await suspended; // the resume runs now, its restore a while in the simulator
    const state = other.state();
    await resumed;
    assert.equal(await state, "running", "read once the resume had ended");
    assert.deepEqual(sim.driver.calls.slice(before).map((c) => c.op), [
      ...["getState", "lock", "checkpoint"], // suspend
      ...["getState", "restore", "unlock"], // resume
      "getState", // state
    ]);
  });

  test("made all at once through two handles, they run one after another, in order", async () => {
    const { sim, target, proc } = await setup();
    const other = new CudaProcess(target.pid, { machine: sim });
    const before = sim.driver.calls.length;
    const settled = await Promise.allSettled([
      proc.suspend(),
      other.state(),
      proc.resume(),
      other.toggle(),
      proc.lock(),
      other.unlock(),
      proc.state(),
    ]);
    assert.deepEqual(
      settled.map((s) =>
        s.status === "rejected"
          ? "rejected"
          : typeof s.value === "string"
          ? s.value
          : (s.value as { state: string }).state
      ),
      [
        "checkpointed",
        "checkpointed",
        "running",
        "checkpointed",
        "rejected",
        "rejected",
        "checkpointed",
      ],
    );
    // The driver saw each operation's calls together, in the order the operations were made.
    assert.deepEqual(sim.driver.calls.slice(before).map((c) => c.op), [
      ...["getState", "lock", "checkpoint"], // suspend
      "getState", // state
      ...["getState", "restore", "unlock"], // resume
      ...["getState", "lock", "checkpoint"], // toggle
      ...["lock", "getState"], // lock: refused, and the state for the message
      ...["unlock", "getState"], // unlock: refused, and the state for the message
      "getState", // state
    ]);
  });

  test("a group and single operations on the same process: the group's steps stay together", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn({ memoryMiB: 1024 }), sim.spawn()];
    const single = new CudaProcess(a.pid, { machine: sim });
    const [group, resumed] = await Promise.allSettled([
      runGroup("suspend", [a.pid, b.pid], { machine: sim }),
      single.resume(),
    ]);
    assert.equal(group.status, "fulfilled");
    const ops = sim.driver.calls.filter((c) => c.pid === a.pid && c.op !== "getState").map((c) =>
      c.op
    );
    const lock = ops.indexOf("lock");
    assert.equal(
      ops[lock + 1],
      "checkpoint",
      `no call between the group's lock and checkpoint: ${ops}`,
    );
    // Whichever came first, the outcome agrees: a resume after the suspend brought it back, one
    // before it found the process running and left it.
    assert.equal(resumed.status, "fulfilled");
    const { status } = (resumed as PromiseFulfilledResult<{ status: string }>).value;
    assert.equal(a.state, status === "done" ? "running" : "checkpointed");
  });
});

describe("4. all-or-nothing leaves every process as it was", () => {
  async function many(sim: SimulatedMachine, states: ProcessState[]) {
    const procs = [];
    for (const [i, state] of states.entries()) {
      const p = sim.spawn({ memoryMiB: 64 });
      await p.write(i * 100, new Uint8Array([i + 1]));
      if (state !== "running") assert.equal(await sim.driver.lock(p.pid, { timeoutMs: 0 }), 0);
      if (state === "checkpointed") assert.equal(await sim.driver.checkpoint(p.pid), 0);
      procs.push(p);
    }
    return { procs, digests: await Promise.all(procs.map((p) => p.memoryChunkedSha256())) };
  }

  const failures: [string, Action, (p: SimulatedProcess) => void, string | undefined][] = [
    [
      "a member's checkpoint fails but leaves it checkpointed",
      "suspend",
      (p) => p.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN, state: "checkpointed" }),
      "running",
    ],
    [
      "a member's restore runs out of memory",
      "resume",
      (p) => p.failNext("restore", { code: CUDA_ERROR_OUT_OF_MEMORY }),
      "checkpointed",
    ],
    [
      "a member enters the failed state",
      "suspend",
      (p) => p.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN, state: "failed" }),
      "failed",
    ],
    ["a member exits", "suspend", (p) => p.exitDuring("checkpoint", { afterMs: 100 }), undefined],
  ];
  for (const [what, action, arrange, failingEnds] of failures) {
    test(`${action}: ${what}; the others come back, each outcome says where it is`, async () => {
      const sim = new SimulatedMachine();
      const { procs, digests } = await many(sim, ["running", "locked", "checkpointed"]);
      const failing = sim.spawn({ memoryMiB: 64 });
      if (action === "resume") {
        await sim.driver.lock(failing.pid, null);
        await sim.driver.checkpoint(failing.pid);
      }
      arrange(failing);
      const result = await runGroup(action, [...procs, failing].map((p) => p.pid), {
        machine: sim,
        allOrNothing: true,
      });
      assert.equal(result.ok, false);
      assert.deepEqual(procs.map((p) => p.state), ["running", "locked", "checkpointed"]);
      assert.deepEqual(await Promise.all(procs.map((p) => p.memoryChunkedSha256())), digests);
      for (const [i, o] of result.processes.entries()) {
        const real = [...procs, failing][i];
        assert.equal(o.state, real.exited ? undefined : real.state, `pid ${o.pid}'s outcome`);
      }
      assert.equal(failing.exited ? undefined : failing.state, failingEnds);
    });
  }

  test("the done ones come back at once, not after a member stuck in the driver", async () => {
    const sim = new SimulatedMachine();
    const [stuck, failing, ok] = [sim.spawn(), sim.spawn(), sim.spawn()];
    const release = stuck.hangNext("lock");
    failing.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    let seen: string[] = [];
    const group = runGroup("suspend", [stuck, failing, ok].map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    await sim.sleep(5_000);
    seen = [stuck, failing, ok].map((p) => p.state);
    release();
    const result = await group;
    assert.deepEqual(seen, ["running", "running", "running"], "back while the lock still hung");
    assert.deepEqual(result.processes.map((p) => p.status), ["stopped", "failed", "rolled-back"]);
    assert.ok(result.rolledBack);
    assert.deepEqual([stuck, failing, ok].map((p) => p.state), ["running", "running", "running"]);
  });

  test("rollBackOnAbort: an aborted group brings back even the processes that were done", async () => {
    const sim = new SimulatedMachine();
    const big = sim.spawn({ memoryMiB: 4096 });
    const small = sim.spawn();
    const controller = new AbortController();
    const group = runGroup("suspend", [big.pid, small.pid], {
      machine: sim,
      signal: controller.signal,
      rollBackOnAbort: true,
    });
    await sim.sleep(600); // the small one is done, the big one in its checkpoint
    controller.abort();
    const result = await group;
    assert.equal(result.ok, false);
    assert.equal(result.aborted, true);
    assert.equal(result.rolledBack, true);
    assert.deepEqual(result.processes.map((p) => [p.status, p.rollback?.ok, p.state]), [
      ["rolled-back", true, "running"],
      ["rolled-back", true, "running"],
    ]);
    assert.deepEqual([big.state, small.state], ["running", "running"]);
  });

  test("without it, an abort keeps what is done and brings back the one between steps", async () => {
    const sim = new SimulatedMachine();
    const [slow, fast] = [sim.spawn({ memoryMiB: 4096 }), sim.spawn()];
    slow.launch(1000); // its lock waits for the kernel
    const controller = new AbortController();
    const group = runGroup("suspend", [slow.pid, fast.pid], {
      machine: sim,
      signal: controller.signal,
    });
    await sim.sleep(500);
    controller.abort();
    const result = await group;
    assert.deepEqual(result.processes.map((p) => [p.status, p.state]), [
      ["stopped", "running"],
      ["done", "checkpointed"],
    ]);
  });
});

describe("5. a failed process is reported as failed, and nothing pretends to fix it", () => {
  test("every operation refuses it, says so, and leaves it failed", async () => {
    const { sim, target, proc } = await setup();
    target.enterFailedState();
    assert.equal(await proc.state(), "failed");
    const operations: [string, () => Promise<unknown>][] = [
      ["lock", () => proc.lock()],
      ["checkpoint", () => proc.checkpoint()],
      ["restore", () => proc.restore()],
      ["unlock", () => proc.unlock()],
      ["suspend", () => proc.suspend()],
      ["resume", () => proc.resume()],
      ["toggle", () => proc.toggle()],
    ];
    for (const [what, run] of operations) {
      const err = await failure(run());
      // A step asks the driver, which refuses it; a goal is refused before the driver is asked.
      const goal = what === "suspend" || what === "resume" || what === "toggle";
      if (goal) assert.ok(err instanceof RefusedError && err.code === "STATE", what);
      else assert.ok(err instanceof CudaError && err.code === CUDA_ERROR_ILLEGAL_STATE, what);
      assert.equal((err as CudaError | RefusedError).state, "failed", what);
      assert.match(err.message, /the failed state is final/i, `${what}: ${err.message}`);
    }
    await assert.rejects(
      proc.waitForState("running", { timeoutMs: 60_000 }),
      (err: unknown) =>
        err instanceof RefusedError &&
        err.message ===
          `waitForState of process ${target.pid} refused: it is failed, which is final: it will never be running`,
    );
    for (const action of ["suspend", "resume", "lock", "unlock"] as Action[]) {
      const result = await runGroup(action, [target.pid], { machine: sim });
      assert.deepEqual(result.processes.map((p) => [p.status, p.state ?? p.initialState]), [
        ["failed", "failed"],
      ]);
    }
    const changing = sim.driver.calls.filter((c) => c.pid === target.pid && c.op !== "getState");
    assert.ok(changing.every((c) => c.code !== 0), "no state-changing call ever succeeded");
    assert.equal(target.state, "failed");
  });

  test("the command line says failed, and refuses to toggle it", async () => {
    const { sim, target } = await setup();
    target.enterFailedState();
    assert.equal(
      (await cli(["--get-state", "--pid", target.pid], { machine: sim })).out,
      "failed\n",
    );
    const r = await cli(["--toggle", "--pid", target.pid], { machine: sim, isTerminal: true });
    assert.equal(r.code, 1);
    assert.match(r.err, /the failed state is final/);
    assert.equal(target.state, "failed");
  });
});

describe("6. an unknown state number or code is a clear error that names it", () => {
  test("a state number from a newer driver: every reader names it", async () => {
    const { sim, target, proc } = await setup();
    const named =
      /gave state 5, which this version of @ckpt\/cuda does not know \(a newer driver's; it knows running 0, locked 1, checkpointed 2, failed 3\)/;
    for (
      const read of [() => proc.state(), () => proc.toggle(), () => proc.waitForState("locked")]
    ) {
      target.answerNext("getState", { value: 5 });
      await assert.rejects(read(), named);
    }
    target.answerNext("getState", { value: 5 });
    const result = await runGroup("suspend", [target.pid], { machine: sim });
    assert.match(result.processes[0].error!.message, named);
    assert.equal(target.state, "running", "nothing was done to it");
    target.answerNext("getState", { value: 5 });
    const r = await cli(["--get-state", "--pid", target.pid], { machine: sim });
    assert.equal(r.code, 1);
    assert.match(r.err, /gave state 5/);
  });

  test("a code the driver does not know: named by number, by the library and the command line", async () => {
    const { sim, target, proc } = await setup();
    target.failNext("lock", { code: 7777 });
    const err = await failure(proc.lock());
    assert.ok(err instanceof CudaError);
    assert.equal(err.code, 7777);
    assert.equal(err.codeName, "CUresult 7777");
    assert.match(err.message, /failed with CUresult 7777, a code neither the driver nor/);
    target.failNext("lock", { code: 7777 });
    const r = await cli(["--action", "lock", "--pid", target.pid, "--json"], { machine: sim });
    assert.equal(r.code, 1);
    const line = JSON.parse(r.out);
    assert.equal(line.error.code, 7777);
    assert.match(line.error.detail, /CUresult 7777/);
    assert.match(r.err, /^Could not lock on process ID \d+: "CUresult 7777"\n$/);
  });

  test("an unknown code during a rollback is named too", async () => {
    const { target, proc } = await setup();
    target.failNext("checkpoint", { code: CUDA_ERROR_OPERATING_SYSTEM + 1 });
    target.failNext("unlock", { code: 8888 });
    const err = await failure(proc.suspend());
    assert.match(err.message, /could not be brought back to running \(.*CUresult 8888.*\)/);
  });
});
