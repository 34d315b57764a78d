// The snapshot manifest (core/snapshot/manifest.ts): what is written is read back as it was, and anything
// else (another format, a field missing, mistyped, out of range, unknown, a path that leaves the
// snapshot) is refused with one sentence naming the field and the value.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  type Manifest,
  MANIFEST_FORMAT,
  parseManifest,
  serializeManifest,
} from "../core/snapshot/manifest.ts";
import { RefusedError } from "../core/errors.ts";

const GPU = "GPU-254ee290-e572-caa1-2c8b-66071d23370d";

function manifest(): Manifest {
  return {
    format: MANIFEST_FORMAT,
    createdAt: "2026-11-24T10:00:00.000Z",
    tool: { name: "@ckpt/cuda", version: "0.1.0" },
    host: { hostname: "vm", kernel: "6.18.44" },
    driver: { cudaVersion: 13000, release: "580.159.04" },
    engine: { kind: "criu", version: "4.1.1" },
    gpus: [{ index: 0, uuid: GPU, name: "NVIDIA H100 80GB HBM3", totalMiB: 81559 }],
    trees: [{
      root: 4242,
      images: "tree-4242",
      processes: [
        { pid: 4242, parent: 1, threads: [4242], command: "bash run.sh" },
        {
          pid: 4250,
          parent: 4242,
          threads: [4250, 4251, 4252],
          command: "python train.py",
          cuda: { state: "running", restoreThreadId: 4252, gpuMemoryMiB: { [GPU]: 4616 } },
        },
      ],
    }],
    options: { leaveRunning: false, job: true },
    timings: { suspendMs: 2100, dumpMs: 6300, totalMs: 9000 },
    files: [
      { path: "tree-4242/inventory.img", bytes: 42, chunkedSha256: "a1".repeat(32) },
      { path: "tree-4242/pages-1.img", bytes: 8_600_000_000, chunkedSha256: "0f".repeat(32) },
    ],
  };
}

// deno-lint-ignore no-explicit-any
type Json = any;

/** The manifest with one change made through `edit` on its JSON form. */
function edited(edit: (m: Json) => void): string {
  const m = JSON.parse(serializeManifest(manifest()));
  edit(m);
  return JSON.stringify(m);
}

function refused(text: string, pattern: RegExp): void {
  assert.throws(
    () => parseManifest(text, "/srv/snap/manifest.json"),
    (err: unknown) => {
      assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
      assert.equal(err.code, "SNAPSHOT");
      assert.match(err.message, pattern);
      assert.match(err.message, /^parseManifest refused: \/srv\/snap\/manifest\.json: /);
      return true;
    },
  );
}

describe("the manifest", () => {
  test("what is written is read back as it was", () => {
    const m = manifest();
    assert.deepEqual(parseManifest(serializeManifest(m), "m"), m);
  });

  test("a memory of unknown size is null, and a process without CUDA has no cuda", () => {
    const text = edited((m) => m.trees[0].processes[1].cuda.gpuMemoryMiB = null);
    const m = parseManifest(text, "m");
    assert.equal(m.trees[0].processes[1].cuda?.gpuMemoryMiB, null);
    assert.equal(m.trees[0].processes[0].cuda, undefined);
  });

  test("GPU UUIDs are read in their one form", () => {
    const text = edited((m) => {
      m.gpus[0].uuid = GPU.toUpperCase().replace("GPU-", "GPU-");
      m.trees[0].processes[1].cuda.gpuMemoryMiB = { [GPU.toUpperCase()]: 1 };
    });
    const m = parseManifest(text, "m");
    assert.equal(m.gpus[0].uuid, GPU);
    assert.deepEqual(m.trees[0].processes[1].cuda?.gpuMemoryMiB, { [GPU]: 1 });
  });
});

