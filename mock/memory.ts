/**
 * Simulated GPU memory contents: sparse pages, so that a process of many GiB costs host memory
 * only for what a test writes. Unwritten bytes read as zero. And their hash, the chunked SHA-256
 * ({@link ChunkedSha256}), whose cost follows what was written, not the memory's size.
 *
 * @module
 */

import { createHash, type Hash } from "node:crypto";
import { describeValue } from "../core/uuid.ts";

/** Page size of the sparse store, in bytes. */
export const PAGE_SIZE = 64 * 1024;

/**
 * The chunk size of the chunked SHA-256 ({@link ChunkedSha256}), in bytes: 1 MiB. A multiple of
 * {@link PAGE_SIZE}.
 */
export const HASH_CHUNK_SIZE = 1024 * 1024;

/** Pages in one chunk of the chunked SHA-256. */
const PAGES_PER_CHUNK = HASH_CHUNK_SIZE / PAGE_SIZE;

/** Bytes of one SHA-256 digest. */
const DIGEST_BYTES = 32;

/**
 * The chunked SHA-256 of a run of bytes, computed from pieces of any size as they come (for
 * example GPU memory copied back to the host piece by piece), without holding the whole.
 *
 * The chunked SHA-256 of `n` bytes is defined so: split the bytes into chunks of
 * {@link HASH_CHUNK_SIZE} (1 MiB) bytes, the last chunk shorter where `n` is not a multiple of
 * it; take the SHA-256 of each chunk (32 bytes each); the result is the SHA-256 of those digests
 * concatenated in order, as 64 lowercase hex digits. No bytes make no chunks, whose result is the
 * SHA-256 of nothing (`e3b0c442...`). It is not the SHA-256 of the bytes themselves: it is a
 * hash over the chunks' hashes, so that a simulator can keep the digest of every chunk nobody
 * wrote. {@link MemoryImage.chunkedSha256} and {@link chunkedSha256} give the same value over the
 * same bytes. With coreutils: `split -b 1M --filter='sha256sum | head -c 64 | xxd -r -p' FILE |
 * sha256sum`.
 *
 * @example
 * ```ts
 * import { ChunkedSha256, chunkedSha256 } from "@ckpt/cuda/mock";
 *
 * const bytes = new Uint8Array(3 * 2 ** 20 + 5).fill(7);
 * const hasher = new ChunkedSha256();
 * for (let at = 0; at < bytes.length; at += 1000) hasher.update(bytes.subarray(at, at + 1000));
 * console.log(hasher.digest() === chunkedSha256(bytes)); // true
 * ```
 */
export class ChunkedSha256 {
  /** The hash over the chunks' digests. */
  readonly #outer: Hash = createHash("sha256");
  /** The hash of the chunk being fed, from its first byte on. */
  #chunk: Hash | undefined;
  /** Bytes of the current chunk fed so far. */
  #filled = 0;
  #done = false;

