// listCudaProcesses on the simulated driver: which processes are listed (CUDA ones, not those
// that never initialised CUDA or ended meanwhile), uninspectable ones reported, thread ids folded,
// GPU memory per GPU, the machine's host, and the checks of the options.
// Runs unchanged under `deno test -A` and `bun test`.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_OPERATING_SYSTEM } from "../core/driver.ts";
import { CheckpointUnsupportedError } from "../core/errors.ts";
import { CudaProcess, listCudaProcesses } from "../mod.ts";
import type { HostProcesses } from "../core/host.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { CONTEXT_MIB } from "../mock/timing.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";

describe("listCudaProcesses on the simulator", () => {
  test("lists CUDA processes with state, restore thread, command and GPU memory per GPU", async () => {
    await using sim = new SimulatedMachine({ gpus: 2 });
    const a = sim.spawn({ memoryMiB: 1024, command: "python train.py --epochs 3" });
    const b = sim.spawn({ memoryMiB: 2048, gpu: [0, 1], command: "./infer" });
    sim.spawn({ cuda: false, command: "bash" });
    const listing = await listCudaProcesses({ machine: sim });
    assert.deepEqual(listing.processes.map((p) => p.pid), [a.pid, b.pid]);
    const [pa, pb] = listing.processes;
    assert.equal(pa.state, "running");
    assert.equal(pa.restoreThreadId, a.tid);
    assert.notEqual(pa.restoreThreadId, a.pid, "the restore thread is the driver's, not main");
    assert.equal(pa.command, "python train.py --epochs 3");
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    assert.deepEqual(pa.gpuMemory, { [g0]: 1024 + CONTEXT_MIB });
    assert.deepEqual(pb.gpuMemory, { [g0]: 1024 + CONTEXT_MIB, [g1]: 1024 + CONTEXT_MIB });
    assert.equal(listing.gpuMemoryUnknown, undefined);
    assert.equal(listing.scanned, 3);
    assert.equal(listing.asked, 2, "the process without libcuda is not asked about");
    assert.deepEqual(listing.uninspectable, []);
  });

  test("a checkpointed process is listed as such and holds no GPU memory", async () => {
    await using sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 512 });
    await using proc = new CudaProcess(target.pid, { machine: sim });
    await proc.suspend();
    const { processes } = await listCudaProcesses({ machine: sim });
    assert.equal(processes.length, 1);
    assert.equal(processes[0].state, "checkpointed");
    assert.deepEqual(processes[0].gpuMemory, {});
    await proc.resume();
    const again = await listCudaProcesses({ machine: sim });
    assert.equal(again.processes[0].state, "running");
    assert.deepEqual(again.processes[0].gpuMemory, { [sim.gpus[0].uuid]: 512 + CONTEXT_MIB });
  });

  test("libcuda loaded without cuInit: asked, and left out on NOT_INITIALIZED", async () => {
    await using sim = new SimulatedMachine();
    const loaded = sim.spawn({ cuda: false, libcuda: true, command: "python -c 'import torch'" });
    const listing = await listCudaProcesses({ machine: sim });
    assert.equal(listing.asked, 1);
    assert.deepEqual(listing.processes, []);
    assert.ok(sim.driver.calls.some((c) => c.pid === loaded.pid && c.op === "getState"));
  });

  test('candidates: "all" asks the driver about every inspectable process', async () => {
    await using sim = new SimulatedMachine();
    const cuda = sim.spawn();
    sim.spawn({ cuda: false });
    sim.spawn({ cuda: false });
    sim.spawn({ inspectable: false });
    const listing = await listCudaProcesses({ machine: sim, candidates: "all" });
    assert.equal(listing.asked, 3, "every process that could be looked at, not the hidden one");
    assert.deepEqual(listing.processes.map((p) => p.pid), [cuda.pid]);
  });

  test("processes the caller may not inspect are reported, with the reason, not asked", async () => {
    await using sim = new SimulatedMachine();
    const hidden = sim.spawn({ inspectable: false, command: "/usr/bin/other-users-job" });
    const mine = sim.spawn();
    const listing = await listCudaProcesses({ machine: sim });
    assert.deepEqual(listing.processes.map((p) => p.pid), [mine.pid]);
    assert.equal(listing.uninspectable.length, 1);
    const [u] = listing.uninspectable;
    assert.equal(u.pid, hidden.pid);
    assert.equal(u.command, "/usr/bin/other-users-job");
    assert.match(u.reason, /permission denied reading \/proc\/\d+\/maps/);
    assert.ok(!sim.driver.calls.some((c) => c.pid === hidden.pid), "the driver was not asked");
  });

  test("a process the host cannot tell maps libcuda or not is reported, not left out", async () => {
    // A host seam may answer nothing for cudaLibrary: such a process may be a CUDA one.
    await using sim = new SimulatedMachine();
    const mine = sim.spawn();
    const unsure = { pid: 90_001, command: "python half-read.py" }; // no cudaLibrary, no reason
    const host = hostWith(sim.host, { scan: async () => [...await sim.host.scan(), unsure] });
    const listing = await listCudaProcesses({ machine: machineWith(sim, { host }) });
    assert.deepEqual(listing.processes.map((p) => p.pid), [mine.pid]);
    assert.deepEqual(listing.uninspectable, [
      { ...unsure, reason: "the host could not tell whether it maps libcuda" },
    ]);
  });

  test("a stopped CUDA process is reported, its state not asked (the driver would wait); a stopped one without CUDA is left out", async () => {
    await using sim = new SimulatedMachine();
    const [running, stopped] = [sim.spawn(), sim.spawn({ command: "python train.py" })];
    const other = sim.spawn({ cuda: false });
    await sim.engine.stop([stopped.pid, other.pid]);
    for (const candidates of ["libcuda", "all"] as const) {
      const listing = await listCudaProcesses({ machine: sim, candidates });
      assert.deepEqual(listing.processes.map((p) => p.pid), [running.pid], candidates);
      assert.deepEqual(listing.uninspectable.map((u) => [u.pid, u.command]), [
        [stopped.pid, "python train.py"],
      ]);
      assert.match(listing.uninspectable[0].reason, /refused: it is stopped \(SIGSTOP.*kill -CONT/);
    }
    const asked = sim.driver.calls.filter((c) => c.op === "getState").map((c) => c.pid);
    assert.ok(!asked.includes(stopped.pid) && !asked.includes(other.pid), `${asked}`);
  });

  test("a process that exits between the scan and the driver call is left out", async () => {
    await using sim = new SimulatedMachine();
    const stays = sim.spawn();
    const leaves = sim.spawn({ memoryMiB: 64 });
    const own = sim.host;
    const host: HostProcesses = {
      kind: "simulated, with an exit",
      scan: async () => {
        const found = await own.scan();
        leaves.exit();
        return found;
      },
      gpuMemory: () => own.gpuMemory!(),
    };
    const listing = await listCudaProcesses({ machine: machineWith(sim, { host }) });
    assert.deepEqual(listing.processes.map((p) => p.pid), [stays.pid]);
    assert.equal(listing.asked, 2);
    assert.ok(
      sim.driver.calls.some((c) => c.pid === leaves.pid && c.code === CUDA_ERROR_OPERATING_SYSTEM),
      "the driver said the process was gone",
    );
    assert.deepEqual(listing.uninspectable, []);
  });

  test("thread ids fold into their process: one record per process, by its pid", async () => {
    await using sim = new SimulatedMachine();
    const target = sim.spawn({ extraThreads: 5 });
    assert.equal(target.threads.length, 7);
    const listing = await listCudaProcesses({ machine: sim });
    assert.equal(listing.processes.length, 1);
    assert.equal(listing.processes[0].pid, target.pid);
    assert.ok(target.threads.includes(listing.processes[0].restoreThreadId!));
  });

  test("by pid, in whatever order the host found them (/proc's is not sorted)", async () => {
    await using sim = new SimulatedMachine();
    const [a, h1, b, h2] = [true, false, true, false].map((inspectable) =>
      sim.spawn({ inspectable })
    );
    const own = sim.host;
    const reversed: HostProcesses = {
      kind: "reversed",
      scan: async () => [...await own.scan()].reverse(),
    };
    const listing = await listCudaProcesses({ machine: machineWith(sim, { host: reversed }) });
    assert.deepEqual(listing.processes.map((p) => p.pid), [a.pid, b.pid]);
    assert.deepEqual(listing.uninspectable.map((p) => p.pid), [h1.pid, h2.pid]);
  });

  test('a host without GPU memory gives "unknown", and says why', async () => {
    await using sim = new SimulatedMachine();
    sim.spawn();
    const own = sim.host;
    const noMemory: HostProcesses = { kind: "bare", scan: () => own.scan() };
    const listing = await listCudaProcesses({ machine: machineWith(sim, { host: noMemory }) });
    assert.equal(listing.processes[0].gpuMemory, "unknown");
    assert.match(listing.gpuMemoryUnknown!, /bare host cannot tell GPU memory/);
    const failing: HostProcesses = {
      kind: "failing",
      scan: () => own.scan(),
      gpuMemory: () => Promise.reject(new Error("NVML (libnvidia-ml.so.1) could not be loaded")),
    };
    const failed = await listCudaProcesses({ machine: machineWith(sim, { host: failing }) });
    assert.equal(failed.processes[0].gpuMemory, "unknown");
    assert.match(failed.gpuMemoryUnknown!, /could not be loaded/);
    const skipped = await listCudaProcesses({ machine: sim, gpuMemory: false });
    assert.match(skipped.gpuMemoryUnknown!, /gpuMemory: false/);
  });

  test("this process locked by itself: GPU memory is not asked (NVML would wait), and it says why", async () => {
    await using sim = new SimulatedMachine();
    const self = sim.spawn({ memoryMiB: 256 });
    sim.selfPid = self.pid; // the program listing is that process
    const own = new CudaProcess(self.pid, { machine: sim });
    await own.lock();
    const held = await listCudaProcesses({ machine: sim });
    assert.deepEqual([held.processes[0].state, held.processes[0].gpuMemory], ["locked", "unknown"]);
    assert.equal(
      held.gpuMemoryUnknown,
      "this process is locked or checkpointed itself, and NVML would wait for it",
    );
    await own.unlock();
    assert.equal((await listCudaProcesses({ machine: sim })).gpuMemoryUnknown, undefined);
  });

  test("an answer other than success, NOT_INITIALIZED or OPERATING_SYSTEM is reported", async () => {
    await using sim = new SimulatedMachine();
    const target = sim.spawn({ command: "odd" });
    const odd = forward(sim, {
      getState: () => Promise.resolve({ code: CUDA_ERROR_ILLEGAL_STATE, value: 0 }),
    });
    const listing = await listCudaProcesses({ machine: odd });
    assert.deepEqual(listing.processes, []);
    assert.deepEqual(listing.uninspectable, [{
      pid: target.pid,
      reason: `getState of process ${target.pid} failed: CUDA_ERROR_ILLEGAL_STATE (401): the ` +
        "operation cannot be performed in the present state",
      command: "odd",
    }]);
  });

  test("a driver without the checkpoint API is refused before any call", async () => {
    await using old = new SimulatedMachine({ driverVersion: 12040 });
    old.spawn();
    await assert.rejects(listCudaProcesses({ machine: old }), (error: unknown) => {
      assert.ok(error instanceof CheckpointUnsupportedError);
      assert.match(error.message, /cuCheckpointProcessGetState/);
      return true;
    });
    assert.equal(old.driver.calls.length, 0);
  });

  test("a machine without a host cannot be listed, and says so", async () => {
    await using sim = new SimulatedMachine();
    sim.spawn();
    await assert.rejects(
      listCudaProcesses({ machine: { driver: sim.driver } }),
      /^Error: No host to list processes of: this simulated machine has none$/,
    );
  });

  test("options are checked, naming the bad value", async () => {
    await using sim = new SimulatedMachine();
    await assert.rejects(
      listCudaProcesses({ machine: sim, candidates: "cuda" as "all" }),
      /candidates must be one of "libcuda", "all", got "cuda"/,
    );
    await assert.rejects(
      listCudaProcesses({ machine: sim, pids: [1] } as never),
      /no option "pids"; it takes machine, candidates, gpuMemory/,
    );
    await assert.rejects(
      listCudaProcesses({ machine: sim, gpuMemory: "yes" as unknown as boolean }),
      /gpuMemory must be true or false, got "yes"/,
    );
    await assert.rejects(
      listCudaProcesses({ machine: {} as never }),
      /listCudaProcesses's machine must be a Machine .* got an object/,
    );
    const bad: HostProcesses = { kind: "bad", scan: () => Promise.resolve([{ pid: -4 }]) };
    await assert.rejects(
      listCudaProcesses({ machine: machineWith(sim, { host: bad }) }),
      /a pid from the bad host's scan must be an integer .* got -4/,
    );
  });

  test("spawn's new options are checked", () => {
    const sim = new SimulatedMachine();
    assert.throws(() => sim.spawn({ command: "" }), /spawn: command must be a non-empty string/);
    assert.throws(
      () => sim.spawn({ inspectable: 0 as unknown as boolean }),
      /spawn: inspectable/,
    );
    assert.throws(() => sim.spawn({ libcuda: false }), /libcuda: false needs cuda: false/);
    sim.close();
  });
});
