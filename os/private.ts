// Files private to their owner, and the one judgement of who may own and change a path: what this
// package keeps as root must not be planted or read by others, so a directory it keeps is its
// owner's alone (0700 where this makes it), and a file is written whole (0600, renamed into place).

import { constants, type Stats } from "node:fs";
import { lstat, mkdir, open, rename, rm } from "node:fs/promises";
import path from "node:path";
import process from "node:process";
import { messageOf, PATH_ERRORS } from "../core/errors.ts";

/** What a path must be. */
type Kind = "file" | "directory";

/** Makes the error for a path that cannot be used; `message` says what is wrong. */
export type Refuse = (path: string, message: string, cause?: unknown) => Error;

const plainError: Refuse = (_path, message, cause) =>
  new Error(message, cause === undefined ? undefined : { cause });

/** This program's user id, where the platform has one. */
export const myUid = (): number | undefined => process.getuid?.();

/** What {@link checkPrivate} asks of a path. */
export interface PrivateRules {
  /** Nobody else may read it either (mode 0700 or 0600 or tighter); else only write. */
  strict?: boolean;
  /** A sticky directory (`/tmp`, root's or this user's) is fine too (not with `strict`). */
  sticky?: boolean;
  /** Makes the error; a plain `Error` by default. */
  refuse?: Refuse;
  /** What to do about it, added to each message. */
  hint?: string;
}

/** Whom {@link ownerFault} lets own and write a file or directory. */
export interface OwnerRules {
  /** Root may own it too (else: only this user). */
  rootToo?: boolean;
  /** A directory with the sticky bit (`/tmp`) may be written by others. */
  sticky?: boolean;
  /** Nobody else may read it either (mode 0600, or 0700 for a directory, or tighter). */
  strict?: boolean;
}

/**
 * The one judgement of who owns and may change a path, from its status: what is wrong
 * (`belongs to another user (uid 1000, you are 0)`, `may be written by its group (mode 0775)`), or
 * `undefined`; see {@link OwnerRules}.
 */
export function ownerFault(
  st: { uid: number; mode: number },
  rules: OwnerRules = {},
): string | undefined {
  const uid = myUid();
  const another = `belongs to another user (uid ${st.uid}, you are ${uid})`;
  if (uid !== undefined && st.uid !== uid && !(rules.rootToo && st.uid === 0)) return another;
  const mode = st.mode & 0o7777;
  const should = (st.mode & 0o170000) === 0o040000 ? "0700" : "0600"; // S_IFDIR: a directory
  const read = `may be read or written by other users (mode ${octal(mode)}, not ${should})`;
  if (rules.strict) return mode & 0o077 ? read : undefined;
  if ((mode & 0o022) === 0 || (rules.sticky && (mode & 0o1000) !== 0)) return undefined;
  return `may be written by ${mode & 0o002 ? "other users" : "its group"} (mode ${octal(mode)})`;
}

/**
 * What is wrong with `p` as a `kind` of its own (not a link) whose owner and mode `rules` judge
 * ({@link ownerFault}), named: `missing` where there is none, `undefined` where nothing is.
 */
async function statFault(p: string, kind: Kind, rules: (st: Stats) => OwnerRules) {
  const st = await lstat(p).catch((cause: unknown) => ({ cause }));
  if ("cause" in st) {
    const fault = `${p} cannot be looked at: ${messageOf(st.cause)}`;
    return errorCode(st.cause) === "ENOENT" ? "missing" : { fault, cause: st.cause };
  }
  if (st.isSymbolicLink()) return { fault: `${p} is a symbolic link, not a ${kind} of its own` };
  const not = `${p} is not a ${kind === "file" ? "regular file" : kind}`;
  if (kind === "file" ? !st.isFile() : !st.isDirectory()) return { fault: not };
  const fault = ownerFault(st, rules(st));
  return fault ? { fault: `${p} ${fault}` } : { size: st.size };
}

/** What is wrong with `p` as a `kind` root trusts (`sticky`: a sticky one may be written). */
export async function faultOf(p: string, kind: Kind, sticky: boolean): Promise<string | undefined> {
  const found = await statFault(p, kind, () => ({ rootToo: true, sticky }));
  return found === "missing" ? `${p} cannot be looked at: it does not exist` : found.fault;
}

/** The first fault of the directories above `real` (an absolute real path), up to `/`. */
export async function faultAbove(real: string): Promise<string | undefined> {
  for (let dir = path.dirname(real);; dir = path.dirname(dir)) {
    const fault = await faultOf(dir, "directory", true);
    if (fault || dir === "/") return fault;
  }
}

