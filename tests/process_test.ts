// CudaProcess over the simulated driver: the public contract, its errors and its rollbacks.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  CheckpointUnsupportedError,
  CudaError,
  CudaProcess,
  GpuRoomError,
  RefusedError,
  runGroup,
} from "../mod.ts";
import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_ERROR_UNKNOWN,
  type RestoreArgs,
} from "../core/driver.ts";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SimulatedMachine } from "../mock/mod.ts";
import type { HeldRecords } from "../core/host.ts";
import { FileHeldRecords } from "../os/records.ts";
import { heldWhenCheckpointed } from "./support/held.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";
import { rejectsWith } from "./support/rejects.ts";

function setup(memoryMiB = 1024, gpus = 2) {
  const sim = new SimulatedMachine({ gpus });
  const target = sim.spawn({ memoryMiB });
  const proc = new CudaProcess(target.pid, { machine: sim });
  return { sim, target, proc };
}

/**
 * Two that meet, once `reset`: each `wait`s until the other came too, or 50 ms at most (or one
 * `arrive`s, and others wait `until` two came); `met` says whether two came and none waited in vain.
 */
function meeting() {
  let met = Promise.withResolvers<void>(), came = 0, armed = false, missed = 0;
  const arrive = () => void (armed && ++came === 2 && met.resolve());
  const until = async () => {
    if (!armed) return;
    const late = new Promise<"late">((ok) => setTimeout(() => ok("late"), 50));
    if ((await Promise.race([met.promise, late])) === "late") missed++;
  };
  return {
    arrive,
    until,
    wait: () => (arrive(), until()),
    reset: () => void ([met, came, armed, missed] = [Promise.withResolvers(), 0, true, 0]),
    get came() {
      return came;
    },
    get met() {
      return came >= 2 && missed === 0;
    },
  };
}

/**
 * `records`, each listing held at `m` until two claims are in them: two restores' claims are then
 * both made before either counts the claims, as two reads of the record files at once may find
 * them (one session lists once at a time, so its restores' listings cannot be the ones to meet).
 */
function listedAt(m: ReturnType<typeof meeting>, records: HeldRecords): HeldRecords {
  return {
    where: records.where,
    get: (p) => records.get(p),
    put: (r) => records.put(r).then(() => r.claim && m.arrive()),
    remove: (p) => records.remove(p),
    list: () => m.until().then(() => records.list()),
  };
}

describe("the issue's example", () => {
  test("state, suspend, resume", async () => {
    const { sim, target, proc } = setup();
    assert.equal(proc.pid, target.pid);
    assert.equal(await proc.state(), "running");
    await proc.suspend();
    assert.equal(await proc.state(), "checkpointed");
    assert.equal(target.memoryLocation, "host");
    assert.equal(sim.gpus[0].usedMiB, 0, "GPU memory released on checkpoint");
    await proc.resume();
    assert.equal(await proc.state(), "running");
    assert.equal(
      sim.gpus[0].usedMiB,
      1024 + sim.gpus[0].contextMiB,
      "needed again on restore, with the context's",
    );
    assert.deepEqual(
      sim.driver.calls.filter((c) => c.op !== "getState").map((c) => c.op),
      ["lock", "checkpoint", "restore", "unlock"],
    );
  });

  test("a CudaProcess says which process it is; suspend takes no GPU mapping", async () => {
    const { target, proc } = setup();
    assert.equal(String(proc), `CudaProcess(${target.pid})`);
    await assert.rejects(
      proc.suspend({ gpuMapping: {} } as never),
      /^TypeError: suspend has no option "gpuMapping"; it takes timeoutMs, checkRoom, allowIpcImport/,
    );
    assert.equal(target.state, "running");
  });

  test("the four steps one by one; restore leaves the process locked", async () => {
    const { proc } = setup();
    await proc.lock({ timeoutMs: 1000 });
    assert.equal(await proc.state(), "locked");
    await proc.checkpoint();
    assert.equal(await proc.state(), "checkpointed");
    await proc.restore();
    assert.equal(await proc.state(), "locked");
    await proc.unlock();
    assert.equal(await proc.state(), "running");
  });

  test("restoreThreadId is the driver's restore thread, and a thread id works as a pid", async () => {
    const { sim, target } = setup();
    const proc = new CudaProcess(target.pid, { machine: sim });
    assert.equal(await proc.restoreThreadId(), target.tid);
    assert.notEqual(target.tid, target.pid);
    const byThread = new CudaProcess(target.tid, { machine: sim });
    await byThread.suspend();
    assert.equal(await proc.state(), "checkpointed");
    await byThread.resume();
    assert.equal(target.state, "running");
  });

  test("a machine given is its owner's: closing the process leaves it open for others", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const proc = new CudaProcess(t.pid, { machine: sim });
    assert.equal(await proc.machine(), sim);
    assert.equal(await proc.state(), "running");
    await proc.close();
    await assert.rejects(proc.state(), /this handle has been closed/);
    assert.equal(await new CudaProcess(t.pid, { machine: sim }).state(), "running");
  });
});

