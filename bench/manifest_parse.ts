// The manifest parser is linear (issue 22, item 9): how long `parseManifest` (core/snapshot/manifest.ts)
// takes for generated manifests of 16 MB, the largest a restore reads (MANIFEST_MAX_BYTES), in
// three shapes (many small trees; few trees of many files; many processes with long command
// lines), and for one shape at growing sizes, whose ms per MB must stay flat. Before the fix a
// 10.6 MB manifest of 1,500 trees took 228 s (a file's tree was looked up among all trees). The
// rounds of the shapes take turns. CPU only: no GPU, no driver.
//
//   deno run -A bench/manifest_parse.ts [--mb 16] [--rounds 3] [--out DIR]
//   bun bench/manifest_parse.ts ...
//
// The report goes to bench/reports/manifest-parse-<runtime>-<host>.md and .json (or --out DIR).

import process from "node:process";
import { parseArgs } from "node:util";

import { MANIFEST_MAX_BYTES } from "../core/snapshot/layout.ts";
import { parseManifest } from "../core/snapshot/manifest.ts";
import { bigManifest, type BigManifestShape } from "../tests/support/big_manifest.ts";
import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    mb: { type: "string", default: "16" },
    rounds: { type: "string", default: "3" },
    out: { type: "string" },
  },
});
const [mb] = integers(values.mb, "--mb");
const [rounds] = integers(values.rounds, "--rounds");
if (mb < 1 || mb > 16 || rounds < 1) {
  console.error("manifest_parse.ts: --mb must be 1 to 16, --rounds at least 1");
  process.exit(2);
}
const GOAL_MS = 1000;
const started = new Date();

/** A shape per MB (about), scaled to the size asked for. */
const SHAPES: Record<string, (scale: number) => BigManifestShape> = {
  "many small trees": (s) => ({
    trees: Math.round(1200 * s),
    processesPerTree: 2,
    filesPerTree: 8,
  }),
  "few trees, many files": (s) => ({
    trees: 4,
    processesPerTree: 1,
    filesPerTree: Math.round(1800 * s),
  }),
  "many processes": (s) => ({
    trees: Math.round(40 * s),
    processesPerTree: 40,
    filesPerTree: 1,
  }),
};

/** A manifest of `name`'s shape as close under `bytes` as a few steps of its scale find. */
function manifestOf(name: string, bytes: number): string {
  let scale = 1;
  let text = bigManifest(SHAPES[name](scale));
  for (let i = 0; i < 4; i++) {
    scale *= (bytes * 0.97) / text.length;
    text = bigManifest(SHAPES[name](scale));
  }
  while (text.length > Math.min(bytes, MANIFEST_MAX_BYTES)) {
    scale *= 0.98;
    text = bigManifest(SHAPES[name](scale));
  }
  return text;
}

interface Run {
  shape: string;
  mb: number;
  round: number;
  ms: number;
  trees: number;
  files: number;
}

function timed(shape: string, text: string, round: number): Run {
  const t0 = performance.now();
  const m = parseManifest(text, `generated (${shape})`);
  const ms = performance.now() - t0;
  return { shape, mb: text.length / 1e6, round, ms, trees: m.trees.length, files: m.files.length };
}

const texts = new Map(Object.keys(SHAPES).map((s) => [s, manifestOf(s, mb * 2 ** 20)]));
const runs: Run[] = [];
for (let round = 0; round < rounds; round++) {
  const order = [...texts.keys()];
  if (round % 2 === 1) order.reverse();
  for (const shape of order) {
    const run = timed(shape, texts.get(shape)!, round);
    runs.push(run);
    console.log(`${shape}, ${fmt(run.mb, 1)} MB, round ${round}: ${fmt(run.ms, 0)} ms`);
  }
}
// Linearity: the first shape at a quarter, a half and the whole size.
const growth: Run[] = [];
for (const part of [0.25, 0.5, 1]) {
  const shape = "many small trees";
  const text = part === 1 ? texts.get(shape)! : manifestOf(shape, mb * 2 ** 20 * part);
  for (let round = 0; round < rounds; round++) growth.push(timed(shape, text, round));
}

const medianOf = (list: Run[], f: (r: Run) => boolean) => median(list.filter(f).map((r) => r.ms));
const worst = Math.max(...[...texts.keys()].map((s) => medianOf(runs, (r) => r.shape === s)));
const perMb = [...new Set(growth.map((r) => r.mb))].map((size) => ({
  size,
  ms: medianOf(growth, (r) => r.mb === size),
}));
const flat = perMb[perMb.length - 1].ms / perMb[perMb.length - 1].size /
  (perMb[0].ms / perMb[0].size);

const report: Report = {
  name: "manifest-parse",
  title: "@ckpt/cuda, the manifest parser: 16 MB in under 1 s",
  description:
    "`parseManifest` (core/snapshot/manifest.ts, through core/json.ts's strict reader) on " +
    "generated manifests (tests/support/big_manifest.ts) of about the size asked for, the " +
    "largest a restore reads being 16 MiB, in three shapes whose rounds take turns; then one " +
    "shape at a quarter, a half and the whole size, whose time per MB must not grow with the " +
    "size (a quadratic parser's would double each time).",
  environment: environment({
    fake: false,
    libcuda: "none (no driver)",
    noGpu: "the parser alone, on the CPU",
    date: started,
  }),
  config: { mb, rounds, shapes: Object.fromEntries([...texts].map(([s, t]) => [s, t.length])) },
  goals: [
    {
      goal: `every shape of ${mb} MB parsed in under ${GOAL_MS} ms (median)`,
      value: worst,
      met: mb >= 16 ? worst < GOAL_MS : null,
      note: mb >= 16 ? "ms, the slowest shape" : "ms; the goal is judged at 16 MB only",
    },
    {
      goal: "time per MB at the whole size within 2x of a quarter's (linear)",
      value: flat,
      met: flat < 2,
      note: "ratio",
    },
  ],
  tables: [
    {
      title: "Median parse time by shape",
      columns: ["shape", "MB", "trees", "files", "median ms"],
      rows: [...texts.keys()].map((s) => {
        const r = runs.find((x) => x.shape === s)!;
        return [s, fmt(r.mb, 2), r.trees, r.files, fmt(medianOf(runs, (x) => x.shape === s), 0)];
      }),
    },
    {
      title: "Growth (many small trees)",
      columns: ["MB", "median ms", "ms per MB"],
      rows: perMb.map((p) => [fmt(p.size, 2), fmt(p.ms, 0), fmt(p.ms / p.size, 1)]),
    },
  ],
  runs: [...runs, ...growth.map((r) => ({ ...r, growth: true }))],
  runTables: [{
    title: "Every run",
    columns: ["shape", "MB", "round", "ms"],
    rows: [...runs, ...growth].map((r) => [r.shape, fmt(r.mb, 2), r.round, fmt(r.ms, 1)]),
  }],
  notes: [
    "Before (core/manifest.ts at commit 77e7d50, which looked each file's tree up among all " +
    "trees), the many-small-trees shape on a 2-core VM (Deno 2.9.6, 2026-11-25) took 130 ms at " +
    "1.4 MB, 428 ms at 2.8 MB and 1320 ms at 5.6 MB: three times as long for each doubling.",
  ],
};
publish(report, values.out, { digits: 1 });
