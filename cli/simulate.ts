/**
 * The simulated machine of `cuda-checkpoint --simulate`: a {@link SimulatedDriver} kept in a state
 * file private to the user, so that the whole command line can be tried and scripted without a
 * GPU. Each call opens the machine (taking a lock, so that calls made at once take turns), acts,
 * saves it and closes it. Runtime-free: only `node:` modules that Deno and Bun both have.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { lstat, open, readFile, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import {
  loadSimulator,
  SimulatedDriver,
  SimulatorSnapshotError,
  snapshotSimulator,
  type SpawnOptions,
} from "../mock/mod.ts";
import {
  errorCode,
  errorText,
  myUid,
  octal,
  privateDirectory,
  writePrivately,
} from "../ffi/private.ts";

/** The file name of the state file in its directory, by default. */
export const SIMULATED_STATE_FILE = "simulated-machine.json";
/** How many GPUs a new simulated machine has unless told otherwise: two, so maps can be tried. */
export const SIMULATED_DEFAULT_GPUS = 2;

const RESET_HINT = "remove it or run `cuda-checkpoint --simulate reset`";
/** A lock whose holder cannot be checked counts as abandoned after this long. */
const STALE_LOCK_MS = 60_000;
/** A lock file without a pid in it (its writer died at once) is abandoned after this long. */
const EMPTY_LOCK_MS = 2_000;
const LOCK_POLL_MS = 20;

/**
 * A state file that cannot be used: another user's or readable by others, a symbolic link, not
 * JSON or not a simulated machine, or a lock held too long. The message is one sentence that
 * names the path, says what is wrong and how to fix it.
 */
export class SimulatedStateError extends Error {
  /** The file or directory at fault. */
  readonly path: string;

  /** An error about `path`; `options.cause` is the error underneath, if any. */
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SimulatedStateError";
    this.path = path;
  }
}

/** A simulated machine opened from its state file; see {@link openSimulatedMachine}. */
export interface SimulatedMachine extends AsyncDisposable {
  /** The simulated driver: pass it as `{ driver }`; `hostProcesses()` gives its listing. */
  readonly driver: SimulatedDriver;
  /** The state file's absolute path. */
  readonly path: string;
  /** True when this call made a new machine (no state file yet, `fresh`, or after `reset`). */
  readonly created: boolean;
  /** Starts a simulated CUDA process (see `SimulatedDriver.spawn`); returns its pid. */
  spawn(options?: SpawnOptions): number;
  /** The process with this pid (or thread id) exits; false if there is no such live process. */
  kill(pid: number): boolean;
  /**
   * Writes the machine to its state file: a temporary file (mode 0600) in the same directory,
   * then renamed over the state file, so that a reader sees the old machine or the new one. It
   * throws if a driver call is under way: save after the calls have finished.
   */
  save(): Promise<void>;
  /** Replaces the machine by a new one (no processes, the GPUs it was opened with) and saves it. */
  reset(): Promise<void>;
  /** Closes the driver and lets go of the lock, without saving. Idempotent. */
  close(): Promise<void>;
}

/** Options of {@link openSimulatedMachine}. */
export interface OpenSimulatedMachineOptions {
  /** The state file; by default {@link simulatedStatePath} of `env`. */
  path?: string;
  /**
   * The environment to read `CKPT_SIM_STATE`, `XDG_RUNTIME_DIR`, `TMPDIR`, `CKPT_SIM_CLOCK` and
   * `CKPT_SIM_SPEED` from; default the process's.
   */
  env?: Record<string, string | undefined>;
  /** How many simulated H200s a new machine has (1 to 1024); default 2. An existing one keeps its own. */
  gpus?: number;
  /**
   * Start a new machine whatever the state file holds, without reading it (what `--simulate
   * reset` needs, since a corrupt or foreign file cannot be opened). It is replaced on `save()`.
   */
  fresh?: boolean;
  /** How long to wait for another call that holds the lock, in ms. Default 15000. */
  lockTimeoutMs?: number;
  /**
   * How the machine keeps time: `"virtual"` (calls finish at once and report the simulated
   * durations) or `"real"` (each call takes as long as on the real driver, divided by `speed`).
   * Default: `$CKPT_SIM_CLOCK` of `env`, else virtual. Real time lets a script (or a test) send
   * Ctrl-C in the middle of an operation.
   */
  clock?: "virtual" | "real";
  /**
   * With the real clock, how many times faster than the real driver: a positive number (0.25
   * runs four times slower). Default: `$CKPT_SIM_SPEED` of `env`, else 1.
   */
  speed?: number;
}

