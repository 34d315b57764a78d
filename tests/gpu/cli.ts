/**
 * Our `cuda-checkpoint` (the compiled binary) side by side with NVIDIA's utility on real CUDA
 * processes (issue 8, part 7). Not a test file: tests/gpu/run_cli.sh runs it on the GPU machine,
 * one section per call, with the Bun inside our binary (no Deno or Bun is carried there):
 *
 *   BUN_BE_BUN=1 /tmp/ckpt/cuda-checkpoint tests/gpu/cli.ts <compare|map|many>
 *       --ours /tmp/ckpt/cuda-checkpoint --nvidia /tmp/ckpt/nvidia/cuda-checkpoint
 *       --target /tmp/ckpt/target [--mib 64] [--report FILE]
 *
 * - compare: every row of docs/DRIVER.md's message table and every operation (each query, each
 *   `--action`, `--toggle` both ways, illegal states, a missing pid, a non-CUDA pid, bad input),
 *   run by NVIDIA's utility and by ours on the same target process brought to the same state
 *   before each; stdout, stderr, exit code and the state afterwards must be equal. The only
 *   differences allowed are the documented ones where ours adds (the cases with `known` below:
 *   its help text, several pids, --version, its own line for input NVIDIA's has no message for).
 * - map: two GPUs (skipped, loudly, with one): a 1 GiB target on GPU 0 checkpointed and restored with
 *   `--device-map` swapping the GPUs, by each program on a target of its own; every step's output
 *   compared; the target must be on the other GPU (nvidia-smi and our `list --json`, which reads
 *   NVML) and its memory intact; then moved back.
 * - many: ours only: several pids at once, `--all-or-nothing` with a non-CUDA member, `list`,
 *   `list --json`, `--json`, `--all`; every line checked.
 *
 * Each check prints one line starting `PASS `, `FAIL ` or `SKIP `, and each comparison both
 * programs' output. The states are set up and read with this library's native driver in this
 * process (driver calls, no program start-up), so that neither program under test prepares the
 * other's case.
 *
 * `--simulate` is the dry run without a GPU: both programs get `--simulate` and one private state
 * file, the targets are simulated processes (no memory hash, no kernels), and "nvidia" may be a
 * second copy of ours; it checks this script, not the driver.
 */

import { execFile, execFileSync } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";

import type { CheckpointDriver } from "../../core/driver.ts";
import { type ProcessState, stateName } from "../../core/states.ts";
import { startTarget } from "./native_env.ts";

type Step = "lock" | "checkpoint" | "restore" | "unlock";

/** What a program run did. */
interface Ran {
  code: number | null;
  signal: string | null;
  out: string;
  err: string;
  ms: number;
}

/** A program under test. */
interface Program {
  name: "nvidia" | "ours";
  path: string;
}

/** A target process, real (tests/gpu/target.cu) or simulated. */
interface Target {
  pid: number;
  /** A thread of the process that is not its main one. */
  tid: number;
  readyHash: string;
  /** Its memory's hash now (real targets: must be running; waits for its kernels). */
  hash(): Promise<string>;
  /** Launches a kernel that spins for `ms` (real targets only). */
  kernel(ms: number): Promise<void>;
  exit(): Promise<void>;
}

/** Where the targets run and how their states are set up and read. */
interface Machine {
  simulated: boolean;
  /** The environment of the programs under test. */
  env: Record<string, string>;
  /** Arguments added to every program run (`--simulate`). */
  extra: string[];
  start(mode: "cuda" | "nocuda", mib: number): Promise<Target>;
  /** A raw driver call, on the real driver or on the simulated machine (saved after). */
  call<T>(fn: (driver: CheckpointDriver) => Promise<T>): Promise<T>;
  /** The GPUs' UUIDs, in nvidia-smi's order. */
  uuids(): Promise<string[]>;
  /** The GPU memory of a pid by GPU UUID as nvidia-smi sees it (the simulator's, simulated). */
  where(pid: number): Promise<Record<string, number>>;
  missingPid(): number;
  close(): Promise<void>;
}

// ---- counting and printing ----

const counts = { PASS: 0, FAIL: 0, SKIP: 0 };
const reportRows: string[][] = [];

function verdict(kind: "PASS" | "FAIL" | "SKIP", what: string): void {
  counts[kind]++;
  console.log(`${kind} ${what}`);
}

function check(what: string, ok: boolean, detail = ""): boolean {
  verdict(ok ? "PASS" : "FAIL", `${what}${detail ? `: ${detail}` : ""}`);
  return ok;
}

/** A program's output, indented, a line each; a help text shortened to its line count. */
function show(label: string, r: Ran, state: string | undefined, help: string): void {
  const how = r.signal ? `killed (${r.signal})` : `exit ${r.code}`;
  console.log(
    `    ${label}: ${how} in ${r.ms.toFixed(1)} ms${state ? `, state after: ${state}` : ""}`,
  );
  for (const [name, text] of [["out", r.out], ["err", r.err]] as const) {
    if (text === "") continue;
    const shown = help && text.includes(help)
      ? text.replace(help, `<its help text: ${help.split("\n").length} lines>\n`)
      : text;
    for (const line of shown.replace(/\n$/, "").split("\n")) console.log(`      ${name}| ${line}`);
  }
}

// ---- running programs ----

/** The environment without BUN_BE_BUN: our binary is Bun, and would run as Bun with it. */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "BUN_BE_BUN") env[k] = v;
  }
  return { ...env, ...extra };
}

function runProgram(
  path: string,
  args: readonly string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<Ran> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    execFile(
      path,
      [...args],
      { env, timeout: timeoutMs, killSignal: "SIGKILL", encoding: "utf8", maxBuffer: 1 << 24 },
      (error, stdout, stderr) => {
        const ms = performance.now() - t0;
        const e = error as (Error & { code?: unknown; signal?: string | null }) | null;
        const code = e ? (typeof e.code === "number" ? e.code : null) : 0;
        resolve({
          code,
          signal: e?.signal ?? null,
          out: String(stdout),
          err: String(stderr) + (e && code === null && !e.signal ? `<${e.message}>` : ""),
          ms,
        });
      },
    );
  });
}

let callTimeoutMs = 60_000;

function run(m: Machine, p: Program, args: readonly string[]): Promise<Ran> {
  return runProgram(p.path, [...args, ...m.extra], m.env, callTimeoutMs);
}

// ---- the machine: real or simulated ----

