/**
 * Simulated GPU memory contents: sparse pages, so that a process of many GiB costs host memory
 * only for what a test writes. Unwritten bytes read as zero.
 *
 * @module
 */

/** Page size of the sparse store, in bytes. */
export const PAGE_SIZE = 64 * 1024;

/** The contents of one process's GPU memory, wherever they are held (GPU or host). */
export class MemoryImage {
  /** The size of the memory in bytes. */
  readonly size: number;
  readonly #pages: Map<number, Uint8Array>;

  /** An image of `size` bytes, all zero, or built from the given pages. */
  constructor(size: number, pages: Map<number, Uint8Array> = new Map()) {
    this.size = size;
    this.#pages = pages;
  }

  /** Writes `data` at byte `offset`. */
  write(offset: number, data: Uint8Array): void {
    this.#checkRange(offset, data.length);
    let done = 0;
    while (done < data.length) {
      const at = offset + done;
      const index = Math.floor(at / PAGE_SIZE);
      const within = at % PAGE_SIZE;
      const n = Math.min(PAGE_SIZE - within, data.length - done);
      let page = this.#pages.get(index);
      if (!page) this.#pages.set(index, page = new Uint8Array(PAGE_SIZE));
      page.set(data.subarray(done, done + n), within);
      done += n;
    }
  }

  /** Reads `length` bytes from byte `offset`. */
  read(offset: number, length: number): Uint8Array {
    this.#checkRange(offset, length);
    const out = new Uint8Array(length);
    let done = 0;
    while (done < length) {
      const at = offset + done;
      const index = Math.floor(at / PAGE_SIZE);
      const within = at % PAGE_SIZE;
      const n = Math.min(PAGE_SIZE - within, length - done);
      const page = this.#pages.get(index);
      if (page) out.set(page.subarray(within, within + n), done);
      done += n;
    }
    return out;
  }

  /** A copy of every byte, as a driver's copy to or from the host makes one. */
  copy(): MemoryImage {
    const pages = new Map<number, Uint8Array>();
    for (const [i, p] of this.#pages) pages.set(i, p.slice());
    return new MemoryImage(this.size, pages);
  }

  /** SHA-256 of the whole contents (unwritten pages as zeros), as hex. */
  async digest(): Promise<string> {
    // Hash page by page: the index and bytes of every written page that holds a nonzero byte,
    // which identifies the contents exactly because unwritten bytes are zero.
    const indexes = [...this.#pages.keys()].sort((a, b) => a - b);
    const parts: Uint8Array[] = [];
    const sizeTag = new Uint8Array(8);
    new DataView(sizeTag.buffer).setFloat64(0, this.size);
    parts.push(sizeTag);
    for (const i of indexes) {
      const page = this.#pages.get(i)!;
      if (!page.some((b) => b !== 0)) continue;
      const tag = new Uint8Array(8);
      new DataView(tag.buffer).setFloat64(0, i);
      parts.push(tag, page);
    }
    const total = parts.reduce((n, p) => n + p.length, 0);
    const all = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
    return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  #checkRange(offset: number, length: number): void {
    if (
      !Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0
    ) {
      throw new RangeError(
        `offset and length must be non-negative integers, got offset ${offset}, length ${length}`,
      );
    }
    if (offset + length > this.size) {
      throw new RangeError(
        `bytes ${offset} to ${
          offset + length
        } are outside the process's ${this.size} bytes of GPU memory`,
      );
    }
  }
}