/** The clock of a simulated machine, from the options or the environment. */
export interface SimulatedClock {
  /** `"virtual"` or `"real"`. */
  readonly clock: "virtual" | "real";
  /** With the real clock, how many times faster than the real driver. */
  readonly speed?: number;
}

/**
 * The clock `CKPT_SIM_CLOCK` (`virtual` or `real`) and `CKPT_SIM_SPEED` (a positive number, with
 * the real clock only) ask for; empty variables count as unset. Throws a RangeError that names
 * the variable and its bad value.
 *
 * @example
 * ```ts
 * simulatedClock({ CKPT_SIM_CLOCK: "real", CKPT_SIM_SPEED: "0.5" }); // { clock: "real", speed: 0.5 }
 * ```
 */
export function simulatedClock(
  env: Record<string, string | undefined> = process.env,
  options: { clock?: unknown; speed?: unknown } = {},
): SimulatedClock {
  const clock = options.clock ?? (env.CKPT_SIM_CLOCK || "virtual");
  if (clock !== "virtual" && clock !== "real") {
    const from = options.clock === undefined ? "CKPT_SIM_CLOCK" : "clock";
    throw new RangeError(`${from} must be "virtual" or "real", got ${JSON.stringify(clock)}`);
  }
  const from = options.speed === undefined ? "CKPT_SIM_SPEED" : "speed";
  const given = options.speed ?? (env.CKPT_SIM_SPEED || undefined);
  if (given === undefined) return { clock };
  const speed = typeof given === "string" && /^[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?$/i.test(given.trim())
    ? Number(given)
    : given;
  if (typeof speed !== "number" || !(speed > 0) || !Number.isFinite(speed)) {
    throw new RangeError(
      `${from} must be a positive number (how many times faster than the real driver), got ${
        JSON.stringify(given)
      }`,
    );
  }
  if (clock !== "real") {
    throw new RangeError(`${from} works with the real clock only: set CKPT_SIM_CLOCK=real`);
  }
  return { clock, speed };
}

/**
 * Where the simulated machine is kept: `$CKPT_SIM_STATE` if set, else
 * `$XDG_RUNTIME_DIR/ckpt-cuda/simulated-machine.json`, else
 * `<temp dir>/ckpt-cuda-<uid>/simulated-machine.json` (the temp dir being `$TMPDIR` or the
 * system's). Empty variables count as unset; a relative path is taken from the current directory.
 *
 * @example
 * ```ts
 * simulatedStatePath({ XDG_RUNTIME_DIR: "/run/user/1000" });
 * // "/run/user/1000/ckpt-cuda/simulated-machine.json"
 * ```
 */
export function simulatedStatePath(env: Record<string, string | undefined> = process.env): string {
  if (env.CKPT_SIM_STATE) return path.resolve(env.CKPT_SIM_STATE);
  if (env.XDG_RUNTIME_DIR) {
    return path.resolve(env.XDG_RUNTIME_DIR, "ckpt-cuda", SIMULATED_STATE_FILE);
  }
  const user = process.getuid?.() ?? os.userInfo().username;
  return path.resolve(env.TMPDIR || os.tmpdir(), `ckpt-cuda-${user}`, SIMULATED_STATE_FILE);
}

/**
 * Opens the simulated machine kept in its state file, or makes a new one where there is none
 * (two simulated H200s and no processes, by default). Its directory is created (mode 0700) where
 * missing. The machine is locked until {@link SimulatedMachine.close}: another open of the same
 * file waits for it (up to `lockTimeoutMs`), so calls made at once take turns. A lock left by a
 * program that died is taken over.
 *
 * It throws a {@link SimulatedStateError} that names the path and what to do when the file or its
 * directory belongs to another user or may be written by others, the file may be read by others,
 * is a symbolic link, is not JSON, or is not a simulated machine this version can read.
 *
 * The driver is on the virtual clock unless `clock` (or `$CKPT_SIM_CLOCK`) says `"real"`: calls
 * finish at once, and report the simulated durations (`driver.calls` has each call's `started`
 * and `at`, in simulated ms).
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { openSimulatedMachine } from "./cli/simulate.ts";
 *
 * await using machine = await openSimulatedMachine();
 * const pid = machine.spawn({ memoryMiB: 1024 });
 * await new CudaProcess(pid, { driver: machine.driver }).suspend();
 * await machine.save(); // the next call finds the process checkpointed
 * ```
 */
export async function openSimulatedMachine(
  options: OpenSimulatedMachineOptions = {},
): Promise<SimulatedMachine> {
  const file = path.resolve(options.path ?? simulatedStatePath(options.env));
  const gpus = options.gpus ?? SIMULATED_DEFAULT_GPUS;
  if (!Number.isInteger(gpus) || gpus < 1 || gpus > 1024) {
    throw new RangeError(`gpus must be an integer from 1 to 1024, got ${gpus}`);
  }
  const clock = simulatedClock(options.env, options);
  await privateStateDirectory(path.dirname(file));
  const unlock = await lock(file, options.lockTimeoutMs ?? 15_000);
  try {
    const saved = options.fresh ? undefined : await readMachine(file, clock);
    const driver = saved ?? new SimulatedDriver({ gpus, ...clock });
    return new Machine(file, driver, saved === undefined, gpus, unlock, clock);
  } catch (err) {
    await unlock();
    throw err;
  }
}

class Machine implements SimulatedMachine {
  readonly path: string;
  readonly #gpus: number;
  readonly #clock: SimulatedClock;
  #driver: SimulatedDriver;
  #created: boolean;
  #unlock: (() => Promise<void>) | undefined;

  constructor(
    file: string,
    driver: SimulatedDriver,
    created: boolean,
    gpus: number,
    unlock: () => Promise<void>,
    clock: SimulatedClock,
  ) {
    this.path = file;
    this.#clock = clock;
    this.#driver = driver;
    this.#created = created;
    this.#gpus = gpus;
    this.#unlock = unlock;
  }

  get driver(): SimulatedDriver {
    return this.#driver;
  }

  get created(): boolean {
    return this.#created;
  }

  spawn(options?: SpawnOptions): number {
    this.#check("spawn a process");
    return this.#driver.spawn(options).pid;
  }

  kill(pid: number): boolean {
    this.#check("kill a process");
    const proc = this.#driver.process(pid);
    proc?.exit();
    return proc !== undefined;
  }

  async save(): Promise<void> {
    this.#check("save it");
    const text = JSON.stringify(snapshotSimulator(this.#driver), null, 2) + "\n";
    await writePrivately(
      this.path,
      text,
      (at, message, cause) =>
        new SimulatedStateError(at, `the simulated machine's state file: ${message}`, { cause }),
    );
  }

  async reset(): Promise<void> {
    this.#check("reset it");
    this.#driver.close();
    this.#driver = new SimulatedDriver({ gpus: this.#gpus, ...this.#clock });
    this.#created = true;
    await rm(this.path, { force: true });
    await this.save();
  }

  async close(): Promise<void> {
    const unlock = this.#unlock;
    if (!unlock) return;
    this.#unlock = undefined;
    this.#driver.close();
    await unlock();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #check(what: string): void {
    if (!this.#unlock) {
      throw new Error(`the simulated machine ${this.path} was closed: cannot ${what}`);
    }
  }
}

// ---- the file and its directory ----

/** Makes `dir` (mode 0700) where missing; refuses one another user owns or others may write. */
function privateStateDirectory(dir: string): Promise<void> {
  return privateDirectory(dir, {
    refuse: (at, message, cause) => new SimulatedStateError(at, message, { cause }),
    hint: "name a state file elsewhere in CKPT_SIM_STATE",
  });
}

/** The machine in `file`, or `undefined` where there is no file. */
async function readMachine(
  file: string,
  clock: SimulatedClock,
): Promise<SimulatedDriver | undefined> {
  const refuse = (what: string, cause?: unknown) =>
    new SimulatedStateError(
      file,
      `the simulated machine's state file ${file} ${what}; ${RESET_HINT}`,
      { cause },
    );
  let st;
  try {
    st = await lstat(file);
  } catch (err) {
    if (errorCode(err) === "ENOENT") return undefined;
    throw refuse(`cannot be read (${errorText(err)})`, err);
  }
  if (st.isSymbolicLink()) throw refuse("is a symbolic link, not a file of its own");
  if (!st.isFile()) throw refuse("is not a regular file");
  const uid = myUid();
  if (uid !== undefined && st.uid !== uid) {
    throw refuse(`belongs to another user (uid ${st.uid}, you are ${uid})`);
  }
  if ((st.mode & 0o077) !== 0) {
    throw refuse(`may be read or written by other users (mode ${octal(st.mode)}, not 0600)`);
  }
  let data: unknown;
  try {
    data = JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    throw refuse(`is corrupt: it is not JSON (${errorText(err)})`, err);
  }
  try {
    return loadSimulator(data, clock);
  } catch (err) {
    if (!(err instanceof SimulatorSnapshotError)) throw err;
    const detail = err.message.replace(/^invalid simulated machine snapshot: /, "");
    if (err.field === "format" || err.field === "") {
      throw refuse(`is not a simulated machine's state file (${detail})`, err);
    }
    if (err.field === "version") {
      throw refuse(`was written by another version of @ckpt/cuda (${detail})`, err);
    }
    throw refuse(`is corrupt: ${detail}`, err);
  }
}

// ---- the lock ----

/**
 * Takes the lock of `file`: `file.lock`, made with O_EXCL and holding our pid. Waits while a live
 * program holds it; takes over one whose holder is gone. Two programs that find the same
 * abandoned lock at the same moment could both take it; for a simulator that rare race is
 * accepted. Returns the function that lets go.
 */
async function lock(file: string, timeoutMs: number): Promise<() => Promise<void>> {
  const lockFile = `${file}.lock`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const handle = await open(lockFile, "wx", 0o600);
      try {
        await handle.writeFile(`${process.pid}\n`);
      } finally {
        await handle.close();
      }
      return () => rm(lockFile, { force: true });
    } catch (err) {
      if (errorCode(err) !== "EEXIST") {
        throw new SimulatedStateError(
          lockFile,
          `cannot make the simulated machine's lock file ${lockFile}: ${errorText(err)}`,
          { cause: err },
        );
      }
    }
    const holder = await lockHolder(lockFile);
    if (holder === "gone") continue;
    if (holder === "abandoned") {
      await rm(lockFile, { force: true });
      continue;
    }
    if (Date.now() >= deadline) {
      throw new SimulatedStateError(
        lockFile,
        `another cuda-checkpoint --simulate call (pid ${holder}) has held ${lockFile} for over ${timeoutMs} ms; ` +
          `wait for it, or remove the lock file if no such call is running`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
  }
}

/** Who holds the lock: a pid (alive, or not known to be dead), or that it is gone or abandoned. */
async function lockHolder(lockFile: string): Promise<number | "gone" | "abandoned"> {
  let text: string, age: number;
  try {
    age = Date.now() - (await stat(lockFile)).mtimeMs;
    text = await readFile(lockFile, "utf8");
  } catch (err) {
    if (errorCode(err) === "ENOENT") return "gone";
    throw err;
  }
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) return age > EMPTY_LOCK_MS ? "abandoned" : 0;
  if (pid === process.pid) return pid;
  // /proc says whether the holder lives, where it can be read; else the lock's age has to do.
  if (existsSync("/proc/self")) return existsSync(`/proc/${pid}`) ? pid : "abandoned";
  return age > STALE_LOCK_MS ? "abandoned" : pid;
}
