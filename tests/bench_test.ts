// Keeps the side-by-side benchmarks (bench/overhead.ts, bench/many.ts, their C baselines and the
// report writer) from rotting: each runs in its smallest configuration against the fake libcuda of
// tests/fixtures (with shell stand-in targets), under the runtime that runs the tests, and its
// report must have the promised fields. No figure is checked: the fake measures nothing real.
//
// Each benchmark is a child process, run without blocking (so that the runner's timeout can act),
// killed after its own limit and given a test timeout above that limit, so that a slow machine
// reports the benchmark's output rather than a cut test.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import process from "node:process";

import { safeName } from "../bench/report.ts";
import { runScript, type ScriptRun } from "../bench/run_script.ts";
import { noCompiler, runtime } from "./fixtures/fake.ts";
import { assertAllBack, assertFormatted, simulatedMarkdown } from "./support/bench_report.ts";
import { processDir } from "./support/temp_dirs.ts";

const BENCH = new URL("../bench/", import.meta.url).pathname;
const out = processDir("ckpt-bench-test-");
after(() => rmSync(out, { recursive: true, force: true }));

/** How long a benchmark may run before it is killed (a few seconds on a quiet machine). */
const RUN_LIMIT_MS = 90_000;
/** A test's timeout: above the limit of the runs it waits for, so a kill shows their output. */
const SLOW = { timeout: RUN_LIMIT_MS + 30_000 };

/** Runs a benchmark with the fake; resolves to its exit status and output. */
function bench(script: string, ...args: string[]): Promise<ScriptRun> {
  return runScript(
    join(BENCH, script),
    ["--fake", "--fake-delay-ms", "2", "--out", out, ...args],
    RUN_LIMIT_MS,
  );
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
  assertFormatted(`${stem}.md`, `${stem}.json`);
  return json;
}

/**
 * A benchmark's run on the simulator: it must exit 0, and its report `<dir>/<name>-…` say where it
 * ran (`gpu`, the simulated machine's description) and that it was simulated. Returns the report's
 * stem and JSON.
 */
function simulatedReport(
  run: ScriptRun,
  dir: string,
  name: string,
  gpu: string,
  // deno-lint-ignore no-explicit-any
): { stem: string; json: Record<string, any> } {
  assert.equal(run.status, 0, run.log);
  const stem = join(dir, `${name}-${runtime}-${safeName(hostname())}`);
  const json = JSON.parse(readFileSync(`${stem}.json`, "utf8"));
  assert.equal(json.environment.gpu.description, gpu);
  assert.equal(json.config.simulate, true);
  return { stem, json };
}

