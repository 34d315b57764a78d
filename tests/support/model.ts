// A small reference model of the CUDA checkpoint state machine, written from
// docs/DRIVER.md (#state-machine, #overlapping-calls, and
// NVIDIA's word on OUT_OF_MEMORY and FAILED), not from the simulator's tables, and of what this
// library promises on top of it (README "Reliability"). tests/model_test.ts drives random
// sequences of operations through fast-check against it; tests/fixtures/unhandled.ts runs the
// same sequences to look for unhandled rejections. Not a test file.
import assert from "node:assert/strict";
import fc from "fast-check";

import { CudaError, CudaProcess, RefusedError, runGroup } from "../../mod.ts";
import type { Action } from "../../types.ts";
import { SimulatedMachine, type SimulatedProcess } from "../../mock/mod.ts";

// ---- the driver, from docs/DRIVER.md ----

/** A process's checkpoint state. */
export type State = "running" | "locked" | "checkpointed" | "failed";
/** A driver call that changes the state. */
export type Step = "lock" | "checkpoint" | "restore" | "unlock";

/** Each step takes a process from one state to one other; any other state is ILLEGAL_STATE. */
const STEP: Readonly<Record<Step, readonly [State, State]>> = {
  lock: ["running", "locked"],
  checkpoint: ["locked", "checkpointed"],
  restore: ["checkpointed", "locked"], // locked, not running
  unlock: ["locked", "running"],
};

const SUCCESS = 0;
const INVALID_VALUE = 1;
const OUT_OF_MEMORY = 2;
const NOT_INITIALIZED = 3;
const OPERATING_SYSTEM = 304;
const ILLEGAL_STATE = 401;

/** A fault waiting on a step (the simulator's failNext and exitDuring, as its docs say). */
export type Fault =
  | { kind: "fail"; nth: number; code: number; state?: State }
  | { kind: "exit"; nth: number; afterMs: number };

/** A process as the model sees it. */
export interface ModelProcess {
  readonly pid: number;
  readonly cuda: boolean;
  readonly memoryMiB: number;
  gone: boolean;
  state: State;
  /** Whether its memory is on the GPU (running, locked) or in host memory (checkpointed). */
  onGpu: boolean;
  faults: Map<Step, Fault>;
  /** Driver: a restore of it ran out of GPU memory, and every restore since is refused. */
  refused: boolean;
  /** Library: it remembers what the process held when it checkpointed it (core/room.ts). */
  heldKnown: boolean;
  /** It imported GPU memory from the first process through CUDA IPC (docs/DRIVER.md). */
  importer: boolean;
}

/** The machine as the model sees it: one GPU. */
export interface Model {
  readonly procs: ModelProcess[];
  readonly capacityMiB: number;
  readonly contextMiB: number;
  /** GPU memory a filler holds (0: none). */
  fillerMiB: number;
}

/** GPU memory in use: the filler's, and each live CUDA process's memory and context on the GPU. */
export function usedMiB(m: Model): number {
  return m.fillerMiB +
    m.procs.filter((p) => p.cuda && !p.gone && p.onGpu).reduce(
      (sum, p) => sum + p.memoryMiB + m.contextMiB,
      0,
    );
}

