// The simulated machine saved and loaded: snapshots of the simulated machine (mock/state_file.ts), and
// the private state file of `cuda-checkpoint --simulate` with its checks and its lock
// (cli/simulate.ts). Temp dirs only: the real default path is never touched.
import { afterEach, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmod,
  chown,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from "node:fs/promises";
import { execFileSync } from "node:child_process";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { CudaProcess, GpuRoomError } from "../mod.ts";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import {
  loadSimulator,
  SIMULATOR_SNAPSHOT_FORMAT,
  SIMULATOR_SNAPSHOT_VERSION,
  type SimulatorSnapshot,
  SimulatorSnapshotError,
  snapshotSimulator,
} from "../mock/state_file.ts";
import {
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_ERROR_UNKNOWN,
  CUDA_SUCCESS,
} from "../core/driver.ts";
import {
  openSimulatedMachine,
  SIMULATED_STATE_FILE,
  SimulatedStateError,
  simulatedStatePath,
} from "../cli/simulate.ts";

const PAGE = 64 * 1024;

/** A snapshot through JSON text, as a state file holds it, loaded again. */
function reload(sim: SimulatedMachine): SimulatedMachine {
  return loadSimulator(JSON.parse(JSON.stringify(snapshotSimulator(sim))));
}

function live(sim: SimulatedMachine, pid: number): SimulatedProcess {
  const p = sim.process(pid);
  assert.ok(p, `process ${pid} exists`);
  return p;
}

/** A machine with a process in every state, a process without CUDA and one only with libcuda. */
async function everyState() {
  const sim = new SimulatedMachine({ gpus: 2 });
  const running = sim.spawn({ memoryMiB: 64, command: "train --rank 0" });
  const locked = sim.spawn({ memoryMiB: 32, gpu: 1, extraThreads: 3 });
  const checkpointed = sim.spawn({ memoryMiB: 128, gpu: [0, 1] });
  const failed = sim.spawn({ memoryMiB: 16 });
  const plain = sim.spawn({ cuda: false, inspectable: false });
  const loader = sim.spawn({ cuda: false, libcuda: true, extraThreads: 0 });
  await running.write(PAGE - 2, new Uint8Array([1, 2, 3, 4])); // across a page boundary
  await checkpointed.write(5 * PAGE, new TextEncoder().encode("checkpointed bytes"));
  assert.equal(await sim.driver.lock(locked.pid, null), CUDA_SUCCESS);
  assert.equal(await sim.driver.lock(checkpointed.pid, null), CUDA_SUCCESS);
  assert.equal(await sim.driver.checkpoint(checkpointed.pid), CUDA_SUCCESS);
  failed.failNext("lock", { code: CUDA_ERROR_UNKNOWN, state: "failed" });
  assert.equal(await sim.driver.lock(failed.pid, null), CUDA_ERROR_UNKNOWN);
  return { sim, running, locked, checkpointed, failed, plain, loader };
}

/** `promise`, or a rejection once `ms` have passed: a lock that never gives up fails its test. */
function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

describe("snapshots of the simulated machine", () => {
  test("every state, GPUs, threads, flags and memory come back as they were", async () => {
    const { sim, running, locked, checkpointed, failed, plain, loader } = await everyState();
    const saved = snapshotSimulator(sim);
    assert.equal(saved.format, SIMULATOR_SNAPSHOT_FORMAT);
    assert.equal(saved.version, SIMULATOR_SNAPSHOT_VERSION);
    const again = reload(sim);
    assert.deepEqual(snapshotSimulator(again), saved);
    assert.deepEqual(
      again.gpus.map((g) => [g.uuid, g.name, g.usedMiB]),
      sim.gpus.map((g) => [g.uuid, g.name, g.usedMiB]),
    );
    for (const p of [running, locked, checkpointed, failed, plain, loader]) {
      const q = live(again, p.pid);
      assert.equal(q.state, p.state);
      assert.deepEqual(q.threads, p.threads);
      assert.equal(q.tid, p.tid);
      assert.deepEqual(q.gpuUuids, p.gpuUuids);
      assert.deepEqual(q.gpuMemoryMiB, p.gpuMemoryMiB);
      assert.equal(q.memoryLocation, p.memoryLocation);
      assert.equal(q.command, p.command);
      assert.equal(q.inspectable, p.inspectable);
      assert.equal(q.libcudaLoaded, p.libcudaLoaded);
      assert.equal(q.usesCuda, p.usesCuda);
      if (p.usesCuda) assert.equal(await q.memoryChunkedSha256(), await p.memoryChunkedSha256());
    }
    assert.deepEqual(
      await again.driver.getState(checkpointed.pid),
      { code: CUDA_SUCCESS, value: 2 },
    );
    assert.deepEqual(
      await live(again, running.pid).read(PAGE - 2, 4),
      new Uint8Array([1, 2, 3, 4]),
    );
  });

  test("the loaded machine is on the virtual clock and reports the simulated durations", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const again = loadSimulator(snapshotSimulator(sim));
    assert.equal(again.time.kind, "virtual");
    const began = performance.now();
    await new CudaProcess(p.pid, { machine: again }).suspend();
    assert.ok(performance.now() - began < 1000, "no real time for 0.75 s of simulated work");
    const call = again.driver.calls.find((c) => c.op === "checkpoint")!;
    assert.equal(Math.round(call.at - call.started), 752); // H200, 1 GiB: docs/DRIVER.md#timings
    assert.equal(
      loadSimulator(snapshotSimulator(sim), { clock: "real", speed: 100 }).time.kind,
      "real",
    );
  });

  test("a checkpoint before the save and a restore after it keep the memory (digest and bytes)", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const p = sim.spawn({ memoryMiB: 8, gpu: [0, 1] });
    const bytes = Uint8Array.from({ length: 3 * PAGE + 17 }, (_, i) => (i * 7 + 3) & 255);
    await p.write(PAGE / 2, bytes);
    const digest = await p.memoryChunkedSha256();
    const proc = new CudaProcess(p.pid, { machine: sim });
    await proc.suspend();
    const again = reload(sim);
    await new CudaProcess(p.pid, { machine: again }).resume();
    const q = live(again, p.pid);
    assert.equal(q.state, "running");
    assert.equal(await q.memoryChunkedSha256(), digest);
    assert.deepEqual(await q.read(PAGE / 2, bytes.length), bytes);
  });

  test("a multi-GPU process moved by a restore with a mapping stays moved, and moves back after a reload", async () => {
    const sim = new SimulatedMachine({ gpus: 3 });
    const [g0, g1, g2] = sim.gpus.map((g) => g.uuid);
    const p = sim.spawn({ memoryMiB: 64, gpu: [0, 1] });
    await p.write(0, new Uint8Array([9, 9, 9]));
    const proc = new CudaProcess(p.pid, { machine: sim });
    await proc.suspend();
    await proc.resume({ gpuMapping: { [g0]: g2, [g1]: g0, [g2]: g1 } });
    assert.deepEqual(p.gpuUuids, [g2, g0]);
    const again = reload(sim);
    const q = live(again, p.pid);
    assert.deepEqual(q.gpuUuids, [g2, g0]);
    assert.deepEqual(again.gpus.map((g) => g.usedMiB), sim.gpus.map((g) => g.usedMiB));
    assert.equal(again.gpus[1].usedMiB, 0);
    const moved = new CudaProcess(p.pid, { machine: again });
    await moved.suspend();
    const saved = reload(again);
    await new CudaProcess(p.pid, { machine: saved }).resume({
      gpuMapping: { [g2]: g0, [g0]: g1, [g1]: g2 },
    });
    const r = live(saved, p.pid);
    assert.deepEqual(r.gpuUuids, [g0, g1]);
    assert.equal(await r.memoryChunkedSha256(), await p.memoryChunkedSha256());
  });

  test("pids keep going up after a reload, and never come back; restore thread ids are stable", async () => {
    const sim = new SimulatedMachine({ firstPid: 7000 });
    const a = sim.spawn();
    const b = sim.spawn({ extraThreads: 5 });
    const tid = await sim.driver.getRestoreThreadId(b.pid);
    b.exit();
    const again = reload(sim);
    assert.equal(again.nextPid, sim.nextPid);
    assert.equal(again.process(b.pid), undefined);
    assert.deepEqual(
      await again.driver.getRestoreThreadId(a.pid),
      await sim.driver.getRestoreThreadId(a.pid),
    );
    assert.equal(tid.value, b.threads[b.threads.length - 1]);
    const c = again.spawn();
    assert.ok(c.pid > b.threads[b.threads.length - 1], `${c.pid} after ${b.threads}`);
    assert.equal(c.pid, sim.spawn().pid, "the same pid as the original would have given");
    assert.equal(reload(again).nextPid, again.nextPid);
  });

  test("an injected fault waits in the snapshot for its call", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    p.failNext("checkpoint", { code: CUDA_ERROR_UNKNOWN });
    const again = reload(sim);
    assert.equal(await again.driver.lock(p.pid, null), CUDA_SUCCESS);
    assert.equal(await again.driver.checkpoint(p.pid), CUDA_ERROR_UNKNOWN);
    assert.equal(await again.driver.checkpoint(p.pid), CUDA_SUCCESS);
  });

  test("a process whose restore ran out of memory stays refused after a reload", async () => {
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 4000, contextMiB: 100 }] });
    const p = sim.spawn({ memoryMiB: 1000 });
    assert.equal(await sim.driver.lock(p.pid, null), CUDA_SUCCESS);
    assert.equal(await sim.driver.checkpoint(p.pid), CUDA_SUCCESS);
    const filler = sim.fillGpu(0);
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OUT_OF_MEMORY);
    filler.exit();
    const saved = snapshotSimulator(sim);
    assert.equal(saved.processes.find((q) => q.pid === p.pid)?.restoreRefused, true);
    const again = loadSimulator(JSON.parse(JSON.stringify(saved)));
    assert.equal(again.process(p.pid)?.restoreRefused, true);
    assert.equal(await again.driver.restore(p.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(again.process(p.pid)?.state, "checkpointed");
  });

  test("the records of held GPU memory come back, and the room is checked after a reload", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 });
    const q = sim.spawn({ memoryMiB: 64 });
    await new CudaProcess(p.pid, { machine: sim }).suspend();
    const saved = JSON.parse(JSON.stringify(snapshotSimulator(sim)));
    assert.deepEqual(saved.heldRecords.map((r: { pid: number }) => r.pid), [p.pid]);
    const again = loadSimulator(saved);
    again.fillGpu(0);
    await assert.rejects(new CudaProcess(p.pid, { machine: again }).resume(), GpuRoomError);
    assert.equal(again.process(p.pid)?.restoreRefused, false, "the driver was not asked");
    // A record of no CUDA process of the snapshot, or of no GPU, is refused; one of a GPU of
    // another machine (where a process restored here was checkpointed) is kept.
    const elsewhere = { "GPU-99999999-9999-4999-8999-999999999999": 1 };
    const kept = loadSimulator({
      ...saved,
      heldRecords: [{ ...saved.heldRecords[0], heldMiB: elsewhere }],
    });
    assert.deepEqual(snapshotSimulator(kept).heldRecords?.map((r) => r.heldMiB), [elsewhere]);
    for (
      const [bad, field] of [
        [{ ...saved.heldRecords[0], pid: q.pid + 1 }, "heldRecords[0].pid"],
        [{ ...saved.heldRecords[0], heldMiB: { "GPU-0": 1 } }, "heldRecords[0].heldMiB key"],
      ] as const
    ) {
      assert.throws(
        () => loadSimulator({ ...saved, heldRecords: [bad] }),
        (err: unknown) => err instanceof SimulatorSnapshotError && err.field === field,
        field,
      );
    }
  });

  test("the rates its records keep come back; a rate that is no number above 0 is refused", () => {
    const sim = new SimulatedMachine();
    sim.heldRecords.kept = { checkpoint: 1.5e6, images: 2.25e6 };
    const saved = JSON.parse(JSON.stringify(snapshotSimulator(sim)));
    assert.deepEqual(loadSimulator(saved).heldRecords.kept, { checkpoint: 1.5e6, images: 2.25e6 });
    const none = new SimulatedMachine();
    assert.equal(snapshotSimulator(none).rates, undefined, "none kept: no field");
    for (const [bad, field] of [[{ restore: 0 }, "rates.restore"], [[], "rates"]] as const) {
      assert.throws(
        () => loadSimulator({ ...saved, rates: bad }),
        (err: unknown) => err instanceof SimulatorSnapshotError && err.field === field,
        field,
      );
    }
  });

  test("parents and start numbers are kept, and checked", () => {
    const sim = new SimulatedMachine();
    const a = sim.spawn({ cuda: false });
    const b = sim.spawn({ parent: a.pid });
    assert.deepEqual([a.start, b.start, sim.nextStart], [1, 2, 3]);
    const c = sim.spawn({ parent: b.pid, cuda: false });
    const saved = JSON.parse(JSON.stringify(snapshotSimulator(sim)));
    const again = loadSimulator(saved);
    assert.deepEqual(
      again.processes.map((p) => [p.pid, p.parent, p.start]),
      [[a.pid, 0, 1], [b.pid, a.pid, 2], [c.pid, b.pid, 3]],
    );
    assert.equal(again.nextStart, 4);
    // An exit leaves a gap in the start numbers: they are kept as they were.
    const plain = new SimulatedMachine();
    const gone = plain.spawn();
    const kept = plain.spawn();
    gone.exit();
    const after = loadSimulator(snapshotSimulator(plain));
    assert.equal(after.process(kept.pid)!.start, kept.start);
    assert.equal(after.spawn().start, 3);
    // The newest one's exit too: its start number is not given again (a restore brings a process
    // back with its pid, and a pid with its start names one process).
    const newest = after.spawn();
    newest.exit();
    assert.equal(loadSimulator(snapshotSimulator(after)).spawn().start, newest.start + 1);
    // Each field is checked.
    const cases: [(s: typeof saved) => void, string, RegExp][] = [
      [
        (s) => (s.processes[1].parent = c.pid),
        "processes[1].parent",
        /is no process listed before it/,
      ],
      [
        (s) => (s.processes[0].parent = a.pid),
        "processes[0].parent",
        /is no process listed before it/,
      ],
      [(s) => (s.processes[2].start = 1), "processes[2].start", /another process's start number/],
      [
        (s) => (s.processes[2].start = 4),
        "processes[2].start",
        /must be an integer from 1 to 3, got 4/,
      ],
      [(s) => delete s.processes[0].start, "processes[0].start", /processes\[0\] lacks "start"/],
      [(s) => delete s.nextStart, "nextStart", /it lacks "nextStart"/],
      // What the machine would refuse too: said as the file's, not as a machine's option.
      [(s) => (s.gpus[0].name = " "), "gpus[0].name", /a non-empty string without NUL, got " "/],
      [(s) => (s.gpus[0].name = "H\0"), "gpus[0].name", /without NUL, got "H\\u0000"/],
      [
        (s) => (s.version = 3),
        "version",
        /version 3 is not known: this module reads version 4/,
      ],
    ];
    for (const [spoil, field, message] of cases) {
      const bad = structuredClone(saved);
      spoil(bad);
      assert.throws(() => loadSimulator(bad), (err: unknown) => {
        assert.ok(err instanceof SimulatorSnapshotError, String(err));
        assert.equal(err.field, field, err.message);
        assert.match(err.message, message);
        return true;
      });
    }
  });

  test("only a quiescent machine is saved: not during a call, a kernel, blocked work, or after close", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const lock = sim.driver.lock(p.pid, null);
    assert.throws(
      () => snapshotSimulator(sim),
      /cannot save the simulated machine now: 1 driver call/,
    );
    await lock;
    const write = p.write(0, new Uint8Array([1])); // blocks: the process is locked
    await Promise.resolve();
    assert.throws(() => snapshotSimulator(sim), /process \d+ has CUDA work waiting/);
    assert.equal(await sim.driver.unlock(p.pid), CUDA_SUCCESS);
    await write;
    const kernel = p.launch(50);
    assert.throws(() => snapshotSimulator(sim), /1 kernel\(s\) not finished/);
    await kernel;
    snapshotSimulator(sim);
    sim.close();
    assert.throws(() => snapshotSimulator(sim), /was closed/);
    assert.throws(() => snapshotSimulator({} as SimulatedMachine), TypeError);
  });

  test("an NCCL rank stays one after a reload: its sign, and a restore that never comes", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 100, nccl: { localRanks: 4, shmDisable: true } });
    assert.equal(await sim.driver.lock(p.pid, null), CUDA_SUCCESS);
    assert.equal(await sim.driver.checkpoint(p.pid), CUDA_SUCCESS);
    const saved = JSON.parse(JSON.stringify(snapshotSimulator(sim)));
    assert.deepEqual(saved.processes[0].nccl, {
      localRanks: 4,
      p2pDisable: false,
      shmDisable: true,
    });
    const again = loadSimulator(saved);
    assert.equal((await again.host.gpuImport!(p.pid))?.ncclRanks, 4);
    assert.equal(await again.driver.restore(p.pid, null), CUDA_ERROR_NOT_SUPPORTED);
    saved.processes[0].nccl.localRanks = 0;
    assert.throws(
      () => loadSimulator(saved),
      /processes\[0\]\.nccl\.localRanks must be an integer from 1/,
    );
  });

  describe("loading checks every field, and names it and the bad value", () => {
    // Each case spoils a copy of a good snapshot: untyped, as a file's JSON is.
    // deno-lint-ignore no-explicit-any
    const cases: [string, (s: any) => unknown, string, RegExp][] = [
      ["not an object", () => "hello", "", /the snapshot must be an object, got "hello"/],
      [
        "another format",
        (s) => (s.format = "my-thing", s),
        "format",
        /format must be "ckpt-cuda-simulated-machine", got "my-thing"/,
      ],
      [
        "a newer version",
        (s) => (s.version = 5, s),
        "version",
        /version 5 is not known: this module reads version 4/,
      ],
      ["a missing field", (s) => (delete s.gpus, s), "gpus", /it lacks "gpus"/],
      [
        "an unknown field",
        (s) => (s.colour = "red", s),
        "colour",
        /it has a field this version does not know, "colour"/,
      ],
      ["no GPU", (s) => (s.gpus = [], s), "gpus", /gpus must be an array of 1 to 1024 entries/],
      [
        "a bad UUID",
        (s) => (s.gpus[1].uuid = "GPU-xyz", s),
        "gpus[1].uuid",
        /gpus\[1\]\.uuid must be a GPU UUID .*, got "GPU-xyz"/,
      ],
      ["a UUID twice", (s) => (s.gpus[1].uuid = s.gpus[0].uuid, s), "gpus[1].uuid", /also GPU 0's/],
      [
        "no memory",
        (s) => (s.gpus[0].memoryMiB = 0, s),
        "gpus[0].memoryMiB",
        /gpus\[0\]\.memoryMiB must be a number above 0, got 0/,
      ],
      [
        "a bad state",
        (s) => (s.processes[0].state = "runing", s),
        "processes[0].state",
        /got "runing"/,
      ],
      [
        "a pid from the future",
        (s) => (s.processes[0].pid = s.nextPid, s),
        "processes[0].pid",
        /from 1 to \d+, got \d+/,
      ],
      [
        "a thread twice",
        (s) => (s.processes[1].threads[1] = s.processes[0].threads[1], s),
        "processes[1].threads[1]",
        /another thread's or process's id/,
      ],
      [
        "threads not led by the pid",
        (s) => (s.processes[0].threads.reverse(), s),
        "processes[0].threads[0]",
        /must be the pid/,
      ],
      [
        "another restore thread",
        (s) => (s.processes[0].restoreThreadId = 1, s),
        "processes[0].restoreThreadId",
        /must be \d+ \(its last thread\), got 1/,
      ],
      [
        "a GPU out of range",
        (s) => (s.processes[0].gpus = [7], s),
        "processes[0].gpus[0]",
        /got 7/,
      ],
      [
        "a string for memory",
        (s) => (s.processes[0].memoryMiB = "64", s),
        "processes[0].memoryMiB",
        /got "64"/,
      ],
      [
        "checkpointed memory on the GPU",
        (s) => (s.processes[2].memory.on = "gpu", s),
        "processes[2].memory.on",
        /must be "host" for a checkpointed process/,
      ],
      [
        "memory no GPU could hold",
        (s) => (s.processes[0].memoryMiB = 10_000_000, s),
        "processes[0].memoryMiB",
        /memoryMiB 10000000 cannot have fitted on its GPUs \(143771 MiB the smallest\)/,
      ],
      [
        "memory that does not fit beside the others",
        (s) => (s.processes[0].memoryMiB = 143_700, s),
        "processes[0]",
        /processes\[0\] \(pid 4000\) does not fit: GPU 0 has/,
      ],
      [
        "a page that is not base64",
        (s) => (s.processes[0].memory.pages[0][1] = "%%%", s),
        "processes[0].memory.pages[0][1]",
        /base64 string, got "%%%"/,
      ],
      [
        "a page past the end",
        (s) => (s.processes[0].memory.pages[0][0] = 5000, s),
        "processes[0].memory.pages[0][0]",
        /got 5000/,
      ],
      [
        "a page too long",
        (
          s,
        ) => (s.processes[0].memory.pages[0][1] = Buffer.alloc(PAGE + 3, 1).toString("base64"), s),
        "processes[0].memory.pages[0][1]",
        /holds 65539 bytes; page 0 has 65536/,
      ],
      [
        "memory without CUDA",
        (s) => (s.processes[4].memory = s.processes[0].memory, s),
        "processes[4].memory",
        /without CUDA has none/,
      ],
      [
        "faults of a process without CUDA",
        (s) => (s.processes[4].faults = {}, s),
        "processes[4].faults",
        /without CUDA has none/,
      ],
      [
        "memory and faults of a process without CUDA: memory named, the first",
        (s) => (s.processes[4].memory = s.processes[0].memory, s.processes[4].faults = {}, s),
        "processes[4].memory",
        /without CUDA has none/,
      ],
      [
        "a fault of no operation",
        (s) => (s.processes[0].faults = { fly: { code: 1 } }, s),
        "processes[0].faults.fly",
        /processes\[0\]\.faults has a field this version does not know, "fly"/,
      ],
    ];
    cases.push(
      [
        "restoreRefused not true",
        (s) => (s.processes[2].restoreRefused = 1, s),
        "processes[2].restoreRefused",
        /processes\[2\]\.restoreRefused must be true where present, got 1/,
      ],
      [
        "restoreRefused and stopped both not true: restoreRefused named, the first",
        (s) => (s.processes[2].restoreRefused = 1, s.processes[2].stopped = false, s),
        "processes[2].restoreRefused",
        /processes\[2\]\.restoreRefused must be true where present, got 1/,
      ],
      [
        "restoreRefused on a running process",
        (s) => (s.processes[0].restoreRefused = true, s),
        "processes[0].restoreRefused",
        /only a checkpointed process can be refused restores, not a running one/,
      ],
      [
        "running memory in host memory",
        (s) => (s.processes[0].memory.on = "host", s),
        "processes[0].memory.on",
        /must be "gpu" for a running process, got "host"/,
      ],
      [
        "a GPU listed twice",
        (s) => (s.processes[0].gpus = [0, 0], s),
        "processes[0].gpus[1]",
        /processes\[0\]\.gpus\[1\]: GPU 0 is listed twice/,
      ],
      [
        "an answer to a step",
        (s) => (s.processes[0].faults = { lock: { kind: "answer", nth: 1, value: 0 } }, s),
        "processes[0].faults.lock.kind",
        /processes\[0\]\.faults\.lock: only getState and getRestoreThreadId have an answer/,
      ],
      [
        "a record of a process without CUDA",
        (s) => (s.heldRecords = [{ pid: s.processes[4].pid, heldMiB: {}, at: 1 }], s),
        "heldRecords[0].pid",
        /heldRecords\[0\]\.pid \d+ is no CUDA process of the snapshot/,
      ],
      [
        "a page of three entries",
        (s) => (s.processes[0].memory.pages[0].push(0), s),
        "processes[0].memory.pages[0]",
        /processes\[0\]\.memory\.pages\[0\] must be an array of 2 to 2 entries/,
      ],
      [
        "a GPU without a name",
        (s) => (s.gpus[0].name = "", s),
        "gpus[0].name",
        /gpus\[0\]\.name must be a string of 1 to 4096 characters, got ""/,
      ],
    );
    test("the snapshot the cases spoil loads as it is", async () => {
      const base = snapshotSimulator((await everyState()).sim);
      assert.deepEqual(snapshotSimulator(loadSimulator(structuredClone(base))), base);
    });
    for (const [name, spoil, field, message] of cases) {
      test(name, async () => {
        const base: SimulatorSnapshot = snapshotSimulator((await everyState()).sim);
        const bad = spoil(structuredClone(base));
        assert.throws(() => loadSimulator(bad), (err: unknown) => {
          assert.ok(err instanceof SimulatorSnapshotError, `a SimulatorSnapshotError, got ${err}`);
          assert.equal(err.field, field || "");
          assert.match(err.message, message);
          return true;
        });
      });
    }
  });
});

