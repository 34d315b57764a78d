// Keeps the side-by-side benchmarks (bench/overhead.ts, bench/many.ts, their C baselines and the
// report writer) from rotting: each runs in its smallest configuration against the fake libcuda of
// tests/fixtures (with shell stand-in targets), under the runtime that runs the tests, and its
// report must have the promised fields. No figure is checked: the fake measures nothing real.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

import { safeName } from "../bench/report.ts";
import { noCompiler, runtime } from "./fixtures/fake.ts";

const BENCH = new URL("../bench/", import.meta.url).pathname;
const out = mkdtempSync(join(tmpdir(), "ckpt-bench-test-"));
after(() => rmSync(out, { recursive: true, force: true }));

/** Runs a benchmark with the fake; resolves to its exit status and output. */
function bench(script: string, ...args: string[]): Promise<{ status: number | null; log: string }> {
  const argv = [
    ...(runtime === "deno" ? ["run", "-A"] : []),
    join(BENCH, script),
    "--fake",
    "--fake-delay-ms",
    "2",
    "--out",
    out,
    ...args,
  ];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    child.stdout!.on("data", (d) => log += d);
    child.stderr!.on("data", (d) => log += d);
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, log });
    });
  });
}

/** Reads a report pair; checks what every report promises; returns the JSON. */
// deno-lint-ignore no-explicit-any
function readReport(name: string): Record<string, any> {
  const stem = join(out, `${name}-${runtime}-${safeName(hostname())}`);
  assert.ok(existsSync(`${stem}.md`), `${stem}.md missing`);
  const md = readFileSync(`${stem}.md`, "utf8");
  const json = JSON.parse(readFileSync(`${stem}.json`, "utf8"));
  const env = json.environment;
  assert.equal(env.machine.hostname, hostname());
  assert.ok(env.machine.cpus >= 1);
  assert.equal(env.gpu.description, "none (fake libcuda)");
  assert.equal(env.fake, true);
  assert.equal(env.runtime.name, runtime);
  assert.match(env.runtime.version, /^\d+\.\d+/);
  assert.ok(!Number.isNaN(Date.parse(env.date)));
  assert.ok(json.goals.length > 0);
  for (const g of json.goals) assert.ok("goal" in g && "value" in g && "met" in g);
  assert.ok(json.tables.length > 0 && json.runs.length > 0);
  for (const heading of ["## Where and when", "## Goals", "## Summary", "## Every run"]) {
    assert.ok(md.includes(heading), `${heading} missing from the Markdown report`);
  }
  assert.match(md, /measures nothing real/);
  assert.match(md, /none \(fake libcuda\)/);
  // Reports are committed: they must pass `deno fmt --check` as written (where deno is on PATH).
  const fmt = spawnSync("deno", [
    "fmt",
    "--check",
    "--line-width",
    "100",
    `${stem}.md`,
    `${stem}.json`,
  ], {
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
  });
  if (!fmt.error) assert.equal(fmt.status, 0, `deno fmt --check: ${fmt.stderr}`);
  return json;
}

describe(`benchmarks against the fake libcuda (${runtime})`, { skip: noCompiler }, () => {
  // Both at once: each is mostly waiting on its children.
  const runs = Promise.all([
    bench("overhead.ts", "--sizes", "1,2", "--cycles", "2", "--warmup", "1"),
    bench("many.ts", "--counts", "2,3", "--mib", "1", "--trials", "2", "--placement", "spread"),
  ]);

  test("overhead.ts: alternating cycles, ours and C, each size, every run reported", async () => {
    const [run] = await runs;
    assert.equal(run.status, 0, run.log);
    const json = readReport("overhead");
    assert.deepEqual(json.config.sizesMiB, [1, 2]);
    // 2 sizes x (1 warm-up + 2 cycles) x 2 sides, alternating ours, C, ours, C.
    assert.equal(json.runs.length, 12);
    assert.deepEqual(json.runs.slice(0, 4).map((r: { side: string }) => r.side), [
      "ours",
      "c",
      "ours",
      "c",
    ]);
    for (const r of json.runs) {
      for (const k of ["lockMs", "checkpointMs", "restoreMs", "unlockMs", "totalMs"]) {
        assert.equal(typeof r[k], "number", `${k} of ${JSON.stringify(r)}`);
      }
      // The fake's checkpoint and restore each sleep 2 ms.
      assert.ok(r.totalMs >= 4, JSON.stringify(r));
    }
    assert.equal(json.goals.length, 2);
    assert.ok(json.goals.every((g: { value: number }) => g.value > 0));
  });

  test("many.ts: the three modes taking turns per trial, placement recorded", async () => {
    const [, run] = await runs;
    assert.equal(run.status, 0, run.log);
    const json = readReport("many-spread");
    assert.equal(json.config.placement, "spread");
    // 2 counts x 2 trials x 3 modes; trial 1 starts with the second mode.
    assert.equal(json.runs.length, 12);
    const modes = json.runs.slice(0, 6).map((r: { mode: string }) => r.mode);
    assert.deepEqual(modes, ["ours", "threads", "serial", "threads", "serial", "ours"]);
    for (const r of json.runs) {
      assert.ok(r.ok, JSON.stringify(r));
      assert.ok(r.suspendMs > 0 && r.resumeMs > 0, JSON.stringify(r));
      assert.deepEqual(r.processes.map((p: { gpu: number }) => p.gpu), [0, 1, 0].slice(0, r.count));
    }
    // The goals: within 5% of threads per count and phase, and 6x at 8 (not measured here).
    assert.equal(json.goals.length, 2 * 2 + 3);
    assert.equal(json.goals.at(-1).value, null);
  });

  test("the C baselines build with -Wall -Wextra without a warning", () => {
    for (const name of ["cycle", "many"]) {
      const cc = spawnSync("cc", [
        "-O2",
        "-Wall",
        "-Wextra",
        "-pthread",
        "-fsyntax-only",
        join(BENCH, `${name}.c`),
      ], { encoding: "utf8" });
      assert.equal(cc.status, 0, cc.stderr);
      assert.equal(cc.stderr, "");
    }
  });
});
