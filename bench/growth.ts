// Growth: how checkpoint (suspend: lock + checkpoint) and restore (resume: restore + unlock) time
// grows with the GPU memory of one process (16 MiB to 32 GiB), and with the number of processes
// (1 to 8 of 4 GiB), all on GPU 0 and spread over the GPUs where the machine has several. The
// report gives the aggregate GB/s beside the ceilings measured before (docs/DRIVER.md#four-h200s:
// about 8.5 GB/s checkpoint and 19 GB/s restore host-side on a 4 x H200 host) and the PCIe Gen5
// x16 link of each GPU used (about 63 GB/s). Only our API is timed (runGroup "suspend" and
// "resume"): the side-by-side comparisons with C are bench/overhead.ts and bench/many.ts.
//
//   deno run -A bench/growth.ts --target /tmp/ckpt/target [--sizes 16,256,1024,4096,16384,32768]
//       [--counts 1,2,4,8] [--count-mib 4096] [--cycles 2] [--warmup 1] [--placements gpu0,spread]
//       [--libcuda PATH] [--out DIR]
//   bun bench/growth.ts ...                                         (the same options)
//   deno run -A bench/growth.ts --fake --sizes 1 --counts 1,2 --count-mib 1 --cycles 1
//                                                       (no GPU: measures nothing real)
//
// Bytes are the GPU memory the processes hold as NVML reports it (the CUDA context included),
// read before each size or count; where NVML cannot tell, the allocated MiB plus 520 MiB of
// context per process (measured on an H200). The report goes to bench/reports/growth-<runtime>-
// <host>.md and .json.

import process from "node:process";

import { listCudaProcesses, runGroup } from "../mod.ts";
import {
  benchArgs,
  environmentOf,
  FAKE_NOTE,
  gpuCount,
  integers,
  memoryIntact,
  setup,
  startTargets,
  timed,
} from "./harness.ts";
import { fmt, median, publish, type Report, type Table } from "./report.ts";

const values = benchArgs({
  sizes: { type: "string", default: "16,256,1024,4096,16384,32768" },
  counts: { type: "string", default: "1,2,4,8" },
  "count-mib": { type: "string", default: "4096" },
  cycles: { type: "string", default: "2" },
  warmup: { type: "string", default: "1" },
  placements: { type: "string", default: "gpu0,spread" },
  gpus: { type: "string" },
});
const sizes = integers(values.sizes, "--sizes");
const counts = integers(values.counts, "--counts");
const [countMiB] = integers(values["count-mib"], "--count-mib");
const [cycles] = integers(values.cycles, "--cycles");
const [warmups] = integers(values.warmup, "--warmup");
const placements = values.placements.split(",").map((p) => p.trim());
for (const p of placements) {
  if (p !== "gpu0" && p !== "spread") {
    throw new RangeError(`--placements: gpu0 and/or spread, got ${JSON.stringify(p)}`);
  }
}

/** Host-side ceilings of a 4 x H200 host (docs/DRIVER.md#four-h200s), one PCIe Gen5 x16 link. */
const CEILING_GBS = { suspend: 8.5, resume: 19, pcieLink: 63 } as const;
/** A process's CUDA context on an H200, measured (mock/timing.ts CONTEXT_MIB). */
const CONTEXT_MIB = 520;

interface Run {
  axis: "size" | "count";
  placement: "gpu0" | "spread";
  processes: number;
  /** Allocated by each target. */
  mibEach: number;
  /** GPU memory of all of them (NVML, context included), or the estimate. */
  gpuMiB: number;
  gpuMiBMeasured: boolean;
  gpusUsed: number;
  cycle: number;
  warmup: boolean;
  ok: boolean;
  suspendMs: number;
  resumeMs: number;
  /** Per process: checkpoint and restore step times. */
  checkpointMs: number[];
  restoreMs: number[];
}

const started = new Date();
const s = await setup(values, "cycle");
const gpus = values.gpus ? integers(values.gpus, "--gpus")[0] : gpuCount(s.fake ? 2 : 1);
const runs: Run[] = [];
const intactFailures: string[] = [];
let exitCode = 0;

