// Simulated GPU memory in sparse 1 MiB chunks (a process of many GiB costs what a test wrote), its
// chunked SHA-256 kept per chunk, and its saved form.

import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { describeValue } from "../core/options.ts";
import type { StrictReader } from "../core/json.ts";

/** Page size of the saved form ({@link SavedPages}), in bytes. */
export const PAGE_SIZE = 64 * 1024;
/** The chunk of the chunked SHA-256 and of the sparse store: 1 MiB, a whole number of pages. */
export const HASH_CHUNK_SIZE = 1024 * 1024;
const DIGEST_BYTES = 32;

/** One process's GPU memory: a checkpoint or a restore moves it whole, never copies it. */
export class MemoryImage {
  /** The chunks written, by index (the last one may be shorter), or made once needed; others zero. */
  readonly #chunks = new Map<number, Uint8Array | ((out: Uint8Array) => void)>();
  /** Every chunk's SHA-256 in order, from the first hash on, but those #stale; the last result. */
  #digests: Uint8Array | undefined;
  readonly #stale = new Set<number>();
  /** The chunks a save lent out: copied before they are written again. */
  readonly #lent = new Set<number>();
  #hex: string | undefined;

  /** An image of `size` bytes (the memory's size), all zero. */
  constructor(readonly size: number) {}

  /**
   * An image of `size` bytes holding `pages` (read with {@link readPages}); `own`: their bytes are
   * views of one buffer no one else holds (a pages file's), whose whole chunks it keeps as they are.
   */
  static load(size: number, pages: SavedPages, own = false): MemoryImage {
    const image = new MemoryImage(size), per = HASH_CHUNK_SIZE / PAGE_SIZE;
    for (let k = 0; k < pages.length; k++) {
      const [i, saved] = pages[k], [j, last] = pages[k + per - 1] ?? [], c = i / per;
      const end = own && last && last.byteOffset + last.length;
      if (i % per === 0 && j === i + per - 1 && end === saved.byteOffset + image.#length(c)) {
        image.#chunks.set(c, new Uint8Array(saved.buffer, saved.byteOffset, image.#length(c)));
        image.#stale.add(c);
        k += per - 1;
      } else image.write(i * PAGE_SIZE, saved);
    }
    return image;
  }

