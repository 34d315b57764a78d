/**
 * NVIDIA's cuda-checkpoint README workflow, from start to end, against examples/counter.ts: start
 * the counter, ask it (101), suspend its CUDA state with this package (the GPU memory is released),
 * `criu dump` the whole process (it is gone), `criu restore` it (same pid, still checkpointed),
 * resume its CUDA state, and ask again (102): the integer in GPU memory survived.
 *
 *   sudo npx deno run -A examples/counter_criu.ts [--criu /path/to/criu] [--images-dir DIR]
 *   sudo npx bun examples/counter_criu.ts
 *
 * It first checks what the CRIU half needs (an NVIDIA driver with the checkpoint API, criu, root,
 * and `criu check` on this kernel) and says plainly what is missing. Where something is, it runs
 * the CUDA half alone, on the simulated driver (the counter then runs inside this program), and
 * says that the CRIU half was skipped and why.
 *
 * The counter serves a unix-domain socket by default: criu 4.1 cannot dump a process holding an
 * inet socket on some kernels (6.18); `--udp` uses NVIDIA's UDP port 10000 instead. criu runs with
 * `--file-locks` (Deno keeps its caches locked) and, as the counter runs in a session of its own,
 * without `--shell-job`. No shell is involved: criu is run with an argument array.
 */

import { execFile, execFileSync, spawn } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import process from "node:process";
import { CudaProcess } from "../mod.ts";
import {
  askCounter,
  COUNTER_START,
  type CounterAddress,
  counterGpu,
  serveCounter,
} from "./counter.ts";
import {
  alive,
  chooseMachine,
  describeMemory,
  type ExampleMachine,
  type ExampleSpec,
  messageOf,
  parseExampleArgs,
  readText,
  runtimeCommand,
  usageError,
  waitFor,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "counter_criu.ts",
  about: `
NVIDIA's CRIU workflow on examples/counter.ts: ask (101), suspend its CUDA state, criu dump,
criu restore, resume, ask again (102). Needs an NVIDIA driver, criu, root and a kernel criu
supports; without them it runs the CUDA half on the simulated driver and says why the CRIU half
was skipped. Exits 1 when a step fails.`,
  options: {
    criu: { type: "string", value: "PATH", help: "the criu program (default: criu on PATH)" },
    "images-dir": {
      type: "string",
      value: "DIR",
      help: "where criu writes its images (default: a new temporary folder, removed after)",
    },
    unix: {
      type: "string",
      value: "PATH",
      help: "the counter's unix socket (default: one in the temporary folder)",
    },
    udp: { type: "boolean", help: "serve UDP on 127.0.0.1:10000 instead (criu may not dump it)" },
  },
};

const args = parseExampleArgs(SPEC);
if (args.values.unix === "") usageError(SPEC, `--unix must be a socket's path, got ""`);
if (args.values.udp && args.values.unix !== undefined) {
  usageError(SPEC, "--udp and --unix name two ways to serve: give one");
}
const step = (() => {
  let n = 0;
  return (text: string) => console.log(`${++n}. ${text}`);
})();

let here: ExampleMachine;
try {
  here = await chooseMachine(args, {
    what: "the counter runs inside this program, its integer in a simulated process",
  });
} catch (error) {
  console.error(`counter_criu.ts: ${messageOf(error)}`);
  process.exit(1);
}
for (const note of here.notes) console.log(note);
console.log();

const missing = await checkPrerequisites(here);
console.log();
const work = mkdtempSync(join(tmpdir(), "ckpt-counter-"));
const address: CounterAddress = args.values.udp
  ? { port: 10000 }
  : { unix: (args.values.unix as string | undefined) ?? join(work, "counter.sock") };
let ok = false;
try {
  ok = missing.length === 0 && here.kind === "native"
    ? await withCriu(here, address)
    : await cudaHalfOnly(here, address, missing);
} catch (error) {
  console.log(`FAIL: ${messageOf(error)}`);
} finally {
  await here.close();
  // Kept where it failed and holds something to read (the counter's output, criu's logs).
  if (ok || readdirSync(work).length === 0) rmSync(work, { recursive: true, force: true });
  else console.log(`(the counter's output and criu's logs are in ${work})`);
}
process.exit(ok ? 0 : 1);

/** The criu program to use, or why there is none. */
interface Criu {
  readonly path?: string;
  readonly version?: string;
}

