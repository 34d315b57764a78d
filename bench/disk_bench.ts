// Snapshots of whole CUDA processes to disk and back: our `cuda-checkpoint snapshot` and
// `restore-snapshot` (docs/SNAPSHOTS.md) against NVIDIA's documented workflow with its utility and
// the same criu, in one run on one machine, the two taking turns (global round k starts with ours
// when k is even, with the shell workflow when it is odd):
//
//   ours   one `cuda-checkpoint snapshot --pid P1,...,Pn --dir D` for n targets (one tree each),
//          then one `cuda-checkpoint restore-snapshot --dir D`;
//   shell  NVIDIA's README, one process after another: `nvidia --toggle --pid P`, then
//          `criu dump --tree P --images-dir Di --shell-job --no-default-config --libdir <empty>
//          -v4 -o dump.log` (criu ends P); to restore, for each: `criu restore --images-dir Di
//          --restore-detached --shell-job --no-default-config --libdir <empty> -v4 -o
//          restore.log`, then `nvidia --toggle --pid P`.
//
// Each side's time is its commands' spawn-to-exit, summed; a snapshot's ends once its processes
// are gone, their pids free for the restore (ours waits for that before it exits; the shell's
// wait after its last dump is added to its time). Every run starts fresh targets (tests/gpu/target.cu
// in fifo mode, a session each), checks afterwards that each is running with the memory hash it
// had when it started (a failed check is reported, and fails the run), ends them and removes the
// images. The disk's own rate is measured first, in the images' directory (dd with O_DIRECT, and
// fio where there is one), beside each side's image bytes / dump time and / restore time.
//
// Goals: one process: ours' snapshot and restore each within 1.1x of the shell workflow (median);
// eight processes: ours at least 4x faster than the shell workflow one after another, for the
// snapshot and for the restore. Also: every target of every run back, running, memory intact.
//
// On the GPU machine (as root; tests/gpu/README.md says what to carry), under our binary's Bun:
//   BUN_BE_BUN=1 /tmp/bench-ckpt/cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts \
//     bench/disk_bench.ts --ours /tmp/bench-ckpt/cuda-checkpoint --nvidia /tmp/bench-ckpt/nvidia \
//     --criu /tmp/criu/usr/sbin/criu --target /tmp/bench-ckpt/target --out $OUT
//   [--counts 1,8] [--mib 2048] [--rounds 2,1] [--budget-s 480] [--work /tmp/ckpt-snapshot-bench]
//   [--disk-mib 4096] [--warmup-mib 256] [--timeout-s 300]
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

import { spawn } from "node:child_process";
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import {
  childEnv,
  cmdlineHas,
  completeLines,
  endRun,
  failure,
  freeMib,
  pidState,
  type Ran,
  roundsWithin,
  runProgram,
  scratchFolder,
} from "./fifo_targets.ts";
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
    counts: { type: "string", default: "1,8" },
    mib: { type: "string", default: "2048" },
    rounds: { type: "string", default: "2,1" },
    "budget-s": { type: "string", default: "480" },
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

/** What a failed run said, in one line. */
const said = failure;

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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

/** Whether pid is a target of this run (its command line names the run's folder). */
const isOurs = (pid: number): boolean => cmdlineHas(pid, scratch);

/** A real target's answer to "hash", through its fifo. */
async function fifoHash(t: Target): Promise<string> {
  const out = join(t.dir, "out");
  const before = completeLines(out).length;
  const w = await run("timeout", [
    "20",
    "sh",
    "-c",
    'printf "%s\\n" "$1" > "$2"',
    "sh",
    "hash",
    join(t.dir, "cmd"),
  ], 30_000);
  if (w.code !== 0) return `(the fifo was not read: ${said(w)})`;
  for (let k = 0; k < 1200; k++) {
    const line = completeLines(out)[before];
    if (line !== undefined) return line;
    await sleep(100);
  }
  return "(no answer in 120 s)";
}

