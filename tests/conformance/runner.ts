/**
 * Runs the conformance scenarios against any driver, given an environment that can start target
 * processes for it: the simulator (unit tests) or real CUDA processes (tests/gpu/).
 */

import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_SUCCESS,
  resultName,
} from "../../core/driver.ts";
import type { CheckpointDriver, GpuPair } from "../../core/driver.ts";
import type { Machine } from "../../core/machine.ts";
import { parseGpuUuid } from "../../core/options.ts";
import { CudaError, RefusedError } from "../../core/errors.ts";
import { CudaProcess } from "../../api/cuda_process.ts";
import { type ProcessState, stateName, stateNumber } from "../../core/states.ts";
import type { Call, Scenario } from "./scenarios.ts";

/** A target process started for one scenario. */
export interface Target {
  /** Its pid. */
  readonly pid: number;
  /** The id of one of its threads other than the main one. */
  readonly threadId: number;
  /** All its thread ids now. */
  threadIds(): Promise<number[]>;
  /** Launches a kernel of `ms` and resolves once it is launched (not finished). */
  launchKernel(ms: number): Promise<void>;
  /** A hash of its GPU memory (a CUDA call in the target: it blocks while not running). */
  memoryHash(): Promise<string>;
  /** Ends the process. */
  exit(): Promise<void>;
}

/** What the runner needs from a machine, simulated or real. */
export interface ConformanceEnv {
  /** For reports: "simulated", "native (Deno)", … */
  readonly name: string;
  /** The machine whose driver is under test. */
  readonly machine: Machine;
  /** Starts a target: a CUDA process with `memoryMiB` of GPU memory, or one that never used CUDA. */
  spawn(options: { cuda: boolean; memoryMiB: number }): Promise<Target>;
  /** A pid that no process has. */
  missingPid(): Promise<number>;
  /** The UUIDs of every GPU the driver sees. */
  gpuUuids(): Promise<string[]>;
  /** Takes all but `leaveMiB` of every GPU's free memory; resolves to a function that gives it back. */
  fillGpu(leaveMiB: number): Promise<() => Promise<void>>;
  /** Waits `ms` on the environment's clock. */
  sleep(ms: number): Promise<void>;
  /** The environment's clock, in ms. */
  now(): number;
}

/** What one scenario did on one driver. */
export interface Outcome {
  /** The scenario's name. */
  scenario: string;
  /** Where the expectation comes from. */
  source: Scenario["source"];
  /** The CUresult the call gave. */
  code: number;
  /** Its name. */
  codeName: string;
  /** The state after the call (`null`: no CUDA process there). */
  state: ProcessState | null;
  /** How long the call took, in ms. */
  ms: number;
  /** With `during`: the code the other call gave, and whether the call ended after it. */
  during?: { code: number; codeName: string; endedAfterIt: boolean };
  /** What was expected and is not so; empty when the driver did what the table says. */
  problems: string[];
  /** Why the scenario was not run here (too few GPUs), if it was not. */
  skipped?: string;
}

const UNKNOWN_UUID = "GPU-0badc0de-0000-4000-8000-00000000dead";

/**
 * How the scenario's call is made: straight through the driver interface (`"driver"`, the
 * default), or through the public `CudaProcess` API (`"process"`), whose errors carry the code.
 */
export type Via = "driver" | "process";

/** Why a scenario cannot be expressed through `CudaProcess`, or `undefined` when it can. */
export function notThroughProcess(s: Scenario): string | undefined {
  if (s.call.op === "lock" && s.call.reservedByte !== undefined) {
    return "CudaProcess never sets the reserved bytes";
  }
  if (s.id === "zero" || s.id === "negative") {
    return "CudaProcess refuses pid 0 and negative pids before any driver call (validate_test.ts)";
  }
  if (s.call.op === "lock" && s.call.nullArgs) {
    return "CudaProcess always passes lock args (timeout 0 is its way to wait for ever)";
  }
  return undefined;
}

