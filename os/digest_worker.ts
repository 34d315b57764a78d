/**
 * A worker thread of `digest.ts`: it hashes the pieces it is sent, one at a time, each read from a
 * file that the main thread has open (through `/proc/self/fd/<n>`, so it reads that very file), and
 * answers each with the piece's SHA-256. It does nothing of its own accord.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";

/** A piece to hash: `length` bytes at `offset` of the file at `path`. */
export interface PieceRequest {
  readonly id: number;
  readonly path: string;
  readonly offset: number;
  readonly length: number;
}

/** Asks the worker to close the files it opened, and to say so. */
export interface PiecesDone {
  readonly done: true;
}

/** The piece's SHA-256, or why it could not be read; `closed` once its files are closed. */
export type PieceReply =
  | { readonly id: number; readonly digest: Uint8Array }
  | { readonly id: number; readonly error: string }
  | { readonly closed: true };

interface WorkerScope {
  onmessage: ((event: MessageEvent<PieceRequest | PiecesDone>) => void) | null;
  postMessage(message: PieceReply): void;
}

const scope = globalThis as unknown as WorkerScope;
const files = new Map<string, number>();
let buffer = new Uint8Array(0);

scope.onmessage = ({ data }) => {
  if ("done" in data) {
    for (const fd of files.values()) closeSync(fd);
    files.clear();
    scope.postMessage({ closed: true });
    return;
  }
  const { id, path, offset, length } = data;
  try {
    let fd = files.get(path);
    if (fd === undefined) files.set(path, fd = openSync(path, "r"));
    if (buffer.length < length) buffer = new Uint8Array(length);
    let got = 0;
    while (got < length) {
      const n = readSync(fd, buffer, got, length - got, offset + got);
      if (n === 0) throw new Error(`it ended at ${offset + got} bytes`);
      got += n;
    }
    const digest = new Uint8Array(createHash("sha256").update(buffer.subarray(0, length)).digest());
    scope.postMessage({ id, digest });
  } catch (err) {
    scope.postMessage({ id, error: err instanceof Error ? err.message : String(err) });
  }
};