/** One driver call on the model: its code, and the process changed as the real driver would. */
export function call(m: Model, p: ModelProcess, op: Step | "getState"): number {
  if (p.gone) return OPERATING_SYSTEM; // no such pid
  if (!p.cuda) return NOT_INITIALIZED; // a live process that never initialised CUDA
  if (op === "getState") return SUCCESS;
  const [from, to] = STEP[op];
  if (p.state !== from) return ILLEGAL_STATE; // "unchanged"
  const fault = take(p, op);
  if (fault?.kind === "exit") {
    p.gone = true; // "the target process exits during checkpoint: OPERATING_SYSTEM"
    return OPERATING_SYSTEM;
  }
  if (fault?.kind === "fail") {
    const state = fault.state;
    if ((state === "running" || state === "locked") && !p.onGpu) {
      if (!fits(m, p)) return OUT_OF_MEMORY; // memory back on the GPU needs room
      p.onGpu = true;
    }
    if (state === "checkpointed") p.onGpu = false;
    if (state !== undefined) p.state = state;
    if (state !== undefined && state !== "checkpointed") p.refused = false;
    return fault.code;
  }
  // Measured on driver 580 (docs/DRIVER.md#an-out-of-memory-restore-loses-the-process): after
  // a restore ran out of memory, every restore of the process fails with OPERATING_SYSTEM and it
  // stays checkpointed.
  if (op === "restore" && p.refused) return OPERATING_SYSTEM;
  // Measured on driver 580 (docs/DRIVER.md, "Processes that share GPU memory"): an importer of
  // CUDA IPC memory checkpoints, and every restore of it then fails: the first with invalid
  // argument, its exporter alive or gone, every later one (above) with an OS call failed; it stays
  // checkpointed.
  if (op === "restore" && p.importer) {
    p.refused = true;
    return INVALID_VALUE;
  }
  // "restore onto a GPU without enough free memory gives OUT_OF_MEMORY and leaves the process
  // checkpointed"
  if (op === "restore" && !fits(m, p)) {
    p.refused = true;
    return OUT_OF_MEMORY;
  }
  p.state = to;
  if (op === "checkpoint") p.onGpu = false; // "releases the GPU"
  if (op === "restore") p.onGpu = true;
  return SUCCESS;
}

function fits(m: Model, p: ModelProcess): boolean {
  return p.memoryMiB + m.contextMiB <= m.capacityMiB - usedMiB(m);
}

/** Counts a step the driver carries out; the fault that hits it, if one does. */
function take(p: ModelProcess, op: Step): Fault | undefined {
  const f = p.faults.get(op);
  if (!f) return undefined;
  if (f.nth > 1) {
    p.faults.set(op, { ...f, nth: f.nth - 1 });
    return undefined;
  }
  p.faults.delete(op);
  return f;
}

// ---- what the library does with those calls (README "Reliability", docs/API.md) ----

/** A refusal before the driver was asked: `RefusedError.code`. */
type Refusal = "NO_ROOM" | "STATE" | "IPC";

/**
 * A step as the library makes it: a restore of a process that a program of this package
 * checkpointed is refused without a driver call where it would not fit, while the process is
 * checkpointed; what it held is recorded at its checkpoint (for the process, whichever id names
 * it) until it is locked from running or restored again.
 */
function lib(m: Model, p: ModelProcess, step: Step): number | Refusal {
  // docs/API.md, "Shared GPU memory": no checkpoint of an importer reaches the driver.
  if (step === "checkpoint" && p.importer && !p.gone) return "IPC";
  if (step === "restore" && p.heldKnown && !fits(m, p)) {
    if (!p.gone && p.cuda && p.state === "checkpointed") return "NO_ROOM";
    p.heldKnown = false;
  }
  const code = call(m, p, step);
  if (code === SUCCESS && step !== "unlock") p.heldKnown = step === "checkpoint";
  return code;
}

/** The operations of `CudaProcess` the model knows. */
const OPERATIONS = [
  "state",
  "lock",
  "checkpoint",
  "restore",
  "unlock",
  "suspend",
  "resume",
  "toggle",
] as const;
/** An operation of `CudaProcess`. */
export type Operation = typeof OPERATIONS[number];

/**
 * What an operation resolves to (a state-changing one: its status and the state it left), or the
 * code it rejects with: the driver's `CUresult`, or a refusal's string.
 */
export type Outcome = { ok: true; value?: string } | { ok: false; code: number | string };

const done = (value?: string): Outcome => value === undefined ? { ok: true } : { ok: true, value };
const failed = (code: number | string): Outcome => ({ ok: false, code });
const isGoneCode = (code: number | string) => code === OPERATING_SYSTEM || code === NOT_INITIALIZED;

