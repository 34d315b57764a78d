/**
 * The simulated CRIU: a {@link SnapshotEngine} that dumps process trees of the simulated machine
 * into image files and brings them back, with the pids they had, so that the whole snapshot flow
 * runs in tests without root, criu or a GPU. It takes the time criu 4.1.1 took on an H100
 * ({@link CRIU_TIMING}), on the driver's clock.
 *
 * The image files are written and read synchronously, at the simulated moment the dump reaches
 * each process (and as a restore begins): virtual time moves only while the program waits on the
 * simulator, and a pending file operation would let it run on. They are small: a process's
 * memory is saved as the pages it wrote.
 *
 * @module
 */

import { lstatSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  type DumpedProcess,
  type DumpRequest,
  EngineError,
  type EngineProbe,
  type RestoreRequest,
  type SnapshotEngine,
} from "../core/engine.ts";
import { MAX_PID } from "../core/options.ts";
import { INITIAL_STATE, type ProcessState, stateNumber, stepTo } from "../core/states.ts";
import { describeValue, formatGpuUuid, parseGpuUuid } from "../core/uuid.ts";
import {
  checkAmount,
  checkChoice,
  checkInteger,
  checkKeys,
  checkName,
  orDefault,
} from "./checks.ts";
import type { SimulatedDriver } from "./driver.ts";
import { checkPages, loadPages, type SavedPages, savePages } from "./pages.ts";
import { type ProcessHost, type SimulatedGpu, SimulatedProcess } from "./process.ts";
import { CRIU_TIMING, criuImageBytes, mibToBytes } from "./timing.ts";

/** Options of {@link SimulatedCriu}. */
export interface SimulatedCriuOptions {
  /** The version `probe()` reports, as `criu --version` gives it. Default `"4.1.1"`. */
  version?: string;
  /**
   * What `probe()` reports missing, one sentence each (`"criu is not installed: …"`), to test
   * how a program handles a machine that cannot take snapshots. While there are any, dumps and
   * restores reject, as a criu that cannot run does. Default none.
   */
  problems?: readonly string[];
}

/** An operation of the simulated CRIU that {@link SimulatedCriu.failNext} can make fail. */
export type CriuOperation = "dump" | "restore";

/** What {@link SimulatedCriu.failNext} takes. */
export interface CriuFault {
  /** The failure's words, as criu's last log line would give them. Default: says it was injected. */
  message?: string;
}

/** The `format` tag of an image of one process. */
const IMAGE_FORMAT = "ckpt-cuda-simulated-criu-image";
/** The version of the image format this module writes and reads. */
const IMAGE_VERSION = 1;
/** The name of the image file of process `pid` in an images directory. */
const imageName = (pid: number) => `process-${pid}.img`;
const IMAGE_NAME = /^process-([1-9][0-9]{0,9})\.img$/;
/** The most simulated image bytes one step of a dump or restore moves: onBytes is told after each. */
const PIECE_BYTES = 0.5e9;
/** The state a CUDA process must be in to be dumped, and is in once restored. */
const CHECKPOINTED: ProcessState = stepTo("checkpoint");

/** The image of one process: all that brings it back. */
interface ProcessImage {
  format: typeof IMAGE_FORMAT;
  version: typeof IMAGE_VERSION;
  pid: number;
  /** Its parent's pid when it was dumped (0 for none). */
  parent: number;
  /** Its thread ids, its pid first. */
  threads: number[];
  command: string;
  cuda: boolean;
  libcuda: boolean;
  inspectable: boolean;
  /** `"checkpointed"` for a CUDA process (nothing else is dumped), else `"running"`. */
  state: ProcessState;
  /** The UUIDs of the GPUs it ran on. */
  gpus: string[];
  /** Its GPU memory in MiB (0 without CUDA). */
  memoryMiB: number;
  /** The pages of its GPU memory it wrote (a CUDA process only). */
  memory?: SavedPages;
}

