// The examples' native path, without a GPU: the fake libcuda of tests/fixtures/fake_libcuda.c
// (built with every GPU one chip, and named libcuda.so.1 so that the listing finds the processes
// that map it) stands in for the driver, through CKPT_LIBCUDA_PATH. Its compute calls run the
// PTX's two kernels in C, so the bytes a kernel writes are checked against the host's computation;
// and, like the real driver, it blocks the CUDA calls of a process that has locked itself (for 3 s,
// then CUDA_ERROR_NOT_READY), so an example that made one between its lock and unlock would fail.
// What the fake cannot show: a process locked by *another* process does not block (its state
// lives in the caller), so preempt.ts's jobs keep stepping while "suspended" here.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { askCounter } from "../examples/counter.ts";
import { FakeDir, loud, noCompiler } from "./fixtures/fake.ts";
import { expectedFillHash, runExample, startExample } from "./examples_support.ts";

const fakes = noCompiler ? undefined : new FakeDir();
const library = fakes?.build("examples", ["-DFAKE_ONE_CHIP"], join(fakes.path, "libcuda.so.1"));
const env = { CKPT_LIBCUDA_PATH: library, CKPT_LIBNVML_PATH: undefined };
// Each example run is cut at 60 s (runExample): the test's limit is above that.
const SLOW = { timeout: 120_000, skip: noCompiler };
after(() => fakes?.remove());

/** criu, where this machine has it and the test runs as root: the whole CRIU workflow can run. */
const criu: string | undefined = (() => {
  if (process.getuid?.() !== 0) return undefined;
  const path = process.env.CKPT_TEST_CRIU ?? "criu";
  try {
    execFileSync(path, ["check"], { stdio: "ignore", timeout: 30_000 });
    return path;
  } catch {
    return undefined;
  }
})();

