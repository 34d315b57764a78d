/**
 * GPU memory per process through NVML (`libnvidia-ml.so.1`, which NVIDIA's driver installs next to
 * libcuda), bound through the same runtime adapters as libcuda (`adapter.ts`). Optional: where it
 * cannot be loaded, the listing says GPU memory is unknown, and why.
 *
 * The library is found as libcuda is, never in the current directory: the path given, else the
 * environment variable `CKPT_LIBNVML_PATH`, else the system loader's own search for
 * `libnvidia-ml.so.1` (asked for the absolute path, `loader.ts`), else the driver's usual
 * directories. Every NVML call but `nvmlErrorString` runs off the main thread (`nvmlInit_v2` can
 * take seconds while the driver brings GPUs up).
 *
 * `nvmlProcessInfo_t` (nvml.h, CUDA 11 and later; `nvmlProcessInfo_v2_t` is the same) is 24 bytes:
 * `unsigned int pid` at 0, 4 bytes of padding, `unsigned long long usedGpuMemory` at 8,
 * `unsigned int gpuInstanceId` at 16 and `computeInstanceId` at 20. The `_v3` and `_v2` list
 * functions take it; the unversioned one (a 16-byte struct) is not bound.
 *
 * @module
 */

import { nativeBuffer } from "../core/structs.ts";
import type { GpuMemory, GpuMemoryReport } from "../core/host.ts";
import { formatGpuUuid, parseGpuUuid } from "../core/uuid.ts";
import type { FfiAdapter, FfiLibrary, NativeArg } from "./adapter.ts";
import { LIBCUDA_SEARCH_PATHS, LIBCUDA_SONAME } from "./find.ts";
import { askSystemLoader } from "./loader.ts";
import type { CudaForeignFunction } from "./symbols.ts";

/** The name the system loader resolves for NVML. */
export const NVML_SONAME = "libnvidia-ml.so.1";

/** The environment variable that names the NVML library to load, overriding the search. */
export const NVML_ENV_VAR = "CKPT_LIBNVML_PATH";

/** Size in bytes of one `nvmlProcessInfo_t` (v2/v3 list functions). */
export const NVML_PROCESS_INFO_SIZE = 24;
/** Offset of `usedGpuMemory` in `nvmlProcessInfo_t` (after `pid` and 4 bytes of padding). */
export const NVML_USED_MEMORY_OFFSET = 8;
/** `NVML_VALUE_NOT_AVAILABLE`: what `usedGpuMemory` holds where NVML cannot tell. */
export const NVML_VALUE_NOT_AVAILABLE = 0xffff_ffff_ffff_ffffn;

/** `NVML_ERROR_INSUFFICIENT_SIZE`: the list is longer than the room given. */
const NVML_ERROR_INSUFFICIENT_SIZE = 7;
/** `sizeof(nvmlMemory_t)`: total, free and used, three unsigned long long. */
export const NVML_MEMORY_SIZE = 24;
/** The offset of `free` in `nvmlMemory_t`. */
export const NVML_MEMORY_FREE_OFFSET = 8;
/** `NVML_DEVICE_UUID_V2_BUFFER_SIZE`: room for a UUID with its NUL. */
const UUID_BUFFER_SIZE = 96;

/** A function that can wait: it runs off the main thread. */
const WAITS = { nonblocking: true } as const;

/** A process-list function: it can wait, and an NVML may have only one of the two versions. */
const LIST_PROCESSES = {
  parameters: ["u64", "buffer", "buffer"],
  result: "i32",
  nonblocking: true,
  optional: true,
} as const;

