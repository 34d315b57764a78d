/**
 * What the main module installs so that core/ itself loads no runtime's FFI and reads no files:
 * the opener of the driver used when none is given or set (the native driver), and the opener
 * of the host used when neither the caller nor the driver gives one (the Linux host: `/proc`,
 * NVML and the records of held GPU memory). The command line installs the same, or what it was
 * given. Nothing here imports more than types, so the command line's quickest path pays nothing
 * for it.
 *
 * @module
 */

import type { CheckpointDriver } from "./driver.ts";
import type { SnapshotEngine, SnapshotStore } from "./engine.ts";
import type { ClosableHost, HostProcesses } from "./host.ts";

let fallbackDriver: (() => Promise<CheckpointDriver>) | undefined;

/**
 * Installs the opener used when no default driver was set. `mod.ts` installs the native driver's
 * opener.
 */
export function setFallbackDriverOpener(opener: () => Promise<CheckpointDriver>): void {
  fallbackDriver = opener;
}

/** The opener installed with {@link setFallbackDriverOpener}, if any. */
export function fallbackDriverOpener(): (() => Promise<CheckpointDriver>) | undefined {
  return fallbackDriver;
}

let fallbackHost: HostOpener | undefined;

/** What opens the host where neither the caller nor the driver gives one. */
export type HostOpener = () => ClosableHost | Promise<ClosableHost>;

/**
 * Installs the host used where neither the caller nor the driver gives one, and returns the one
 * it replaces. The main module installs the Linux host (`/proc`, NVML and the records), so that
 * core/ itself reads no files; the command line installs the same, or the host given to it.
 */
export function setFallbackHostOpener(opener: HostOpener | undefined): HostOpener | undefined {
  const before = fallbackHost;
  fallbackHost = opener;
  return before;
}

/**
 * The host for a driver: its own (the simulator's), else a new one from the fallback opener,
 * which the caller closes (`opened`); `undefined` where there is neither.
 */
export async function openHostFor(
  driver: CheckpointDriver,
): Promise<{ host: HostProcesses; opened?: ClosableHost } | undefined> {
  const own = driver.hostProcesses?.();
  if (own) return { host: own };
  if (!fallbackHost) return undefined;
  const opened = await fallbackHost();
  return { host: opened, opened };
}

let fallbackEngine: (() => SnapshotEngine) | undefined;
let fallbackStore: SnapshotStore | undefined;

/**
 * Installs what snapshots use where neither the caller nor the driver gives an engine or a
 * store: the `@ckpt/cuda/snapshot` module installs the installed `criu` and the file system.
 */
export function setFallbackSnapshotParts(
  engine: (() => SnapshotEngine) | undefined,
  store: SnapshotStore | undefined,
): void {
  fallbackEngine = engine;
  fallbackStore = store;
}

/** The engine opener and the store installed with {@link setFallbackSnapshotParts}. */
export function fallbackSnapshotParts(): {
  engine?: () => SnapshotEngine;
  store?: SnapshotStore;
} {
  return {
    ...(fallbackEngine ? { engine: fallbackEngine } : {}),
    ...(fallbackStore ? { store: fallbackStore } : {}),
  };
}
