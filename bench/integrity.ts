// What the snapshots' integrity costs (issue 22): the library's `snapshot()` and
// `restoreSnapshot()` with the file system's store as it is ("with": every image fsynced and
// digested right after its dump; at restore, every file's digest checked before criu reads it,
// but the memory images' (pages-N.img) while criu loads them into processes it leaves stopped, let
// go once they matched)
// against the same store without digests ("without": `new FileSnapshotStore({ digests: false })`,
// which still fsyncs every image but neither digests nor verifies), in one run on one machine,
// the two taking turns (round k starts with "with" when k is even, with "without" when it is odd).
//
// Every run starts fresh targets (tests/gpu/target.cu in fifo mode, a session each, N of M MiB of
// GPU memory), takes one snapshot of them (one tree each) into a fresh directory, timed, restores
// it, timed (with its own parts: the checks, criu's restore, the GPU's resume), checks that each
// target runs with the memory hash it had when it started, ends them and removes the images. In
// the runs "with", after the restore (so that both sides do the same between snapshot and
// restore) and while the images are still in the page cache: `inspectSnapshot(dir, { verify:
// true })`, timed (the verification's rate: image bytes / its time), then the disk's own read rate
// of the largest image (dd, O_DIRECT) and through the page cache (dd, one stream), and with
// --cold-verify the verification once more after the page cache is dropped. With --cold-restore,
// the page cache is dropped before every restore, on both sides: a restore on another day, where
// the disk decides (the verification then reads the images from the disk, and criu from the page
// cache the verification filled). Before the rounds,
// the disk's own write and read rate in the images' directory (dd O_DIRECT, --disk-mib), and an
// untimed warm-up of each side with one small target (libcuda, criu and the page cache warm).
//
// Goals: integrity costs at most 10% of the snapshot time and at most 15% of the restore time for
// 8 x 2 GiB processes (medians, with / without); verification reads at 5 GB/s or more (median, from
// the page cache), the disk's own rate beside it; every target of every run back intact.
//
// On the GPU machine, as root, under our binary's Bun (tests/gpu/integrity.sh does all of it):
//   BUN_BE_BUN=1 /tmp/ckpt-integrity/cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts \
//     bench/integrity.ts --criu /tmp/criu/usr/sbin/criu --target /tmp/ckpt-integrity/target \
//     --out $OUT
//   [--count 8] [--mib 2048] [--rounds 2] [--budget-s 420] [--work /tmp/ckpt-integrity-bench]
//   [--disk-mib 4096] [--warmup-mib 256] [--timeout-s 300] [--cold-verify] [--cold-restore]
//   [--libcuda PATH]
// --criu: criu's absolute path (left out: $CKPT_CRIU_PATH, else criu in PATH, as the library finds
// it). --timeout-s bounds each snapshot and restore. --disk-mib 0 and --warmup-mib 0 leave out the
// disk's test file and the warm-up.
// --rounds: each round runs both sides; 2 gives each side two runs, each side first once. 4 is
// fine where the time allows. --budget-s: no round starts after it, nor one that the last round's
// time says would end after it.
//
// Without a GPU (tests/bench_test.ts): --simulate runs both sides on a SimulatedMachine
// (@ckpt/cuda/mock, virtual time) with the file system's store, with and without digests, and
// simulated targets (the check: their memory's chunked SHA-256). It measures nothing real: it
// shows that the benchmark runs and writes its report.
//
// A dry run of the real path without a GPU, as root with criu: --libcuda the fake libcuda of
// tests/fixtures (cc -shared -fPIC -DFAKE_ONE_CHIP -o libcuda.so.1 fake_libcuda.c -lpthread) and
// --target a stand-in of target.cu's fifo mode (tests/gpu/snapshot.sh writes one): the report says
// it measures nothing real, and no goal is judged.
//
// The report: <out>/integrity-<runtime>-<host>.md and .json (bench/reports without --out). It
// prints one line per run, the medians per side, each goal with its figure, and the report's path.

import { rmSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { inspectSnapshot, restoreSnapshot, snapshot } from "../mod.ts";
import type { Machine, NativeMachine } from "../driver.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import type { Manifest } from "../core/snapshot/manifest.ts";
import {
  ddRead,
  type DiskRead,
  dropCaches,
  endFifoTargets,
  endRun,
  endRunOnSignals,
  failure,
  freeMib,
  isFakeLibcuda,
  needMib,
  roundsWithin,
  runProgram,
} from "./fifo_targets.ts";
import { integers } from "./harness.ts";
import { fmt, publish, type Report, type Table } from "./report.ts";
import {
  allBack,
  backLine,
  bySide,
  type Check,
  closeMachines,
  everyTargetBack,
  fifoTargets,
  oneLine,
  openNative,
  runEnvironment,
  runNumbers,
  runOptions,
  runStart,
  simulatedTargets,
  type Target,
  type Targets,
} from "./snapshot_runs.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    criu: { type: "string" },
    ...runOptions({ work: "/tmp/ckpt-integrity-bench", count: "8", mib: "2048" }),
    "disk-mib": { type: "string", default: "4096" },
    "warmup-mib": { type: "string", default: "256" },
    "cold-verify": { type: "boolean", default: false },
    "cold-restore": { type: "boolean", default: false },
  },
});
const sim = values.simulate;
const { count, mib, rounds, budgetS, timeoutMs } = runNumbers(values);
const [diskMib] = integers(values["disk-mib"], "--disk-mib");
const warmupMib = sim ? 0 : integers(values["warmup-mib"], "--warmup-mib")[0];
const coldVerify = values["cold-verify"] && !sim;
const coldRestore = values["cold-restore"] && !sim;
if (!sim && !values.target) {
  throw new Error("--target: tests/gpu/target.cu built with nvcc (it needs the fifo mode)");
}
const criuPath = values.criu ? resolve(values.criu) : undefined;
const targetPath = values.target ? resolve(values.target) : undefined;

const { started, elapsedMs, work, scratch, env } = runStart(values.work);

// ---- the two machines: one driver, host and engine; two stores ----

type Side = "with" | "without";
const SIDES: readonly Side[] = ["with", "without"];
const simulated = sim ? new SimulatedMachine() : undefined;
let native: NativeMachine | undefined;
let base: Machine;
if (simulated) {
  base = simulated;
} else {
  native = await openNative({
    ...(values.libcuda ? { libraryPath: resolve(values.libcuda) } : {}),
    ...(criuPath ? { criu: { criuPath } } : {}),
  }, scratch);
  base = native;
}
// The fake libcuda of tests/fixtures (a dry run with stand-in targets) measures nothing real.
const fake = native ? isFakeLibcuda(native.driver.libraryPath) : false;
const machines: Record<Side, Machine> = {
  with: { ...parts(base), store: new FileSnapshotStore() },
  without: { ...parts(base), store: new FileSnapshotStore({ digests: false }) },
};
function parts(m: Machine): Machine {
  return { driver: m.driver, host: m.host, engine: m.engine, clock: m.clock };
}

// ---- the targets: real ones in fifo mode, or the simulated machine's ----

interface World extends Targets {
  /** Ends every target that is left. */
  end(targets: readonly Target[]): Promise<void>;
}

const realWorld: World = {
  ...fifoTargets(targetPath!, scratch, env, base),
  async end(targets) {
    await endFifoTargets(targets.map((t) => t.fifo!), scratch);
    for (const t of targets) rmSync(t.fifo!.dir, { recursive: true, force: true });
  },
};

const simWorld: World = {
  ...simulatedTargets(simulated!),
  end(targets) {
    for (const t of targets) simulated!.process(t.pid)?.exit();
    return Promise.resolve();
  },
};
const world = sim ? simWorld : realWorld;

// ---- the disk ----

/** The disk's own write rate and read rate in the images' folder: dd O_DIRECT, --disk-mib. */
async function diskRates(): Promise<{ writeGBps?: number; read?: DiskRead; note?: string }> {
  if (diskMib === 0) return { note: "not measured (--disk-mib 0)" };
  const file = join(scratch, "disk-rate.bin");
  const bytes = diskMib * 2 ** 20;
  const bs = diskMib % 4 === 0 ? ["bs=4M", `count=${diskMib / 4}`] : ["bs=1M", `count=${diskMib}`];
  try {
    const w = await runProgram(
      "dd",
      ["if=/dev/zero", `of=${file}`, ...bs, "oflag=direct", "conv=fsync"],
      timeoutMs,
    );
    if (w.code !== 0) return { note: `O_DIRECT write: ${failure(w)}` };
    return { writeGBps: bytes / w.ms / 1e6, read: await ddRead(file, bytes, timeoutMs) };
  } finally {
    rmSync(file, { force: true });
  }
}

