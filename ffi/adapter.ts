/**
 * The seam between the native driver (`native.ts`, written once) and the runtime's FFI: what Deno
 * (`deno.ts`) and Bun (`bun.ts`) each supply. An adapter opens a library and says which of the
 * functions asked for it has, calls a function here or on another thread, reads C strings and
 * pointers, and closes. Everything else (finding libcuda, the stub check, version gating, cuInit,
 * the GPU list, error names) is the native driver's.
 *
 * @module
 */

import type { CudaForeignFunction } from "./symbols.ts";

/** An argument of a native call: a number, a buffer passed by pointer, or `null` for NULL. */
export type NativeArg = number | bigint | Uint8Array | null;

/**
 * A pointer field filled in just before the call, on the thread that makes it: the address of
 * `target` is written (u64, little-endian) at `offset` of the buffer `args[arg]`. A struct that
 * points at another buffer (`CUcheckpointRestoreArgs.gpuPairs`) is passed so, because on Bun the
 * call runs in a worker, where the buffers are copies at other addresses.
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
  /**
   * The arguments. Buffers are read and written by the function; once the call settles they hold
   * what it wrote (on Bun, the worker's copies are copied back).
   */
  readonly args: readonly NativeArg[];
  /** Pointer fields inside argument buffers, filled in on the calling thread. */
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
   * Calls a function that can wait (a `nonblocking` one of the table) on another thread: Deno's
   * FFI thread, or a Bun worker. Resolves its `CUresult`; rejects only when the call could not be
   * made or finished (a worker thread ended). The caller keeps the buffers alive until it settles.
   */
  callOffThread(call: NativeCall<N>): Promise<number>;
  /** How many threads of its own the library keeps now (Bun's workers; 0 on Deno). */
  threadCount(): number;
  /**
   * Closes the library: on Bun each worker closes its own handles and exits. Call it once no call
   * is in flight; resolves when everything is let go.
   */
  close(): Promise<void>;
}

/** What a runtime supplies to the native driver. */
export interface FfiAdapter {
  /** The driver's `kind`: `native (Deno)` or `native (Bun)`. */
  readonly kind: string;
  /** The runtime, for advice in messages: `deno` or `bun`. */
  readonly runtime: string;
  /** The operating system (`linux`, `darwin`, ...), where the runtime says. */
  readonly platform: string | undefined;
  /**
   * Whether opening a bare library name (no `/`) uses only the system loader's search. Deno's
   * does; Bun's `dlopen`, when the loader does not find the name, tries it again relative to the
   * current directory, which would load a planted library: the native driver never gives Bun a
   * bare name.
   */
  readonly bareNamesSafe: boolean;
  /** Reads an environment variable; may throw where the runtime needs a permission for it. */
  getEnv(name: string): string | undefined;
  /** The current working directory, to make a relative library path absolute. */
  cwd(): string;
  /**
   * The C library, to ask the system loader where it finds a name: an absolute path, or a name
   * the loader resolves by itself where {@link FfiAdapter.bareNamesSafe} holds.
   */
  libcPath(): string;
  /**
   * Opens a library and binds the table's functions; throws when the library does not open or
   * lacks a function that is not `optional`.
   */
  open<N extends string>(path: string, table: FfiTable<N>): FfiLibrary<N>;
  /** The NUL-terminated string at an address. */
  cString(address: bigint): string;
  /** The pointer (u64) stored at an address. */
  readPointer(address: bigint): bigint;
}

/**
 * Fills in a call's pointer fields with the addresses `addressOf` gives its buffers; each adapter
 * calls it on the thread that makes the call, just before it.
 */
export function linkPointers(call: NativeCall, addressOf: (buf: Uint8Array) => bigint): void {
  for (const link of call.links ?? []) {
    const holder = call.args[link.arg];
    if (!(holder instanceof Uint8Array)) {
      throw new TypeError(
        `${call.symbol}: argument ${link.arg} holds a pointer, so it must be a buffer`,
      );
    }
    new DataView(holder.buffer, holder.byteOffset).setBigUint64(
      link.offset,
      addressOf(link.target),
      true,
    );
  }
}
