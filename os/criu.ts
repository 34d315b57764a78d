/**
 * CRIU as the engine of snapshots: the installed `criu`, run with an argument array, one run per
 * tree. This package suspends and resumes the CUDA processes itself (a checkpointed one no longer
 * refers to the GPU), so criu runs without its CUDA plugin (`--no-default-config`, an empty
 * `--libdir`, no `CRIU_CONFIG_FILE` or `CRIU_LIBS_DIR`), which would restore and unlock them
 * behind its back. A dump leaves the processes running (the snapshot ends them once every tree is
 * on disk); `--shell-job` takes a tree whose root leads no session, `--file-locks` one holding a
 * file lock (Deno holds its caches'). A run is never interrupted (criu killed midway can leave its
 * parasite code in a process). Each error names the run's log.
 *
 * @module
 */

import { spawn } from "node:child_process";
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import {
  type DumpedProcess,
  type DumpRequest,
  EngineError,
  type EngineProbe,
  type RestoreRequest,
  type SnapshotEngine,
} from "../core/engine.ts";
import { messageOf } from "../core/errors.ts";
import { errorCode, myUid } from "./private.ts";

/** The environment variable that names the criu program, where it is not on `PATH`. */
const CRIU_ENV_VAR = "CKPT_CRIU_PATH";
/** The oldest criu this package runs. */
const CRIU_MIN_VERSION = "4.0";

/** Where criu is looked for after `PATH`'s absolute directories. */
const SYSTEM_DIRS = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin"];

/** How criu is found and run: `openMachine`'s `criu` option. */
export interface CriuEngineOptions {
  /**
   * The criu program: an absolute path. Left out: `$CKPT_CRIU_PATH`, else `criu` in `PATH`'s
   * absolute directories, else in the system's sbin and bin directories; never a relative path.
   */
  criuPath?: string;
  /** More arguments for every dump and restore (`--tcp-established`, `--ext-unix-sk`, ...). */
  extraArgs?: readonly string[];
  /** The environment to find criu in and run it with; the process's by default. */
  env?: Readonly<Record<string, string | undefined>>;
}

/** The installed criu. Opening runs nothing; `probe()` finds it, and runs `criu check`. */
export function openCriuEngine(options: CriuEngineOptions = {}): SnapshotEngine {
  return new CriuEngine(options);
}

class CriuEngine implements SnapshotEngine {
  readonly kind: string = "criu";
  readonly #given: string | undefined;
  readonly #extra: readonly string[];
  readonly #env: Readonly<Record<string, string | undefined>>;
  #probe: Promise<EngineProbe> | undefined;

  constructor(options: CriuEngineOptions) {
    const given = options.criuPath;
    if (given !== undefined && !path.isAbsolute(given)) {
      throw new TypeError(`criuPath must be an absolute path, got ${JSON.stringify(given)}`);
    }
    for (const arg of options.extraArgs ?? []) {
      if (typeof arg !== "string" || !arg.startsWith("--") || arg.includes("\0")) {
        throw new TypeError(
          `extraArgs must be criu options starting with --, got ${JSON.stringify(arg)}`,
        );
      }
    }
    this.#given = given;
    this.#extra = [...(options.extraArgs ?? [])];
    this.#env = options.env ?? process.env;
  }

  probe(): Promise<EngineProbe> {
    this.#probe ??= this.#find().then(async (found) => {
      if (!found.path) return { problems: [found.problem!] };
      const problems: string[] = [];
      const version = await run(found.path, ["--version"], this.#cleanEnv())
        .then((r) => r.stdout.match(/^Version:\s*([0-9][0-9.]*)/m)?.[1])
        .catch(() => undefined);
      if (!version) {
        problems.push(`${found.path} does not run as criu (criu --version gave no version).`);
      } else if (older(version, CRIU_MIN_VERSION)) {
        problems.push(
          `criu ${version} at ${found.path} is too old: this package needs criu ` +
            `${CRIU_MIN_VERSION} or later (tested with 4.1.1).`,
        );
      }
      if (myUid() !== 0) {
        problems.push(
          "Snapshots need root: criu needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) over the " +
            "processes, and so do the driver's checkpoint calls; run as root.",
        );
      } else if (version) {
        const check = await run(found.path, ["check", "--no-default-config"], this.#cleanEnv())
          .catch((err) => ({ code: -1, stdout: "", stderr: messageOf(err) }));
        if (check.code !== 0 || !/Looks good/.test(check.stdout)) {
          const said = `${check.stdout}\n${check.stderr}`.split("\n").map((l) => l.trim())
            .filter(Boolean).slice(-4).join("; ");
          problems.push(
            `criu check reports that this kernel lacks what criu needs: ${said || "no output"}.`,
          );
        }
      }
      return { ...(version ? { version } : {}), problems };
    });
    return this.#probe;
  }