// ---- one run: fresh targets, one side, the check, the clean-up ----

interface Verification {
  /** ms of `inspectSnapshot(dir, { verify: true })` from the page cache, and its GB/s. */
  ms?: number;
  GBps?: number;
  /** The same after the page cache was dropped (--cold-verify). */
  coldMs?: number;
  coldGBps?: number;
  /** The largest image read with dd. */
  disk?: DiskRead;
  note?: string;
}
interface Run {
  round: number;
  side: Side;
  /** 0: this side went first in its round; 1: second. */
  order: number;
  warmup: boolean;
  count: number;
  mib: number;
  ok: boolean;
  error?: string;
  checks: Check[];
  /** Wall-clock ms of `snapshot()` and of `restoreSnapshot()`, as the caller waits for them. */
  snapshotMs?: number;
  restoreMs?: number;
  /** Image bytes and files (every file the manifest lists). */
  bytes?: number;
  files?: number;
  /** The library's own figures (the manifest's timings, the restore's). */
  own?: {
    snapshotMs: number;
    suspendMs: number;
    dumpMs: number;
    restoreMs: number;
    checkMs: number;
    criuRestoreMs: number;
    resumeMs: number;
  };
  verify?: Verification;
}
const runs: Run[] = [];

async function oneRun(round: number, side: Side, order: number, warmup: boolean): Promise<Run> {
  const n = warmup ? 1 : count, size = warmup ? warmupMib : mib;
  const rec: Run = { round, side, order, warmup, count: n, mib: size, ok: false, checks: [] };
  const label = `${warmup ? "w" : "r"}${round}-${side}`;
  const images = join(scratch, `img-${label}`);
  const machine = machines[side];
  let targets: Target[] = [];
  try {
    if (!sim) {
      // A CUDA process's images: its GPU memory and some more (2 GiB: 2.7 GB); asked: 1.5 times
      // its memory and 512 MiB.
      await needMib(scratch, Math.ceil(n * (size * 1.5 + 512)));
    }
    targets = await world.start(n, size, label);
    const pids = targets.map((t) => t.pid);
    let t = performance.now();
    const made = await snapshot(pids, images, { machine, timeoutMs });
    rec.snapshotMs = performance.now() - t;
    const manifest: Manifest = made.manifest;
    rec.bytes = manifest.files.reduce((sum, f) => sum + f.bytes, 0);
    rec.files = manifest.files.length;
    if (coldRestore) {
      const why = await dropCaches(timeoutMs);
      if (why) throw new Error(`--cold-restore: ${why}`);
    }
    t = performance.now();
    const back = await restoreSnapshot(images, { machine, timeoutMs });
    rec.restoreMs = performance.now() - t;
    rec.own = {
      snapshotMs: made.ms,
      suspendMs: manifest.timings.suspendMs,
      dumpMs: manifest.timings.dumpMs,
      restoreMs: back.ms,
      checkMs: back.timings.checkMs,
      criuRestoreMs: back.timings.restoreMs,
      resumeMs: back.timings.resumeMs,
    };
    if (side === "with" && !warmup) rec.verify = await verification(images, manifest, rec.bytes);
  } catch (error) {
    rec.error = oneLine(error);
  }
  rec.checks = await world.check(targets);
  rec.ok = rec.error === undefined && allBack(rec.checks, n);
  await world.end(targets).catch(() => {});
  rmSync(images, { recursive: true, force: true });
  const v = rec.verify;
  console.log(
    `${warmup ? "warm-up" : `round ${round}`} ${side}${order ? " (second)" : " (first)"}: ` +
      (rec.error
        ? `FAILED: ${rec.error}`
        : `snapshot ${fmt(rec.snapshotMs! / 1000, 2)} s, restore ${
          fmt(rec.restoreMs! / 1000, 2)
        } s (its checks ${fmt(rec.own!.checkMs / 1000, 2)} s), images ${
          fmt(rec.bytes! / 1e9, 2)
        } GB in ${rec.files} files` +
          (v
            ? `; verify ${fmt(v.GBps, 2)} GB/s${
              v.coldGBps !== undefined ? ` (${fmt(v.coldGBps, 2)} cold)` : ""
            }, disk ${fmt(v.disk?.directGBps, 2)} GB/s O_DIRECT${v.note ? ` (${v.note})` : ""}`
            : "")) +
      backLine(rec.checks, n, rec.ok),
  );
  return rec;
}

