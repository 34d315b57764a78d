// The little of `bun:ffi` the Bun binding uses, typed here so that Deno's checker and JSR never
// resolve a `bun:` specifier, and the messages between the binding and its workers.

import type { NativeCall, NativeLink } from "./adapter.ts";
import type { BunFunctionDefinition } from "./symbols.ts";

/** A library opened by `bun:ffi`'s `dlopen`. */
export interface BunLibrary {
  /** The bound functions. */
  readonly symbols: Readonly<Record<string, (...args: unknown[]) => number | bigint>>;
  /** Closes the library (`dlclose`). */
  close(): void;
}

/** The parts of the `bun:ffi` module the binding uses. */
export interface BunFfi {
  /** Opens a library and binds the functions (throws when one is missing): absolute paths only. */
  dlopen(path: string, symbols: Record<string, BunFunctionDefinition>): BunLibrary;
  /** The address of a typed array's memory. */
  ptr(view: ArrayBufferView): number;
  /** Reads the NUL-terminated string at an address. */
  CString: new (address: number) => { toString(): string };
  /** Reads the u64 at `address + byteOffset`. */
  read: { u64(address: number, byteOffset?: number): bigint };
}

/** Imports `bun:ffi` through a variable, so that no static analyser sees the specifier. */
export async function importBunFfi(): Promise<BunFfi> {
  const specifier = "bun:ffi";
  return (await import(specifier)) as BunFfi;
}

/** A call for a worker, of a function of a library: its buffers go there and back as copies. */
export interface WorkerRequest extends NativeCall {
  /** Matches the reply to the call. */
  readonly id: number;
  /** The library's absolute path (the worker opens it itself, once per function). */
  readonly path: string;
  /** The function's `bun:ffi` definition. */
  readonly definition: BunFunctionDefinition;
  /** Pointer fields to fill in with the worker's own addresses of its copies. */
  readonly links: readonly NativeLink[];
}

/** Tells a worker to close every library it opened, then end. */
export type WorkerClose = { readonly close: true };

/** What a call came to: its result, and the argument buffers as it left them (else `null`). */
export type WorkerResult = { readonly code: number; readonly buffers: (Uint8Array | null)[] };

/** A worker's answer: the result and the buffers after the call, or why the call failed. */
export type WorkerReply = { readonly id: number } & (WorkerResult | { readonly error: string });
