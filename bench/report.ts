// The one shape of report every side-by-side benchmark writes: bench/reports/<name>-<runtime>-<host>
// .md (for people) and .json (for programs), each with the machine, the GPU, the runtime, the date,
// the configuration, the goals and whether they were met, summary tables and EVERY run.
// Runs under Deno and Bun alike.

import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, hostname, release, totalmem } from "node:os";
import { join } from "node:path";
import process from "node:process";

/** Where the machine, the GPU and the runtime of a run are written down. */
export interface Environment {
  machine: { hostname: string; cpus: number; cpuModel: string; memoryGiB: number; kernel: string };
  gpu: {
    /** One line: "2 x NVIDIA H200 (driver 580.159.04)", or "none (fake libcuda)". */
    description: string;
    gpus: { index: number; name: string; uuid: string; driver: string; memoryMiB: number }[];
    /** What `cuDriverGetVersion` said (13000 = CUDA 13.0), where known. */
    driverVersion?: number;
  };
  runtime: { name: string; version: string };
  /** ISO date and time (UTC) the run started. */
  date: string;
  /** The libcuda both sides used. */
  libcuda: string;
  /** Whether that was the fake of tests/fixtures/fake_libcuda.c: then nothing real is measured. */
  fake: boolean;
}

/** A goal of the benchmark, the figure it is judged on, and whether it was met. */
export interface Goal {
  goal: string;
  /** The measured figure (a ratio, usually), or null when it was not measured. */
  value: number | null;
  /** Whether the goal was met; null when it was not measured. */
  met: boolean | null;
  note?: string;
}

/** A table for the Markdown report (and, as is, for the JSON one). */
export interface Table {
  title: string;
  columns: string[];
  rows: (string | number | boolean | null)[][];
}

/** A whole report. */
export interface Report {
  /** File name stem: bench/reports/<name>-<runtime>-<host>. */
  name: string;
  title: string;
  /** What was measured and how, in a few sentences. */
  description: string;
  environment: Environment;
  /** Sizes, counts, placement, cycles: everything that was chosen for this run. */
  config: Record<string, unknown>;
  goals: Goal[];
  /** Summary tables (medians, ratios). */
  tables: Table[];
  /** Every run, as measured (the Markdown shows them in `runTables`). */
  runs: unknown[];
  /** Tables of every run for the Markdown report. */
  runTables: Table[];
  notes: string[];
}

/** The runtime this runs on, and its version. */
export function runtimeInfo(): { name: string; version: string } {
  const v = process.versions as Record<string, string | undefined>;
  if (v.deno) return { name: "deno", version: v.deno };
  if (v.bun) return { name: "bun", version: v.bun };
  return { name: "node", version: process.version };
}

/**
 * The machine, the GPU (nvidia-smi, unless the fake libcuda is in use or `noGpu` says why none is)
 * and the runtime.
 */
export function environment(
  options: {
    fake: boolean;
    libcuda: string;
    driverVersion?: number;
    date?: Date;
    /** Why no GPU is used (a benchmark of the simulator): nvidia-smi is not asked then. */
    noGpu?: string;
  },
): Environment {
  const cpuList = cpus();
  let gpus: Environment["gpu"]["gpus"] = [];
  let description: string;
  if (options.noGpu !== undefined) {
    description = `none (${options.noGpu})`;
  } else if (options.fake) {
    description = "none (fake libcuda)";
  } else {
    try {
      const out = execFileSync("nvidia-smi", [
        "--query-gpu=index,name,uuid,driver_version,memory.total",
        "--format=csv,noheader,nounits",
      ], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 30_000 });
      gpus = out.trim().split("\n").filter(Boolean).map((line) => {
        const [index, name, uuid, driver, memory] = line.split(",").map((s) => s.trim());
        return { index: Number(index), name, uuid, driver, memoryMiB: Number(memory) };
      });
      const names = [...new Set(gpus.map((g) => g.name))].join(", ");
      description = `${gpus.length} x ${names} (driver ${gpus[0]?.driver ?? "?"})`;
    } catch (error) {
      description = `unknown (nvidia-smi: ${(error as Error).message.split("\n")[0]})`;
    }
  }
  return {
    machine: {
      hostname: hostname(),
      cpus: cpuList.length,
      cpuModel: cpuList[0]?.model ?? "unknown",
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      kernel: release(),
    },
    gpu: { description, gpus, driverVersion: options.driverVersion },
    runtime: runtimeInfo(),
    date: (options.date ?? new Date()).toISOString(),
    libcuda: options.libcuda,
    fake: options.fake,
  };
}

/** The median (the mean of the two middle values for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The p-th quantile (0..1), linear between neighbours; NaN for none. */
export function quantile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const at = (s.length - 1) * p;
  const lo = Math.floor(at), hi = Math.ceil(at);
  return s[lo] + (s[hi] - s[lo]) * (at - lo);
}

/** A number for a table: ms with up to 3 significant decimals. */
export function fmt(value: number | null | undefined, digits = 1): string {
  if (value === null || value === undefined || Number.isNaN(value)) return "-";
  return value.toFixed(digits);
}

const FAKE_WARNING =
  "**This run used the fake libcuda (tests/fixtures/fake_libcuda.c): every pid " +
  "counts as a CUDA process and checkpoint/restore only sleep. It measures nothing real: it only " +
  "shows that the benchmark runs and writes its report.**";

