/**
 * Snapshots on the file system: each in a directory of this user's that others may not write in
 * (made with mode 0700; an existing empty one is taken with its mode), its manifest
 * written whole (mode 0600), each tree's images in a private subdirectory. A snapshot holds the
 * memory of the processes it took, and a restore runs what it finds as root: it must not be read,
 * planted or changed by others, and nothing in it is followed through a symbolic link.
 *
 * @module
 */

import { lstat, mkdir, readdir, readFile } from "node:fs/promises";
import path from "node:path";
import type { SnapshotFile, SnapshotStore } from "../core/engine.ts";
import type { Machine } from "../core/machine.ts";
import { MANIFEST_FILE, MANIFEST_MAX_BYTES } from "../core/manifest.ts";
import { messageOf } from "../core/errors.ts";
import { checkPrivate, errorCode, writePrivately } from "./private.ts";

const SUBDIR = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,100}$/;
const HINT = "a snapshot's directory must be this user's and private (chmod 700)";

/** The file system's snapshots: see the module documentation. */
export class FileSnapshotStore implements SnapshotStore {
  /** Makes `dir` for a new snapshot (or takes an empty, private one), mode 0700. */
  async create(dir: string): Promise<string> {
    const where = path.resolve(dir);
    if (!await checkPrivate(where, "directory", { hint: HINT })) {
      try {
        await mkdir(where, { mode: 0o700 });
      } catch (err) {
        throw new Error(
          errorCode(err) === "ENOENT"
            ? `its parent directory ${path.dirname(where)} does not exist`
            : `it cannot be made: ${messageOf(err)}`,
        );
      }
      await this.#check(where);
      return where;
    }
    const names = await readdir(where);
    if (names.length > 0) {
      throw new Error(
        `${where} is not empty (${names.length} entries): a snapshot needs a new or empty directory`,
      );
    }
    return where;
  }

  /** Opens an existing snapshot directory, refusing one that is not private. */
  async open(dir: string): Promise<string> {
    const where = path.resolve(dir);
    await this.#check(where);
    return where;
  }

  /** Makes a private subdirectory `name` of `dir`. */
  async subdir(dir: string, name: string): Promise<string> {
    if (!SUBDIR.test(name)) {
      throw new RangeError(`not a subdirectory name: ${JSON.stringify(name)}`);
    }
    const where = path.join(dir, name);
    await mkdir(where, { mode: 0o700 });
    await this.#check(where);
    return where;
  }

  /** Writes the manifest whole, mode 0600. */
  async writeManifest(dir: string, text: string): Promise<void> {
    await writePrivately(path.join(dir, MANIFEST_FILE), text);
  }

  /** Reads the manifest; `undefined` where there is none. */
  async readManifest(dir: string): Promise<string | undefined> {
    const file = path.join(dir, MANIFEST_FILE);
    const st = await lstat(file).catch((err) => {
      if (errorCode(err) !== "ENOENT") throw err;
    });
    if (!st) return undefined;
    if (st.isSymbolicLink()) throw new Error(`${file} is a symbolic link`);
    if (!st.isFile()) throw new Error(`${file} is not a regular file`);
    if (st.size > MANIFEST_MAX_BYTES) {
      throw new Error(
        `${file} has ${st.size} bytes, more than a manifest can (${MANIFEST_MAX_BYTES})`,
      );
    }
    return await readFile(file, "utf8");
  }

  /** Every regular file under `dir/sub`, not following symbolic links. */
  async files(dir: string, sub: string): Promise<SnapshotFile[]> {
    const out: SnapshotFile[] = [];
    const walk = async (rel: string): Promise<void> => {
      const names = await readdir(path.join(dir, rel)).catch((err) => {
        if (errorCode(err) === "ENOENT") return [] as string[];
        throw err;
      });
      for (const name of names.sort()) {
        const relative = `${rel}/${name}`;
        const st = await lstat(path.join(dir, relative));
        if (st.isDirectory()) await walk(relative);
        else if (st.isFile()) out.push({ path: relative, bytes: st.size });
      }
    };
    await walk(sub);
    return out;
  }

  /** A directory of this user that nobody else may write in, not a symbolic link. */
  async #check(where: string): Promise<void> {
    if (!await checkPrivate(where, "directory", { hint: HINT })) {
      throw new Error(`${where} does not exist`);
    }
  }
}

/** The machine's snapshot store; the file system where there is no machine, or it has none. */
export function storeOf(machine: Machine | undefined): SnapshotStore {
  return machine?.store ?? new FileSnapshotStore();
}
