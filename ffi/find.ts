/**
 * Finding libcuda: where to look, in which order, and what to say when it is nowhere. The search
 * is runtime-free: the caller passes `tryOpen(path)`, so the order and the messages can be tested
 * anywhere.
 *
 * Only absolute paths reach the runtime's `dlopen`. A bare name (`libcuda.so.1`) goes to the
 * system loader itself (libc's `dlopen`, then `dlinfo(RTLD_DI_LINKMAP)` for the file it picked); a
 * relative path gets the current directory in front, once. Why: Bun's `dlopen`, when the loader
 * does not find a bare name, tries it again relative to the current directory (Bun 1.4.5; its
 * source says "try resolving the filepath relative to the current working directory"), which
 * would load a `libcuda.so.1` planted where a root process runs. On Deno too, `libraryPath` is
 * then absolute, naming one library for the once-per-process `cuInit`.
 *
 * Linux on 64-bit machines only: `struct link_map` has `l_name` at offset 8 there.
 *
 * @module
 */

import { DriverLoadError, messageOf } from "../core/errors.ts";
import type { FfiAdapter, FfiLibrary, FfiTable } from "./adapter.ts";
import type { CudaForeignFunction } from "./symbols.ts";

/** The environment variable that names the libcuda to load, overriding the search. */
export const LIBCUDA_ENV_VAR = "CKPT_LIBCUDA_PATH";

/** The name the system loader resolves (through `LD_LIBRARY_PATH`, `ld.so.cache` and its defaults). */
export const LIBCUDA_SONAME = "libcuda.so.1";

/** Where drivers put libcuda, tried in order after the system loader (not the toolkit's stub). */
export const LIBCUDA_SEARCH_PATHS: readonly string[] = [
  // Debian, Ubuntu (x86_64)
  "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
  "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
  // RHEL, Fedora, SUSE, Arch (lib64 / lib)
  "/usr/lib64/libcuda.so.1",
  "/usr/lib64/nvidia/libcuda.so.1",
  "/usr/lib/libcuda.so.1",
  // NVIDIA container toolkit, Kubernetes device plugin
  "/usr/local/nvidia/lib64/libcuda.so.1",
  "/usr/local/nvidia/lib/libcuda.so.1",
  // WSL 2
  "/usr/lib/wsl/lib/libcuda.so.1",
  // aarch64: Grace Hopper and other servers, Jetson
  "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
  "/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1",
  "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1",
  // NixOS
  "/run/opengl-driver/lib/libcuda.so.1",
  // The CUDA toolkit's forward-compatibility driver
  "/usr/local/cuda/compat/libcuda.so.1",
];

/** Where a library path came from. */
type LibcudaSource = "option" | "env" | "system" | "search";

/** A path that was tried (a bare name: the system loader's), where it came from, and why it failed. */
interface TriedPath {
  readonly path: string;
  readonly source: LibcudaSource;
  readonly reason: string;
}

/** What {@link findLibcuda} takes. */
export interface FindLibcudaOptions<T> {
  /** Opens the library at `path`, or throws; the message is the reason listed for the path. */
  tryOpen(path: string): T;
  /** An explicit path: when given, it is the only one tried. */
  libraryPath?: string;
  /** Reads an environment variable; one that throws counts as not set (and the error says so). */
  getEnv?(name: string): string | undefined;
  /** The operating system; anything but "linux" fails at once. */
  platform?: string;
  /** The runtime, for advice in messages ("deno" adds the permission flags). */
  runtime?: string;
  /** The locations tried after the system loader; {@link LIBCUDA_SEARCH_PATHS} by default. */
  searchPaths?: readonly string[];
}

/** What `tryOpen` returned, the path that opened, where it came from, and the paths tried before. */
export interface FoundLibcuda<T> {
  readonly library: T;
  readonly path: string;
  readonly source: LibcudaSource;
  readonly tried: readonly TriedPath[];
}

/** Whether an error is Deno's missing permission (`NotCapable`; Deno 1's `PermissionDenied`). */
function isPermissionError(error: unknown): boolean {
  return error instanceof Error &&
    (error.name === "NotCapable" || error.name === "PermissionDenied");
}

/**
 * A loader's message on one line, without what the line already says: Deno's doubled "Could not
 * open library: ", Bun's "Failed to open library", and the loader's repetition of the path.
 */
