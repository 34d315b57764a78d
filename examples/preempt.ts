/**
 * Preemption with the group operations: a low-priority job (several processes, each training
 * step by step on the GPU) is suspended all at once, which frees its GPU memory; a high-priority
 * job runs in that memory; then the low-priority job is resumed and carries on from the step it
 * was at, its data intact.
 *
 *   npx deno run -A examples/preempt.ts [--low-processes 2] [--low-mib 4096] [--high-mib 16384]
 *   npx bun examples/preempt.ts
 *
 * On a GPU machine the jobs are processes of this program (`--job low|high`: a CUDA context, a
 * buffer filled by a kernel, and, for the low-priority job, a step counter in GPU memory that a
 * kernel increments every --step-ms); the GPU memory freed is what NVML reports. Without a usable
 * NVIDIA driver the jobs are simulated processes on a simulated H200 that an inference server
 * (left running) fills so far that the high-priority job does not fit until the other is
 * suspended. Exits 1 when a step fails or a job did not carry on where it was.
 */

import process from "node:process";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { type GroupResult, listGpus, type ProcessOutcome, runGroup } from "../mod.ts";
import { openMachine } from "../driver.ts";
import type { StepRecord } from "../types.ts";
import { openCudaContext } from "./cuda.ts";
import type { SimulatedMachine, SimulatedProcess } from "../mock/mod.ts";
import { fillOnGpu, fillPattern, fillSimulated, loadKernels } from "./_kernels.ts";
import {
  type ExampleMachine,
  type ExampleSpec,
  intOption,
  type MemoryByGpu,
  messageOf,
  ms,
  openExampleMachine,
  parseExampleArgs,
  runtimeCommand,
  table,
  totalMiB,
  usageError,
} from "./_support.ts";
import { MAX_TIMER_MS } from "../core/options.ts";

const SPEC: ExampleSpec = {
  file: "preempt.ts",
  about: `
Preempts a low-priority job to run a high-priority one: suspends all of the low-priority job's
processes at once (all or nothing, with a deadline), reports the GPU memory freed and the time,
runs the high-priority job in that memory, resumes the low-priority job and shows that it
carries on from where it was.`,
  options: {
    "low-processes": {
      type: "string",
      value: "N",
      default: "2",
      help: "processes of the low-priority job",
    },
    "low-mib": { type: "string", value: "N", default: "4096", help: "GPU memory of each, in MiB" },
    "high-mib": {
      type: "string",
      value: "N",
      default: "16384",
      help: "GPU memory the high-priority job needs, in MiB",
    },
    "step-ms": {
      type: "string",
      value: "MS",
      default: "100",
      help: "time between the low-priority job's steps",
    },
    "deadline-ms": {
      type: "string",
      value: "MS",
      default: "60000",
      help: "deadline for suspending the whole job",
    },
    device: { type: "string", value: "N", default: "0", help: "the GPU (its ordinal)" },
    job: {
      type: "string",
      value: "low|high",
      help: "(used by preempt.ts itself on a GPU) be one process of a job",
    },
  },
};

/** Bytes of each job's buffer checked against the host's computation of the pattern. */
const CHECK_BYTES = 16 << 20;
/** On the simulator, where a job's pattern starts in its memory (its step counter is at 0). */
const PATTERN_AT = 4096;

/** One process of the low-priority job, as the preempting program follows it. */
interface Worker {
  readonly pid: number;
  readonly command: string;
  /** Every step it reported, in order (a step is the count of steps it made). */
  readonly steps: number[];
  /** Stops it; resolves whether the start of its buffer is still what the kernel wrote. */
  stop(): Promise<boolean>;
}

/** What the high-priority job did. */
interface HighRun {
  readonly ms: number;
  readonly text: string;
  readonly ok: boolean;
}

