// The examples run, as a user runs them, with this test's runtime: on a machine without a GPU
// (CI) they say so plainly and run on the simulated driver; on a GPU machine, on the GPU.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";

const isDeno = "Deno" in globalThis;

/** Runs an example with this runtime; resolves its exit code and output. */
function runExample(file: string): Promise<{ code: number; out: string }> {
  const path = new URL(`../examples/${file}`, import.meta.url).pathname;
  const args = isDeno ? ["run", "-A", path] : [path];
  return new Promise((resolve) => {
    execFile(process.execPath, args, { timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
      resolve({ code, out: `${stdout}${stderr}` });
    });
  });
}

describe("examples", () => {
  test("self_checkpoint.ts: a round trip with its memory intact, on the simulator without a GPU", async () => {
    const { code, out } = await runExample("self_checkpoint.ts");
    assert.equal(code, 0, out);
    if (/NVIDIA driver found/.test(out)) {
      assert.match(out, /GPU memory \(16 MiB of random bytes\) intact/);
      return;
    }
    const lines = out.split("\n");
    assert.match(lines[0], /^No usable NVIDIA driver here \(.+\)\.$/, "the first line says why");
    assert.match(lines[1], /^Running on the SIMULATED driver instead/);
    assert.match(out, /^process \d+: running, \d+ MiB on NVIDIA H200 GPU-[0-9a-f-]{36}$/m);
    assert.match(
      out,
      /^suspended in \d+ ms: checkpointed, GPU memory now in host memory, 0 MiB left on the GPU$/m,
    );
    assert.match(out, /^resumed in \d+ ms: running, \d+ MiB back on the GPU$/m);
    assert.match(out, /^GPU memory \(16 MiB, SHA-256 [0-9a-f]{16}…\) intact$/m);
  });
});
