/**
 * Moves a process from each GPU to the next, as NVIDIA's migration program for driver 580 does:
 * checkpoint it, then restore it with a device map that names every GPU (GPU 0 -> 1, 1 -> 2, ...,
 * last -> 0), so it comes back on the next GPU; after as many moves as there are GPUs, it is home
 * again. Each step shows where the process runs now, seen from inside (`cuCtxGetDevice`) and from
 * outside (the GPU memory NVML reports per GPU), and that its GPU buffer is unchanged.
 *
 *   npx deno run -A examples/migrate.ts [--buffer-mib 256] [--device 0]
 *   npx bun examples/migrate.ts
 *
 * On a GPU machine the process is this program itself (it checkpoints and restores its own CUDA
 * state, as the sample does); migration needs at least two GPUs of the same chip, and with one it
 * says so. Without a usable NVIDIA driver it runs a simulated process on two simulated H200s.
 * Exits 1 when a move fails or the buffer changed.
 */

import process from "node:process";
import { CudaProcess, listGpus } from "../mod.ts";
import type { GpuInfo } from "../driver.ts";
import { type CudaContext, type DeviceBuffer, openCudaContext } from "./cuda.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import { DEFAULT_SEED, fillOnGpu, fillSimulated, hashOnGpu, loadKernels } from "./_kernels.ts";
import {
  type ExampleSpec,
  intOption,
  type MemoryByGpu,
  messageOf,
  ms,
  type NativeExampleMachine,
  openExampleMachine,
  parseExampleArgs,
  shortHash,
  spawnBuffer,
  table,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "migrate.ts",
  about: `
Migrates a process around the GPUs of this machine: checkpoint, restore with a full device map
(each GPU onto the next), and show where it runs and that its GPU memory is intact, until it is
back where it started. Needs two GPUs of the same chip (on the simulator: two H200s).`,
  options: {
    "buffer-mib": { type: "string", value: "N", default: "256", help: "GPU buffer size in MiB" },
    device: { type: "string", value: "N", default: "0", help: "the GPU it starts on" },
  },
};

/** The process that moves: where it says it runs, and its buffer's hash. */
interface Mover {
  readonly pid: number;
  /** The UUID of the GPU it runs on, as it sees it itself. */
  where(): Promise<string>;
  hash(): Promise<string>;
  close(): void;
}

const args = parseExampleArgs(SPEC);
const bufferMiB = intOption(SPEC, args, "buffer-mib", 1, 1 << 20);
const home = intOption(SPEC, args, "device", 0, 1023);
const bytes = bufferMiB * 2 ** 20;

const here = await openExampleMachine(SPEC, args, {
  gpus: 2,
  what: "a simulated process with the buffer, on two simulated H200s",
});

const gpus = await listGpus({ machine: here.machine });
const start = gpus[home];
if (!start) {
  console.error(`migrate.ts: --device ${home}: this machine has ${gpus.length} GPU(s)`);
  await here.close();
  process.exit(2);
}
// The GPUs it moves around: those of the same chip as its own (a restore needs the same chip).
const ring = gpus.filter((g) => g.name === start.name);
console.log(`GPUs the driver sees: ${gpus.length}`);
for (const g of gpus) console.log(`  GPU ${g.index}: ${g.name} ${g.uuid}`);
if (ring.length < 2) {
  console.log();
  console.log(
    `Migration needs two GPUs of the same chip; this machine has ${ring.length} ${start.name}. ` +
      `Run with --driver sim to see it on two simulated H200s.`,
  );
  await here.close();
  process.exit(0);
}

let mover: Mover;
try {
  mover = here.kind === "native" ? await selfMover(here) : await simulatedMover(here.machine);
} catch (error) {
  console.error(`migrate.ts: ${messageOf(error)}`);
  await here.close();
  process.exit(1);
}
if (bufferMiB >= 4096) console.log(`Hashing the ${bufferMiB} MiB buffer (this takes a while) ...`);
const before = await mover.hash();
console.log();
console.log(
  `Process ${mover.pid}${here.kind === "simulated" ? " (simulated)" : " (this program)"}: ` +
    `${bufferMiB} MiB buffer on GPU ${home}, chunked SHA-256 ${shortHash(before)}`,
);
console.log(
  `Each move: suspend (lock + checkpoint), then resume with the device map ${
    [...ring.slice(ring.indexOf(start)), ...ring.slice(0, ring.indexOf(start))].map((g) => g.index)
      .join(" -> ")
  } -> ${start.index} (every GPU the driver sees is named).`,
);
console.log();

