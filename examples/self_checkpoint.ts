/**
 * A process checkpoints itself and shows that its GPU memory survives: the four steps of the
 * CUDA checkpoint API (lock, checkpoint, restore, unlock), each with its time and the state it
 * leaves the process in, the GPU memory the process holds before, while checkpointed (none: the
 * GPU is released) and after, and a hash of its GPU buffer before and after (the chunked SHA-256
 * of _chunked_sha256.ts, which the simulator keeps cheaply).
 *
 *   npx deno run -A examples/self_checkpoint.ts [--buffer-mib 16] [--device 0] [--json]
 *   npx bun examples/self_checkpoint.ts --buffer-mib 4096
 *
 * On a machine with an NVIDIA driver (570 or later) the program is a CUDA program itself: it
 * allocates the buffer, fills it with a small kernel (PTX text, compiled by the driver: no CUDA
 * compiler needed), copies it back and hashes it, then checkpoints and restores its own process.
 * Elsewhere it says so in its first lines and runs the same steps against a simulated process on
 * the simulated driver, with the real driver's times. Exits 1 when the hash changed (FAIL).
 */

import process from "node:process";
import { CudaProcess, type ProcessState } from "../mod.ts";
import { type CudaContext, type DeviceBuffer, openCudaContext } from "./cuda.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import {
  DEFAULT_SEED,
  fillOnGpu,
  fillPattern,
  fillSimulated,
  hashOnGpu,
  loadKernels,
} from "./_kernels.ts";
import {
  describeMemory,
  type ExampleMachine,
  type ExampleSpec,
  intOption,
  messageOf,
  ms,
  type NativeExampleMachine,
  openExampleMachine,
  parseExampleArgs,
  runtimeName,
  shortHash,
  simulatedComputeCapability,
  spawnBuffer,
  table,
  usageError,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "self_checkpoint.ts",
  about: `
A process checkpoints itself: it fills a GPU buffer with a kernel, hashes it, then locks,
checkpoints, restores and unlocks its own CUDA state, printing each step's time and the state
after it, and checks that the buffer's hash (a chunked SHA-256) is unchanged (PASS, else FAIL
and exit 1). Without a usable NVIDIA driver it runs on the simulated driver, and says so first.`,
  json: true,
  options: {
    "buffer-mib": { type: "string", value: "N", default: "16", help: "GPU buffer size in MiB" },
    device: { type: "string", value: "N", default: "0", help: "the GPU to use (its ordinal)" },
    "lock-timeout-ms": {
      type: "string",
      value: "MS",
      default: "5000",
      help: "lock timeout in ms; 0 waits forever",
    },
  },
};

/** How many bytes of the buffer are compared with the host's computation of the pattern. */
const HOST_CHECK_BYTES = 1 << 20;

/** The process the cycle runs on, and its buffer: this process, or a simulated one. */
interface Subject {
  readonly pid: number;
  readonly simulated: boolean;
  readonly device: { ordinal: number; name: string; uuid: string; computeCapability: string };
  /** Fills the buffer (the kernel) and says how it did it. */
  fill(): Promise<string>;
  /** Compares the start of the buffer with the host's computation of the pattern. */
  checkAgainstHost(): Promise<boolean>;
  /** The chunked SHA-256 of the whole buffer, as hex (`ChunkedSha256`). */
  hash(): Promise<string>;
  close(): void;
}

const args = parseExampleArgs(SPEC);
const bufferMiB = intOption(SPEC, args, "buffer-mib", 1, 1 << 20);
const deviceOrdinal = intOption(SPEC, args, "device", 0, 1023);
const lockTimeoutMs = intOption(SPEC, args, "lock-timeout-ms", 0, 2 ** 32 - 1);
const seed = DEFAULT_SEED;
const bytes = bufferMiB * 2 ** 20;
const say = args.json ? () => {} : (line = "") => console.log(line);

const here = await openExampleMachine(SPEC, args, {
  what: "a simulated process holds the buffer on a simulated H200",
});

let subject: Subject;
try {
  subject = here.kind === "native" ? await nativeSubject(here) : simulatedSubject(here.machine);
} catch (error) {
  console.error(`self_checkpoint.ts: ${messageOf(error)}`);
  await here.close();
  process.exit(1);
}