/** The verification's rate from the page cache (and cold), with the disk's rate beside. */
async function verification(dir: string, manifest: Manifest, bytes: number) {
  const v: Verification = {};
  let t = performance.now();
  const warm = await inspectSnapshot(dir, { machine: machines.with, verify: true });
  v.ms = performance.now() - t;
  if (!warm.verified) throw new Error(`inspectSnapshot(${dir}, { verify: true }) did not verify`);
  v.GBps = bytes / v.ms / 1e6;
  const largest = [...manifest.files].sort((a, b) => b.bytes - a.bytes)[0];
  if (largest) {
    v.disk = await ddRead(join(dir, ...largest.path.split("/")), largest.bytes, timeoutMs);
  }
  if (coldVerify) {
    const why = await dropCaches(timeoutMs);
    if (why) {
      v.note = `no cold verification: ${why}`;
    } else {
      t = performance.now();
      await inspectSnapshot(dir, { machine: machines.with, verify: true });
      v.coldMs = performance.now() - t;
      v.coldGBps = bytes / v.coldMs / 1e6;
    }
  }
  return v;
}

// ---- the run ----

let exitCode = 0;
let disk: Awaited<ReturnType<typeof diskRates>> = {};
let engineVersion = "?";
const skipped: string[] = [];
endRunOnSignals(scratch);
try {
  const probe = await base.engine!.probe();
  engineVersion = probe.version ?? "?";
  if (probe.problems.length > 0) throw new Error(`the engine: ${probe.problems.join("; ")}`);
  if (!sim) await native!.driver.listGpus(); // cuInit and the GPU list, outside every timing
  console.log(
    `${sim ? "SIMULATED; " : ""}${count} x ${mib} MiB, ${rounds} rounds, images in ${scratch} ` +
      `(${await freeMib(scratch)} MiB free); criu ${engineVersion}${
        criuPath ? ` at ${criuPath}` : ""
      }; ` +
      `${availableParallelism()} cores (as many digest threads)`,
  );
  disk = await diskRates();
  console.log(
    `disk (dd O_DIRECT, ${diskMib} MiB): write ${fmt(disk.writeGBps, 2)} GB/s, read ${
      fmt(disk.read?.directGBps, 2)
    } GB/s; through the page cache ${fmt(disk.read?.cachedGBps, 2)} GB/s${
      disk.note ? ` (${disk.note})` : ""
    }`,
  );
  if (warmupMib > 0) {
    // Untimed: each side once, so that neither pays a cold start.
    for (const [i, side] of SIDES.entries()) runs.push(await oneRun(0, side, i, true));
  }
  await roundsWithin(rounds, { budgetS, elapsedMs, skipped }, async (round) => {
    const order: Side[] = round % 2 === 0 ? ["with", "without"] : ["without", "with"];
    for (const [i, side] of order.entries()) runs.push(await oneRun(round, side, i, false));
  });
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  endRun(scratch);
}
const driverVersion = await closeMachines(native, simulated);

// ---- the report ----

const measured = runs.filter((r) => !r.warmup);
if (measured.length === 0 || measured.some((r) => !r.ok)) exitCode = 1;
const { okRuns, med } = bySide<Side, Run>(measured);
const ratio = (pick: (r: Run) => number | undefined) => med("with", pick) / med("without", pick);
const snapshotRatio = ratio((r) => r.snapshotMs);
const restoreRatio = ratio((r) => r.restoreMs);
const verifyGBps = med("with", (r) => r.verify?.GBps);
const coldGBps = med("with", (r) => r.verify?.coldGBps);
const imageDiskGBps = med("with", (r) => r.verify?.disk?.directGBps);
const s = (ms: number) => fmt(ms / 1000, 2);

