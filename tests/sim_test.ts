// The simulated driver on its own: GPUs, processes, context memory, memory contents, version
// gating, injected faults and the reasons it logs for rejected mappings.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { SimulatedMachine, type SimulatedMachineOptions } from "../mock/mod.ts";
import { chunkedSha256 } from "../examples/_chunked_sha256.ts";
import { CONTEXT_MIB, H200_TIMING } from "../mock/timing.ts";
import {
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_NOT_READY,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
} from "../core/driver.ts";
import { parseGpuUuid } from "../core/options.ts";

const MIB = 1024 * 1024;

async function suspended(options: SimulatedMachineOptions, memoryMiB = 256) {
  const sim = new SimulatedMachine(options);
  const p = sim.spawn({ memoryMiB });
  assert.equal(await sim.driver.lock(p.pid, null), CUDA_SUCCESS);
  assert.equal(await sim.driver.checkpoint(p.pid), CUDA_SUCCESS);
  return { sim, p };
}

describe("GPUs", () => {
  test("defaults: one H200 with an H200's memory and a GPU- UUID; listGpus names it", async () => {
    const sim = new SimulatedMachine();
    assert.equal(sim.gpus.length, 1);
    assert.equal(sim.gpus[0].memoryMiB, 143771);
    assert.match(
      sim.gpus[0].uuid,
      /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    );
    assert.deepEqual(await sim.driver.listGpus(), [{
      index: 0,
      uuid: sim.gpus[0].uuid,
      name: "NVIDIA H200",
    }]);
  });

  test("an H100 by name has an H100's memory", () => {
    const sim = new SimulatedMachine({ gpus: [{ name: "NVIDIA H100 80GB HBM3" }] });
    assert.equal(sim.gpus[0].memoryMiB, 81559);
  });

  test("UUIDs are stable for a seed, differ between GPUs and between seeds", () => {
    const a = new SimulatedMachine({ gpus: 4 }).gpus.map((g) => g.uuid);
    const b = new SimulatedMachine({ gpus: 4 }).gpus.map((g) => g.uuid);
    const c = new SimulatedMachine({ gpus: 4, seed: 2 }).gpus.map((g) => g.uuid);
    assert.deepEqual(a, b);
    assert.equal(new Set(a).size, 4);
    assert.notDeepEqual(a, c);
  });

  test("given UUIDs are normalised, and duplicates refused", () => {
    const sim = new SimulatedMachine({ gpus: [{ uuid: "12345678123412341234123456789ABC" }] });
    assert.equal(sim.gpus[0].uuid, "GPU-12345678-1234-1234-1234-123456789abc");
    const uuid = sim.gpus[0].uuid;
    assert.throws(() => new SimulatedMachine({ gpus: [{ uuid }, { uuid }] }), /same UUID/);
  });
});