/** Prints what the CRIU half needs and whether this machine has it; resolves what is missing. */
async function checkPrerequisites(m: ExampleMachine): Promise<string[]> {
  const missing: string[] = [];
  const line = (what: string, good: boolean | undefined, text: string) => {
    console.log(`  ${what.padEnd(41)} ${good ? "yes" : good === false ? "NO " : " - "}  ${text}`);
    if (good === false) missing.push(`${what}: ${text}`);
  };
  console.log("What the CRIU half needs:");
  line(
    "an NVIDIA driver with the checkpoint API",
    m.kind === "native",
    m.kind === "native" ? m.machine.driver.libraryPath : "not here (see above)",
  );
  const criu = findCriu(args.values.criu as string | undefined);
  line("criu", criu.path !== undefined, criu.version ?? "not found");
  const root = process.getuid?.() === 0;
  line("root", root, root ? "uid 0" : "criu dump and restore need root");
  if (criu.path && root) {
    const check = await run(criu.path, ["check"], 60_000);
    const said = lastLine(check.out) || `exit status ${check.code}`;
    line("kernel support (criu check)", check.code === 0, said);
  } else {
    line("kernel support (criu check)", undefined, "not checked without criu and root");
  }
  return missing;
}

/** The CRIU half, between suspend and resume: dump the counter, and restore it. */
interface CriuHalf {
  dump(): Promise<string>;
  restore(proc: CudaProcess): Promise<string>;
}

/**
 * NVIDIA's workflow on a counter whose integer is in the GPU memory of process `pid`: ask, suspend,
 * (the CRIU half, or a line saying it is skipped), resume, ask again.
 */
async function workflow(
  m: ExampleMachine,
  addr: CounterAddress,
  pid: number,
  criu: CriuHalf | undefined,
): Promise<boolean> {
  const first = await askCounter(addr);
  step(`Asked it: ${first}`);
  let proc = new CudaProcess(pid, { machine: m.machine });
  const memory = async () => describeMemory(await m.gpuMemory([pid]), pid);
  step(`GPU memory it holds: ${await memory()}`);
  let t = m.now();
  await proc.suspend();
  step(`Suspended its CUDA state (lock + checkpoint): ${sec(m.now() - t)}, ${await proc.state()}`);
  step(`GPU memory it holds now: ${await memory()}`);
  step(criu ? await criu.dump() : "criu dump: SKIPPED");
  if (criu) {
    // The process criu restores has the pid, but to the kernel it is a new process (a new start
    // time), and a handle refuses to act on a process other than the one it was made for: a new
    // handle for it.
    await proc.close();
    proc = new CudaProcess(pid, { machine: m.machine });
  }
  step(criu ? await criu.restore(proc) : "criu restore: SKIPPED");
  t = m.now();
  await proc.resume();
  step(
    `Resumed its CUDA state (restore + unlock): ${sec(m.now() - t)}, ${await proc.state()}; ` +
      `GPU memory ${await memory()}`,
  );
  const second = await askCounter(addr);
  step(`Asked it again: ${second}`);
  await proc.close();
  const pass = first === COUNTER_START + 1 && second === COUNTER_START + 2;
  console.log();
  if (!pass) {
    console.log(`FAIL: the counter answered ${first}, then ${second} (expected 101, then 102).`);
  } else if (criu) {
    console.log(
      `PASS: the counter answered ${first}, then ${second} after a CRIU dump and restore.`,
    );
  } else {
    console.log(
      `PASS (CUDA half only): the counter answered ${first}, then ${second} after a suspend and ` +
        `resume; the CRIU half was skipped.`,
    );
  }
  return pass;
}