say(`[Process checkpoint example: @ckpt/cuda on ${runtimeName()}]`);
say(`PID:                ${subject.pid}${subject.simulated ? " (a simulated process)" : ""}`);
say(
  `Device:             ${subject.device.name} (GPU ${subject.device.ordinal}, ${subject.device.uuid})`,
);
say(`Compute capability: ${subject.device.computeCapability}`);
say(`Buffer size:        ${bufferMiB} MiB`);
say(`Lock timeout:       ${lockTimeoutMs} ms${lockTimeoutMs === 0 ? " (waits forever)" : ""}`);
say();
say(await subject.fill());
const hostCheck = await subject.checkAgainstHost();
const checked = Math.min(bytes, HOST_CHECK_BYTES);
say(
  `Kernel output against the host's computation of the pattern (first ${
    checked >= 2 ** 20 ? `${checked >> 20} MiB` : `${checked >> 10} KiB`
  }): ${hostCheck ? "identical" : "DIFFERENT"}`,
);
if (subject.simulated && bufferMiB >= 1024) {
  // Seconds of the host's own work that a GPU would do on the GPU.
  say(`Making and hashing the simulated buffer's ${bufferMiB} MiB on this host's CPU ...`);
}
const hashBefore = await subject.hash();
say(`Buffer hash (before): ${shortHash(hashBefore)}`);
const memoryBefore = await here.gpuMemory([subject.pid]);
say(
  `GPU memory this process holds: ${describeMemory(memoryBefore, subject.pid)}${
    typeof memoryBefore === "string" ? ` (${memoryBefore.split(";")[0]})` : ""
  }`,
);
say();
say(`Running the checkpoint cycle on process ${subject.pid} ...`);
say();

const proc = new CudaProcess(subject.pid, { machine: here.machine });
const steps: { step: string; ms: number; state: ProcessState }[] = [];
let memoryCheckpointed: Awaited<ReturnType<ExampleMachine["gpuMemory"]>> = "not read";
let restoreThreadId: number | undefined;
let failure: string | undefined;
const initial = await proc.state();
const cycle: [string, () => Promise<unknown>][] = [
  ["lock", () => proc.lock({ timeoutMs: lockTimeoutMs })],
  ["checkpoint", () => proc.checkpoint()],
  ["restore", () => proc.restore()],
  ["unlock", () => proc.unlock()],
];
for (const [step, run] of cycle) {
  const start = here.now();
  try {
    await run();
  } catch (error) {
    failure = `${step} failed: ${messageOf(error)}`;
    break;
  }
  const took = here.now() - start;
  steps.push({ step, ms: took, state: await proc.state() });
  if (step === "checkpoint") {
    // While checkpointed, the process holds no GPU memory: the driver copied it to host memory.
    // Asked by a child process: this one, checkpointed, cannot ask NVML itself (it would wait for
    // its own restore).
    memoryCheckpointed = await here.gpuMemoryFromOutside([subject.pid]);
    restoreThreadId = await proc.restoreThreadId();
  }
}
if (failure) await backToRunning(proc);
const totalMs = steps.reduce((sum, s) => sum + s.ms, 0);
say(table(
  [
    { title: "step" },
    { title: "duration (ms)", align: "right" },
    { title: "state after" },
  ],
  [["initial", "-", initial], ...steps.map((s) => [s.step, ms(s.ms), s.state])],
  [["total", ms(totalMs), ""]],
));
say();

const memoryAfter = await here.gpuMemory([subject.pid]);
const hashAfter = failure ? "" : await subject.hash();
const pass = !failure && hostCheck && hashAfter === hashBefore &&
  steps.map((s) => s.state).join(",") === "locked,checkpointed,locked,running";
subject.close();
say(
  `GPU memory this process holds: ${describeMemory(memoryBefore, subject.pid)} before, ${
    describeMemory(memoryCheckpointed, subject.pid)
  } while checkpointed, ${describeMemory(memoryAfter, subject.pid)} after`,
);
if (restoreThreadId !== undefined) {
  say(`Restore thread id: ${restoreThreadId} (what CRIU's CUDA plugin asks the driver for)`);
}
say(`Buffer hash (before): ${shortHash(hashBefore)}`);
if (!failure) say(`Buffer hash (after):  ${shortHash(hashAfter)}`);
if (failure) {
  say(`FAIL: ${failure}`);
} else if (pass) {
  say("PASS: GPU buffer contents survived checkpoint/restore.");
} else {
  say("FAIL: the GPU buffer changed across checkpoint/restore (or the kernel wrote wrong data).");
}