  /**
   * Feeds the next `bytes`, which continue those fed before; any piece size works, an empty one
   * included. Returns this hasher. Throws once {@link ChunkedSha256.digest} was called.
   */
  update(bytes: Uint8Array): this {
    if (!(bytes instanceof Uint8Array)) {
      throw new TypeError(`bytes must be a Uint8Array, got ${describeValue(bytes)}`);
    }
    if (this.#done) throw new Error("this ChunkedSha256 has given its digest: make a new one");
    for (let at = 0; at < bytes.length;) {
      const n = Math.min(HASH_CHUNK_SIZE - this.#filled, bytes.length - at);
      (this.#chunk ??= createHash("sha256")).update(bytes.subarray(at, at + n));
      this.#filled += n;
      at += n;
      if (this.#filled === HASH_CHUNK_SIZE) this.#endChunk();
    }
    return this;
  }

  /**
   * The chunked SHA-256 of every byte fed, as 64 lowercase hex digits. It can be asked once: the
   * hasher is finished then, and a later call throws.
   */
  digest(): string {
    if (this.#done) throw new Error("this ChunkedSha256 has given its digest: make a new one");
    if (this.#filled > 0) this.#endChunk();
    this.#done = true;
    return this.#outer.digest("hex");
  }

  #endChunk(): void {
    this.#outer.update(this.#chunk!.digest());
    this.#chunk = undefined;
    this.#filled = 0;
  }
}

/**
 * The chunked SHA-256 of `bytes` (defined at {@link ChunkedSha256}), as 64 lowercase hex digits:
 * what {@link MemoryImage.chunkedSha256} gives for memory holding these bytes.
 */
export function chunkedSha256(bytes: Uint8Array): string {
  return new ChunkedSha256().update(bytes).digest();
}

/** The contents of one process's GPU memory, wherever they are held (GPU or host). */
export class MemoryImage {
  /** The size of the memory in bytes. */
  readonly size: number;
  readonly #pages: Map<number, Uint8Array>;
  /**
   * The SHA-256 of every chunk, 32 bytes each, in chunk order (those of chunks in #stale are out
   * of date); made by the first {@link MemoryImage.chunkedSha256}.
   */
  #chunkDigests: Uint8Array | undefined;
  /** Chunks written since #chunkDigests was last brought up to date. */
  #stale = new Set<number>();
  /** The last result, until the next write. */
  #hex: string | undefined;

  /** An image of `size` bytes, all zero, or built from the given pages. */
  constructor(size: number, pages: Map<number, Uint8Array> = new Map()) {
    this.size = size;
    this.#pages = pages;
  }

  /** Writes `data` at byte `offset`. */
  write(offset: number, data: Uint8Array): void {
    this.#checkRange(offset, data.length);
    if (data.length === 0) return;
    this.#hex = undefined;
    if (this.#chunkDigests) {
      const last = Math.floor((offset + data.length - 1) / HASH_CHUNK_SIZE);
      for (let c = Math.floor(offset / HASH_CHUNK_SIZE); c <= last; c++) this.#stale.add(c);
    }
    this.#spans(offset, data.length, (index, within, done, n) => {
      let page = this.#pages.get(index);
      if (!page) this.#pages.set(index, page = new Uint8Array(PAGE_SIZE));
      page.set(data.subarray(done, done + n), within);
    });
  }

  /** Reads `length` bytes from byte `offset`. */
  read(offset: number, length: number): Uint8Array {
    this.#checkRange(offset, length);
    const out = new Uint8Array(length);
    this.#spans(offset, length, (index, within, done, n) => {
      const page = this.#pages.get(index);
      if (page) out.set(page.subarray(within, within + n), done);
    });
    return out;
  }

  /** Calls `fn` for each page the bytes from `offset` touch: page index, offset in it, bytes before, bytes in it. */
  #spans(
    offset: number,
    length: number,
    fn: (index: number, within: number, done: number, n: number) => void,
  ): void {
    let done = 0;
    while (done < length) {
      const at = offset + done;
      const within = at % PAGE_SIZE;
      const n = Math.min(PAGE_SIZE - within, length - done);
      fn(Math.floor(at / PAGE_SIZE), within, done, n);
      done += n;
    }
  }

