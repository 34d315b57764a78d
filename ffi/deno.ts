// The Deno adapter of the native bindings: `Deno.dlopen`, whose `nonblocking` symbols run each
// call on a thread of Deno's and return a Promise. Needs `--allow-ffi` (and
// `--allow-env=CKPT_LIBCUDA_PATH` for the variable to count).

import { type FfiAdapter, type FfiLibrary, type FfiTable, linkPointers } from "./adapter.ts";
import { CUDA_SYMBOLS } from "./symbols.ts";

/** Deno's namespace as Deno types it; `any` for tsc on the Bun path, which lacks Deno's types. */
// deno-lint-ignore no-explicit-any
type DenoApi = typeof globalThis extends { Deno: infer D } ? D : any;
const Deno: DenoApi = (globalThis as unknown as { Deno: DenoApi }).Deno;
type DenoSymbols = Parameters<DenoApi["dlopen"]>[1];

CUDA_SYMBOLS satisfies DenoSymbols; // the table checked against Deno's own FFI types

/**
 * Opens a library with the table's functions. Which optional ones exist is asked again with
 * synchronous optional symbols: Deno 2.9.6 gives a missing symbol that is both `optional` and
 * `nonblocking` as a function that throws "Invalid FFI symbol name" when called, not as `null`.
 */
function openLibrary<N extends string>(path: string, table: FfiTable<N>): FfiLibrary<N> {
  const names = Object.keys(table) as N[];
  const lib = Deno.dlopen(path, table as unknown as DenoSymbols);
  const present = new Set(names.filter((name) => !table[name].optional));
  const optional = names.filter((name) => table[name].optional);
  try {
    const sync = optional.map((name) => [name, { ...table[name], nonblocking: false }]);
    const probe = Deno.dlopen(path, Object.fromEntries(sync));
    for (const name of optional) if (probe.symbols[name] !== null) present.add(name);
    probe.close();
  } catch (error) {
    lib.close();
    throw error;
  }
  const symbols = lib.symbols as unknown as Record<N, (...args: unknown[]) => unknown>;
  /** The calls not yet settled: their buffers stay reachable (Deno's thread writes into them). */
  const inFlight = new Set<object>();
  return {
    present,
    call(call) {
      const waits = `${call.symbol} can wait: call it off the main thread`;
      if (table[call.symbol].nonblocking) throw new TypeError(waits);
      linkPointers(call, addressOf);
      return symbols[call.symbol](...call.args) as number | bigint;
    },
    async callOffThread(call) {
      const not = `${call.symbol} is not a function that runs off the main thread here`;
      if (!table[call.symbol].nonblocking || !present.has(call.symbol)) throw new TypeError(not);
      linkPointers(call, addressOf);
      inFlight.add(call);
      try {
        return Number(await (symbols[call.symbol](...call.args) as Promise<number>));
      } finally {
        inFlight.delete(call);
      }
    },
    threadCount: () => 0,
    close: () => Promise.resolve(lib.close()),
  };
}

/** The address of a buffer, for a pointer field of a struct. */
function addressOf(buf: Uint8Array): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(buf as Uint8Array<ArrayBuffer>)));
}

/** A pointer object for an address, which must not be NULL. */
function pointer(address: bigint): NonNullable<ReturnType<DenoApi["UnsafePointer"]["create"]>> {
  const ptr = Deno.UnsafePointer.create(address);
  if (ptr === null) throw new TypeError("a NULL pointer cannot be read");
  return ptr;
}

/** An environment variable where permission is granted (so none prompts); else `NotCapable`. */
function readEnv(name: string): string | undefined {
  const status = Deno.permissions.querySync({ name: "env", variable: name });
  if (status.state !== "granted") throw new Deno.errors.NotCapable(`no permission to read ${name}`);
  return Deno.env.get(name);
}

/** The adapter for Deno. Deno's `dlopen` gives a bare name to the system loader and nowhere else. */
export function denoAdapter(): FfiAdapter {
  return {
    kind: "native (Deno)",
    platform: Deno.build.os,
    bareNamesSafe: true,
    mostAtOnce: 24,
    getEnv: readEnv,
    cwd: () => Deno.cwd(),
    open: openLibrary,
    cString: (address) => Deno.UnsafePointerView.getCString(pointer(address)),
    readPointer: (address) => new Deno.UnsafePointerView(pointer(address)).getBigUint64(0),
  };
}