function cell(value: string | number | boolean | null): string {
  if (value === null) return "-";
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value).replaceAll("|", "\\|");
}

// The Markdown is written as `deno fmt` (line width 100) would format it, so that reports can be
// committed as they are: prose wrapped at 100 columns, table columns padded to one width.

/** Wraps `text` at 100 columns, the first line after `first`, the others after `rest`. */
function wrap(text: string, first = "", rest = " ".repeat(first.length)): string {
  const lines: string[] = [];
  let line = first;
  let empty = true;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (!empty && line.length + 1 + word.length > WIDTH) {
      lines.push(line);
      line = rest + word;
    } else {
      line += (empty ? "" : " ") + word;
    }
    empty = false;
  }
  lines.push(line);
  return lines.join("\n");
}
const WIDTH = 100;

function markdownTable(table: Table): string {
  const rows = [table.columns, ...table.rows.map((row) => row.map(cell))];
  const widths = table.columns.map((_, i) => Math.max(3, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]) => `| ${widths.map((w, i) => (r[i] ?? "").padEnd(w)).join(" | ")} |`;
  return [
    `### ${table.title}`,
    "",
    line(rows[0]),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.slice(1).map(line),
    "",
  ].join("\n");
}

/** The report as Markdown. */
export function toMarkdown(report: Report): string {
  const env = report.environment;
  const goals: Table = {
    title: "Goals",
    columns: ["goal", "measured", "met"],
    rows: report.goals.map((g) => [
      g.goal,
      g.value === null ? "not measured" : g.value.toFixed(3),
      `${g.met === null ? "-" : g.met ? "**yes**" : "**no**"}${g.note ? ` (${g.note})` : ""}`,
    ]),
  };
  const lines = [
    wrap(`# ${report.title}`),
    "",
    ...(env.fake ? [wrap(FAKE_WARNING), ""] : []),
    wrap(report.description),
    "",
    "## Where and when",
    "",
    wrap(`date: ${env.date}`, "- "),
    wrap(
      `machine: ${env.machine.hostname}, ${env.machine.cpus} CPUs (${env.machine.cpuModel}), ` +
        `${env.machine.memoryGiB} GiB, kernel ${env.machine.kernel}`,
      "- ",
    ),
    wrap(
      `GPU: ${env.gpu.description}` +
        (env.gpu.driverVersion ? `; cuDriverGetVersion ${env.gpu.driverVersion}` : ""),
      "- ",
    ),
    ...env.gpu.gpus.map((g) =>
      wrap(`GPU ${g.index}: ${g.name}, ${g.memoryMiB} MiB, ${g.uuid}`, "  - ", "    ")
    ),
    wrap(`runtime: ${env.runtime.name} ${env.runtime.version}`, "- "),
    wrap(`libcuda: ${env.libcuda}${env.fake ? " (fake)" : ""}`, "- "),
    wrap(
      `configuration: ${
        Object.entries(report.config).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ")
      }`,
      "- ",
    ),
    "",
    "## Goals",
    "",
    ...markdownTable(goals).split("\n").slice(2),
    "## Summary",
    "",
    ...report.tables.map(markdownTable),
    "## Every run",
    "",
    ...report.runTables.map(markdownTable),
    ...(report.notes.length ? ["## Notes", "", ...report.notes.map((n) => wrap(n, "- ")), ""] : []),
  ];
  return lines.join("\n");
}

/** A file-name-safe host name. */
export function safeName(text: string): string {
  return text.replace(/[^A-Za-z0-9_.-]+/g, "_");
}

/**
 * Writes `<dir>/<name>-<runtime>-<host>.md` and `.json` (dir: bench/reports by default); returns
 * both paths.
 */
export function writeReport(report: Report, dir?: string): { markdown: string; json: string } {
  const folder = dir ?? new URL("./reports", import.meta.url).pathname;
  mkdirSync(folder, { recursive: true });
  const stem = join(
    folder,
    `${report.name}-${report.environment.runtime.name}-${
      safeName(report.environment.machine.hostname)
    }`,
  );
  const { runTables: _omit, ...json } = report;
  writeFileSync(`${stem}.json`, JSON.stringify(json, null, 2) + "\n");
  writeFileSync(`${stem}.md`, toMarkdown(report));
  return { markdown: `${stem}.md`, json: `${stem}.json` };
}

/**
 * Writes the report, then prints its first table (the first `columns` columns) and every goal
 * with its value to `digits` places, and where the files are: how each benchmark ends.
 */
export function publish(
  report: Report,
  dir: string | undefined,
  { columns, digits }: { columns?: number; digits: number },
): void {
  const files = writeReport(report, dir);
  const summary = report.tables[0];
  console.log(`\n${summary.title}`);
  console.log(summary.columns.slice(0, columns).join(" | "));
  for (const row of summary.rows) console.log(row.slice(0, columns).join(" | "));
  for (const g of report.goals) {
    console.log(
      `goal: ${g.goal}: ${g.value === null ? "not measured" : fmt(g.value, digits)} -> ${
        g.met === null ? "-" : g.met ? "met" : "NOT met"
      }`,
    );
  }
  console.log(`report: ${files.markdown}, ${files.json}`);
}
