// Finding CUDA processes: how long a whole-host listing (listCudaProcesses, core/listing.ts) takes
// with CUDA processes and a few hundred idle ones present, against asking about every pid one at a
// time, as tools do today: NVIDIA's utility's `--get-state --pid P` per pid (Modal's client runs it
// on every pid), and our own per-pid query (one getState per pid through the library). The three
// take turns in every round. Goal: the listing well under 100 ms.
//
//   deno run -A bench/listing.ts [--target /tmp/ckpt/target --cuda 8 --mib 256] [--processes 300]
//       [--rounds 5] [--utility PATH [--utility-sample 16]] [--libcuda PATH] [--nvml PATH] [--out DIR]
//   bun bench/listing.ts ...                                   (the same options)
//
// NVIDIA's utility takes about 0.9 s a call on a 4-GPU host, so it is timed on a sample of pids
// each round (the CUDA targets first, then idle ones) and its whole-host time is the median call
// times the number of pids; the report says so. Where no libcuda opens, the fake of tests/fixtures
// (every pid a running CUDA process) is used and the figures measure this package's own cost only.
// The report goes to bench/reports/listing-<runtime>-<host>.md and .json.

import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { listCudaProcesses } from "../mod.ts";
import { type NativeMachine, openMachine } from "../driver.ts";
import { LinuxHost } from "../os/linux_host.ts";
import { COMMON_OPTIONS, integers, startTargets } from "./harness.ts";
import { environment, fmt, median, publish, type Report, type Table } from "./report.ts";
import type { TargetProcess } from "../tests/gpu/native_env.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    ...COMMON_OPTIONS,
    processes: { type: "string", default: "300" },
    rounds: { type: "string", default: "5" },
    cuda: { type: "string", default: "8" },
    mib: { type: "string", default: "256" },
    utility: { type: "string" },
    cli: { type: "string" },
    "utility-sample": { type: "string", default: "16" },
    nvml: { type: "string" },
  },
});
const [idle] = integers(values.processes, "--processes");
const [rounds] = integers(values.rounds, "--rounds");
const [cudaCount] = integers(values.cuda, "--cuda");
const [mib] = integers(values.mib, "--mib");
const [sample] = integers(values["utility-sample"], "--utility-sample");
const started = new Date();

let fakeDir: string | undefined;
let machine: NativeMachine;
let preload: string | undefined;
let fake = false;
try {
  if (values.fake) throw new Error("--fake: the fake libcuda was asked for");
  machine = await openMachine(values.libcuda ? { libraryPath: values.libcuda } : {});
} catch (error) {
  fake = true;
  fakeDir = mkdtempSync(join(tmpdir(), "ckpt-bench-listing-"));
  preload = join(fakeDir, "libcuda.so.1");
  const source = new URL("../tests/fixtures/fake_libcuda.c", import.meta.url).pathname;
  execFileSync("cc", ["-shared", "-fPIC", "-O2", "-o", preload, source, "-lpthread"]);
  machine = await openMachine({ libraryPath: preload });
  console.log(
    `no libcuda here (${(error as Error).message.split("\n")[0]}); using the fake libcuda ` +
      `(every pid a CUDA process): these figures are this package's own cost`,
  );
}
const driver = machine.driver;
const version = await driver.driverVersion();

const kids: ChildProcess[] = [];
let targets: TargetProcess[] = [];
for (let i = 0; i < idle; i++) {
  // With the fake, every 50th idle process has it mapped, so the default rule has candidates.
  const env = preload && i % 50 === 0 ? { ...process.env, LD_PRELOAD: preload } : process.env;
  kids.push(spawn("sleep", ["3600"], { stdio: "ignore", env }));
}

interface Run {
  round: number;
  way: "listing" | "per-pid getState" | "utility per pid" | "our CLI per pid";
  ms: number;
  /** For the utility: the pids asked and each call's time. */
  calls?: { pid: number; ms: number; exit: number | null; out: string }[];
  note: string;
}
const runs: Run[] = [];
let exitCode = 0;
let pidCount = 0;
let cudaFound = 0;