/** A `CudaProcess` operation on the model: the calls it makes, in order, and its outcome. */
export function operate(m: Model, p: ModelProcess, op: Operation): Outcome {
  if (op === "state") {
    const code = call(m, p, "getState");
    return code === SUCCESS ? done(p.state) : failed(code);
  }
  const r = act(m, p, op, false);
  return r.code === undefined ? done(`${r.status} ${r.state}`) : failed(r.code);
}

/** Where each goal leads from a state: `undefined` where it is refused. */
function destination(action: Action, from: State): State | undefined {
  if (from === "failed") return undefined; // "the failed state is final"
  switch (action) {
    case "suspend":
      return "checkpointed";
    case "resume":
      return "running";
    case "toggle":
      // "toggle goes between running and checkpointed", as NVIDIA's utility does
      return from === "running" ? "checkpointed" : from === "checkpointed" ? "running" : undefined;
    default:
      return STEP[action][1];
  }
}

/** What one action did to a process, as the library reports it. */
interface Acted {
  status: "done" | "unchanged" | "failed";
  state?: State;
  code?: number | string;
}

/**
 * One action on one process, as `CudaProcess` and the group operations both make it: a step is
 * one driver call (a group reads the state first, `readState`); a goal reads the state, makes
 * the steps of running - locked - checkpointed that lead where it leads (none: unchanged), and a
 * failed step is undone: only what the action did, back to where the process was (a step the
 * driver refused as illegal changed nothing, so the process is brought back only if it is still
 * where the done steps left it).
 */
function act(m: Model, p: ModelProcess, action: Action, readState: boolean): Acted {
  const isStep = (STEPS as readonly string[]).includes(action);
  if (isStep && !readState) {
    const code = lib(m, p, action as Step);
    return code === SUCCESS ? { status: "done", state: p.state } : { status: "failed", code };
  }
  const read = call(m, p, "getState");
  if (read !== SUCCESS) return { status: "failed", code: read };
  const initial = p.state;
  let steps: Step[];
  if (isStep) {
    steps = [action as Step];
  } else {
    const to = destination(action, initial);
    if (to === undefined) return { status: "failed", code: "STATE", state: initial };
    if (to === initial) return { status: "unchanged", state: initial };
    steps = wayBetween(initial, to)!;
  }
  if (steps.includes("checkpoint") && p.importer) return { status: "failed", code: "IPC" };
  const madeSteps: Step[] = [];
  for (const step of steps) {
    const code = lib(m, p, step);
    if (code === SUCCESS) {
      madeSteps.push(step);
      continue;
    }
    if (!isGoneCode(code) && code !== "NO_ROOM" && !p.gone) {
      const left = madeSteps.length > 0 ? STEP[madeSteps[madeSteps.length - 1]][1] : initial;
      if (code !== ILLEGAL_STATE || p.state === left) {
        for (const back of wayBetween(p.state, initial) ?? []) {
          if (lib(m, p, back) !== SUCCESS) break;
        }
      }
    }
    return { status: "failed", code };
  }
  return { status: "done", state: p.state };
}

/** Where each group action takes a process (`done` or `unchanged`). */
function wanted(action: Action, initial: State): State | undefined {
  return destination(action, initial);
}

const CHAIN: readonly State[] = ["running", "locked", "checkpointed"];

/** The steps between two states of running - locked - checkpointed; none from or to failed. */
function wayBetween(from: State, to: State): Step[] | undefined {
  let i = CHAIN.indexOf(from);
  const j = CHAIN.indexOf(to);
  if (i < 0 || j < 0) return undefined;
  const way: Step[] = [];
  for (; i < j; i++) way.push(i === 0 ? "lock" : "checkpoint");
  for (; i > j; i--) way.push(i === 2 ? "restore" : "unlock");
  return way;
}

/** A group member's status, as `ProcessOutcome.status` says it. */
export type Status = "done" | "unchanged" | "failed";

/** One process of a group that is not all-or-nothing: the same action, its state read first. */
export function groupMember(m: Model, p: ModelProcess, action: Action): Status {
  return act(m, p, action, true).status;
}

// ---- the real side: a simulated machine and handles on it ----

