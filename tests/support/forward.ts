// A machine whose driver forwards every call to another machine's driver (bound, so private
// fields keep working), with some calls replaced: for tests that need a driver which misbehaves
// in one way, or counts calls. The rest of the machine (its host: the simulator's processes and
// records; its criu, store and clock) is the other machine's.
import type { CheckpointDriver } from "../../core/driver.ts";
import type { SnapshotEngine } from "../../core/engine.ts";
import type { HostProcesses } from "../../core/host.ts";
import type { Machine } from "../../core/machine.ts";

/** `machine` with its driver's methods bound to it and `replaced` put in their place; no `listGpus`. */
export function forward(
  machine: Machine,
  replaced: Partial<CheckpointDriver> = {},
): Machine & { driver: CheckpointDriver } {
  const driver = machine.driver;
  return {
    ...(machine.host ? { host: machine.host } : {}),
    ...(machine.engine ? { engine: machine.engine } : {}),
    ...(machine.store ? { store: machine.store } : {}),
    ...(machine.clock ? { clock: machine.clock } : {}),
    driver: {
      kind: driver.kind,
      driverVersion: () => driver.driverVersion(),
      getState: (pid) => driver.getState(pid),
      getRestoreThreadId: (pid) => driver.getRestoreThreadId(pid),
      lock: (pid, args) => driver.lock(pid, args),
      checkpoint: (pid) => driver.checkpoint(pid),
      restore: (pid, args) => driver.restore(pid, args),
      unlock: (pid) => driver.unlock(pid),
      errorName: (code) => driver.errorName(code),
      errorString: (code) => driver.errorString(code),
      ...replaced,
    },
  };
}

/** `host` with some members replaced: every other member is the host's own (bound to it). */
export function hostWith(host: HostProcesses, replaced: Partial<HostProcesses>): HostProcesses {
  return new Proxy(host, {
    get(target, key) {
      if (key in replaced) return (replaced as Record<PropertyKey, unknown>)[key];
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
    has: (target, key) => key in replaced || key in target,
  });
}

/** A machine made of `machine`'s parts, with some of them replaced (a new machine: its own session). */
export function machineWith(machine: Machine, replaced: Partial<Machine>): Machine {
  return {
    driver: machine.driver,
    ...(machine.host ? { host: machine.host } : {}),
    ...(machine.engine ? { engine: machine.engine } : {}),
    ...(machine.store ? { store: machine.store } : {}),
    ...(machine.clock ? { clock: machine.clock } : {}),
    ...replaced,
  };
}

/** `engine` with some members replaced, the others its own (bound to it). */
export function engineWith(
  engine: SnapshotEngine,
  replaced: Partial<SnapshotEngine>,
): SnapshotEngine {
  return new Proxy(engine, {
    get(target, key) {
      if (key in replaced) return (replaced as Record<PropertyKey, unknown>)[key];
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
