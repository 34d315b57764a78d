// Every input check: each bad value gets an error that names it and says what was expected.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { CudaProcess, runGroup } from "../mod.ts";
import { checkGpuMapping, checkPid, checkTimeoutMs } from "../core/options.ts";
import { formatGpuUuid, parseGpuUuid } from "../core/options.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { encodeGpuPairs, encodeLockArgs, encodeRestoreArgs } from "../ffi/structs.ts";

const A = "GPU-12345678-9abc-4def-8123-456789abcdef";
const B = "GPU-fedcba98-7654-4321-8fed-cba987654321";

describe("pid", () => {
  const bad: [unknown, RegExp][] = [
    [0, /got 0$/],
    [-1, /got -1$/],
    [2 ** 31, /got 2147483648$/],
    [1.5, /got 1\.5$/],
    [Number.NaN, /got NaN$/],
    ["123", /got "123"$/],
    [null, /got null$/],
    [undefined, /got undefined$/],
    [12n, /got 12n$/],
  ];
  for (const [value, named] of bad) {
    test(`rejects ${typeof value === "bigint" ? `${value}n` : JSON.stringify(value) ?? value}`, () => {
      assert.throws(() => new CudaProcess(value as number), (err: Error) => {
        assert.match(
          err.message,
          /pid must be an integer process or thread id from 1 to 2147483647/,
        );
        assert.match(err.message, named);
        // As Node's own checks: a TypeError for no number, a RangeError for a number out of place.
        assert.ok(err instanceof (typeof value === "number" ? RangeError : TypeError), err.name);
        return true;
      });
    });
  }
  test("accepts 1 and 2^31-1", () => {
    assert.equal(checkPid(1), 1);
    assert.equal(checkPid(2 ** 31 - 1), 2 ** 31 - 1);
    assert.equal(new CudaProcess(4242).pid, 4242);
  });
});

describe("timeoutMs", () => {
  const sim = new SimulatedMachine();
  const target = sim.spawn();
  const proc = new CudaProcess(target.pid, { machine: sim });
  const bad: [unknown, RegExp][] = [
    [-1, /got -1$/],
    [2 ** 32, /got 4294967296$/],
    [2.5, /got 2\.5$/],
    ["10", /got "10"$/],
    [Number.POSITIVE_INFINITY, /got Infinity$/],
    [Number.NaN, /got NaN$/],
  ];
  for (const [value, named] of bad) {
    test(`lock and suspend reject ${JSON.stringify(value) ?? value}`, async () => {
      for (
        const op of [
          () => proc.lock({ timeoutMs: value as number }),
          () => proc.suspend({ timeoutMs: value as number }),
        ]
      ) {
        await assert.rejects(op, (err: Error) => {
          assert.match(
            err.message,
            /timeoutMs must be an integer number of milliseconds from 0 \(no timeout\) to 4294967295/,
          );
          assert.match(err.message, named);
          assert.ok(err instanceof (typeof value === "number" ? RangeError : TypeError), err.name);
          return true;
        });
      }
      // The whole group's timeout (a timer's: at most 2^31-1) is checked the same way.
      await assert.rejects(
        runGroup("suspend", [target.pid], { machine: sim, timeoutMs: value as number }),
        typeof value === "number" ? RangeError : TypeError,
      );
      assert.equal(target.state, "running", "nothing reached the driver");
    });
  }
  test("a wait longer than a timer holds (2^31 ms) is refused, where it would end at once", async () => {
    const longest = /must be an integer from \d+ to 2147483647, got 2147483648$/;
    const group = runGroup("suspend", [target.pid], { machine: sim, timeoutMs: 2 ** 31 });
    await assert.rejects(group, longest);
    await assert.rejects(proc.waitForState("locked", { intervalMs: 2 ** 31 }), longest);
    await assert.rejects(proc.waitForState("locked", { timeoutMs: 2 ** 31 }), longest);
    assert.equal(target.state, "running");
  });
  test("accepts 0 (no timeout) and 2^32-1", () => {
    assert.equal(checkTimeoutMs(0), 0);
    assert.equal(checkTimeoutMs(2 ** 32 - 1), 2 ** 32 - 1);
  });
  test("options must be an object", async () => {
    await assert.rejects(
      () => proc.lock(5 as never),
      /^TypeError: lock's options must be a plain object with timeoutMs, got 5$/,
    );
    // A Map or a class's instance is an object, but not one of options: the message says so.
    assert.throws(
      () => new CudaProcess(4000, new Map([["machine", sim]]) as never),
      /^TypeError: CudaProcess's options must be a plain object with machine, got an object$/,
    );
  });
  test("an option that is not one is refused, naming it and the nearest one", async () => {
    await assert.rejects(
      () => proc.lock({ timeout: 5 } as never),
      /^TypeError: lock has no option "timeout" \(did you mean "timeoutMs"\?\); it takes timeoutMs$/,
    );
    assert.throws(
      () => new CudaProcess(4000, { machnie: 1 } as never),
      /^TypeError: CudaProcess has no option "machnie" \(did you mean "machine"\?\); it takes machine$/,
    );
  });
});

