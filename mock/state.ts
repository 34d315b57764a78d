/**
 * Snapshots of a simulated machine: a quiescent {@link SimulatedDriver} (its GPUs, its processes,
 * their states and GPU memory contents) as a plain JSON object, and back. A snapshot can be kept
 * in a file between program runs, as `cuda-checkpoint --simulate` does.
 *
 * @module
 */

import {
  INITIAL_STATE,
  isFinal,
  memoryOnHost,
  PROCESS_STATES,
  type ProcessState,
  stateNumber,
} from "../core/states.ts";
import { describeValue, formatGpuUuid, parseGpuUuid } from "../core/uuid.ts";
import {
  checkAmount,
  checkBoolean,
  checkChoice,
  checkInteger,
  checkKeys,
  checkName,
} from "./checks.ts";
import { SimulatedDriver, type SimulatedDriverOptions } from "./driver.ts";
import { checkPages, loadPages, savePages } from "./pages.ts";
import {
  FAULTABLE_OPERATIONS,
  type FaultableOperation,
  type PendingFault,
  STATE_CHANGING,
} from "./faults.ts";
import { needsOn, type ProcessHost, shortage, SimulatedProcess } from "./process.ts";
import { mibToBytes } from "./timing.ts";

/** The `format` tag of every snapshot. */
export const SIMULATOR_SNAPSHOT_FORMAT = "ckpt-cuda-simulated-machine";
/**
 * The newest snapshot `version`, which this module reads and writes. It reads versions 1 to 3 as
 * well, and writes the oldest version that holds the machine, which older readers understand:
 * version 2 where a process has a fault waiting that only it can hold (see {@link FaultSnapshot}),
 * version 3 where the machine keeps records of held GPU memory ({@link HeldRecordSnapshot}),
 * version 4 where a process has a parent, or start numbers other than those a load of an older
 * version gives (1, 2, … in the order of the processes, the next one after them; see
 * {@link ProcessSnapshot}): after a process exited, or a snapshot restore.
 */
export const SIMULATOR_SNAPSHOT_VERSION = 4;

/** A GPU in a {@link SimulatorSnapshot}: every field of a `SimulatedGpuSpec`. */
export interface GpuSnapshot {
  /** The chip's name, e.g. `"NVIDIA H200"`. */
  name: string;
  /** Its UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  uuid: string;
  /** Its memory in MiB. */
  memoryMiB: number;
  /** GPU memory a CUDA context takes on it, per process, in MiB. */
  contextMiB: number;
}

/** The GPU memory contents of a process in a {@link SimulatorSnapshot}. */
export interface MemorySnapshot {
  /** Where the memory is: on its GPUs, or in host memory (checkpointed). */
  on: "gpu" | "host";
  /**
   * The pages that are not all zero, ascending: `[page index, base64 of its bytes]`, a page being
   * `PAGE_SIZE` (64 KiB) bytes, with its trailing zeros left out. Every other byte is zero.
   */
  pages: [number, string][];
}

/** A live process in a {@link SimulatorSnapshot}. */
export interface ProcessSnapshot {
  /** Its process id. */
  pid: number;
  /**
   * Its parent's pid (a process listed before it), or 0 for none (version 4; left out before,
   * where it is 0).
   */
  parent?: number;
  /**
   * Its start number (`SimulatedProcess.start`), below the snapshot's `nextStart` and no other
   * process's (version 4; left out before, where the process gets a new one as it is loaded).
   */
  start?: number;
  /** All its thread ids: the pid first and, for a CUDA process, the driver's thread last. */
  threads: number[];
  /** What `getRestoreThreadId` answers: the last thread of a CUDA process, else 0. */
  restoreThreadId: number;
  /** Its command line. */
  command: string;
  /** Whether it initialised CUDA. */
  cuda: boolean;
  /** Whether it has libcuda mapped. */
  libcuda: boolean;
  /** Whether a listing may look at it. */
  inspectable: boolean;
  /** Its checkpoint state: `"running"` for a process without CUDA. */
  state: ProcessState;
  /** The indexes of the GPUs it runs on (or ran on, while checkpointed). */
  gpus: number[];
  /** Its GPU memory in MiB, contexts not included; 0 without CUDA. */
  memoryMiB: number;
  /** Its GPU memory contents; only a CUDA process has any. */
  memory?: MemorySnapshot;
  /** Faults injected into its calls that have not happened yet, by operation. */
  faults?: Partial<Record<FaultableOperation, FaultSnapshot>>;
  /**
   * `true` where the driver refuses every restore of it: an earlier restore ran out of GPU memory
   * (`SimulatedProcess.restoreRefused`); only checkpointed, only in version 2.
   */
  restoreRefused?: true;
}