const args = parseExampleArgs(SPEC);
const lowCount = intOption(SPEC, args, "low-processes", 1, 64);
const lowMiB = intOption(SPEC, args, "low-mib", 1, 1 << 20);
const highMiB = intOption(SPEC, args, "high-mib", 1, 1 << 20);
const stepMs = intOption(SPEC, args, "step-ms", 1, 60_000);
const deadlineMs = intOption(SPEC, args, "deadline-ms", 1, MAX_TIMER_MS);
const device = intOption(SPEC, args, "device", 0, 1023);

if (args.values.job !== undefined) {
  await runJob(args.values.job as string);
} else {
  process.exitCode = await preempt() ? 0 : 1;
}

async function preempt(): Promise<boolean> {
  const here = await openExampleMachine(SPEC, args, {
    what: "the jobs are simulated processes on a simulated H200, with an inference server",
  });
  const workers: Worker[] = [];
  try {
    const sim = here.kind === "simulated" ? here.machine : undefined;
    const gpus = await listGpus({ machine: here.machine }), gpu = gpus[device];
    const count = `${gpus.length} GPU${gpus.length === 1 ? "" : "s"}`;
    if (!gpu) usageError(SPEC, `--device ${device}: this machine has ${count}`);
    const sized = sim?.gpus[device];
    if (sized && highMiB + sized.contextMiB > sized.memoryMiB) {
      const all = `GPU ${device} has ${sized.memoryMiB} MiB in all, and a CUDA context takes ` +
        `${sized.contextMiB} MiB of it`;
      usageError(SPEC, `--high-mib ${highMiB}: ${all}: the job would not fit on an empty GPU`);
    }
    console.log(`GPU ${device}: ${gpu.name} ${gpu.uuid}`);
    if (sim) fillWithOtherWork(sim);
    for (let rank = 0; rank < lowCount; rank++) {
      workers.push(sim ? simulatedWorker(sim, rank) : await nativeWorker(rank));
    }
    console.log(
      `Low-priority job: ${lowCount} process(es) of ${lowMiB} MiB (pids ${
        workers.map((w) => w.pid).join(", ")
      }), one training step every ${stepMs} ms.`,
    );
    await Promise.all(workers.map((w) => untilSteps(here, w, 3)));
    if (sim) {
      const free = sim.gpus[device].freeMiB;
      const fits = free >= highMiB + sim.gpus[device].contextMiB;
      console.log(
        `High-priority job arrives: it needs ${highMiB} MiB; GPU ${device} has ${free} MiB free: ${
          fits ? "it would fit" : "it does not fit"
        }.`,
      );
    } else {
      console.log(`High-priority job arrives: it needs ${highMiB} MiB.`);
    }
    console.log();

    const pids = workers.map((w) => w.pid);
    const before = await here.gpuMemory(pids);
    console.log(
      `Preempting the low-priority job: runGroup("suspend") of ${pids.length} processes, all or ` +
        `nothing, deadline ${deadlineMs} ms.`,
    );
    const suspended = await runGroup("suspend", pids, {
      machine: here.machine,
      allOrNothing: true,
      timeoutMs: deadlineMs,
    });
    const stepsAtPreemption = workers.map(lastStep);
    const seenAtPreemption = workers.map((w) => w.steps.length);
    const during = await here.gpuMemory(pids);
    printOutcomes(suspended, workers, before, ["lock", "checkpoint"]);
    if (!suspended.ok) {
      console.log(
        `FAIL: the job could not be suspended${suspended.rolledBack ? " (rolled back)" : ""}.`,
      );
      return false;
    }
    const freed = typeof before === "string" || typeof during === "string"
      ? "unknown (NVML could not tell)"
      : `${sum(before, pids) - sum(during, pids)} MiB`;
    console.log(
      `Suspended ${pids.length} processes in ${ms(suspended.ms)} ms (all at once); GPU memory ` +
        `freed: ${freed}. Steps they were at: ${stepsAtPreemption.join(", ")}.`,
    );
    console.log();

    const high = sim ? await simulatedHighJob(sim) : await nativeHighJob();
    console.log(`High-priority job: ${high.text} (${ms(high.ms)} ms).`);
    console.log();

    const madeWhileSuspended = workers.map((w, i) => w.steps.length - seenAtPreemption[i]);
    const seenAtResume = workers.map((w) => w.steps.length);
    console.log('Resuming the low-priority job: runGroup("resume").');
    // The deadline is the preemption's: a resume that ran past it would be rolled back, which
    // suspends the job again.
    const resumed = await runGroup("resume", pids, { machine: here.machine, allOrNothing: true });
    const after = await here.gpuMemory(pids);
    printOutcomes(resumed, workers, after, ["restore", "unlock"]);
    if (!resumed.ok) {
      console.log("FAIL: the job could not be resumed.");
      return false;
    }
    console.log(`Resumed ${pids.length} processes in ${ms(resumed.ms)} ms.`);
    await Promise.all(workers.map((w, i) => untilSteps(here, w, seenAtResume[i] + 1)));
    const firstAfter = workers.map((w, i) => w.steps[seenAtResume[i]]);
    const frozen = madeWhileSuspended.every((n) => n === 0);
    const carriedOn = frozen && firstAfter.every((s, i) => s === stepsAtPreemption[i] + 1);
    console.log(
      frozen
        ? "While suspended, they made no step."
        : `While suspended, they made ${madeWhileSuspended.join(", ")} steps (NOT frozen).`,
    );
    const sameMemory = typeof before === "string" || typeof after === "string" ||
      pids.every((pid) => totalMiB(before.get(pid)) === totalMiB(after.get(pid)));
    console.log(
      `Each process carried on from its step: ${
        workers.map((_, i) => `${stepsAtPreemption[i]} -> ${firstAfter[i]}`).join(", ")
      }${carriedOn ? "" : " (NOT where they were)"}; GPU memory ${
        sameMemory ? "back as before" : "NOT as before"
      }.`,
    );
    const intact = await Promise.all(workers.splice(0).map((w) => w.stop()));
    console.log(
      `Their data (the first ${Math.min(CHECK_BYTES >> 20, lowMiB)} MiB of each buffer): ${
        intact.every(Boolean) ? "intact" : "CHANGED"
      }.`,
    );
    console.log();
    const pass = carriedOn && sameMemory && intact.every(Boolean) && high.ok;
    console.log(
      pass
        ? "PASS: the low-priority job was preempted, the high-priority job ran in its memory, " +
          "and the low-priority job carried on where it was."
        : "FAIL: see above.",
    );
    return pass;
  } catch (error) {
    console.log(`FAIL: ${messageOf(error)}`);
    return false;
  } finally {
    await Promise.all(workers.map((w) => w.stop().catch(() => false)));
    await here.close();
  }
}

