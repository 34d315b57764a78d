/**
 * Snapshots on the file system. A restore runs what a snapshot's directory holds, as root, so the
 * directory is opened once and worked on through that open descriptor from then on: every path
 * below it, criu's `--images-dir` included, goes through `/proc/<pid>/fd/<n>`, which no rename of
 * a directory above can redirect. It is opened one directory at a time from `/`, no symbolic link
 * followed (the path the user gave is resolved first, then walked), and each directory on the way
 * is checked: owned by root or this user, and nobody else may write in it unless it is sticky
 * (`/tmp`). The snapshot's own directory is this user's, mode 0700 where this makes it; inside
 * it, every directory and file belongs to root or this user, may be written by nobody else, and is
 * no link. Files are written whole (a temporary file, fsynced, renamed; the directory fsynced),
 * images are fsynced and digested (`digest.ts`) once dumped, and a restore checks everything inside
 * against the manifest, digests included, before anything changes.
 *
 * @module
 */

import { constants } from "node:fs";
import { type FileHandle, lstat, mkdir, open, readdir, readlink, rm } from "node:fs/promises";
import path from "node:path";
import type { Checked, CheckOptions, SnapshotDir, SnapshotStore } from "../core/snapshot/store.ts";
import type { SnapshotFile } from "../core/snapshot/store.ts";
import type { Machine } from "../core/machine.ts";
import { digestAll, type DigestSource } from "./digest.ts";
import {
  errorCode,
  myUid,
  ownerFault,
  pathTrouble,
  pinned,
  readSmallFile,
  writePrivately,
} from "./private.ts";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;
const DIR = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
const FILE = O_RDONLY | O_NOFOLLOW | O_NONBLOCK;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$/;
const HINT = "a snapshot's directory must be this user's and private (chmod 700)";
/** What to do with a snapshot another user's copy made: said after {@link HINT}. */
const COPY = ", so copy it as the user who will restore it (tar or rsync -a run by that user), " +
  "or give it to that user (chown -R)";

/** The file system's snapshots: see the module documentation. */
export class FileSnapshotStore implements SnapshotStore {
  readonly #digests: boolean;

  /**
   * The store. `digests: false` is for benchmarks that measure what digests cost: files are
   * still fsynced, but get an all-zero digest, and a check compares none (a restore of such a
   * snapshot through a store with digests is refused).
   */
  constructor(options: { digests?: boolean } = {}) {
    this.#digests = options.digests ?? true;
  }