/**
 * A fault waiting for its call, in a {@link ProcessSnapshot}. Version 1 holds only failures of
 * the next lock, checkpoint, restore or unlock, as `{ code, state? }`. Version 2 names each
 * fault's kind and which call it hits (`nth`, 1 the next), for every operation: `fail` (the call
 * returns `code` and leaves the process in `state`), `exit` (the process exits `afterMs` into
 * the call), `hang` (the call waits until released) and `answer` (getState or getRestoreThreadId
 * answers `value`). See `SimulatedProcess.failNext` and its neighbours.
 */
export type FaultSnapshot =
  | { code: number; state?: ProcessState }
  | { kind: "fail"; nth: number; code: number; state?: ProcessState }
  | { kind: "exit"; nth: number; afterMs: number }
  | { kind: "hang"; nth: number }
  | { kind: "answer"; nth: number; value: number };

/**
 * A record of held GPU memory in a {@link SimulatorSnapshot} (version 3 and later): what a program
 * of this package recorded a checkpointed simulated process held, for the room check of its
 * restore.
 */
export interface HeldRecordSnapshot {
  /** The process (a live one of the snapshot: the record is of it, with its start number). */
  pid: number;
  /** MiB by GPU UUID (GPUs of the snapshot). */
  heldMiB: Record<string, number>;
  /** When it was recorded, ms since the epoch. */
  at: number;
}

/**
 * A simulated machine as plain JSON: what {@link snapshotSimulator} gives and
 * {@link loadSimulator} takes. Exited processes are not in it: the driver has forgotten them, and
 * their pids, below `nextPid`, are never given again. Neither are the calls log, the clock's time
 * or a timing model given to the driver (a loaded driver uses its chip's).
 */
export interface SimulatorSnapshot {
  /** Always {@link SIMULATOR_SNAPSHOT_FORMAT}. */
  format: typeof SIMULATOR_SNAPSHOT_FORMAT;
  /**
   * 1; 2 where a process has a fault waiting that only version 2 can hold; 3 where there are
   * records of held GPU memory; 4 ({@link SIMULATOR_SNAPSHOT_VERSION}) where the processes'
   * parents and start numbers must be kept.
   */
  version: 1 | 2 | 3 | 4;
  /** What `cuDriverGetVersion` reports, e.g. 13000. */
  driverVersion: number;
  /** The seed its made-up GPU UUIDs came from. */
  seed: number;
  /** The pid the next spawn gives. */
  nextPid: number;
  /** The start number the next process gets (version 4; left out before). */
  nextStart?: number;
  /** The GPUs, by index. */
  gpus: GpuSnapshot[];
  /** The live processes, in the order they were spawned. */
  processes: ProcessSnapshot[];
  /**
   * The records of held GPU memory (version 3: always there; version 4: left out where there are
   * none).
   */
  heldRecords?: HeldRecordSnapshot[];
}

/** Options of {@link loadSimulator}: how the loaded driver keeps time. */
export interface LoadSimulatorOptions {
  /**
   * `"virtual"` (the default: calls finish at once in real time, and report the simulated
   * durations), `"real"`, or any `SimClock`; as `SimulatedDriver`'s option of the same name.
   */
  clock?: SimulatedDriverOptions["clock"];
  /** With `clock: "real"` only: how many times faster than the measured driver to run. */
  speed?: number;
  /** Timing figures; by default the model of GPU 0's chip. */
  timing?: SimulatedDriverOptions["timing"];
}