// ---- the state file ----

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "ckpt-sim-state-"));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/**
 * Asserts that opening `file` fails with a SimulatedStateError that names it (or `named`, its
 * directory) and matches `re`.
 */
async function refused(file: string, re: RegExp, named = file): Promise<void> {
  await assert.rejects(openSimulatedMachine({ path: file }), (err: unknown) => {
    assert.ok(err instanceof SimulatedStateError, `a SimulatedStateError, got ${err}`);
    assert.equal(err.path, named);
    assert.ok(err.message.includes(named), err.message);
    assert.match(err.message, re);
    return true;
  });
}

/** A valid state file with one process in it. */
async function savedFile(dir: string): Promise<string> {
  const file = path.join(dir, "state.json");
  const machine = await openSimulatedMachine({ path: file });
  machine.spawn();
  await machine.save();
  await machine.close();
  return file;
}

describe("the state file of cuda-checkpoint --simulate", () => {
  test("its path: CKPT_SIM_STATE, else XDG_RUNTIME_DIR, else a temp dir of the user's", () => {
    assert.equal(
      simulatedStatePath({ CKPT_SIM_STATE: "/x/my.json", XDG_RUNTIME_DIR: "/run/u" }),
      "/x/my.json",
    );
    assert.equal(
      simulatedStatePath({ XDG_RUNTIME_DIR: "/run/user/1000" }),
      "/run/user/1000/ckpt-cuda/" + SIMULATED_STATE_FILE,
    );
    assert.equal(
      simulatedStatePath({ TMPDIR: "/scratch", XDG_RUNTIME_DIR: "" }),
      `/scratch/ckpt-cuda-${process.getuid!()}/${SIMULATED_STATE_FILE}`,
    );
    assert.ok(path.isAbsolute(simulatedStatePath({ CKPT_SIM_STATE: "rel/state.json" })));
  });

  test("a new machine: two H200s, no processes; saved 0600 in a directory made 0700; it survives", async () => {
    const dir = await tempDir();
    const env = { XDG_RUNTIME_DIR: dir };
    const machine = await openSimulatedMachine({ env });
    assert.equal(machine.path, path.join(dir, "ckpt-cuda", SIMULATED_STATE_FILE));
    assert.equal(machine.created, true);
    assert.equal(machine.machine.gpus.length, 2);
    assert.equal(machine.machine.processes.length, 0);
    const pid = machine.spawn({ memoryMiB: 256, gpu: 1 });
    await machine.machine.process(pid)!.write(0, new Uint8Array([42]));
    await new CudaProcess(pid, { machine: machine.machine }).suspend();
    await machine.save();
    await machine.close();
    assert.equal((await stat(path.join(dir, "ckpt-cuda"))).mode & 0o777, 0o700);
    assert.equal((await stat(machine.path)).mode & 0o777, 0o600);
    assert.deepEqual(await readdir(path.join(dir, "ckpt-cuda")), [SIMULATED_STATE_FILE]);

    await using again = await openSimulatedMachine({ env, gpus: 5 });
    assert.equal(again.created, false);
    assert.equal(again.machine.gpus.length, 2, "an existing machine keeps its GPUs");
    const proc = new CudaProcess(pid, { machine: again.machine });
    assert.equal(await proc.state(), "checkpointed");
    await proc.resume();
    assert.deepEqual(await again.machine.process(pid)!.read(0, 1), new Uint8Array([42]));
    assert.ok(again.spawn() > pid);
  });

  test("spawn and kill; a closed machine does nothing more", async () => {
    const file = path.join(await tempDir(), "deep", "er", "state.json");
    for (const gpus of [0, 1025, 1.5]) {
      await assert.rejects(
        openSimulatedMachine({ path: file, gpus }),
        new RegExp(`^RangeError: gpus must be an integer from 1 to 1024, got ${gpus}$`),
      );
    }
    const machine = await openSimulatedMachine({ path: file, gpus: 1 });
    assert.equal((await stat(path.dirname(file))).mode & 0o777, 0o700);
    const pid = machine.spawn({ command: "my job" });
    assert.equal(machine.machine.process(pid)?.command, "my job");
    assert.equal(machine.kill(pid), true);
    assert.equal(machine.kill(pid), false);
    assert.equal(machine.kill(123), false);
    assert.deepEqual(await machine.machine.host.scan(), []);
    await machine.close();
    await machine.close();
    assert.throws(() => machine.spawn(), /was closed/);
    await assert.rejects(machine.save(), /was closed/);
  });

  test("a save during a driver call is refused, and the file is left as it was", async () => {
    const file = await savedFile(await tempDir());
    const before = await readFile(file, "utf8");
    await using machine = await openSimulatedMachine({ path: file });
    const [p] = machine.machine.processes;
    const lock = machine.machine.driver.lock(p.pid, null);
    await assert.rejects(machine.save(), /under way/);
    await lock;
    assert.equal(await readFile(file, "utf8"), before);
  });

  test("a corrupt, truncated, foreign or newer file is refused with its path and what to do", async () => {
    const dir = await tempDir();
    const file = await savedFile(dir);
    const text = await readFile(file, "utf8");
    await writeFile(file, "not json at all", { mode: 0o600 });
    await refused(
      file,
      /is not a simulated machine's state file \(not JSON\); remove it or name another in CKPT_SIM_STATE$/,
    );
    await writeFile(file, text.slice(0, text.length / 2));
    await refused(file, /is corrupt: it is not JSON.*simulate reset/);
    await writeFile(file, JSON.stringify({ ...JSON.parse(text), format: "something-else" }));
    await refused(file, /is not a simulated machine's state file \(format must be/);
    await writeFile(file, "[1, 2]");
    await refused(file, /is not a simulated machine's state file/);
    await writeFile(file, JSON.stringify({ ...JSON.parse(text), version: 99 }));
    await refused(file, /was written by another version of @ckpt\/cuda \(version 99/);
    const bad = JSON.parse(text);
    bad.processes[0].state = "sleeping";
    await writeFile(file, JSON.stringify(bad));
    await refused(
      file,
      /is corrupt: processes\[0\]\.state must be one of .*got "sleeping"; remove it or run `cuda-checkpoint --simulate reset`/,
    );
  });

  test("a file others may read, a symbolic link, another user's file or an open directory is refused", async () => {
    const dir = await tempDir();
    const file = await savedFile(dir);
    await chmod(file, 0o644);
    await refused(file, /may be read or written by other users \(mode 0644, not 0600\)/);
    await chmod(file, 0o600);
    const link = path.join(dir, "link.json");
    await symlink(file, link);
    await refused(link, /is a symbolic link/);
    if (process.getuid?.() === 0) {
      await chown(file, 4321, 4321);
      await refused(file, /belongs to another user \(uid 4321/);
      await chown(file, 0, 0);
    }
    const open = path.join(dir, "open");
    await mkdir(open);
    await chmod(open, 0o777);
    await refused(
      path.join(open, "state.json"),
      /may be written by other users \(mode 0777\)/,
      open,
    );
    await chmod(open, 0o1777); // sticky, as /tmp: nobody else can replace a file of ours there
    await (await openSimulatedMachine({ path: path.join(open, "state.json") })).close();
  });

  test("fresh and reset replace a state file that cannot be read, never a file of another kind", async () => {
    const dir = await tempDir();
    const file = await savedFile(dir);
    const text = await readFile(file, "utf8");
    for (const other of ["{ garbage", "[1, 2]", JSON.stringify({ format: "something-else" })]) {
      await writeFile(file, other);
      await assert.rejects(
        openSimulatedMachine({ path: file, fresh: true }),
        /is not a simulated machine's state file .*; remove it or name another in CKPT_SIM_STATE$/,
      );
      assert.equal(await readFile(file, "utf8"), other, "the file is left as it was");
    }
    const link = path.join(dir, "link.json");
    await symlink(file, link);
    await assert.rejects(
      openSimulatedMachine({ path: link, fresh: true }),
      /cannot be read: .*link/,
    );
    // One of ours, cut short, that others may read: replaced, private again.
    await writeFile(file, text.slice(0, text.length / 2), { mode: 0o644 });
    await chmod(file, 0o644);
    const machine = await openSimulatedMachine({ path: file, fresh: true, gpus: 3 });
    assert.equal(machine.created, true);
    assert.equal(machine.machine.gpus.length, 3);
    machine.spawn();
    await machine.save();
    await machine.close();
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    await using again = await openSimulatedMachine({ path: file });
    assert.equal(again.machine.processes.length, 1);
    const old = again.machine;
    await again.reset(); // awaited: a reset that wrote the file itself would be done
    assert.equal(again.created, true);
    assert.notEqual(again.machine, old);
    assert.equal(again.machine.processes.length, 0);
    assert.equal(again.machine.gpus.length, 2);
    const kept = async () => JSON.parse(await readFile(file, "utf8")).processes.length;
    assert.equal(await kept(), 1, "the file keeps the old machine till the new one is saved");
    await again.save();
    assert.equal(await kept(), 0);
  });

  test("two opens at once take turns: the second sees what the first saved", async () => {
    const file = path.join(await tempDir(), "state.json");
    const first = await openSimulatedMachine({ path: file });
    let secondOpened = false;
    const second = openSimulatedMachine({ path: file }).then((m) => (secondOpened = true, m));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(secondOpened, false, "the second open waits for the lock");
    const pid = first.spawn();
    await first.save();
    await first.close();
    const m = await second;
    assert.equal(m.created, false);
    assert.ok(m.machine.process(pid));
    const late = (holder: string) => (err: unknown) =>
      err instanceof SimulatedStateError &&
      new RegExp(`^waited over 50 ms for \\S*state\\.json\\.lock${holder}; wait`).test(err.message);
    const mine = ` \\(held now by pid ${process.pid}, another --simulate call\\)`;
    await assert.rejects(
      within(5000, openSimulatedMachine({ path: file, lockTimeoutMs: 50 })),
      late(mine),
    );
    await m.close();
    assert.deepEqual(await readdir(path.dirname(file)), ["state.json"]);
    // A lock just made, its pid not yet written: no holder is named (it was once "pid 0").
    await writeFile(`${file}.lock`, "");
    await assert.rejects(
      within(5000, openSimulatedMachine({ path: file, lockTimeoutMs: 50 })),
      late(""),
    );
    await rm(`${file}.lock`);
  });

  test("a lock left by a program that died is taken over", async () => {
    const file = path.join(await tempDir(), "state.json");
    await writeFile(`${file}.lock`, "2147483000\n");
    await using machine = await within(
      5000,
      openSimulatedMachine({ path: file, lockTimeoutMs: 1000 }),
    );
    assert.equal(machine.created, true);
    assert.equal((await readFile(`${file}.lock`, "utf8")).trim(), String(process.pid));
  });

  test("a lock that is no file (a FIFO, a link to /dev/zero, as another user may plant in a shared directory): refused at once, not read", async () => {
    const file = path.join(await tempDir(), "state.json");
    execFileSync("mkfifo", [`${file}.lock`]);
    const open = (lockTimeoutMs = 1000) => openSimulatedMachine({ path: file, lockTimeoutMs });
    await assert.rejects(open(), /the lock .*state\.json\.lock is not a regular file/);
    await rm(`${file}.lock`);
    await symlink("/dev/zero", `${file}.lock`);
    await assert.rejects(open(), /the lock .*state\.json\.lock is a symbolic link/);
  });
});
