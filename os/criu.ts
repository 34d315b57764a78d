// CRIU as the engine of snapshots: the installed `criu`, run with an argument array, one run per
// tree, without its CUDA plugin (`--no-default-config`, an empty `--libdir`, no `CRIU_CONFIG_FILE`
// or `CRIU_LIBS_DIR`), which would restore and unlock the CUDA processes behind this package's
// back. A dump leaves the processes running; `--shell-job` takes a tree whose root leads no
// session, `--file-locks` one holding a file lock (Deno holds its caches'). criu is chosen with
// care (`trusted.ts`) and runs by its real path with a fixed `PATH` and nothing else of the
// caller's environment; each run is bounded (`bounded_run.ts`) in a private work directory removed
// when it ends. Each error names criu's log.

import { lstat, mkdir, readdir, readFile, readlink, rename, stat } from "node:fs/promises";
import { copyFile } from "node:fs/promises";
import { availableParallelism } from "node:os";
import path from "node:path";
import process from "node:process";
import type { DumpedProcess, DumpRequest, EngineProbe } from "../core/engine.ts";
import { EngineError, type RestoreRequest, type SnapshotEngine } from "../core/engine.ts";
import { messageOf } from "../core/errors.ts";
import { checkPath, mustBe } from "../core/options.ts";
import { olderVersion } from "../core/version.ts";
import { endedSentence, type RunBound, runBounded, signalEach, treeOf } from "./bounded_run.ts";
import { parsePstree } from "./criu_images.ts";
import { portsFree } from "./criu_ports.ts";
import { muteConnections } from "./mute.ts";
import { myUid } from "./private.ts";
import { removeWorkDir, trustedLibraryDir, trustedProgram, workDir } from "./trusted.ts";

/** The environment variables that name criu and its library directory. */
const CRIU_ENV_VAR = "CKPT_CRIU_PATH", LIBRARY_ENV_VAR = "CKPT_CRIU_LIBRARY_DIR";
/** The oldest criu this package runs. */
const CRIU_MIN_VERSION = "4.0";
/** Why a snapshot cannot be taken or restored by another user than root. */
const NEEDS_ROOT = "Snapshots need root: criu needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) " +
  "over the processes, and so do the driver's checkpoint calls; run as root.";
/** What to do where criu cannot hold a connection's traffic (a GPU host without iptables, nft). */
const TCP_LOCK_HINT = "criu holds an established connection's traffic while it dumps with " +
  "iptables-restore (or nftables, with criu's --network-lock=nftables): install iptables, or, " +
  "where both ends of every connection are in the snapshot, give criu --network-lock=skip " +
  "(openMachine({ criu: { extraArgs } })).";
/** Where criu is looked for after `PATH`'s absolute directories. */
const SYSTEM_DIRS = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin"];

/** How criu is found and run: `openMachine`'s `criu` option. */
export interface CriuEngineOptions {
  /**
   * The criu program, an absolute path; left out, `$CKPT_CRIU_PATH`, else `criu` in `PATH`'s
   * absolute directories, else in sbin and bin. It and every directory above its real path must be
   * root's (or this user's) and writable by nobody else.
   */
  criuPath?: string;
  /**
   * criu's `LD_LIBRARY_PATH` (a criu unpacked outside the system), an absolute path checked as
   * `criuPath` is, with everything below it; left out, `$CKPT_CRIU_LIBRARY_DIR`, else none.
   */
  libraryDir?: string;
  /** More arguments for every dump and restore (`--tcp-established`, `--ext-unix-sk`, ...). */
  extraArgs?: readonly string[];
  /**
   * The environment criu is found in (`PATH`, `CKPT_CRIU_PATH`, `CKPT_CRIU_LIBRARY_DIR`); the
   * process's by default. criu runs with `PATH=/usr/sbin:/usr/bin:/sbin:/bin` and no other.
   */
  env?: Readonly<Record<string, string | undefined>>;
}

/** The installed criu. Opening runs nothing; `probe()` finds it, and runs `criu check`. */
export const openCriuEngine = (options: CriuEngineOptions = {}): SnapshotEngine =>
  new CriuEngine(options);

/** criu as found and checked: its real path and the environment it runs with. */
type Criu = { readonly path: string; readonly env: Record<string, string> };
/** A run's log: the path criu writes, and the one the user is told. */
type Log = { readonly file: string; readonly shown: string };

