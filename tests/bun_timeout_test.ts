// `bun test` with the project's configuration gives every test file 60 s a test, not only the
// first: Bun (1.4.5) reads no timeout from bunfig.toml and keeps a preload's setDefaultTimeout to
// one file, so tests/support/bun_timeout.ts sets it at the head of each (a run beside other work
// on this two-core machine once failed four tests of later files at Bun's 5 s). Runs `bun test` on
// two files of its own, the second with a test of 5.5 s; under Deno only (it is about Bun's runner,
// and one run is enough).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { tmpdir } from "node:os";

const ROOT = new URL("..", import.meta.url).pathname;
const isDeno = "Deno" in globalThis;

test("a test of 5.5 s in a later test file passes under bun test", {
  skip: isDeno ? false : "run under Deno only: it runs bun test itself",
  timeout: 60_000,
}, () => {
  const dir = mkdtempSync(join(tmpdir(), "ckpt-bun-timeout-"));
  try {
    const first = join(dir, "a_test.ts"), second = join(dir, "b_test.ts");
    writeFileSync(first, `import { test } from "node:test";\ntest("quick", () => {});\n`);
    writeFileSync(
      second,
      `import { test } from "node:test";\n` +
        `test("5.5 s", () => new Promise((done) => setTimeout(done, 5500)));\n` +
        `test("its lines keep their numbers", () => {\n` +
        `  const line = new Error().stack!.split("\\n")[1];\n` +
        `  if (!/b_test\\.ts:4:/.test(line)) throw new Error(line);\n});\n`,
    );
    const bin = join(ROOT, "node_modules", ".bin", "bun");
    const run = spawnSync(bin, ["test", first, second], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
      timeout: 50_000,
    });
    const out = `${run.stdout}${run.stderr}`;
    assert.equal(run.status, 0, out);
    assert.match(out, /\(pass\) 5\.5 s/);
    assert.match(out, /\(pass\) its lines keep their numbers/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
