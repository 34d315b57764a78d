// Random bad values for every input of the API, the simulator and the command line: each is
// refused before anything reaches the driver, with a TypeError or RangeError (a usage error and
// exit 1 on the command line) whose message names the value. fast-check makes the values
// (seeded; CKPT_FUZZ_SEED and CKPT_FUZZ_RUNS to explore). Runs under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import fc from "fast-check";

import { CudaProcess, listCudaProcesses, runGroup } from "../mod.ts";
import { parseGpuUuid } from "../core/options.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { describeValue } from "../core/options.ts";
import { simulatedClock } from "../cli/simulate.ts";
import { cli } from "./cli_support.ts";

const SEED = Number(process.env.CKPT_FUZZ_SEED || 1121);
const RUNS = Number(process.env.CKPT_FUZZ_RUNS || 60);
const settings = { numRuns: RUNS, seed: SEED };

const sim = new SimulatedMachine({ gpus: 2 });
const target = sim.spawn({ memoryMiB: 16 });
const proc = new CudaProcess(target.pid, { machine: sim });

/** Any value at all, small, with the awkward numbers in it. */
const anything = fc.oneof(
  fc.anything({ maxDepth: 1, withBigInt: true, withNullPrototype: true }),
  fc.double(),
  fc.constantFrom(NaN, Infinity, -Infinity, -0, 2 ** 31, 2 ** 32, 2 ** 53, -1, 0.5, "", " "),
);
const isInt = (v: unknown, min: number, max: number) =>
  typeof v === "number" && Number.isInteger(v) && v >= min && v <= max;

/**
 * Asserts that `run` throws (or rejects with) a TypeError or RangeError whose message names
 * `value`, and that the driver was not called.
 */
async function refused(value: unknown, run: () => unknown): Promise<void> {
  const calls = sim.driver.calls.length;
  let error: unknown;
  try {
    await run();
  } catch (err) {
    error = err;
  }
  assert.ok(
    error instanceof TypeError || error instanceof RangeError,
    `a TypeError or RangeError for ${describeValue(value)}, got ${error}`,
  );
  assert.ok(
    error.message.includes(describeValue(value)),
    `the message names ${describeValue(value)}: ${error.message}`,
  );
  assert.equal(sim.driver.calls.length, calls, "nothing reached the driver");
}

/** A property over the bad values of `bad`: each one is refused, naming it. */
function each<T>(bad: fc.Arbitrary<T>, run: (value: T) => unknown): Promise<void> {
  return fc.assert(fc.asyncProperty(bad, (v) => refused(v, () => run(v))), settings);
}

const badPid = anything.filter((v) => !isInt(v, 1, 2 ** 31 - 1));
const badTimeout = anything.filter((v) => v !== undefined && !isInt(v, 0, 2 ** 32 - 1));
const notObject = anything.filter((v) =>
  v !== undefined && (typeof v !== "object" || v === null || Array.isArray(v))
);
const notUuid = fc.string({ maxLength: 40 }).filter((s) => {
  try {
    parseGpuUuid(s);
    return false;
  } catch {
    return true;
  }
});

