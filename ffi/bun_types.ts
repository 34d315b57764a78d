/**
 * The little of `bun:ffi` the Bun binding uses, typed locally so that Deno's type checker and JSR
 * never resolve a `bun:` specifier or need bun-types, and the messages between the Bun binding and
 * its workers.
 *
 * @module
 */

import type { BunFunctionDefinition, CudaSymbolName } from "./symbols.ts";

/** A library opened by `bun:ffi`'s `dlopen`. */
export interface BunLibrary {
  /** The bound functions; this package's all return a `CUresult`. */
  readonly symbols: Readonly<Record<string, (...args: unknown[]) => number>>;
  /** Closes the library. */
  close(): void;
}

/** The parts of the `bun:ffi` module the binding uses. */
export interface BunFfi {
  /** Opens a library and binds the given functions; throws when one is missing. */
  dlopen(path: string, symbols: Record<string, BunFunctionDefinition>): BunLibrary;
  /** The address of a typed array's memory. */
  ptr(view: ArrayBufferView): number;
  /** Reads the NUL-terminated string at an address. */
  CString: new (address: number) => { toString(): string };
}

/** Imports `bun:ffi` through a variable, so that no static analyser sees the specifier. */
export async function importBunFfi(): Promise<BunFfi> {
  const specifier = "bun:ffi";
  return (await import(specifier)) as BunFfi;
}

/** The calls the workers make. */
export type WorkerOperation =
  | "cuCheckpointProcessLock"
  | "cuCheckpointProcessCheckpoint"
  | "cuCheckpointProcessRestore"
  | "cuCheckpointProcessUnlock";

/** A call for a worker: which function of which library, on which pid, with which buffers. */
export interface WorkerRequest {
  /** Matches the reply to the call. */
  readonly id: number;
  /** The library to call (the worker opens it once, with its own `dlopen`). */
  readonly path: string;
  /** The function. */
  readonly symbol: WorkerOperation & CudaSymbolName;
  /** The pid. */
  readonly pid: number;
  /** The 64-byte args struct, or `null` for NULL (lock only; restore builds its own). */
  readonly args: Uint8Array | null;
  /**
   * Restore only: the encoded GPU pairs (`encodeGpuPairs`), or `null` to pass NULL args. The worker
   * builds the args struct around its own copy, so that no address crosses threads.
   */
  readonly pairs: Uint8Array | null;
  /** Restore only: how many pairs `pairs` holds. */
  readonly pairCount: number;
}

/** A worker's answer: the `CUresult`, or why the call could not be made. */
export type WorkerReply =
  | { readonly id: number; readonly code: number }
  | { readonly id: number; readonly error: string };
