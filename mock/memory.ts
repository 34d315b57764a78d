/**
 * Simulated GPU memory contents: sparse pages, so that a process of many GiB costs host memory
 * only for what a test writes. Unwritten bytes read as zero.
 *
 * @module
 */

import { createHash, type Hash } from "node:crypto";
import { describeValue } from "../core/uuid.ts";

/** Page size of the sparse store, in bytes. */
export const PAGE_SIZE = 64 * 1024;

/** The contents of one process's GPU memory, wherever they are held (GPU or host). */
export class MemoryImage {
  /** The size of the memory in bytes. */
  readonly size: number;
  readonly #pages: Map<number, Uint8Array>;
  #sha256: string | undefined;

  /** An image of `size` bytes, all zero, or built from the given pages. */
  constructor(size: number, pages: Map<number, Uint8Array> = new Map()) {
    this.size = size;
    this.#pages = pages;
  }

  /** Writes `data` at byte `offset`. */
  write(offset: number, data: Uint8Array): void {
    this.#checkRange(offset, data.length);
    this.#sha256 = undefined;
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

  /** A copy of every byte, as a driver's copy to or from the host makes one. */
  copy(): MemoryImage {
    const pages = new Map<number, Uint8Array>();
    for (const [i, p] of this.#pages) pages.set(i, p.slice());
    const copy = new MemoryImage(this.size, pages);
    copy.#sha256 = this.#sha256;
    return copy;
  }

  /**
   * SHA-256 of every byte of the contents, unwritten (zero) bytes included, as lowercase hex: the
   * same as hashing `read(0, size)`. Remembered until the next write.
   */
  digest(): Promise<string> {
    return Promise.resolve(this.sha256());
  }

  /** {@link MemoryImage.digest}, computed at once. */
  sha256(): string {
    if (this.#sha256 !== undefined) return this.#sha256;
    const hash = createHash("sha256");
    const pages = Math.ceil(this.size / PAGE_SIZE);
    let zeros = 0; // unwritten bytes not yet fed
    for (let i = 0; i < pages; i++) {
      const length = Math.min(PAGE_SIZE, this.size - i * PAGE_SIZE);
      const page = this.#pages.get(i);
      if (!page) {
        zeros += length;
        continue;
      }
      zeros = feedZeros(hash, zeros);
      hash.update(page.subarray(0, length));
    }
    feedZeros(hash, zeros);
    return this.#sha256 = hash.digest("hex");
  }

  #checkRange(offset: number, length: number): void {
    checkRange(this.size, offset, length);
  }
}

/** One shared run of zero bytes, fed to the hash for unwritten pages. */
const ZEROS = new Uint8Array(16 * PAGE_SIZE);

function feedZeros(hash: Hash, n: number): 0 {
  for (let left = n; left > 0; left -= ZEROS.length) {
    hash.update(ZEROS.subarray(0, Math.min(left, ZEROS.length)));
  }
  return 0;
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
