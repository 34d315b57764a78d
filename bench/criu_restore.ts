// Our snapshot restore with one criu against another (issue 23): the library's
// `restoreSnapshot()` with the file system's store, criu run without its CUDA plugin as the
// library runs it, criu A (--criu-a) against criu B (--criu-b), in one run on one machine, taking
// turns (round k starts with A when k is even, with B when it is odd).
//
// Per run of this program (one configuration: N targets of M MiB, the page cache warm or cold):
// fresh targets (tests/gpu/target.cu in fifo mode, a session each) and ONE snapshot of them (one
// tree each), taken with criu A; then, in each round, for each side: the restore, timed as its
// caller waits for it and with the library's own parts (its checks, criu's restore of every tree,
// the GPU's restore and unlock), every target checked running with the memory hash it had when it
// started, the restored targets killed and waited for until their pids are free (the next restore
// needs them). The same images restored again and again is what makes the sides comparable. criu
// records each open file's size, and refuses a restore where it changed: before each restore, each
// target's output file is put back as it was when the snapshot was taken.
//
// Whose images: --snapshot-with auto (the default) takes the snapshot with A; where B's first
// restore of A's images fails in criu, B gets a snapshot of its own (fresh targets, B's dump) and
// restores that from then on, and the report says so. "a" and "b": one snapshot by that side,
// restored by both, no fallback; "each": a snapshot per side from the start (twice the disk).
//
// Before the rounds: the images' bytes and files, and the disk's own read rate of the largest
// image: dd with O_DIRECT, dd through the page cache, then the page cache dropped and, warm, every
// image read once through it (timed: the whole set from a cold page cache, and the cache warm for
// the rounds) or, cold, the largest image read through it. With --cold the page cache is dropped
// (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every restore, on both sides.
//
// Goals (issue 23): one 8 GiB process from the page cache, criu's part of the restore at least 2x
// faster with the better criu (median A / median B); from a cold cache, the whole restore within
// 1.1x of (image bytes / the disk's read rate (dd O_DIRECT of the largest image) + the driver's
// restore time, the restore's own resume part of the same run); every target of every run back
// intact.
//
// On the GPU machine, as root, under our binary's Bun (tests/gpu/criu_speed.sh does all of it):
//   BUN_BE_BUN=1 /tmp/ckpt-criu-speed/cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts \
//     bench/criu_restore.ts --criu-a /tmp/criu-a/usr/sbin/criu --criu-b /tmp/criu-b/usr/sbin/criu \
//     --target /tmp/ckpt-criu-speed/target --out $OUT
//   [--count 1] [--mib 8192] [--rounds 2] [--budget-s 420] [--cold] [--digests on|off]
//   [--criu-a-args "--opt ..."] [--criu-b-args "--opt ..."] [--snapshot-with auto|a|b|each]
//   [--work /tmp/ckpt-criu-restore] [--timeout-s 300] [--libcuda PATH]
// --criu-a, --criu-b: absolute paths (relative ones are resolved); the labels are what their
// `--version` says. --criu-X-args: more criu options for every dump and restore of that side
// (the library's `extraArgs`), split at spaces, each starting with --. --digests off: the store
// made with `digests: false` (no digest checked before the restore: with digests, a cold restore
// reads every image from the disk to check it, and criu then reads them from the page cache).
// --rounds: each round runs both sides once. --budget-s: no round starts after it, nor one that
// the last round's time says would end after it. --timeout-s bounds each snapshot and restore.
//
// Without a GPU (tests/criu_restore_bench_test.ts): --simulate runs both sides on a
// SimulatedMachine (@ckpt/cuda/mock, virtual time) with the file system's store, side A its criu
// (4.1.1), side B another simulated criu, and simulated targets (the check: their memory's chunked
// SHA-256); --simulate-b-refuses-a makes B's first restore of A's images fail, as an older criu's
// might on a newer's images, to show the fallback. It measures nothing real.
//
// A dry run of the real path without a GPU, as root with criu: --libcuda the fake libcuda of
// tests/fixtures and --target a stand-in of target.cu's fifo mode (tests/gpu/criu_speed.sh with
// CRIU_SPEED_DRY_RUN=1): the report says it measures nothing real, and no goal is judged.
//
// The report: <out>/criu-restore-<count>x<mib>-<warm|cold>-<runtime>-<host>.md and .json
// (bench/reports without --out). It prints one line per run, the medians per side, each goal with
// its figure, and the report's path.

import { readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { restoreSnapshot, snapshot } from "../mod.ts";
import type { Machine, NativeMachine } from "../driver.ts";
import { SimulatedCriu, SimulatedMachine } from "../mock/mod.ts";
import { openCriuEngine } from "../os/criu.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import type { SnapshotEngine } from "../core/engine.ts";
import type { Manifest } from "../core/snapshot/manifest.ts";
import {
  cmdlineHas,
  ddRead,
  type DiskRead,
  dropCaches,
  endRun,
  endRunOnSignals,
  failure,
  freeMib,
  isFakeLibcuda,
  needMib,
  pidState,
  roundsWithin,
  runProgram,
  waitPidsFree,
} from "./fifo_targets.ts";
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
  type Target as AnyTarget,
  type Targets,
} from "./snapshot_runs.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    "criu-a": { type: "string" },
    "criu-b": { type: "string" },
    "criu-a-args": { type: "string", default: "" },
    "criu-b-args": { type: "string", default: "" },
    "snapshot-with": { type: "string", default: "auto" },
    ...runOptions({ work: "/tmp/ckpt-criu-restore", count: "1", mib: "8192" }),
    digests: { type: "string", default: "on" },
    cold: { type: "boolean", default: false },
    "simulate-b-refuses-a": { type: "boolean", default: false },
  },
});
const sim = values.simulate;
const { count, mib, rounds, budgetS, timeoutMs } = runNumbers(values);
const cold = values.cold;
if (values.digests !== "on" && values.digests !== "off") {
  throw new RangeError(`--digests: on or off, got ${JSON.stringify(values.digests)}`);
}
const digests = values.digests === "on";
const snapshotWith = values["snapshot-with"];
if (!["auto", "a", "b", "each"].includes(snapshotWith)) {
  throw new RangeError(`--snapshot-with: auto, a, b or each, got ${JSON.stringify(snapshotWith)}`);
}
if (values["simulate-b-refuses-a"] && !sim) {
  throw new Error("--simulate-b-refuses-a: --simulate only");
}
if (!sim && (!values["criu-a"] || !values["criu-b"])) {
  throw new Error("--criu-a and --criu-b: the two criu programs to compare");
}
if (!sim && !values.target) {
  throw new Error("--target: tests/gpu/target.cu built with nvcc (it needs the fifo mode)");
}
const targetPath = values.target ? resolve(values.target) : undefined;

type Side = "a" | "b";
const SIDES: readonly Side[] = ["a", "b"];
const NAME: Record<Side, string> = { a: "A", b: "B" };
const criuPath: Record<Side, string | undefined> = {
  a: values["criu-a"] ? resolve(values["criu-a"]) : undefined,
  b: values["criu-b"] ? resolve(values["criu-b"]) : undefined,
};
/** A side's more criu options, split at spaces (the engine checks that each starts with --). */
const extraArgs: Record<Side, string[]> = {
  a: values["criu-a-args"].split(/\s+/).filter(Boolean),
  b: values["criu-b-args"].split(/\s+/).filter(Boolean),
};

const { started, elapsedMs, work, scratch, env } = runStart(values.work);

// ---- the two machines: one driver and host; an engine (criu) each; one kind of store ----