/**
 * The simulated machine's CRIU: it dumps a tree of simulated processes into an images directory
 * (one file per process, `process-<pid>.img`, and `dump.log`, mode 0600), leaving the processes
 * running (as `criu dump --leave-running`), and restores a tree from them with the pids and
 * thread ids it had, its parents, commands and GPU memory contents. It takes the time the
 * measured criu took ({@link CRIU_TIMING}): image bytes of 0.59 GB + 1.07 GB per GiB of GPU
 * memory for each CUDA process, dumped at 2.3 GB/s and restored at 2.1 GB/s after 0.2 s, with
 * every dump and restore under way at once sharing a disk of 3.7 GB/s.
 *
 * As the real flow needs it: a dump refuses a tree with a CUDA process that is not checkpointed
 * (criu cannot dump its GPU mappings), and a restored CUDA process is checkpointed, its GPU
 * memory in host memory until the caller restores it through the driver. A restored process is a
 * new process with its old pid: it has a new start number ({@link SimulatedProcess.start}), so a
 * `CudaProcess` made for the dumped one refuses it (`REPLACED`). The restored tree is detached:
 * its root has no parent (0).
 *
 * {@link SimulatedCriu.failNext} makes the next dump or restore fail, as criu can; an
 * `AbortSignal` stops either, as a killed criu.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 * import { mkdtemp } from "node:fs/promises";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const sim = new SimulatedDriver();
 * const criu = sim.snapshotEngine();
 * const job = sim.spawn({ memoryMiB: 1024 });
 * await job.write(0, new TextEncoder().encode("state"));
 * await new CudaProcess(job.pid, { driver: sim }).suspend(); // criu cannot dump GPU mappings
 * const imagesDir = await mkdtemp(join(tmpdir(), "images-"));
 * await criu.dump({ root: job.pid, imagesDir, onBytes: (n) => console.log(n) });
 * await criu.kill([job.pid]);
 * await criu.restore({ root: job.pid, imagesDir });
 * const back = sim.process(job.pid)!;
 * console.log(back.state, back.start !== job.start); // "checkpointed" true
 * await new CudaProcess(job.pid, { driver: sim }).resume();
 * console.log(new TextDecoder().decode(await back.read(0, 5))); // "state"
 * ```
 */
export class SimulatedCriu implements SnapshotEngine {
  /** Always `"simulated criu"`. */
  readonly kind: string = "simulated criu";
  /** The simulated machine whose processes it dumps and restores. */
  readonly driver: SimulatedDriver;
  /** The version `probe()` reports. */
  readonly version: string;
  /** What `probe()` reports missing. */
  readonly problems: readonly string[];
  readonly #faults = new Map<CriuOperation, string>();

  /** The simulated CRIU of `driver`'s machine. */
  constructor(driver: SimulatedDriver, options: SimulatedCriuOptions = {}) {
    if (typeof driver?.adopt !== "function" || typeof driver?.tree !== "function") {
      throw new TypeError(`SimulatedCriu takes a SimulatedDriver, got ${describeValue(driver)}`);
    }
    checkKeys(options, "SimulatedCriu options", ["version", "problems"]);
    this.driver = driver;
    this.version = checkName(orDefault(options.version, "4.1.1"), "SimulatedCriu: version");
    const problems = orDefault(options.problems, []);
    if (!Array.isArray(problems)) {
      throw new TypeError(
        `SimulatedCriu: problems must be an array of sentences, got ${describeValue(problems)}`,
      );
    }
    this.problems = Object.freeze(
      problems.map((p: unknown, i) => checkName(p, `SimulatedCriu: problems[${i}]`)),
    );
  }

  /** Its version and problems, as given to the constructor. */
  probe(): Promise<EngineProbe> {
    return this.driver.waitOn(
      "probe the simulated criu",
      () => Promise.resolve({ version: this.version, problems: [...this.problems] }),
    );
  }

