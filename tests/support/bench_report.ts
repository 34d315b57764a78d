// The checks that the benchmarks' tests (tests/bench_test.ts, tests/criu_restore_bench_test.ts)
// make of every report and every measured run alike.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import process from "node:process";

/**
 * Reports are committed: `files` must pass `deno fmt --check` as written (at the reports' line
 * width). Where deno is not on PATH there is nothing to check with.
 */
export function assertFormatted(...files: string[]): void {
  const fmt = spawnSync("deno", ["fmt", "--check", "--line-width", "100", ...files], {
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1" },
  });
  if (!fmt.error) assert.equal(fmt.status, 0, `deno fmt --check: ${fmt.stderr}`);
}

/** The Markdown report `<stem>.md` of a run on the simulator: it says so, and it is formatted. */
export function simulatedMarkdown(stem: string): string {
  const md = readFileSync(`${stem}.md`, "utf8");
  assert.match(md, /SIMULATED: .* This measures nothing real\./s);
  assertFormatted(`${stem}.md`);
  return md;
}

/** A measured run with its targets' checks, as the snapshot benchmarks record it. */
export interface CheckedRun {
  ok: boolean;
  error?: string;
  checks: { state: string; intact: boolean }[];
}

/** What every measured run must show first: no error, and all `count` targets back intact. */
export function assertAllBack(r: CheckedRun, count: number): void {
  assert.ok(r.ok && r.error === undefined, JSON.stringify(r));
  assert.equal(r.checks.length, count);
  for (const c of r.checks) assert.ok(c.state === "running" && c.intact, JSON.stringify(c));
}
