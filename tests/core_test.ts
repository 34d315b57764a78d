// The foundation above the seam: core/ stays runtime-free, operations on one process run in
// order, drivers have one owner who closes them, capability and GPU mappings are checked before
// any call, and messages say what happened once and plainly.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  CheckpointUnsupportedError,
  CudaError,
  CudaProcess,
  DriverLoadError,
  inspectSnapshot,
  listGpus,
  RefusedError,
  runGroup,
} from "../mod.ts";
import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
} from "../core/driver.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import { Handle } from "../core/process.ts";
import { type ClosableMachine, SharedMachine } from "../core/machine.ts";
import { timerOn } from "../core/time.ts";
import { runGroup as runGroupOn } from "../core/group.ts";
import { checkGroupOptions } from "../core/group_types.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";
import { rejectsWith } from "./support/rejects.ts";

/**
 * A machine whose driver forwards to the simulator and counts what is asked of it. Its close, like
 * the native machine's (whose threads end some time after it is asked to), resolves after a real
 * 30 ms timer, and only then sets `counts.closed`.
 */
function counting(sim: SimulatedMachine, extra: Partial<CheckpointDriver> = {}) {
  const counts = { close: 0, closed: false, lock: 0, restore: 0, getState: 0 };
  const machine = {
    ...forward(sim, {
      kind: "counting",
      getState: (pid) => (counts.getState++, sim.driver.getState(pid)),
      lock: (pid, args) => (counts.lock++, sim.driver.lock(pid, args)),
      restore: (pid, args) => (counts.restore++, sim.driver.restore(pid, args)),
      ...extra,
    }),
    close: () => {
      counts.close++;
      return new Promise<void>((resolve) =>
        setTimeout(() => (counts.closed = true, resolve()), 30)
      );
    },
  };
  return { machine, counts };
}

