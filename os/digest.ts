// Digests of a snapshot's files: the chunked SHA-256, the SHA-256 of the SHA-256s of a file's 8 MiB
// pieces in order (an empty file: the SHA-256 of nothing), whose pieces are hashed at once on every
// core, in worker threads (`digest_worker.ts`) that every hashing under way shares, as one SHA-256
// stream cannot be. With coreutils:
// `split -b 8M --filter='sha256sum | head -c 64 | xxd -r -p' FILE | sha256sum`.

import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { messageOf } from "../core/errors.ts";
import { workerScript } from "./worker_script.ts";
import { pinned } from "./private.ts";
import type { PieceReply, PieceRequest } from "./digest_worker.ts";

/** Bytes of one piece of a file's chunked SHA-256. */
export const PIECE_BYTES = 8 * 2 ** 20;

/** What a digest is of: a file already open, its size, and its name for messages. */
export type DigestSource = Readonly<{ handle: FileHandle; bytes: number; name: string }>;

/**
 * The chunked SHA-256 of `s` (hex), its pieces asked of `hasher` at once, in order, but the first
 * whole ones that `known` holds, hashed before (where one could not be, `undefined`: asked then).
 */
export async function digestOf(
  hasher: PieceHasher,
  s: DigestSource,
  known: readonly Promise<Uint8Array | undefined>[] = [],
): Promise<string> {
  const ask = (i: number) => hasher.hash(s, i);
  const whole = Math.min(Math.floor(s.bytes / PIECE_BYTES), known.length);
  const piece = (i: number) => i < whole ? known[i].then((d) => d ?? ask(i)) : ask(i);
  const hash = createHash("sha256");
  const pieces = Array.from({ length: Math.ceil(s.bytes / PIECE_BYTES) }, (_, i) => piece(i));
  for (const d of await Promise.all(pieces)) hash.update(d);
  return hash.digest("hex");
}

/** A piece to hash (as a worker is asked for it, of the file `s`), and who waits for it. */
interface Job extends Omit<PieceRequest, "path"> {
  readonly owner: PieceHasher;
  readonly s: DigestSource;
  readonly done: PromiseWithResolvers<Uint8Array>;
}

/**
 * Hashes pieces of open files as it is asked, in order: on the calling thread until `workersFrom`
 * bytes were asked of it (64 MiB by default), then in the worker threads that every hasher shares,
 * as many busy at once as the most that a hasher under way allows (`threads`, one per core by
 * default, less the cores that its `leave` says other work needs now; one at least). An abort of
 * `signal` rejects what is left; `close` waits for the pieces that a worker still reads.
 */
export class PieceHasher {
  static readonly #live = new Set<PieceHasher>();
  /** The workers, each with the piece it hashes. */
  static readonly #workers = new Map<Worker, Job | undefined>();
  static readonly #queue: Job[] = [];
  readonly #threads: number;
  readonly #workersFrom: number;
  readonly #signal: AbortSignal | undefined;
  readonly #leave: (() => number) | undefined;
  readonly #here: Job[] = [];
  readonly #flying = new Set<Job>();
  #asked = 0;
  #lane: Promise<void> | undefined;
  #drained: PromiseWithResolvers<void> | undefined;
  #halted: { why: unknown } | undefined;
  readonly #onAbort = () => this.#halt(this.#signal!.reason);