describe("the library's inputs", () => {
  test("pids: the constructor, group targets", async () => {
    await each(badPid, (v) => new CudaProcess(v as number, { machine: sim }));
    await each(
      badPid,
      (v) => runGroup("suspend", [target.pid + 1000, v as number], { machine: sim }),
    );
  });

  test("options objects and the driver", async () => {
    await each(notObject, (v) => new CudaProcess(target.pid, v as never));
    // Functions too: one used to open a driver, and is now refused as not a machine.
    const notMachine = fc.oneof(
      notObject,
      fc.func(anything),
      fc.constantFrom(() => sim, () => Promise.resolve(sim), () => Promise.resolve(sim.driver)),
    );
    await each(notMachine, (v) => new CudaProcess(target.pid, { machine: v as never }));
    await each(notObject, (v) => proc.lock(v as never));
    await each(notObject, (v) => proc.resume(v as never));
    await each(notObject, (v) => proc.waitForState("running", v as never));
    await each(notObject, (v) => runGroup("lock", [target.pid], v as never));
    await each(notObject, (v) => listCudaProcesses(v as never));
  });

  test("lock timeouts: lock, suspend, toggle, groups", async () => {
    await each(badTimeout, (v) => proc.lock({ timeoutMs: v as number }));
    await each(badTimeout, (v) => proc.suspend({ timeoutMs: v as number }));
    await each(badTimeout, (v) => proc.toggle({ timeoutMs: v as number }));
    await each(
      badTimeout,
      (v) => runGroup("suspend", [target.pid], { machine: sim, lockTimeoutMs: v as number }),
    );
  });

  test("checkRoom: restore, resume, toggle", async () => {
    const notBoolean = anything.filter((v) => v !== undefined && typeof v !== "boolean");
    await each(notBoolean, (v) => proc.restore({ checkRoom: v as boolean }));
    await each(notBoolean, (v) => proc.resume({ checkRoom: v as boolean }));
    await each(notBoolean, (v) => proc.toggle({ checkRoom: v as boolean }));
  });

  test("GPU mappings: the mapping, its keys, its values", async () => {
    const gpu = sim.gpus[0].uuid;
    const notMapping = anything.filter((v) =>
      v !== undefined && !(v instanceof Map) &&
      (typeof v !== "object" || v === null || Array.isArray(v) ||
        (Object.getPrototypeOf(v) !== Object.prototype && Object.getPrototypeOf(v) !== null))
    );
    await each(notMapping, (v) => proc.restore({ gpuMapping: v as never }));
    await each(notUuid, (key) => proc.resume({ gpuMapping: { [key]: gpu } }));
    await each(notUuid, (value) => proc.restore({ gpuMapping: { [gpu]: value } }));
    await each(
      notUuid,
      (value) => runGroup("resume", [target.pid], { machine: sim, gpuMapping: { [gpu]: value } }),
    );
  });

  test("waitForState: the state, the timeout, the interval, the signal", async () => {
    await each(
      anything.filter((v) =>
        !["running", "locked", "checkpointed", "failed"].includes(v as string)
      ),
      (v) => proc.waitForState(v as never),
    );
    const badCount = (min: number) =>
      anything.filter((v) => v !== undefined && !isInt(v, min, Infinity));
    await each(badCount(0), (v) => proc.waitForState("running", { timeoutMs: v as number }));
    await each(badCount(1), (v) => proc.waitForState("running", { intervalMs: v as number }));
    await each(
      anything.filter((v) => v !== undefined),
      (v) => proc.waitForState("locked", { signal: v as never }),
    );
  });

  test("groups: the action, the targets, every option", async () => {
    const actions = ["suspend", "resume", "toggle", "lock", "checkpoint", "restore", "unlock"];
    await each(
      anything.filter((v) => !actions.includes(v as string)),
      (v) => runGroup(v as never, [target.pid], { machine: sim }),
    );
    await each(
      anything.filter((v) => !Array.isArray(v)),
      (v) => runGroup("lock", v as never, { machine: sim }),
    );
    const option = (key: string, ok: (v: unknown) => boolean) =>
      each(
        anything.filter((v) => v !== undefined && !ok(v)),
        (v) => runGroup("lock", [target.pid], { machine: sim, [key]: v }),
      );
    await option("concurrency", (v) => isInt(v, 1, Infinity));
    await option("timeoutMs", (v) => isInt(v, 0, Infinity));
    await option("allOrNothing", (v) => typeof v === "boolean");
    await option("rollBackOnAbort", (v) => typeof v === "boolean");
    await option("gpuMemory", (v) => typeof v === "boolean");
    await option("checkRoom", (v) => typeof v === "boolean");
    await option("signal", (v) => v instanceof AbortSignal);
    await option("onProgress", (v) => typeof v === "function");
    await option(
      "machine",
      (v) =>
        typeof v === "object" && v !== null &&
        typeof (v as { driver?: { getState?: unknown } }).driver?.getState === "function",
    );
    await each(
      fc.string({ minLength: 1, maxLength: 12 }).filter((k) =>
        !["machine", "concurrency", "allOrNothing", "rollBackOnAbort", "timeoutMs", "signal"]
          .concat(["lockTimeoutMs", "gpuMapping", "onProgress", "gpuMemory", "job", "checkRoom"])
          .includes(k)
      ),
      (k) => runGroup("lock", [target.pid], { machine: sim, [k]: true } as never),
    );
  });
});