describe("examples on the native driver (the fake libcuda)", () => {
  test("self_checkpoint.ts: the kernel's bytes, the four steps on itself, PASS", SLOW, async () => {
    const run = await runExample("self_checkpoint.ts", [], env);
    assert.equal(run.code, 0, run.out + run.err);
    assert.equal(run.lines[0], `NVIDIA driver found (CUDA 13.0, ${library}).`);
    assert.match(run.out, /^PID: +\d+$/m);
    assert.match(
      run.out,
      /^Device: +Fake GPU \(GPU 0, GPU-01010101-0101-0101-0101-010101010101\)$/m,
    );
    assert.match(run.out, /^Compute capability: sm_90$/m);
    assert.match(run.out, /^Loaded the fill kernel \(PTX compiled by the driver for sm_90\)/m);
    assert.match(run.out, /^Kernel output against the host's computation .*: identical$/m);
    const hash = expectedFillHash(16).slice(0, 16);
    assert.match(run.out, new RegExp(`^Buffer hash \\(before\\): ${hash}$`, "m"));
    assert.match(run.out, new RegExp(`^Buffer hash \\(after\\):  ${hash}$`, "m"));
    for (
      const [step, state] of [["lock", "locked"], ["checkpoint", "checkpointed"], [
        "restore",
        "locked",
      ], ["unlock", "running"]]
    ) {
      assert.match(run.out, new RegExp(`^${step} +[\\d.]+ +${state}$`, "m"));
    }
    const pid = Number(/^PID: +(\d+)$/m.exec(run.out)![1]);
    assert.match(run.out, new RegExp(`^Restore thread id: ${pid + 1} `, "m"));
    assert.match(run.out, /^GPU memory this process holds: unknown/m);
    assert.match(run.out, /^PASS: GPU buffer contents survived checkpoint\/restore\.$/m);
  });

  test(
    "migrate.ts: the process moves to GPU 1 and back, as cuCtxGetDevice says",
    SLOW,
    async () => {
      const run = await runExample("migrate.ts", ["--buffer-mib", "16"], env);
      assert.equal(run.code, 0, run.out + run.err);
      assert.match(run.out, /^Process \d+ \(this program\): 16 MiB buffer on GPU 0/m);
      assert.match(run.out, /^1 +GPU 0 -> GPU 1 +[\d.]+ +[\d.]+ +GPU 1 +unknown /m);
      assert.match(run.out, /^2 +GPU 1 -> GPU 0 +[\d.]+ +[\d.]+ +GPU 0 +unknown /m);
      assert.match(run.out, /^PASS: the process went round 2 GPUs/m);
    },
  );

  test(
    "counter.ts counts in (fake) GPU memory; snapshot_all.ts finds it and suspends it",
    SLOW,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "ckpt-counter-test-"));
      const unix = join(dir, "counter.sock");
      const counter = startExample("counter.ts", ["--unix", unix], env);
      try {
        const pid = Number(
          (await counter.waitFor(/^counter ready: pid (\d+), unix .* on Fake GPU \(GPU 0\)$/m))[1],
        );
        assert.equal(await askCounter({ unix }), 101);
        const listed = await runExample("snapshot_all.ts", [], env);
        assert.equal(listed.code, 0, listed.out + listed.err);
        assert.match(
          listed.out,
          new RegExp(`^${pid} +running +unknown +.*counter\\.ts --unix`, "m"),
        );
        assert.match(listed.out, /^Not suspending: .* Run again with --yes to do it\.$/m);
        const done = await runExample("snapshot_all.ts", ["--yes"], env);
        assert.equal(done.code, 0, done.out + done.err);
        assert.match(
          done.out,
          new RegExp(`^${pid} +.*counter\\.ts.* +unknown( +[\\d.]+){4} +done, running$`, "m"),
        );
        assert.match(done.out, /^PASS: \d+ processes suspended and resumed together/m);
        assert.equal(await askCounter({ unix }), 102);
      } finally {
        await counter.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  test(
    "preempt.ts: its jobs are processes of its own, suspended and resumed together",
    SLOW,
    async () => {
      const run = await runExample("preempt.ts", ["--low-mib", "16", "--high-mib", "32"], env);
      assert.match(run.out, /^Low-priority job: 2 process\(es\) of 16 MiB \(pids \d+, \d+\)/m);
      assert.equal(
        run.out.match(
          /preempt\.ts --job low \(rank \d\) +unknown +[\d.]+ +[\d.]+ +done, checkpointed$/gm,
        )?.length,
        2,
      );
      assert.match(
        run.out,
        /^High-priority job: 32 MiB on GPU 0 \(\d+ MiB were free when it started\), filled and checked/m,
      );
      assert.equal(
        run.out.match(
          /preempt\.ts --job low \(rank \d\) +unknown +[\d.]+ +[\d.]+ +done, running$/gm,
        )?.length,
        2,
      );
      assert.match(run.out, /^Their data \(the first 16 MiB of each buffer\): intact\.$/m);
      // The fake does not block a process that another one locked, so the steps went on meanwhile:
      // the check that they carried on from where they were says so (on a GPU it holds).
      assert.match(run.out, /^Each process carried on from its step: /m);
    },
  );

  // The examples with criu: a run may take up to 120 s on a slow machine, the test a little more.
  const WITH_CRIU = { timeout: 150_000 };

  test("counter_criu.ts: the whole workflow with criu (root and criu only)", {
    ...WITH_CRIU,
    skip: noCompiler ||
      (criu ? false : loud("counter_criu.ts with criu needs root and criu (or CKPT_TEST_CRIU)")),
  }, async () => {
    const run = await runExample("counter_criu.ts", ["--criu", criu!], env, 120_000);
    assert.equal(run.code, 0, run.out + run.err);
    assert.match(run.out, /^6\. criu dump --tree \d+ .*; the counter is gone$/m);
    assert.match(run.out, /^7\. criu restore .*; pid \d+ is back, its CUDA state checkpointed$/m);
    assert.match(run.out, /^9\. Asked it again: 102$/m);
    assert.match(
      run.out,
      /^PASS: the counter answered 101, then 102 after a CRIU dump and restore\.$/m,
    );
  });

  test(
    "snapshot.ts: the counter to disk and back through the library and criu (root and criu only)",
    {
      ...WITH_CRIU,
      skip: noCompiler ||
        (criu ? false : loud("snapshot.ts with criu needs root and criu (or CKPT_TEST_CRIU)")),
    },
    async () => {
      // The library finds criu itself: CKPT_CRIU_PATH where the test was given a path.
      const withCriu = criu!.includes("/") ? { ...env, CKPT_CRIU_PATH: criu } : env;
      const run = await runExample("snapshot.ts", [], withCriu, 120_000);
      assert.equal(run.code, 0, run.out + run.err);
      assert.equal(run.lines[0], `NVIDIA driver found (CUDA 13.0, ${library}).`);
      assert.match(run.out, /^criu [\d.]+ is ready\.$/m);
      assert.match(run.out, /^2\. Asked it: 101$/m);
      assert.match(run.out, /^3\. Snapshot in .*: 1 process\(es\), .* in all$/m);
      assert.match(run.out, /^4\. The counter is gone$/m);
      assert.match(run.out, /^5\. Restored: pid \d+ is back, in [\d.]+ s$/m);
      assert.match(run.out, /^6\. Asked it again: 102$/m);
      assert.match(
        run.out,
        /^PASS: the counter answered 101, then 102 after a snapshot and its restore\.$/m,
      );
    },
  );
});
