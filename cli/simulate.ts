/**
 * The simulated machine of `cuda-checkpoint --simulate`: a `SimulatedMachine` kept in a state
 * file private to the user, so that the whole command line can be tried and scripted without a
 * GPU. Each call opens the machine (taking a lock, so that calls made at once take turns), acts,
 * saves it and closes it. Runtime-free: only `node:` modules that Deno and Bun both have.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { messageOf } from "../core/errors.ts";
import { SimulatedMachine, type SpawnOptions } from "../mock/mod.ts";
import { loadSimulator, SimulatorSnapshotError, snapshotSimulator } from "../mock/state_file.ts";
import { checkPrivate, errorCode, privateDirectory, writePrivately } from "../os/private.ts";

/** The file name of the state file in its directory, by default. */
export const SIMULATED_STATE_FILE = "simulated-machine.json";

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
export interface SavedMachine extends AsyncDisposable {
  /** The simulated machine: pass it as `{ machine }`. */
  readonly machine: SimulatedMachine;
  /** The state file's absolute path. */
  readonly path: string;
  /** True when this call made a new machine (no state file yet, `fresh`, or after `reset`). */
  readonly created: boolean;
  /** Starts a simulated CUDA process (see `SimulatedMachine.spawn`); returns its pid. */
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
  /** Closes the machine and lets go of the lock, without saving. Idempotent. */
  close(): Promise<void>;
}

/** Options of {@link openSimulatedMachine}. */
export interface OpenSimulatedMachineOptions {
  /** The state file; by default {@link simulatedStatePath} of `env`. */
  path?: string;
  /** For `CKPT_SIM_STATE`, `XDG_RUNTIME_DIR`, `TMPDIR` and `CKPT_SIM_*`; default the process's. */
  env?: Record<string, string | undefined>;
  /** How many simulated H200s a new machine has (1 to 1024); default 2. An existing one keeps its own. */
  gpus?: number;
  /** A new machine, without reading the state file (`--simulate reset`: it may be corrupt). */
  fresh?: boolean;
  /** How long to wait for another call that holds the lock, in ms. Default 15000. */
  lockTimeoutMs?: number;
}

/** The clock of a simulated machine, from the options or the environment. */
type SimulatedClock = { readonly clock: "virtual" | "real"; readonly speed?: number };

/**
 * The clock `CKPT_SIM_CLOCK` asks for: `virtual` (calls finish at once and report the simulated
 * durations) or `real` (each takes as long as on the real driver, divided by `CKPT_SIM_SPEED`, a
 * positive number: a script or test can send Ctrl-C meanwhile). Empty variables count as unset.
 * Throws a RangeError that names the variable and its bad value.
 */
