/**
 * The simulated machine as its parts see it, so that none of them imports the machine's class.
 *
 * @module
 */

import type { MemoryHeldRecords } from "../core/host.ts";
import type { SimulatedGpu } from "./sim_gpu.ts";
import type { ProcessHost, SimulatedProcess } from "./sim_process.ts";
import type { TimingModel } from "./timing.ts";
import type { CopyLink } from "./waits.ts";

/** What the parts of a simulated machine use of it. @internal */
export interface MachineView extends ProcessHost {
  /** The machine's GPUs, by index. */
  readonly gpus: readonly SimulatedGpu[];
  /** What `cuDriverGetVersion` reports. */
  readonly version: number;
  /** The timing figures. */
  readonly timing: TimingModel;
  /** The live processes, in the order they started. */
  readonly processes: readonly SimulatedProcess[];
  /** The records of held GPU memory kept on the machine. */
  readonly heldRecords: MemoryHeldRecords;
  /** The simulated process that stands for the program using the machine, if any. */
  readonly selfPid: number | undefined;
  /** The disk images are written to and read from, shared by every dump and restore. */
  readonly disk: CopyLink;
  /** The live process that has `id` as its pid or as one of its thread ids. */
  process(id: number): SimulatedProcess | undefined;
  /** The live process `root` and its descendants, each after its parent. */
  tree(root: number): SimulatedProcess[] | undefined;
  /** Adds a process made on it (throws where one of its ids is taken). */
  adopt(proc: SimulatedProcess): SimulatedProcess;
  /** Runs `work` as something the program waits on (the clock moves meanwhile). */
  waitOn<T>(what: string, work: () => Promise<T>): Promise<T>;
}

/** `fn`'s answer at once, taking no simulated time; a rejection once the machine is closed. */
export function instantly<T>(machine: MachineView, what: string, fn: () => T): Promise<T> {
  const closed = machine.closedError(what);
  return closed ? Promise.reject(closed) : Promise.resolve(fn());
}
