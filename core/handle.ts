/**
 * {@link Handle}: one process through one machine, as `CudaProcess` and the group operations use
 * it. It keeps the process's order (every operation waits for those made before it on the same
 * process, through any handle and any of its thread ids), refuses a pid that has come to name
 * another process, and lets go of its machine when closed.
 *
 * @module
 */

import { CUDA_SUCCESS } from "./codes.ts";
import { driverError, RefusedError, WaitTimeoutError } from "./errors.ts";
import { checkCapability } from "./gate.ts";
import { type ProcessIdentity, sameProcess } from "./host.ts";
import {
  clockOf,
  leaseOf,
  type Machine,
  type MachineLease,
  type MachineSource,
  type Session,
  sessionOf,
} from "./machine.ts";
import { type ActionSettings, runAction } from "./action.ts";
import type { StepRecord } from "./group_options.ts";
import type { RoomCheck } from "./room.ts";
import { type Action, isFinal, type ProcessState } from "./states.ts";
import { Target } from "./target.ts";

/** What a state-changing operation of `CudaProcess` did. */
export interface Outcome {
  /** `done`: its steps ran; `unchanged`: the process was already where it leads (a goal only). */
  readonly status: "done" | "unchanged";
  /** The state the process is in now. */
  readonly state: ProcessState;
  /** The driver calls made, in order. */
  readonly steps: readonly StepRecord[];
  /**
   * Where a restore was made: whether its room was checked first (`"checked"`), not asked for
   * (`"skipped"`), or could not be, and why (`{ unknown }`). Where a checkpoint was made whose
   * record of GPU memory could not be written: `{ unknown }`, saying why its restore's room
   * cannot be checked (a warning: the checkpoint succeeded).
   */
  readonly roomCheck?: RoomCheck;
}

/** One process through one machine: see the module documentation. */
export class Handle {
  /** The process id (or one of its thread ids), as given: what the driver is called with. */
  readonly pid: number;
  readonly #source: MachineSource;
  #lease: MachineLease | undefined;
  #closed = false;
  /** The process this handle was first used on: a pid that later names another is refused. */
  #identity: ProcessIdentity | undefined;
  readonly #running = new Set<Promise<unknown>>();

  /** A handle on `pid` (checked by the caller) through the machine of `source`. */
  constructor(pid: number, source: MachineSource) {
    this.pid = pid;
    this.#source = source;
  }

  /** The machine, opened on first use. */
  async machine(): Promise<Machine> {
    return (await this.#session()).machine;
  }

  /** Runs an action (checked settings) in the process's order; rejects with its error. */
  act(action: Action, settings: ActionSettings): Promise<Outcome> {
    return this.ordered(async (target) => {
      const report = await runAction(target, action, settings);
      if (report.error) throw report.error;
      return {
        status: report.status === "unchanged" ? "unchanged" : "done",
        state: report.state!,
        steps: report.steps,
        ...(report.roomCheck !== undefined ? { roomCheck: report.roomCheck } : {}),
      };
    });
  }

  /** The process's state, in its order. */
  state(): Promise<ProcessState> {
    return this.ordered((target) => target.state());
  }

  /** The restore thread id, at once (the driver answers even while the process is busy). */
  restoreThreadId(): Promise<number> {
    return this.#track(async () => {
      const driver = (await this.machine()).driver;
      await checkCapability(driver, "getRestoreThreadId", this.pid);
      const { code, value } = await driver.getRestoreThreadId(this.pid);
      if (code !== CUDA_SUCCESS) {
        throw driverError(driver, code, { operation: "getRestoreThreadId", pid: this.pid })!;
      }
      return value;
    });
  }

  /**
   * Resolves once the process is in `state`, asking every `intervalMs` (checked by the caller);
   * see `CudaProcess.waitForState`.
   */
  async waitForState(
    state: ProcessState,
    o: { timeoutMs?: number; signal?: AbortSignal; intervalMs: number },
  ): Promise<void> {
    const clock = clockOf(await this.machine());
    const start = clock.now();
    for (;;) {
      o.signal?.throwIfAborted();
      const seen = await this.state();
      if (seen === state) return;
      if (isFinal(seen)) {
        throw new RefusedError({
          code: "STATE",
          operation: "waitForState",
          pid: this.pid,
          state: seen,
          reason: `it is ${seen}, which is final: it will never be ${state}`,
        });
      }
      o.signal?.throwIfAborted();
      const left = o.timeoutMs === undefined ? Infinity : o.timeoutMs - (clock.now() - start);
      if (left <= 0) throw new WaitTimeoutError(this.pid, state, o.timeoutMs!, seen);
      await clock.sleep(Math.min(o.intervalMs, left), o.signal);
    }
  }

  /**
   * Runs `body` with the process's target while holding its turn: no other operation on the
   * process through the same machine runs in between.
   */
  ordered<T>(body: (target: Target) => Promise<T>): Promise<T> {
    return this.#track(async () => {
      const session = await this.#session();
      const found = await session.identify(this.pid);
      if (found && this.#identity && !sameProcess(this.#identity, found)) {
        throw new RefusedError({
          code: "REPLACED",
          operation: "getState",
          pid: this.pid,
          reason: `the process this handle was made for has ended, and ${this.pid} now names ` +
            `another process`,
        });
      }
      this.#identity ??= found;
      // No process has the id now (the driver will say so): the process it named, or the number.
      const identity = found ?? this.#identity ?? { pid: this.pid };
      return await session.inOrder(identity, () => body(new Target(this.pid, identity, session)));
    });
  }

  /** Waits for this handle's operations, then lets go of its machine. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
    const held = this.#lease;
    this.#lease = undefined;
    await held?.release();
  }

  /** The session of this handle's machine, leased on first use. */
  #session(): Promise<Session> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (!this.#lease) {
      const taken = leaseOf(this.#source);
      this.#lease = taken;
      // A machine that failed to open is not kept: the next call tries again.
      taken.machine.catch(() => {
        if (this.#lease === taken) this.#lease = undefined;
        taken.release().catch(() => {});
      });
    }
    return this.#lease.machine.then(sessionOf);
  }

  /** Keeps `run` among this handle's operations until it settles (close waits for them). */
  #track<T>(run: () => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closedError());
    const running = run();
    this.#running.add(running);
    const forget = () => this.#running.delete(running);
    running.then(forget, forget);
    return running;
  }

  #closedError(): Error {
    return new Error(
      `CudaProcess(${this.pid}): this handle has been closed; make a new CudaProcess to go on`,
    );
  }
}
