// The simulator's timing model checked against MEASUREMENTS it was not built from. The model
// (mock/timing.ts) takes each chip's single-process table and fits its concurrency figures to four
// processes of 4 GiB at once, 64 x 256 MiB's checkpoints and 16 and 64 x 256 MiB's restores on one
// GPU; everything below compares a prediction with another measured figure from docs/DRIVER.md#timings, copied
// here as the measurement itself (the figures the model was fitted to are not checked against
// themselves), but one test, which pins the model's own outputs to the figures DRIVER.md states
// for it, so that its constants and the docs move together. Where the model took its figure from
// the only measurement there is (a migration, an exit during a checkpoint), the test checks the
// mechanism instead: that the simulator applies the model's figure, or that the result does not
// depend on what the figure was not fitted to.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { SimulatedMachine, type SimulatedMachineOptions } from "../mock/mod.ts";
import { H200_TIMING, singleProcessMs } from "../mock/timing.ts";
import { CUDA_ERROR_OPERATING_SYSTEM, CUDA_SUCCESS } from "../core/driver.ts";
import { CopyLink } from "../mock/waits.ts";
import { parseGpuUuid } from "../core/options.ts";

/** Measured ranges in ms, [min, max]; where one figure was measured, min = max. */
type Range = readonly [number, number];

const MEASURED = {
  // One H200, N x 4 GiB all at once (the probes, docs/DRIVER.md#many-processes-at-once).
  h200_8x4_together: { suspend: [2900, 3400], resume: [2000, 2300] },
  // The same one after another, same section: the probes (8.2-8.4 s / 3.2-3.4 s; 20.3 s / 6.8 s)
  // and four bench runs on other lent machines (7.70-12.22 s / 2.92-3.96 s; 17.25 s / 6.51 s).
  h200_4x4_serial: { suspend: [7700, 12220], resume: [2920, 3960] },
  h200_8x4_serial: { suspend: [17250, 20300], resume: [6510, 6800] },
  // Two trials of N x 256 MiB at once on GPU 0 of two H200s, or spread over both, C threads
  // (bench/many.c; tests/gpu/reports/many-curve-2xh200-session23.txt); the model's serial parts
  // were fitted to 64 x 256 MiB's checkpoints (on GPU 0 and spread) and 16 and 64 x 256 MiB's
  // restores on GPU 0, not to these.
  h200_4x256_together: { suspend: [631, 693], resume: [552, 565] },
  h200_16x256_together: { suspend: [1692, 2216] },
  h200_4x256_spread: { suspend: [625, 650], resume: [540, 591] },
  h200_16x256_spread: { suspend: [1521, 1561], resume: [2034, 2035] },
  h200_64x256_spread: { resume: [11141, 11172] },
  // The same, 8, 32 and 48 processes, measured after the model was fitted (tests/gpu/reports/
  // many-curve-2xh200-session24-825e347.txt): [suspend, resume] on GPU 0, then spread.
  h200_after_fit: [
    [8, [1064, 1153], [1159, 1161], [1021, 1027], [1070, 1077]],
    [32, [3933, 4310], [5931, 6012], [3364, 3827], [4818, 4879]],
    [48, [5580, 5938], [10478, 10514], [5038, 5336], [7983, 8008]],
  ],
  // Two processes of 1, 4 and 8 GiB at once against one alone, C threads, three trials each on GPU
  // 0 and spread over two H200s (tests/gpu/reports/many-curve-big-2xh200-session25-8e87d7f.txt):
  // the least and most of (a trial of two at once) / (a trial of one alone), both placements.
  // This host runs one 8 GiB process faster than the table's (3.4-3.7 s against 4.7): the ratio is
  // what carries over, the cost of a second large call at once, on the same GPU or another.
  h200_pair_ratio: [
    [1024, { suspend: [1.02, 1.21], resume: [1.13, 1.47] }],
    [4096, { suspend: [1.0, 1.22], resume: [1.07, 1.29] }],
    [8192, { suspend: [1.0, 1.3], resume: [1.1, 1.27] }],
  ],
  // 1 GiB suspend/resume cycles through CudaProcess on four machines and on Bun (minima and
  // maxima of 20 cycles each, docs/DRIVER.md#timings); not the probes' row the model holds.
  h200_1g_cycles: { suspend: [587, 869], resume: [279, 421] },
  // H100, medians of 9: 1 GiB is NOT in the H100 table (16 MiB, 4 and 16 GiB are).
  h100_1g: { checkpoint: [704, 910], restore: [338, 448], cycle: 1100 },
  // The H100 host's rates (docs/DRIVER.md#h100): 48 GiB checkpointed in 30.1 s, restored at
  // 4.0-5.2 GB/s; two 16 GiB processes at once, 3.3 GB/s and 8.0 GB/s in total.
  h100_48g: { checkpoint: [30100, 30100], restore: [48 * 2 ** 30 / 5.2e6, 48 * 2 ** 30 / 4.0e6] },
  h100_2x16g_gbps: { checkpoint: 3.3, restore: 8.0 },
  // SIGKILL 150 ms into a 4 GiB checkpoint: OPERATING_SYSTEM after (docs/DRIVER.md#state-machine).
  exitDuringCheckpoint: { killAtMs: 150, returnsAt: [217, 225] },
} as const;

