// Finding libcuda: where to look, in which order, and what to say when it is nowhere; runtime-free
// (the caller passes `tryOpen(path)`). Only absolute paths reach the runtime's `dlopen` (and
// libc.so.6, which the loader finds loaded): a bare name goes to the system loader itself (libc's
// `dlopen`, then `dlinfo(RTLD_DI_LINKMAP)` for the file it picked; `l_name` at offset 8, 64-bit
// Linux), as Bun's `dlopen` tries a name the loader does not find in the current directory.

import { DriverLoadError, messageOf } from "../core/errors.ts";
import { orElse } from "../core/options.ts";
import { type FfiAdapter, type FfiLibrary, type FfiTable, nativeBuffer } from "./adapter.ts";
import type { CudaForeignFunction } from "./symbols.ts";

/** The environment variable that names the libcuda to load, overriding the search. */
export const LIBCUDA_ENV_VAR = "CKPT_LIBCUDA_PATH";
/** The name the system loader resolves (through `LD_LIBRARY_PATH`, `ld.so.cache` and its defaults). */
export const LIBCUDA_SONAME = "libcuda.so.1";

/** Where drivers put libcuda, tried in order after the system loader (not the toolkit's stub). */
export const LIBCUDA_SEARCH_PATHS: readonly string[] = [
  // Debian and Ubuntu; RHEL, Fedora, SUSE and Arch; NVIDIA's container toolkit; WSL 2
  "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
  "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
  "/usr/lib64/libcuda.so.1",
  "/usr/lib64/nvidia/libcuda.so.1",
  "/usr/lib/libcuda.so.1",
  "/usr/local/nvidia/lib64/libcuda.so.1",
  "/usr/local/nvidia/lib/libcuda.so.1",
  "/usr/lib/wsl/lib/libcuda.so.1",
  // aarch64 (Grace Hopper, Jetson); NixOS; the CUDA toolkit's forward-compatibility driver
  "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
  "/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1",
  "/usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1",
  "/run/opengl-driver/lib/libcuda.so.1",
  "/usr/local/cuda/compat/libcuda.so.1",
];

/** Where a library path came from, as the not-found message says it. */
const SOURCES = {
  option: " (the libraryPath option)",
  env: ` (from ${LIBCUDA_ENV_VAR})`,
  system: " (the system loader)",
  search: "",
};

/** A path that was tried (a bare name: the system loader's), where it came from, and why it failed. */
type TriedPath = Readonly<{ path: string; source: keyof typeof SOURCES; reason: string }>;

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
  /** The locations tried after the system loader; {@link LIBCUDA_SEARCH_PATHS} by default. */
  searchPaths?: readonly string[];
}

/** What `tryOpen` returned, the path that opened, where it came from, and the paths tried before. */
export interface FoundLibcuda<T> {
  readonly library: T;
  readonly path: string;
  readonly source: keyof typeof SOURCES;
  readonly tried: readonly TriedPath[];
}

/** Whether an error is Deno's missing permission (`NotCapable`; Deno 1's `PermissionDenied`). */
function isPermissionError(error: unknown): boolean {
  return error instanceof Error && /^(NotCapable|PermissionDenied)$/.test(error.name);
}

/**
 * A loader's message on one line, without what the line already says: Deno's doubled "Could not
 * open library: ", Bun's "Failed to open library", and the loader's repetition of the path.
 */
export function reasonOf(error: unknown, path?: string): string {
  let text = messageOf(error).replace(/\s*\n\s*/g, " ").trim()
    .replace(/^(Could not open library: )+/, "");
  for (const prefix of path ? [`Failed to open library "${path}": `, `${path}: `] : []) {
    if (text.startsWith(prefix)) text = text.slice(prefix.length);
  }
  return text || "failed to open (no reason given)";
}

