// The simulated CRIU's files: a dump's log, and per process `process-<pid>.img` (all but its
// memory) and `pages-<pid>.img` (its GPU memory's pages), read as a restore copies the memory in.
// Only this version's are read, all synchronously: a pending file operation lets virtual time run.

import { Buffer } from "node:buffer";
import { closeSync, constants, fstatSync, openSync, readdirSync, readSync, rmSync } from "node:fs";
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { EngineError } from "../core/engine.ts";
import { messageOf } from "../core/errors.ts";
import { StrictReader } from "../core/json.ts";
import { type ManifestGpu, readGpus } from "../core/snapshot/manifest.ts";
import { MAX_PID } from "../core/options.ts";
import { INITIAL_STATE, type ProcessState, stepTo } from "../core/states.ts";
import { readPages, type SavedPages } from "./memory.ts";
import { SimulatedGpu } from "./sim_gpu.ts";
import { type MachineView, SimulatedProcess } from "./sim_process.ts";
import { type ProcessFields, readFields } from "./fields.ts";
import { mibToBytes } from "./timing.ts";

const IMAGE_FORMAT = "ckpt-cuda-simulated-criu-image";
const PAGES_FORMAT = "ckpt-cuda-simulated-criu-pages";
/** The version a dump writes: 2 added `devices`; 3 moved the memory into a pages file. */
const IMAGE_VERSION = 3;
/** The pages file's: 4 holds the pages' bytes after a line of JSON, where 3 was all JSON. */
const PAGES_VERSION = 4;
const imageName = (pid: number): string => `process-${pid}.img`;
const pagesName = (pid: number): string => `pages-${pid}.img`;
const IMAGE_NAME = /^process-([1-9][0-9]{0,9})\.img$/;
/** The name of a pages file, which holds a process's memory and nothing else. */
export const PAGES_NAME: RegExp = /^pages-([1-9][0-9]{0,9})\.img$/;
/** The state a CUDA process must be in to be dumped, and is in once restored. */
export const CHECKPOINTED: ProcessState = stepTo("checkpoint");
const FIELDS =
  "format version pid parent threads command cuda libcuda inspectable state gpus devices memoryMiB"
    .split(" ");

/** A GPU as an image remembers it: one the process saw on the machine it was dumped on. */
type ImageGpu = Omit<ManifestGpu, "totalMiB">;

/** The image of one process but its memory, as `process-<pid>.img` holds it. */
export interface ProcessImage extends ProcessFields {
  format: typeof IMAGE_FORMAT;
  version: typeof IMAGE_VERSION;
  /** Checkpointed (a CUDA process), or the initial state (none). */
  state: ProcessState;
  /** The UUIDs of the GPUs it used, each one of `devices`. */
  gpus: string[];
  /** Every GPU the process saw: a restore onto other GPUs must map each (measured on 2 H200s). */
  devices: ImageGpu[];
}

/** What a dump writes of one process: its image, and the memory its pages file holds. */
type DumpedImages = { image: ProcessImage; pages: [number, Uint8Array][] };

/** A GPU of the machine a process was dumped on, not of this one: it holds nothing here. */
class RememberedGpu extends SimulatedGpu {
  /** `seen`: every GPU the process saw there, this one among them (filled in once all are made). */
  constructor(gpu: ImageGpu, readonly seen: readonly RememberedGpu[]) {
    super(gpu.index, gpu.name, gpu.uuid, 0, 0);
  }
}

/** The GPUs of another machine `p` saw when it was dumped there; `undefined` for this one's. */
export const gpusSeenBy = (p: SimulatedProcess): readonly SimulatedGpu[] | undefined =>
  p.gpus[0] instanceof RememberedGpu ? p.gpus[0].seen : undefined;

/** The images of a process that can be dumped, taken now; it saw `machineGpus` where no others. */
export function imageOf(p: SimulatedProcess, machineGpus: readonly SimulatedGpu[]): DumpedImages {
  const image: ProcessImage = {
    format: IMAGE_FORMAT,
    version: IMAGE_VERSION,
    ...p.fields,
    state: p.usesCuda ? CHECKPOINTED : INITIAL_STATE,
    gpus: p.gpuUuids,
    devices: (gpusSeenBy(p) ?? machineGpus).map(({ index, uuid, name }) => ({ index, uuid, name })),
  };
  return { image, pages: p.savedPages() };
}

/**
 * A process made from its image, adopted by `host`: the next start number, checkpointed, memory
 * zero until loaded, on the GPUs of `host` it used where it saw them all, else on those it recalls.
 */
