// GPU memory per process through NVML (`libnvidia-ml.so.1`, next to libcuda), found as libcuda is
// (`find.ts`). Optional: where it cannot be loaded, GPU memory is unknown, saying why. Every call
// but `nvmlErrorString` runs off the main thread (`nvmlInit_v2` can take seconds). The `_v3` and
// `_v2` lists take `nvmlProcessInfo_t` (24 bytes: `unsigned int pid` at 0, `unsigned long long
// usedGpuMemory` at 8); `nvmlMemory_t` is three `unsigned long long`: total, free, used.

import type { GpuMemory, GpuMemoryReport } from "../core/host.ts";
import { gpuUuidOf, orElse } from "../core/options.ts";
import type { FfiAdapter, FfiLibrary, NativeArg } from "./adapter.ts";
import { cText, nativeBuffer, readInt } from "./adapter.ts";
import { LIBCUDA_SEARCH_PATHS, LIBCUDA_SONAME, openCandidate, reasonOf } from "./find.ts";
import { type CudaForeignFunction, MAY_LACK, WAITS } from "./symbols.ts";

const NVML_SONAME = "libnvidia-ml.so.1";
/** The environment variable that names the NVML library to load, overriding the search. */
const NVML_ENV_VAR = "CKPT_LIBNVML_PATH";
/** `NVML_VALUE_NOT_AVAILABLE`: what `usedGpuMemory` holds where NVML cannot tell. */
export const NVML_VALUE_NOT_AVAILABLE = 0xffff_ffff_ffff_ffffn;
/** `NVML_ERROR_INSUFFICIENT_SIZE`: the list is longer than the room given. */
const NVML_ERROR_INSUFFICIENT_SIZE = 7;
/** `NVML_DEVICE_UUID_V2_BUFFER_SIZE`: room for a UUID with its NUL. */
const UUID_BUFFER_SIZE = 96;

/** A process-list function: an NVML may have only one of the two versions. */
const LIST = { parameters: ["u64", "buffer", "buffer"], ...MAY_LACK } as const;

/** The NVML functions bound, by their C names; each returns an `nvmlReturn_t` but the last. */
const NVML_SYMBOLS = {
  nvmlInit_v2: { parameters: [], ...WAITS }, // (void)
  nvmlShutdown: { parameters: [], ...WAITS }, // (void)
  nvmlDeviceGetCount_v2: { parameters: ["buffer"], ...WAITS }, // (unsigned int *count)
  // (unsigned int index, nvmlDevice_t *device)
  nvmlDeviceGetHandleByIndex_v2: { parameters: ["u32", "buffer"], ...WAITS },
  // (nvmlDevice_t, char *uuid, unsigned int length)
  nvmlDeviceGetUUID: { parameters: ["u64", "buffer", "u32"], ...WAITS },
  // (nvmlDevice_t, unsigned int *infoCount, nvmlProcessInfo_t *infos)
  nvmlDeviceGetComputeRunningProcesses_v3: LIST,
  nvmlDeviceGetComputeRunningProcesses_v2: LIST,
  // (nvmlDevice_t, nvmlMemory_t *memory): only the free memory needs it
  nvmlDeviceGetMemoryInfo: { parameters: ["u64", "buffer"], ...MAY_LACK },
  // const char *nvmlErrorString(nvmlReturn_t): a table lookup, never waits
  nvmlErrorString: { parameters: ["i32"], result: "u64" },
} as const satisfies Record<string, CudaForeignFunction>;

type NvmlSymbolName = keyof typeof NVML_SYMBOLS;

/** Options of {@link openNvml}. */
export interface NvmlOptions {
  /** The NVML library to load (then the only one tried); a relative path gets the cwd in front. */
  libraryPath?: string;
  /**
   * Keep NVML initialised from the first read until {@link Nvml.close}, not one init and shutdown
   * per read: for the room check, which reads before each checkpoint and restore. Default false.
   */
  keepInitialized?: boolean;
}