/**
 * A snapshot that cannot be loaded: not an object, another format or version, or a field that is
 * missing, of the wrong type, out of range or inconsistent with the others.
 */
export class SimulatorSnapshotError extends Error {
  /** The field at fault, as a path: `"version"`, `"processes[2].state"`, `"gpus[0].uuid"`. */
  readonly field: string;

  /** An error for `field`; `message` says what is wrong with it. */
  constructor(field: string, message: string) {
    super(`invalid simulated machine snapshot: ${message}`);
    this.name = "SimulatorSnapshotError";
    this.field = field;
  }
}

const MAX_PID = 2 ** 31 - 1;

/**
 * The simulated machine as a plain JSON object: its GPUs, and every live process with its state,
 * GPUs, threads and GPU memory contents. Only a quiescent driver can be saved: it throws an Error
 * saying what is under way if a driver call, a sleep, a kernel or a blocked memory copy is, or if
 * the driver was closed.
 *
 * @example
 * ```ts
 * import { loadSimulator, SimulatedDriver, snapshotSimulator } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver({ gpus: 2 });
 * const p = sim.spawn({ memoryMiB: 64, gpu: 1 });
 * await p.write(0, new TextEncoder().encode("hello"));
 * await sim.lock(p.pid, null);
 * const text = JSON.stringify(snapshotSimulator(sim));
 *
 * const again = loadSimulator(JSON.parse(text));
 * console.log(again.process(p.pid)?.state); // "locked"
 * const hash = await p.memoryChunkedSha256();
 * console.log(await again.process(p.pid)?.memoryChunkedSha256() === hash); // true
 * ```
 */
export function snapshotSimulator(sim: SimulatedDriver): SimulatorSnapshot {
  if (!(sim instanceof SimulatedDriver)) {
    throw new TypeError(`snapshotSimulator takes a SimulatedDriver, got ${describeValue(sim)}`);
  }
  const busy = sim.busyWith();
  if (busy) throw new Error(`cannot save the simulated machine now: ${busy}`);
  // A record is kept where its process lives: the same pid, and the same start where it has one.
  const records: HeldRecordSnapshot[] = sim.heldRecords.entries()
    .filter((r) => {
      const p = sim.process(r.process.pid);
      return p?.pid === r.process.pid &&
        (r.process.start === undefined || r.process.start === p.start);
    })
    .map((r) => ({ pid: r.process.pid, heldMiB: { ...r.heldMiB }, at: r.at }));
  const faults =
    sim.processes.every((p) => !p.restoreRefused && p.pendingFaults.every(fitsVersion1)) ? 1 : 2;
  const version = !startsImplied(sim) ? 4 : records.length > 0 ? 3 : faults;
  return {
    format: SIMULATOR_SNAPSHOT_FORMAT,
    version,
    driverVersion: sim.version,
    seed: sim.seed,
    nextPid: sim.nextPid,
    ...(version === 4 ? { nextStart: sim.nextStart } : {}),
    gpus: sim.gpus.map((g) => ({
      name: g.name,
      uuid: g.uuid,
      memoryMiB: g.memoryMiB,
      contextMiB: g.contextMiB,
    })),
    processes: sim.processes.map((p) => processSnapshot(p, version)),
    ...(records.length > 0 ? { heldRecords: records } : {}),
  };
}

/** Whether version 1 can hold a fault: a failure of the next state-changing call. */
function fitsVersion1(f: PendingFault): boolean {
  return f.kind === "fail" && f.nth === 1 &&
    (STATE_CHANGING as readonly string[]).includes(f.operation);
}

/**
 * Whether a load of an older version than 4 gives every process its parent and start number: no
 * process has a parent, and the start numbers are 1, 2, … in order, the next one after them.
 */
function startsImplied(sim: SimulatedDriver): boolean {
  const processes = sim.processes;
  return sim.nextStart === processes.length + 1 &&
    processes.every((p, i) => p.parent === 0 && p.start === i + 1);
}

