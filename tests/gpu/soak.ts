/**
 * The reliability soak on a real GPU, one step per run (tests/gpu/soak.sh runs each under
 * `timeout` and keeps the log):
 *
 *   deno run -A tests/gpu/soak.ts <target binary> <step>      (or: bun tests/gpu/soak.ts ...)
 *
 * Steps:
 * - `cycles [N]`: one 1 GiB target through N (200) suspend/resume cycles; its memory hash checked
 *   every 10 cycles and at the end; this controller's RSS sampled every 10 cycles and required to
 *   stay steady (the last sample at most 20% + 32 MiB above the first, taken after 10 cycles of
 *   warm-up).
 * - `many [N]`: four 1 GiB targets through N (50) cycles at once (`runGroup` suspend / resume,
 *   all or nothing), hashes every 10 cycles, RSS as above.
 * - `oom`: a 1 GiB target checkpointed, its GPU then filled (`target fill`) so that its restore
 *   does not fit: resume is refused before the driver (GpuRoomError) and says how to retry, the
 *   target stays checkpointed; once the filler exits, resume succeeds and the memory is intact.
 *   Then the driver's own answer (`checkRoom: false`): OUT_OF_MEMORY, and once the GPU is free
 *   every restore refused with OPERATING_SYSTEM while the driver still says checkpointed.
 * - `killed`: a target killed while checkpointed, one killed while locked, and one killed while
 *   a lock waits on its kernel: every later call answers at once with a clear error, no hang.
 * - `interrupt`: three 4 GiB targets; our command line (`cli/main.ts` on this runtime, or the
 *   binary in $SOAK_CLI) toggles them, and gets SIGINT 1.2 s in, during the group's checkpoints:
 *   it ends by SIGINT (130 to a shell), every target running again with its memory intact, and
 *   it says so.
 *
 * Each step prints `PASS <step>: ...` or `FAIL <step>: ...` lines, then one JSON line, and
 * exits 1 on any failure.
 */

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import process from "node:process";
import { CudaError, CudaProcess, GpuRoomError, runGroup } from "../../mod.ts";
import { CUresult, openMachine } from "../../driver.ts";
import { runInterrupted } from "../support/interrupted.ts";
import { startTarget, type TargetProcess } from "./native_env.ts";

const [targetPath, step, count] = process.argv.slice(2);
if (!targetPath || !step) {
  console.error("usage: soak.ts <target binary> cycles|many|oom|killed|interrupt [count]");
  process.exit(2);
}
const MIB = 1024 * 1024;
const machine = await openMachine();
const driver = machine.driver;
const started: TargetProcess[] = [];
const report: Record<string, unknown> = { step, runtime: driver.kind };
let failures = 0;

function result(ok: boolean, what: string): boolean {
  console.log(`${ok ? "PASS" : "FAIL"} ${step}: ${what}`);
  if (!ok) failures++;
  return ok;
}

async function target(mode: "cuda" | "nocuda" | "fill", mib: number): Promise<TargetProcess> {
  const t = await startTarget(targetPath, mode, mib);
  started.push(t);
  return t;
}

async function intact(t: TargetProcess): Promise<boolean> {
  return (await t.ask("hash")) === `hash ${t.readyHash}`;
}

/** This controller's resident memory in MiB. */
function rssMiB(): number {
  return Math.round(process.memoryUsage().rss / MIB);
}

/** Judges RSS samples (the first after warm-up): steady if the last is within 20% + 32 MiB. */
function steady(samples: number[]): void {
  if (samples.length === 0) {
    // A shortened run (fewer than 10 cycles) takes no sample: there is nothing to judge.
    console.log(`SKIP ${step}: controller RSS not judged: no sample in so few cycles`);
    return;
  }
  const [first, last, max] = [samples[0], samples.at(-1)!, Math.max(...samples)];
  const limit = Math.round(first * 1.2 + 32);
  report.rssMiB = { first, last, max, limit, samples };
  result(
    last <= limit,
    `controller RSS first ${first} MiB, last ${last} MiB, max ${max} MiB (steady: last <= 120% of first + 32 MiB = ${limit} MiB)`,
  );
}

