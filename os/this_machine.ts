// This machine as a {@link Machine}: libcuda through the runtime's FFI, `/proc` and NVML, the
// installed criu, and snapshots on the file system (what the public functions open when given no
// machine, and close when their last user lets go).

import type { Machine } from "../core/machine.ts";
import type { HostProcesses } from "../core/host.ts";
import type { SnapshotEngine } from "../core/engine.ts";
import type { SnapshotStore } from "../core/snapshot/store.ts";
import { checkKeys } from "../core/options.ts";
import { sessionOf } from "../core/process.ts";
import { type NativeDriver, type NativeDriverOptions, openNativeDriver } from "../ffi/native.ts";
import { type CriuEngineOptions, openCriuEngine } from "./criu.ts";
import { LinuxHost, type LinuxHostOptions } from "./linux_host.ts";
import { FileSnapshotStore } from "./snapshot_store.ts";

/** Options of {@link openMachine}: the driver's, and those of the host and of criu. */
export interface MachineOptions extends NativeDriverOptions {
  /** How `/proc`, NVML and the records of held GPU memory are found. */
  host?: LinuxHostOptions;
  /** How criu is found and run. */
  criu?: CriuEngineOptions;
}

/** This machine, opened: what {@link openMachine} resolves to. Close it when done. */
export interface NativeMachine extends Machine, AsyncDisposable {
  /** libcuda. */
  readonly driver: NativeDriver;
  /** `/proc`, NVML (loaded on first use) and the records of held GPU memory. */
  readonly host: HostProcesses;
  /** The installed criu (found on first use). */
  readonly engine: SnapshotEngine;
  /** The file system. */
  readonly store: SnapshotStore;
  /** Waits for the operations under way on it, then lets go of libcuda, its threads and NVML. */
  close(): Promise<void>;
}

/**
 * Opens this machine: libcuda ({@link NativeDriverOptions.libraryPath}) with the runtime's FFI,
 * and its host, criu engine and snapshot store, which load what they need on first use. Pass it
 * as `{ machine }`; close it when done. A driver older than 570 opens: its checkpoint calls answer
 * `CUDA_ERROR_NOT_SUPPORTED`.
 *
 * @throws {DriverLoadError} (as a rejection) when libcuda cannot be found or opened here; a
 * RangeError or TypeError for bad options, naming them.
 *
 * @example
 * ```ts ignore
 * import { CudaProcess } from "@ckpt/cuda";
 * import { openMachine } from "@ckpt/cuda/driver";
 *
 * await using machine = await openMachine({ libraryPath: "/usr/lib64/libcuda.so.1" });
 * const { code, value } = await machine.driver.getState(4242); // the raw call
 * await new CudaProcess(4242, { machine }).suspend();
 * ```
 */
export async function openMachine(options: MachineOptions = {}): Promise<NativeMachine> {
  // Every option checked before libcuda opens: the host's and criu's values as they are made.
  const top = ["libraryPath", "maxWorkers", "callingThread", "host", "criu"] as const;
  checkKeys(options, "openMachine's options", top);
  const hostKeys = ["nvml", "nvmlPath", "procRoot", "reader", "recordsDir"] as const;
  checkKeys(options.host, "openMachine's host options", hostKeys);
  const criuKeys = ["criuPath", "libraryDir", "extraArgs", "env"] as const;
  checkKeys(options.criu, "openMachine's criu options", criuKeys);
  const host = new LinuxHost(options.host), engine = openCriuEngine(options.criu);
  const driver = await openNativeDriver(options);
  // A suspend under way ends checkpointed, not locked with its driver gone: it is waited for.
  const close = () =>
    sessionOf(machine).settled().then(() => host.close())
      .finally(() => driver[Symbol.asyncDispose]());
  const store = new FileSnapshotStore();
  const machine = { driver, host, engine, store, close, [Symbol.asyncDispose]: close };
  return machine;
}
