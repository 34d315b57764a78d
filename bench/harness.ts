// What bench/overhead.ts and bench/many.ts share: the options that pick libcuda (the real one, a
// path, or the fake of tests/fixtures built here), building the C baselines with cc, talking to
// them a JSON line at a time, and starting the target processes. Runs under Deno and Bun alike.

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import process from "node:process";
import { parseArgs } from "node:util";

import { type NativeMachine, openMachine } from "../driver.ts";
import { startTarget, type TargetProcess } from "../tests/gpu/native_env.ts";
import { type Environment, environment } from "./report.ts";

/** The options every benchmark takes (for `parseArgs`). */
export const COMMON_OPTIONS = {
  /** libcuda for both sides; the system's libcuda.so.1 when left out. */
  libcuda: { type: "string" },
  /** Build and use the fake libcuda of tests/fixtures (no GPU needed; measures nothing real). */
  fake: { type: "boolean", default: false },
  /** The fake's checkpoint and restore time (FAKE_CUDA_DELAY_MS). */
  "fake-delay-ms": { type: "string", default: "20" },
  /** The target program (tests/gpu/target.cu built with nvcc); with --fake, a shell stand-in. */
  target: { type: "string" },
  /** The C baseline, already built (else it is built here with cc). */
  "c-bin": { type: "string" },
  /** Where the reports go (bench/reports by default). */
  out: { type: "string" },
} as const;

const FIXTURES = new URL("../tests/fixtures/", import.meta.url).pathname;

/** The stand-in target for runs without a GPU: says "ready <pid> <pid> 0", answers "hash 0". */
export const FAKE_TARGET = join(FIXTURES, "fake_target.sh");

/** What a benchmark runs on: the machine, the library both sides use, and the programs. */
export interface Setup {
  /** This machine, on the libcuda chosen (`machine.driver`), with its Linux host. */
  machine: NativeMachine;
  /** The absolute path of the libcuda the driver opened (the C side is given the same). */
  libcuda: string;
  fake: boolean;
  /** The target program. */
  target: string;
  /** The C baseline program. */
  cBin: string;
  /** The driver's `cuDriverGetVersion`, where it answers. */
  driverVersion?: number;
  /** Removes what was built here and closes the machine. */
  cleanup(): Promise<void>;
}

/** Options as `parseArgs` gives them for {@link COMMON_OPTIONS}. */
export interface CommonValues {
  libcuda?: string;
  fake?: boolean;
  "fake-delay-ms"?: string;
  target?: string;
  "c-bin"?: string;
  out?: string;
}

/** Whether a library file is the fake (it exports the fake's counters). */
function isFake(path: string): boolean {
  try {
    return readFileSync(path).includes("fake_max_in_flight");
  } catch {
    return false;
  }
}

