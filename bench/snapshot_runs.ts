// What bench/integrity.ts and bench/criu_restore.ts share: each takes snapshots of its targets with
// the library's `snapshot()` and restores them with `restoreSnapshot()` from its own process, on
// real targets (tests/gpu/target.cu in fifo mode, bench/fifo_targets.ts) on the machine's driver
// or, with --simulate, on processes of a SimulatedMachine (@ckpt/cuda/mock), checks after each
// restore that every target runs with the memory hash it started with, and writes a report
// (bench/report.ts). Here: the numbers every such run is given, the machine opened and closed,
// the targets started and checked on either machine, a run's record of its check, and the parts of
// the report that say the same in both. Runs under Deno and Bun alike.

import { rmSync } from "node:fs";
import { join, resolve } from "node:path";

import { CudaProcess } from "../mod.ts";
import { type Machine, type MachineOptions, type NativeMachine, openMachine } from "../driver.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import {
  askFifo,
  childEnv,
  type FifoTarget,
  scratchFolder,
  startFifoTargets,
} from "./fifo_targets.ts";
import { integers } from "./harness.ts";
import { type Environment, environment, median, type Report } from "./report.ts";

/** The options every such run takes, as node:util's `parseArgs` gives them. */
export interface RunOptions {
  count: string;
  mib: string;
  rounds: string;
  "budget-s": string;
  "timeout-s": string;
}

/**
 * The `parseArgs` options every such run takes: its targets (`--target`, `--libcuda`,
 * `--simulate`), where it works and reports (`--work`, `--out`) and {@link RunOptions}, with the
 * run's own defaults for `--work`, `--count` and `--mib`.
 */
export function runOptions(defaults: { work: string; count: string; mib: string }): {
  target: Given;
  libcuda: Given;
  out: Given;
  work: Defaulted;
  count: Defaulted;
  mib: Defaulted;
  rounds: Defaulted;
  "budget-s": Defaulted;
  "timeout-s": Defaulted;
  simulate: { type: "boolean"; default: boolean };
} {
  return {
    target: { type: "string" },
    libcuda: { type: "string" },
    out: { type: "string" },
    work: { type: "string", default: defaults.work },
    count: { type: "string", default: defaults.count },
    mib: { type: "string", default: defaults.mib },
    rounds: { type: "string", default: "2" },
    "budget-s": { type: "string", default: "420" },
    "timeout-s": { type: "string", default: "300" },
    simulate: { type: "boolean", default: false },
  };
}

/** A string option with no default, and one with. */
type Given = { type: "string" };
type Defaulted = { type: "string"; default: string };

/**
 * A run begun now: its date, the ms since, its work folder (`--work`, absolute) with its scratch
 * folder in it, and the environment its child programs get.
 */
export function runStart(workDir: string): {
  started: Date;
  elapsedMs: () => number;
  work: string;
  scratch: string;
  env: Record<string, string>;
} {
  const started = new Date();
  const t0 = performance.now();
  const work = resolve(workDir);
  return {
    started,
    elapsedMs: () => performance.now() - t0,
    work,
    scratch: scratchFolder(work),
    env: childEnv(),
  };
}

/** --count, --mib and --rounds (each at least 1), --budget-s and --timeout-s (as ms). */
export function runNumbers(values: RunOptions): {
  count: number;
  mib: number;
  rounds: number;
  budgetS: number;
  timeoutMs: number;
} {
  const one = (name: keyof RunOptions) => integers(values[name], `--${name}`)[0];
  const count = one("count");
  const mib = one("mib");
  const rounds = one("rounds");
  const budgetS = one("budget-s");
  const timeoutMs = one("timeout-s") * 1000;
  if (count < 1 || mib < 1 || rounds < 1) {
    throw new RangeError("--count, --mib, --rounds: at least 1");
  }
  return { count, mib, rounds, budgetS, timeoutMs };
}

/** This machine (its driver, host and engine); where it cannot be opened, `scratch` is removed. */
export async function openNative(options: MachineOptions, scratch: string): Promise<NativeMachine> {
  return await openMachine(options).catch((err) => {
    rmSync(scratch, { recursive: true, force: true });
    throw err;
  });
}

/** The driver's version where the machine is this one (undefined on the simulator); both closed. */
export async function closeMachines(
  native: NativeMachine | undefined,
  simulated: SimulatedMachine | undefined,
): Promise<number | undefined> {
  const driverVersion = native
    ? await native.driver.driverVersion().then((v) => v.code === 0 ? v.value : undefined)
    : undefined;
  await native?.close();
  await simulated?.[Symbol.asyncDispose]();
  return driverVersion;
}

/** A target of a run: a real one in fifo mode, or a process of the simulated machine. */
export interface Target {
  pid: number;
  /** What the check compares after a restore. */
  readyHash: string;
  fifo?: FifoTarget;
}

/** What a target was found to be after a restore. */
export interface Check {
  pid: number;
  state: string;
  hash: string;
  intact: boolean;
}

