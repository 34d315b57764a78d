// The simulator's snapshot and restore against the bytes a program wrote (issue 32, section 2): a
// SimulatedMachine (virtual clock) with one CUDA process of N MiB, every byte of it written, taken
// to a directory with `snapshot` and brought back with `restoreSnapshot`, its memory compared
// (chunked SHA-256) with what was written. The wall time of each, and the child's peak memory
// (VmHWM). Each run is a fresh child; every round runs each runtime, and within it each checkout
// (this one and --baseline's, taking turns: round r starts with the other one of r - 1) at each
// size. CPU and the disk of the temporary directory only: the snapshot's images are real files,
// written durably (fsync) and digested as on a GPU machine.
//
//   deno run -A bench/sim_snapshot.ts [--rounds 3] [--mib 64,256,1024] [--runtimes deno,bun]
//     [--baseline DIR] [--label NAME] [--out DIR]
//
// --baseline runs the same in another checkout (the code before a change: `git archive BASE |
// tar -x -C DIR`); --label names the report: bench/reports/sim-snapshot[-LABEL]-<runtime>-<host>.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    child: { type: "string" },
    rounds: { type: "string", default: "3" },
    mib: { type: "string", default: "64,256,1024" },
    runtimes: { type: "string", default: "deno,bun" },
    baseline: { type: "string" },
    label: { type: "string" },
    out: { type: "string" },
  },
});
const ROOT = resolve(new URL("../", import.meta.url).pathname);

/** What one child measured. */
interface Measure {
  snapshotMs?: number;
  restoreMs?: number;
  intact?: boolean;
  peakMiB?: number;
  error?: string;
}

/** The child: one snapshot and restore of `mib` MiB written, with the checkout at `root`. */
async function child(root: string, mib: number): Promise<Measure> {
  const { snapshot, restoreSnapshot } = await import(join(root, "mod.ts"));
  const { SimulatedMachine } = await import(join(root, "mock", "mod.ts"));
  const base = mkdtempSync(join(tmpdir(), "ckpt-bench-sim-snapshot-")), dir = join(base, "snap");
  const sim = new SimulatedMachine({ clock: "virtual" });
  const out: Measure = {};
  try {
    const p = sim.spawn({ memoryMiB: mib });
    const chunk = new Uint8Array(1 << 20);
    for (let i = 0; i < mib; i++) {
      for (let j = 0; j < chunk.length; j += 4096) chunk.fill((i * 7 + j) & 255, j, j + 4096);
      await p.write(i * chunk.length, chunk);
    }
    const written = await p.memoryChunkedSha256();
    let t = performance.now();
    await snapshot([p.pid], dir, { machine: sim });
    out.snapshotMs = performance.now() - t;
    t = performance.now();
    await restoreSnapshot(dir, { machine: sim });
    out.restoreMs = performance.now() - t;
    out.intact = await sim.process(p.pid).memoryChunkedSha256() === written;
  } catch (err) {
    out.error = String((err as Error)?.message ?? err).slice(0, 300);
  } finally {
    await sim.close();
    rmSync(base, { recursive: true, force: true });
  }
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
  if (hwm) out.peakMiB = Number(hwm[1]) / 1024;
  return out;
}

if (values.child !== undefined) {
  const [mib] = integers(values.mib, "--mib");
  console.log(JSON.stringify(await child(values.child, mib)));
  process.exit(0);
}

const [rounds] = integers(values.rounds, "--rounds");
const sizes = integers(values.mib, "--mib");
const runtimes = values.runtimes.split(",");
if (rounds < 1 || sizes.some((n) => n < 1) || runtimes.some((r) => r !== "deno" && r !== "bun")) {
  console.error("sim_snapshot.ts: --rounds and sizes from 1; --runtimes a list of deno and bun");
  process.exit(2);
}
const checkouts: [string, string][] = [["this", ROOT]];
if (values.baseline) checkouts.push(["baseline", resolve(values.baseline)]);
const started = new Date();

interface Run extends Measure {
  round: number;
  checkout: string;
  runtime: string;
  mib: number;
}
const runs: Run[] = [];