class CriuEngine implements SnapshotEngine {
  readonly kind: string = "criu";
  /** At most one criu run per core at once: a snapshot of more trees runs them in turn. */
  readonly parallel: number = availableParallelism();
  readonly #o: CriuEngineOptions & Required<Pick<CriuEngineOptions, "extraArgs" | "env">>;
  #probe: Promise<EngineProbe> | undefined;
  /** The processes of dumps with `tcpEstablished` (or criu's own option), till they are killed. */
  readonly #connected = new Set<number>();

  constructor(options: CriuEngineOptions) {
    const { criuPath, libraryDir, extraArgs = [] } = options;
    checkPath(criuPath, "criuPath");
    checkPath(libraryDir, "libraryDir", "an absolute path of a directory");
    if (!Array.isArray(extraArgs)) mustBe(TypeError, "extraArgs", "an array of options", extraArgs);
    for (const arg of extraArgs) {
      if (typeof arg !== "string" || !arg.startsWith("--") || arg.includes("\0")) {
        mustBe(TypeError, "extraArgs", "criu options starting with --", arg);
      }
    }
    this.#o = { ...options, extraArgs: [...extraArgs], env: options.env ?? process.env };
  }

  /** Its restore does not act on its memory images (`pages-N.img`) and its dump's `dump.log`. */
  inertFile(name: string): boolean {
    return name === "dump.log" || /^pages-[1-9][0-9]{0,9}\.img$/.test(name);
  }

