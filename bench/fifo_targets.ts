// Real CUDA targets for benchmarks that snapshot them to disk from their own process
// (bench/integrity.ts, bench/criu_restore.ts): tests/gpu/target.cu in fifo mode, each a session of its own (setsid),
// stdin /dev/null, stdout to a file, its commands through a named fifo, one per opening, so that
// criu has nothing it cannot dump and the target still answers after a restore. The benchmark
// process is their parent and reaps them (a zombie keeps its pid, and a restore needs it free).
// Also what such a benchmark runs besides: a program with a time limit (dd, df), the room left on
// the disk, the disk's own read rate (dd), the page cache dropped, the wait until ended pids are
// free again; and the frame of a run (bench/disk_bench.ts's too): its own folder, the environment
// of its children, its rounds within a time budget, and the end of every process it left behind,
// at its end or on SIGINT and SIGTERM. Runs under Deno and Bun alike.

import { spawn } from "node:child_process";
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";

import { fmt } from "./report.ts";

/** A target that said it was ready. */
export interface FifoTarget {
  pid: number;
  /** The hash of its GPU memory it printed when ready ("ready <pid> <tid> <hash>"). */
  readyHash: string;
  /** Its folder: `cmd` (the fifo) and `out` (what it prints). */
  dir: string;
}

/** What a program run to its end (or its limit) did. */
export interface Ran {
  code: number | null;
  signal: string | null;
  out: string;
  err: string;
  ms: number;
  timedOut: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `file` (an argument array, no shell) to its end, or `timeoutMs` (then SIGKILL). */
export function runProgram(
  file: string,
  args: readonly string[],
  timeoutMs: number,
  env?: Record<string, string>,
): Promise<Ran> {
  const start = performance.now();
  return new Promise((done) => {
    let out = "", err = "", timedOut = false, settled = false;
    const child = spawn(file, [...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    const finish = (code: number | null, signal: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      done({ code, signal, out, err, ms: performance.now() - start, timedOut });
    };
    child.stdout!.setEncoding("utf8").on("data", (d: string) => out.length < 1e6 && (out += d));
    child.stderr!.setEncoding("utf8").on("data", (d: string) => err.length < 1e6 && (err += d));
    child.on("error", (e) => {
      err += String(e);
      finish(null, null);
    });
    child.on("close", finish);
  });
}

/** MiB free on the file system of `dir` (df), or undefined. */
export async function freeMib(dir: string): Promise<number | undefined> {
  const r = await runProgram("df", ["-Pm", dir], 30_000);
  const n = Number(r.out.trim().split("\n")[1]?.split(/\s+/)[3]);
  return Number.isFinite(n) ? n : undefined;
}

/** Throws where `dir`'s file system has less than `need` MiB free for a run's images. */
export async function needMib(dir: string, need: number): Promise<void> {
  const free = await freeMib(dir);
  if (free !== undefined && free < need) {
    throw new Error(`${free} MiB free in ${dir}, the images need up to ${need} MiB`);
  }
}

/** A run that failed, in one line. */
export function failure(r: Ran): string {
  const text = `${r.err.trim()} ${r.out.trim()}`.trim().replace(/\s+/g, " ").slice(0, 400);
  return `exit ${r.timedOut ? "(timed out)" : r.code ?? r.signal}${text ? `: ${text}` : ""}`;
}

/** How fast `dd` read one file. */
export interface DiskRead {
  /** What was read: the largest image of the run, or a test file. */
  file: string;
  bytes: number;
  /** GB/s of dd with O_DIRECT, from the disk. */
  directGBps?: number;
  /** GB/s of dd through the page cache (one stream). */
  cachedGBps?: number;
  note?: string;
}

/** dd of `file` to /dev/null, with O_DIRECT and then through the page cache. */
export async function ddRead(file: string, bytes: number, timeoutMs: number): Promise<DiskRead> {
  const rate: DiskRead = { file, bytes };
  const direct = await runProgram(
    "dd",
    [`if=${file}`, "of=/dev/null", "bs=4M", "iflag=direct"],
    timeoutMs,
  );
  if (direct.code === 0) rate.directGBps = bytes / direct.ms / 1e6;
  else rate.note = `O_DIRECT: ${failure(direct)}`;
  const cached = await runProgram("dd", [`if=${file}`, "of=/dev/null", "bs=4M"], timeoutMs);
  if (cached.code === 0) rate.cachedGBps = bytes / cached.ms / 1e6;
  else rate.note = `${rate.note ? `${rate.note}; ` : ""}cached: ${failure(cached)}`;
  return rate;
}

/** Writes back what is dirty and drops the page cache (root only); why not, where it failed. */
export async function dropCaches(timeoutMs: number): Promise<string | undefined> {
  const s = await runProgram("sync", [], timeoutMs);
  if (s.code !== 0) return `sync: ${failure(s)}`;
  try {
    writeFileSync("/proc/sys/vm/drop_caches", "3\n");
    return undefined;
  } catch (err) {
    return `drop_caches: ${(err as Error).message}`;
  }
}

/** Whether a libcuda is the fake of tests/fixtures (a dry run, which measures nothing real). */
export function isFakeLibcuda(path: string): boolean {
  try {
    return readFileSync(path).includes("fake_max_in_flight");
  } catch {
    return false;
  }
}

/** Whether `pid` is free, a zombie (its pid still taken), or a live process. */
export function pidState(pid: number): "gone" | "zombie" | "alive" {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return "gone";
  }
  const after = stat.lastIndexOf(")");
  return stat.slice(after + 2, after + 3) === "Z" ? "zombie" : "alive";
}

/**
 * Waits up to `timeoutMs` until each of `pids` is free (reaped: not even a zombie, which keeps its
 * pid, and a restore needs it); resolves to those still taken.
 */
export async function waitPidsFree(pids: readonly number[], timeoutMs: number): Promise<number[]> {
  const until = performance.now() + timeoutMs;
  let left = pids.filter((p) => pidState(p) !== "gone");
  while (left.length > 0 && performance.now() < until) {
    await sleep(50);
    left = left.filter((p) => pidState(p) !== "gone");
  }
  return left;
}

/** Whether the command line of `pid` names `marker` (a run's folder): a process of that run. */
export function cmdlineHas(pid: number, marker: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker);
  } catch {
    return false;
  }
}