  /**
   * Makes the next `op` (whatever it is asked) fail: it rejects with an {@link EngineError} of
   * `fault.message`, after the engine's fixed cost. A failed dump leaves the tree running as it
   * was (and perhaps some image files); a failed restore leaves no process of the tree behind.
   * One fault waits per operation: a new one replaces it.
   */
  failNext(op: CriuOperation, fault: CriuFault = {}): void {
    checkChoice(op, "failNext: op", ["dump", "restore"] as const);
    checkKeys(fault, "failNext fault", ["message"]);
    const message = fault.message === undefined
      ? `simulated criu: failure injected by failNext(${JSON.stringify(op)})`
      : checkName(fault.message, "failNext: message");
    this.#faults.set(op, message);
  }

  /**
   * Dumps the tree of `request.root` into `request.imagesDir` (an existing empty directory),
   * leaving its processes running. Rejects with an {@link EngineError} where no process has the
   * pid, where a CUDA process of the tree is not checkpointed or has a driver call under way,
   * where the directory is not an empty directory, when the signal or the timeout stops it
   * (`the dump was stopped`; the processes are untouched, some image files may be written), and
   * on an injected failure. Tells `onBytes` the simulated image bytes written so far, after each
   * 0.5 GB at most.
   */
  dump(request: DumpRequest): Promise<readonly DumpedProcess[]> {
    let r: DumpRequest;
    try {
      r = checkedRequest(request, "dump", ["root", "imagesDir", "signal", "timeoutMs", "onBytes"]);
      if (r.onBytes !== undefined && typeof r.onBytes !== "function") {
        throw new TypeError(`dump: onBytes must be a function, got ${describeValue(r.onBytes)}`);
      }
    } catch (err) {
      return Promise.reject(err);
    }
    return this.driver.waitOn(`dump the process tree of ${r.root}`, () => this.#dump(r));
  }

  /**
   * Restores the tree of `request.root` from the images in `request.imagesDir`: every process
   * comes back with its pid, threads, parent (the root with none), command and GPU memory
   * contents, a CUDA process checkpointed, each with a new start number. The processes exist
   * from the start of the restore, as criu forks them first. Rejects with an
   * {@link EngineError}, leaving none of them, where an image is missing or corrupt, where a pid
   * or thread id is taken (`Can't fork for PID N`), where a GPU of an image is not on this
   * machine, when the signal or the timeout stops it (`the restore was stopped`), and on an
   * injected failure.
   */
  restore(request: RestoreRequest): Promise<void> {
    let r: RestoreRequest;
    try {
      r = checkedRequest(request, "restore", ["root", "imagesDir", "signal", "timeoutMs"]);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.driver.waitOn(`restore the process tree of ${r.root}`, () => this.#restore(r));
  }

  /**
   * Ends each live simulated process that has one of `pids` as its pid (or as a thread id, as
   * SIGKILL to a thread ends its process): it exits at once. Ids no process has are ignored.
   */
  kill(pids: readonly number[]): Promise<void> {
    const bad = badPids(pids, "kill");
    if (bad) return Promise.reject(bad);
    return this.driver.waitOn("kill processes", () => {
      for (const pid of pids) this.driver.process(pid)?.exit();
      return Promise.resolve();
    });
  }

  /**
   * Nothing: simulated processes fork only when a test spawns them, so a tree stands still by
   * itself while it is being ended. Checks its input as {@link SimulatedCriu.kill} does.
   */
  stop(pids: readonly number[]): Promise<void> {
    const bad = badPids(pids, "stop");
    return bad ? Promise.reject(bad) : Promise.resolve();
  }

  /** `simulated criu 4.1.1`. */
  toString(): string {
    return `${this.kind} ${this.version}`;
  }

  // ---- the dump ----

  async #dump(r: DumpRequest): Promise<readonly DumpedProcess[]> {
    const log = new EngineLog(this, r.imagesDir, "dump.log", `Dumping processes (pid: ${r.root})`);
    const run = new Run(this.driver, r, "dump", log);
    try {
      run.check();
      this.#ready(log);
      const tree = this.driver.tree(r.root);
      if (!tree) throw log.error(`no process with pid ${r.root}`);
      for (const p of tree) {
        const why = undumpable(p);
        if (why) throw log.error(why);
      }
      emptyDirectory(r.imagesDir, log);
      // Taken now: criu freezes the tree first.
      const images = tree.map(imageOf);
      await run.sleep(CRIU_TIMING.dumpFixedMs);
      this.#injected("dump", log);
      let written = 0;
      const rate = CRIU_TIMING.dumpBytesPerSecond / 1000;
      for (const image of images) {
        for (const piece of pieces(criuImageBytes(image.memoryMiB, image.cuda))) {
          await run.transfer(piece, rate);
          written += piece;
          tell(r.onBytes, written);
        }
        const gone = tree.find((p) => p.exited);
        if (gone) throw log.error(`process ${gone.pid} ended during the dump`);
        writeImage(r.imagesDir, image, log);
        log.line(`Dumped process ${image.pid}`);
      }
      log.line(`Dumping finished successfully (${written} bytes of images)`);
      log.write();
      return images.map((image, i) => ({
        pid: image.pid,
        parent: i === 0 ? 0 : image.parent,
        threads: [...image.threads],
      }));
    } finally {
      run.end();
    }
  }

  // ---- the restore ----

  async #restore(r: RestoreRequest): Promise<void> {
    const log = new EngineLog(this, r.imagesDir, "restore.log", `Restoring (pid: ${r.root})`);
    const made: SimulatedProcess[] = [];
    const run = new Run(this.driver, r, "restore", log);
    try {
      run.check();
      this.#ready(log);
      const images = readTree(r.imagesDir, r.root, log);
      const gpus = images.map((image) => this.#gpusOf(image, log));
      for (const image of images) {
        for (const t of image.threads) {
          const other = this.driver.process(t);
          if (other) throw log.error(`Can't fork for PID ${t}: process ${other.pid} has it`);
        }
      }
      images.forEach((image, i) => {
        made.push(this.driver.adopt((host) => restoredProcess(host, image, gpus[i], r.root)));
      });
      await run.sleep(CRIU_TIMING.restoreFixedMs);
      this.#injected("restore", log);
      const rate = CRIU_TIMING.restoreBytesPerSecond / 1000;
      for (const image of images) {
        for (const piece of pieces(criuImageBytes(image.memoryMiB, image.cuda))) {
          await run.transfer(piece, rate);
        }
        log.line(`Restored process ${image.pid}`);
      }
      const gone = made.find((p) => p.exited);
      if (gone) throw log.error(`process ${gone.pid} ended during the restore`);
      log.line("Restore finished successfully");
      log.write();
    } catch (err) {
      for (const p of made) p.exit();
      throw err;
    } finally {
      run.end();
    }
  }

  /** The GPUs of this machine that an image names. */
  #gpusOf(image: ProcessImage, log: EngineLog): SimulatedGpu[] {
    return image.gpus.map((uuid) => {
      const gpu = this.driver.gpus.find((g) => g.uuid === uuid);
      if (!gpu) {
        throw log.error(
          `the image of process ${image.pid} names GPU ${uuid}, which this simulated machine lacks`,
        );
      }
      return gpu;
    });
  }

  /** Throws while the engine has problems: a criu that cannot run does nothing. */
  #ready(log: EngineLog): void {
    if (this.problems.length > 0) {
      throw log.error(`criu cannot run here: ${this.problems.join("; ")}`);
    }
  }