/** How a run's targets are started and checked, on one kind of machine. */
export interface Targets {
  /** `count` targets of `mib` MiB each, named after `label`, each ready with its hash. */
  start(count: number, mib: number, label: string): Promise<Target[]>;
  /** Each target's state and, where it runs, its hash now, against the one it started with. */
  check(targets: readonly Target[]): Promise<Check[]>;
}

/**
 * Real targets: `program` (target.cu, or a stand-in) in fifo mode in `scratch` with `env`; their
 * state asked of `machine`'s driver, their hash of the target itself.
 */
export function fifoTargets(
  program: string,
  scratch: string,
  env: Record<string, string>,
  machine: Machine,
): Targets {
  return {
    async start(n, size, label) {
      const made = await startFifoTargets(program, n, size, join(scratch, `t-${label}`), env);
      return made.map((fifo) => ({ pid: fifo.pid, readyHash: fifo.readyHash, fifo }));
    },
    async check(targets) {
      const checks: Check[] = [];
      for (const t of targets) {
        const proc = new CudaProcess(t.pid, { machine });
        const state = await proc.state().catch((e) => `(${(e as Error).message.slice(0, 200)})`);
        await proc.close();
        const hash = state === "running"
          ? await askFifo(t.fifo!, "hash")
          : "(not asked: not running)";
        checks.push({ pid: t.pid, state, hash, intact: hash === `hash ${t.readyHash}` });
      }
      return checks;
    },
  };
}

/**
 * Simulated targets: processes of `simulated`, each with a few bytes of its own written into its
 * memory; the hash is the memory's chunked SHA-256.
 */
export function simulatedTargets(simulated: SimulatedMachine): Targets {
  return {
    async start(n, size, label) {
      const targets: Target[] = [];
      for (let i = 0; i < n; i++) {
        const p = simulated.spawn({
          memoryMiB: size,
          command: `target fifo ${size} ${label}-${i}`,
        });
        await p.write(4096 * i, new TextEncoder().encode(`${label} target ${i}`));
        targets.push({ pid: p.pid, readyHash: await p.memoryChunkedSha256() });
      }
      return targets;
    },
    async check(targets) {
      return await Promise.all(targets.map(async (t) => {
        const p = simulated.process(t.pid);
        const state = p?.state ?? "(none)";
        const hash = p && state === "running"
          ? `hash ${await p.memoryChunkedSha256()}`
          : "(not asked: not running)";
        return { pid: t.pid, state, hash, intact: hash === `hash ${t.readyHash}` };
      }));
    },
  };
}

/** An error for a run's record: its message in one line, 1000 characters at most. */
export function oneLine(error: unknown): string {
  return (error as Error).message.replace(/\s+/g, " ").slice(0, 1000);
}

/** Whether all `count` targets came back running and intact. */
export function allBack(checks: readonly Check[], count: number): boolean {
  return checks.length === count && checks.every((c) => c.state === "running" && c.intact);
}

/** A run's line's part about its targets: how many came back intact; unless `ok`, what each was. */
export function backLine(checks: readonly Check[], count: number, ok: boolean): string {
  return `; ${checks.filter((c) => c.state === "running" && c.intact).length}/${count} back ` +
    `running and intact${
      ok ? "" : `: ${checks.map((c) => `${c.pid} ${c.state} ${c.hash}`).join("; ")}`
    }`;
}

/**
 * The runs of one side that came back intact, and the median of a figure over them (NaN where
 * none has it).
 */
export function bySide<S, R extends { side: S; ok: boolean }>(measured: readonly R[]): {
  okRuns: (side: S) => R[];
  med: (side: S, pick: (r: R) => number | undefined) => number;
} {
  const okRuns = (side: S) => measured.filter((r) => r.side === side && r.ok);
  const med = (side: S, pick: (r: R) => number | undefined) =>
    median(okRuns(side).map(pick).filter((x): x is number => Number.isFinite(x)));
  return { okRuns, med };
}

/** The goal of every such benchmark: every target of every measured run back intact. */
export function everyTargetBack(measured: readonly { ok: boolean }[]): Report["goals"][number] {
  const intact = measured.filter((r) => r.ok).length;
  return {
    goal: "every target of every run back, running, its memory intact (both sides)",
    value: measured.length ? intact / measured.length : null,
    met: measured.length ? intact === measured.length : null,
    note: `${intact} of ${measured.length} runs`,
  };
}

/** The report's environment: this machine's driver (`fake`: the fake libcuda), or the simulator. */
export function runEnvironment(run: {
  sim: boolean;
  fake: boolean;
  native: NativeMachine | undefined;
  driverVersion: number | undefined;
  date: Date;
}): Environment {
  return environment({
    fake: run.fake,
    libcuda: run.sim ? "(none: the simulated machine)" : run.native?.driver.libraryPath ?? "?",
    driverVersion: run.driverVersion,
    date: run.date,
    ...(run.sim ? { noGpu: "the simulated machine of @ckpt/cuda/mock" } : {}),
  });
}
