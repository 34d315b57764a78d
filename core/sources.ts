/**
 * Where a {@link CudaProcess} gets its driver, and who closes it.
 *
 * A driver given as an object belongs to whoever made it: nothing here closes it. A driver given
 * as a function that opens one is opened once and shared by everyone who uses the same function
 * (every `CudaProcess` given it, and the default driver); it is closed when the last of them lets
 * go. So twenty processes given `openNativeDriver` share one library and one worker pool, and a
 * program that closes its processes leaves nothing open.
 *
 * @module
 */

import type { CheckpointDriver } from "./driver.ts";
import { fallbackDriverOpener } from "./defaults.ts";
import { Session } from "./session.ts";
import { describeValue } from "./uuid.ts";

/** A driver, or a function that opens one on first use (and is closed by this package). */
export type DriverSource = CheckpointDriver | (() => Promise<CheckpointDriver>);

/** A use of a driver: its session (the driver, opened on first use), and the way to let go. */
export interface DriverLease {
  /** The session of the driver, opened on first use. */
  readonly session: Promise<Session>;
  /**
   * Lets go; the last lease of a driver closes its session, and a driver opened from a function
   * too. Idempotent.
   */
  release(): Promise<void>;
}

interface Shared {
  session: Promise<Session>;
  users: number;
}

/** The sessions of drivers opened from functions, by function. */
const opened = new Map<() => Promise<CheckpointDriver>, Shared>();
/** The sessions of drivers given as objects, by driver: their owner closes the driver. */
const given = new WeakMap<CheckpointDriver, Shared>();

/**
 * Takes a lease on a source: opens it (once per function, shared) if it is a function, and the
 * session of the driver (one per driver, shared by every lease on it).
 */
export function lease(source: DriverSource): DriverLease {
  let entry: Shared;
  if (typeof source !== "function") {
    let found = given.get(source);
    if (!found) {
      given.set(source, found = { session: Promise.resolve(new Session(source)), users: 0 });
    }
    entry = found;
  } else {
    let found = opened.get(source);
    if (!found) {
      const opening = (async () => new Session(await source()))();
      const created: Shared = { session: opening, users: 0 };
      opened.set(source, created);
      // A failed open is not kept: the cause (a path, a permission) may be fixed and tried again.
      opening.catch(() => {
        if (opened.get(source) === created) opened.delete(source);
      });
      found = created;
    }
    entry = found;
  }
  entry.users++;
  const held = entry;
  let released = false;
  return {
    session: held.session,
    async release() {
      if (released) return;
      released = true;
      held.users--;
      if (held.users > 0) return;
      let session: Session;
      try {
        session = await held.session;
      } catch {
        return; // it never opened: nothing to close
      }
      if (typeof source !== "function") {
        if (given.get(source) === held) given.delete(source);
        await session.close();
        return;
      }
      if (opened.get(source) === held) opened.delete(source);
      await session.close();
      // Resolves when the driver has really let go (its threads ended), where it can say so.
      const driver = session.driver;
      const dispose = driver[Symbol.asyncDispose];
      if (dispose) await dispose.call(driver);
      else driver.close?.();
    },
  };
}

/** How many drivers opened from functions are open now (for tests). */
export function openSharedDrivers(): number {
  return opened.size;
}

let defaultSource: DriverSource | undefined;
let defaultLease: DriverLease | undefined;

/**
 * Sets the driver that {@link CudaProcess} uses when none is given: for example a
 * `SimulatedDriver` in tests, so that code which says `new CudaProcess(pid)` runs without a GPU.
 * `undefined` goes back to the native driver for the runtime (opened on first use).
 *
 * A default driver this package opened (from a function) is closed once nothing uses it any more:
 * processes already using it keep it until they are closed.
 *
 * @example
 * ```ts
 * import { CudaProcess, setDefaultDriver } from "@ckpt/cuda";
 * import { SimulatedDriver } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedDriver();
 * setDefaultDriver(sim);
 * const target = sim.spawn();
 * console.log(await new CudaProcess(target.pid).state()); // "running"
 * setDefaultDriver(undefined);
 * ```
 */
export function setDefaultDriver(driver: DriverSource | undefined): void {
  if (driver !== undefined) checkSource(driver, "setDefaultDriver's argument");
  const old = defaultLease;
  defaultLease = undefined;
  defaultSource = driver;
  // A driver that fails to close has nothing left to tell this caller.
  old?.release().catch(() => {});
}

/**
 * The driver {@link CudaProcess} uses when none is given: the one set with
 * {@link setDefaultDriver}, else the native driver (libcuda), opened once on first use.
 *
 * The driver is lent, not given: one this package opened stays open while it is the default or a
 * `CudaProcess` uses it, and is closed once {@link setDefaultDriver} has replaced it and no
 * process uses it. To keep a driver for longer, open your own (`openNativeDriver()`) and pass it
 * as `{ driver }`.
 */
export function getDefaultDriver(): Promise<CheckpointDriver> {
  if (!defaultLease) {
    const taken = lease(currentDefaultSource());
    defaultLease = taken;
    // Not kept when it fails, so the next call tries again.
    taken.session.catch(() => {
      if (defaultLease === taken) defaultLease = undefined;
    });
  }
  return defaultLease.session.then((s) => s.driver);
}

/** The source of the default driver now: the one set, else the runtime's native opener. */
export function currentDefaultSource(): DriverSource {
  return defaultSource ?? fallbackDriverOpener() ?? noDefault;
}

function noDefault(): Promise<CheckpointDriver> {
  return Promise.reject(
    new Error(
      "No driver: pass { driver } (a SimulatedDriver from @ckpt/cuda/mock, or openNativeDriver), " +
        "call setDefaultDriver, or import CudaProcess from @ckpt/cuda's main module, which " +
        "makes the native driver the default",
    ),
  );
}

/** Checks that a value is a driver or a function; throws a TypeError naming what it got. */
export function checkSource(source: unknown, what: string): asserts source is DriverSource {
  if (typeof source === "function") return;
  if (
    typeof source === "object" && source !== null &&
    typeof (source as CheckpointDriver).getState === "function" &&
    typeof (source as CheckpointDriver).lock === "function"
  ) return;
  throw new TypeError(
    `${what} must be a CheckpointDriver (such as a SimulatedDriver, or what openNativeDriver ` +
      `resolves to) or a function that opens one, got ${describeValue(source)}`,
  );
}
