/**
 * A session: one driver in use, and what this package keeps while it is. Every `CudaProcess`,
 * group operation and listing on the same driver shares one session, which owns:
 *
 * - the order of operations on each process: one at a time, in the order asked, keyed by the
 *   process (its thread-group id and start time), so that a thread id and the pid are one process;
 * - the host (the driver's own, or the machine's from `defaults.ts`, opened on first use and closed with the session);
 * - the room check ({@link RoomGuard}).
 *
 * Sessions are made and closed by `sources.ts`, with the lease of their driver.
 *
 * @module
 */

import type { CheckpointDriver } from "./driver.ts";
import { openHostFor } from "./defaults.ts";
import {
  type ClosableHost,
  type HostProcesses,
  identityKey,
  type ProcessIdentity,
} from "./host.ts";
import { RoomGuard } from "./room.ts";

/** One driver in use: see the module documentation. */
export class Session {
  /** The driver. */
  readonly driver: CheckpointDriver;
  /** The room check. */
  readonly room: RoomGuard;
  #host: Promise<{ host: HostProcesses; opened?: ClosableHost } | undefined> | undefined;
  #self: Promise<ProcessIdentity | undefined> | undefined;
  readonly #tails = new Map<string, Promise<unknown>>();
  #closed = false;

  /** A session on `driver`. */
  constructor(driver: CheckpointDriver) {
    this.driver = driver;
    this.room = new RoomGuard({
      host: () => this.host(),
      releaseHost: () => this.releaseHost(),
      self: () => this.#selfIdentity(),
      now: () => Date.now(),
    });
  }

  /**
   * The host: the driver's own (the simulator's), else the machine's, opened on first use and
   * kept until the session closes; `undefined` where there is neither.
   */
  async host(): Promise<HostProcesses | undefined> {
    if (this.#closed) return undefined;
    this.#host ??= openHostFor(this.driver).catch(() => undefined);
    return (await this.#host)?.host;
  }

  /** Lets go of a host the session opened (NVML in it); the next ask opens it again. */
  async releaseHost(): Promise<void> {
    const held = this.#host;
    this.#host = undefined;
    await (await held)?.opened?.close?.();
  }

  /**
   * The process that `id` (a pid or a thread id) belongs to now, as the host says; `undefined`
   * where the host cannot tell or no process has it (the driver will say so).
   */
  async identify(id: number): Promise<ProcessIdentity | undefined> {
    const host = await this.host();
    return await host?.identify?.(id).catch(() => undefined);
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

  /** Lets go of what the session opened. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.releaseHost();
  }

  /** The pid of the program using the host, where it is one of the host's processes. */
  async selfPid(): Promise<number | undefined> {
    return (await this.host())?.self;
  }

  /** This program, as the host identifies it: the owner of its claims of GPU room. */
  #selfIdentity(): Promise<ProcessIdentity | undefined> {
    this.#self ??= (async () => {
      const pid = ownPid();
      if (pid === undefined) return undefined;
      const host = await this.host();
      // On the simulated machine this program is none of the host's processes.
      if (host?.self !== pid) return { pid };
      return await this.identify(pid) ?? { pid };
    })();
    return this.#self;
  }
}

/** This program's pid, on Deno, Bun or Node. */
function ownPid(): number | undefined {
  const g = globalThis as { process?: { pid?: number }; Deno?: { pid?: number } };
  return g.Deno?.pid ?? g.process?.pid;
}
