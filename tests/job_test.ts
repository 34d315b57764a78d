// Jobs (core/job.ts): processes that share GPU state are locked all before any is checkpointed,
// restored all before any is unlocked, and brought back in the same order when a step fails.
// The order is read from the simulated driver's call log: each call's start and end time.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { CudaProcess, GpuRoomError, RefusedError, runGroup } from "../mod.ts";
import { withDetail } from "../core/errors.ts";
import { runGroup as runGroupOn } from "../core/group.ts";
import { checkGroupOptions } from "../core/group_types.ts";
import {
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_UNKNOWN,
} from "../core/driver.ts";
import { type SimulatedCall, SimulatedMachine } from "../mock/mod.ts";
import { loadSimulator, snapshotSimulator } from "../mock/state_file.ts";
import { hostWith, machineWith } from "./support/forward.ts";

function job(n: number, memoryMiB = 2048) {
  const sim = new SimulatedMachine({ gpus: 2 });
  const procs = Array.from({ length: n }, (_, i) => sim.spawn({ memoryMiB, gpu: i % 2 }));
  return { sim, procs, pids: procs.map((p) => p.pid) };
}

function calls(sim: SimulatedMachine, op: string, from = 0): SimulatedCall[] {
  return sim.driver.calls.slice(from).filter((c) => c.op === op);
}

/** Every call of `first` ended before any call of `then` started. */
function allBefore(sim: SimulatedMachine, first: string, then: string, from = 0): void {
  const a = calls(sim, first, from), b = calls(sim, then, from);
  assert.ok(a.length > 0 && b.length > 0, `${first} and ${then} were both called`);
  const lastEnd = Math.max(...a.map((c) => c.at));
  const firstStart = Math.min(...b.map((c) => c.started));
  assert.ok(
    lastEnd <= firstStart,
    `every ${first} ended (last at ${lastEnd} ms) before any ${then} started (${firstStart} ms)`,
  );
}

