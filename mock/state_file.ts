// A quiescent {@link SimulatedMachine} as plain JSON, and back: what `cuda-checkpoint --simulate`
// keeps between calls. Another format or version is refused, naming it.

import type { Rates } from "../core/host.ts";
import { StrictReader } from "../core/json.ts";
import { checkKeys, describeValue, isName, MAX_PID } from "../core/options.ts";
import { INITIAL_STATE, isFinal, memoryOnHost } from "../core/states.ts";
import { PROCESS_STATES, type ProcessState } from "../core/states.ts";
import { FAULTABLE_OPERATIONS, type FaultableOperation, type PendingFault } from "./faults.ts";
import { base64, readPages } from "./memory.ts";
import type { SimulatedGpuSpec } from "./sim_gpu.ts";
import { SimulatedProcess } from "./sim_process.ts";
import { type ProcessFields, readFields } from "./fields.ts";
import { SimulatedMachine, type SimulatedMachineOptions } from "./simulator.ts";
import { mibToBytes } from "./timing.ts";

/** The `format` tag of every snapshot. */
export const SIMULATOR_SNAPSHOT_FORMAT = "ckpt-cuda-simulated-machine";
/** The snapshot `version` this module writes and reads (1 to 3, before 0.1.0, are not read). */
export const SIMULATOR_SNAPSHOT_VERSION = 4;

/** A GPU in a snapshot: every field of a `SimulatedGpuSpec`, the UUID as nvidia-smi writes it. */
type GpuSnapshot = Required<SimulatedGpuSpec>;

/** A live process in a snapshot, as `SimulatedProcess` has the fields (GPUs by index). */
interface ProcessSnapshot<Page = string> extends ProcessFields {
  start: number;
  restoreThreadId: number;
  state: ProcessState;
  gpus: number[];
  /** Where its GPU memory's contents are, and its pages not all zero (in base64 as saved). */
  memory?: { on: "gpu" | "host"; pages: [number, Page][] };
  faults?: Partial<Record<FaultableOperation, FaultSnapshot>>;
  restoreRefused?: true;
  /** Present where it is stopped (SIGSTOP), until woken: `SimulatedProcess.stopped`. */
  stopped?: true;
}

/** A fault waiting for its call, as `SimulatedProcess.pendingFaults` lists it, less `operation`. */
type FaultSnapshot<F = PendingFault> = F extends unknown ? Omit<F, "operation"> : never;

/** A record of held GPU memory in a snapshot: of a live CUDA process, MiB by GPU UUID, and when. */
type HeldRecordSnapshot = { pid: number; heldMiB: Record<string, number>; at: number };

/** A simulated machine as plain JSON; not its exited processes, calls, time or timing model. */
export interface SimulatorSnapshot {
  format: typeof SIMULATOR_SNAPSHOT_FORMAT;
  version: typeof SIMULATOR_SNAPSHOT_VERSION;
  driverVersion: number;
  seed: number;
  nextPid: number;
  nextStart: number;
  gpus: GpuSnapshot[];
  processes: ProcessSnapshot[];
  heldRecords?: HeldRecordSnapshot[];
  /** The rates its records keep (`HeldRecords.rates`), where any. */
  rates?: Rates;
}

/** A snapshot that cannot be loaded: another format or version, or a field amiss. */
export class SimulatorSnapshotError extends Error {
  /** An error for `field`, a path (`"gpus[0].uuid"`); `message` says what is wrong with it. */
  constructor(readonly field: string, message: string) {
    super(`invalid simulated machine snapshot: ${message}`);
    this.name = "SimulatorSnapshotError";
  }
}