/** The NVML functions bound, by their C names. Every one returns an `nvmlReturn_t` (an int). */
export const NVML_SYMBOLS = {
  // nvmlReturn_t nvmlInit_v2(void)
  nvmlInit_v2: { parameters: [], result: "i32", ...WAITS },
  // nvmlReturn_t nvmlShutdown(void)
  nvmlShutdown: { parameters: [], result: "i32", ...WAITS },
  // const char *nvmlErrorString(nvmlReturn_t result): a table lookup, never waits
  nvmlErrorString: { parameters: ["i32"], result: "u64" },
  // nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
  nvmlDeviceGetCount_v2: { parameters: ["buffer"], result: "i32", ...WAITS },
  // nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
  nvmlDeviceGetHandleByIndex_v2: { parameters: ["u32", "buffer"], result: "i32", ...WAITS },
  // nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
  nvmlDeviceGetUUID: { parameters: ["u64", "buffer", "u32"], result: "i32", ...WAITS },
  // nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *infoCount,
  //   nvmlProcessInfo_t *infos)
  nvmlDeviceGetComputeRunningProcesses_v3: LIST_PROCESSES,
  // nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, unsigned int *infoCount,
  //   nvmlProcessInfo_v2_t *infos): the same 24-byte struct, in older NVMLs
  nvmlDeviceGetComputeRunningProcesses_v2: LIST_PROCESSES,
  // nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory): total, free
  // and used bytes (three unsigned long long); optional, as only the free memory needs it
  nvmlDeviceGetMemoryInfo: {
    parameters: ["u64", "buffer"],
    result: "i32",
    ...WAITS,
    optional: true,
  },
} as const satisfies Record<string, CudaForeignFunction>;

/** The C names of {@link NVML_SYMBOLS}. */
export type NvmlSymbolName = keyof typeof NVML_SYMBOLS;

/** Options of {@link openNvml}. */
export interface NvmlOptions {
  /** The NVML library to load (then the only one tried); a relative path gets the cwd in front. */
  libraryPath?: string;
  /** Where to look after the system loader; the directories libcuda is looked for in, by default. */
  searchPaths?: readonly string[];
  /**
   * Keep NVML initialised from the first read until {@link Nvml.close}, instead of one
   * `nvmlInit_v2`/`nvmlShutdown` pair per read: a read then costs a few list calls instead of
   * NVML's start-up (what the room check before each checkpoint and restore reads). Default false.
   */
  keepInitialized?: boolean;
}

/** NVML, opened: reads GPU memory per process, and closes. */
export interface Nvml {
  /** The absolute path of the library that opened. */
  readonly libraryPath: string;
  /**
   * GPU memory by pid and free memory by GPU, read in one NVML session (init, the GPUs' process
   * lists and memory, shutdown), or in the session kept open (`keepInitialized`).
   */
  gpuMemory(): Promise<GpuMemoryReport>;
  /** Closes the library (on Bun, its worker threads too). Once no call is in flight. */
  close(): Promise<void>;
}

/** The usual places of `libnvidia-ml.so.1`: the driver puts it next to libcuda. */
export const NVML_SEARCH_PATHS: readonly string[] = LIBCUDA_SEARCH_PATHS.map((path) =>
  path.slice(0, -LIBCUDA_SONAME.length) + NVML_SONAME
);

/**
 * Finds and opens NVML: `libraryPath`, else {@link NVML_ENV_VAR}, else the system loader, else
 * {@link NVML_SEARCH_PATHS}. Only absolute paths reach the runtime's `dlopen`.
 *
 * @throws {Error} listing every path tried with its reason, when none opens.
 */
export function openNvml(adapter: FfiAdapter, options: NvmlOptions = {}): Nvml {
  let explicit = options.libraryPath;
  let envNote = "";
  if (!explicit) {
    try {
      explicit = adapter.getEnv(NVML_ENV_VAR) || undefined;
    } catch {
      envNote = ` (${NVML_ENV_VAR} could not be read, so it counted as not set)`;
    }
  }
  const candidates = explicit
    ? [explicit]
    : [NVML_SONAME, ...(options.searchPaths ?? NVML_SEARCH_PATHS)];
  const byReason = new Map<string, string[]>();
  for (const candidate of candidates) {
    try {
      return new NvmlLibrary(
        adapter,
        ...openOne(adapter, candidate),
        options.keepInitialized ?? false,
      );
    } catch (error) {
      const reason = shortReason(error, candidate);
      byReason.set(reason, [...byReason.get(reason) ?? [], candidate]);
    }
  }
  const tried = [...byReason].map(([reason, paths]) => `${paths.join(", ")}: ${reason}`);
  throw new Error(
    `NVML (${NVML_SONAME}) could not be loaded, so GPU memory is unknown${envNote}; tried ${
      tried.join("; ")
    }`,
  );
}

