/**
 * Digests of a snapshot's files: the chunked SHA-256, the SHA-256 of the SHA-256s of a file's 8 MiB
 * pieces in order (an empty file: the SHA-256 of nothing), whose pieces are hashed at once on every
 * core, in worker threads (`digest_worker.ts`), as one SHA-256 stream cannot be. With coreutils:
 * `split -b 8M --filter='sha256sum | head -c 64 | xxd -r -p' FILE | sha256sum`.
 *
 * @module
 */

import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { messageOf } from "../core/errors.ts";
import { workerScript } from "./worker_script.ts";
import { pinned } from "./private.ts";
import type { PieceReply, PieceRequest, PiecesDone } from "./digest_worker.ts";

/** Bytes of one piece of a file's chunked SHA-256. */
export const PIECE_BYTES = 8 * 2 ** 20;
/** Below this many bytes in all, pieces are hashed on the calling thread: no worker is started. */
const WORKERS_FROM_BYTES = 64 * 2 ** 20;

/** What a digest is of: a file already open, its size, and its name for messages. */
export interface DigestSource {
  readonly handle: FileHandle;
  readonly bytes: number;
  readonly name: string;
}

/** How digests are computed: `threads` worker threads (default: one per core; 0: none). */
export interface DigestOptions {
  readonly signal?: AbortSignal;
  readonly threads?: number;
  /**
   * Told each source's digest (by its index) once its last piece is hashed, the first sources
   * first; what it throws ends the hashing and rejects `digestAll`.
   */
  readonly onDigest?: (file: number, digest: string) => void;
}

/**
 * The chunked SHA-256 of each source (hex), in their order. Every piece is read from the open file
 * and hashed, in `threads` worker threads at once (one per core by default) where there is enough
 * to hash. Rejects at the first piece that cannot be read, or once `signal` is aborted.
 */
export async function digestAll(
  sources: readonly DigestSource[],
  options: DigestOptions = {},
): Promise<string[]> {
  const pieces: { file: number; index: number }[] = [];
  const digests = sources.map((s, file) => {
    const count = Math.ceil(s.bytes / PIECE_BYTES);
    for (let index = 0; index < count; index++) pieces.push({ file, index });
    return new Array<Uint8Array>(count);
  });
  const left = digests.map((list) => list.length);
  const outers: string[] = [];
  const outer = (file: number) => {
    const hash = createHash("sha256");
    for (const d of digests[file]) hash.update(d);
    outers[file] = hash.digest("hex");
    options.onDigest?.(file, outers[file]);
  };
  // Files of no bytes have no pieces: done at once.
  for (const [file, n] of left.entries()) if (n === 0) outer(file);
  const hashed = (file: number, index: number, digest: Uint8Array) => {
    digests[file][index] = digest;
    if (--left[file] === 0) outer(file);
  };
  const total = sources.reduce((sum, s) => sum + s.bytes, 0);
  // Workers where there is enough to hash, or where they are asked for.
  const asked = options.threads !== undefined;
  const threads = Math.min(options.threads ?? availableParallelism(), pieces.length);
  if (threads > 0 && (asked || total >= WORKERS_FROM_BYTES)) {
    await inWorkers(sources, pieces, hashed, threads, options.signal);
  } else {
    for (const { file, index } of pieces) {
      if (options.signal?.aborted) throw options.signal.reason;
      hashed(file, index, await hashHere(sources[file], index));
    }
  }
  return outers;
}

/** The SHA-256 of piece `index` of `s`, read and hashed on this thread. */
async function hashHere(s: DigestSource, index: number): Promise<Uint8Array> {
  const offset = index * PIECE_BYTES;
  const length = Math.min(PIECE_BYTES, s.bytes - offset);
  const buffer = new Uint8Array(length);
  for (let got = 0, n = 0; got < length; got += n) {
    n = (await s.handle.read(buffer, got, length - got, offset + got)).bytesRead;
    if (n === 0) throw new Error(`${s.name} ended at ${offset + got} bytes, not ${s.bytes}`);
  }
  return new Uint8Array(createHash("sha256").update(buffer).digest());
}

/** Hashes `pieces` in `threads` workers, each sent the next piece once it answers. */
async function inWorkers(
  sources: readonly DigestSource[],
  pieces: readonly { file: number; index: number }[],
  hashed: (file: number, index: number, digest: Uint8Array) => void,
  threads: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const url = workerScript(import.meta.url, "os", "digest_worker");
  const workers: Worker[] = [];
  const done = Promise.withResolvers<void>();
  let next = 0, answered = 0, settled = false;
  const end = (err?: unknown) => {
    settled = true;
    if (err === undefined) done.resolve();
    else done.reject(err);
  };
  const send = (w: Worker) => {
    if (next >= pieces.length || settled) return;
    const { file, index } = pieces[next];
    const s = sources[file], offset = index * PIECE_BYTES;
    const length = Math.min(PIECE_BYTES, s.bytes - offset);
    w.postMessage({ id: next++, path: pinned(s.handle), offset, length } satisfies PieceRequest);
  };
  const onAbort = () => end(signal!.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (signal?.aborted) throw signal.reason;
    for (let i = 0; i < threads && !settled; i++) {
      let w: Worker;
      try {
        w = new Worker(url, { type: "module" });
      } catch (err) {
        throw new Error(`a digest worker cannot start: ${messageOf(err)}`, { cause: err });
      }
      workers.push(w);
      w.addEventListener("message", ({ data: reply }: MessageEvent<PieceReply>) => {
        if ("closed" in reply || settled) return;
        const { file, index } = pieces[reply.id];
        if ("error" in reply) {
          return end(new Error(`${sources[file].name} cannot be read: ${reply.error}`));
        }
        try {
          hashed(file, index, reply.digest);
        } catch (err) {
          return end(err);
        }
        if (++answered === pieces.length) end();
        else send(w);
      });
      w.addEventListener("error", (event: ErrorEvent) => {
        event.preventDefault();
        end(new Error(`a digest worker failed: ${event.message}`));
      });
      send(w);
    }
    await done.promise;
  } finally {
    settled = true;
    signal?.removeEventListener("abort", onAbort);
    // Each closes the files it opened (threads share the process's), then ends.
    await Promise.all(workers.map(closeWorker));
  }
}

/** Asks a worker to close its files and ends it; terminated after a second at most. */
function closeWorker(w: Worker): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      w.terminate();
      resolve();
    };
    const timer = setTimeout(done, 1000);
    w.addEventListener("message", (e: MessageEvent<PieceReply>) => "closed" in e.data && done());
    w.postMessage({ done: true } satisfies PiecesDone);
  });
}