describe("a job of steps", () => {
  test("a member whose state rules the step out means no step at all, as all or nothing", async () => {
    const { sim, procs, pids } = job(3, 512);
    for (const p of procs.slice(0, 2)) await sim.driver.lock(p.pid, null);
    const before = sim.driver.calls.length;
    const result = await runGroup("checkpoint", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.match(
      String(result.processes[2].error),
      /checkpoint needs a locked process, and it is running/,
    );
    const made = sim.driver.calls.slice(before).map((c) => c.op);
    assert.ok(made.every((op) => op === "getState"), `only states were read: ${made}`);
    assert.deepEqual(procs.map((p) => p.state), ["locked", "locked", "running"]);
  });
});

describe("a member the driver will not restore", () => {
  test("the others are resumed, not checkpointed again, and its error says where it is and why", async () => {
    const { sim, procs, pids } = job(3);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    // What driver 580 answers for an importer of CUDA IPC memory: invalid argument, still
    // checkpointed (docs/DRIVER.md, "Processes that share GPU memory").
    procs[1].failNext("restore", { code: CUDA_ERROR_INVALID_VALUE });
    const result = await runGroup("resume", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "failed", "done"]);
    assert.deepEqual(procs.map((p) => p.state), ["running", "checkpointed", "running"]);
    const err = result.processes[1].error!;
    assert.match(err.message, /CUDA_ERROR_INVALID_VALUE/);
    assert.match(
      err.message,
      /The process is checkpointed; .* the job's other processes were resumed/,
    );
  });

  test("when the others are then brought back (an unlock fails, an abort), its error says so", async () => {
    // Before, it said the others were resumed, whatever came after.
    for (const how of ["an unlock fails", "an abort"]) {
      const { sim, procs, pids } = job(3);
      assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
      procs[1].failNext("restore", { code: CUDA_ERROR_INVALID_VALUE });
      if (how === "an unlock fails") procs[2].failNext("unlock", { code: CUDA_ERROR_UNKNOWN });
      const c = new AbortController();
      const result = await runGroup("resume", pids, {
        machine: sim,
        job: true,
        signal: c.signal,
        onProgress: (e) => how === "an abort" && e.type === "step-end" && c.abort(),
      });
      assert.equal(result.ok, false, how);
      assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed", "checkpointed"]);
      const err = result.processes[1].error!.message;
      assert.match(err, /the job's other processes were brought back$/, how);
    }
  });

  test("where another member's way back fails, a member brought back does not say every other was", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const [a, b] = [sim.spawn({ memoryMiB: 512, gpu: 0 }), sim.spawn({ memoryMiB: 512, gpu: 1 })];
    b.launch(3000);
    b.failNext("checkpoint", { code: 999 });
    a.failNext("restore", { code: 999 });
    const r = await runGroup("suspend", [a.pid, b.pid], { machine: sim, job: true });
    assert.equal(r.processes[0].rollback?.ok, false, "a's way back failed");
    assert.equal(a.state, "checkpointed");
    const said = r.processes[1].error!.message;
    assert.match(said, /brought back to running/, said);
    assert.doesNotMatch(said, /every other/, said);
  });

  test("a job whose restores will not fit is refused before any step: nothing is lost", async () => {
    const { sim, procs, pids } = job(2);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    const filler = sim.fillGpu(1);
    const before = sim.driver.calls.length;
    const result = await runGroup("resume", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
    const steps = sim.driver.calls.slice(before).filter((c) => c.op !== "getState");
    assert.deepEqual(steps.map((c) => c.op), [], "no step reached the driver");
    assert.deepEqual(result.processes.map((p) => p.status), ["not-started", "failed"]);
    const [first] = result.processes; // its state as its plan read it, as a group's says
    assert.deepEqual([first.initialState, first.state], ["checkpointed", "checkpointed"]);
    const error = result.processes[1].error;
    assert.ok(error instanceof GpuRoomError, `a GpuRoomError, not ${error?.constructor.name}`);
    assert.equal(error.code, "NO_ROOM");
    // The only one needing the GPU short of room is named, as its step would name it.
    assert.match(
      error.message,
      new RegExp(
        `^resume of process ${pids[1]} refused: it needs 2568 MiB on GPU-.*still checkpointed$`,
      ),
    );
    // Refused at its step (by another program's claim, say), the job's sentence is added to the
    // refusal, which keeps its class and code.
    const later = withDetail(error, "every other process of the job was brought back");
    assert.ok(later instanceof GpuRoomError && later.code === "NO_ROOM");
    assert.match(
      later.message,
      /still checkpointed\. Every other process of the job was brought back$/,
    );
    assert.match(String(later.stack).split("\n")[0], /brought back$/, "the stack's line is it");
    // Taken as text, not as a pattern: a "$&" in a message stays as it is.
    const dollars = new RefusedError({
      code: "STATE",
      operation: "x",
      reason: "it costs $& and $'",
    });
    const more = dollars.withDetail("then $1");
    assert.equal(more.message, "x refused: it costs $& and $'. Then $1");
    assert.equal(String(more.stack).split("\n")[0], `RefusedError: ${more.message}`);
    assert.equal(more.cause, dollars);
    filler.exit();
    assert.equal((await runGroup("resume", pids, { machine: sim, job: true })).ok, true);
  });
});

describe("a job whose members come into being over time (a restore's trees)", () => {
  test("one that never comes (its ready rejects) fails the job: the others are brought back", async () => {
    const { sim, procs, pids } = job(2, 1024);
    for (const p of pids) {
      await sim.driver.lock(p, null);
      await sim.driver.checkpoint(p);
    }
    const ready = async (pid: number) => {
      if (pid !== pids[1]) return;
      await sim.sleep(5000);
      throw new Error("its tree did not come back");
    };
    const result = await runGroupOn(sim, "resume", pids, {
      ...checkGroupOptions({ job: true }),
      ready,
    });
    assert.equal(result.ok, false);
    assert.equal(result.processes[1].status, "failed");
    // Before, the first was resumed (done, running): the job went on without the other.
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
  });
});

describe("a job's order", () => {
  test("suspend: every lock before any checkpoint; resume: every restore before any unlock", async () => {
    const { sim, pids } = job(4);
    const suspended = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.equal(suspended.ok, true);
    assert.deepEqual(suspended.processes.map((p) => p.state), pids.map(() => "checkpointed"));
    allBefore(sim, "lock", "checkpoint");
    const mark = sim.driver.calls.length;
    const resumed = await runGroup("resume", pids, { machine: sim, job: true });
    assert.equal(resumed.ok, true);
    allBefore(sim, "restore", "unlock", mark);
    assert.ok(sim.processes.every((p) => p.state === "running"));
  });

  test("without job: true a quick process checkpoints while a slow one still locks; with it, none does", async () => {
    for (const asJob of [false, true]) {
      const { sim, procs, pids } = job(2);
      const release = procs[0].hangNext("lock");
      const suspending = runGroup("suspend", pids, { machine: sim, job: asJob });
      await sim.sleep(5_000);
      const checkpointsMeanwhile = calls(sim, "checkpoint").length;
      release();
      const result = await suspending;
      assert.equal(result.ok, true);
      if (asJob) {
        assert.equal(checkpointsMeanwhile, 0, "no checkpoint while a lock hangs");
      } else {
        assert.equal(checkpointsMeanwhile, 1, "the other process was checkpointed meanwhile");
      }
    }
  });

  test("two jobs sharing a process take its turn in one order, whichever of its ids names it", async () => {
    const made = new SimulatedMachine({ gpus: 2 });
    const [p, q] = [made.spawn({ memoryMiB: 512 }), made.spawn({ memoryMiB: 512 })];
    // p's restore thread gets an id above q's pid, as after pids wrap around on Linux.
    const state = snapshotSimulator(made), tid = q.pid + 100;
    const [sp] = state.processes;
    [sp.threads, sp.restoreThreadId] = [[p.pid, p.pid + 1, tid], tid];
    const sim = loadSimulator({ ...state, nextPid: tid + 1 });
    // One job names p by its pid (p before q), the other by that thread id (q before p).
    const jobs = [[p.pid, q.pid], [q.pid, tid]].map((pids) =>
      runGroup("suspend", pids, { machine: sim, job: true, lockTimeoutMs: 0 })
    );
    const ended = await Promise.race([Promise.all(jobs), sim.sleep(60_000).then(() => "hung")]);
    assert.notEqual(ended, "hung", "each job waits for its turns, and none for the other for good");
    assert.deepEqual(sim.processes.map((x) => x.state), ["checkpointed", "checkpointed"]);
  });

  test("a member already where the goal leads is unchanged; a locked one is only checkpointed", async () => {
    const { sim, pids } = job(3);
    await sim.driver.lock(pids[1], null);
    await new CudaProcess(pids[2], { machine: sim }).suspend();
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "done", "unchanged"]);
    assert.deepEqual(result.processes[1].steps.map((s) => s.step), ["checkpoint"]);
  });
});

