/**
 * The package's version. A test checks it against `deno.json`, the one place it is set
 * (importing `deno.json` would parse the whole file at start-up).
 *
 * @module
 */

/** The version of `@ckpt/cuda`. */
export const VERSION = "0.1.0";

/**
 * Whether the dotted `version` is older than `than` (`"4.1.1"` than `"4.2"`), part by part, a
 * missing part as 0; with `parts`, the first so many only. @internal
 */
export function olderVersion(version: string, than: string, parts = Infinity): boolean {
  const a = version.split(".").map(Number), b = than.split(".").map(Number);
  for (let i = 0; i < Math.min(Math.max(a.length, b.length), parts); i++) {
    const x = a[i] ?? 0, y = b[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}