  /**
   * A copy of every byte, as a driver's copy to or from the host makes one. The copy keeps the
   * chunk digests known so far (its own copy of them), so its first hash costs no more than the
   * original's next one would.
   */
  copy(): MemoryImage {
    const pages = new Map<number, Uint8Array>();
    for (const [i, p] of this.#pages) pages.set(i, p.slice());
    const copy = new MemoryImage(this.size, pages);
    copy.#chunkDigests = this.#chunkDigests?.slice();
    copy.#stale = new Set(this.#stale);
    copy.#hex = this.#hex;
    return copy;
  }

  /**
   * The chunked SHA-256 of every byte of the contents, unwritten (zero) bytes included, as 64
   * lowercase hex digits: the same as {@link chunkedSha256} of `read(0, size)` (the definition is
   * at {@link ChunkedSha256}). Its cost follows what was written: the first call hashes the 1 MiB
   * chunks ever written (an unwritten chunk's digest is the zero chunk's, computed once), a later
   * call only the chunks written since; both then hash 32 bytes per chunk (1.25 MiB for 40 GiB).
   * The result is kept until the next write.
   */
  chunkedSha256(): string {
    if (this.#hex !== undefined) return this.#hex;
    const chunks = Math.ceil(this.size / HASH_CHUNK_SIZE);
    let list = this.#chunkDigests;
    if (!list) {
      list = this.#chunkDigests = new Uint8Array(chunks * DIGEST_BYTES);
      if (chunks > 0) {
        list.set(zeroChunkDigest(HASH_CHUNK_SIZE));
        for (let filled = DIGEST_BYTES; filled < list.length; filled *= 2) {
          list.copyWithin(filled, 0, Math.min(filled, list.length - filled));
        }
        const last = chunks - 1;
        list.set(zeroChunkDigest(this.size - last * HASH_CHUNK_SIZE), last * DIGEST_BYTES);
      }
      for (const page of this.#pages.keys()) this.#stale.add(Math.floor(page / PAGES_PER_CHUNK));
    }
    for (const chunk of this.#stale) list.set(this.#chunkDigest(chunk), chunk * DIGEST_BYTES);
    this.#stale.clear();
    return this.#hex = createHash("sha256").update(list).digest("hex");
  }

  /** The SHA-256 of chunk `chunk` as it is now. */
  #chunkDigest(chunk: number): Uint8Array {
    const start = chunk * HASH_CHUNK_SIZE;
    const length = Math.min(HASH_CHUNK_SIZE, this.size - start);
    const first = chunk * PAGES_PER_CHUNK;
    let hash: Hash | undefined;
    let zeros = 0; // unwritten bytes not yet fed
    for (let i = first; i < first + Math.ceil(length / PAGE_SIZE); i++) {
      const n = Math.min(PAGE_SIZE, start + length - i * PAGE_SIZE);
      const page = this.#pages.get(i);
      if (!page) {
        zeros += n;
        continue;
      }
      hash ??= createHash("sha256");
      feedZeros(hash, zeros);
      zeros = 0;
      hash.update(page.subarray(0, n));
    }
    if (!hash) return zeroChunkDigest(length);
    feedZeros(hash, zeros);
    return new Uint8Array(hash.digest());
  }

  #checkRange(offset: number, length: number): void {
    checkRange(this.size, offset, length);
  }
}

/** One shared run of zero bytes, fed to a hash for unwritten pages. */
const ZEROS = new Uint8Array(HASH_CHUNK_SIZE);

function feedZeros(hash: Hash, n: number): void {
  if (n > 0) hash.update(ZEROS.subarray(0, n));
}

/** The SHA-256 of a chunk of `length` zero bytes, by length: computed once each. */
const ZERO_CHUNK_DIGESTS = new Map<number, Uint8Array>();

function zeroChunkDigest(length: number): Uint8Array {
  let digest = ZERO_CHUNK_DIGESTS.get(length);
  if (!digest) {
    digest = new Uint8Array(createHash("sha256").update(ZEROS.subarray(0, length)).digest());
    ZERO_CHUNK_DIGESTS.set(length, digest);
  }
  return digest;
}

/**
 * Throws a RangeError unless `offset` and `length` are non-negative integers naming bytes inside
 * `size` bytes of GPU memory.
 */
export function checkRange(size: number, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new RangeError(`offset must be a non-negative integer, got ${describeValue(offset)}`);
  }
  if (!Number.isSafeInteger(length) || length < 0) {
    throw new RangeError(`length must be a non-negative integer, got ${describeValue(length)}`);
  }
  if (offset + length > size) {
    throw new RangeError(
      `bytes ${offset} to ${offset + length} are outside the process's ${size} bytes of GPU memory`,
    );
  }
}
