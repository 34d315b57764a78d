/**
 * `@ckpt/cuda/mock`: a simulated CUDA checkpoint driver, for testing code that checkpoints GPU
 * processes on machines without a GPU. It has the real driver's states, error codes and timing
 * (measured on an H200 and an H100 with driver 580), and GPUs, processes and memory contents you
 * can inspect. Its virtual clock moves only while the program waits on the simulator.
 *
 * Faults of the real world can be injected, to test code that orchestrates checkpoints: a call
 * that fails with a code and leaves a state (`SimulatedProcess.failNext`), a process killed
 * during a call (`exitDuring`), a call that hangs until released (`hangNext`), a state number a
 * newer driver reports (`answerNext`), the failed state (`enterFailedState`), a GPU without room
 * for a restore (`SimulatedDriver.fillGpu`). docs/RELIABILITY.md lists them.
 *
 * Snapshots of whole process trees go through its simulated CRIU ({@link SimulatedCriu}, what
 * `SimulatedDriver.snapshotEngine()` gives): processes spawned as children of others
 * (`spawn({ parent })`) are dumped into image files and restored with their pids, with the
 * times criu took on a GPU machine, and dumps and restores can be made to fail or be stopped.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * await using sim = new SimulatedDriver({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * const proc = new CudaProcess(target.pid, { driver: sim });
 * await proc.suspend();
 * console.log(await proc.state(), sim.gpus[0].usedMiB); // "checkpointed" 0
 * await proc.resume();
 * ```
 *
 * @module
 */

export { CHECKPOINT_FUNCTIONS } from "../core/gate.ts";
// What SimulatedDriver.hostProcesses() gives, so that this module documents completely on its own.
export type {
  GpuMemory,
  GpuMemoryReport,
  HeldRecord,
  HeldRecords,
  HostProcesses,
  MachineFacts,
  PidUse,
  ProcessIdentity,
  RoomClaim,
  ScannedProcess,
  TreeProcess,
} from "../core/host.ts";
export { MemoryHeldRecords } from "../core/host.ts";
// The driver seam's types, which the simulated driver implements (so that this module documents
// completely on its own).
export type {
  CheckpointDriver,
  DriverResult,
  GpuInfo,
  GpuPair,
  LockArgs,
  RestoreArgs,
} from "../core/driver.ts";
// The snapshot engine seam, which the simulated CRIU implements.
export type {
  DumpedProcess,
  DumpRequest,
  EngineProbe,
  RestoreRequest,
  SnapshotEngine,
} from "../core/engine.ts";
export { EngineError } from "../core/engine.ts";
export type { ProcessState } from "../core/states.ts";
export type { Operation } from "../core/errors.ts";
export {
  type SimulatedCall,
  SimulatedDriver,
  type SimulatedDriverOptions,
  type SimulatedGpuSpec,
  type SpawnOptions,
} from "./driver.ts";
export { SimulatedGpu, SimulatedProcess } from "./process.ts";
export {
  type CriuFault,
  type CriuOperation,
  SimulatedCriu,
  type SimulatedCriuOptions,
} from "./criu.ts";
export {
  type AnswerFault,
  type ExitFault,
  FAULTABLE_OPERATIONS,
  type FaultableOperation,
  type FaultTiming,
  type InjectedFault,
  type PendingFault,
  type QueryOperation,
} from "./faults.ts";
export { RealClock, type SimClock, type TimerOptions, VirtualClock } from "./clock.ts";
export {
  CONTEXT_MIB,
  type CopyTiming,
  CRIU_TIMING,
  criuImageBytes,
  type CriuTiming,
  H100_TIMING,
  H200_TIMING,
  H200_X4_HOST_TIMING,
  singleProcessMs,
  timingForChip,
  type TimingModel,
  type TimingPoint,
} from "./timing.ts";
export { ChunkedSha256, chunkedSha256, HASH_CHUNK_SIZE, MemoryImage, PAGE_SIZE } from "./memory.ts";
export {
  type FaultSnapshot,
  type GpuSnapshot,
  type HeldRecordSnapshot,
  loadSimulator,
  type LoadSimulatorOptions,
  type MemorySnapshot,
  type ProcessSnapshot,
  SIMULATOR_SNAPSHOT_FORMAT,
  SIMULATOR_SNAPSHOT_VERSION,
  type SimulatorSnapshot,
  SimulatorSnapshotError,
  snapshotSimulator,
} from "./state.ts";