function processSnapshot(p: SimulatedProcess, version: 1 | 2 | 3 | 4): ProcessSnapshot {
  const out: ProcessSnapshot = {
    pid: p.pid,
    ...(version === 4 ? { parent: p.parent, start: p.start } : {}),
    threads: [...p.threads],
    restoreThreadId: p.tid,
    command: p.command,
    cuda: p.usesCuda,
    libcuda: p.libcudaLoaded,
    inspectable: p.inspectable,
    state: p.state,
    gpus: p.gpus.map((g) => g.index),
    memoryMiB: p.memoryMiB,
  };
  if (p.restoreRefused) out.restoreRefused = true;
  const image = p.deviceMemory ?? p.hostMemory;
  if (image) {
    out.memory = { on: p.deviceMemory ? "gpu" : "host", pages: savePages(image, p.writtenPages) };
  }
  const faults = p.pendingFaults;
  if (faults.length > 0) {
    out.faults = Object.fromEntries(faults.map(({ operation, ...f }) => {
      if (version !== 1) return [operation, f];
      const v1 = f as PendingFault & { kind: "fail" };
      return [
        operation,
        v1.state === undefined ? { code: v1.code } : { code: v1.code, state: v1.state },
      ];
    }));
  }
  return out;
}

/**
 * A simulated driver built from a snapshot ({@link snapshotSimulator}'s object, or the same read
 * back from JSON), on the virtual clock unless `options` say otherwise. Every field is checked
 * first: anything amiss throws a {@link SimulatorSnapshotError} that names the field and the bad
 * value. The processes come back in their states, on their GPUs (whose memory they hold again),
 * with their threads, restore thread ids and memory contents; the next spawn gets `nextPid`.
 *
 * @example
 * ```ts
 * import { loadSimulator, SimulatorSnapshotError } from "@ckpt/cuda/mock";
 *
 * try {
 *   loadSimulator({ format: "ckpt-cuda-simulated-machine", version: 7 });
 * } catch (err) {
 *   if (err instanceof SimulatorSnapshotError) console.log(err.field, err.message);
 *   // "version" "invalid simulated machine snapshot: version 7 is not known: this module reads versions 1 to 3"
 * }
 * ```
 */
export function loadSimulator(
  snapshot: unknown,
  options: LoadSimulatorOptions = {},
): SimulatedDriver {
  checkKeys(options, "loadSimulator options", ["clock", "speed", "timing"]);
  const s = checkedSnapshot(snapshot);
  const sim = new SimulatedDriver({
    ...options,
    gpus: s.gpus,
    driverVersion: s.driverVersion,
    seed: s.seed,
    firstPid: s.nextPid,
  });
  s.processes.forEach((p, i) => sim.adopt((host) => loadProcess(sim, p, host, `processes[${i}]`)));
  if (s.nextStart !== undefined) sim.reserveStarts(s.nextStart);
  for (const r of s.heldRecords ?? []) {
    // The record is of the live process with the pid (checked), under its start number.
    const process = { pid: r.pid, start: sim.process(r.pid)!.start };
    void sim.heldRecords.put({ process, heldMiB: r.heldMiB, at: r.at });
  }
  return sim;
}

function loadProcess(
  sim: SimulatedDriver,
  p: ProcessSnapshot,
  host: ProcessHost,
  at: string,
): SimulatedProcess {
  const gpus = p.gpus.map((i) => sim.gpus[i]);
  const proc = new SimulatedProcess(host, p.pid, p.threads, p.memoryMiB, gpus, p.cuda, {
    command: p.command,
    inspectable: p.inspectable,
    libcudaLoaded: p.libcuda,
    ...(p.parent !== undefined ? { parent: p.parent } : {}),
    ...(p.start !== undefined ? { start: p.start } : {}),
  });
  proc.stateNumber = stateNumber(p.state);
  if (p.restoreRefused) proc.refuseRestores();
  for (const [op, fault] of Object.entries(p.faults ?? {})) {
    const operation = op as FaultableOperation;
    proc.faultPlan.add(
      "kind" in fault
        ? { ...fault, operation } as PendingFault
        : { kind: "fail", operation, nth: 1, ...fault },
    );
  }
  if (!p.memory) return proc;
  const { image, written } = loadPages(mibToBytes(p.memoryMiB), p.memory.pages);
  for (const index of written) proc.writtenPages.add(index);
  if (p.memory.on === "host") {
    proc.deviceMemory = undefined;
    proc.hostMemory = image;
    return proc;
  }
  proc.deviceMemory = image;
  const need = needsOn(p.memoryMiB, gpus);
  const short = shortage(need, p.memoryMiB);
  if (short) throw new SimulatorSnapshotError(at, `${at} (pid ${p.pid}) does not fit: ${short}`);
  proc.claim(need);
  return proc;
}

