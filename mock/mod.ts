/**
 * `@ckpt/cuda/mock`: a simulated CUDA checkpoint driver, for testing code that checkpoints GPU
 * processes on machines without a GPU. It has the real driver's states, error codes and timing
 * shape (measured on an H200 with driver 580), and GPUs, processes and memory contents you can
 * inspect.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * const proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();
 * console.log(await proc.state(), sim.gpus[0].usedMiB); // "checkpointed" 0
 * await proc.resume();
 * ```
 *
 * @module
 */

export {
  type InjectedFault,
  type SimulatedCall,
  SimulatedDriver,
  type SimulatedDriverOptions,
  SimulatedGpu,
  type SimulatedGpuSpec,
  SimulatedProcess,
  type SpawnOptions,
} from "./driver.ts";
export { RealClock, type SimClock, VirtualClock } from "./clock.ts";
export {
  type CopyTiming,
  H200_TIMING,
  singleProcessMs,
  type TimingModel,
  type TimingPoint,
} from "./timing.ts";
export { MemoryImage, PAGE_SIZE } from "./memory.ts";
