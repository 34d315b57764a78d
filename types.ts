/**
 * `@ckpt/cuda/types`: the types that the main module's functions take and give besides the ones
 * it exports itself: the steps and goals, the records of what was done, the progress events of a
 * group, the listing of CUDA processes, and what errors carry.
 *
 * @example
 * ```ts
 * import { runGroup } from "@ckpt/cuda";
 * import type { GroupEvent } from "@ckpt/cuda/types";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const onProgress = (e: GroupEvent) => console.log(e.type, e.pid);
 * await runGroup("suspend", [sim.spawn().pid], { machine: sim, onProgress });
 * ```
 *
 * @module
 */

export type { Action, Step } from "./core/states.ts";
export type { GroupEvent, StepRecord, StopReason } from "./core/group_types.ts";
export type { RoomCheck, RoomShortage } from "./core/room.ts";
export type { ErrorPlace, RefusalCode, SnapshotFailure } from "./core/errors.ts";
export type { CudaProcessInfo, CudaProcessListing } from "./core/listing.ts";
export type { ListCudaProcessesOptions, UninspectedProcess } from "./core/listing.ts";
