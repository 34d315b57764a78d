// Snapshots of whole CUDA processes to disk and back: our `cuda-checkpoint snapshot` and
// `restore-snapshot` (docs/SNAPSHOTS.md) against NVIDIA's documented workflow with its utility and
// the same criu, in one run on one machine, the two taking turns (global round k starts with ours
// when k is even, with the shell workflow when it is odd):
//
//   ours   one `cuda-checkpoint snapshot --pid P1,...,Pn --dir D` for n targets (one tree each),
//          durable (every image fsynced before the processes end), then one `cuda-checkpoint
//          restore-snapshot --dir D`;
//   shell  NVIDIA's README, one process after another: `nvidia --toggle --pid P`, then
//          `criu dump --tree P --images-dir Di --shell-job --no-default-config --libdir <empty>
//          -v4 -o dump.log` (criu ends P); then `sync`, timed apart: the same made durable; to
//          restore (unless `--restore ours`), for each: `criu restore --images-dir Di
//          --restore-detached --shell-job --no-default-config --libdir <empty> -v4 -o
//          restore.log`, then `nvidia --toggle --pid P`.
//
// Each side's time is its commands' spawn-to-exit, summed; a snapshot's ends once its processes
// are gone, their pids free for the restore (ours waits for that before it exits; the shell's
// wait after its last dump is added to its time, its `sync` after that). Ours' own phases: the
// suspend (its manifest's suspendMs), criu's dump (from each tree's dump.log appearing, seen every
// 20 ms, to its last write) and the seal's tail (from the last dump's end to the manifest's write).
// Every run starts fresh targets (tests/gpu/target.cu in fifo mode, a session each) after a `sync`,
// checks afterwards that each restored target is running with the memory hash it had when it
// started (a failed check is reported, and fails the run), ends them and removes the images. Each
// case runs with the images in the work directory (the disk) and, with `--shm DIR`, in DIR (a
// tmpfs such as /dev/shm). The durable write rate of each place is measured first: dd of a file
// the size of one process's images with conv=fdatasync (`--durable-mib`); with `--disk-mib`, also
// dd with O_DIRECT, through the page cache, and fio where there is one, in the work directory.
//
// Goals: one process: ours' snapshot within 1.15x of the driver's checkpoint (NVIDIA's --toggle)
// + the larger of criu's dump and the image bytes at the place's durable rate (the shell's medians
// of the same run), on the disk and in the tmpfs; eight processes: ours' image bytes per second
// at least 0.95 of the disk's durable rate. Also: every restored target back, memory intact.
//
// On the GPU machine (as root; tests/gpu/README.md says what to carry), under our binary's Bun:
//   BUN_BE_BUN=1 /tmp/bench-ckpt/cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts \
//     bench/disk_bench.ts --ours /tmp/bench-ckpt/cuda-checkpoint --nvidia /tmp/bench-ckpt/nvidia \
//     --criu /tmp/criu/usr/sbin/criu --target /tmp/bench-ckpt/target --out $OUT
//   [--counts 1,8] [--mib 2048] [--rounds 2,1] [--budget-s 480] [--work /tmp/ckpt-snapshot-bench]
//   [--shm /dev/shm/ckpt-snapshot-bench] [--restore both|ours] [--durable-mib N] [--disk-mib 4096]
//   [--warmup-mib 256] [--timeout-s 300]
// --mib and --rounds take one value, or one per count. --budget-s: no round starts after it, nor
// one that its case's last round says would end after it.
//
// Without a GPU (tests/bench_test.ts): --simulate runs both sides on the simulated machine of
// `cuda-checkpoint --simulate` (a state file in the work directory): ours as above; the shell
// workflow with ours --simulate --toggle standing in for NVIDIA's utility and a generated stand-in
// for criu that writes a small image and leaves the simulated process where it is. The check is of
// the state and of the GPU memory the simulator lists (it has no hash on the command line). It
// measures nothing real: it shows that the benchmark runs and writes its report.
//
// The report: <out>/snapshot-<runtime>-<host>.md and .json (bench/reports without --out).