/**
 * Finds and opens libcuda: `libraryPath`, else {@link LIBCUDA_ENV_VAR} (either then the only path
 * tried: a wrong override is reported, not replaced), else {@link LIBCUDA_SONAME} through the
 * system loader, then {@link LIBCUDA_SEARCH_PATHS}.
 *
 * @throws {DriverLoadError} on a platform other than Linux; when `tryOpen` reports a missing
 * permission; when nothing opens, listing every path tried with its reason and what to do.
 */
export function findLibcuda<T>(options: FindLibcudaOptions<T>): FoundLibcuda<T> {
  const only = `CUDA checkpointing is Linux-only: NVIDIA's checkpoint API (cuCheckpointProcess*) ` +
    `exists only in the Linux driver, and this is ${options.platform}`;
  if ((options.platform ?? "linux") !== "linux") throw new DriverLoadError(only);
  let fromEnv: string | undefined, envNote = "";
  try {
    if (!options.libraryPath) fromEnv = options.getEnv?.(LIBCUDA_ENV_VAR);
  } catch (error) {
    const why = isPermissionError(error)
      ? `Deno needs --allow-env=${LIBCUDA_ENV_VAR}`
      : reasonOf(error);
    envNote = `${LIBCUDA_ENV_VAR} could not be read (${why}), so it was treated as not set`;
  }
  const searched = [LIBCUDA_SONAME, ...options.searchPaths ?? LIBCUDA_SEARCH_PATHS];
  const candidates: Omit<TriedPath, "reason">[] = options.libraryPath
    ? [{ path: options.libraryPath, source: "option" }]
    : fromEnv
    ? [{ path: fromEnv, source: "env" }]
    : searched.map((path, i) => ({ path, source: i === 0 ? "system" : "search" }));
  const tried: TriedPath[] = [];
  for (const { path, source } of candidates) {
    try {
      return { library: options.tryOpen(path), path, source, tried };
    } catch (error) {
      if (isPermissionError(error)) {
        const needs = `Loading libcuda (${path}) needs the FFI permission: run Deno with ` +
          `--allow-ffi (and --allow-env=${LIBCUDA_ENV_VAR} to let ${LIBCUDA_ENV_VAR} choose the ` +
          `library). Deno said: ${reasonOf(error)}`;
        throw new DriverLoadError(needs, [...tried.map((t) => t.path), path], { cause: error });
      }
      tried.push({ path, source, reason: reasonOf(error, path) });
    }
  }
  const explicit = tried.some((t) => t.source === "option" || t.source === "env");
  const lines = [
    `Could not load libcuda, the NVIDIA driver's CUDA library. Tried ${tried.length} ` +
    `location${tried.length === 1 ? "" : "s"}:`,
    ...tried.map((t) => `  - ${t.path}${SOURCES[t.source]}: ${t.reason}`),
    explicit
      ? `That path was given explicitly, so the usual locations were not searched; fix it, or ` +
        `unset ${LIBCUDA_ENV_VAR} and leave out libraryPath to search them.`
      : `Is the NVIDIA driver installed (nvidia-smi works)? CUDA checkpointing needs driver 570 or ` +
        `later. If libcuda.so.1 is elsewhere, set ${LIBCUDA_ENV_VAR} to its full path ` +
        `(\`ldconfig -p | grep libcuda\` shows where it is). On a machine without a GPU, pass a ` +
        `SimulatedMachine from @ckpt/cuda/mock as { machine } to run on the simulator.`,
    ...(envNote ? [`Note: ${envNote}.`] : []),
  ]; // no word of Deno's --allow-ffi: without it, the first try threw the permission's message
  const cause = tried.length > 0 ? new Error(tried[tried.length - 1].reason) : undefined;
  throw new DriverLoadError(lines.join("\n"), tried.map((t) => t.path), { cause });
}

/** The C library's loader functions, as the native bindings use them. */
const LIBC_SYMBOLS = {
  dlopen: { parameters: ["buffer", "i32"], result: "u64" }, // void *dlopen(const char *, int)
  dlinfo: { parameters: ["u64", "i32", "buffer"], result: "i32" }, // int dlinfo(void *, int, void *)
  dlclose: { parameters: ["u64"], result: "i32" }, // int dlclose(void *)
  dlerror: { parameters: [], result: "u64" }, // char *dlerror(void)
} as const satisfies Record<string, CudaForeignFunction>;

