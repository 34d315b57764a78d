/**
 * Where a library really comes from. A bare name (`libcuda.so.1`) is resolved by asking the system
 * loader itself: the C library's `dlopen` with the name, then `dlinfo(RTLD_DI_LINKMAP)` for the
 * path of the file it picked, which the runtime then opens by that absolute path. A relative path
 * gets the current directory put in front of it, once (its `..` left to the kernel).
 *
 * Why: Bun's `bun:ffi` `dlopen`, when the system loader does not find a bare name, tries the name
 * again relative to the current directory (measured with Bun 1.4.5; its source says "try resolving
 * the filepath relative to the current working directory"). A `libcuda.so.1` planted in the
 * directory a root process runs in would be loaded and its constructors run. Deno's `dlopen` has no
 * such fallback, but it goes through the same lookup, so that `libraryPath` is absolute on both
 * runtimes and names one library for the once-per-process `cuInit`.
 *
 * Linux on 64-bit machines only: `struct link_map` has `l_name` at offset 8 there.
 *
 * @module
 */

import type { FfiAdapter, FfiLibrary } from "./adapter.ts";
import type { CudaForeignFunction } from "./symbols.ts";

/** The C library's loader functions, as the native driver binds them. */
const LIBC_SYMBOLS = {
  // void *dlopen(const char *filename, int flags)
  dlopen: { parameters: ["buffer", "i32"], result: "u64" },
  // int dlinfo(void *handle, int request, void *info)
  dlinfo: { parameters: ["u64", "i32", "buffer"], result: "i32" },
  // int dlclose(void *handle)
  dlclose: { parameters: ["u64"], result: "i32" },
  // char *dlerror(void)
  dlerror: { parameters: [], result: "u64" },
} as const satisfies Record<string, CudaForeignFunction>;

type LibcName = keyof typeof LIBC_SYMBOLS;

/** `RTLD_NOW`: resolve every symbol at once, as the runtimes' own `dlopen` does. */
const RTLD_NOW = 2;
/** `RTLD_DI_LINKMAP`: `dlinfo` writes the library's `struct link_map *`. */
const RTLD_DI_LINKMAP = 2;
/** Offset of `l_name` (the path the loader opened) in `struct link_map` on 64-bit Linux. */
const LINK_MAP_NAME_OFFSET = 8n;

/** A library the system loader found and holds open until {@link Located.release}. */
export interface Located {
  /** The absolute path of the file the loader picked. */
  readonly path: string;
  /** Lets go of the loader's handle (once the runtime has opened the path itself). */
  release(): void;
}

/**
 * Asks the system loader where it finds `name` (through `LD_LIBRARY_PATH`, `ld.so.cache` and its
 * defaults, never the current directory unless `LD_LIBRARY_PATH` names it). The library is loaded
 * meanwhile, as the runtime would load it; {@link Located.release} lets go of that handle.
 *
 * @throws {Error} with the loader's own message when it does not find the name, or when the C
 * library cannot be asked.
 */
export function askSystemLoader(adapter: FfiAdapter, name: string): Located {
  const libc: FfiLibrary<LibcName> = adapter.open(adapter.libcPath(), LIBC_SYMBOLS);
  let handle = 0n;
  try {
    handle = BigInt(libc.call({ symbol: "dlopen", args: [cString(name), RTLD_NOW] }));
    if (handle === 0n) {
      const error = BigInt(libc.call({ symbol: "dlerror", args: [] }));
      throw new Error(
        error === 0n ? `${name}: not found by the system loader` : adapter.cString(error),
      );
    }
    const out = new Uint8Array(new ArrayBuffer(8));
    if (libc.call({ symbol: "dlinfo", args: [handle, RTLD_DI_LINKMAP, out] }) !== 0) {
      throw new Error(
        `${name}: the system loader found it but would not say where (dlinfo failed)`,
      );
    }
    const linkMap = new DataView(out.buffer).getBigUint64(0, true);
    const found = adapter.cString(adapter.readPointer(linkMap + LINK_MAP_NAME_OFFSET));
    const path = absolutePath(found, adapter.cwd());
    const held = handle;
    handle = 0n;
    return {
      path,
      release: () => {
        libc.call({ symbol: "dlclose", args: [held] });
        void libc.close();
      },
    };
  } catch (error) {
    if (handle !== 0n) libc.call({ symbol: "dlclose", args: [handle] });
    void libc.close();
    throw error;
  }
}

/**
 * `path` made absolute against `cwd`: a relative path gets `cwd/` in front, and nothing else
 * changes. `.` and `..` are left for the kernel to resolve, after the symbolic links before them,
 * as it would for the path as given: resolving `..` as text could name another file.
 */
export function absolutePath(path: string, cwd: string): string {
  if (path.startsWith("/")) return path;
  return `${cwd.endsWith("/") ? cwd : `${cwd}/`}${path}`;
}

/** A NUL-terminated copy of a string, for a `const char *` argument. */
function cString(text: string): Uint8Array {
  const bytes = new TextEncoder().encode(`${text}\0`);
  const buf = new Uint8Array(new ArrayBuffer(bytes.length));
  buf.set(bytes);
  return buf;
}
