// A worker thread of the Bun adapter (`bun_pool.ts`): it makes the calls it is sent, one at a time,
// with its own `dlopen` of the library (the loader's one copy), and answers each with the result
// and its copies of the buffers; asked to close, it closes its libraries and ends.

import { linkPointers } from "./adapter.ts";
import type { BunFfi, BunLibrary, WorkerClose, WorkerReply, WorkerRequest } from "./bun_types.ts";
import { importBunFfi } from "./bun_types.ts";

/** The worker's global scope, as far as it is used here (typed for both Deno and Bun checkers). */
const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent<WorkerRequest | WorkerClose>) => void) | null;
  postMessage(message: WorkerReply): void;
  process?: { exit(code?: number): never };
};
const ffiReady: Promise<BunFfi> = importBunFfi();
/** One library per function, opened on first use. */
const opened = new Map<string, BunLibrary>();

function call(ffi: BunFfi, req: WorkerRequest): WorkerReply {
  const key = `${req.path}\0${req.symbol}`;
  let lib = opened.get(key);
  if (!lib) opened.set(key, lib = ffi.dlopen(req.path, { [req.symbol]: req.definition }));
  linkPointers(req, (buf) => BigInt(ffi.ptr(buf)));
  const code = Number(lib.symbols[req.symbol](...req.args));
  // The link targets stay reachable (in `req`) up to here, past the synchronous call that reads them.
  return { id: req.id, code, buffers: req.args.map((a) => a instanceof Uint8Array ? a : null) };
}

/** Closes every library this worker opened, then ends the worker. */
function closeAndExit(): void {
  for (const lib of opened.values()) lib.close();
  opened.clear();
  scope.process?.exit(0);
}

/** The worker's message handler: a call, or the request to close. */
export function onWorkerMessage(event: MessageEvent<WorkerRequest | WorkerClose>): void {
  const message = event.data;
  ffiReady.then((ffi) => {
    if ("close" in message) closeAndExit();
    else scope.postMessage(call(ffi, message));
  }).catch((error: unknown) => {
    if ("close" in message) return closeAndExit();
    const text = error instanceof Error ? error.message : String(error);
    scope.postMessage({ id: message.id, error: text });
  });
}

scope.onmessage = onWorkerMessage;