import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import { askFifo, childEnv, endFifoTargets, endRun, failure, freeMib } from "./fifo_targets.ts";
import { type Ran, roundsWithin, runProgram, scratchFolder } from "./fifo_targets.ts";
import { startFifoTargets, waitPidsFree } from "./fifo_targets.ts";
import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report, type Table } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    ours: { type: "string" },
    nvidia: { type: "string" },
    criu: { type: "string" },
    target: { type: "string" },
    out: { type: "string" },
    work: { type: "string", default: "/tmp/ckpt-snapshot-bench" },
    shm: { type: "string" },
    counts: { type: "string", default: "1,8" },
    mib: { type: "string", default: "2048" },
    rounds: { type: "string", default: "2,1" },
    restore: { type: "string", default: "both" },
    "budget-s": { type: "string", default: "480" },
    "durable-mib": { type: "string" },
    "disk-mib": { type: "string", default: "4096" },
    "warmup-mib": { type: "string", default: "256" },
    "timeout-s": { type: "string", default: "300" },
    simulate: { type: "boolean", default: false },
  },
});
const sim = values.simulate;
if (!values.ours) throw new Error("--ours: the path of our compiled cuda-checkpoint");
const oursPath = resolve(values.ours);
const nvidiaPath = values.nvidia ? resolve(values.nvidia) : sim ? oursPath : undefined;
if (!nvidiaPath) throw new Error("--nvidia: the path of NVIDIA's cuda-checkpoint utility");
if (!sim && !values.criu) throw new Error("--criu: the absolute path of criu (4.0 or later)");
if (!sim && !values.target) {
  throw new Error("--target: tests/gpu/target.cu built with nvcc (it needs the fifo mode)");
}
if (values.restore !== "both" && values.restore !== "ours") {
  throw new RangeError(`--restore: both or ours, got ${values.restore}`);
}
const counts = integers(values.counts, "--counts");
const perCount = (text: string, what: string): number[] => {
  const list = integers(text, what);
  if (list.length === 1) return counts.map(() => list[0]);
  if (list.length !== counts.length) {
    throw new RangeError(`${what}: one value, or one per count (${counts.length}), got ${text}`);
  }
  return list;
};
const mibs = perCount(values.mib, "--mib");
const roundsOf = perCount(values.rounds, "--rounds");
const [budgetS] = integers(values["budget-s"], "--budget-s");
const [diskMib] = integers(values["disk-mib"], "--disk-mib");
// One process's images: about twice its GPU memory and half a GiB (2 GiB: 4.65 GB).
const [durableMib] = integers(
  values["durable-mib"] ?? String(Math.ceil((2 * Math.max(...mibs) + 512) / 4) * 4),
  "--durable-mib",
);
const [warmupMib] = integers(values["warmup-mib"], "--warmup-mib");
const [timeoutS] = integers(values["timeout-s"], "--timeout-s");
if (counts.some((n) => n < 1) || mibs.some((m) => m < 1)) {
  throw new RangeError("--counts and --mib: at least 1 each");
}

const started = new Date();
const t0 = performance.now();
const elapsedMs = () => performance.now() - t0;
const work = resolve(values.work);
const scratch = scratchFolder(work);
/** Where the images go: the work directory's disk, and the tmpfs of --shm. */
const places = [
  { name: "disk", dir: scratch },
  ...(values.shm ? [{ name: "shm", dir: scratchFolder(resolve(values.shm)) }] : []),
];
const noPlugins = join(scratch, "no-plugins"); // criu's --libdir: empty, so no CUDA plugin
mkdirSync(noPlugins, { mode: 0o700 });
const env = childEnv(); // without BUN_BE_BUN: our binary must be itself, not Bun
delete env.CRIU_CONFIG_FILE;
delete env.CRIU_LIBS_DIR;
let criuPath: string;
if (sim) {
  env.CKPT_SIM_STATE = join(scratch, "simulated-machine.json");
  criuPath = join(scratch, "stand-in-criu");
  writeFileSync(criuPath, STAND_IN_CRIU(), { mode: 0o755 });
} else {
  criuPath = resolve(values.criu!);
  env.CKPT_CRIU_PATH = criuPath; // ours runs the same criu
}
const simArgs = sim ? ["--simulate"] : [];

// ---- running programs ----

/** Runs a program (argument array, no shell) to its end or `timeoutMs` (then SIGKILL). */
const run = (file: string, args: readonly string[], timeoutMs = timeoutS * 1000): Promise<Ran> =>
  runProgram(file, args, timeoutMs, env);

// deno-lint-ignore no-explicit-any
function parseJson(text: string): Record<string, any> | undefined {
  try {
    return JSON.parse(text.trim().split("\n")[0]);
  } catch {
    return undefined;
  }
}

const ours = (args: readonly string[]) => run(oursPath, [...simArgs, ...args]);
const nvidia = (args: readonly string[]) => run(nvidiaPath, [...simArgs, ...args]);

/** Bytes of every regular file under `dir`. */
function bytesUnder(dir: string): number {
  let total = 0;
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    const st = lstatSync(join(dir, name));
    if (st.isDirectory()) total += bytesUnder(join(dir, name));
    else if (st.isFile()) total += st.size;
  }
  return total;
}

/** Writes back everything dirty (untimed, or timed where asked): each run starts clean. */
const sync = () => run("sync", []);

// ---- the targets ----

interface Target {
  pid: number;
  /** What the check compares after the restore: the memory hash it printed when ready. */
  readyHash: string;
  dir: string;
}

/** Where the targets live and how they are asked: real processes, or the simulated machine. */
interface World {
  start(count: number, mib: number, label: string): Promise<Target[]>;
  /**
   * After a run: each target's state and, where it runs, its hash now ("hash <hex>" answered, or
   * a line saying why there is none), against the one it had when it started.
   */
  check(targets: readonly Target[]): Promise<Check[]>;
  /** The pids of `pids` still taken after `timeoutMs` (zombies included). */
  waitGone(pids: readonly number[], timeoutMs: number): Promise<number[]>;
  /** Ends every target that is left. */
  end(targets: readonly Target[]): Promise<void>;
}