describe("errors name the operation, pid, code, description and state", () => {
  test("unlock while running", async () => {
    const { proc } = setup();
    await rejectsWith(
      proc.unlock(),
      CUDA_ERROR_ILLEGAL_STATE,
      new RegExp(
        `^unlock of process ${proc.pid} failed: CUDA_ERROR_ILLEGAL_STATE \\(401\\): the operation cannot be performed in the present state \\(the process is running\\)$`,
      ),
    );
  });

  test("each illegal transition says the state the process is in", async () => {
    const { proc } = setup();
    await rejectsWith(proc.checkpoint(), CUDA_ERROR_ILLEGAL_STATE, /process is running/);
    await proc.lock();
    await rejectsWith(proc.lock(), CUDA_ERROR_ILLEGAL_STATE, /^lock of .*process is locked/);
    await rejectsWith(proc.restore(), CUDA_ERROR_ILLEGAL_STATE, /^restore .*process is locked/);
    await proc.checkpoint();
    await rejectsWith(proc.unlock(), CUDA_ERROR_ILLEGAL_STATE, /process is checkpointed/);
  });

  test("a pid that does not exist, and a process without CUDA", async () => {
    const sim = new SimulatedMachine();
    const plain = sim.spawn({ cuda: false });
    await rejectsWith(
      new CudaProcess(999_999, { machine: sim }).state(),
      CUDA_ERROR_OPERATING_SYSTEM,
      /^getState of process 999999 failed: CUDA_ERROR_OPERATING_SYSTEM \(304\): OS call failed or operation not supported on this OS\. No process has this pid, or this program may not act on it \(that needs root or CAP_SYS_PTRACE\)$/,
    );
    await rejectsWith(
      new CudaProcess(plain.pid, { machine: sim }).restoreThreadId(),
      CUDA_ERROR_NOT_INITIALIZED,
      /^getRestoreThreadId of process \d+ failed: CUDA_ERROR_NOT_INITIALIZED \(3\): initialization error\. The process has never initialised CUDA$/,
    );
  });

  test("a step on a pid no process ever had says no process has it, not that it exited", async () => {
    const sim = new SimulatedMachine();
    await rejectsWith(
      new CudaProcess(999_999, { machine: sim }).lock(),
      CUDA_ERROR_OPERATING_SYSTEM,
      /^lock of process 999999 failed: CUDA_ERROR_OPERATING_SYSTEM \(304\): .*\. No process has this pid, or this program may not act on it \(that needs root or CAP_SYS_PTRACE\)$/,
    );
  });

  test("a restore failed as an OS call, the process no longer checkpointed: not said to be 580's refusal", async () => {
    const { target, proc } = setup();
    await proc.suspend();
    // Failed, yet it left the process restored (locked): not what 580 does to a lost process.
    target.failNext("restore", { code: CUDA_ERROR_OPERATING_SYSTEM, state: "locked" });
    const err = await proc.restore().catch((e) => e);
    assert.ok(err instanceof CudaError && err.code === CUDA_ERROR_OPERATING_SYSTEM, String(err));
    assert.doesNotMatch(err.message, /checkpointed, yet the driver refuses/);
  });

  test("a process that exits", async () => {
    const { target, proc } = setup();
    target.exit();
    await rejectsWith(proc.state(), CUDA_ERROR_OPERATING_SYSTEM);
    // A suspend reads the state first: that is what finds the process gone.
    await rejectsWith(proc.suspend(), CUDA_ERROR_OPERATING_SYSTEM, /^getState of process/);
  });

  test("a process this handle knew, exited since: its step says it has exited", async () => {
    const { target, proc } = setup();
    assert.equal(await proc.state(), "running"); // the handle now knows it (its start)
    target.exit();
    // Only a lock, whose OPERATING_SYSTEM would otherwise say "no process, or no permission".
    await rejectsWith(
      proc.lock(),
      CUDA_ERROR_OPERATING_SYSTEM,
      /^lock of process \d+ failed: CUDA_ERROR_OPERATING_SYSTEM \(304\): .*\. The process has exited$/,
    );
  });

  test("an unknown state number is a clear error, not a crash", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const newer = forward(sim, {
      getState: () => Promise.resolve({ code: 0, value: 7 }),
    });
    await assert.rejects(
      new CudaProcess(t.pid, { machine: newer }).state(),
      /^RangeError: getState of process \d+ gave state 7, which this version of @ckpt\/cuda does not know \(a newer driver's; it knows running 0, locked 1, checkpointed 2, failed 3\)$/,
    );
  });

  test("names and descriptions come from the driver when it knows them", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const d = forward(sim, {
      errorName: (c) => `NAME_${c}`,
      errorString: (c) => `description ${c}`,
    });
    await rejectsWith(
      new CudaProcess(t.pid, { machine: d }).unlock(),
      401,
      /failed: NAME_401 \(401\): description 401/,
    );
  });

  test("a driver without checkpoint support says which driver is needed", async () => {
    const old = new SimulatedMachine({ driverVersion: 12040 });
    const t = old.spawn();
    await assert.rejects(new CudaProcess(t.pid, { machine: old }).state(), (err: unknown) => {
      assert.ok(err instanceof CheckpointUnsupportedError);
      assert.equal(err.code, "UNSUPPORTED", "no CUresult: the driver was not asked");
      assert.match(
        err.message,
        /^getState of process \d+ refused: this driver \(CUDA 12\.4\) has no checkpoint API \(cuCheckpointProcessGetState\); driver 570 \(CUDA 12\.8\) or later has$/,
      );
      return true;
    });
    assert.equal(old.driver.calls.length, 0, "nothing reached the driver");
  });

  test("a GPU mapping on a 12.8 driver says 580 is needed", async () => {
    const sim = new SimulatedMachine({ driverVersion: 12080, gpus: 2 });
    const t = sim.spawn();
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    await assert.rejects(
      proc.resume({ gpuMapping: { [sim.gpus[0].uuid]: sim.gpus[1].uuid } }),
      /^CheckpointUnsupportedError: resume of process \d+ refused: a GPU mapping needs driver 580 \(CUDA 13\.0\) or later, and this driver \(CUDA 12\.8\) is older$/,
    );
    await proc.resume();
    assert.equal(t.state, "running");
  });
});

describe("lock timeouts", () => {
  test("the default timeout is finite (10 s): a 15 s kernel gives NOT_READY and the process runs on", async () => {
    const { sim, target, proc } = setup();
    target.launch(15_000);
    const start = sim.now();
    await rejectsWith(
      proc.suspend(),
      CUDA_ERROR_NOT_READY,
      new RegExp(
        "^lock of process \\d+ failed: CUDA_ERROR_NOT_READY \\(600\\): device not ready\\. Its work " +
          "on the GPU did not finish within the 10000 ms its lock could wait \\(its timeout, or what " +
          "was left of a deadline\\), so it was not locked\\. The process is running$",
      ),
    );
    // A getState first (0.05 ms), 10 s of lock timeout, then a getState for where it was left.
    assert.ok(sim.now() - start >= 10_000 && sim.now() - start < 10_001, `${sim.now() - start}`);
    assert.equal(await proc.state(), "running");
  });

  test("a lock without a timeout (0) that the driver answers NOT_READY does not say it waited 0 ms", async () => {
    const { target, proc } = setup();
    target.failNext("lock", { code: CUDA_ERROR_NOT_READY });
    await rejectsWith(
      proc.lock({ timeoutMs: 0 }),
      CUDA_ERROR_NOT_READY,
      /^lock of process \d+ failed: CUDA_ERROR_NOT_READY \(600\): device not ready$/,
    );
  });

  test("a lock of this very process that times out lets its room checks run again", async () => {
    const sim = new SimulatedMachine();
    const me = sim.spawn({ memoryMiB: 256 }), peer = sim.spawn({ memoryMiB: 512 });
    sim.selfPid = me.pid;
    me.launch(15_000);
    await rejectsWith(
      new CudaProcess(me.pid, { machine: sim }).lock({ timeoutMs: 100 }),
      CUDA_ERROR_NOT_READY,
    );
    const other = new CudaProcess(peer.pid, { machine: sim });
    await other.suspend();
    assert.ok(heldWhenCheckpointed(sim, peer.pid), "recorded: this process runs");
    assert.equal((await other.resume()).roomCheck, "checked");
  });

  test("timeoutMs 0 waits for the kernel to end", async () => {
    const { sim, target, proc } = setup();
    target.launch(15_000);
    const start = sim.now();
    await proc.lock({ timeoutMs: 0 });
    assert.ok(sim.now() - start >= 15_000);
    assert.equal(await proc.state(), "locked");
  });

  test("work launched while locked waits for unlock", async () => {
    const { sim, target, proc } = setup();
    await proc.suspend();
    let ran = false;
    const kernel = target.launch(5).then(() => ran = true);
    await sim.sleep(1000);
    assert.equal(ran, false, "blocked while checkpointed");
    await proc.resume();
    await kernel;
    assert.equal(ran, true);
  });
});

