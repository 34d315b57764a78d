/**
 * Files private to their owner: a directory only its owner may write (mode 0700 where this makes
 * it), and files written whole (a temporary file of mode 0600, renamed over the old one), so that
 * a reader sees the old contents or the new, never half of them. The records of the room check
 * (`records.ts`) and the simulated machine's state file (`cli/simulate.ts`) are kept so: this
 * package runs as root, and what it keeps must not be planted or read by others.
 *
 * Only `node:` modules that Deno and Bun both have.
 *
 * @module
 */

import { lstat, mkdir, open, rename, rm } from "node:fs/promises";
import process from "node:process";

/** Makes the error for a path that cannot be used; `message` says what is wrong. */
export type Refuse = (path: string, message: string, cause?: unknown) => Error;

const plainError: Refuse = (_path, message, cause) =>
  new Error(message, cause === undefined ? undefined : { cause });

/** This program's user id, where the platform has one. */
export function myUid(): number | undefined {
  return process.getuid?.();
}

/**
 * Makes `dir` (mode 0700) where missing, and checks it: a directory (not a symbolic link to
 * one), owned by this user (or by root, for a sticky directory such as `/tmp`), that nobody else
 * may write. With `strict`, nobody else may read or enter it either (mode 0700 or tighter).
 *
 * @throws the error `refuse` makes (a plain `Error` by default), naming the directory and the fault.
 */
export async function privateDirectory(
  dir: string,
  options: { strict?: boolean; refuse?: Refuse; hint?: string } = {},
): Promise<void> {
  const refuse = options.refuse ?? plainError;
  const hint = options.hint ? `; ${options.hint}` : "";
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw refuse(dir, `cannot create the directory ${dir}: ${errorText(err)}`, err);
  }
  const st = await lstat(dir);
  if (st.isSymbolicLink()) {
    throw refuse(dir, `${dir} is a symbolic link, not a directory of its own${hint}`);
  }
  if (!st.isDirectory()) throw refuse(dir, `${dir} is not a directory${hint}`);
  const uid = myUid();
  // Root's sticky directories (/tmp) are fine too: nobody else can replace a file of ours there.
  if (uid !== undefined && st.uid !== uid && !(st.uid === 0 && !options.strict)) {
    throw refuse(dir, `the directory ${dir} belongs to another user (uid ${st.uid})${hint}`);
  }
  const others = options.strict ? 0o077 : 0o022;
  if ((st.mode & others) !== 0 && (options.strict || (st.mode & 0o1000) === 0)) {
    throw refuse(
      dir,
      `the directory ${dir} may be ${options.strict ? "read or written" : "written"} by other ` +
        `users (mode ${octal(st.mode)})${hint}`,
    );
  }
}

/**
 * Writes `text` to `file` through a new temporary file (mode 0600, whatever the umask) in its
 * directory, renamed over it.
 *
 * @throws the error `refuse` makes, naming the file and the fault.
 */
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
    throw refuse(file, `cannot write ${file}: ${errorText(err)}`, err);
  }
}

/** A file mode as `0600`. */
export function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8).padStart(3, "0")}`;
}

/** The `code` of a file system error (`ENOENT`, ...), where it has one. */
export function errorCode(err: unknown): string | undefined {
  return (err as { code?: unknown })?.code as string | undefined;
}

/** An error's message, or the value as text. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