describe("the simulator's inputs", () => {
  test("the driver's options", async () => {
    const option = (key: string, ok: (v: unknown) => boolean) =>
      each(
        anything.filter((v) => v !== undefined && !ok(v)),
        (v) => new SimulatedMachine({ [key]: v } as never),
      );
    await option("driverVersion", (v) => isInt(v, 0, Number.MAX_SAFE_INTEGER));
    await option("seed", (v) => isInt(v, 0, 2 ** 32 - 1));
    await option("firstPid", (v) => isInt(v, 1, 2 ** 31 - 1));
    await option("gpus", (v) => isInt(v, 1, 1024) || (Array.isArray(v) && v.length > 0));
    await option("clock", (v) => v === "virtual" || v === "real");
    await each(
      anything.filter((v) => v !== undefined && !(typeof v === "number" && v > 0 && v < Infinity)),
      (v) => new SimulatedMachine({ clock: "real", speed: v as number }),
    );
  });

  test("spawn's options", async () => {
    const option = (key: string, ok: (v: unknown) => boolean) =>
      each(anything.filter((v) => v !== undefined && !ok(v)), (v) => sim.spawn({ [key]: v }));
    await option("memoryMiB", (v) => typeof v === "number" && v >= 0 && v < Infinity);
    await option("gpu", (v) => isInt(v, 0, 1) || Array.isArray(v));
    await option("extraThreads", (v) => isInt(v, 0, 100_000));
    await option("command", (v) => typeof v === "string" && v.trim() !== "");
    await option("inspectable", (v) => typeof v === "boolean");
    await option("libcuda", (v) => typeof v === "boolean");
  });

  test("faults: the operation, the code, the state, which call, when, the answer", async () => {
    const ops = ["getState", "getRestoreThreadId", "lock", "checkpoint", "restore", "unlock"];
    await each(
      anything.filter((v) => !ops.includes(v as string)),
      (v) => target.failNext(v as never, { code: 1 }),
    );
    const field = (make: (v: unknown) => unknown, ok: (v: unknown) => boolean) =>
      each(anything.filter((v) => v !== undefined && !ok(v)), make);
    await field(
      (v) => target.failNext("lock", { code: v as number }),
      (v) => isInt(v, 1, 2 ** 31 - 1),
    );
    await field(
      (v) => target.failNext("lock", { code: 1, state: v as never }),
      (v) => ["running", "locked", "checkpointed", "failed"].includes(v as string),
    );
    await field(
      (v) => target.failNext("lock", { code: 1, nth: v as number }),
      (v) => isInt(v, 1, 1e6),
    );
    await field(
      (v) => target.exitDuring("lock", { afterMs: v as number }),
      (v) => typeof v === "number" && v >= 0 && v < Infinity,
    );
    await field((v) => target.hangNext("lock", { nth: v as number }), (v) => isInt(v, 1, 1e6));
    await field(
      (v) => target.answerNext("getState", { value: v as number }),
      (v) => isInt(v, 0, 2 ** 31 - 1),
    );
    await field((v) => sim.fillGpu(v as number), (v) => isInt(v, 0, 1));
    target.clearFaults();
  });
});

