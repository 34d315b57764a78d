// Helpers for the example tests (tests/examples_*_test.ts): run an example as a user runs it, with
// the runtime of the test (`deno run -A` or `bun`), and wait for a line of a program that keeps
// running. Runs under Deno and Bun alike. Not a test file.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import process from "node:process";
import { DEFAULT_SEED, fillPattern } from "../examples/_kernels.ts";
import { ChunkedSha256 } from "../examples/_chunked_sha256.ts";

/** The path of an example. */
export function examplePath(file: string): string {
  return new URL(`../examples/${file}`, import.meta.url).pathname;
}

/** The command line that runs an example with this runtime. */
function command(file: string, args: readonly string[]): [string, string[]] {
  const path = examplePath(file);
  return [process.execPath, "Deno" in globalThis ? ["run", "-A", path, ...args] : [path, ...args]];
}

/** What an example run did. */
export interface ExampleRun {
  /** Its exit status (-1 when it was killed). */
  readonly code: number;
  /** Its stdout. */
  readonly out: string;
  /** Its stderr. */
  readonly err: string;
  /** Its stdout's lines. */
  readonly lines: readonly string[];
}

/**
 * Runs an example to its end with this runtime; `env` is added to this process's environment,
 * and a variable given as `undefined` is removed.
 */
export function runExample(
  file: string,
  args: readonly string[] = [],
  env: Record<string, string | undefined> = {},
  timeoutMs = 60_000,
): Promise<ExampleRun> {
  const [cmd, argv] = command(file, args);
  return new Promise((resolve) => {
    execFile(
      cmd,
      argv,
      { env: environment(env), timeout: timeoutMs, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
        const out = String(stdout);
        resolve({ code, out, err: String(stderr), lines: out.split("\n") });
      },
    );
  });
}

/** An example that keeps running (a server), with what it has printed so far. */
export interface RunningExample {
  readonly child: ChildProcess;
  /** Everything it printed so far (stdout and stderr). */
  output(): string;
  /** Resolves the first match of `pattern` in its output; rejects when it exits or time is up. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** Ends it (SIGTERM) and waits for it to exit; resolves its exit status or signal. */
  stop(): Promise<number | string | null>;
}

/** Starts an example that keeps running. */
export function startExample(
  file: string,
  args: readonly string[] = [],
  env: Record<string, string | undefined> = {},
): RunningExample {
  const [cmd, argv] = command(file, args);
  const child = spawn(cmd, argv, { env: environment(env), stdio: ["ignore", "pipe", "pipe"] });
  let text = "";
  child.stdout!.setEncoding("utf8");
  child.stderr!.setEncoding("utf8");
  child.stdout!.on("data", (chunk) => text += chunk);
  child.stderr!.on("data", (chunk) => text += chunk);
  const exited = new Promise<number | string | null>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal))
  );
  let gone = false;
  exited.then(() => gone = true);
  return {
    child,
    output: () => text,
    async waitFor(pattern, timeoutMs = 30_000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const found = pattern.exec(text);
        if (found) return found;
        if (gone || Date.now() > end) {
          throw new Error(
            `${file} never printed ${pattern} (${gone ? "it exited" : "timeout"}):\n${text}`,
          );
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    stop() {
      if (!gone) child.kill("SIGTERM");
      return exited;
    },
  };
}

function environment(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, NO_COLOR: "1", ...env })) {
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/**
 * The chunked SHA-256 (examples/_chunked_sha256.ts) of a buffer of `mib` MiB filled by the `fill`
 * kernel with the default seed, computed on the host in pieces of 16 MiB.
 */
export function expectedFillHash(mib: number): string {
  const hasher = new ChunkedSha256();
  const piece = 16 << 20;
  for (let at = 0; at < mib * 2 ** 20; at += piece) {
    hasher.update(fillPattern(DEFAULT_SEED, at, Math.min(piece, mib * 2 ** 20 - at)));
  }
  return hasher.digest();
}

/** The option that runs an example on the simulator, without waiting. */
export const ON_SIMULATOR: readonly string[] = ["--driver", "sim", "--virtual-time"];