  /** Throws the failure injected into `op`, if one waits. */
  #injected(op: CriuOperation, log: EngineLog): void {
    const message = this.#faults.get(op);
    if (message === undefined) return;
    this.#faults.delete(op);
    throw log.error(message);
  }
}

/** The request, its root, directory, signal and keys checked. */
function checkedRequest<T extends DumpRequest | RestoreRequest>(
  request: T,
  op: CriuOperation,
  keys: readonly string[],
): T {
  if (typeof request !== "object" || request === null) {
    throw new TypeError(`${op} takes a request object, got ${describeValue(request)}`);
  }
  checkKeys(request, `${op} request`, keys);
  checkInteger(request.root, `${op}: root (a pid)`, 1, MAX_PID);
  checkName(request.imagesDir, `${op}: imagesDir`);
  if (request.timeoutMs !== undefined) checkAmount(request.timeoutMs, `${op}: timeoutMs`);
  if (request.signal !== undefined && !(request.signal instanceof AbortSignal)) {
    throw new TypeError(
      `${op}: signal must be an AbortSignal, got ${describeValue(request.signal)}`,
    );
  }
  return request;
}

/** Why criu cannot dump the process, or `undefined` where it can. */
function undumpable(p: SimulatedProcess): string | undefined {
  if (p.busy) return `process ${p.pid} has a ${p.busy} under way: wait for it`;
  if (!p.usesCuda) return undefined;
  if (p.memoryLocation === "gpu") {
    return `process ${p.pid} still has its GPU state on the GPU (it is ${p.state}): it must be ` +
      `checkpointed first, as criu cannot dump its /dev/nvidia* mappings`;
  }
  if (p.state !== CHECKPOINTED) {
    return `process ${p.pid} is ${p.state}, not checkpointed: only a checkpointed CUDA process ` +
      `can be dumped`;
  }
  return undefined;
}