/** Runs one scenario and reports what happened. Never throws for a driver's answer. */
export async function runScenario(
  env: ConformanceEnv,
  s: Scenario,
  via: Via = "driver",
): Promise<Outcome> {
  const d = env.machine.driver;
  const problems: string[] = [];
  const skip = (skipped: string): Outcome => ({
    scenario: s.name,
    source: s.source,
    code: -1,
    codeName: "-",
    state: null,
    ms: 0,
    problems,
    skipped,
  });
  const inexpressible = via === "process" ? notThroughProcess(s) : undefined;
  if (inexpressible) return skip(inexpressible);
  if (s.minGpus !== undefined) {
    const have = (await env.gpuUuids()).length;
    if (have < s.minGpus) return skip(`needs ${s.minGpus} GPUs, this machine has ${have}`);
  }
  const target = s.target === "none"
    ? undefined
    : await env.spawn({ cuda: s.target === "cuda", memoryMiB: s.memoryMiB ?? 16 });
  let release: (() => Promise<void>) | undefined;
  try {
    const id = s.id === "thread"
      ? target!.threadId
      : s.id === "missing"
      ? await env.missingPid()
      : s.id === "zero"
      ? 0
      : s.id === "negative"
      ? -1
      : target!.pid;
    const hashBefore = s.expect.memoryIntact ? await target!.memoryHash() : undefined;
    for (const step of s.setup ?? []) {
      const { code } = await call(env, d, target!.pid, step);
      if (code !== CUDA_SUCCESS) problems.push(`setup ${step.op} gave ${resultName(code)}`);
    }
    if (s.fillGpuLeavingMiB !== undefined) release = await env.fillGpu(s.fillGpuLeavingMiB);
    if (s.kernelMs !== undefined) await target!.launchKernel(s.kernelMs);
    let other: Promise<{ code: number; end: number }> | undefined;
    if (s.during) {
      other = call(env, d, target!.pid, s.during.call).then(({ code }) => ({
        code,
        end: env.now(),
      }));
      if (s.during.afterMs > 0) await env.sleep(s.during.afterMs);
    }
    const start = env.now();
    const pending = via === "process" ? callProcess(env, id, s.call) : call(env, d, id, s.call);
    if (s.exitAfterMs !== undefined) {
      await Promise.race([pending, env.sleep(s.exitAfterMs)]);
      await target!.exit();
    }
    const { code, value } = await pending;
    const end = env.now();
    const ms = end - start;
    let during: Outcome["during"];
    if (other) {
      const o = await other;
      // A millisecond's slack: two calls released by the same event end "together".
      during = { code: o.code, codeName: resultName(o.code), endedAfterIt: end >= o.end - 1 };
    }
    const stateOf = target?.pid ?? id;
    const st = await d.getState(stateOf);
    const state = st.code === CUDA_SUCCESS ? stateName(st.value) ?? null : null;
    if (s.expect.eitherWins) {
      const codes = [code, during!.code].sort((a, b) => a - b);
      if (codes[0] !== CUDA_SUCCESS || codes[1] !== CUDA_ERROR_ILLEGAL_STATE) {
        problems.push(
          `the two calls gave ${resultName(during!.code)} and ${
            resultName(code)
          }, expected one CUDA_SUCCESS and one CUDA_ERROR_ILLEGAL_STATE`,
        );
      }
    } else {
      if (code !== s.expect.code) {
        problems.push(`code ${resultName(code)}, expected ${resultName(s.expect.code)}`);
      }
      if (s.expect.duringCode !== undefined && during!.code !== s.expect.duringCode) {
        problems.push(
          `the other call gave ${during!.codeName}, expected ${resultName(s.expect.duringCode)}`,
        );
      }
    }
    if (s.expect.returns !== undefined && code === CUDA_SUCCESS) {
      const returned = stateName(value) ?? `state ${value}`;
      if (returned !== s.expect.returns) {
        problems.push(`getState returned ${returned}, expected ${s.expect.returns}`);
      }
    }
    if (s.expect.ends !== undefined && during) {
      const after = s.expect.ends === "after-other";
      if (during.endedAfterIt !== after) {
        problems.push(
          `the call ended ${during.endedAfterIt ? "after" : "before"} the other call, expected ${
            after ? "after it (it waits)" : "before it (it does not wait)"
          }`,
        );
      }
    }
    if (state !== s.expect.state) {
      problems.push(`state ${state ?? "(none)"} after, expected ${s.expect.state ?? "(none)"}`);
    }
    if (s.expect.value === "thread-of-target" && code === CUDA_SUCCESS) {
      const threads = await target!.threadIds();
      if (!threads.includes(value)) {
        problems.push(`value ${value} is not a thread of process ${target!.pid} (${threads})`);
      }
    }
    if (hashBefore !== undefined && state === "locked") {
      const unlocked = await d.unlock(target!.pid);
      const hashAfter = unlocked === CUDA_SUCCESS ? await target!.memoryHash() : "(not unlocked)";
      if (hashAfter !== hashBefore) {
        problems.push(`GPU memory hash ${hashAfter} after, ${hashBefore} before`);
      }
    }
    if (s.expect.ms && (ms < s.expect.ms.min || ms > s.expect.ms.max)) {
      problems.push(`took ${ms.toFixed(1)} ms, expected ${s.expect.ms.min}-${s.expect.ms.max} ms`);
    }
    return {
      scenario: s.name,
      source: s.source,
      code,
      codeName: resultName(code),
      state,
      ms,
      during,
      problems,
    };
  } finally {
    await release?.();
    await target?.exit();
  }
}

