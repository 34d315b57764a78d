// The simulator's worth to a test suite: how long this package's whole unit-test suite takes on
// each runtime (it runs on the simulated driver and the fake libcuda; no GPU). The runtimes take
// turns in every round (round r starts with runtime r mod 2).
//
//   deno run -A bench/suite.ts [--rounds 2] [--out DIR]
//   bun bench/suite.ts ...
//
// Deno's suite is `deno test -A tests/`, Bun's is `bun test`, each from the repository root, as
// .ci/check runs them. The report goes to bench/reports/suite-<runtime>-<host>.md and .json.

import { spawn } from "node:child_process";
import process from "node:process";
import { parseArgs } from "node:util";

import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: { rounds: { type: "string", default: "2" }, out: { type: "string" } },
});
const [rounds] = integers(values.rounds, "--rounds");
const ROOT = new URL("../", import.meta.url).pathname;
const SUITES = [
  { runtime: "deno", argv: ["deno", "test", "-A", "tests/"] },
  { runtime: "bun", argv: ["bun", "test"] },
] as const;
const started = new Date();

interface Run {
  round: number;
  runtime: string;
  ms: number;
  exit: number | null;
  passed: number;
  failed: number;
  skipped: number;
}

/** Runs a suite; resolves to its time, exit and counts (Deno counts steps, Bun tests). */
function runSuite(argv: readonly string[]): Promise<Omit<Run, "round" | "runtime">> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let log = "";
    child.stdout!.on("data", (d) => log += d);
    child.stderr!.on("data", (d) => log += d);
    child.on("close", (exit) => {
      const ms = performance.now() - t0;
      const deno = log.match(/(\d+) passed \((\d+) steps?\) \| (\d+) failed(?: \((\d+) steps?\))?/);
      const ignored = log.match(/\| (\d+) ignored(?: \((\d+) steps?\))?/);
      const bun = (word: string) =>
        Number(log.match(new RegExp(`^\\s*(\\d+) ${word}$`, "m"))?.[1] ?? 0);
      resolve(
        deno
          ? {
            ms,
            exit,
            passed: Number(deno[2]),
            failed: Number(deno[4] ?? deno[3]),
            skipped: Number(ignored?.[1] ?? 0) + Number(ignored?.[2] ?? 0),
          }
          : { ms, exit, passed: bun("pass"), failed: bun("fail"), skipped: bun("skip") },
      );
    });
  });
}

const runs: Run[] = [];
for (let round = 0; round < rounds; round++) {
  for (let k = 0; k < SUITES.length; k++) {
    const suite = SUITES[(round + k) % SUITES.length];
    const r = await runSuite(suite.argv);
    runs.push({ round, runtime: suite.runtime, ...r });
    console.log(
      `round ${round} ${suite.runtime}: ${fmt(r.ms / 1000, 1)} s, exit ${r.exit}, ${r.passed} ` +
        `passed, ${r.failed} failed, ${r.skipped} skipped`,
    );
  }
}

const env = environment({
  fake: true,
  libcuda: "(the simulator, and the fake libcuda)",
  date: started,
});
const byRuntime = SUITES.map((s) => s.runtime).map((rt) => {
  const mine = runs.filter((r) => r.runtime === rt);
  return { rt, mine, ms: median(mine.map((r) => r.ms)) };
});
const report: Report = {
  name: "suite",
  title: "@ckpt/cuda, the unit-test suite on the simulator: its whole time",
  description: "The whole unit-test suite, as .ci/check runs it (`deno test -A tests/` and " +
    "`bun test`), on a machine with no GPU: the simulated driver (virtual clock) and the fake " +
    "libcuda carry every test. The runtimes take turns in every round.",
  environment: env,
  config: { rounds },
  goals: byRuntime.map(({ rt, mine, ms }) => ({
    goal: `${rt}: the whole suite passes, well within CI's 10 minutes on 2 cores (median)`,
    value: Number.isFinite(ms) ? ms / 1000 : null,
    met: mine.length > 0 ? mine.every((r) => r.exit === 0) && ms < 600_000 : null,
    note: "seconds",
  })),
  tables: [{
    title: `Medians over ${rounds} round(s)`,
    columns: ["runtime", "runs", "median s", "passed", "failed", "skipped"],
    rows: byRuntime.map(({ rt, mine, ms }) => [
      rt,
      mine.length,
      fmt(ms / 1000, 1),
      mine.at(-1)?.passed ?? 0,
      mine.at(-1)?.failed ?? 0,
      mine.at(-1)?.skipped ?? 0,
    ]),
  }],
  runs,
  runTables: [{
    title: "Every run",
    columns: ["round", "runtime", "s", "exit", "passed", "failed", "skipped"],
    rows: runs.map((r) => [
      r.round,
      r.runtime,
      fmt(r.ms / 1000, 1),
      r.exit,
      r.passed,
      r.failed,
      r.skipped,
    ]),
  }],
  notes: [
    "Deno counts test steps, Bun counts tests. The suite's many simulated checkpoints of GiBs " +
    "take no real time: the simulator's virtual clock jumps from event to event, while the " +
    "operations report the durations measured on the real driver.",
  ],
};
publish(report, values.out, { digits: 1 });
process.exit(runs.every((r) => r.exit === 0) ? 0 : 1);