/** One `--get-state` call of a program; resolves to its time, exit status and first line. */
function programCall(
  program: string,
  pid: number,
): Promise<{ pid: number; ms: number; exit: number | null; out: string }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    execFile(
      program,
      ["--get-state", "--pid", String(pid)],
      { timeout: 30_000, encoding: "utf8" },
      (error, stdout, stderr) => {
        const exit = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({
          pid,
          ms: performance.now() - t0,
          exit,
          out: (stdout || stderr).trim().split("\n")[0].slice(0, 80),
        });
      },
    );
  });
}

try {
  if (values.target && !fake) {
    targets = await startTargets(values.target, cudaCount, mib, () => undefined);
  }
  await new Promise((r) => setTimeout(r, 300 + idle));
  await using host = new LinuxHost({ nvmlPath: values.nvml });
  const pids = (await host.scan()).map((p) => p.pid);
  pidCount = pids.length;
  const targetPids = targets.map((t) => t.pid);
  const samplePids = [
    ...targetPids,
    ...pids.filter((p) => !targetPids.includes(p)).filter((_, i, a) =>
      i % Math.max(1, Math.floor(a.length / sample)) === 0
    ),
  ].slice(0, sample);
  console.log(
    `${pidCount} processes in /proc (${idle} idle sleeps started, ${targets.length} CUDA ` +
      `targets), ${rounds} rounds${values.utility ? `, utility on ${samplePids.length} pids` : ""}`,
  );
  const ways: Run["way"][] = [
    "listing",
    "per-pid getState",
    ...(values.utility ? ["utility per pid" as const] : []),
    ...(values.cli ? ["our CLI per pid" as const] : []),
  ];
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < ways.length; k++) {
      const way = ways[(round + k) % ways.length];
      const t0 = performance.now();
      let run: Run;
      if (way === "listing") {
        // The Linux host opened and closed per call (NVML loaded each time), as a caller of
        // listCudaProcesses() without a machine gets it; the driver stays open.
        await using perCall = new LinuxHost({ nvmlPath: values.nvml });
        const l = await listCudaProcesses({ machine: { driver, host: perCall } });
        cudaFound = l.processes.length;
        run = {
          round,
          way,
          ms: performance.now() - t0,
          note: `${l.processes.length} CUDA, ${l.asked} asked of ${l.scanned}, memory ${
            l.gpuMemoryUnknown ? "unknown" : "known"
          }`,
        };
      } else if (way === "per-pid getState") {
        const all = (await host.scan()).map((p) => p.pid);
        let cuda = 0;
        for (const pid of all) if ((await driver.getState(pid)).code === 0) cuda++;
        run = { round, way, ms: performance.now() - t0, note: `${cuda} of ${all.length} answered` };
      } else {
        const program = way === "utility per pid" ? values.utility! : values.cli!;
        const calls = [];
        for (const pid of samplePids) calls.push(await programCall(program, pid));
        const per = median(calls.map((c) => c.ms));
        run = {
          round,
          way,
          ms: per * pidCount,
          calls,
          note: `median call ${fmt(per)} ms x ${pidCount} pids (extrapolated from ${calls.length})`,
        };
      }
      runs.push(run);
      console.log(`round ${round} ${way.padEnd(18)} ${fmt(run.ms).padStart(9)} ms  (${run.note})`);
    }
  }
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  for (const kid of kids) kid.kill();
  await Promise.all(targets.map((t) => t.exit()));
  await machine.close();
  if (fakeDir) rmSync(fakeDir, { recursive: true, force: true });
}

const med = (way: Run["way"]) => median(runs.filter((r) => r.way === way).map((r) => r.ms));
const listingMs = med("listing");
const callsOf = (way: Run["way"]) =>
  runs.filter((r) => r.way === way).flatMap((r) => r.calls ?? []);