/**
 * What a run works on: the simulator, its processes, two handles each (one made with its pid, one
 * with the id of another of its threads: they name one process), and the GPU filler.
 */
export interface Real {
  readonly sim: SimulatedMachine;
  readonly procs: SimulatedProcess[];
  readonly handles: (readonly [CudaProcess, CudaProcess])[];
  readonly digests: Map<number, string>;
  filler?: SimulatedProcess;
}

/** A process to start a run with. */
export interface Spec {
  readonly memoryMiB: number;
  readonly state: "running" | "locked" | "checkpointed";
}

/**
 * A machine with the processes of `specs`, an importer of the first one's GPU memory (CUDA IPC)
 * and one that never used CUDA, and its model.
 */
export async function start(specs: readonly Spec[]): Promise<{ model: Model; real: Real }> {
  const sim = new SimulatedMachine();
  const procs: SimulatedProcess[] = [];
  const digests = new Map<number, string>();
  for (const [i, spec] of specs.entries()) {
    const p = sim.spawn({ memoryMiB: spec.memoryMiB });
    await p.write(i * 4099, new Uint8Array([i + 1, 42, i * 3]));
    digests.set(p.pid, await p.memoryChunkedSha256());
    if (spec.state !== "running") assert.equal(await sim.driver.lock(p.pid, null), SUCCESS);
    if (spec.state === "checkpointed") assert.equal(await sim.driver.checkpoint(p.pid), SUCCESS);
    procs.push(p);
  }
  // An importer of the first process's GPU memory (CUDA IPC), running, then one without CUDA.
  const importer = sim.spawn({ memoryMiB: 2, ipcImport: { exporter: procs[0].pid } });
  digests.set(importer.pid, await importer.memoryChunkedSha256());
  procs.push(importer, sim.spawn({ cuda: false }));
  const model: Model = {
    procs: procs.map((p, i) => ({
      pid: p.pid,
      cuda: p.usesCuda,
      memoryMiB: p.memoryMiB,
      gone: false,
      state: specs[i]?.state ?? "running",
      onGpu: specs[i]?.state !== "checkpointed",
      faults: new Map(),
      refused: false,
      heldKnown: false,
      importer: p.ipcImport !== undefined,
    })),
    capacityMiB: sim.gpus[0].memoryMiB,
    contextMiB: sim.gpus[0].contextMiB,
    fillerMiB: 0,
  };
  const handles = procs.map((p) =>
    [
      new CudaProcess(p.pid, { machine: sim }),
      new CudaProcess(p.threads[1], { machine: sim }),
    ] as const
  );
  return { model, real: { sim, procs, handles, digests } };
}

/** Checks the machine against the model: every state, who is gone, the GPU memory in use. */
export function agree(m: Model, r: Real, after: string): void {
  for (const [i, p] of m.procs.entries()) {
    const q = r.procs[i];
    assert.equal(q.exited, p.gone, `${after}: pid ${p.pid} gone`);
    if (!p.gone && p.cuda) assert.equal(q.state, p.state, `${after}: pid ${p.pid}'s state`);
  }
  assert.equal(r.sim.gpus[0].usedMiB, usedMiB(m), `${after}: GPU memory in use`);
}

/** Every live process that is running has its memory as it was written. */
export async function memoryIntact(m: Model, r: Real): Promise<void> {
  for (const [i, p] of m.procs.entries()) {
    if (p.gone || !p.cuda || p.state !== "running") continue;
    assert.equal(
      await r.procs[i].memoryChunkedSha256(),
      r.digests.get(p.pid),
      `pid ${p.pid}'s memory`,
    );
  }
}

/** What a real operation did, in the model's terms; checks a rejection is a clear error. */
async function outcomeOf(p: Promise<unknown>, pid: number): Promise<Outcome> {
  try {
    const value = await p;
    if (typeof value === "string") return done(value);
    const o = value as { status: string; state: string };
    return done(`${o.status} ${o.state}`);
  } catch (err) {
    if (err instanceof RefusedError) {
      assert.ok(err.message.includes(`process ${pid} refused`), err.message);
      return failed(err.code);
    }
    assert.ok(err instanceof CudaError, `a CudaError or RefusedError, got ${err}`);
    assert.ok(err.message.includes(`process ${pid}`), err.message);
    if (err.codeName.startsWith("CUresult ")) assert.ok(err.message.includes(`${err.code}`));
    return failed(err.code);
  }
}

