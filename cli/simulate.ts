/**
 * The simulated machine of `cuda-checkpoint --simulate`: a `SimulatedMachine` kept in a state file
 * private to the user, so that the command line can be tried and scripted without a GPU. Each call
 * opens it (taking a lock: calls made at once take turns), acts, saves and closes it. Runtime-free.
 *
 * @module
 */

import { constants, existsSync } from "node:fs";
import { open, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { messageOf } from "../core/errors.ts";
import { SimulatedMachine, type SpawnOptions } from "../mock/mod.ts";
import { loadSimulator, SIMULATOR_SNAPSHOT_FORMAT } from "../mock/state_file.ts";
import { SimulatorSnapshotError, snapshotSimulator } from "../mock/state_file.ts";
import { checkPrivate, errorCode, pathTrouble, privateDirectory } from "../os/private.ts";
import { readSmallFile, type Refuse, writePrivately } from "../os/private.ts";

/** The file name of the state file in its directory, by default. */
export const SIMULATED_STATE_FILE = "simulated-machine.json";

/**
 * A state file that cannot be used: another user's or readable by others, a symbolic link, not
 * JSON or not a simulated machine, or a lock held too long; the message names the path, what is
 * wrong and what to do.
 */
export class SimulatedStateError extends Error {
  /** An error of `path`, the file or directory at fault. */
  constructor(readonly path: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SimulatedStateError";
  }
}

/**
 * A simulated machine opened from its state file (see {@link openSimulatedMachine}): the machine,
 * the file's absolute path, and whether this call made a new machine (no file yet, `fresh`, or
 * `reset`); `spawn` starts a simulated CUDA process and gives its pid, `kill` ends one (false where
 * none lives); `save` writes the machine to its file (a private temporary file renamed over it, so
 * that a reader sees the old machine or the new one; not while a driver call is under way);
 * `reset` replaces the machine by a new one (saved by `save`); `close` lets go of the lock, unsaved.
 */
export interface SavedMachine extends AsyncDisposable {
  readonly machine: SimulatedMachine;
  readonly path: string;
  readonly created: boolean;
  spawn(options?: SpawnOptions): number;
  kill(pid: number): boolean;
  save(): Promise<void>;
  reset(): void;
  close(): Promise<void>;
}

/**
 * Options of {@link openSimulatedMachine}: the state file (default: {@link simulatedStatePath} of
 * `env`, the process's environment by default), how many simulated H200s a new machine has (1 to
 * 1024, default 2), `fresh` (a new machine over a state file of ours: `--simulate reset`), how
 * long to wait for another call that holds the lock (default 15 000 ms).
 */
export interface OpenSimulatedMachineOptions {
  path?: string;
  env?: Env;
  gpus?: number;
  fresh?: boolean;
  lockTimeoutMs?: number;
}

type Env = Record<string, string | undefined>;
/** The clock of a simulated machine, from the options or the environment. */
type SimulatedClock = { readonly clock: "virtual" | "real"; readonly speed?: number };

/**
 * The clock `CKPT_SIM_CLOCK` asks for: `virtual` (calls finish at once, reporting the simulated
 * times) or `real` (as long as on the real driver, divided by `CKPT_SIM_SPEED`). Empty variables
 * count as unset; a bad value is a RangeError that names it.
 */
export function simulatedClock(env: Env = process.env): SimulatedClock {
  const clock = env.CKPT_SIM_CLOCK || "virtual";
  const badClock = `CKPT_SIM_CLOCK must be "virtual" or "real", got ${JSON.stringify(clock)}`;
  if (clock !== "virtual" && clock !== "real") throw new RangeError(badClock);
  const given = env.CKPT_SIM_SPEED;
  if (!given) return { clock };
  const speed = /^[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?$/i.test(given.trim()) ? Number(given) : NaN;
  const faster = "a positive number (how many times faster than the real driver)";
  const badSpeed = `CKPT_SIM_SPEED must be ${faster}, got ${JSON.stringify(given)}`;
  if (!(speed > 0) || !Number.isFinite(speed)) throw new RangeError(badSpeed);
  const realOnly = "CKPT_SIM_SPEED works with the real clock only: set CKPT_SIM_CLOCK=real";
  if (clock !== "real") throw new RangeError(realOnly);
  return { clock, speed };
}

/**
 * Where the simulated machine is kept: `$CKPT_SIM_STATE`, else `$XDG_RUNTIME_DIR/ckpt-cuda/`, else
 * `<$TMPDIR or the system's>/ckpt-cuda-<uid>/`, then {@link SIMULATED_STATE_FILE}. Empty variables
 * count as unset.
 */
export function simulatedStatePath(env: Env = process.env): string {
  if (env.CKPT_SIM_STATE) return path.resolve(env.CKPT_SIM_STATE);
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime) return path.resolve(runtime, "ckpt-cuda", SIMULATED_STATE_FILE);
  const user = process.getuid?.() ?? os.userInfo().username;
  return path.resolve(env.TMPDIR || os.tmpdir(), `ckpt-cuda-${user}`, SIMULATED_STATE_FILE);
}

/**
 * Opens the simulated machine kept in its state file, or makes a new one (its directory made, mode
 * 0700), locked until it is closed: another open of the same file waits for it, and a lock left by
 * a program that died is taken over. Throws a {@link SimulatedStateError} for a file (or directory)
 * it cannot trust or read. What a command did is kept for the next once it is saved.
 */
export async function openSimulatedMachine(
  options: OpenSimulatedMachineOptions = {},
): Promise<SavedMachine> {
  const file = path.resolve(options.path ?? simulatedStatePath(options.env));
  const gpus = options.gpus ?? 2;
  const range = `gpus must be an integer from 1 to 1024, got ${gpus}`;
  if (!Number.isInteger(gpus) || gpus < 1 || gpus > 1024) throw new RangeError(range);
  const clock = simulatedClock(options.env);
  const toError: Refuse = (at, message, cause) => new SimulatedStateError(at, message, { cause });
  const hint = "name a state file elsewhere in CKPT_SIM_STATE";
  await privateDirectory(path.dirname(file), { sticky: true, refuse: toError, hint });
  const unlock = await lock(file, options.lockTimeoutMs ?? 15_000);
  const saved = await readMachine(file, clock, options.fresh === true).catch(async (err) => {
    await unlock();
    throw err;
  });
  const fresh = () => new SimulatedMachine({ gpus, ...clock });
  let open = true;
  const check = (what: string) => {
    if (!open) throw new Error(`the simulated machine ${file} was closed: cannot ${what}`);
  };
  const opened = {
    path: file,
    machine: saved ?? fresh(),
    created: saved === undefined,
    spawn(spawnOptions?: SpawnOptions) {
      check("spawn a process");
      return opened.machine.spawn(spawnOptions).pid;
    },
    kill(pid: number) {
      check("kill a process");
      const proc = opened.machine.process(pid);
      proc?.exit();
      return proc !== undefined;
    },
    async save() {
      check("save it");
      const text = JSON.stringify(snapshotSimulator(opened.machine), null, 2) + "\n";
      const refuse: Refuse = (at, message, cause) =>
        new SimulatedStateError(at, `the simulated machine's state file: ${message}`, { cause });
      await writePrivately(file, text, refuse);
    },
    reset() {
      check("reset it");
      opened.machine.close();
      [opened.machine, opened.created] = [fresh(), true];
    },
    async close() {
      if (!open) return;
      open = false;
      opened.machine.close();
      await unlock();
    },
    [Symbol.asyncDispose]: () => opened.close(),
  };
  return opened;
}

/**
 * The machine in `file`; `undefined` where there is none (or an empty file), or where `fresh` and it
 * is one of ours (it begins as one: cut short, corrupt, of another version); never another kind.
 */
async function readMachine(file: string, clock: SimulatedClock, fresh: boolean) {
  const at = `the simulated machine's state file ${file}`;
  const refuse = (what: string, cause?: unknown, hint = "run `cuda-checkpoint --simulate reset`") =>
    new SimulatedStateError(file, `${at} ${what}; remove it or ${hint}`, { cause });
  const other = "name another in CKPT_SIM_STATE";
  const foreign = (detail: string, cause?: unknown) =>
    refuse(`is not a simulated machine's state file (${detail})`, cause, other);
  const ours = (text: string) => text.slice(0, 256).includes(`"${SIMULATOR_SNAPSHOT_FORMAT}"`);
  if (fresh) {
    const head = await headOf(file).catch((err) => {
      throw refuse(`cannot be read: ${pathTrouble(err)}`, err, other);
    });
    if (!head || ours(head)) return undefined;
    throw foreign("it does not begin as one");
  }
  const found = await checkPrivate(file, "file", {
    strict: true,
    refuse: (_at, message, cause) => refuse(message.replace(`${file} `, ""), cause, other),
  });
  const text = found ? await readFile(file, "utf8") : "";
  if (text === "") return undefined; // none yet, or an empty one made for it (mktemp)
  const data: unknown = await Promise.try(() => JSON.parse(text)).catch((err: unknown) => {
    // Ours begin with their format, even where cut short.
    if (!ours(text)) throw foreign("not JSON", err);
    throw refuse(`is corrupt: it is not JSON (${messageOf(err)})`, err);
  });
  return await Promise.try(() => loadSimulator(data, clock)).catch((err: unknown) => {
    if (!(err instanceof SimulatorSnapshotError)) throw err;
    const detail = err.message.replace(/^invalid simulated machine snapshot: /, "");
    if (err.field === "format" || err.field === "") throw foreign(detail, err);
    const newer = `was written by another version of @ckpt/cuda (${detail})`;
    if (err.field === "version") throw refuse(newer, err);
    throw refuse(`is corrupt: ${detail}`, err);
  });
}

/** The first 256 bytes of `file`, a link not followed; `undefined` where there is none. */
async function headOf(file: string): Promise<string | undefined> {
  const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = constants;
  const handle = await open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK).catch((err) => {
    if (errorCode(err) !== "ENOENT") throw err;
  });
  if (!handle) return undefined;
  const read = await handle.read(new Uint8Array(256), 0, 256, 0).finally(() => handle.close());
  return new TextDecoder().decode(read.buffer.subarray(0, read.bytesRead));
}