async function realMachine(targetPath: string): Promise<Machine> {
  const { openMachine } = await import("../../driver.ts");
  const machine = await openMachine();
  const driver = machine.driver;
  const smi = (args: string[]) =>
    execFileSync("nvidia-smi", args, { encoding: "utf8", timeout: 30_000 }).trim();
  return {
    simulated: false,
    env: cleanEnv(),
    extra: [],
    async start(mode, mib) {
      const t = await startTarget(targetPath, mode, mib);
      return {
        pid: t.pid,
        tid: t.threadId,
        readyHash: t.readyHash,
        hash: () => t.memoryHash(),
        kernel: (ms) => t.launchKernel(ms),
        exit: () => t.exit(),
      };
    },
    call: (fn) => fn(driver),
    // The UUID field of each line (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), in nvidia-smi's order.
    uuids: () =>
      Promise.resolve(
        smi(["--query-gpu=uuid", "--format=csv,noheader"]).split("\n")
          .map((line) => /GPU-[0-9a-fA-F-]+/.exec(line)?.[0])
          .filter((u): u is string => u !== undefined),
      ),
    where(pid) {
      const out: Record<string, number> = {};
      const text = smi([
        "--query-compute-apps=pid,gpu_uuid,used_memory",
        "--format=csv,noheader,nounits",
      ]);
      for (const line of text.split("\n")) {
        const [p, uuid, mib] = line.split(",").map((s) => s.trim());
        if (Number(p) === pid) out[uuid] = (out[uuid] ?? 0) + Number(mib);
      }
      return Promise.resolve(out);
    },
    missingPid() {
      if (!existsSync("/proc/999999")) return 999999;
      for (let pid = 4_000_000;; pid--) if (!existsSync(`/proc/${pid}`)) return pid;
    },
    async close() {
      await machine.close();
    },
  };
}

async function simulatedMachine(): Promise<Machine> {
  const { openSimulatedMachine } = await import("../../cli/simulate.ts");
  const dir = mkdtempSync(join(tmpdir(), "ckpt-cli-gpu-sim-"));
  const path = join(dir, "machine.json");
  const on = async <T>(
    fn: (m: Awaited<ReturnType<typeof openSimulatedMachine>>) => Promise<T> | T,
  ): Promise<T> => {
    const machine = await openSimulatedMachine({ path });
    try {
      const result = await fn(machine);
      await machine.save();
      return result;
    } finally {
      await machine.close();
    }
  };
  return {
    simulated: true,
    env: cleanEnv({ CKPT_SIM_STATE: path }),
    extra: ["--simulate"],
    start: (mode, mib) =>
      on((m) => {
        const pid = m.spawn({
          cuda: mode === "cuda",
          ...(mode === "cuda" ? { memoryMiB: mib } : {}),
          command: `target ${mode} ${mib}`,
        });
        const threads = m.machine.process(pid)?.threads ?? [pid];
        const target: Target = {
          pid,
          tid: threads.find((t) => t !== pid) ?? pid,
          readyHash: "0",
          hash: () => Promise.resolve("0"),
          kernel: () => Promise.resolve(),
          exit: () => on((m) => void m.kill(pid)),
        };
        return target;
      }),
    call: (fn) => on((m) => fn(m.machine.driver)),
    uuids: () => on(async (m) => (await m.machine.driver.listGpus()).map((g) => g.uuid)),
    where: (pid) => on((m) => ({ ...m.machine.process(pid)?.gpuMemoryMiB })),
    missingPid: () => 999999,
    close() {
      rmSync(dir, { recursive: true, force: true });
      return Promise.resolve();
    },
  };
}

/** The state of a pid by the machine: a state name, or `error <CUresult>`. */
async function stateOf(m: Machine, pid: number): Promise<string> {
  const r = await m.call((d) => d.getState(pid));
  return r.code === 0 ? stateName(r.value) ?? `state ${r.value}` : `error ${r.code}`;
}

async function stepOf(m: Machine, pid: number, step: Step): Promise<number> {
  switch (step) {
    case "lock":
      return await m.call((d) => d.lock(pid, { timeoutMs: 30_000 }));
    case "checkpoint":
      return await m.call((d) => d.checkpoint(pid));
    case "restore":
      return await m.call((d) => d.restore(pid, null));
    case "unlock":
      return await m.call((d) => d.unlock(pid));
  }
}

/** Brings a CUDA process to a state with driver calls (restore on the GPU it was on). */
async function bring(m: Machine, pid: number, want: ProcessState): Promise<void> {
  for (let i = 0; i < 4; i++) {
    const state = await stateOf(m, pid);
    if (state === want) return;
    let step: Step;
    if (state === "running") step = "lock";
    else if (state === "locked") step = want === "running" ? "unlock" : "checkpoint";
    else if (state === "checkpointed") step = "restore";
    else throw new Error(`pid ${pid} is ${state}: it cannot be brought to ${want}`);
    const code = await stepOf(m, pid, step);
    if (code !== 0) throw new Error(`${step} of pid ${pid} failed with CUresult ${code}`);
  }
  throw new Error(`pid ${pid} did not reach ${want}`);
}

/** Checks that a target's memory is what it was when it started (it must be running). */
async function checkMemory(m: Machine, t: Target, what: string): Promise<void> {
  if (m.simulated) return verdict("SKIP", `${what}: memory hash (simulated target)`);
  try {
    await bring(m, t.pid, "running");
    const now = await t.hash();
    check(
      `${what}: memory of pid ${t.pid} intact`,
      now === t.readyHash,
      `${now} (ready ${t.readyHash})`,
    );
  } catch (error) {
    check(`${what}: memory of pid ${t.pid} intact`, false, String(error));
  }
}

// ---- compare: NVIDIA's and ours, case by case ----

/** What a case's arguments may name, as `{name}`. */
interface Ctx {
  pid: number;
  tid: number;
  nocuda: number;
  missing: number;
  /** Every GPU onto itself (`U0=U0,U1=U1`). */
  identity: string;
  /** An old UUID no GPU has. */
  unknownOld: string;
  /** The first GPU onto a UUID no GPU has, the others onto themselves. */
  unknownNew: string;
  /** Only the first GPU onto the second (two GPUs). */
  partial: string;
}

/** A documented difference where ours adds; ours must exit `code`. */
interface Known {
  why: string;
  code: number;
}

interface Case {
  id: string;
  /** The arguments, split at spaces, with `{pid}`, `{tid}`, ... of {@link Ctx} filled in. */
  args: string;
  /** What it stands for ("row:" marks a row of docs/DRIVER.md#messages-and-exit-codes). */
  what: string;
  /** The state the CUDA target is brought to before each program's run. Default running. */
  from?: ProcessState;
  /** A kernel spinning this long is launched on the target just before each run. */
  kernelMs?: number;
  known?: Known;
  /** A usage error: each program prints its own help after the message. */
  usage?: boolean;
  /** Needs two GPUs. */
  gpus?: number;
}