describe(`benchmarks against the fake libcuda (${runtime})`, { skip: noCompiler }, () => {
  // All three at once, started by the first test that needs them (none where the tests are
  // skipped): each is mostly waiting on its children.
  let started: Promise<ScriptRun[]> | undefined;
  const runs = () =>
    started ??= Promise.all([
      bench("overhead.ts", "--sizes", "1,2", "--cycles", "2", "--warmup", "1"),
      bench("many.ts", "--counts", "2,3", "--mib", "1", "--trials", "2", "--placement", "spread"),
      bench("growth.ts", "--sizes", "1,2", "--counts", "1,2", "--count-mib", "1", "--cycles", "2"),
    ]);
  // A stand-in for a cuda-checkpoint program: answers as the real one would, for any pid.
  const standIn = join(out, "stand-in-cuda-checkpoint");
  writeFileSync(
    standIn,
    '#!/bin/sh\nif [ "$1" = --get-state ]; then echo running; else echo 4242; fi\n',
    { mode: 0o755 },
  );

  test(
    "overhead.ts: alternating cycles, ours and C, each size, every run reported",
    SLOW,
    async () => {
      const [run] = await runs();
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
    },
  );

  test("many.ts: the three modes taking turns per trial, placement recorded", SLOW, async () => {
    const [, run] = await runs();
    assert.equal(run.status, 0, run.log);
    const json = readReport("many-spread");
    assert.equal(json.config.placement, "spread");
    // 2 counts x 2 trials x 3 modes; trial 1 starts with the second mode.
    assert.equal(json.config.warmupCycles, 1);
    assert.match(json.notes.join(" "), /2 processes: suspend [\d.]+ ms, resume [\d.]+ ms/);
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

  test(
    "growth.ts: each size and count, both placements, GB/s beside the ceilings",
    SLOW,
    async () => {
      const [, , run] = await runs();
      assert.equal(run.status, 0, run.log);
      const json = readReport("growth");
      // Sizes: 1 process each; counts: gpu0 and spread; each (1 warm-up + 2 cycles).
      const keys = json.runs.map((r: Record<string, unknown>) =>
        `${r.axis}:${r.placement}:${r.processes}x${r.mibEach}`
      );
      assert.deepEqual([...new Set(keys)], [
        "size:gpu0:1x1",
        "size:gpu0:1x2",
        "count:gpu0:1x1",
        "count:gpu0:2x1",
        "count:spread:1x1",
        "count:spread:2x1",
      ]);
      assert.equal(json.runs.length, 6 * 3);
      assert.equal(json.runs.filter((r: { warmup: boolean }) => r.warmup).length, 6);
      // Without NVML the bytes are the estimate: allocated + a 520 MiB context per process.
      const two = json.runs.find((r: Record<string, unknown>) => r.processes === 2);
      assert.equal(two.gpuMiB, 2 * (1 + 520));
      assert.equal(json.tables.length, 2);
      assert.equal(json.tables[1].rows.length, 4);
      assert.ok(json.tables[1].columns.includes("suspend / host ceiling"));
      for (const row of json.tables[1].rows) assert.match(String(row.at(-1)), /^\d+%$/);
    },
  );

  test(
    "listing.ts: the listing, a getState per pid and programs per pid, taking turns",
    SLOW,
    async () => {
      const run = await bench(
        "listing.ts",
        "--processes",
        "20",
        "--rounds",
        "2",
        "--utility",
        standIn,
        "--cli",
        standIn,
        "--utility-sample",
        "3",
      );
      assert.equal(run.status, 0, run.log);
      const json = readReport("listing");
      const ways = json.runs.map((r: { way: string }) => r.way);
      assert.deepEqual(ways.slice(0, 5), [
        "listing",
        "per-pid getState",
        "utility per pid",
        "our CLI per pid",
        "per-pid getState",
      ]);
      const utility = json.runs.find((r: { way: string }) => r.way === "utility per pid");
      assert.equal(utility.calls.length, 3);
      assert.ok(
        utility.calls.every((c: { exit: number; out: string }) =>
          c.exit === 0 && c.out === "running"
        ),
      );
      // Extrapolated: the median call times every pid of /proc.
      assert.ok(utility.ms > utility.calls[0].ms * 10, JSON.stringify(utility));
      assert.equal(json.goals[0].goal, "a whole-host listing well under 100 ms (median)");
      assert.equal(typeof json.goals[0].value, "number");
    },
  );

  test(
    "cli_startup.ts: both programs, both queries, taking turns, answers compared",
    SLOW,
    async () => {
      const run = await bench(
        "cli_startup.ts",
        "--ours",
        standIn,
        "--nvidia",
        standIn,
        "--rounds",
        "2",
      );
      assert.equal(run.status, 0, run.log);
      const json = readReport("cli-startup");
      // 2 rounds x 2 programs x 2 queries; round 1 starts with NVIDIA's.
      assert.deepEqual(
        json.runs.map((r: { program: string; query: string }) => `${r.program}${r.query}`),
        [
          "ours--get-state",
          "ours--get-restore-tid",
          "nvidia--get-state",
          "nvidia--get-restore-tid",
          "nvidia--get-state",
          "nvidia--get-restore-tid",
          "ours--get-state",
          "ours--get-restore-tid",
        ],
      );
      assert.deepEqual(
        new Set(json.runs.map((r: { out: string }) => r.out)),
        new Set(["running", "4242"]),
      );
      // Each query's three goals; against the fake libcuda none is judged (no real target).
      assert.deepEqual(
        json.goals.map((g: { goal: string }) => g.goal.replace(/^--[a-z-]+: /, "")),
        ["--get-state", "--get-restore-tid"].flatMap(() => [
          "ours at most 50 ms (median)",
          "on a 4-GPU host, ours at least 15x faster than NVIDIA's",
          "ours at or below NVIDIA's (median, NVIDIA's / ours >= 1)",
        ]),
      );
      assert.ok(
        json.goals.filter((g: { goal: string }) => g.goal.includes("at or below"))
          .every((g: { met: unknown }) => g.met === null),
        "the fake libcuda proves nothing about NVIDIA's speed",
      );
    },
  );

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

describe(`disk_bench.ts on the simulated machine (${runtime})`, () => {
  // About 50 runs of our command line, each a program start: the slowest test here.
  test(
    "both sides taking turns per round, on the disk and in a second place, every target checked, images removed, goals judged only on a GPU",
    {
      timeout: 3 * RUN_LIMIT_MS,
    },
    async () => {
      const dir = join(out, "snapshot");
      const work = join(out, "snapshot-work"), shm = join(out, "snapshot-shm");
      // Our command line under this runtime, as a program (the benchmark spawns it).
      const cli = join(out, "ours-cuda-checkpoint");
      const main = new URL("../cli/main.ts", import.meta.url).pathname;
      writeFileSync(
        cli,
        `#!/bin/sh\nexec "${process.execPath}" ${
          runtime === "deno" ? "run -A --quiet " : ""
        }"${main}" "$@"\n`,
        { mode: 0o755 },
      );
      const run = await runScript(join(BENCH, "disk_bench.ts"), [
        ...["--simulate", "--ours", cli, "--counts", "1,2", "--mib", "64,32", "--rounds", "1"],
        ...["--disk-mib", "4", "--durable-mib", "4", "--work", work, "--shm", shm, "--out", dir],
      ], 2 * RUN_LIMIT_MS);
      const { stem, json } = simulatedReport(
        run,
        dir,
        "snapshot",
        "none (the simulated machine of cuda-checkpoint --simulate)",
      );
      assert.deepEqual(json.config.mib, [64, 32]);
      // Global round k starts with ours when k is even: each case once, the disk's, then shm's.
      assert.deepEqual(
        json.runs.map((r: { case: string; side: string; order: number }) =>
          `${r.case} ${r.side} ${r.order}`
        ),
        [
          "disk 1x64MiB ours 0",
          "disk 1x64MiB shell 1",
          "disk 2x32MiB shell 0",
          "disk 2x32MiB ours 1",
          "shm 1x64MiB ours 0",
          "shm 1x64MiB shell 1",
          "shm 2x32MiB shell 0",
          "shm 2x32MiB ours 1",
        ],
      );
      for (const r of json.runs) {
        assertAllBack(r, r.count);
        assert.ok(r.bytes > 0 && r.snapshotMs > 0 && r.restoreMs > 0, JSON.stringify(r));
        assert.ok(r.durableMs >= r.snapshotMs, JSON.stringify(r));
        if (r.side === "ours") {
          // Its own figures, from its --json and the manifest (virtual time on the simulator).
          for (const k of ["ownSnapshotMs", "suspendMs", "dumpMs", "ownRestoreMs"]) {
            assert.ok(r.phases[k] > 0, `${k} of ${JSON.stringify(r)}`);
          }
        } else {
          // One toggle and one dump per process, one after another, a sync, and back the same way.
          assert.equal(r.durableMs, r.snapshotMs + r.phases.syncMs);
          assert.equal(r.steps.snapshot.length, r.count);
          assert.equal(r.steps.restore.length, r.count);
          assert.deepEqual(
            r.steps.snapshot.map((s: { pid: number }) => s.pid),
            r.checks.map((c: { pid: number }) => c.pid),
          );
        }
      }
      // The images and the targets' folders are gone; so is the simulated machine.
      assert.deepEqual(readdirSync(work), []);
      assert.deepEqual(readdirSync(shm), []);
      assert.equal(json.tables.length, 3);
      assert.deepEqual(
        json.tables[2].rows.map((r: string[]) => r[0]),
        ["disk", "shm", "disk", "disk"],
        "the durable rate of each place; O_DIRECT and the page cache on the disk",
      );
      // The goals have figures, but the simulator proves nothing about them; no 8-process case.
      assert.deepEqual(json.goals.map((g: { met: boolean | null }) => g.met), [null, null, true]);
      assert.equal(typeof json.goals[0].value, "number");
      simulatedMarkdown(stem);
    },
  );
});

describe(`integrity.ts on the simulated machine (${runtime})`, () => {
  test(
    "with and without digests taking turns per round, every target checked, the verification timed, goals judged only on a GPU",
    SLOW,
    async () => {
      const dir = join(out, "integrity");
      const work = join(out, "integrity-work");
      const run = await runScript(join(BENCH, "integrity.ts"), [
        "--simulate",
        "--count",
        "2",
        "--mib",
        "64",
        "--rounds",
        "2",
        "--disk-mib",
        "4",
        "--work",
        work,
        "--out",
        dir,
      ], RUN_LIMIT_MS);
      const { stem, json } = simulatedReport(
        run,
        dir,
        "integrity",
        "none (the simulated machine of @ckpt/cuda/mock)",
      );
      assert.equal(json.config.count, 2);
      // Round k starts with "with" when k is even; no warm-up on the simulator.
      assert.deepEqual(
        json.runs.map((r: { round: number; side: string; order: number }) =>
          `${r.round} ${r.side} ${r.order}`
        ),
        ["0 with 0", "0 without 1", "1 without 0", "1 with 1"],
      );
      for (const r of json.runs) {
        assertAllBack(r, 2);
        assert.ok(r.snapshotMs > 0 && r.restoreMs > 0 && r.bytes > 0 && r.files > 0);
        // The library's own figures (virtual time on the simulator: the checks, file work, take
        // none of it).
        for (const k of ["snapshotMs", "dumpMs", "restoreMs", "criuRestoreMs"]) {
          assert.ok(r.own[k] > 0, `${k} of ${JSON.stringify(r)}`);
        }
        assert.ok(r.own.checkMs >= 0, JSON.stringify(r));
        // The verification, and the disk's rate of the largest image, in the runs with digests.
        if (r.side === "with") {
          assert.ok(r.verify.ms > 0 && r.verify.GBps > 0, JSON.stringify(r.verify));
          assert.ok(r.verify.disk.bytes > 0, JSON.stringify(r.verify));
        } else {
          assert.equal(r.verify, undefined);
        }
      }
      // The images and the targets are gone.
      assert.deepEqual(readdirSync(work), []);
      assert.equal(json.tables.length, 4);
      assert.equal(json.tables[2].rows.length, 2, "a verification row per run with digests");
      // Figures for every goal, none judged on the simulator but the targets' check.
      assert.deepEqual(json.goals.map((g: { met: boolean | null }) => g.met), [
        null,
        null,
        null,
        true,
      ]);
      for (const g of json.goals) assert.equal(typeof g.value, "number", JSON.stringify(g));
      assert.match(json.goals[2].note, /the disk's own read rate beside it/);
      simulatedMarkdown(stem);
    },
  );
});

describe(`digest.ts on the simulator (${runtime})`, () => {
  test(
    "both sides taking turns per round, the check over every byte, the 40 GiB goals not measured",
    SLOW,
    async () => {
      const dir = join(out, "digest");
      const run = await runScript(join(BENCH, "digest.ts"), [
        "--sizes-mib",
        "2,3",
        "--rounds",
        "2",
        "--baseline-max-mib",
        "2",
        "--out",
        dir,
      ], RUN_LIMIT_MS);
      assert.equal(run.status, 0, run.log);
      const stem = join(dir, `digest-${runtime}-${safeName(hostname())}`);
      const json = JSON.parse(readFileSync(`${stem}.json`, "utf8"));
      assert.equal(json.environment.gpu.description, "none (the simulated driver, on the CPU)");
      assert.equal(json.environment.fake, false);
      assert.deepEqual(json.config.sizesMiB, [2, 3]);
      // Round 0 starts with the chunked hash, round 1 with the old SHA-256; the baseline and the
      // check over every byte only at 2 MiB (--baseline-max-mib 2), the check in round 0 only.
      const kinds = (size: number) =>
        json.runs.filter((r: { sizeMiB: number }) => r.sizeMiB === size).map((
          r: { kind: string },
        ) => r.kind);
      assert.deepEqual(kinds(2), [
        "first",
        "after writes",
        "unchanged",
        "old SHA-256",
        "every byte, chunked",
        "old SHA-256",
        "first",
        "after writes",
        "unchanged",
      ]);
      assert.deepEqual(kinds(3), [
        ...["first", "after writes", "unchanged"],
        ...["first", "after writes", "unchanged"],
      ]);
      for (const r of json.runs) {
        assert.ok(r.ms >= 0 && /^[0-9a-f]{64}$/.test(r.hash), JSON.stringify(r));
      }
      const at2 = json.runs.filter((r: { sizeMiB: number; round: number }) =>
        r.sizeMiB === 2 && r.round === 0
      );
      const hashOf = (kind: string) => at2.find((r: { kind: string }) => r.kind === kind).hash;
      assert.equal(hashOf("every byte, chunked"), hashOf("after writes"));
      assert.equal(hashOf("unchanged"), hashOf("after writes"));
      assert.notEqual(hashOf("first"), hashOf("after writes"));
      assert.deepEqual(json.goals.map((g: { met: boolean | null }) => g.met), [null, null, true]);
      const md = readFileSync(`${stem}.md`, "utf8");
      assert.match(md, /none \(the simulated driver, on the CPU\)/);
      assert.match(md, /left out above 2 MiB/);
      assert.doesNotMatch(md, /measures nothing real/);
    },
  );
});

describe(`sim_speed.ts on the simulator (${runtime})`, () => {
  test(
    "both sizes on both clocks, the step times and the suspend's wall time in the report",
    SLOW,
    async () => {
      const dir = join(out, "sim-speed");
      const run = await runScript(join(BENCH, "sim_speed.ts"), [
        ...["--rounds", "1", "--big-mib", "2", "--small-mib", "1", "--runtimes", runtime],
        ...["--label", "test", "--out", dir],
      ], RUN_LIMIT_MS);
      assert.equal(run.status, 0, run.log);
      const json = JSON.parse(
        readFileSync(join(dir, `sim-speed-test-${runtime}-${safeName(hostname())}.json`), "utf8"),
      );
      assert.deepEqual(json.config.runtimes, [runtime]);
      const examples = json.runs.filter((r: { clock?: string }) => r.clock);
      assert.deepEqual(
        examples.map((r: { mib: number; clock: string }) => `${r.mib} ${r.clock}`),
        ["2 virtual", "1 virtual", "2 real", "1 real"],
      );
      for (const r of examples) {
        assert.equal(r.pass, true, JSON.stringify(r));
        assert.deepEqual(Object.keys(r.steps), ["lock", "checkpoint", "restore", "unlock"]);
      }
      // The virtual clock prints the model's times: 2 MiB checkpoints in the table's 289 + ... ms.
      assert.ok(examples[0].steps.checkpoint > 289 && examples[0].steps.checkpoint < 300);
      const suspends = json.runs.filter((r: { suspendMs?: number }) => r.suspendMs !== undefined);
      // Written: 2 MiB, 1 MiB, and 1 MiB beside 2 MiB held outside the simulator.
      const sizes = suspends.map((r: { mib: number; held: number }) => [r.mib, r.held]);
      assert.deepEqual(sizes, [[2, 0], [1, 0], [1, 2]]);
      for (const r of suspends) {
        assert.ok(r.suspendMs >= 0 && r.resumeMs >= 0 && r.warmMs >= 0, JSON.stringify(r));
      }
      const goals = "the example's ratio, the simulator's own, the checkpoint's and the restore's";
      assert.equal(json.goals.length, 4, goals);
      assert.equal(json.environment.gpu.description, "none (simulator)");
    },
  );
});