const realWorld: World = {
  start: (count, mib, label) =>
    startFifoTargets(values.target!, count, mib, join(scratch, `t-${label}`), env),
  async check(targets) {
    const checks: Check[] = [];
    for (const t of targets) {
      const state = (await ours(["--get-state", "--pid", String(t.pid)])).out.trim() || "(none)";
      const hash = state === "running" ? await askFifo(t, "hash") : "(not asked: not running)";
      checks.push({ pid: t.pid, state, hash, intact: hash === `hash ${t.readyHash}` });
    }
    return checks;
  },
  waitGone: waitPidsFree,
  end: (targets) => endFifoTargets(targets, scratch),
};

/**
 * The simulated machine's processes, from one `ours --simulate list --json`: each one's state and
 * its "hash" (the simulator has none on the command line: the GPU memory it lists).
 */
async function simList(): Promise<Map<number, { state: string; hash: string }>> {
  const r = await ours(["list", "--json"]);
  const out = new Map<number, { state: string; hash: string }>();
  for (const line of r.out.split("\n").filter(Boolean)) {
    const p = parseJson(line);
    if (p) {
      out.set(p.pid, { state: String(p.state), hash: `hash ${JSON.stringify(p.gpuMemoryMiB)}` });
    }
  }
  return out;
}

const simWorld: World = {
  async start(count, mib) {
    const targets: Target[] = [];
    for (let i = 0; i < count; i++) {
      const r = await ours(["spawn", "--memory-mib", String(mib)]);
      const pid = Number(r.out.trim());
      if (r.code !== 0 || !Number.isInteger(pid)) throw new Error(`spawn: ${failure(r)}`);
      targets.push({ pid, readyHash: "", dir: "" });
    }
    const listed = await simList();
    return targets.map((t) => ({ ...t, readyHash: listed.get(t.pid)!.hash.replace(/^hash /, "") }));
  },
  async check(targets) {
    // One listing for every target: its state and GPU memory (as --get-state would say it).
    const listed = await simList();
    return targets.map((t) => {
      const p = listed.get(t.pid);
      const state = p?.state ?? "(none)";
      const hash = state === "running" ? p!.hash : "(not asked: not running)";
      return { pid: t.pid, state, hash, intact: hash === `hash ${t.readyHash}` };
    });
  },
  async waitGone(pids) {
    const listed = await simList();
    return pids.filter((p) => listed.has(p));
  },
  async end(targets) {
    // A target that is gone already makes kill say so and exit 1: nothing to do.
    for (const t of targets) await ours(["kill", String(t.pid)]);
  },
};

const world = sim ? simWorld : realWorld;

// ---- the two sides ----

type SideName = "ours" | "shell";
interface Step {
  pid: number;
  /** ms of each command, in the order made. */
  [command: string]: number;
}
interface SideOutcome {
  snapshotMs: number;
  /** The snapshot made durable: ours' own; the shell's followed by `sync`. */
  durableMs: number;
  /** Where the targets were restored. */
  restoreMs?: number;
  bytes: number;
  /** Phases: ours' own (from its --json, its manifest and its files), the shell's per command. */
  phases: Record<string, number>;
  steps?: { snapshot: Step[]; restore: Step[] };
}

/** What the shell workflow's criu runs share with ours: a shell job, no plugin, its log. */
function criuAlike(log: string): string[] {
  return ["--shell-job", "--no-default-config", "--libdir", noPlugins, "-v4", "-o", log];
}

/**
 * Watches `images` for each tree's `dump.log` (criu opens it as it starts) every 20 ms; the stop
 * gives when each was first seen and last written (ms since the epoch), and the manifest's write.
 */
function watchDumps(images: string): () => { starts: number[]; ends: number[]; manifest: number } {
  const seen = new Map<string, number>();
  const look = () => {
    for (const d of existsSync(images) ? readdirSync(images) : []) {
      if (!seen.has(d) && existsSync(join(images, d, "dump.log"))) seen.set(d, Date.now());
    }
  };
  const timer = setInterval(look, 20);
  return () => {
    clearInterval(timer);
    const mtime = (file: string) => existsSync(file) ? statSync(file).mtimeMs : NaN;
    return {
      starts: [...seen.values()],
      ends: [...seen.keys()].map((d) => mtime(join(images, d, "dump.log"))),
      manifest: mtime(join(images, "manifest.json")),
    };
  };
}