function expand(args: string, ctx: Ctx): string[] {
  const values = ctx as unknown as Record<string, unknown>;
  return args.split(" ").filter((a) => a !== "").map((a) =>
    a.replace(/\{(\w+)\}/g, (_, name: string) => String(values[name]))
  );
}

const UNKNOWN_UUID = "GPU-0badc0de-0000-4000-8000-000000000000";

function cases(): Case[] {
  const L = "locked" as const, C = "checkpointed" as const;
  const list: Case[] = [];
  const add = (id: string, args: string, what: string, more: Partial<Case> = {}) =>
    list.push({ id, args, what, ...more });
  const known = (id: string, args: string, what: string, code: number, why: string) =>
    add(id, args, what, { known: { why, code } });
  // Queries of a running process.
  add("get-state", "--get-state --pid {pid}", "--get-state of a running process");
  add("get-state-short", "--get-state -p {pid}", "-p");
  add("get-state-joined", "--get-state -p{pid}", "-pPID");
  add("get-state-equals", "--get-state --pid={pid}", "--pid=PID");
  add("get-state-first", "--pid {pid} --get-state", "--pid before the operation");
  add("get-state-tid", "--get-state --pid {tid}", "a thread id (CRIU asks the restore thread's)");
  add("restore-tid", "--get-restore-tid --pid {pid}", "--get-restore-tid");
  add("restore-tid-tid", "--get-restore-tid --pid {tid}", "--get-restore-tid of a thread id");
  add("get-state-pid1", "--get-state --pid 1", "--get-state of pid 1 (not a CUDA process)");
  add("restore-tid-pid1", "--get-restore-tid --pid 1", "row: get-restore-tid on a non-CUDA pid");
  // Each action, from running.
  add("lock", "--action lock --pid {pid}", "lock a running process, no --timeout");
  add("lock-timeout", "--action lock --pid {pid} --timeout 1000", "lock with --timeout 1000");
  add("lock-short", "--action lock -p {pid} -t 1000", "lock with -p and -t");
  add("lock-timeout-0", "--action lock --pid {pid} --timeout 0", "lock with --timeout 0");
  add("checkpoint-running", "--action checkpoint --pid {pid}", "checkpoint while running");
  add("restore-running", "--action restore --pid {pid}", "restore while running");
  add("unlock-running", "--action unlock --pid {pid}", "row: unlock while running");
  add("toggle-running", "--toggle --pid {pid}", "--toggle of a running process (suspends)");
  add("toggle-tid", "--toggle --pid {tid}", "--toggle given a thread id");
  add("toggle-running-map", "--toggle --pid {pid} --device-map {identity}", "--toggle -d, running");
  // getopt_long's abbreviations and repeats, as both programs read them.
  add("get-state-abbrev", "--get-sta --pi {pid}", "--get-state and --pid shortened");
  add("lock-abbrev", "--act lock --p {pid} --time 1000", "--action, --pid, --timeout shortened");
  add("toggle-abbrev", "--tog --pid {pid}", "--toggle shortened");
  add("toggle-twice", "--toggle --toggle --pid {pid}", "--toggle given twice");
  add("action-twice", "--action checkpoint --action lock --pid {pid}", "two --action: the last");
  // From locked.
  add("get-state-locked", "--get-state --pid {pid}", "--get-state of a locked process", {
    from: L,
  });
  add("restore-tid-locked", "--get-restore-tid --pid {pid}", "restore tid, locked", { from: L });
  add("lock-locked", "--action lock --pid {pid}", "lock while locked", { from: L });
  add("restore-locked", "--action restore --pid {pid}", "restore while locked", { from: L });
  add("checkpoint-locked", "--action checkpoint --pid {pid}", "checkpoint a locked process", {
    from: L,
  });
  add("unlock-locked", "--action unlock --pid {pid}", "unlock a locked process", { from: L });
  add("toggle-locked", "--toggle --pid {pid}", "--toggle of a locked process", { from: L });
  // From checkpointed.
  add("get-state-ckpt", "--get-state --pid {pid}", "--get-state, checkpointed", { from: C });
  add("restore-tid-ckpt", "--get-restore-tid --pid {pid}", "restore tid, checkpointed", {
    from: C,
  });
  add("lock-ckpt", "--action lock --pid {pid}", "lock while checkpointed", { from: C });
  add("checkpoint-ckpt", "--action checkpoint --pid {pid}", "checkpoint, checkpointed", {
    from: C,
  });
  add("unlock-ckpt", "--action unlock --pid {pid}", "unlock while checkpointed", { from: C });
  add("restore-ckpt", "--action restore --pid {pid}", "restore a checkpointed process", {
    from: C,
  });
  add(
    "restore-identity",
    "--action restore --pid {pid} --device-map {identity}",
    "every GPU onto itself",
    {
      from: C,
    },
  );
  add("restore-identity-short", "--action restore -p {pid} -d {identity}", "restore with -d", {
    from: C,
  });
  add(
    "restore-unknown-old",
    "--action restore --pid {pid} --device-map {unknownOld}",
    "old UUID unknown",
    {
      from: C,
    },
  );
  add(
    "restore-unknown-new",
    "--action restore --pid {pid} --device-map {unknownNew}",
    "new UUID unknown",
    {
      from: C,
    },
  );
  add("restore-partial", "--action restore --pid {pid} --device-map {partial}", "a GPU left out", {
    from: C,
    gpus: 2,
  });
  add("toggle-ckpt", "--toggle --pid {pid}", "--toggle of a checkpointed process (resumes)", {
    from: C,
  });
  add(
    "toggle-ckpt-map",
    "--toggle --pid {pid} --device-map {identity}",
    "--toggle -d, checkpointed",
    {
      from: C,
    },
  );
  // A busy process: a kernel spins on the GPU.
  add(
    "lock-busy-timeout",
    "--action lock --pid {pid} --timeout 200",
    "row: lock, 200 ms, 3 s kernel",
    {
      kernelMs: 3000,
    },
  );
  add(
    "lock-busy-timeout-0",
    "--action lock --pid {pid} --timeout 0",
    "lock, timeout 0, 2 s kernel",
    {
      kernelMs: 2000,
    },
  );
  add("lock-busy", "--action lock --pid {pid}", "lock, no --timeout, 2 s kernel", {
    kernelMs: 2000,
  });
  add("toggle-busy", "--toggle --pid {pid}", "--toggle, 2 s kernel", { kernelMs: 2000 });
  // A pid no process has, and a live process that never initialised CUDA.
  for (
    const op of [
      "get-state",
      "get-restore-tid",
      "lock",
      "checkpoint",
      "restore",
      "unlock",
      "toggle",
    ]
  ) {
    const flag = ["get-state", "get-restore-tid", "toggle"].includes(op)
      ? `--${op}`
      : `--action ${op}`;
    const row = op === "get-state" ? "row: " : "";
    add(`${op}-missing`, `${flag} --pid {missing}`, `${row}${flag} of a pid no process has`);
    add(
      `${op}-nocuda`,
      `${flag} --pid {nocuda}`,
      `${flag} of a process that never initialised CUDA`,
    );
  }
  // Bad input: the message (rows of the table), then each program's own help.
  const usage = (id: string, args: string, what: string) => add(id, args, what, { usage: true });
  usage("no-operation", "", "row: no operation");
  usage("no-operation-pid", "--pid {pid}", "row: a pid but no operation");
  usage("no-pid", "--get-state", "row: operation without pid");
  usage("no-pid-action", "--action lock", "row: --action without pid");
  usage("pid-abc", "--get-state --pid abc", "row: --pid abc");
  usage("pid-negative", "--get-state --pid -5", "--pid -5");
  known(
    "pid-empty",
    "--get-state --pid=",
    "--pid=",
    1,
    "NVIDIA's reads it as pid 0 and asks the driver; ours says the pid is bad",
  );
  usage("pid-no-value", "--get-state --pid", "--pid at the end, without a value");
  usage("timeout-negative", "--action lock --pid {pid} --timeout -5", "row: --timeout -5");
  known(
    "timeout-abc",
    "--action lock --pid {pid} --timeout abc",
    "--timeout abc",
    1,
    "NVIDIA's reads it as 0 (no timeout) and locks; ours says the timeout is bad",
  );
  usage("timeout-get-state", "--get-state --pid {pid} --timeout 100", "row: --timeout, get-state");
  usage(
    "timeout-checkpoint",
    "--action checkpoint --pid {pid} --timeout 100",
    "row: --timeout, checkpoint",
  );
  usage("timeout-toggle", "--toggle --pid {pid} --timeout 100", "row: --timeout with --toggle");
  usage("map-bad", "--action restore --pid {pid} --device-map bad", "row: --device-map bad");
  usage("map-bad-uuid", "--action restore --pid {pid} --device-map GPU-xyz=GPU-abc", "not UUIDs");
  usage("action-foo", "--action foo --pid {pid}", "row: --action foo");
  usage("action-no-value", "--pid {pid} --action", "--action at the end, without a value");
  usage("unknown-option", "--bogus", "row: an unknown option");
  usage("ambiguous-option", "--get- --pid {pid}", "the start of two options");
  usage(
    "unknown-option-pid",
    "--get-state --pid {pid} --bogus",
    "an unknown option after a command",
  );
  usage("unknown-short", "--get-state --pid {pid} -x", "an unknown short option");
  known(
    "extra-argument",
    "--get-state --pid {pid} extra",
    "a stray argument after a valid command",
    1,
    "NVIDIA's ignores it; ours says it is unexpected",
  );
  // Documented differences, where ours adds.
  const help = "the help text is our own (it names --action, as CRIU needs)";
  known("help", "--help", "--help", 0, help);
  known("help-short", "-h", "-h (what CRIU's plugin runs)", 0, help);
  known("version", "--version", "--version", 0, "ours has --version");
  // Issue 16: pid 0 goes to the driver as NVIDIA's utility hands it over, and a pid beyond a C int
  // gets NVIDIA's own line.
  add("pid-zero", "--get-state --pid 0", "--pid 0: the driver's answer");
  add("pid-zero-toggle", "--toggle --pid 0", "--toggle --pid 0: the driver's answer");
  usage("pid-2-31", "--get-state --pid 2147483648", "--pid 2^31");
  known(
    "pid-huge",
    "--get-state --pid 99999999999",
    "pid far beyond 2^31-1",
    1,
    "NVIDIA's wraps it to 32 bits (1215752191) and asks about that pid; ours refuses it with NVIDIA's line for a pid it cannot take",
  );
  usage("two-operations", "--get-state --get-restore-tid --pid {pid}", "two operations");
  usage("map-with-lock", "--action lock --pid {pid} --device-map {identity}", "-d with lock");
  known(
    "several-pids",
    "--get-state --pid {pid},{nocuda}",
    "a comma list",
    1,
    "ours does several pids, a line each",
  );
  known(
    "launch-job",
    "--launch-job /bin/true",
    "--launch-job",
    1,
    "ours names the driver that has it (590)",
  );
  return list;
}

