/**
 * What a call runs on: a {@link Machine}, one object that holds the driver and the rest of the
 * machine around it, passed in by whoever owns it. Nothing here is module state: what this
 * package keeps while a machine is in use (the order of operations on each process, the room
 * check) is that machine's {@link Session}, kept with the machine itself.
 *
 * @module
 */

import type { CheckpointDriver } from "./driver.ts";
import type { SnapshotEngine, SnapshotStore } from "./engine.ts";
import { type HostProcesses, identityKey, type ProcessIdentity } from "./host.ts";
import { RoomGuard } from "./room.ts";

/** A clock in ms: the simulator's virtual time, or the real one. */
export interface Clock {
  /** Now, in ms. */
  now(): number;
  /** Resolves after `ms`. */
  sleep(ms: number): Promise<void>;
}

/**
 * What a call runs on: the checkpoint driver, and what else the machine has. This machine's is
 * `openMachine()`'s (libcuda, `/proc` and NVML, criu, the file system); the simulator's is a
 * `SimulatedMachine`. Whoever opened a machine closes it; this package never does.
 */
export interface Machine {
  /** The checkpoint driver: one method for each C call of libcuda's checkpoint API. */
  readonly driver: CheckpointDriver;
  /**
   * The machine's processes: which exist, their GPU memory and identity, process trees, and the
   * records of what checkpointed processes held (for the room check). Left out: a listing and a
   * snapshot cannot be made, and each process is known by the number it was given.
   */
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
  /** The machine. */
  readonly machine: Promise<Machine>;
  /** Lets go; the last lease of a {@link SharedMachine} closes it. Idempotent. */
  release(): Promise<void>;
}

/** A machine that closes: what {@link SharedMachine} opens. */
export interface ClosableMachine extends Machine {
  /** Lets go of everything the machine holds (libraries, worker threads). */
  close(): Promise<void>;
}

/**
 * A machine opened on first use, shared by everyone who uses it at the same time, and closed when
 * the last of them lets go: this machine's, as the public functions use it by default, so that a
 * program that closes its processes leaves nothing open. A failed open is not kept: the next use
 * tries again.
 */
export class SharedMachine {
  readonly #open: () => Promise<ClosableMachine>;
  #opened: Promise<ClosableMachine> | undefined;
  #users = 0;

  /** A machine that `open` opens when first used. */
  constructor(open: () => Promise<ClosableMachine>) {
    this.#open = open;
  }

  /** Takes a lease: opens the machine if nobody uses it now. */
  lease(): MachineLease {
    if (!this.#opened) {
      const opening = this.#open();
      this.#opened = opening;
      opening.catch(() => {
        if (this.#opened === opening) this.#opened = undefined;
      });
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
        const machine = await held.catch(() => undefined);
        await machine?.close();
      },
    };
  }

  /** How many leases are held now (for tests). */
  get users(): number {
    return this.#users;
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
  try {
    return await body(await lease.machine);
  } finally {
    await lease.release();
  }
}

/** Checks a machine given as an option: an object with a driver. */
export function isMachine(value: unknown): value is Machine {
  const driver = (value as { driver?: Partial<CheckpointDriver> } | null)?.driver;
  return typeof value === "object" && value !== null && typeof driver === "object" &&
    driver !== null && typeof driver.getState === "function" && typeof driver.lock === "function";
}

/** A clock that can be interrupted: {@link Clock} with an `AbortSignal` on its sleep. */
export interface SignalClock extends Clock {
  /** Resolves after `ms`; rejects with the signal's reason when it is aborted first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** A time in ms to the microsecond, without floating-point noise (`0.2`, not `0.20000000000000004`). */
export function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** The clock of `machine`: its own where it keeps one (the simulator's), else the real clock. */
export function clockOf(machine: Machine): SignalClock {
  const own = machine.clock;
  const now = own ? () => own.now() : () => performance.now();
  const sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const slept = own
      ? own.sleep(ms)
      : new Promise<void>((resolve) => timer = setTimeout(resolve, ms));
    if (!signal) return slept;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        if (timer !== undefined) clearTimeout(timer);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      slept.then(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, reject);
    });
  };
  return { now, sleep };
}

