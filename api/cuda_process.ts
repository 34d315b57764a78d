/**
 * {@link CudaProcess}: one CUDA process whose GPU state can be checkpointed and restored, on this
 * machine (libcuda, opened on first use) unless another machine is given.
 *
 * @module
 */

import { describeValue } from "../core/options.ts";
import {
  act,
  type ActionSettings,
  type Outcome,
  settingsOf,
  type StepOptions,
} from "../core/action.ts";
import { Handle } from "../core/process.ts";
import { isMachine, type Machine, type MachineSource, SharedMachine } from "../core/machine.ts";
import { checkChoice, checkInteger, checkOptions, checkPid, checkSignal } from "../core/options.ts";
import { type Action, PROCESS_STATES, type ProcessState } from "../core/states.ts";
import { openMachine } from "../os/this_machine.ts";

/** Options of {@link CudaProcess}'s constructor. */
export interface CudaProcessOptions {
  /**
   * The machine to work on: a `SimulatedMachine` (from `@ckpt/cuda/mock`), or one `openMachine`
   * opened (to name libcuda, or to size its thread pool). It stays open: it is its owner's. Left
   * out: this machine, opened on first use, shared by every process that uses it, and closed when
   * the last of them is closed.
   */
  machine?: Machine;
}

/** Each process's handle, for the group operations (`handleOf`). */
const HANDLES = new WeakMap<CudaProcess, Handle>();

/**
 * A CUDA process whose GPU state can be checkpointed and restored.
 *
 * Every call that reaches the driver returns a Promise. A driver failure rejects with a
 * `CudaError` (`code` is the driver's `CUresult`); an operation refused before the driver was
 * asked rejects with a `RefusedError` (`code` is a string: no room, a mapping that cannot work, a
 * state with no way there); bad input rejects with a `TypeError` or `RangeError` that names the
 * value.
 *
 * Operations on one process run one after another, in the order they were made, whichever handle
 * and whichever of its thread ids they were made through: a `state()` asked during a `suspend()`
 * answers once the suspend is done.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine({ gpus: 2 });
 * const target = sim.spawn({ memoryMiB: 1024 });
 * await using proc = new CudaProcess(target.pid, { machine: sim });
 * await proc.suspend();   // lock + checkpoint: GPU memory is now in host memory
 * await proc.resume();    // restore + unlock
 * console.log(await proc.state()); // "running"
 * ```
 */
export class CudaProcess {
  /** The process id (a thread id of the process works as well), as given. */
  readonly pid: number;
  readonly #handle: Handle;

  /**
   * A handle on a process. Nothing is called yet: the machine is opened on first use.
   *
   * @param pid the process id, or the id of one of its threads: an integer from 1 to 2^31-1.
   * @param options the machine to work on; this machine when left out.
   */
  constructor(pid: number, options?: CudaProcessOptions) {
    this.pid = checkPid(pid);
    const o = checkOptions(options, "CudaProcess", ["machine"]);
    this.#handle = new Handle(this.pid, machineOf(o.machine, "CudaProcess"));
    HANDLES.set(this, this.#handle);
  }

  /** The machine this process is worked on through, opened on first use. */
  machine(): Promise<Machine> {
    return this.#handle.machine();
  }

  /**
   * The process's checkpoint state: `"running"`, `"locked"`, `"checkpointed"` or `"failed"`.
   * Rejects with `CUDA_ERROR_NOT_INITIALIZED` for a process that never used CUDA and
   * `CUDA_ERROR_OPERATING_SYSTEM` for a pid that does not exist.
   */
  state(): Promise<ProcessState> {
    return this.#handle.state();
  }

  /**
   * The id of the thread the driver uses to restore the process (what CRIU needs). The driver
   * answers at once even while another operation is under way, and so does this.
   */
  restoreThreadId(): Promise<number> {
    return this.#handle.restoreThreadId();
  }

  /**
   * Locks the process: its CUDA calls block and work already submitted finishes. Waits at most
   * `timeoutMs` (10 s by default; 0 waits forever) and then fails with `CUDA_ERROR_NOT_READY`,
   * leaving the process running.
   */
  lock(options?: Pick<StepOptions, "timeoutMs">): Promise<Outcome> {
    return this.#act("lock", () => settingsOf(options, "lock", ["timeoutMs"]));
  }

  /** Checkpoints a locked process: copies its GPU memory into host memory and releases the GPU. */
  checkpoint(options?: Pick<StepOptions, "checkRoom" | "allowIpcImport">): Promise<Outcome> {
    return this.#act(
      "checkpoint",
      () => settingsOf(options, "checkpoint", ["checkRoom", "allowIpcImport"]),
    );
  }