/** A usage error's lines before the blank line that comes before the help. */
function beforeHelp(err: string): string {
  const end = err.indexOf("\n\n");
  return end < 0 ? err : err.slice(0, end);
}

/** The text with each program's own help text replaced by `<help>`, and pids by names. */
function normalise(text: string, help: string, names: [string, string][]): string {
  let t = help ? text.split(help).join("<help>") : text;
  for (const [value, name] of names) {
    t = t.replace(
      new RegExp(`(?<![0-9])${value.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}(?![0-9])`, "g"),
      name,
    );
  }
  return t;
}

async function compare(m: Machine, nvidia: Program, ours: Program, mib: number): Promise<void> {
  const uuids = await m.uuids();
  console.log(`GPUs: ${uuids.join(", ")}`);
  let target = await m.start("cuda", mib);
  const nocuda = await m.start("nocuda", 0);
  const missing = m.missingPid();
  console.log(
    `target pid ${target.pid} (thread ${target.tid}, ${mib} MiB), non-CUDA pid ${nocuda.pid}, missing pid ${missing}`,
  );
  const helps: Record<string, string> = {};
  for (const p of [nvidia, ours]) {
    const r = await run(m, p, ["-h"]);
    helps[p.name] = r.out || r.err;
    console.log(
      `${p.name} -h: exit ${r.code}, ${helps[p.name].split("\n").length} lines on ${
        r.out ? "stdout" : "stderr"
      }`,
    );
  }
  console.log(`--- NVIDIA's help text, as printed:\n${helps.nvidia.trimEnd()}\n---`);
  // CRIU's plugin runs `cuda-checkpoint -h` (stdout and stderr in one pipe, 2047 bytes kept) and
  // turns itself off unless it finds "--action" there.
  for (const p of [nvidia, ours]) {
    const kept = helps[p.name].slice(0, 2047);
    check(
      `compare/help-action: ${p.name}'s -h names --action within CRIU's 2047 bytes`,
      kept.includes("--action"),
    );
  }
  const identity = uuids.map((u) => `${u}=${u}`).join(",");
  const knownSeen: string[] = [];
  /** One case: each program in turn on the target brought to the case's state; the verdict. */
  const one = async (c: Case) => {
    const results: {
      r: Ran;
      state: string;
      norm: { code: number | null; out: string; err: string };
    }[] = [];
    let shownArgs: string[] = [];
    let broken = "";
    for (const p of [nvidia, ours]) {
      const from = c.from ?? "running";
      try {
        await bring(m, target.pid, from);
      } catch (error) {
        // A process left in a state it cannot leave (failed): start a new one.
        broken = `target ${target.pid}: ${error}; a new target is started`;
        await target.exit();
        target = await m.start("cuda", mib);
        await bring(m, target.pid, from);
      }
      const ctx: Ctx = {
        pid: target.pid,
        tid: target.tid,
        nocuda: nocuda.pid,
        missing,
        identity,
        unknownOld: `${UNKNOWN_UUID}=${uuids[0]}`,
        unknownNew: uuids.map((u, i) => `${u}=${i === 0 ? UNKNOWN_UUID : u}`).join(","),
        partial: uuids.length > 1 ? `${uuids[0]}=${uuids[1]}` : identity,
      };
      const args = expand(c.args, ctx);
      shownArgs = args;
      if (c.kernelMs) await target.kernel(c.kernelMs);
      const r = await run(m, p, args);
      const state = await stateOf(m, target.pid);
      if (c.kernelMs && !m.simulated) {
        // Let the kernel end (a hash waits for it) before the next run.
        await bring(m, target.pid, "running");
        await target.hash();
      }
      const names: [string, string][] = [
        [String(target.pid), "<pid>"],
        [String(target.tid), "<tid>"],
        [String(nocuda.pid), "<nocuda>"],
        [String(missing), "<missing>"],
        [p.path, "<program>"],
      ];
      results.push({
        r,
        state,
        norm: {
          code: r.code,
          out: normalise(r.out, helps[p.name], names),
          err: normalise(r.err, helps[p.name], names),
        },
      });
    }
    const [n, o] = results;
    const same = n.norm.code === o.norm.code && n.norm.out === o.norm.out &&
      n.norm.err === o.norm.err && n.state === o.state;
    let kind: "PASS" | "FAIL" = same ? "PASS" : "FAIL";
    let note = "";
    if (
      !same && c.usage && n.norm.code === o.norm.code && n.norm.out === o.norm.out &&
      n.state === o.state && beforeHelp(n.norm.err) === beforeHelp(o.norm.err) &&
      o.norm.err === `${beforeHelp(o.norm.err)}\n\n<help>`
    ) {
      kind = "PASS";
      note = " (the same lines before the help; NVIDIA's text after them is not its -h text)";
    } else if (!same && c.known && o.r.code === c.known.code && o.state === (c.from ?? "running")) {
      kind = "PASS";
      note = ` (known difference: ${c.known.why})`;
      knownSeen.push(`${c.id}: ${c.known.why}`);
    } else if (!same && c.known) {
      note =
        ` (known difference expected ours to exit ${c.known.code} and leave the state as it was)`;
    }
    if (same && c.known) note = " (the same, once each program's own help text is left out)";
    verdict(kind, `compare/${c.id}: ${c.what}${note}`);
    console.log(`    args: ${shownArgs.join(" ")}`);
    if (broken) console.log(`    ${broken}`);
    show("nvidia", n.r, n.state, helps.nvidia);
    show("ours  ", o.r, o.state, helps.ours);
    reportRows.push([
      `compare/${c.id}`,
      `\`${shownArgs.join(" ").replace(/\|/g, "\\|")}\``,
      brief(n.r, n.state),
      brief(o.r, o.state),
      `${kind}${note}`,
    ]);
  };
  for (const c of cases()) {
    if ((c.gpus ?? 1) > uuids.length) {
      verdict("SKIP", `compare/${c.id}: needs ${c.gpus} GPUs, ${uuids.length} here`);
      continue;
    }
    try {
      await one(c);
    } catch (error) {
      verdict("FAIL", `compare/${c.id}: ${c.what}: stopped by an error: ${error}`);
      // Whatever it left, the next case needs a target it can bring to a state.
      try {
        await bring(m, target.pid, "running");
      } catch {
        console.log(`    target ${target.pid} cannot be brought back: a new target is started`);
        await target.exit();
        target = await m.start("cuda", mib);
      }
    }
  }
  if (knownSeen.length) {
    console.log("Known differences seen (ours adds):");
    for (const k of knownSeen) console.log(`  - ${k}`);
  }
  await checkMemory(m, target, "compare");
  await target.exit();
  await nocuda.exit();
}

