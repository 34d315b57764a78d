// How fast os/digest.ts hashes files from the page cache on this machine's cores: one file of
// SIZE GiB written here, then digestAll over it 3 times in its worker threads (one per core) and
// once on the calling thread, GB/s each; a plain SHA-256 on one core beside it. `deno run -A tests/gpu/exp/digest_rate.ts [GiB]`.
import process from "node:process";
import { open, rm } from "node:fs/promises";
import { createHash } from "node:crypto";
import { availableParallelism } from "node:os";
import { digestAll } from "../../support/digests.ts";

const gib = Number(process.argv[2] ?? 4);
const file = `/tmp/digest-rate-${process.pid}.bin`;
const chunk = new Uint8Array(64 * 2 ** 20).map((_, i) => i & 255);
const h0 = await open(file, "w");
for (let i = 0; i < gib * 16; i++) await h0.write(chunk);
await h0.close();
const bytes = gib * 2 ** 30;
console.log(`cores ${availableParallelism()}, ${gib} GiB file`);
for (const threads of [undefined, undefined, undefined, 0]) {
  const handle = await open(file, "r");
  const t = performance.now();
  await digestAll([{ handle, bytes, name: file }], { threads });
  const s = (performance.now() - t) / 1000;
  await handle.close();
  const how = threads === 0 ? "calling thread" : "workers";
  console.log(`digestAll, ${how}: ${(bytes / s / 1e9).toFixed(2)} GB/s (${s.toFixed(2)} s)`);
}
const t = performance.now();
const h = createHash("sha256");
for (let i = 0; i < 16; i++) h.update(chunk);
const s = (performance.now() - t) / 1000;
console.log(`plain SHA-256, one core: ${(16 * chunk.length / s / 1e9).toFixed(2)} GB/s`);
await rm(file);