  /** Makes `dir` for a new snapshot (mode 0700), or takes an empty private one, and opens it. */
  async create(dir: string): Promise<SnapshotDir> {
    const where = path.resolve(dir);
    const { parent, name } = await walkTo(where);
    const through = `${pinned(parent)}/${name}`;
    try {
      let made = false;
      await mkdir(through, { mode: 0o700 }).then(() => made = true, (err) => {
        if (errorCode(err) === "EEXIST") return;
        throw new Error(`${where} cannot be made: ${pathTrouble(err)}`);
      });
      const handle = await openDir(where, through);
      try {
        await checkOwn(where, handle);
        const names = made ? [] : await readdir(pinned(handle));
        if (names.length > 0) {
          throw new Error(
            `${where} is not empty (${names.length} entries): a snapshot needs a new or empty ` +
              `directory`,
          );
        }
      } catch (err) {
        await handle.close();
        throw err;
      }
      if (made) return new FileSnapshotDir(where, handle, this.#digests, { parent, name });
      await parent.close();
      return new FileSnapshotDir(where, handle, this.#digests);
    } catch (err) {
      await parent.close();
      throw err;
    }
  }

  /** Opens an existing snapshot directory, refusing one that is not private or lies where others could swap it. */
  async open(dir: string): Promise<SnapshotDir> {
    const where = path.resolve(dir);
    const { parent, name } = await walkTo(where);
    try {
      const handle = await openDir(where, `${pinned(parent)}/${name}`);
      await checkOwn(where, handle).catch(async (err) => {
        await handle.close();
        throw err;
      });
      return new FileSnapshotDir(where, handle, this.#digests);
    } finally {
      await parent.close();
    }
  }
}

/** The machine's snapshot store; the file system where there is no machine, or it has none. */
export function storeOf(machine: Machine | undefined): SnapshotStore {
  return machine?.store ?? new FileSnapshotStore();
}

/**
 * Opens the directory above `where` (an absolute path) one directory at a time from `/`, each
 * checked before anything in it is trusted: owned by root or this user, and nobody else may write
 * in it unless it is sticky. A symbolic link on the way is followed only where it is root's or
 * this user's (in a sticky directory, `/tmp`, anyone may have put one there), and only from such a
 * directory; the last part of `where` is not opened.
 */
async function walkTo(where: string): Promise<{ parent: FileHandle; name: string }> {
  const parts = where.split("/").filter(Boolean);
  const name = parts.pop();
  if (name === undefined || name === "." || name === "..") {
    throw new Error(`${where} cannot hold a snapshot: give the path of a directory below /`);
  }
  let handle = await open("/", DIR);
  let at: string[] = [];
  let links = 0;
  try {
    await checkAbove(handle, "/", where);
    while (parts.length > 0) {
      const part = parts.shift()!;
      if (part === ".") continue;
      const through = `${pinned(handle)}/${part}`;
      const shown = part === ".." ? `/${at.slice(0, -1).join("/")}` : `/${[...at, part].join("/")}`;
      let next: FileHandle;
      try {
        next = await open(through, DIR);
      } catch (err) {
        const st = await lstat(through).catch(() => undefined);
        if (!st?.isSymbolicLink()) {
          if (errorCode(err) === "ENOENT") {
            throw new Error(
              parts.length === 0
                ? `its parent directory ${shown} does not exist`
                : `${shown}, above ${where}, does not exist`,
            );
          }
          throw await notOpened(shown, through, "directory", err);
        }
        if (++links > 40) throw new Error(`${where}: too many symbolic links on the way`);
        // In a sticky directory others may write (/tmp), anyone can plant a link: only root's or
        // this user's is followed, as the kernel's protected_symlinks would have it.
        const me = myUid();
        if (me !== undefined && st.uid !== 0 && st.uid !== me) {
          throw new Error(
            `${shown}, above ${where}, is a symbolic link of another user (uid ${st.uid}): ` +
              `they could lead the snapshot anywhere; give the path it leads to`,
          );
        }
        const target = await readlink(through);
        parts.unshift(...target.split("/").filter(Boolean));
        if (target.startsWith("/")) {
          const root = await open("/", DIR);
          await handle.close();
          handle = root;
          at = [];
        }
        continue;
      }
      await handle.close();
      handle = next;
      at = part === ".." ? at.slice(0, -1) : [...at, part];
      await checkAbove(handle, shown, where);
    }
    return { parent: handle, name };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** A directory above a snapshot's: root's or this user's, written by nobody else unless sticky. */
async function checkAbove(handle: FileHandle, shown: string, below: string): Promise<void> {
  const fault = ownerFault(await handle.stat(), { rootToo: true, sticky: true });
  if (fault) {
    throw new Error(
      `${shown}, above ${below}, ${fault}: ${
        fault.startsWith("belongs") ? "that user" : "they"
      } could swap the snapshot for their own; keep snapshots where only root and you can write`,
    );
  }
}

/** Opens the directory at `through` (a pinned path), named `shown`, not following a link. */
async function openDir(shown: string, through: string): Promise<FileHandle> {
  try {
    return await open(through, DIR);
  } catch (err) {
    throw await notOpened(shown, through, "directory", err);
  }
}

/** Why `through` could not be opened as a `kind`: a link, something else, or the error itself. */
async function notOpened(shown: string, through: string, kind: string, err: unknown) {
  const code = errorCode(err);
  if (code === "ENOENT") return new Error(`${shown} does not exist`);
  if (code === "ELOOP" || code === "ENOTDIR") {
    const st = await lstat(through).catch(() => undefined);
    if (st?.isSymbolicLink()) {
      return new Error(`${shown} is a symbolic link, not a ${kind} of its own`);
    }
    return new Error(`${shown} is not a ${kind}`);
  }
  return new Error(`${shown} cannot be opened: ${pathTrouble(err)}`, { cause: err });
}

/** The snapshot's own directory: this user's, and nobody else may write in it. */
async function checkOwn(where: string, handle: FileHandle): Promise<void> {
  const fault = ownerFault(await handle.stat());
  if (fault) {
    throw new Error(`${where} ${fault}; ${HINT}${fault.startsWith("belongs") ? COPY : ""}`);
  }
}

/** Something inside a snapshot: root's or this user's, and nobody else may write it. */
async function checkInside(shown: string, handle: FileHandle, kind: "file" | "directory") {
  const st = await handle.stat();
  if (kind === "file" ? !st.isFile() : !st.isDirectory()) {
    throw new Error(`${shown} is not a ${kind === "file" ? "regular file" : "directory"}`);
  }
  refuseInside(shown, st);
  return st;
}

/** Throws where something inside a snapshot is another user's or others may write it. */
function refuseInside(shown: string, st: { uid: number; mode: number }): void {
  const fault = ownerFault(st, { rootToo: true });
  if (!fault) return;
  throw new Error(
    `${shown} ${fault}; ${
      fault.startsWith("belongs")
        ? `what a snapshot holds must be root's or this user's${COPY}`
        : "nobody else may write what a snapshot holds (chmod go-w)"
    }`,
  );
}

/** A check that left nothing for later, having compared digests or not. */
function nothingLater(digests: boolean): Checked {
  return { digests, later: () => Promise.resolve(), all: Promise.resolve() };
}

/** A snapshot's directory, open: see the module documentation. */
class FileSnapshotDir implements SnapshotDir {
  readonly path: string;
  readonly #handle: FileHandle;
  readonly #made: { parent: FileHandle; name: string } | undefined;
  readonly #created: string[] = [];
  readonly #subs = new Map<string, FileHandle>();

  readonly #digests: boolean;
  /** The digests {@link check} left for later, where it left some: settled once they end. */
  #verifying: Promise<void> | undefined;

  constructor(
    where: string,
    handle: FileHandle,
    digests: boolean,
    made?: { parent: FileHandle; name: string },
  ) {
    this.path = where;
    this.#digests = digests;
    this.#handle = handle;
    this.#made = made;
  }

  /** The pinned path of the directory itself. */
  get base(): string {
    return pinned(this.#handle);
  }

  async subdir(name: string): Promise<void> {
    checkName(name);
    try {
      await mkdir(`${this.base}/${name}`, { mode: 0o700 });
    } catch (err) {
      throw new Error(`${this.path}/${name} cannot be made: ${pathTrouble(err)}`);
    }
    this.#created.push(name);
  }

  async enginePath(name: string): Promise<string> {
    return pinned(await this.#sub(name));
  }

  async writeFile(name: string, text: string): Promise<void> {
    checkName(name);
    // Named by the path the user knows, not the pinned one it is written through.
    await writePrivately(
      `${this.base}/${name}`,
      text,
      (_file, message, cause) => new Error(message.replaceAll(this.base, this.path), { cause }),
    );
    if (!this.#created.includes(name)) this.#created.push(name);
    await this.#handle.sync();
  }

  async readFile(name: string, maxBytes: number): Promise<string | undefined> {
    checkName(name);
    const shown = `${this.path}/${name}`;
    return await readSmallFile(`${this.base}/${name}`, shown, maxBytes, (st) => {
      refuseInside(shown, st);
    });
  }

  async remove(name: string): Promise<void> {
    checkName(name);
    await this.#subs.get(name)?.close();
    this.#subs.delete(name);
    await rm(`${this.base}/${name}`, { recursive: true, force: true });
    await this.#handle.sync();
  }

  async seal(sub: string, signal?: AbortSignal): Promise<SnapshotFile[]> {
    const dir = await this.#sub(sub);
    const names = (await readdir(pinned(dir))).sort();
    const opened: { name: string; handle: FileHandle; bytes: number }[] = [];
    try {
      for (const name of names) {
        const { handle, size } = await this.#existing(dir, `${this.path}/${sub}/${name}`, name);
        opened.push({ name, handle, bytes: size });
      }
      // On disk before the snapshot says it is done; hashed meanwhile, from the page cache.
      const [digests] = await Promise.all([
        this.#digests
          ? digestAll(opened.map((o) => ({ ...o, name: `${this.path}/${sub}/${o.name}` })), {
            signal,
          })
          : opened.map(() => "0".repeat(64)),
        Promise.all(opened.map((o) => o.handle.datasync())).then(() => dir.sync()),
      ]);
      return opened.map((o, i) => ({
        path: `${sub}/${o.name}`,
        bytes: o.bytes,
        chunkedSha256: digests[i],
      }));
    } finally {
      await Promise.all(opened.map((o) => o.handle.close()));
    }
  }

  async check(
    files: readonly SnapshotFile[],
    o: CheckOptions,
  ): Promise<Checked> {
    const bySub = new Map<string, Map<string, SnapshotFile>>();
    for (const f of files) {
      const [sub, name] = f.path.split("/");
      if (!bySub.has(sub)) bySub.set(sub, new Map());
      bySub.get(sub)!.set(name, f);
    }
    const present = new Set(await readdir(this.base));
    for (const name of present) {
      if (!bySub.has(name) && !(o.topFiles ?? []).includes(name)) {
        throw new Error(
          `${this.path}/${name} is not part of the snapshot: its manifest does not list it`,
        );
      }
    }
    const opened: { file: SnapshotFile; handle: FileHandle }[] = [];
    try {
      for (const [sub, listed] of bySub) {
        if (!present.has(sub)) {
          throw new Error(
            `${this.path}/${sub} is missing, which the manifest lists with ${listed.size} ` +
              `file${listed.size === 1 ? "" : "s"}: the snapshot is incomplete, or a copy of it ` +
              `left the directory out`,
          );
        }
        const dir = await this.#sub(sub);
        const names = new Set(await readdir(pinned(dir)));
        for (const name of names) {
          if (!listed.has(name)) {
            throw new Error(
              `${this.path}/${sub}/${name} is not part of the snapshot: its manifest does not ` +
                `list it`,
            );
          }
        }
        for (const [name, file] of listed) {
          if (!names.has(name)) {
            throw new Error(
              `${this.path}/${file.path} is missing, which the manifest lists (${file.bytes} ` +
                `bytes): the snapshot is incomplete, or a copy of it left the file out`,
            );
          }
          const { handle, size } = await this.#existing(dir, `${this.path}/${file.path}`, name);
          opened.push({ file, handle });
          if (size !== file.bytes) {
            throw new Error(
              `${this.path}/${file.path} has ${size} bytes where the manifest says ${file.bytes}: ` +
                `the snapshot is truncated or was changed`,
            );
          }
        }
      }
      if (!o.digests || !this.#digests) return nothingLater(false);
      const later = opened.filter(({ file }) => o.later?.(file) ?? false);
      const now = opened.filter((x) => !later.includes(x));
      const source = ({ file, handle }: { file: SnapshotFile; handle: FileHandle }) => ({
        handle,
        bytes: file.bytes,
        name: `${this.path}/${file.path}`,
      });
      await digestAll(now.map(source), {
        signal: o.signal,
        onDigest: (i, digest) => this.#compare(now[i].file, digest),
      });
      if (later.length === 0) return nothingLater(true);
      // The files left for later stay open, and are closed once their digests are done.
      opened.splice(0, opened.length, ...now);
      return this.#verifyLater(later, source, o.signal);
    } finally {
      await Promise.all(opened.map((o) => o.handle.close()));
    }
  }

  /** Throws where `digest` is not the one the manifest gives `file`. */
  #compare(file: SnapshotFile, digest: string): void {
    if (digest !== file.chunkedSha256) {
      throw new Error(
        `${this.path}/${file.path} is not the file the snapshot wrote: its digest is ` +
          `${digest}, and the manifest says ${file.chunkedSha256}`,
      );
    }
  }

  /** Compares the digests of `later` (open files) from now on: see {@link Checked.later}. */
  #verifyLater(
    later: readonly { file: SnapshotFile; handle: FileHandle }[],
    source: (x: { file: SnapshotFile; handle: FileHandle }) => DigestSource,
    signal: AbortSignal | undefined,
  ): Checked {
    const subOf = (f: SnapshotFile) => f.path.split("/")[0];
    const left = new Map<string, number>();
    for (const { file } of later) left.set(subOf(file), (left.get(subOf(file)) ?? 0) + 1);
    const subs = new Map([...left.keys()].map((sub) => [sub, Promise.withResolvers<void>()]));
    // Awaited or not: a refusal must never be an unhandled rejection.
    for (const w of subs.values()) w.promise.catch(() => {});
    const done = digestAll(later.map(source), {
      ...(signal ? { signal } : {}),
      onDigest: (i, digest) => {
        const { file } = later[i];
        this.#compare(file, digest);
        const sub = subOf(file);
        left.set(sub, left.get(sub)! - 1);
        if (left.get(sub) === 0) subs.get(sub)!.resolve();
      },
    }).then(
      () => {},
      (err) => {
        for (const w of subs.values()) w.reject(err);
        throw err;
      },
    );
    done.catch(() => {});
    // Settled as soon as the digests are (a refusal waits for no file to close); the files are
    // closed after, and close() waits for that.
    this.#verifying = done.then(() => {}, () => {}).then(() =>
      Promise.all(later.map((x) => x.handle.close())).then(() => {})
    );
    return {
      digests: true,
      later: (sub) => subs.get(sub)?.promise ?? Promise.resolve(),
      all: done,
    };
  }

  async removeCreated(): Promise<string[]> {
    const removed: string[] = [];
    for (const name of [...this.#created].reverse()) {
      await this.remove(name);
      removed.push(`${this.path}/${name}`);
    }
    this.#created.length = 0;
    if (this.#made) {
      await rm(`${pinned(this.#made.parent)}/${this.#made.name}`, { recursive: true, force: true });
      removed.push(this.path);
    }
    return removed;
  }

  async close(): Promise<void> {
    // The digests left for later end first (stopped by check's signal, or done).
    await this.#verifying;
    await Promise.all([...this.#subs.values()].map((h) => h.close()));
    this.#subs.clear();
    await this.#handle.close();
    await this.#made?.parent.close();
  }

  /** The subdirectory `name`, open and checked (once). */
  async #sub(name: string): Promise<FileHandle> {
    checkName(name);
    const known = this.#subs.get(name);
    if (known) return known;
    const shown = `${this.path}/${name}`;
    const handle = await openDir(shown, `${this.base}/${name}`);
    try {
      await checkInside(shown, handle, "directory");
    } catch (err) {
      await handle.close();
      throw err;
    }
    this.#subs.set(name, handle);
    return handle;
  }

  /**
   * The file `name` in the open directory `dir` (`shown` in messages), opened without following a
   * link and checked, with its size; `undefined` where there is none.
   */
  async #openFile(
    dir: FileHandle,
    shown: string,
    name: string,
  ): Promise<{ handle: FileHandle; size: number } | undefined> {
    checkName(name);
    let handle: FileHandle;
    try {
      handle = await open(`${pinned(dir)}/${name}`, FILE);
    } catch (err) {
      if (errorCode(err) === "ENOENT") return undefined;
      throw await notOpened(shown, `${pinned(dir)}/${name}`, "file", err);
    }
    try {
      return { handle, size: (await checkInside(shown, handle, "file")).size };
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /** {@link #openFile}, of a file that must be there. */
  async #existing(dir: FileHandle, shown: string, name: string) {
    const file = await this.#openFile(dir, shown, name);
    if (!file) throw new Error(`${shown} does not exist`);
    return file;
  }
}

function checkName(name: string): void {
  if (!NAME.test(name) || name.includes("..")) {
    throw new RangeError(`not a name inside a snapshot: ${JSON.stringify(name)}`);
  }
}