function printOutcomes(
  result: GroupResult,
  workers: readonly Worker[],
  memory: Map<number, MemoryByGpu> | string,
  steps: readonly StepRecord["step"][],
): void {
  const stepMs = (p: ProcessOutcome, name: string) => {
    const s = p.steps.find((r) => r.step === name);
    return s ? ms(s.ms) : "-";
  };
  console.log(table(
    [
      { title: "pid" },
      { title: "command" },
      { title: "GPU memory" },
      ...steps.map((s) => ({ title: `${s} (ms)`, align: "right" as const })),
      { title: "result" },
    ],
    result.processes.map((p) => [
      String(p.pid),
      workers.find((w) => w.pid === p.pid)?.command ?? "",
      typeof memory === "string" ? "unknown" : `${totalMiB(memory.get(p.pid))} MiB`,
      ...steps.map((s) => stepMs(p, s)),
      `${p.status}, ${p.state ?? "?"}${p.error ? `: ${p.error.message}` : ""}`,
    ]),
  ));
}

function sum(memory: Map<number, MemoryByGpu>, pids: readonly number[]): number {
  return pids.reduce((a, pid) => a + totalMiB(memory.get(pid)), 0);
}

/** The last step a worker reported (0 before its first). */
function lastStep(w: Worker): number {
  return w.steps.at(-1) ?? 0;
}

