// The Bun adapter: `bun:ffi`, with no optional symbols (each optional function is probed with a
// `dlopen` of its own) and synchronous calls (one that can wait runs in a worker, `bun_pool.ts`,
// unless `callingThread`). The C library is opened as libc.so.6, which the loader finds loaded.

import process from "node:process";
import type { FfiAdapter, FfiLibrary, FfiTable, NativeCall } from "./adapter.ts";
import { linkPointers } from "./adapter.ts";
import { orElse } from "../core/options.ts";
import { WorkerPool } from "./bun_pool.ts";
import { workerScript } from "../os/worker_script.ts";
import { type BunFfi, type BunLibrary, importBunFfi } from "./bun_types.ts";
import { bunDefinition } from "./symbols.ts";

/** Options of {@link bunAdapter}. */
export interface BunAdapterOptions {
  /** The script workers run: `bun_worker.ts` (or `.js` once transpiled) next to this module. */
  workerUrl?: URL;
  /** Make every call on the calling thread, starting no worker (`NativeDriverOptions`). */
  callingThread?: boolean;
}

/** The worker script `bun_worker` beside this module ({@link workerScript}). */
export function defaultWorkerUrl(moduleUrl: string = import.meta.url): URL {
  return workerScript(moduleUrl, "ffi", "bun_worker");
}

/** Opens a library: every function in one `dlopen`, or the required ones and each optional alone. */
function openLibrary<N extends string>(
  ffi: BunFfi,
  path: string,
  table: FfiTable<N>,
  workerUrl: URL,
  callingThread: boolean,
): FfiLibrary<N> {
  const names = Object.keys(table) as N[], required = names.filter((name) => !table[name].optional);
  const define = (list: readonly N[]) =>
    Object.fromEntries(list.map((name) => [name, bunDefinition(table[name])]));
  // All in one `dlopen` where the library has them all (a third of the time of one each).
  const all = orElse(() => ffi.dlopen(path, define(names)), undefined);
  const first = all ?? ffi.dlopen(path, define(required));
  const bound = new Map<N, BunLibrary>((all ? names : required).map((name) => [name, first]));
  for (const name of names.filter((name) => !bound.has(name))) {
    // Absent (a driver older than the function): the native driver answers for it.
    const lib = orElse(() => ffi.dlopen(path, define([name])), undefined);
    if (lib) bound.set(name, lib);
  }
  let pool: WorkerPool | undefined;
  const callHere = (call: NativeCall<N>) => {
    linkPointers(call, (buf) => BigInt(ffi.ptr(buf)));
    return bound.get(call.symbol)!.symbols[call.symbol](...call.args);
  };
  return {
    present: new Set(bound.keys()),
    call: callHere,
    async callOffThread(call: NativeCall<N>) {
      if (!bound.has(call.symbol)) throw new TypeError(`${call.symbol} is not in ${path}`);
      if (callingThread) return Number(callHere(call));
      pool ??= new WorkerPool(workerUrl);
      const { symbol, args, links = [] } = call, definition = bunDefinition(table[symbol]);
      const result = await pool.run({ path, symbol, definition, args, links });
      args.forEach((arg, i) => {
        const copy = result.buffers[i];
        if (arg instanceof Uint8Array && copy) arg.set(copy);
      });
      return result.code;
    },
    threadCount: () => pool?.size ?? 0,
    async close() {
      for (const lib of new Set([first, ...bound.values()])) lib.close();
      await pool?.close();
    },
  };
}

/** The adapter for Bun. */
export async function bunAdapter(options: BunAdapterOptions = {}): Promise<FfiAdapter> {
  const ffi = await importBunFfi();
  const workerUrl = options.workerUrl ?? defaultWorkerUrl();
  const callingThread = options.callingThread === true;
  return {
    kind: "native (Bun)",
    platform: process.platform,
    bareNamesSafe: false,
    getEnv: (name) => process.env[name],
    cwd: () => process.cwd(),
    open: (path, table) => openLibrary(ffi, path, table, workerUrl, callingThread),
    cString: (address) => new ffi.CString(Number(address)).toString(),
    readPointer: (address) => ffi.read.u64(Number(address), 0),
  };
}
