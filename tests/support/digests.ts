// The chunked SHA-256 of whole files at once, for tests and measurements of os/digest.ts: its
// PieceHasher asked every piece of each file (the product asks piece by piece: digestOf, the seal).

import { digestOf, type DigestSource, PieceHasher } from "../../os/digest.ts";

/**
 * The chunked SHA-256 of each source (hex), in their order: in worker threads once there is enough
 * to hash, or at once in `threads` of them (0: on the calling thread). Rejects at the first piece
 * that cannot be read, or once `signal` is aborted.
 */
export async function digestAll(
  sources: readonly DigestSource[],
  o: { threads?: number; signal?: AbortSignal } = {},
): Promise<string[]> {
  const hasher = new PieceHasher({ ...o, ...(o.threads !== undefined ? { workersFrom: 0 } : {}) });
  try {
    return await Promise.all(sources.map((s) => digestOf(hasher, s)));
  } finally {
    await hasher.close();
  }
}