/** A quiescent simulated machine as plain JSON, for {@link loadSimulator}; throws if not. */
export function snapshotSimulator(sim: SimulatedMachine): SimulatorSnapshot {
  const not = `snapshotSimulator takes a SimulatedMachine, got ${describeValue(sim)}`;
  if (!(sim instanceof SimulatedMachine)) throw new TypeError(not);
  const busy = sim.busyWith();
  if (busy) throw new Error(`cannot save the simulated machine now: ${busy}`);
  // A record is kept where its process lives: the same pid, and the same start where it has one.
  const records: HeldRecordSnapshot[] = sim.heldRecords.liveEntries()
    .map((r) => ({ pid: r.process.pid, heldMiB: { ...r.heldMiB }, at: r.at }));
  return {
    format: SIMULATOR_SNAPSHOT_FORMAT,
    version: SIMULATOR_SNAPSHOT_VERSION,
    driverVersion: sim.version,
    seed: sim.seed,
    nextPid: sim.nextPid,
    nextStart: sim.nextStart,
    gpus: sim.gpus.map(({ name, uuid, memoryMiB, contextMiB }) => ({
      name,
      uuid,
      memoryMiB,
      contextMiB,
    })),
    processes: sim.processes.map((p): ProcessSnapshot => {
      const on = p.memoryLocation;
      const faults = Object.fromEntries(p.pendingFaults.map(({ operation: op, ...f }) => [op, f]));
      return {
        ...p.fields,
        start: p.start,
        restoreThreadId: p.tid,
        state: p.state,
        gpus: p.gpus.map((g) => g.index),
        ...(on === "none" ? {} : { memory: { on, pages: p.savedPages().map(base64) } }),
        ...(Object.keys(faults).length ? { faults } : {}),
        ...(p.restoreRefused ? { restoreRefused: true } : {}),
        ...(p.stopped ? { stopped: true } : {}),
      };
    }),
    ...(records.length > 0 ? { heldRecords: records } : {}),
    ...(Object.keys(sim.heldRecords.kept).length > 0 ? { rates: { ...sim.heldRecords.kept } } : {}),
  };
}

/** A simulated machine from a snapshot read strictly (else a {@link SimulatorSnapshotError}). */
export function loadSimulator(
  snapshot: unknown,
  options: Pick<SimulatedMachineOptions, "clock" | "speed" | "timing"> = {},
): SimulatedMachine {
  const o = checkKeys(options, "loadSimulator options", ["clock", "speed", "timing"]);
  const s = readSnapshot(snapshot);
  const { gpus, driverVersion, seed, nextPid: firstPid } = s;
  const sim = new SimulatedMachine({ ...o, gpus, driverVersion, seed, firstPid });
  s.processes.forEach((p, i) => {
    const gpus = p.gpus.map((g) => sim.gpus[g]), proc = new SimulatedProcess(sim, { ...p, gpus });
    proc.enter(p.state);
    if (p.restoreRefused) proc.refuseRestores();
    if (p.stopped) proc.setStopped(true);
    for (const [operation, fault] of Object.entries(p.faults ?? {})) {
      proc.faultPlan.add({ ...fault, operation } as PendingFault);
    }
    if (p.memory) proc.loadPages(p.memory.on, p.memory.pages);
    const short = p.memory?.on === "gpu" ? proc.claimOn(gpus) : undefined;
    const at = `processes[${i}]`;
    if (short) throw new SimulatorSnapshotError(at, `${at} (pid ${p.pid}) does not fit: ${short}`);
    sim.adopt(proc);
  });
  sim.reserveStarts(s.nextStart);
  for (const r of s.heldRecords) {
    // The record is of the live process with the pid (checked), under its start number.
    const process = { pid: r.pid, start: sim.process(r.pid)!.start };
    void sim.heldRecords.put({ process, heldMiB: r.heldMiB, at: r.at });
  }
  sim.heldRecords.kept = s.rates ?? {};
  return sim;
}

const NAME = "a non-empty string without NUL"; // a GPU's name, as isName and the machine say
const PROCESS_FIELDS =
  "pid parent start threads restoreThreadId command cuda libcuda inspectable state gpus memoryMiB"
    .split(" ");
const OPTIONAL_FIELDS = "memory faults restoreRefused stopped ipcImport nccl tcp".split(" ");

/** What reading a snapshot knows so far: its reader, GPUs, bounds, and the ids seen. */
type Seen = Record<"threads" | "pids" | "starts", Set<number>>;
type Reading = Seen & { read: StrictReader; gpus: readonly GpuSnapshot[] } & Bounds;
type Bounds = { nextPid: number; nextStart: number };