describe("a job that fails is brought back, in the same order", () => {
  test("a checkpoint fails: every process is restored before any is unlocked, all running", async () => {
    const { sim, procs, pids } = job(3);
    procs[1].failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    const mark = sim.driver.calls.length;
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.equal(result.rolledBack, true);
    assert.deepEqual(result.processes.map((p) => p.status), [
      "rolled-back",
      "failed",
      "rolled-back",
    ]);
    assert.deepEqual(result.processes.map((p) => p.state), ["running", "running", "running"]);
    assert.ok(result.processes.every((p) => p.rollback?.ok !== false));
    allBefore(sim, "restore", "unlock", mark);
    assert.match(
      result.processes[1].error!.message,
      /every other process of the job|as was every other process of the job/,
    );
    assert.ok(sim.processes.every((p) => p.state === "running"));
  });

  test("a lock fails: no process is ever checkpointed, the locked ones are unlocked", async () => {
    const { sim, procs, pids } = job(3);
    procs[2].failNext("lock", { code: CUDA_ERROR_NOT_READY });
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.equal(calls(sim, "checkpoint").length, 0, "no checkpoint was made");
    assert.equal(calls(sim, "unlock").length, 2, "the two locked ones were unlocked");
    assert.ok(sim.processes.every((p) => p.state === "running"));
    // The locked ones were stopped by the failure: no deadline or abort came into it.
    assert.deepEqual(result.processes.map((p) => [p.status, p.stopped]), [
      ["stopped", "another-failed"],
      ["stopped", "another-failed"],
      ["failed", undefined],
    ]);
  });

  test("an unlock fails: every process is locked again before any is checkpointed", async () => {
    const { sim, procs, pids } = job(3);
    await runGroup("suspend", pids, { machine: sim, job: true });
    procs[0].failNext("unlock", { code: CUDA_ERROR_UNKNOWN });
    const mark = sim.driver.calls.length;
    const result = await runGroup("resume", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.deepEqual(result.processes.map((p) => p.state), pids.map(() => "checkpointed"));
    const firstRollbackLock = calls(sim, "lock", mark);
    assert.equal(firstRollbackLock.length, 2, "the two unlocked ones were locked again");
    allBefore(sim, "lock", "checkpoint", mark);
  });

  test("the deadline passes between the phases: every process is stopped and unlocked", async () => {
    const { sim, procs, pids } = job(2);
    const release = procs[0].hangNext("lock");
    const suspending = runGroup("suspend", pids, { machine: sim, job: true, timeoutMs: 1_000 });
    await sim.sleep(2_000);
    release();
    const result = await suspending;
    assert.equal(result.deadlinePassed, true);
    assert.deepEqual(result.processes.map((p) => p.status), ["stopped", "stopped"]);
    assert.equal(calls(sim, "checkpoint").length, 0);
    assert.ok(sim.processes.every((p) => p.state === "running"));
  });

  test("an abort while the checkpoints run: every process is brought back once they end", async () => {
    const { sim, procs, pids } = job(2, 4096);
    const stop = new AbortController();
    void sim.sleep(100).then(() => stop.abort()); // the locks took < 1 ms; the checkpoints ~1 s
    const result = await runGroup("suspend", pids, {
      machine: sim,
      job: true,
      signal: stop.signal,
    });
    assert.equal(result.aborted, true);
    assert.equal(result.rolledBack, true);
    assert.deepEqual(result.processes.map((p) => p.status), ["rolled-back", "rolled-back"]);
    assert.equal(calls(sim, "checkpoint").length, 2, "the checkpoints under way ended");
    assert.deepEqual(procs.map((p) => p.state), ["running", "running"]);
  });

  test("a goal refused for one member changes nothing for any", async () => {
    const { sim, pids } = job(3);
    await sim.driver.lock(pids[0], null);
    const before = sim.driver.calls.length;
    const result = await runGroup("toggle", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.equal(result.processes[0].status, "failed");
    assert.equal(result.processes[0].error?.name, "RefusedError");
    assert.deepEqual(result.processes.slice(1).map((p) => p.status), [
      "not-started",
      "not-started",
    ]);
    assert.ok(result.processes.slice(1).every((p) => p.initialState === "running"));
    assert.ok(result.processes.slice(1).every((p) => p.state === "running"));
    assert.deepEqual(
      sim.driver.calls.slice(before).map((c) => c.op).filter((op) => op !== "getState"),
      [],
      "no call but getState",
    );
  });
});

describe("a job holds its processes", () => {
  test("another operation on a member waits until the job is over", async () => {
    const { sim, procs, pids } = job(2);
    const release = procs[1].hangNext("lock");
    const suspending = runGroup("suspend", pids, { machine: sim, job: true });
    await sim.sleep(10);
    let answered: string | undefined;
    const asked = new CudaProcess(pids[0], { machine: sim }).state().then((s) => answered = s);
    await sim.sleep(1_000);
    assert.equal(answered, undefined, "the state of a member is not read while the job runs");
    release();
    await suspending;
    await asked;
    assert.equal(answered, "checkpointed");
  });

  test("concurrency, or allOrNothing: false, cannot be given with job: true; nothing is asked", async () => {
    const { sim, pids } = job(2);
    await assert.rejects(
      runGroup("suspend", pids, { machine: sim, job: true, concurrency: 1 }),
      /all at once, all or none: concurrency cannot be given with job: true, got 1/,
    );
    await assert.rejects(
      runGroup("suspend", pids, { machine: sim, job: true, allOrNothing: false }),
      /all or none: allOrNothing cannot be given with job: true, got false/,
    );
    // A value of the wrong type is said as such, job or not.
    const no = { machine: sim, job: true, allOrNothing: "no" as unknown as boolean };
    await assert.rejects(runGroup("suspend", pids, no), /TypeError: .*allOrNothing.*got "no"/);
    assert.equal(sim.driver.calls.length, 0);
    const done = await runGroup("suspend", pids, { machine: sim, job: true, allOrNothing: true });
    assert.equal(done.ok, true, "allOrNothing: true is what a job is");
  });
});

describe("a job's stops, and what each member's outcome says", () => {
  test("a failure is what stopped the others, even where the deadline passed too", async () => {
    const { sim, procs, pids } = job(2);
    const release = procs[0].hangNext("lock");
    procs[1].failNext("lock", { code: CUDA_ERROR_UNKNOWN });
    const suspending = runGroup("suspend", pids, { machine: sim, job: true, timeoutMs: 1_000 });
    await sim.sleep(2_000); // the deadline passes while the first lock hangs
    release();
    const result = await suspending;
    assert.deepEqual(result.processes.map((p) => [p.status, p.stopped]), [
      ["stopped", "another-failed"],
      ["failed", undefined],
    ]);
    assert.equal(result.deadlinePassed, false, "the job had failed: no step was held back by it");
    assert.deepEqual(procs.map((p) => p.state), ["running", "running"]);
  });

  test("a deadline passing while the second steps run does not bring the job back", async () => {
    const { sim, procs, pids } = job(2, 4096); // locks < 1 ms, checkpoints ~1 s
    const result = await runGroup("suspend", pids, { machine: sim, job: true, timeoutMs: 500 });
    assert.equal(result.deadlinePassed, true);
    assert.equal(result.ok, true, "the checkpoints began before it passed");
    assert.equal(result.rolledBack, false);
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
  });

  test("a job aborted before it starts: each member not started, aborted", async () => {
    const { sim, pids } = job(2);
    const stop = new AbortController();
    stop.abort();
    const result = await runGroup("suspend", pids, {
      machine: sim,
      job: true,
      signal: stop.signal,
    });
    assert.deepEqual(result.processes.map((p) => [p.status, p.notStarted]), [
      ["not-started", "aborted"],
      ["not-started", "aborted"],
    ]);
    assert.deepEqual(calls(sim, "lock"), []);
  });

  test("every member's restore refused: none says the others were resumed", async () => {
    const { sim, procs, pids } = job(2);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    for (const p of procs) p.failNext("restore", { code: CUDA_ERROR_INVALID_VALUE });
    const result = await runGroup("resume", pids, { machine: sim, job: true });
    assert.deepEqual(result.processes.map((p) => p.status), ["failed", "failed"]);
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
    for (const { error } of result.processes) {
      assert.doesNotMatch(error!.message, /other processes were resumed/);
    }
  });

  test("a refused restore beside another failure: the job goes back as for any failure", async () => {
    const { sim, procs, pids } = job(3);
    await sim.driver.lock(pids[0], null);
    await sim.driver.checkpoint(pids[0]);
    // A toggle: the first is restored (refused, as for an importer), the others locked (one fails).
    procs[0].failNext("restore", { code: CUDA_ERROR_INVALID_VALUE });
    procs[1].failNext("lock", { code: CUDA_ERROR_UNKNOWN });
    const result = await runGroup("toggle", pids, { machine: sim, job: true });
    assert.deepEqual(result.processes.map((p) => p.status), ["failed", "failed", "stopped"]);
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "running", "running"]);
    // Not set aside as lost: its error is that of any member of a job that failed.
    assert.match(
      result.processes[0].error!.message,
      /invalid argument\. Every other process of the job was brought back$/,
    );
  });

  test("a member alone brought back does not say the others were too", async () => {
    const { sim, procs, pids } = job(2);
    await sim.driver.lock(pids[0], null);
    await sim.driver.checkpoint(pids[0]); // already where a suspend leads: unchanged
    procs[1].failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.deepEqual(result.processes.map((p) => p.status), ["unchanged", "failed"]);
    assert.match(
      result.processes[1].error!.message,
      /unknown error\. It was brought back to running$/,
    );
  });

  test("a member that exits during its checkpoint is not rolled back: the others are", async () => {
    const { sim, procs, pids } = job(2);
    procs[1].exitDuring("checkpoint", { afterMs: 10 });
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    const [other, gone] = result.processes;
    assert.equal(gone.status, "failed");
    assert.match(gone.error!.message, /CUDA_ERROR_OPERATING_SYSTEM/);
    assert.equal(gone.rollback, undefined, "nothing to undo in a process that is gone");
    assert.deepEqual([other.status, other.rollback?.ok, procs[0].state], [
      "rolled-back",
      true,
      "running",
    ]);
  });

  test("a rollback that fails: not rolled back, and the member's state is read", async () => {
    const { sim, procs, pids } = job(2, 512);
    procs[1].launch(3000); // its lock waits: the first is checkpointed by then
    procs[1].failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    procs[0].failNext("restore", { code: CUDA_ERROR_UNKNOWN }); // its way back fails
    const result = await runGroup("suspend", pids, { machine: sim, job: true });
    assert.equal(result.ok, false);
    assert.equal(result.rolledBack, false, "the only one done could not be brought back");
    const first = result.processes[0];
    assert.deepEqual([first.rollback?.ok, first.state], [false, "checkpointed"]);
    assert.equal(procs[0].state, "checkpointed");
  });
});