  /** Writes `data` at byte `offset`. */
  write(offset: number, data: Uint8Array): void {
    checkRange(this.size, offset, data.length);
    if (data.length > 0) this.#hex = undefined;
    for (const [index, within, done, n] of this.#spans(offset, data.length)) {
      let chunk = this.#bytes(index, true);
      if (!chunk) this.#chunks.set(index, chunk = new Uint8Array(this.#length(index)));
      else if (this.#lent.delete(index)) this.#chunks.set(index, chunk = chunk.slice());
      chunk.set(data.subarray(done, done + n), within);
      this.#stale.add(index);
    }
  }

  /**
   * Writes over `length` bytes from `offset` what `make(from, out)` puts in `out` (its bytes from
   * `from` on): a kernel's output, each whole chunk made only when read, hashed, saved or written
   * over, so `make` must give the same bytes every time.
   */
  produce(offset: number, length: number, make: (from: number, out: Uint8Array) => void): void {
    checkRange(this.size, offset, length);
    for (const [index, , done, n] of this.#spans(offset, length)) {
      if (n < this.#length(index)) {
        const part = new Uint8Array(n);
        make(done, part);
        this.write(offset + done, part);
        continue;
      }
      this.#chunks.set(index, (out) => make(done, out));
      this.#stale.add(index);
      this.#hex = undefined;
    }
  }

  /** Reads `length` bytes from byte `offset`. */
  read(offset: number, length: number): Uint8Array {
    checkRange(this.size, offset, length);
    const out = new Uint8Array(length);
    for (const [index, within, done, n] of this.#spans(offset, length)) {
      const chunk = this.#bytes(index, false);
      if (chunk) out.set(chunk.subarray(within, within + n), done);
    }
    return out;
  }

  /**
   * The chunked SHA-256 of `read(0, size)`: the SHA-256 of its 1 MiB chunks' SHA-256s (README,
   * "Testing without a GPU"), hashing only the chunks written since last time.
   */
  chunkedSha256(): string {
    if (this.#hex !== undefined) return this.#hex;
    if (!this.#digests) { // each as zero first: a chunk written or made is #stale till now
      const count = Math.ceil(this.size / HASH_CHUNK_SIZE);
      const digests = this.#digests = new Uint8Array(count * DIGEST_BYTES);
      for (let c = 0; c < count; c++) digests.set(zeroDigest(this.#length(c)), c * DIGEST_BYTES);
    }
    for (const c of this.#stale) {
      this.#digests.set(sha256(this.#bytes(c, false)!), c * DIGEST_BYTES);
    }
    this.#stale.clear();
    return this.#hex = createHash("sha256").update(this.#digests).digest("hex");
  }

  /**
   * The pages written that are not all zero, ascending, trailing zeros left out: what the memory
   * holds now, whatever is written later (each chunk lent is copied before it is written again).
   */
  save(): [number, Uint8Array][] {
    const pages: [number, Uint8Array][] = [];
    for (const index of [...this.#chunks.keys()].sort((a, b) => a - b)) {
      const made = this.#chunks.get(index)!;
      if (typeof made !== "function") this.#lent.add(index);
      const chunk = typeof made === "function" ? this.#bytes(index, false)!.slice() : made;
      for (let at = 0; at < chunk.length; at += PAGE_SIZE) {
        let end = Math.min(at + PAGE_SIZE, chunk.length);
        while (end > at && chunk[end - 1] === 0) end--;
        if (end === at) continue;
        pages.push([(index * HASH_CHUNK_SIZE + at) / PAGE_SIZE, chunk.subarray(at, end)]);
      }
    }
    return pages;
  }

  /** Chunk `index`'s bytes; one not made yet is made, and `keep`s them or lends a scratch's. */
  #bytes(index: number, keep: boolean): Uint8Array | undefined {
    const chunk = this.#chunks.get(index);
    if (typeof chunk !== "function") return chunk;
    const length = this.#length(index);
    scratch ??= new Uint8Array(HASH_CHUNK_SIZE);
    const out = keep ? new Uint8Array(length) : scratch.subarray(0, length);
    chunk(out);
    if (keep) this.#chunks.set(index, out);
    return out;
  }

  /** The length of chunk `index`: 1 MiB, or less for the last. */
  #length(index: number): number {
    return Math.min(HASH_CHUNK_SIZE, this.size - index * HASH_CHUNK_SIZE);
  }

  /** Each chunk the bytes touch: its index, the offset in it, the bytes before, the bytes in it. */
  *#spans(offset: number, length: number): Generator<[number, number, number, number]> {
    for (let done = 0, n = 0; done < length; done += n) {
      const within = (offset + done) % HASH_CHUNK_SIZE;
      n = Math.min(HASH_CHUNK_SIZE - within, length - done);
      yield [Math.floor((offset + done) / HASH_CHUNK_SIZE), within, done, n];
    }
  }
}

/** Where a chunk not made yet is made to be read, hashed or saved, and then forgotten. */
let scratch: Uint8Array | undefined;

const sha256 = (bytes: Uint8Array): Uint8Array => createHash("sha256").update(bytes).digest();
/** The SHA-256 of `length` zero bytes, computed once each. */
const zeroDigests = new Map<number, Uint8Array>();
const zeroDigest = (length: number): Uint8Array =>
  zeroDigests.get(length) ?? zeroDigests.set(length, sha256(new Uint8Array(length))).get(length)!;

/** Throws a RangeError unless `offset` and `length` name bytes inside `size` bytes of memory. */
export function checkRange(size: number, offset: number, length: number): void {
  for (const [name, value] of [["offset", offset], ["length", length]] as const) {
    const got = `${name} must be a non-negative integer, got ${describeValue(value)}`;
    if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(got);
  }
  const [end, outside] = [offset + length, `are outside the process's ${size} bytes of GPU memory`];
  if (end > size) throw new RangeError(`bytes ${offset} to ${end} ${outside}`);
}

/**
 * GPU memory saved (state file, simulated criu images) as its pages not all zero, ascending:
 * `[page index, its bytes, trailing zeros left out]` (in a state file's JSON, their base64).
 */
export type SavedPages = [number, Uint8Array][];

/** A saved page as JSON holds it (a state file): its bytes in base64. */
export const base64 = ([i, b]: [number, Uint8Array]): [number, string] => [
  i,
  Buffer.from(b.buffer, b.byteOffset, b.length).toString("base64"),
];

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * `v` read strictly as the saved pages of `size` bytes of memory: in JSON, or their lengths where
 * `body` holds their bytes one after another (a pages file), all of it.
 */
export function readPages(
  read: StrictReader,
  v: unknown,
  size: number,
  at: string,
  body?: Uint8Array,
): SavedPages {
  if (!Array.isArray(v)) {
    read.fail(at, `an array of [page index, ${body ? "length" : "base64"}] entries`, v);
  }
  const count = Math.ceil(size / PAGE_SIZE);
  let last = -1, used = 0;
  const pages = v.map((entry: unknown, i): [number, Uint8Array] => {
    const path = `${at}[${i}]`;
    const [index, text] = read.array(entry, path, 2, 2);
    last = read.integer(index, `${path}[0]`, last + 1, count - 1);
    const page = `${path}[1]`, room = Math.min(PAGE_SIZE, size - last * PAGE_SIZE);
    if (body) return [last, body.subarray(used, used += read.integer(text, page, 1, room))];
    if (typeof text !== "string" || !BASE64.test(text)) read.fail(page, "a base64 string", text);
    const bytes = Buffer.from(text, "base64"), length = bytes.length;
    if (length > room) read.refuse(page, `${page} holds ${length} bytes; page ${last} has ${room}`);
    return [last, new Uint8Array(bytes.buffer, bytes.byteOffset, length)];
  });
  const follow = `${at} lists ${used} bytes of pages, and ${body?.length} follow its first line`;
  if (body && used !== body.length) read.refuse(at, follow);
  return pages;
}
