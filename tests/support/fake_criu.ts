// Stand-ins for criu for the tests of the criu engine (tests/criu_*_test.ts): tests/fixtures/
// fake_criu.sh, or a script of the test's own, installed in a private directory of this user's
// (mode 0700 under the temporary directory), mode 0755, with its settings written into it (criu
// runs with a minimal environment, so they cannot travel in it). And the checks that a test left
// no process behind. Runs under Deno and Bun alike. Not a test file itself.

import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { scratchDir, withScratch } from "./temp_dirs.ts";

const FAKE = new URL("../fixtures/fake_criu.sh", import.meta.url).pathname;

const PREFIX = "ckpt-criu-test-";

/** A private scratch directory (mode 0700), and its removal. */
export function scratch(): { dir: string; done: () => void } {
  return scratchDir(PREFIX);
}

/** Runs `body` with a new private scratch directory, removed after it however it ends. */
export function inScratch<T>(body: (s: { dir: string }) => Promise<T>): Promise<T> {
  return withScratch(PREFIX, body);
}

/** Single-quotes `value` for sh. */
function quoted(value: string): string {
  return `'${value.replaceAll("'", `'"'"'`)}'`;
}

/**
 * Writes a criu stand-in into `dir` as `name` (mode `mode`, 0755 by default): `vars` exported
 * first, then `body` (the fixture's, where left out). Returns its path.
 */
export function fakeCriu(
  dir: string,
  vars: Record<string, string> = {},
  options: { body?: string; name?: string; mode?: number } = {},
): string {
  const body = options.body ?? readFileSync(FAKE, "utf8").replace(/^#!.*\n/, "");
  const exports = Object.entries(vars).map(([k, v]) => `export ${k}=${quoted(v)}\n`).join("");
  const file = join(dir, options.name ?? "criu");
  writeFileSync(file, `#!/bin/sh\n${exports}${body}`);
  chmodSync(file, options.mode ?? 0o755);
  return file;
}

/** Whether `pid` is gone (or a zombie nobody reaped yet: it runs no more). */
export function ended(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

/** The state letter of `pid` in /proc (`S`, `T` for stopped, ...); `undefined` where gone. */
export function stateOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return undefined;
  }
}

/** Whether `p` settles within `ms` (the engine's own check, used by the tests too). */
export { settlesWithin } from "../../core/time.ts";

/** Waits up to `ms` for every one of `pids` to have {@link ended}; resolves to those left. */
export async function endedWithin(pids: readonly number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = pids.filter((p) => !ended(p));
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The text of this host's /proc/net/tcp and tcp6, as the restore's port check reads them. */
export function tcpTable(): string {
  return ["tcp", "tcp6"].map((f) => readFileSync(`/proc/net/${f}`, "utf8")).join("\n");
}

/** Protobuf as criu's images hold it: a varint, a varint field, a length-delimited field. */
export const varint = (n: number): number[] => {
  const out: number[] = [];
  do {
    out.push((n % 128) | (n >= 128 ? 0x80 : 0));
    n = Math.floor(n / 128);
  } while (n > 0);
  return out;
};
export const num = (field: number, n: number): number[] => [...varint(field * 8), ...varint(n)];
export const bytes = (field: number, b: number[]): number[] => [
  ...varint(field * 8 + 2),
  ...varint(b.length),
  ...b,
];

/** A criu image: the common magic word and `magic`, then each message after its length. */
export function criuImage(magic: number, messages: number[][]): Uint8Array {
  const out: number[] = [];
  const word = (n: number) => out.push(n & 255, (n >>> 8) & 255, (n >>> 16) & 255, n >>> 24);
  word(0x54564319);
  word(magic);
  for (const m of messages) {
    word(m.length);
    out.push(...m);
  }
  return new Uint8Array(out);
}

/** A pstree.img as criu writes it: pid (1), ppid (2), pgid (3), sid (4), threads (5) of each. */
export function pstree(
  entries: { pid: number; ppid: number; threads: number[] }[],
  packed = false,
): Uint8Array {
  return criuImage(
    0x50273030,
    entries.map((e) => [
      ...num(1, e.pid),
      ...num(2, e.ppid),
      ...num(3, e.pid),
      ...num(4, e.pid),
      ...(packed ? bytes(5, e.threads.flatMap(varint)) : e.threads.flatMap((t) => num(5, t))),
    ]),
  );
}