function within(ms: number, [min, max]: Range, slack = 0, what = ""): void {
  assert.ok(
    ms >= min * (1 - slack) && ms <= max * (1 + slack),
    `${what} took ${ms.toFixed(1)} ms, measured ${min}-${max} ms${
      slack ? ` (±${slack * 100}%)` : ""
    }`,
  );
}

async function timed(sim: SimulatedMachine, work: () => Promise<unknown>): Promise<number> {
  const t = sim.now();
  await work();
  return sim.now() - t;
}

async function suspend(sim: SimulatedMachine, pid: number): Promise<void> {
  assert.equal(await sim.driver.lock(pid, null), CUDA_SUCCESS);
  assert.equal(await sim.driver.checkpoint(pid), CUDA_SUCCESS);
}

async function resume(sim: SimulatedMachine, pid: number): Promise<void> {
  assert.equal(await sim.driver.restore(pid, null), CUDA_SUCCESS);
  assert.equal(await sim.driver.unlock(pid), CUDA_SUCCESS);
}

/**
 * Suspend and resume times of `n` processes of `mib`, all at once or one after another, on GPU 0
 * or `spread` over the machine's two.
 */
async function many(n: number, mib: number, together: boolean, spread = false) {
  const sim = new SimulatedMachine({ gpus: 2 });
  const gpu = (i: number) => spread ? i % 2 : 0;
  const pids = Array.from({ length: n }, (_, i) => sim.spawn({ memoryMiB: mib, gpu: gpu(i) }).pid);
  const each = async (fn: (sim: SimulatedMachine, pid: number) => Promise<void>) => {
    if (together) await Promise.all(pids.map((p) => fn(sim, p)));
    else for (const p of pids) await fn(sim, p);
  };
  return [await timed(sim, () => each(suspend)), await timed(sim, () => each(resume))] as const;
}

