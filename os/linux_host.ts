// The Linux host: the processes in `/proc` (command lines, libcuda mapped or not, trees, ids in
// use), GPU memory per process from NVML where it loads, and the records of held GPU memory.
// `/proc` is read asynchronously, at most {@link PROC_READS_AT_ONCE} files at once (reading another
// process's `maps` or `cmdline` waits for its memory-map lock, which must not stop the event
// loop), with each runtime's faster reads (`Deno.readFile`; Bun's `node:fs/promises`).

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import os from "node:os";
import process from "node:process";
import { type GpuImport, type GpuMemoryReport, type HeldRecords, ncclRank } from "../core/host.ts";
import type { HostProcesses, MachineFacts } from "../core/host.ts";
import type { PidUse, ProcessIdentity, ScannedProcess, TreeProcess } from "../core/host.ts";
import { messageOf } from "../core/errors.ts";
import { checkFlag, checkPath, orElse } from "../core/options.ts";
import { Slots } from "../core/time.ts";
import type { Nvml } from "../ffi/nvml.ts";
import { pathTrouble } from "./private.ts";
import { FileHeldRecords, recordsDirectory } from "./records.ts";

/** How many `/proc` files are read at once. */
const PROC_READS_AT_ONCE = 32;

/** How `/proc` is read: the runtime's file system by default (tests give one that fails). */
export interface ProcReader {
  /** The names in a folder. */
  list(path: string): Promise<string[]>;
  /** A file's text; rejects as the file system does (`code` ENOENT, EACCES; Deno's `name`). */
  read(path: string): Promise<string>;
}

/** How `/proc`, NVML and the records are found: `openMachine`'s `host` option. */
export interface LinuxHostOptions {
  /** Whether to load NVML for GPU memory. Default true. */
  nvml?: boolean;
  /** The NVML library (an absolute path); else `$CKPT_LIBNVML_PATH` or ffi/nvml.ts's search. */
  nvmlPath?: string;
  /** Where `/proc` is, an absolute path: `/proc` by default. */
  procRoot?: string;
  /** How `/proc` is read; the runtime's file system by default. */
  reader?: ProcReader;
  /**
   * The records of held GPU memory, an absolute path; `false` for none (each program then knows
   * what it checkpointed itself). Left out: `$CKPT_RECORDS_DIR`, else `/run/ckpt-cuda` as root,
   * else one of the user's own; none on Deno without permission to read and write it.
   */
  recordsDir?: string | false;
}

/** A path to the CUDA driver library in a `/proc/PID/maps` line (`libcuda.so.580.95.05`, ...). */
const LIBCUDA_MAPPED = /\/libcuda\.so(\.[0-9]+)*( \(deleted\))?$/m;

const deno = (globalThis as { Deno?: typeof Deno }).Deno;

function runtimeReader(): ProcReader {
  if (deno) {
    const decoder = new TextDecoder();
    return {
      list: async (path) => (await Array.fromAsync(deno.readDir(path))).map((e) => e.name),
      read: async (path) => decoder.decode(await deno.readFile(path)),
    };
  }
  return {
    list: async (path) => (await import("node:fs/promises")).readdir(path),
    read: async (path) => (await import("node:fs/promises")).readFile(path, "utf8"),
  };
}

/** Whether Deno grants a permission without a prompt (on Bun, always). */
export const granted = (permission: Deno.PermissionDescriptor): boolean =>
  !deno || deno.permissions.querySync(permission).state === "granted";

/** What a failed read means: the process is gone, it may not be looked at, or something else. */
function classify(error: unknown): "gone" | "denied" | "other" {
  const { code = "", name = "" } = (error ?? {}) as { code?: string; name?: string };
  if (/^(ENOENT|ESRCH)$/.test(code) || name === "NotFound") return "gone";
  return /^(EACCES|EPERM)$/.test(code) || name === "PermissionDenied" ? "denied" : "other";
}

/** A `/proc/PID/cmdline` with spaces between the arguments. */
const commandLine = (raw: string) => raw.replace(/\0+$/, "").replaceAll("\0", " ");

/** The names of a `/proc` folder that are process or thread ids, as numbers. */
const numbered = (names: readonly string[]): number[] =>
  names.filter((n) => /^[1-9][0-9]*$/.test(n)).map(Number);

/** A process's ids from its `/proc/PID/status`, one per PID namespace, this one's last. */
const nsPids = (status: string): string[] =>
  /^NSpid:\s*([0-9 \t]+)$/m.exec(status)?.[1].trim().split(/\s+/) ?? [];