const NAMES: Record<Run["way"], string> = {
  "listing": "listCudaProcesses()",
  "per-pid getState": "getState per pid through the library",
  "utility per pid": "NVIDIA's utility --get-state per pid (extrapolated)",
  "our CLI per pid": "our cuda-checkpoint --get-state per pid (extrapolated)",
};
const summary: Table = {
  title: `Whole host, ${pidCount} processes (${targets.length || cudaFound} CUDA): medians (ms)`,
  columns: ["way", "rounds", "median ms", "listing is faster by"],
  rows: (Object.keys(NAMES) as Run["way"][])
    .filter((w) => runs.some((r) => r.way === w))
    .map((w) => [
      NAMES[w],
      runs.filter((r) => r.way === w).length,
      fmt(med(w)),
      w === "listing" ? "-" : `${fmt(med(w) / listingMs, 1)}x`,
    ]),
};
const env = environment({
  fake,
  libcuda: driver.libraryPath,
  driverVersion: version.code === 0 ? version.value : undefined,
  date: started,
});
const report: Report = {
  name: "listing",
  title: `@ckpt/cuda, finding CUDA processes (${env.runtime.name}): one listing vs a query per pid`,
  description: `${idle} idle processes (sleep) and ${targets.length} CUDA targets of ${mib} MiB ` +
    "on the machine. Each round takes the ways in turn: listCudaProcesses() (reads /proc, asks " +
    "the driver about the processes with libcuda mapped, all at once, and NVML for memory; the " +
    "host opened and closed per call, as a caller gets it by default); a getState through the " +
    "library for every pid of /proc, one after another; and NVIDIA's cuda-checkpoint " +
    `--get-state on a sample of ${sample} pids (the CUDA targets first), its whole-host time ` +
    "being the median call times the number of pids.",
  environment: env,
  config: {
    idleProcesses: idle,
    cudaTargets: targets.length,
    mibEach: mib,
    rounds,
    pids: pidCount,
    utility: values.utility ?? null,
    cli: values.cli ?? null,
    sample,
  },
  goals: [
    {
      goal: "a whole-host listing well under 100 ms (median)",
      value: Number.isFinite(listingMs) ? listingMs : null,
      met: Number.isFinite(listingMs) ? listingMs < 100 : null,
    },
    {
      goal: "every CUDA target found by the listing",
      value: cudaFound,
      met: targets.length ? cudaFound >= targets.length : null,
      note: targets.length ? undefined : "no targets (no --target, or the fake libcuda)",
    },
  ],
  tables: [
    summary,
    ...(["utility per pid", "our CLI per pid"] as const).filter((w) => callsOf(w).length).map(
      (w) => ({
        title: `${NAMES[w]}: one call per pid (ms)`,
        columns: ["calls", "median", "min", "max", "exit 0 (CUDA pids)"],
        rows: [[
          callsOf(w).length,
          fmt(median(callsOf(w).map((c) => c.ms))),
          fmt(Math.min(...callsOf(w).map((c) => c.ms))),
          fmt(Math.max(...callsOf(w).map((c) => c.ms))),
          callsOf(w).filter((c) => c.exit === 0).length,
        ]],
      }),
    ),
  ],
  runs,
  runTables: [{
    title: "Every run, in the order made",
    columns: ["round", "way", "ms", "note"],
    rows: runs.map((r) => [r.round, r.way, fmt(r.ms), r.note]),
  }],
  notes: [
    ...(fake
      ? [
        "The fake libcuda was used: every pid answers as a running CUDA process, and the " +
        "figures measure this package's own cost (/proc, the FFI calls), not the driver's.",
      ]
      : []),
    ...(values.utility ? [] : ["NVIDIA's utility was not given (--utility): not compared."]),
  ],
};
publish(report, values.out, { digits: 1 });
process.exit(exitCode);