/** Ours on `targets`: its snapshot, its phases, and its restore once their pids are free. */
async function oursSide(pids: number[], images: string, gone: () => Promise<void>) {
  const stop = watchDumps(images);
  const s = await ours(["snapshot", "--pid", pids.join(","), "--dir", images, "--json"]);
  const seen = stop();
  const sj = parseJson(s.out);
  if (s.code !== 0 || sj?.ok !== true) throw new Error(`ours snapshot: ${failure(s)}`);
  const inspect = parseJson((await ours(["inspect", "--dir", images, "--json"])).out);
  await gone();
  const r = await ours(["restore-snapshot", "--dir", images, "--json"]);
  const rj = parseJson(r.out);
  if (r.code !== 0 || rj?.ok !== true) throw new Error(`ours restore-snapshot: ${failure(r)}`);
  const timings = inspect?.manifest?.timings ?? {};
  const dumped = Math.max(...seen.ends);
  return {
    snapshotMs: s.ms,
    durableMs: s.ms,
    restoreMs: r.ms,
    bytes: Number(sj.bytes),
    phases: {
      ownSnapshotMs: Number(sj.ms),
      suspendMs: Number(timings.suspendMs),
      dumpMs: Number(timings.dumpMs),
      criuDumpMs: dumped - Math.min(...seen.starts),
      sealTailMs: seen.manifest - dumped,
      ownRestoreMs: Number(rj.ms),
      restoreCheckMs: Number(rj.timings?.checkMs),
      criuRestoreMs: Number(rj.timings?.restoreMs),
      resumeMs: Number(rj.timings?.resumeMs),
    },
  };
}

/** Runs one side on `targets`: snapshot, wait until their pids are free, restore. */
async function runSide(side: SideName, targets: Target[], images: string): Promise<SideOutcome> {
  const pids = targets.map((t) => t.pid);
  const gone = async () => {
    // The shell's stand-in criu of --simulate leaves the simulated process where it is.
    if (sim && side === "shell") return;
    const left = await world.waitGone(pids, 30_000);
    if (left.length > 0) throw new Error(`pids ${left.join(", ")} still taken 30 s after the dump`);
  };
  if (side === "ours") return await oursSide(pids, images, gone);
  const dirs = targets.map((t) => join(images, `tree-${t.pid}`));
  mkdirSync(images, { mode: 0o700 });
  const snapshotSteps: Step[] = [];
  let snapshotMs = 0;
  for (const [i, pid] of pids.entries()) {
    mkdirSync(dirs[i], { mode: 0o700 });
    const toggle = await nvidia(["--toggle", "--pid", String(pid)]);
    snapshotMs += toggle.ms;
    if (toggle.code !== 0) throw new Error(`NVIDIA's --toggle --pid ${pid}: ${failure(toggle)}`);
    const args = ["dump", "--tree", String(pid), "--images-dir", dirs[i], ...criuAlike("dump.log")];
    const dump = await run(criuPath, args);
    snapshotMs += dump.ms;
    snapshotSteps.push({ pid, toggleMs: toggle.ms, dumpMs: dump.ms });
    if (dump.code !== 0) {
      throw new Error(`criu dump --tree ${pid}: ${failure(dump)}; ${logTail(dirs[i], "dump.log")}`);
    }
  }
  const bytes = dirs.reduce((sum, d) => sum + bytesUnder(d), 0);
  // Until the ended processes are gone (reaped, their pids free for a restore), as ours waits.
  const g0 = performance.now();
  await gone();
  const untilGoneMs = performance.now() - g0;
  snapshotMs += untilGoneMs;
  // The same made durable: every image on disk, as ours has them before it ends the processes.
  const synced = await sync();
  if (synced.code !== 0) throw new Error(`sync: ${failure(synced)}`);
  const restoreSteps: Step[] = [];
  let restoreMs: number | undefined;
  for (const [i, pid] of values.restore === "both" ? pids.entries() : []) {
    const args = ["restore", "--images-dir", dirs[i], "--restore-detached"];
    const restore = await run(criuPath, [...args, ...criuAlike("restore.log")]);
    restoreMs = (restoreMs ?? 0) + restore.ms;
    if (restore.code !== 0) {
      const log = logTail(dirs[i], "restore.log");
      throw new Error(`criu restore of ${pid}: ${failure(restore)}; ${log}`);
    }
    const toggle = await nvidia(["--toggle", "--pid", String(pid)]);
    restoreMs += toggle.ms;
    restoreSteps.push({ pid, restoreMs: restore.ms, toggleMs: toggle.ms });
    if (toggle.code !== 0) throw new Error(`NVIDIA's --toggle --pid ${pid}: ${failure(toggle)}`);
  }
  const sum = (steps: Step[], k: string) => steps.reduce((a, s) => a + s[k], 0);
  return {
    snapshotMs,
    durableMs: snapshotMs + synced.ms,
    ...(restoreMs !== undefined ? { restoreMs } : {}),
    bytes,
    phases: {
      toggleMs: sum(snapshotSteps, "toggleMs"),
      dumpMs: sum(snapshotSteps, "dumpMs"),
      untilGoneMs,
      syncMs: synced.ms,
      ...(restoreMs !== undefined
        ? { criuRestoreMs: sum(restoreSteps, "restoreMs"), resumeMs: sum(restoreSteps, "toggleMs") }
        : {}),
    },
    steps: { snapshot: snapshotSteps, restore: restoreSteps },
  };
}