/**
 * Finds and opens NVML: `libraryPath`, else {@link NVML_ENV_VAR}, else the system loader, else
 * libcuda's usual directories (NVML lies next to it).
 *
 * @throws {Error} listing every path tried with its reason, when none opens.
 */
export function openNvml(adapter: FfiAdapter, options: NvmlOptions = {}): Nvml {
  const env = options.libraryPath ? "" : orElse(() => adapter.getEnv(NVML_ENV_VAR) || "", null);
  const explicit = options.libraryPath || env;
  const dirs = LIBCUDA_SEARCH_PATHS.map((path) => path.slice(0, -LIBCUDA_SONAME.length));
  const candidates = explicit ? [explicit] : [NVML_SONAME, ...dirs.map((dir) => dir + NVML_SONAME)];
  const byReason = new Map<string, string[]>();
  for (const candidate of candidates) {
    try {
      const { lib, path } = openCandidate(adapter, candidate, NVML_SYMBOLS);
      return new Nvml(adapter, lib, path, options.keepInitialized ?? false);
    } catch (error) {
      const reason = reasonOf(error, candidate);
      byReason.set(reason, [...byReason.get(reason) ?? [], candidate]);
    }
  }
  const tried = [...byReason].map(([reason, paths]) => `${paths.join(", ")}: ${reason}`);
  const note = env === null ? ` (${NVML_ENV_VAR} could not be read, so it counted as not set)` : "";
  const unknown = `NVML (${NVML_SONAME}) could not be loaded, so GPU memory is unknown${note}`;
  throw new Error(`${unknown}; tried ${tried.join("; ")}`);
}

/** NVML, opened: reads GPU memory per process, and closes. */
export class Nvml {
  #busy: Promise<unknown> = Promise.resolve();
  /** Whether a kept `nvmlInit_v2` waits for its `nvmlShutdown` (at close). */
  #initialized = false;

  /** Use {@link openNvml}. */
  constructor(
    private readonly adapter: FfiAdapter,
    private readonly lib: FfiLibrary<NvmlSymbolName>,
    /** The absolute path of the library that opened. */
    readonly libraryPath: string,
    private readonly keep: boolean,
  ) {}

  /** GPU memory by pid and free memory by GPU, read in one NVML session (or the one kept open). */
  gpuMemory(): Promise<GpuMemoryReport> {
    // One session at a time: NVML counts inits, and a shutdown must match its own init.
    const run = this.#busy.then(() => this.#session(), () => this.#session());
    this.#busy = run.catch(() => {});
    return run;
  }

  /** Closes the library (on Bun, its worker threads too). Once no call is in flight. */
  async close(): Promise<void> {
    await this.#busy;
    if (this.#initialized) {
      this.#initialized = false;
      await this.#call("nvmlShutdown", []).catch(() => {});
    }
    await this.lib.close();
  }

  async #session(): Promise<GpuMemoryReport> {
    if (!this.#initialized) {
      const init = await this.#call("nvmlInit_v2", []);
      if (init !== 0) return { unknown: this.#failure("nvmlInit_v2", init) };
      if (!this.keep) return await this.#read().finally(() => this.#call("nvmlShutdown", []));
      this.#initialized = true;
    }
    return await this.#read();
  }