const proc = new CudaProcess(mover.pid, { machine: here.machine });
const rows: string[][] = [];
let where = start;
let ok = true;
let failure: string | undefined;
for (let move = 1; move <= ring.length; move++) {
  const mapping = deviceMap(gpus, ring);
  const to = gpus.find((g) => g.uuid === mapping[where.uuid])!;
  let t = here.now();
  let suspendMs = 0, resumeMs = 0;
  try {
    await proc.suspend();
    suspendMs = here.now() - t;
    t = here.now();
    await proc.resume({ gpuMapping: mapping });
    resumeMs = here.now() - t;
  } catch (error) {
    failure = `move ${move} (GPU ${where.index} -> GPU ${to.index}) failed: ${messageOf(error)}`;
    break;
  }
  const inside = await mover.where();
  const outside = await here.gpuMemory([mover.pid]);
  const hash = await mover.hash();
  const arrived = inside === to.uuid;
  ok &&= arrived && hash === before;
  rows.push([
    String(move),
    `GPU ${where.index} -> GPU ${to.index}`,
    ms(suspendMs),
    ms(resumeMs),
    `GPU ${gpus.find((g) => g.uuid === inside)?.index ?? "?"}${arrived ? "" : " (NOT MOVED)"}`,
    memoryByGpu(outside, mover.pid, gpus),
    `${shortHash(hash)}${hash === before ? "" : " CHANGED"}`,
  ]);
  where = to;
}
console.log(table(
  [
    { title: "move" },
    { title: "from -> to" },
    { title: "suspend (ms)", align: "right" },
    { title: "resume (ms)", align: "right" },
    { title: "runs on" },
    { title: "GPU memory (by GPU)" },
    { title: "buffer chunked SHA-256" },
  ],
  rows,
));
console.log();
console.log("runs on: what the process itself says (cuCtxGetDevice and its UUID; the PCI bus id");
console.log(
  "would still name the first GPU). GPU memory: what NVML reports (the simulator on it).",
);
console.log();
mover.close();
await proc.close();
await here.close();
if (failure) console.log(`FAIL: ${failure}`);
else if (ok && where.uuid === start.uuid) {
  console.log(
    `PASS: the process went round ${ring.length} GPUs and is back on GPU ${home}; its ${bufferMiB} ` +
      `MiB are intact.`,
  );
} else console.log("FAIL: the process did not land where it was sent, or its memory changed.");
process.exitCode = !failure && ok && where.uuid === start.uuid ? 0 : 1;

/** Each GPU of the ring onto the next one, every other GPU onto itself: a full device map. */
function deviceMap(all: readonly GpuInfo[], around: readonly GpuInfo[]): Record<string, string> {
  const map: Record<string, string> = {};
  for (const g of all) map[g.uuid] = g.uuid;
  around.forEach((g, i) => map[g.uuid] = around[(i + 1) % around.length].uuid);
  return map;
}

function memoryByGpu(
  memory: Map<number, MemoryByGpu> | string,
  pid: number,
  all: readonly GpuInfo[],
): string {
  if (typeof memory === "string") return "unknown";
  const held = Object.entries(memory.get(pid) ?? {});
  if (held.length === 0) return "none";
  return held.map(([uuid, mib]) =>
    `GPU ${all.find((g) => g.uuid === uuid)?.index ?? uuid}: ${mib} MiB`
  ).join(", ");
}

/**
 * This program on the GPU: a context on the home GPU, a buffer filled by the kernel. Its CUDA
 * calls run on this thread between moves only, never while it is locked or checkpointed.
 */
async function selfMover(m: NativeExampleMachine): Promise<Mover> {
  const ctx: CudaContext = await openCudaContext({ driver: m.machine.driver, device: home });
  const buffer: DeviceBuffer = ctx.alloc(bytes);
  fillOnGpu(ctx, loadKernels(ctx), buffer, DEFAULT_SEED);
  return {
    pid: process.pid,
    where: () => Promise.resolve(ctx.currentDevice().uuid),
    hash: () => Promise.resolve(hashOnGpu(ctx, buffer)),
    close() {
      ctx.free(buffer);
      ctx.close();
    },
  };
}

/** A simulated process holding the same bytes. */
async function simulatedMover(sim: SimulatedMachine): Promise<Mover> {
  const target = spawnBuffer(sim, "--buffer-mib", bufferMiB, home, "migrate.ts (simulated)");
  await fillSimulated(target, DEFAULT_SEED, bytes);
  return {
    pid: target.pid,
    where: () => Promise.resolve(target.gpuUuids[0]),
    hash: () => target.memoryChunkedSha256(),
    close: () => target.exit(),
  };
}