describe("one operation at a time per process", () => {
  test("two resumes at once: one restores, the other finds it running and leaves it", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    const proc = new CudaProcess(target.pid, { machine: sim });
    await proc.suspend();
    const [a, b] = await Promise.all([proc.resume(), proc.resume()]);
    assert.equal(a.status, "done");
    assert.deepEqual(a.steps.map((s) => s.step), ["restore", "unlock"]);
    assert.deepEqual(b, { status: "unchanged", state: "running", steps: [] });
    assert.equal(target.state, "running");
    assert.deepEqual(
      sim.driver.calls.filter((c) => c.op !== "getState").map((c) => `${c.op}:${c.code}`),
      ["lock:0", "checkpoint:0", "restore:0", "unlock:0"],
      "the second resume asked the state and made no step",
    );
  });

  test("operations made without waiting run in call order, each after the one before", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 4096 });
    const proc = new CudaProcess(target.pid, { machine: sim });
    const order: string[] = [];
    const note = (what: string) => () => void order.push(`${what}@${Math.round(sim.now())}`);
    await Promise.all([
      proc.lock().then(note("lock")),
      proc.state().then((s) => order.push(`state ${s}`)),
      proc.checkpoint().then(note("checkpoint")),
      proc.state().then((s) => order.push(`state ${s}`)),
      proc.restore().then(note("restore")),
      proc.unlock().then(note("unlock")),
      proc.state().then((s) => order.push(`state ${s}`)),
    ]);
    assert.deepEqual(order.map((o) => o.replace(/@\d+/, "")), [
      "lock",
      "state locked",
      "checkpoint",
      "state checkpointed",
      "restore",
      "unlock",
      "state running",
    ]);
    const at = (what: string) => Number(order.find((o) => o.startsWith(what))!.split("@")[1]);
    assert.ok(at("checkpoint") > 1000, "the 4 GiB checkpoint took its time");
    assert.ok(at("restore") > at("checkpoint"), "restore began after the checkpoint ended");
  });

  test("a failed operation does not block the ones after it", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn();
    const proc = new CudaProcess(target.pid, { machine: sim });
    const [unlock, lock] = await Promise.allSettled([proc.unlock(), proc.lock()]);
    assert.equal(unlock.status, "rejected");
    assert.equal(lock.status, "fulfilled");
    assert.equal(target.state, "locked");
  });

  test("state() asked during a suspend answers when the suspend is done", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    const proc = new CudaProcess(target.pid, { machine: sim });
    const suspending = proc.suspend();
    const state = await proc.state();
    assert.equal(state, "checkpointed");
    await suspending;
  });

  test("the restore thread id is answered at once, even during a suspend", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 4096 });
    const proc = new CudaProcess(target.pid, { machine: sim });
    const suspending = proc.suspend();
    assert.equal(await proc.restoreThreadId(), target.tid);
    assert.ok(sim.now() < 100, `answered at ${sim.now()} ms, before the checkpoint ended`);
    await suspending;
  });

  test("other processes are not held up", async () => {
    const sim = new SimulatedMachine();
    const big = sim.spawn({ memoryMiB: 8192 });
    const other = sim.spawn();
    const suspending = new CudaProcess(big.pid, { machine: sim }).suspend();
    assert.equal(await new CudaProcess(other.pid, { machine: sim }).state(), "running");
    assert.ok(sim.now() < 100, `answered at ${sim.now()} ms`);
    await suspending;
  });

  test("two handles on one pid share the order", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    const a = new CudaProcess(target.pid, { machine: sim });
    const b = new CudaProcess(target.pid, { machine: sim });
    const [x, y] = await Promise.all([a.suspend(), b.resume()]);
    assert.equal(x.status, "done");
    assert.equal(y.status, "done", "the resume waited for the suspend, then restored");
    assert.equal(target.state, "running");
  });

  test("operations are queued in the order made, however long the host takes to read each process", async () => {
    for (const handles of [1, 2]) {
      const sim = new SimulatedMachine();
      const target = sim.spawn({ memoryMiB: 1024 });
      // The first read is the slowest (a busy /proc, as a real host's reads are): queued once read,
      // the resume made second would find the process running, and the suspend then checkpoint it.
      let reads = 0;
      const identify = async (id: number) => {
        if (reads++ === 0) await new Promise((wake) => setTimeout(wake, 30));
        return await sim.host.identify!(id);
      };
      const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
      const a = new CudaProcess(target.pid, { machine });
      const b = handles === 1 ? a : new CudaProcess(target.pid, { machine });
      const [x, y] = await Promise.all([a.suspend(), b.resume()]);
      assert.deepEqual([x.status, y.status], ["done", "done"], `${handles} handle(s)`);
      assert.equal(target.state, "running", "the resume made second restored what the suspend did");
    }
  });

  test("a thread id and the pid are one process: they share the order", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024, extraThreads: 2 });
    const byPid = new CudaProcess(target.pid, { machine: sim });
    const byTid = new CudaProcess(target.threads[2], { machine: sim });
    // Without one queue for both, the resume through the thread id would ask the state in the
    // middle of the suspend (the driver answers it once the checkpoint ends: "checkpointed") or
    // find it running and do nothing; in order, it restores what the suspend checkpointed.
    const [x, y, z] = await Promise.all([byPid.suspend(), byTid.resume(), byPid.state()]);
    assert.equal(x.status, "done");
    assert.deepEqual(y.steps.map((s) => s.step), ["restore", "unlock"]);
    assert.equal(z, "running");
  });
});