function firstLine(text: string): string {
  return text.split("\n")[0];
}

function brief(r: Ran, state: string): string {
  const text = firstLine(r.err || r.out).slice(0, 90).replace(/\|/g, "\\|");
  return `${r.signal ?? r.code}: ${text || "(nothing)"} → ${state}`;
}

// ---- map: restore onto the other GPU ----

async function listRow(
  m: Machine,
  ours: Program,
  pid: number,
): Promise<Record<string, unknown> | undefined> {
  const r = await run(m, ours, ["list", "--json"]);
  for (const line of r.out.split("\n")) {
    if (!line) continue;
    try {
      const row = JSON.parse(line);
      if (row.pid === pid) return row;
    } catch {
      console.log(`    list --json printed a line that is not JSON: ${line}`);
    }
  }
  return undefined;
}

async function checkWhere(
  m: Machine,
  ours: Program,
  t: Target,
  mib: number,
  on: string,
  off: string,
  what: string,
): Promise<void> {
  const smi = await m.where(t.pid);
  const row = await listRow(m, ours, t.pid);
  const nvml = (row?.gpuMemoryMiB ?? {}) as Record<string, number> | "unknown";
  console.log(
    `    ${m.simulated ? "simulator" : "nvidia-smi"}: ${JSON.stringify(smi)}; ` +
      `ours list --json: ${JSON.stringify(row)}`,
  );
  const there = (mem: Record<string, number> | "unknown") =>
    mem !== "unknown" && (mem[on] ?? 0) >= mib && (mem[off] ?? 0) < mib;
  if (!m.simulated) check(`${what}: nvidia-smi has pid ${t.pid} on ${on} only`, there(smi));
  check(`${what}: ours list --json has pid ${t.pid} on ${on} only`, there(nvml));
}

