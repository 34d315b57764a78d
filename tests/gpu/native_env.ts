/**
 * The conformance environment for the real driver: target processes are the project's own CUDA
 * program (tests/gpu/target.cu, built with nvcc on the GPU machine), started and talked to through
 * node:child_process, which Deno and Bun both provide.
 */

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { createInterface } from "node:readline";
import type { Machine } from "../../driver.ts";
import type { ConformanceEnv, Target } from "../conformance/runner.ts";

/** A running target process and a way to talk to it. */
export interface TargetProcess extends Target {
  /** The hash of its GPU memory it printed when ready. */
  readonly readyHash: string;
  /** Sends a command line and resolves to the next line it prints. */
  ask(command: string, timeoutMs?: number): Promise<string>;
}

/** Starts `targetPath` in `mode` and waits until it says it is ready. */
export async function startTarget(
  targetPath: string,
  mode: "cuda" | "nocuda" | "fill",
  memoryMiB = 16,
  gpu?: number,
): Promise<TargetProcess> {
  const env = gpu === undefined ? undefined : { ...readEnv(), CUDA_VISIBLE_DEVICES: String(gpu) };
  const child: ChildProcess = spawn(targetPath, [mode, String(memoryMiB)], {
    stdio: ["pipe", "pipe", "inherit"],
    env,
  });
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    const w = waiting.shift();
    if (w) w(line);
    else lines.push(line);
  });
  let exited = false;
  const exitPromise = new Promise<void>((resolve) =>
    child.on("exit", () => {
      exited = true;
      resolve();
    })
  );
  const nextLine = (timeoutMs: number) =>
    new Promise<string>((resolve, reject) => {
      const queued = lines.shift();
      if (queued !== undefined) return resolve(queued);
      const timer = setTimeout(
        () => reject(new Error(`target ${child.pid} said nothing for ${timeoutMs} ms`)),
        timeoutMs,
      );
      waiting.push((line) => {
        clearTimeout(timer);
        resolve(line);
      });
    });
  const ready = await nextLine(60_000);
  const m = /^ready (\d+) (\d+) ([0-9a-f]+)$/.exec(ready);
  if (!m) {
    throw new Error(`target said ${JSON.stringify(ready)} instead of "ready <pid> <tid> <hash>"`);
  }
  const pid = Number(m[1]);
  const target: TargetProcess = {
    pid,
    threadId: Number(m[2]),
    readyHash: m[3],
    threadIds: () =>
      Promise.resolve(
        existsSync(`/proc/${pid}/task`) ? readdirSync(`/proc/${pid}/task`).map(Number) : [],
      ),
    async ask(command: string, timeoutMs = 120_000) {
      child.stdin!.write(command + "\n");
      return await nextLine(timeoutMs);
    },
    async memoryHash() {
      return (await target.ask("hash")).replace(/^hash /, "");
    },
    async launchKernel(ms: number) {
      child.stdin!.write(`kernel ${ms}\n`);
      const said = await nextLine(10_000);
      if (said !== "launched") throw new Error(`target said ${JSON.stringify(said)} to "kernel"`);
    },
    async exit() {
      if (!exited) child.kill("SIGKILL");
      await exitPromise;
    },
  };
  return target;
}

function readEnv(): Record<string, string> {
  const p = (globalThis as { process?: { env: Record<string, string> } }).process;
  return p ? { ...p.env } : {};
}

function nvidiaSmi(query: string): string[] {
  return execFileSync("nvidia-smi", [`--query-gpu=${query}`, "--format=csv,noheader,nounits"], {
    encoding: "utf8",
  }).trim().split("\n").map((s) => s.trim());
}

/** The real machine (`openMachine()`'s) as a conformance environment. */
export function nativeEnv(machine: Machine, targetPath: string): ConformanceEnv {
  return {
    name: machine.driver.kind,
    machine,
    spawn: ({ cuda, memoryMiB }) => startTarget(targetPath, cuda ? "cuda" : "nocuda", memoryMiB),
    missingPid() {
      for (let pid = 4_000_000;; pid--) {
        if (!existsSync(`/proc/${pid}`)) return Promise.resolve(pid);
      }
    },
    gpuUuids: () => Promise.resolve(nvidiaSmi("uuid")),
    async fillGpu(leaveMiB: number) {
      const free = nvidiaSmi("memory.free").map(Number);
      const fillers = await Promise.all(
        free.map((mib, gpu) => startTarget(targetPath, "fill", Math.max(0, mib - leaveMiB), gpu)),
      );
      return async () => {
        for (const f of fillers) await f.exit();
      };
    },
    sleep: (ms: number) => new Promise((r) => setTimeout(r, ms)),
    now: () => performance.now(),
  };
}

/**
 * A list of checks for a GPU script: `check(what, cond)` prints `FAILED: what` for a condition that
 * does not hold, and `ok()` says whether every one held.
 */
export function checks(): { check(what: string, cond: boolean): void; ok(): boolean } {
  let ok = true;
  return {
    check(what, cond) {
      if (!cond) {
        ok = false;
        console.log(`FAILED: ${what}`);
      }
    },
    ok: () => ok,
  };
}