/** Waits (on the machine's clock) until a worker has reported `n` steps since it started. */
async function untilSteps(m: ExampleMachine, w: Worker, n: number): Promise<void> {
  const end = m.now() + 60_000;
  while (w.steps.length < n) {
    if (m.now() > end) {
      throw new Error(`process ${w.pid} made no step for a minute (at step ${lastStep(w)})`);
    }
    await m.sleep(Math.max(5, stepMs / 4));
  }
}

/**
 * On the simulator: another team's inference server, left running, that fills the GPU so far
 * that the high-priority job fits only once the low-priority job is suspended.
 */
function fillWithOtherWork(sim: SimulatedMachine): void {
  const gpu = sim.gpus[device];
  const lowAll = lowCount * (lowMiB + gpu.contextMiB);
  const highAll = highMiB + gpu.contextMiB;
  const wantedFree = Math.max(0, highAll - Math.ceil(lowAll / 2));
  const other = gpu.freeMiB - lowAll - wantedFree - gpu.contextMiB;
  if (other <= 0) return;
  const server = sim.spawn({ memoryMiB: other, gpu: device, command: "vllm serve (another team)" });
  const holds = `${other + gpu.contextMiB} MiB (its CUDA context's ${gpu.contextMiB} included)`;
  console.log(
    `Also on the GPU: an inference server (pid ${server.pid}) holding ${holds}, left running.`,
  );
}

function simulatedWorker(sim: SimulatedMachine, rank: number): Worker {
  const command = `train.py --rank ${rank} (simulated)`;
  const target = sim.spawn({ memoryMiB: lowMiB, gpu: device, command });
  const length = Math.min(CHECK_BYTES, lowMiB * 2 ** 20 - PATTERN_AT);
  const pattern = fillPattern(target.pid, 0, length - (length % 4));
  let stopped = false;
  const worker: Worker = {
    pid: target.pid,
    command,
    steps: [],
    async stop() {
      stopped = true;
      await loop;
      if (target.exited) return false;
      const back = await target.read(PATTERN_AT, pattern.length);
      target.exit();
      return back.every((b, i) => b === pattern[i]);
    },
  };
  // The training loop: a kernel per step, then the step counter (bytes 0-3) copied back and up.
  const loop = (async () => {
    await fillSimulated(target, target.pid, pattern.length, PATTERN_AT);
    while (!stopped) {
      await target.launch(stepMs);
      const bytes = await target.read(0, 4);
      const view = new DataView(bytes.buffer, bytes.byteOffset);
      view.setUint32(0, view.getUint32(0, true) + 1, true);
      await target.write(0, bytes);
      worker.steps.push(view.getUint32(0, true));
    }
  })().catch(() => {});
  return worker;
}

async function simulatedHighJob(sim: SimulatedMachine): Promise<HighRun> {
  const start = sim.now();
  let target: SimulatedProcess;
  try {
    target = sim.spawn({ memoryMiB: highMiB, gpu: device, command: "high-priority job" });
  } catch (error) {
    return { ms: 0, ok: false, text: `could not start: ${messageOf(error)}` };
  }
  await target.launch(1000);
  target.exit();
  return {
    ms: sim.now() - start,
    ok: true,
    text: `${highMiB} MiB on GPU ${device}, a 1 s kernel, done; its memory given back`,
  };
}

/** A process of the low-priority job on the GPU: this program with `--job low`. */
async function nativeWorker(rank: number): Promise<Worker> {
  const child = jobProcess("low", lowMiB);
  const command = `preempt.ts --job low (rank ${rank})`;
  const lines = createInterface({ input: child.stdout! });
  let checked: (ok: boolean) => void;
  const check = new Promise<boolean>((resolve) => checked = resolve);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const ready = new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`job process exited (${code}) before ready`)));
    lines.on("line", (line) => {
      const [word, value] = line.split(" ");
      if (word === "ready") resolve();
      else if (word === "step") worker.steps.push(Number(value));
      else if (word === "check") checked(value === "intact");
    });
  });
  const worker: Worker = {
    pid: child.pid!,
    command,
    steps: [],
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return false;
      child.stdin!.end("stop\n");
      const ok = await Promise.race([check, exited.then(() => false)]);
      await exited;
      return ok;
    },
  };
  await ready;
  return worker;
}