  probe(): Promise<EngineProbe> {
    this.#probe ??= this.#find().then(async (found) => {
      if ("problem" in found) return { problems: [found.problem] };
      const { path: criu, env } = found.criu;
      const problems: string[] = [];
      const run = (args: string[]) =>
        runBounded(criu, args, env, { timeoutMs: 60_000 }) // criu --version or check: a minute at most
          .catch((err) => ({ code: -1, stdout: "", stderr: messageOf(err) }));
      const version = (await run(["--version"])).stdout.match(/^Version:\s*([0-9][0-9.]*)/m)?.[1];
      if (!version) {
        const hint = this.#o.env.LD_LIBRARY_PATH && !env.LD_LIBRARY_PATH
          ? ` (it runs without LD_LIBRARY_PATH: name its library directory with ` +
            `${LIBRARY_ENV_VAR} or the libraryDir option)`
          : "";
        problems.push(`${criu} does not run as criu (criu --version gave no version)${hint}.`);
      } else if (olderVersion(version, CRIU_MIN_VERSION)) {
        const old = `criu ${version} at ${criu} is too old: this package needs criu`;
        problems.push(`${old} ${CRIU_MIN_VERSION} or later (tested with 4.1.1 and 4.2).`);
      }
      if (myUid() !== 0) problems.push(NEEDS_ROOT);
      else if (version) {
        const check = await run(["check", "--no-default-config"]);
        if (check.code !== 0 || !/Looks good/.test(check.stdout)) {
          const said = `${check.stdout}\n${check.stderr}`.split("\n").map((l) => l.trim())
            .filter(Boolean).slice(-4).join("; ");
          // criu 4.0 reads the vDSO of 6.x kernels (split vDSO areas) wrongly: its check fails.
          const vdso = olderVersion(version, "4.1") && /vdso/i.test(said)
            ? ` criu ${version} cannot read this kernel's vDSO (criu 4.1 fixed that): use criu ` +
              `4.1 or later.`
            : "";
          const lacks = `criu check reports that this kernel lacks what criu needs`;
          problems.push(`${lacks}: ${said || "no output"}.${vdso}`);
        }
      }
      return { ...(version ? { version } : {}), problems };
    });
    return this.#probe;
  }

  async dump(request: DumpRequest): Promise<readonly DumpedProcess[]> {
    const { criu, work, shown } = await this.#criu("dump", request);
    // Where it fails, the snapshot's rollback removes its directory and the log with it: a copy is
    // kept beside the work directories, as a failed restore's log is (the last of that root's).
    const log = { file: path.join(request.imagesDir, "dump.log"), shown };
    const stopWatching = watchBytes(() => sizeOf(request.imagesDir), request.onBytes);
    try {
      await this.#run(criu, "dump", request.root, log, [
        ...["--libdir", work, "--tree", String(request.root)],
        ...["--images-dir", request.imagesDir, "--leave-running"],
        ...(request.tcpEstablished ? ["--tcp-established"] : []),
      ], { ...request, worksOn: () => treeOf(request.root) });
      const pstree = path.join(request.imagesDir, "pstree.img");
      try {
        const dumped = parsePstree(new Uint8Array(await readFile(pstree)));
        const tcp = request.tcpEstablished || this.#o.extraArgs.includes("--tcp-established");
        for (const p of tcp ? dumped : []) this.#connected.add(p.pid);
        return dumped;
      } catch (err) {
        // As its user knows it: below a pinned `/proc/<pid>/fd/<n>`, where that is now.
        const pinned = /^(\/proc\/[0-9]+\/fd\/[0-9]+)(\/.*)?$/.exec(pstree);
        const dir = pinned && await readlink(pinned[1]).catch(() => undefined);
        const shown = dir?.startsWith("/") ? `${dir}${pinned![2] ?? ""}` : pstree;
        const unread = `criu's ${shown} cannot be read: ${messageOf(err)}`;
        throw new EngineError(unread, { log: log.shown });
      }
    } catch (err) {
      await copyFile(log.file, log.shown).catch(() => {});
      throw err;
    } finally {
      await stopWatching();
      await removeWorkDir(work);
    }
  }

  /**
   * Restores a tree, in a private work directory removed when the run ends; a failure's log is
   * kept beside it as `restore-<root>.log` (the last failed restore of that root's).
   */
  async restore(request: RestoreRequest): Promise<void> {
    const { criu, work, shown } = await this.#criu("restore", request);
    const log = { file: path.join(work, "restore.log"), shown };
    const pidfile = path.join(work, "root.pid");
    const stopWatching = watchBytes(residentOf(request.imagesDir), request.onBytes);
    try {
      await mkdir(path.join(work, "no-plugins"), { mode: 0o700 });
      await this.#run(criu, "restore", request.root, log, [
        ...["--libdir", path.join(work, "no-plugins"), "--images-dir", request.imagesDir],
        ...["--work-dir", work, "--pidfile", pidfile, "--restore-detached"],
        ...(request.leaveStopped ? ["--leave-stopped"] : []),
        ...(request.tcpEstablished ? ["--tcp-established"] : []),
      ], request);
      const root = Number((await readFile(pidfile, "utf8").catch(() => "")).trim());
      const as = `criu restored the tree of ${request.root} as ${root || "an unknown pid"}`;
      if (root !== request.root) throw new EngineError(as, { log: log.shown });
    } catch (err) {
      await rename(log.file, log.shown).catch(() => {});
      throw err;
    } finally {
      await stopWatching();
      await removeWorkDir(work);
    }
  }

  readonly ready = portsFree;
  readonly stop = (pids: readonly number[]) => Promise.try(signalEach, pids, "SIGSTOP");
  /** Ends `pids`; those a dump took with their TCP connections end these silently, as criu does. */
  readonly kill = (pids: readonly number[]) =>
    muteConnections(pids.filter((p) => this.#connected.delete(p)))
      .finally(() => signalEach(pids, "SIGKILL"));
  readonly wake = (pids: readonly number[]) => Promise.try(signalEach, pids, "SIGCONT");

  /** criu checked now (a few `lstat`s: each run) and a new work directory, unless `op` stopped. */
  async #criu(op: string, request: DumpRequest | RestoreRequest) {
    const found = await this.#find();
    if ("problem" in found) throw new EngineError(found.problem);
    const stopped = `the ${op} of the tree of ${request.root} was stopped before criu ran`;
    if (request.signal?.aborted) throw new EngineError(stopped);
    const work = await workDir(`${op}-`).catch((err) => {
      throw new EngineError(messageOf(err), { cause: err });
    });
    const shown = path.join(path.dirname(work), `${op}-${request.root}.log`); // a failed run's log
    return { criu: found.criu, work, shown };
  }

  /** Runs `criu op` on the tree of `root` with the options every run has; throws on a failure. */
  async #run(criu: Criu, op: string, root: number, log: Log, args: string[], bound: RunBound) {
    const every = ["--no-default-config", "--log-file", log.file, "-v4", "--shell-job"];
    const all = [op, ...every, "--file-locks", ...args, ...this.#o.extraArgs];
    const result = await runBounded(criu.path, all, criu.env, bound);
    if (result.ended) {
      const why = endedSentence(op, root, result.ended, bound);
      throw new EngineError(`${why} (log: ${log.shown})`, { log: log.shown });
    }
    if (result.code !== 0) {
      const why = `criu ${op} of the tree of ${root} failed (exit ${result.code})`;
      // criu's error lines from its log (or its stderr), the last few, and where the log is.
      const text = await readFile(log.file, "utf8").catch(() => result.stderr);
      // Not the open-file limit criu could not raise for itself (where it lacks CAP_SYS_RESOURCE,
      // as in a container): an Error it logs and goes on after, never why it failed.
      const found = text.split("\n")
        .filter((l) => /Error|FAILED|Can't/.test(l) && !/RLIMIT_NOFILE for self/.test(l));
      const picked = (found.length > 0 ? found : text.split("\n")).slice(-4)
        .map((l) => l.replace(/^\(\s*[0-9.]+\)\s*/, "").trim()).filter(Boolean);
      const errors = `${picked.join("; ") || "no output"} (log: ${log.shown})`;
      const hint = /Failed to lock TCP connection/.test(errors) ? ` ${TCP_LOCK_HINT}` : "";
      throw new EngineError(`${why}: ${errors}${hint}`, { log: log.shown });
    }
  }

  /** criu's real path, checked, and the environment it runs with; or why there is none. */
  async #find(): Promise<{ criu: Criu } | { problem: string }> {
    const named = this.#o.criuPath ?? this.#o.env[CRIU_ENV_VAR];
    const relative = `${CRIU_ENV_VAR} must be an absolute path, got ${JSON.stringify(named)}.`;
    if (named && !path.isAbsolute(named)) return { problem: relative };
    const dirs = [...(this.#o.env.PATH ?? "").split(":").filter(path.isAbsolute), ...SYSTEM_DIRS];
    // The first there as an executable file (following links); its trust is checked after.
    const files = named ? [named] : dirs.map((dir) => path.join(dir, "criu"));
    const isProgram = (f: string) => stat(f).then((st) => st.isFile() && (st.mode & 0o111) !== 0);
    const found = await Promise.all(files.map((f) => isProgram(f).catch(() => false)));
    const candidate = files[found.indexOf(true)];
    if (!candidate) {
      const nowhere = `not in PATH's directories nor in ${SYSTEM_DIRS.join(", ")}`;
      const install = `install criu ${CRIU_MIN_VERSION} or later (apt install criu)`;
      const none =
        `criu is not installed (${nowhere}): ${install}, or name it with ${CRIU_ENV_VAR}.`;
      return { problem: named ? `criu was not found at ${named}.` : none };
    }
    try {
      const real = await trustedProgram(candidate, "criu");
      const env: Record<string, string> = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" };
      const lib = this.#o.libraryDir ?? (this.#o.env[LIBRARY_ENV_VAR] || undefined);
      if (lib) env.LD_LIBRARY_PATH = await trustedLibraryDir(lib, "criu's library directory");
      return { criu: { path: real, env } };
    } catch (err) {
      return { problem: messageOf(err) };
    }
  }
}

/** Tells `onBytes` what `count` counts, where more than told: every 250 ms, and when stopped. */
function watchBytes(count: () => Promise<number>, onBytes: ((bytes: number) => void) | undefined) {
  let told = -1, under: Promise<void> | undefined; // a count under way: none begun beside it
  const measure = async () => {
    const total = await count().catch(() => told);
    if (total <= told) return; // a failed restore's ended processes, or a smaller count of criu's
    told = total;
    Promise.try(onBytes!, total).catch(() => {}); // a display that throws must not break criu's run
  };
  const tick = () => (under ??= measure().finally(() => (under = undefined)));
  const timer = onBytes && setInterval(tick, 250);
  return async () => {
    clearInterval(timer);
    await under;
    if (onBytes) await measure();
  };
}

/** The bytes of the files in `dir`: a dump's images so far. */
async function sizeOf(dir: string): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const st = await Promise.all(names.map((n) => lstat(path.join(dir, n)).catch(() => undefined)));
  return st.reduce((sum, s) => sum + (s?.isFile() ? s.size : 0), 0);
}

/** A count of the resident memory of a tree's processes as criu restores them: its pages back. */
function residentOf(dir: string): () => Promise<number> {
  let tree: Promise<DumpedProcess[]> | undefined; // pstree.img, read at the first count
  const paged = /^Rss(?:Anon|Shmem):\s*(\d+) kB/gm; // what pages images hold, not files mapped
  const kB = (s: Buffer) => [...`${s}`.matchAll(paged)].reduce((a, m) => a + Number(m[1]), 0);
  return async () => {
    tree ??= readFile(path.join(dir, "pstree.img")).then((b) => parsePstree(new Uint8Array(b)));
    const each = (await tree).map(({ pid }) => readFile(`/proc/${pid}/status`).then(kB, () => 0));
    return (await Promise.all(each)).reduce((a, b) => a + b, 0) * 1024; // 0 for one not made yet
  };
}
