/**
 * Snapshots on the file system. A restore runs what a snapshot's directory holds, as root, so the
 * directory is opened once, walked from `/` without following a link it does not trust, and worked
 * on through the open descriptor (`/proc/<pid>/fd/<n>`), which no rename above can redirect. Each
 * directory on the way is root's or this user's, written by nobody else unless sticky (`/tmp`);
 * the snapshot's own is this user's, and everything inside root's or this user's, written by
 * nobody else, no link. Files are written whole, images fsynced and digested as they are dumped
 * (`digest_seal.ts`), and a check compares everything inside with the manifest; the engine reads
 * the very files it opened.
 *
 * @module
 */

import { constants, type Stats } from "node:fs";
import { type FileHandle, lstat, mkdir, open, readdir, readlink, rm } from "node:fs/promises";
import { symlink } from "node:fs/promises";
import path from "node:path";
import type { Checked, CheckOptions, SnapshotDir } from "../core/snapshot/store.ts";
import type { SnapshotFile, SnapshotStore } from "../core/snapshot/store.ts";
import type { Machine } from "../core/machine.ts";
import { digestOf, type DigestSource, PieceHasher } from "./digest.ts";
import { seal } from "./digest_seal.ts";
import { errorCode, myUid, ownerFault, pathTrouble, pinned } from "./private.ts";
import { readSmallFile, type Refuse, writePrivately } from "./private.ts";
import { removeWorkDir, workDir } from "./trusted.ts";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;
const DIR = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$/;
/** What to do with a snapshot another user's copy made. */
const COPY = ", so copy it as the user who will restore it (tar or rsync -a run by that user), " +
  "or give it to that user (chown -R)";
/** Where a path checked is: above a snapshot's directory (`where`), that directory, or inside it. */
type Place = { above: string } | "top" | "inside";

/** The file system's snapshots: see the module documentation. */
export class FileSnapshotStore implements SnapshotStore {
  readonly #digests: boolean;

  /**
   * The store. `digests: false` is for benchmarks that measure what digests cost: files are still
   * fsynced, but get an all-zero digest, and a check compares none.
   */
  constructor(options: { digests?: boolean } = {}) {
    this.#digests = options.digests ?? true;
  }

  /** Makes `dir` for a new snapshot (mode 0700), or takes an empty private one, and opens it. */
  readonly create = (dir: string): Promise<SnapshotDir> => this.#open(dir, true);
  /** Opens a snapshot's directory, refusing one that is not private or that others could swap. */
  readonly open = (dir: string): Promise<SnapshotDir> => this.#open(dir, false);

  async #open(dir: string, create: boolean): Promise<SnapshotDir> {
    // As given, "..": the walk reads it as the kernel does (after a link: above where it leads).
    const where = path.isAbsolute(dir) ? dir : `${path.resolve()}/${dir}`;
    const { parent, name } = await walkTo(where);
    const through = `${pinned(parent)}/${name}`;
    let made = false, handle: FileHandle | undefined;
    try {
      if (create) {
        await mkdir(through, { mode: 0o700 }).then(() => made = true, (err) => {
          if (errorCode(err) === "EEXIST") return;
          throw new Error(`${where} cannot be made: ${pathTrouble(err)}`);
        });
      }
      handle = (await openInside(where, through, "directory", true)).handle;
      const names = create && !made ? await namesIn(pinned(handle), where) : [];
      if (names.length > 0) {
        const n = names.length === 1
          ? `it holds ${JSON.stringify(names[0])}`
          : `${names.length} entries`;
        throw new Error(`${where} is not empty (${n}): a snapshot needs a new or empty directory`);
      }
      if (create && !made) await handle.chmod(0o700); // empty, taken over: made private as new
      if (!made) await parent.close();
      return new FileSnapshotDir(where, handle, this.#digests, made ? { parent, name } : undefined);
    } catch (err) {
      await handle?.close();
      await parent.close();
      throw err;
    }
  }
}

