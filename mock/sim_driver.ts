// The simulated driver: the CUDA checkpoint state machine, its error codes and its timing.

import { CHECKPOINT_MIN_DRIVER_VERSION, CU_RESULTS, formatDriverVersion } from "../core/driver.ts";
import { CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_READY, CUDA_SUCCESS } from "../core/driver.ts";
import { CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_INVALID_VALUE } from "../core/driver.ts";
import { CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OPERATING_SYSTEM } from "../core/driver.ts";
import { CUDA_ERROR_OUT_OF_MEMORY, GPU_PAIRS_MIN_DRIVER_VERSION } from "../core/driver.ts";
import type { CheckpointDriver, DriverResult, GpuInfo, GpuPair } from "../core/driver.ts";
import type { LockArgs, RestoreArgs } from "../core/driver.ts";
import { C_FUNCTIONS, CHECKPOINT_FUNCTIONS, type DriverOperation } from "../core/driver.ts";
import { isFinal, memoryOnHost, type Step, stepAllowed, stepFrom, stepTo } from "../core/states.ts";
import { checkTimeoutMs, formatGpuUuid } from "../core/options.ts";
import { gpusSeenBy } from "./criu_files.ts";
import { sharesMemory } from "./fields.ts";
import type { FaultableOperation, InjectedFault, QueryOperation } from "./faults.ts";
import type { SimulatedGpu } from "./sim_gpu.ts";
import type { MachineView, SimulatedProcess } from "./sim_process.ts";
import { type CopyTiming, mibToBytes, singleRate, type TimingModel } from "./timing.ts";
import { CopyLink, Waits } from "./waits.ts";

/** One call the simulated driver answered, for tests that check what their code did. */
export interface SimulatedCall {
  /** When the call ended, in the machine's ms. */
  at: number;
  /** When it was made. */
  started: number;
  /** The C call, without the `cuCheckpointProcess` prefix: `"lock"`, `"getState"`, … */
  op: string;
  /** The pid it was given. */
  pid: number;
  /** The `CUresult` it returned. */
  code: number;
  /** Why, where the code alone does not say: which mapping rule failed, what it waited for, … */
  note?: string;
}

/** What a driver call answers, before it becomes a code or a {@link DriverResult}. */
type Answer = { code: number; value?: number; note?: string };
/** What a call does with its process (and a step with its waits) to answer. */
type Body = (proc: SimulatedProcess) => Promise<Answer>;
type StepBody = (proc: SimulatedProcess, run: Waits) => Promise<Answer>;

/**
 * The simulated machine's driver (`sim.driver`): a {@link CheckpointDriver} with the states, codes
 * and timing measured on the real driver (docs/DRIVER.md). Like it, it serialises calls on each
 * process: a call made while another is under way waits, then acts on the state it left. Every
 * call it answered is in {@link SimulatedDriver.calls}.
 */
export class SimulatedDriver implements CheckpointDriver {
  /** Always `"simulated"`. */
  readonly kind: string = "simulated";
  /** The checkpoint functions this driver lacks: all six below version 12080, else none. */
  readonly missingFunctions: readonly string[];
  /** Always true: {@link SimulatedDriver.listGpus} gives every simulated GPU. */
  readonly listsEveryGpu: boolean = true;
  /** Every call answered so far, oldest first. */
  readonly calls: SimulatedCall[] = [];
  readonly #machine: MachineView;
  readonly #timing: TimingModel;
  readonly #version: number;
  readonly #versionName: string;
  readonly #checkpointLink: CopyLink;
  readonly #restoreLink: CopyLink;
  readonly #hostTurns: CopyLink; // the calls' serial parts, one at a time (no rates used)