describe("many processes at once, on the H200 host", () => {
  test("8 x 4 GiB together: predicted inside the measured ranges", async () => {
    const [s, r] = await many(8, 4096, true);
    within(s, MEASURED.h200_8x4_together.suspend, 0, "suspend");
    within(r, MEASURED.h200_8x4_together.resume, 0, "resume");
  });

  test("4 x 256 MiB together: within 10% of the measured ranges; 16: the suspend inside them", async () => {
    // Before the host's serial parts (serialMs) the model took 0.44 s and 0.26 s for 4, 0.58 s
    // to suspend 16: it ran every call's fixed cost at once.
    const [s, r] = await many(4, 256, true);
    within(s, MEASURED.h200_4x256_together.suspend, 0.1, "suspend");
    within(r, MEASURED.h200_4x256_together.resume, 0.1, "resume");
    within((await many(16, 256, true))[0], MEASURED.h200_16x256_together.suspend, 0, "suspend");
  });

  test("spread over two GPUs: 4, 16 and 64 x 256 MiB within 10% of the measured", async () => {
    // The turns grow with the calls under way on the same GPU (serialPerOtherMs), the restores'
    // fitted on GPU 0 alone; without the growth, 16 took 2.14 s to suspend and 64 7.8 s to resume.
    for (const n of [4, 16, 64] as const) {
      const [s, r] = await many(n, 256, true, true), measured = MEASURED[`h200_${n}x256_spread`];
      if ("suspend" in measured) within(s, measured.suspend, 0.1, `${n} suspend`);
      within(r, measured.resume, 0.1, `${n} resume`);
    }
  });

  test("two large processes at once, on one GPU or two: their cost against one alone as measured", async () => {
    // Not fitted: the model's second call pays its turn and slowdownPerProcess. Measured to answer
    // whether two at once on two GPUs slow each other more than the model says (two NCCL ranks'
    // checkpoints took 1.5-1.8x one alone's): plain processes do not, by 0-30%.
    for (const [mib, ratio] of MEASURED.h200_pair_ratio) {
      const [s1, r1] = await many(1, mib, true);
      for (const spread of [false, true]) {
        const [s2, r2] = await many(2, mib, true, spread), where = spread ? "spread" : "on GPU 0";
        for (
          const [what, got, [min, max]] of [["suspend", s2 / s1, ratio.suspend], [
            "resume",
            r2 / r1,
            ratio.resume,
          ]] as const
        ) {
          assert.ok(
            got >= min * 0.95 && got <= max * 1.05,
            `${mib} MiB ${where}: two at once took ${
              got.toFixed(3)
            }x one's ${what}, measured ${min}-${max}x (±5%)`,
          );
        }
      }
    }
  });

  test("8, 32 and 48 x 256 MiB, measured after the fit: restores within 5%, checkpoints 15%", async () => {
    for (const [n, ...ranges] of MEASURED.h200_after_fit) {
      for (const spread of [false, true]) {
        const [s, r] = await many(n, 256, true, spread),
          [suspend, resume] = ranges.slice(+spread * 2);
        within(s, suspend, 0.15, `${n} ${spread ? "spread" : "on GPU 0"}: suspend`);
        within(r, resume, 0.05, `${n} ${spread ? "spread" : "on GPU 0"}: resume`);
      }
    }
  });

  test("a restore's turn grows by serialPerOtherMs for each restore ahead of it on its GPU", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const pids = [0, 0, 1].map((gpu) => sim.spawn({ memoryMiB: 16, gpu }).pid);
    for (const p of pids) await suspend(sim, p);
    const t0 = sim.now();
    const ends = await Promise.all(pids.map(async (p) => {
      assert.equal(await sim.driver.restore(p, null), CUDA_SUCCESS);
      return sim.now() - t0;
    }));
    const alone = singleProcessMs(H200_TIMING.restore, 16);
    const { serialMs = 0, serialPerOtherMs = 0 } = H200_TIMING.restore;
    // The first on GPU 0 alone; the second behind its turn, one ahead on its GPU; the one on GPU
    // 1 behind both turns, none ahead on its GPU.
    const expected = [
      alone,
      alone + serialMs + serialPerOtherMs,
      alone + 2 * serialMs + serialPerOtherMs,
    ];
    ends.forEach((ms, i) => within(ms, [expected[i], expected[i]], 0.001, `restore ${i}`));
  });

  test("the host's serial part of restores made at once: each ends in its turn, after those before", async () => {
    const sim = new SimulatedMachine();
    const pids = Array.from({ length: 8 }, () => sim.spawn({ memoryMiB: 16 }).pid);
    for (const p of pids) await suspend(sim, p);
    const t0 = sim.now(), { serialMs, serialPerOtherMs } = H200_TIMING.restore;
    const ends = await Promise.all(pids.map(async (p) => {
      assert.equal(await sim.driver.restore(p, null), CUDA_SUCCESS);
      return sim.now() - t0;
    }));
    // The i-th waits i turns (the j-th of serialMs + j * serialPerOtherMs), then its own turn.
    const alone = singleProcessMs(H200_TIMING.restore, 16);
    ends.forEach((ms, i) => {
      const at = alone + i * serialMs! + serialPerOtherMs! * i * (i + 1) / 2;
      within(ms, [at, at], 0.01, `restore ${i}`);
    });
  });

  test("a call of a byte of serial part, or none, waits for no other's turn", async () => {
    for (const serialMs of [0, 1]) {
      const timing = { ...H200_TIMING, checkpoint: { ...H200_TIMING.checkpoint, serialMs } };
      const sim = new SimulatedMachine({ timing });
      const [a, b] = [sim.spawn({ memoryMiB: 16 }).pid, sim.spawn({ memoryMiB: 16 }).pid];
      await suspend(sim, a);
      assert.equal(await sim.driver.lock(b, null), CUDA_SUCCESS);
      const t0 = sim.now(), alone = singleProcessMs(timing.checkpoint, 16);
      // a's restore holds the host's turn from 250 ms to 360: b's serial part is not queued in it.
      const restore = sim.sleep(250).then(() => sim.driver.restore(a, null));
      assert.equal(await sim.driver.checkpoint(b), CUDA_SUCCESS);
      within(sim.now() - t0, [alone, alone], 0.01, `b's checkpoint (serialMs ${serialMs})`);
      assert.equal(await restore, CUDA_SUCCESS);
    }
  });

  test("a checkpoint takes its turn after its copy: a small one beside a large one ends in its own time", async () => {
    // Were the turn before the copy, the large one (called first) would hold it from 219 ms to
    // 289, and the small one end 70 ms late.
    const sim = new SimulatedMachine();
    const [large, small] = [sim.spawn({ memoryMiB: 4096 }).pid, sim.spawn({ memoryMiB: 16 }).pid];
    for (const p of [large, small]) assert.equal(await sim.driver.lock(p, null), CUDA_SUCCESS);
    const t0 = sim.now();
    const ends = await Promise.all([large, small].map(async (p) => {
      assert.equal(await sim.driver.checkpoint(p), CUDA_SUCCESS);
      return sim.now() - t0;
    }));
    const alone = singleProcessMs(H200_TIMING.checkpoint, 16);
    within(ends[1], [alone, alone], 0.01, "the small one's checkpoint");
    assert.ok(ends[0] > ends[1], `the large one ends later: ${ends}`);
  });

  test("a restore takes its turn before its wait: one behind a migration waits that turn, not the migration", async () => {
    // Turns first: the migrating restore (called first) holds the host 0-110 ms, the other 110-220,
    // each then waits its own rest. Were the turns after the waits, the one in place would go first.
    // The one in place has none ahead on its GPU: the other left GPU 0 for GPU 1.
    const sim = new SimulatedMachine({ gpus: 2 });
    const [moving, staying] = [sim.spawn({ memoryMiB: 16 }).pid, sim.spawn({ memoryMiB: 16 }).pid];
    for (const p of [moving, staying]) await suspend(sim, p);
    const [a, b] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
    const swap = { gpuPairs: [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }] };
    const t0 = sim.now();
    const ends = await Promise.all([[moving, swap], [staying, null]].map(async ([p, pairs]) => {
      assert.equal(await sim.driver.restore(p as number, pairs as typeof swap), CUDA_SUCCESS);
      return sim.now() - t0;
    }));
    const alone = singleProcessMs(H200_TIMING.restore, 16), serial = H200_TIMING.restore.serialMs!;
    within(
      ends[0],
      [alone + H200_TIMING.migrationMs, alone + H200_TIMING.migrationMs],
      0.01,
      "moved",
    );
    within(
      ends[1],
      [alone + serial, alone + serial],
      0.01,
      "in place, behind the moved one's turn",
    );
  });

  test("a migrating restore's turn grows by the restores on the GPU it goes to, not the one it left", async () => {
    // Each case: processes spawned on `from`, checkpointed, restored in that order (`to` GPU 1:
    // moved there from GPU 0); the last one's end with serialPerOtherMs 100, less with 0.
    const lastGrowth = async (cases: readonly { from: number; to?: number }[]) => {
      const ends: number[] = [];
      for (const serialPerOtherMs of [0, 100]) {
        const restore = { ...H200_TIMING.restore, serialPerOtherMs };
        const sim = new SimulatedMachine({ gpus: 2, timing: { ...H200_TIMING, restore } });
        const pids = cases.map(({ from }) => sim.spawn({ memoryMiB: 16, gpu: from }).pid);
        for (const p of pids) await suspend(sim, p);
        const [a, b] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
        const swap = { gpuPairs: [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }] };
        const t0 = sim.now();
        const all = await Promise.all(pids.map(async (p, i) => {
          const pairs = cases[i].to === undefined ? null : swap;
          assert.equal(await sim.driver.restore(p, pairs), CUDA_SUCCESS);
          return sim.now() - t0;
        }));
        ends.push(all.at(-1)!);
      }
      return ends[1] - ends[0];
    };
    // One restoring on GPU 0, which the moving one leaves: none ahead on its GPU 1.
    assert.equal(await lastGrowth([{ from: 0 }, { from: 0, to: 1 }]), 0, "left GPU 0's");
    // One restoring on GPU 1, where it goes: one ahead.
    assert.equal(await lastGrowth([{ from: 1 }, { from: 0, to: 1 }]), 100, "GPU 1's");
  });

  test("a checkpoint of a process on two GPUs counts one under way on either of them", async () => {
    // One on GPU 1 checkpointed first, then one on GPUs 0 and 1. The first's turn counts the
    // second (on its GPU 1), and the second waits it out; the second's own counts the first
    // though that one is not on all of its GPUs: two others' serialPerOtherMs in all.
    const ends: number[] = [];
    for (const serialPerOtherMs of [0, 100]) {
      const checkpoint = { ...H200_TIMING.checkpoint, serialPerOtherMs };
      const sim = new SimulatedMachine({ gpus: 2, timing: { ...H200_TIMING, checkpoint } });
      const pids = [sim.spawn({ memoryMiB: 16, gpu: 1 }), sim.spawn({ memoryMiB: 16, gpu: [0, 1] })]
        .map((p) => p.pid);
      for (const p of pids) assert.equal(await sim.driver.lock(p, null), CUDA_SUCCESS);
      const t0 = sim.now();
      const all = await Promise.all(pids.map(async (p) => {
        assert.equal(await sim.driver.checkpoint(p), CUDA_SUCCESS);
        return sim.now() - t0;
      }));
      ends.push(all[1]);
    }
    assert.equal(ends[1] - ends[0], 200, `the two-GPU one's ends: ${ends}`);
  });

  test("the model gives the figures docs/DRIVER.md says it was fitted to give, within 1%", async () => {
    // "0.64 / 0.59 s for 4 x 256 MiB, 1.70 / 2.41 s for 16, 7.92 / 16.04 s for 64 and the 8 x 4
    // GiB row 2.97 / 2.09 s": H200_TIMING's serialMs (70, 110), serialPerOtherMs (0.68, 4.4),
    // checkpoint slowdown (5%) and restore cap (20 GB/s).
    for (
      const [n, mib, suspendMs, resumeMs] of [
        [4, 256, 640, 590],
        [16, 256, 1700, 2410],
        [64, 256, 7920, 16040],
        [8, 4096, 2970, 2090],
      ] as const
    ) {
      const [s, r] = await many(n, mib, true);
      within(s, [suspendMs, suspendMs], 0.01, `${n} x ${mib} MiB suspend`);
      within(r, [resumeMs, resumeMs], 0.01, `${n} x ${mib} MiB resume`);
    }
  });

  test("4 x 4 GiB one after another: inside the measured ranges, within 5% of the probes'", async () => {
    // The serial checkpoint slows as host memory fills: the model's heldSlowdownPerGiB, fitted to
    // 8 x 4 GiB (20.3 s against 8 x 1.88 s alone), meets the probes' 8.2-8.4 s here.
    const [s, r] = await many(4, 4096, false);
    within(s, MEASURED.h200_4x4_serial.suspend, 0, "suspend");
    within(s, [8200, 8400], 0.05, "suspend (the probes)");
    within(r, MEASURED.h200_4x4_serial.resume, 0, "resume");
  });

  test("8 x 4 GiB one after another: resume within 5%; the last checkpoint the slowest", async () => {
    // The suspend is what heldSlowdownPerGiB was fitted to: only its mechanism is checked.
    const sim = new SimulatedMachine();
    const pids = Array.from({ length: 8 }, () => sim.spawn({ memoryMiB: 4096 }).pid);
    const ms: number[] = [];
    for (const p of pids) ms.push(await timed(sim, () => suspend(sim, p)));
    assert.ok(ms.every((m, i) => i === 0 || m > ms[i - 1]), `each slower: ${ms.join(", ")}`);
    const r = await timed(sim, async () => {
      for (const p of pids) await resume(sim, p);
    });
    within(r, MEASURED.h200_8x4_serial.resume, 0.05, "resume");
  });
});

