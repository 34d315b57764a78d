/**
 * {@link Target}: one process while its turn is held, and each step of it as one driver call,
 * through the checks that come before the call (capability, mapping, room) and the one choke
 * point from the call's result to an error.
 *
 * @module
 */

import {
  CUDA_ERROR_ILLEGAL_STATE,
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_INITIALIZED,
  CUDA_ERROR_OPERATING_SYSTEM,
  CUDA_ERROR_OUT_OF_MEMORY,
  CUDA_SUCCESS,
} from "./codes.ts";
import type { CheckpointDriver, GpuPair } from "./driver.ts";
import { CudaError, driverError } from "./errors.ts";
import { checkCapability, checkMapping, explainRejectedMapping } from "./gate.ts";
import type { GpuMemoryReport, HeldRecord, ProcessIdentity } from "./host.ts";
import type { Machine, Session } from "./machine.ts";
import type { RoomCheck } from "./room.ts";
import { isFinal, type ProcessState, stateName, type Step, stepAllowed } from "./states.ts";

/** One process while its turn is held: see the module documentation. */
export class Target {
  /** The pid (or thread id) as given: what the driver is called with. */
  readonly pid: number;
  /** The process it belongs to. */
  readonly identity: ProcessIdentity;
  /** Whether the process is the program making the calls (it checkpoints itself). */
  readonly self: boolean;
  readonly #session: Session;

  /** A target in `session`. */
  constructor(pid: number, identity: ProcessIdentity, session: Session) {
    this.pid = pid;
    this.identity = identity;
    this.#session = session;
    this.self = identity.pid === session.selfPid;
  }

  get driver(): CheckpointDriver {
    return this.#session.machine.driver;
  }

  get machine(): Machine {
    return this.#session.machine;
  }

  /** The machine's GPU memory report; `undefined` where unknown. */
  memoryReport(): Promise<GpuMemoryReport | undefined> {
    return this.#session.room.report();
  }

  /** What a program of this package recorded the process held at its checkpoint, if it did. */
  heldRecord(): Promise<HeldRecord | undefined> {
    return this.#session.room.record(this.identity);
  }

  /** Refuses (`UNSUPPORTED`) where the driver lacks the function of one of `steps`. */
  async capable(steps: readonly Step[], shown: string): Promise<void> {
    for (const step of new Set(steps)) {
      await checkCapability(this.driver, step, this.pid, 0, shown);
    }
  }