function ms(t0: number): number {
  return Math.round(performance.now() - t0);
}

async function cycles(n: number): Promise<void> {
  const t = await target("cuda", 1024);
  const proc = new CudaProcess(t.pid, { machine });
  const suspendMs: number[] = [], resumeMs: number[] = [];
  const samples: number[] = [];
  let hashes = 0, bad = 0;
  for (let i = 1; i <= n; i++) {
    let t0 = performance.now();
    await proc.suspend();
    suspendMs.push(ms(t0));
    t0 = performance.now();
    await proc.resume();
    resumeMs.push(ms(t0));
    if (i % 10 === 0) {
      hashes++;
      if (!await intact(t)) bad++;
      samples.push(rssMiB());
    }
  }
  const sorted = (a: number[]) => [...a].sort((x, y) => x - y);
  const median = (a: number[]) => sorted(a)[Math.floor(a.length / 2)];
  report.suspendMs = {
    min: sorted(suspendMs)[0],
    median: median(suspendMs),
    max: Math.max(...suspendMs),
  };
  report.resumeMs = {
    min: sorted(resumeMs)[0],
    median: median(resumeMs),
    max: Math.max(...resumeMs),
  };
  result(bad === 0, `${n} cycles of 1 GiB, memory hash intact ${hashes - bad} of ${hashes} checks`);
  result((await proc.state()) === "running", "running at the end");
  console.log(
    `suspend ms ${JSON.stringify(report.suspendMs)}, resume ms ${JSON.stringify(report.resumeMs)}`,
  );
  steady(samples);
}

async function many(n: number): Promise<void> {
  const targets = await Promise.all(Array.from({ length: 4 }, () => target("cuda", 1024)));
  const pids = targets.map((t) => t.pid);
  const samples: number[] = [];
  let bad = 0, groupsFailed = 0;
  const times: number[] = [];
  for (let i = 1; i <= n; i++) {
    const t0 = performance.now();
    const s = await runGroup("suspend", pids, { machine, allOrNothing: true });
    const r = await runGroup("resume", pids, { machine, allOrNothing: true });
    times.push(ms(t0));
    if (!s.ok || !r.ok) {
      groupsFailed++;
      console.log(
        `cycle ${i}: ${JSON.stringify([s, r].map((g) => g.processes.map((p) => p.status)))}`,
      );
    }
    if (i % 10 === 0) {
      for (const t of targets) if (!await intact(t)) bad++;
      samples.push(rssMiB());
    }
  }
  report.cycleMs = { min: Math.min(...times), max: Math.max(...times) };
  result(groupsFailed === 0, `${n} cycles of 4 x 1 GiB at once, ${groupsFailed} groups failed`);
  result(bad === 0, `memory intact at every tenth cycle (${bad} bad hashes)`);
  steady(samples);
}

/** Free memory of each GPU, in MiB, as nvidia-smi says. */
function freeMiB(): number[] {
  return execFileSync("nvidia-smi", ["--query-gpu=memory.free", "--format=csv,noheader,nounits"], {
    encoding: "utf8",
  }).trim().split("\n").map(Number);
}