/** The image of a process that can be dumped. */
function imageOf(p: SimulatedProcess): ProcessImage {
  return {
    format: IMAGE_FORMAT,
    version: IMAGE_VERSION,
    pid: p.pid,
    parent: p.parent,
    threads: [...p.threads],
    command: p.command,
    cuda: p.usesCuda,
    libcuda: p.libcudaLoaded,
    inspectable: p.inspectable,
    state: p.usesCuda ? CHECKPOINTED : INITIAL_STATE,
    gpus: p.gpuUuids,
    memoryMiB: p.memoryMiB,
    ...(p.hostMemory ? { memory: savePages(p.hostMemory, p.writtenPages) } : {}),
  };
}

/** A process made from its image, with a new start number; the root of the tree has no parent. */
function restoredProcess(
  host: ProcessHost,
  image: ProcessImage,
  gpus: SimulatedGpu[],
  root: number,
): SimulatedProcess {
  const proc = new SimulatedProcess(
    host,
    image.pid,
    [...image.threads],
    image.memoryMiB,
    gpus,
    image.cuda,
    {
      command: image.command,
      inspectable: image.inspectable,
      libcudaLoaded: image.libcuda,
      parent: image.pid === root ? 0 : image.parent,
    },
  );
  if (!image.cuda) return proc;
  const { image: memory, written } = loadPages(mibToBytes(image.memoryMiB), image.memory ?? []);
  proc.deviceMemory = undefined;
  proc.hostMemory = memory;
  for (const page of written) proc.writtenPages.add(page);
  proc.stateNumber = stateNumber(CHECKPOINTED);
  return proc;
}

/** Throws unless `dir` is an existing empty directory (not a symbolic link). */
function emptyDirectory(dir: string, log: EngineLog): void {
  let entries: string[];
  try {
    if (!lstatSync(dir).isDirectory()) {
      throw log.error(`images directory ${dir} is not a directory`);
    }
    entries = readdirSync(dir);
  } catch (err) {
    if (err instanceof EngineError) throw err;
    throw log.error(`cannot use images directory ${dir}: ${errorText(err)}`, err);
  }
  if (entries.length > 0) {
    throw log.error(
      `images directory ${dir} is not empty (it has ${entries.length} entries, ` +
        `${JSON.stringify(entries[0])} first)`,
    );
  }
}

