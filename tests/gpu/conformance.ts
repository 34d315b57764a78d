/**
 * The conformance run on a GPU machine, for Deno or Bun:
 *
 *   deno run -A tests/gpu/conformance.ts <target binary> <report dir>
 *   bun tests/gpu/conformance.ts <target binary> <report dir>
 *
 * It runs every scenario of tests/conformance/scenarios.ts against the native driver and the
 * simulated driver and reports, for each, the code and state each gave and whether they agree.
 * Then it checks the driver's error names and descriptions against the package's table, and puts
 * a 1 GiB target through 20 suspend/resume cycles, checking its memory hash after each.
 * Exits 1 if anything disagrees or fails.
 */

import process from "node:process";
import { mkdirSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { CudaProcess } from "../../mod.ts";
import { openMachine } from "../../driver.ts";
import { CU_RESULTS, formatDriverVersion } from "../../core/driver.ts";
import {
  type Outcome,
  QUICK_MS,
  runScenario,
  TIME_BAND,
  timesAgree,
} from "../conformance/runner.ts";
import { SCENARIOS } from "../conformance/scenarios.ts";
import { simulatedEnv } from "../conformance/sim_env.ts";
import { nativeEnv, startTarget } from "./native_env.ts";

const [targetPath, outDir = "tests/gpu/out"] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: conformance.ts <target binary> [report dir]");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

const machine = await openMachine();
const driver = machine.driver;
const runtime = driver.kind;
const version = await driver.driverVersion();
const tag = runtime.includes("Bun") ? "bun" : "deno";
console.log(
  `${runtime}: ${driver.libraryPath}, CUDA ${
    formatDriverVersion(version.value)
  } (${version.value})`,
);

interface Row {
  scenario: string;
  source: string;
  native: Outcome;
  simulated: Outcome;
  /** Same code, state, and (for overlapping calls) the same order and returned state. */
  agree: boolean;
  /** simulated ms / native ms, where the scenario is timed. */
  ratio: number | null;
  /** The simulated time is within the band of the native one (or both are quick). */
  inBand: boolean | null;
}

const rows: Row[] = [];
const env = nativeEnv(machine, targetPath);
const gpus = (await env.gpuUuids()).length;
const gpuName = nvidiaSmiNames()[0];
// Warm up: the first calls start the driver's threads (and Bun's workers); that start-up is not
// what any scenario measures.
// listGpus makes the process's one cuInit (10-40 ms), which the first lock would otherwise pay.
await driver.listGpus?.();
await Promise.all(Array.from({ length: 4 }, () => driver.getState(process.pid)));
for (const s of SCENARIOS) {
  const native = await runScenario(env, s);
  if (native.skipped) {
    console.log(`not run  ${s.name}: ${native.skipped}`);
    continue;
  }
  // The simulated machine has as many GPUs as this one, of the same chip (its timing model).
  const simulated = await runScenario(
    simulatedEnv({ gpus: Array.from({ length: gpus }, () => ({ name: gpuName })) }),
    s,
  );
  // Where the two calls race, which one wins is the driver's choice: the table's check (one
  // SUCCESS, one ILLEGAL_STATE) stands in for comparing codes.
  const agree = (s.expect.eitherWins
    ? native.problems.length === 0 && simulated.problems.length === 0
    : native.code === simulated.code && native.state === simulated.state &&
      native.during?.code === simulated.during?.code &&
      native.during?.endedAfterIt === simulated.during?.endedAfterIt) &&
    native.problems.every((p) =>
      !/^GPU memory|^getState returned/.test(p)
    ) &&
    simulated.problems.every((p) => !/^GPU memory|^getState returned/.test(p));
  const timed = s.timed !== false;
  const ratio = timed ? simulated.ms / Math.max(native.ms, 1e-3) : null;
  const inBand = timed ? timesAgree(simulated.ms, native.ms) : null;
  rows.push({ scenario: s.name, source: s.source, native, simulated, agree, ratio, inBand });
  console.log(
    `${agree ? "agree   " : "DISAGREE"} ${
      inBand === false ? "SLOW/FAST" : "time ok  "
    } ${s.name}: ` +
      `native ${native.codeName}/${native.state ?? "-"} (${native.ms.toFixed(1)} ms), ` +
      `simulated ${simulated.codeName}/${simulated.state ?? "-"} (${simulated.ms.toFixed(1)} ms)` +
      (native.problems.length ? `; vs table: ${native.problems.join("; ")}` : ""),
  );
}

// The driver's own names and descriptions against the package's table.
const names = Object.entries(CU_RESULTS).map(([code, known]) => {
  const c = Number(code);
  const name = driver.errorName(c), description = driver.errorString(c);
  return {
    code: c,
    name,
    description,
    agree: name === known.name && description === known.description,
    expected: known,
  };
});
for (const n of names.filter((n) => !n.agree)) {
  console.log(
    `NAME DISAGREES ${n.code}: driver ${n.name} "${n.description}", table ${n.expected.name} "${n.expected.description}"`,
  );
}

// A 1 GiB target through 20 suspend/resume cycles, its memory checked after each.
const cycles: { suspendMs: number; resumeMs: number; hashOk: boolean }[] = [];
const target = await startTarget(targetPath, "cuda", 1024);
try {
  const proc = new CudaProcess(target.pid, { machine });
  for (let i = 0; i < 20; i++) {
    let t = performance.now();
    await proc.suspend();
    const suspendMs = performance.now() - t;
    const state = await proc.state();
    t = performance.now();
    await proc.resume();
    const resumeMs = performance.now() - t;
    const hash = (await target.ask("hash")).replace(/^hash /, "");
    cycles.push({
      suspendMs,
      resumeMs,
      hashOk: hash === target.readyHash && state === "checkpointed",
    });
  }
} finally {
  await target.exit();
}
const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0], median: s[Math.floor(s.length / 2)], max: s[s.length - 1] };
};
const suspendStats = stats(cycles.map((c) => c.suspendMs));
const resumeStats = stats(cycles.map((c) => c.resumeMs));
const cyclesOk = cycles.length === 20 && cycles.every((c) => c.hashOk);
console.log(
  `20 cycles of a 1 GiB target: memory hash ${cyclesOk ? "unchanged every time" : "CHANGED"}; ` +
    `suspend ${fmt(suspendStats)} ms, resume ${fmt(resumeStats)} ms`,
);