  async dump(request: DumpRequest): Promise<readonly DumpedProcess[]> {
    const criu = await this.#path();
    const log = path.join(request.imagesDir, "dump.log");
    const noPlugins = await mkdtemp(path.join(os.tmpdir(), "ckpt-criu-noplugins-"));
    const watch = watchBytes(request.imagesDir, request.onBytes);
    try {
      await this.#run(criu, "dump", request.root, log, [
        ...["--libdir", noPlugins, "--tree", String(request.root)],
        ...["--images-dir", request.imagesDir, "--leave-running"],
      ]);
      if (request.signal?.aborted) {
        throw new EngineError(`the dump of the tree of ${request.root} was stopped`, { log });
      }
      const pstree = path.join(request.imagesDir, "pstree.img");
      try {
        return parsePstree(new Uint8Array(await readFile(pstree)));
      } catch (err) {
        throw new EngineError(`criu's ${pstree} cannot be read: ${messageOf(err)}`, { log });
      }
    } finally {
      await watch.stop();
      await rm(noPlugins, { recursive: true, force: true });
    }
  }

  async restore(request: RestoreRequest): Promise<void> {
    const criu = await this.#path();
    const work = await mkdtemp(path.join(os.tmpdir(), "ckpt-criu-restore-"));
    const noPlugins = path.join(work, "no-plugins");
    const log = path.join(work, "restore.log");
    const pidfile = path.join(work, "root.pid");
    let ok = false;
    try {
      await mkdir(noPlugins, { mode: 0o700 });
      await this.#run(criu, "restore", request.root, log, [
        ...["--libdir", noPlugins, "--images-dir", request.imagesDir, "--work-dir", work],
        ...["--pidfile", pidfile, "--restore-detached"],
      ]);
      const root = Number((await readFile(pidfile, "utf8").catch(() => "")).trim());
      if (root !== request.root) {
        throw new EngineError(
          `criu restored the tree of ${request.root} as ${root || "an unknown pid"}`,
          { log },
        );
      }
      ok = true;
    } finally {
      // The log of a failure stays for the error to name; a success leaves nothing behind.
      if (ok) await rm(work, { recursive: true, force: true });
      else await rm(noPlugins, { recursive: true, force: true });
    }
  }

  stop(pids: readonly number[]): Promise<void> {
    return Promise.resolve(signalEach(pids, "SIGSTOP"));
  }

  kill(pids: readonly number[]): Promise<void> {
    return Promise.resolve(signalEach(pids, "SIGKILL"));
  }

  async #path(): Promise<string> {
    const found = await this.#find();
    if (!found.path) throw new EngineError(found.problem!);
    return found.path;
  }

  /** Runs `criu op` on the tree of `root` with the options every run has; throws on a failure. */
  async #run(criu: string, op: string, root: number, log: string, args: string[]): Promise<void> {
    const result = await run(criu, [
      ...[op, "--no-default-config", "--log-file", log, "-v4", "--shell-job", "--file-locks"],
      ...args,
      ...this.#extra,
    ], this.#cleanEnv());
    if (result.code !== 0) {
      const why = `criu ${op} of the tree of ${root} failed (exit ${result.code})`;
      throw new EngineError(`${why}: ${await logErrors(log, result.stderr)}`, { log });
    }
  }

  /** criu's path: the one given, else `$CKPT_CRIU_PATH`, else `PATH`'s absolute dirs, else sbin. */
  async #find(): Promise<{ path?: string; problem?: string }> {
    const named = this.#given ?? this.#env[CRIU_ENV_VAR];
    if (named) {
      if (!path.isAbsolute(named)) {
        return {
          problem: `${CRIU_ENV_VAR} must be an absolute path, got ${JSON.stringify(named)}.`,
        };
      }
      return await isProgram(named)
        ? { path: named }
        : { problem: `criu was not found at ${named}.` };
    }
    const dirs = (this.#env.PATH ?? "").split(":").filter((d) => path.isAbsolute(d));
    for (const dir of [...dirs, ...SYSTEM_DIRS]) {
      const candidate = path.join(dir, "criu");
      if (await isProgram(candidate)) return { path: candidate };
    }
    const where = `PATH's directories nor in ${SYSTEM_DIRS.join(", ")}`;
    const what = `install criu ${CRIU_MIN_VERSION} or later (apt install criu)`;
    return {
      problem: `criu is not installed (not in ${where}): ${what}, or name it with ${CRIU_ENV_VAR}.`,
    };
  }

  /** The environment criu runs with: no configuration or plugin directory from outside. */
  #cleanEnv(): Record<string, string> {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(this.#env)) {
      if (v !== undefined && k !== "CRIU_CONFIG_FILE" && k !== "CRIU_LIBS_DIR") env[k] = v;
    }
    return env;
  }
}

/** Sends `signal` to each pid; one already gone is no error. */
function signalEach(pids: readonly number[], signal: "SIGSTOP" | "SIGKILL"): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch (err) {
      if (errorCode(err) !== "ESRCH") throw err;
    }
  }
}