/** The machine's snapshot store; the file system where there is no machine, or it has none. */
export const storeOf = (machine: Machine | undefined): SnapshotStore =>
  machine?.store ?? new FileSnapshotStore();

/**
 * Opens the directory above `where` (absolute) one directory at a time from `/`, each checked
 * before anything in it is trusted (root's or this user's, written by nobody else unless sticky).
 * A symbolic link on the way is followed only where it is root's or this user's (in a sticky
 * directory, anyone may have planted one), as the kernel's `protected_symlinks` would have it.
 */
async function walkTo(where: string): Promise<{ parent: FileHandle; name: string }> {
  const parts = where.split("/").filter(Boolean), name = parts.pop();
  const below = `${where} cannot hold a snapshot: give the path of a directory below /`;
  if (name === undefined || name === "." || name === "..") throw new Error(below);
  let handle = await open("/", DIR), at: string[] = [], links = 0;
  try {
    refuseOwner("/", await handle.stat(), { above: where });
    while (parts.length > 0) {
      const part = parts.shift()!;
      if (part === ".") continue;
      const to = part === ".." ? at.slice(0, -1) : [...at, part], shown = `/${to.join("/")}`;
      const through = `${pinned(handle)}/${part}`;
      const next = await open(through, DIR).catch((err: unknown) => err);
      if (next instanceof Error) {
        const st = await lstat(through).catch(() => undefined);
        if (!st?.isSymbolicLink()) {
          if (errorCode(next) !== "ENOENT") throw await notOpened(shown, through, next);
          const it = parts.length === 0
            ? `its parent directory ${shown}`
            : `${shown}, above ${where},`;
          throw new Error(`${it} does not exist`);
        }
        if (++links > 40) throw new Error(`${where}: too many symbolic links on the way`);
        const of = `${shown}, above ${where}, is a symbolic link of another user (uid ${st.uid})`;
        const lead = `${of}: they could lead the snapshot anywhere; give the path it leads to`;
        if (st.uid !== 0 && st.uid !== myUid()) throw new Error(lead);
        const target = await readlink(through);
        parts.unshift(...target.split("/").filter(Boolean));
        if (target.startsWith("/")) {
          const root = await open("/", DIR);
          await handle.close();
          [handle, at] = [root, []];
        }
        continue;
      }
      await handle.close();
      [handle, at] = [next as FileHandle, to];
      refuseOwner(shown, await handle.stat(), { above: where });
    }
    return { parent: handle, name };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** The names in the directory read `through` its pinned path; one that cannot be is `shown`. */
const namesIn = (through: string, shown: string): Promise<string[]> =>
  readdir(through).catch((err) =>
    Promise.reject(new Error(`${shown} cannot be listed: ${pathTrouble(err)}`, { cause: err }))
  );

/** Why `through` could not be opened (as a directory, or a `file`): a link, or the error itself. */
async function notOpened(shown: string, through: string, err: unknown, kind = "directory") {
  const code = errorCode(err);
  if (code === "ENOENT") return new Error(`${shown} does not exist`);
  if (code === "ELOOP" || code === "ENOTDIR") {
    const link = (await lstat(through).catch(() => undefined))?.isSymbolicLink();
    const is = link ? `a symbolic link, not a ${kind} of its own` : `not a ${kind}`;
    return new Error(`${shown} is ${is}`);
  }
  return new Error(`${shown} cannot be opened: ${pathTrouble(err)}`, { cause: err });
}

/**
 * Throws where `shown` (of status `st`) may not be owned or written as it is: above a snapshot's
 * directory, root's or this user's and written by nobody else unless sticky; the directory itself
 * (`top`), this user's and written by no other; inside it, root's or this user's, written by no other.
 */
function refuseOwner(shown: string, st: { uid: number; mode: number }, place: Place): void {
  const above = typeof place === "object" ? place.above : undefined;
  const fault = ownerFault(st, { rootToo: place !== "top", sticky: above !== undefined });
  if (!fault) return;
  const belongs = fault.startsWith("belongs");
  const swap = `${belongs ? "that user" : "they"} could swap the snapshot for their own`;
  const keep = "keep snapshots where only root and you can write";
  if (above !== undefined) throw new Error(`${shown}, above ${above}, ${fault}: ${swap}; ${keep}`);
  const must = place === "top"
    ? `a snapshot's directory must be this user's and private (chmod 700)${belongs ? COPY : ""}`
    : belongs
    ? `what a snapshot holds must be root's or this user's${COPY}`
    : "nobody else may write what a snapshot holds (chmod go-w)";
  throw new Error(`${shown} ${fault}; ${must}`);
}

/** Opens `at` (pinned, shown as `shown`) in a snapshot (or, `top`, its directory), and checks it. */
async function openInside(shown: string, at: string, kind: "file" | "directory", top = false) {
  const flags = kind === "file" ? O_RDONLY | O_NOFOLLOW | O_NONBLOCK : DIR;
  const handle = await open(at, flags).catch(async (err) => {
    throw await notOpened(shown, at, err, kind);
  });
  try {
    const st = await handle.stat();
    // A directory is one, or it would not have opened (O_DIRECTORY).
    if (kind === "file" && !st.isFile()) throw new Error(`${shown} is not a regular file`);
    refuseOwner(shown, st, top ? "top" : "inside");
    return { handle, size: st.size, dev: st.dev, ino: st.ino };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** The directory a store made for a snapshot: its parent, open, and its name there. */
type Made = { parent: FileHandle; name: string };

/** An open file of a snapshot, as digests take it, and what the manifest says of it. */
type Opened = DigestSource & { readonly file: SnapshotFile };

/** A snapshot's directory, open: see the module documentation. */
class FileSnapshotDir implements SnapshotDir {
  readonly #handle: FileHandle;
  /** The pinned path of the directory itself. */
  readonly #base: string;
  readonly #made: Made | undefined;
  readonly #digests: boolean;
  readonly #created: string[] = [];
  readonly #subs = new Map<string, FileHandle>();
  /** The subdirectories the last check opened, and its links to those very files for the engine. */
  readonly #checked = new Set<string>();
  #view: Promise<string> | undefined;
  /** Every file a check opened, and the engine's directories of links to them: gone at close. */
  readonly #kept: FileHandle[] = [];
  readonly #views: string[] = [];
  /** The digests a check left for later, where it left some: settled once they end. */
  #verifying: Promise<void> | undefined;

  constructor(readonly path: string, handle: FileHandle, digests: boolean, made?: Made) {
    [this.#handle, this.#digests, this.#made] = [handle, digests, made];
    this.#base = pinned(handle);
  }

  async subdir(name: string): Promise<void> {
    checkName(name);
    await mkdir(`${this.#base}/${name}`, { mode: 0o700 }).catch((err) => {
      throw new Error(`${this.path}/${name} cannot be made: ${pathTrouble(err)}`);
    });
    this.#created.push(name);
  }

  /**
   * The subdirectory `name` as the engine is given it: once a check opened its files, a private
   * directory of links to those very files (`/proc/<pid>/fd/<n>`), so that what the engine reads
   * is what was checked; else the open subdirectory, for a dump to write in.
   */
  async enginePath(name: string): Promise<string> {
    if (this.#checked.has(name)) return path.join(await this.#view!, name);
    return pinned(await this.#sub(name));
  }

  async writeFile(name: string, text: string): Promise<void> {
    checkName(name);
    // Named by the path the user knows, not the pinned one it is written through.
    const refuse: Refuse = (_file, message, cause) =>
      new Error(message.replaceAll(this.#base, this.path), { cause });
    await writePrivately(`${this.#base}/${name}`, text, refuse);
    if (!this.#created.includes(name)) this.#created.push(name);
    await this.#handle.sync();
  }

  async readFile(name: string, maxBytes: number): Promise<string | undefined> {
    checkName(name);
    const shown = `${this.path}/${name}`, inside = (st: Stats) => refuseOwner(shown, st, "inside");
    return await readSmallFile(`${this.#base}/${name}`, shown, maxBytes, inside);
  }

  async remove(name: string): Promise<void> {
    checkName(name);
    await this.#subs.get(name)?.close();
    this.#subs.delete(name);
    await rm(`${this.#base}/${name}`, { recursive: true, force: true });
    await this.#handle.sync();
  }

  async seal(sub: string, o: Parameters<SnapshotDir["seal"]>[1] = {}): Promise<SnapshotFile[]> {
    const dir = await this.#sub(sub), shown = `${this.path}/${sub}`;
    return await seal({
      sub,
      shown,
      list: async () => (await namesIn(pinned(dir), shown)).sort(),
      open: (name) => this.#file(dir, `${shown}/${name}`, name),
      sync: () => dir.sync(),
    }, { ...o, digests: this.#digests });
  }

  async check(files: readonly SnapshotFile[], o: CheckOptions): Promise<Checked> {
    const bySub = new Map<string, Map<string, SnapshotFile>>();
    for (const f of files) {
      const [sub, name] = f.path.split("/");
      bySub.set(sub, (bySub.get(sub) ?? new Map()).set(name, f));
    }
    const unlisted = (shown: string) =>
      new Error(`${shown} is not part of the snapshot: its manifest does not list it`);
    const partial = "the snapshot is incomplete, or a copy of it left the";
    const missing = (shown: string, lists: string, what: string) =>
      new Error(`${shown} is missing, which the manifest lists ${lists}: ${partial} ${what} out`);
    const present = new Set(await namesIn(this.#base, this.path)), top = o.topFiles ?? [];
    const stray = [...present].find((name) => !bySub.has(name) && !top.includes(name));
    if (stray !== undefined) throw unlisted(`${this.path}/${stray}`);
    const opened: Opened[] = [];
    try {
      for (const [sub, listed] of bySub) {
        const n = `with ${listed.size} file${listed.size === 1 ? "" : "s"}`;
        if (!present.has(sub)) throw missing(`${this.path}/${sub}`, n, "directory");
        const dir = await this.#sub(sub);
        const names = new Set(await namesIn(pinned(dir), `${this.path}/${sub}`));
        const extra = [...names].find((name) => !listed.has(name));
        if (extra !== undefined) throw unlisted(`${this.path}/${sub}/${extra}`);
        for (const [name, file] of listed) {
          const shown = `${this.path}/${file.path}`;
          if (!names.has(name)) throw missing(shown, `(${file.bytes} bytes)`, "file");
          const { handle, size } = await this.#file(dir, shown, name);
          opened.push({ file, handle, bytes: file.bytes, name: shown });
          const cut = `the manifest says ${file.bytes}: the snapshot is truncated or was changed`;
          if (size !== file.bytes) throw new Error(`${shown} has ${size} bytes where ${cut}`);
        }
      }
      const verified = o.digests && this.#digests ? await this.#verify(opened, o) : undefined;
      // The engine's directory of links to the files opened, by subdirectory: made now, not as the
      // engine starts (a simulated clock would run on meanwhile); one that cannot be made is the
      // engine's error, where it asks for it, not the check's.
      this.#view = (async () => {
        const view = await workDir("images-");
        this.#views.push(view);
        for (const { file, handle } of opened) {
          await mkdir(path.join(view, path.dirname(file.path)), { recursive: true, mode: 0o700 });
          await symlink(pinned(handle), path.join(view, file.path));
        }
        return view;
      })();
      await this.#view.catch(() => {});
      for (const sub of bySub.keys()) this.#checked.add(sub);
      this.#kept.push(...opened.splice(0).map((x) => x.handle));
      return verified ?? { digests: false, later: () => Promise.resolve(), all: Promise.resolve() };
    } finally {
      await Promise.all(opened.map((x) => x.handle.close()));
    }
  }

  /**
   * Compares the digests of `opened`: now, or for those `o.later` picks, from then on, each
   * subdirectory's settled as soon as its last one is ({@link Checked.later}).
   */
  async #verify(opened: readonly Opened[], o: CheckOptions): Promise<Checked> {
    const isLater = (x: Opened) => o.later?.(x.file) ?? false;
    const subOf = (x: Opened) => x.file.path.split("/")[0];
    const [now, later] = [opened.filter((x) => !isLater(x)), opened.filter(isLater)];
    // Those compared now first, alone (a restore's are few and small: hashed on this thread, as no
    // worker starts below 64 MiB); the later ones once `laterFrom` settles or `signal` aborts, so
    // that the workers hashing them take no core from the checks that follow (0.2 s, 8 x 2 GiB).
    const hasher = new PieceHasher({ signal: o.signal, leave: o.busy });
    const matches = async (x: Opened) => {
      const d = await digestOf(hasher, x), want = x.file.chunkedSha256;
      const not = `${x.name} is not the file the snapshot wrote: its digest is ${d}`;
      if (d !== want) throw new Error(`${not}, and the manifest says ${want}`);
    };
    await Promise.all(now.map(matches)).catch(async (err) => {
      await hasher.close();
      throw err;
    });
    const stop = o.signal, aborted = new Promise((end) => stop?.addEventListener("abort", end));
    const begun = Promise.race([stop?.aborted ? 0 : o.laterFrom, aborted]).catch(() => {});
    // Each handled at once: settled(later), below, gives every one Promise.all's handler.
    const compared = new Map(later.map((x) => [x, begun.then(() => matches(x))] as const));
    const settled = (xs: readonly Opened[]) =>
      Promise.all(xs.map((x) => compared.get(x))).then(() => {});
    const all = settled(later).finally(() => hasher.close());
    // Once one differs, every subdirectory not yet settled is refused with it.
    const failed = all.then(() => new Promise<void>(() => {}));
    const subs = new Map([...new Set(later.map(subOf))].map((sub) => {
      const p = Promise.race([settled(later.filter((x) => subOf(x) === sub)), failed]);
      p.catch(() => {});
      return [sub, p];
    }));
    this.#verifying = all.catch(() => {});
    return { digests: true, later: (sub) => subs.get(sub) ?? Promise.resolve(), all };
  }

  async removeCreated(): Promise<string[]> {
    const names = this.#created.splice(0).reverse();
    for (const name of names) await this.remove(name);
    const removed = names.map((name) => `${this.path}/${name}`);
    if (this.#made) {
      await rm(`${pinned(this.#made.parent)}/${this.#made.name}`, { recursive: true, force: true });
      removed.push(this.path);
    }
    return removed;
  }

  async close(): Promise<void> {
    // The digests left for later end first (stopped by check's signal, or done).
    await this.#verifying;
    for (const view of this.#views.splice(0)) await removeWorkDir(view);
    await Promise.all([...this.#kept.splice(0), ...this.#subs.values()].map((h) => h.close()));
    this.#subs.clear();
    this.#checked.clear();
    await this.#handle.close();
    await this.#made?.parent.close();
  }

  /** The subdirectory `name`, open and checked (once). */
  async #sub(name: string): Promise<FileHandle> {
    checkName(name);
    const handle = this.#subs.get(name) ??
      (await openInside(`${this.path}/${name}`, `${this.#base}/${name}`, "directory")).handle;
    this.#subs.set(name, handle);
    return handle;
  }

  /** The file `name` of the open directory `dir` (`shown` in messages), opened and checked. */
  #file(dir: FileHandle, shown: string, name: string) {
    checkName(name);
    return openInside(shown, `${pinned(dir)}/${name}`, "file");
  }
}

function checkName(name: string): void {
  const not = `not a name inside a snapshot: ${JSON.stringify(name)}`;
  if (!NAME.test(name) || name.includes("..")) throw new RangeError(not);
}