const simulated = sim ? new SimulatedMachine() : undefined;
let native: NativeMachine | undefined;
let base: Machine;
let engines: Record<Side, SnapshotEngine>;
if (simulated) {
  base = simulated;
  engines = {
    a: simulated.engine,
    b: new SimulatedCriu(simulated, { version: "4.2" }),
  };
} else {
  native = await openNative({
    ...(values.libcuda ? { libraryPath: resolve(values.libcuda) } : {}),
    criu: { criuPath: criuPath.a, extraArgs: extraArgs.a },
  }, scratch);
  base = native;
  engines = {
    a: native.engine!,
    b: openCriuEngine({ criuPath: criuPath.b, extraArgs: extraArgs.b }),
  };
}
// The fake libcuda of tests/fixtures (a dry run with stand-in targets) measures nothing real.
const fake = native ? isFakeLibcuda(native.driver.libraryPath) : false;
const machines: Record<Side, Machine> = {
  a: { ...parts(base), engine: engines.a, store: new FileSnapshotStore({ digests }) },
  b: { ...parts(base), engine: engines.b, store: new FileSnapshotStore({ digests }) },
};
function parts(m: Machine): Machine {
  return { driver: m.driver, host: m.host, clock: m.clock };
}

// ---- the targets: real ones in fifo mode, or the simulated machine's ----

interface Target extends AnyTarget {
  /** Its output file as it was when the snapshot was taken (criu checks its size). */
  outAtSnapshot?: Uint8Array;
}
interface World extends Targets {
  start(count: number, mib: number, label: string): Promise<Target[]>;
  /** After the snapshot: what each target's restore needs put back before it. */
  keep(targets: readonly Target[]): void;
  /** Before a restore: each target's files as they were at the snapshot. */
  putBack(targets: readonly Target[]): void;
  /** Kills every target that lives and waits until its pid is free; the pids still taken. */
  kill(targets: readonly Target[]): Promise<number[]>;
}