async function call(
  env: ConformanceEnv,
  d: CheckpointDriver,
  pid: number,
  c: Call,
): Promise<{ code: number; value: number }> {
  switch (c.op) {
    case "getState":
      return await d.getState(pid);
    case "getRestoreThreadId":
      return await d.getRestoreThreadId(pid);
    case "lock": {
      let reserved: Uint8Array | undefined;
      if (c.reservedByte !== undefined) {
        reserved = new Uint8Array(60);
        reserved[0] = c.reservedByte;
      }
      const args = c.nullArgs ? null : { timeoutMs: c.timeoutMs ?? 0, reserved };
      return { code: await d.lock(pid, args), value: 0 };
    }
    case "checkpoint":
      return { code: await d.checkpoint(pid), value: 0 };
    case "unlock":
      return { code: await d.unlock(pid), value: 0 };
    case "restore": {
      const kind = c.pairs ?? "none";
      if (kind === "none") return { code: await d.restore(pid, null), value: 0 };
      const pairs: GpuPair[] = mappingFor(kind, await env.gpuUuids()).map(([from, to]) => ({
        oldUuid: parseGpuUuid(from),
        newUuid: parseGpuUuid(to),
      }));
      return { code: await d.restore(pid, { gpuPairs: pairs }), value: 0 };
    }
  }
}

/** Makes the call through `CudaProcess`; a `CudaError` gives its code, success gives 0. */
async function callProcess(
  env: ConformanceEnv,
  pid: number,
  c: Call,
): Promise<{ code: number; value: number }> {
  const proc = new CudaProcess(pid, { machine: env.machine });
  try {
    switch (c.op) {
      case "getState":
        return { code: 0, value: stateNumber(await proc.state()) };
      case "getRestoreThreadId":
        return { code: 0, value: await proc.restoreThreadId() };
      case "lock":
        await proc.lock({ timeoutMs: c.nullArgs ? 0 : c.timeoutMs ?? 0 });
        break;
      case "checkpoint":
        await proc.checkpoint();
        break;
      case "unlock":
        await proc.unlock();
        break;
      case "restore": {
        const kind = c.pairs ?? "none";
        const gpuMapping = kind === "none"
          ? undefined
          : new Map(mappingFor(kind, await env.gpuUuids()));
        await proc.restore({ gpuMapping });
        break;
      }
    }
    return { code: 0, value: 0 };
  } catch (err) {
    if (err instanceof CudaError) return { code: err.code, value: 0 };
    // A mapping the machine's GPUs rule out is refused before the driver is asked: the code the
    // driver gives such a mapping is what the scenario expects of it.
    if (err instanceof RefusedError && err.code === "MAPPING") {
      return { code: CUDA_ERROR_INVALID_VALUE, value: 0 };
    }
    throw err;
  }
}

/** The GPU mapping a restore scenario asks for, as [from, to] UUID pairs in call order. */
function mappingFor(
  kind: Exclude<NonNullable<Extract<Call, { op: "restore" }>["pairs"]>, "none">,
  uuids: string[],
): [string, string][] {
  const same = uuids.map((u): [string, string] => [u, u]);
  switch (kind) {
    case "empty":
      return [];
    case "same":
      return same;
    case "rotate":
      return uuids.map((u, i) => [u, uuids[(i + 1) % uuids.length]]);
    case "move-one":
      return [[uuids[0], uuids[1]]];
    case "two-onto-one":
      return uuids.map((u) => [u, uuids[1]]);
    case "unknown-old":
      // The process's own GPU is named by a UUID no GPU has.
      return [[UNKNOWN_UUID, uuids[0]], ...same.slice(1)];
    case "unknown-new":
      return [[uuids[0], UNKNOWN_UUID], ...same.slice(1)];
  }
}

/** The band in which a simulated time agrees with the real driver's: half to twice as long. */
export const TIME_BAND = { min: 0.5, max: 2 } as const;

/**
 * Below this many ms both times are "quick" and agree whatever their ratio: a 0.05 ms simulated
 * getState and a 0.3 ms real one are both instant next to anything a user waits for.
 */
export const QUICK_MS = 25;

/** Whether a simulated time agrees with the real driver's time for the same scenario. */
export function timesAgree(simulatedMs: number, nativeMs: number): boolean {
  if (simulatedMs < QUICK_MS && nativeMs < QUICK_MS) return true;
  const ratio = simulatedMs / nativeMs;
  return ratio >= TIME_BAND.min && ratio <= TIME_BAND.max;
}
