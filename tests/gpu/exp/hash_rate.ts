// SHA-256 on one core of this machine, each way a runtime offers it, over 1 GiB in 256 KiB updates
// (a digest worker's reads): node:crypto's createHash, Bun.CryptoHasher where there is one, and
// crypto.subtle over 8 MiB pieces. `bun tests/gpu/exp/hash_rate.ts` (or deno run -A).
import { createHash } from "node:crypto";
const piece = new Uint8Array(256 * 1024).map((_, i) => (i * 7919) & 255);
const total = 2 ** 30;
const rate = (name: string, run: () => void | Promise<void>) => async () => {
  const t = performance.now();
  await run();
  const s = (performance.now() - t) / 1000;
  console.log(`${name}: ${(total / s / 1e9).toFixed(2)} GB/s`);
};
const bun = (globalThis as {
  Bun?: {
    CryptoHasher: new (a: string) => { update(b: Uint8Array): void; digest(): Uint8Array };
  };
}).Bun;
const ways = [
  rate("node:crypto createHash", () => {
    const h = createHash("sha256");
    for (let i = 0; i < total / piece.length; i++) h.update(piece);
    h.digest();
  }),
  ...(bun
    ? [rate("Bun.CryptoHasher", () => {
      const h = new bun.CryptoHasher("sha256");
      for (let i = 0; i < total / piece.length; i++) h.update(piece);
      h.digest();
    })]
    : []),
  rate("crypto.subtle, 8 MiB pieces", async () => {
    const big = new Uint8Array(8 * 2 ** 20);
    for (let i = 0; i < total / big.length; i++) await crypto.subtle.digest("SHA-256", big);
  }),
];
for (let round = 0; round < 2; round++) for (const way of ways) await way();