/** SIGKILLs every process (but this one) whose command line names `marker`; how many. */
export function killMarked(marker: string): number {
  let killed = 0;
  for (const name of existsSync("/proc") ? readdirSync("/proc") : []) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid || !cmdlineHas(pid, marker)) continue;
    try {
      process.kill(pid, "SIGKILL");
      killed++;
    } catch {
      // gone meanwhile
    }
  }
  return killed;
}

/**
 * This run's own folder, `<work>/run-<pid>` (`work` made where missing), made afresh with mode 0700.
 * Every target of the run lives in it, so its path in a command line marks the run's processes.
 */
export function scratchFolder(work: string): string {
  mkdirSync(work, { recursive: true, mode: 0o700 });
  const scratch = join(work, `run-${process.pid}`);
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { mode: 0o700 });
  return scratch;
}

/** This process's environment for the programs it starts, without BUN_BE_BUN (ours must be itself). */
export function childEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  delete env.BUN_BE_BUN;
  return env;
}

/** The end of a run: every process of it (its command line names `scratch`) killed, the folder removed. */
export function endRun(scratch: string): void {
  killMarked(scratch);
  rmSync(scratch, { recursive: true, force: true });
}

/** On SIGINT or SIGTERM: the end of the run (`endRun`), then exit 130 or 143. */
export function endRunOnSignals(scratch: string): void {
  const stop = (signal: string) => {
    console.error(`${signal}: ending this run's targets and removing ${scratch}`);
    endRun(scratch);
    process.exit(signal === "SIGINT" ? 130 : 143);
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

/** The time budget of a run's rounds, and where to say which were not started. */
export interface Budget {
  /** Seconds from the run's start after which no round starts. */
  budgetS: number;
  /** ms since the run started. */
  elapsedMs: () => number;
  /** Receives one line where rounds were left out (it is printed as well). */
  skipped: string[];
  /** Said first in that line (a configuration's name, where a run has several). */
  label?: string;
}

/**
 * Runs `round(k)` for k = 0 .. `rounds` - 1 while the budget allows: no round starts after
 * `budgetS`, nor one that the last round's time says would end after it. The rounds left out are
 * said in one line, into `skipped` and printed.
 */
export async function roundsWithin(
  rounds: number,
  budget: Budget,
  round: (k: number) => Promise<void>,
): Promise<void> {
  const { budgetS, elapsedMs, skipped, label } = budget;
  let lastRoundMs = 0;
  for (let k = 0; k < rounds; k++) {
    const now = elapsedMs();
    if (now > budgetS * 1000 || now + lastRoundMs > budgetS * 1000) {
      skipped.push(
        `${label ? `${label}: ` : ""}rounds ${k}..${rounds - 1} not started, ${
          fmt(now / 1000, 0)
        } s into a ${budgetS} s budget (the last round took ${fmt(lastRoundMs / 1000, 0)} s)`,
      );
      console.log(`skipped: ${skipped.at(-1)}`);
      return;
    }
    await round(k);
    lastRoundMs = elapsedMs() - now;
  }
}

/** The complete lines of a file so far (the last, unfinished one left out). */
export function completeLines(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split("\n").slice(0, -1);
  } catch {
    return [];
  }
}

/**
 * Starts `count` targets of `mib` MiB of GPU memory each, target i in `<base>-<i>`, all at once,
 * and waits until each says it is ready (120 s at most). If one fails, those started are ended.
 */
export async function startFifoTargets(
  program: string,
  count: number,
  mib: number,
  base: string,
  env?: Record<string, string>,
): Promise<FifoTarget[]> {
  const made = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => startOne(program, mib, `${base}-${i}`, env)),
  );
  const ok = made.flatMap((m) => m.status === "fulfilled" ? [m.value] : []);
  const failed = made.find((m): m is PromiseRejectedResult => m.status === "rejected");
  if (failed) {
    await endFifoTargets(ok, base);
    throw failed.reason;
  }
  return ok;
}