/** The whole workflow: the counter as a process of its own, suspended, dumped, restored, resumed. */
async function withCriu(m: ExampleMachine, addr: CounterAddress): Promise<boolean> {
  const criu = findCriu(args.values.criu as string | undefined).path!;
  const images = (args.values["images-dir"] as string | undefined) ?? join(work, "images");
  const log = join(work, "counter.log");
  const counterFile = new URL("./counter.ts", import.meta.url).pathname;
  const counterArgs = [
    ...("unix" in addr ? ["--unix", addr.unix] : ["--port", String(addr.port)]),
    "--driver",
    "native",
  ];
  const [cmd, cmdArgs] = runtimeCommand(counterFile, counterArgs);
  // Its output goes to a file and it runs in a session of its own: criu can dump and restore a
  // process whose descriptors are files and sockets, not pipes to this program or a terminal.
  const out = openSync(log, "w");
  const child = spawn(cmd, cmdArgs, { stdio: ["ignore", out, out], detached: true });
  closeSync(out);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pid = child.pid!;
  try {
    const ready = await waitFor(
      () => /counter ready: pid (\d+)/.exec(readText(log)),
      60_000,
      exited,
    );
    if (!ready) throw new Error(`the counter did not start:\n${readText(log)}`);
    step(`Started the counter: pid ${pid} (${[cmd, ...cmdArgs].join(" ")})`);
    return await workflow(m, addr, pid, {
      async dump() {
        const dumpArgs = ["dump", "--tree", String(pid), "--images-dir", images, "--file-locks"];
        const t = m.now();
        const dump = await run(criu, [...dumpArgs, "-v2", "-o", "dump.log"], 600_000, images);
        if (dump.code !== 0) {
          throw new Error(`criu dump failed:\n${tail(join(images, "dump.log"))}`);
        }
        await exited;
        return `criu ${dumpArgs.join(" ")}: ${sec(m.now() - t)}, images ${imagesMiB(images)} ` +
          `MiB; the counter ${alive(pid) ? "is STILL RUNNING" : "is gone"}`;
      },
      async restore(proc) {
        const restoreArgs = [
          "restore",
          "--images-dir",
          images,
          "--restore-detached",
          "--file-locks",
        ];
        const t = m.now();
        const rest = await run(criu, [...restoreArgs, "-v2", "-o", "restore.log"], 600_000);
        if (rest.code !== 0) {
          throw new Error(`criu restore failed:\n${tail(join(images, "restore.log"))}`);
        }
        return `criu ${restoreArgs.join(" ")}: ${sec(m.now() - t)}; pid ${pid} ${
          alive(pid) ? "is back" : "is NOT back"
        }, its CUDA state ${await proc.state()}`;
      },
    });
  } finally {
    if (alive(pid)) process.kill(pid, "SIGTERM");
    await waitFor(() => !alive(pid) || undefined, 5_000);
    if (alive(pid)) process.kill(pid, "SIGKILL");
  }
}

/** The CUDA half alone: the counter inside this program, on whatever driver the machine has. */
async function cudaHalfOnly(
  m: ExampleMachine,
  addr: CounterAddress,
  missing: string[],
): Promise<boolean> {
  console.log(
    `The CRIU half is SKIPPED: it needs ${missing.map((s) => s.split(":")[0]).join(" and ")}.`,
  );
  console.log("Running the CUDA half alone, with the counter inside this program:");
  console.log();
  const gpu = await counterGpu(m);
  const server = await serveCounter(gpu, addr);
  try {
    step(
      `Started the counter: ${server.address}, its integer in process ${gpu.pid} (${gpu.where})`,
    );
    const pass = await workflow(m, addr, gpu.pid, undefined);
    for (const why of missing) console.log(`  skipped because ${why}`);
    return pass;
  } finally {
    await server.close();
    gpu.close();
  }
}

/** `--criu`, else `criu` on PATH or in the usual sbin folders; with its version. */
function findCriu(given: string | undefined): Criu {
  const dirs = (process.env.PATH ?? "").split(delimiter).filter((d) => d !== "");
  const candidates = given !== undefined
    ? [given]
    : [...dirs, "/usr/sbin", "/usr/local/sbin", "/sbin"].map((d) => join(d, "criu"));
  const path = candidates.find((p) => {
    try {
      return statSync(p).isFile();
    } catch {
      return false;
    }
  });
  if (path === undefined) {
    return given === undefined ? {} : { version: `${given}: no such file` };
  }
  try {
    const said = execFileSync(path, ["--version"], { encoding: "utf8", timeout: 10_000 });
    return { path, version: `${path} (${said.trim().split("\n")[0]})` };
  } catch (error) {
    return { version: `${path} does not run: ${messageOf(error).split("\n")[0]}` };
  }
}

/** Runs a program with an argument array; resolves its exit status and output (never rejects). */
function run(
  file: string,
  argv: readonly string[],
  timeoutMs: number,
  cwd?: string,
): Promise<{ code: number; out: string }> {
  if (cwd) mkdirSync(cwd, { recursive: true });
  return new Promise((resolve) => {
    execFile(file, [...argv], { timeout: timeoutMs, cwd }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
      resolve({
        code,
        out: `${stdout}${stderr}${error && code === 1 ? `\n${error.message}` : ""}`,
      });
    });
  });
}

function lastLine(text: string): string {
  return text.trim().split("\n").pop() ?? "";
}

function tail(path: string): string {
  return readText(path).trim().split("\n").slice(-15).join("\n");
}

function imagesMiB(dir: string): number {
  let bytes = 0;
  for (const name of readdirSync(dir)) bytes += statSync(join(dir, name)).size;
  return Math.round(bytes / 2 ** 20);
}

function sec(msValue: number): string {
  return msValue >= 1000 ? `${(msValue / 1000).toFixed(2)} s` : `${Math.round(msValue)} ms`;
}
