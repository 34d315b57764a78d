// The simulated driver on its own: GPUs, processes, memory, clocks and the timing model.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  H200_TIMING,
  MemoryImage,
  RealClock,
  SimulatedDriver,
  singleProcessMs,
  VirtualClock,
} from "../mock/mod.ts";
import { CUDA_ERROR_OPERATING_SYSTEM, CUDA_SUCCESS } from "../core/codes.ts";

describe("GPUs", () => {
  test("defaults: one H200 with an H200's memory and a GPU- UUID", () => {
    const sim = new SimulatedDriver();
    assert.equal(sim.gpus.length, 1);
    assert.equal(sim.gpus[0].name, "NVIDIA H200");
    assert.equal(sim.gpus[0].memoryMiB, 143771);
    assert.match(
      sim.gpus[0].uuid,
      /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    );
  });

  test("UUIDs are stable for a seed, differ between GPUs and between seeds", () => {
    const a = new SimulatedDriver({ gpus: 4 }).gpus.map((g) => g.uuid);
    const b = new SimulatedDriver({ gpus: 4 }).gpus.map((g) => g.uuid);
    const c = new SimulatedDriver({ gpus: 4, seed: 2 }).gpus.map((g) => g.uuid);
    assert.deepEqual(a, b);
    assert.equal(new Set(a).size, 4);
    assert.notDeepEqual(a, c);
  });

  test("given UUIDs are normalised, and duplicates refused", () => {
    const sim = new SimulatedDriver({ gpus: [{ uuid: "12345678123412341234123456789ABC" }] });
    assert.equal(sim.gpus[0].uuid, "GPU-12345678-1234-1234-1234-123456789abc");
    assert.throws(
      () => new SimulatedDriver({ gpus: [{ uuid: sim.gpus[0].uuid }, { uuid: sim.gpus[0].uuid }] }),
      /same UUID/,
    );
  });

  test("spawn takes GPU memory and refuses what does not fit", () => {
    const sim = new SimulatedDriver({ gpus: [{ memoryMiB: 1000 }] });
    sim.spawn({ memoryMiB: 600 });
    assert.equal(sim.gpus[0].freeMiB, 400);
    assert.throws(
      () => sim.spawn({ memoryMiB: 500 }),
      /GPU 0 has 400 MiB free, too little for 500 MiB more/,
    );
    assert.throws(
      () => sim.spawn({ gpu: 3 }),
      /gpu 3 does not exist: this simulator has GPUs 0 to 0/,
    );
    assert.throws(
      () => sim.spawn({ memoryMiB: -1 }),
      /memoryMiB must be a non-negative number, got -1/,
    );
  });
});