describe("GPU memory, CUDA contexts included", () => {
  test("a process on one GPU takes its allocation and the model's figure for a context, CONTEXT_MIB", () => {
    // CONTEXT_MIB is the model's figure (mock/timing.ts); what is checked is that the simulator adds
    // one context to each process's allocation, not the figure itself.
    const sim = new SimulatedMachine();
    const gpu = sim.gpus[0];
    sim.spawn({ memoryMiB: 16 });
    assert.equal(gpu.usedMiB, 16 + CONTEXT_MIB);
    sim.spawn({ memoryMiB: 1024 });
    assert.equal(gpu.usedMiB, 16 + 1024 + 2 * CONTEXT_MIB, "a context for each process");
    assert.equal(gpu.freeMiB, gpu.memoryMiB - gpu.usedMiB);
  });

  test(`a CUDA process takes its memory and a context (default ${CONTEXT_MIB} MiB) on each GPU`, () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    sim.spawn({ memoryMiB: 1024, gpu: [0, 1] });
    assert.deepEqual(sim.gpus.map((g) => g.usedMiB), [512 + CONTEXT_MIB, 512 + CONTEXT_MIB]);
    sim.spawn({ cuda: false });
    assert.deepEqual(sim.gpus.map((g) => g.usedMiB), [512 + CONTEXT_MIB, 512 + CONTEXT_MIB]);
  });

  test("spawn refuses what does not fit, context counted", () => {
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 1000, contextMiB: 100 }] });
    sim.spawn({ memoryMiB: 600 });
    assert.equal(sim.gpus[0].freeMiB, 300);
    assert.throws(
      () => sim.spawn({ memoryMiB: 250 }),
      /spawn: GPU 0 has 300 MiB free, too little for 350 MiB more \(its 250 MiB of memory and 100 MiB of CUDA context\)/,
    );
    sim.spawn({ memoryMiB: 200 });
    assert.equal(sim.gpus[0].freeMiB, 0);
  });

  test("checkpoint frees memory and context; restore needs both again; exit frees them", async () => {
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 2000, contextMiB: 100 }] });
    const p = sim.spawn({ memoryMiB: 600 });
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    assert.equal(sim.gpus[0].usedMiB, 0);
    const filler = sim.spawn({ memoryMiB: 1150 }); // 1250 used, 750 free: 700 fits
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_SUCCESS);
    assert.equal(sim.gpus[0].usedMiB, 1950);
    filler.exit();
    assert.equal(sim.gpus[0].usedMiB, 700);
    p.exit();
    assert.equal(sim.gpus[0].usedMiB, 0);
  });

  test("a restore that runs out of memory (the context does not fit) leaves the process unrestorable, as driver 580 does", async () => {
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 2000, contextMiB: 100 }, {}] });
    const p = sim.spawn({ memoryMiB: 600 });
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    const filler = sim.spawn({ memoryMiB: 1250 }); // 1350 used, 650 free: the memory fits, not the context
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OUT_OF_MEMORY);
    assert.match(
      sim.driver.calls.at(-1)!.note!,
      /GPU 0 has 650 MiB free, too little for 700 MiB more/,
    );
    assert.equal(p.state, "checkpointed");
    assert.equal(p.restoreRefused, true);
    assert.equal(sim.gpus[0].usedMiB, 1350, "the failed restore holds nothing");
    filler.exit();
    // tests/gpu/reports/oom-probe-2xh200.txt: in place or mapped, at once or later, 304 in 5-8 ms.
    const [a, b] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
    for (
      const args of [null, { gpuPairs: [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }] }]
    ) {
      const t0 = sim.now();
      assert.equal(await sim.driver.restore(p.pid, args), CUDA_ERROR_OPERATING_SYSTEM);
      assert.equal(sim.now() - t0, H200_TIMING.refusedMs, "answered in the model's refusedMs");
      assert.equal(p.state, "checkpointed");
      assert.deepEqual(await sim.driver.getState(p.pid), { code: CUDA_SUCCESS, value: 2 });
      assert.deepEqual(await sim.driver.getRestoreThreadId(p.pid), {
        code: CUDA_SUCCESS,
        value: p.tid,
      });
    }
    assert.equal(sim.gpus[0].usedMiB, 0);
    p.exit();
    assert.equal(await sim.driver.getState(p.pid).then((r) => r.code), CUDA_ERROR_OPERATING_SYSTEM);
  });

  test("a refused restore takes the model's refusedMs, whatever figure the model gives", async () => {
    // Not the table's 6 ms again: a figure no other step of the model has, so the check fails if
    // the refusal waited for anything but refusedMs.
    const timing = { ...H200_TIMING, refusedMs: 41 };
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 2000, contextMiB: 100 }], timing });
    const p = sim.spawn({ memoryMiB: 600 });
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    const filler = sim.spawn({ memoryMiB: 1250 });
    let t0 = sim.now();
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OUT_OF_MEMORY);
    assert.equal(sim.now() - t0, timing.oomMs, "the first, out of memory, takes the model's oomMs");
    filler.exit();
    t0 = sim.now();
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(sim.now() - t0, 41);
  });
});