const realWorld: World = {
  async start(count, mib, label) {
    const made = await Promise.allSettled(Array.from({ length: count }, async (_, i) => {
      const dir = join(scratch, `t-${label}-${i}`);
      mkdirSync(dir, { mode: 0o700 });
      const mk = await run("mkfifo", [join(dir, "cmd")], 30_000);
      if (mk.code !== 0) throw new Error(`mkfifo: ${said(mk)}`);
      const fd = openSync(join(dir, "out"), "w");
      // A session of its own (setsid), stdin /dev/null, stdout a file: nothing criu cannot dump.
      const child = spawn(values.target!, ["fifo", String(mib), join(dir, "cmd")], {
        detached: true,
        stdio: ["ignore", fd, fd],
        env,
      });
      closeSync(fd);
      let exited = false;
      child.on("exit", () => exited = true);
      child.on("error", () => exited = true);
      child.unref();
      for (let k = 0; k < 1200 && !exited; k++) {
        const m = /^ready (\d+) (\d+) ([0-9a-f]+)$/.exec(completeLines(join(dir, "out"))[0] ?? "");
        if (m) return { pid: Number(m[1]), readyHash: m[3], dir };
        await sleep(100);
      }
      child.kill("SIGKILL");
      throw new Error(
        `target ${label}-${i} did not start: ${
          readFileSync(join(dir, "out"), "utf8").slice(0, 300)
        }`,
      );
    }));
    const ok = made.flatMap((m) => m.status === "fulfilled" ? [m.value] : []);
    const failed = made.find((m): m is PromiseRejectedResult => m.status === "rejected");
    if (failed) {
      await this.end(ok);
      throw failed.reason;
    }
    return ok;
  },
  async check(targets) {
    const checks: Check[] = [];
    for (const t of targets) {
      const state = (await ours(["--get-state", "--pid", String(t.pid)])).out.trim() || "(none)";
      const hash = state === "running" ? await fifoHash(t) : "(not asked: not running)";
      checks.push({ pid: t.pid, state, hash, intact: hash === `hash ${t.readyHash}` });
    }
    return checks;
  },
  async waitGone(pids, timeoutMs) {
    const until = performance.now() + timeoutMs;
    let left = [...pids];
    while ((left = left.filter((p) => pidState(p) !== "gone")).length > 0) {
      if (performance.now() > until) break;
      await sleep(50);
    }
    return left;
  },
  async end(targets) {
    const live = targets.filter((t) => pidState(t.pid) === "alive" && isOurs(t.pid));
    await Promise.all(
      live.map((t) =>
        run(
          "timeout",
          ["5", "sh", "-c", 'printf "exit\\n" > "$1"', "sh", join(t.dir, "cmd")],
          10_000,
        )
      ),
    );
    const until = performance.now() + 5000;
    while (live.some((t) => pidState(t.pid) === "alive") && performance.now() < until) {
      await sleep(50);
    }
    for (const t of live) {
      if (pidState(t.pid) === "alive" && isOurs(t.pid)) {
        try {
          process.kill(t.pid, "SIGKILL");
        } catch {
          // gone
        }
      }
    }
  },
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
      if (r.code !== 0 || !Number.isInteger(pid)) throw new Error(`spawn: ${said(r)}`);
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
  restoreMs: number;
  bytes: number;
  /** Phases: ours' own (from its --json and manifest), the shell's sums per command. */
  phases: Record<string, number>;
  steps?: { snapshot: Step[]; restore: Step[] };
}

/** Runs one side on `targets`: snapshot, wait until their pids are free, restore. */
/** What the shell workflow's criu runs share with ours: a shell job, no plugin, its log. */
function criuAlike(log: string): string[] {
  return ["--shell-job", "--no-default-config", "--libdir", noPlugins, "-v4", "-o", log];
}

