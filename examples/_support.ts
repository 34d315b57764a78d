/**
 * What every example shares: its command line (`--help`, `--driver native|sim`,
 * `--virtual-time`), the choice of machine (this one, where it has a usable NVIDIA driver, else a
 * simulated one, saying why), a clock that gives the simulated driver's times on the simulator,
 * GPU memory per process (NVML, or the simulator's), and tables.
 *
 * @module
 */

import { execFile } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { parseArgs } from "node:util";
import { nearest } from "../core/options.ts";
import { type NativeMachine, openMachine } from "../driver.ts";
import { type SimulatedGpuSpec, SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";

/** One option of an example, besides the common ones. */
export interface OptionSpec {
  /** `string` takes a value (numbers too); `boolean` is a flag. */
  readonly type: "string" | "boolean";
  /** What the value looks like in the help, such as `N` or `PATH`. */
  readonly value?: string;
  /** The default, as the help shows it (and as parsing gives it). */
  readonly default?: string | boolean;
  /** One line of help. */
  readonly help: string;
}

/** What an example is, for its command line and help. */
export interface ExampleSpec {
  /** The file name, such as `self_checkpoint.ts`. */
  readonly file: string;
  /** What the program shows, for the help (a few lines). */
  readonly about: string;
  /** Its own options, by long name. */
  readonly options: Readonly<Record<string, OptionSpec>>;
  /** Whether it takes `--json`. */
  readonly json?: boolean;
}

/** The options every example takes. */
const COMMON: Readonly<Record<string, OptionSpec>> = {
  driver: {
    type: "string",
    value: "native|sim",
    help: "force a driver (default: native where this machine has one, else sim)",
  },
  "virtual-time": {
    type: "boolean",
    help: "on the simulator, use virtual time: no waiting, same times printed (CI uses it)",
  },
};

const JSON_OPTION: OptionSpec = { type: "boolean", help: "print one JSON object instead of text" };

/** The runtime's command line for a script: `deno run -A FILE` or `bun FILE`. */
export function runtimeCommand(file: string, args: readonly string[] = []): [string, string[]] {
  const deno = "Deno" in globalThis;
  return [process.execPath, deno ? ["run", "-A", file, ...args] : [file, ...args]];
}

/** The help text of an example. */
export function helpText(spec: ExampleSpec): string {
  const options = { ...spec.options, ...(spec.json ? { json: JSON_OPTION } : {}), ...COMMON };
  const rows = Object.entries(options).map(([name, o]) => {
    const left = `--${name}${o.value ? ` ${o.value}` : ""}`;
    const def = o.default === undefined || o.default === false ? "" : ` (default ${o.default})`;
    return [left, `${o.help}${def}`];
  });
  rows.push(["-h, --help", "this help"]);
  const width = Math.max(...rows.map(([l]) => l.length)) + 2;
  return [
    `Usage: npx deno run -A examples/${spec.file} [options]`,
    `   or: npx bun examples/${spec.file} [options]`,
    "",
    spec.about.trim(),
    "",
    "Options:",
    ...rows.map(([l, r]) => `  ${l.padEnd(width)}${r}`),
    "",
  ].join("\n");
}

/** A usage error: what was wrong, then where the help is; exit status 2. */
export function usageError(spec: ExampleSpec, message: string): never {
  console.error(`${spec.file}: ${message}\nRun with --help to see the options.`);
  process.exit(2);
}

/** The parsed command line: each option's value (strings, booleans) and the common ones. */
export interface ParsedArgs {
  /** Every option by long name, defaults filled in. */
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  /** Arguments that are not options (after `--` too). */
  readonly positionals: readonly string[];
  /** `--driver`: `native`, `sim`, or undefined for the automatic choice. */
  readonly driver: "native" | "sim" | undefined;
  /** `--virtual-time`. */
  readonly virtualTime: boolean;
  /** `--json`. */
  readonly json: boolean;
}

/**
 * Parses the command line of an example (`process.argv` by default). `--help` prints the help and
 * exits 0; a bad option is a usage error (exit 2).
 */
export function parseExampleArgs(
  spec: ExampleSpec,
  argv: readonly string[] = process.argv.slice(2),
  { positionals = false } = {},
): ParsedArgs {
  const all = { ...spec.options, ...(spec.json ? { json: JSON_OPTION } : {}), ...COMMON };
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {
    help: { type: "boolean", short: "h" },
  };
  for (const [name, o] of Object.entries(all)) options[name] = { type: o.type };
  const args: string[] = [];
  for (const a of argv) {
    const prev = args.at(-1) ?? "";
    // `--n -5` read as `--n=-5`, so that the option's own check names the value (parseArgs
    // would take -5 for an option); not after `--`, where all are positionals.
    const value = /^-[0-9]/.test(a) && prev.startsWith("--") && !args.includes("--");
    if (value && options[prev.slice(2)]?.type === "string") {
      args[args.length - 1] = `${prev}=${a}`;
    } else args.push(a);
  }
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: positionals, strict: true });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const unknown = /^Unknown option '--([^']+)'/.exec(message)?.[1];
    const near = unknown && nearest(unknown, Object.keys(options));
    usageError(spec, near ? `${message.split(". ")[0]} (did you mean --${near}?)` : message);
  }
  if (parsed.values.help) {
    console.log(helpText(spec));
    process.exit(0);
  }
  const values: Record<string, string | boolean | undefined> = {};
  for (const [name, o] of Object.entries(all)) {
    values[name] = (parsed.values as Record<string, string | boolean | undefined>)[name] ??
      o.default;
  }
  const driver = values.driver;
  if (driver !== undefined && driver !== "native" && driver !== "sim") {
    usageError(spec, `--driver must be native or sim, got ${JSON.stringify(driver)}`);
  }
  return {
    values,
    positionals: parsed.positionals,
    driver: driver as "native" | "sim" | undefined,
    virtualTime: values["virtual-time"] === true,
    json: values.json === true,
  };
}