describe("processes and threads", () => {
  test("a CUDA process's restore thread is the driver's own, never the main one", async () => {
    const sim = new SimulatedMachine();
    for (const extraThreads of [0, 1, 5]) {
      const p = sim.spawn({ extraThreads });
      assert.equal(p.threads.length, 2 + extraThreads);
      assert.notEqual(p.tid, p.pid);
      assert.equal(p.tid, p.threads.at(-1));
      assert.deepEqual(await sim.driver.getRestoreThreadId(p.pid), {
        code: CUDA_SUCCESS,
        value: p.tid,
      });
      assert.equal(sim.process(p.tid), p);
    }
  });

  test("another user's process (inspectable: false) is not this program's: the driver answers 304", async () => {
    // As the real driver answers a caller without root or CAP_SYS_PTRACE over it (docs/DRIVER.md);
    // before, it was suspended as any other.
    const sim = new SimulatedMachine();
    const p = sim.spawn({ inspectable: false });
    assert.equal((await sim.driver.getState(p.pid)).code, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(await sim.driver.lock(p.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(p.state, "running");
  });

  test("a process that never used CUDA has no restore thread", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ cuda: false, extraThreads: 0 });
    assert.deepEqual(p.threads, [p.pid]);
    assert.equal(p.tid, 0);
    assert.deepEqual(await sim.driver.getRestoreThreadId(p.pid), {
      code: CUDA_ERROR_NOT_INITIALIZED,
      value: 0,
    });
  });

  test("pids and thread ids of different processes never collide", () => {
    const sim = new SimulatedMachine();
    const all = [sim.spawn(), sim.spawn({ extraThreads: 30 }), sim.spawn()].flatMap((p) =>
      p.threads
    );
    assert.equal(new Set(all).size, all.length);
    // With a gap between processes, as on Linux (and as docs/SNAPSHOTS.md prints them): 4000, 4010,
    // then past the 32 thread ids of the second and 7 more.
    const again = new SimulatedMachine();
    const pids = [again.spawn(), again.spawn({ extraThreads: 30 }), again.spawn()].map((p) =>
      p.pid
    );
    assert.deepEqual(pids, [4000, 4010, 4010 + 32 + 7]);
  });

  test("an exited process is gone: its ids give OPERATING_SYSTEM and its memory is free", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 100 });
    p.exit();
    assert.equal((await sim.driver.getState(p.pid)).code, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal((await sim.driver.getState(p.tid)).code, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(sim.gpus[0].usedMiB, 0);
    assert.equal(sim.processes.length, 0);
    await assert.rejects(p.write(0, new Uint8Array(1)), /has exited/);
  });

  test("a checkpointed process's memory is in host memory; a read blocks until unlock", async () => {
    const { sim, p } = await suspended({}, 64);
    assert.equal(p.memoryLocation, "host");
    let done = false;
    const blocked = p.read(0, 3).then((b) => (done = true, b));
    await sim.sleep(5000);
    assert.equal(done, false);
    await sim.driver.restore(p.pid, null);
    await sim.driver.unlock(p.pid);
    assert.deepEqual(await blocked, new Uint8Array(3));
  });

  test("a write takes its bytes at the call, running or blocked, and writes land in call order", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4 });
    const bytes = new Uint8Array([1, 2, 3]);
    const running = p.write(0, bytes);
    bytes.fill(9); // changed before the write's promise settles: the write has its bytes already
    await running;
    assert.deepEqual(await p.read(0, 3), new Uint8Array([1, 2, 3]));
    await sim.driver.lock(p.pid, null);
    const first = p.write(0, bytes); // blocked: the process is locked
    bytes.fill(5);
    const read = p.read(0, 3); // queued behind the first write
    await sim.driver.unlock(p.pid);
    await p.write(0, bytes); // after the queued ones, though the process runs again
    await first;
    assert.deepEqual(await read, new Uint8Array([9, 9, 9]));
    assert.deepEqual(await p.read(0, 3), new Uint8Array([5, 5, 5]));
  });
});