/** `value` read strictly as a whole snapshot: what it holds but its tag, GPU UUIDs normalised. */
function readSnapshot(value: unknown) {
  const read = new StrictReader((field, reason) => new SimulatorSnapshotError(field, reason));
  const not = `the snapshot must be an object, got ${describeValue(value)}`;
  if (typeof value !== "object" || value === null || Array.isArray(value)) read.refuse("", not);
  // The tag and version first, so that a foreign file is called foreign, not broken.
  const { format, version } = value as Record<string, unknown>;
  const FORMAT = SIMULATOR_SNAPSHOT_FORMAT, VERSION = SIMULATOR_SNAPSHOT_VERSION;
  if (format !== FORMAT) read.fail("format", JSON.stringify(FORMAT), format);
  const got = describeValue(version);
  const unknown = `version ${got} is not known: this module reads version ${VERSION}`;
  if (version !== VERSION) read.refuse("version", unknown);
  const fields = "format version driverVersion seed nextPid nextStart gpus processes".split(" ");
  const top = read.object(value, "", fields, ["heldRecords", "rates"]);
  const gpus = read.array(top.gpus, "gpus", 1, 1024).map((g, i) =>
    read.fields<GpuSnapshot>(g, `gpus[${i}]`, {
      name: (v, at) => isName(read.string(v, at)) ? v as string : read.fail(at, NAME, v),
      uuid: (v, at) => read.uuid(v, at),
      memoryMiB: (v, at) => read.amount(v, at, true),
      contextMiB: (v, at) => read.amount(v, at),
    })
  );
  gpus.forEach((g, i) => {
    const first = gpus.findIndex((o) => o.uuid === g.uuid), at = `gpus[${i}].uuid`;
    if (first !== i) read.refuse(at, `${at} ${g.uuid} is also GPU ${first}'s`);
  });
  const nextPid = read.integer(top.nextPid, "nextPid", 1, MAX_PID);
  const nextStart = read.integer(top.nextStart, "nextStart", 1);
  const seen: Seen = { threads: new Set(), pids: new Set(), starts: new Set() };
  const r: Reading = { read, gpus, nextPid, nextStart, ...seen };
  const processes = read.array(top.processes, "processes")
    .map((p, i) => readProcess(r, p, `processes[${i}]`));
  const held = top.heldRecords === undefined ? [] : read.array(top.heldRecords, "heldRecords");
  const heldRecords = held.map((value, i): HeldRecordSnapshot => {
    const at = `heldRecords[${i}]`, o = read.object(value, at, ["pid", "heldMiB", "at"]);
    const pid = read.integer(o.pid, `${at}.pid`, 1, MAX_PID);
    const none = `${at}.pid ${pid} is no CUDA process of the snapshot`;
    if (!processes.some((p) => p.pid === pid && p.cuda)) read.refuse(`${at}.pid`, none);
    const heldMiB = read.mibByGpu(o.heldMiB, `${at}.heldMiB`); // here or where it was checkpointed
    return { pid, heldMiB, at: read.integer(o.at, `${at}.at`, 0) };
  });
  const driverVersion = read.integer(top.driverVersion, "driverVersion", 0, MAX_PID);
  const seed = read.integer(top.seed, "seed", 0, 2 ** 32 - 1);
  const rates = top.rates === undefined ? {} : read.object(top.rates, "rates") as Rates;
  for (const [step, n] of Object.entries(rates)) read.amount(n, `rates.${step}`, true);
  return { driverVersion, seed, nextPid, nextStart, gpus, processes, rates, heldRecords };
}

