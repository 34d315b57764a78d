/**
 * Simulated GPU memory contents in sparse pages (a process of many GiB costs what a test wrote),
 * their hash ({@link ChunkedSha256}), and their saved form.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHash, type Hash } from "node:crypto";
import { describeValue } from "../core/options.ts";
import type { StrictReader } from "../core/json.ts";

/** Page size of the sparse store, in bytes. */
export const PAGE_SIZE = 64 * 1024;

/** The chunk size of the chunked SHA-256, in bytes: 1 MiB (a multiple of {@link PAGE_SIZE}). */
export const HASH_CHUNK_SIZE = 1024 * 1024;

/** Pages in one chunk of the chunked SHA-256. */
const PAGES_PER_CHUNK = HASH_CHUNK_SIZE / PAGE_SIZE;

/** Bytes of one SHA-256 digest. */
const DIGEST_BYTES = 32;

/**
 * The chunked SHA-256 of a run of bytes, fed in pieces of any size as they come (GPU memory copied
 * back piece by piece), without holding the whole.
 *
 * Defined so: the SHA-256 of the SHA-256s (32 bytes each, in order) of the bytes' 1 MiB chunks,
 * the last one shorter, as 64 lowercase hex digits; no bytes give the SHA-256 of nothing
 * (`e3b0c442...`). It is not the SHA-256 of the bytes: a hash over the chunks' hashes, so that the
 * simulator can keep the digest of every chunk nobody wrote. With coreutils:
 * `split -b 1M --filter='sha256sum | head -c 64 | xxd -r -p' FILE | sha256sum`.
 *
 * @example
 * ```ts
 * import { ChunkedSha256, chunkedSha256 } from "./memory.ts";
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

  /** Feeds the next `bytes` (any size); returns this hasher. Throws once the digest was given. */
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

  /** The chunked SHA-256 of every byte fed, as 64 lowercase hex digits; once only. */
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

/** The chunked SHA-256 of `bytes` (defined at {@link ChunkedSha256}), as 64 lowercase hex digits. */
export function chunkedSha256(bytes: Uint8Array): string {
  return new ChunkedSha256().update(bytes).digest();
}

/** The contents of one process's GPU memory, wherever they are held (GPU or host). */
export class MemoryImage {
  /** The size of the memory in bytes. */
  readonly size: number;
  readonly #pages: Map<number, Uint8Array>;
  /** Every chunk's SHA-256 in order (those in #stale out of date), from the first hash on. */
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
    checkRange(this.size, offset, data.length);
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
    checkRange(this.size, offset, length);
    const out = new Uint8Array(length);
    this.#spans(offset, length, (index, within, done, n) => {
      const page = this.#pages.get(index);
      if (page) out.set(page.subarray(within, within + n), done);
    });
    return out;
  }

  /** Calls `fn` for each page the bytes touch: its index, the offset in it, bytes before, in it. */
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

  /** A copy of every byte (a driver's copy to or from the host), with the chunk digests known. */
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
   * {@link chunkedSha256} of `read(0, size)`, hashing only the chunks written since the last call
   * (an unwritten one's digest is the zero chunk's), then 32 bytes per chunk (1.25 MiB for 40 GiB).
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
    const end = Math.min(start + HASH_CHUNK_SIZE, this.size);
    const hash = createHash("sha256");
    for (let at = start; at < end; at += PAGE_SIZE) {
      const n = Math.min(PAGE_SIZE, end - at);
      hash.update(this.#pages.get(at / PAGE_SIZE)?.subarray(0, n) ?? ZEROS.subarray(0, n));
    }
    return new Uint8Array(hash.digest());
  }
}

/** One shared run of zero bytes, fed to a hash for unwritten pages. */
const ZEROS = new Uint8Array(HASH_CHUNK_SIZE);

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

/** Throws a RangeError unless `offset` and `length` name bytes inside `size` bytes of memory. */
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

/**
 * GPU memory contents saved (in the simulator's state file and the simulated CRIU's images) as the
 * pages written, ascending: `[page index, base64 of its bytes, trailing zeros left out]`.
 */
export type SavedPages = [number, string][];

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The pages `written` of `image` that are not all zero, trailing zeros trimmed, as base64. */
export function savePages(image: MemoryImage, written: Iterable<number>): SavedPages {
  const pages: SavedPages = [];
  for (const index of [...written].sort((a, b) => a - b)) {
    const start = index * PAGE_SIZE;
    const bytes = image.read(start, Math.min(PAGE_SIZE, image.size - start));
    let end = bytes.length;
    while (end > 0 && bytes[end - 1] === 0) end--;
    if (end > 0) pages.push([index, Buffer.from(bytes.subarray(0, end)).toString("base64")]);
  }
  return pages;
}

/** Memory of `size` bytes holding `pages` (read with {@link readPages}), and the pages written. */
export function loadPages(
  size: number,
  pages: SavedPages,
): { image: MemoryImage; written: number[] } {
  const map = new Map<number, Uint8Array>();
  for (const [index, base64] of pages) {
    const page = new Uint8Array(PAGE_SIZE);
    page.set(Buffer.from(base64, "base64"));
    map.set(index, page);
  }
  return { image: new MemoryImage(size, map), written: [...map.keys()] };
}

/** `value` read strictly as the saved pages of `size` bytes of memory. */
export function readPages(
  read: StrictReader,
  value: unknown,
  size: number,
  at: string,
): SavedPages {
  if (!Array.isArray(value)) read.fail(at, "an array of [page index, base64] entries", value);
  const count = Math.ceil(size / PAGE_SIZE);
  let last = -1;
  return value.map((entry: unknown, i): [number, string] => {
    const path = `${at}[${i}]`;
    const [index, base64] = read.array(entry, path, 2, 2);
    last = read.integer(index, `${path}[0]`, last + 1, count - 1);
    if (typeof base64 !== "string" || !BASE64.test(base64)) {
      read.fail(`${path}[1]`, "a base64 string", base64);
    }
    const length = Buffer.from(base64, "base64").length;
    const room = Math.min(PAGE_SIZE, size - last * PAGE_SIZE);
    if (length > room) {
      read.refuse(`${path}[1]`, `${path}[1] holds ${length} bytes; page ${last} has ${room}`);
    }
    return [last, base64];
  });
}