/** Opens the machine, builds what is missing (the fake, the C baseline `cName`), picks a target. */
export async function setup(values: CommonValues, cName: "cycle" | "many"): Promise<Setup> {
  let dir: string | undefined;
  const scratch = () => dir ??= mkdtempSync(join(tmpdir(), "ckpt-bench-"));
  let libraryPath = values.libcuda;
  if (values.fake) {
    libraryPath = join(scratch(), "libcuda.so.1");
    const delay = Number(values["fake-delay-ms"] ?? "20");
    if (!Number.isInteger(delay) || delay < 0) throw new RangeError("--fake-delay-ms: an integer");
    execFileSync("cc", [
      "-shared",
      "-fPIC",
      "-O2",
      `-DFAKE_CUDA_DELAY_MS=${delay}`,
      "-o",
      libraryPath,
      join(FIXTURES, "fake_libcuda.c"),
      "-lpthread",
    ], { stdio: "inherit" });
  }
  let cBin = values["c-bin"];
  if (!cBin) {
    cBin = join(scratch(), cName);
    const source = new URL(`./${cName}.c`, import.meta.url).pathname;
    execFileSync("cc", ["-O2", "-pthread", "-o", cBin, source, "-ldl"], { stdio: "inherit" });
  }
  const machine = await openMachine(libraryPath ? { libraryPath } : {});
  const driver = machine.driver;
  const fake = values.fake || isFake(driver.libraryPath);
  const target = values.target ?? (fake ? FAKE_TARGET : undefined);
  if (!target || !existsSync(target)) {
    await machine.close();
    throw new Error(
      `--target: the target program (tests/gpu/target.cu built with nvcc), got ${target}`,
    );
  }
  // cuInit and the GPU list come before the first lock: done here, outside every timing.
  await driver.listGpus().catch(() => {});
  const version = await driver.driverVersion();
  return {
    machine,
    libcuda: driver.libraryPath,
    fake,
    target,
    cBin,
    driverVersion: version.code === 0 ? version.value : undefined,
    async cleanup() {
      await machine.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A child program that answers a line with a line (the C baselines in their stdin mode). */
export class LineChild {
  readonly #child: ChildProcess;
  readonly #lines: string[] = [];
  readonly #waiting: ((line: string | null) => void)[] = [];
  #ended = false;
  readonly #exit: Promise<number | null>;
  #stderr = "";

  constructor(readonly program: string, args: string[]) {
    this.#child = spawn(program, args, { stdio: ["pipe", "pipe", "pipe"] });
    let buffer = "";
    this.#child.stdout!.setEncoding("utf8");
    this.#child.stdout!.on("data", (chunk: string) => {
      buffer += chunk;
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        this.#push(buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
      }
    });
    this.#child.stderr!.setEncoding("utf8");
    this.#child.stderr!.on("data", (chunk: string) => this.#stderr += chunk);
    this.#exit = new Promise((resolve) =>
      this.#child.on("close", (code) => {
        this.#ended = true;
        for (const w of this.#waiting.splice(0)) w(null);
        resolve(code);
      })
    );
  }

  #push(line: string): void {
    const w = this.#waiting.shift();
    if (w) w(line);
    else this.#lines.push(line);
  }

  /** The next line, parsed as JSON; rejects on a line with "error", an exit, or a timeout. */
  async next(timeoutMs: number): Promise<Record<string, unknown>> {
    const line = await new Promise<string | null>((resolve, reject) => {
      const queued = this.#lines.shift();
      if (queued !== undefined) return resolve(queued);
      if (this.#ended) return resolve(null);
      const timer = setTimeout(() => {
        const i = this.#waiting.indexOf(done);
        if (i >= 0) this.#waiting.splice(i, 1);
        reject(new Error(`${this.program} said nothing for ${timeoutMs} ms`));
      }, timeoutMs);
      const done = (l: string | null) => {
        clearTimeout(timer);
        resolve(l);
      };
      this.#waiting.push(done);
    });
    if (line === null) {
      throw new Error(`${this.program} ended (${await this.#exit}): ${this.#stderr.trim()}`);
    }
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(line);
    } catch {
      throw new Error(`${this.program} said ${JSON.stringify(line)}, not a JSON line`);
    }
    if ("error" in parsed) throw new Error(`${this.program} failed: ${line}`);
    return parsed;
  }

  /** Sends one line. */
  send(line: string): void {
    this.#child.stdin!.write(line + "\n");
  }

  /** Says "exit" and waits for it to end (kills it after 10 s). */
  async close(): Promise<void> {
    if (!this.#ended) {
      this.#child.stdin!.end("exit\n");
      const timer = setTimeout(() => this.#child.kill("SIGKILL"), 10_000);
      await this.#exit;
      clearTimeout(timer);
    }
  }
}

/** The number of GPUs nvidia-smi lists; `fallback` where it cannot run. */
export function gpuCount(fallback: number): number {
  try {
    const out = execFileSync("nvidia-smi", ["-L"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 30_000,
    });
    const n = out.split("\n").filter((l) => l.startsWith("GPU ")).length;
    return n > 0 ? n : fallback;
  } catch {
    return fallback;
  }
}

/** Starts `count` targets of `memoryMiB` each, target i on GPU `gpuOf(i)` (CUDA_VISIBLE_DEVICES). */
export async function startTargets(
  target: string,
  count: number,
  memoryMiB: number,
  gpuOf: (i: number) => number | undefined,
): Promise<TargetProcess[]> {
  const started = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => startTarget(target, "cuda", memoryMiB, gpuOf(i))),
  );
  const ok = started.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(ok.map((t) => t.exit()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return ok;
}

/** Whether each target's memory still hashes as it did when it was ready. */
export async function memoryIntact(targets: readonly TargetProcess[]): Promise<boolean[]> {
  const out: boolean[] = [];
  for (const t of targets) {
    try {
      out.push((await t.ask("hash", 120_000)) === `hash ${t.readyHash}`);
    } catch {
      out.push(false);
    }
  }
  return out;
}

/** Times an async call in ms. */
export async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const start = performance.now();
  const value = await fn();
  return [performance.now() - start, value];
}

/** A comma-separated list of positive integers (an option's value). */
export function integers(text: string, what: string): number[] {
  const list = text.split(",").map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n < 0)) {
    throw new RangeError(
      `${what}: a comma-separated list of integers, got ${JSON.stringify(text)}`,
    );
  }
  return list;
}

/** The fake-libcuda note every report carries when it applies. */
export const FAKE_NOTE = "The fake libcuda was used and the targets were shell stand-ins " +
  "(tests/fixtures/fake_target.sh) unless --target named a program: these figures measure the " +
  "benchmark's plumbing, not the driver. Measure on a GPU machine (bench/run.sh).";

/** A string option of a benchmark, with its default. */
type StringOption = { type: "string"; default?: string };

/** The command line of a benchmark: {@link COMMON_OPTIONS} and its own string options. */
export function benchArgs<O extends Record<string, StringOption>>(
  own: O,
):
  & CommonValues
  & { [K in keyof O]: O[K] extends { default: string } ? string : string | undefined } {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { ...COMMON_OPTIONS, ...own },
  });
  return values as never;
}

/** The report's environment for a run set up by {@link setup}. */
export function environmentOf(s: Setup, date: Date): Environment {
  return environment({ fake: s.fake, libcuda: s.libcuda, driverVersion: s.driverVersion, date });
}