// ---- checks ----

/** Runs a check of checks.ts on `path`, turning its TypeError or RangeError into ours. */
function field<T>(path: string, check: (what: string) => T): T {
  try {
    return check(path);
  } catch (err) {
    if (err instanceof TypeError || err instanceof RangeError) {
      throw new SimulatorSnapshotError(path, err.message);
    }
    throw err;
  }
}

function fail(path: string, message: string): never {
  throw new SimulatorSnapshotError(path, message);
}

/** An object with all the `required` keys, perhaps some `optional` ones, and no other. */
function record(
  value: unknown,
  path: string,
  required: readonly string[],
  optional: readonly string[] = [],
): Record<string, unknown> {
  const obj = object(value, path);
  const unknown = Object.keys(obj).find((k) => !required.includes(k) && !optional.includes(k));
  if (unknown !== undefined) {
    fail(
      join(path, unknown),
      `${path || "the snapshot"} has an unknown field ${JSON.stringify(unknown)}`,
    );
  }
  const missing = required.find((k) => !(k in obj));
  if (missing !== undefined) fail(join(path, missing), `${join(path, missing)} is missing`);
  return obj;
}

function object(value: unknown, path: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    fail(path, `${path || "the snapshot"} must be an object, got ${describeValue(value)}`);
  }
  return value as Record<string, unknown>;
}