describe("what the manifest parser refuses", () => {
  test("what is not text: a TypeError naming it (a parsed object is not a manifest's text)", () => {
    for (const text of [{ format: "ckpt-cuda-snapshot/1" }, 5, null]) {
      assert.throws(
        () => parseManifest(text as never, "/srv/snap/manifest.json"),
        /^TypeError: text must be the manifest's JSON text, got (an object|5|null)$/,
      );
    }
  });

  test("not JSON: truncated or corrupt", () => {
    refused(serializeManifest(manifest()).slice(0, 300), /not JSON.*truncated or corrupt/);
  });

  test("not a manifest of this package, or of another format", () => {
    refused(`{"hello": 1}`, /not a snapshot manifest of @ckpt\/cuda: it has no "format"/);
    refused(`[1, 2]`, /no "format"/);
    refused(
      edited((m) => m.format = "ckpt-cuda-snapshot/1"),
      /format "ckpt-cuda-snapshot\/1".*reads only "ckpt-cuda-snapshot\/2".*another version/,
    );
    refused(edited((m) => m.format = "oci-image/1"), /format "oci-image\/1"/);
    // Only a tag of this format's family is said to come from another version of this package.
    assert.throws(
      () => parseManifest(edited((m) => m.format = "oci-image/1"), "m"),
      (err: Error) => !/another version/.test(err.message),
    );
    // No format at all: it says which this version reads.
    refused(`{"hello": 1}`, /it has no "format" field \(expected "ckpt-cuda-snapshot\/2"\)$/);
  });

  test("a field missing, unknown, or of the wrong type names the field and the value", () => {
    refused(edited((m) => delete m.driver), /manifest\.json: it lacks "driver"/);
    refused(
      edited((m) => m.extra = 1),
      /manifest\.json: it has a field this version does not know, "extra"/,
    );
    refused(
      edited((m) => m[""] = 1), // a name JSON allows, though empty
      /manifest\.json: it has a field this version does not know, ""/,
    );
    refused(
      edited((m) => m.trees[0].processes[1].cuda.state = "locked"),
      /trees\[0\]\.processes\[1\]\.cuda\.state must be "running" or "checkpointed", got "locked"/,
    );
    refused(
      edited((m) => m.trees[0].processes[0].pid = "4242"),
      /trees\[0\]\.processes\[0\]\.pid must be an integer from 1 to 2147483647, got "4242"/,
    );
    refused(edited((m) => m.options.job = "yes"), /options\.job must be true or false, got "yes"/);
    refused(edited((m) => m.createdAt = "yesterday"), /createdAt must be a date/);
    // Every process lists its threads (the pid first): each must be free for the restore.
    refused(
      edited((m) => delete m.trees[0].processes[1].threads),
      /trees\[0\]\.processes\[1\] lacks "threads"/,
    );
    refused(edited((m) => m.gpus[0].uuid = "GPU-xyz"), /gpus\[0\]\.uuid must be a GPU UUID/);
    // Each field of its own type, the optional ones too.
    refused(
      edited((m) => m.options.tcpEstablished = false),
      /options\.tcpEstablished must be true \(or left out\), got false/,
    );
    refused(
      edited((m) => m.timings.dumpMs = -1),
      /timings\.dumpMs must be a number from 0, got -1/,
    );
    refused(
      edited((m) => m.trees[0].processes[1].cuda.restoreThreadId = 0),
      /trees\[0\]\.processes\[1\]\.cuda\.restoreThreadId must be an integer from 1 to 2147483647, got 0/,
    );
  });

  test("a tree that does not hold together", () => {
    refused(edited((m) => m.trees[0].images = "tree-1"), /trees\[0\]\.images must be "tree-4242"/);
    refused(
      edited((m) => m.trees[0].processes.reverse()),
      /trees\[0\]\.processes\[0\]\.pid must be the root, 4242, got 4250/,
    );
    refused(edited((m) => m.trees = []), /trees must be at least one tree/);
    refused(
      edited((m) => m.trees[0].processes[1].threads = [4250, 4242]),
      /every pid and thread id once, got 4242/,
    );
    // Across trees too: two trees cannot both come back with one pid.
    refused(
      edited((m) => {
        m.trees.push({
          root: 5000,
          images: "tree-5000",
          processes: [{ pid: 5000, parent: 1, threads: [5000, 4251] }],
        });
        m.files.push({ path: "tree-5000/core.img", bytes: 1, chunkedSha256: "c3".repeat(32) });
      }),
      /trees \(root 5000\) must be every pid and thread id once, got 4251/,
    );
    refused(
      edited((m) => m.trees[0].processes[1].threads = [4251]),
      /threads\[0\] must be the pid, 4250, got 4251/,
    );
    refused(
      edited((m) =>
        m.trees[0].processes[1].cuda.gpuMemoryMiB = {
          "GPU-00000000-0000-0000-0000-000000000000": 1,
        }
      ),
      /must be a GPU of the manifest's gpus/,
    );
    refused(
      edited((m) => m.gpus.push({ ...m.gpus[0], index: 1 })),
      /gpus names GPU-[0-9a-f-]+ twice/,
    );
  });

  test("a file path that leaves the snapshot's directory, or names no tree of it", () => {
    // A name that starts with a dot: "." is the tree's directory itself, ".x" a hidden file.
    for (
      const path of [
        "../etc/passwd",
        "/etc/passwd",
        "tree-4242/../../x",
        "tree-4242/a/b",
        "tree-4242/.",
        "tree-4242/.x",
      ]
    ) {
      refused(edited((m) => m.files[0].path = path), /files\[0\]\.path must be a file inside/);
    }
    refused(
      edited((m) => m.files[0].path = "tree-99/x.img"),
      /a file of one of the manifest's trees/,
    );
    refused(edited((m) => m.files[0].bytes = -1), /files\[0\]\.bytes must be an integer from 0/);
  });

  test("every file has its digest; no tree goes without files; an empty list is refused", () => {
    refused(edited((m) => delete m.files[0].chunkedSha256), /files\[0\] lacks "chunkedSha256"/);
    refused(
      edited((m) => m.files[0].chunkedSha256 = "A1".repeat(32)),
      /files\[0\]\.chunkedSha256 must be 64 lowercase hex digits/,
    );
    refused(
      edited((m) => m.files = []),
      /it lists no file of tree-4242: a tree without its images/,
    );
    // A file listed twice, with another size and digest the second time: one entry would go
    // unchecked.
    refused(
      edited((m) => m.files.push({ ...m.files[0], bytes: 1, chunkedSha256: "b2".repeat(32) })),
      /files\[2\]\.path must be a file not listed before, got "tree-4242\/inventory\.img"/,
    );
    refused(
      edited((m) => {
        m.trees.push({
          root: 5000,
          images: "tree-5000",
          processes: [{ pid: 5000, parent: 1, threads: [5000] }],
        });
      }),
      /it lists no file of tree-5000/,
    );
  });

  test("a manifest of 3,000 trees and 60,000 files is read whole (bench/manifest_parse.ts times it)", () => {
    const m = JSON.parse(serializeManifest(manifest()));
    m.trees = [];
    m.files = [];
    for (let t = 0; t < 3000; t++) {
      const root = 10_000 + t;
      m.trees.push({
        root,
        images: `tree-${root}`,
        processes: [{ pid: root, parent: 1, threads: [root] }],
      });
      for (let f = 0; f < 20; f++) {
        m.files.push({
          path: `tree-${root}/pages-${f}.img`,
          bytes: f,
          chunkedSha256: "ab".repeat(32),
        });
      }
    }
    const parsed = parseManifest(JSON.stringify(m), "big.json");
    assert.equal(parsed.files.length, 60_000);
    assert.equal(parsed.trees.length, 3000);
  });
});
