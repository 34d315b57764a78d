// A benchmark run as a child of the runtime that runs this process (Deno: `deno run -A SCRIPT`;
// Bun: `bun SCRIPT`), without blocking, killed at a time limit: how the benchmarks' tests
// (tests/bench_test.ts, tests/criu_restore_bench_test.ts) run them, so that the test runner's own
// timeout can act and a slow machine shows the benchmark's output rather than a cut test.

import { spawn } from "node:child_process";
import process from "node:process";

import { detectRuntime } from "../ffi/runtime.ts";

/** What a script's run did. */
export interface ScriptRun {
  status: number | null;
  /** Its stdout and stderr, interleaved; says so where it was killed at the limit. */
  log: string;
}

/** Runs `script` with `args` under this runtime; SIGKILL after `limitMs`. */
export function runScript(
  script: string,
  args: readonly string[],
  limitMs: number,
): Promise<ScriptRun> {
  const argv = [...(detectRuntime() === "deno" ? ["run", "-A"] : []), script, ...args];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    child.stdout!.on("data", (d) => log += d);
    child.stderr!.on("data", (d) => log += d);
    const timer = setTimeout(() => {
      log += `\n(killed after ${limitMs} ms)`;
      child.kill("SIGKILL");
    }, limitMs);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, log });
    });
  });
}