describe("lifecycles: who opens a machine closes it", () => {
  test("a shared machine is opened on first use, shared, and closed by its last user, whose close waits for it", async () => {
    const sim = new SimulatedMachine();
    const { machine, counts } = counting(sim);
    let opened = 0;
    const shared = new SharedMachine(() => (opened++, Promise.resolve(machine)));
    const handles = Array.from({ length: 20 }, () => new Handle(sim.spawn().pid, shared));
    await Promise.all(handles.map((h) => h.state()));
    assert.equal(opened, 1, "twenty handles, one machine");
    for (const h of handles.slice(0, 19)) await h.close();
    assert.equal(counts.close, 0, "still used by one handle");
    await handles[19].close();
    assert.equal(counts.closed, true, "the last close resolved once the machine had closed");
    assert.equal(counts.close, 1, "closed with the last handle");
    await handles[0].close(); // idempotent
    assert.equal(counts.close, 1);
    assert.equal(await new Handle(sim.spawn().pid, shared).state(), "running");
    assert.equal(opened, 2, "used again, it opens again");
  });

  test("a group of pids leases a shared machine for its run: the last lease goes when it resolves", async () => {
    const sim = new SimulatedMachine();
    const { machine, counts } = counting(sim);
    const shared = new SharedMachine(() => Promise.resolve(machine));
    const pids = [sim.spawn().pid, sim.spawn().pid];
    const result = await runGroupOn(shared, "suspend", pids, checkGroupOptions({}));
    assert.equal(result.ok, true);
    assert.deepEqual([counts.close, counts.closed], [1, true], "closed before the group resolved");
    // A CudaProcess given is its caller's: it keeps its lease, and the machine stays open.
    const proc = new Handle(pids[0], shared);
    assert.equal((await runGroupOn(shared, "resume", [proc], checkGroupOptions({}))).ok, true);
    assert.equal(counts.close, 1, "still leased by the handle given");
    await proc.close();
    assert.equal(counts.close, 2);
  });

  test("a shared machine that failed to open is tried again on the next call", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    let tries = 0;
    const shared = new SharedMachine(() =>
      ++tries === 1
        ? Promise.reject(new Error("no library yet"))
        : Promise.resolve({ ...forward(sim), close: () => Promise.resolve() })
    );
    const handle = new Handle(t.pid, shared);
    await assert.rejects(handle.state(), /no library yet/);
    assert.equal(await handle.state(), "running");
    assert.equal(tries, 2);
  });

  test("a failed opening is forgotten while a user still holds it: the next lease opens again", async () => {
    const sim = new SimulatedMachine();
    let tries = 0;
    const shared = new SharedMachine(() =>
      ++tries === 1
        ? Promise.reject(new Error("no library yet"))
        : Promise.resolve({ ...forward(sim), close: () => Promise.resolve() })
    );
    const first = shared.lease(); // not let go
    await assert.rejects(first.machine, /no library yet/);
    const second = shared.lease();
    assert.equal((await second.machine).driver.kind, sim.driver.kind);
    assert.equal(tries, 2);
    await Promise.all([first.release(), second.release()]);
  });

  test("an opening that fails after its users let go forgets only itself, not the one opened since", async () => {
    const sim = new SimulatedMachine();
    const failing = Promise.withResolvers<ClosableMachine>();
    let tries = 0;
    const shared = new SharedMachine(() =>
      ++tries === 1
        ? failing.promise
        : Promise.resolve({ ...forward(sim), close: () => Promise.resolve() })
    );
    const first = shared.lease();
    const let1 = first.release(); // before it opened: the next lease opens another
    const second = shared.lease();
    await second.machine;
    failing.reject(new Error("the first opening failed late"));
    await assert.rejects(first.machine, /failed late/);
    await let1;
    const third = shared.lease();
    assert.equal(await third.machine, await second.machine, "the one opened since, shared");
    assert.equal(tries, 2);
    await Promise.all([second.release(), third.release()]);
  });

  test("a machine given is the caller's: closing the process, even by await using, leaves it open", async () => {
    const sim = new SimulatedMachine();
    const { machine, counts } = counting(sim);
    const t = sim.spawn();
    const proc = new CudaProcess(t.pid, { machine });
    assert.equal(await proc.state(), "running");
    await proc.close();
    {
      await using again = new CudaProcess(t.pid, { machine });
      assert.equal(await again.state(), "running");
    }
    assert.equal(counts.close, 0);
  });

  test("close() waits for the handle's operations; later ones reject and say why", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn({ memoryMiB: 1024 });
    const proc = new CudaProcess(t.pid, { machine: sim });
    const suspending = proc.suspend();
    await proc.close();
    assert.equal(t.state, "checkpointed", "the suspend finished before close resolved");
    await suspending;
    await assert.rejects(
      proc.resume(),
      /^Error: CudaProcess\(\d+\): this handle has been closed; make a new CudaProcess to go on$/,
    );
  });

  test("without a machine, a process is this machine's: its libcuda, or an error saying where none was found", async () => {
    const proc = new CudaProcess(2 ** 31 - 1);
    await assert.rejects(proc.state(), (err: unknown) => {
      // No driver here (CI): every path tried is named. A driver: it knows no such process.
      if (err instanceof DriverLoadError) return err.tried.length > 0;
      return err instanceof CudaError && err.code === 304;
    });
    await proc.close();
  });

  test("without a machine, a group on this machine resolves: each process failed, saying why (it rejects only for bad input)", async () => {
    const result = await runGroup("suspend", [2 ** 31 - 1, 2 ** 31 - 2]);
    assert.equal(result.ok, false);
    for (const { status, error: err } of result.processes) {
      assert.equal(status, "failed");
      // No driver here (CI): every path tried is named. A driver: it knows no such process.
      const why = err instanceof DriverLoadError ? err.tried.length > 0 : err instanceof CudaError;
      assert.ok(why, String(err));
    }
  });

  test("a machine option that is not one is refused, naming it", async () => {
    assert.throws(
      () => new CudaProcess(1, { machine: 42 as never }),
      /^TypeError: CudaProcess's machine must be a Machine .* got 42$/,
    );
    // A driver of one's own that lacks a step: refused at once, not after a lock it cannot undo.
    const sim = new SimulatedMachine(), p = sim.spawn(), d = sim.driver;
    const half = { driver: { getState: d.getState.bind(d), lock: d.lock.bind(d) } } as never;
    assert.throws(
      () => new CudaProcess(p.pid, { machine: half }),
      /machine must be a Machine \(.*\) whose driver has getRestoreThreadId\(\), got an object$/,
    );
    // A call that is there but is no function is lacking all the same; null is no machine.
    const calls = ["getState", "lock", "checkpoint", "restore", "unlock"].map((c) => [c, () => 0]);
    const notCalls = { driver: { ...Object.fromEntries(calls), getRestoreThreadId: 0 } } as never;
    assert.throws(
      () => new CudaProcess(p.pid, { machine: notCalls }),
      /whose driver has getRestoreThreadId\(\), got an object$/,
    );
    assert.throws(
      () => new CudaProcess(p.pid, { machine: null as never }),
      /^TypeError: CudaProcess's machine must be a Machine .* got null$/,
    );
    // The first call it lacks is named, whichever it is.
    const noUnlock = {
      driver: {
        ...Object.fromEntries(
          ["getState", "getRestoreThreadId", "lock", "checkpoint", "restore"].map((
            c,
          ) => [c, () => 0]),
        ),
      },
    } as never;
    await assert.rejects(
      runGroup("suspend", [p.pid], { machine: noUnlock }),
      /^TypeError: runGroup's machine must be a Machine .* whose driver has unlock\(\), got an object$/,
    );
    assert.equal(p.state, "running");
    // A driver of one's own without listGpus: listGpus says so, not that there are none.
    await assert.rejects(
      listGpus({ machine: forward(sim) }),
      /^Error: this simulated driver cannot list its GPUs$/,
    );
    // inspectSnapshot names it too, before it looks for the snapshot.
    await assert.rejects(
      inspectSnapshot("/nonexistent/snap", { machine: 42 as never }),
      /^TypeError: inspectSnapshot's machine must be a Machine .* got 42$/,
    );
  });
});

