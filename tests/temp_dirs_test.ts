// Folders a test file makes as it loads are removed as its test process ends, even where a filter
// picks none of its tests and so none of its after() hooks run (tests/support/temp_dirs.ts,
// processDir): a developer's `deno test --filter` or `bun test -t` leaves nothing in the temporary
// directory, as a whole run does not.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { runtime } from "./fixtures/fake.ts";

const ROOT = new URL("../", import.meta.url).pathname;

test("a filtered run that picks none of a file's tests leaves no folder behind", {
  timeout: 120_000,
}, () => {
  const tmp = mkdtempSync(join(tmpdir(), "ckpt-filtered-run-"));
  try {
    // One makes a folder as it loads; the other a fake libcuda folder inside a describe().
    for (const file of ["tests/cli_simulate_test.ts", "tests/examples_test.ts"]) {
      const none = "no-test-is-called-this";
      const args = runtime === "deno"
        ? ["test", "-A", "--no-check", file, "--filter", none]
        : ["test", file, "-t", none];
      const run = spawnSync(process.execPath, args, {
        cwd: ROOT,
        env: { ...process.env, TMPDIR: tmp },
        encoding: "utf8",
        timeout: 90_000,
      });
      assert.equal(run.error, undefined, String(run.error));
      assert.deepEqual(readdirSync(tmp), [], `${file} left these:\n${run.stdout}${run.stderr}`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