describe("the command line's options, with what it says on a terminal", () => {
  /** Runs the command line; asserts a usage error (exit 1) whose lines name `named`. */
  async function usage(args: string[], named: string, env: Record<string, string> = {}) {
    const calls = sim.driver.calls.length;
    const r = await cli(args, { machine: sim, isTerminal: true, env });
    assert.equal(r.code, 1, `${JSON.stringify(args)}: ${r.err}`);
    assert.ok(
      r.errLines.some((l) => l.includes(named)),
      `${JSON.stringify(args)}: the error names ${named}: ${r.errLines.join(" / ")}`,
    );
    assert.equal(sim.driver.calls.length, calls, "nothing reached the driver");
  }
  const text = fc.string({ maxLength: 24 });
  const quoted = (s: string) => JSON.stringify(s);

  test("--pid", async () => {
    const bad = text.filter((s) => s.split(",").some((p) => !/^[0-9]+$/.test(p)));
    await fc.assert(
      fc.asyncProperty(
        bad,
        (v) =>
          usage(
            ["--get-state", "--pid", v],
            quoted(v.split(",").find((p) => !/^[0-9]+$/.test(p))!),
          ),
      ),
      settings,
    );
    // Beyond a C int: NVIDIA's "pid must be a non-negative integer" (0 goes to the driver).
    const outOfRange = fc.bigInt({ min: 2n ** 31n, max: 10n ** 20n });
    await fc.assert(
      fc.asyncProperty(outOfRange, (v) => usage(["--get-state", "--pid", String(v)], String(v))),
      settings,
    );
  });

  test("--timeout, --action, --device-map", async () => {
    const badTimeoutText = text.filter((s) => !/^[0-9]+$/.test(s) || Number(s) > 2 ** 32 - 1);
    await fc.assert(
      fc.asyncProperty(
        badTimeoutText,
        (v) => usage(["--action", "lock", "--pid", "1", "--timeout", v], quoted(v)),
      ),
      settings,
    );
    const badAction = text.filter((s) => !["lock", "checkpoint", "restore", "unlock"].includes(s));
    await fc.assert(
      fc.asyncProperty(badAction, (v) => usage(["--action", v, "--pid", "1"], quoted(v))),
      settings,
    );
    const gpu = sim.gpus[0].uuid;
    await fc.assert(
      fc.asyncProperty(
        notUuid.filter((v) => !/[=,]/.test(v)),
        (v) =>
          usage(["--action", "restore", "--pid", "1", "--device-map", `${gpu}=${v}`], quoted(v)),
      ),
      settings,
    );
    await fc.assert(
      fc.asyncProperty(
        text.filter((s) => !s.includes("=") && !s.includes(",")),
        (v) => usage(["--action", "restore", "--pid", "1", "--device-map", v], quoted(v)),
      ),
      settings,
    );
  });

  test("--simulate spawn's --memory-mib and --gpu", async () => {
    const notCount = text.filter((s) => !/^[0-9]+$/.test(s));
    await fc.assert(
      fc.asyncProperty(
        notCount,
        (v) => usage(["--simulate", "spawn", "--memory-mib", v], quoted(v)),
      ),
      settings,
    );
    await fc.assert(
      fc.asyncProperty(notCount, (v) => usage(["--simulate", "spawn", "--gpu", v], quoted(v))),
      settings,
    );
    // A command line of only blanks: refused by the simulator, in a state file of the test's.
    const dir = mkdtempSync(join(tmpdir(), "ckpt-fuzz-"));
    try {
      const env = { CKPT_SIM_STATE: join(dir, "machine.json") };
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom("", " ", "\t", "  \n "),
          (v) => usage(["--simulate", "spawn", "--command", v], quoted(v), env),
        ),
        { ...settings, numRuns: Math.min(RUNS, 8) },
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("CKPT_SIM_CLOCK and CKPT_SIM_SPEED", async () => {
    const notClock = text.filter((s) => s !== "" && s !== "virtual" && s !== "real");
    await fc.assert(
      fc.property(notClock, (v) => {
        assert.throws(() => simulatedClock({ CKPT_SIM_CLOCK: v }), (err: unknown) => {
          assert.ok(err instanceof RangeError);
          assert.ok(
            err.message.includes(`CKPT_SIM_CLOCK must be "virtual" or "real", got ${quoted(v)}`),
          );
          return true;
        });
      }),
      settings,
    );
    const notSpeed = text.filter((s) => s !== "" && !(Number(s) > 0 && Number(s) < Infinity));
    await fc.assert(
      fc.property(notSpeed, (v) => {
        assert.throws(
          () => simulatedClock({ CKPT_SIM_CLOCK: "real", CKPT_SIM_SPEED: v }),
          (err: unknown) => err instanceof RangeError && err.message.includes(quoted(v)),
        );
      }),
      settings,
    );
    // 0 is no speed, though it reads as a number; a speed without the real clock is refused too.
    for (const v of ["0", "0.0", "0e5"]) {
      assert.throws(
        () => simulatedClock({ CKPT_SIM_CLOCK: "real", CKPT_SIM_SPEED: v }),
        new RegExp(`^RangeError: CKPT_SIM_SPEED must be a positive number .*got "${v}"$`),
      );
    }
    assert.throws(
      () => simulatedClock({ CKPT_SIM_SPEED: "10" }),
      /^RangeError: CKPT_SIM_SPEED works with the real clock only: set CKPT_SIM_CLOCK=real$/,
    );
    // And from the command line: one line, exit 1.
    const r = await cli(["--simulate", "--get-state", "--pid", "1"], {
      env: { CKPT_SIM_CLOCK: "sideways" },
    });
    assert.deepEqual([r.code, r.err], [
      1,
      'cuda-checkpoint: CKPT_SIM_CLOCK must be "virtual" or "real", got "sideways"\n',
    ]);
  });
});