/** Where a machine keeps its session: a slot no other code names. */
const SESSION: unique symbol = Symbol("@ckpt/cuda session");

/** The session of `machine`, made on first use and kept with the machine. */
export function sessionOf(machine: Machine): Session {
  const slot = machine as Machine & { [SESSION]?: Session };
  if (!slot[SESSION]) {
    Object.defineProperty(slot, SESSION, { value: new Session(machine), enumerable: false });
  }
  return slot[SESSION]!;
}

/**
 * A machine in use, and what this package keeps while it is: the order of operations on each
 * process (one at a time, in the order asked, keyed by the process's thread-group id and start
 * time, so that a thread id and its pid are one process), and the room check ({@link RoomGuard}).
 */
export class Session {
  readonly machine: Machine;
  readonly room: RoomGuard;
  #self: Promise<ProcessIdentity | undefined> | undefined;
  readonly #tails = new Map<string, Promise<unknown>>();

  /** The session of `machine`: use {@link sessionOf}, which keeps one per machine. */
  constructor(machine: Machine) {
    this.machine = machine;
    this.room = new RoomGuard(machine.host, () => this.selfIdentity());
  }

  /**
   * The process that `id` (a pid or a thread id) belongs to now, as the host says; `undefined`
   * where the host cannot tell or no process has it (the driver will say so).
   */
  async identify(id: number): Promise<ProcessIdentity | undefined> {
    return await this.machine.host?.identify?.(id).catch(() => undefined);
  }

  /**
   * Runs `operation` once every operation queued before it on the same process has settled
   * (resolved or rejected), and resolves or rejects as it does.
   */
  inOrder<T>(process: ProcessIdentity, operation: () => Promise<T>): Promise<T> {
    const key = identityKey(process);
    const before = this.#tails.get(key);
    const run = before ? before.then(operation, operation) : operation();
    // The queue holds a promise that never rejects, so that one failure does not fail the rest.
    const tail = run.then(() => {}, () => {});
    this.#tails.set(key, tail);
    tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return run;
  }

  /** How many processes have operations queued or running (for tests). */
  get queued(): number {
    return this.#tails.size;
  }

  /** The pid of the program using the machine, where it is one of the host's processes. */
  get selfPid(): number | undefined {
    return this.machine.host?.self;
  }

  /**
   * This program, as the host identifies it (`HostProcesses.self`): the owner of its claims of GPU
   * room; `undefined` where it is none of the host's processes (most simulated machines).
   */
  selfIdentity(): Promise<ProcessIdentity | undefined> {
    this.#self ??= (async () => {
      const pid = this.selfPid;
      return pid === undefined ? undefined : await this.identify(pid) ?? { pid };
    })();
    return this.#self;
  }
}

/**
 * A deadline on a machine's clock, for a whole operation (a group, a snapshot): what is left of
 * it, and a lock timeout cut to it. No deadline (`timeoutMs` undefined) never passes.
 */
export class Deadline {
  readonly #start: number;
  readonly #now: () => number;
  readonly #end: number;

  /** A deadline `timeoutMs` from now on `clock`'s time. */
  constructor(clock: { now(): number }, timeoutMs: number | undefined) {
    this.#now = () => clock.now();
    this.#start = clock.now();
    this.#end = timeoutMs === undefined ? Infinity : this.#start + timeoutMs;
  }

  /** ms since the start. */
  elapsed(): number {
    return this.#now() - this.#start;
  }

  /** Whole ms left (rounded up: a wait that uses them ends at the deadline), or `undefined`. */
  left(): number | undefined {
    return this.#end === Infinity ? undefined : Math.max(0, Math.ceil(this.#end - this.#now()));
  }

  /** Whether it has passed. */
  passed(): boolean {
    return this.#now() >= this.#end;
  }

  /** A lock timeout (0: forever) cut to what is left, at least 1 ms. */
  cut(lockTimeoutMs: number): number {
    const left = this.left();
    if (left === undefined) return lockTimeoutMs;
    return lockTimeoutMs === 0 ? Math.max(1, left) : Math.min(lockTimeoutMs, Math.max(1, left));
  }
}