function writeImage(dir: string, image: ProcessImage, log: EngineLog): void {
  const file = join(dir, imageName(image.pid));
  try {
    writeFileSync(file, JSON.stringify(image) + "\n", { mode: 0o600, flag: "wx" });
  } catch (err) {
    throw log.error(`cannot write ${file}: ${errorText(err)}`, err);
  }
}

/**
 * The images of the tree of `root` in `dir`, each checked, the root first and each after its
 * parent. Throws an {@link EngineError} where one is missing, unreadable or corrupt, or not of
 * the tree.
 */
function readTree(dir: string, root: number, log: EngineLog): ProcessImage[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw log.error(`cannot read images directory ${dir}: ${errorText(err)}`, err);
  }
  const byPid = new Map<number, ProcessImage>();
  const threads = new Map<number, number>();
  for (const name of names.sort()) {
    const match = IMAGE_NAME.exec(name);
    if (!match) continue;
    const file = join(dir, name);
    const image = readImage(file, Number(match[1]), log);
    for (const t of image.threads) {
      const other = threads.get(t);
      if (other !== undefined) {
        throw log.error(`${file} is corrupt: thread ${t} is process ${other}'s too`);
      }
      threads.set(t, image.pid);
    }
    byPid.set(image.pid, image);
  }
  const top = byPid.get(root);
  if (!top) throw log.error(`no image of process ${root} in ${dir}`);
  const tree = [top];
  for (let i = 0; i < tree.length; i++) {
    for (const image of byPid.values()) {
      if (image.parent === tree[i].pid && image.pid !== root) tree.push(image);
    }
  }
  const stray = [...byPid.values()].find((image) => !tree.includes(image));
  if (stray) {
    throw log.error(
      `${join(dir, imageName(stray.pid))} is no image of the tree of ${root}: its parent ` +
        `${stray.parent} is not in it`,
    );
  }
  return tree;
}

/** The image in `file`, checked field by field. */
function readImage(file: string, pid: number, log: EngineLog): ProcessImage {
  let value: unknown;
  try {
    if (!lstatSync(file).isFile()) throw log.error(`${file} is not a regular file`);
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    if (err instanceof EngineError) throw err;
    throw log.error(`cannot read the image ${file}: ${errorText(err)}`, err);
  }
  const bad = (field: string, message: string): never => {
    throw log.error(`${file} is corrupt: ${field ? `${field} ` : ""}${message}`);
  };
  try {
    return checkedImage(value, pid, bad);
  } catch (err) {
    if (err instanceof EngineError) throw err;
    throw log.error(`${file} is corrupt: ${errorText(err)}`, err);
  }
}

