/**
 * Saved GPU memory contents: the pages a process wrote, as base64 text, as a snapshot of the
 * simulated machine (state.ts) and the simulated CRIU's images (criu.ts) keep them. Only written
 * pages are saved, so that a process of many GiB costs what a test wrote, not its size.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { describeValue } from "../core/uuid.ts";
import { MemoryImage, PAGE_SIZE } from "./memory.ts";

/**
 * Saved pages: `[page index, base64 of its bytes]`, ascending, a page being {@link PAGE_SIZE}
 * bytes with its trailing zeros left out. Every byte of no page is zero.
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

/**
 * Memory of `size` bytes holding `pages` (checked with {@link checkPages}), and the indexes of
 * the pages written.
 */
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

/**
 * `value` checked as the saved pages of `size` bytes of memory: an array of `[index, base64]`,
 * indexes ascending inside the memory, each page's bytes fitting in it. `fail` is called with the
 * path of the first thing amiss (`at`, `at[2][1]`) and a sentence that names it and its value.
 */
export function checkPages(
  value: unknown,
  size: number,
  at: string,
  fail: (path: string, message: string) => never,
): SavedPages {
  if (!Array.isArray(value)) {
    fail(at, `${at} must be an array of [page index, base64] entries, got ${describeValue(value)}`);
  }
  const count = Math.ceil(size / PAGE_SIZE);
  let last = -1;
  return value.map((entry: unknown, i): [number, string] => {
    const path = `${at}[${i}]`;
    if (!Array.isArray(entry) || entry.length !== 2) {
      fail(path, `${path} must be an array of 2 entries, got ${describeValue(entry)}`);
    }
    const [index, base64] = entry;
    if (typeof index !== "number" || !Number.isInteger(index) || index <= last || index >= count) {
      fail(
        `${path}[0]`,
        `${path}[0] (a page index) must be an integer from ${last + 1} to ${count - 1}, got ${
          describeValue(index)
        }`,
      );
    }
    last = index;
    if (typeof base64 !== "string" || !BASE64.test(base64)) {
      fail(`${path}[1]`, `${path}[1] must be a base64 string, got ${describeValue(base64)}`);
    }
    const length = Buffer.from(base64, "base64").length;
    const room = Math.min(PAGE_SIZE, size - index * PAGE_SIZE);
    if (length > room) {
      fail(`${path}[1]`, `${path}[1] holds ${length} bytes; page ${index} has ${room}`);
    }
    return [index, base64];
  });
}
