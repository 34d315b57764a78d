/**
 * `@ckpt/cuda/driver`: what a machine is made of. For a program that opens this machine itself
 * (to name libcuda, or to size its thread pool), talks to the driver's raw calls, writes a driver
 * or a host of its own, or needs the driver's result codes and state numbers.
 *
 * A {@link Machine} is what every call of `@ckpt/cuda` runs on: a {@link CheckpointDriver}, whose
 * methods mirror the C calls of libcuda's checkpoint API one to one and resolve to the raw
 * `CUresult`, and the rest of the machine around it (its processes, its snapshot engine and store,
 * its clock). {@link openMachine} opens this machine; `@ckpt/cuda/mock` makes a simulated one.
 *
 * @example
 * ```ts ignore
 * import { CudaProcess } from "@ckpt/cuda";
 * import { CUprocessState, openMachine } from "@ckpt/cuda/driver";
 *
 * await using machine = await openMachine({ libraryPath: "/usr/lib64/libcuda.so.1" });
 * const { code, value } = await machine.driver.getState(4242); // the raw call
 * console.log(code, value === CUprocessState.CU_PROCESS_STATE_LOCKED);
 * const proc = new CudaProcess(4242, { machine });
 * ```
 *
 * @module
 */

export type { CheckpointDriver, GpuInfo, GpuPair, LockArgs, RestoreArgs } from "./core/driver.ts";
export type { Machine } from "./core/machine.ts";
export type { Clock } from "./core/time.ts";
export type { HostProcesses, ProcessIdentity, ScannedProcess, TreeProcess } from "./core/host.ts";
export type { GpuImport, GpuMemory, GpuMemoryReport, MachineFacts, PidUse } from "./core/host.ts";
export type { HeldRecord, HeldRecords, RoomClaim } from "./core/host.ts";
export { CUresult, type DriverResult, resultName } from "./core/driver.ts";
export { CUprocessState, stateName } from "./core/states.ts";
export { type MachineOptions, type NativeMachine, openMachine } from "./os/this_machine.ts";
export type { NativeDriver, NativeDriverOptions } from "./ffi/native.ts";
export type { LinuxHostOptions, ProcReader } from "./os/linux_host.ts";
