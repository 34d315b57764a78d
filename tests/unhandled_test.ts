// No unhandled rejection escapes the library, the simulator or the command line: the program
// tests/fixtures/unhandled.ts listens for them at the process level ('unhandledRejection') while
// it closes drivers during calls, aborts groups and waits, kills processes during calls, leaves
// hung calls behind, interrupts commands and runs model-based sequences; it runs here on this
// runtime (Deno or Bun). The canary run shows the listener sees one when there is one. (Inside
// `deno test` and `bun test` the runner itself fails whichever test is running on an unhandled
// rejection, and a listener cannot intercept it: so every other test file checks this too.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";

import { runtime } from "./fixtures/fake.ts";

const FIXTURE = new URL("./fixtures/unhandled.ts", import.meta.url).pathname;

function run(...args: string[]): Promise<{ unhandled: number; messages: string[] }> {
  const argv = runtime === "deno" ? ["run", "-A", FIXTURE, ...args] : [FIXTURE, ...args];
  return new Promise((resolve, reject) =>
    execFile(process.execPath, argv, { timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`${error.message}\n${stderr}`));
      resolve(JSON.parse(String(stdout).trim().split("\n").at(-1)!));
    })
  );
}

test(`no unhandled rejection, whatever goes wrong (${runtime}, process-level listener)`, {
  timeout: 120_000,
}, async () => {
  const [canary, clean] = await Promise.all([run("canary"), run()]);
  assert.deepEqual(canary, { unhandled: 1, messages: ["the canary"] }, "the listener works");
  assert.deepEqual(clean, { unhandled: 0, messages: [] });
});