describe("a job whose members come as they are ready: failures", () => {
  const resumeAsReady = (
    sim: SimulatedMachine,
    pids: number[],
    ready: (pid: number) => Promise<void>,
  ) => runGroupOn(sim, "resume", pids, { ...checkGroupOptions({ job: true }), ready });

  test("one the driver will not restore stops no other: those that come are resumed", async () => {
    const { sim, procs, pids } = job(3);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    procs[1].failNext("restore", { code: CUDA_ERROR_INVALID_VALUE });
    const result = await resumeAsReady(sim, pids, (pid) => sim.sleep(pid === pids[2] ? 3000 : 0));
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "failed", "done"]);
    assert.deepEqual(procs.map((p) => p.state), ["running", "checkpointed", "running"]);
  });

  test("one whose restore is refused for room (no driver call) fails the job: it is not lost", async () => {
    const { sim, procs, pids } = job(2);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    const filler = sim.fillGpu(1); // the second one's GPU
    const result = await resumeAsReady(sim, pids, (pid) => sim.sleep(pid === pids[1] ? 3000 : 0));
    const refused = result.processes[1].error;
    assert.ok(refused instanceof GpuRoomError, `a GpuRoomError, not ${refused}`);
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"], "both as before");
    assert.doesNotMatch(refused.message, /most often lost/);
    filler.exit();
  });

  test("one whose state cannot be read fails the job, as a refusal to start does", async () => {
    const { sim, procs, pids } = job(3);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    procs[1].failNext("getState", { code: CUDA_ERROR_UNKNOWN });
    const result = await resumeAsReady(sim, pids, (pid) => sim.sleep(pid === pids[1] ? 3000 : 0));
    assert.equal(result.ok, false);
    assert.equal(result.processes[1].status, "failed");
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed", "checkpointed"]);
  });

  test("one whose turn comes after the deadline (none ahead, the host slow) is not started", async () => {
    const { sim, procs, pids } = job(1);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    // The host's read of the process takes 300 ms: begun at 900 ms, it ends past the deadline.
    const identify = (id: number) => sim.sleep(300).then(() => sim.host.identify!(id));
    const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
    const before = sim.driver.calls.length, t0 = sim.now();
    const result = await runGroupOn(machine, "resume", pids, {
      ...checkGroupOptions({ job: true, timeoutMs: 1000 }),
      ready: () => sim.sleep(900),
    });
    assert.ok(sim.now() - t0 >= 1000, "its turn came after the deadline");
    assert.deepEqual(result.processes.map((p) => [p.status, p.notStarted]), [
      ["not-started", "deadline"],
    ]);
    assert.deepEqual(sim.driver.calls.slice(before).map((c) => c.op), [], "no call at all");
    assert.equal(procs[0].state, "checkpointed");
  });

  test("one whose plan's read of its state outlasts the deadline makes no step: stopped", async () => {
    const { sim, procs, pids } = job(1);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    const before = sim.driver.calls.length, release = procs[0].hangNext("getState");
    const running = runGroupOn(sim, "resume", pids, {
      ...checkGroupOptions({ job: true, timeoutMs: 1000 }),
      ready: () => sim.sleep(500),
    });
    await sim.sleep(2000); // the plan's read hangs from 500 ms on, past the deadline
    release();
    const [p] = (await running).processes;
    assert.deepEqual([p.status, p.stopped, p.steps, p.rollback], [
      "stopped",
      "deadline",
      [],
      undefined,
    ]);
    const made = sim.driver.calls.slice(before).map((c) => c.op);
    assert.deepEqual(made, ["getState"], "its state read, no step");
    assert.equal(procs[0].state, "checkpointed");
  });

  test("one ready after another failed is not started: nothing is done to it", async () => {
    const { sim, procs, pids } = job(2);
    assert.equal((await runGroup("suspend", pids, { machine: sim, job: true })).ok, true);
    const before = sim.driver.calls.length;
    const result = await resumeAsReady(sim, pids, async (pid) => {
      if (pid === pids[0]) throw new Error("its tree did not come back");
      await sim.sleep(3000);
    });
    assert.deepEqual(result.processes.map((p) => [p.status, p.notStarted]), [
      ["failed", undefined],
      ["not-started", "another-failed"],
    ]);
    assert.deepEqual(sim.driver.calls.slice(before).map((c) => c.op), [], "no call at all");
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
  });
});