/** One child run: its measure, or the failure it printed. */
function run(runtime: string, root: string, mib: number): Promise<Measure> {
  const script = join(ROOT, "bench", "sim_snapshot.ts");
  const args = [script, "--child", root, "--mib", String(mib)];
  const argv = runtime === "deno" ? ["deno", "run", "-A", ...args] : ["bun", ...args];
  return new Promise((done) => {
    const c = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    c.stdout!.on("data", (d) => out += d);
    c.stderr!.on("data", (d) => err += d);
    c.on("close", (code) => {
      try {
        done(JSON.parse(out.trim().split("\n").at(-1)!));
      } catch {
        done({ error: `exit ${code}: ${(err || out).trim().split("\n").at(-1)}` });
      }
    });
  });
}

for (let round = 1; round <= rounds; round++) {
  for (const runtime of runtimes) {
    const order = round % 2 ? checkouts : [...checkouts].reverse();
    for (const [checkout, root] of order) {
      for (const mib of sizes) {
        const m = await run(runtime, root, mib);
        runs.push({ round, checkout, runtime, mib, ...m });
        const said = m.error ??
          `snapshot ${fmt(m.snapshotMs, 0)} ms, restore ${
            fmt(m.restoreMs, 0)
          } ms, intact ${m.intact}, peak ${fmt(m.peakMiB, 0)} MiB`;
        console.log(`round ${round} ${runtime} ${checkout} ${mib} MiB: ${said}`);
      }
    }
  }
}

const rows: (string | number | null)[][] = [];
for (const runtime of runtimes) {
  for (const mib of sizes) {
    for (const [checkout] of checkouts) {
      const these = runs.filter((r) =>
        r.runtime === runtime && r.mib === mib && r.checkout === checkout
      );
      const ok = these.filter((r) => r.error === undefined && r.intact);
      const med = (f: (r: Run) => number) => ok.length ? median(ok.map(f)) : null;
      rows.push([
        runtime,
        mib,
        checkout,
        `${ok.length} of ${these.length}`,
        fmt(med((r) => r.snapshotMs!), 0),
        fmt(med((r) => r.restoreMs!), 0),
        fmt(med((r) => r.peakMiB!), 0),
        these.find((r) => r.error)?.error ?? "",
      ]);
    }
  }
}
const env = environment({ fake: false, libcuda: "none", date: started, noGpu: "the simulator" });
const report: Report = {
  name: `sim-snapshot${values.label ? `-${values.label}` : ""}`,
  title: "The simulator's snapshot and restore of a process whose every byte was written",
  description: "A SimulatedMachine (virtual clock) with one CUDA process of N MiB, every byte " +
    "written; snapshot() to a directory of the temporary directory, then restoreSnapshot(), the " +
    "memory compared. Wall times in the child; its peak resident memory (VmHWM). Each run a fresh " +
    "child; the checkouts take turns in every round.",
  environment: env,
  config: { rounds, sizes, runtimes, checkouts: Object.fromEntries(checkouts), tmpdir: tmpdir() },
  goals: [{
    goal: "a snapshot and a restore of 1 GiB written, in both runtimes, intact",
    value: runs.filter((r) => r.mib === 1024 && r.checkout === "this" && r.intact).length,
    met: sizes.includes(1024)
      ? runs.filter((r) => r.mib === 1024 && r.checkout === "this").every((r) => r.intact)
      : null,
    note: "the value: the runs of this checkout at 1024 MiB that came back intact",
  }],
  tables: [{
    title: "Medians of the runs that came back intact",
    columns: [
      "runtime",
      "MiB",
      "checkout",
      "intact",
      "snapshot ms",
      "restore ms",
      "peak MiB",
      "failure",
    ],
    rows,
  }],
  runs,
  runTables: [{
    title: "Every run",
    columns: [
      "round",
      "runtime",
      "checkout",
      "MiB",
      "snapshot ms",
      "restore ms",
      "intact",
      "peak MiB",
      "error",
    ],
    rows: runs.map((r) => [
      r.round,
      r.runtime,
      r.checkout,
      r.mib,
      fmt(r.snapshotMs, 0),
      fmt(r.restoreMs, 0),
      r.intact ?? null,
      fmt(r.peakMiB, 0),
      r.error ?? "",
    ]),
  }],
  notes: [],
};
publish(report, values.out, { digits: 2 });