async function oom(): Promise<void> {
  // The targets are on GPU 0 (the first the driver sees); the filler too (CUDA_VISIBLE_DEVICES=0).
  // Leave about 700 MiB: the filler's own CUDA context takes about 520 MiB of what it is given
  // room for, and a target needs 1 GiB and a context.
  const fill = async () => {
    const filler = await startTarget(targetPath, "fill", Math.max(0, freeMiB()[0] - 1200), 0);
    started.push(filler);
    return filler;
  };
  const message = (err: unknown) => err instanceof Error ? err.message : String(err);

  // 1. This package checkpointed it, so it knows what the restore needs: refused first.
  const t = await target("cuda", 1024);
  const proc = new CudaProcess(t.pid, { machine });
  await proc.suspend();
  report.freeBeforeFillMiB = freeMiB()[0];
  let filler = await fill();
  report.freeAfterFillMiB = freeMiB()[0];
  let error: unknown;
  await proc.resume().catch((err) => error = err);
  report.refused = message(error);
  console.log(`resume on a full GPU said: ${message(error)}`);
  result(
    error instanceof GpuRoomError && error.code === "NO_ROOM",
    "a resume that does not fit is refused before the driver (GpuRoomError, NO_ROOM)",
  );
  result(/Nothing was asked of the driver/.test(message(error)), "and says so, and how to retry");
  result((await proc.state()) === "checkpointed", "the target stays checkpointed");
  await filler.exit();
  let retryError: unknown;
  await proc.resume().catch((err) => retryError = err);
  if (
    !result(
      retryError === undefined,
      `once the filler exits, resume succeeds ${message(retryError ?? "")}`,
    )
  ) {
    return;
  }
  result(await intact(t), "memory intact after the refused resume and the retry");

  // 2. The driver's own answer (checkRoom: false), as measured: out of memory, then every later
  // restore refused with OPERATING_SYSTEM while the driver still says checkpointed.
  const u = await target("cuda", 1024);
  const lost = new CudaProcess(u.pid, { machine });
  await lost.suspend();
  filler = await fill();
  let driverError: unknown;
  await lost.resume({ checkRoom: false }).catch((err) => driverError = err);
  console.log(`the driver's own restore on a full GPU said: ${message(driverError)}`);
  result(
    driverError instanceof CudaError &&
      driverError.code === CUresult.CUDA_ERROR_OUT_OF_MEMORY,
    "with checkRoom: false the driver itself runs out of memory (OUT_OF_MEMORY)",
  );
  result(
    /its GPU state cannot be brought back/.test(message(driverError)),
    "and the error says the process cannot be restored again",
  );
  await filler.exit();
  let afterError: unknown;
  await lost.resume().catch((err) => afterError = err);
  console.log(`a resume once the GPU is free said: ${message(afterError)}`);
  result(
    afterError instanceof CudaError && afterError.code === CUresult.CUDA_ERROR_OPERATING_SYSTEM &&
      /yet the driver refuses to restore it/.test(afterError.message),
    "once the GPU is free the driver refuses the restore (OPERATING_SYSTEM), and the error says why",
  );
  result((await lost.state()) === "checkpointed", "the driver still reports it checkpointed");
  await u.exit();
  result(aliveOrGone(u.pid).startsWith("gone"), "SIGKILL ends it");
}

/** "alive" or "gone" (a zombie counts as gone), for the log. */
function aliveOrGone(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return / Z /.test(stat) ? "gone (a zombie)" : `alive (${stat.split(" ")[2]})`;
  } catch {
    return "gone";
  }
}

/** Whether `run` fails with a driver error within `limitMs`; its message. */
async function failsFast(run: () => Promise<unknown>, limitMs = 5000): Promise<[boolean, string]> {
  const t0 = performance.now();
  const timer = new Promise<"hang">((resolve) => setTimeout(() => resolve("hang"), limitMs));
  const outcome = await Promise.race([
    run().then(
      () => "resolved",
      (err) => err instanceof CudaError ? err.message : `not a CudaError: ${err}`,
    ),
    timer,
  ]);
  const fast = outcome !== "hang" && outcome !== "resolved" && !outcome.startsWith("not a");
  return [fast, `${outcome} (${ms(t0)} ms)`];
}