  /** `getState`, by name. */
  async state(): Promise<ProcessState> {
    const driver = this.driver;
    await checkCapability(driver, "getState", this.pid);
    const { code, value } = await driver.getState(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("getState", code);
    const name = stateName(value);
    if (name === undefined) {
      throw new RangeError(
        `getState of process ${this.pid} gave state ${value}, which this version of @ckpt/cuda ` +
          `does not know (a newer driver's)`,
      );
    }
    return name;
  }

  /** `lock` with this timeout. */
  async lock(timeoutMs: number): Promise<void> {
    const driver = this.driver;
    await checkCapability(driver, "lock", this.pid);
    // Locking this very process: the room check's NVML reads stop until it runs again.
    const self = this.self;
    if (self) await this.#session.room.beforeSelfLock();
    const code = await driver.lock(this.pid, { timeoutMs });
    if (code !== CUDA_SUCCESS) {
      if (self) this.#session.room.selfRunning();
      throw await this.#failure("lock", code);
    }
    // Locked from running: what it held when last checkpointed is no longer what it holds.
    await this.#session.room.forget(this.identity);
  }

  /**
   * `checkpoint`; with `checkRoom`, what it held is read first and recorded after. Resolves to
   * why its restore's room cannot be checked where the record could not be written (a warning).
   */
  async checkpoint(checkRoom: boolean): Promise<RoomCheck | undefined> {
    const driver = this.driver;
    await checkCapability(driver, "checkpoint", this.pid);
    const room = this.#session.room;
    // Never of this very process: NVML waits in a process that has checkpointed itself.
    const held = checkRoom && !this.self ? await room.heldNow(this.identity) : undefined;
    const code = await driver.checkpoint(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("checkpoint", code);
    return held ? await room.recorded(this.identity, held) : undefined;
  }

  /**
   * `restore`, with GPU pairs (checked first) or without, its room checked and claimed first
   * unless `checkRoom` is false. `shown` is the operation errors name (`resume` for its restore).
   */
  async restore(
    pairs: readonly GpuPair[] | null,
    checkRoom: boolean,
    shown: string,
  ): Promise<RoomCheck> {
    const driver = this.driver;
    await checkCapability(driver, "restore", this.pid, pairs?.length ?? 0, shown);
    if (pairs) await checkMapping(driver, shown, this.pid, pairs);
    const reservation = checkRoom
      ? await this.#session.room.reserve(
        this.identity,
        pairs,
        { operation: shown, pid: this.pid, self: this.self },
        () => this.#checkpointedNow(),
      )
      : undefined;
    let code: number;
    try {
      code = await driver.restore(this.pid, pairs === null ? null : { gpuPairs: pairs });
    } catch (err) {
      await reservation?.done(false);
      throw err;
    }
    await reservation?.done(code === CUDA_SUCCESS);
    if (code === CUDA_SUCCESS) return reservation?.check ?? "skipped";
    const detail = code === CUDA_ERROR_INVALID_VALUE && pairs !== null && pairs.length > 0
      ? await explainRejectedMapping(driver, pairs)
      : code === CUDA_ERROR_OUT_OF_MEMORY
      ? "on driver 580 the process cannot be restored after this, even once memory is free " +
        "(docs/ERRORS.md#out-of-memory)"
      : undefined;
    throw await this.#failure("restore", code, detail);
  }

  /** `unlock`. */
  async unlock(): Promise<void> {
    const driver = this.driver;
    await checkCapability(driver, "unlock", this.pid);
    const code = await driver.unlock(this.pid);
    if (code !== CUDA_SUCCESS) throw await this.#failure("unlock", code);
    if (this.self) this.#session.room.selfRunning();
  }

  /** Whether the driver says, now, that the process is there and may be restored; never rejects. */
  async #checkpointedNow(): Promise<boolean> {
    const now = await this.state().catch(() => undefined);
    return now !== undefined && stepAllowed("restore", now);
  }

  /**
   * The error for a failed call, through the one choke point: with the state for an illegal
   * state, and a sentence where the code alone would mislead.
   */
  async #failure(operation: Step | "getState", code: number, detail?: string): Promise<CudaError> {
    let state: ProcessState | undefined;
    if (code === CUDA_ERROR_ILLEGAL_STATE && operation !== "getState") {
      state = await this.state().catch(() => undefined);
      // Refused as illegal in a state the step accepts: something else changed it meanwhile.
      if (state !== undefined && stepAllowed(operation, state)) {
        detail = "another program (or another thread id of this process) changed its state " +
          "meanwhile";
      }
      if (state !== undefined && isFinal(state)) detail = "the failed state is final";
    }
    // A restore refused although the process is there and checkpointed: what driver 580 does
    // after a restore of it ran out of GPU memory.
    if (
      code === CUDA_ERROR_OPERATING_SYSTEM && operation === "restore" && !detail &&
      await this.#checkpointedNow()
    ) {
      detail = "the process is checkpointed, yet the driver refuses to restore it, as driver 580 " +
        "does after a restore of it ran out of memory (docs/ERRORS.md#out-of-memory)";
    }
    return driverError(this.driver, code, { operation, pid: this.pid, state, detail })!;
  }
}

/** Whether an error says there is no process, or no CUDA in it: nothing is left to undo. */
export function isGone(err: unknown): boolean {
  return err instanceof CudaError &&
    (err.code === CUDA_ERROR_OPERATING_SYSTEM || err.code === CUDA_ERROR_NOT_INITIALIZED);
}
