/**
 * The chunked SHA-256 over bytes as they come: what the examples compute over GPU memory read back
 * piece by piece, and the value a simulated process's `memoryChunkedSha256()` gives for the same
 * bytes (tests/chunked_sha256_test.ts checks both against the definition).
 *
 * @module
 */

import { createHash, type Hash } from "node:crypto";
import { describeValue } from "../core/options.ts";
import { HASH_CHUNK_SIZE } from "../mock/memory.ts";

/**
 * The chunked SHA-256 of bytes fed in pieces of any size (GPU memory copied back piece by piece):
 * the SHA-256 of the SHA-256s (32 bytes each, in order) of the bytes' 1 MiB chunks, the last one
 * shorter, as 64 lowercase hex digits; no bytes give the SHA-256 of nothing. Not the SHA-256 of the
 * bytes, so that the simulator can keep each chunk's digest. With coreutils:
 * `split -b 1M --filter='sha256sum | head -c 64 | xxd -r -p' FILE | sha256sum`.
 *
 * @example
 * ```ts
 * import { ChunkedSha256, chunkedSha256 } from "./_chunked_sha256.ts";
 *
 * const bytes = new Uint8Array(3 * 2 ** 20 + 5).fill(7);
 * const hasher = new ChunkedSha256();
 * for (let at = 0; at < bytes.length; at += 1000) hasher.update(bytes.subarray(at, at + 1000));
 * console.log(hasher.digest() === chunkedSha256(bytes)); // true
 * ```
 */
export class ChunkedSha256 {
  readonly #outer: Hash = createHash("sha256");
  #chunk: Hash | undefined;
  #filled = 0;
  #done = false;

  /** Feeds the next `bytes` (any size); returns this hasher. Throws once the digest was given. */
  update(bytes: Uint8Array): this {
    if (!(bytes instanceof Uint8Array)) {
      throw new TypeError(`bytes must be a Uint8Array, got ${describeValue(bytes)}`);
    }
    this.#checkOpen();
    for (let at = 0; at < bytes.length;) {
      const n = Math.min(HASH_CHUNK_SIZE - this.#filled, bytes.length - at);
      (this.#chunk ??= createHash("sha256")).update(bytes.subarray(at, at += n));
      if ((this.#filled += n) === HASH_CHUNK_SIZE) this.#endChunk();
    }
    return this;
  }

  /** The chunked SHA-256 of every byte fed, as 64 lowercase hex digits; once only. */
  digest(): string {
    this.#checkOpen();
    if (this.#filled > 0) this.#endChunk();
    this.#done = true;
    return this.#outer.digest("hex");
  }

  #checkOpen(): void {
    if (this.#done) throw new Error("this ChunkedSha256 has given its digest: make a new one");
  }

  #endChunk(): void {
    this.#outer.update(this.#chunk!.digest());
    this.#chunk = undefined;
    this.#filled = 0;
  }
}

/** The chunked SHA-256 of `bytes` (defined at {@link ChunkedSha256}), as 64 lowercase hex digits. */
export function chunkedSha256(bytes: Uint8Array): string {
  return new ChunkedSha256().update(bytes).digest();
}