/** The GPU memory of `pids` in MiB as the host sees it, or undefined where it cannot tell. */
async function gpuMemoryOf(pids: readonly number[]): Promise<number | undefined> {
  const listing = await listCudaProcesses({ machine: s.machine });
  let total = 0;
  for (const pid of pids) {
    const p = listing.processes.find((q) => q.pid === pid);
    if (!p || p.gpuMemory === "unknown") return undefined;
    total += Object.values(p.gpuMemory).reduce((a, b) => a + b, 0);
  }
  return total;
}

async function measure(
  axis: Run["axis"],
  placement: Run["placement"],
  count: number,
  mibEach: number,
): Promise<void> {
  const gpuOf = (i: number) => placement === "spread" ? i % gpus : 0;
  const targets = await startTargets(s.target, count, mibEach, gpuOf);
  const pids = targets.map((t) => t.pid);
  try {
    const measured = s.fake ? undefined : await gpuMemoryOf(pids);
    const gpuMiB = measured ?? count * (mibEach + CONTEXT_MIB);
    const gpusUsed = placement === "spread" ? Math.min(count, gpus) : 1;
    for (let c = -warmups; c < cycles; c++) {
      const [suspendMs, sr] = await timed(() => runGroup("suspend", pids, { machine: s.machine }));
      const [resumeMs, rr] = sr.ok
        ? await timed(() => runGroup("resume", pids, { machine: s.machine }))
        : [NaN, undefined];
      const stepMs = (r: typeof sr | undefined, step: string) =>
        r?.processes.map((p) => p.steps.find((x) => x.step === step)?.ms ?? NaN) ?? [];
      const run: Run = {
        axis,
        placement,
        processes: count,
        mibEach,
        gpuMiB,
        gpuMiBMeasured: measured !== undefined,
        gpusUsed,
        cycle: c,
        warmup: c < 0,
        ok: sr.ok && (rr?.ok ?? false),
        suspendMs,
        resumeMs,
        checkpointMs: stepMs(sr, "checkpoint"),
        restoreMs: stepMs(rr, "restore"),
      };
      runs.push(run);
      console.log(
        `${axis} ${placement} ${count} x ${mibEach} MiB (${fmt(gpuMiB, 0)} MiB on the GPU) ` +
          `${c < 0 ? "warm-up" : `cycle ${c}`}: suspend ${fmt(suspendMs)} ms (${
            fmt(gbs(gpuMiB, suspendMs), 2)
          } GB/s), resume ${fmt(resumeMs)} ms (${fmt(gbs(gpuMiB, resumeMs), 2)} GB/s)` +
          (run.ok ? "" : "  FAILED"),
      );
      if (!run.ok) {
        const bad = [...sr.processes, ...(rr?.processes ?? [])].find((p) => p.error);
        throw new Error(`${axis} ${count} x ${mibEach} MiB failed: ${bad?.error?.message}`);
      }
    }
    const intact = await memoryIntact(targets);
    if (!intact.every(Boolean)) {
      intactFailures.push(`${count} x ${mibEach} MiB (${placement})`);
      exitCode = 1;
    }
  } finally {
    await Promise.all(targets.map((t) => t.exit()));
  }
}

/** Decimal GB per second for `mib` MiB moved in `ms`. */
function gbs(mib: number, ms: number): number {
  return (mib * 1024 * 1024) / 1e9 / (ms / 1000);
}

try {
  for (const mib of sizes) await measure("size", "gpu0", 1, mib);
  for (const placement of placements as Run["placement"][]) {
    if (placement === "spread" && gpus < 2) {
      console.log("spread: one GPU here, so the counts were measured on GPU 0 only");
      continue;
    }
    for (const count of counts) await measure("count", placement, count, countMiB);
  }
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  await s.cleanup();
}

// ---- the report ----