// The driver answers no call on a stopped process, a lock's timeout included, till it runs again
// (docs/DRIVER.md; the simulator does the same): every operation is refused before any call.
describe("a stopped process (SIGSTOP)", () => {
  const noCall = (sim: SimulatedMachine, pid: number, from: number) =>
    assert.deepEqual(sim.driver.calls.slice(from).filter((c) => c.pid === pid), [], "no call");

  test("steps and goals are refused (STATE), saying so, with no driver call; once let go, they run", async () => {
    const { sim, target, proc } = setup();
    await proc.lock();
    await sim.engine.stop([target.pid]);
    const mark = sim.driver.calls.length;
    for (const act of [() => proc.checkpoint(), () => proc.suspend(), () => proc.toggle()]) {
      const err = await act().catch((e) => e);
      assert.ok(err instanceof RefusedError, String(err));
      assert.equal(err.code, "STATE");
      assert.equal(
        err.message,
        `${err.operation} of process ${target.pid} refused: it is stopped (SIGSTOP, Ctrl-Z, a ` +
          `debugger), and the driver answers no call on it, a lock's timeout included, till it ` +
          `runs again (kill -CONT ${target.pid}). Nothing was done to it`,
      );
    }
    const state = await proc.state().catch((e) => e);
    assert.deepEqual([state.code, state.operation], ["STATE", "getState"], String(state));
    noCall(sim, target.pid, mark);
    assert.equal(target.state, "locked");
    await sim.engine.wake([target.pid]);
    assert.equal((await proc.checkpoint()).state, "checkpointed");
    assert.equal((await proc.resume()).state, "running");
  });

  test("a group refuses it and runs the others; all or nothing and a job refuse the whole", async () => {
    for (const options of [{}, { allOrNothing: true }, { job: true }]) {
      const sim = new SimulatedMachine();
      const [a, b] = [sim.spawn(), sim.spawn()];
      await sim.engine.stop([b.pid]);
      const result = await runGroup("suspend", [a.pid, b.pid], { machine: sim, ...options });
      const err = result.processes[1].error as RefusedError;
      assert.equal(err?.code, "STATE", JSON.stringify(options));
      assert.match(err.message, / refused: it is stopped \(SIGSTOP/);
      const whole = "allOrNothing" in options || "job" in options;
      assert.deepEqual([a.state, b.state], [whole ? "running" : "checkpointed", "running"]);
      noCall(sim, b.pid, 0);
    }
  });
});

describe("a process whose cgroup is frozen (docker pause)", () => {
  test("its steps are refused (STATE), saying how to thaw it, with no driver call", async () => {
    const sim = new SimulatedMachine();
    const { pid } = sim.spawn();
    // What LinuxHost tells of a process in a frozen cgroup (tests/host_signs_test.ts).
    const machine = {
      driver: sim.driver,
      host: { ...sim.host, stopped: () => Promise.resolve("frozen" as const) },
    };
    const mark = sim.driver.calls.length;
    const err = await new CudaProcess(pid, { machine }).suspend().catch((e) => e);
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(
      err.message,
      `suspend of process ${pid} refused: its cgroup is frozen (docker or podman pause), and the ` +
        `driver answers no call on it, a lock's timeout included, till it is thawed (docker or ` +
        `podman unpause). Nothing was done to it`,
    );
    assert.deepEqual(sim.driver.calls.slice(mark), [], "no call");
  });
});

describe("rollback", () => {
  test("suspend unlocks again when checkpoint fails, and says the process was left running", async () => {
    const { target, proc } = setup();
    target.failNext("checkpoint", { code: CUDA_ERROR_OUT_OF_MEMORY });
    await rejectsWith(
      proc.suspend(),
      CUDA_ERROR_OUT_OF_MEMORY,
      /^checkpoint of process \d+ failed: CUDA_ERROR_OUT_OF_MEMORY \(2\): out of memory\. It was brought back to running$/,
    );
    assert.equal(await proc.state(), "running");
    await proc.suspend();
    assert.equal(await proc.state(), "checkpointed", "and it can be suspended afterwards");
  });

  test("when checkpoint leaves the process failed, suspend says so", async () => {
    const { proc, target } = setup();
    target.failNext("checkpoint", { code: 999, state: "failed" });
    await rejectsWith(
      proc.suspend(),
      999,
      /^checkpoint of process \d+ failed: CUDA_ERROR_UNKNOWN \(999\): unknown error\. The process is failed, which is final$/,
    );
    assert.equal(await proc.state(), "failed");
  });

  test("when the process exits during checkpoint, suspend says it is gone, once", async () => {
    const { sim, proc, target } = setup(4096);
    const suspending = proc.suspend();
    await sim.sleep(100);
    target.exit();
    await assert.rejects(suspending, (err: unknown) => {
      assert.ok(err instanceof CudaError);
      assert.equal(err.code, CUDA_ERROR_OPERATING_SYSTEM);
      assert.match(
        err.message,
        /^checkpoint of process \d+ failed: CUDA_ERROR_OPERATING_SYSTEM \(304\): OS call failed or operation not supported on this OS\. The process has exited$/,
      );
      assert.equal(err.message.match(/exited/g)?.length, 1, err.message);
      return true;
    });
    assert.equal(
      sim.driver.calls.filter((c) => c.op === "unlock").length,
      0,
      "no unlock of a process that is gone",
    );
    assert.equal(sim.gpus[0].usedMiB, 0);
  });

  test("resume whose unlock fails checkpoints the process again: it is left as it was", async () => {
    const { sim, proc, target } = setup();
    await proc.suspend();
    target.failNext("unlock", { code: CUDA_ERROR_INVALID_VALUE });
    await rejectsWith(
      proc.resume(),
      CUDA_ERROR_INVALID_VALUE,
      /^unlock of process \d+ failed: CUDA_ERROR_INVALID_VALUE \(1\): invalid argument\. It was brought back to checkpointed$/,
    );
    assert.equal(await proc.state(), "checkpointed");
    assert.equal(sim.gpus[0].usedMiB, 0, "its GPU memory released again");
    await proc.resume();
    assert.equal(target.state, "running");
  });
  test("a failed goal's error has the state it left the process in: brought back, or final", async () => {
    const { proc, target } = setup();
    const stateOf = (p: Promise<unknown>) =>
      p.then(() => assert.fail("it failed"), (e) => (assert.ok(e instanceof CudaError), e.state));
    target.failNext("checkpoint", { code: CUDA_ERROR_OUT_OF_MEMORY });
    assert.equal(await stateOf(proc.suspend()), "running", "unlocked again");
    await proc.suspend();
    target.failNext("unlock", { code: CUDA_ERROR_INVALID_VALUE });
    assert.equal(await stateOf(proc.resume()), "checkpointed", "checkpointed again");
    target.failNext("restore", { code: 999, state: "failed" });
    assert.equal(await stateOf(proc.resume()), "failed", "final");
  });
});

describe("the room check before a restore", () => {
  test("resume without room is refused before the driver, and can be tried again", async () => {
    const { sim, proc, target } = setup(4096, 1);
    await proc.suspend();
    const hog = sim.spawn({ memoryMiB: sim.gpus[0].freeMiB - 1000 });
    const calls = sim.driver.calls.length;
    await rejectsWith(
      proc.resume(),
      "NO_ROOM",
      /^resume of process \d+ refused: it needs 4616 MiB on GPU-[0-9a-f-]+, which has 480 MiB free\. Nothing was asked of the driver: the process is still checkpointed$/,
    );
    assert.deepEqual(
      sim.driver.calls.slice(calls).filter((c) => c.op === "restore"),
      [],
      "no restore call",
    );
    assert.equal(target.restoreRefused, false);
    assert.equal(await proc.state(), "checkpointed");
    hog.exit();
    await proc.resume();
    assert.equal(await proc.state(), "running");
  });

  test("the room check: only what this package checkpointed, mapped GPUs, restores under way", async () => {
    const sim = new SimulatedMachine({
      gpus: [{ memoryMiB: 10_000, contextMiB: 500 }, { memoryMiB: 10_000, contextMiB: 500 }],
    });
    const [a, b] = sim.gpus.map((g) => g.uuid);
    // Three 2 GiB processes (2548 MiB each with its context) on GPU 0, suspended at once.
    const targets = [0, 1, 2].map(() => sim.spawn({ memoryMiB: 2048 }));
    const procs = targets.map((t) => new CudaProcess(t.pid, { machine: sim }));
    await Promise.all(procs.map((p) => p.suspend()));
    // 10 000 - 6000 = 4000 free on GPU 1 for a mapped resume of all three: each check alone would
    // pass, but the restores under way claim their room, so exactly one fits and the others wait.
    sim.spawn({ memoryMiB: 5500, gpu: 1 }); // 6000 with its context
    const swap = { gpuMapping: { [a]: b, [b]: a } };
    const outcomes = await Promise.allSettled(procs.map((p) => p.resume(swap)));
    const refused = outcomes.filter((o) => o.status === "rejected");
    assert.equal(
      outcomes.filter((o) => o.status === "fulfilled").length,
      1,
      JSON.stringify(outcomes),
    );
    assert.equal(refused.length, 2);
    for (const o of refused) {
      const err = (o as PromiseRejectedResult).reason;
      assert.ok(err instanceof GpuRoomError, String(err));
      assert.equal(err.shortage.gpu, b);
      assert.equal(err.shortage.neededMiB, 2548);
    }
    assert.equal(targets.filter((t) => t.restoreRefused).length, 0, "the driver never ran out");
    assert.equal(targets.filter((t) => t.state === "checkpointed").length, 2);
    // In place, GPU 0 has room for both.
    for (const [i, t] of targets.entries()) if (t.state === "checkpointed") await procs[i].resume();
    assert.deepEqual(targets.map((t) => t.state), ["running", "running", "running"]);

    // Checkpointed by the raw driver (another program): nothing known, nothing checked.
    const other = sim.spawn({ memoryMiB: 1024 });
    await sim.driver.lock(other.pid, null);
    await sim.driver.checkpoint(other.pid);
    sim.fillGpu(0);
    const unchecked = new CudaProcess(other.pid, { machine: sim });
    await rejectsWith(
      unchecked.resume(),
      CUDA_ERROR_OUT_OF_MEMORY,
      /^restore of process \d+ failed: CUDA_ERROR_OUT_OF_MEMORY \(2\): out of memory\. On driver 580 the process cannot be restored after this, even once memory is free \(docs\/ERRORS\.md#out-of-memory\)\. The process is checkpointed$/,
    );
    assert.equal(other.restoreRefused, true);
  });

  test("two that ran side by side resume side by side: a restore under way is not counted twice", async () => {
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
    // 4500 MiB each with its context: 9000 of 10 000 together. The first restore takes its memory
    // as it begins (as the driver does as it goes), while its claim stands until it returns.
    const targets = [0, 1].map(() => sim.spawn({ memoryMiB: 4000 }));
    const procs = targets.map((t) => new CudaProcess(t.pid, { machine: sim }));
    await Promise.all(procs.map((p) => p.suspend()));
    const outcomes = await Promise.all(procs.map((p) => p.resume()));
    assert.deepEqual(outcomes.map((o) => o.roomCheck), ["checked", "checked"]);
    assert.deepEqual(targets.map((t) => t.state), ["running", "running"]);
    const group = await runGroup("suspend", targets.map((t) => t.pid), { machine: sim });
    assert.equal(group.ok, true);
    const back = await runGroup("resume", targets.map((t) => t.pid), { machine: sim });
    assert.deepEqual(back.processes.map((p) => p.status), ["done", "done"]);
  });

  for (const firstReadsLast of [false, true]) {
    const order = firstReadsLast ? "the first to claim reading the GPU last" : "in order";
    test(`two resumes whose room checks overlap: one resumes, not none (${order})`, async () => {
      // Room for one of the two, and records whose listing waits until both list (as two reads
      // of the record files at once may): both claims are made before either counts the claims.
      // Counted each by the other, both were refused (on an H200, twice: once as here, and once
      // when the second, refused first, took its claim back before the first counted its own).
      const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
      const targets = [0, 1].map(() => sim.spawn({ memoryMiB: 3000 }));
      const host = sim.host, together = meeting();
      const heldRecords = listedAt(together, host.heldRecords!);
      let reads = 0;
      const gpuMemory = async () => {
        if (firstReadsLast && together.came > 0 && reads++ === 0) {
          await new Promise((ok) => setTimeout(ok, 30));
        }
        return host.gpuMemory!();
      };
      const machine = machineWith(sim, { host: hostWith(host, { heldRecords, gpuMemory }) });
      const procs = targets.map((t) => new CudaProcess(t.pid, { machine }));
      await Promise.all(procs.map((p) => p.suspend()));
      sim.spawn({ memoryMiB: 4000 }); // 4500 with its context: 5500 free, 3500 needed by each
      together.reset();
      const outcomes = await Promise.allSettled(procs.map((p) => p.resume()));
      assert.ok(together.met, "both claims were made before either was counted");
      assert.deepEqual(outcomes.map((o) => o.status).sort(), ["fulfilled", "rejected"]);
      const refused = outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult;
      assert.ok(refused.reason instanceof GpuRoomError, String(refused.reason));
      assert.deepEqual(targets.map((t) => t.restoreRefused), [false, false]);
      // No claim outlives its restore, refused or done: each, while the other is suspended,
      // resumes into the same 5500 MiB (a claim of the other's left over would leave it 2000).
      const first = outcomes.findIndex((o) => o.status === "fulfilled");
      const [a, b] = [procs[first], procs[1 - first]];
      await a.suspend();
      assert.equal((await b.resume()).roomCheck, "checked");
      await b.suspend();
      assert.equal((await a.resume()).roomCheck, "checked");
    });
  }

  test("a claim that ends while the GPU's memory is read is still counted: no restore runs out", async () => {
    // Room for one of two. B's read of the GPU's memory samples it before A's restore takes its
    // memory, and answers only once A's resume has returned (its claim gone): were this session's
    // claims taken after that read, B would count none, go ahead and run out in the driver (found
    // on review). Taken before it, A's claim counts and B is refused.
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
    const [aAtDriver, bSampled, aResumed] = [0, 1, 2].map(() => Promise.withResolvers<void>());
    let bReading = false;
    const gpuMemory = async () => {
      const sample = await sim.host.gpuMemory!();
      if (bReading) {
        bSampled.resolve();
        await aResumed.promise;
      }
      return sample;
    };
    const targets = [0, 1].map(() => sim.spawn({ memoryMiB: 3000 }));
    const restore = async (pid: number, args: RestoreArgs | null) => {
      if (pid === targets[0].pid) {
        aAtDriver.resolve();
        await bSampled.promise;
      }
      return await sim.driver.restore(pid, args);
    };
    const machine = machineWith(forward(sim, { restore }), {
      host: hostWith(sim.host, { gpuMemory }),
    });
    const [a, b] = targets.map((t) => new CudaProcess(t.pid, { machine }));
    await Promise.all([a.suspend(), b.suspend()]);
    sim.spawn({ memoryMiB: 4000 }); // 5500 free: room for 3500 once
    const first = a.resume().finally(() => aResumed.resolve());
    await aAtDriver.promise;
    bReading = true;
    const outcomes = await Promise.allSettled([first, b.resume()]);
    assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "rejected"]);
    const refused = (outcomes[1] as PromiseRejectedResult).reason;
    assert.ok(refused instanceof GpuRoomError, String(refused));
    assert.deepEqual(targets.map((t) => t.restoreRefused), [false, false]);
  });

  test("past 10 000 claims a session still tells its own apart: the oldest go, not the live", async () => {
    // A session keeps the key of each claim it made while the records may show it, and past
    // 10 000 forgets the oldest (so that its memory stays bounded, which no test here can see).
    // After 9 999 resumes of one process, two at once with room for one make the 10 000th and
    // 10 001st claims, the second making it forget: still the first resumes (were the newest
    // forgotten, the first would count the second's claim as another's and be refused; the second
    // too, where their checks overlap).
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
    const together = meeting(), records = listedAt(together, sim.heldRecords);
    const machine = machineWith(sim, { host: hostWith(sim.host, { heldRecords: records }) });
    const procs = [0, 1].map(() =>
      new CudaProcess(sim.spawn({ memoryMiB: 3000 }).pid, { machine })
    );
    // Each claim made at its own millisecond, as restores that take time are (a claim is known by
    // its process and the time it was made).
    const now = Date.now;
    let ms = now() - 1e9; // days before the two at the end
    Date.now = () => ++ms;
    try {
      for (let i = 0; i < 9_999; i++) {
        await procs[0].suspend();
        await procs[0].resume();
      }
    } finally {
      Date.now = now;
    }
    await Promise.all(procs.map((p) => p.suspend()));
    sim.spawn({ memoryMiB: 4000 }); // 5500 free: room for 3500 once
    together.reset();
    const outcomes = await Promise.allSettled(procs.map((p) => p.resume()));
    assert.ok(together.met, "both claims were made before either was counted");
    assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "rejected"]);
  });

  test("two simulated machines' restores at once: neither counts the other's claim", async () => {
    // Alike made-up GPU UUIDs (the default seed), each with room for its own restore alone, their
    // records listed only once both list (both claims made): were one machine's claim counted by
    // the other (one program, one UUID), one would be refused.
    const gpus = [{ memoryMiB: 10_000, contextMiB: 500 }];
    const sims = [0, 1].map(() => new SimulatedMachine({ gpus }));
    assert.equal(sims[0].gpus[0].uuid, sims[1].gpus[0].uuid);
    const together = meeting();
    const machines = sims.map((sim) =>
      machineWith(sim, {
        host: hostWith(sim.host, { heldRecords: listedAt(together, sim.heldRecords) }),
      })
    );
    sims[1].spawn({ memoryMiB: 16 }); // the pids of the two machines' processes differ
    const procs = sims.map((sim, i) =>
      new CudaProcess(sim.spawn({ memoryMiB: 3000 }).pid, { machine: machines[i] })
    );
    await Promise.all(procs.map((p) => p.suspend()));
    for (const sim of sims) sim.spawn({ memoryMiB: 4000 }); // 5500 (4984) free: 3500 fits once
    together.reset();
    const outcomes = await Promise.all(procs.map((p) => p.resume()));
    assert.ok(together.met, "both claims were made before either was counted");
    assert.deepEqual(outcomes.map((o) => o.roomCheck), ["checked", "checked"]);
  });

  test("two machines on one records directory count each other's claims, as two programs do", async () => {
    // Two sessions (two machine objects, each reading the directory through its own records) on
    // one GPU with room for one of their two restores, which check at once: neither session
    // counts the other's claims from memory (a session keeps none of another's), so each counts
    // them from the records, as another program's: neither resumes into the other's room (here
    // both are refused, as two programs' would be), and the driver never runs out.
    const dir = await mkdtemp(join(tmpdir(), "ckpt-claims-"));
    try {
      const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
      // Their listings meet, and so do their reads of the GPU's memory: neither restore begins
      // before the other's check.
      const [together, reads] = [meeting(), meeting()];
      const gpuMemory = () => reads.wait().then(() => sim.host.gpuMemory!());
      const machines = [0, 1].map(() => {
        const records = new FileHeldRecords(join(dir, "held"), () => Promise.resolve(true));
        const heldRecords = listedAt(together, records);
        return machineWith(sim, { host: hostWith(sim.host, { heldRecords, gpuMemory }) });
      });
      const targets = machines.map(() => sim.spawn({ memoryMiB: 3000 }));
      const procs = machines.map((machine, i) => new CudaProcess(targets[i].pid, { machine }));
      await Promise.all(procs.map((p) => p.suspend()));
      sim.spawn({ memoryMiB: 4000 }); // 5500 free: room for 3500 once
      [together, reads].forEach((m) => m.reset());
      const outcomes = await Promise.allSettled(procs.map((p) => p.resume()));
      assert.ok(together.met, "both claims were made before either was counted");
      for (const o of outcomes) {
        if (o.status === "rejected") assert.ok(o.reason instanceof GpuRoomError, String(o.reason));
      }
      assert.ok(outcomes.filter((o) => o.status === "fulfilled").length <= 1);
      assert.deepEqual(targets.map((t) => t.restoreRefused), [false, false]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("an old record does not hide the driver's answer: a process no longer checkpointed", async () => {
    const { sim, proc, target } = setup(1024, 1);
    await proc.suspend();
    // A restore that fails but leaves the process running (an injected fault): the record stays.
    target.failNext("restore", { code: CUDA_ERROR_UNKNOWN, state: "running" });
    await rejectsWith(proc.restore(), CUDA_ERROR_UNKNOWN, /./);
    assert.equal(target.state, "running");
    sim.fillGpu(0);
    // The room check would refuse, but the process is running: the driver's ILLEGAL_STATE is the
    // answer, not a GpuRoomError.
    await rejectsWith(proc.restore(), CUDA_ERROR_ILLEGAL_STATE, /\(the process is running\)/);
  });

  test("no NVML read while this package holds the calling process: nothing recorded, nothing checked", async () => {
    // A simulated process named as the driver's self stands for the program itself.
    const sim = new SimulatedMachine();
    const me = sim.spawn({ memoryMiB: 256 });
    const peer = sim.spawn({ memoryMiB: 512 });
    sim.selfPid = me.pid;
    let reads = 0;
    const host = sim.host;
    const machine = machineWith(sim, {
      host: hostWith(host, { gpuMemory: () => (reads++, host.gpuMemory!()) }),
    });
    const self = new CudaProcess(me.pid, { machine });
    const other = new CudaProcess(peer.pid, { machine });
    await self.lock();
    await other.suspend();
    assert.equal(reads, 0, "no read while this process is locked");
    // Nor a group's progress memory, read from the machine's host, twice.
    for (const _ of [1, 2]) {
      const events: (number | undefined)[] = [];
      const r = await runGroup("resume", [peer.pid], {
        machine,
        onProgress: (e) => void (e.type !== "process-end" && events.push(e.gpuMemoryMiB)),
      });
      assert.equal(r.ok, true);
      await other.suspend();
      assert.ok(events.every((m) => m === undefined), `no memory in the events: ${events}`);
    }
    assert.equal(reads, 0, "no read by a group while this process is locked");
    assert.equal(heldWhenCheckpointed(sim, peer.pid), undefined);
    await self.checkpoint();
    await self.resume();
    assert.equal(reads, 0, "nor while it is checkpointed, nor for its own restore");
    await other.resume(); // no record: no check, no read
    assert.equal(reads, 0);
    await other.suspend();
    assert.equal(reads, 1, "once it runs again, a checkpoint reads what the process holds");
    assert.deepEqual(heldWhenCheckpointed(sim, peer.pid), { [sim.gpus[0].uuid]: 512 + 520 });
    await other.resume();
    assert.equal(reads, 2, "and the resume checks the room");
  });

  test("a lock from running forgets what the process held at a checkpoint another program undid", async () => {
    const { sim, target, proc } = setup(1024);
    await proc.suspend();
    await sim.driver.restore(target.pid, null); // another program resumes it: the record stays
    await sim.driver.unlock(target.pid);
    assert.ok(heldWhenCheckpointed(sim, target.pid));
    await proc.lock();
    assert.equal(heldWhenCheckpointed(sim, target.pid), undefined, "what it held is not known now");
    await sim.driver.checkpoint(target.pid); // and another program checkpoints it
    assert.deepEqual((await proc.resume()).roomCheck, {
      unknown: "no record of the GPU memory it held (kept in memory): another program " +
        "checkpointed it, or it was checkpointed on another machine or without the record",
    });
  });

  test("a restore the driver fails keeps the record: the next resume is checked as the first", async () => {
    const { sim, target, proc } = setup(1024);
    await proc.suspend();
    const held = heldWhenCheckpointed(sim, target.pid);
    target.failNext("restore", { code: CUDA_ERROR_UNKNOWN }); // still checkpointed
    await rejectsWith(proc.resume(), CUDA_ERROR_UNKNOWN);
    assert.equal(target.state, "checkpointed");
    assert.deepEqual(heldWhenCheckpointed(sim, target.pid), held, "what it held is still known");
    assert.equal((await proc.resume()).roomCheck, "checked");
  });

  test("checkRoom must be true or false", async () => {
    const { proc } = setup();
    await assert.rejects(
      proc.resume({ checkRoom: "yes" as unknown as boolean }),
      /checkRoom must be true or false, got "yes"/,
    );
  });
});

describe("rollback when a call cannot complete at all", () => {
  test("suspend unlocks again when checkpoint rejects with a non-driver error", async () => {
    const { sim, target } = setup();
    const broken = forward(sim, {
      checkpoint: () => Promise.reject(new Error("a Bun FFI worker failed")),
    });
    const proc = new CudaProcess(target.pid, { machine: broken });
    await assert.rejects(
      proc.suspend(),
      /^Error: a Bun FFI worker failed\. It was brought back to running$|^a Bun FFI worker failed\. It was brought back to running$/,
    );
    assert.equal(target.state, "running");
  });

  test("resume says the process is gone when it exits before the unlock", async () => {
    const sim2 = setup();
    const proc2 = new CudaProcess(sim2.target.pid, {
      machine: forward(sim2.sim, {
        unlock: (pid) => {
          sim2.target.exit();
          return sim2.sim.driver.unlock(pid);
        },
      }),
    });
    await sim2.sim.driver.lock(sim2.target.pid, null);
    await sim2.sim.driver.checkpoint(sim2.target.pid);
    await rejectsWith(
      proc2.resume(),
      CUDA_ERROR_OPERATING_SYSTEM,
      /^unlock of process \d+ failed: CUDA_ERROR_OPERATING_SYSTEM \(304\): OS call failed or operation not supported on this OS\. The process has exited$/,
    );
  });

  test("two locks at once: the second waits for the first and says the process is locked", async () => {
    const { proc } = setup();
    const [a, b] = await Promise.allSettled([proc.lock(), proc.lock()]);
    assert.equal(a.status, "fulfilled");
    assert.equal(b.status, "rejected");
    const message = String((b as PromiseRejectedResult).reason);
    assert.match(
      message,
      /^CudaError: lock of process \d+ failed: CUDA_ERROR_ILLEGAL_STATE \(401\): the operation cannot be performed in the present state \(the process is locked\)$/,
    );
  });

  test("a state change made meanwhile by someone else is named as the likely cause", async () => {
    const { sim, target, proc } = setup();
    // Another program (here the raw driver) unlocks between our lock and our own check.
    const racing = forward(sim, {
      checkpoint: async (pid) => {
        const code = await sim.driver.checkpoint(pid);
        await sim.driver.restore(pid, null);
        return code === 0 ? CUDA_ERROR_ILLEGAL_STATE : code;
      },
    });
    await new CudaProcess(target.pid, { machine: racing }).lock();
    await rejectsWith(
      new CudaProcess(target.pid, { machine: racing }).checkpoint(),
      CUDA_ERROR_ILLEGAL_STATE,
      /\(the process is locked\)\. Another program \(or another thread id of this process\) changed its state meanwhile$/,
    );
    assert.equal(await proc.state(), "locked");
  });

  test("an injected restore failure that leaves the process running puts its memory back on the GPU", async () => {
    const { sim, target, proc } = setup(256, 1);
    await target.write(0, new Uint8Array([42]));
    await proc.suspend();
    target.failNext("restore", { code: CUDA_ERROR_INVALID_VALUE, state: "running" });
    // One step (no goal, so no rollback): the state the fault left is what is seen.
    await rejectsWith(
      proc.restore(),
      CUDA_ERROR_INVALID_VALUE,
      /^restore of process \d+ failed: CUDA_ERROR_INVALID_VALUE \(1\): invalid argument$/,
    );
    assert.equal(target.memoryLocation, "gpu");
    assert.equal(sim.gpus[0].usedMiB, 256 + sim.gpus[0].contextMiB);
    assert.deepEqual(await target.read(0, 1), new Uint8Array([42]));
  });
});

describe("toggle, like cuda-checkpoint --toggle", () => {
  test("running -> checkpointed -> running", async () => {
    const { proc } = setup();
    assert.equal((await proc.toggle()).state, "checkpointed");
    assert.equal(await proc.state(), "checkpointed");
    assert.equal((await proc.toggle()).state, "running");
    assert.equal(await proc.state(), "running");
  });

  test("checks both halves' options before anything happens", async () => {
    const { proc } = setup();
    await proc.suspend();
    await assert.rejects(proc.toggle({ timeoutMs: -5 }), /timeoutMs must be .* got -5/);
    await assert.rejects(
      proc.toggle({ gpuMapping: { "GPU-x": "GPU-y" } }),
      /gpuMapping key "GPU-x"/,
    );
    assert.equal(await proc.state(), "checkpointed");
  });

  test("refuses a locked process without touching it", async () => {
    const { sim, proc } = setup();
    await proc.lock();
    const before = sim.driver.calls.filter((c) => c.op !== "getState").length;
    await rejectsWith(
      proc.toggle(),
      "STATE",
      /^toggle of process \d+ refused: toggle goes between running and checkpointed, and the process is locked$/,
    );
    assert.equal(sim.driver.calls.filter((c) => c.op !== "getState").length, before);
  });

  test("one set of options serves both ways: a GPU mapping is used by the resume only", async () => {
    // NVIDIA's utility (580) takes --toggle -d of a running process and checkpoints it.
    const { sim, target, proc } = setup(64, 2);
    const options = {
      gpuMapping: { [sim.gpus[0].uuid]: sim.gpus[1].uuid, [sim.gpus[1].uuid]: sim.gpus[0].uuid },
      timeoutMs: 1000,
    };
    assert.equal((await proc.toggle(options)).state, "checkpointed");
    assert.deepEqual(target.gpuUuids, [sim.gpus[0].uuid], "a suspend moves nothing");
    assert.equal((await proc.toggle(options)).state, "running");
    assert.deepEqual(target.gpuUuids, [sim.gpus[1].uuid], "the resume used the mapping");
  });

  test("a bad GPU mapping is refused before anything happens, even for a suspend", async () => {
    const { proc } = setup();
    await assert.rejects(proc.toggle({ gpuMapping: { nope: "GPU-x" } }), /gpuMapping/);
    assert.equal(await proc.state(), "running");
  });
});

describe("migration between GPUs", () => {
  test("memory contents survive a full rotation and back", async () => {
    const { sim, target, proc } = setup(1024, 2);
    const data = Uint8Array.from({ length: 65536 * 3 + 17 }, (_, i) => (i * 7919) % 256);
    await target.write(123_456, data);
    await target.write(1024 * 1024 * 1024 - 4, new Uint8Array([1, 2, 3, 4]));
    const digest = await target.memoryChunkedSha256();
    const [g0, g1] = sim.gpus;
    const rotate = { [g0.uuid]: g1.uuid, [g1.uuid]: g0.uuid };
    await proc.suspend();
    assert.equal(await target.memoryChunkedSha256(), digest, "intact in host memory");
    await proc.resume({ gpuMapping: rotate });
    assert.deepEqual(target.gpuUuids, [g1.uuid]);
    assert.deepEqual([g0.usedMiB, g1.usedMiB], [0, 1024 + g1.contextMiB]);
    assert.equal(await target.memoryChunkedSha256(), digest);
    assert.deepEqual(await target.read(123_456, data.length), data);
    await proc.suspend();
    await proc.resume({ gpuMapping: new Map(Object.entries(rotate)) });
    assert.deepEqual(target.gpuUuids, [g0.uuid]);
    assert.equal(await target.memoryChunkedSha256(), digest);
  });

  test("a changed byte changes the digest (the proof can fail)", async () => {
    const { target } = setup(64, 1);
    const before = await target.memoryChunkedSha256();
    await target.write(5, new Uint8Array([1]));
    assert.notEqual(await target.memoryChunkedSha256(), before);
  });

  test("a process on two of three GPUs moves both, and the mapping still names all three", async () => {
    const sim = new SimulatedMachine({ gpus: 3 });
    const [g0, g1, g2] = sim.gpus;
    const t = sim.spawn({ memoryMiB: 2048, gpu: [0, 1] });
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    await rejectsWith(
      proc.resume({ gpuMapping: { [g0.uuid]: g1.uuid, [g1.uuid]: g0.uuid } }),
      "MAPPING",
      /the GPU mapping cannot work: it leaves out GPU-\S+ \(GPU 2, NVIDIA H200\)/,
    );
    assert.equal(t.state, "checkpointed");
    await proc.resume({
      gpuMapping: { [g0.uuid]: g1.uuid, [g1.uuid]: g2.uuid, [g2.uuid]: g0.uuid },
    });
    assert.deepEqual(t.gpuUuids, [g1.uuid, g2.uuid]);
    const ctx = g0.contextMiB;
    assert.deepEqual([g0.usedMiB, g1.usedMiB, g2.usedMiB], [0, 1024 + ctx, 1024 + ctx]);
  });

  test("only the GPUs the process used must keep their chip (others may map anywhere)", async () => {
    const sim = new SimulatedMachine({
      gpus: [{ name: "NVIDIA H200" }, { name: "NVIDIA H200" }, { name: "NVIDIA H100 80GB HBM3" }],
    });
    const [g0, g1, g2] = sim.gpus;
    const t = sim.spawn({ memoryMiB: 512, gpu: 0 });
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    await rejectsWith(
      proc.resume({ gpuMapping: { [g0.uuid]: g2.uuid, [g1.uuid]: g1.uuid, [g2.uuid]: g0.uuid } }),
      CUDA_ERROR_INVALID_VALUE,
    );
    await proc.resume({
      gpuMapping: { [g0.uuid]: g1.uuid, [g1.uuid]: g2.uuid, [g2.uuid]: g0.uuid },
    });
    assert.deepEqual(t.gpuUuids, [g1.uuid]);
  });

  test("unknown UUIDs and a different chip give INVALID_VALUE and keep the process checkpointed", async () => {
    const sim = new SimulatedMachine({
      gpus: [{ name: "NVIDIA H200" }, { name: "NVIDIA H100 80GB HBM3", memoryMiB: 81559 }],
    });
    const t = sim.spawn({ memoryMiB: 512 });
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    const unknown = "GPU-00000000-0000-4000-8000-000000000001";
    // Unknown UUIDs are refused before the driver; a move onto another chip, by the driver.
    for (
      const [mapping, code] of [
        [{
          [unknown]: sim.gpus[0].uuid,
          [sim.gpus[0].uuid]: sim.gpus[0].uuid,
          [sim.gpus[1].uuid]: sim.gpus[1].uuid,
        }, "MAPPING"],
        [{ [sim.gpus[0].uuid]: unknown, [sim.gpus[1].uuid]: sim.gpus[1].uuid }, "MAPPING"],
        [
          { [sim.gpus[0].uuid]: sim.gpus[1].uuid, [sim.gpus[1].uuid]: sim.gpus[0].uuid },
          CUDA_ERROR_INVALID_VALUE,
        ],
      ] as const
    ) {
      await rejectsWith(proc.resume({ gpuMapping: mapping }), code);
      assert.equal(t.state, "checkpointed");
    }
    await proc.resume({
      gpuMapping: { [sim.gpus[0].uuid]: sim.gpus[0].uuid, [sim.gpus[1].uuid]: sim.gpus[1].uuid },
    });
    assert.equal(t.state, "running");
  });

  test("the mapping must name every GPU the driver sees, even ones the process never used", async () => {
    const { sim, target, proc } = setup(256, 2);
    const [g0, g1] = sim.gpus;
    await proc.suspend();
    await rejectsWith(proc.resume({ gpuMapping: { [g0.uuid]: g1.uuid } }), "MAPPING");
    await rejectsWith(
      proc.resume({ gpuMapping: { [g0.uuid]: g1.uuid, [g1.uuid]: g1.uuid } }),
      "MAPPING",
    );
    assert.equal(target.state, "checkpointed");
    await proc.resume({ gpuMapping: { [g0.uuid]: g1.uuid, [g1.uuid]: g0.uuid } });
    assert.deepEqual(target.gpuUuids, [g1.uuid]);
  });

  test("an empty mapping restores in place", async () => {
    const { sim, target, proc } = setup(256, 2);
    await proc.suspend();
    await proc.resume({ gpuMapping: {} });
    assert.deepEqual(target.gpuUuids, [sim.gpus[0].uuid]);
  });
});

describe("many processes", () => {
  test("eight 4 GiB processes checkpoint together much faster than one after another", async () => {
    const serial = new SimulatedMachine();
    const parallel = new SimulatedMachine();
    const mk = (sim: SimulatedMachine) =>
      Array.from(
        { length: 8 },
        () => new CudaProcess(sim.spawn({ memoryMiB: 4096 }).pid, { machine: sim }),
      );
    const ps = mk(serial), pp = mk(parallel);
    let t0 = serial.now();
    for (const p of ps) await p.suspend();
    const serialCkpt = serial.now() - t0;
    t0 = serial.now();
    for (const p of ps) await p.resume();
    const serialRestore = serial.now() - t0;
    t0 = parallel.now();
    await Promise.all(pp.map((p) => p.suspend()));
    const parCkpt = parallel.now() - t0;
    t0 = parallel.now();
    await Promise.all(pp.map((p) => p.resume()));
    const parRestore = parallel.now() - t0;
    // Measured on the H200: 20.3 s vs 2.9-3.4 s, and 6.8 s vs 2.0-2.3 s.
    assert.ok(serialCkpt / parCkpt > 3.5, `checkpoint speed-up ${serialCkpt / parCkpt}`);
    assert.ok(parCkpt > 2000 && parCkpt < 4000, `8 x 4 GiB checkpoint together took ${parCkpt} ms`);
    assert.ok(serialRestore / parRestore > 2.5, `restore speed-up ${serialRestore / parRestore}`);
    assert.ok(
      parRestore > 1500 && parRestore < 3000,
      `8 x 4 GiB restore together took ${parRestore} ms`,
    );
    for (const p of pp) assert.equal(await p.state(), "running");
  });
});
