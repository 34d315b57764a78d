/**
 * What this package runs as root is chosen with care: a program (criu) that only root, or this
 * user, could have put where it is; a library directory for it named explicitly, checked the same
 * way; and private work directories that no other user can reach. A path is trusted where it, and
 * every directory above its real path, belongs to root or to this user and may not be written by
 * the group or by others (a directory above with the sticky bit, `/tmp`, may be: nobody can rename
 * or replace another user's entry there). Each refusal is one sentence naming the path and the
 * fault.
 *
 * @module
 */

import { lstat, readdir, realpath } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { messageOf } from "../core/errors.ts";
import { errorCode, myUid, ownerFault, privateDirectory } from "./private.ts";

/**
 * What is wrong with `p` as a trusted `kind` (a file or directory of root's or this user's that
 * the group and others may not write; `sticky`: a directory with the sticky bit may be written),
 * or `undefined` where nothing is.
 */
async function faultOf(
  p: string,
  kind: "file" | "directory",
  sticky: boolean,
): Promise<string | undefined> {
  let st;
  try {
    st = await lstat(p);
  } catch (err) {
    return `${p} cannot be looked at (${messageOf(err)})`;
  }
  if (st.isSymbolicLink()) return `${p} is a symbolic link`;
  if (kind === "file" ? !st.isFile() : !st.isDirectory()) {
    return `${p} is not a ${kind === "file" ? "regular file" : "directory"}`;
  }
  const fault = ownerFault(st, { rootToo: true, sticky });
  return fault === undefined ? undefined : `${p} ${fault}`;
}

/** The first fault of the directories above `real` (an absolute real path), up to `/`. */
export async function faultAbove(real: string): Promise<string | undefined> {
  for (let dir = path.dirname(real);; dir = path.dirname(dir)) {
    const fault = await faultOf(dir, "directory", true);
    if (fault) return fault;
    if (dir === path.dirname(dir)) return undefined;
  }
}

/**
 * The real path of the program at `file` (absolute), where it and every directory above it are
 * trusted (see the module documentation) and it is executable; else an `Error` whose message is one
 * sentence, `<what> at <file> is refused: <fault>`. Run the real path it resolves to: nothing is
 * looked up by name again.
 */
export async function trustedProgram(file: string, what: string): Promise<string> {
  let real: string;
  try {
    real = await realpath(file);
  } catch (err) {
    const why = errorCode(err) === "ENOENT" ? "there is no such file" : messageOf(err);
    throw new Error(`${what} at ${file} is refused: ${why}.`);
  }
  const shown = real === file ? file : `${file} (${real})`;
  const fault = await faultOf(real, "file", false) ?? await faultAbove(real);
  if (fault) throw new Error(`${what} at ${shown} is refused: ${fault}.`);
  const st = await lstat(real);
  if ((st.mode & 0o111) === 0) {
    throw new Error(`${what} at ${shown} is refused: ${real} is not executable.`);
  }
  return real;
}

/**
 * The real path of the directory `dir` (absolute) of libraries for a program run as root, where it,
 * every directory above it and everything below it are trusted (the directory itself may not be
 * written by others even with the sticky bit); else an `Error` with one sentence naming the fault.
 */
export async function trustedLibraryDir(dir: string, what: string): Promise<string> {
  if (!path.isAbsolute(dir)) {
    throw new TypeError(`${what} must be an absolute path, got ${JSON.stringify(dir)}`);
  }
  let real: string;
  try {
    real = await realpath(dir);
  } catch (err) {
    throw new Error(`${what} ${dir} is refused: ${messageOf(err)}.`);
  }
  const shown = real === dir ? dir : `${dir} (${real})`;
  const fault = await faultOf(real, "directory", false) ?? await faultAbove(real) ??
    await treeFault(real);
  if (fault) throw new Error(`${what} ${shown} is refused: ${fault}.`);
  return real;
}

/**
 * The first fault below the library directory `dir`, all of which the loader may search (before
 * `dir` itself: `glibc-hwcaps/x86-64-v2/`, `tls/`, `x86_64/`, ...): each subdirectory, file and
 * link must be trusted; one that cannot be read is a fault.
 */
async function treeFault(dir: string): Promise<string | undefined> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    return `${dir} cannot be read (${messageOf(err)})`;
  }
  for (const entry of entries) {
    const p = path.join(dir, entry.name);
    const fault = entry.isSymbolicLink()
      ? await linkFault(p)
      : entry.isDirectory()
      ? await faultOf(p, "directory", false) ?? await treeFault(p)
      : await faultOf(p, "file", false);
    if (fault) return fault;
  }
  return undefined;
}

/** A library's symbolic link (`libfoo.so.1 -> libfoo.so.1.2`): what it leads to must be trusted. */
async function linkFault(link: string): Promise<string | undefined> {
  let real: string;
  try {
    real = await realpath(link);
  } catch (err) {
    return `${link} leads nowhere (${messageOf(err)})`;
  }
  return await faultOf(real, "file", false) ?? await faultAbove(real);
}

/**
 * The base of this program's private work directories, made where missing (mode 0700) and
 * checked: `/run/ckpt-cuda-work` as root (a tmpfs of root's), else `ckpt-cuda-work-<uid>` in the
 * temporary directory; the directories above it must be trusted, so a `$TMPDIR` that another user
 * may write (without the sticky bit) is refused. Throws an `Error` naming the path and the fault.
 */
export async function privateWorkBase(): Promise<string> {
  const uid = myUid();
  const run = "/run";
  const base = uid === 0 && !(await faultOf(run, "directory", false))
    ? path.join(run, "ckpt-cuda-work")
    : path.join(await realpath(os.tmpdir()).catch(() => os.tmpdir()), `ckpt-cuda-work-${uid}`);
  const above = await faultAbove(base);
  if (above) {
    throw new Error(
      `criu's work directories cannot be made under ${path.dirname(base)}: ${above}.`,
    );
  }
  await privateDirectory(base, {
    strict: true,
    hint: "remove it; criu's work directories are made there",
  });
  return base;
}