/** Takes the model's processes back from the machine (after a group whose timing decides). */
function resync(m: Model, r: Real): void {
  for (const [i, p] of m.procs.entries()) {
    const q = r.procs[i];
    p.gone = q.exited;
    if (p.gone || !p.cuda) continue;
    p.state = q.state;
    p.onGpu = q.memoryLocation === "gpu";
    p.refused = q.restoreRefused;
    p.heldKnown = r.sim.heldRecords.liveEntries().some((rec) => rec.process.pid === p.pid);
    p.faults = new Map(
      q.pendingFaults.flatMap((f): [Step, Fault][] =>
        f.kind === "fail"
          ? [[f.operation as Step, {
            kind: "fail",
            nth: f.nth,
            code: f.code,
            ...(f.state ? { state: f.state } : {}),
          }]]
          : f.kind === "exit"
          ? [[f.operation as Step, { kind: "exit", nth: f.nth, afterMs: f.afterMs }]]
          : []
      ),
    );
  }
}

// ---- commands ----

type Cmd = fc.AsyncCommand<Model, Real, boolean>;

const STEPS: readonly Step[] = ["lock", "checkpoint", "restore", "unlock"];
const ACTIONS: readonly Action[] = [
  "suspend",
  "resume",
  "toggle",
  "lock",
  "checkpoint",
  "restore",
  "unlock",
];
/** Codes a fault returns: real ones, ILLEGAL_STATE (a lie the library must survive) and one no driver knows. */
const FAULT_CODES = [1, OUT_OF_MEMORY, ILLEGAL_STATE, 600, 801, 999, 7777];

const live = (m: Model, i: number) => !m.procs[i].gone && m.procs[i].cuda;

/** Which handle of a process: 0 made with its pid, 1 with another of its thread ids. */
type Via = 0 | 1;

/** An operation through one of a process's handles, not awaited. */
function through(r: Real, i: number, via: Via, op: Operation): Promise<unknown> {
  const handle = r.handles[i][via];
  return (handle[op] as () => Promise<unknown>).call(handle);
}

/** One operation on one process, through its pid or a thread id, awaited. */
class OperateOne implements Cmd {
  constructor(readonly i: number, readonly op: Operation, readonly via: Via) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const expected = operate(m, m.procs[this.i], this.op);
    const handle = r.handles[this.i][this.via];
    const seen = await outcomeOf(through(r, this.i, this.via, this.op), handle.pid);
    assert.deepEqual(seen, expected, this.toString());
    agree(m, r, this.toString());
  }
  toString = () => `${this.op}(#${this.i}${this.via ? " by tid" : ""})`;
}

/**
 * Operations made all at once, on one process or several, without waiting: each process's run
 * one after another in the order made, so each result is the model's in that order. No filler
 * (GPU memory then never decides between processes).
 */