export function reasonOf(error: unknown, path?: string): string {
  let text = messageOf(error).replace(/\s*\n\s*/g, " ").trim()
    .replace(/^(Could not open library: )+/, "");
  if (path) {
    for (const prefix of [`Failed to open library "${path}": `, `${path}: `]) {
      if (text.startsWith(prefix)) text = text.slice(prefix.length);
    }
  }
  return text || "failed to open (no reason given)";
}

/**
 * Finds and opens libcuda: `libraryPath` when given, else {@link LIBCUDA_ENV_VAR} when set (either
 * is then the only path tried, so that a wrong override is reported, not replaced by another
 * library), else {@link LIBCUDA_SONAME} through the system loader, then
 * {@link LIBCUDA_SEARCH_PATHS}.
 *
 * @throws {DriverLoadError} on a platform other than Linux; when `tryOpen` reports a missing
 * permission; when nothing opens, listing every path tried with its reason and what to do.
 */
export function findLibcuda<T>(options: FindLibcudaOptions<T>): FoundLibcuda<T> {
  const isDeno = options.runtime?.toLowerCase() === "deno";
  if (options.platform !== undefined && options.platform !== "linux") {
    throw new DriverLoadError(
      `CUDA checkpointing is Linux-only: NVIDIA's checkpoint API (cuCheckpointProcess*) exists ` +
        `only in the Linux driver, and this is ${options.platform}`,
    );
  }

  const candidates: { path: string; source: LibcudaSource }[] = [];
  let envNote = "";
  if (options.libraryPath !== undefined && options.libraryPath !== "") {
    candidates.push({ path: options.libraryPath, source: "option" });
  } else {
    let fromEnv: string | undefined;
    if (options.getEnv) {
      try {
        fromEnv = options.getEnv(LIBCUDA_ENV_VAR);
      } catch (error) {
        envNote = isPermissionError(error)
          ? `${LIBCUDA_ENV_VAR} could not be read (Deno needs --allow-env=${LIBCUDA_ENV_VAR}), ` +
            `so it was treated as not set`
          : `${LIBCUDA_ENV_VAR} could not be read (${
            reasonOf(error)
          }), so it was treated as not set`;
      }
    }
    if (fromEnv !== undefined && fromEnv !== "") {
      candidates.push({ path: fromEnv, source: "env" });
    } else {
      candidates.push({ path: LIBCUDA_SONAME, source: "system" });
      for (const path of options.searchPaths ?? LIBCUDA_SEARCH_PATHS) {
        candidates.push({ path, source: "search" });
      }
    }
  }

  const tried: TriedPath[] = [];
  for (const { path, source } of candidates) {
    try {
      const library = options.tryOpen(path);
      return { library, path, source, tried };
    } catch (error) {
      if (isPermissionError(error)) {
        throw new DriverLoadError(
          `Loading libcuda (${path}) needs the FFI permission: run Deno with --allow-ffi ` +
            `(and --allow-env=${LIBCUDA_ENV_VAR} to let ${LIBCUDA_ENV_VAR} choose the library). ` +
            `Deno said: ${reasonOf(error)}`,
          [...tried.map((t) => t.path), path],
          { cause: error },
        );
      }
      tried.push({ path, source, reason: reasonOf(error, path) });
    }
  }

  throw new DriverLoadError(notFoundMessage(tried, isDeno, envNote), tried.map((t) => t.path), {
    cause: tried.length > 0 ? new Error(tried[tried.length - 1].reason) : undefined,
  });
}