describe("capability is checked above the seam, once for every driver", () => {
  test("a driver that lacks a function: the error names it, and nothing reaches the driver", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const { machine, counts } = counting(sim, {
      missingFunctions: ["cuCheckpointProcessLock"],
    });
    await assert.rejects(
      new CudaProcess(t.pid, { machine }).suspend(),
      (err: unknown) => {
        assert.ok(err instanceof CheckpointUnsupportedError);
        assert.ok(err instanceof RefusedError, "refused before the driver was asked");
        assert.equal(err.code, "UNSUPPORTED");
        assert.equal(err.driverVersion, 13000);
        assert.match(
          err.message,
          /^suspend of process \d+ refused: this driver \(CUDA 13\.0\) lacks cuCheckpointProcessLock: the library looks incomplete or mismatched$/,
        );
        return true;
      },
    );
    assert.equal(counts.lock, 0);
  });

  test("suspend does not lock a process it could not checkpoint", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const { machine, counts } = counting(sim, {
      missingFunctions: ["cuCheckpointProcessCheckpoint"],
    });
    await assert.rejects(new CudaProcess(t.pid, { machine }).suspend(), CheckpointUnsupportedError);
    assert.equal(counts.lock, 0);
    assert.equal(t.state, "running");
  });
});

describe("GPU mappings are checked against the driver's GPUs before the call", () => {
  async function checkpointed(gpus: number | { name: string }[] = 3) {
    const sim = new SimulatedMachine({ gpus });
    const t = sim.spawn({ memoryMiB: 256 });
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    const [a, b, c] = sim.gpus.map((g) => g.uuid);
    const restores = () => sim.driver.calls.filter((x) => x.op === "restore").length;
    return { sim, t, proc, a, b, c, restores };
  }
  const UNKNOWN = "GPU-0badc0de-0000-4000-8000-00000000dead";

  test("a UUID no GPU has, as a key: named, and the driver is not called", async () => {
    const { t, proc, a, b, c, restores } = await checkpointed();
    await rejectsWith(
      proc.resume({ gpuMapping: { [UNKNOWN]: a, [b]: b, [c]: c } }),
      "MAPPING",
      /^resume of process \d+ refused: the GPU mapping cannot work: GPU-0badc0de-0000-4000-8000-00000000dead is not a GPU of this machine; it leaves out GPU-\S+ \(GPU 0, NVIDIA H200\)/,
      /this machine's GPUs are GPU-\S+ \(GPU 0, NVIDIA H200\), GPU-\S+ \(GPU 1, NVIDIA H200\), GPU-\S+ \(GPU 2, NVIDIA H200\)\. The process is unchanged$/,
    );
    assert.equal(restores(), 0);
    assert.equal(t.state, "checkpointed");
  });

  test("a UUID no GPU has, as a value: named with the GPU it was given for", async () => {
    const { proc, a, b, c, restores } = await checkpointed();
    await rejectsWith(
      proc.resume({ gpuMapping: { [a]: UNKNOWN, [b]: b, [c]: c } }),
      "MAPPING",
      new RegExp(
        `the GPU mapping cannot work: ${UNKNOWN} \\(the GPU given for ${a}\\) is not a GPU of this machine; this machine's`,
      ),
    );
    assert.equal(restores(), 0);
  });

  test("a GPU left out is named", async () => {
    const { proc, a, b, restores } = await checkpointed();
    await rejectsWith(
      proc.resume({ gpuMapping: { [a]: b, [b]: a } }),
      "MAPPING",
      /it leaves out GPU-\S+ \(GPU 2, NVIDIA H200\) \(a mapping names every GPU\)/,
    );
    assert.equal(restores(), 0);
  });

  test("two GPUs sent onto one are named", async () => {
    const { proc, a, b, c, restores } = await checkpointed();
    await rejectsWith(
      proc.resume({ gpuMapping: { [a]: c, [b]: c, [c]: a } }),
      "MAPPING",
      new RegExp(`it sends ${a} and ${b} onto the same GPU, ${c} \\(GPU 2, NVIDIA H200\\)`),
    );
    assert.equal(restores(), 0);
  });

  test("a move onto another chip reaches the driver, and its refusal names both chips", async () => {
    const { t, proc, a, b, restores } = await checkpointed([
      { name: "NVIDIA H200" },
      { name: "NVIDIA H100 80GB HBM3" },
    ]);
    await rejectsWith(
      proc.resume({ gpuMapping: { [a]: b, [b]: a } }),
      CUDA_ERROR_INVALID_VALUE,
      new RegExp(
        `^restore of process \\d+ failed: CUDA_ERROR_INVALID_VALUE \\(1\\): invalid argument\\. The driver refused the GPU mapping: it moves ${a} \\(GPU 0, NVIDIA H200\\) onto ${b} \\(GPU 1, NVIDIA H100 80GB HBM3\\) and ${b} \\(GPU 1, NVIDIA H100 80GB HBM3\\) onto ${a} \\(GPU 0, NVIDIA H200\\), another chip\\. The process is checkpointed$`,
      ),
    );
    assert.equal(restores(), 1);
    assert.equal(t.state, "checkpointed");
  });

  test("where the driver cannot list its GPUs, a refusal says what usually causes it", async () => {
    const { sim, t, a, b } = await checkpointed(2);
    const { machine } = counting(sim);
    await rejectsWith(
      new CudaProcess(t.pid, { machine }).resume({ gpuMapping: { [a]: b } }),
      CUDA_ERROR_INVALID_VALUE,
      /invalid argument\. The driver refused the GPU mapping \(docs\/ERRORS\.md#a-refused-gpu-mapping\)\. The process is checkpointed$/,
    );
    assert.equal(t.state, "checkpointed");
  });

  test("where the list may leave GPUs out (CUDA_VISIBLE_DEVICES), the driver decides", async () => {
    const { sim, t, a, b, c } = await checkpointed();
    // This process sees only GPUs 0 and 1; the machine has three, and the mapping names all.
    const partial = forward(sim, {
      listGpus: async () => (await sim.driver.listGpus()).slice(0, 2),
      listsEveryGpu: false,
    });
    await new CudaProcess(t.pid, { machine: partial }).resume({
      gpuMapping: { [a]: b, [b]: c, [c]: a },
    });
    assert.deepEqual(t.gpuUuids, [b]);
  });

  test("a GPU list that cannot be read proves nothing: the driver decides", async () => {
    const { sim, t, a, b, restores } = await checkpointed(2);
    const broken = forward(sim, {
      listGpus: () => Promise.reject(new Error("cuDeviceGetCount failed")),
      listsEveryGpu: true,
    });
    await rejectsWith(
      new CudaProcess(t.pid, { machine: broken }).resume({ gpuMapping: { [a]: b } }),
      CUDA_ERROR_INVALID_VALUE,
      /The driver refused the GPU mapping \(docs/,
    );
    assert.equal(restores(), 1);
  });

  test("a good mapping passes the check and moves the process", async () => {
    const { t, proc, a, b, c } = await checkpointed();
    await proc.resume({ gpuMapping: { [a]: b, [b]: c, [c]: a } });
    assert.deepEqual(t.gpuUuids, [b]);
  });
});

describe("messages", () => {
  test("a code nobody knows is said plainly", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const { machine } = counting(sim, {
      lock: () => Promise.resolve(12345),
      errorName: () => undefined,
      errorString: () => undefined,
    });
    await assert.rejects(new CudaProcess(t.pid, { machine }).lock(), (err: unknown) => {
      assert.ok(err instanceof CudaError);
      assert.equal(
        err.message,
        `lock of process ${t.pid} failed with CUresult 12345, a code neither the driver nor this version of @ckpt/cuda knows`,
      );
      assert.equal(err.code, 12345);
      return true;
    });
  });

  test("a code the driver names but does not describe is said by its name", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const { machine } = counting(sim, {
      lock: () => Promise.resolve(12345),
      errorName: () => "CUDA_ERROR_NEWER",
      errorString: () => undefined,
    });
    await assert.rejects(
      new CudaProcess(t.pid, { machine }).lock(),
      new RegExp(
        `^CudaError: lock of process ${t.pid} failed: CUDA_ERROR_NEWER \\(12345\\): ` +
          `the driver gives no description$`,
      ),
    );
  });

  test("a sentence added twice: the detail has both, the state is the later one's", () => {
    const first = new RefusedError({
      code: "STATE",
      operation: "resume",
      pid: 7,
      reason: "it is locked",
      state: "locked",
      detail: "nothing was done to it",
    });
    const more = first.withDetail("it was brought back to running", "running");
    assert.equal(more.detail, "nothing was done to it. It was brought back to running");
    assert.equal(more.state, "running", "where the process is after what followed");
    assert.equal(first.withDetail("said again").state, "locked", "kept where none is given");
  });

  test("resume of a process that never used CUDA says so, not that it is gone", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn({ cuda: false });
    await rejectsWith(
      new CudaProcess(t.pid, { machine: sim }).resume(),
      CUDA_ERROR_NOT_INITIALIZED,
      /^getState of process \d+ failed: CUDA_ERROR_NOT_INITIALIZED \(3\): initialization error\. The process has never initialised CUDA$/,
    );
  });

  test("restore of a running process says the state once", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    await assert.rejects(new CudaProcess(t.pid, { machine: sim }).restore(), (err: unknown) => {
      assert.ok(err instanceof CudaError);
      assert.equal(err.code, CUDA_ERROR_ILLEGAL_STATE);
      assert.equal(err.message.match(/running/gi)?.length, 1, err.message);
      assert.match(
        err.message,
        /^restore of process \d+ failed: CUDA_ERROR_ILLEGAL_STATE \(401\): the operation cannot be performed in the present state \(the process is running\)$/,
      );
      return true;
    });
  });

  test("a message is one or two sentences: a room refusal from the simulator", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn({ memoryMiB: 4096 }).pid, { machine: sim });
    await proc.suspend();
    sim.fillGpu(0);
    await assert.rejects(proc.resume(), (err: unknown) => {
      assert.ok(err instanceof RefusedError);
      const sentences = err.message.split(/\. (?=[A-Z])/);
      assert.ok(sentences.length <= 2, err.message);
      assert.ok(err.message.length < 220, `${err.message.length} characters: ${err.message}`);
      return true;
    });
  });
});

describe("timerOn: a timer on a machine's clock, else a real one", () => {
  test("a clock with a timer is given the call", () => {
    const asked: number[] = [];
    let cancelled = 0;
    const clock = {
      now: () => 0,
      sleep: () => Promise.resolve(),
      timer: (ms: number, _fn: () => void) => (asked.push(ms), () => void cancelled++),
    };
    timerOn(clock, 250, () => {})();
    assert.deepEqual([asked, cancelled], [[250], 1]);
  });

  test("without one, a real timer: not before its time, and never once cancelled", async () => {
    const t0 = performance.now();
    const fired = await new Promise<number>((resolve) =>
      timerOn(undefined, 40, () => resolve(performance.now()))
    );
    assert.ok(fired - t0 >= 35, `fired after ${fired - t0} ms of 40`);
    let late = false;
    timerOn({ now: () => 0, sleep: () => Promise.resolve() }, 5, () => (late = true))();
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(late, false, "the cancelled timer did not fire");
  });
});