class OperateAtOnce implements Cmd {
  constructor(readonly ops: readonly (readonly [number, Operation, Via])[]) {}
  check = (m: Readonly<Model>) => m.fillerMiB === 0;
  async run(m: Model, r: Real): Promise<void> {
    const expected = this.ops.map(([i, op]) => operate(m, m.procs[i], op));
    const promises = this.ops.map(([i, op, via]) => through(r, i, via, op));
    const seen = await Promise.all(
      promises.map((p, k) => outcomeOf(p, r.handles[this.ops[k][0]][this.ops[k][2]].pid)),
    );
    assert.deepEqual(seen, expected, this.toString());
    agree(m, r, this.toString());
  }
  toString = () =>
    `atOnce(${this.ops.map(([i, op, via]) => `${op}(#${i}${via ? " by tid" : ""})`).join(", ")})`;
}

/** A group operation on some processes. */
class Group implements Cmd {
  constructor(
    readonly action: Action,
    readonly members: readonly number[],
    readonly allOrNothing: boolean,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const before = this.members.map((i) => ({ ...m.procs[i] }));
    const result = await runGroup(this.action, this.members.map((i) => r.procs[i].pid), {
      machine: r.sim,
      allOrNothing: this.allOrNothing,
    });
    const label = this.toString();
    // Every outcome tells the truth about where its process is.
    for (const [k, o] of result.processes.entries()) {
      const q = r.procs[this.members[k]];
      if (o.state !== undefined) assert.equal(o.state, q.state, `${label}: pid ${o.pid}`);
      if (o.status === "done" || o.status === "unchanged") {
        const to = o.initialState && wanted(this.action, o.initialState);
        if (!o.rollback) assert.equal(q.state, to, label);
      }
      if (o.error) assert.ok(o.error.message.includes(`${o.pid}`), o.error.message);
    }
    const exact = !this.allOrNothing && m.fillerMiB === 0;
    if (exact) {
      // Each process on its own: the model says what becomes of it.
      const statuses = this.members.map((i) => groupMember(m, m.procs[i], this.action));
      assert.deepEqual(result.processes.map((o) => o.status), statuses, label);
      assert.equal(result.ok, statuses.every((s) => s !== "failed"), label);
    } else {
      // All or nothing (or GPU memory that one may take from another): which steps ran depends
      // on timing, so the machine's states are taken as they are, once the promise is checked.
      if (this.allOrNothing && !result.ok) {
        for (const [k, o] of result.processes.entries()) {
          const q = r.procs[this.members[k]];
          // Not ours to bring back: a step refused as illegal changed nothing, so a process no
          // longer where the done steps left it was moved by something else (here, a fault that
          // says ILLEGAL_STATE and moves it).
          const movedByOther = o.error instanceof CudaError && o.error.code === ILLEGAL_STATE &&
            o.rollback === undefined;
          const couldNot = q.exited || q.state === "failed" || o.rollback?.ok === false ||
            movedByOther ||
            (o.status === "failed" && o.rollback === undefined && o.steps.some((s) => s.ok));
          if (!couldNot && before[k].cuda) {
            assert.equal(q.state, before[k].state, `${label}: pid ${o.pid} back as it was`);
          }
        }
      }
      resync(m, r);
      m.fillerMiB = r.filler && !r.filler.exited ? r.filler.memoryMiB + m.contextMiB : 0;
    }
    agree(m, r, label);
  }
  toString = () =>
    `group(${this.action}, [${this.members.map((i) => `#${i}`).join(", ")}]${
      this.allOrNothing ? ", allOrNothing" : ""
    })`;
}

/** A fault injected into a step of a live CUDA process. */
class Inject implements Cmd {
  constructor(readonly i: number, readonly op: Step, readonly fault: Fault) {}
  check = (m: Readonly<Model>) => live(m as Model, this.i);
  run(m: Model, r: Real): Promise<void> {
    const f = this.fault;
    if (f.kind === "fail") {
      r.procs[this.i].failNext(this.op, {
        code: f.code,
        nth: f.nth,
        ...(f.state ? { state: f.state } : {}),
      });
    } else {
      r.procs[this.i].exitDuring(this.op, { afterMs: f.afterMs, nth: f.nth });
    }
    m.procs[this.i].faults.set(this.op, f);
    return Promise.resolve();
  }
  toString = () => `${this.fault.kind}(#${this.i}, ${this.op}, ${JSON.stringify(this.fault)})`;
}

/** A process exits, or enters the failed state, now. */
class Happen implements Cmd {
  constructor(readonly i: number, readonly what: "exit" | "fail") {}
  check = (m: Readonly<Model>) => live(m as Model, this.i);
  run(m: Model, r: Real): Promise<void> {
    const p = m.procs[this.i];
    if (this.what === "exit") {
      r.procs[this.i].exit();
      p.gone = true;
    } else {
      r.procs[this.i].enterFailedState();
      p.state = "failed";
    }
    agree(m, r, this.toString());
    return Promise.resolve();
  }
  toString = () => `${this.what}Now(#${this.i})`;
}