const agreeing = rows.filter((r) => r.agree).length;
const timedRows = rows.filter((r) => r.inBand !== null);
const inBand = timedRows.filter((r) => r.inBand).length;
const notRun = SCENARIOS.length - rows.length;
const report = {
  date: new Date().toISOString(),
  runtime,
  libraryPath: driver.libraryPath,
  driverVersion: version.value,
  scenarios: rows,
  gpus,
  agreeing,
  total: rows.length,
  gpuName,
  timeBand: { ...TIME_BAND, quickMs: QUICK_MS, timed: timedRows.length, inBand },
  notRun,
  errorNames: names,
  cycles: { ok: cyclesOk, suspendMs: suspendStats, resumeMs: resumeStats, runs: cycles },
};
writeFileSync(`${outDir}/conformance-${tag}.json`, JSON.stringify(report, null, 2));
const md = [
  `# Conformance: ${runtime} vs simulated driver`,
  "",
  `${report.date}, ${driver.libraryPath}, cuDriverGetVersion ${version.value}. ` +
  `${gpus} x ${gpuName}. ${agreeing} of ${rows.length} scenarios agree` +
  (notRun ? `; ${notRun} not run here (they need more GPUs).` : ".") +
  ` Times: ${inBand} of ${timedRows.length} timed scenarios within ${TIME_BAND.min}x-${TIME_BAND.max}x ` +
  `of the native time (or both under ${QUICK_MS} ms).`,
  "",
  "| scenario | source | native | simulated | agree | native ms | simulated ms | ratio |",
  "|---|---|---|---|---|---|---|---|",
  ...rows.map((r) =>
    `| ${r.scenario} | ${r.source} | ${r.native.codeName} / ${r.native.state ?? "-"} | ` +
    `${r.simulated.codeName} / ${r.simulated.state ?? "-"} | ${r.agree ? "yes" : "**no**"} | ` +
    `${r.native.ms.toFixed(1)} | ${r.simulated.ms.toFixed(1)} | ${
      r.ratio === null ? "-" : `${r.ratio.toFixed(2)}${r.inBand ? "" : " **out of band**"}`
    } |`
  ),
  "",
  `Error names and descriptions: ${names.filter((n) => n.agree).length} of ${names.length} agree.`,
  "",
  `20 suspend/resume cycles of a 1 GiB target: memory hash ${
    cyclesOk ? "unchanged" : "CHANGED"
  }; ` +
  `suspend ${fmt(suspendStats)} ms, resume ${fmt(resumeStats)} ms (min/median/max).`,
  "",
].join("\n");
writeFileSync(`${outDir}/conformance-${tag}.md`, md);
console.log(
  `${agreeing} of ${rows.length} scenarios agree; ${inBand} of ${timedRows.length} times in band; ` +
    `report in ${outDir}/conformance-${tag}.md`,
);
await machine.close();
process.exit(agreeing === rows.length && inBand === timedRows.length && cyclesOk ? 0 : 1);

function nvidiaSmiNames(): string[] {
  return execFileSync("nvidia-smi", ["--query-gpu=name", "--format=csv,noheader"], {
    encoding: "utf8",
  }).trim().split("\n").map((n) => n.trim());
}

function fmt(s: { min: number; median: number; max: number }): string {
  return `${s.min.toFixed(0)}/${s.median.toFixed(0)}/${s.max.toFixed(0)}`;
}