/** One process as `/proc/PID/stat` gives it, and its thread ids where they were asked for. */
export interface ProcEntry {
  readonly state: string;
  readonly parent: number;
  readonly group: number;
  readonly session: number;
  readonly start: number;
  /** Its leader is exiting (`PF_EXITING` in its flags): killed, still freeing what it held. */
  readonly exiting?: boolean;
  readonly threads?: readonly number[];
}

/** `/proc/PID/stat`'s state, parent, process group, session, flags and start (after the name). */
export function parseStat(stat: string): ProcEntry {
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const exiting = (+f[6] & 0x4) !== 0;
  return { state: f[0], parent: +f[1], group: +f[2], session: +f[3], start: +f[19], exiting };
}

/** `/proc/<pid>/stat`, read now (it waits for no lock); `undefined` where there is none. */
export const statOf = (pid: number | string): ProcEntry | undefined =>
  orElse(() => parseStat(readFileSync(`/proc/${pid}/stat`, "utf8")), undefined);

/** The processes descended from `pid` in `table`, parents first, each one's children by pid. */
export function descendants(table: ReadonlyMap<number, ProcEntry>, pid: number): number[] {
  const children = Map.groupBy([...table].sort(([a], [b]) => a - b), ([, e]) => e.parent);
  // Each once: a parent loop (pids reused while /proc was read) neither loops nor repeats one.
  const out = new Set([pid]);
  for (const p of out) for (const [c] of children.get(p) ?? []) out.add(c);
  return [...out].slice(1);
}

/** Every process of `/proc` by pid, read once, with its thread ids where `threads` asks. */
export async function procTable(
  reader: ProcReader = runtimeReader(),
  root = "/proc",
  threads = false,
): Promise<Map<number, ProcEntry>> {
  const table = new Map<number, ProcEntry>();
  await atMostSome(numbered(await reader.list(root).catch(() => [])), async (pid) => {
    try {
      const entry = parseStat(await reader.read(`${root}/${pid}/stat`));
      const tasks = threads ? numbered(await reader.list(`${root}/${pid}/task`)) : undefined;
      table.set(pid, tasks ? { ...entry, threads: tasks } : entry);
    } catch {
      // gone meanwhile
    }
  });
  return table;
}

/** `fn` of each of `items`, in their order, at most {@link PROC_READS_AT_ONCE} at a time. */
function atMostSome<T, R>(items: readonly T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const slots = new Slots(PROC_READS_AT_ONCE);
  return Promise.all(items.map((item) => slots.run(() => fn(item))));
}

/** The Linux host (see the module documentation); opening reads nothing, close lets go of NVML. */
export class LinuxHost implements HostProcesses, AsyncDisposable {
  readonly kind: string = "linux";
  readonly #root: string;
  readonly #reader: ProcReader;
  readonly #options: LinuxHostOptions;
  #nvml: Promise<Nvml> | undefined;
  #closed = false;
  /** The records of held GPU memory, shared by every program of this package on the machine. */
  readonly heldRecords: HeldRecords | undefined;
  readonly self: number | undefined = process.pid;

