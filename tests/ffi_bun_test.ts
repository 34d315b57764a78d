// Tests of the Bun adapter's worker pool (ffi/bun_pool.ts) through the native driver, on the fake
// libcuda: a worker thread that ends in the middle of a call, the pool's size, and where the
// worker script is found. The pool tests run on Bun only; they skip on Deno, which has no pool.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";

import { defaultWorkerUrl } from "../ffi/bun.ts";
import { openLibcudaDriver } from "../ffi/native.ts";
import { bunDefinition, CUDA_SYMBOLS } from "../ffi/symbols.ts";
import { FakeDir, noCompiler, runtime } from "./fixtures/fake.ts";

describe("where the worker script is", () => {
  test("next to the adapter, with the adapter's own extension", () => {
    assert.equal(
      defaultWorkerUrl("file:///pkg/ffi/bun.ts").href,
      "file:///pkg/ffi/bun_worker.ts",
    );
    assert.equal(
      defaultWorkerUrl("file:///node_modules/@ckpt/cuda/ffi/bun.js").href,
      "file:///node_modules/@ckpt/cuda/ffi/bun_worker.js",
      "the JavaScript that JSR's npm layer installs",
    );
    assert.equal(defaultWorkerUrl("file:///x/ffi/bun.mjs").href, "file:///x/ffi/bun_worker.mjs");
  });
});

const skip = noCompiler || (runtime === "bun" ? false : "the worker pool is Bun's");
const fakes = skip ? undefined : new FakeDir();
const path = fakes?.build("libcuda_pool") ?? "";
after(() => fakes?.remove());

/** A driver on the fake whose workers run tests/fixtures/dying_worker.ts. */
async function dyingDriver(maxWorkers: number) {
  const { bunAdapter } = await import("../ffi/bun.ts");
  const workerUrl = new URL("./fixtures/dying_worker.ts", import.meta.url);
  return openLibcudaDriver(await bunAdapter({ workerUrl }), { libraryPath: path, maxWorkers });
}

describe("Bun: a worker thread that ends in the middle of a call", { skip }, () => {
  for (
    const [pid, how, why] of [
      [666, "exits", /exit code 3/],
      [667, "throws", /the worker broke/],
    ] as const
  ) {
    test(`one that ${how}: its call rejects saying so, queued calls run on a new worker`, async () => {
      const d = await dyingDriver(1);
      try {
        const dying = d.lock(pid, null);
        const queued = [3101, 3102, 3103].map((p) => d.lock(p + pid * 10, null));
        await assert.rejects(dying, (error: unknown) => {
          assert.ok(error instanceof Error);
          assert.match(error.message, new RegExp(`^lock of process ${pid} could not finish`));
          assert.match(error.message, /cuCheckpointProcessLock/);
          assert.match(error.message, /worker thread running it ended before the call returned/);
          assert.match(error.message, why);
          return true;
        });
        assert.deepEqual(await Promise.all(queued), [0, 0, 0], "the queued calls ran");
        assert.deepEqual(await d.getState(3101 + pid * 10), { code: 0, value: 1 });
        assert.equal(d.workerCount, 1, "the lost worker was replaced, not added to");
      } finally {
        await d[Symbol.asyncDispose]();
      }
      assert.equal(d.workerCount, 0, "every worker ended");
    });
  }

  test("the pool is as large as the calls in flight, up to maxWorkers", async () => {
    const d = await dyingDriver(3);
    try {
      assert.equal(d.workerCount, 0, "no worker before a call needs one");
      const pids = [3201, 3202, 3203, 3204, 3205];
      await Promise.all(pids.map((pid) => d.lock(pid, null)));
      assert.ok(d.workerCount >= 1 && d.workerCount <= 3, `${d.workerCount} workers`);
      await Promise.all(pids.map((pid) => d.checkpoint(pid)));
      assert.equal(d.workerCount, 3, "3 checkpoints at once needed 3");
    } finally {
      d.close();
    }
  });
});

describe("Bun: idle workers", { skip }, () => {
  test("by default a worker is kept 10 s idle: the one timer a call sets is for that long", async () => {
    const { WorkerPool } = await import("../ffi/bun_pool.ts");
    const pool = new WorkerPool(new URL("../ffi/bun_worker.ts", import.meta.url));
    const symbol = "cuCheckpointProcessGetState";
    const definition = bunDefinition(CUDA_SYMBOLS[symbol]);
    const call = () =>
      pool.run({ path, symbol, definition, args: [3301, new Uint8Array(4)], links: [] });
    const real = globalThis.setTimeout;
    const set: number[] = [];
    try {
      globalThis.setTimeout = ((fn: () => void, ms?: number) => (
        set.push(ms ?? 0), real(fn, ms)
      )) as typeof setTimeout;
      assert.equal((await call()).code, 0);
    } finally {
      globalThis.setTimeout = real;
      await pool.close();
    }
    assert.deepEqual(set, [10_000], "the idle timer, 10 s");
  });

  test("a worker idle for the pool's idleMs ends (after a group of 64, 64 threads and 100 MiB stayed); a later call starts another", async () => {
    const { WorkerPool } = await import("../ffi/bun_pool.ts");
    const pool = new WorkerPool(new URL("../ffi/bun_worker.ts", import.meta.url), 600);
    const symbol = "cuCheckpointProcessGetState";
    const definition = bunDefinition(CUDA_SYMBOLS[symbol]);
    const call = () =>
      pool.run({ path, symbol, definition, args: [3301, new Uint8Array(4)], links: [] });
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const until = async (size: number) => {
      for (let i = 0; i < 500 && pool.size > size; i++) await sleep(20);
      return performance.now();
    };
    try {
      const t0 = performance.now();
      await Promise.all([call(), call()]);
      assert.equal(pool.size, 2, "two calls at once, two workers");
      await sleep(300);
      const t1 = performance.now();
      await call(); // one of them again: idle from now on
      assert.equal(pool.size, 2, "idle less than 600 ms: both kept");
      assert.ok((await until(1)) - t0 >= 600, "the first not ended before it idled 600 ms");
      assert.equal(pool.size, 1, "the one called again kept");
      assert.ok((await until(0)) - t1 >= 600, "the second not before 600 ms after its last call");
      assert.equal(pool.size, 0, "both ended once idle");
      assert.equal((await call()).code, 0);
      assert.equal(pool.size, 1, "a later call starts one");
    } finally {
      await pool.close();
    }
    assert.equal(pool.size, 0);
  });
});
