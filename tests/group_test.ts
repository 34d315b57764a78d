// Operations on many processes at once (core/group.ts) and waiting for a state, on the simulator.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  CudaError,
  CudaProcess,
  GpuRoomError,
  type ProcessState,
  RefusedError,
  runGroup,
  WaitTimeoutError,
} from "../mod.ts";
import type { Action, GroupEvent } from "../types.ts";
import type { GroupOptions } from "../mod.ts";
import { checkGroupOptions } from "../core/group_types.ts";
import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_UNKNOWN,
} from "../core/driver.ts";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import { hostWith, machineWith } from "./support/forward.ts";

const STATES: readonly ProcessState[] = ["running", "locked", "checkpointed"];

/** Brings a simulated process into `state` through the raw driver. */
async function into(
  sim: SimulatedMachine,
  p: SimulatedProcess,
  state: ProcessState,
): Promise<void> {
  if (state === "running") return;
  assert.equal(await sim.driver.lock(p.pid, { timeoutMs: 0 }), 0);
  if (state === "checkpointed") assert.equal(await sim.driver.checkpoint(p.pid), 0);
}

/** Every list of `n` states. */
function mixes(n: number): ProcessState[][] {
  if (n === 0) return [[]];
  return mixes(n - 1).flatMap((m) => STATES.map((s) => [...m, s]));
}

/** Spawns one process per state, with some memory contents, and brings each into its state. */
async function group(sim: SimulatedMachine, states: readonly ProcessState[], memoryMiB = 256) {
  const procs: SimulatedProcess[] = [];
  for (const [i, state] of states.entries()) {
    const p = sim.spawn({ memoryMiB });
    await p.write(i * 4096, new Uint8Array([1, 2, 3, i]));
    procs.push(p);
    await into(sim, p, state);
  }
  const digests = await Promise.all(procs.map((p) => p.memoryChunkedSha256()));
  return { procs, digests };
}