async function map(m: Machine, nvidia: Program, ours: Program, mib: number): Promise<void> {
  const uuids = await m.uuids();
  if (uuids.length < 2) {
    verdict(
      "SKIP",
      `map: ${uuids.length} GPU here; --device-map across GPUs needs 2 (run on nvidia-h200-x2)`,
    );
    return;
  }
  const targets = { nvidia: await m.start("cuda", mib), ours: await m.start("cuda", mib) };
  try {
    // Where CUDA put them (its device 0; nvidia-smi's order may differ): the GPU with their memory.
    const at = await m.where(targets.nvidia.pid);
    const home = Object.keys(at).sort((x, y) => at[y] - at[x])[0] ?? uuids[0];
    const u0 = uuids.includes(home) ? home : uuids[0];
    const u1 = uuids.find((u) => u !== u0)!;
    const swap = uuids.map((u) => `${u}=${u === u0 ? u1 : u === u1 ? u0 : u}`).join(",");
    console.log(`the targets' GPU ${u0}, the other ${u1}; the map ${swap}`);
    for (const [name, t] of Object.entries(targets)) {
      console.log(`${name}'s target: pid ${t.pid}, ${mib} MiB`);
      await checkWhere(m, ours, t, mib, u0, u1, `map/${name} start`);
    }
    const steps: [string, string[], string][] = [
      ["suspend", ["--toggle"], "checkpointed"],
      ["state", ["--get-state"], "checkpointed"],
      ["restore-swapped", ["--action", "restore", "--device-map", swap], "locked"],
      ["state-locked", ["--get-state"], "locked"],
      ["unlock", ["--action", "unlock"], "running"],
      ["WHERE 1", [], ""],
      ["suspend-again", ["--toggle"], "checkpointed"],
      ["resume-swapped-back", ["--toggle", "--device-map", swap], "running"],
      ["WHERE 0", [], ""],
    ];
    for (const [id, args, want] of steps) {
      if (id.startsWith("WHERE")) {
        const onFirst = id === "WHERE 0";
        for (const [name, t] of Object.entries(targets)) {
          // NVIDIA's utility (580, measured on two H200s) ignores --device-map on --toggle: its
          // target stays on GPU 1. Ours uses the map. (In the dry run "nvidia" is ours again.)
          const ignored = onFirst && name === "nvidia" && !m.simulated;
          const back = onFirst && !ignored;
          await checkWhere(
            m,
            ours,
            t,
            mib,
            back ? u0 : u1,
            back ? u1 : u0,
            ignored
              ? "map/nvidia after its --toggle --device-map, which it ignores: still on GPU 1"
              : `map/${name} after the move to GPU ${onFirst ? 0 : 1}`,
          );
          await checkMemory(m, t, `map/${name} on GPU ${back ? 0 : 1}`);
        }
        continue;
      }
      const ran: Record<string, { r: Ran; state: string; norm: string }> = {};
      for (const p of [nvidia, ours]) {
        const t = targets[p.name];
        const r = await run(m, p, [...args, "--pid", String(t.pid)]);
        const state = await stateOf(m, t.pid);
        const norm = normalise(`${r.code}\n${r.out}\n${r.err}\n${state}`, "", [[
          String(t.pid),
          "<pid>",
        ]]);
        ran[p.name] = { r, state, norm };
      }
      const ok = ran.nvidia.norm === ran.ours.norm && ran.ours.state === want;
      check(`map/${id}: ${args.join(" ")} --pid <pid>: the same output, state ${want}`, ok);
      show("nvidia", ran.nvidia.r, ran.nvidia.state, "");
      show("ours  ", ran.ours.r, ran.ours.state, "");
      reportRows.push([
        `map/${id}`,
        `\`${args.join(" ")}\``,
        brief(ran.nvidia.r, ran.nvidia.state),
        brief(ran.ours.r, ran.ours.state),
        ok ? "PASS" : "FAIL",
      ]);
    }
  } finally {
    for (const t of Object.values(targets)) await t.exit();
  }
}

// ---- many: several pids, list, --json (ours only) ----

function lines(text: string): string[] {
  return text.split("\n").filter((l) => l !== "");
}

function parseJsonLines(text: string): Record<string, unknown>[] | undefined {
  try {
    return lines(text).map((l) => JSON.parse(l));
  } catch {
    return undefined;
  }
}