export function simulatedClock(
  env: Record<string, string | undefined> = process.env,
): SimulatedClock {
  const clock = env.CKPT_SIM_CLOCK || "virtual";
  if (clock !== "virtual" && clock !== "real") {
    throw new RangeError(
      `CKPT_SIM_CLOCK must be "virtual" or "real", got ${JSON.stringify(clock)}`,
    );
  }
  const given = env.CKPT_SIM_SPEED;
  if (!given) return { clock };
  const speed = /^[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?$/i.test(given.trim()) ? Number(given) : NaN;
  if (!(speed > 0) || !Number.isFinite(speed)) {
    throw new RangeError(
      "CKPT_SIM_SPEED must be a positive number (how many times faster than the real driver), " +
        `got ${JSON.stringify(given)}`,
    );
  }
  if (clock !== "real") {
    throw new RangeError("CKPT_SIM_SPEED works with the real clock only: set CKPT_SIM_CLOCK=real");
  }
  return { clock, speed };
}

/**
 * Where the simulated machine is kept: `$CKPT_SIM_STATE` if set, else
 * `$XDG_RUNTIME_DIR/ckpt-cuda/simulated-machine.json`, else
 * `<temp dir>/ckpt-cuda-<uid>/simulated-machine.json` (the temp dir being `$TMPDIR` or the
 * system's). Empty variables count as unset; a relative path is taken from the current directory.
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
 * (two simulated H200s and no processes, by default), creating its directory (mode 0700) where
 * missing. The machine is locked until it is closed: another open of the same file waits for it
 * (up to `lockTimeoutMs`), so calls made at once take turns; a lock left by a program that died is
 * taken over.
 *
 * It throws a {@link SimulatedStateError} that names the path and what to do when the file or its
 * directory belongs to another user or may be written by others, the file may be read by others,
 * is a symbolic link, is not JSON, or is not a simulated machine this version can read.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 *
 * await using machine = await openSimulatedMachine();
 * const pid = machine.spawn({ memoryMiB: 1024 });
 * await new CudaProcess(pid, { machine: machine.machine }).suspend();
 * await machine.save(); // the next call finds the process checkpointed
 * ```
 */
export async function openSimulatedMachine(
  options: OpenSimulatedMachineOptions = {},
): Promise<SavedMachine> {
  const file = path.resolve(options.path ?? simulatedStatePath(options.env));
  const gpus = options.gpus ?? 2; // two, so that maps can be tried
  if (!Number.isInteger(gpus) || gpus < 1 || gpus > 1024) {
    throw new RangeError(`gpus must be an integer from 1 to 1024, got ${gpus}`);
  }
  const clock = simulatedClock(options.env);
  // Made (mode 0700) where missing; refused where another user owns it or others may write it.
  await privateDirectory(path.dirname(file), {
    sticky: true,
    refuse: (at, message, cause) => new SimulatedStateError(at, message, { cause }),
    hint: "name a state file elsewhere in CKPT_SIM_STATE",
  });
  const unlock = await lock(file, options.lockTimeoutMs ?? 15_000);
  let machine: SimulatedMachine, created: boolean;
  try {
    const saved = options.fresh ? undefined : await readMachine(file, clock);
    created = saved === undefined;
    machine = saved ?? new SimulatedMachine({ gpus, ...clock });
  } catch (err) {
    await unlock();
    throw err;
  }
  let open = true;
  const check = (what: string) => {
    if (!open) throw new Error(`the simulated machine ${file} was closed: cannot ${what}`);
  };
  const opened: SavedMachine = {
    path: file,
    get machine() {
      return machine;
    },
    get created() {
      return created;
    },
    spawn(spawnOptions) {
      check("spawn a process");
      return machine.spawn(spawnOptions).pid;
    },
    kill(pid) {
      check("kill a process");
      const proc = machine.process(pid);
      proc?.exit();
      return proc !== undefined;
    },
    async save() {
      check("save it");
      await writePrivately(
        file,
        JSON.stringify(snapshotSimulator(machine), null, 2) + "\n",
        (at, message, cause) =>
          new SimulatedStateError(at, `the simulated machine's state file: ${message}`, { cause }),
      );
    },
    async reset() {
      check("reset it");
      machine.close();
      machine = new SimulatedMachine({ gpus, ...clock });
      created = true;
      await rm(file, { force: true });
      await opened.save();
    },
    async close() {
      if (!open) return;
      open = false;
      machine.close();
      await unlock();
    },
    [Symbol.asyncDispose]: () => opened.close(),
  };
  return opened;
}

/** The machine in `file`, or `undefined` where there is no file. */
async function readMachine(
  file: string,
  clock: SimulatedClock,
): Promise<SimulatedMachine | undefined> {
  const refuse = (what: string, cause?: unknown) =>
    new SimulatedStateError(
      file,
      `the simulated machine's state file ${file} ${what}; remove it or run ` +
        "`cuda-checkpoint --simulate reset`",
      { cause },
    );
  const found = await checkPrivate(file, "file", {
    strict: true,
    refuse: (_at, message, cause) => refuse(message.replace(`${file} `, ""), cause),
  });
  if (!found) return undefined;
  let data: unknown;
  try {
    data = JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    throw refuse(`is corrupt: it is not JSON (${messageOf(err)})`, err);
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
      await writeFile(lockFile, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
      return () => rm(lockFile, { force: true });
    } catch (err) {
      if (errorCode(err) !== "EEXIST") {
        throw new SimulatedStateError(
          lockFile,
          `cannot make the simulated machine's lock file ${lockFile}: ${messageOf(err)}`,
          { cause: err },
        );
      }
    }
    const holder = await lockHolder(lockFile);
    if (holder === "abandoned") await rm(lockFile, { force: true });
    if (typeof holder !== "number") continue; // gone, or taken over: try again
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