  async #read(): Promise<GpuMemoryReport> {
    const present = this.lib.present;
    const v3 = "nvmlDeviceGetComputeRunningProcesses_v3";
    const v2 = "nvmlDeviceGetComputeRunningProcesses_v2";
    const list = present.has(v3) ? v3 : present.has(v2) ? v2 : undefined;
    if (!list) return { unknown: `${this.libraryPath} has neither ${v3} nor _v2` };
    const count = nativeBuffer(4);
    let code = await this.#call("nvmlDeviceGetCount_v2", [count]);
    if (code !== 0) return { unknown: this.#failure("nvmlDeviceGetCount_v2", code) };
    const byPid = new Map<number, Record<string, number> | "unknown">();
    const freeMiB = new Map<string, number>(), totalMiB = new Map<string, number>();
    for (let index = 0; index < readInt(count, true); index++) {
      const handleOut = nativeBuffer(8);
      code = await this.#call("nvmlDeviceGetHandleByIndex_v2", [index, handleOut]);
      const which = `nvmlDeviceGetHandleByIndex_v2 (GPU ${index})`;
      if (code !== 0) return { unknown: this.#failure(which, code) };
      const handle = new DataView(handleOut.buffer).getBigUint64(0, true);
      const uuidOut = nativeBuffer(UUID_BUFFER_SIZE);
      code = await this.#call("nvmlDeviceGetUUID", [handle, uuidOut, UUID_BUFFER_SIZE]);
      if (code !== 0) return { unknown: this.#failure(`nvmlDeviceGetUUID (GPU ${index})`, code) };
      const text = cText(uuidOut), uuid = gpuUuidOf(text) ?? text; // as the driver lists GPUs
      // Free memory where NVML tells it; a GPU it does not answer for is left out (never checked).
      const memory = nativeBuffer(24), info = "nvmlDeviceGetMemoryInfo";
      if (present.has(info) && await this.#call(info, [handle, memory]) === 0) {
        const view = new DataView(memory.buffer);
        totalMiB.set(uuid, Number(view.getBigUint64(0, true)) / 2 ** 20);
        freeMiB.set(uuid, Number(view.getBigUint64(8, true)) / 2 ** 20);
      }
      const entries = await this.#processes(list, handle, `${list} (GPU ${index}, ${uuid})`);
      if (typeof entries === "string") return { unknown: entries };
      for (const { pid, bytes } of entries) {
        const held = byPid.get(pid);
        if (held === "unknown") continue;
        // A process on several MIG instances of one GPU appears once per instance.
        if (bytes === NVML_VALUE_NOT_AVAILABLE) byPid.set(pid, "unknown");
        else if (held) held[uuid] = (held[uuid] ?? 0) + Number(bytes) / 2 ** 20;
        else byPid.set(pid, { [uuid]: Number(bytes) / 2 ** 20 });
      }
    }
    return { byPid: byPid as ReadonlyMap<number, GpuMemory>, freeMiB, totalMiB };
  }

  /** One GPU's compute processes, or why they could not be read. */
  async #processes(symbol: NvmlSymbolName, handle: bigint, what: string) {
    // Processes come and go between the calls: grow the room a few times, then give up.
    for (let attempt = 0, room = 64; attempt < 5; attempt++) {
      const count = nativeBuffer(4);
      new DataView(count.buffer).setUint32(0, room, true);
      const infos = nativeBuffer(room * 24);
      const code = await this.#call(symbol, [handle, count, infos]);
      if (code === NVML_ERROR_INSUFFICIENT_SIZE) {
        room = readInt(count, true) + 16;
        continue;
      }
      if (code !== 0) return this.#failure(what, code);
      const view = new DataView(infos.buffer);
      return Array.from({ length: readInt(count, true) }, (_, i) => ({
        pid: view.getUint32(i * 24, true),
        bytes: view.getBigUint64(i * 24 + 8, true),
      }));
    }
    return `${what}: the list kept growing faster than it could be read`;
  }

  async #call(symbol: NvmlSymbolName, args: readonly NativeArg[]): Promise<number> {
    return await this.lib.callOffThread({ symbol, args });
  }

  /** `what failed: <nvmlErrorString> (NVML code n)`. */
  #failure(what: string, code: number): string {
    const address = BigInt(this.lib.call({ symbol: "nvmlErrorString", args: [code] }));
    const text = address === 0n ? "no description" : this.adapter.cString(address);
    return `${what} failed: ${text} (NVML code ${code})`;
  }
}
