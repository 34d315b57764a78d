// Keeps bench/criu_restore.ts (our restore with criu A against criu B, issue 23) from rotting: it
// runs on the simulated machine (--simulate), under the runtime that runs the tests, in its
// smallest configuration, and its report must say what it promises: the sides taking turns per
// round on the same images, every target checked, the library's parts of each restore, the disk's
// rate beside the images, no goal judged but the targets' check; and, where B cannot restore A's
// images, B's own snapshot. No figure is checked: the simulator measures nothing real. The GPU
// proof is tests/gpu/criu_speed.sh.
//
// The benchmark is a child process, run without blocking and killed after its own limit, with a
// test timeout above that limit, so that a slow machine shows its output rather than a cut test.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

import { safeName } from "../bench/report.ts";
import { runScript } from "../bench/run_script.ts";
import { runtime } from "./fixtures/fake.ts";
import { assertAllBack, simulatedMarkdown } from "./support/bench_report.ts";
import { processDir } from "./support/temp_dirs.ts";

const SCRIPT = new URL("../bench/criu_restore.ts", import.meta.url).pathname;
const out = processDir("ckpt-criu-restore-test-");
after(() => rmSync(out, { recursive: true, force: true }));

/** How long a run may take before it is killed (a second or two on a quiet machine). */
const RUN_LIMIT_MS = 60_000;
const SLOW = { timeout: RUN_LIMIT_MS + 30_000 };

interface RunRecord {
  round: number;
  side: string;
  order: number;
  imagesBy: string;
  snapshot: number;
  fallback: boolean;
  ok: boolean;
  error?: string;
  checks: { state: string; intact: boolean }[];
  restoreMs?: number;
  own?: Record<string, number>;
  criuGBps?: number;
}

/** The report's JSON, after the checks every report of this benchmark must pass. */
// deno-lint-ignore no-explicit-any
function readReport(dir: string, caseName: string): Record<string, any> {
  const stem = join(dir, `criu-restore-${caseName}-${runtime}-${safeName(hostname())}`);
  const json = JSON.parse(readFileSync(`${stem}.json`, "utf8"));
  assert.equal(json.environment.gpu.description, "none (the simulated machine of @ckpt/cuda/mock)");
  assert.equal(json.config.simulate, true);
  assert.deepEqual(
    [json.config.criuA.label, json.config.criuB.label],
    ["simulated criu 4.1.1", "simulated criu 4.2"],
  );
  const md = simulatedMarkdown(stem);
  for (const heading of ["## Where and when", "## Goals", "## Summary", "## Every run"]) {
    assert.ok(md.includes(heading), `${heading} missing from the Markdown report`);
  }
  return json;
}

/**
 * Runs the benchmark on the simulator with `args`, its report in `<out>/<name>` and its work folder
 * `<out>/<name>-work`; it must exit 0 and leave that folder empty (the images and the targets
 * gone). Resolves to its output and its report's JSON (after `readReport`'s checks).
 */
async function simulated(
  name: string,
  caseName: string,
  args: string[],
): Promise<{ log: string; json: ReturnType<typeof readReport> }> {
  const dir = join(out, name);
  const work = join(out, `${name}-work`);
  const run = await runScript(
    SCRIPT,
    ["--simulate", ...args, "--work", work, "--out", dir],
    RUN_LIMIT_MS,
  );
  assert.equal(run.status, 0, run.log);
  const json = readReport(dir, caseName);
  assert.deepEqual(readdirSync(work), []);
  return { log: run.log, json };
}

/** What every measured run must show: back intact, the library's parts of its restore. */
function checkRun(r: RunRecord, count: number): void {
  assertAllBack(r, count);
  assert.ok(r.restoreMs! > 0 && r.criuGBps! > 0, JSON.stringify(r));
  for (const k of ["restoreMs", "criuRestoreMs", "resumeMs"]) {
    assert.ok(r.own![k] > 0, `${k} of ${JSON.stringify(r)}`);
  }
  assert.ok(r.own!.checkMs >= 0, JSON.stringify(r));
}

describe(`criu_restore.ts on the simulated machine (${runtime})`, () => {
  test(
    "A and B take turns per round on one snapshot's images, every target checked, goals judged only on a GPU",
    SLOW,
    async () => {
      const { json } = await simulated("warm", "2x64-warm", [
        "--count",
        "2",
        "--mib",
        "64",
        "--rounds",
        "2",
      ]);
      assert.deepEqual(
        [json.config.count, json.config.mib, json.config.cold, json.config.digests],
        [2, 64, false, true],
      );
      // Round k starts with A when k is even; both restore the one snapshot, taken by A.
      const runs: RunRecord[] = json.runs;
      assert.deepEqual(
        runs.map((r) => `${r.round} ${r.side} ${r.order} ${r.imagesBy} ${r.snapshot}`),
        ["0 a 0 a 0", "0 b 1 a 0", "1 b 0 a 0", "1 a 1 a 0"],
      );
      for (const r of runs) checkRun(r, 2);
      // The snapshot, its images and the disk's rate of its largest.
      assert.equal(json.tables.length, 2);
      assert.equal(json.tables[1].rows.length, 1, "one snapshot");
      assert.match(json.tables[1].rows[0][0], /^A \(simulated criu 4\.1\.1\)$/);
      // Figures for the speed goal; the cold goals not measured warm; none judged on the
      // simulator but the targets' check.
      assert.deepEqual(json.goals.map((g: { met: boolean | null }) => g.met), [
        null,
        null,
        null,
        true,
      ]);
      assert.equal(typeof json.goals[0].value, "number");
      assert.deepEqual([json.goals[1].value, json.goals[2].value], [null, null]);
      assert.match(json.goals[0].note, /not judged \(the goal is for 1 x 8192 MiB, warm\)/);
    },
  );

  test(
    "where B cannot restore A's images, B takes a snapshot of its own (not counted), cold",
    SLOW,
    async () => {
      const { log, json } = await simulated("fallback", "1x32-cold", [
        "--simulate-b-refuses-a",
        "--cold",
        "--count",
        "1",
        "--mib",
        "32",
        "--rounds",
        "2",
      ]);
      assert.match(log, /fallback: B \(simulated criu 4\.2\) could not restore the images of A/);
      const runs: RunRecord[] = json.runs;
      assert.deepEqual(
        runs.map((r) => `${r.round} ${r.side} ${r.imagesBy} ${r.snapshot} ${r.fallback}`),
        ["0 a a 0 false", "0 b a 0 true", "0 b b 1 false", "1 b b 1 false", "1 a a 0 false"],
      );
      assert.ok(!runs[1].ok && /cannot read the other's images/.test(runs[1].error!));
      for (const r of runs.filter((x) => !x.fallback)) checkRun(r, 1);
      assert.equal(json.tables[1].rows.length, 2, "a snapshot per side");
      assert.ok(json.notes.some((n: string) => n.startsWith("Fallback: B ")));
      // The cold goals have figures (the simulator's), judged nowhere but on a GPU.
      for (const g of json.goals.slice(1, 3)) {
        assert.equal(typeof g.value, "number", JSON.stringify(g));
        assert.equal(g.met, null);
      }
      assert.equal(json.goals[3].met, true);
    },
  );
});