  /** A host of this machine, as `options` says (a `TypeError` for a value of the wrong kind). */
  constructor(options: LinuxHostOptions = {}) {
    checkFlag(options.nvml, "host.nvml", true);
    for (const key of ["nvmlPath", "procRoot"] as const) checkPath(options[key], `host.${key}`);
    if (options.recordsDir !== false) checkPath(options.recordsDir, "host.recordsDir");
    this.#root = options.procRoot ?? "/proc";
    this.#reader = options.reader ?? runtimeReader();
    this.#options = options;
    // None on Deno without permission to read the variable, or to read and write the directory.
    const env = (v: string) => granted({ name: "env", variable: v }) ? process.env[v] : undefined;
    const dir = options.recordsDir ?? recordsDirectory(env);
    this.heldRecords = dir !== false && granted({ name: "read", path: dir }) &&
        granted({ name: "write", path: dir })
      ? new FileHeldRecords(dir, (p) => this.#alive(p))
      : undefined;
  }

  /**
   * The process that has `id` as its pid or a thread id, with its start time; or none, as for a
   * zombie (exited, not yet reaped; not a leader that ended before the rest of its threads).
   */
  async identify(id: number): Promise<ProcessIdentity | undefined> {
    try {
      const status = await this.#reader.read(`${this.#root}/${id}/status`);
      const threads = Number(/^Threads:\s*([0-9]+)/m.exec(status)?.[1]);
      if (/^State:\s*Z/m.test(status) && !(threads > 1)) return undefined;
      const tgid = Number(/^Tgid:\s*([0-9]+)/m.exec(status)?.[1]);
      if (!Number.isSafeInteger(tgid) || tgid <= 0) return undefined;
      const stat = await this.#stat(tgid);
      // Killed and still exiting (it lets go of its GPU memory then): gone; a zombie leader is not.
      if (stat.exiting && stat.state !== "Z") return undefined;
      return stat.start === undefined ? { pid: tgid } : { pid: tgid, start: stat.start };
    } catch (error) {
      if (classify(error) !== "gone") throw error; // unread (EMFILE, say), which is not gone
      return undefined;
    }
  }

  /**
   * What of `who` outlasts criu's round trip: `<NSpid's last>:<Uid>:<SHA-256 of cmdline>:<SHA-256
   * of cgroup>` from `/proc/PID` (criu restores cgroup paths, which tell two containers running
   * the same command as pid 1 apart); `undefined` where it is gone, another, or unreadable.
   */
  async lastingMark(who: ProcessIdentity): Promise<string | undefined> {
    try {
      const [status, cmdline, cgroup] = await Promise.all(["status", "cmdline", "cgroup"]
        .map((f) => this.#reader.read(`${this.#root}/${who.pid}/${f}`)));
      const nsPid = nsPids(status).at(-1);
      const uid = /^Uid:\s*([0-9]+)/m.exec(status)?.[1];
      if (!nsPid || !uid || cmdline.length === 0 || cgroup.length === 0) return undefined;
      // Read after the rest: a pid taken by another process meanwhile has another start.
      const same = who.start === undefined || (await this.#stat(who.pid)).start === who.start;
      if (!same) return undefined;
      const sha = (text: string) => createHash("sha256").update(text).digest("hex");
      return `${nsPid}:${uid}:${sha(cmdline)}:${sha(cgroup)}`;
    } catch {
      return undefined;
    }
  }

  /**
   * The process tree of `root` (a pid, not a thread id), the root first and each process after its
   * parent, from one read of `/proc`; `undefined` where `root` is no process.
   */
  async processTree(root: number): Promise<TreeProcess[] | undefined> {
    this.#checkOpen("read a process tree");
    const table = await procTable(this.#reader, this.#root);
    const out: TreeProcess[] = [];
    for (const pid of table.has(root) ? [root, ...descendants(table, root)] : []) {
      try {
        const dir = `${this.#root}/${pid}`;
        const tasks = numbered(await this.#reader.list(`${dir}/task`));
        const others = tasks.filter((t) => t !== pid).sort((a, b) => a - b);
        const command = commandLine(await this.#reader.read(`${dir}/cmdline`).catch(() => ""));
        const threads = tasks.includes(pid) ? [pid, ...others] : [];
        out.push({ pid, parent: table.get(pid)!.parent || 0, threads, ...command && { command } });
      } catch {
        // gone meanwhile
      }
    }
    return out.length > 0 && out[0].pid === root ? out : undefined;
  }

  /**
   * Which of `ids` some process uses: as its pid or a thread id, its process group or its session
   * (a zombie, until reaped); `/proc` is read once (a stat and a task list per process).
   */
  async pidsInUse(ids: readonly number[]): Promise<PidUse[]> {
    this.#checkOpen("look for the users of process ids");
    const wanted = new Set(ids);
    const direct: PidUse[] = [], through: PidUse[] = [];
    for (const [holder, p] of await procTable(this.#reader, this.#root, true)) {
      if (wanted.has(holder)) direct.push({ id: holder, holder, as: "pid" });
      for (const id of p.threads ?? []) {
        if (id !== holder && wanted.has(id)) direct.push({ id, holder, as: "thread" });
      }
      const as = (["group", "session"] as const).find((k) => wanted.has(p[k]) && p[k] !== holder);
      if (as) through.push({ id: p[as], holder, as });
    }
    return [...direct, ...through];
  }

  /**
   * The sign that `pid` is an NCCL rank that would be lost on 580 ("NCCL jobs on two GPUs" in
   * docs/DRIVER.md): it has libnccl loaded, its environment says it is one of several ranks on this
   * host, and does not turn both P2P and shared memory off. Else, that it imported CUDA IPC memory:
   * it maps `/dev/shm/cuda.shm.<gpu>.<hex>.<n>` named after another process (an exporter maps the
   * one named after itself), as every importer measured on driver 580 did ("Processes that share
   * GPU memory"). None for one gone; one whose maps cannot be read is `unknown`, saying why.
   */
  async gpuImport(pid: number): Promise<GpuImport | undefined> {
    const read = (file: string) => this.#reader.read(`${this.#root}/${pid}/${file}`);
    const both = await Promise.all([read("maps"), read("status")]).catch((e: unknown) =>
      classify(e) === "gone" ? undefined : `its maps cannot be read (${pathTrouble(e)})`
    );
    if (!Array.isArray(both)) return both === undefined ? undefined : { sign: both, unknown: true };
    const [maps, status] = both;
    const nccl = /[^/\s]*libnccl\.so[.0-9]*(?= \(deleted\)$|$)/m.exec(maps)?.[0];
    const rank = nccl && ncclRank(nccl, await read("environ").catch(() => ""));
    if (rank) return rank;
    // The name carries the exporter's pid as its pid namespace numbers it, as this one's NSpid.
    const own = Number(nsPids(status).at(-1));
    for (const m of maps.matchAll(/\/dev\/shm\/(cuda\.shm\.[0-9]+\.([0-9a-f]+)\.[0-9]+)$/gm)) {
      const exporter = parseInt(m[2], 16);
      const sign = `it maps /dev/shm/${m[1]}, named after process ${exporter}`;
      if (exporter !== own && exporter !== pid) return { exporter, sign };
    }
    return undefined;
  }

  /**
   * The CPU time `pid` has had, in ns over its threads (`/proc/PID/task/TID/schedstat`);
   * `undefined` where it is gone or ended (a zombie: its exit ran, and is no run of its own).
   */
  async cpuTime(pid: number): Promise<number | undefined> {
    const dir = `${this.#root}/${pid}/task`;
    const zombie = (await this.#stat(pid).catch(() => null))?.state === "Z";
    const tasks = zombie ? undefined : await this.#reader.list(dir).catch(() => undefined);
    const read = (t: string) => this.#reader.read(`${dir}/${t}/schedstat`).catch(() => "0");
    const times = tasks && await Promise.all(tasks.map(read));
    return times?.reduce((sum, text) => sum + Number(text.split(" ")[0]), 0);
  }

  /**
   * Whether every thread of `pid` is stopped (`T`, or `t`: traced), its leader read first; else
   * `"frozen"` where its cgroup (v2) is, or is being frozen (`cgroup.freeze`: a freeze takes a
   * while, `frozen 1` in `cgroup.events` once done), its threads asleep (`S`) till it is thawed.
   */
  async stopped(pid: number): Promise<boolean | "frozen"> {
    const stopped = (s: { state: string } | null) => s?.state === "T" || s?.state === "t";
    if (!stopped(await this.#stat(pid).catch(() => null))) {
      const read = (path: string) => this.#reader.read(path).catch(() => "");
      const group = /^0::(\/.*)$/m.exec(await read(`${this.#root}/${pid}/cgroup`))?.[1];
      if (!group) return false;
      const of = (file: string) => read(`/sys/fs/cgroup${group}/cgroup.${file}`);
      return (/^frozen 1$/m.test(await of("events")) || /^1$/m.test(await of("freeze"))) &&
        "frozen";
    }
    const dir = `${this.#root}/${pid}/task`;
    const tasks = await this.#reader.list(dir).catch(() => [] as string[]);
    const state = (t: string) => this.#reader.read(`${dir}/${t}/stat`).then(parseStat, () => null);
    return tasks.length > 0 && (await Promise.all(tasks.map(state))).every(stopped);
  }

  /** The machine's name, kernel and NVIDIA driver release (`/proc/driver/nvidia/version`). */
  async facts(): Promise<MachineFacts> {
    const version = await this.#reader.read("/proc/driver/nvidia/version").catch(() => "");
    const driverRelease = /Kernel Module\s+([0-9][0-9.]*)/.exec(version)?.[1];
    return { hostname: os.hostname(), kernel: os.release(), ...driverRelease && { driverRelease } };
  }

  /** Whether a process lives, the same one (its start time, where known). */
  #alive(who: ProcessIdentity): Promise<boolean> {
    const same = (start: number | undefined) => who.start === undefined || start === who.start;
    return this.#stat(who.pid).then((s) => same(s.start), (error) => classify(error) !== "gone");
  }

  /** `/proc/PID/stat`, read; its start time only where it is a whole number. */
  async #stat(pid: number): Promise<Omit<ProcEntry, "start"> & { start?: number }> {
    const stat = parseStat(await this.#reader.read(`${this.#root}/${pid}/stat`));
    return { ...stat, start: Number.isSafeInteger(stat.start) ? stat.start : undefined };
  }

  /**
   * Every process in `/proc`: its command line and whether its `maps` show libcuda (or why they
   * cannot be read); one that ends meanwhile is left out. Rejects where `/proc` cannot be listed.
   */
  async scan(): Promise<ScannedProcess[]> {
    this.#checkOpen("scan /proc");
    const names = await this.#reader.list(this.#root).catch((error) => {
      const why = `${this.#root} could not be read (${messageOf(error)})`;
      const deno = `on Deno, allow reading it (--allow-read=${this.#root})`;
      throw new Error(`the processes cannot be listed: ${why}; ${deno}`, { cause: error });
    });
    const found = await atMostSome(numbered(names), (pid) => this.#look(pid));
    return found.filter((p) => p !== undefined);
  }

  /**
   * GPU memory per process and free memory per GPU from NVML (kept initialised until `release`),
   * or why it is unknown: no NVML, or a PID namespace of this program's own (NVML's pids are the
   * host's). Not in a program that checkpointed itself: NVML would wait for its restore.
   */
  async gpuMemory(): Promise<GpuMemoryReport> {
    this.#checkOpen("read GPU memory");
    const { nvml: wanted = true, nvmlPath: libraryPath } = this.#options;
    if (!wanted) return { unknown: "NVML was not asked for (nvml: false)" };
    const status = await this.#reader.read(`${this.#root}/self/status`).catch(() => "");
    const ids = nsPids(status).join(" ");
    const own = `this program runs in a PID namespace of its own (a container: NSpid ${ids})`;
    const hosts = "and NVML reports the host's pids, which /proc here does not show";
    if (ids.includes(" ")) return { unknown: `${own}, ${hosts}` };
    this.#nvml ??= Promise.all([import("../ffi/runtime.ts"), import("../ffi/nvml.ts")])
      .then(async ([{ runtimeAdapter }, { openNvml }]) =>
        openNvml(await runtimeAdapter(), { libraryPath, keepInitialized: true })
      );
    const nvml = await this.#nvml.catch((error) => ({ unknown: messageOf(error) }));
    return "unknown" in nvml ? nvml : await nvml.gpuMemory();
  }

  /** Lets go of NVML until the next `gpuMemory()`: before this program checkpoints itself. */
  async release(): Promise<void> {
    const nvml = this.#nvml;
    this.#nvml = undefined;
    await nvml?.then((n) => n.close()).catch(() => {}); // one never opened has nothing to close
  }

  /** Lets go of NVML, once the reads under way have ended. Idempotent. */
  close(): Promise<void> {
    this.#closed = true;
    return this.release();
  }

  /** {@link LinuxHost.close}, for `await using`. */
  readonly [Symbol.asyncDispose] = (): Promise<void> => this.close();

  #checkOpen(what: string): void {
    if (this.#closed) throw new Error(`this Linux host has been closed: cannot ${what}`);
  }

  /** One process, or `undefined` when it is gone. */
  async #look(pid: number): Promise<ScannedProcess | undefined> {
    const dir = `${this.#root}/${pid}`;
    // Unreadable here (hidepid, say) but maybe not its maps: go on without it.
    const command = await this.#reader.read(`${dir}/cmdline`)
      .then(commandLine, (error) => classify(error) === "gone" ? undefined : "");
    if (command === undefined) return undefined;
    const withCommand = { pid, ...command && { command } };
    try {
      const maps = await this.#reader.read(`${dir}/maps`);
      return { ...withCommand, cudaLibrary: LIBCUDA_MAPPED.test(maps) };
    } catch (error) {
      const kind = classify(error);
      if (kind === "gone") return undefined;
      const denied = `permission denied reading ${dir}/maps (another user's process, or one the ` +
        `kernel protects; root with CAP_SYS_PTRACE can read most)`;
      const other = `${dir}/maps could not be read: ${messageOf(error)}`;
      return { ...withCommand, notInspectable: kind === "denied" ? denied : other };
    }
  }
}
