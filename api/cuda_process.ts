/**
 * {@link CudaProcess}, on this machine unless another is given.
 *
 * @module
 */

import { act, type Outcome, settingsOf, type StepOptions } from "../core/action.ts";
import { Handle } from "../core/process.ts";
import { type Machine, machineLacks, type MachineSource, SharedMachine } from "../core/machine.ts";
import { checkChoice, checkInteger, checkOptions, checkPid, checkSignal } from "../core/options.ts";
import { MAX_TIMER_MS, mustBe } from "../core/options.ts";
import { type Action, PROCESS_STATES, type ProcessState } from "../core/states.ts";
import { openMachine } from "../os/this_machine.ts";

/** Options of {@link CudaProcess}'s constructor. */
export interface CudaProcessOptions {
  /**
   * The machine (a `SimulatedMachine`, or one `openMachine` opened), left open: its owner's. Left
   * out: this machine, opened on first use and closed when the last process using it is.
   */
  machine?: Machine;
}

/** Each process's handle, for the group operations (`handleOf`). */
const HANDLES = new WeakMap<CudaProcess, Handle>();

/**
 * A CUDA process whose GPU state can be checkpointed and restored. A driver failure rejects with a
 * `CudaError`, a refusal before the driver was asked with a `RefusedError`, bad input with a
 * `TypeError` or `RangeError` naming it. Operations on one process run one at a time in the order
 * made, through any handle or thread id: a `state()` asked during a `suspend()` answers after it.
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

  /** A handle on `pid` (or one of its thread ids); nothing is called until first use. */
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
   * The process's checkpoint state; rejects for a process without CUDA, or no process, and refuses
   * (`STATE`) a stopped one (SIGSTOP), which the driver would answer only once it runs again.
   */
  state(): Promise<ProcessState> {
    return this.#handle.state();
  }

  /** The id of the thread the driver restores the process on (CRIU's); answered at once. */
  restoreThreadId(): Promise<number> {
    return this.#handle.restoreThreadId();
  }

  /** Locks the process: its CUDA calls block and submitted work finishes (`timeoutMs`, 10 s). */
  lock(options?: Pick<StepOptions, "timeoutMs">): Promise<Outcome> {
    return this.#act("lock", options, ["timeoutMs"]);
  }

  /** Checkpoints a locked process: copies its GPU memory into host memory and releases the GPU. */
  checkpoint(options?: Pick<StepOptions, "checkRoom" | "allowIpcImport">): Promise<Outcome> {
    return this.#act("checkpoint", options, ["checkRoom", "allowIpcImport"]);
  }

  /** Restores a checkpointed process (onto other GPUs with `gpuMapping`); it is then locked. */
  restore(options?: Pick<StepOptions, "gpuMapping" | "checkRoom">): Promise<Outcome> {
    return this.#act("restore", options, ["gpuMapping", "checkRoom"]);
  }

  /** Unlocks a locked process so that its CUDA calls run again. */
  unlock(): Promise<Outcome> {
    return this.#act("unlock", undefined, []);
  }

  /**
   * Takes the process to checkpointed (lock and checkpoint, or what is left of them). If a step
   * fails, what this call did is undone, and the error says where the process was left.
   */
  suspend(options?: Omit<StepOptions, "gpuMapping">): Promise<Outcome> {
    return this.#act("suspend", options, ["timeoutMs", "checkRoom", "allowIpcImport"]);
  }

  /**
   * Takes the process to running (restore and unlock, or what is left of them); a restore that
   * would not fit is refused first (`GpuRoomError`). A failure says where the process was left.
   */
  resume(options?: Pick<StepOptions, "gpuMapping" | "checkRoom">): Promise<Outcome> {
    return this.#act("resume", options, ["gpuMapping", "checkRoom"]);
  }

  /** Suspends a running process or resumes a checkpointed one (`--toggle`); refuses the rest. */
  toggle(options?: StepOptions): Promise<Outcome> {
    return this.#act("toggle", options, ["timeoutMs", "checkRoom", "gpuMapping", "allowIpcImport"]);
  }

  /**
   * Resolves once the process is in `state` (asked every `intervalMs`, default 50), as another
   * program changes it; rejects after `timeoutMs` (`WaitTimeoutError`; 0 looks once, and without it
   * the wait has no limit), or once failed (`STATE`). While it is stopped (SIGSTOP, a debugger, a
   * restore holding it until its images matched) it is not asked, and the wait goes on.
   */
  async waitForState(
    state: ProcessState,
    options?: { timeoutMs?: number; signal?: AbortSignal; intervalMs?: number },
  ): Promise<void> {
    checkChoice(state, "state", PROCESS_STATES);
    const o = checkOptions(options, "waitForState", ["timeoutMs", "signal", "intervalMs"]);
    const { timeoutMs: ms, intervalMs = 50 } = o;
    await this.#handle.waitForState(state, {
      timeoutMs: ms === undefined ? ms : checkInteger(ms, "timeoutMs", 0, MAX_TIMER_MS),
      signal: checkSignal(o.signal),
      intervalMs: checkInteger(intervalMs, "intervalMs", 1, MAX_TIMER_MS),
    });
  }

  /** Waits for this handle's operations, then lets go of this machine (not of one given). */
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

  /** Checks the options (those `keys` names; bad ones reject), then runs the action in order. */
  async #act(action: Action, options: StepOptions | undefined, keys: (keyof StepOptions)[]) {
    return await act(this.#handle, action, settingsOf(options, action, keys));
  }
}

/** The handle of a `CudaProcess`, for the group operations. */
export const handleOf = (proc: CudaProcess): Handle => HANDLES.get(proc)!;

/** This machine as the public functions use it when given none: shared, opened on first use. */
const thisMachine = new SharedMachine(() => openMachine());

/** The machine given as an option (`where` names it in messages), checked; else this machine. */
export function machineOf(machine: unknown, where: string): MachineSource {
  const lacks = machine === undefined ? undefined : machineLacks(machine);
  if (lacks === undefined) return (machine as Machine | undefined) ?? thisMachine;
  const expected = "a Machine (a SimulatedMachine, or what openMachine resolves to)";
  const call = lacks === "a driver" ? "" : ` whose driver has ${lacks}()`;
  return mustBe(TypeError, `${where}'s machine`, expected + call, machine);
}