/** The GPU is filled (nothing more fits), or the filler exits. */
class Fill implements Cmd {
  constructor(readonly fill: boolean) {}
  check = (m: Readonly<Model>) => (m.fillerMiB === 0) === this.fill;
  run(m: Model, r: Real): Promise<void> {
    if (this.fill) {
      m.fillerMiB = m.capacityMiB - usedMiB(m);
      r.filler = r.sim.fillGpu(0);
    } else {
      r.filler!.exit();
      m.fillerMiB = 0;
    }
    agree(m, r, this.toString());
    return Promise.resolve();
  }
  toString = () => (this.fill ? "fillGpu" : "freeGpu");
}

/** The commands, for processes 0..count-1 (the last one never used CUDA). */
export function commands(count: number): fc.Arbitrary<Cmd>[] {
  const proc = fc.integer({ min: 0, max: count - 1 });
  const cuda = fc.integer({ min: 0, max: count - 2 });
  const op = fc.constantFrom(...OPERATIONS);
  const via = fc.constantFrom<Via>(0, 1);
  const step = fc.constantFrom(...STEPS);
  const nth = fc.integer({ min: 1, max: 3 });
  const fault: fc.Arbitrary<Fault> = fc.oneof(
    fc.record({
      kind: fc.constant("fail" as const),
      nth,
      code: fc.constantFrom(...FAULT_CODES),
      state: fc.option(fc.constantFrom<State>("running", "locked", "checkpointed", "failed"), {
        nil: undefined,
      }),
    }).map(({ state, ...f }) => (state === undefined ? f : { ...f, state })),
    fc.record({
      kind: fc.constant("exit" as const),
      nth,
      afterMs: fc.constantFrom(0, 50, 5000),
    }),
  );
  const one = fc.tuple(proc, op, via).map(([i, o, v]) => new OperateOne(i, o, v));
  const atOnce = fc.array(fc.tuple(proc, op, via), { minLength: 2, maxLength: 6 }).map((ops) =>
    new OperateAtOnce(ops)
  );
  const group = fc.tuple(
    fc.constantFrom(...ACTIONS),
    fc.uniqueArray(proc, { minLength: 1, maxLength: count }),
    fc.boolean(),
  ).map(([a, members, aon]) => new Group(a, members, aon));
  const inject = fc.tuple(cuda, step, fault).map(([i, s, f]) => new Inject(i, s, f));
  const happen = fc.tuple(cuda, fc.constantFrom("exit" as const, "fail" as const)).map((
    [i, w],
  ) => new Happen(i, w));
  const fill = fc.boolean().map((f) => new Fill(f));
  // fc.commands picks among these evenly: operations come more often than what breaks processes.
  return [
    one,
    one,
    one,
    one,
    atOnce,
    atOnce,
    group,
    group,
    group,
    inject,
    inject,
    inject,
    happen,
    fill,
  ];
}

/** Random processes to start with: 2 to 4 CUDA processes of 1 to 8 MiB, in any state. */
export const specs: fc.Arbitrary<Spec[]> = fc.array(
  fc.record({
    memoryMiB: fc.integer({ min: 1, max: 8 }),
    state: fc.constantFrom("running" as const, "locked" as const, "checkpointed" as const),
  }),
  { minLength: 2, maxLength: 4 },
);

/** The property: any sequence of commands on any processes keeps the machine and model agreed. */
export function property(maxCommands = 30): fc.IAsyncPropertyWithHooks<[[Spec[], Iterable<Cmd>]]> {
  const runs = specs.chain((s) =>
    fc.tuple(fc.constant(s), fc.commands(commands(s.length + 2), { maxCommands, size: "+1" }))
  );
  return fc.asyncProperty(runs, async ([s, cmds]) => {
    const { model, real } = await start(s);
    try {
      await fc.asyncModelRun(() => ({ model, real }), cmds);
      await memoryIntact(model, real);
    } finally {
      real.sim.close();
    }
  });
}