async function nativeHighJob(): Promise<HighRun> {
  const start = performance.now();
  const child = jobProcess("high", highMiB);
  let said = "";
  createInterface({ input: child.stdout! }).on("line", (line) => said = line);
  const code = await new Promise<number | string | null>((resolve) =>
    child.once("exit", (status, signal) => resolve(status ?? signal))
  );
  const ok = code === 0 && said.startsWith("done");
  return {
    ms: performance.now() - start,
    ok,
    text: ok ? said.replace(/^done /, "") : `FAILED (exit ${code}): ${said || "it said nothing"}`,
  };
}

function jobProcess(kind: "low" | "high", mib: number) {
  const [cmd, argv] = runtimeCommand(new URL(import.meta.url).pathname, [
    "--job",
    kind,
    ...(kind === "low" ? ["--low-mib"] : ["--high-mib"]),
    String(mib),
    "--step-ms",
    String(stepMs),
    "--device",
    String(device),
  ]);
  return spawn(cmd, argv, { stdio: ["pipe", "pipe", "inherit"] });
}

/**
 * `--job low|high`: one process of a job, on the GPU. Both fill a buffer with the kernel (the
 * pattern seeded by the pid). `low` then prints `ready`, and `step N` after each step (the
 * `increment` kernel on a counter in GPU memory, copied back), until it reads `stop`; then it
 * checks the start of its buffer against the host's computation and prints `check intact` (or
 * `check changed`). `high` checks the same at once, prints `done ...` and exits. Every CUDA call
 * runs on the main thread: while the preempting program has this process locked, the next one
 * blocks, and the loop stops there until the process is resumed.
 */
async function runJob(kind: string): Promise<void> {
  if (kind !== "low" && kind !== "high") {
    console.error(`preempt.ts: --job must be low or high, got ${JSON.stringify(kind)}`);
    process.exit(2);
  }
  const mib = kind === "low" ? lowMiB : highMiB;
  const machine = await openMachine().catch((err) => {
    // A worker of the GPU run, started by this program: without a driver it has no work.
    usageError(SPEC, `--job ${kind} runs one process of a job on a GPU: ${messageOf(err)}`);
  });
  const ctx = await openCudaContext({ driver: machine.driver, device });
  const freeAtStart = ctx.memoryInfo().freeBytes;
  const start = performance.now();
  const buffer = ctx.alloc(mib * 2 ** 20);
  const counter = ctx.alloc(4);
  ctx.upload(counter, new Uint8Array(4));
  const kernels = loadKernels(ctx);
  fillOnGpu(ctx, kernels, buffer, process.pid);
  const length = Math.min(CHECK_BYTES, buffer.bytes);
  const check = () => {
    const back = ctx.download(buffer, 0, length);
    const want = fillPattern(process.pid, 0, length);
    return back.every((b, i) => b === want[i]);
  };
  if (kind === "high") {
    const ok = check();
    console.log(
      `done ${mib} MiB on GPU ${device} (${
        Math.round(freeAtStart / 2 ** 20)
      } MiB were free when it started), filled and checked in ${
        Math.round(performance.now() - start)
      } ms${ok ? "" : ", DATA WRONG"}`,
    );
    ctx.close();
    await machine.close();
    process.exit(ok ? 0 : 1);
  }
  console.log(`ready ${process.pid}`);
  const timer = setInterval(() => {
    ctx.launch(kernels.increment, 1, 1, [{ u64: counter }]);
    const bytes = ctx.download(counter, 0, 4);
    console.log(`step ${new DataView(bytes.buffer).getUint32(0, true)}`);
  }, stepMs);
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (text) => {
    if (!String(text).includes("stop")) return;
    clearInterval(timer);
    console.log(`check ${check() ? "intact" : "changed"}`);
    ctx.close();
    machine.driver.close();
    process.exit(0);
  });
}
