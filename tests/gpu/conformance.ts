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
import { CU_RESULTS, CudaProcess, formatDriverVersion } from "../../mod.ts";
import { openNativeDriver } from "../../ffi/mod.ts";
import { type Outcome, runScenario } from "../conformance/runner.ts";
import { SCENARIOS } from "../conformance/scenarios.ts";
import { simulatedEnv } from "../conformance/sim_env.ts";
import { nativeEnv, startTarget } from "./native_env.ts";

const [targetPath, outDir = "tests/gpu/out"] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: conformance.ts <target binary> [report dir]");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

const driver = await openNativeDriver();
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
  agree: boolean;
}

const rows: Row[] = [];
const env = nativeEnv(driver, targetPath);
const gpus = (await env.gpuUuids()).length;
for (const s of SCENARIOS) {
  const native = await runScenario(env, s);
  if (native.skipped) {
    console.log(`not run  ${s.name}: ${native.skipped}`);
    continue;
  }
  // The simulated machine has as many GPUs as this one.
  const simulated = await runScenario(simulatedEnv({ gpus }), s);
  const agree = native.code === simulated.code && native.state === simulated.state &&
    native.problems.every((p) => !p.startsWith("GPU memory")) &&
    simulated.problems.every((p) => !p.startsWith("GPU memory"));
  rows.push({ scenario: s.name, source: s.source, native, simulated, agree });
  console.log(
    `${agree ? "agree   " : "DISAGREE"} ${s.name}: native ${native.codeName}/${
      native.state ?? "-"
    } ` +
      `(${native.ms.toFixed(1)} ms), simulated ${simulated.codeName}/${simulated.state ?? "-"}` +
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
  const proc = new CudaProcess(target.pid, { driver });
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
  notRun,
  errorNames: names,
  cycles: { ok: cyclesOk, suspendMs: suspendStats, resumeMs: resumeStats, runs: cycles },
};
writeFileSync(`${outDir}/conformance-${tag}.json`, JSON.stringify(report, null, 2));
const md = [
  `# Conformance: ${runtime} vs simulated driver`,
  "",
  `${report.date}, ${driver.libraryPath}, cuDriverGetVersion ${version.value}. ` +
  `${gpus} GPU(s). ${agreeing} of ${rows.length} scenarios agree` +
  (notRun ? `; ${notRun} not run here (they need more GPUs).` : "."),
  "",
  "| scenario | source | native | simulated | agree | native ms |",
  "|---|---|---|---|---|---|",
  ...rows.map((r) =>
    `| ${r.scenario} | ${r.source} | ${r.native.codeName} / ${r.native.state ?? "-"} | ` +
    `${r.simulated.codeName} / ${r.simulated.state ?? "-"} | ${r.agree ? "yes" : "**no**"} | ` +
    `${r.native.ms.toFixed(1)} |`
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
  `${agreeing} of ${rows.length} scenarios agree; report in ${outDir}/conformance-${tag}.md`,
);
driver.close();
process.exit(agreeing === rows.length && cyclesOk ? 0 : 1);

function fmt(s: { min: number; median: number; max: number }): string {
  return `${s.min.toFixed(0)}/${s.median.toFixed(0)}/${s.max.toFixed(0)}`;
}