/** The last error lines of a criu log, for a message. */
function logTail(dir: string, name: string): string {
  try {
    const lines = readFileSync(join(dir, name), "utf8").split("\n");
    const errors = lines.filter((l) => /Error|FAILED|Can't/.test(l));
    return `${name}: ${(errors.length ? errors : lines).slice(-4).join(" | ").slice(0, 600)}`;
  } catch {
    return `(no ${name})`;
  }
}

// ---- one run: fresh targets, one side, the check, the clean-up ----

interface Check {
  pid: number;
  state: string;
  hash: string;
  intact: boolean;
}
interface Run extends Partial<SideOutcome> {
  case: string;
  place: string;
  count: number;
  mib: number;
  round: number;
  side: SideName;
  /** 0: this side went first in its round; 1: second. */
  order: number;
  warmup: boolean;
  ok: boolean;
  error?: string;
  /** The restored targets, checked (none where this side was not restored). */
  checks: Check[];
  /** GB/s: image bytes / the durable snapshot's time, and / the restore's. */
  writeGBps?: number;
  readGBps?: number;
}
const runs: Run[] = [];

async function oneRun(
  c: { label: string; place: { name: string; dir: string }; count: number; mib: number },
  round: number,
  side: SideName,
  order: number,
  warmup: boolean,
): Promise<Run> {
  const { label, place, count, mib } = c;
  const rec: Run = {
    ok: false,
    checks: [],
    case: label,
    place: place.name,
    count,
    mib,
    round,
    side,
    order,
    warmup,
  };
  const images = join(place.dir, `img-${label.replace(/ /g, "-")}-r${round}-${side}`);
  let targets: Target[] = [];
  try {
    if (!sim) {
      // A CUDA process's images: about twice its GPU memory and half a GiB.
      const need = Math.ceil(count * (mib * 2 + 512));
      const free = await freeMib(place.dir);
      if (free !== undefined && free < need) {
        throw new Error(`${free} MiB free in ${place.dir}, the images need about ${need} MiB`);
      }
    }
    targets = await world.start(count, mib, `${label.replace(/ /g, "-")}-r${round}-${side}`);
    await sync();
    const outcome = await runSide(side, targets, images);
    Object.assign(rec, outcome);
    rec.writeGBps = outcome.bytes / outcome.durableMs / 1e6;
    if (outcome.restoreMs) rec.readGBps = outcome.bytes / outcome.restoreMs / 1e6;
  } catch (error) {
    rec.error = (error as Error).message;
  }
  const restored = side === "ours" || values.restore === "both";
  if (restored || rec.error) rec.checks = await world.check(targets);
  const back = rec.checks.filter((c) => c.state === "running" && c.intact).length;
  rec.ok = rec.error === undefined && (!restored || back === count);
  await world.end(targets).catch(() => {});
  rmSync(images, { recursive: true, force: true });
  for (const t of targets) if (t.dir) rmSync(t.dir, { recursive: true, force: true });
  const s = (ms: number | undefined) => fmt((ms ?? NaN) / 1000, 2);
  console.log(
    `${label} round ${round} ${side}${order ? " (second)" : " (first)"}: ` +
      (rec.error
        ? `FAILED: ${rec.error}`
        : `snapshot ${s(rec.snapshotMs)} s, durable ${s(rec.durableMs)} s, restore ${
          s(rec.restoreMs)
        } s, images ${fmt(rec.bytes! / 1e9, 2)} GB (${fmt(rec.writeGBps, 2)} GB/s durable)`) +
      (restored ? `; ${back}/${count} back running and intact` : "; not restored") +
      (rec.ok ? "" : `: ${rec.checks.map((c) => `${c.pid} ${c.state} ${c.hash}`).join("; ")}`),
  );
  return rec;
}

// ---- the disk's own rate ----

interface DiskRate {
  place: string;
  method: string;
  writeGBps?: number;
  readGBps?: number;
  note?: string;
}

/** dd's rate writing (and reading back) `mib` MiB of `file` with `flags`, into `rate`. */
async function dd(rate: DiskRate, file: string, mib: number, flags: string[], read?: string[]) {
  const bs = mib % 4 === 0 ? ["bs=4M", `count=${mib / 4}`] : ["bs=1M", `count=${mib}`];
  await sync();
  const w = await run("dd", ["if=/dev/zero", `of=${file}`, ...bs, ...flags]);
  if (w.code === 0) rate.writeGBps = mib * 2 ** 20 / w.ms / 1e6;
  else rate.note = `write: ${failure(w)}`;
  const r = read && w.code === 0
    ? await run("dd", [`if=${file}`, "of=/dev/null", bs[0], ...read])
    : undefined;
  if (r?.code === 0) rate.readGBps = mib * 2 ** 20 / r.ms / 1e6;
  else if (r) rate.note = `read: ${failure(r)}`;
  rmSync(file, { force: true });
  return rate;
}

async function diskRates(): Promise<DiskRate[]> {
  const rates: DiskRate[] = [];
  for (const { name, dir } of places) {
    // What a durable snapshot of one process writes, on disk before dd ends.
    const method = `dd 4M conv=fdatasync, ${durableMib} MiB (one process's images)`;
    rates.push(
      await dd({ place: name, method }, join(dir, "durable.bin"), durableMib, ["conv=fdatasync"]),
    );
  }
  const file = join(scratch, "disk-rate.bin");
  if (diskMib > 0) {
    const direct = { place: "disk", method: `dd O_DIRECT, ${diskMib} MiB` };
    rates.push(await dd(direct, file, diskMib, ["oflag=direct", "conv=fsync"], ["iflag=direct"]));
    // criu writes through the page cache, without a sync: that ceiling too.
    const cached = { place: "disk", method: `dd through the page cache (no sync), ${diskMib} MiB` };
    rates.push(await dd(cached, file, diskMib, [], []));
  }
  if (diskMib > 0 && (await run("fio", ["--version"], 10_000)).code === 0) {
    const fio: DiskRate = { place: "disk", method: `fio 4M O_DIRECT, iodepth 16, ${diskMib} MiB` };
    for (const rw of ["write", "read"] as const) {
      const f = await run("fio", [
        ...[`--name=${rw}`, `--filename=${file}`, `--rw=${rw}`, "--bs=4M", `--size=${diskMib}M`],
        ...["--direct=1", "--ioengine=libaio", "--iodepth=16", "--output-format=json"],
      ]);
      const bw = parseJson(f.out.slice(f.out.indexOf("{")).replace(/\n/g, " "))?.jobs?.[0]?.[rw]
        ?.bw_bytes;
      if (f.code === 0 && typeof bw === "number") {
        fio[rw === "write" ? "writeGBps" : "readGBps"] = bw / 1e9;
      } else fio.note = `${rw}: ${failure(f)}`;
    }
    rates.push(fio);
    rmSync(file, { force: true });
  }
  for (const d of rates) {
    console.log(
      `${d.place}: ${d.method}: write ${fmt(d.writeGBps, 2)} GB/s, read ${fmt(d.readGBps, 2)} ` +
        `GB/s${d.note ? ` (${d.note})` : ""}`,
    );
  }
  return rates;
}

// ---- the run ----

let exitCode = 0;
let disk: DiskRate[] = [];
const versions: Record<string, string> = {};
const skipped: string[] = [];
const cases = places.flatMap((place) =>
  counts.map((count, i) => {
    const label = `${place.name} ${count}x${mibs[i]}MiB`;
    return { label, place, count, mib: mibs[i], rounds: roundsOf[i] };
  })
);
try {
  versions.ours = (await ours(["--version"])).out.trim();
  versions.criu = (await run(criuPath, ["--version"])).out.trim().split("\n")[0];
  versions.nvidia = sim ? "(ours --simulate, standing in)" : nvidiaPath;
  console.log(
    `ours: ${oursPath} (${versions.ours}); NVIDIA's: ${versions.nvidia}; criu: ${criuPath} ` +
      `(${versions.criu}); images in ${places.map((p) => p.dir).join(" and ")}` +
      (sim ? "; SIMULATED" : ""),
  );
  for (const p of places) console.log(`free in ${p.dir}: ${await freeMib(p.dir)} MiB`);
  disk = await diskRates();
  if (warmupMib > 0 && !sim) {
    // Untimed: each program, criu and the driver once, so that neither side pays a cold start.
    const warm = { label: "warm-up", place: places[0], count: 1, mib: warmupMib };
    for (const side of ["ours", "shell"] as const) {
      runs.push(await oneRun(warm, 0, side, side === "ours" ? 0 : 1, true));
    }
  }
  let k = 0; // global round: even starts with ours
  for (const c of cases) {
    await roundsWithin(c.rounds, { budgetS, elapsedMs, skipped, label: c.label }, async (round) => {
      const order: SideName[] = k % 2 === 0 ? ["ours", "shell"] : ["shell", "ours"];
      for (const [i, side] of order.entries()) runs.push(await oneRun(c, round, side, i, false));
      k++;
    });
  }
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  // Targets of this run left behind (a failure): ended, by their command line.
  endRun(scratch);
  for (const p of places.slice(1)) rmSync(p.dir, { recursive: true, force: true });
}

// ---- the report ----

const measured = runs.filter((r) => !r.warmup);
if (measured.length === 0 || measured.some((r) => !r.ok)) exitCode = 1;
const okRuns = (label: string, side: SideName) =>
  measured.filter((r) => r.case === label && r.side === side && r.ok);
type Key = "snapshotMs" | "durableMs" | "restoreMs" | "bytes";
const med = (label: string, side: SideName, key: Key) =>
  median(okRuns(label, side).map((r) => r[key] ?? NaN).filter(Number.isFinite));
const medPhase = (label: string, side: SideName, key: string) =>
  median(okRuns(label, side).map((r) => r.phases?.[key] ?? NaN).filter(Number.isFinite));
const durableRate = (place: string) =>
  disk.find((d) => d.place === place && d.method.includes("fdatasync"))?.writeGBps ?? NaN;
/**
 * The bound of a durable snapshot of a case: the driver's checkpoint + the larger of criu's dump
 * and the image bytes at the place's durable rate, from the shell's medians; or from ours' own.
 */
const bound = (c: (typeof cases)[number], side: SideName) => {
  const [checkpoint, dump] = side === "shell"
    ? [medPhase(c.label, "shell", "toggleMs"), medPhase(c.label, "shell", "dumpMs")]
    : [medPhase(c.label, "ours", "suspendMs"), medPhase(c.label, "ours", "criuDumpMs")];
  return checkpoint + Math.max(dump, med(c.label, side, "bytes") / durableRate(c.place.name) / 1e6);
};
const s = (ms: number) => fmt(ms / 1000, 2);

const summary: Table = {
  title: "Medians of the runs that came back intact (s; GB/s: image bytes / the durable time)",
  columns: [
    "case",
    "side",
    "runs ok",
    "snapshot s",
    "durable s",
    "restore s",
    "images GB",
    "durable GB/s",
    "shell durable / ours",
    "ours / bound",
  ],
  rows: cases.flatMap((c) =>
    (["ours", "shell"] as const).map((side) => {
      const all = measured.filter((r) => r.case === c.label && r.side === side);
      const d = med(c.label, side, "durableMs"), b = med(c.label, side, "bytes");
      return [
        c.label,
        side,
        `${okRuns(c.label, side).length}/${all.length}`,
        s(med(c.label, side, "snapshotMs")),
        s(d),
        s(med(c.label, side, "restoreMs")),
        fmt(b / 1e9, 2),
        fmt(b / d / 1e6, 2),
        side === "ours" ? fmt(med(c.label, "shell", "durableMs") / d, 2) : "",
        side === "ours" ? fmt(d / bound(c, "shell"), 2) : "",
      ];
    })
  ),
};
const phases: Table = {
  title: "Where the time goes (medians, s): ours' own phases; the shell's commands, summed; the " +
    "bound: checkpoint + max(dump, image bytes / the place's durable rate)",
  columns: [
    "case",
    "side",
    "suspend / toggle",
    "criu dump",
    "seal tail / sync",
    "until gone",
    "whole, own",
    "bound",
    "restore's checks",
    "criu restore",
    "resume",
  ],
  rows: cases.flatMap((c) => [
    [
      c.label,
      "ours",
      s(medPhase(c.label, "ours", "suspendMs")),
      s(medPhase(c.label, "ours", "criuDumpMs")),
      s(medPhase(c.label, "ours", "sealTailMs")),
      "(in its own)",
      s(medPhase(c.label, "ours", "ownSnapshotMs")),
      s(bound(c, "ours")),
      s(medPhase(c.label, "ours", "restoreCheckMs")),
      s(medPhase(c.label, "ours", "criuRestoreMs")),
      s(medPhase(c.label, "ours", "resumeMs")),
    ],
    [
      c.label,
      "shell",
      s(medPhase(c.label, "shell", "toggleMs")),
      s(medPhase(c.label, "shell", "dumpMs")),
      s(medPhase(c.label, "shell", "syncMs")),
      s(medPhase(c.label, "shell", "untilGoneMs")),
      "-",
      s(bound(c, "shell")),
      "-",
      s(medPhase(c.label, "shell", "criuRestoreMs")),
      s(medPhase(c.label, "shell", "resumeMs")),
    ],
  ]),
};
const diskTable: Table = {
  title: "The places' own rates, measured in the same run",
  columns: ["place", "method", "write GB/s", "read GB/s", "note"],
  rows: disk.map((d) => [d.place, d.method, fmt(d.writeGBps, 2), fmt(d.readGBps, 2), d.note ?? ""]),
};

const goals: Report["goals"] = [];
const judged = (value: number, met: boolean, note?: string) => ({
  value: Number.isFinite(value) ? value : null,
  met: Number.isFinite(value) && !sim ? met : null,
  ...(note ? { note } : {}),
});
for (const c of cases.filter((c) => c.count === 1)) {
  const ratio = med(c.label, "ours", "durableMs") / bound(c, "shell");
  goals.push({
    goal: `${c.label}: ours' durable snapshot within 1.15x of the driver's checkpoint + the ` +
      `larger of criu's dump and the image bytes at the ${c.place.name}'s durable rate (ours / ` +
      "bound <= 1.15, the shell's medians)",
    ...judged(ratio, ratio <= 1.15),
  });
}
for (const c of cases.filter((c) => c.count === 8 && c.place.name === "disk")) {
  const rate = med(c.label, "ours", "bytes") / med(c.label, "ours", "durableMs") / 1e6;
  const ratio = rate / durableRate("disk");
  goals.push({
    goal: `${c.label}: ours' image bytes per second at least 0.95 of the disk's durable rate`,
    ...judged(ratio, ratio >= 0.95, `${fmt(rate, 2)} GB/s of ${fmt(durableRate("disk"), 2)}`),
  });
}
const intact = measured.filter((r) => r.ok).length;
goals.push({
  goal: "every run ended well, every restored target back, running, its memory intact",
  value: measured.length ? intact / measured.length : null,
  met: measured.length ? intact === measured.length : null,
  note: `${intact} of ${measured.length} runs`,
});

const report: Report = {
  name: "snapshot",
  title: "@ckpt/cuda snapshots: cuda-checkpoint snapshot vs NVIDIA's utility and criu, one by one",
  description: "Each run starts fresh targets (tests/gpu/target.cu in fifo mode, a session each) " +
    "after a sync, and takes one side through a snapshot and back. Ours: one `snapshot` of " +
    "every target with our cuda-checkpoint (durable: every image fsynced before the processes " +
    "end), then one `restore-snapshot` (criu without its CUDA plugin, every tree at once). The " +
    "shell workflow, as NVIDIA's README has it, one process after another: NVIDIA's `--toggle` " +
    "and `criu dump`, then `sync` (the same made durable), then `criu restore` and `--toggle`, " +
    "with the same criu, without its plugin" +
    (values.restore === "ours" ? " (its restore not run here: --restore ours)" : "") +
    ". Times are spawn to exit of each command, summed; a snapshot ends once its processes are " +
    "gone, their pids free for the restore. Ours' phases: its manifest's suspend; criu's dump " +
    "from each dump.log's appearance (looked for every 20 ms) to its last write; the seal's tail " +
    "from there to the manifest's write. The two sides take turns (global round k starts with " +
    "ours when k is even); the images go to the same place and are removed after each run.",
  environment: environment({
    fake: false,
    libcuda: sim ? "(none: the simulated machine)" : "(each program loads its own)",
    date: started,
    ...(sim ? { noGpu: "the simulated machine of cuda-checkpoint --simulate" } : {}),
  }),
  config: {
    counts,
    mib: mibs,
    rounds: roundsOf,
    places: places.map((p) => `${p.name}: ${p.dir}`),
    restore: values.restore,
    budgetS,
    durableMib,
    diskMib,
    warmupMib: sim ? 0 : warmupMib,
    ours: oursPath,
    nvidia: nvidiaPath,
    criu: criuPath,
    target: values.target ?? null,
    versions,
    simulate: sim,
  },
  goals,
  tables: [summary, phases, diskTable],
  runs,
  runTables: [{
    title: "Every run, in the order made",
    columns: [
      "case",
      "round",
      "side",
      "order",
      "snapshot s",
      "durable s",
      "restore s",
      "images GB",
      "durable GB/s",
      "back intact",
      "error",
    ],
    rows: runs.map((r) => [
      r.warmup ? "warm-up" : r.case,
      r.round,
      r.side,
      r.order ? "second" : "first",
      s(r.snapshotMs ?? NaN),
      s(r.durableMs ?? NaN),
      s(r.restoreMs ?? NaN),
      fmt((r.bytes ?? NaN) / 1e9, 2),
      fmt(r.writeGBps, 2),
      r.checks.length
        ? `${r.checks.filter((c) => c.state === "running" && c.intact).length}/` +
          r.count
        : "-",
      r.error ?? "",
    ]),
  }],
  notes: [
    ...(sim
      ? [
        "SIMULATED: ours ran on the simulated machine of cuda-checkpoint --simulate (virtual " +
        "time), the shell workflow with ours --simulate --toggle for NVIDIA's utility and a " +
        "stand-in criu that writes a small image and leaves the process where it is; the check " +
        "compares the GPU memory the simulator lists, not a hash. This measures nothing real.",
      ]
      : []),
    ...skipped.map((s) => `Skipped for the time budget: ${s}.`),
    ...runs.filter((r) => r.error).map((r) =>
      `${r.warmup ? "warm-up " : ""}${r.case} round ${r.round} ${r.side} failed: ${r.error}`
    ),
    "criu writes its images through the page cache: without the sync, the shell workflow's " +
    "snapshot can end before the disk has its images (a power cut then loses them); ours syncs " +
    "every image, as criu writes it, before it ends the processes.",
  ],
};
publish(report, values.out, { columns: 10, digits: 2 });
process.exit(exitCode);

/** The stand-in for criu of --simulate (see the header). */
function STAND_IN_CRIU(): string {
  return `#!/bin/sh
# bench/disk_bench.ts --simulate: a stand-in for criu. dump writes a small image and leaves the
# (simulated) process where it is; restore checks that the image is there.
cmd=$1
case $cmd in
  --version) echo "Version: 4.1.1 (stand-in)"; exit 0 ;;
  check) echo "Looks good."; exit 0 ;;
esac
shift
images=
while [ $# -gt 0 ]; do
  case $1 in --images-dir) images=$2; shift ;; esac
  shift
done
case $cmd in
  dump) head -c 65536 /dev/zero >"$images/pages-1.img" && echo "(stand-in)" >"$images/dump.log" ;;
  restore) [ -f "$images/pages-1.img" ] ;;
  *) exit 1 ;;
esac
`;
}