/** `value` checked as the image of process `pid`; `bad` names what is amiss. */
function checkedImage(
  value: unknown,
  pid: number,
  bad: (field: string, message: string) => never,
): ProcessImage {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    bad("", `it must hold an object, got ${describeValue(value)}`);
  }
  const v = value as Record<string, unknown>;
  if (v.format !== IMAGE_FORMAT) {
    bad("format", `must be ${JSON.stringify(IMAGE_FORMAT)}, got ${describeValue(v.format)}`);
  }
  if (v.version !== IMAGE_VERSION) {
    bad("version", `${describeValue(v.version)} is not known: this module reads ${IMAGE_VERSION}`);
  }
  const fields = [
    "format",
    "version",
    "pid",
    "parent",
    "threads",
    "command",
    "cuda",
    "libcuda",
    "inspectable",
    "state",
    "gpus",
    "memoryMiB",
  ];
  const unknown = Object.keys(v).find((k) => !fields.includes(k) && k !== "memory");
  if (unknown !== undefined) bad("", `it has an unknown field ${JSON.stringify(unknown)}`);
  const missing = fields.find((k) => !(k in v));
  if (missing !== undefined) bad(missing, "is missing");
  if (v.pid !== pid) bad("pid", `must be ${pid}, as its name says, got ${describeValue(v.pid)}`);
  checkInteger(v.parent, "parent", 0, MAX_PID);
  if (!Array.isArray(v.threads) || v.threads.length === 0 || v.threads[0] !== pid) {
    bad("threads", `must be a list of thread ids led by the pid ${pid}`);
  }
  const threads = v.threads as unknown[];
  threads.forEach((t, i) => checkInteger(t, `threads[${i}]`, 1, MAX_PID));
  if (new Set(threads).size !== threads.length) bad("threads", "lists a thread id twice");
  const cuda = v.cuda;
  if (typeof cuda !== "boolean" || typeof v.libcuda !== "boolean") {
    bad("cuda", "and libcuda must be true or false");
  }
  if (cuda && !v.libcuda) bad("libcuda", "must be true for a CUDA process");
  if (typeof v.inspectable !== "boolean") bad("inspectable", "must be true or false");
  checkName(v.command, "command");
  const state = cuda ? CHECKPOINTED : INITIAL_STATE;
  if (v.state !== state) {
    bad(
      "state",
      `must be "${state}" for a ${cuda ? "CUDA " : ""}process, got ${describeValue(v.state)}`,
    );
  }
  if (!Array.isArray(v.gpus) || v.gpus.length === 0) bad("gpus", "must list at least one GPU");
  const gpus = (v.gpus as unknown[]).map((g, i) =>
    formatGpuUuid(parseGpuUuid(checkName(g, `gpus[${i}]`), `gpus[${i}]`))
  );
  const memoryMiB = v.memoryMiB;
  if (typeof memoryMiB !== "number" || !Number.isFinite(memoryMiB) || memoryMiB < 0) {
    bad("memoryMiB", `must be a finite number >= 0, got ${describeValue(memoryMiB)}`);
  }
  if (!cuda && memoryMiB !== 0) bad("memoryMiB", "must be 0 for a process without CUDA");
  if (!cuda && v.memory !== undefined) bad("memory", "must be left out without CUDA");
  // Its messages name the entry at fault themselves.
  const pagesBad = (_: string, message: string) => bad("", message);
  const memory = cuda ? checkPages(v.memory, mibToBytes(memoryMiB), "memory", pagesBad) : undefined;
  return {
    ...(v as unknown as ProcessImage),
    threads: threads as number[],
    gpus,
    ...(memory ? { memory } : {}),
  };
}

/** `bytes` in steps of at most {@link PIECE_BYTES}, the last the rest. */
function pieces(bytes: number): number[] {
  const n = Math.max(1, Math.ceil(bytes / PIECE_BYTES));
  return Array.from(
    { length: n },
    (_, i) => i < n - 1 ? PIECE_BYTES : bytes - PIECE_BYTES * (n - 1),
  );
}