/** A loader's message without the runtime's prefixes and the path it repeats. */
function shortReason(error: unknown, candidate: string): string {
  const text = (error instanceof Error ? error.message : String(error))
    .replaceAll("Could not open library: ", "")
    .replaceAll(`Failed to open library "${candidate}": `, "")
    .replaceAll(`${candidate}: `, "");
  return text.replace(/\s*\n\s*/g, " ").trim() || "failed to open (no reason given)";
}

/** Opens one candidate by its absolute path (a bare name: the path the system loader picks). */
function openOne(adapter: FfiAdapter, candidate: string): [FfiLibrary<NvmlSymbolName>, string] {
  if (!candidate.includes("/")) {
    const located = askSystemLoader(adapter, candidate);
    try {
      return [adapter.open(located.path, NVML_SYMBOLS), located.path];
    } finally {
      located.release();
    }
  }
  const path = candidate.startsWith("/") ? candidate : `${adapter.cwd()}/${candidate}`;
  return [adapter.open(path, NVML_SYMBOLS), path];
}

/** NVML on a runtime's adapter. */
class NvmlLibrary implements Nvml {
  readonly libraryPath: string;
  readonly #adapter: FfiAdapter;
  readonly #lib: FfiLibrary<NvmlSymbolName>;
  /** Buffers of calls not yet settled, kept reachable until they do. */
  readonly #inFlight = new Set<readonly NativeArg[]>();
  #busy: Promise<unknown> = Promise.resolve();
  readonly #keep: boolean;
  /** Whether a kept `nvmlInit_v2` waits for its `nvmlShutdown` (at close). */
  #initialized = false;

  constructor(
    adapter: FfiAdapter,
    lib: FfiLibrary<NvmlSymbolName>,
    path: string,
    keepInitialized: boolean,
  ) {
    this.#adapter = adapter;
    this.#lib = lib;
    this.libraryPath = path;
    this.#keep = keepInitialized;
  }

  gpuMemory(): Promise<GpuMemoryReport> {
    // One session at a time: NVML counts inits, and a shutdown must match its own init.
    const run = this.#busy.then(() => this.#session(), () => this.#session());
    this.#busy = run.catch(() => {});
    return run;
  }

  async close(): Promise<void> {
    await this.#busy;
    if (this.#initialized) {
      this.#initialized = false;
      await this.#call("nvmlShutdown", []).catch(() => {});
    }
    await this.#lib.close();
  }

  async #session(): Promise<GpuMemoryReport> {
    if (!this.#initialized) {
      const init = await this.#call("nvmlInit_v2", []);
      if (init !== 0) return { unknown: this.#failure("nvmlInit_v2", init) };
      if (!this.#keep) {
        try {
          return await this.#read();
        } finally {
          await this.#call("nvmlShutdown", []);
        }
      }
      this.#initialized = true;
    }
    return await this.#read();
  }

