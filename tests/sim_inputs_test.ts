// Every input of the simulator is checked at once, with an error naming the bad value and what
// was expected.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { SimulatedMachine, type SimulatedMachineOptions } from "../mock/mod.ts";
import { H200_TIMING } from "../mock/timing.ts";
import { encodeLockArgs } from "../ffi/structs.ts";

const bad = (o: unknown) => () => new SimulatedMachine(o as SimulatedMachineOptions);

describe("SimulatedMachine options", () => {
  const rows: [string, unknown, RegExp][] = [
    ["clock", { clock: "fast" }, /clock must be "virtual", "real" or a SimClock .*, got "fast"/],
    ["speed", { clock: "real", speed: 0 }, /speed must be a positive finite number, got 0/],
    ["speed without the real clock", { speed: 10 }, /speed 10 is used only with clock: "real"/],
    ["gpus 1.5", { gpus: 1.5 }, /gpus \(how many\) must be an integer from 1 to 1024, got 1\.5/],
    ["gpus 0", { gpus: 0 }, /gpus \(how many\) must be an integer from 1 to 1024, got 0/],
    [
      "gpus []",
      { gpus: [] },
      /gpus must be a number of GPUs or a non-empty array of GPU specs, got an empty array/,
    ],
    [
      "gpu name",
      { gpus: [{ name: "" }] },
      /gpus\[0\]\.name must be a non-empty string without NUL, got ""/,
    ],
    [
      "gpu memory",
      { gpus: [{}, { memoryMiB: -5 }] },
      /gpus\[1\]\.memoryMiB must be a finite number > 0, got -5/,
    ],
    [
      "gpu context",
      { gpus: [{ contextMiB: NaN }] },
      /gpus\[0\]\.contextMiB must be a finite number >= 0, got NaN/,
    ],
    ["gpu uuid", { gpus: [{ uuid: "GPU-nope" }] }, /gpus\[0\]\.uuid/],
    ["gpu typo", { gpus: [{ memMiB: 5 }] }, /gpus\[0\] has no option "memMiB"/],
    [
      "driverVersion",
      { driverVersion: "13.0" },
      /driverVersion must be an integer from 0, got "13\.0"/,
    ],
    ["seed", { seed: -1 }, /seed must be an integer from 0 to 4294967295, got -1/],
    ["firstPid", { firstPid: 0 }, /firstPid must be an integer from 1 to 2147483647, got 0/],
    ["unknown option", { gpu: 2 }, /SimulatedMachine options has no option "gpu"/],
    [
      "timing",
      { timing: { ...H200_TIMING, lockMs: -1 } },
      /timing\.lockMs must be a finite number >= 0, got -1/,
    ],
    [
      "timing of one figure: that figure named, not the first of those left out",
      { timing: { lockMs: -1 } },
      /timing\.lockMs must be a finite number >= 0, got -1/,
    ],
    [
      "timing of one good figure: a whole model asked for, those left out named",
      { timing: { lockMs: 5 } },
      /timing must be a whole model \(to change some figures: \{ \.\.\.H200_TIMING, lockMs: 5 \}\); it lacks checkpoint, restore, migrationMs, unlockMs, queryMs, rejectMs, oomMs, exitNoticeMs$/,
    ],
    [
      "timing with a copy's figures null (given, so checked, not taken as left out)",
      { timing: { ...H200_TIMING, checkpoint: null } },
      /timing\.checkpoint must be/,
    ],
    [
      "timing points",
      {
        timing: {
          ...H200_TIMING,
          restore: { ...H200_TIMING.restore, points: [[16, 100], [8, 200]] },
        },
      },
      /timing\.restore\.points must ascend/,
    ],
    [
      "timing points at one size twice (a step no rate can make)",
      {
        timing: {
          ...H200_TIMING,
          restore: { ...H200_TIMING.restore, points: [[16, 200], [16, 300]] },
        },
      },
      /timing\.restore\.points must ascend in memory and time from \[0, fixedMs\]; \[16, 300\] follows \[16, 200\]/,
    ],
    [
      "timing aggregate rate 0",
      {
        timing: {
          ...H200_TIMING,
          restore: { ...H200_TIMING.restore, aggregateBytesPerSecond: 0 },
        },
      },
      /timing\.restore\.aggregateBytesPerSecond must be a finite number > 0, got 0/,
    ],
    [
      "timing serialMs over fixedMs",
      { timing: { ...H200_TIMING, restore: { ...H200_TIMING.restore, fixedMs: 100 } } },
      /timing\.restore\.serialMs is more than its fixedMs/,
    ],
    [
      "timing serialMs",
      { timing: { ...H200_TIMING, checkpoint: { ...H200_TIMING.checkpoint, serialMs: -1 } } },
      /timing\.checkpoint\.serialMs must be a finite number >= 0, got -1/,
    ],
    [
      "timing serialPerOtherMs of a restore",
      { timing: { ...H200_TIMING, restore: { ...H200_TIMING.restore, serialPerOtherMs: -1 } } },
      /timing\.restore\.serialPerOtherMs must be a finite number >= 0, got -1/,
    ],
    [
      "timing serialPerOtherMs of a checkpoint",
      {
        timing: {
          ...H200_TIMING,
          checkpoint: { ...H200_TIMING.checkpoint, serialPerOtherMs: NaN },
        },
      },
      /timing\.checkpoint\.serialPerOtherMs must be a finite number >= 0, got NaN/,
    ],
    [
      "timing refusedMs",
      { timing: { ...H200_TIMING, refusedMs: -6 } },
      /timing\.refusedMs must be a finite number >= 0, got -6/,
    ],
  ];
  for (const [what, options, message] of rows) {
    test(what, () => assert.throws(bad(options), message));
  }
  test("timing points whose time stays flat (a size that costs no more) are taken", () => {
    const restore = {
      ...H200_TIMING.restore,
      fixedMs: 100,
      serialMs: 100,
      points: [[16, 100], [1024, 100]] as const,
    };
    new SimulatedMachine({ timing: { ...H200_TIMING, restore } }).close();
  });
});

