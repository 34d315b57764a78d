// The seam between the native libraries' bindings (`native.ts`, `nvml.ts`, written once) and the
// runtime's FFI that Deno (`deno.ts`) and Bun (`bun.ts`) each supply: open a library, say which
// functions it has, call one here or on another thread, read C strings and pointers, close.

import type { CudaForeignFunction } from "./symbols.ts";

/** An argument of a native call: a number, a buffer passed by pointer, or `null` for NULL. */
export type NativeArg = number | bigint | Uint8Array | null;

/**
 * A pointer field filled in by the thread that makes the call, just before it: the address of
 * `target` (u64, little-endian) at `offset` of the buffer `args[arg]`. On Bun the call runs in a
 * worker, whose buffers are copies at other addresses (`CUcheckpointRestoreArgs.gpuPairs`).
 */
export interface NativeLink {
  /** Which argument holds the pointer field (a `Uint8Array`). */
  readonly arg: number;
  /** The byte offset of the field in it. */
  readonly offset: number;
  /** The buffer whose address goes there. */
  readonly target: Uint8Array;
}

/** One call of a library function: its C name, its arguments, and pointer fields to fill in. */
export interface NativeCall<N extends string = string> {
  /** The function's C name. */
  readonly symbol: N;
  /** The arguments; once the call settles, buffers hold what it wrote (on Bun, copied back). */
  readonly args: readonly NativeArg[];
  /** Pointer fields inside argument buffers. */
  readonly links?: readonly NativeLink[];
}

/** A table of functions to bind, keyed by C name. */
export type FfiTable<N extends string> = Readonly<Record<N, CudaForeignFunction>>;

/** A library opened by an adapter. */
export interface FfiLibrary<N extends string> {
  /** The functions of the table that the library has (a required one missing fails the open). */
  readonly present: ReadonlySet<N>;
  /** Calls a function that returns at once, on this thread. Returns its result. */
  call(call: NativeCall<N>): number | bigint;
  /**
   * Calls a `nonblocking` function of the table on another thread (Deno's, or a Bun worker);
   * rejects only when the call cannot be made or finish. Its buffers stay reachable until then.
   */
  callOffThread(call: NativeCall<N>): Promise<number>;
  /** How many threads of its own the library keeps now (Bun's workers; 0 on Deno). */
  threadCount(): number;
  /** Closes the library once no call is in flight (on Bun, its workers too); resolves when done. */
  close(): Promise<void>;
}

/** What a runtime supplies to the native bindings. */
export interface FfiAdapter {
  /** The driver's `kind`: `native (Deno)` or `native (Bun)`. */
  readonly kind: string;
  /** The operating system (`linux`, `darwin`, ...), where the runtime says. */
  readonly platform: string | undefined;
  /**
   * Whether opening a bare library name (no `/`) uses only the system loader's search: Deno's does;
   * Bun's then tries the current directory, so Bun is given none but libc.so.6 (loaded: no search).
   */
  readonly bareNamesSafe: boolean;
  /** The most calls that wait it runs at once (Deno: 24 of its 32 threads for blocking work). */
  readonly mostAtOnce?: number;
  /** Reads an environment variable; may throw where the runtime needs a permission for it. */
  getEnv(name: string): string | undefined;
  /** The current working directory, to make a relative library path absolute. */
  cwd(): string;
  /** Opens a library and binds the table; throws when it does not open or lacks a required one. */
  open<N extends string>(path: string, table: FfiTable<N>): FfiLibrary<N>;
  /** The NUL-terminated string at an address. */
  cString(address: bigint): string;
  /** The pointer (u64) stored at an address. */
  readPointer(address: bigint): bigint;
}

/** Fills in a call's pointer fields with the addresses `addressOf` gives its buffers. */
export function linkPointers(call: NativeCall, addressOf: (buf: Uint8Array) => bigint): void {
  for (const { arg, offset, target } of call.links ?? []) {
    const holder = call.args[arg];
    const buffer = `${call.symbol}: argument ${arg} holds a pointer, so it must be a buffer`;
    if (!(holder instanceof Uint8Array)) throw new TypeError(buffer);
    new DataView(holder.buffer, holder.byteOffset).setBigUint64(offset, addressOf(target), true);
  }
}

/**
 * A zeroed buffer of `size` bytes with an `ArrayBuffer` of its own, whose address does not move (a
 * small typed array made by length may live in the heap, where the collector may move it).
 */
export const nativeBuffer = (size: number): Uint8Array => new Uint8Array(new ArrayBuffer(size));

/** The C `int` at the start of a buffer (an `unsigned int` with `unsigned`). */
export function readInt(buf: Uint8Array, unsigned = false): number {
  const view = new DataView(buf.buffer, buf.byteOffset);
  return unsigned ? view.getUint32(0, true) : view.getInt32(0, true);
}

/** The NUL-terminated text at the start of a buffer. */
export function cText(buf: Uint8Array): string {
  const end = buf.indexOf(0);
  return new TextDecoder().decode(buf.subarray(0, end < 0 ? buf.length : end));
}