if (args.json) {
  const mib = (m: typeof memoryBefore) =>
    typeof m === "string" ? "unknown" : m.get(subject.pid) ?? {};
  console.log(JSON.stringify(
    {
      driver: here.kind,
      pid: subject.pid,
      device: subject.device,
      bufferMiB,
      lockTimeoutMs,
      seed,
      kernelMatchesHost: hostCheck,
      hashBefore,
      hashAfter: failure ? undefined : hashAfter,
      initialState: initial,
      steps,
      totalMs,
      restoreThreadId,
      gpuMemoryMiB: {
        before: mib(memoryBefore),
        checkpointed: mib(memoryCheckpointed),
        after: mib(memoryAfter),
      },
      error: failure,
      pass,
    },
    null,
    2,
  ));
}
await proc.close();
await here.close();
process.exitCode = pass ? 0 : 1;

/**
 * This very process on the GPU: its CUDA context, the buffer, and the kernel. Every CUDA call it
 * makes runs on this (the main) thread, before the lock or after the unlock: a process that has
 * locked itself cannot make CUDA calls (they would block until it is unlocked). The checkpoint
 * calls themselves run on the native driver's own threads.
 */
async function nativeSubject(here: NativeExampleMachine): Promise<Subject> {
  const ctx: CudaContext = await openCudaContext({
    driver: here.machine.driver,
    device: deviceOrdinal,
  });
  let buffer: DeviceBuffer;
  try {
    buffer = ctx.alloc(bytes);
  } catch (error) {
    ctx.close();
    throw error;
  }
  const { major, minor } = ctx.device.computeCapability;
  return {
    pid: process.pid,
    simulated: false,
    device: {
      ordinal: ctx.device.ordinal,
      name: ctx.device.name,
      uuid: ctx.device.uuid,
      computeCapability: `sm_${major}${minor}`,
    },
    fill() {
      fillOnGpu(ctx, loadKernels(ctx), buffer, seed);
      return Promise.resolve(
        `Loaded the fill kernel (PTX compiled by the driver for sm_${major}${minor}) and wrote ` +
          `a deterministic pattern to the GPU buffer (seed 0x${seed.toString(16)}).`,
      );
    },
    checkAgainstHost() {
      const length = Math.min(bytes, HOST_CHECK_BYTES);
      return Promise.resolve(
        sameBytes(ctx.download(buffer, 0, length), fillPattern(seed, 0, length)),
      );
    },
    hash: () => Promise.resolve(hashOnGpu(ctx, buffer)),
    close() {
      ctx.free(buffer);
      ctx.close();
    },
  };
}

/** A simulated process holding the buffer, given the same bytes the kernel writes on a GPU. */
function simulatedSubject(sim: SimulatedMachine): Subject {
  const gpu = sim.gpus[deviceOrdinal];
  const count = `${sim.gpus.length} GPU${sim.gpus.length === 1 ? "" : "s"}`;
  if (!gpu) usageError(SPEC, `--device ${deviceOrdinal}: the simulated machine has ${count}`);
  const target = spawnBuffer(
    sim,
    "--buffer-mib",
    bufferMiB,
    deviceOrdinal,
    "self_checkpoint.ts (simulated)",
  );
  return {
    pid: target.pid,
    simulated: true,
    device: {
      ordinal: gpu.index,
      name: gpu.name,
      uuid: gpu.uuid,
      computeCapability: simulatedComputeCapability(gpu.name),
    },
    async fill() {
      await fillSimulated(target, seed, bytes);
      return `Wrote the fill kernel's pattern into the simulated buffer (seed 0x${
        seed.toString(16)
      }; the simulator runs no PTX: it makes the bytes when they are read).`;
    },
    async checkAgainstHost() {
      const length = Math.min(bytes, HOST_CHECK_BYTES);
      return sameBytes(await target.read(0, length), fillPattern(seed, 0, length));
    },
    hash: () => target.memoryChunkedSha256(),
    close: () => target.exit(),
  };
}

/** After a failed step: unlock (and restore first) where that is possible, so the process runs. */
async function backToRunning(p: CudaProcess): Promise<void> {
  try {
    const state = await p.state();
    if (state === "checkpointed") await p.resume();
    else if (state === "locked") await p.unlock();
  } catch (error) {
    console.error(
      `self_checkpoint.ts: could not bring the process back to running: ${messageOf(error)}`,
    );
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
