// The package's version, checked by a test against `deno.json` (importing it costs start-up).

/** The version of `@ckpt/cuda`. */
export const VERSION = "0.1.0";

/** Whether dotted `version` is older than `than` (only the first `parts` compared). @internal */
export function olderVersion(version: string, than: string, parts = Infinity): boolean {
  const a = version.split(".").map(Number), b = than.split(".").map(Number);
  for (let i = 0; i < Math.min(Math.max(a.length, b.length), parts); i++) {
    const x = a[i] ?? 0, y = b[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}