async function startOne(
  program: string,
  mib: number,
  dir: string,
  env?: Record<string, string>,
): Promise<FifoTarget> {
  mkdirSync(dir, { mode: 0o700 });
  const mk = await runProgram("mkfifo", ["-m", "600", join(dir, "cmd")], 30_000);
  if (mk.code !== 0) throw new Error(`mkfifo in ${dir}: ${failure(mk)}`);
  const fd = openSync(join(dir, "out"), "w", 0o600);
  let exited = false;
  try {
    const child = spawn(program, ["fifo", String(mib), join(dir, "cmd")], {
      detached: true,
      stdio: ["ignore", fd, fd],
      env,
    });
    child.on("exit", () => exited = true);
    child.on("error", () => exited = true);
    child.unref();
  } finally {
    closeSync(fd);
  }
  for (let k = 0; k < 1200 && !exited; k++) {
    const m = /^ready (\d+) (\d+) ([0-9a-f]+)$/.exec(completeLines(join(dir, "out"))[0] ?? "");
    if (m) return { pid: Number(m[1]), readyHash: m[3], dir };
    await sleep(100);
  }
  const said = readFileSync(join(dir, "out"), "utf8").slice(0, 300).trim();
  killMarked(dir);
  throw new Error(`the target in ${dir} did not start${exited ? " (it exited)" : ""}: ${said}`);
}

/**
 * Sends `command` through the target's fifo and resolves to the next line it prints, or to a line
 * in parentheses that says why there is none. The fifo is opened without blocking: the open
 * succeeds only while the target waits in its own open for a command, and is tried again until
 * then (20 s at most).
 */
export async function askFifo(
  t: FifoTarget,
  command: string,
  timeoutMs = 120_000,
): Promise<string> {
  const out = join(t.dir, "out");
  const before = completeLines(out).length;
  let fd: number | undefined;
  for (let k = 0; fd === undefined; k++) {
    try {
      fd = openSync(join(t.dir, "cmd"), constants.O_WRONLY | constants.O_NONBLOCK);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code !== "ENXIO" || k >= 400) return `(the fifo was not read: ${code ?? String(err)})`;
      await sleep(50);
    }
  }
  try {
    writeSync(fd, `${command}\n`);
  } finally {
    closeSync(fd);
  }
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    const line = completeLines(out)[before];
    if (line !== undefined) return line;
    await sleep(50);
  }
  return `(no answer in ${Math.round(timeoutMs / 1000)} s)`;
}

/**
 * Ends every target that still lives and is one of this run's (its command line names `marker`):
 * "exit" through its fifo, then SIGKILL after 5 s.
 */
export async function endFifoTargets(
  targets: readonly FifoTarget[],
  marker: string,
): Promise<void> {
  const live = targets.filter((t) => pidState(t.pid) === "alive" && cmdlineHas(t.pid, marker));
  await Promise.all(live.map((t) => askFifo(t, "exit", 1)));
  const until = performance.now() + 5000;
  while (live.some((t) => pidState(t.pid) === "alive") && performance.now() < until) {
    await sleep(50);
  }
  for (const t of live) {
    if (pidState(t.pid) !== "alive" || !cmdlineHas(t.pid, marker)) continue;
    try {
      process.kill(t.pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}