describe("memoryChunkedSha256", () => {
  test("is the chunked SHA-256 of every byte, as a test computes it over read(), not their SHA-256", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 3 });
    assert.equal(await p.memoryChunkedSha256(), chunkedSha256(new Uint8Array(3 * MIB)), "zeros");
    await p.write(65530, Uint8Array.from({ length: 70000 }, (_, i) => i % 251));
    await p.write(2 * MIB - 2, new Uint8Array([7, 8, 9, 10]));
    await p.write(3 * MIB - 1, new Uint8Array([9]));
    const hash = await p.memoryChunkedSha256();
    const bytes = await p.read(0, 3 * MIB);
    assert.equal(hash, chunkedSha256(bytes));
    assert.notEqual(hash, createHash("sha256").update(bytes).digest("hex"));
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    assert.equal(await p.memoryChunkedSha256(), hash, "the same in host memory");
    await sim.driver.restore(p.pid, null);
    await sim.driver.unlock(p.pid);
    await p.write(MIB, new Uint8Array([1]));
    assert.equal(await p.memoryChunkedSha256(), chunkedSha256(await p.read(0, 3 * MIB)));
  });

  test("a kernel's output: written when it ends, made when hashed, moved by a checkpoint", async () => {
    const sim = new SimulatedMachine();
    const [p, q] = [sim.spawn({ memoryMiB: 4 }), sim.spawn({ memoryMiB: 4 })];
    let made = 0;
    const make = (from: number, out: Uint8Array) => {
      made++;
      for (let i = 0; i < out.length; i++) out[i] = (from + i) % 253;
    };
    const kernel = p.launch(50, { at: 100, length: 3 * MIB, make });
    assert.equal(await p.memoryChunkedSha256(), chunkedSha256(new Uint8Array(4 * MIB)), "not yet");
    await kernel;
    assert.equal(sim.now(), 50);
    const bytes = new Uint8Array(3 * MIB);
    make(0, bytes);
    await q.write(100, bytes);
    made = 0;
    const hash = await p.memoryChunkedSha256();
    assert.equal(hash, await q.memoryChunkedSha256(), "the bytes a write of them gives");
    assert.equal(made, 2, "the two whole chunks, made for the hash (the ends were made at once)");
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    await sim.driver.restore(p.pid, null);
    await sim.driver.unlock(p.pid);
    assert.equal(await p.memoryChunkedSha256(), hash);
    assert.deepEqual(await p.read(0, 4 * MIB), await q.read(0, 4 * MIB));
    assert.equal(made, 4, "a checkpoint and a restore moved them; the read made them again");

    const exits = p.launch(1000, { at: 0, length: MIB, make });
    p.exit();
    await assert.rejects(exits);
    assert.equal(made, 4, "a kernel that never ended wrote nothing");
    const bad = [
      [
        { at: 0, length: MIB, make: "fill" },
        TypeError,
        /writes\.make must be a function, got "fill"/,
      ],
      [{ at: 4 * MIB - 1, length: 2, make }, RangeError, /bytes 4194303 to 4194305 are outside/],
    ] as const;
    for (const [writes, Err, message] of bad) {
      assert.throws(
        () => q.launch(1, writes as never),
        (e) => e instanceof Err && message.test(String(e)),
      );
    }
  });

  test("a read or write after a launch waits for the kernel, as a cudaMemcpy on its stream", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 2 });
    const make = (_from: number, out: Uint8Array) => void out.fill(7);
    p.launch(40, { at: 0, length: MIB, make });
    const written = p.write(10, new Uint8Array([1])); // after the kernel: the kernel's 7 under it
    p.launch(30, { at: MIB, length: MIB, make });
    assert.deepEqual(await p.read(9, 3), Uint8Array.of(7, 1, 7));
    await written;
    assert.equal(sim.now(), 70, "the read waited for both kernels launched before it");
    assert.equal((await p.read(MIB, 1))[0], 7);
    const exits = p.launch(1000, { at: 0, length: MIB, make });
    const read = p.read(0, 1);
    p.exit();
    await assert.rejects(exits);
    await assert.rejects(read, /process \d+ has exited; cannot read GPU memory/);
  });

  test("a kernel's output one byte short of a chunk leaves that byte; a chunk made stays its own", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 2 });
    await p.write(MIB - 1, Uint8Array.of(0xab));
    const byChunk = (from: number, out: Uint8Array) => void out.fill(from < MIB ? 1 : 2);
    await p.launch(1, { at: 0, length: MIB - 1, make: byChunk });
    assert.deepEqual(
      await p.read(MIB - 2, 2),
      Uint8Array.of(1, 0xab),
      "the last byte is as it was",
    );
    // Two whole chunks, made when first read: a write into one, then a read of the other.
    await p.launch(1, { at: 0, length: 2 * MIB, make: byChunk });
    await p.write(0, Uint8Array.of(9));
    assert.equal((await p.read(MIB + 5, 1))[0], 2);
    assert.deepEqual(
      await p.read(0, 3),
      Uint8Array.of(9, 1, 1),
      "the first chunk is still its own",
    );
  });

  test("a kernel's make that throws rejects what runs it: the launch (part of a chunk) or the read (a whole one)", async () => {
    await using sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 2 });
    const make = () => {
      throw new Error("the kernel's bytes cannot be made");
    };
    await assert.rejects(p.launch(5, { at: 10, length: 100, make }), /cannot be made/);
    await p.launch(5, { at: 0, length: MIB, make }); // made only when read
    await assert.rejects(p.read(0, 1), /cannot be made/);
    await assert.rejects(p.write(5, Uint8Array.of(3)), /cannot be made/, "a write into that chunk");
    await assert.rejects(p.memoryChunkedSha256(), /cannot be made/);
    assert.equal(sim.now(), 10, "the simulator goes on: both kernels ran, one after the other");
    await p.write(MIB, Uint8Array.of(3));
    assert.deepEqual(await p.read(MIB, 1), Uint8Array.of(3));
  });

  test("takes no virtual time", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    p.launch(100);
    await p.memoryChunkedSha256();
    assert.equal(sim.now(), 0);
  });

  test("rejects for a process with no GPU memory, naming it", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ cuda: false });
    await assert.rejects(p.memoryChunkedSha256(), new RegExp(`process ${p.pid} has no GPU memory`));
  });
});