/** Tells a progress callback; one that throws does not stop the dump. */
function tell(onBytes: ((bytes: number) => void) | undefined, bytes: number): void {
  try {
    onBytes?.(bytes);
  } catch {
    // The callback must not throw (DumpRequest.onBytes); the dump goes on regardless.
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * An engine's log: lines stamped with the simulated time since the operation began (as criu's
 * `(00.123456)`), written into the images directory as the operation ends, and the path an
 * {@link EngineError} names.
 */
class EngineLog {
  readonly path: string;
  readonly #lines: string[] = [];
  readonly #driver: SimulatedDriver;
  readonly #began: number;
  #written = false;

  constructor(engine: SimulatedCriu, dir: string, name: string, first: string) {
    this.path = join(dir, name);
    this.#driver = engine.driver;
    this.#began = engine.driver.now();
    this.line(`Version: ${engine.version} (${engine.kind})`);
    this.line(first);
  }

  line(text: string): void {
    const s = (this.#driver.now() - this.#began) / 1000;
    this.#lines.push(`(${s.toFixed(6).padStart(9, "0")}) ${text}`);
  }

  /** The error of a failure, logged and the log written (where it can be). */
  error(message: string, cause?: unknown): EngineError {
    this.line(`Error: ${message}`);
    const written = this.write(true);
    return new EngineError(message, {
      ...(written ? { log: this.path } : {}),
      ...(cause === undefined ? {} : { cause }),
    });
  }

  /**
   * Writes the log once, replacing one an earlier operation left (never through a link); a
   * failure to write it throws, or with `quietly` returns false.
   */
  write(quietly = false): boolean {
    if (this.#written) return true;
    try {
      rmSync(this.path, { force: true });
      writeFileSync(this.path, this.#lines.join("\n") + "\n", { mode: 0o600, flag: "wx" });
      this.#written = true;
    } catch (err) {
      if (quietly) return false;
      throw new EngineError(`cannot write the log ${this.path}: ${errorText(err)}`, { cause: err });
    }
    return true;
  }
}

/**
 * The waits of one dump or restore, on the driver's clock: a stop (the signal, or the request's
 * timeout passing) cancels the one under way and rejects it, and every later one.
 */
class Run {
  readonly #driver: SimulatedDriver;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.#stop(this.#stopMessage);
  readonly #stopMessage: string;
  readonly #log: EngineLog;
  #cancelTimeout: (() => void) | undefined;
  #stopped: EngineError | undefined;
  #current: { cancel: () => void; reject: (err: Error) => void } | undefined;

  /** The waits of the operation `what` (`"dump"`), stopped by `request`'s signal and timeout. */
  constructor(
    driver: SimulatedDriver,
    request: DumpRequest | RestoreRequest,
    what: CriuOperation,
    log: EngineLog,
  ) {
    this.#driver = driver;
    this.#signal = request.signal;
    this.#stopMessage = `the ${what} was stopped`;
    this.#log = log;
    const ms = request.timeoutMs;
    const late = `the ${what} was stopped: its timeout of ${ms} ms passed`;
    if (this.#signal?.aborted) this.#stop(this.#stopMessage);
    else if (ms === 0) this.#stop(late);
    else {
      this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
      if (ms !== undefined) this.#cancelTimeout = driver.startTimer(ms, () => this.#stop(late));
    }
  }

  sleep(ms: number): Promise<void> {
    return this.#wait((done) => this.#driver.startTimer(ms, done));
  }

  /** Moves `bytes` through the machine's disk at up to `rate` bytes per ms. */
  transfer(bytes: number, rate: number): Promise<void> {
    return this.#wait((done) => this.#driver.disk.transfer(bytes, rate, done));
  }

  /** Throws if it was stopped. */
  check(): void {
    if (this.#stopped) throw this.#stopped;
  }

  end(): void {
    this.#signal?.removeEventListener("abort", this.#onAbort);
    this.#cancelTimeout?.();
  }

  #wait(begin: (done: () => void) => () => void): Promise<void> {
    if (this.#stopped) return Promise.reject(this.#stopped);
    return new Promise((resolve, reject) => {
      const cancel = begin(() => {
        this.#current = undefined;
        resolve();
      });
      this.#current = { cancel, reject };
    });
  }

  #stop(message: string): void {
    if (this.#stopped) return;
    this.#stopped = this.#log.error(message);
    const current = this.#current;
    this.#current = undefined;
    current?.cancel();
    current?.reject(this.#stopped);
  }
}

/** What is wrong with a list of pids given to `what`, as an error; `undefined` where nothing is. */
function badPids(pids: unknown, what: string): Error | undefined {
  if (!Array.isArray(pids)) {
    return new TypeError(`${what}: pids must be an array of pids, got ${describeValue(pids)}`);
  }
  try {
    pids.forEach((pid, i) => checkInteger(pid, `${what}: pids[${i}]`, 1, MAX_PID));
  } catch (err) {
    return err as Error;
  }
  return undefined;
}