describe("the model's rule, on a table of its own", () => {
  test("beyond its last point, a table goes on at its last segment's slope", () => {
    const copy = { aggregateBytesPerSecond: Infinity, slowdownPerProcess: 0 };
    const two = { ...copy, fixedMs: 100, points: [[100, 200], [200, 1000]] as const };
    assert.equal(singleProcessMs(two, 150), 600, "between points: on the line between them");
    assert.equal(singleProcessMs(two, 300), 1800, "8 ms per MiB past 200, as from 100 to 200");
    // One point: the slope from the fixed cost to it.
    assert.equal(singleProcessMs({ ...two, points: [[100, 200]] }, 300), 400);
  });
});

describe("one process", () => {
  test("1 GiB on an H200: inside the spread of the CudaProcess cycles measured on four machines", async () => {
    const sim = new SimulatedMachine();
    const { pid } = sim.spawn({ memoryMiB: 1024 });
    within(
      await timed(sim, () => suspend(sim, pid)),
      MEASURED.h200_1g_cycles.suspend,
      0,
      "suspend",
    );
    within(await timed(sim, () => resume(sim, pid)), MEASURED.h200_1g_cycles.resume, 0, "resume");
  });

  test("1 GiB on an H100 (a size its table lacks): inside the measured ranges", async () => {
    const sim = new SimulatedMachine({ gpus: [{ name: "NVIDIA H100 80GB HBM3" }] });
    const { pid } = sim.spawn({ memoryMiB: 1024 });
    await sim.driver.lock(pid, null);
    within(
      await timed(sim, () => sim.driver.checkpoint(pid)),
      MEASURED.h100_1g.checkpoint,
      0,
      "ckpt",
    );
    within(
      await timed(sim, () => sim.driver.restore(pid, null)),
      MEASURED.h100_1g.restore,
      0,
      "restore",
    );
    await sim.driver.unlock(pid);
    const cycle = await timed(sim, () => suspend(sim, pid).then(() => resume(sim, pid)));
    within(cycle, [MEASURED.h100_1g.cycle, MEASURED.h100_1g.cycle], 0.1, "whole cycle");
  });

  test("48 GiB, and two of 16 GiB at once, on an H100: as the host's rates", async () => {
    const h100 = () => new SimulatedMachine({ gpus: [{ name: "NVIDIA H100 80GB HBM3" }] });
    const sim = h100();
    const { pid } = sim.spawn({ memoryMiB: 48 * 1024 });
    await sim.driver.lock(pid, null);
    within(await timed(sim, () => sim.driver.checkpoint(pid)), MEASURED.h100_48g.checkpoint, 0.1);
    within(await timed(sim, () => sim.driver.restore(pid, null)), MEASURED.h100_48g.restore);
    const two = h100();
    const pids = [0, 1].map(() => two.spawn({ memoryMiB: 16 * 1024 }).pid);
    await Promise.all(pids.map((p) => two.driver.lock(p, null)));
    const bytes = 2 * 16 * 2 ** 30;
    for (
      const [step, run] of [["checkpoint", (p: number) => two.driver.checkpoint(p)], [
        "restore",
        (p: number) => two.driver.restore(p, null),
      ]] as const
    ) {
      const gbps = bytes / 1e6 / await timed(two, () => Promise.all(pids.map(run)));
      const measured = MEASURED.h100_2x16g_gbps[step];
      assert.ok(
        Math.abs(gbps / measured - 1) <= 0.15,
        `${step}: ${gbps} GB/s, measured ${measured}`,
      );
    }
  });

  test("the chip's name picks its model: the same 1 GiB differs on an H100 and an H200", async () => {
    const ckpt = async (o: SimulatedMachineOptions) => {
      const sim = new SimulatedMachine(o);
      const { pid } = sim.spawn({ memoryMiB: 1024 });
      await sim.driver.lock(pid, null);
      return await timed(sim, () => sim.driver.checkpoint(pid));
    };
    assert.notEqual(await ckpt({}), await ckpt({ gpus: [{ name: "NVIDIA H100 80GB HBM3" }] }));
  });

  test("a restore onto the other GPU takes an in-place restore's time and the model's migrationMs", async () => {
    // migrationMs was worked out from the one migration measured (docs/DRIVER.md#migration), so
    // that figure is not checked here: what is, is that a restore which moves the process costs
    // the model's migrationMs more than the same restore in place, whatever that figure is.
    for (const timing of [H200_TIMING, { ...H200_TIMING, migrationMs: 250 }]) {
      const restoreMs = async (moved: boolean) => {
        const sim = new SimulatedMachine({ gpus: 2, timing });
        const { pid } = sim.spawn({ memoryMiB: 1024 });
        const [a, b] = sim.gpus.map((g) => parseGpuUuid(g.uuid));
        await suspend(sim, pid);
        const pairs = moved ? [{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }] : [];
        return await timed(sim, async () => {
          assert.equal(await sim.driver.restore(pid, { gpuPairs: pairs }), CUDA_SUCCESS);
        });
      };
      const [inPlace, moved] = [await restoreMs(false), await restoreMs(true)];
      assert.ok(
        Math.abs(moved - inPlace - timing.migrationMs) < 1e-6,
        `moved ${moved} ms, in place ${inPlace} ms: migrationMs is ${timing.migrationMs}`,
      );
    }
  });

  test("a process with no memory of its own beside others: its copies end at once, none hangs", async () => {
    const sim = new SimulatedMachine();
    const pids = [sim.spawn({ memoryMiB: 0 }).pid, sim.spawn({ memoryMiB: 1024 }).pid];
    const took = await timed(sim, () => Promise.all(pids.map((p) => suspend(sim, p))));
    assert.ok(Number.isFinite(took) && took > 0, `${took}`);
    assert.ok(Number.isFinite(await timed(sim, () => resume(sim, pids[0]))));
  });

  test("an exit during a checkpoint is noticed as soon, early or late, not when the copy ends", async () => {
    // Measured: killed 150 ms into a 4 GiB checkpoint, the call returned at 217-225 ms; the model
    // was fitted to that one figure, so what is checked here is that the notice does not depend on
    // how far the copy had come, and that nothing of the process stays on the GPU.
    const noticed: number[] = [];
    for (const killAt of [MEASURED.exitDuringCheckpoint.killAtMs, 1000, 1800]) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 4096 });
      await sim.driver.lock(p.pid, null);
      const call = sim.driver.checkpoint(p.pid);
      await sim.sleep(killAt);
      p.exit();
      const t = sim.now();
      assert.equal(await call, CUDA_ERROR_OPERATING_SYSTEM);
      noticed.push(sim.now() - t);
      assert.equal(sim.gpus[0].usedMiB, 0);
    }
    assert.ok(noticed[0] > 0 && noticed.every((ms) => ms === noticed[0]), `${noticed}`);
  });
});

