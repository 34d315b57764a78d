// A large manifest (issue 22, item 9): a generated one of several MB, thousands of trees and tens of
// thousands of files (tests/support/big_manifest.ts), is parsed whole and exactly: it comes back
// as written, and a fault at its very end is named by its path. Its time is bench/
// manifest_parse.ts's (16 MB in under 1 s; the parser was quadratic in trees x files before: a
// 10.6 MB manifest took 228 s); no timing is asserted here. Runs under `deno test -A` and
// `bun test`.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { MANIFEST_FORMAT, parseManifest, serializeManifest } from "../core/snapshot/manifest.ts";
import { MANIFEST_MAX_BYTES, SnapshotWriter } from "../core/snapshot/layout.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import { RefusedError } from "../core/errors.ts";
import { bigManifest } from "./support/big_manifest.ts";

describe("a manifest of several MB", () => {
  const text = bigManifest({ trees: 2000, processesPerTree: 2, filesPerTree: 10 }, MANIFEST_FORMAT);

  test("is parsed whole, and comes back exactly as written", () => {
    assert.ok(text.length > 4_000_000, `${text.length} bytes`);
    const m = parseManifest(text, "/srv/big/manifest.json");
    assert.equal(m.trees.length, 2000);
    assert.equal(m.files.length, 20_000);
    assert.equal(m.trees.reduce((n, t) => n + t.processes.length, 0), 4000);
    const last = m.trees[1999];
    assert.equal(last.images, `tree-${last.root}`);
    assert.deepEqual(last.processes[1].threads, [
      last.root + 4,
      last.root + 5,
      last.root + 6,
    ]);
    assert.equal(m.files[19_999].path, `tree-${last.root}/pages-9.img`);
    assert.equal(serializeManifest(m), text, "every field read, none added or lost");
  });

  test("a fault in its last file entry is named by its path", () => {
    const at = text.lastIndexOf('"chunkedSha256": "') + '"chunkedSha256": "'.length;
    const spoiled = `${text.slice(0, at)}X${text.slice(at + 1)}`;
    assert.throws(
      () => parseManifest(spoiled, "/srv/big/manifest.json"),
      (err: unknown) => {
        assert.ok(err instanceof RefusedError);
        assert.match(
          err.message,
          /\/srv\/big\/manifest\.json: files\[19999\]\.chunkedSha256 must be 64 lowercase hex digits/,
        );
        return true;
      },
    );
  });
});

describe("a value nested a million deep", () => {
  test("is refused naming its field, without writing the whole value out (issue 29, item 13a)", () => {
    // The refusal showed the value through JSON.stringify of all of it: 5 million arrays deep
    // took 24.8 s on Deno, and on Bun it overflowed the stack (a RangeError, not the refusal).
    const n = 1_000_000;
    const good = bigManifest({ trees: 1, processesPerTree: 1, filesPerTree: 1 }, MANIFEST_FORMAT);
    const text = good.replace(
      '"hostname": "bench"',
      `"hostname": ${"[".repeat(n)}${"]".repeat(n)}`,
    );
    const stringify = JSON.stringify;
    let longest = 0;
    JSON.stringify = ((...args: Parameters<typeof stringify>) => {
      const out = stringify(...args);
      longest = Math.max(longest, out?.length ?? 0);
      return out;
    }) as typeof stringify;
    try {
      assert.throws(
        () => parseManifest(text, "/srv/deep/manifest.json"),
        (err: unknown) =>
          err instanceof RefusedError &&
          err.message.includes("host.hostname must be a string of 1 to 4096 characters, got [[[") &&
          err.message.endsWith("[[[..."),
      );
    } finally {
      JSON.stringify = stringify;
    }
    assert.ok(longest <= 100, `the longest text written out was ${longest} characters`);
  });
});

describe("the manifest's bound", () => {
  test("a manifest of exactly the bytes a restore reads is written; one byte more is refused", async () => {
    // As many trees as fit a few hundred bytes short of the bound (a tree's text grows with its
    // pids' digits: the guess is corrected by the local size of a tree), then the hostname (4,096
    // characters at most) takes up the rest.
    const text = (trees: number) =>
      bigManifest({ trees, processesPerTree: 1, filesPerTree: 1 }, MANIFEST_FORMAT);
    const target = MANIFEST_MAX_BYTES - 300;
    let trees = Math.floor(target / text(1).length), made = text(trees);
    for (let i = 0; i < 6 && (made.length > target || made.length < target - 3000); i++) {
      const perTree = made.length - text(trees - 1).length;
      trees -= Math.ceil((made.length - target) / perTree);
      made = text(trees);
    }
    const base = parseManifest(made, "/srv/big/manifest.json");
    const sized = (bytes: number) => {
      const pad = bytes - new TextEncoder().encode(serializeManifest(base)).length;
      assert.ok(pad >= 0 && pad < 4000, `${pad} bytes to pad`);
      const host = { ...base.host, hostname: base.host.hostname + "h".repeat(pad) };
      return { ...base, host };
    };
    const temp = mkdtempSync(join(tmpdir(), "ckpt-manifest-bound-"));
    try {
      const trace = { startedAt: new Date(0).toISOString(), processes: [], roots: [] };
      for (const [bytes, ok] of [[MANIFEST_MAX_BYTES, true], [MANIFEST_MAX_BYTES + 1, false]]) {
        const path = join(temp, `snap-${bytes}`);
        const writer = await SnapshotWriter.begin(new FileSnapshotStore(), path, [], trace);
        try {
          const written = writer.writeManifest(sized(bytes as number));
          if (ok) {
            await written;
            assert.equal(statSync(join(path, "manifest.json")).size, bytes);
            const back = parseManifest(readFileSync(join(path, "manifest.json"), "utf8"), path);
            assert.equal(serializeManifest(back).length, bytes, "read back whole");
          } else {
            await assert.rejects(written, /16777217 bytes, more than a restore reads \(16777216\)/);
          }
        } finally {
          await writer.dir.close();
        }
      }
    } finally {
      rmSync(temp, { recursive: true, force: true });
    }
  });
});