  /**
   * Restores a checkpointed process onto the GPUs it came from, or onto others with
   * `gpuMapping`, after checking their room (`checkRoom`). The process is then locked:
   * {@link CudaProcess.unlock} lets it run.
   */
  restore(options?: Pick<StepOptions, "gpuMapping" | "checkRoom">): Promise<Outcome> {
    return this.#act("restore", () => settingsOf(options, "restore", ["gpuMapping", "checkRoom"]));
  }

  /** Unlocks a locked process so that its CUDA calls run again. */
  unlock(): Promise<Outcome> {
    return this.#act("unlock", () => settingsOf(undefined, "unlock", []));
  }

  /**
   * Takes the process to checkpointed: lock and checkpoint from running, checkpoint from locked,
   * nothing from checkpointed (`status: "unchanged"`). If a step fails, what this call did is
   * undone and the error says where the process was left.
   */
  suspend(
    options?: Pick<StepOptions, "timeoutMs" | "checkRoom" | "allowIpcImport">,
  ): Promise<Outcome> {
    return this.#act(
      "suspend",
      () => settingsOf(options, "suspend", ["timeoutMs", "checkRoom", "allowIpcImport"]),
    );
  }

  /**
   * Takes the process to running: restore and unlock from checkpointed, unlock from locked,
   * nothing from running (`status: "unchanged"`). A restore that would not fit in the free GPU
   * memory is refused before the driver is asked (a `GpuRoomError`). If a step fails, the error
   * says where the process was left (a failed restore leaves it checkpointed, to be tried again).
   */
  resume(options?: Pick<StepOptions, "gpuMapping" | "checkRoom">): Promise<Outcome> {
    return this.#act("resume", () => settingsOf(options, "resume", ["gpuMapping", "checkRoom"]));
  }

  /**
   * Does what NVIDIA's `cuda-checkpoint --toggle` does: suspends a running process, resumes a
   * checkpointed one, and refuses any other state (a `RefusedError` with code `"STATE"`). All
   * options are checked first; then the half that runs uses its own.
   */
  toggle(options?: StepOptions): Promise<Outcome> {
    return this.#act(
      "toggle",
      () =>
        settingsOf(options, "toggle", ["timeoutMs", "checkRoom", "gpuMapping", "allowIpcImport"]),
    );
  }

  /**
   * Resolves once the process is in `state` (asking the driver every `intervalMs`, 50 by
   * default); rejects with a `WaitTimeoutError` when `timeoutMs` passes first (left out: as long
   * as it takes), with the signal's reason when it is aborted, with a `RefusedError` (`"STATE"`)
   * when the process is in the failed state, and with the driver's error when the process cannot
   * be read. Useful when another program (CRIU, NVIDIA's utility) changes the state.
   *
   * @example
   * ```ts ignore
   * await proc.waitForState("checkpointed", { timeoutMs: 30_000 });
   * ```
   */
  async waitForState(
    state: ProcessState,
    options?: { timeoutMs?: number; signal?: AbortSignal; intervalMs?: number },
  ): Promise<void> {
    checkChoice(state, "state", PROCESS_STATES);
    const o = checkOptions(options, "waitForState", ["timeoutMs", "signal", "intervalMs"]);
    await this.#handle.waitForState(state, {
      ...(o.timeoutMs !== undefined
        ? { timeoutMs: checkInteger(o.timeoutMs, "timeoutMs", 0) }
        : {}),
      ...(o.signal !== undefined ? { signal: checkSignal(o.signal) } : {}),
      intervalMs: o.intervalMs === undefined ? 50 : checkInteger(o.intervalMs, "intervalMs", 1),
    });
  }

  /**
   * Lets go of the machine: waits for this handle's operations to finish, then, where this
   * handle used this machine (no `machine` given), lets go of it; the last user closes it. A
   * machine given is its owner's to close. Later operations reject. Idempotent.
   */
  close(): Promise<void> {
    return this.#handle.close();
  }

  /** {@link CudaProcess.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** `CudaProcess(pid)`, for logs. */
  toString(): string {
    return `CudaProcess(${this.pid})`;
  }

  /** Checks the inputs first, then runs the action in this process's order. */
  #act(action: Action, inputs: () => ActionSettings): Promise<Outcome> {
    try {
      return act(this.#handle, action, inputs());
    } catch (err) {
      return Promise.reject(err);
    }
  }
}

/** The handle of a `CudaProcess`, for the group operations. */
export function handleOf(proc: CudaProcess): Handle {
  return HANDLES.get(proc)!;
}

/** This machine as the public functions use it when given none: shared, opened on first use. */
const thisMachine = new SharedMachine(() => openMachine());

/** The machine given as an option (`where` names it in messages), checked; else this machine. */
export function machineOf(machine: unknown, where: string): MachineSource {
  if (machine === undefined) return thisMachine;
  if (!isMachine(machine)) {
    throw new TypeError(
      `${where}'s machine must be a Machine (a SimulatedMachine, or what openMachine resolves ` +
        `to), got ${describeValue(machine)}`,
    );
  }
  return machine;
}
