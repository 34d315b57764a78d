/**
 * Digests of a snapshot's files, computed in parallel. A file's digest is its chunked SHA-256: the
 * SHA-256 of the SHA-256s of its 8 MiB pieces in order (an empty file: the SHA-256 of nothing).
 * Its pieces are hashed at once on every core (`crypto.subtle` hashes off the main thread in Deno
 * and Bun), which a plain SHA-256, one stream on one core, cannot be. With coreutils:
 * `split -b 8M --filter='sha256sum | head -c 64 | xxd -r -p' FILE | sha256sum`.
 *
 * @module
 */

import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { availableParallelism } from "node:os";

/** Bytes of one piece of a file's chunked SHA-256. */
export const PIECE_BYTES = 8 * 2 ** 20;

/** What a digest is of: a file already open, its size, and its name for messages. */
export interface DigestSource {
  readonly handle: FileHandle;
  readonly bytes: number;
  readonly name: string;
}

/** How many pieces are read and hashed at once: two per core, at least four. */
export function piecesAtOnce(): number {
  return Math.max(4, 2 * availableParallelism());
}

/**
 * The chunked SHA-256 of each source (hex), in their order: every piece of every file read and
 * hashed with {@link piecesAtOnce} pieces at once. Stops at the first error, or once `signal` is
 * aborted, rejecting with it.
 */
export async function digestAll(
  sources: readonly DigestSource[],
  signal?: AbortSignal,
): Promise<string[]> {
  const pieces: { file: number; index: number }[] = [];
  const digests = sources.map((s, file) => {
    const count = Math.ceil(s.bytes / PIECE_BYTES);
    for (let index = 0; index < count; index++) pieces.push({ file, index });
    return new Array<Uint8Array>(count);
  });
  let next = 0;
  let failure: unknown;
  const worker = async () => {
    while (next < pieces.length && failure === undefined) {
      if (signal?.aborted) throw signal.reason;
      const { file, index } = pieces[next++];
      const s = sources[file];
      const offset = index * PIECE_BYTES;
      const length = Math.min(PIECE_BYTES, s.bytes - offset);
      const buffer = new Uint8Array(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await s.handle.read(buffer, got, length - got, offset + got);
        if (bytesRead === 0) {
          throw new Error(`${s.name} ended at ${offset + got} bytes, not ${s.bytes}`);
        }
        got += bytesRead;
      }
      digests[file][index] = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
    }
  };
  const workers = Array.from(
    { length: Math.min(piecesAtOnce(), pieces.length) },
    () =>
      worker().catch((err) => {
        failure ??= err;
      }),
  );
  await Promise.all(workers);
  if (failure !== undefined) throw failure;
  return digests.map((list) => {
    const outer = createHash("sha256");
    for (const d of list) outer.update(d);
    return outer.digest("hex");
  });
}