  async #read(): Promise<GpuMemoryReport> {
    const present = this.#lib.present;
    const list = present.has("nvmlDeviceGetComputeRunningProcesses_v3")
      ? "nvmlDeviceGetComputeRunningProcesses_v3"
      : present.has("nvmlDeviceGetComputeRunningProcesses_v2")
      ? "nvmlDeviceGetComputeRunningProcesses_v2"
      : undefined;
    if (!list) {
      return {
        unknown: `${this.libraryPath} has neither nvmlDeviceGetComputeRunningProcesses_v3 nor _v2`,
      };
    }
    const count = nativeBuffer(4);
    let code = await this.#call("nvmlDeviceGetCount_v2", [count]);
    if (code !== 0) return { unknown: this.#failure("nvmlDeviceGetCount_v2", code) };
    const byPid = new Map<number, Record<string, number> | "unknown">();
    const freeMiB = new Map<string, number>();
    const totalMiB = new Map<string, number>();
    for (let index = 0; index < u32(count, 0); index++) {
      const handleOut = nativeBuffer(8);
      code = await this.#call("nvmlDeviceGetHandleByIndex_v2", [index, handleOut]);
      if (code !== 0) {
        return { unknown: this.#failure(`nvmlDeviceGetHandleByIndex_v2 (GPU ${index})`, code) };
      }
      const handle = new DataView(handleOut.buffer).getBigUint64(0, true);
      const uuidOut = nativeBuffer(UUID_BUFFER_SIZE);
      code = await this.#call("nvmlDeviceGetUUID", [handle, uuidOut, UUID_BUFFER_SIZE]);
      if (code !== 0) return { unknown: this.#failure(`nvmlDeviceGetUUID (GPU ${index})`, code) };
      const uuid = sameForm(cText(uuidOut));
      // Free memory where NVML tells it; a GPU it does not answer for is left out (never checked).
      if (present.has("nvmlDeviceGetMemoryInfo")) {
        const memory = nativeBuffer(NVML_MEMORY_SIZE);
        if (await this.#call("nvmlDeviceGetMemoryInfo", [handle, memory]) === 0) {
          const view = new DataView(memory.buffer);
          freeMiB.set(uuid, Number(view.getBigUint64(NVML_MEMORY_FREE_OFFSET, true)) / 2 ** 20);
          totalMiB.set(uuid, Number(view.getBigUint64(0, true)) / 2 ** 20);
        }
      }
      const entries = await this.#processes(list, handle, `${list} (GPU ${index}, ${uuid})`);
      if (typeof entries === "string") return { unknown: entries };
      for (const { pid, bytes } of entries) {
        let held = byPid.get(pid);
        if (held === "unknown") continue;
        if (bytes === NVML_VALUE_NOT_AVAILABLE) {
          byPid.set(pid, "unknown");
          continue;
        }
        if (!held) byPid.set(pid, held = {});
        // A process on several MIG instances of one GPU appears once per instance.
        held[uuid] = (held[uuid] ?? 0) + Number(bytes) / 2 ** 20;
      }
    }
    return { byPid: byPid as ReadonlyMap<number, GpuMemory>, freeMiB, totalMiB };
  }

  /** One GPU's compute processes, or why they could not be read. */
  async #processes(
    symbol: NvmlSymbolName,
    handle: bigint,
    what: string,
  ): Promise<{ pid: number; bytes: bigint }[] | string> {
    let room = 64;
    // Processes come and go between the calls: grow the room a few times, then give up.
    for (let attempt = 0; attempt < 5; attempt++) {
      const count = nativeBuffer(4);
      new DataView(count.buffer).setUint32(0, room, true);
      const infos = nativeBuffer(room * NVML_PROCESS_INFO_SIZE);
      const code = await this.#call(symbol, [handle, count, infos]);
      if (code === NVML_ERROR_INSUFFICIENT_SIZE) {
        room = u32(count, 0) + 16;
        continue;
      }
      if (code !== 0) return this.#failure(what, code);
      const view = new DataView(infos.buffer);
      return Array.from({ length: u32(count, 0) }, (_, i) => ({
        pid: view.getUint32(i * NVML_PROCESS_INFO_SIZE, true),
        bytes: view.getBigUint64(i * NVML_PROCESS_INFO_SIZE + NVML_USED_MEMORY_OFFSET, true),
      }));
    }
    return `${what}: the list kept growing faster than it could be read`;
  }

  /** A call off the main thread, its buffers kept reachable until it settles. */
  async #call(symbol: NvmlSymbolName, args: readonly NativeArg[]): Promise<number> {
    this.#inFlight.add(args);
    try {
      return await this.#lib.callOffThread({ symbol, args });
    } finally {
      this.#inFlight.delete(args);
    }
  }

  /** `what failed: <nvmlErrorString> (NVML code n)`. */
  #failure(what: string, code: number): string {
    let text = "no description";
    const address = BigInt(this.#lib.call({ symbol: "nvmlErrorString", args: [code] }));
    if (address !== 0n) text = this.#adapter.cString(address);
    return `${what} failed: ${text} (NVML code ${code})`;
  }
}

/** The unsigned int at `offset`. */
function u32(buf: Uint8Array, offset: number): number {
  return new DataView(buf.buffer, buf.byteOffset).getUint32(offset, true);
}

/** A GPU UUID in the form the driver's GPU list uses (lowercase hex); another text as it is. */
function sameForm(uuid: string): string {
  try {
    return formatGpuUuid(parseGpuUuid(uuid));
  } catch {
    return uuid;
  }
}

/** The NUL-terminated text at the start of a buffer. */
function cText(buf: Uint8Array): string {
  const end = buf.indexOf(0);
  return new TextDecoder().decode(buf.subarray(0, end < 0 ? buf.length : end));
}
