// `cuda-checkpoint` on the native driver, through the fake libcuda of tests/fixtures/fake_libcuda.c:
// as a program (this runtime running cli/main.ts, as `deno install` or `bun` would), and in-process
// with the fake's counters (no cuInit for --get-state and --get-restore-tid). Also the native
// driver's `callingThread` option, which the command line uses for one pid, and where a Bun
// standalone executable finds the worker script. Runs under `deno test -A` and `bun test`; the
// fake-libcuda tests skip (loudly) without a C compiler.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";

import { defaultWorkerUrl } from "../ffi/bun.ts";
import { openNativeDriver } from "../ffi/native.ts";
import type { LibcudaDriver } from "../ffi/native.ts";
import { assertPrinted, cli, type Exited, runProgram } from "./cli_support.ts";
import { FakeDir, noCompiler, othersThan, runtime, withCounters } from "./fixtures/fake.ts";

const MAIN = new URL("../cli/main.ts", import.meta.url).pathname;
const fakes = noCompiler ? undefined : new FakeDir();
const fake = fakes?.build("libcuda_cli") ?? "";
after(() => fakes?.remove());

/** Runs cli/main.ts as a program on this runtime, with the fake libcuda. */
function program(args: string[]): Promise<Exited> {
  const runArgs = runtime === "deno" ? ["run", "-A", MAIN, ...args] : [MAIN, ...args];
  return runProgram(process.execPath, runArgs, { CKPT_LIBCUDA_PATH: fake });
}

describe("cuda-checkpoint as a program, on the fake libcuda", { skip: noCompiler }, () => {
  // No live process or thread (the program takes a thread id for its process).
  const [a, b, c] = othersThan(process.pid, 4242, 4252, 4262);

  test("--get-state and --get-restore-tid print the state and the thread id", async () => {
    assertPrinted(await program(["--get-state", "--pid", `${a}`]), "running\n");
    assertPrinted(await program(["--get-restore-tid", "-p", `${a}`]), `${a + 1}\n`);
  });

  test("a pid that does not exist: NVIDIA's line with the library's own text, exit 1", async () => {
    assert.deepEqual(await program(["--get-state", "--pid", "999999"]), {
      code: 1,
      out: "",
      err:
        'Error getting process state for process ID 999999: "OS call failed or operation not supported on this OS"\n',
    });
  });

  test("--toggle of several pids works them through the driver's threads", async () => {
    const r = await program(["--toggle", "--pid", `${a},${b},${c}`, "--json"]);
    assert.equal(r.code, 0, r.err);
    const lines = r.out.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => [l.pid, l.status, l.state]), [
      [a, "done", "checkpointed"],
      [b, "done", "checkpointed"],
      [c, "done", "checkpointed"],
    ]);
  });

  test("a usage error needs no driver: the program runs without libcuda", async () => {
    const r = await program(["--get-state", "--pid", "abc"]);
    assert.equal(r.code, 1);
    assert.match(r.err, /^pid must be a non-negative integer\n/);
  });
});

describe("in-process on the native driver", { skip: noCompiler }, () => {
  test("--get-state, --get-restore-tid and a lock of another process call no cuInit", async () => {
    const [pid] = othersThan(process.pid, 777); // this test's own pid would be a lock of itself
    const driver = await openNativeDriver({ libraryPath: fake, callingThread: true });
    try {
      await withCounters(fake, async (counters) => {
        const before = counters.fake_init_count();
        const run = (...args: (string | number)[]) => cli(args, { machine: { driver } });
        assert.equal((await run("--get-state", "-p", pid)).out, "running\n");
        assert.equal((await run("--get-restore-tid", "-p", pid)).out, `${pid + 1}\n`);
        assert.equal(counters.fake_init_count(), before, "no cuInit for the queries");
        assert.equal((await run("--action", "lock", "-p", pid)).code, 0);
        assert.equal(counters.fake_init_count(), before, "none for another process's lock either");
        assert.equal((await run("--get-state", "-p", pid)).out, "locked\n");
        assert.equal((await run("--action", "unlock", "-p", pid)).code, 0);
      });
    } finally {
      await driver[Symbol.asyncDispose]();
    }
  });
});

describe("the native driver's callingThread option", { skip: noCompiler }, () => {
  test("calls are made on the calling thread: on Bun no worker starts", async () => {
    const driver = await openNativeDriver({ libraryPath: fake, callingThread: true });
    try {
      assert.deepEqual(await driver.getState(888), { code: 0, value: 0 });
      assert.equal(await driver.lock(888, { timeoutMs: 1000 }), 0);
      assert.equal(await driver.unlock(888), 0);
      assert.equal((driver as LibcudaDriver).workerCount, 0, "no thread of ours");
    } finally {
      await driver[Symbol.asyncDispose]();
    }
  });

  test(
    "without it, Bun's calls run on workers",
    { skip: runtime !== "bun" && "Bun's" },
    async () => {
      const driver = await openNativeDriver({ libraryPath: fake });
      try {
        assert.deepEqual(await driver.getState(889), { code: 0, value: 0 });
        assert.equal((driver as LibcudaDriver).workerCount, 1);
      } finally {
        await driver[Symbol.asyncDispose]();
      }
    },
  );

  test("must be a boolean", async () => {
    await assert.rejects(
      // deno-lint-ignore no-explicit-any
      openNativeDriver({ libraryPath: fake, callingThread: "yes" as any }),
      (error: unknown) =>
        error instanceof TypeError && /callingThread must be true or false, got "yes"/.test(
          error.message,
        ),
    );
  });
});

describe("the worker script in a Bun standalone executable", () => {
  test("is the build's entry point ffi/bun_worker, under the executable's root", () => {
    assert.equal(
      defaultWorkerUrl("file:///$bunfs/root/cuda-checkpoint").href,
      "file:///$bunfs/root/ffi/bun_worker.js",
    );
  });
});
