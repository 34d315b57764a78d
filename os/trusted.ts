// What this package runs as root, chosen with care: a program (criu) and its library directory,
// trusted where they and every directory above their real paths belong to root or this user and
// may not be written by the group or others (a sticky directory above, `/tmp`, may be); and private
// work directories. Each refusal is one sentence naming the path and the fault.

import { lstat, mkdtemp, readdir, realpath, rm, rmdir } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { messageOf } from "../core/errors.ts";
import { checkPath } from "../core/options.ts";
import { statOf } from "./linux_host.ts";
import { checkPrivate, errorCode, faultAbove, faultOf } from "./private.ts";
import { myUid, privateDirectory } from "./private.ts";

/** The real path of the program `file` (run that), where it is trusted; else an `Error`. */
export async function trustedProgram(file: string, what: string): Promise<string> {
  const real = await realpath(file).catch((err) => {
    const why = errorCode(err) === "ENOENT" ? "there is no such file" : messageOf(err);
    throw new Error(`${what} at ${file} is refused: ${why}.`);
  });
  const shown = real === file ? file : `${file} (${real})`;
  const fault = await faultOf(real, "file", false) ?? await faultAbove(real);
  if (fault) throw new Error(`${what} at ${shown} is refused: ${fault}.`);
  return real;
}

/**
 * The real path of the library directory `dir` (absolute) of a program run as root, where it,
 * every directory above it and everything below it are trusted; else an `Error` naming the fault.
 */
export async function trustedLibraryDir(dir: string, what: string): Promise<string> {
  checkPath(dir, what);
  const real = await realpath(dir).catch((err) => {
    throw new Error(`${what} ${dir} is refused: ${messageOf(err)}.`);
  });
  const fault = await faultOf(real, "directory", false) ?? await faultAbove(real) ??
    await treeFault(real);
  const shown = real === dir ? dir : `${dir} (${real})`;
  if (fault) throw new Error(`${what} ${shown} is refused: ${fault}.`);
  return real;
}

/**
 * The first fault below the library directory `dir`, all of which the loader may search (before
 * `dir` itself: `glibc-hwcaps/x86-64-v2/`, `tls/`, `x86_64/`, ...): each subdirectory and file,
 * and where each link leads; one that cannot be read is a fault.
 */
async function treeFault(dir: string): Promise<string | undefined> {
  const entries = await readdir(dir, { withFileTypes: true }).catch((err: unknown) => err);
  if (!Array.isArray(entries)) return `${dir} cannot be read (${messageOf(entries)})`;
  for (const entry of entries) {
    const p = path.join(dir, entry.name);
    let fault;
    if (entry.isSymbolicLink()) {
      // `libfoo.so.1 -> libfoo.so.1.2`: what it leads to must be trusted.
      const real = await realpath(p).catch(() => undefined);
      fault = real === undefined
        ? `${p} leads nowhere`
        : await faultOf(real, "file", false) ?? await faultAbove(real);
    } else if (entry.isDirectory()) {
      fault = await faultOf(p, "directory", false) ?? await treeFault(p);
    } else fault = await faultOf(p, "file", false);
    if (fault) return fault;
  }
  return undefined;
}

/** `<pid>-<start>` of a live process, as work directories are named; `undefined` where gone. */
function programOf(pid: number): string | undefined {
  const stat = statOf(pid);
  return stat && `${pid}-${stat.start}`;
}

/**
 * A new private work directory `<pid>-<start>-<what>XXXXXX` of this program, under a private base
 * (0700; `/run/ckpt-cuda-work` as root, else `ckpt-cuda-work-<uid>` in the temporary directory,
 * below trusted directories), made once those of programs that are gone (one killed outright
 * leaves its own) are removed. Remove it with {@link removeWorkDir}.
 */
export async function workDir(what: string): Promise<string> {
  const uid = myUid();
  const base = uid === 0 && !(await faultOf("/run", "directory", false))
    ? "/run/ckpt-cuda-work"
    : path.join(await realpath(os.tmpdir()).catch(() => os.tmpdir()), `ckpt-cuda-work-${uid}`);
  const above = await faultAbove(base), under = path.dirname(base);
  if (above) throw new Error(`criu's work directories cannot be made under ${under}: ${above}.`);
  const hint = "remove it; criu's work directories are made there", dayAgo = Date.now() - 864e5;
  const rules = { strict: true, hint }, ours = (p: string) => checkPrivate(p, "directory", rules);
  let dir = "";
  // The last work directory removed takes the base along (removeWorkDir): made again where another
  // program removes it meanwhile, and checked again with what was made in it (a link is refused).
  for (let tries = 10, raced = /ENOENT|EEXIST/; !dir && tries > 0; tries--) {
    const made = await privateDirectory(base, rules)
      .then(() => mkdtemp(path.join(base, `${programOf(process.pid)}-${what}`)))
      .catch((e) => tries > 1 && raced.test(`${e.cause?.code}${e.code}`) ? "" : Promise.reject(e));
    dir = made && await ours(base) && await ours(made) ? made : "";
  }
  if (!dir) throw new Error(`${base} was removed each time a work directory was made in it.`);
  for (const name of await readdir(base)) {
    const owner = /^([0-9]+)-([0-9]+)-/.exec(name);
    const gone = owner
      ? programOf(+owner[1]) !== `${owner[1]}-${owner[2]}`
      // Named by no program (before they were; a failed run's kept log): gone a day old, or now.
      : /^(restore|dump|noplugins)-/.test(name) &&
        (await lstat(path.join(base, name)).catch(() => ({ mtimeMs: NaN }))).mtimeMs < dayAgo;
    if (gone) await rm(path.join(base, name), { recursive: true, force: true });
  }
  return dir;
}

/** Removes a work directory of {@link workDir}, and the base above it where left empty. */
export async function removeWorkDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  await rmdir(path.dirname(dir)).catch(() => {}); // another's work, or a kept log, is there
}
