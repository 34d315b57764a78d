// A test file's temporary folders: each made under the system's temporary directory, all removed
// after each test. Under Deno and Bun alike (node:test's afterEach).

import { afterEach } from "node:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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