async function killed(): Promise<void> {
  // Killed while checkpointed.
  const a = await target("cuda", 256);
  const pa = new CudaProcess(a.pid, { machine });
  await pa.suspend();
  await a.exit();
  for (
    const [what, run] of [["getState", () => pa.state()], ["resume", () => pa.resume()]] as const
  ) {
    const [ok, said] = await failsFast(run);
    result(ok, `killed while checkpointed: ${what} fails at once: ${said}`);
  }
  // Killed while locked.
  const b = await target("cuda", 256);
  const pb = new CudaProcess(b.pid, { machine });
  await pb.lock();
  await b.exit();
  for (
    const [what, run] of [["unlock", () => pb.unlock()], [
      "checkpoint",
      () => pb.checkpoint(),
    ]] as const
  ) {
    const [ok, said] = await failsFast(run);
    result(ok, `killed while locked: ${what} fails at once: ${said}`);
  }
  // Killed while a lock waits on its 5 s kernel.
  const c = await target("cuda", 256);
  const pc = new CudaProcess(c.pid, { machine });
  await c.launchKernel(5000);
  const t0 = performance.now();
  const locking = pc.lock({ timeoutMs: 0 });
  await new Promise((resolve) => setTimeout(resolve, 500));
  await c.exit();
  const [ok, said] = await failsFast(() => locking, 10_000);
  result(
    ok && ms(t0) < 4500,
    `killed while a lock waits on it: the lock ends before the kernel would: ${said}`,
  );
}

/** Runs our command line; sends SIGINT `afterMs` in. */
function interruptCli(args: string[], afterMs: number) {
  const cli = process.env.SOAK_CLI;
  const deno = (globalThis as { Deno?: unknown }).Deno !== undefined;
  const [file, argv] = cli
    ? [cli, args]
    : [process.execPath, deno ? ["run", "-A", "cli/main.ts", ...args] : ["cli/main.ts", ...args]];
  const env = { ...process.env } as Record<string, string>;
  return runInterrupted(file, argv, env, async (send, running) => {
    const t0 = performance.now();
    while (running() && performance.now() - t0 < afterMs) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    send();
  }, 60_000);
}

async function interrupt(): Promise<void> {
  const targets = await Promise.all(Array.from({ length: 3 }, () => target("cuda", 4096)));
  const pids = targets.map((t) => t.pid);
  // Once without an interrupt: it loads (and, on Deno, caches) the modules a group needs, so that
  // the interrupted run is in its checkpoints 1.2 s in, not still starting.
  const query = await interruptCli(["--get-state", "--pid", pids.join(",")], 60_000);
  result(
    query.code === 0 && pids.every((pid) => query.out.includes(`${pid} running`)),
    `the command line reads the three states: ${JSON.stringify(query.out)}`,
  );
  const t0 = performance.now();
  const r = await interruptCli(["--toggle", "--pid", pids.join(",")], 1200);
  report.cli = { ...r, ms: ms(t0) };
  console.log(
    `cuda-checkpoint exited ${r.code ?? r.signal} after ${
      ms(t0)
    } ms\n--- stdout\n${r.out}--- stderr\n${r.err}---`,
  );
  result(r.signal === "SIGINT", "SIGINT during the group suspend: ended by it, after the rollback");
  result(
    pids.every((pid) =>
      new RegExp(`^${pid} (rolled-back|stopped|not-started) running$`, "m").test(r.out)
    ),
    "each process's line says it was brought back (or not started)",
  );
  result(
    /interrupted: every process is as it was before/.test(r.err),
    "the closing line says nothing was left changed",
  );
  const states = await Promise.all(pids.map((pid) => new CudaProcess(pid, { machine }).state()));
  result(states.every((s) => s === "running"), `every target running again (${states.join(", ")})`);
  let good = 0;
  for (const t of targets) if (await intact(t)) good++;
  result(good === targets.length, `memory intact ${good} of ${targets.length}`);
}

try {
  switch (step) {
    case "cycles":
      await cycles(Number(count ?? 200));
      break;
    case "many":
      await many(Number(count ?? 50));
      break;
    case "oom":
      await oom();
      break;
    case "killed":
      await killed();
      break;
    case "interrupt":
      await interrupt();
      break;
    default:
      console.error(`unknown step ${JSON.stringify(step)}`);
      process.exit(2);
  }
} catch (err) {
  result(false, `unexpected error: ${err instanceof Error ? err.stack ?? err.message : err}`);
} finally {
  for (const t of started) await t.exit().catch(() => {});
  await machine.close();
}
console.log(JSON.stringify({ ok: failures === 0, ...report }));
process.exit(failures === 0 ? 0 : 1);
