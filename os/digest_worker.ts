// A worker thread of `digest.ts`: it hashes the pieces it is sent, one at a time, each read from a
// file that the main thread has open (through `/proc/<pid>/fd/<n>`, so it reads that very file,
// opened and closed again for each piece), and answers each with the piece's SHA-256. It does
// nothing of its own accord.

import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";

/** A piece to hash: `length` bytes at `offset` of the file at `path`. */
export interface PieceRequest {
  readonly path: string;
  readonly offset: number;
  readonly length: number;
}

/** The piece's SHA-256, or why it could not be read. */
export type PieceReply = { readonly digest: Uint8Array } | { readonly error: string };

const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent<PieceRequest>) => void) | null;
  postMessage(message: PieceReply): void;
};
// Read 256 KiB at a time, which stay in the core's cache between the read and the hash: a piece
// crosses the memory bus once (read whole into an 8 MiB buffer, it crossed three times).
const READ_BYTES = 256 * 1024;
const buffer = new Uint8Array(READ_BYTES);
scope.onmessage = ({ data: { path, offset, length } }) => {
  let reply: PieceReply, fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const hash = createHash("sha256");
    for (let got = 0, n = 0; got < length; got += n) {
      n = readSync(fd, buffer, 0, Math.min(READ_BYTES, length - got), offset + got);
      if (n === 0) throw new Error(`it ended at ${offset + got} bytes`);
      hash.update(buffer.subarray(0, n));
    }
    reply = { digest: new Uint8Array(hash.digest()) };
  } catch (err) {
    reply = { error: err instanceof Error ? err.message : String(err) };
  }
  // Closed before the answer: once answered, the worker may be ended at any time.
  if (fd !== undefined) closeSync(fd);
  scope.postMessage(reply);
};