const realWorld: World = {
  ...fifoTargets(targetPath!, scratch, env, base),
  keep(targets) {
    for (const t of targets) t.outAtSnapshot = readFileSync(join(t.fifo!.dir, "out"));
  },
  putBack(targets) {
    for (const t of targets) writeFileSync(join(t.fifo!.dir, "out"), t.outAtSnapshot!);
  },
  async kill(targets) {
    for (const t of targets) {
      // Only this run's: its command line names the run's folder.
      if (pidState(t.pid) !== "alive" || !cmdlineHas(t.pid, scratch)) continue;
      try {
        process.kill(t.pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
    // A restored target's parent is init (criu restores it detached), which reaps it.
    return await waitPidsFree(targets.map((t) => t.pid), 30_000);
  },
};

const simWorld: World = {
  ...simulatedTargets(simulated!),
  keep() {},
  putBack() {},
  kill(targets) {
    for (const t of targets) simulated!.process(t.pid)?.exit();
    return Promise.resolve(targets.filter((t) => simulated!.process(t.pid)).map((t) => t.pid));
  },
};
const world = sim ? simWorld : realWorld;

// ---- a snapshot: its targets, its images, the disk's rate beside them ----

interface Disk {
  /** The largest image: dd with O_DIRECT and through the page cache (warm). */
  largest?: DiskRead;
  /** GB/s of every image read once through the page cache after it was dropped (warm runs). */
  coldAllGBps?: number;
  /** GB/s of the largest image read through the page cache after it was dropped (cold runs). */
  coldLargestGBps?: number;
  note?: string;
}
interface ImageSet {
  /** The side whose criu dumped it. */
  by: Side;
  dir: string;
  targets: Target[];
  /** Wall-clock ms of `snapshot()`, and the library's own figures. */
  snapshotMs: number;
  own: { snapshotMs: number; suspendMs: number; dumpMs: number };
  bytes: number;
  files: number;
  disk: Disk;
}
const sets: ImageSet[] = [];

/** Fresh targets, one snapshot of them with `by`'s criu, the disk's rate of its images. */
async function takeSnapshot(by: Side): Promise<ImageSet> {
  const label = `s${sets.length}-${by}`;
  const dir = join(scratch, `img-${label}`);
  if (!sim) {
    // One 8 GiB target made 17.8 GB of images, eight of 2 GiB 21.8 GB: asked, 2.2 GB a GiB and
    // 512 MiB more a target.
    await needMib(scratch, Math.ceil(count * (mib * 2.2 + 512)));
  }
  const targets = await world.start(count, mib, label);
  try {
    const t = performance.now();
    const made = await snapshot(targets.map((x) => x.pid), dir, {
      machine: machines[by],
      timeoutMs,
    });
    const snapshotMs = performance.now() - t;
    world.keep(targets);
    const manifest: Manifest = made.manifest;
    const set: ImageSet = {
      by,
      dir,
      targets,
      snapshotMs,
      own: {
        snapshotMs: made.ms,
        suspendMs: manifest.timings.suspendMs,
        dumpMs: manifest.timings.dumpMs,
      },
      bytes: manifest.files.reduce((sum, f) => sum + f.bytes, 0),
      files: manifest.files.length,
      disk: await diskOf(dir, manifest),
    };
    sets.push(set);
    console.log(
      `snapshot by ${NAME[by]} (${criuLabel[by]}): ${fmt(snapshotMs / 1000, 2)} s, ` +
        `${fmt(set.bytes / 1e9, 2)} GB in ${set.files} files; the largest image ${
          fmt((set.disk.largest?.bytes ?? NaN) / 1e9, 2)
        } GB: dd O_DIRECT ${fmt(set.disk.largest?.directGBps, 2)} GB/s, page cache ${
          fmt(set.disk.largest?.cachedGBps, 2)
        } GB/s, cold page cache ${
          fmt(set.disk.coldLargestGBps, 2)
        } GB/s; every image from a cold page cache ${fmt(set.disk.coldAllGBps, 2)} GB/s${
          set.disk.note ? ` (${set.disk.note})` : ""
        }`,
    );
    return set;
  } catch (error) {
    await world.kill(targets).catch(() => []);
    throw error;
  }
}

/** The disk's rate of a snapshot's images; warm runs end with every image in the page cache. */
async function diskOf(dir: string, manifest: Manifest): Promise<Disk> {
  const disk: Disk = {};
  const paths = manifest.files.map((f) => join(dir, ...f.path.split("/")));
  const largest = [...manifest.files].sort((a, b) => b.bytes - a.bytes)[0];
  if (!largest) return { note: "no image files" };
  const largestPath = join(dir, ...largest.path.split("/"));
  disk.largest = await ddRead(largestPath, largest.bytes, timeoutMs);
  const notes = disk.largest.note ? [disk.largest.note] : [];
  const why = sim ? "not on the simulator" : await dropCaches(timeoutMs);
  if (why) {
    notes.push(`no cold page cache read: ${why}`);
  } else if (cold) {
    const r = await runProgram("dd", [`if=${largestPath}`, "of=/dev/null", "bs=4M"], timeoutMs);
    if (r.code === 0) disk.coldLargestGBps = largest.bytes / r.ms / 1e6;
    else notes.push(`cold page cache read: ${failure(r)}`);
  }
  if (!cold) {
    // Every image once through the page cache: its rate from a cold cache, and the cache warm.
    const bytes = manifest.files.reduce((sum, f) => sum + f.bytes, 0);
    const r = await runProgram("sh", ["-c", 'cat -- "$@" >/dev/null', "sh", ...paths], timeoutMs);
    if (r.code !== 0) notes.push(`reading every image: ${failure(r)}`);
    else if (!why) disk.coldAllGBps = bytes / r.ms / 1e6;
  }
  if (notes.length > 0) disk.note = notes.join("; ");
  return disk;
}

// ---- one run: one side restores a snapshot, the check, the targets killed ----

interface Run {
  round: number;
  side: Side;
  /** 0: this side went first in its round; 1: second. */
  order: number;
  /** The side whose criu took the images restored, and which of the snapshots they are. */
  imagesBy: Side;
  snapshot: number;
  /** A restore of the other side's images that failed, after which this side took its own. */
  fallback: boolean;
  count: number;
  mib: number;
  ok: boolean;
  error?: string;
  /** The error's code (`RESTORE_FAILED`: criu failed). */
  code?: string;
  checks: Check[];
  /** ms to write back and drop the page cache before the restore (--cold). */
  dropMs?: number;
  /** Wall-clock ms of `restoreSnapshot()`, as the caller waits for it. */
  restoreMs?: number;
  /** Image bytes restored. */
  bytes: number;
  /** The library's own figures. */
  own?: { restoreMs: number; checkMs: number; criuRestoreMs: number; resumeMs: number };
  /** Image bytes / criu's part, GB/s. */
  criuGBps?: number;
  /** ms from killing the restored targets until their pids were free. */
  endMs?: number;
}
const runs: Run[] = [];

async function oneRun(round: number, side: Side, order: number, set: ImageSet): Promise<Run> {
  const rec: Run = {
    round,
    side,
    order,
    imagesBy: set.by,
    snapshot: sets.indexOf(set),
    fallback: false,
    count,
    mib,
    ok: false,
    checks: [],
    bytes: set.bytes,
  };
  const machine = machines[side];
  try {
    world.putBack(set.targets);
    if (cold && !sim) {
      const t = performance.now();
      const why = await dropCaches(timeoutMs);
      if (why) throw new Error(`--cold: ${why}`);
      rec.dropMs = performance.now() - t;
    }
    if (sim && values["simulate-b-refuses-a"] && side === "b" && set.by === "a") {
      (engines.b as SimulatedCriu).failNext("restore", {
        message: "simulated: this criu cannot read the other's images (--simulate-b-refuses-a)",
      });
    }
    const t = performance.now();
    const back = await restoreSnapshot(set.dir, { machine, timeoutMs });
    rec.restoreMs = performance.now() - t;
    rec.own = {
      restoreMs: back.ms,
      checkMs: back.timings.checkMs,
      criuRestoreMs: back.timings.restoreMs,
      resumeMs: back.timings.resumeMs,
    };
    rec.criuGBps = set.bytes / back.timings.restoreMs / 1e6;
  } catch (error) {
    rec.error = oneLine(error);
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string") rec.code = code;
  }
  rec.checks = await world.check(set.targets);
  rec.ok = rec.error === undefined && allBack(rec.checks, count);
  const t = performance.now();
  const taken = await world.kill(set.targets);
  rec.endMs = performance.now() - t;
  if (taken.length > 0) {
    const why = `pids ${taken.join(", ")} still taken 30 s after the kill (not reaped)`;
    rec.error = rec.error ? `${rec.error}; ${why}` : why;
    rec.ok = false;
  }
  const o = rec.own;
  console.log(
    `round ${round} ${NAME[side]}${order ? " (second)" : " (first)"}, images by ${NAME[set.by]}: ` +
      (rec.error && !o
        ? `FAILED: ${rec.error}`
        : `restore ${fmt(rec.restoreMs! / 1000, 2)} s: checks ${fmt(o!.checkMs / 1000, 2)} s, ` +
          `criu ${fmt(o!.criuRestoreMs / 1000, 2)} s (${fmt(rec.criuGBps, 2)} GB/s), resume ${
            fmt(o!.resumeMs / 1000, 2)
          } s${
            rec.dropMs !== undefined ? `; page cache dropped in ${fmt(rec.dropMs / 1000, 2)} s` : ""
          }${rec.error ? `; ${rec.error}` : ""}`) +
      backLine(rec.checks, count, rec.ok) +
      `; pids free ${fmt(rec.endMs / 1000, 2)} s after the kill`,
  );
  return rec;
}

// ---- the run ----

let exitCode = 0;
const criuLabel: Record<Side, string> = { a: "?", b: "?" };
const engineVersion: Record<Side, string> = { a: "?", b: "?" };
const skipped: string[] = [];
const fallbacks: string[] = [];
endRunOnSignals(scratch);
try {
  for (const side of SIDES) {
    const probe = await engines[side].probe();
    engineVersion[side] = probe.version ?? "?";
    if (probe.problems.length > 0) {
      throw new Error(`criu ${NAME[side]}: ${probe.problems.join("; ")}`);
    }
    criuLabel[side] = sim ? `simulated criu ${engineVersion[side]}` : await versionLabel(side);
  }
  // Two binaries that say the same: the labels tell them apart.
  if (criuLabel.a === criuLabel.b) {
    for (const side of SIDES) criuLabel[side] += ` (${NAME[side]})`;
  }
  if (!sim) await native!.driver.listGpus(); // cuInit and the GPU list, outside every timing
  console.log(
    `${sim ? "SIMULATED; " : ""}${count} x ${mib} MiB, ${rounds} rounds, ` +
      `${cold ? "a cold page cache (dropped before each restore)" : "the page cache warm"}, ` +
      `digests ${digests ? "on" : "off"}, images in ${scratch} (${await freeMib(scratch)} MiB ` +
      `free); A: ${criuLabel.a}${criuPath.a ? ` at ${criuPath.a}` : ""}${
        extraArgs.a.length ? ` ${extraArgs.a.join(" ")}` : ""
      }; B: ${criuLabel.b}${criuPath.b ? ` at ${criuPath.b}` : ""}${
        extraArgs.b.length ? ` ${extraArgs.b.join(" ")}` : ""
      }; ${availableParallelism()} cores`,
  );
  const imagesOf: Partial<Record<Side, ImageSet>> = {};
  if (snapshotWith === "each") {
    for (const side of SIDES) imagesOf[side] = await takeSnapshot(side);
  } else {
    const by: Side = snapshotWith === "b" ? "b" : "a";
    imagesOf.a = imagesOf.b = await takeSnapshot(by);
  }
  await roundsWithin(rounds, { budgetS, elapsedMs, skipped }, async (round) => {
    const order: Side[] = round % 2 === 0 ? ["a", "b"] : ["b", "a"];
    for (const [i, side] of order.entries()) {
      let set = imagesOf[side]!;
      let run = await oneRun(round, side, i, set);
      if (
        snapshotWith === "auto" && !run.ok && set.by !== side &&
        run.code === "RESTORE_FAILED"
      ) {
        // This criu cannot restore the other's images: it takes its own, and restores those.
        fallbacks.push(
          `${NAME[side]} (${criuLabel[side]}) could not restore the images of ${NAME[set.by]} ` +
            `(${criuLabel[set.by]}): ${run.error}; ${NAME[side]} took a snapshot of its own and ` +
            "restored that from then on",
        );
        console.log(`fallback: ${fallbacks.at(-1)}`);
        run.fallback = true;
        runs.push(run);
        set = imagesOf[side] = await takeSnapshot(side);
        run = await oneRun(round, side, i, set);
      }
      runs.push(run);
    }
  });
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  endRun(scratch);
}
const driverVersion = await closeMachines(native, simulated);

/** "criu 4.1.1" and its GitID where it names one, from `criu --version`. */
async function versionLabel(side: Side): Promise<string> {
  const r = await runProgram(criuPath[side]!, ["--version"], 60_000);
  const version = /^Version:\s*(\S+)/m.exec(r.out)?.[1] ?? engineVersion[side];
  const git = /^GitID:\s*(\S+)/m.exec(r.out)?.[1];
  return `criu ${version}${git ? ` (${git})` : ""}`;
}

// ---- the report ----

const measured = runs.filter((r) => !r.fallback);
if (measured.length === 0 || measured.some((r) => !r.ok)) exitCode = 1;
const { okRuns, med } = bySide<Side, Run>(measured);
const s = (ms: number | undefined) => fmt((ms ?? NaN) / 1000, 2);
/** The cold goal's bound of a run: image bytes / the disk's O_DIRECT rate + its GPU resume. */
const boundMs = (r: Run) => {
  const gbps = sets[r.snapshot]?.disk.largest?.directGBps;
  return gbps && r.own ? r.bytes / gbps / 1e6 + r.own.resumeMs : NaN;
};
const criuSpeedup = med("a", (r) => r.own?.criuRestoreMs) / med("b", (r) => r.own?.criuRestoreMs);
const wholeSpeedup = med("a", (r) => r.restoreMs) / med("b", (r) => r.restoreMs);
const coldRatio = (side: Side) => med(side, (r) => r.restoreMs! / boundMs(r));

const summary: Table = {
  title: "Medians of the runs that came back intact (s; A / B: the ratio of the medians)",
  columns: [
    "side",
    "criu",
    "runs ok",
    "whole restore s",
    "checks s",
    "criu s",
    "criu GB/s",
    "resume s",
    "A / B, criu",
    "A / B, whole",
  ],
  rows: SIDES.map((side) => [
    NAME[side],
    criuLabel[side],
    `${okRuns(side).length}/${measured.filter((r) => r.side === side).length}`,
    s(med(side, (r) => r.restoreMs)),
    s(med(side, (r) => r.own?.checkMs)),
    s(med(side, (r) => r.own?.criuRestoreMs)),
    fmt(med(side, (r) => r.criuGBps), 2),
    s(med(side, (r) => r.own?.resumeMs)),
    side === "a" ? fmt(criuSpeedup, 3) : "",
    side === "a" ? fmt(wholeSpeedup, 3) : "",
  ]),
};
const imagesTable: Table = {
  title: "The snapshots restored, and the disk's own rate beside them (dd, in the same run)",
  columns: [
    "taken by",
    "snapshot s",
    "images GB",
    "files",
    "largest image GB",
    "its dd O_DIRECT GB/s",
    "its dd page cache GB/s",
    "its dd, cold page cache GB/s",
    "every image, cold page cache GB/s",
    "images / O_DIRECT rate s",
    "note",
  ],
  rows: sets.map((x) => [
    `${NAME[x.by]} (${criuLabel[x.by]})`,
    s(x.snapshotMs),
    fmt(x.bytes / 1e9, 2),
    x.files,
    fmt((x.disk.largest?.bytes ?? NaN) / 1e9, 2),
    fmt(x.disk.largest?.directGBps, 2),
    fmt(x.disk.largest?.cachedGBps, 2),
    fmt(x.disk.coldLargestGBps, 2),
    fmt(x.disk.coldAllGBps, 2),
    fmt(x.bytes / (x.disk.largest?.directGBps ?? NaN) / 1e9, 2),
    x.disk.note ?? "",
  ]),
};

const judged = (value: number, met: boolean, applies = true) => ({
  value: Number.isFinite(value) ? value : null,
  met: Number.isFinite(value) && applies && !sim && !fake ? met : null,
});
const goalCase = count === 1 && mib === 8192 && !cold;
const goals: Report["goals"] = [
  {
    goal: "one 8 GiB process from the page cache: criu's part of the restore at least 2x faster " +
      "with the better criu (median A / median B >= 2)",
    ...judged(criuSpeedup, criuSpeedup >= 2, goalCase),
    note: `criu ${s(med("a", (r) => r.own?.criuRestoreMs))} s with A, ${
      s(med("b", (r) => r.own?.criuRestoreMs))
    } s with B, ${count} x ${mib} MiB ${cold ? "from a cold page cache" : "from the page cache"}${
      goalCase ? "" : ": not judged (the goal is for 1 x 8192 MiB, warm)"
    }`,
  },
  ...SIDES.map((side) => ({
    goal:
      `${NAME[side]}, from a cold page cache: the whole restore within 1.1x of (image bytes / ` +
      "the disk's O_DIRECT read rate + the restore's resume) (median of each run's ratio <= 1.1)",
    ...judged(cold ? coldRatio(side) : NaN, coldRatio(side) <= 1.1, cold),
    note: cold
      ? `whole ${s(med(side, (r) => r.restoreMs))} s against ${s(med(side, boundMs))} s (images ${
        fmt((sets[0]?.bytes ?? NaN) / 1e9, 2)
      } GB at ${fmt(sets[0]?.disk.largest?.directGBps, 2)} GB/s, resume ${
        s(med(side, (r) => r.own?.resumeMs))
      } s)${
        digests
          ? "; digests on: the restore's checks read every image from the disk, criu from the " +
            "page cache"
          : ""
      }`
      : "not measured: the page cache was warm (--cold measures it)",
  })),
  everyTargetBack(measured),
];

const caseName = `${count}x${mib}-${cold ? "cold" : "warm"}`;
const report: Report = {
  name: `criu-restore-${caseName}`,
  title: `@ckpt/cuda restores: criu A against criu B, ${count} x ${mib} MiB, ` +
    `${cold ? "cold page cache" : "warm page cache"}`,
  description: "One run of this benchmark starts its targets" +
    (sim ? " (simulated processes)" : " (tests/gpu/target.cu in fifo mode, a session each)") +
    ` and takes one \`snapshot()\` of them (one tree each), then restores that snapshot again and ` +
    "again with `restoreSnapshot()` and the file system's store " +
    `(${digests ? "digests checked before each restore" : "digests off"}), criu run without its ` +
    "CUDA plugin as the library runs it: criu A and criu B take turns (round k starts with A " +
    "when k is even), in one process, on one machine, with the same driver. Each restore is " +
    "timed as its caller waits for it, with the library's own parts (its checks, criu's restore " +
    "of every tree, the GPU's restore and unlock), every target is checked running with its " +
    "memory's hash unchanged, and the restored targets are killed and waited for until their " +
    "pids are free. " +
    (cold
      ? "The page cache is dropped before every restore."
      : "Every image was read into the page cache before the rounds."),
  environment: runEnvironment({ sim, fake, native, driverVersion, date: started }),
  config: {
    count,
    mib,
    rounds,
    cold,
    digests,
    snapshotWith,
    budgetS,
    timeoutS: timeoutMs / 1000,
    work,
    criuA: {
      path: criuPath.a ?? null,
      label: criuLabel.a,
      version: engineVersion.a,
      args: extraArgs.a,
    },
    criuB: {
      path: criuPath.b ?? null,
      label: criuLabel.b,
      version: engineVersion.b,
      args: extraArgs.b,
    },
    target: targetPath ?? null,
    cores: availableParallelism(),
    simulate: sim,
  },
  goals,
  tables: [summary, imagesTable],
  runs,
  runTables: [{
    title: "Every run, in the order made",
    columns: [
      "round",
      "side",
      "order",
      "images by",
      "whole restore s",
      "checks s",
      "criu s",
      "criu GB/s",
      "resume s",
      "cold bound s",
      "back intact",
      "error",
    ],
    rows: runs.map((r) => [
      r.round,
      NAME[r.side],
      r.order ? "second" : "first",
      NAME[r.imagesBy],
      s(r.restoreMs),
      s(r.own?.checkMs),
      s(r.own?.criuRestoreMs),
      fmt(r.criuGBps, 2),
      s(r.own?.resumeMs),
      cold ? s(boundMs(r)) : "-",
      `${r.checks.filter((c) => c.state === "running" && c.intact).length}/${r.count}`,
      `${r.fallback ? "(the other's images: not counted) " : ""}${r.error ?? ""}`,
    ]),
  }],
  notes: [
    ...(sim
      ? [
        "SIMULATED: both sides ran on a SimulatedMachine (virtual time for the driver and the " +
        "simulated criu; the files and their digests are real, but tiny); the check compares each " +
        "simulated process's memory digest. This measures nothing real.",
      ]
      : []),
    ...fallbacks.map((x) => `Fallback: ${x}.`),
    ...skipped.map((x) => `Skipped for the time budget: ${x}.`),
    ...runs.filter((r) => r.error).map((r) =>
      `round ${r.round} ${NAME[r.side]} failed${
        r.fallback ? " (the other's images)" : ""
      }: ${r.error}`
    ),
    "criu's part is the library's `timings.restoreMs`: from the end of the checks until the last " +
    "tree's criu has exited; the resume, from the first tree back until every CUDA process is " +
    "restored onto its GPU and unlocked (with one tree: the driver's own time, which the cold " +
    "goal adds to the disk's).",
  ],
};
publish(report, values.out, { columns: 10, digits: 3 });
process.exit(exitCode);
