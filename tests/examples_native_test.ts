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
import { join } from "node:path";
import process from "node:process";
import { FakeDir, loud, noCompiler } from "./fixtures/fake.ts";
import { expectedFillHash, runExample } from "./examples_support.ts";

const fakes = noCompiler ? undefined : new FakeDir();
const library = fakes?.build("examples", ["-DFAKE_ONE_CHIP"], join(fakes.path, "libcuda.so.1"));
const env = { CKPT_LIBCUDA_PATH: library, CKPT_LIBNVML_PATH: undefined };
const SLOW = { timeout: 60_000, skip: noCompiler };
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

  test("counter_criu.ts: the whole workflow with criu (root and criu only)", {
    ...SLOW,
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
});