describe("driver versions", () => {
  test("below 12080 every checkpoint call resolves NOT_SUPPORTED, and missingFunctions names all six", async () => {
    const sim = new SimulatedMachine({ driverVersion: 12040 });
    const p = sim.spawn();
    assert.deepEqual(sim.driver.missingFunctions, [
      "cuCheckpointProcessGetState",
      "cuCheckpointProcessGetRestoreThreadId",
      "cuCheckpointProcessLock",
      "cuCheckpointProcessCheckpoint",
      "cuCheckpointProcessRestore",
      "cuCheckpointProcessUnlock",
    ]);
    assert.equal((await sim.driver.getState(p.pid)).code, CUDA_ERROR_NOT_SUPPORTED);
    assert.equal((await sim.driver.getRestoreThreadId(p.pid)).code, CUDA_ERROR_NOT_SUPPORTED);
    for (
      const code of [
        await sim.driver.lock(p.pid, null),
        await sim.driver.checkpoint(p.pid),
        await sim.driver.restore(p.pid, null),
        await sim.driver.unlock(p.pid),
      ]
    ) {
      assert.equal(code, CUDA_ERROR_NOT_SUPPORTED);
    }
    assert.match(sim.driver.calls[2].note!, /driver 12\.4 has no cuCheckpointProcessLock/);
    assert.deepEqual(await sim.driver.driverVersion(), { code: CUDA_SUCCESS, value: 12040 });
    assert.deepEqual(new SimulatedMachine({ driverVersion: 12080 }).driver.missingFunctions, []);
  });

  test("on 12.8 a restore with GPU pairs resolves NOT_SUPPORTED and leaves the process checkpointed", async () => {
    const { sim, p } = await suspended({ driverVersion: 12080, gpus: 2 });
    const [a, b] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
    const pairs = [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }];
    assert.equal(await sim.driver.restore(p.pid, { gpuPairs: pairs }), CUDA_ERROR_NOT_SUPPORTED);
    assert.equal(p.state, "checkpointed");
    // One pair (a one-GPU mapping, onto itself) is a pair all the same.
    const one = [{ oldUuid: a, newUuid: a }];
    assert.equal(await sim.driver.restore(p.pid, { gpuPairs: one }), CUDA_ERROR_NOT_SUPPORTED);
    assert.equal(p.state, "checkpointed");
    assert.equal(await sim.driver.restore(p.pid, { gpuPairs: [] }), CUDA_SUCCESS);
  });
});

describe("a lock's timeout", () => {
  test("work that ends exactly at the timeout is waited for: locked, not NOT_READY", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    p.launch(1000);
    const t0 = sim.now();
    assert.equal(await sim.driver.lock(p.pid, { timeoutMs: 1000 }), CUDA_SUCCESS);
    assert.equal(p.state, "locked");
    assert.ok(sim.now() - t0 >= 1000, `${sim.now() - t0} ms`);
    // A ms more of work than the timeout: not locked.
    await sim.driver.unlock(p.pid);
    p.launch(1001);
    assert.equal(await sim.driver.lock(p.pid, { timeoutMs: 1000 }), CUDA_ERROR_NOT_READY);
    assert.equal(p.state, "running");
  });
});