  constructor(
    o: { threads?: number; workersFrom?: number; signal?: AbortSignal; leave?: () => number } = {},
  ) {
    this.#threads = o.threads ?? availableParallelism();
    this.#workersFrom = o.workersFrom ?? 64 * 2 ** 20;
    [this.#signal, this.#leave] = [o.signal, o.leave];
    PieceHasher.#live.add(this);
    o.signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** How many workers hash a piece now, for every hasher. */
  static get busy(): number {
    return [...PieceHasher.#workers.values()].filter(Boolean).length;
  }

  /** The SHA-256 of piece `index` of `s`. */
  hash(s: DigestSource, index: number): Promise<Uint8Array> {
    const offset = index * PIECE_BYTES, length = Math.min(PIECE_BYTES, s.bytes - offset);
    const job: Job = { owner: this, s, offset, length, done: Promise.withResolvers() };
    if (this.#signal?.aborted) this.#halt(this.#signal.reason);
    if (this.#halted) job.done.reject(this.#halted.why);
    else if (this.#threads > 0 && (this.#asked += length) >= this.#workersFrom) {
      PieceHasher.#queue.push(...this.#here.splice(0), job);
      PieceHasher.#pump();
    } else {
      this.#here.push(job);
      this.#lane ??= (async () => {
        for (let next; (next = this.#here.shift());) {
          await hashHere(next).then(next.done.resolve, next.done.reject);
        }
        this.#lane = undefined;
      })();
    }
    return job.done.promise;
  }

  /** Drops what is not hashed yet, waits for what is, and ends the workers once no hasher is left. */
  async close(): Promise<void> {
    this.#halt(new Error("the hashing was closed"));
    this.#signal?.removeEventListener("abort", this.#onAbort);
    await this.#lane;
    if (this.#flying.size > 0) await (this.#drained = Promise.withResolvers()).promise;
    PieceHasher.#live.delete(this);
    if (PieceHasher.#live.size > 0) return;
    // None reads a file now: their own descriptors are closed.
    for (const w of PieceHasher.#workers.keys()) w.terminate();
    PieceHasher.#workers.clear();
  }

  /** Rejects every piece of this hasher's that is not hashed yet. */
  #halt(why: unknown): void {
    this.#halted ??= { why };
    const queue = PieceHasher.#queue, others = queue.filter((j) => j.owner !== this);
    for (const job of [...this.#here.splice(0), ...queue, ...this.#flying]) {
      if (job.owner === this) job.done.reject(why);
    }
    queue.splice(0, queue.length, ...others);
  }

  /** Gives an idle worker (or a new one) the next piece, while fewer than allowed are busy. */
  static #pump(): void {
    const queue = PieceHasher.#queue, workers = PieceHasher.#workers;
    const most = Math.max(
      ...[...PieceHasher.#live].map((h) => Math.max(1, h.#threads - (h.#leave?.() ?? 0))),
    );
    while (queue.length > 0 && PieceHasher.busy < most) {
      const job = queue.shift()!;
      const w = [...workers].find(([, busy]) => !busy)?.[0] ?? PieceHasher.#start(job);
      if (!w) continue;
      workers.set(w, job);
      job.owner.#flying.add(job);
      const { offset, length } = job;
      w.postMessage({ path: pinned(job.s.handle), offset, length } satisfies PieceRequest);
    }
  }

  /** A new worker, or none (`job` rejected, saying why). */
  static #start(job: Job): Worker | undefined {
    let w: Worker;
    try {
      w = new Worker(workerScript(import.meta.url, "os", "digest_worker"), { type: "module" });
    } catch (err) {
      job.done.reject(new Error(`a digest worker cannot start: ${messageOf(err)}`, { cause: err }));
      return undefined;
    }
    w.addEventListener("message", (e: MessageEvent<PieceReply>) => PieceHasher.#answer(w, e.data));
    w.addEventListener("error", (event: ErrorEvent) => {
      event.preventDefault();
      PieceHasher.#answer(w, { failed: event.message });
    });
    return w;
  }

  /** A worker's answer (or its failure, which ends it): its piece settled, the next one sent. */
  static #answer(w: Worker, reply: PieceReply | { failed: string }): void {
    const job = PieceHasher.#workers.get(w);
    PieceHasher.#workers.delete(w);
    if ("failed" in reply) w.terminate();
    else PieceHasher.#workers.set(w, undefined);
    if (job) {
      const { owner, s, done } = job;
      owner.#flying.delete(job);
      if ("digest" in reply) done.resolve(reply.digest);
      else if ("error" in reply) done.reject(new Error(`${s.name} cannot be read: ${reply.error}`));
      else done.reject(new Error(`a digest worker failed: ${reply.failed}`));
      if (owner.#flying.size === 0) owner.#drained?.resolve();
    }
    PieceHasher.#pump();
  }
}

/** The SHA-256 of a piece, read and hashed on this thread. */
async function hashHere({ s, offset, length }: Job): Promise<Uint8Array> {
  const buffer = new Uint8Array(length);
  for (let got = 0, n = 0; got < length; got += n) {
    n = (await s.handle.read(buffer, got, length - got, offset + got)).bytesRead;
    if (n === 0) throw new Error(`${s.name} ended at ${offset + got} bytes, not ${s.bytes}`);
  }
  return new Uint8Array(createHash("sha256").update(buffer).digest());
}
