/**
 * A worker thread of the Bun binding. `bun:ffi` calls are synchronous, one at a time per thread,
 * so the long checkpoint calls (lock, checkpoint, restore, unlock) run here, one worker per call in
 * flight, each with its own `dlopen` of the same libcuda (the loader shares the one copy in the
 * process). It answers each {@link WorkerRequest} with the `CUresult`.
 *
 * Loaded by `ffi/bun.ts` only; not for import.
 *
 * @module
 */

import { encodeRestoreArgs } from "../core/structs.ts";
import { pinnedCopy } from "./common.ts";
import {
  type BunFfi,
  type BunLibrary,
  importBunFfi,
  type WorkerReply,
  type WorkerRequest,
} from "./bun_types.ts";
import { bunDefinition, type CudaSymbolName } from "./symbols.ts";

/** The worker's global scope, as far as it is used here (typed for both Deno and Bun checkers). */
interface WorkerScope {
  onmessage: ((event: MessageEvent<WorkerRequest>) => void) | null;
  postMessage(message: WorkerReply): void;
}

const scope = globalThis as unknown as WorkerScope;
const ffiReady: Promise<BunFfi> = importBunFfi();
/** One library per function, opened on first use: a missing symbol fails only its own calls. */
const bound = new Map<string, BunLibrary>();
let initialized = false;

function fn(ffi: BunFfi, path: string, name: CudaSymbolName): (...args: unknown[]) => number {
  const key = `${path}\0${name}`;
  let lib = bound.get(key);
  if (!lib) {
    lib = ffi.dlopen(path, { [name]: bunDefinition(name) });
    bound.set(key, lib);
  }
  return lib.symbols[name];
}

function call(ffi: BunFfi, req: WorkerRequest): number {
  const symbol = fn(ffi, req.path, req.symbol);
  const isRestore = req.symbol === "cuCheckpointProcessRestore";
  if (!initialized && (isRestore || req.symbol === "cuCheckpointProcessLock")) {
    // cuInit is per process and idempotent; NVIDIA's header asks it of the process that restores.
    // It is made before the first lock too: a process that checkpoints itself cannot make it
    // while its own CUDA is locked or checkpointed (the call would block until it is unlocked).
    // A failure is left for the checkpoint call itself to report.
    initialized = fn(ffi, req.path, "cuInit")(0) === 0;
  }
  if (!isRestore) return symbol(req.pid, req.args);
  if (req.pairs === null) return symbol(req.pid, null);
  const pairs = pinnedCopy(req.pairs);
  const args = encodeRestoreArgs(BigInt(ffi.ptr(pairs)), req.pairCount);
  const code = symbol(req.pid, args);
  // `pairs` and `args` stay reachable up to here, past the synchronous call that reads them.
  void pairs.byteLength;
  return code;
}

scope.onmessage = (event) => {
  const req = event.data;
  ffiReady.then((ffi) => {
    scope.postMessage({ id: req.id, code: call(ffi, req) });
  }).catch((error: unknown) => {
    scope.postMessage({
      id: req.id,
      error: error instanceof Error ? error.message : String(error),
    });
  });
};
