/**
 * Finding libcuda: where to look, in which order, and what to say when it is nowhere. The logic is
 * runtime-free: the caller passes a `tryOpen(path)` callback (`Deno.dlopen`, `bun:ffi`'s `dlopen`,
 * or a fake in tests), so the search order and the error messages can be tested anywhere.
 *
 * @module
 */

import { DriverLoadError } from "../core/errors.ts";

/** The environment variable that names the libcuda to load, overriding the search. */
export const LIBCUDA_ENV_VAR = "CKPT_LIBCUDA_PATH";

/** The name the system loader resolves (through `LD_LIBRARY_PATH`, `ld.so.cache` and its defaults). */
export const LIBCUDA_SONAME = "libcuda.so.1";

/**
 * Where NVIDIA drivers put libcuda on the common Linux distributions and container images, tried in
 * this order after the system loader. The toolkit's `stubs/libcuda.so` is left out on purpose: it
 * only links, every call fails with `CUDA_ERROR_STUB_LIBRARY`.
 */
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

/** One library path that was tried, and why it did not open. */
export interface TriedPath {
  /** The path (or bare name, for the system loader) given to `tryOpen`. */
  readonly path: string;
  /** Where the path came from. */
  readonly source: LibcudaSource;
  /** The loader's reason, on one line. */
  readonly reason: string;
}

/** Where a library path came from. */
export type LibcudaSource = "option" | "env" | "system" | "search";

/** What {@link findLibcuda} takes. */
export interface FindLibcudaOptions<T> {
  /**
   * Opens the library at `path` (a full path, or {@link LIBCUDA_SONAME} for the system loader), or
   * throws. It may also throw to reject a library that opened but is unusable (a stub); the message
   * becomes the reason listed for that path.
   */
  tryOpen(path: string): T;
  /** An explicit path: when given, it is the only one tried. */
  libraryPath?: string;
  /**
   * Reads an environment variable; may throw (Deno without `--allow-env`), which counts as "not
   * set" and is mentioned in the error should the search fail. Left out, the environment is not
   * read.
   */
  getEnv?(name: string): string | undefined;
  /** The operating system (`Deno.build.os`, `process.platform`); anything but "linux" fails at once. */
  platform?: string;
  /** The runtime, for advice in messages ("deno" adds the permission flags). */
  runtime?: string;
  /** The locations tried after the system loader; {@link LIBCUDA_SEARCH_PATHS} by default. */
  searchPaths?: readonly string[];
}

/** The library {@link findLibcuda} opened, with where it was found. */
export interface FoundLibcuda<T> {
  /** What `tryOpen` returned. */
  readonly library: T;
  /** The path that opened. */
  readonly path: string;
  /** Where that path came from. */
  readonly source: LibcudaSource;
  /** The paths tried before it, with their reasons. */
  readonly tried: readonly TriedPath[];
}

/**
 * Whether an error is a missing permission: Deno throws `Deno.errors.NotCapable` (Deno 2) or
 * `PermissionDenied` (Deno 1) when `--allow-ffi` or `--allow-env` is missing.
 */
export function isPermissionError(error: unknown): boolean {
  return error instanceof Error &&
    (error.name === "NotCapable" || error.name === "PermissionDenied");
}

/**
 * The message of an error, on one line, without what the line already says: Deno's doubled
 * "Could not open library: ", Bun's "Failed to open library", and the loader's repetition of the
 * path.
 */
function reasonOf(error: unknown, path?: string): string {
  let text = (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, " ")
    .trim();
  text = text.replace(/^(Could not open library: )+/, "");
  if (path) {
    for (const prefix of [`Failed to open library "${path}": `, `${path}: `]) {
      if (text.startsWith(prefix)) text = text.slice(prefix.length);
    }
  }
  return text || "failed to open (no reason given)";
}

/**
 * Finds and opens libcuda. The order: `libraryPath` when given, else the environment variable
 * {@link LIBCUDA_ENV_VAR} when set (either one is then the only path tried, so that a wrong
 * override is reported instead of silently replaced by another library), else
 * {@link LIBCUDA_SONAME} through the system loader, then {@link LIBCUDA_SEARCH_PATHS}.
 *
 * @throws {DriverLoadError} on a platform other than Linux; when `tryOpen` reports a missing
 * permission (saying which flag Deno needs); when nothing opens, listing every path tried with its
 * reason, the environment variable to set and the permissions Deno needs.
 *
 * @example
 * ```ts
 * import { findLibcuda } from "./find.ts";
 * const found = findLibcuda({
 *   tryOpen: (path) => {
 *     throw new Error(`${path}: cannot open shared object file`);
 *   },
 *   platform: "linux",
 * });
 * ```
 */
export function findLibcuda<T>(options: FindLibcudaOptions<T>): FoundLibcuda<T> {
  const runtime = options.runtime ?? "";
  const isDeno = runtime.toLowerCase() === "deno";
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
        `SimulatedDriver from @ckpt/cuda/mock as { driver } (or setDefaultDriver) to run on the ` +
        `simulator.`,
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