describe("a link whose copies go in turn (the host's serial parts)", () => {
  /** Timers on a virtual time of their own, run to the end by `run`; `starts` counts timers set. */
  function virtualTimers() {
    const due: { at: number; fn: () => void; live: boolean }[] = [];
    const t = {
      time: 0,
      starts: 0,
      now: () => t.time,
      startTimer(ms: number, fn: () => void) {
        t.starts++;
        const timer = { at: t.time + ms, fn, live: true };
        due.push(timer);
        return () => void (timer.live = false);
      },
      run() {
        for (;;) {
          const next = due.filter((d) => d.live).sort((x, y) => x.at - y.at)[0];
          if (!next) return;
          next.live = false;
          t.time = next.at;
          next.fn();
        }
      },
    };
    return t;
  }
  // A slowdown and a cap that would slow copies at once: in turn, none applies.
  const rates = { aggregateBytesPerSecond: 1e3, slowdownPerProcess: 1, inTurn: true } as const;

  test("each moves alone at its own rate, in the order called, whatever waits behind it", () => {
    const timers = virtualTimers(), link = new CopyLink(timers, rates), ends: number[] = [];
    for (const bytes of [100, 100, 50]) link.transfer(bytes, 1, () => ends.push(timers.now()));
    timers.run();
    assert.deepEqual(ends, [100, 200, 250]);
  });

  test("a copy of a byte or less waits for no turn", () => {
    const timers = virtualTimers(), link = new CopyLink(timers, rates), ends: string[] = [];
    link.transfer(100, 1, () => ends.push(`first at ${timers.now()}`));
    link.transfer(1, 1, () => ends.push(`a byte at ${timers.now()}`));
    link.transfer(0, 1, () => ends.push(`nothing at ${timers.now()}`));
    timers.run();
    assert.deepEqual(ends, ["a byte at 0", "nothing at 0", "first at 100"]);
  });

  test("a copy waiting its turn sets no timer of its own (4,000 of them made every event scan all)", () => {
    const timers = virtualTimers(), link = new CopyLink(timers, rates), ends: number[] = [];
    link.transfer(100, 1, () => ends.push(timers.now()));
    link.transfer(10, 1, () => ends.push(timers.now()));
    timers.run();
    assert.deepEqual(ends, [100, 110]);
    assert.equal(timers.starts, 3, "one timer per call, and one for the second's turn");
  });
});