describe("spawn and process inputs", () => {
  test("the last pid a process may have is 2^31 - 1, the kernel's most: one more is refused", () => {
    const edge = new SimulatedMachine({ firstPid: 2 ** 31 - 2 });
    assert.deepEqual(edge.spawn({ cuda: false, extraThreads: 1 }).threads, [
      2 ** 31 - 2,
      2 ** 31 - 1,
    ]);
    const over = new SimulatedMachine({ firstPid: 2 ** 31 - 2 });
    assert.throws(
      () => over.spawn({ cuda: false, extraThreads: 2 }),
      /no pids left after 2147483646/,
    );
  });

  const sim = new SimulatedMachine({ gpus: 2 });
  const rows: [string, () => unknown, RegExp | ((e: Error) => boolean)][] = [
    ["gpu [0, 0]", () => sim.spawn({ gpu: [0, 0] }), /spawn: gpu lists GPU 0 twice/],
    [
      "gpu 2",
      () => sim.spawn({ gpu: 2 }),
      /spawn: gpu 2 does not exist: this simulator has GPUs 0 to 1/,
    ],
    ["gpu []", () => sim.spawn({ gpu: [] }), /spawn: gpu must be a GPU index or a non-empty array/],
    [
      "extraThreads -1",
      () => sim.spawn({ extraThreads: -1 }),
      /spawn: extraThreads must be an integer from 0 to 100000, got -1/,
    ],
    [
      "extraThreads 1.5",
      () => sim.spawn({ extraThreads: 1.5 }),
      /extraThreads must be an integer .* got 1\.5/,
    ],
    [
      "memoryMiB -1",
      () => sim.spawn({ memoryMiB: -1 }),
      /spawn: memoryMiB must be a finite number >= 0, got -1/,
    ],
    [
      "memoryMiB NaN",
      () => sim.spawn({ memoryMiB: NaN }),
      /spawn: memoryMiB must be a finite number >= 0, got NaN/,
    ],
    [
      'memoryMiB "16" (a TypeError: no number at all)',
      () => sim.spawn({ memoryMiB: "16" as unknown as number }),
      (e: Error) =>
        e instanceof TypeError &&
        /memoryMiB must be a finite number >= 0, got "16"/.test(e.message),
    ],
    [
      "memory without CUDA",
      () => sim.spawn({ cuda: false, memoryMiB: 5 }),
      /cuda: false has no GPU memory, got memoryMiB 5/,
    ],
    [
      "memory NaN without CUDA (no number is no memory either)",
      () => sim.spawn({ cuda: false, memoryMiB: NaN }),
      /cuda: false has no GPU memory, got memoryMiB NaN/,
    ],
    [
      "cuda",
      () => sim.spawn({ cuda: "yes" as unknown as boolean }),
      /spawn: cuda must be true or false, got "yes"/,
    ],
    ["typo", () => sim.spawn({ memory: 5 } as never), /spawn options has no option "memory"/],
    [
      "launch(-1)",
      () => sim.spawn().launch(-1),
      /kernel duration \(ms\) must be a finite number >= 0, got -1/,
    ],
    [
      "write at -1",
      () => sim.spawn().write(-1, new Uint8Array(1)),
      /offset must be a non-negative integer, got -1/,
    ],
    [
      "write past the end",
      () => sim.spawn({ memoryMiB: 1 }).write(1048575, new Uint8Array(2)),
      /bytes 1048575 to 1048577 are outside the process's 1048576 bytes/,
    ],
    [
      "write a string",
      () => sim.spawn().write(0, "x" as never),
      /data must be a Uint8Array, got "x"/,
    ],
    ["read 1.5", () => sim.spawn().read(1.5, 1), /offset must be a non-negative integer, got 1\.5/],
    ["read length", () => sim.spawn().read(0, -2), /length must be a non-negative integer, got -2/],
    ["sleep", () => sim.sleep(NaN), /sleep: ms must be a finite number >= 0, got NaN/],
    [
      "failNext op",
      () => sim.spawn().failNext("bogus" as never, { code: 1 }),
      /failNext: the operation must be one of "getState", "getRestoreThreadId", "lock", "checkpoint", "restore", "unlock", got "bogus"/,
    ],
    [
      "failNext code",
      () => sim.spawn().failNext("lock", { code: "x" as never }),
      /failNext: fault.code \(a CUresult other than CUDA_SUCCESS\) must be an integer from 1 to 2147483647, got "x"/,
    ],
    [
      "failNext state",
      () => sim.spawn().failNext("lock", { code: 1, state: "weird" as never }),
      /failNext: fault.state must be one of "running", "locked", "checkpointed", "failed", got "weird"/,
    ],
  ];
  for (const [what, fn, message] of rows) {
    test(what, () => assert.throws(fn, message));
  }
});

describe("the raw simulated driver's inputs", () => {
  test("a lock timeout a C unsigned int cannot hold rejects as the native driver's does", async () => {
    await using sim = new SimulatedMachine();
    const pid = sim.spawn().pid;
    for (const timeoutMs of [-5, 1.5, 2 ** 32, Number.NaN]) {
      // The native driver's words for the same value: its encoding of the struct refuses it.
      let native = "";
      try {
        encodeLockArgs({ timeoutMs });
      } catch (error) {
        native = (error as Error).message;
      }
      assert.match(native, /LockArgs\.timeoutMs must be an integer/, String(timeoutMs));
      await assert.rejects(sim.driver.lock(pid, { timeoutMs }), {
        name: "RangeError",
        message: native,
      });
    }
    assert.deepEqual(await sim.driver.getState(pid), { code: 0, value: 0 }, "untouched: running");
    assert.equal(await sim.driver.lock(pid, { timeoutMs: 0xffff_ffff }), 0, "the largest is taken");
  });
});
