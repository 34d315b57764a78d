// The GPUs of the simulated machine: what each is, and how much of its memory is held.

import { checkAmount, checkInteger, checkKeys, checkName, mustBe, or } from "../core/options.ts";
import { formatGpuUuid, parseGpuUuid } from "../core/options.ts";
import { CONTEXT_MIB } from "./timing.ts";

/** A GPU of the simulated machine, as given to `SimulatedMachine`'s constructor. */
export interface SimulatedGpuSpec {
  /** The chip's name (a restore elsewhere needs the same; it picks the timing). Default an H200. */
  name?: string;
  /** Its memory in MiB. Default 143771 (an H200's), or 81559 for an H100. */
  memoryMiB?: number;
  /** Its UUID (`GPU-…`); made up from the machine's seed when left out. */
  uuid?: string;
  /** GPU memory each process's CUDA context takes on it, in MiB. Default 520, as measured. */
  contextMiB?: number;
}

/** Default memory by chip, in MiB, as nvidia-smi reports it. */
const CHIP_MEMORY_MIB: Readonly<Record<string, number>> = {
  "NVIDIA H200": 143771,
  "NVIDIA H100 80GB HBM3": 81559,
};

/** A GPU of the simulated machine. */
export class SimulatedGpu {
  /** Its index, as `nvidia-smi` numbers it. */
  readonly index: number;
  /** Its chip name. */
  readonly name: string;
  /** Its UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  readonly uuid: string;
  /** Its memory in MiB. */
  readonly memoryMiB: number;
  /** GPU memory a CUDA context takes on it, per process, in MiB. */
  readonly contextMiB: number;
  #usedMiB = 0;

  /** @internal made by `SimulatedMachine`, with a UUID in its one form */
  constructor(index: number, name: string, uuid: string, memoryMiB: number, contextMiB: number) {
    [this.index, this.name, this.uuid] = [index, name, uuid];
    [this.memoryMiB, this.contextMiB] = [memoryMiB, contextMiB];
  }

  /** GPU memory held by processes (and restores under way), contexts included, in MiB. */
  get usedMiB(): number {
    return this.#usedMiB;
  }

  /** Free GPU memory in MiB. */
  get freeMiB(): number {
    return this.memoryMiB - this.#usedMiB;
  }

  /** @internal holds `mib` MiB more (less where negative, never below none) */
  hold(mib: number): void {
    this.#usedMiB = Math.max(0, this.#usedMiB + mib);
  }
}

/** The GPUs of a simulated machine's `gpus` option, UUIDs made up from `seed` if not given. */
export function makeGpus(
  gpus: number | readonly SimulatedGpuSpec[] | undefined,
  seed: number,
): SimulatedGpu[] {
  const many = gpus === undefined || typeof gpus === "number";
  if (!many && (!Array.isArray(gpus) || gpus.length === 0)) {
    mustBe(TypeError, "gpus", "a number of GPUs or a non-empty array of GPU specs", gpus);
  }
  const count = typeof gpus === "number" ? checkInteger(gpus, "gpus (how many)", 1, 1024) : 1;
  const specs = Array.isArray(gpus) ? [...gpus] : Array.from({ length: count }, () => ({}));
  const made = specs.map((spec: SimulatedGpuSpec, i) => {
    const what = `gpus[${i}]`;
    const s = checkKeys(spec, what, ["name", "memoryMiB", "uuid", "contextMiB"]);
    const name = s.name === undefined ? "NVIDIA H200" : checkName(s.name, `${what}.name`);
    const chipMiB = CHIP_MEMORY_MIB[name] ?? CHIP_MEMORY_MIB["NVIDIA H200"];
    const memoryMiB = checkAmount(or(s.memoryMiB, chipMiB), `${what}.memoryMiB`, true);
    const contextMiB = checkAmount(or(s.contextMiB, CONTEXT_MIB), `${what}.contextMiB`);
    const uuid = s.uuid === undefined
      ? madeUpUuid(seed, i)
      : formatGpuUuid(parseGpuUuid(s.uuid, `${what}.uuid`));
    return new SimulatedGpu(i, name, uuid, memoryMiB, contextMiB);
  });
  const twice = "two simulated GPUs have the same UUID";
  if (new Set(made.map((g) => g.uuid)).size !== made.length) throw new RangeError(twice);
  return made;
}

/** A stable, made-up GPU UUID for GPU `index` of a simulator seeded with `seed`. */
function madeUpUuid(seed: number, index: number): string {
  const bytes = new Uint8Array(16);
  let x = (Math.imul(seed, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b)) >>> 0;
  for (let i = 0; i < 16; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x40; // shaped like a version-4 UUID, as NVIDIA's are
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return formatGpuUuid(bytes);
}
