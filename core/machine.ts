// What a call runs on: a `Machine` its owner passes in, or one shared, opened on first use.

import { C_FUNCTIONS, type CheckpointDriver } from "./driver.ts";
import type { SnapshotEngine } from "./engine.ts";
import type { SnapshotStore } from "./snapshot/store.ts";
import type { HostProcesses } from "./host.ts";
import type { Clock } from "./time.ts";

/** What a call runs on: the driver and the rest of the machine; whoever opened it closes it. */
export interface Machine {
  /** The checkpoint driver: one method for each C call of libcuda's checkpoint API. */
  readonly driver: CheckpointDriver;
  /** The machine's processes; left out, no listing or snapshot, and a pid is taken as given. */
  readonly host?: HostProcesses;
  /** What dumps process trees to disk and brings them back (criu); snapshots need it. */
  readonly engine?: SnapshotEngine;
  /** Where snapshots live (the file system); snapshots need it. */
  readonly store?: SnapshotStore;
  /** The machine's clock: deadlines and waits are measured on it. Left out: the real clock. */
  readonly clock?: Clock;
}

/** A use of a machine: the machine, opened on first use, and the way to let go of it. */
export interface MachineLease {
  readonly machine: Promise<Machine>;
  /** Lets go; the last lease of a {@link SharedMachine} closes it. Idempotent. */
  release(): Promise<void>;
}

/** A machine that closes: what {@link SharedMachine} opens. */
export interface ClosableMachine extends Machine {
  /** Lets go of everything the machine holds (libraries, worker threads). */
  close(): Promise<void>;
}

/** A machine opened on first use, shared, and closed when its last user lets go. */
export class SharedMachine {
  #opened: Promise<ClosableMachine> | undefined;
  #users = 0;

  /** A machine that `open` opens when first used. */
  constructor(private readonly open: () => Promise<ClosableMachine>) {}

  /** Takes a lease: opens the machine if nobody uses it now. */
  lease(): MachineLease {
    if (!this.#opened) {
      const opening = this.#opened = this.open();
      opening.catch(() => this.#opened === opening && (this.#opened = undefined));
    }
    const held = this.#opened;
    this.#users++;
    let released = false;
    return {
      machine: held,
      release: async () => {
        if (released) return;
        released = true;
        if (--this.#users > 0) return;
        if (this.#opened === held) this.#opened = undefined;
        await (await held.catch(() => undefined))?.close();
      },
    };
  }
}

/** Where a call gets its machine: a machine its caller owns, or a shared one. */
export type MachineSource = Machine | SharedMachine;

/** A lease on `source`: a machine given as an object is its owner's, and is never closed here. */
export function leaseOf(source: MachineSource): MachineLease {
  if (source instanceof SharedMachine) return source.lease();
  return { machine: Promise.resolve(source), release: () => Promise.resolve() };
}

/** Runs `body` with the machine of `source`, leased for as long as it runs. */
export async function withMachine<T>(
  source: MachineSource,
  body: (machine: Machine) => Promise<T>,
): Promise<T> {
  const lease = leaseOf(source);
  return await lease.machine.then(body).finally(() => lease.release());
}

/** What a machine given as an option lacks: a driver, or one of its six calls (none: a machine). */
export function machineLacks(value: unknown): string | undefined {
  const driver = (value as { driver?: Record<string, unknown> } | null)?.driver;
  if (typeof value !== "object" || !driver || typeof driver !== "object") return "a driver";
  return Object.keys(C_FUNCTIONS).find((call) => typeof driver?.[call] !== "function");
}