describe("GPU UUIDs and gpuMapping", () => {
  test("the three accepted forms parse to the same bytes", () => {
    const bare = A.slice(4).replaceAll("-", "");
    assert.deepEqual(parseGpuUuid(bare), parseGpuUuid(A));
    assert.deepEqual(parseGpuUuid(A.slice(4)), parseGpuUuid(A));
    assert.equal(formatGpuUuid(parseGpuUuid(bare.toUpperCase())), A);
  });
  const badUuids = [
    "GPU-123",
    "12345678-9abc-4def-8123-456789abcdeg",
    "GPU-12345678-9abc-4def-8123-456789abcdef0",
    "GPU-123456789abc-4def-8123-456789abcdef",
    "",
  ];
  for (const bad of badUuids) {
    test(`rejects key ${JSON.stringify(bad)}`, () => {
      assert.throws(() => checkGpuMapping({ [bad]: B }), (err: Error) => {
        assert.ok(err instanceof RangeError);
        assert.ok(
          err.message.includes(`gpuMapping key ${JSON.stringify(bad)} is not a GPU UUID`),
          err.message,
        );
        assert.match(
          err.message,
          /expected "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or 32 hex digits/,
        );
        return true;
      });
    });
  }
  test("names a bad value and the key it belongs to", () => {
    assert.throws(
      () => checkGpuMapping({ [A]: "GPU-nope" }),
      new RegExp(`gpuMapping\\["${A}"\\] "GPU-nope" is not a GPU UUID`),
    );
    assert.throws(
      () => checkGpuMapping({ [A]: 7 }),
      /gpuMapping\["GPU-.*"\] must be a string .* got 7/,
    );
  });
  test("explains MIG UUIDs", () => {
    assert.throws(
      () => checkGpuMapping({ "MIG-12345678-9abc-4def-8123-456789abcdef": B }),
      /MIG instance UUIDs cannot be remapped/,
    );
  });
  test("rejects a GPU named twice, in different spellings", () => {
    const m = new Map([[A, B], [A.slice(4).replaceAll("-", ""), A]]);
    assert.throws(
      () => checkGpuMapping(m),
      /gpuMapping names GPU "12345678.*" twice \(also as "GPU-12345678/,
    );
  });
  for (const bad of [null, "x", [A, B], 3, new Set([A])]) {
    test(`rejects a mapping that is ${Array.isArray(bad) ? "an array" : String(bad)}`, () => {
      assert.throws(
        () => checkGpuMapping(bad),
        /gpuMapping must be an object or Map from checkpointed GPU UUID to restore GPU UUID, got/,
      );
    });
  }
  test("a Map and a plain object give the same pairs", () => {
    assert.deepEqual(checkGpuMapping(new Map([[A, B]])), checkGpuMapping({ [A]: B }));
    assert.deepEqual(checkGpuMapping({}), []);
  });
  test("restore rejects a bad mapping before calling the driver", async () => {
    const sim = new SimulatedMachine();
    const t = sim.spawn();
    const proc = new CudaProcess(t.pid, { machine: sim });
    await proc.suspend();
    const before = sim.driver.calls.length;
    await assert.rejects(() => proc.resume({ gpuMapping: { [A]: "bad" } }), RangeError);
    assert.equal(sim.driver.calls.length, before);
    assert.equal(t.state, "checkpointed");
  });
});

describe("machine option", () => {
  test("rejects something that is not a machine", () => {
    assert.throws(
      () => new CudaProcess(10, { machine: {} as never }),
      /^TypeError: CudaProcess's machine must be a Machine \(a SimulatedMachine, or what openMachine resolves to\), got an object$/,
    );
    assert.throws(
      () => new CudaProcess(10, { machine: { driver: null } as never }),
      /^TypeError: CudaProcess's machine must be a Machine \(a SimulatedMachine, or what openMachine resolves to\), got an object$/,
      "a null driver is no driver (not one that lacks a call)",
    );
    assert.throws(
      () => new CudaProcess(10, { driver: {} } as never),
      /^TypeError: CudaProcess has no option "driver"; it takes machine$/,
    );
  });
});

describe("struct layouts (cuda.h 13.0)", () => {
  test("CUcheckpointLockArgs: u32 timeoutMs at 0, 64 bytes, reserved zero", () => {
    const b = encodeLockArgs({ timeoutMs: 0x01020304 });
    assert.equal(b.length, 64);
    assert.deepEqual([...b.subarray(0, 4)], [4, 3, 2, 1]);
    assert.ok(b.subarray(4).every((x) => x === 0));
    const r = new Uint8Array(60);
    r[0] = 9;
    assert.equal(encodeLockArgs({ timeoutMs: 0, reserved: r })[4], 9);
    assert.throws(() => encodeLockArgs({ timeoutMs: 0, reserved: new Uint8Array(61) }), /60 bytes/);
  });
  test("CUcheckpointGpuPair: old at 0, new at 16, 32 bytes each", () => {
    const a = parseGpuUuid(A), b = parseGpuUuid(B);
    const buf = encodeGpuPairs([{ oldUuid: a, newUuid: b }, { oldUuid: b, newUuid: a }]);
    assert.equal(buf.length, 64);
    assert.deepEqual(buf.subarray(0, 16), a);
    assert.deepEqual(buf.subarray(16, 32), b);
    assert.deepEqual(buf.subarray(32, 48), b);
    assert.equal(encodeGpuPairs([]).length, 32, "room for a valid pointer with count 0");
    // Either UUID of a pair short of 16 bytes is refused: the driver would read past it.
    const short = a.subarray(0, 15);
    for (const pair of [{ oldUuid: short, newUuid: b }, { oldUuid: a, newUuid: short }]) {
      assert.throws(
        () => encodeGpuPairs([{ oldUuid: a, newUuid: b }, pair]),
        /^RangeError: GPU pair 1: each CUuuid must have 16 bytes$/,
      );
    }
  });
  test("CUcheckpointRestoreArgs: pointer at 0, u32 count at 8", () => {
    const buf = encodeRestoreArgs(0x1122334455667788n, 3);
    const v = new DataView(buf.buffer);
    assert.equal(buf.length, 64);
    assert.equal(v.getBigUint64(0, true), 0x1122334455667788n);
    assert.equal(v.getUint32(8, true), 3);
    assert.ok(buf.subarray(12).every((x) => x === 0));
  });
});

describe("arrays with holes, and values that are not what they seem", () => {
  test("a hole among a group's targets is a missing pid, named, and nothing starts", async () => {
    const sim = new SimulatedMachine(), [a, b] = [sim.spawn(), sim.spawn()];
    // deno-lint-ignore no-sparse-arrays
    const group = runGroup("lock", [a.pid, , b.pid] as never, { machine: sim });
    await assert.rejects(group, /^TypeError: targets\[1\] must be .*got undefined$/);
    assert.deepEqual([a.state, b.state], ["running", "running"]);
  });

  test("the simulator's GPUs and a spawn's GPUs with holes, an nccl that is no object", () => {
    // deno-lint-ignore no-sparse-arrays
    const sim = new SimulatedMachine({ gpus: [{}, , { name: "NVIDIA H100" }] as never });
    assert.equal(sim.gpus.length, 3, "a hole is a GPU of the default kind, as undefined is");
    // deno-lint-ignore no-sparse-arrays
    assert.throws(
      () => sim.spawn({ gpu: [0, , 1] as never }),
      /^RangeError: spawn: gpu undefined does not/,
    );
    for (const nccl of [null, 0, ""]) {
      assert.throws(() => sim.spawn({ nccl } as never), /^TypeError: spawn: nccl must be a plain/);
    }
  });

  test("the simulator's sleep refuses a signal that is none", () => {
    const sim = new SimulatedMachine();
    assert.throws( // at once, as for its ms
      () => sim.sleep(10, "x" as never),
      /^TypeError: sleep: signal must be an AbortSignal, got "x"$/,
    );
  });

  test("the simulated driver's lock takes undefined arguments as none, as null", async () => {
    const sim = new SimulatedMachine(), p = sim.spawn();
    assert.equal(await sim.driver.lock(p.pid, undefined as never), 0);
    assert.equal(p.state, "locked");
  });
});