async function many(m: Machine, ours: Program, mib: number): Promise<void> {
  const ts = [await m.start("cuda", mib), await m.start("cuda", mib), await m.start("cuda", mib)];
  const n = await m.start("nocuda", 0);
  const [a, b, c] = ts.map((t) => t.pid);
  const all = `${a},${b},${c}`;
  console.log(`targets ${all} (${mib} MiB each), non-CUDA ${n.pid}`);
  const states = async () => await Promise.all(ts.map((t) => stateOf(m, t.pid)));
  const tids = await Promise.all(
    ts.map(async (t) => (await m.call((d) => d.getRestoreThreadId(t.pid))).value),
  );
  // Stderr of a listing: empty, or the one line about processes no one may look at (in the VMs we
  // are lent, pid 1 is such a process even for root). A target among them would be missing from
  // stdout, which each check looks for.
  const NOT_LOOKED_AT =
    /^(cuda-checkpoint: \d+ process(es)? could not be looked at and may be (a )?CUDA process(es)? \(pids? [^)]*\): .*\n)?$/;
  // One command: its exact stdout lines (or a check of them), exit code, and the states after.
  const cmd = async (
    id: string,
    args: string[],
    want: {
      code: number;
      out?: string[];
      outCheck?: (out: string) => string;
      err?: RegExp;
      states?: string[];
    },
  ) => {
    const r = await run(m, ours, args);
    const after = await states();
    const problems: string[] = [];
    if (r.code !== want.code) problems.push(`exit ${r.code}, not ${want.code}`);
    if (want.out) {
      const got = lines(r.out);
      if (JSON.stringify(got) !== JSON.stringify(want.out)) {
        problems.push(`stdout ${JSON.stringify(got)}, not ${JSON.stringify(want.out)}`);
      }
    }
    const bad = want.outCheck?.(r.out);
    if (bad) problems.push(bad);
    if (want.err && !want.err.test(r.err)) problems.push(`stderr does not match ${want.err}`);
    if (!want.err && r.err !== "") problems.push("stderr not empty");
    if (want.states && JSON.stringify(after) !== JSON.stringify(want.states)) {
      problems.push(`states ${after.join(",")}, not ${want.states.join(",")}`);
    }
    check(`many/${id}: ${args.join(" ")}`, problems.length === 0, problems.join("; "));
    show("ours", r, `${after.join(",")}`, "");
    reportRows.push([
      `many/${id}`,
      `\`${args.join(" ")}\``,
      "-",
      brief(r, after.join(",")),
      problems.length ? "FAIL" : "PASS",
    ]);
    return r;
  };
  const R = ["running", "running", "running"];
  const C = ["checkpointed", "checkpointed", "checkpointed"];
  try {
    await cmd("toggle-3", ["--toggle", "--pid", all], {
      code: 0,
      out: [`${a} done checkpointed`, `${b} done checkpointed`, `${c} done checkpointed`],
      states: C,
    });
    await cmd("get-state-3", ["--get-state", "--pid", all], {
      code: 0,
      out: [`${a} checkpointed`, `${b} checkpointed`, `${c} checkpointed`],
    });
    await cmd("restore-tid-3", ["--get-restore-tid", "--pid", all], {
      code: 0,
      out: [`${a} ${tids[0]}`, `${b} ${tids[1]}`, `${c} ${tids[2]}`],
    });
    await cmd("toggle-3-back", ["--toggle", "--pid", String(a), "--pid", `${b},${c}`], {
      code: 0,
      out: [`${a} done running`, `${b} done running`, `${c} done running`],
      states: R,
    });
    await cmd("lock-all-or-nothing", [
      "--action",
      "lock",
      "--pid",
      `${all},${n.pid}`,
      "--all-or-nothing",
    ], {
      code: 1,
      outCheck: (out) => {
        const got = lines(out);
        // Refused before any lock: the non-CUDA member's state cannot be read; the others say
        // the state they were left in, as planned (running).
        const ok = got.length === 4 &&
          [a, b, c].every((p, i) => got[i] === `${p} not-started running`) &&
          new RegExp(`^${n.pid} failed`).test(got[3]);
        return ok
          ? ""
          : `stdout ${
            JSON.stringify(got)
          }: want "<pid> not-started running" x3, "${n.pid} failed..."`;
      },
      err: new RegExp(`^Could not lock on process ID ${n.pid}: "`, "m"),
      states: R,
    });
    await cmd("toggle-all-or-nothing", [
      "--toggle",
      "--pid",
      `${a},${b},${n.pid}`,
      "--all-or-nothing",
    ], {
      code: 1,
      outCheck: (out) => {
        const got = lines(out);
        const ok = got.length === 3 && got[0] === `${a} not-started running` &&
          got[1] === `${b} not-started running` &&
          new RegExp(`^${n.pid} failed`).test(got[2]);
        return ok
          ? ""
          : `stdout ${
            JSON.stringify(got)
          }: want "${a} not-started running", "${b} not-started running", "${n.pid} failed..."`;
      },
      err: new RegExp(`^Process ID ${a} was not started: another process failed`, "m"),
      states: R,
    });
    await cmd("toggle-mixed", ["--toggle", "--pid", `${a},${n.pid}`], {
      code: 1,
      outCheck: (out) => {
        const got = lines(out);
        return got.length === 2 && got[0] === `${a} done checkpointed` &&
            got[1].startsWith(`${n.pid} failed`)
          ? ""
          : `stdout ${JSON.stringify(got)}: want "${a} done checkpointed", "${n.pid} failed..."`;
      },
      err: new RegExp(`process ID ${n.pid}`, "m"),
      states: ["checkpointed", "running", "running"],
    });
    await cmd("toggle-json", ["--toggle", "--pid", all, "--json"], {
      code: 0,
      outCheck: (out) =>
        jsonToggle(out, ts.map((t) => t.pid), ["running", "checkpointed", "checkpointed"]),
      states: ["running", "checkpointed", "checkpointed"],
    });
    await cmd("toggle-json-back", ["--toggle", "--pid", `${b},${c}`, "--json"], {
      code: 0,
      outCheck: (out) => jsonToggle(out, [b, c], ["running", "running"]),
      states: R,
    });
    await cmd("get-state-json", ["--get-state", "--pid", String(a), "--json"], {
      code: 0,
      out: [JSON.stringify({ pid: a, operation: "get-state", ok: true, state: "running" })],
    });
    await cmd("restore-tid-json", ["--get-restore-tid", "--pid", String(a), "--json"], {
      code: 0,
      out: [
        JSON.stringify({
          pid: a,
          operation: "get-restore-tid",
          ok: true,
          restoreThreadId: tids[0],
        }),
      ],
    });
    await cmd("unlock-running-json", ["--action", "unlock", "--pid", String(a), "--json"], {
      code: 1,
      outCheck: (out) => {
        const [row] = parseJsonLines(out) ?? [];
        const e = row?.error as Record<string, unknown> | undefined;
        return row && row.ok === false && row.status === "failed" && row.state === "running" &&
            e?.code === 401 && e.codeName === "CUDA_ERROR_ILLEGAL_STATE" &&
            String(e.message).startsWith(`Could not unlock on process ID ${a}: "`)
          ? ""
          : `want ok false, status failed, state running, error 401 CUDA_ERROR_ILLEGAL_STATE: ${out}`;
      },
      err: new RegExp(`^Could not unlock on process ID ${a}: "[^"]+"\\n$`),
      states: R,
    });
    await cmd("get-state-nocuda-json", ["--get-state", "--pid", String(n.pid), "--json"], {
      code: 1,
      outCheck: (out) => {
        const [row] = parseJsonLines(out) ?? [];
        const e = row?.error as Record<string, unknown> | undefined;
        return row && row.ok === false && e?.code === 3 &&
            e.codeName === "CUDA_ERROR_NOT_INITIALIZED"
          ? ""
          : `want ok false, error 3 CUDA_ERROR_NOT_INITIALIZED: ${out}`;
      },
      err: new RegExp(`^Error getting process state for process ID ${n.pid}: "`),
    });
    await cmd("list", ["list"], {
      code: 0,
      err: NOT_LOOKED_AT,
      outCheck: (out) => {
        const got = lines(out);
        const problems: string[] = [];
        if (!/^PID +STATE +RESTORE_TID +GPU_MEMORY +COMMAND$/.test(got[0] ?? "")) {
          problems.push(`header ${JSON.stringify(got[0])}`);
        }
        ts.forEach((t, i) => {
          const row = got.find((l) => l.startsWith(`${t.pid} `));
          const m2 = row &&
            /^(\d+) +running +(\d+) +(\d+) MiB(?: \([0-9+]+\))? +(\S.*)$/.exec(row);
          if (
            !m2 || Number(m2[2]) !== tids[i] || Number(m2[3]) < mib || !m2[4].includes("target")
          ) {
            problems.push(
              `row of ${t.pid}: ${JSON.stringify(row)} (want running, ${
                tids[i]
              }, >= ${mib} MiB, target)`,
            );
          }
        });
        if (got.some((l) => l.startsWith(`${n.pid} `))) {
          problems.push(`the non-CUDA ${n.pid} is listed`);
        }
        return problems.join("; ");
      },
    });
    await cmd("list-json", ["list", "--json"], {
      code: 0,
      err: NOT_LOOKED_AT,
      outCheck: (out) => {
        const rows = parseJsonLines(out);
        if (!rows) return `not JSON lines: ${out}`;
        const problems: string[] = [];
        ts.forEach((t, i) => {
          const row = rows.find((r) => r.pid === t.pid);
          const mem = row?.gpuMemoryMiB as Record<string, number> | undefined;
          const total = mem && typeof mem === "object"
            ? Object.values(mem).reduce((x, y) => x + y, 0)
            : 0;
          const uuidsOk = mem && typeof mem === "object" &&
            Object.keys(mem).every((k) => /^GPU-[0-9a-f-]{36}$/.test(k));
          if (
            !row || row.state !== "running" || row.restoreThreadId !== tids[i] || total < mib ||
            !uuidsOk ||
            !String(row.command).includes("target")
          ) {
            problems.push(`row of ${t.pid}: ${JSON.stringify(row)}`);
          }
        });
        if (rows.some((r) => r.pid === n.pid)) problems.push(`the non-CUDA ${n.pid} is listed`);
        return problems.join("; ");
      },
    });
    await cmd("get-state-all", ["--get-state", "--all"], {
      code: 0,
      err: NOT_LOOKED_AT,
      outCheck: (out) => {
        const got = lines(out);
        const missing = [a, b, c].filter((p) => !got.includes(`${p} running`));
        const nocuda = got.some((l) => l.startsWith(`${n.pid} `));
        return missing.length || nocuda
          ? `stdout ${JSON.stringify(got)}: want ${all} running, not ${n.pid}`
          : "";
      },
    });
    await cmd("get-state-all-json", ["--get-state", "--all", "--json"], {
      code: 0,
      err: NOT_LOOKED_AT,
      outCheck: (out) => {
        const rows = parseJsonLines(out) ?? [];
        const ok = [a, b, c].every((p) =>
          rows.some((r) =>
            r.pid === p && r.ok === true && r.state === "running" && r.operation === "get-state"
          )
        );
        return ok ? "" : `want a running get-state line for each of ${all}: ${out}`;
      },
    });
    for (const t of ts) await checkMemory(m, t, "many");
  } finally {
    for (const t of [...ts, n]) await t.exit();
  }
}

