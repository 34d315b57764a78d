// A tree's seal that follows its dump (os/digest_seal.ts): begun beside the dump, it hashes and
// syncs the files as they are written, and gives what a seal after the dump gives, file for file;
// a piece changed after it was hashed is caught by the restore's check; a dump that fails or is
// aborted stops it at once with nothing left open; what a seal refuses, it refuses in the same
// words. And the digests' workers, shared by every hashing under way (os/digest.ts).

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import { digestOf, PIECE_BYTES, PieceHasher } from "../os/digest.ts";
import { seal, type SealDir } from "../os/digest_seal.ts";
import { digestAll } from "./support/digests.ts";
import { withScratch } from "./support/temp_dirs.ts";

const store = new FileSnapshotStore();

/** A seal's directory of the files in `at`, whose `datasync` is `datasync(name, the real one)`. */
function spiedDir(
  at: string,
  datasync: (name: string, real: () => Promise<void>) => Promise<void>,
) {
  const dir: SealDir = {
    sub: "tree-1",
    shown: at,
    list: () => Promise.resolve(readdirSync(at).sort()),
    open: async (name) => {
      const handle = await open(join(at, name), "r");
      const { size, dev, ino } = await handle.stat();
      const spied = new Proxy(handle, {
        get(target, key) {
          if (key === "datasync") return () => datasync(name, () => target.datasync());
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      return { handle: spied, size, dev, ino };
    },
    sync: () => Promise.resolve(),
  };
  return dir;
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The chunked SHA-256 by its definition: the SHA-256 of the 8 MiB pieces' SHA-256s. */
function byDefinition(bytes: Uint8Array): string {
  const outer = createHash("sha256");
  for (let at = 0; at < bytes.length; at += PIECE_BYTES) {
    outer.update(createHash("sha256").update(bytes.subarray(at, at + PIECE_BYTES)).digest());
  }
  return outer.digest("hex");
}

/** The files under `dir` this process has open (the directory itself left out). */
function openInside(dir: string): string[] {
  return readdirSync("/proc/self/fd").flatMap((fd) => {
    try {
      const to = readlinkSync(`/proc/self/fd/${fd}`);
      return to.startsWith(`${dir}/`) ? [to] : [];
    } catch {
      return [];
    }
  });
}

/** Waits until `file` is open more than `writers` times here (the seal follows it), then `ms`. */
async function followed(file: string, ms: number, writers = 0): Promise<void> {
  const tree = file.slice(0, file.lastIndexOf("/"));
  for (let k = 0; k < 200 && openInside(tree).filter((f) => f === file).length <= writers; k++) {
    await sleep(25);
  }
  await sleep(ms);
}

/** A new snapshot directory with the empty tree `tree-1`: the store's, and the tree's path. */
async function withTree(
  body: (snap: Awaited<ReturnType<typeof store.create>>, tree: string) => Promise<void>,
) {
  await withScratch("ckpt-seal-test-", async (s) => {
    const snap = await store.create(join(s.dir, "snap"));
    try {
      await snap.subdir("tree-1");
      await body(snap, join(s.dir, "snap", "tree-1"));
    } finally {
      await snap.close();
    }
  });
}

/** Appends `bytes` to `file` in `parts` writes, `ms` apart, as a dump writes an image. */
async function dribble(file: string, bytes: Uint8Array, parts: number, ms: number) {
  const fd = openSync(file, "a", 0o600);
  try {
    for (let k = 0; k < parts; k++) {
      const at = Math.floor((bytes.length * k) / parts);
      writeSync(fd, bytes, at, Math.floor((bytes.length * (k + 1)) / parts) - at);
      await sleep(ms);
    }
  } finally {
    closeSync(fd);
  }
}

const put = (file: string, bytes: Uint8Array | string) =>
  writeFileSync(file, bytes, { mode: 0o600 });

describe("a seal that follows its dump", () => {
  test("gives what a seal after the dump gives, file for file, whatever the dump did meanwhile", () =>
    withTree(async (snap, tree) => {
      const writing = (async () => {
        put(join(tree, "empty.img"), "");
        put(join(tree, "gone.img"), randomBytes(PIECE_BYTES + 1));
        put(join(tree, "swapped.img"), randomBytes(2 * PIECE_BYTES + 9));
        put(join(tree, "shrunk.img"), randomBytes(2 * PIECE_BYTES + PIECE_BYTES / 2));
        await dribble(join(tree, "pages-1.img"), randomBytes(3 * PIECE_BYTES + 5), 8, 60);
        // Files followed, then removed, replaced under their name, cut short (whole pieces lost).
        rmSync(join(tree, "gone.img"));
        put(join(tree, "next.img"), randomBytes(2 * PIECE_BYTES + 3));
        renameSync(join(tree, "next.img"), join(tree, "swapped.img"));
        truncateSync(join(tree, "shrunk.img"), PIECE_BYTES + 100);
        put(join(tree, "exact.img"), randomBytes(2 * PIECE_BYTES));
        await sleep(400);
        put(join(tree, "late.img"), "written last");
      })();
      const files = await snap.seal("tree-1", { writing });
      assert.deepEqual(files, await snap.seal("tree-1"), "as a seal after the dump gives");
      assert.deepEqual(
        files.map((f) => f.path),
        ["empty", "exact", "late", "pages-1", "shrunk", "swapped"].map((n) => `tree-1/${n}.img`),
      );
      for (const f of files) {
        const bytes = readFileSync(join(tree, "..", f.path));
        assert.equal(f.bytes, bytes.length, f.path);
        assert.equal(f.chunkedSha256, byDefinition(bytes), f.path);
      }
      assert.deepEqual(openInside(tree), [], "nothing left open");
    }));

  test("a piece changed after it was hashed keeps the digest hashed, and the restore's check refuses the file", () =>
    withTree(async (snap, tree) => {
      const file = join(tree, "pages-1.img");
      const first = randomBytes(2 * PIECE_BYTES + 1), last = randomBytes(100);
      const writing = (async () => {
        const fd = openSync(file, "w", 0o600);
        try {
          writeSync(fd, first); // pieces 0 and 1 whole
          await followed(file, 1000, 1);
          writeSync(fd, Buffer.from([first[5] ^ 1]), 0, 1, 5);
          writeSync(fd, last, 0, last.length, first.length);
        } finally {
          closeSync(fd);
        }
      })();
      const files = await snap.seal("tree-1", { writing });
      const hashed = byDefinition(Buffer.concat([first, last]));
      assert.equal(files[0].chunkedSha256, hashed, "the digest of the piece as it was hashed");
      assert.notEqual(hashed, byDefinition(readFileSync(file)));
      await assert.rejects(
        snap.check(files, { digests: true }),
        /pages-1\.img is not the file the snapshot wrote: its digest is [0-9a-f]{64}, and the manifest says/,
      );
    }));

  test("once the dump ends, every file is put on disk (fdatasync), then the directory", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      const synced: string[] = [];
      const dir = spiedDir(s.dir, (name, real) => (synced.push(name), real()));
      dir.sync = () => Promise.resolve(void synced.push("the directory"));
      const writing = (async () => {
        put(join(s.dir, "pages-1.img"), randomBytes(1000)); // too few bytes to sync as it grows
        await sleep(200);
        put(join(s.dir, "core-1.img"), "written last");
      })();
      const files = await seal(dir, { digests: true, writing });
      assert.deepEqual(files.map((f) => f.path), ["tree-1/core-1.img", "tree-1/pages-1.img"]);
      assert.equal(synced.at(-1), "the directory", synced.join(", "));
      assert.deepEqual(synced.slice(0, -1).sort(), ["core-1.img", "pages-1.img"]);
    }));

  test("a sync that fails as the file grows fails the seal, where a later one would succeed", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      // The kernel tells of a lost write once: a second sync of the file would say nothing.
      let syncs = 0;
      const eio = Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" });
      const dir = spiedDir(s.dir, (_, real) => ++syncs === 1 ? Promise.reject(eio) : real());
      const writing = (async () => {
        await dribble(join(s.dir, "pages-1.img"), randomBytes(3 * PIECE_BYTES), 6, 80);
        for (let k = 0; k < 200 && syncs === 0; k++) await sleep(25); // one sync while it grew
      })();
      await assert.rejects(seal(dir, { digests: true, writing }), /EIO: i\/o error/);
      assert.equal(syncs, 1, "no second sync hides the first one's failure");
    }));

  for (const how of ["fails", "is aborted"] as const) {
    test(`a dump that ${how} stops it at once, with nothing left open`, () =>
      withTree(async (snap, tree) => {
        const dump = Promise.withResolvers<void>(), stop = new AbortController();
        const file = join(tree, "pages-1.img");
        const writer = dribble(file, randomBytes(3 * PIECE_BYTES), 6, 80);
        const sealing = snap.seal("tree-1", { writing: dump.promise, signal: stop.signal });
        await followed(file, 200, 1);
        const t0 = performance.now();
        if (how === "fails") dump.reject(new Error("criu failed"));
        else stop.abort(new Error("stopped"));
        await assert.rejects(
          sealing,
          how === "fails" ? /^Error: criu failed$/ : /^Error: stopped$/,
        );
        assert.ok(performance.now() - t0 < 2000, `${performance.now() - t0} ms`);
        await writer;
        assert.deepEqual(openInside(tree), [], "nothing left open");
      }));
  }

  const refusals: [string, (tree: string) => void, RegExp][] = [
    [
      "a file others may write",
      (tree) => chmodSync(join(tree, "pages-1.img"), 0o666),
      /pages-1\.img may be written by other users \(mode 0666\)/,
    ],
    [
      "a symbolic link",
      (tree) => symlinkSync("pages-1.img", join(tree, "link.img")),
      /link\.img is a symbolic link, not a file of its own$/,
    ],
    ["a directory", (tree) => mkdirSync(join(tree, "sub.img")), /sub\.img is not a regular file$/],
  ];
  for (const [what, make, said] of refusals) {
    test(`refuses ${what} made after the files were followed, as a seal after the dump does`, () =>
      withTree(async (snap, tree) => {
        const file = join(tree, "pages-1.img");
        const writing = (async () => {
          put(file, randomBytes(PIECE_BYTES + 1));
          await followed(file, 300);
          make(tree);
        })();
        const err = await snap.seal("tree-1", { writing }).then(() => undefined, (e) => e);
        assert.match(String(err?.message), said);
        const after = await snap.seal("tree-1").then(() => undefined, (e) => e);
        assert.equal(err.message, after?.message, "the same words");
        assert.deepEqual(openInside(tree), [], "nothing left open");
      }));
  }
});

