/**
 * The machine `cuda-checkpoint` works on: the driver given to `main()`, the simulated machine of
 * the state file (`--simulate`), or this machine's libcuda; and where its processes are listed
 * from. Each is loaded only when a command needs it: the native driver's modules for the real
 * machine, the simulator's for `--simulate`, `/proc` and NVML only for `list` and `--all`.
 *
 * @module
 */

import type { CheckpointDriver } from "../core/driver.ts";
import type { ClosableHost, HostProcesses } from "../core/host.ts";
import { setFallbackHostOpener } from "../core/defaults.ts";
import type { CliIo } from "./io.ts";
import type { SimulatedMachine } from "./simulate.ts";

/** A driver to work with, and what else the command may need of the machine. */
export interface Machine {
  /** The driver. */
  readonly driver: CheckpointDriver;
  /** The simulated machine, with `--simulate`. */
  readonly simulated?: SimulatedMachine;
  /**
   * Where processes are listed from: the host given to `main()`, else the driver's own (the
   * simulator's: `undefined` here), else this machine's `/proc` (and NVML for `gpuMemory`),
   * opened now and closed with the machine.
   */
  host(gpuMemory: boolean): Promise<HostProcesses | undefined>;
  /**
   * Lets go of what was opened here: the native driver, hosts, the simulated machine (and its
   * lock; save it first). The driver given to `main()` is the caller's.
   */
  close(): Promise<void>;
}

/** How the command uses the driver. */
export interface MachineNeeds {
  /** Work on the simulated machine of the state file. */
  readonly simulate: boolean;
  /**
   * Make the driver's calls on this thread (no worker threads on Bun): for one process, when
   * nothing else (a progress line) has to run meanwhile.
   */
  readonly callingThread: boolean;
  /** With `simulate`: start a new machine without reading the state file (`--simulate reset`). */
  readonly fresh?: boolean;
}

/** A host lent to a session, which closes what it opened: the same host, without its close(). */
function lent(host: HostProcesses): HostProcesses {
  return {
    kind: host.kind,
    scan: () => host.scan(),
    ...(host.gpuMemory ? { gpuMemory: () => host.gpuMemory!() } : {}),
    ...(host.identify ? { identify: (id: number) => host.identify!(id) } : {}),
    ...(host.heldRecords ? { heldRecords: host.heldRecords } : {}),
    ...(host.processTree ? { processTree: (root: number) => host.processTree!(root) } : {}),
    ...(host.facts ? { facts: () => host.facts!() } : {}),
    ...(host.self !== undefined ? { self: host.self } : {}),
  };
}

/** Opens the machine the command works on. */
export async function openMachine(io: CliIo, needs: MachineNeeds): Promise<Machine> {
  if (needs.simulate) {
    const { openSimulatedMachine } = await import("./simulate.ts");
    const simulated = await openSimulatedMachine({ env: { ...io.env }, fresh: needs.fresh });
    return {
      driver: simulated.driver,
      simulated,
      host: () => Promise.resolve(undefined),
      close: () => simulated.close(),
    };
  }
  // The host the library's sessions use on this machine (its processes, NVML, the records of held
  // GPU memory that the room check shares with every program of this package): the one given to
  // main(), never closed here, else this machine's, opened only when an operation asks for it.
  const given = io.host;
  const before = setFallbackHostOpener(
    given ? () => lent(given) : async () => (await import("../ffi/host.ts")).openLinuxHost(),
  );
  const opened: ClosableHost[] = [];
  const linuxHost = async (gpuMemory: boolean) => {
    const { openLinuxHost } = await import("../ffi/host.ts");
    const host = openLinuxHost({ nvml: gpuMemory });
    opened.push(host);
    return host;
  };
  const closeHosts = async () => {
    for (const host of opened.splice(0)) await host.close?.();
    setFallbackHostOpener(before);
  };
  if (io.driver) {
    const driver = io.driver;
    return {
      driver,
      host: (gpuMemory) =>
        io.host || driver.hostProcesses ? Promise.resolve(io.host) : linuxHost(gpuMemory),
      close: closeHosts,
    };
  }
  // The driver's own modules only (not ffi/mod.ts, which brings the host, NVML and the records):
  // a query of one pid loads little before it answers.
  const [{ openLibcudaDriver }, { runtimeAdapter }] = await Promise.all([
    import("../ffi/native.ts"),
    import("../ffi/runtime.ts"),
  ]);
  const driver = openLibcudaDriver(
    await runtimeAdapter({ callingThread: needs.callingThread }),
    { callingThread: needs.callingThread },
  );
  return {
    driver,
    host: (gpuMemory) => io.host ? Promise.resolve(io.host) : linuxHost(gpuMemory),
    async close() {
      try {
        await closeHosts();
      } finally {
        await driver[Symbol.asyncDispose]();
      }
    },
  };
}