export function restoredProcess(
  host: MachineView,
  image: ProcessImage,
  root: number,
): SimulatedProcess {
  const here = new Map(host.gpus.map((g) => [g.uuid, g]));
  const seen: RememberedGpu[] = [], elsewhere = !image.devices.every((d) => here.has(d.uuid));
  if (elsewhere) { for (const d of image.devices) seen.push(new RememberedGpu(d, seen)); }
  Object.freeze(seen);
  const gpus = image.gpus.map((u) => elsewhere ? seen.find((g) => g.uuid === u)! : here.get(u)!);
  const parent = image.pid === root ? 0 : image.parent;
  const start = host.nextStart, threads = [...image.threads];
  const proc = new SimulatedProcess(host, { ...image, threads, gpus, parent, start });
  if (!image.cuda) return host.adopt(proc);
  proc.loadPages("host", []);
  proc.enter(CHECKPOINTED);
  return host.adopt(proc);
}

/** Throws unless `dir` is an existing empty directory (links followed, as criu does). */
export function emptyDirectory(dir: string, log: EngineLog): void {
  const entries = attempt(log, `cannot use images directory ${dir}`, () => {
    if (!statSync(dir).isDirectory()) throw log.error(`images directory ${dir} is not a directory`);
    return readdirSync(dir);
  });
  const first = `${entries.length} entries, ${JSON.stringify(entries[0])} first`;
  if (entries.length > 0) throw log.error(`images directory ${dir} is not empty (it has ${first})`);
}

/**
 * Writes a process's image and pages files into `dir` (mode 0600, never over a file): the pages
 * file a line of JSON listing the pages and their lengths, then their bytes, as criu's are binary.
 */
export function writeImages(dir: string, { image, pages }: DumpedImages, log: EngineLog): void {
  const lengths = pages.map(([i, bytes]) => [i, bytes.length]);
  const header = { format: PAGES_FORMAT, version: PAGES_VERSION, pid: image.pid, pages: lengths };
  const files = [[imageName(image.pid), image, []], [pagesName(image.pid), header, pages]] as const;
  for (const [name, json, after] of files) {
    const file = join(dir, name), parts = [JSON.stringify(json) + "\n", ...after.map(([, b]) => b)];
    attempt(log, `cannot write ${file}`, () => {
      const fd = openSync(file, "wx", 0o600);
      try {
        for (const part of parts) writeFileSync(fd, part); // all of it, where it got to
      } finally {
        closeSync(fd);
      }
    });
  }
}

/** The images of the tree of `root` in `dir`, read strictly, each after its parent; not memory. */
export function readTree(dir: string, root: number, log: EngineLog): ProcessImage[] {
  const names = attempt(log, `cannot read images directory ${dir}`, () => readdirSync(dir));
  const byPid = new Map<number, ProcessImage>(), threads = new Map<number, number>();
  const withPages = new Set<number>();
  for (const name of names.sort()) {
    const pages = PAGES_NAME.exec(name), match = IMAGE_NAME.exec(name);
    if (pages) withPages.add(Number(pages[1]));
    if (!match) continue;
    const file = join(dir, name), image = readImage(file, Number(match[1]), log);
    for (const t of image.threads) {
      const also = `thread ${t} is process ${threads.get(t)}'s too`;
      if (threads.has(t)) throw log.error(`${file} is corrupt: ${also}`);
      threads.set(t, image.pid);
    }
    byPid.set(image.pid, image);
  }
  const top = byPid.get(root);
  if (!top) throw log.error(`no image of process ${root} in ${dir}`);
  const tree = [top], all = [...byPid.values()];
  for (const t of tree) for (const p of all) if (p.parent === t.pid && p.pid !== root) tree.push(p);
  const stray = all.find((image) => !tree.includes(image));
  const notIn = `is no image of the tree of ${root}: its parent ${stray?.parent} is not in it`;
  if (stray) throw log.error(`${join(dir, imageName(stray.pid))} ${notIn}`);
  const stranger = [...withPages].find((pid) => !byPid.has(pid));
  const none = `is the memory of no process: there is no ${imageName(stranger!)} beside it`;
  if (stranger) throw log.error(`${join(dir, pagesName(stranger))} ${none}`);
  const lacking = tree.find((i) => !withPages.has(i.pid))?.pid;
  if (lacking === undefined) return tree;
  const holds = `the memory of process ${lacking}, whose ${imageName(lacking)} is there`;
  throw log.error(`${join(dir, pagesName(lacking))} is missing: it holds ${holds}`);
}

/** The pages of memory of `image`'s process: read now, strictly, from its pages file. */
export function memoryOf(dir: string, image: ProcessImage, log: EngineLog): SavedPages {
  const { read, v, body } = readTagged(join(dir, pagesName(image.pid)), "pages", log);
  read.object(v, "", ["format", "version", "pid", "pages"]);
  if (v.pid !== image.pid) read.fail("pid", `${image.pid}, as its name says`, v.pid);
  const none = "[] for a process without CUDA (it has no GPU memory)", pages = v.pages;
  if (!image.cuda && (!Array.isArray(pages) || pages.length > 0)) read.fail("pages", none, pages);
  return readPages(read, pages, mibToBytes(image.memoryMiB), "pages", body);
}