const summary: Table = {
  title: "Medians of the runs that came back intact (s; with / without: the ratio of the medians)",
  columns: [
    "side",
    "runs ok",
    "snapshot s",
    "restore s",
    "images GB",
    "with / without, snapshot",
    "with / without, restore",
  ],
  rows: SIDES.map((side) => [
    side,
    `${okRuns(side).length}/${measured.filter((r) => r.side === side).length}`,
    s(med(side, (r) => r.snapshotMs)),
    s(med(side, (r) => r.restoreMs)),
    fmt(med(side, (r) => r.bytes) / 1e9, 2),
    side === "with" ? fmt(snapshotRatio, 3) : "",
    side === "with" ? fmt(restoreRatio, 3) : "",
  ]),
};
const phases: Table = {
  title: "Where the time goes (medians, s, the library's own figures)",
  columns: [
    "side",
    "suspend",
    "dump, fsync (and digest)",
    "whole snapshot",
    "restore's checks",
    "criu restore",
    "resume",
    "whole restore",
  ],
  rows: SIDES.map((side) => [
    side,
    ...([
      "suspendMs",
      "dumpMs",
      "snapshotMs",
      "checkMs",
      "criuRestoreMs",
      "resumeMs",
      "restoreMs",
    ] as const)
      .map((k) => s(med(side, (r) => r.own?.[k]))),
  ]),
};
const checkDiff = med("with", (r) => r.own?.checkMs) - med("without", (r) => r.own?.checkMs);
const verifyTable: Table = {
  title: "Verification (`inspectSnapshot` with `verify`, after the restore) and the disk, " +
    "runs with integrity",
  columns: [
    "round",
    "images GB",
    "files",
    "verify s",
    "verify GB/s",
    "cold verify GB/s",
    "largest image GB",
    "its dd O_DIRECT GB/s",
    "its dd page cache GB/s",
    "note",
  ],
  rows: okRuns("with").map((r) => [
    r.round,
    fmt(r.bytes! / 1e9, 2),
    r.files!,
    s(r.verify?.ms ?? NaN),
    fmt(r.verify?.GBps, 2),
    fmt(r.verify?.coldGBps, 2),
    fmt((r.verify?.disk?.bytes ?? NaN) / 1e9, 2),
    fmt(r.verify?.disk?.directGBps, 2),
    fmt(r.verify?.disk?.cachedGBps, 2),
    [r.verify?.note, r.verify?.disk?.note].filter(Boolean).join("; "),
  ]),
};
const diskTable: Table = {
  title: `The disk's own rate, in ${work}, measured in the same run (dd)`,
  columns: ["method", "write GB/s", "read GB/s", "note"],
  rows: [
    [
      `dd bs=4M O_DIRECT, a ${diskMib} MiB file`,
      fmt(disk.writeGBps, 2),
      fmt(disk.read?.directGBps, 2),
      disk.note ?? disk.read?.note ?? "",
    ],
    ["dd bs=4M through the page cache, the same file", "-", fmt(disk.read?.cachedGBps, 2), ""],
    [
      "dd bs=4M O_DIRECT, the largest image of each run with integrity (median)",
      "-",
      fmt(imageDiskGBps, 2),
      "",
    ],
  ],
};

const judged = (value: number, met: boolean): Pick<Report["goals"][number], "value" | "met"> => ({
  value: Number.isFinite(value) ? value : null,
  met: Number.isFinite(value) && !sim && !fake ? met : null,
});
const goals: Report["goals"] = [
  {
    goal: `integrity costs at most 10% of the snapshot time, ${count} x ${mib} MiB ` +
      "(median with / median without <= 1.10)",
    ...judged(snapshotRatio, snapshotRatio <= 1.1),
  },
  {
    goal: `integrity costs at most 15% of the restore time, ${count} x ${mib} MiB ` +
      `${coldRestore ? "from a cold page cache " : ""}(median with / median without <= 1.15)`,
    ...judged(restoreRatio, restoreRatio <= 1.15),
    ...(Number.isFinite(checkDiff)
      ? {
        note: `the restore's checks before criu ${s(checkDiff)} s longer with digests (the ` +
          "memory images' digests are compared while criu runs)",
      }
      : {}),
  },
  {
    goal: `verification reads at 5 GB/s or more (GB/s, median, from the page cache, ` +
      `${availableParallelism()} cores)`,
    ...judged(verifyGBps, verifyGBps >= 5),
    note: `the disk's own read rate beside it: ${fmt(imageDiskGBps, 2)} GB/s (dd O_DIRECT of the ` +
      `largest image), ${fmt(disk.read?.directGBps, 2)} GB/s (of a ${diskMib} MiB file)` +
      (Number.isFinite(coldGBps)
        ? `; verification after the page cache was dropped ${fmt(coldGBps, 2)} GB/s`
        : ""),
  },
  everyTargetBack(measured),
];