  /** @internal made by the machine */
  constructor(machine: MachineView) {
    this.#machine = machine;
    ({ timing: this.#timing, version: this.#version } = machine);
    this.#versionName = formatDriverVersion(machine.version);
    const old = machine.version < CHECKPOINT_MIN_DRIVER_VERSION;
    this.missingFunctions = old ? [...CHECKPOINT_FUNCTIONS] : [];
    this.#checkpointLink = new CopyLink(machine, machine.timing.checkpoint);
    this.#restoreLink = new CopyLink(machine, machine.timing.restore);
    this.#hostTurns = new CopyLink(machine, { ...machine.timing.restore, inTurn: true });
  }

  /** Every GPU the driver sees, by index (`cuDeviceGet`, `cuDeviceGetUuid`, `cuDeviceGetName`). */
  listGpus(): Promise<GpuInfo[]> {
    const gpus = this.#machine.gpus.map((g) => ({ index: g.index, uuid: g.uuid, name: g.name }));
    return this.#machine.instantly("list GPUs", () => gpus);
  }

  /** `cuDriverGetVersion`. */
  driverVersion(): Promise<DriverResult> {
    return this.#machine.instantly("call cuDriverGetVersion", () => result(ok(this.#version)));
  }

  /** `cuCheckpointProcessGetState`: waits for a state change of the process under way. */
  getState(pid: number): Promise<DriverResult> {
    const query = (p: SimulatedProcess) => this.#query(p, "getState", () => p.stateNumber);
    return this.#call("getState", pid, result, (p) => this.#serially(p, () => query(p)));
  }

  /** `cuCheckpointProcessGetRestoreThreadId`: answers at once, the process busy or stopped too. */
  getRestoreThreadId(pid: number): Promise<DriverResult> {
    const query = (p: SimulatedProcess) => this.#query(p, "getRestoreThreadId", () => p.tid);
    return this.#call("getRestoreThreadId", pid, result, query);
  }

  /** `cuCheckpointProcessLock`; a timeout the C unsigned int cannot hold rejects, as natively. */
  async lock(pid: number, args: LockArgs | null): Promise<number> {
    const timeoutMs = args == null ? 0 : checkTimeoutMs(args.timeoutMs, "LockArgs.timeoutMs");
    const note = "a reserved field of CUcheckpointLockArgs is nonzero";
    return await this.#transition("lock", pid, async (proc, run) => {
      const busyFor = proc.kernelsUntil - this.#machine.now();
      if (timeoutMs > 0 && busyFor > timeoutMs) {
        await run.sleep(timeoutMs);
        const note = `its kernels had ${busyFor} ms to run, more than the ${timeoutMs} ms timeout`;
        return { code: CUDA_ERROR_NOT_READY, note };
      }
      if (busyFor > 0) await run.sleep(busyFor);
      await run.sleep(this.#timing.lockMs);
      return entered(proc, "lock");
    }, args?.reserved?.some((b) => b !== 0) && { code: CUDA_ERROR_INVALID_VALUE, note });
  }

  /** `cuCheckpointProcessCheckpoint`. */
  checkpoint(pid: number): Promise<number> {
    return this.#transition("checkpoint", pid, async (proc, run) => {
      const { fixedMs, serialMs = 0 } = this.#timing.checkpoint;
      await run.sleep(fixedMs - serialMs);
      await this.#copy(run, this.#checkpointLink, this.#timing.checkpoint, proc);
      await this.#turn(run, "checkpoint", proc, proc.gpus);
      proc.moveToHost();
      return entered(proc, "checkpoint");
    });
  }

  /** `cuCheckpointProcessRestore`. */
  restore(pid: number, args: RestoreArgs | null): Promise<number> {
    const pairs = args?.gpuPairs ?? [];
    const note = `driver ${this.#versionName} takes no GPU pairs; 13.0 (580) does`;
    const old = pairs.length > 0 && this.#version < GPU_PAIRS_MIN_DRIVER_VERSION;
    return this.#transition("restore", pid, async (proc, run) => {
      if (sharesMemory(proc.nccl)) {
        // Two H200s, driver 580.159.04: such ranks checkpoint, then every restore fails, `operation
        // not supported` with NCCL's defaults (docs/DRIVER.md, "NCCL jobs on two GPUs").
        await run.sleep(70);
        return { code: CUDA_ERROR_NOT_SUPPORTED, note: "it shares GPU memory with NCCL ranks" };
      }
      if (proc.restoreRefused) {
        // As driver 580.159.04 does (the note says when).
        await run.sleep(this.#timing.refusedMs ?? 6);
        const note = "an earlier restore of this process failed (out of GPU memory, or memory " +
          "it imported); the driver refuses every restore of it since";
        return { code: CUDA_ERROR_OPERATING_SYSTEM, note };
      }
      const imported = proc.ipcImport;
      if (imported) {
        // Driver 580.159.04, one H200: an importer of CUDA IPC memory checkpoints, then its
        // restore fails (legacy: invalid argument, its exporter alive or gone; cuMem: operation
        // not supported), in 0.07-0.11 s, and every later one with OS call failed; it stays
        // checkpointed (docs/DRIVER.md).
        await run.sleep(70);
        proc.refuseRestores();
        const code = imported.through === "legacy"
          ? CUDA_ERROR_INVALID_VALUE
          : CUDA_ERROR_NOT_SUPPORTED;
        return { code, note: `it imported GPU memory of process ${imported.exporter} (CUDA IPC)` };
      }
      const targets = this.#mapGpus(proc, pairs);
      if (typeof targets === "string") {
        await run.sleep(this.#timing.rejectMs);
        return { code: CUDA_ERROR_INVALID_VALUE, note: targets };
      }
      const short = proc.claimOn(targets);
      if (short) {
        await run.sleep(this.#timing.oomMs);
        proc.refuseRestores();
        return { code: CUDA_ERROR_OUT_OF_MEMORY, note: short };
      }
      const moved = targets.some((g, i) => g !== proc.gpus[i]);
      const { fixedMs, serialMs = 0 } = this.#timing.restore;
      await this.#turn(run, "restore", proc, targets);
      await run.sleep(fixedMs - serialMs + (moved ? this.#timing.migrationMs : 0));
      await this.#copy(run, this.#restoreLink, this.#timing.restore, proc);
      proc.moveToGpu(targets);
      return entered(proc, "restore");
    }, old && { code: CUDA_ERROR_NOT_SUPPORTED, note });
  }

  /** `cuCheckpointProcessUnlock`. */
  unlock(pid: number): Promise<number> {
    return this.#transition("unlock", pid, async (proc, run) => {
      await run.sleep(this.#timing.unlockMs);
      return entered(proc, "unlock");
    });
  }

  /** `cuGetErrorName`. */
  errorName(code: number): string | undefined {
    return CU_RESULTS[code]?.name;
  }

  /** `cuGetErrorString`. */
  errorString(code: number): string | undefined {
    return CU_RESULTS[code]?.description;
  }

  /** A short description for logs: `simulated driver 13.0, 2 GPUs (NVIDIA H200)`. */
  toString(): string {
    const { length } = this.#machine.gpus, s = length === 1 ? "" : "s";
    const names = [...new Set(this.#machine.gpus.map((g) => g.name))].join(", ");
    return `simulated driver ${this.#versionName}, ${length} GPU${s} (${names})`;
  }

  /** `make`'s answer (or `make`) after the time a query takes. */
  async #after(make: Answer | (() => Answer)): Promise<Answer> {
    await new Promise<void>((resolve) => this.#machine.startTimer(this.#timing.queryMs, resolve));
    return typeof make === "function" ? make() : make;
  }

  #exited(note = "the process exited"): Promise<Answer> {
    return this.#after({ code: CUDA_ERROR_OPERATING_SYSTEM, note });
  }

  /** The call's turn on the host: its serial part, longer by each other of `op` on `gpus` now. */
  #turn(run: Waits, op: "checkpoint" | "restore", proc: SimulatedProcess, gpus: SimulatedGpu[]) {
    const { serialMs = 0, serialPerOtherMs = 0 } = this.#timing[op];
    const all = this.#machine.processes; // an exited one holds no GPU
    const busy = all.filter((p) => p.busy === op && p !== proc && gpus.some(p.holdsOn));
    return run.copy(this.#hostTurns, serialMs + serialPerOtherMs * busy.length, 1);
  }

  #copy(run: Waits, link: CopyLink, timing: CopyTiming, proc: SimulatedProcess): Promise<void> {
    const per = timing.heldSlowdownPerGiB ?? 0, all = per ? this.#machine.processes : [];
    const held = all.filter((p) => p !== proc && p.memoryLocation === "host")
      .reduce((gib, p) => gib + p.memoryMiB / 1024, 0);
    const slower = 1 + per * held;
    return run.copy(link, mibToBytes(proc.memoryMiB), singleRate(timing, proc.memoryMiB) / slower);
  }

  /** One call: gated by the version, the pid looked up, `body` run, the answer logged. */
  #call<T>(op: DriverOperation, pid: number, out: (answer: Answer) => T, body: Body): Promise<T> {
    const name = C_FUNCTIONS[op];
    return this.#machine.waitOn(`call ${name} on pid ${pid}`, async () => {
      const started = this.#machine.now();
      // The process for a pid or thread id, or the code the real driver gives.
      const found = this.#machine.process(pid), proc = found?.inspectable ? found : undefined;
      const none = proc ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_OPERATING_SYSTEM; // none with CUDA
      const missing = `driver ${this.#versionName} has no ${name}; 12.8 (570) has`;
      const answer: Answer = this.missingFunctions.includes(name)
        ? { code: CUDA_ERROR_NOT_SUPPORTED, note: missing }
        : !proc?.usesCuda
        ? await this.#after({ code: none })
        : await body(proc);
      const call: SimulatedCall = { at: this.#machine.now(), started, op, pid, code: answer.code };
      if (answer.note !== undefined) call.note = answer.note;
      this.calls.push(call);
      return out(answer);
    });
  }

  /** `fn` in the process's turn, after the calls on it under way. */
  async #serially(proc: SimulatedProcess, fn: () => Promise<Answer>): Promise<Answer> {
    const waitingFor = proc.busy, issued = this.#machine.now();
    const done = await proc.turn();
    try {
      await proc.running(); // a stopped process answers once it runs again (docs/DRIVER.md)
      const waited = this.#machine.now() - issued;
      const answer = proc.exited ? await this.#exited() : await fn();
      if (waitingFor === undefined || waited <= 0) return answer;
      const note = `waited ${+waited.toFixed(3)} ms for the ${waitingFor} under way`;
      return { ...answer, note: answer.note ? `${note}; ${answer.note}` : note };
    } finally {
      done();
    }
  }

  /** A step: `refused` answered, else in its turn the state checked, a fault applied, `body`. */
  #transition(op: Step, pid: number, body: StepBody, refused?: Answer | false): Promise<number> {
    if (refused) return this.#call(op, pid, codeOf, () => this.#after(refused));
    return this.#call(op, pid, codeOf, (proc) =>
      this.#serially(proc, async () => {
        const note = `${op} needs a ${stepFrom(op)} process; it is ${proc.state}`;
        const illegal = { code: CUDA_ERROR_ILLEGAL_STATE, note };
        if (!stepAllowed(op, proc.state)) return await this.#after(illegal);
        const hit = proc.faultPlan.take(op as FaultableOperation);
        if (hit?.fault.kind === "fail") return await this.#applyFault(proc, op, hit.fault);
        const run = new Waits(this.#machine);
        let onExit = () => {};
        proc.busy = op;
        try {
          return await new Promise<Answer>((resolve, reject) => {
            const note = `the process exited during the ${op}`;
            const exited = () => resolve({ code: CUDA_ERROR_OPERATING_SYSTEM, note });
            onExit = () => {
              run.stop();
              this.#machine.startTimer(this.#timing.exitNoticeMs, exited);
            };
            proc.exitListeners.add(onExit);
            // An injected exit `afterMs` in: a call that would end sooner waits for it.
            const exit = hit?.fault.kind === "exit" ? hit.fault.afterMs : undefined;
            if (exit !== undefined) this.#machine.startTimer(exit, () => proc.exit());
            (async () => {
              await hit?.hold(); // an injected hang holds the call here (its process may exit)
              return proc.exited ? undefined : await body(proc, run);
            })().then((a) => a && (exit === undefined || proc.exited) && resolve(a), reject);
          });
        } finally {
          proc.busy = undefined;
          proc.exitListeners.delete(onExit);
          proc.wake();
        }
      }));
  }

  /** A query: the fault injected into it where there is one, else (or once held) `value()`. */
  async #query(proc: SimulatedProcess, op: QueryOperation, value: () => number) {
    const hit = proc.faultPlan.take(op), fault = hit?.fault;
    switch (fault?.kind) {
      case "fail":
        return await this.#applyFault(proc, op, fault);
      case "answer":
        return await this.#after({ ...ok(fault.value), note: `injected by answerNext("${op}")` });
      case "exit":
        if (fault.afterMs) { // it exits afterMs in, or when it is ended sooner
          await new Promise<void>((r) =>
            proc.exitListeners.add(r) && this.#machine.startTimer(fault.afterMs!, r)
          );
        }
        proc.exit();
        return await this.#exited(`injected by exitDuring("${op}"): the process exited`);
      case "hang": {
        let exited = () => {};
        const gone = new Promise<"exited">((resolve) => exited = () => resolve("exited"));
        proc.exitListeners.add(exited);
        const held = await Promise.race([hit!.hold(), gone]); // neither rejects
        proc.exitListeners.delete(exited);
        if (held === "exited") return await this.#exited();
      }
    }
    return await this.#after(() => ok(value()));
  }

  /** An injected failure's answer, the memory moved where its state keeps it. */
  async #applyFault(proc: SimulatedProcess, op: string, fault: InjectedFault): Promise<Answer> {
    await this.#after(ok());
    const note = `injected by failNext(${JSON.stringify(op)})`;
    const state = isFinal(proc.state) ? undefined : fault.state; // the failed state is final
    if (state !== undefined && memoryOnHost(state)) proc.moveToHost();
    const back = state !== undefined && !memoryOnHost(state) && !isFinal(state);
    // Memory goes back onto the GPU only where it fits, as a restore's would.
    const short = back && proc.memoryLocation === "host" ? proc.claimOn(proc.gpus) : undefined;
    if (!short && back) proc.moveToGpu(proc.gpus); // where it is in host memory
    if (!short && state !== undefined) proc.enter(state);
    const stays = `${note} to leave the process ${state}, but ${short}; it stays checkpointed`;
    const answer = short
      ? { code: CUDA_ERROR_OUT_OF_MEMORY, note: stays }
      : { code: fault.code, note };
    // As driver 580 after a restore ran out of memory: every later restore of it is refused.
    const lost = op === "restore" && answer.code === CUDA_ERROR_OUT_OF_MEMORY;
    if (lost && proc.state === "checkpointed") proc.refuseRestores();
    return answer;
  }

  /** The GPUs to restore onto, or why the mapping is rejected (INVALID_VALUE). */
  #mapGpus(proc: SimulatedProcess, pairs: readonly GpuPair[]): SimulatedGpu[] | string {
    // The GPUs it saw when checkpointed: this machine's, or another's where criu brought it here.
    const elsewhere = gpusSeenBy(proc);
    const there = `another machine's GPUs (${elsewhere?.map((g) => g.uuid).join(", ")})`;
    const needs = `the process was checkpointed on ${there}: restoring it here needs GPU pairs`;
    if (pairs.length === 0) return elsewhere ? needs : proc.gpus;
    const seen = elsewhere ?? this.#machine.gpus;
    const fromUuid = new Map(seen.map((g) => [g.uuid, g]));
    const byUuid = new Map(this.#machine.gpus.map((g) => [g.uuid, g]));
    const map = new Map<SimulatedGpu, SimulatedGpu>();
    const where = elsewhere ? "the machine the process was checkpointed on" : "this machine";
    for (const pair of pairs) {
      const [old, now] = [formatGpuUuid(pair.oldUuid), formatGpuUuid(pair.newUuid)];
      const [from, to] = [fromUuid.get(old), byUuid.get(now)];
      if (!from) return `old UUID ${old} is not a GPU of ${where}`;
      if (!to) return `new UUID ${now} is not a GPU of this machine`;
      if (map.has(from)) return `GPU ${from.index} (${from.uuid}) is mapped twice`;
      map.set(from, to);
    }
    // Measured on two H200s: a GPU left out (even one not used), or two onto one: INVALID_VALUE.
    const left = seen.find((g) => !map.has(g));
    const out = left && `GPU ${left.index} (${left.uuid}); it must name every GPU`;
    if (out) return `the mapping leaves out ${out}`;
    const onto = new Map<SimulatedGpu, SimulatedGpu>();
    for (const [from, to] of map) {
      const prev = onto.get(to);
      if (prev) return `GPUs ${prev.index} and ${from.index} are both mapped onto GPU ${to.index}`;
      onto.set(to, from);
    }
    // The same chip for each GPU it used (NVIDIA's documentation; not measured).
    const moved = proc.gpus.find((g) => map.get(g)!.name !== g.name);
    if (!moved) return proc.gpus.map((g) => map.get(g)!);
    const to = map.get(moved)!;
    return `the process's GPU ${moved.index} (${moved.name}) would move onto GPU ${to.index} (${to.name}): restore needs the same chip`;
  }
}

const codeOf = (answer: Answer): number => answer.code;

const ok = (value?: number): Answer => ({ code: CUDA_SUCCESS, value });

/** Success, the process put in the state `step` leads to. */
function entered(proc: SimulatedProcess, step: Step): Answer {
  proc.enter(stepTo(step));
  return ok();
}

/** A query's answer: its code, and its value where it succeeded. */
function result(answer: Answer): DriverResult {
  return { code: answer.code, value: answer.code === CUDA_SUCCESS ? answer.value ?? 0 : 0 };
}