/**
 * The one check of a path this package keeps private: a `kind` of its own (no link), this user's,
 * that nobody else may write (or, `strict`, read); its size, or `undefined` where there is none.
 * Throws the error `rules.refuse` makes, naming the path and the fault.
 */
export async function checkPrivate(
  file: string,
  kind: Kind,
  rules: PrivateRules = {},
): Promise<{ size: number } | undefined> {
  // A sticky directory (/tmp): nobody can replace a file of ours there, so root may own it too.
  const found = await statFault(file, kind, (st) => {
    const sticky = rules.sticky && !rules.strict && (st.mode & 0o1000) !== 0;
    return { rootToo: sticky, sticky, strict: rules.strict };
  });
  if (found === "missing") return undefined;
  const hint = rules.hint && found.cause === undefined ? `; ${rules.hint}` : "";
  if (found.fault) throw (rules.refuse ?? plainError)(file, `${found.fault}${hint}`, found.cause);
  return { size: found.size! };
}

/**
 * The text of a small file (`shown` in messages), read whole: opened without following a link or
 * blocking (a FIFO is refused), judged by `check` on its status, at most `maxBytes` even where it
 * grows as it is read; `undefined` where there is none.
 */
export async function readSmallFile(
  file: string,
  shown: string,
  maxBytes: number,
  check?: (st: Stats) => void,
): Promise<string | undefined> {
  const { O_RDONLY, O_NONBLOCK, O_NOFOLLOW } = constants;
  const handle = await open(file, O_RDONLY | O_NONBLOCK | O_NOFOLLOW).catch((err) => {
    const code = errorCode(err);
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP") throw new Error(`${shown} is a symbolic link, not a file of its own`);
    throw new Error(`${shown} cannot be opened: ${pathTrouble(err)}`, { cause: err });
  });
  if (!handle) return undefined;
  try {
    const st = await handle.stat();
    if (!st.isFile()) throw new Error(`${shown} is not a regular file`);
    check?.(st);
    const big = `${shown} is ${st.size} bytes, more than it can be (${maxBytes})`;
    const grew = `${shown} grew past ${maxBytes} bytes as it was read`;
    if (st.size > maxBytes) throw new Error(big);
    const buffer = new Uint8Array(maxBytes + 1);
    let length = 0;
    for (let n = -1; n !== 0; length += n) {
      n = (await handle.read(buffer, length, buffer.length - length, null)).bytesRead;
      if (length + n > maxBytes) throw new Error(grew);
    }
    return new TextDecoder().decode(buffer.subarray(0, length));
  } finally {
    await handle.close();
  }
}

/** Makes `dir` (mode 0700) where missing, and checks it ({@link checkPrivate}). */
export async function privateDirectory(dir: string, rules: PrivateRules = {}): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 }).catch((err) => {
    const refuse = rules.refuse ?? plainError;
    throw refuse(dir, `cannot create the directory ${dir}: ${messageOf(err)}`, err);
  });
  await checkPrivate(dir, "directory", rules);
}

/** Writes `text` to `file` through a new temporary file (mode 0600) in its directory, renamed. */
export async function writePrivately(
  file: string,
  text: string,
  refuse: Refuse = plainError,
): Promise<void> {
  const temp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  try {
    const handle = await open(temp, "wx", 0o600);
    try {
      await handle.chmod(0o600);
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, file);
  } catch (err) {
    await rm(temp, { force: true });
    throw refuse(file, `cannot write ${file}: ${messageOf(err)}`, err);
  }
}

/** A file mode as `0600`. */
const octal = (mode: number) => `0${(mode & 0o7777).toString(8).padStart(3, "0")}`;

/** The `code` of a file system error (`ENOENT`, ...), where it has one. */
export const errorCode = (err: unknown): string | undefined =>
  (err as { code?: unknown })?.code as string | undefined;

/**
 * What a file system error means, to end a sentence that named the path (`it does not exist
 * (ENOENT)`); a code without words, the system's line less the (maybe pinned) path.
 */
export function pathTrouble(err: unknown): string {
  const code = errorCode(err);
  if (code !== undefined && PATH_ERRORS[code]) return `${PATH_ERRORS[code]} (${code})`;
  return messageOf(err).replace(/, [a-z]+ '[^'\n]*'(?: -> '[^'\n]*')?$/, "");
}

/** A path to what `handle` has open, which no rename can redirect: `/proc/<pid>/fd/<n>`. */
export const pinned = (handle: { readonly fd: number }): string =>
  `/proc/${process.pid}/fd/${handle.fd}`;