function notFoundMessage(tried: readonly TriedPath[], isDeno: boolean, envNote: string): string {
  const label: Record<LibcudaSource, string> = {
    option: "the libraryPath option",
    env: `from ${LIBCUDA_ENV_VAR}`,
    system: "the system loader",
    search: "",
  };
  const lines = [
    `Could not load libcuda, the NVIDIA driver's CUDA library. Tried ${tried.length} ` +
    `location${tried.length === 1 ? "" : "s"}:`,
    ...tried.map((t) =>
      `  - ${t.path}${label[t.source] ? ` (${label[t.source]})` : ""}: ${t.reason}`
    ),
  ];
  const explicit = tried.some((t) => t.source === "option" || t.source === "env");
  if (explicit) {
    lines.push(
      `That path was given explicitly, so the usual locations were not searched; fix it, or unset ` +
        `${LIBCUDA_ENV_VAR} and leave out libraryPath to search them.`,
    );
  } else {
    lines.push(
      `Is the NVIDIA driver installed (nvidia-smi works)? CUDA checkpointing needs driver 570 or ` +
        `later. If libcuda.so.1 is elsewhere, set ${LIBCUDA_ENV_VAR} to its full path ` +
        `(\`ldconfig -p | grep libcuda\` shows where it is). On a machine without a GPU, pass a ` +
        `SimulatedMachine from @ckpt/cuda/mock as { machine } to run on the simulator.`,
    );
  }
  if (envNote) lines.push(`Note: ${envNote}.`);
  if (isDeno) {
    lines.push(
      `Deno needs --allow-ffi to load the library, and --allow-env=${LIBCUDA_ENV_VAR} to read ` +
        `${LIBCUDA_ENV_VAR}.`,
    );
  } else {
    lines.push(
      `(On Deno, run with --allow-ffi, plus --allow-env=${LIBCUDA_ENV_VAR} to read ${LIBCUDA_ENV_VAR}.)`,
    );
  }
  return lines.join("\n");
}

/** The C library's loader functions, as the native bindings use them. */
const LIBC_SYMBOLS = {
  dlopen: { parameters: ["buffer", "i32"], result: "u64" }, // void *dlopen(const char *, int)
  dlinfo: { parameters: ["u64", "i32", "buffer"], result: "i32" }, // int dlinfo(void *, int, void *)
  dlclose: { parameters: ["u64"], result: "i32" }, // int dlclose(void *)
  dlerror: { parameters: [], result: "u64" }, // char *dlerror(void)
} as const satisfies Record<string, CudaForeignFunction>;

type LibcName = keyof typeof LIBC_SYMBOLS;

/** `RTLD_NOW`: resolve every symbol at once, as the runtimes' own `dlopen` does. */
const RTLD_NOW = 2;
/** `RTLD_DI_LINKMAP`: `dlinfo` writes the library's `struct link_map *`. */
const RTLD_DI_LINKMAP = 2;
/** Offset of `l_name` (the path the loader opened) in `struct link_map` on 64-bit Linux. */
const LINK_MAP_NAME_OFFSET = 8n;

/**
 * Asks the system loader where it finds `name` (`LD_LIBRARY_PATH`, `ld.so.cache`, its defaults;
 * never the current directory unless `LD_LIBRARY_PATH` names it), and calls `open` with that
 * absolute path while the loader still holds the library.
 *
 * @throws {Error} with the loader's own message when it does not find the name, or when the C
 * library cannot be asked.
 */
function viaSystemLoader<T>(adapter: FfiAdapter, name: string, open: (path: string) => T): T {
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
    return open(absolutePath(found, adapter.cwd()));
  } finally {
    if (handle !== 0n) libc.call({ symbol: "dlclose", args: [handle] });
    void libc.close();
  }
}

/**
 * `path` made absolute against `cwd`: a relative path gets `cwd/` in front, nothing else. `.` and
 * `..` are left to the kernel, which follows the symbolic links before them: as text, `..` could
 * name another file.
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

/**
 * Opens one candidate of a search by an absolute path: a bare name is the file the system loader
 * picks (on Deno, where the loader cannot be asked, the name itself: Deno's `dlopen` searches only
 * as the loader does); a relative path gets the current directory in front.
 */
export function openCandidate<N extends string>(
  adapter: FfiAdapter,
  candidate: string,
  table: FfiTable<N>,
): { lib: FfiLibrary<N>; path: string } {
  const open = (path: string) => ({ lib: adapter.open(path, table), path });
  if (candidate.includes("/")) {
    return open(absolutePath(candidate, candidate.startsWith("/") ? "/" : adapter.cwd()));
  }
  let asked = false;
  try {
    return viaSystemLoader(adapter, candidate, (path) => {
      asked = true; // the loader answered: a failure now is the runtime's
      return open(path);
    });
  } catch (error) {
    if (asked || !adapter.bareNamesSafe) throw error;
    return open(candidate);
  }
}
