// A test file's temporary folders: each made under the system's temporary directory, all removed
// after each test. Under Deno and Bun alike (node:test's afterEach).

import { after, afterEach } from "node:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { removeWorkDir, workDir } from "../../os/trusted.ts";

/** Where criu's work directories are made for this user (workDir's base), as the engine names it. */
export const WORK_BASE: string = process.getuid?.() === 0
  ? "/run/ckpt-cuda-work"
  : join(realpathSync(tmpdir()), `ckpt-cuda-work-${process.getuid?.()}`);
/** The start of the names of this program's work directories there: its pid and start time. */
export const WORK_MINE: string = (() => {
  const me = readFileSync("/proc/self/stat", "utf8");
  return `${process.pid}-${me.slice(me.lastIndexOf(")") + 2).split(" ")[19]}-`;
})();

/** The folders {@link processDir} made that are left: removed as the test process ends. */
const leftAtExit = new Set<string>();
let hooked = false;

/**
 * A new folder `<prefix>XXXXXX` under the temporary directory, removed as the test process ends at
 * the latest, whatever ran: a filter (`deno test --filter`, `bun test -t`) that picks none of a
 * file's tests leaves its after() hooks unrun, and folders made as the file loads were left behind.
 * Deno ends a test process with `unload`, Bun with the process's `exit`; the caller may remove the
 * folder sooner.
 */
export function processDir(prefix: string): string {
  if (!hooked) {
    hooked = true;
    const removeAll = () => {
      for (const dir of leftAtExit) rmSync(dir, { recursive: true, force: true });
      leftAtExit.clear();
    };
    process.once("exit", removeAll);
    (globalThis as { addEventListener?: (type: string, fn: () => void) => void })
      .addEventListener?.("unload", removeAll);
  }
  const dir = mkdtempSync(join(tmpdir(), prefix));
  leftAtExit.add(dir);
  return dir;
}

/**
 * Registers, for the calling test file, the removal after each test of every folder it makes;
 * returns the maker: a new folder named `<prefix>XXXXXX` under the temporary directory.
 */
export function tempDirs(prefix: string): () => string {
  const made: string[] = [];
  afterEach(() => {
    for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  return () => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    made.push(dir);
    return dir;
  };
}

/** A private scratch folder (mode 0700) named `<prefix>XXXXXX`, and its removal. */
export function scratchDir(prefix: string): { dir: string; done: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Runs `body` with a new scratch folder (`scratchDir(prefix)`), removed after it however it ends. */
export async function withScratch<T>(
  prefix: string,
  body: (s: { dir: string }) => Promise<T>,
): Promise<T> {
  const s = scratchDir(prefix);
  try {
    return await body(s);
  } finally {
    s.done();
  }
}

/**
 * Registers, for a test file that runs criu's engine, the removal after its tests of what the
 * engine keeps in {@link WORK_BASE}: the logs of its failed runs (`dump-<root>.log`,
 * `restore-<root>.log`) that were not there before, the work directories of its programs that are
 * gone (a child a test ended mid-run), and the base itself where that leaves it empty (as a user's
 * temporary directory should be).
 */
export function criuLeftoversRemovedAfter(): void {
  const names = () => existsSync(WORK_BASE) ? readdirSync(WORK_BASE) : [];
  const before = new Set(names());
  after(async () => {
    for (const name of names()) {
      const log = /^(dump|restore)-[0-9]+\.log$/.test(name) && !before.has(name);
      if (log) rmSync(join(WORK_BASE, name), { force: true });
    }
    await removeWorkDir(await workDir("after-")); // those of programs gone swept as it is made
  });
}