describe("group operations", () => {
  test("suspend a group: each process done, in about the time of one, not the sum", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 4 }, () => sim.spawn({ memoryMiB: 4096 }));
    const result = await runGroup("suspend", procs.map((p) => p.pid), { machine: sim });
    assert.equal(result.ok, true);
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "done", "done", "done"]);
    assert.deepEqual(result.processes[0].steps.map((s) => s.step), ["lock", "checkpoint"]);
    assert.ok(procs.every((p) => p.state === "checkpointed"));
    // Measured on an H200: 4 x 4 GiB at once 2.36 s, one after another 8.2-8.4 s.
    assert.ok(result.ms > 2000 && result.ms < 3000, `${result.ms} ms`);
    const back = await runGroup("resume", procs.map((p) => p.pid), { machine: sim });
    assert.equal(back.ok, true);
    assert.ok(procs.every((p) => p.state === "running"));
  });

  test("a process already in the wanted state is left alone; suspend from locked only checkpoints", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["running", "locked", "checkpointed"]);
    const before = sim.driver.calls.length;
    const result = await runGroup("suspend", procs.map((p) => p.pid), { machine: sim });
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "done", "unchanged"]);
    assert.deepEqual(result.processes.map((p) => p.steps.map((s) => s.step).join("+")), [
      "lock+checkpoint",
      "checkpoint",
      "",
    ]);
    assert.deepEqual(result.processes.map((p) => p.initialState), STATES);
    const calls = sim.driver.calls.slice(before).filter((c) => c.op !== "getState");
    assert.equal(calls.filter((c) => c.pid === procs[2].pid).length, 0, "no call but getState");
  });

  test("a step the driver refuses fails that process alone, with the driver's answer, as alone", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["running", "checkpointed", "locked"]);
    const result = await runGroup("unlock", procs.map((p) => p.pid), { machine: sim });
    assert.equal(result.ok, false);
    assert.deepEqual(result.processes.map((p) => p.status), ["failed", "failed", "done"]);
    for (const [i, state] of [[0, "running"], [1, "checkpointed"]] as const) {
      const failed = result.processes[i];
      assert.ok(failed.error instanceof CudaError);
      assert.equal(failed.error.code, CUDA_ERROR_ILLEGAL_STATE);
      assert.match(
        failed.error.message,
        new RegExp(
          `^unlock of process \\d+ failed: CUDA_ERROR_ILLEGAL_STATE \\(401\\): the operation cannot be performed in the present state \\(the process is ${state}\\)$`,
        ),
      );
      assert.equal(failed.rollback, undefined, "the refused step changed nothing");
      assert.equal(procs[i].state, state);
    }
    // What the same step gets from one CudaProcess: the same error.
    await assert.rejects(
      new CudaProcess(procs[1].pid, { machine: sim }).unlock(),
      (e: Error) => e.message === result.processes[1].error!.message,
    );
  });

  test("a goal with no way from a state refuses that process alone, without a driver call", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["running", "locked"]);
    const before = sim.driver.calls.length;
    const result = await runGroup("toggle", procs.map((p) => p.pid), { machine: sim });
    assert.deepEqual(result.processes.map((p) => p.status), ["done", "failed"]);
    const refused = result.processes[1].error;
    assert.ok(refused instanceof RefusedError);
    assert.equal(refused.code, "STATE");
    assert.equal(
      refused.message,
      `toggle of process ${
        procs[1].pid
      } refused: toggle goes between running and checkpointed, and the process is locked`,
    );
    const calls = sim.driver.calls.slice(before).filter((c) => c.pid === procs[1].pid);
    assert.deepEqual(calls.map((c) => c.op), ["getState"], "only its state was asked");
    assert.equal(procs[1].state, "locked");
  });

  test("a failed step is undone for that process: a checkpoint that fails is unlocked again", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["running", "running"]);
    procs[1].failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    const result = await runGroup("suspend", procs.map((p) => p.pid), { machine: sim });
    assert.equal(result.ok, false);
    assert.equal(result.rolledBack, false, "without allOrNothing the others stand");
    assert.equal(procs[0].state, "checkpointed");
    const failed = result.processes[1];
    assert.equal(failed.status, "failed");
    assert.deepEqual(failed.rollback?.ok, true);
    assert.deepEqual(failed.rollback?.steps.map((s) => s.step), ["unlock"]);
    assert.equal(failed.state, "running");
    assert.equal(procs[1].state, "running");
  });

  for (const action of ["suspend", "resume"] as Action[]) {
    test(`all-or-nothing ${action}: from every mix of three initial states, all come back`, async () => {
      for (const mix of mixes(3)) {
        const sim = new SimulatedMachine();
        const { procs, digests } = await group(sim, mix, 16);
        // A fourth process, which can be worked on, fails at its last step.
        const failing = sim.spawn({ memoryMiB: 256 });
        await into(sim, failing, action === "suspend" ? "running" : "checkpointed");
        failing.failNext(action === "suspend" ? "checkpoint" : "unlock", {
          code: CUDA_ERROR_UNKNOWN,
        });
        const result = await runGroup(action, [...procs, failing].map((p) => p.pid), {
          machine: sim,
          allOrNothing: true,
        });
        const label = `${action} from ${mix.join(", ")}`;
        assert.equal(result.ok, false, label);
        assert.deepEqual(procs.map((p) => p.state), mix, `${label}: every process back`);
        assert.deepEqual(
          await Promise.all(procs.map((p) => p.memoryChunkedSha256())),
          digests,
          label,
        );
        assert.equal(failing.state, action === "suspend" ? "running" : "checkpointed", label);
        const done = result.processes.filter((p) =>
          p.rollback !== undefined && p.pid !== failing.pid
        );
        assert.ok(done.every((p) => p.rollback!.ok), `${label}: rollbacks succeeded`);
        assert.equal(result.rolledBack, done.length > 0, label);
      }
    });
  }

  test("all-or-nothing: a process that was done and then brought back says rolled-back", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["running", "running", "running"]);
    procs[2].failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    // The two small ones are done before the failing one's checkpoint fails.
    procs[2].launch(2000);
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    assert.equal(result.rolledBack, true);
    assert.deepEqual(
      result.processes.map((p) => [p.status, p.rollback?.ok, p.state]),
      [["rolled-back", true, "running"], ["rolled-back", true, "running"], [
        "failed",
        true,
        "running",
      ]],
    );
    assert.deepEqual(result.processes[0].steps.map((s) => s.step), ["lock", "checkpoint"]);
    assert.deepEqual(result.processes[0].rollback?.steps.map((s) => s.step), ["restore", "unlock"]);
  });

  test("step and group times are to the microsecond, without floating-point noise", async () => {
    const sim = new SimulatedMachine();
    const pids = [1000, 3, 77].map((memoryMiB) => sim.spawn({ memoryMiB }).pid);
    const times: number[] = [];
    for (let i = 0; i < 6; i++) {
      const result = await runGroup("toggle", pids, { machine: sim });
      times.push(result.ms, ...result.processes.flatMap((p) => p.steps.map((s) => s.ms)));
    }
    const proc = new CudaProcess(pids[0], { machine: sim });
    times.push(...(await proc.toggle()).steps.map((s) => s.ms));
    await proc.close();
    assert.equal(times.length, 6 * 7 + 2);
    const noisy = times.filter((ms) => Math.round(ms * 1000) / 1000 !== ms);
    assert.deepEqual(noisy, [], "each time is a whole number of microseconds");
  });

  test("a misspelled option names the function called, with the option meant", () => {
    assert.throws(
      () => checkGroupOptions({ allOrNothin: true } as GroupOptions),
      /^TypeError: runGroup has no option "allOrNothin" \(did you mean "allOrNothing"\?\)/,
    );
    return assert.rejects(
      () => runGroup("suspend", [1], { allOrNothin: true } as GroupOptions),
      /^TypeError: runGroup has no option "allOrNothin"/,
    );
  });

  test("all-or-nothing with a limit: after a failure, nothing more starts", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 4 }, () => sim.spawn({ memoryMiB: 256 }));
    procs[0].failNext("lock", { code: CUDA_ERROR_NOT_READY });
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
      concurrency: 1,
    });
    assert.deepEqual(result.processes.map((p) => p.status), [
      "failed",
      "not-started",
      "not-started",
      "not-started",
    ]);
    assert.ok(result.processes.slice(1).every((p) => p.notStarted === "another-failed"));
    assert.ok(result.processes.slice(1).every((p) => p.initialState === "running"));
    assert.ok(result.processes.slice(1).every((p) => p.state === "running"));
    assert.ok(procs.every((p) => p.state === "running"));
  });

  test("the concurrency limit is honoured", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 6 }, () => sim.spawn({ memoryMiB: 1024 }));
    let running = 0, most = 0;
    const onProgress = (e: GroupEvent) => {
      if (e.type === "step-start" && e.step === "lock") most = Math.max(most, ++running);
      if (e.type === "step-end" && e.step === "checkpoint") running--;
    };
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      concurrency: 2,
      onProgress,
    });
    assert.equal(result.ok, true);
    assert.equal(most, 2);
  });

  test("progress events: each step starts and ends, with times", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const events: GroupEvent[] = [];
    await runGroup("suspend", [p.pid], { machine: sim, onProgress: (e) => void events.push(e) });
    assert.deepEqual(
      events.map((e) => `${e.type}:${e.type === "process-end" ? e.status : e.step}`),
      [
        "step-start:lock",
        "step-end:lock",
        "step-start:checkpoint",
        "step-end:checkpoint",
        "process-end:done",
      ],
    );
    const end = events[3] as Extract<GroupEvent, { type: "step-end" }>;
    assert.ok(end.ok && !end.rollback && end.ms > 500, `checkpoint took ${end.ms} ms`);
  });

  test("progress events of a job: each member's end once the job is over, with its own status", async () => {
    const sim = new SimulatedMachine();
    const procs = [sim.spawn(), sim.spawn(), sim.spawn()];
    procs[2].failNext("checkpoint", { code: 999 }); // the job fails: the others are brought back
    const events: GroupEvent[] = [];
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      job: true,
      onProgress: (e) => void events.push(e),
    });
    assert.equal(result.ok, false);
    const ends = events.flatMap((e) => e.type === "process-end" ? [[e.pid, e.status]] : []);
    assert.deepEqual(ends, [
      [procs[0].pid, "rolled-back"],
      [procs[1].pid, "rolled-back"],
      [procs[2].pid, "failed"],
    ]);
    const lastStep = events.findLastIndex((e) => e.type === "step-end");
    assert.ok(events.findIndex((e) => e.type === "process-end") > lastStep, "after every step");
  });

  test("progress events: each step's time is the group's, from its start", async () => {
    // The real clock, 50 times faster than the driver: a 1 GiB checkpoint takes about 15 ms.
    const sim = new SimulatedMachine({ clock: "real", speed: 50 });
    const pids = [0, 1].map(() => sim.spawn({ memoryMiB: 1024 }).pid);
    const events: GroupEvent[] = [];
    await runGroup("suspend", pids, { machine: sim, onProgress: (e) => void events.push(e) });
    const steps = events.filter((e) => e.type === "step-start" || e.type === "step-end");
    assert.equal(steps.length, 8);
    for (const pid of pids) {
      const [start, end] = steps.filter((e) => e.pid === pid && e.step === "checkpoint");
      assert.ok(end.at >= start.at + 5, `checkpoint of ${pid}: ${start.at} ms, then ${end.at} ms`);
    }
  });

  test("progress events carry each process's GPU memory, and a resume remembers it", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const one = sim.spawn({ memoryMiB: 1024 });
    const two = sim.spawn({ memoryMiB: 2048, gpu: [0, 1] }); // 1024 on each, and two contexts
    const mib = async (action: "suspend" | "resume", pids: number[]) => {
      const seen = new Map<number, (number | undefined)[]>();
      const result = await runGroup(action, pids, {
        machine: sim,
        onProgress: (e) => {
          if (e.type !== "process-end") seen.set(e.pid, [...seen.get(e.pid) ?? [], e.gpuMemoryMiB]);
        },
      });
      assert.equal(result.ok, true);
      return seen;
    };
    const context = 520; // the simulator's CUDA context, as measured on an H200
    const suspended = await mib("suspend", [one.pid, two.pid]);
    assert.deepEqual(suspended.get(one.pid), Array(4).fill(1024 + context));
    assert.deepEqual(suspended.get(two.pid), Array(4).fill(2048 + 2 * context));
    // Checkpointed, they hold no GPU memory; the resume's events say what comes back.
    const resumed = await mib("resume", [one.pid, two.pid]);
    assert.deepEqual(resumed.get(one.pid), Array(4).fill(1024 + context));
    assert.deepEqual(resumed.get(two.pid), Array(4).fill(2048 + 2 * context));

    // Checkpointed by this package outside a group: remembered too.
    const three = sim.spawn({ memoryMiB: 256 });
    await new CudaProcess(three.pid, { machine: sim }).suspend();
    assert.deepEqual(
      (await mib("resume", [three.pid])).get(three.pid),
      Array(4).fill(256 + context),
    );
    // Checkpointed by another program (the raw driver): what a restore brings back is not known.
    const four = sim.spawn({ memoryMiB: 256 });
    await sim.driver.lock(four.pid, null);
    await sim.driver.checkpoint(four.pid);
    assert.deepEqual((await mib("resume", [four.pid])).get(four.pid), [
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });

  test("progress events go without memory where the host cannot tell, and a bad machine is refused", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const events: GroupEvent[] = [];
    // A machine whose host cannot tell GPU memory (no gpuMemory()).
    const machine = machineWith(sim, { host: { kind: "test", scan: () => Promise.resolve([]) } });
    const result = await runGroup("suspend", [p.pid], {
      machine,
      onProgress: (e) => void events.push(e),
    });
    assert.equal(result.ok, true);
    assert.equal(events.length, 5, "four step events and the process's end");
    assert.ok(events.every((e) => !("gpuMemoryMiB" in e)));
    await assert.rejects(
      () => runGroup("resume", [p.pid], { machine: 42 as never }),
      (e: Error) => e instanceof TypeError && /machine must be a Machine .* got 42/.test(e.message),
    );
  });

  test("gpuMemory: false: the events carry no GPU memory, though the host could tell it", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const events: GroupEvent[] = [];
    const result = await runGroup("suspend", [p.pid], {
      machine: sim,
      gpuMemory: false,
      onProgress: (e) => void events.push(e),
    });
    assert.equal(result.ok, true);
    assert.equal(events.length, 5, "four step events and the process's end");
    assert.ok(events.every((e) => !("gpuMemoryMiB" in e)), JSON.stringify(events));
  });

  test("the deadline: lock timeouts are cut to it, and nothing starts after it", async () => {
    const sim = new SimulatedMachine();
    const busy = sim.spawn({ memoryMiB: 256 });
    void busy.launch(5000); // a kernel that outlasts the deadline
    const others = Array.from({ length: 2 }, () => sim.spawn({ memoryMiB: 256 }));
    const result = await runGroup("suspend", [busy, ...others].map((p) => p.pid), {
      machine: sim,
      timeoutMs: 1000,
      concurrency: 1,
    });
    assert.equal(result.deadlinePassed, true);
    const [b, o1, o2] = result.processes;
    assert.equal(b.status, "failed");
    assert.ok(b.error instanceof CudaError && b.error.code === CUDA_ERROR_NOT_READY);
    assert.ok(b.steps[0].ms >= 999 && b.steps[0].ms <= 1001, `the lock waited ${b.steps[0].ms} ms`);
    assert.deepEqual([o1.status, o2.status], ["not-started", "not-started"]);
    assert.deepEqual([o1.notStarted, o2.notStarted], ["deadline", "deadline"]);
    // Never planned (one at a time): no state given, not even an undefined one.
    assert.ok(!("initialState" in o1) && !("state" in o2), `no state read: ${Object.keys(o1)}`);
    assert.ok([busy, ...others].every((p) => p.state === "running"));
    // One process alone: its lock, cut to the deadline, fails; the deadline passed all the same.
    const alone = await runGroup("suspend", [busy.pid], { machine: sim, timeoutMs: 1000 });
    assert.deepEqual([alone.ok, alone.deadlinePassed], [false, true]);
    // A lock that would wait forever (0, the command line's default) is cut to it all the same.
    const forever = await runGroup("suspend", [busy.pid], {
      machine: sim,
      timeoutMs: 1000,
      lockTimeoutMs: 0,
    });
    const [f] = forever.processes;
    assert.deepEqual([forever.ok, forever.deadlinePassed, f.status], [false, true, "failed"]);
    assert.ok(f.error instanceof CudaError && f.error.code === CUDA_ERROR_NOT_READY);
    assert.ok(f.steps[0].ms >= 999 && f.steps[0].ms <= 1001, `the lock waited ${f.steps[0].ms} ms`);
    // A failure of its own in a group that ran past its deadline, which cut nothing: not passed.
    const slow = sim.spawn({ memoryMiB: 4096 });
    const past = await runGroup("suspend", [2 ** 22 + 7, slow.pid], {
      machine: sim,
      timeoutMs: 500,
    });
    assert.deepEqual([past.ok, past.deadlinePassed], [false, false]);
    assert.equal(slow.state, "checkpointed", "its checkpoint, begun in time, ended");
    // 0 is no deadline, as it is no timeout for a lock: the lock waits out a 1.5 s kernel.
    void busy.launch(1500);
    const none = await runGroup("suspend", [busy.pid], { machine: sim, timeoutMs: 0 });
    assert.deepEqual([none.ok, none.deadlinePassed, busy.state], [true, false, "checkpointed"]);
  });

  test("the deadline passing between a process's steps undoes its first step", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    void p.launch(800);
    // The lock waits for the kernel (800 ms) within the 1000 ms; the checkpoint could not finish
    // in what is left, but no call is interrupted: it is only not started once the time is up.
    const result = await runGroup("suspend", [p.pid], { machine: sim, timeoutMs: 800 });
    const out = result.processes[0];
    assert.equal(out.status, "stopped");
    assert.equal(out.stopped, "deadline");
    assert.deepEqual(out.steps.map((s) => s.step), ["lock"]);
    assert.deepEqual(out.rollback?.steps.map((s) => s.step), ["unlock"]);
    assert.equal(p.state, "running");
    assert.equal(result.rolledBack, true, "its lock was undone");
  });

  test("a stop while a process waits for its turn (another call on it) ends the wait: not started", async () => {
    // Before, the group waited for the other call (a lock without timeout on a busy GPU: forever),
    // then made no step. And the deadline counts from the call, GPU memory read or not.
    const stops = [
      "abort",
      "deadline",
      "deadline, events given",
      "all or nothing",
      "job",
      "job, aborted",
    ];
    for (const stop of stops) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 1024 });
      const release = p.hangNext("getState");
      const busy = new CudaProcess(p.pid, { machine: sim }).state(); // holds its queue
      const c = new AbortController(), events: GroupEvent[] = [];
      const group = runGroup("suspend", [p.pid], {
        machine: sim,
        lockTimeoutMs: 0,
        ...(stop.endsWith("abort") || stop.endsWith("aborted")
          ? { signal: c.signal }
          : { timeoutMs: 1000 }),
        ...(stop === "deadline, events given" ? { onProgress: (e) => void events.push(e) } : {}),
        ...(stop.startsWith("job") ? { job: true } : {}),
        ...(stop === "all or nothing" ? { allOrNothing: true } : {}),
      });
      await sim.sleep(5000);
      c.abort();
      const before = sim.driver.calls.length;
      const ended = await Promise.race([group.then(() => true), sim.sleep(100).then(() => false)]);
      assert.ok(ended, `${stop}: the group ended while the other call still held the turn`);
      release();
      await busy;
      const result = await group;
      await sim.sleep(100); // the given-up wait's turn comes now: nothing runs in it
      const made = sim.driver.calls.slice(before).map((call) => call.op);
      assert.ok(!made.includes("lock"), `${stop}: no step after the stop (${made})`);
      const { status, notStarted } = result.processes[0];
      assert.equal(status, "not-started", stop);
      assert.equal(
        notStarted,
        stop.endsWith("abort") || stop.endsWith("aborted") ? "aborted" : "deadline",
        stop,
      );
      assert.deepEqual(result.processes[0].steps, [], stop);
      assert.equal(result.aborted || result.deadlinePassed, true, stop);
      assert.equal(result.ok, false, stop);
      assert.equal(p.state, "running", stop);
      if (stop !== "deadline, events given") continue;
      const ends = events.filter((e) => e.type === "process-end");
      assert.deepEqual(
        ends.map((e) => [e.pid, e.status]),
        [[p.pid, "not-started"]],
        "its end told",
      );
    }
  });

  test("all or nothing: a member refused in its plan keeps its error though another's wait was given up", async () => {
    // Before, the deadline given up on the held member's plan hid the other's refusal.
    const sim = new SimulatedMachine();
    const [bad, held] = [sim.spawn({ memoryMiB: 256 }), sim.spawn({ memoryMiB: 256 })];
    bad.failNext("lock", { code: CUDA_ERROR_UNKNOWN, state: "failed" });
    await runGroup("lock", [bad.pid], { machine: sim });
    const release = held.hangNext("getState");
    const busy = new CudaProcess(held.pid, { machine: sim }).state(); // holds its turn
    const group = runGroup("suspend", [bad.pid, held.pid], {
      machine: sim,
      allOrNothing: true,
      timeoutMs: 1000,
    });
    await sim.sleep(2000);
    const result = await group;
    const [b, h] = result.processes;
    assert.equal(b.status, "failed");
    assert.match(String(b.error), /the failed state is final/);
    assert.deepEqual([h.status, h.notStarted], ["not-started", "another-failed"]);
    release();
    await busy;
  });

  test("a job waiting for one member's turn lets go of the others' at the deadline", async () => {
    const sim = new SimulatedMachine();
    const [free, held] = [sim.spawn({ memoryMiB: 512 }), sim.spawn({ memoryMiB: 512 })];
    const release = held.hangNext("getState");
    const busy = new CudaProcess(held.pid, { machine: sim }).state();
    const job = runGroup("suspend", [free.pid, held.pid], {
      machine: sim,
      job: true,
      timeoutMs: 1000,
    });
    await sim.sleep(2000);
    // The job took the free member's turn first (pid order): a call on it runs once the job ends.
    const state = await Promise.race([
      new CudaProcess(free.pid, { machine: sim }).state(),
      sim.sleep(100).then(() => "still waiting"),
    ]);
    assert.equal(state, "running");
    const result = await job;
    assert.deepEqual(result.processes.map((o) => [o.status, o.notStarted]), [
      ["not-started", "deadline"],
      ["not-started", "deadline"],
    ]);
    assert.equal(result.deadlinePassed, true);
    release();
    await busy;
    assert.deepEqual([free.state, held.state], ["running", "running"]);
  });

  test("abort mid-group: what runs finishes, nothing new starts, all-or-nothing rolls back", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 4 }, () => sim.spawn({ memoryMiB: 1024 }));
    const controller = new AbortController();
    const aborting = runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      concurrency: 2,
      allOrNothing: true,
      signal: controller.signal,
      onProgress: (e) => {
        if (e.type === "step-end" && e.step === "checkpoint") controller.abort();
      },
    });
    const result = await aborting;
    assert.equal(result.aborted, true);
    assert.equal(result.ok, false);
    assert.ok(result.processes.some((p) => p.notStarted === "aborted"));
    assert.equal(result.rolledBack, true);
    assert.ok(procs.every((p) => p.state === "running"), procs.map((p) => p.state).join());
  });

  test("an abort and a deadline both passed: what was not started says aborted", async () => {
    const sim = new SimulatedMachine();
    const procs = [sim.spawn({ memoryMiB: 4096 }), sim.spawn({ memoryMiB: 64 })];
    const controller = new AbortController();
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      concurrency: 1,
      timeoutMs: 500, // passed by the time the first checkpoint (~1 s) ends
      signal: controller.signal,
      onProgress: (e) => {
        if (e.type === "step-end" && e.step === "checkpoint") controller.abort();
      },
    });
    assert.deepEqual(result.processes.map((p) => [p.status, p.notStarted]), [
      ["done", undefined],
      ["not-started", "aborted"],
    ]);
    assert.equal(result.aborted, true);
  });

  test("all-or-nothing: each done process is brought back once, though two others do not succeed", async () => {
    const sim = new SimulatedMachine();
    const [done, early, late] = [64, 64, 64].map((memoryMiB) => sim.spawn({ memoryMiB }));
    early.launch(1000);
    early.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    late.launch(3000); // locked once the other failed: stopped there, which dooms the group again
    done.failNext("restore", { code: CUDA_ERROR_UNKNOWN }); // its rollback fails
    const result = await runGroup("suspend", [done, early, late].map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    assert.deepEqual(result.processes.map((p) => p.status), ["rolled-back", "failed", "stopped"]);
    const { rollback, state } = result.processes[0];
    assert.deepEqual([rollback?.ok, state], [false, "checkpointed"]);
    assert.equal(done.state, "checkpointed", "the second did not bring it back again");
    const restores = sim.driver.calls.filter((c) => c.op === "restore" && c.pid === done.pid);
    assert.equal(restores.length, 1, "one rollback, one restore");
  });

  test("all-or-nothing: a rollback that cannot be made (the pid names another process) says why", async () => {
    const sim = new SimulatedMachine();
    const [done, failing] = [sim.spawn({ memoryMiB: 64 }), sim.spawn({ memoryMiB: 64 })];
    failing.launch(1000);
    failing.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    let replaced = false; // once the second fails, the first's pid names a process started since
    const identify = (id: number) =>
      replaced && id === done.pid
        ? Promise.resolve({ pid: id, start: 1e9 })
        : sim.host.identify!(id);
    const result = await runGroup("suspend", [done.pid, failing.pid], {
      machine: machineWith(sim, { host: hostWith(sim.host, { identify }) }),
      allOrNothing: true,
      onProgress: (e) => {
        if (e.type === "step-start" && e.step === "checkpoint" && e.pid === failing.pid) {
          replaced = true;
        }
      },
    });
    const [first] = result.processes;
    assert.equal(first.rollback?.ok, false);
    assert.ok(first.rollback?.error instanceof RefusedError, String(first.rollback?.error));
    assert.equal(first.rollback.error.code, "REPLACED");
    assert.deepEqual(first.rollback.steps, []);
    assert.equal(result.ok, false);
  });

  test("all-or-nothing: a process that cannot be read or planned means nothing starts", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 3 }, () => sim.spawn({ memoryMiB: 1024 }));
    const plain = sim.spawn({ cuda: false });
    const before = sim.driver.calls.length;
    const result = await runGroup("suspend", [...procs, plain].map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    const [a, b, c, d] = result.processes;
    assert.equal(d.status, "failed", "the process without CUDA fails on its own");
    assert.ok(d.error instanceof CudaError && d.error.code === 3, String(d.error));
    for (const p of [a, b, c]) {
      assert.equal(p.status, "not-started", "the others did not fail: they never started");
      assert.equal(p.notStarted, "another-failed");
      assert.deepEqual(p.steps, []);
      assert.equal(p.rollback, undefined);
      assert.deepEqual([p.initialState, p.state], ["running", "running"], "as its plan read it");
    }
    const calls = sim.driver.calls.slice(before).map((c) => c.op);
    assert.ok(calls.every((op) => op === "getState"), `only states were read: ${calls}`);
    assert.ok(procs.every((p) => p.state === "running"));
    assert.equal(result.ok, false);
  });

  test("all-or-nothing step: a member whose state rules it out means no step at all", async () => {
    const sim = new SimulatedMachine();
    const { procs } = await group(sim, ["locked", "locked", "running"], 1024);
    const before = sim.driver.calls.length;
    const result = await runGroup("checkpoint", procs.map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    const [a, b, c] = result.processes;
    assert.equal(c.status, "failed");
    assert.ok(c.error instanceof RefusedError && c.error.code === "STATE", String(c.error));
    assert.equal(
      c.error.message,
      `checkpoint of process ${c.pid} refused: checkpoint needs a locked process, and it is running`,
    );
    assert.deepEqual([c.initialState, c.state, c.steps], ["running", "running", []]);
    for (const p of [a, b]) {
      assert.deepEqual([p.status, p.notStarted, p.steps], ["not-started", "another-failed", []]);
      assert.deepEqual([p.initialState, p.state], ["locked", "locked"], "as its plan read it");
    }
    const calls = sim.driver.calls.slice(before).map((c) => c.op);
    assert.ok(calls.every((op) => op === "getState"), `only states were read: ${calls}`);
    assert.deepEqual(procs.map((p) => p.state), ["locked", "locked", "running"]);
    assert.deepEqual([result.ok, result.rolledBack], [false, false]);
    // Without allOrNothing the driver still has the last word on each step, as alone.
    const each = await runGroup("checkpoint", procs.map((p) => p.pid), { machine: sim });
    assert.deepEqual(each.processes.map((p) => p.status), ["done", "done", "failed"]);
    assert.ok(each.processes[2].error instanceof CudaError, String(each.processes[2].error));
    assert.equal((each.processes[2].error as CudaError).code, CUDA_ERROR_ILLEGAL_STATE);
  });

  test("all-or-nothing step: a failed member is refused as final, not as in the wrong state", async () => {
    const sim = new SimulatedMachine();
    const [failed, running] = [sim.spawn({ memoryMiB: 256 }), sim.spawn({ memoryMiB: 256 })];
    failed.failNext("lock", { code: CUDA_ERROR_UNKNOWN, state: "failed" });
    await runGroup("lock", [failed.pid], { machine: sim });
    assert.equal(failed.state, "failed");
    const result = await runGroup("lock", [failed.pid, running.pid], {
      machine: sim,
      allOrNothing: true,
    });
    const error = result.processes[0].error;
    assert.ok(error instanceof RefusedError && error.code === "STATE", String(error));
    assert.equal(
      error.message,
      `lock of process ${failed.pid} refused: the failed state is final: no operation can recover it`,
    );
    assert.equal(running.state, "running");
  });

  test("all-or-nothing: a failure between steps stops the others there and undoes them", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 3 }, () => sim.spawn({ memoryMiB: 1024 }));
    // The last one's lock fails at once; the others are locked by then and stop before their
    // checkpoint.
    procs[2].failNext("lock", { code: CUDA_ERROR_UNKNOWN });
    const result = await runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    const [a, b, c] = result.processes;
    assert.equal(c.status, "failed");
    for (const p of [a, b]) {
      assert.equal(p.status, "stopped", "the others did not fail: they were stopped");
      assert.equal(p.stopped, "another-failed");
      assert.equal(p.error, undefined);
      assert.deepEqual(p.rollback?.steps.map((s) => `${s.step}:${s.ok}`), ["unlock:true"]);
      assert.equal(p.state, "running");
    }
    assert.ok(procs.every((p) => p.state === "running"));
    assert.equal(result.ok, false);
    assert.equal(result.rolledBack, true, "the locks of the stopped ones were undone");
    assert.equal(result.rolledBack, true, "the locks of the stopped ones were undone");
  });

  test("all-or-nothing: a resume that will not fit is refused before any member is restored", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const procs = [0, 1].map((gpu) => sim.spawn({ memoryMiB: 4096, gpu }));
    const pids = procs.map((p) => p.pid);
    assert.equal((await runGroup("suspend", pids, { machine: sim })).ok, true);
    sim.fillGpu(1, { leaveMiB: 1024 });
    const before = sim.driver.calls.length;
    const result = await runGroup("resume", pids, { machine: sim, allOrNothing: true });
    assert.equal(result.ok, false);
    const [a, b] = result.processes;
    assert.equal(a.status, "not-started", "the one that fits was not restored and undone");
    assert.ok(b.error instanceof GpuRoomError, String(b.error));
    assert.equal(b.error.code, "NO_ROOM");
    const steps = sim.driver.calls.slice(before).filter((c) => c.op !== "getState");
    assert.deepEqual(steps.map((c) => c.op), [], "no step reached the driver");
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed"]);
  });

  test("all-or-nothing: resumes that each fit alone but not together are refused before any step", async () => {
    const sim = new SimulatedMachine({ gpus: 1 });
    const procs = [0, 1, 2].map(() => sim.spawn({ memoryMiB: 4096 }));
    const pids = procs.map((p) => p.pid);
    assert.equal((await runGroup("suspend", pids, { machine: sim })).ok, true);
    sim.fillGpu(0, { leaveMiB: 10_000 }); // room for two of the three (4616 MiB each)
    const before = sim.driver.calls.length;
    const result = await runGroup("resume", pids, { machine: sim, allOrNothing: true });
    assert.equal(result.ok, false);
    const failed = result.processes.filter((p) => p.status === "failed");
    assert.deepEqual(failed.map((p) => p.pid), [pids[2]], "the last one needing the GPU");
    assert.ok(failed[0].error instanceof GpuRoomError, String(failed[0].error));
    assert.match(failed[0].error.message, /the 3 processes it restores need 13848 MiB on GPU-/);
    assert.deepEqual(result.processes.map((p) => p.status), [
      "not-started",
      "not-started",
      "failed",
    ]);
    const steps = sim.driver.calls.slice(before).filter((c) => c.op !== "getState");
    assert.deepEqual(steps.map((c) => c.op), [], "no step reached the driver");
    // Without all-or-nothing each claims its room as it restores: two come back, the third waits.
    const each = await runGroup("resume", pids, { machine: sim });
    assert.deepEqual(each.processes.map((p) => p.status).sort(), ["done", "done", "failed"]);
    // A toggle that suspends one to make room for another, one after the other, is not refused:
    // the checkpoint frees what the restore then takes.
    const [done] = each.processes.filter((p) => p.status === "done");
    const waiting = each.processes.find((p) => p.status === "failed")!;
    const swap = await runGroup("toggle", [done.pid, waiting.pid], {
      machine: sim,
      allOrNothing: true,
      concurrency: 1,
    });
    assert.equal(swap.ok, true, JSON.stringify(swap.processes.map((p) => p.error?.message)));
  });

  test("a process that exits mid-group fails alone, saying it is gone; the rest roll back", async () => {
    const sim = new SimulatedMachine();
    const procs = Array.from({ length: 3 }, () => sim.spawn({ memoryMiB: 4096 }));
    const suspending = runGroup("suspend", procs.map((p) => p.pid), {
      machine: sim,
      allOrNothing: true,
    });
    await sim.sleep(500);
    procs[1].exit();
    const result = await suspending;
    const gone = result.processes[1];
    assert.equal(gone.status, "failed");
    assert.match(gone.error!.message, /CUDA_ERROR_OPERATING_SYSTEM.*[Tt]he process has exited$/);
    assert.equal(gone.rollback, undefined, "nothing to undo in a process that is gone");
    assert.deepEqual([procs[0].state, procs[2].state], ["running", "running"]);
  });

  test("a GPU mapping for all moves the group to the other GPU", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const [a, b] = sim.gpus.map((g) => g.uuid);
    const procs = [sim.spawn(), sim.spawn()];
    await runGroup("suspend", procs.map((p) => p.pid), { machine: sim });
    const result = await runGroup("resume", procs.map((p) => p.pid), {
      machine: sim,
      gpuMapping: { [a]: b, [b]: a },
    });
    assert.equal(result.ok, true);
    assert.ok(procs.every((p) => p.gpuUuids[0] === b));
  });

  test("a mapping function's bad answer for one pid fails that member, whatever the group's kind", async () => {
    for (const kind of [{}, { allOrNothing: true }, { job: true }]) {
      const sim = new SimulatedMachine({ gpus: 2 });
      const [a, b] = [sim.spawn(), sim.spawn()];
      await runGroup("suspend", [a.pid, b.pid], { machine: sim });
      const gpuMapping = (pid: number) => pid === b.pid ? { "GPU-bad": "x" } : undefined;
      const result = await runGroup("resume", [a.pid, b.pid], {
        machine: sim,
        gpuMapping,
        ...kind,
      });
      const [first, second] = result.processes, at = JSON.stringify(kind);
      assert.equal(second.status, "failed", at);
      assert.match(second.error!.message, /gpuMapping key "GPU-bad" is not a GPU UUID/, at);
      assert.equal(first.status, Object.keys(kind).length === 0 ? "done" : "not-started", at);
      assert.equal(b.state, "checkpointed", at);
    }
  });

  test("bad input is refused before anything happens, naming it", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    await assert.rejects(
      runGroup("freeze" as Action, [p.pid], { machine: sim }),
      /action must be one of "lock", "checkpoint", "restore", "unlock", "suspend", "resume", "toggle", got "freeze"/,
    );
    await assert.rejects(
      runGroup("suspend", [p.pid, p.pid], { machine: sim }),
      /names process \d+ twice \(targets\[1\]\)/,
    );
    // A pid and a thread id of it share one queue: a job would wait for itself.
    for (const job of [true, false]) {
      await assert.rejects(
        runGroup("suspend", [p.pid, p.tid], { machine: sim, job }),
        new RegExp(
          `pids ${p.pid} and ${p.tid} are one process`,
        ),
      );
    }
    assert.equal(p.state, "running");
    await assert.rejects(
      runGroup("suspend", [0], { machine: sim }),
      /targets\[0\] must be an integer process or thread id from 1/,
    );
    await assert.rejects(
      runGroup("suspend", [p.pid], { machine: sim, concurrency: 0 }),
      /concurrency must be an integer from 1, got 0/,
    );
    await assert.rejects(
      runGroup("suspend", [p.pid], { machine: sim, timeoutMs: -1 }),
      /timeoutMs \(ms for the whole group\) must be an integer from 0 to 2147483647, got -1/,
    );
    await assert.rejects(
      runGroup("resume", [p.pid], { machine: sim, gpuMapping: { x: "y" } }),
      /gpuMapping key "x" is not a GPU UUID/,
    );
    const [a] = sim.gpus.map((g) => g.uuid);
    await assert.rejects(
      runGroup("suspend", [p.pid], { machine: sim, gpuMapping: { [a!]: a! } }),
      /runGroup: gpuMapping is for restore, resume and toggle, not suspend/,
    );
    assert.equal(sim.driver.calls.length, 0);
  });

  test("a pid and a thread id of it are refused as one process, the error naming the process", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    assert.notEqual(p.tid, p.pid);
    // Given either way round: the two as given, in order, then the process they are (its pid).
    for (const targets of [[p.pid, p.tid], [p.tid, p.pid]]) {
      await assert.rejects(runGroup("suspend", targets, { machine: sim }), {
        name: "RangeError",
        message: `pids ${targets[0]} and ${targets[1]} are one process, ${p.pid}: ` +
          "give each process once",
      });
    }
    assert.equal(sim.driver.calls.length, 0);
  });

  test("the same pid on two machines is two processes: a group of both acts on each", async () => {
    const [one, two] = [new SimulatedMachine(), new SimulatedMachine()];
    const [a, b] = [one.spawn(), two.spawn()];
    assert.equal(a.pid, b.pid, "each simulated machine numbers its processes alike");
    const procs = [
      new CudaProcess(a.pid, { machine: one }),
      new CudaProcess(b.pid, { machine: two }),
    ];
    const result = await runGroup("suspend", procs);
    assert.equal(result.ok, true, JSON.stringify(result.processes));
    assert.deepEqual([a.state, b.state], ["checkpointed", "checkpointed"]);
  });

  test("handles given as CudaProcess keep their own driver and stay open", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    const result = await runGroup("suspend", [proc]);
    assert.equal(result.ok, true);
    assert.equal(await proc.state(), "checkpointed");
  });

  test("a handle used only through groups refuses, in a later group, its pid now another process's (REPLACED)", async () => {
    // The groups work through forks of the handle, which share the process it was first used on.
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 64 });
    let start = 100; // the target's start as the host tells it; another process's once changed
    const identify = async (id: number) => {
      const found = await sim.host.identify!(id);
      return found && { pid: found.pid, start };
    };
    const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
    const proc = new CudaProcess(target.pid, { machine });
    assert.equal((await runGroup("suspend", [proc])).ok, true);
    start = 200; // the target ended, and another process was given its pid
    const again = await runGroup("resume", [proc]);
    const [outcome] = again.processes;
    assert.equal(outcome.status, "failed");
    assert.ok(outcome.error instanceof RefusedError && outcome.error.code === "REPLACED");
    assert.equal(target.state, "checkpointed", "the process now at the pid was left alone");
    await assert.rejects(proc.state(), /now names another process/);
  });

  test("handles closed by their caller during the group: the group goes on, and rolls back", async () => {
    // A shutdown: the group aborted, then every handle closed, while the big one's checkpoint is in
    // the driver. The rollback still brings both back (it was refused: "this handle has been closed").
    const sim = new SimulatedMachine();
    const [big, small] = [8192, 256].map((memoryMiB) => sim.spawn({ memoryMiB }));
    const handles = [big, small].map((p) => new CudaProcess(p.pid, { machine: sim }));
    const stop = new AbortController();
    let closed: Promise<unknown> | undefined;
    const result = await runGroup("suspend", handles, {
      signal: stop.signal,
      rollBackOnAbort: true,
      onProgress: (e) => {
        if (e.type !== "step-end" || e.pid !== small.pid || e.step !== "checkpoint") return;
        closed ??= (stop.abort(), Promise.all(handles.map((h) => h.close())));
      },
    });
    await closed;
    assert.ok(closed, "closed during the group");
    assert.deepEqual(result.processes.map((p) => [p.status, p.state]), [
      ["rolled-back", "running"],
      ["rolled-back", "running"],
    ]);
    assert.deepEqual([big.state, small.state], ["running", "running"]);
    await assert.rejects(handles[0].state(), /this handle has been closed/);
  });
});