function join(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

function array(value: unknown, path: string, min = 0, max = Infinity): unknown[] {
  if (!Array.isArray(value) || value.length < min || value.length > max) {
    const size = max === Infinity ? `at least ${min}` : `${min} to ${max}`;
    fail(path, `${path} must be an array of ${size} entries, got ${describeValue(value)}`);
  }
  return value;
}

/** `value` checked as a whole snapshot, with GPU UUIDs normalised. */
function checkedSnapshot(value: unknown): SimulatorSnapshot {
  // The tag and version first, so that a foreign file is called foreign, not broken.
  const tagged = object(value, "");
  if (tagged.format !== SIMULATOR_SNAPSHOT_FORMAT) {
    fail(
      "format",
      `format must be ${JSON.stringify(SIMULATOR_SNAPSHOT_FORMAT)}, got ${
        describeValue(tagged.format)
      }`,
    );
  }
  if (![1, 2, 3, 4].includes(tagged.version as number)) {
    fail(
      "version",
      `version ${
        describeValue(tagged.version)
      } is not known: this module reads versions 1 to ${SIMULATOR_SNAPSHOT_VERSION}`,
    );
  }
  const version = tagged.version as 1 | 2 | 3 | 4;
  const top = record(value, "", [
    "format",
    "version",
    "driverVersion",
    "seed",
    "nextPid",
    "gpus",
    "processes",
    ...(version === 3 ? ["heldRecords"] : []),
    ...(version === 4 ? ["nextStart"] : []),
  ], version === 4 ? ["heldRecords"] : []);
  const nextPid = field("nextPid", (w) => checkInteger(top.nextPid, w, 1, MAX_PID));
  const nextStart = version === 4
    ? field("nextStart", (w) => checkInteger(top.nextStart, w, 1))
    : undefined;
  const gpus = array(top.gpus, "gpus", 1, 1024).map((g, i) => checkedGpu(g, `gpus[${i}]`));
  gpus.forEach((g, i) => {
    const first = gpus.findIndex((o) => o.uuid === g.uuid);
    if (first !== i) fail(`gpus[${i}].uuid`, `gpus[${i}].uuid ${g.uuid} is also GPU ${first}'s`);
  });
  const seen: Seen = { threads: new Set(), pids: new Set(), starts: new Set() };
  const processes = array(top.processes, "processes").map((p, i) =>
    checkedProcess(p, `processes[${i}]`, gpus, nextPid, seen, version, nextStart)
  );
  const heldRecords = top.heldRecords === undefined
    ? undefined
    : array(top.heldRecords, "heldRecords").map((r, i) =>
      checkedRecord(r, `heldRecords[${i}]`, processes, gpus)
    );
  return {
    format: SIMULATOR_SNAPSHOT_FORMAT,
    version,
    driverVersion: field("driverVersion", (w) => checkInteger(top.driverVersion, w, 0, MAX_PID)),
    seed: field("seed", (w) => checkInteger(top.seed, w, 0, 2 ** 32 - 1)),
    nextPid,
    ...(nextStart !== undefined ? { nextStart } : {}),
    gpus,
    processes,
    ...(heldRecords ? { heldRecords } : {}),
  };
}

function checkedRecord(
  value: unknown,
  at: string,
  processes: readonly ProcessSnapshot[],
  gpus: readonly GpuSnapshot[],
): HeldRecordSnapshot {
  const r = record(value, at, ["pid", "heldMiB", "at"]);
  const pid = field(`${at}.pid`, (w) => checkInteger(r.pid, w, 1, MAX_PID));
  if (!processes.some((p) => p.pid === pid && p.cuda)) {
    fail(`${at}.pid`, `${at}.pid ${pid} is no CUDA process of the snapshot`);
  }
  const held = object(r.heldMiB, `${at}.heldMiB`);
  const heldMiB: Record<string, number> = {};
  for (const [uuid, mib] of Object.entries(held)) {
    const where = `${at}.heldMiB[${JSON.stringify(uuid)}]`;
    const gpu = field(where, (w) => formatGpuUuid(parseGpuUuid(uuid, w)));
    if (!gpus.some((g) => g.uuid === gpu)) fail(where, `${where} is no GPU of the snapshot`);
    heldMiB[gpu] = field(where, (w) => checkAmount(mib, w));
  }
  return { pid, heldMiB, at: field(`${at}.at`, (w) => checkInteger(r.at, w, 0)) };
}

function checkedGpu(value: unknown, at: string): GpuSnapshot {
  const g = record(value, at, ["name", "uuid", "memoryMiB", "contextMiB"]);
  return {
    name: field(`${at}.name`, (w) => checkName(g.name, w)),
    uuid: field(`${at}.uuid`, (w) => formatGpuUuid(parseGpuUuid(checkName(g.uuid, w), w))),
    memoryMiB: field(`${at}.memoryMiB`, (w) => checkAmount(g.memoryMiB, w, true)),
    contextMiB: field(`${at}.contextMiB`, (w) => checkAmount(g.contextMiB, w)),
  };
}

/** What the processes checked so far have: thread ids, pids and start numbers. */
interface Seen {
  threads: Set<number>;
  pids: Set<number>;
  starts: Set<number>;
}

function checkedProcess(
  value: unknown,
  at: string,
  machineGpus: readonly GpuSnapshot[],
  nextPid: number,
  seen: Seen,
  snapshotVersion: 1 | 2 | 3 | 4,
  nextStart: number | undefined,
): ProcessSnapshot {
  // Faults as version 1 wrote them, or as version 2 and later do.
  const version = snapshotVersion === 1 ? 1 : 2;
  const p = record(value, at, [
    "pid",
    ...(nextStart !== undefined ? ["parent", "start"] : []),
    "threads",
    "restoreThreadId",
    "command",
    "cuda",
    "libcuda",
    "inspectable",
    "state",
    "gpus",
    "memoryMiB",
  ], ["memory", "faults", "restoreRefused"]);
  const pid = field(`${at}.pid`, (w) => checkInteger(p.pid, w, 1, nextPid - 1));
  const threads = array(p.threads, `${at}.threads`, 1, 100_002).map((t, i) => {
    const path = `${at}.threads[${i}]`;
    const tid = field(
      path,
      (w) => checkInteger(t, `${w} (below nextPid ${nextPid})`, 1, nextPid - 1),
    );
    if (seen.threads.has(tid)) {
      fail(path, `${path} ${tid} is another thread's or process's id too`);
    }
    seen.threads.add(tid);
    return tid;
  });
  if (threads[0] !== pid) {
    fail(`${at}.threads[0]`, `${at}.threads[0] must be the pid ${pid}, got ${threads[0]}`);
  }
  let family: Pick<ProcessSnapshot, "parent" | "start"> = {};
  if (nextStart !== undefined) {
    const parent = field(`${at}.parent`, (w) => checkInteger(p.parent, w, 0, MAX_PID));
    if (parent !== 0 && !seen.pids.has(parent)) {
      fail(`${at}.parent`, `${at}.parent ${parent} is no process listed before it`);
    }
    const start = field(
      `${at}.start`,
      (w) => checkInteger(p.start, `${w} (below nextStart ${nextStart})`, 1, nextStart - 1),
    );
    if (seen.starts.has(start)) {
      fail(`${at}.start`, `${at}.start ${start} is another process's start number too`);
    }
    seen.starts.add(start);
    family = { parent, start };
  }
  seen.pids.add(pid);
  const cuda = field(`${at}.cuda`, (w) => checkBoolean(p.cuda, w));
  const libcuda = field(`${at}.libcuda`, (w) => checkBoolean(p.libcuda, w));
  if (cuda && !libcuda) fail(`${at}.libcuda`, `${at}.libcuda must be true for a CUDA process`);
  const tid = cuda ? threads[threads.length - 1] : 0;
  if (p.restoreThreadId !== tid) {
    fail(
      `${at}.restoreThreadId`,
      `${at}.restoreThreadId must be ${tid} (${
        cuda ? "its last thread" : "none: it has no CUDA"
      }), got ${describeValue(p.restoreThreadId)}`,
    );
  }
  const state = field(`${at}.state`, (w) => checkChoice(p.state, w, PROCESS_STATES));
  if (!cuda && state !== INITIAL_STATE) {
    fail(
      `${at}.state`,
      `${at}.state must be "${INITIAL_STATE}" for a process without CUDA, got "${state}"`,
    );
  }
  const listed = new Set<number>();
  const gpuCount = machineGpus.length;
  const gpus = array(p.gpus, `${at}.gpus`, 1, gpuCount).map((g, i) => {
    const path = `${at}.gpus[${i}]`;
    const index = field(path, (w) => checkInteger(g, `${w} (a GPU index)`, 0, gpuCount - 1));
    if (listed.has(index)) fail(path, `${path}: GPU ${index} is listed twice`);
    listed.add(index);
    return index;
  });
  const memoryMiB = field(`${at}.memoryMiB`, (w) => checkAmount(p.memoryMiB, w));
  if (!cuda && memoryMiB !== 0) {
    fail(
      `${at}.memoryMiB`,
      `${at}.memoryMiB must be 0 for a process without CUDA, got ${memoryMiB}`,
    );
  }
  // Checkpointed memory holds no GPU, but it came from these GPUs: no share can be larger.
  const smallest = Math.min(...gpus.map((g) => machineGpus[g].memoryMiB));
  if (memoryMiB / gpus.length > smallest) {
    fail(
      `${at}.memoryMiB`,
      `${at}.memoryMiB ${memoryMiB} cannot have fitted on its GPUs (${smallest} MiB the smallest)`,
    );
  }
  const out: ProcessSnapshot = {
    pid,
    ...family,
    threads,
    restoreThreadId: tid,
    command: field(`${at}.command`, (w) => checkName(p.command, w)),
    cuda,
    libcuda,
    inspectable: field(`${at}.inspectable`, (w) => checkBoolean(p.inspectable, w)),
    state,
    gpus,
    memoryMiB,
  };
  if (cuda) out.memory = checkedMemory(p.memory, `${at}.memory`, state, mibToBytes(memoryMiB));
  else if (p.memory !== undefined) {
    fail(`${at}.memory`, `${at}.memory: a process without CUDA has none`);
  }
  if (p.faults !== undefined) {
    if (!cuda) fail(`${at}.faults`, `${at}.faults: a process without CUDA has none`);
    out.faults = checkedFaults(p.faults, `${at}.faults`, version);
  }
  if (p.restoreRefused !== undefined) {
    const where = `${at}.restoreRefused`;
    if (p.restoreRefused !== true) {
      fail(where, `${where} must be true where present, got ${describeValue(p.restoreRefused)}`);
    }
    if (version === 1) fail(where, `${where} needs version 2 of the snapshot, not 1`);
    if (!memoryOnHost(state)) {
      fail(
        where,
        `${where}: only a checkpointed process can be refused restores, not a ${state} one`,
      );
    }
    out.restoreRefused = true;
  }
  return out;
}

function checkedMemory(
  value: unknown,
  at: string,
  state: ProcessState,
  size: number,
): MemorySnapshot {
  const m = record(value, at, ["on", "pages"]);
  const on = field(`${at}.on`, (w) => checkChoice(m.on, w, ["gpu", "host"] as const));
  // Only a failed process can have its memory anywhere: a checkpointed one has it in host memory,
  // a running or locked one on the GPU.
  const expected = memoryOnHost(state) ? "host" : isFinal(state) ? on : "gpu";
  if (on !== expected) {
    fail(`${at}.on`, `${at}.on must be "${expected}" for a ${state} process, got "${on}"`);
  }
  return { on, pages: checkPages(m.pages, size, `${at}.pages`, fail) };
}

function checkedFaults(value: unknown, at: string, version: 1 | 2): ProcessSnapshot["faults"] {
  const f = record(value, at, [], FAULTABLE_OPERATIONS);
  const out: ProcessSnapshot["faults"] = {};
  for (const op of FAULTABLE_OPERATIONS) {
    if (f[op] === undefined) continue;
    const path = `${at}.${op}`;
    const entry = object(f[op], path);
    if (
      version === 1 &&
      (!(STATE_CHANGING as readonly string[]).includes(op) || "kind" in entry || "nth" in entry)
    ) {
      fail(
        path,
        `${path} is a fault only version 2 can hold (a kind, an nth, or a query's fault), but ` +
          `the snapshot says version 1`,
      );
    }
    const code = (fault: Record<string, unknown>) =>
      field(`${path}.code`, (w) => checkInteger(fault.code, w, 1, MAX_PID));
    const state = (fault: Record<string, unknown>) =>
      fault.state === undefined ? {} : {
        state: field(`${path}.state`, (w) => checkChoice(fault.state, w, PROCESS_STATES)),
      };
    if (version === 1) {
      const fault = record(f[op], path, ["code"], ["state"]);
      out[op] = { code: code(fault), ...state(fault) };
      continue;
    }
    const kind = field(
      `${path}.kind`,
      (w) => checkChoice(object(f[op], path).kind, w, ["fail", "exit", "hang", "answer"] as const),
    );
    const nth = (fault: Record<string, unknown>) =>
      field(`${path}.nth`, (w) => checkInteger(fault.nth, w, 1, 1_000_000));
    switch (kind) {
      case "fail": {
        const fault = record(f[op], path, ["kind", "nth", "code"], ["state"]);
        out[op] = { kind, nth: nth(fault), code: code(fault), ...state(fault) };
        break;
      }
      case "exit": {
        const fault = record(f[op], path, ["kind", "nth", "afterMs"]);
        const afterMs = field(`${path}.afterMs`, (w) => checkAmount(fault.afterMs, w));
        out[op] = { kind, nth: nth(fault), afterMs };
        break;
      }
      case "hang": {
        const fault = record(f[op], path, ["kind", "nth"]);
        out[op] = { kind, nth: nth(fault) };
        break;
      }
      case "answer": {
        if (op !== "getState" && op !== "getRestoreThreadId") {
          fail(`${path}.kind`, `${path}: only getState and getRestoreThreadId have an answer`);
        }
        const fault = record(f[op], path, ["kind", "nth", "value"]);
        const value = field(`${path}.value`, (w) => checkInteger(fault.value, w, 0, MAX_PID));
        out[op] = { kind, nth: nth(fault), value };
        break;
      }
    }
  }
  return out;
}
