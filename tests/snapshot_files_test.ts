// Snapshots on the file system (os/snapshot_store.ts): private directories, a manifest written
// whole and private, nothing followed through a symbolic link, and a clear sentence for each
// directory that cannot hold or be read as a snapshot.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import { MANIFEST_FILE } from "../core/manifest.ts";

function scratch(): { dir: string; done: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "ckpt-snapfiles-test-"));
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

const store = new FileSnapshotStore();

describe("a new snapshot's directory", () => {
  test("made with mode 0700; an empty private one is taken", async () => {
    const s = scratch();
    try {
      const made = await store.create(join(s.dir, "snap"));
      assert.equal(statSync(made).mode & 0o777, 0o700);
      mkdirSync(join(s.dir, "empty"), { mode: 0o700 });
      assert.equal(await store.create(join(s.dir, "empty")), join(s.dir, "empty"));
    } finally {
      s.done();
    }
  });

  test("refused: not empty, a symbolic link, a file, a missing parent, others may write", async () => {
    const s = scratch();
    try {
      mkdirSync(join(s.dir, "full"), { mode: 0o700 });
      writeFileSync(join(s.dir, "full", "x"), "x");
      await assert.rejects(store.create(join(s.dir, "full")), /is not empty \(1 entries\)/);
      mkdirSync(join(s.dir, "real"), { mode: 0o700 });
      symlinkSync(join(s.dir, "real"), join(s.dir, "link"));
      await assert.rejects(store.create(join(s.dir, "link")), /is a symbolic link/);
      writeFileSync(join(s.dir, "file"), "x");
      await assert.rejects(store.create(join(s.dir, "file")), /is not a directory/);
      await assert.rejects(
        store.create(join(s.dir, "no", "such")),
        /its parent directory .*no does not exist/,
      );
      mkdirSync(join(s.dir, "open"));
      chmodSync(join(s.dir, "open"), 0o777);
      await assert.rejects(
        store.create(join(s.dir, "open")),
        /may be written by other users \(mode 0777\); a snapshot.s directory must be this user.s and private/,
      );
    } finally {
      s.done();
    }
  });

  test("another user's directory is refused", {
    skip: process.getuid?.() !== 0
      ? "needs root to give a directory away (skipped: not root)"
      : false,
  }, async () => {
    const s = scratch();
    try {
      mkdirSync(join(s.dir, "theirs"), { mode: 0o700 });
      chownSync(join(s.dir, "theirs"), 65534, 65534);
      await assert.rejects(
        store.open(join(s.dir, "theirs")),
        /belongs to another user \(uid 65534, you are \d+\)/,
      );
    } finally {
      s.done();
    }
  });
});

describe("the manifest and the image files", () => {
  test("the manifest is written whole, mode 0600, and read back; none is undefined", async () => {
    const s = scratch();
    try {
      const dir = await store.create(join(s.dir, "snap"));
      assert.equal(await store.readManifest(dir), undefined);
      await store.writeManifest(dir, "{}\n");
      await store.writeManifest(dir, '{"a":1}\n');
      assert.equal(await store.readManifest(dir), '{"a":1}\n');
      assert.equal(statSync(join(dir, MANIFEST_FILE)).mode & 0o777, 0o600);
      assert.deepEqual(readdirSync(dir), [MANIFEST_FILE], "no temporary file is left");
    } finally {
      s.done();
    }
  });

  test("a manifest that is a symbolic link, or a directory, is refused", async () => {
    const s = scratch();
    try {
      const dir = await store.create(join(s.dir, "snap"));
      writeFileSync(join(s.dir, "elsewhere.json"), "{}");
      symlinkSync(join(s.dir, "elsewhere.json"), join(dir, MANIFEST_FILE));
      await assert.rejects(store.readManifest(dir), /manifest\.json is a symbolic link/);
      rmSync(join(dir, MANIFEST_FILE));
      mkdirSync(join(dir, MANIFEST_FILE));
      await assert.rejects(store.readManifest(dir), /is not a regular file/);
    } finally {
      s.done();
    }
  });

  test("files: every regular file of a tree's directory, with its size; links are not followed", async () => {
    const s = scratch();
    try {
      const dir = await store.create(join(s.dir, "snap"));
      const images = await store.subdir(dir, "tree-4242");
      assert.equal(statSync(images).mode & 0o777, 0o700);
      writeFileSync(join(images, "pages-1.img"), new Uint8Array(1000));
      writeFileSync(join(images, "core-4242.img"), "core");
      writeFileSync(join(s.dir, "outside"), "secret");
      symlinkSync(join(s.dir, "outside"), join(images, "link.img"));
      assert.deepEqual(await store.files(dir, "tree-4242"), [
        { path: "tree-4242/core-4242.img", bytes: 4 },
        { path: "tree-4242/pages-1.img", bytes: 1000 },
      ]);
      assert.deepEqual(await store.files(dir, "tree-1"), [], "a missing tree has no files");
      await assert.rejects(store.subdir(dir, "../x"), /not a subdirectory name/);
    } finally {
      s.done();
    }
  });
});