describe("waitForState", () => {
  test("resolves when another party brings the process there", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const proc = new CudaProcess(p.pid, { machine: sim });
    const other = new CudaProcess(p.pid, { machine: sim });
    const waiting = proc.waitForState("checkpointed", { timeoutMs: 5000 });
    await sim.sleep(300);
    await other.suspend();
    await waiting;
    assert.ok(sim.now() < 2000);
  });

  test("a stopped process is not asked (the driver would not answer): the wait goes on", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const proc = new CudaProcess(p.pid, { machine: sim });
    await sim.engine.stop([p.pid]);
    const waiting = proc.waitForState("checkpointed", { timeoutMs: 5000 });
    await sim.sleep(1000);
    await sim.engine.wake([p.pid]);
    await new CudaProcess(p.pid, { machine: sim }).suspend();
    await waiting;
    assert.ok(sim.now() < 2500, `${sim.now()} ms`);

    await sim.engine.stop([p.pid]);
    const t0 = sim.now();
    await assert.rejects(proc.waitForState("running", { timeoutMs: 700 }), (err: unknown) => {
      assert.ok(err instanceof WaitTimeoutError, String(err));
      assert.equal(
        err.message,
        `process ${p.pid} did not become running within 700 ms; it is stopped (SIGSTOP, Ctrl-Z, ` +
          `a debugger, a restore holding it), and the driver answers no call on it till it runs again`,
      );
      assert.equal(err.state, undefined);
      return true;
    });
    assert.ok(sim.now() - t0 >= 700, "waited out its timeout");
    assert.equal(p.state, "checkpointed", "nothing was done to it");
  });

  test("times out on the driver's clock, saying what it saw", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    await assert.rejects(proc.waitForState("locked", { timeoutMs: 2000 }), (err: unknown) => {
      assert.ok(err instanceof WaitTimeoutError);
      assert.equal(
        err.message,
        `process ${proc.pid} did not become locked within 2000 ms; it is running`,
      );
      return true;
    });
    assert.ok(sim.now() >= 2000 && sim.now() < 2100, `${sim.now()} ms`);
  });

  test("its last wait is cut to the timeout: it rejects at the timeout, not at the next ask", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    const t0 = sim.now();
    await assert.rejects(
      proc.waitForState("locked", { timeoutMs: 1000, intervalMs: 700 }),
      WaitTimeoutError,
    );
    // Asked at 0 and 700 ms, then once more at 1000 ms (the simulator's clock, not the wall's).
    assert.ok(sim.now() - t0 >= 1000 && sim.now() - t0 < 1100, `${sim.now() - t0} ms`);
  });

  test("asks every 50 ms unless told: it sees the state within one interval of its change", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const proc = new CudaProcess(p.pid, { machine: sim });
    const waiting = proc.waitForState("locked");
    await sim.sleep(120);
    await sim.driver.lock(p.pid, null);
    const changed = sim.now();
    await waiting;
    // On the simulator's clock: asked at 0, 50, 100 and 150 ms.
    assert.ok(sim.now() - changed <= 50, `seen ${sim.now() - changed} ms after the change`);
  });

  test("timeoutMs 0: one look, then the timeout (no refusal of 0)", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    await proc.waitForState("running", { timeoutMs: 0 });
    await assert.rejects(proc.waitForState("locked", { timeoutMs: 0 }), WaitTimeoutError);
  });

  test("an abort stops it with the signal's reason", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    const controller = new AbortController();
    const waiting = proc.waitForState("checkpointed", { signal: controller.signal });
    await sim.sleep(120);
    controller.abort(new Error("shutting down"));
    await assert.rejects(waiting, /shutting down/);
  });

  test("an abort ends its wait for the process's turn (another call on it hangs)", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn(), release = p.hangNext("getState");
    const busy = new CudaProcess(p.pid, { machine: sim }).state();
    const controller = new AbortController();
    const proc = new CudaProcess(p.pid, { machine: sim });
    const waiting = proc.waitForState("running", { signal: controller.signal });
    await sim.sleep(120);
    controller.abort(new Error("shutting down"));
    await assert.rejects(waiting, /shutting down/);
    release();
    await busy;
    await proc.close();
  });

  test("its timeout ends its wait for the process's turn (another call on it hangs)", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn(), release = p.hangNext("getState");
    const busy = new CudaProcess(p.pid, { machine: sim }).state();
    const proc = new CudaProcess(p.pid, { machine: sim });
    const t0 = sim.now();
    let at = NaN;
    const waiting = proc.waitForState("locked", { timeoutMs: 1000, intervalMs: 100 });
    waiting.catch(() => at = sim.now() - t0);
    await sim.sleep(10); // its deadline's timer is set once it has its machine
    await sim.sleep(5000);
    await assert.rejects(waiting, (err: unknown) => {
      assert.ok(err instanceof WaitTimeoutError, String(err));
      assert.equal(
        err.message,
        `process ${p.pid} did not become locked within 1000 ms; it is unknown: another ` +
          `operation this program made on it held its turn`,
      );
      assert.equal(err.state, undefined);
      return true;
    });
    assert.ok(at >= 1000 && at < 1100, `rejected at ${at} ms`);
    release();
    assert.equal(await busy, "running");
    // Seen once before the turn is held, the timeout says what it saw.
    const reads = proc.waitForState("locked", { timeoutMs: 500 });
    reads.catch(() => {}); // looked at below
    await sim.sleep(20);
    const release2 = p.hangNext("getState");
    const busy2 = new CudaProcess(p.pid, { machine: sim }).state();
    await sim.sleep(5000);
    await assert.rejects(reads, /within 500 ms; it is running$/);
    release2();
    await busy2;
    await proc.close();
  });

  test("a look behind no other operation is made, however long the host takes to find it", async () => {
    await using sim = new SimulatedMachine({ clock: "real" });
    const p = sim.spawn();
    // The host's read of the process takes 30 ms (a busy /proc): past timeouts of 0 and 5 ms.
    const identify = (id: number) =>
      new Promise((r) => setTimeout(r, 30)).then(() => sim.host.identify!(id));
    const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
    const proc = new CudaProcess(p.pid, { machine });
    await proc.waitForState("running", { timeoutMs: 0 });
    await proc.waitForState("running", { timeoutMs: 5, intervalMs: 1 });
    await assert.rejects(
      proc.waitForState("locked", { timeoutMs: 5, intervalMs: 1 }),
      /within 5 ms; it is running$/,
    );
    await proc.close();
  });

  test("its last look, made at the timeout, sees a change made just before", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const proc = new CudaProcess(p.pid, { machine: sim });
    const waiting = proc.waitForState("locked", { timeoutMs: 1000, intervalMs: 700 });
    await sim.sleep(950);
    await sim.driver.lock(p.pid, null);
    await waiting;
  });

  test("a process that exits rejects with the driver's error; bad input is named", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    const proc = new CudaProcess(p.pid, { machine: sim });
    const waiting = proc.waitForState("checkpointed");
    await sim.sleep(100);
    p.exit();
    await assert.rejects(waiting, /CUDA_ERROR_OPERATING_SYSTEM/);
    await assert.rejects(
      proc.waitForState("frozen" as ProcessState),
      /state must be one of "running", "locked", "checkpointed", "failed", got "frozen"/,
    );
    await assert.rejects(
      proc.waitForState("running", { intervalMs: 0 }),
      /intervalMs must be an integer from 1/,
    );
  });
});