const report: Report = {
  name: "integrity",
  title: "@ckpt/cuda snapshots: what integrity costs, with and without digests, taking turns",
  description: "Each run starts fresh targets" +
    (sim ? " (simulated processes)" : " (tests/gpu/target.cu in fifo mode, a session each)") +
    ", takes one `snapshot()` of them (one tree each) into a fresh directory and one " +
    "`restoreSnapshot()`, each timed as its caller waits for it, checks every target running " +
    "with its memory's hash unchanged, ends them and removes the images. With integrity: the " +
    "file system's store as it is (each image fsynced and digested right after its dump, a " +
    "chunked SHA-256 of 8 MiB pieces hashed in worker threads, one per core; at restore every " +
    "file's digest checked before criu reads it, the memory images' (pages-N.img) while criu " +
    "loads them into processes it leaves stopped, which are let go only once they matched). " +
    "Without: the same store made with " +
    "`digests:false`, which fsyncs as well but neither digests nor verifies. The two sides take " +
    "turns (round k starts with integrity when k is even), in one process, on one machine, with " +
    "the same driver and criu. In each run with integrity, after the restore and with the " +
    "images still in the page cache, `inspectSnapshot` with `verify` is timed (image bytes / " +
    "its time: the verification's rate) and the largest image is read with dd (O_DIRECT: the " +
    "disk's own rate).",
  environment: runEnvironment({ sim, fake, native, driverVersion, date: started }),
  config: {
    count,
    mib,
    rounds,
    budgetS,
    diskMib,
    warmupMib,
    timeoutS: timeoutMs / 1000,
    coldVerify,
    coldRestore,
    work,
    criu: criuPath ?? "(found as the library finds it)",
    criuVersion: engineVersion,
    target: targetPath ?? null,
    cores: availableParallelism(),
    simulate: sim,
  },
  goals,
  tables: [summary, phases, verifyTable, diskTable],
  runs,
  runTables: [{
    title: "Every run, in the order made",
    columns: [
      "round",
      "side",
      "order",
      "snapshot s",
      "restore s",
      "restore's checks s",
      "images GB",
      "verify GB/s",
      "back intact",
      "error",
    ],
    rows: runs.map((r) => [
      r.warmup ? "warm-up" : r.round,
      r.side,
      r.order ? "second" : "first",
      s(r.snapshotMs ?? NaN),
      s(r.restoreMs ?? NaN),
      s(r.own?.checkMs ?? NaN),
      fmt((r.bytes ?? NaN) / 1e9, 2),
      fmt(r.verify?.GBps, 2),
      `${r.checks.filter((c) => c.state === "running" && c.intact).length}/${r.count}`,
      r.error ?? "",
    ]),
  }],
  notes: [
    ...(sim
      ? [
        "SIMULATED: both sides ran on a SimulatedMachine (virtual time for the driver and the " +
        "simulated criu; the files, their fsync and their digests are real, but tiny); the check " +
        "compares each simulated process's memory digest. This measures nothing real.",
      ]
      : []),
    ...skipped.map((x) => `Skipped for the time budget: ${x}.`),
    ...runs.filter((r) => r.error).map((r) =>
      `${r.warmup ? "warm-up" : `round ${r.round}`} ${r.side} failed: ${r.error}`
    ),
    "Both sides fsync every image before a snapshot says it is done; with integrity the digests " +
    "are computed meanwhile, from the page cache, so what they add to a snapshot is what the " +
    "fsync does not hide. The verification is timed after the restore, which read the same " +
    "files: it reads them from the page cache, as a restore right after a snapshot does.",
  ],
};
publish(report, values.out, { columns: 7, digits: 3 });
process.exit(exitCode);