async function runSide(side: SideName, targets: Target[], images: string): Promise<SideOutcome> {
  const pids = targets.map((t) => t.pid);
  const gone = async () => {
    // The shell's stand-in criu of --simulate leaves the simulated process where it is.
    if (sim && side === "shell") return;
    const left = await world.waitGone(pids, 30_000);
    if (left.length > 0) throw new Error(`pids ${left.join(", ")} still taken 30 s after the dump`);
  };
  if (side === "ours") {
    const s = await ours(["snapshot", "--pid", pids.join(","), "--dir", images, "--json"]);
    const sj = parseJson(s.out);
    if (s.code !== 0 || sj?.ok !== true) throw new Error(`ours snapshot: ${said(s)}`);
    const inspect = parseJson((await ours(["inspect", "--dir", images, "--json"])).out);
    await gone();
    const r = await ours(["restore-snapshot", "--dir", images, "--json"]);
    const rj = parseJson(r.out);
    if (r.code !== 0 || rj?.ok !== true) throw new Error(`ours restore-snapshot: ${said(r)}`);
    const timings = inspect?.manifest?.timings ?? {};
    return {
      snapshotMs: s.ms,
      restoreMs: r.ms,
      bytes: Number(sj.bytes),
      phases: {
        ownSnapshotMs: Number(sj.ms),
        suspendMs: Number(timings.suspendMs),
        dumpMs: Number(timings.dumpMs),
        ownRestoreMs: Number(rj.ms),
        restoreCheckMs: Number(rj.timings?.checkMs),
        criuRestoreMs: Number(rj.timings?.restoreMs),
        resumeMs: Number(rj.timings?.resumeMs),
      },
    };
  }
  const dirs = targets.map((t) => join(images, `tree-${t.pid}`));
  mkdirSync(images, { mode: 0o700 });
  const snapshotSteps: Step[] = [];
  let snapshotMs = 0;
  for (const [i, pid] of pids.entries()) {
    mkdirSync(dirs[i], { mode: 0o700 });
    const toggle = await nvidia(["--toggle", "--pid", String(pid)]);
    snapshotMs += toggle.ms;
    if (toggle.code !== 0) throw new Error(`NVIDIA's --toggle --pid ${pid}: ${said(toggle)}`);
    const dump = await run(criuPath, [
      "dump",
      "--tree",
      String(pid),
      "--images-dir",
      dirs[i],
      ...criuAlike("dump.log"),
    ]);
    snapshotMs += dump.ms;
    snapshotSteps.push({ pid, toggleMs: toggle.ms, dumpMs: dump.ms });
    if (dump.code !== 0) {
      throw new Error(`criu dump --tree ${pid}: ${said(dump)}; ${logTail(dirs[i], "dump.log")}`);
    }
  }
  const bytes = dirs.reduce((sum, d) => sum + bytesUnder(d), 0);
  // Until the ended processes are gone (reaped, their pids free for a restore), as ours waits.
  const g0 = performance.now();
  await gone();
  const untilGoneMs = performance.now() - g0;
  snapshotMs += untilGoneMs;
  const restoreSteps: Step[] = [];
  let restoreMs = 0;
  for (const [i, pid] of pids.entries()) {
    const restore = await run(criuPath, [
      "restore",
      "--images-dir",
      dirs[i],
      "--restore-detached",
      ...criuAlike("restore.log"),
    ]);
    restoreMs += restore.ms;
    if (restore.code !== 0) {
      throw new Error(
        `criu restore of ${pid}: ${said(restore)}; ${logTail(dirs[i], "restore.log")}`,
      );
    }
    const toggle = await nvidia(["--toggle", "--pid", String(pid)]);
    restoreMs += toggle.ms;
    restoreSteps.push({ pid, restoreMs: restore.ms, toggleMs: toggle.ms });
    if (toggle.code !== 0) throw new Error(`NVIDIA's --toggle --pid ${pid}: ${said(toggle)}`);
  }
  const sum = (steps: Step[], k: string) => steps.reduce((a, s) => a + s[k], 0);
  return {
    snapshotMs,
    restoreMs,
    bytes,
    phases: {
      toggleMs: sum(snapshotSteps, "toggleMs"),
      dumpMs: sum(snapshotSteps, "dumpMs"),
      untilGoneMs,
      criuRestoreMs: sum(restoreSteps, "restoreMs"),
      resumeToggleMs: sum(restoreSteps, "toggleMs"),
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
  count: number;
  mib: number;
  round: number;
  side: SideName;
  /** 0: this side went first in its round; 1: second. */
  order: number;
  warmup: boolean;
  ok: boolean;
  error?: string;
  checks: Check[];
  /** GB/s: image bytes / snapshot time, and / restore time. */
  writeGBps?: number;
  readGBps?: number;
}
const runs: Run[] = [];

async function oneRun(
  label: string,
  count: number,
  mib: number,
  round: number,
  side: SideName,
  order: number,
  warmup: boolean,
): Promise<Run> {
  const rec: Run = { case: label, count, mib, round, side, order, warmup, ok: false, checks: [] };
  const images = join(scratch, `img-${label}-r${round}-${side}`);
  let targets: Target[] = [];
  try {
    if (!sim) {
      // A CUDA process's images: about twice its GPU memory and half a GiB (1 GiB: 2.6 GB, as
      // docs/SNAPSHOTS.md says; 2 GiB: about 4.6 GB).
      const need = Math.ceil(count * (mib * 2 + 512));
      const free = await freeMib(scratch);
      if (free !== undefined && free < need) {
        throw new Error(`${free} MiB free in ${scratch}, the images need about ${need} MiB`);
      }
    }
    targets = await world.start(count, mib, `${label}-r${round}-${side}`);
    const outcome = await runSide(side, targets, images);
    Object.assign(rec, outcome);
    rec.writeGBps = outcome.bytes / outcome.snapshotMs / 1e6;
    rec.readGBps = outcome.bytes / outcome.restoreMs / 1e6;
  } catch (error) {
    rec.error = (error as Error).message;
  }
  rec.checks = await world.check(targets);
  rec.ok = rec.error === undefined && rec.checks.length === count &&
    rec.checks.every((c) => c.state === "running" && c.intact);
  await world.end(targets).catch(() => {});
  rmSync(images, { recursive: true, force: true });
  for (const t of targets) if (t.dir) rmSync(t.dir, { recursive: true, force: true });
  console.log(
    `${label} round ${round} ${side}${order ? " (second)" : " (first)"}: ` +
      (rec.error
        ? `FAILED: ${rec.error}`
        : `snapshot ${fmt(rec.snapshotMs! / 1000, 2)} s, restore ${
          fmt(rec.restoreMs! / 1000, 2)
        } s, images ${fmt(rec.bytes! / 1e9, 2)} GB (${fmt(rec.writeGBps, 2)} / ${
          fmt(rec.readGBps, 2)
        } GB/s)`) +
      `; ${rec.checks.filter((c) => c.state === "running" && c.intact).length}/${count} back ` +
      `running and intact${
        rec.ok ? "" : `: ${rec.checks.map((c) => `${c.pid} ${c.state} ${c.hash}`).join("; ")}`
      }`,
  );
  return rec;
}

// ---- the disk's own rate ----

interface DiskRate {
  method: string;
  writeGBps?: number;
  readGBps?: number;
  note?: string;
}

async function diskRates(): Promise<DiskRate[]> {
  if (diskMib === 0) return [];
  const file = join(scratch, "disk-rate.bin");
  const bs = diskMib % 4 === 0 ? ["bs=4M", `count=${diskMib / 4}`] : ["bs=1M", `count=${diskMib}`];
  const bytes = diskMib * 2 ** 20;
  const rates: DiskRate[] = [];
  const direct: DiskRate = { method: `dd ${bs[0]} O_DIRECT, ${diskMib} MiB` };
  const w = await run("dd", ["if=/dev/zero", `of=${file}`, ...bs, "oflag=direct", "conv=fsync"]);
  if (w.code === 0) {
    direct.writeGBps = bytes / w.ms / 1e6;
    const r = await run("dd", [`if=${file}`, "of=/dev/null", bs[0], "iflag=direct"]);
    if (r.code === 0) direct.readGBps = bytes / r.ms / 1e6;
    else direct.note = `read: ${said(r)}`;
  } else {
    direct.note = `O_DIRECT write: ${said(w)}`;
  }
  rates.push(direct);
  rmSync(file, { force: true });
  // criu writes through the page cache, without a sync: that ceiling too.
  const cached: DiskRate = {
    method: `dd ${bs[0]} through the page cache (no sync, as criu writes), ${diskMib} MiB`,
  };
  const c = await run("dd", ["if=/dev/zero", `of=${file}`, ...bs]);
  if (c.code === 0) cached.writeGBps = bytes / c.ms / 1e6;
  else cached.note = said(c);
  const cr = await run("dd", [`if=${file}`, "of=/dev/null", bs[0]]);
  if (cr.code === 0) {
    cached.readGBps = bytes / cr.ms / 1e6;
    cached.note = "read back from the page cache";
  }
  rates.push(cached);
  rmSync(file, { force: true });
  if ((await run("fio", ["--version"], 10_000)).code === 0) {
    const fio: DiskRate = { method: `fio 4M O_DIRECT, iodepth 16, ${diskMib} MiB` };
    for (const rw of ["write", "read"] as const) {
      const f = await run("fio", [
        `--name=${rw}`,
        `--filename=${file}`,
        `--rw=${rw}`,
        "--bs=4M",
        `--size=${diskMib}M`,
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--output-format=json",
      ]);
      const bw = parseJson(f.out.slice(f.out.indexOf("{")).replace(/\n/g, " "))?.jobs?.[0]?.[rw]
        ?.bw_bytes;
      if (f.code === 0 && typeof bw === "number") {
        fio[rw === "write" ? "writeGBps" : "readGBps"] = bw / 1e9;
      } else fio.note = `${rw}: ${said(f)}`;
    }
    rates.push(fio);
    rmSync(file, { force: true });
  }
  for (const d of rates) {
    console.log(
      `disk: ${d.method}: write ${fmt(d.writeGBps, 2)} GB/s, read ${fmt(d.readGBps, 2)} GB/s` +
        (d.note ? ` (${d.note})` : ""),
    );
  }
  return rates;
}

// ---- the run ----

let exitCode = 0;
let disk: DiskRate[] = [];
const versions: Record<string, string> = {};
const skipped: string[] = [];
const caseLabel = (n: number, mib: number) => `${n}x${mib}MiB`;
try {
  versions.ours = (await ours(["--version"])).out.trim();
  versions.criu = (await run(criuPath, ["--version"])).out.trim().split("\n")[0];
  versions.nvidia = sim ? "(ours --simulate, standing in)" : nvidiaPath;
  console.log(
    `ours: ${oursPath} (${versions.ours}); NVIDIA's: ${versions.nvidia}; criu: ${criuPath} ` +
      `(${versions.criu}); images in ${scratch}${sim ? "; SIMULATED" : ""}`,
  );
  console.log(`free in ${scratch}: ${await freeMib(scratch)} MiB`);
  disk = await diskRates();
  if (warmupMib > 0 && !sim) {
    // Untimed: each program, criu and the driver once, so that neither side pays a cold start.
    for (const side of ["ours", "shell"] as const) {
      runs.push(await oneRun("warm-up", 1, warmupMib, 0, side, side === "ours" ? 0 : 1, true));
    }
  }
  let k = 0; // global round: even starts with ours
  for (const [ci, count] of counts.entries()) {
    const mib = mibs[ci];
    const label = caseLabel(count, mib);
    await roundsWithin(roundsOf[ci], { budgetS, elapsedMs, skipped, label }, async (round) => {
      const order: SideName[] = k % 2 === 0 ? ["ours", "shell"] : ["shell", "ours"];
      for (const [i, side] of order.entries()) {
        runs.push(await oneRun(label, count, mib, round, side, i, false));
      }
      k++;
    });
  }
} catch (error) {
  console.error(error);
  exitCode = 1;
} finally {
  // Targets of this run left behind (a failure): ended, by their command line.
  endRun(scratch);
}

// ---- the report ----

const measured = runs.filter((r) => !r.warmup);
if (measured.length === 0 || measured.some((r) => !r.ok)) exitCode = 1;
const okRuns = (label: string, side: SideName) =>
  measured.filter((r) => r.case === label && r.side === side && r.ok);
const med = (label: string, side: SideName, key: "snapshotMs" | "restoreMs" | "bytes") =>
  median(okRuns(label, side).map((r) => r[key]!));
const cases = counts.map((n, i) => ({ count: n, mib: mibs[i], label: caseLabel(n, mibs[i]) }));

const summary: Table = {
  title: "Medians of the runs that came back intact (s; GB/s: image bytes / that time)",
  columns: [
    "case",
    "side",
    "runs ok",
    "snapshot s",
    "restore s",
    "images GB",
    "write GB/s",
    "read GB/s",
    "shell / ours, snapshot",
    "shell / ours, restore",
  ],
  rows: cases.flatMap(({ label }) =>
    (["ours", "shell"] as const).map((side) => {
      const all = measured.filter((r) => r.case === label && r.side === side);
      const s = med(label, side, "snapshotMs"), r = med(label, side, "restoreMs");
      const b = med(label, side, "bytes");
      return [
        label,
        side,
        `${okRuns(label, side).length}/${all.length}`,
        fmt(s / 1000, 2),
        fmt(r / 1000, 2),
        fmt(b / 1e9, 2),
        fmt(b / s / 1e6, 2),
        fmt(b / r / 1e6, 2),
        side === "ours" ? fmt(med(label, "shell", "snapshotMs") / s, 2) : "",
        side === "ours" ? fmt(med(label, "shell", "restoreMs") / r, 2) : "",
      ];
    })
  ),
};
const medPhase = (label: string, side: SideName, key: string) =>
  median(okRuns(label, side).map((r) => r.phases?.[key] ?? NaN).filter(Number.isFinite));
const phases: Table = {
  title: "Where the time goes (medians, s): ours' own phases; the shell's commands, summed",
  columns: [
    "case",
    "side",
    "suspend",
    "criu dump",
    "until gone",
    "restore's checks",
    "criu restore",
    "resume",
    "whole, own: snapshot / restore",
  ],
  rows: cases.flatMap(({ label }) => [
    [
      label,
      "ours",
      fmt(medPhase(label, "ours", "suspendMs") / 1000, 2),
      fmt(medPhase(label, "ours", "dumpMs") / 1000, 2),
      "(in its own)",
      fmt(medPhase(label, "ours", "restoreCheckMs") / 1000, 2),
      fmt(medPhase(label, "ours", "criuRestoreMs") / 1000, 2),
      fmt(medPhase(label, "ours", "resumeMs") / 1000, 2),
      `${fmt(medPhase(label, "ours", "ownSnapshotMs") / 1000, 2)} / ${
        fmt(medPhase(label, "ours", "ownRestoreMs") / 1000, 2)
      }`,
    ],
    [
      label,
      "shell",
      fmt(medPhase(label, "shell", "toggleMs") / 1000, 2),
      fmt(medPhase(label, "shell", "dumpMs") / 1000, 2),
      fmt(medPhase(label, "shell", "untilGoneMs") / 1000, 2),
      "-",
      fmt(medPhase(label, "shell", "criuRestoreMs") / 1000, 2),
      fmt(medPhase(label, "shell", "resumeToggleMs") / 1000, 2),
      "-",
    ],
  ]),
};
const diskTable: Table = {
  title: `The disk's own rate, in ${work}, measured in the same run`,
  columns: ["method", "write GB/s", "read GB/s", "note"],
  rows: disk.map((d) => [d.method, fmt(d.writeGBps, 2), fmt(d.readGBps, 2), d.note ?? ""]),
};

const goals: Report["goals"] = [];
const one = cases.find((c) => c.count === 1);
const eight = cases.find((c) => c.count === 8);
for (const phase of ["snapshot", "restore"] as const) {
  const key = phase === "snapshot" ? "snapshotMs" : "restoreMs";
  const ratio1 = one ? med(one.label, "ours", key) / med(one.label, "shell", key) : NaN;
  goals.push({
    goal: `one process${one ? ` of ${one.mib} MiB` : ""}: ours' ${phase} within 1.1x of the ` +
      "shell workflow (median, ours / shell <= 1.1)",
    value: Number.isFinite(ratio1) ? ratio1 : null,
    met: Number.isFinite(ratio1) && !sim ? ratio1 <= 1.1 : null,
    ...(one ? {} : { note: "no case of one process in this run" }),
  });
}
for (const phase of ["snapshot", "restore"] as const) {
  const key = phase === "snapshot" ? "snapshotMs" : "restoreMs";
  const ratio8 = eight ? med(eight.label, "shell", key) / med(eight.label, "ours", key) : NaN;
  goals.push({
    goal: `eight processes${eight ? ` of ${eight.mib} MiB` : ""}: ours' ${phase} at least 4x ` +
      "faster than the shell workflow one after another (median, shell / ours >= 4)",
    value: Number.isFinite(ratio8) ? ratio8 : null,
    met: Number.isFinite(ratio8) && !sim ? ratio8 >= 4 : null,
    ...(eight ? {} : { note: "no case of eight processes in this run" }),
  });
}
const intact = measured.filter((r) => r.ok).length;
goals.push({
  goal: "every target of every run back, running, its memory intact (both sides)",
  value: measured.length ? intact / measured.length : null,
  met: measured.length ? intact === measured.length : null,
  note: `${intact} of ${measured.length} runs`,
});

const report: Report = {
  name: "snapshot",
  title: "@ckpt/cuda snapshots: cuda-checkpoint snapshot vs NVIDIA's utility and criu, one by one",
  description: "Each run starts fresh targets (tests/gpu/target.cu in fifo mode, a session each) " +
    "and takes one side through a snapshot to disk and back. Ours: one `cuda-checkpoint snapshot " +
    "--pid P1,...,Pn --dir D`, then `cuda-checkpoint restore-snapshot --dir D` (criu without its " +
    "CUDA plugin, every tree at once). The shell workflow, as NVIDIA's README has it, one " +
    "process after another: `cuda-checkpoint --toggle` (NVIDIA's) and `criu dump --tree P " +
    "--shell-job`; " +
    "then `criu restore --restore-detached --shell-job` and `--toggle`, with the same criu, " +
    "without its plugin. Times are spawn to exit of each command, summed; a snapshot ends once " +
    "its processes are gone, their pids free for the restore (ours waits for that before it " +
    "exits; the shell workflow's wait after its last dump is added to its time). " +
    "The two sides take turns (global round k starts with " +
    "ours when k is even); the images go to the same directory and are removed after each run. " +
    "Every run checks its targets running with their memory's hash unchanged.",
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
    budgetS,
    diskMib,
    warmupMib: sim ? 0 : warmupMib,
    work,
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
      "restore s",
      "images GB",
      "write GB/s",
      "read GB/s",
      "back intact",
      "error",
    ],
    rows: runs.map((r) => [
      r.warmup ? "warm-up" : r.case,
      r.round,
      r.side,
      r.order ? "second" : "first",
      fmt((r.snapshotMs ?? NaN) / 1000, 2),
      fmt((r.restoreMs ?? NaN) / 1000, 2),
      fmt((r.bytes ?? NaN) / 1e9, 2),
      fmt(r.writeGBps, 2),
      fmt(r.readGBps, 2),
      `${r.checks.filter((c) => c.state === "running" && c.intact).length}/${r.count}`,
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
    "criu writes its images through the page cache: where the machine's memory holds them, a " +
    "dump can go faster than the disk's O_DIRECT rate, and a restore right after reads them " +
    "back from memory; the page-cache row of the disk table is that ceiling.",
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