function readProcess(r: Reading, value: unknown, at: string): ProcessSnapshot<Uint8Array> {
  const { read, nextPid } = r;
  const p = read.object(value, at, PROCESS_FIELDS, OPTIONAL_FIELDS);
  /** Refuses the field `${at}.${f}`, its path followed by `why`. */
  const no = (f: string, why: string): never => read.refuse(`${at}.${f}`, `${at}.${f}${why}`);
  const pid = read.integer(p.pid, `${at}.pid`, 1, nextPid - 1);
  const fields = readFields(read, p, at, pid, nextPid - 1);
  const { threads, parent, cuda, memoryMiB } = fields;
  threads.forEach((tid, i) => {
    if (r.threads.has(tid)) no(`threads[${i}]`, ` ${tid} is another thread's or process's id too`);
    r.threads.add(tid);
  });
  if (threads[0] !== pid) no("threads[0]", ` must be the pid ${pid}, got ${threads[0]}`);
  if (parent && !r.pids.has(parent)) no("parent", ` ${parent} is no process listed before it`);
  const start = read.integer(p.start, `${at}.start`, 1, r.nextStart - 1);
  if (r.starts.has(start)) no("start", ` ${start} is another process's start number too`);
  r.starts.add(start);
  r.pids.add(pid);
  const tid = cuda ? threads[threads.length - 1] : 0;
  const expected = `${tid} (${cuda ? "its last thread" : "none: it has no CUDA"})`;
  if (p.restoreThreadId !== tid) read.fail(`${at}.restoreThreadId`, expected, p.restoreThreadId);
  const state = read.choice(p.state, `${at}.state`, PROCESS_STATES);
  const plain = `"${INITIAL_STATE}" for a process without CUDA`;
  if (!cuda && state !== INITIAL_STATE) read.fail(`${at}.state`, plain, state);
  const gpus = read.array(p.gpus, `${at}.gpus`, 1, r.gpus.length).map((g, i, all) => {
    const index = read.integer(g, `${at}.gpus[${i}]`, 0, r.gpus.length - 1);
    if (all.indexOf(g) < i) no(`gpus[${i}]`, `: GPU ${index} is listed twice`);
    return index;
  });
  // Checkpointed memory holds no GPU, but it came from these GPUs: no share can be larger.
  const smallest = Math.min(...gpus.map((g) => r.gpus[g].memoryMiB));
  const unfit = ` ${memoryMiB} cannot have fitted on its GPUs (${smallest} MiB the smallest)`;
  if (memoryMiB / gpus.length > smallest) no("memoryMiB", unfit);
  const extra = cuda ? undefined : ["memory", "faults"].find((f) => p[f] !== undefined);
  if (extra) no(extra, ": a process without CUDA has none");
  const notTrue = ["restoreRefused", "stopped"].find((f) => p[f] !== undefined && p[f] !== true);
  if (notTrue) read.fail(`${at}.${notTrue}`, "true where present", p[notTrue]);
  const refused = `: only a checkpointed process can be refused restores, not a ${state} one`;
  if (p.restoreRefused && !memoryOnHost(state)) no("restoreRefused", refused);
  const out: ProcessSnapshot<Uint8Array> = { ...fields, start, restoreThreadId: tid, state, gpus };
  if (cuda) {
    const m = read.object(p.memory, `${at}.memory`, ["on", "pages"]);
    const on = read.choice(m.on, `${at}.memory.on`, ["gpu", "host"] as const);
    // Checkpointed: in host memory; running or locked: on the GPU; failed: anywhere.
    const where = memoryOnHost(state) ? "host" : isFinal(state) ? on : "gpu";
    if (on !== where) read.fail(`${at}.memory.on`, `"${where}" for a ${state} process`, on);
    const pages = readPages(read, m.pages, mibToBytes(memoryMiB), `${at}.memory.pages`);
    out.memory = { on, pages };
  }
  if (p.faults !== undefined) out.faults = readFaults(read, p.faults, `${at}.faults`);
  if (p.restoreRefused) out.restoreRefused = true;
  if (p.stopped) out.stopped = true;
  return out;
}

/** What each kind of fault has besides `kind` and `nth`. */
const FAULT_FIELDS = { fail: ["code"], exit: ["afterMs"], hang: [], answer: ["value"] };

function readFaults(read: StrictReader, value: unknown, at: string): ProcessSnapshot["faults"] {
  const f = read.object(value, at, [], FAULTABLE_OPERATIONS);
  const out: ProcessSnapshot["faults"] = {};
  for (const op of FAULTABLE_OPERATIONS.filter((o) => f[o] !== undefined)) {
    const path = `${at}.${op}`;
    const kinds = Object.keys(FAULT_FIELDS) as (keyof typeof FAULT_FIELDS)[];
    const kind = read.choice(read.object(f[op], path).kind, `${path}.kind`, kinds);
    const optional = kind === "fail" ? ["state"] : [];
    const fault = read.object(f[op], path, ["kind", "nth", ...FAULT_FIELDS[kind]], optional);
    const nth = read.integer(fault.nth, `${path}.nth`, 1, 1_000_000);
    if (kind === "fail") {
      const code = read.integer(fault.code, `${path}.code`, 1, MAX_PID);
      out[op] = fault.state === undefined
        ? { kind, nth, code }
        : { kind, nth, code, state: read.choice(fault.state, `${path}.state`, PROCESS_STATES) };
    } else if (kind === "exit") {
      out[op] = { kind, nth, afterMs: read.amount(fault.afterMs, `${path}.afterMs`) };
    } else if (kind === "hang") {
      out[op] = { kind, nth };
    } else if (op !== "getState" && op !== "getRestoreThreadId") {
      read.refuse(`${path}.kind`, `${path}: only getState and getRestoreThreadId have an answer`);
    } else {
      out[op] = { kind, nth, value: read.integer(fault.value, `${path}.value`, 0, MAX_PID) };
    }
  }
  return out;
}