/** An integer option, checked to lie in `min..max`; a usage error otherwise. */
export function intOption(
  spec: ExampleSpec,
  args: ParsedArgs,
  name: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const text = String(args.values[name]);
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min || value > max) {
    usageError(
      spec,
      `--${name} must be an integer from ${min}${
        max === Number.MAX_SAFE_INTEGER ? "" : ` to ${max}`
      }, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}

/**
 * A simulated process holding a buffer of `mib` MiB (given as `option`) on GPU `gpu`. The
 * simulator refuses one its GPU cannot hold beside a CUDA context, as a GPU's `cuMemAlloc` would;
 * its error then names the option. This host's memory is no limit: the simulator makes a kernel's
 * bytes a megabyte at a time as they are read.
 */
export function spawnBuffer(
  sim: SimulatedMachine,
  option: string,
  mib: number,
  gpu: number,
  command: string,
): SimulatedProcess {
  try {
    return sim.spawn({ memoryMiB: mib, gpu, command });
  } catch (error) {
    throw new Error(`${option} ${mib}: ${messageOf(error)}`);
  }
}

/** GPU memory of one process: MiB by GPU UUID (its CUDA context included). */
export type MemoryByGpu = Readonly<Record<string, number>>;

/** What an example runs on: a machine, and what the example wants to know about it. */
interface ExampleMachineBase {
  /** The machine, for `CudaProcess`, the group operations and snapshots (`{ machine }`). */
  readonly machine: NativeMachine | SimulatedMachine;
  /**
   * Lines saying what was chosen and why, which an example prints first: on the simulator, why
   * (no usable driver here, or `--driver sim`).
   */
  readonly notes: readonly string[];
  /** Now, in ms: the simulator's clock there (its times are the real driver's), else real time. */
  now(): number;
  /** Waits `ms` on the same clock (on the simulator, virtual time moves meanwhile). */
  sleep(ms: number): Promise<void>;
  /**
   * The GPU memory each of `pids` holds now (a pid that holds none maps to `{}`), or why it cannot
   * be known (no NVML here).
   */
  gpuMemory(pids: readonly number[]): Promise<Map<number, MemoryByGpu> | string>;
  /**
   * {@link gpuMemory}, asked by a child process. A process that has checkpointed itself must ask
   * this way: measured on two H200s (driver 580), its own NVML call waited for the restore that
   * its own main thread was to make, and the example hung. Gives up, saying so, after `timeoutMs`.
   */
  gpuMemoryFromOutside(
    pids: readonly number[],
    timeoutMs?: number,
  ): Promise<Map<number, MemoryByGpu> | string>;
  /** Lets go of the machine (libcuda and NVML, or the simulator). */
  close(): Promise<void>;
}

/** This machine, with its NVIDIA driver. */
export interface NativeExampleMachine extends ExampleMachineBase {
  readonly kind: "native";
  /** This machine: libcuda (`machine.driver.libraryPath`), `/proc` and NVML, criu. */
  readonly machine: NativeMachine;
  /** `cuDriverGetVersion`, such as 13000. */
  readonly driverVersion: number;
}

/** A simulated machine. */
export interface SimulatedExampleMachine extends ExampleMachineBase {
  readonly kind: "simulated";
  /** The simulated machine: its GPUs, processes and simulated criu. */
  readonly machine: SimulatedMachine;
}

/** This machine, or a simulated one. */
export type ExampleMachine = NativeExampleMachine | SimulatedExampleMachine;

/** How an example wants its simulated machine, where it runs on one. */
export interface SimulatorWish {
  /** The GPUs: how many H200s, or each one's spec. Default one H200. */
  readonly gpus?: number | readonly SimulatedGpuSpec[];
  /** What the simulated machine runs, for the note (`a simulated process on a simulated H200`). */
  readonly what: string;
}

/**
 * Opens this machine where its driver can be used (libcuda found, with the checkpoint API), else a
 * simulated machine; `--driver` forces one (a native driver that cannot be used is then an error,
 * thrown with the reason).
 */
export async function chooseMachine(
  args: ParsedArgs,
  wish: SimulatorWish,
): Promise<ExampleMachine> {
  let reason: string;
  if (args.driver === "sim") {
    reason = "--driver sim";
  } else {
    const probe = await probeNative();
    if ("machine" in probe) return nativeMachine(probe.machine, probe.version);
    if (args.driver === "native") throw new Error(`--driver native: ${probe.reason}`);
    reason = probe.reason;
  }
  const sim = new SimulatedMachine({
    gpus: wish.gpus ?? 1,
    clock: args.virtualTime ? "virtual" : "real",
  });
  const simulatedMemory = async (pids: readonly number[]) => {
    const report = await sim.host.gpuMemory!();
    return "unknown" in report ? report.unknown : pick(report.byPid, pids);
  };
  const notes = args.driver === "sim"
    ? [`Running on the SIMULATED driver (--driver sim): ${wish.what}.`]
    : [
      `No usable NVIDIA driver here (${reason}).`,
      `Running on the SIMULATED driver instead: ${wish.what}.`,
    ];
  return {
    kind: "simulated",
    machine: sim,
    notes: [
      ...notes,
      `Its times are the real driver's, as measured (${
        args.virtualTime ? "virtual time: no waiting" : "in real time"
      }).`,
    ],
    now: () => sim.now(),
    sleep: (ms: number) => sim.sleep(ms),
    gpuMemory: simulatedMemory,
    // The simulated process is not this one: nothing here is checkpointed.
    gpuMemoryFromOutside: simulatedMemory,
    close: () => sim[Symbol.asyncDispose](),
  };
}

/**
 * {@link chooseMachine} for an example: prints the notes and a blank line first (on stderr with
 * `--json`, so that stdout stays one JSON object), and where the machine cannot be opened, says
 * why (`file: reason`) and exits 1.
 */
export async function openExampleMachine(
  spec: ExampleSpec,
  args: ParsedArgs,
  wish: SimulatorWish,
): Promise<ExampleMachine> {
  let machine: ExampleMachine;
  try {
    machine = await chooseMachine(args, wish);
  } catch (error) {
    console.error(`${spec.file}: ${messageOf(error)}`);
    process.exit(1);
  }
  const print = args.json ? console.error : console.log;
  for (const note of machine.notes) print(note);
  if (!args.json) console.log();
  return machine;
}

function nativeMachine(machine: NativeMachine, version: number): NativeExampleMachine {
  return {
    kind: "native",
    machine,
    driverVersion: version,
    notes: [
      `NVIDIA driver found (CUDA ${formatDriverVersion(version)}, ${machine.driver.libraryPath}).`,
    ],
    now: () => performance.now(),
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    gpuMemory: (pids) => nvmlMemory(machine, pids),
    gpuMemoryFromOutside: (pids, timeoutMs = 15_000) => gpuMemoryFromChild(pids, timeoutMs),
    close: () => machine.close(),
  };
}

/** The GPU memory each of `pids` holds, as this machine's NVML sees it, or why it is not known. */
async function nvmlMemory(
  machine: NativeMachine,
  pids: readonly number[],
): Promise<Map<number, MemoryByGpu> | string> {
  const gpuMemory = machine.host.gpuMemory;
  if (!gpuMemory) return "this machine's host cannot read GPU memory";
  const report = await gpuMemory.call(machine.host);
  return "unknown" in report ? report.unknown : pick(report.byPid, pids);
}

/** A `cuDriverGetVersion` number as CUDA names it: 13000 is `13.0`, 12080 is `12.8`. */
function formatDriverVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}

/** Runs examples/_gpu_memory.ts with this runtime, without a shell, and reads its answer. */
export async function gpuMemoryFromChild(
  pids: readonly number[],
  timeoutMs: number,
): Promise<Map<number, MemoryByGpu> | string> {
  const script = fileURLToPath(new URL("./_gpu_memory.ts", import.meta.url));
  const isDeno = "Deno" in globalThis;
  const args = [...(isDeno ? ["run", "-A", script] : [script]), ...pids.map(String)];
  const run = promisify(execFile);
  let stdout: string;
  try {
    ({ stdout } = await run(process.execPath, args, { timeout: timeoutMs, encoding: "utf8" }));
  } catch (error) {
    const e = error as { killed?: boolean; stderr?: string };
    return e.killed
      ? `a child process asking NVML gave no answer in ${timeoutMs} ms`
      : `a child process asking NVML failed: ${(e.stderr ?? messageOf(error)).trim()}`;
  }
  let answer: { unknown: string } | Record<string, MemoryByGpu | "unknown">;
  try {
    answer = JSON.parse(stdout);
  } catch {
    return `a child process asking NVML answered what is not JSON: ${
      JSON.stringify(stdout.slice(0, 200))
    }`;
  }
  if ("unknown" in answer && typeof answer.unknown === "string") return answer.unknown;
  const byPid = new Map<number, MemoryByGpu | "unknown">(
    Object.entries(answer as Record<string, MemoryByGpu | "unknown">).map((
      [pid, m],
    ) => [Number(pid), m]),
  );
  return pick(byPid, pids);
}

function pick(
  byPid: ReadonlyMap<number, Readonly<Record<string, number>> | "unknown">,
  pids: readonly number[],
): Map<number, MemoryByGpu> | string {
  const out = new Map<number, MemoryByGpu>();
  for (const pid of pids) {
    const mib = byPid.get(pid) ?? {};
    if (mib === "unknown") return `the GPU memory of process ${pid} is not known`;
    out.set(pid, mib);
  }
  return out;
}

/** Opens this machine; resolves why not, where its driver cannot be used (closing it again). */
async function probeNative(): Promise<
  { machine: NativeMachine; version: number } | { reason: string }
> {
  let machine: NativeMachine;
  try {
    machine = await openMachine();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { reason: message.split("\n")[0].replace(/\. Tried .*$|:$/, "") };
  }
  const driver = machine.driver;
  const { code, value } = await driver.driverVersion();
  let reason: string | undefined;
  if (!driver.checkpointSupported) {
    reason = `the driver at ${driver.libraryPath} (CUDA ${
      formatDriverVersion(value)
    }) has no checkpoint API; 570 or later is needed`;
  } else if (code !== 0) {
    reason = `cuDriverGetVersion failed with CUresult ${code}`;
  }
  if (reason === undefined) return { machine, version: value };
  await machine.close();
  return { reason };
}

/** The sum of a process's GPU memory over its GPUs, in MiB. */
export function totalMiB(memory: MemoryByGpu | undefined): number {
  return Object.values(memory ?? {}).reduce((a, b) => a + b, 0);
}

/** A process's GPU memory for a table: `1544 MiB`, `none`, or `unknown`. */
export function describeMemory(memory: Map<number, MemoryByGpu> | string, pid: number): string {
  if (typeof memory === "string") return "unknown";
  const mib = totalMiB(memory.get(pid));
  return mib === 0 ? "none" : `${mib} MiB`;
}

/** A duration for a table: milliseconds with three decimals, as NVIDIA's sample prints them. */
export function ms(value: number): string {
  return value.toFixed(3);
}

/** A column of {@link table}: its title and which side it keeps to. */
export interface Column {
  readonly title: string;
  readonly align?: "left" | "right";
}

/** A text table: the titles, a rule, the rows, a rule, and the footer rows (a total) below it. */
export function table(
  columns: readonly Column[],
  rows: readonly (readonly string[])[],
  footer: readonly (readonly string[])[] = [],
): string {
  const all = [...rows, ...footer];
  const widths = columns.map((c, i) => Math.max(c.title.length, ...all.map((r) => r[i].length)));
  const line = (cells: readonly string[]) =>
    cells.map((cell, i) =>
      columns[i].align === "right" ? cell.padStart(widths[i]) : cell.padEnd(widths[i])
    ).join("  ").trimEnd();
  const rule = "-".repeat(widths.reduce((a, b) => a + b + 2, -2));
  return [line(columns.map((c) => c.title)), rule, ...rows.map(line), rule, ...footer.map(line)]
    .join("\n");
}

/** The first 16 hex digits of a hash, as NVIDIA's sample prints a hash. */
export function shortHash(hex: string): string {
  return hex.slice(0, 16);
}

/** The compute capability of a simulated GPU's chip, as PTX names it (the H100 and H200 are 9.0). */
export function simulatedComputeCapability(name: string): string {
  return /H100|H200|H20\b|GH200/.test(name) ? "sm_90" : "unknown";
}

/** The runtime this runs on, with its version: `Deno 2.9.6`, `Bun 1.4.5`. */
export function runtimeName(): string {
  const g = globalThis as { Deno?: { version: { deno: string } }; Bun?: { version: string } };
  return g.Deno ? `Deno ${g.Deno.version.deno}` : g.Bun ? `Bun ${g.Bun.version}` : "JavaScript";
}

/** The message of an error, whatever was thrown. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Polls `probe` every 50 ms until it gives a value, `timeoutMs` passes, or `stop` settles. */
export async function waitFor<T>(
  probe: () => T | undefined | null | false,
  timeoutMs: number,
  stop?: Promise<unknown>,
): Promise<T | undefined> {
  let stopped = false;
  stop?.then(() => stopped = true);
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (stopped || Date.now() > end) return undefined;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Whether `pid` is a live process (a zombie is not: it waits to be reaped). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return existsSync(`/proc/${pid}`) && !/^\S+ \(.*\) Z/.test(readText(`/proc/${pid}/stat`));
  } catch {
    return false;
  }
}

/** A file's text, or "" where it cannot be read (not yet written, gone). */
export function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/**
 * Ctrl-C or SIGTERM ends the example at once (exit 130 or 143), removing `folder` first where one
 * is given: the temporary folder it made, which on a GPU holds a snapshot's images (gigabytes).
 */
export function removeOnInterrupt(folder: string | undefined): void {
  for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
    process.once(signal, () => {
      if (folder) rmSync(folder, { recursive: true, force: true });
      process.exit(code);
    });
  }
}