/** `--toggle --json` lines: one per pid, in order, ok, done, with its two steps. */
function jsonToggle(out: string, pids: number[], wants: string[]): string {
  const rows = parseJsonLines(out);
  if (!rows || rows.length !== pids.length) return `want ${pids.length} JSON lines: ${out}`;
  const problems: string[] = [];
  rows.forEach((row, i) => {
    const steps = (row.steps as { step: string; ok: boolean }[] | undefined)?.map((s) =>
      `${s.step}:${s.ok}`
    );
    const wantSteps = wants[i] === "checkpointed"
      ? ["lock:true", "checkpoint:true"]
      : ["restore:true", "unlock:true"];
    if (
      row.pid !== pids[i] || row.operation !== "toggle" || row.ok !== true ||
      row.status !== "done" ||
      row.state !== wants[i] || typeof row.ms !== "number" ||
      JSON.stringify(steps) !== JSON.stringify(wantSteps)
    ) {
      problems.push(
        `line ${i + 1}: ${JSON.stringify(row)} (want ${pids[i]} done ${
          wants[i]
        }, steps ${wantSteps})`,
      );
    }
  });
  return problems.join("; ");
}

// ---- main ----

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    args: process.argv.slice(2),
    allowPositionals: true,
    options: {
      ours: { type: "string" },
      nvidia: { type: "string" },
      target: { type: "string" },
      mib: { type: "string", default: "64" },
      simulate: { type: "boolean", default: false },
      report: { type: "string" },
      "call-timeout-ms": { type: "string", default: "60000" },
    },
  });
  const section = positionals[0];
  if (!["compare", "map", "many"].includes(section ?? "") || !values.ours) {
    console.error(
      "usage: tests/gpu/cli.ts compare|map|many --ours PATH [--nvidia PATH] [--target PATH] " +
        "[--mib N] [--simulate] [--report FILE]",
    );
    return 2;
  }
  if (section !== "many" && !values.nvidia) {
    console.error(`${section} needs --nvidia PATH`);
    return 2;
  }
  if (!values.simulate && !values.target) {
    console.error("--target PATH (tests/gpu/target.cu built with nvcc), or --simulate");
    return 2;
  }
  callTimeoutMs = Number(values["call-timeout-ms"]);
  const mib = Number(values.mib);
  // The programs this starts must not inherit BUN_BE_BUN (cleanEnv drops it; so does this).
  delete process.env.BUN_BE_BUN;
  const ours: Program = { name: "ours", path: values.ours };
  const nvidia: Program = { name: "nvidia", path: values.nvidia ?? "" };
  const m = values.simulate ? await simulatedMachine() : await realMachine(values.target!);
  const t0 = performance.now();
  console.log(
    `== cli.ts ${section}${
      m.simulated ? " (SIMULATED: a dry run, no GPU)" : ""
    }: ours ${ours.path}, nvidia ${nvidia.path || "-"}`,
  );
  try {
    if (section === "compare") await compare(m, nvidia, ours, mib);
    else if (section === "map") await map(m, nvidia, ours, Math.max(mib, 1024));
    else await many(m, ours, mib);
  } catch (error) {
    verdict(
      "FAIL",
      `${section}: stopped by an error: ${error instanceof Error ? error.stack : error}`,
    );
  } finally {
    await m.close();
  }
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  console.log(
    `== cli.ts ${section}: ${counts.PASS} PASS, ${counts.FAIL} FAIL, ${counts.SKIP} SKIP in ${secs} s`,
  );
  if (values.report) {
    const md = [
      `\n## ${section}${
        m.simulated ? " (simulated dry run)" : ""
      }: ${counts.PASS} PASS, ${counts.FAIL} FAIL, ${counts.SKIP} SKIP (${secs} s)\n`,
      "| check | arguments | NVIDIA's: exit, first line → state | ours | verdict |",
      "|---|---|---|---|---|",
      ...reportRows.map((r) => `| ${r.join(" | ")} |`),
      "",
    ].join("\n");
    appendFileSync(values.report, md);
  }
  return counts.FAIL > 0 || counts.PASS + counts.SKIP === 0 ? 1 : 0;
}

if (import.meta.main) {
  process.exit(await main());
}