/**
 * The C library, by a name the loader answers with the one loaded, searching nothing (so Bun never
 * tries the current directory): glibc matches its loaded libc by this soname, and musl takes every
 * "libc." name for itself. Read from /proc/self/maps, it started Bun's I/O threads (9 ms).
 */
export const LIBC = "libc.so.6";
/** `RTLD_NOW` (resolve every symbol at once, as the runtimes do) and `RTLD_DI_LINKMAP`. */
const RTLD_NOW = 2, RTLD_DI_LINKMAP = 2;

/**
 * Asks the system loader where it finds `name` (the caller makes sure that `LD_LIBRARY_PATH` has
 * it search no relative directory), and calls `open` with that absolute path while the loader still
 * holds the library; throws the loader's own message where it finds none.
 */
function viaSystemLoader<T>(adapter: FfiAdapter, name: string, open: (path: string) => T): T {
  const libc = adapter.open(LIBC, LIBC_SYMBOLS);
  let handle = 0n;
  try {
    const text = new TextEncoder().encode(`${name}\0`), cName = nativeBuffer(text.length);
    cName.set(text);
    handle = BigInt(libc.call({ symbol: "dlopen", args: [cName, RTLD_NOW] }));
    if (handle === 0n) {
      const error = BigInt(libc.call({ symbol: "dlerror", args: [] }));
      const none = `${name}: not found by the system loader`;
      throw new Error(error === 0n ? none : adapter.cString(error));
    }
    const out = nativeBuffer(8);
    const where = `${name}: the system loader found it but would not say where (dlinfo failed)`;
    const info = libc.call({ symbol: "dlinfo", args: [handle, RTLD_DI_LINKMAP, out] });
    if (info !== 0) throw new Error(where);
    const linkMap = new DataView(out.buffer).getBigUint64(0, true);
    return open(absolutePath(adapter.cString(adapter.readPointer(linkMap + 8n)), adapter.cwd()));
  } finally {
    if (handle !== 0n) libc.call({ symbol: "dlclose", args: [handle] });
    void libc.close();
  }
}

/**
 * `path` made absolute against `cwd`: a relative path gets `cwd/` in front, nothing else (the
 * kernel resolves `..` after the links before it, which as text could name another file).
 */
export function absolutePath(path: string, cwd: string): string {
  return path.startsWith("/") ? path : `${cwd.endsWith("/") ? cwd : `${cwd}/`}${path}`;
}

/**
 * Opens one candidate of a search by an absolute path: a bare name is the system loader's pick
 * (where the loader cannot be asked, on Deno only, the name itself); a relative path gets the
 * current directory in front.
 */
export function openCandidate<N extends string>(
  adapter: FfiAdapter,
  candidate: string,
  table: FfiTable<N>,
): { lib: FfiLibrary<N>; path: string } {
  const open = (path: string) => ({ lib: adapter.open(path, table), path });
  // An absolute path asks nothing of the current directory (Deno's cwd() needs --allow-read).
  if (candidate.startsWith("/")) return open(candidate);
  if (candidate.includes("/")) return open(absolutePath(candidate, adapter.cwd()));
  const dirs = orElse(() => adapter.getEnv("LD_LIBRARY_PATH") ?? "", null); // glibc splits at : ;
  if (dirs === null || dirs !== "" && dirs.split(/[:;]/).some((dir) => !dir.startsWith("/"))) {
    const which = dirs === null
      ? "LD_LIBRARY_PATH cannot be read (on Deno: --allow-env=LD_LIBRARY_PATH)"
      : `LD_LIBRARY_PATH=${JSON.stringify(dirs)} has an empty or relative element`;
    throw new Error(
      `not asked of the system loader, which may search the current directory: ${which}`,
    );
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
