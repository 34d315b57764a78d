/**
 * `@ckpt/cuda/mock`: a simulated machine, for testing code that checkpoints GPU processes without a
 * GPU. Its driver has the real driver's states, error codes and timing (driver 580, H200 and H100);
 * its GPUs, processes and memory can be inspected; its virtual clock moves only while the program
 * waits on it. Faults can be injected (docs/RELIABILITY.md): `SimulatedProcess.failNext`,
 * `exitDuring`, `hangNext`, `answerNext`, `enterFailedState`, `SimulatedMachine.fillGpu`. Its
 * simulated CRIU ({@link SimulatedCriu}) dumps and restores process trees with their pids.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * await using sim = new SimulatedMachine({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * const proc = new CudaProcess(target.pid, { machine: sim });
 * await proc.suspend();
 * console.log(await proc.state(), sim.gpus[0].usedMiB); // "checkpointed" 0
 * await proc.resume();
 * ```
 *
 * @module
 */

export { SimulatedMachine, type SimulatedMachineOptions, type SpawnOptions } from "./simulator.ts";
export { SimulatedGpu, type SimulatedGpuSpec } from "./sim_gpu.ts";
export { SimulatedProcess } from "./sim_process.ts";
export type { IpcImport, NcclRank } from "./fields.ts";
export { type SimulatedCall, SimulatedDriver } from "./sim_driver.ts";
export { type CriuFault, type CriuOperation, SimulatedCriu } from "./sim_criu.ts";
export type { SimulatedCriuOptions } from "./sim_criu.ts";
export type { AnswerFault, ExitFault, FaultableOperation, FaultTiming } from "./faults.ts";
export type { InjectedFault, PendingFault, QueryOperation } from "./faults.ts";
export { RealClock, type SimClock, type TimerOptions, VirtualClock } from "./clock.ts";
export type { CopyTiming, TimingModel, TimingPoint } from "./timing.ts";