/**
 * Takes the lock of `file` (`file.lock`, made with O_EXCL, holding our pid), waiting while a live
 * program holds it, taking over one whose holder is gone (two programs could both take the same
 * abandoned lock: a race a simulator accepts); resolves to the function that lets go.
 */
async function lock(file: string, timeoutMs: number): Promise<() => Promise<void>> {
  const lockFile = `${file}.lock`, deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await writeFile(lockFile, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
      return () => rm(lockFile, { force: true });
    } catch (err) {
      const why = `cannot make the simulated machine's lock file ${lockFile}: ${messageOf(err)}`;
      if (errorCode(err) !== "EEXIST") throw new SimulatedStateError(lockFile, why, { cause: err });
    }
    const holder = await lockHolder(lockFile);
    if (holder === "abandoned") await rm(lockFile, { force: true });
    if (typeof holder !== "number") continue; // gone, or taken over: try again
    // Calls that take turns may each hold it briefly: the wait is said, and who holds it now.
    const now = holder > 0 ? ` (held now by pid ${holder}, another --simulate call)` : "";
    const wait = "wait for it, or remove the lock file if no such call is running";
    const late = `waited over ${timeoutMs} ms for ${lockFile}${now}; ${wait}`;
    if (Date.now() >= deadline) throw new SimulatedStateError(lockFile, late);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Who holds the lock: a pid (alive, or not known to be dead), or that it is gone or abandoned (no
 * pid in it for 2 s, its holder gone from /proc, or, without /proc, a minute old).
 */
async function lockHolder(lockFile: string): Promise<number | "gone" | "abandoned"> {
  const read = () => readSmallFile(lockFile, `the lock ${lockFile}`, 64); // no link, FIFO, 2 GiB
  let text: string, age: number;
  try {
    text = await read() ?? ""; // before its age: a newer file can only look younger
    age = Date.now() - (await stat(lockFile)).mtimeMs;
  } catch (err) {
    if (errorCode(err) === "ENOENT") return "gone";
    throw err;
  }
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) return age > 2_000 ? "abandoned" : 0;
  if (pid === process.pid) return pid;
  const dead = existsSync("/proc/self") ? !existsSync(`/proc/${pid}`) : age > 60_000;
  if (!dead) return pid;
  // Its holder may have let go meanwhile, and another taken it: that lock is no one's to remove.
  return (await read().catch(() => "")) === text ? "abandoned" : "gone";
}