describe("processes", () => {
  test("pids and thread ids are distinct, and every thread id finds the process", () => {
    const sim = new SimulatedDriver();
    const a = sim.spawn(), b = sim.spawn({ extraThreads: 30 });
    const all = [...a.threads, ...b.threads];
    assert.equal(new Set(all).size, all.length);
    for (const t of b.threads) assert.equal(sim.process(t), b);
    assert.equal(a.tid, a.threads[1]);
  });

  test("an exited process is gone: its pid gives OPERATING_SYSTEM and its memory is free", async () => {
    const sim = new SimulatedDriver();
    const p = sim.spawn({ memoryMiB: 100 });
    assert.equal((await sim.getState(p.tid)).code, CUDA_SUCCESS);
    p.exit();
    assert.equal((await sim.getState(p.pid)).code, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal((await sim.getState(p.tid)).code, CUDA_ERROR_OPERATING_SYSTEM);
    assert.equal(sim.gpus[0].usedMiB, 0);
    assert.equal(sim.processes.length, 0);
    await assert.rejects(p.write(0, new Uint8Array(1)), /has exited/);
  });

  test("a checkpointed process's memory is held in host memory, not on the GPU", async () => {
    const sim = new SimulatedDriver();
    const p = sim.spawn({ memoryMiB: 64 });
    await p.write(0, new Uint8Array([7, 7, 7]));
    assert.equal(await sim.lock(p.pid, { timeoutMs: 100 }), 0);
    assert.equal(await sim.checkpoint(p.pid), 0);
    assert.equal(p.memoryLocation, "host");
    assert.equal(sim.gpus[0].usedMiB, 0);
    const blocked = p.read(0, 3);
    let done = false;
    blocked.then(() => done = true);
    await sim.sleep(5000);
    assert.equal(done, false, "a read blocks while checkpointed, as a cudaMemcpy would");
    assert.equal(await sim.restore(p.pid, null), 0);
    assert.equal(p.memoryLocation, "gpu");
    assert.equal(await sim.unlock(p.pid), 0);
    assert.deepEqual(await blocked, new Uint8Array([7, 7, 7]));
  });

  test("the call log records every call with its code", async () => {
    const sim = new SimulatedDriver();
    const p = sim.spawn();
    await sim.unlock(p.pid);
    await sim.lock(p.pid, null);
    assert.deepEqual(sim.calls.map((c) => [c.op, c.pid, c.code]), [["unlock", p.pid, 401], [
      "lock",
      p.pid,
      0,
    ]]);
  });

  test("two state changes at once: the second sees an illegal state", async () => {
    const sim = new SimulatedDriver();
    const p = sim.spawn({ memoryMiB: 1024 });
    await sim.lock(p.pid, null);
    const [a, b] = await Promise.all([sim.checkpoint(p.pid), sim.checkpoint(p.pid)]);
    assert.deepEqual([a, b], [0, 401]);
  });
});

describe("memory images", () => {
  test("reads what was written, across page borders, zeros elsewhere", () => {
    const m = new MemoryImage(1 << 20);
    const data = Uint8Array.from({ length: 70000 }, (_, i) => i % 251);
    m.write(65530, data);
    assert.deepEqual(m.read(65530, data.length), data);
    assert.deepEqual(m.read(0, 4), new Uint8Array(4));
    assert.throws(() => m.read((1 << 20) - 2, 4), /outside the process's 1048576 bytes/);
  });

  test("a copy is independent of the original", async () => {
    const m = new MemoryImage(1 << 20);
    m.write(10, new Uint8Array([1]));
    const c = m.copy();
    m.write(10, new Uint8Array([2]));
    assert.equal(c.read(10, 1)[0], 1);
    assert.notEqual(await c.digest(), await m.digest());
  });

  test("the digest does not depend on zero pages having been touched", async () => {
    const a = new MemoryImage(1 << 20), b = new MemoryImage(1 << 20);
    b.write(500_000, new Uint8Array(10));
    assert.equal(await a.digest(), await b.digest());
  });
});

describe("timing model (from the H200 measurements)", () => {
  test("one process alone takes what the measured table says", async () => {
    for (const [mib, ckptMs, restoreMs] of [[1024, 752, 350], [4096, 1880, 830]]) {
      const sim = new SimulatedDriver();
      const p = sim.spawn({ memoryMiB: mib });
      let t = sim.now();
      await sim.lock(p.pid, null);
      await sim.checkpoint(p.pid);
      const ckpt = sim.now() - t;
      t = sim.now();
      await sim.restore(p.pid, null);
      await sim.unlock(p.pid);
      const restore = sim.now() - t;
      assert.ok(
        Math.abs(ckpt - ckptMs) < 5,
        `${mib} MiB checkpoint ${ckpt} ms, measured ${ckptMs}`,
      );
      assert.ok(
        Math.abs(restore - restoreMs) < 5,
        `${mib} MiB restore ${restore} ms, measured ${restoreMs}`,
      );
    }
  });

  test("interpolates between and beyond the measured points, growing with memory", () => {
    const t = H200_TIMING.checkpoint;
    assert.equal(singleProcessMs(t, 1024), 752);
    assert.ok(singleProcessMs(t, 2048) > 752 && singleProcessMs(t, 2048) < 1880);
    assert.ok(singleProcessMs(t, 65536) > singleProcessMs(t, 32768));
    assert.equal(singleProcessMs(t, 0), t.fixedMs);
  });

  test("four 4 GiB processes at once are near the measured 2.36 s, not the serial 8.3 s", async () => {
    const sim = new SimulatedDriver();
    const ps = Array.from({ length: 4 }, () => sim.spawn({ memoryMiB: 4096 }));
    const t = sim.now();
    await Promise.all(ps.map(async (p) => {
      await sim.lock(p.pid, null);
      await sim.checkpoint(p.pid);
    }));
    const ms = sim.now() - t;
    assert.ok(ms > 1800 && ms < 2900, `took ${ms} ms`);
  });

  test("moving to another GPU costs a little more than restoring in place (measured 357 vs 335 ms)", async () => {
    const restoreMs = async (move: boolean) => {
      const sim = new SimulatedDriver({ gpus: 2 });
      const p = sim.spawn({ memoryMiB: 1024 });
      const [a, b] = sim.gpus.map((g) => u(g.uuid));
      await sim.lock(p.pid, null);
      await sim.checkpoint(p.pid);
      const t = sim.now();
      const pairs = move
        ? [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }]
        : [{ oldUuid: a, newUuid: a }, { oldUuid: b, newUuid: b }];
      assert.equal(await sim.restore(p.pid, { gpuPairs: pairs }), 0);
      assert.deepEqual(p.gpuUuids, [sim.gpus[move ? 1 : 0].uuid]);
      return sim.now() - t;
    };
    const moved = await restoreMs(true), inPlace = await restoreMs(false);
    assert.ok(moved > inPlace, `moved ${moved} ms, in place ${inPlace} ms`);
    assert.ok(moved > 330 && moved < 420, `migration restore took ${moved} ms`);
  });
});

describe("clocks", () => {
  test("virtual time jumps to the next timer in order, taking no real time", async () => {
    const clock = new VirtualClock();
    const seen: number[] = [];
    const wall = performance.now();
    await Promise.all(
      [5000, 10, 60_000].map((ms) =>
        new Promise<void>((r) => clock.setTimer(ms, () => (seen.push(clock.now()), r())))
      ),
    );
    assert.deepEqual(seen, [10, 5000, 60_000]);
    assert.ok(performance.now() - wall < 1000);
  });

  test("a cleared timer never fires", async () => {
    const clock = new VirtualClock();
    let fired = false;
    const h = clock.setTimer(5, () => fired = true);
    clock.clearTimer(h);
    await new Promise<void>((r) => clock.setTimer(10, r));
    assert.equal(fired, false);
  });

  test("the real clock, sped up, runs a 1 GiB suspend in about 752 ms of simulated time", async () => {
    const sim = new SimulatedDriver({ clock: "real", speed: 50 });
    const p = sim.spawn({ memoryMiB: 1024 });
    const t = sim.now();
    await sim.lock(p.pid, null);
    await sim.checkpoint(p.pid);
    const ms = sim.now() - t;
    assert.ok(ms >= 740 && ms < 2000, `took ${ms} simulated ms`);
    assert.throws(() => new RealClock(0), /speed must be a positive finite number, got 0/);
  });
});

function u(uuid: string): Uint8Array {
  const hex = uuid.slice(4).replaceAll("-", "");
  return Uint8Array.from({ length: 16 }, (_, i) => parseInt(hex.slice(2 * i, 2 * i + 2), 16));
}
