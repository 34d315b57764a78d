// Where a restore's checks spend their time with digests (issue 32: 0.23-0.27 s more than without,
// 8 x 2 GiB on an H200): one snapshot of COUNT targets of MIB MiB, the sizes of one tree's files
// and of the files compared before criu starts, then the store's check as a restore makes it,
// timed to its answer and to the end of the digests left for later (asked at once: as a restore
// made it before `laterFrom`, the code this measured), ROUNDS times; beside it the
// same check with nothing left for later, and one piece hashed by a fresh worker (its start). Run
// as root from the repo root with criu and the target of tests/gpu/setup.sh:
//   BUN_BE_BUN=1 $bin/cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts \
//     tests/gpu/exp/restore_checks.ts CRIU TARGET [COUNT] [MIB] [ROUNDS]
import { readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { snapshot } from "../../../mod.ts";
import { FileSnapshotStore } from "../../../os/snapshot_store.ts";
import { PieceHasher } from "../../../os/digest.ts";
import type { SnapshotFile } from "../../../core/snapshot/store.ts";
import { fifoTargets, openNative, runStart } from "../../../bench/snapshot_runs.ts";

const [criuPath, target] = process.argv.slice(2, 4);
const [count, mib, rounds] = [4, 5, 6].map((i, k) => Number(process.argv[i] ?? [8, 2048, 3][k]));
const { scratch, env } = runStart("/tmp/ckpt-restore-checks");
const native = await openNative({ criu: { criuPath } }, scratch);
const store = new FileSnapshotStore();
const machine = { ...native, store };
const world = fifoTargets(target, scratch, env, native);
const images = join(scratch, "img");
const ms = (t: number) => (performance.now() - t).toFixed(0);

const targets = await world.start(count, mib, "c");
let t = performance.now();
const made = await snapshot(targets.map((x) => x.pid), images, { machine, timeoutMs: 300_000 });
console.log(`snapshot of ${count} x ${mib} MiB: ${ms(t)} ms`);
const files: readonly SnapshotFile[] = made.manifest.files;
const later = (f: SnapshotFile) => /\/(dump\.log|pages-[0-9]+\.img)$/.test(f.path);
const sum = (fs: readonly SnapshotFile[]) => fs.reduce((s, f) => s + f.bytes, 0);
const tree = readdirSync(images).find((d) => d.startsWith("tree-"))!;
console.log(`one tree (${tree}), largest first:`);
for (
  const f of readdirSync(join(images, tree)).map((n) => ({
    n,
    b: statSync(join(images, tree, n)).size,
  }))
    .sort((a, b) => b.b - a.b).slice(0, 12)
) console.log(`  ${String(f.b).padStart(12)} ${f.n}`);
const now = files.filter((f) => !later(f));
console.log(
  `files: ${files.length}, compared before criu: ${now.length} of ${sum(now)} bytes, ` +
    `left for later: ${files.length - now.length} of ${sum(files) - sum(now)} bytes`,
);

for (let r = 0; r < rounds; r++) {
  for (const mode of ["later: memory images, dump.log", "all now"] as const) {
    const dir = await store.open(images);
    t = performance.now();
    const checked = await dir.check(files, {
      digests: true,
      topFiles: ["manifest.json"],
      ...(mode === "all now" ? {} : { later }),
    });
    const answered = ms(t);
    await checked.all;
    console.log(`round ${r}, ${mode}: answered in ${answered} ms, all digests in ${ms(t)} ms`);
    await dir.close();
  }
  t = performance.now();
  // The files compared before criu alone (the rest of the listing refused as unlisted is not
  // wanted here): their digests on this thread, as a check of them alone makes them.
  const hasher = new PieceHasher();
  const { digestOf } = await import("../../../os/digest.ts");
  const { open } = await import("node:fs/promises");
  for (const f of now) {
    const handle = await open(join(images, f.path));
    await digestOf(hasher, { handle, bytes: f.bytes, name: f.path });
    await handle.close();
  }
  await hasher.close();
  console.log(
    `round ${r}: the ${now.length} files compared before criu, hashed alone: ${ms(t)} ms`,
  );
  const fresh = new PieceHasher({ workersFrom: 0 });
  const big = files.find(later)!;
  const handle = await (await import("node:fs/promises")).open(join(images, big.path));
  t = performance.now();
  await fresh.hash({ handle, bytes: big.bytes, name: big.path }, 0);
  console.log(`round ${r}: one piece by a fresh worker (its start): ${ms(t)} ms`);
  await handle.close();
  await fresh.close();
}
rmSync(scratch, { recursive: true, force: true });
await native.close();
process.exit(0);