const timedRuns = runs.filter((r) => !r.warmup && r.ok);
const groupsOf = (axis: Run["axis"]) => {
  const keys = new Map<string, Run[]>();
  for (const r of timedRuns.filter((r) => r.axis === axis)) {
    const key = `${r.placement}/${r.processes}/${r.mibEach}`;
    keys.set(key, [...keys.get(key) ?? [], r]);
  }
  return [...keys.values()];
};
const COLUMNS = [
  "placement",
  "processes",
  "MiB each",
  "GPU MiB (all)",
  "GPUs",
  "cycles",
  "suspend ms",
  "resume ms",
  "suspend GB/s",
  "resume GB/s",
  "suspend / host ceiling",
  "resume / host ceiling",
  "resume / PCIe links",
];
function rowOf(group: Run[]): (string | number)[] {
  const r0 = group[0];
  const sus = median(group.map((r) => r.suspendMs));
  const res = median(group.map((r) => r.resumeMs));
  const sg = gbs(r0.gpuMiB, sus), rg = gbs(r0.gpuMiB, res);
  return [
    r0.placement,
    r0.processes,
    r0.mibEach,
    `${fmt(r0.gpuMiB, 0)}${r0.gpuMiBMeasured ? "" : " (estimated)"}`,
    r0.gpusUsed,
    group.length,
    fmt(sus),
    fmt(res),
    fmt(sg, 2),
    fmt(rg, 2),
    `${fmt((sg / CEILING_GBS.suspend) * 100, 0)}%`,
    `${fmt((rg / CEILING_GBS.resume) * 100, 0)}%`,
    `${fmt((rg / (CEILING_GBS.pcieLink * r0.gpusUsed)) * 100, 0)}%`,
  ];
}
const tables: Table[] = [
  {
    title: "Against memory per process (1 process on GPU 0; medians)",
    columns: COLUMNS,
    rows: groupsOf("size").map(rowOf),
  },
  {
    title: `Against the number of processes (${countMiB} MiB each; medians)`,
    columns: COLUMNS,
    rows: groupsOf("count").map(rowOf),
  },
];
const env = environmentOf(s, started);
const report: Report = {
  name: "growth",
  title: `@ckpt/cuda, growth (${env.runtime.name}): time and GB/s against memory and processes`,
  description: 'runGroup("suspend") (lock + checkpoint) and runGroup("resume") (restore + ' +
    `unlock) of target processes: one process of each size on GPU 0, then ${countMiB} MiB ` +
    `processes in counts of ${
      counts.join(", ")
    }, all on GPU 0 and spread (target i on GPU i mod ${gpus}). Each size or ` +
    `count: ${warmups} untimed warm-up cycle(s), then ${cycles} timed. GB/s is the GPU memory of ` +
    "all the processes (decimal GB) over the group's time, beside the host-side ceilings " +
    `measured before on a 4 x H200 host (${CEILING_GBS.suspend} GB/s checkpoint, ` +
    `${CEILING_GBS.resume} GB/s restore) and one PCIe Gen5 x16 link per GPU used ` +
    `(${CEILING_GBS.pcieLink} GB/s).`,
  environment: env,
  config: {
    sizes,
    counts,
    countMiB,
    cycles,
    warmupCycles: warmups,
    placements,
    gpus,
    target: s.target,
  },
  goals: [{
    goal: "every process's memory intact after its cycles (hash on the GPU)",
    value: intactFailures.length,
    met: intactFailures.length === 0 && timedRuns.length > 0,
    note: intactFailures.length ? `not intact: ${intactFailures.join("; ")}` : undefined,
  }],
  tables,
  runs,
  runTables: [{
    title: "Every cycle (ms; warm-ups included, marked)",
    columns: [
      "axis",
      "placement",
      "processes",
      "MiB each",
      "cycle",
      "ok",
      "suspend",
      "resume",
      "checkpoint per process",
      "restore per process",
    ],
    rows: runs.map((r) => [
      r.axis,
      r.placement,
      r.processes,
      r.mibEach,
      r.warmup ? `warm-up ${r.cycle}` : r.cycle,
      r.ok,
      fmt(r.suspendMs),
      fmt(r.resumeMs),
      r.checkpointMs.map((v) => fmt(v)).join(", "),
      r.restoreMs.map((v) => fmt(v)).join(", "),
    ]),
  }],
  notes: [
    ...(s.fake ? [FAKE_NOTE] : []),
    "The ceilings are not limits of this package: they are what the driver reached with every " +
    "call made at once from C (docs/DRIVER.md#four-h200s). Checkpoint copies into host memory " +
    "the driver allocates in the target process, so it is bound by host memory bandwidth and " +
    "page faults rather than by the PCIe link.",
  ],
};
publish(report, values.out, { digits: 2 });
process.exit(exitCode);