describe("injected faults", () => {
  test("a fault that would put memory back on a full GPU gives OUT_OF_MEMORY and leaves it checkpointed", async () => {
    const { sim, p } = await suspended({ gpus: [{ memoryMiB: 2000, contextMiB: 0 }] }, 1000);
    const filler = sim.spawn({ memoryMiB: 1500 });
    p.failNext("restore", { code: 999, state: "locked" });
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OUT_OF_MEMORY);
    assert.equal(p.state, "checkpointed");
    assert.equal(sim.gpus[0].usedMiB, 1500, "never over-committed");
    assert.match(
      sim.driver.calls.at(-1)!.note!,
      /injected by failNext\("restore"\) to leave the process locked, but GPU 0 has 500 MiB free.*it stays checkpointed/,
    );
    // A restore that ran out of memory, as on driver 580: lost, even once the GPU has room.
    filler.exit();
    assert.equal(await sim.driver.restore(p.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(p.state, "checkpointed");
  });

  test("with room, the fault's state and code apply and the memory moves back", async () => {
    const { sim, p } = await suspended({}, 1000);
    p.failNext("restore", { code: 999, state: "locked" });
    assert.equal(await sim.driver.restore(p.pid, null), 999);
    assert.equal(p.state, "locked");
    assert.equal(p.memoryLocation, "gpu");
    assert.equal(sim.gpus[0].usedMiB, 1000 + CONTEXT_MIB);
  });
});

describe("rejected GPU mappings say why in the call log", () => {
  const unknown = parseGpuUuid("GPU-0badc0de-0000-4000-8000-00000000dead");
  const cases: [string, (g: Uint8Array[]) => Uint8Array[][], RegExp][] = [
    [
      "an unknown old UUID",
      ([a, b]) => [[unknown, a], [a, a], [b, b]],
      /^old UUID GPU-0badc0de-.* is not a GPU of this machine$/,
    ],
    [
      "an unknown new UUID",
      ([a, b]) => [[a, unknown], [b, b]],
      /^new UUID GPU-0badc0de-.* is not a GPU of this machine$/,
    ],
    ["a GPU mapped twice", ([a, b]) => [[a, b], [a, a], [b, a]], /^GPU 0 \(.*\) is mapped twice$/],
    [
      "a GPU left out",
      ([a, b]) => [[a, b]],
      /^the mapping leaves out GPU 1 \(.*\); it must name every GPU$/,
    ],
    [
      "two GPUs onto one",
      ([a, b]) => [[a, b], [b, b]],
      /^GPUs 0 and 1 are both mapped onto GPU 1$/,
    ],
  ];
  for (const [what, mapping, note] of cases) {
    test(what, async () => {
      const { sim, p } = await suspended({ gpus: 2 });
      const pairs = mapping(sim.gpus.map((g) => parseGpuUuid(g.uuid))).map((
        [oldUuid, newUuid],
      ) => ({ oldUuid, newUuid }));
      assert.equal(await sim.driver.restore(p.pid, { gpuPairs: pairs }), CUDA_ERROR_INVALID_VALUE);
      assert.match(sim.driver.calls.at(-1)!.note!, note);
      assert.equal(p.state, "checkpointed");
    });
  }

  test("a different chip for a GPU the process uses (and not for one it does not)", async () => {
    const { sim, p } = await suspended({ gpus: [{}, {}, { name: "NVIDIA H100 80GB HBM3" }] });
    const [a, b, c] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
    const map = (m: Uint8Array[][]) => ({
      gpuPairs: m.map(([oldUuid, newUuid]) => ({ oldUuid, newUuid })),
    });
    assert.equal(
      await sim.driver.restore(p.pid, map([[a, c], [b, b], [c, a]])),
      CUDA_ERROR_INVALID_VALUE,
    );
    assert.match(
      sim.driver.calls.at(-1)!.note!,
      /GPU 0 \(NVIDIA H200\) would move onto GPU 2 \(NVIDIA H100 80GB HBM3\): restore needs the same chip/,
    );
    assert.equal(await sim.driver.restore(p.pid, map([[a, b], [b, c], [c, a]])), CUDA_SUCCESS);
    assert.deepEqual(p.gpuUuids, [sim.gpus[1].uuid]);
  });
});