describe("the digests' workers, shared", () => {
  test("two hashings at once get their own digests; an abort of one leaves the other whole", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      const contents = [0, 1, 2].map(() => randomBytes(3 * PIECE_BYTES + 7));
      const sources = await Promise.all(contents.map(async (bytes, k) => {
        const file = join(s.dir, `f${k}`);
        put(file, bytes);
        return { handle: await open(file, "r"), bytes: bytes.length, name: file };
      }));
      try {
        const stop = new AbortController();
        const [a, b, c] = [
          digestAll([sources[0]], { threads: 2, signal: stop.signal }),
          digestAll([sources[1], sources[2]], { threads: 2 }),
          digestAll([sources[2]], { threads: 1 }),
        ];
        stop.abort(new Error("stopped by the test"));
        await assert.rejects(a, /stopped by the test/);
        assert.deepEqual(await b, [byDefinition(contents[1]), byDefinition(contents[2])]);
        assert.deepEqual(await c, [byDefinition(contents[2])]);
        assert.deepEqual(await digestAll(sources, { threads: 3 }), contents.map(byDefinition));
      } finally {
        await Promise.all(sources.map((x) => x.handle.close()));
      }
    }));

  test("a piece hashed before that could not be is asked again; the others are taken as hashed", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      const bytes = randomBytes(2 * PIECE_BYTES + 5), file = join(s.dir, "f");
      put(file, bytes);
      const source = { handle: await open(file, "r"), bytes: bytes.length, name: file };
      const hasher = new PieceHasher({ threads: 0 });
      try {
        const second = createHash("sha256").update(bytes.subarray(PIECE_BYTES, 2 * PIECE_BYTES));
        const known = [
          Promise.resolve(undefined),
          Promise.resolve(new Uint8Array(second.digest())),
        ];
        assert.equal(await digestOf(hasher, source, known), byDefinition(bytes));
      } finally {
        await hasher.close();
        await source.handle.close();
      }
    }));

  test("a file that ends before its size is refused, saying where it ended", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      const file = join(s.dir, "short");
      put(file, randomBytes(100));
      const source = { handle: await open(file, "r"), bytes: 300, name: file };
      const hasher = new PieceHasher({ threads: 0 });
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("still reading after 5 s")), 5000);
      });
      try {
        await assert.rejects(
          Promise.race([digestOf(hasher, source), late]),
          new RegExp(`^Error: ${file} ended at 100 bytes, not 300$`),
        );
      } finally {
        clearTimeout(timer);
        await source.handle.close(); // first: a read that never ends would hold the close
        await hasher.close();
      }
    }));

  test("workers take over once as many bytes as workersFrom were asked, that many included", () =>
    withScratch("ckpt-seal-test-", async (s) => {
      const file = join(s.dir, "one");
      put(file, randomBytes(PIECE_BYTES));
      const source = { handle: await open(file, "r"), bytes: PIECE_BYTES, name: file };
      const hasher = new PieceHasher({ threads: 1, workersFrom: PIECE_BYTES });
      try {
        const before = PieceHasher.busy;
        const piece = hasher.hash(source, 0);
        assert.equal(PieceHasher.busy, before + 1, "its one piece went to a worker");
        await piece;
      } finally {
        await hasher.close();
        await source.handle.close();
      }
    }));
});