/** `IMG_COMMON_MAGIC` and `PSTREE_MAGIC`, the first two words of criu's `pstree.img`. */
const PSTREE_MAGICS = [0x54564319, 0x50273030];

/**
 * The processes in criu's `pstree.img`: after its two magic words, one `pstree_entry` message per
 * process (the root first), each after its length as a 32-bit word. Of each message, the fields
 * read are 1 (pid), 2 (ppid) and 5 (threads, packed or not); the rest are skipped.
 */
export function parsePstree(bytes: Uint8Array): DumpedProcess[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (
    bytes.length < 8 || view.getUint32(0, true) !== PSTREE_MAGICS[0] ||
    view.getUint32(4, true) !== PSTREE_MAGICS[1]
  ) {
    throw new Error("it does not start with criu's pstree magic");
  }
  const out: DumpedProcess[] = [];
  let at = 8;
  while (at < bytes.length) {
    if (at + 4 > bytes.length) throw new Error(`it ends within an entry's length at byte ${at}`);
    const length = view.getUint32(at, true);
    at += 4;
    if (at + length > bytes.length) throw new Error(`its entry at byte ${at - 4} is cut short`);
    out.push(pstreeEntry(bytes.subarray(at, at + length)));
    at += length;
  }
  if (out.length === 0) throw new Error("it holds no process");
  return out;
}

function pstreeEntry(message: Uint8Array): DumpedProcess {
  let at = 0;
  const varint = (): number => {
    let value = 0, shift = 0;
    for (;;) {
      if (at >= message.length) throw new Error("a number is cut short");
      const byte = message[at++];
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return value;
      shift += 7;
      if (shift > 63) throw new Error("a number is too long");
    }
  };
  let pid = 0, parent = 0;
  const threads: number[] = [];
  while (at < message.length) {
    const key = varint();
    const field = Math.floor(key / 8), wire = key % 8;
    if (wire === 0) {
      const value = varint();
      if (field === 1) pid = value;
      else if (field === 2) parent = value;
      else if (field === 5) threads.push(value);
    } else if (wire === 2) {
      const length = varint();
      const end = at + length;
      if (end > message.length) throw new Error("a field is cut short");
      if (field === 5) { while (at < end) threads.push(varint()); }
      at = end;
    } else if (wire === 5 || wire === 1) {
      at += wire === 5 ? 4 : 8; // fixed32, fixed64
    } else {
      throw new Error(`a field of wire type ${wire}, which pstree entries do not have`);
    }
  }
  if (pid <= 0) throw new Error("an entry has no pid");
  return {
    pid,
    parent,
    threads: threads.includes(pid) ? [pid, ...threads.filter((t) => t !== pid)] : [pid, ...threads],
  };
}

/** Whether `version` is older than `min` (dotted numbers). */
function older(version: string, min: string): boolean {
  const a = version.split(".").map(Number), b = min.split(".").map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0, y = b[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}

function isProgram(file: string): Promise<boolean> {
  return stat(file).then((st) => st.isFile() && (st.mode & 0o111) !== 0, () => false);
}

/** Runs a program with an argument array; resolves to its exit code and output. */
function run(
  program: string,
  args: readonly string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, [...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (d: string) => stdout += d);
    child.stderr!.setEncoding("utf8").on("data", (d: string) => stderr += d);
    child.on("error", reject);
    child.on("close", (code, sig) => resolve({ code: code ?? (sig ? 128 : -1), stdout, stderr }));
  });
}

/** criu's error lines from its log (or its stderr), the last few. */
async function logErrors(log: string, stderr: string): Promise<string> {
  const text = await readFile(log, "utf8").catch(() => stderr);
  const errors = text.split("\n").filter((l) => /Error|FAILED|Can't/.test(l));
  const picked = (errors.length > 0 ? errors : text.split("\n")).slice(-4)
    .map((l) => l.replace(/^\(\s*[0-9.]+\)\s*/, "").trim()).filter(Boolean);
  return `${picked.join("; ") || "no output"} (log: ${log})`;
}

/** Tells `onBytes` the size of the images so far, every 250 ms, and once more at the end. */
function watchBytes(dir: string, onBytes: ((bytes: number) => void) | undefined) {
  if (!onBytes) return { stop: () => Promise.resolve() };
  let last = -1;
  const measure = async () => {
    let total = 0;
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const st = await lstat(path.join(dir, name)).catch(() => undefined);
      if (st?.isFile()) total += st.size;
    }
    if (total !== last) {
      last = total;
      try {
        onBytes(total);
      } catch {
        // A progress display that throws must not break the dump.
      }
    }
  };
  const timer = setInterval(() => void measure(), 250);
  return {
    async stop() {
      clearInterval(timer);
      await measure();
    },
  };
}