/** Each kind of file read: what messages call it, its format, the version read. */
const KINDS = {
  image: ["image", IMAGE_FORMAT, IMAGE_VERSION],
  pages: ["pages file", PAGES_FORMAT, PAGES_VERSION],
} as const;

/** The JSON object in `file` (a pages file: its first line) and a reader of it, the rest after. */
function readTagged(file: string, kind: keyof typeof KINDS, log: EngineLog) {
  const [what, format, version] = KINDS[kind];
  const [text, body] = attempt(log, `cannot read the ${what} ${file}`, () => {
    // Read in place (Deno's readFileSync takes 2-3 times as long), never waiting on a FIFO.
    const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const st = fstatSync(fd), all = Buffer.allocUnsafe(st.isFile() ? st.size : 0);
      if (!st.isFile()) throw log.error(`${file} is not a regular file`);
      let at = 0, n = 1;
      while (n > 0 && at < all.length) at += n = readSync(fd, all, at, all.length - at, null);
      const got = all.subarray(0, at), end = kind === "pages" ? got.indexOf(10) + 1 || at : at;
      return [got.subarray(0, end).toString("utf8"), got.subarray(end)] as const;
    } finally {
      closeSync(fd);
    }
  });
  const parse = new StrictReader((_, reason) => log.error(reason));
  const read = new StrictReader((_, reason) => log.error(`${file} is corrupt: ${reason}`));
  const v = read.object(parse.parse(text, `the ${what} ${file}`), "");
  if (v.format !== format) read.fail("format", JSON.stringify(format), v.format);
  if (v.version !== version) read.fail("version", `${version}`, v.version);
  return { read, v, body };
}

/** The image of process `pid` in `file`, read field by field. */
function readImage(file: string, pid: number, log: EngineLog): ProcessImage {
  const { read, v: tagged } = readTagged(file, "image", log);
  const v = read.object(tagged, "", FIELDS, ["ipcImport", "nccl", "tcp"]);
  if (v.pid !== pid) read.fail("pid", `${pid}, as its name says`, v.pid);
  const fields = readFields(read, v, "", pid, MAX_PID);
  const { threads, cuda } = fields;
  if (threads[0] !== pid) read.refuse("threads", `threads must begin with the pid ${pid}`);
  if (new Set(threads).size !== threads.length) read.refuse("threads", "threads lists an id twice");
  const state = cuda ? CHECKPOINTED : INITIAL_STATE;
  const forIt = `${JSON.stringify(state)} for a ${cuda ? "CUDA " : ""}process`;
  if (v.state !== state) read.fail("state", forIt, v.state);
  // Whole: each GPU it used is one it saw.
  const devices = readGpus(read, v.devices, "devices", 1);
  const gpus = read.array(v.gpus, "gpus", 1, 1024).map((g, i) => {
    const uuid = read.uuid(g, `gpus[${i}]`);
    const none = `gpus[${i}] names ${uuid}, which is none of its devices`;
    if (!devices.some((d) => d.uuid === uuid)) read.refuse(`gpus[${i}]`, none);
    return uuid;
  });
  return { format: IMAGE_FORMAT, version: IMAGE_VERSION, ...fields, state, gpus, devices };
}

/** `fn`'s result; where it throws, the failure it threw, or else a failure of `what`, naming it. */
function attempt<T>(log: EngineLog, what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw err instanceof EngineError ? err : log.error(`${what}: ${messageOf(err)}`, err);
  }
}

/** An engine's log: lines stamped with the time since the run began (as criu's `(00.123456)`). */
export class EngineLog {
  readonly #lines: string[] = [];
  readonly #clock: { now(): number };
  readonly #began: number;
  #written = false;

  /** A log beginning now on `clock` with `lines`, for `path` (none: kept in memory, a restore's). */
  constructor(clock: { now(): number }, readonly path: string | undefined, ...lines: string[]) {
    this.#clock = clock;
    this.#began = clock.now();
    for (const line of lines) this.line(line);
  }

  /** Adds a line, stamped with the time. */
  line(text: string): void {
    const s = (this.#clock.now() - this.#began) / 1000;
    this.#lines.push(`(${s.toFixed(6).padStart(9, "0")}) ${text}`);
  }

  /** The error of a failure, logged and the log written (where it can be). */
  error(message: string, cause?: unknown): EngineError {
    this.line(`Error: ${message}`);
    return new EngineError(message, { log: this.write(true) ? this.path : undefined, cause });
  }

  /** Writes the log once, replacing a file (not through a link); false if it cannot. */
  write(quietly = false): boolean {
    if (this.#written || this.path === undefined) return this.#written;
    try {
      rmSync(this.path, { force: true });
      writeFileSync(this.path, this.#lines.join("\n") + "\n", { mode: 0o600, flag: "wx" });
    } catch (err) {
      if (quietly) return false;
      throw new EngineError(`cannot write the log ${this.path}: ${messageOf(err)}`, { cause: err });
    }
    return this.#written = true;
  }
}
