// Snapshots that move (issue 23, item 4), on the simulator with the file system's store: a
// snapshot taken on one SimulatedMachine, its directory copied elsewhere (node:fs's cpSync, and tar,
// both keeping modes) and the original removed, passes `inspectSnapshot(copy, { verify: true })`
// and restores on another SimulatedMachine, whose GPUs have other UUIDs of the same chip: its
// processes back with their pids and their memory's chunked SHA-256, its GPU pairs in the result.
// On the new machine, each of these is refused before anything changes (no process made, no
// driver call that changes a state, the copy unchanged) in one sentence naming what is wrong and
// what was expected, and the copy restores once the cause is fixed: GPUs of another chip, fewer
// GPUs, another driver, a pid taken, a file of the snapshot, an image of a process or the manifest
// missing, and a copy another user owns.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chownSync,
  cpSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { inspectSnapshot, RefusedError, restoreSnapshot, snapshot } from "../mod.ts";
import { MANIFEST_FILE } from "../core/snapshot/layout.ts";
import { parseGpuUuid } from "../core/options.ts";
import type { Machine } from "../core/machine.ts";
import { SimulatedCriu, SimulatedMachine, type SimulatedMachineOptions } from "../mock/mod.ts";
import { machineWith } from "./support/forward.ts";
import { snapshotSimulator } from "../mock/state_file.ts";
import { cli } from "./cli_support.ts";
import { tempDirs } from "./support/temp_dirs.ts";

const ROOT = process.getuid?.() === 0;
const H100 = "NVIDIA H100 80GB HBM3";
/** Driver calls that change a process's state. */
const CHANGING = new Set(["lock", "checkpoint", "restore", "unlock"]);

/** A new folder, removed after the test. */
const base = tempDirs("ckpt-moved-test-");

/** Whether `tar` runs here (Deno and Bun both have child_process's spawnSync). */
const TAR = spawnSync("tar", ["--version"], { stdio: "ignore" }).status === 0;

/**
 * Machine A (two H200s, seed 1): a plain root with two CUDA children, one on each GPU, their
 * memory written; snapshotted into a new directory and ended.
 */
async function takenOnA() {
  const a = new SimulatedMachine({ gpus: 2 });
  const root = a.spawn({ cuda: false, command: "bash train.sh" });
  const r0 = a.spawn({ parent: root.pid, memoryMiB: 1024, gpu: 0, command: "python rank0.py" });
  const r1 = a.spawn({ parent: root.pid, memoryMiB: 2048, gpu: 1, command: "python rank1.py" });
  await r0.write(0, new TextEncoder().encode("rank 0 weights"));
  await r1.write(1 << 20, new TextEncoder().encode("rank 1 weights"));
  const hashes = [await r0.memoryChunkedSha256(), await r1.memoryChunkedSha256()];
  const dir = join(base(), "snap");
  await snapshot([root.pid], dir, { machine: a });
  return { a, dir, pids: [root.pid, r0.pid, r1.pid], cuda: [r0.pid, r1.pid], hashes };
}

/** Another machine: two H200s with other UUIDs (another seed) unless told otherwise. */
function machineB(options: SimulatedMachineOptions = {}): SimulatedMachine {
  return new SimulatedMachine({ gpus: 2, seed: 2, ...options });
}

/** `dir` copied to a new directory with node:fs, modes kept (as `cp -a` would). */
function copied(dir: string): string {
  const to = join(base(), "copy");
  cpSync(dir, to, { recursive: true });
  return to;
}

/** Every entry under `dir`: its path, type, mode, owner and (a file) content's SHA-256. */
function listing(dir: string, at = ""): string[] {
  return readdirSync(join(dir, at)).sort().flatMap((name) => {
    const path = join(at, name);
    const st = lstatSync(join(dir, path));
    const mode = (st.mode & 0o7777).toString(8);
    if (st.isDirectory()) return [`${path}/ ${mode} ${st.uid}`, ...listing(dir, path)];
    const sha = createHash("sha256").update(readFileSync(join(dir, path))).digest("hex");
    return [`${path} ${mode} ${st.uid} ${sha}`];
  });
}

/**
 * The restore of `dir` onto `machine` is refused with `code`, its message matching `pattern`,
 * before anything changed: no process made, no driver call that changes a state, `dir` as it was.
 */
async function refusedBeforeAnything(
  machine: SimulatedMachine,
  dir: string,
  code: string,
  pattern: RegExp,
): Promise<string> {
  const processes = machine.processes;
  const calls = machine.driver.calls.length;
  const before = listing(dir);
  const err = await restoreSnapshot(dir, { machine }).then(() => undefined, (e) => e);
  assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
  assert.equal(err.code, code, err.message);
  assert.match(err.message, pattern);
  assert.deepEqual(machine.processes, processes, "no process was made");
  assert.deepEqual(
    machine.driver.calls.slice(calls).filter((c) => CHANGING.has(c.op)),
    [],
    "no driver call changed a state",
  );
  assert.deepEqual(listing(dir), before, "the snapshot is unchanged");
  return err.message;
}

/** The snapshot's processes live on `machine`, running, on its GPUs, their memory intact. */
/**
 * A snapshot taken on A and copied: refused on the machine `refusing` makes (`code`, `pattern`)
 * before anything changes, then restored on the one `accepting` makes (each made when its turn
 * comes, after the snapshot).
 */
async function refusedThenBack(
  refusing: () => SimulatedMachine,
  code: string,
  pattern: RegExp,
  accepting: () => SimulatedMachine,
): Promise<void> {
  const taken = await takenOnA();
  const copy = copied(taken.dir);
  await refusedBeforeAnything(refusing(), copy, code, pattern);
  await backOn(accepting(), taken, copy);
}

async function backOn(
  machine: SimulatedMachine,
  taken: Awaited<ReturnType<typeof takenOnA>>,
  dir: string,
  through: Machine = machine,
) {
  const back = await restoreSnapshot(dir, { machine: through });
  assert.deepEqual(back.pids, taken.pids);
  const hashes = [];
  for (const pid of taken.cuda) {
    const p = machine.process(pid);
    assert.ok(p && p.pid === pid, `process ${pid} is back`);
    assert.equal(p.state, "running");
    const here = machine.gpus.map((g) => g.uuid);
    assert.ok(
      p.gpuUuids.every((u) => here.includes(u)),
      `process ${pid} is on this machine's GPUs`,
    );
    hashes.push(await p.memoryChunkedSha256());
  }
  assert.deepEqual(hashes, taken.hashes, "their memory's chunked SHA-256 as before");
  return back;
}

describe("a snapshot copied elsewhere restores on another machine", () => {
  test("copied with cpSync, the original removed: verified, then back on other GPUs of the same chip", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    assert.deepEqual(
      listing(copy),
      listing(taken.dir),
      "the copy has the same files, modes and owner",
    );
    rmSync(taken.dir, { recursive: true });
    const seen = await inspectSnapshot(copy, { verify: true });
    assert.equal(seen.verified, true, "every file's digest compared");
    assert.equal(seen.dir, copy);

    const b = machineB();
    const [a0, a1] = taken.a.gpus.map((g) => g.uuid);
    const [b0, b1] = b.gpus.map((g) => g.uuid);
    assert.notDeepEqual([a0, a1], [b0, b1], "other UUIDs");
    const back = await backOn(b, taken, copy);
    assert.deepEqual(back.gpuMapping, { [a0]: b0, [a1]: b1 }, "by index, as the result says");
    assert.ok((b.process(taken.cuda[1])!.gpuMemoryMiB[b1] ?? 0) >= 2048, "rank 1 on B's GPU 1");
    assert.equal(b.process(taken.pids[0])!.parent, 0, "the root has no parent here");
    assert.equal(b.process(taken.cuda[0])!.parent, taken.pids[0], "the tree as it was");
    assert.deepEqual(taken.a.processes, [], "machine A is untouched");
  });

  test(
    "copied through tar (modes kept), restored on B, taken again there and brought back to A",
    { skip: TAR ? false : "tar is not installed" },
    async () => {
      const taken = await takenOnA();
      const archive = join(base(), "snap.tar");
      const into = base();
      const run = (args: string[]) => {
        const r = spawnSync("tar", args, { encoding: "utf8" });
        assert.equal(r.status, 0, `tar ${args.join(" ")}: ${r.stderr}`);
      };
      run(["-C", join(taken.dir, ".."), "-cpf", archive, "snap"]);
      rmSync(taken.dir, { recursive: true });
      run(["-C", into, "-xpf", archive]);
      const copy = join(into, "snap");
      assert.equal(lstatSync(copy).mode & 0o777, 0o700, "the directory's mode kept");
      assert.equal((await inspectSnapshot(copy, { verify: true })).verified, true);
      const b = machineB();
      await backOn(b, taken, copy);

      // And back: B's snapshot, copied, restores on A onto A's GPUs.
      const again = join(base(), "again");
      await snapshot([taken.pids[0]], again, { machine: b });
      const home = await backOn(taken.a, taken, copied(again));
      assert.deepEqual(
        home.gpuMapping,
        Object.fromEntries(b.gpus.map((g, i) => [g.uuid, taken.a.gpus[i].uuid])),
      );
    },
  );

  test("the same snapshot restores on a machine with the same GPUs in place, with no mapping", async () => {
    const taken = await takenOnA();
    const twin = new SimulatedMachine({ gpus: 2 }); // seed 1: A's UUIDs
    const back = await backOn(twin, taken, copied(taken.dir));
    assert.deepEqual(back.gpuMapping, {});
  });
});

describe("the simulated criu and driver, as a second host's", () => {
  test("criu brings another machine's images back checkpointed; the driver restores them only with pairs naming every GPU they saw", async () => {
    const a = new SimulatedMachine({ gpus: 2 });
    const p = a.spawn({ memoryMiB: 256, gpu: 1 });
    await p.write(0, new TextEncoder().encode("state"));
    const hash = await p.memoryChunkedSha256();
    assert.equal(await a.driver.lock(p.pid, null), 0);
    assert.equal(await a.driver.checkpoint(p.pid), 0);
    const images = base();
    await a.engine.dump({ root: p.pid, imagesDir: images });
    const b = machineB();
    await b.engine.restore({ root: p.pid, imagesDir: images });
    const back = b.process(p.pid)!;
    assert.equal(back.state, "checkpointed");
    assert.deepEqual(back.gpuUuids, [a.gpus[1].uuid], "it remembers the GPU it used there");
    assert.deepEqual(b.gpus.map((g) => g.usedMiB), [0, 0], "it holds nothing here");
    const pair = (from: number, to: number) => ({
      oldUuid: parseGpuUuid(a.gpus[from].uuid),
      newUuid: parseGpuUuid(b.gpus[to].uuid),
    });
    const refused = async (pairs: ReturnType<typeof pair>[], note: RegExp) => {
      assert.equal(await b.driver.restore(p.pid, pairs.length ? { gpuPairs: pairs } : null), 1);
      assert.match(b.driver.calls.at(-1)!.note!, note);
      assert.equal(back.state, "checkpointed");
    };
    await refused(
      [],
      /checkpointed on another machine's GPUs .*: restoring it here needs GPU pairs/,
    );
    await refused(
      [pair(1, 1)],
      /^the mapping leaves out GPU 0 \(GPU-\S+\); it must name every GPU$/,
    );
    await refused([pair(0, 1), pair(1, 1)], /^GPUs 0 and 1 are both mapped onto GPU 1$/);
    assert.equal(await b.driver.restore(p.pid, { gpuPairs: [pair(0, 1), pair(1, 0)] }), 0);
    assert.equal(await b.driver.unlock(p.pid), 0);
    assert.deepEqual(back.gpuUuids, [b.gpus[0].uuid], "from A's GPU 1 onto B's GPU 0");
    assert.equal(await back.memoryChunkedSha256(), hash);
  });
});

describe("refused on the new machine before anything changes, in one sentence", () => {
  test("GPUs of another chip: refused; on a machine of the snapshot's chip it restores", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    const [g0] = taken.a.gpus;
    const h100s = machineB({ gpus: [{ name: H100 }, { name: H100 }] });
    await refusedBeforeAnything(
      h100s,
      copy,
      "MAPPING",
      new RegExp(
        `^restoreSnapshot refused: the snapshot's GPU 0 \\(${g0.uuid}\\) is an NVIDIA H200, and ` +
          `this machine's GPU 0 \\(${h100s.gpus[0].uuid}\\) is an ${H100}: a process is restored ` +
          `only onto GPUs of the chip it was checkpointed on, so restore it on a machine with 2 ` +
          `GPUs of that chip \\(2 x NVIDIA H200\\)\\. Nothing was changed$`,
      ),
    );
    // One H200 among H100s is not enough either; a mapping cannot help.
    const mixed = machineB({ gpus: [{ name: H100 }, {}], seed: 3 });
    await refusedBeforeAnything(mixed, copy, "MAPPING", /so restore it on a machine with 2 GPUs/);
    await backOn(machineB(), taken, copy);
  });

  test("GPUs of the chip at other indices: the sentence asks for a mapping, which works", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    const b = machineB({ gpus: [{ name: H100 }, {}, {}] });
    await refusedBeforeAnything(
      b,
      copy,
      "MAPPING",
      /GPU 0 \(\S+\) is an NVIDIA H200, and this machine's GPU 0 \(\S+\) is an NVIDIA H100 80GB HBM3: .*so give a gpuMapping \(--device-map\) onto GPUs of that chip\. Nothing was changed$/,
    );
    const [a0, a1] = taken.a.gpus.map((g) => g.uuid);
    const back = await restoreSnapshot(copy, {
      machine: b,
      gpuMapping: { [a0]: b.gpus[2].uuid, [a1]: b.gpus[1].uuid },
    });
    assert.equal(back.gpuMapping[a0], b.gpus[2].uuid);
    assert.deepEqual(b.process(taken.cuda[0])!.gpuUuids, [b.gpus[2].uuid]);
    assert.equal(await b.process(taken.cuda[0])!.memoryChunkedSha256(), taken.hashes[0]);
  });

  test("fewer GPUs, without a mapping: refused; on a machine with enough it restores", async () => {
    await refusedThenBack(
      () => machineB({ gpus: 1 }),
      "MAPPING",
      /^restoreSnapshot refused: the snapshot was taken where the driver saw 2 GPUs \(2 x NVIDIA H200\), and this machine has 1 \(1 x NVIDIA H200\): each of the snapshot's GPUs is restored onto one of its own, so restore it on a machine with at least 2 GPUs of its chip\. Nothing was changed$/,
      () => machineB({ gpus: 4 }),
    );
  });

  test("another driver (CUDA 12.8): refused; with the snapshot's driver it restores", async () => {
    await refusedThenBack(
      () => machineB({ driverVersion: 12080 }),
      "PREREQUISITE",
      /^restoreSnapshot refused: the snapshot was taken with a driver of CUDA 13\.0 \(580\.159\.04\), and this machine's is CUDA 12\.8: a process comes back with the libcuda it had, which needs the same driver, so restore it on a machine whose driver is CUDA 13\.0 \(580\.159\.04\)$/,
      () => machineB(),
    );
  });

  test("an older criu than the one that wrote the images: refused; with as new a criu it restores", async () => {
    const taken = await takenOnA(); // the simulated criu 4.1.1 wrote it
    const copy = copied(taken.dir);
    const b = machineB();
    const older = machineWith(b, { engine: new SimulatedCriu(b, { version: "4.0" }) });
    const calls = b.driver.calls.length;
    const before = listing(copy);
    const err = await restoreSnapshot(copy, { machine: older }).then(() => undefined, (e) => e);
    assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
    assert.equal(err.code, "PREREQUISITE");
    assert.match(
      err.message,
      /^restoreSnapshot refused: the snapshot's images were written by simulated criu 4\.1\.1, and this machine's simulated criu is 4\.0, which cannot read images of a newer release, so restore it with simulated criu 4\.1\.1 or later$/,
    );
    assert.deepEqual(b.processes, [], "no process was made");
    assert.deepEqual(b.driver.calls.slice(calls).filter((c) => CHANGING.has(c.op)), []);
    assert.deepEqual(listing(copy), before, "the snapshot is unchanged");
    // A patch release of the same line, or a newer one, reads them.
    const patch = machineWith(b, { engine: new SimulatedCriu(b, { version: "4.1" }) });
    await backOn(b, taken, copy, patch);
  });

  test("a pid taken on the new machine: refused, naming it; once that process ends it restores", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    const b = machineB({ firstPid: taken.cuda[1] });
    const other = b.spawn({ cuda: false, command: "nginx" });
    assert.equal(other.pid, taken.cuda[1]);
    await refusedBeforeAnything(
      b,
      copy,
      "PID_TAKEN",
      new RegExp(
        `^restoreSnapshot of process ${other.pid} refused: pid ${other.pid} \\(python rank1\\.py\\) ` +
          `must be free for the snapshot's process to come back, and process ${other.pid} has it ` +
          `now \\(.*\\); end that process, or restore where ${other.pid} is free$`,
      ),
    );
    other.exit();
    await backOn(b, taken, copy);
  });

  test("a file of the snapshot missing, or an image of a process: refused; put back, it restores", async () => {
    const taken = await takenOnA();
    const tree = `tree-${taken.pids[0]}`;
    for (const name of ["dump.log", `process-${taken.cuda[1]}.img`]) {
      const copy = copied(taken.dir);
      const bytes = readFileSync(join(copy, tree, name)).length;
      rmSync(join(copy, tree, name));
      const b = machineB();
      const message = await refusedBeforeAnything(
        b,
        copy,
        "SNAPSHOT",
        new RegExp(
          `^restoreSnapshot refused: ${copy}/${tree}/${name.replaceAll(".", "\\.")} is missing, ` +
            `which the manifest lists \\(${bytes} bytes\\): the snapshot is incomplete, or a copy ` +
            `of it left the file out$`,
        ),
      );
      await assert.rejects(inspectSnapshot(copy), (e: Error) =>
        e.message.endsWith(
          message.slice(message.indexOf(": ") + 2),
        ));
      cpSync(join(taken.dir, tree, name), join(copy, tree, name));
      await backOn(b, taken, copy);
    }
  });

  test("a tree's directory missing: refused; put back, it restores", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    const tree = `tree-${taken.pids[0]}`;
    rmSync(join(copy, tree), { recursive: true });
    await refusedBeforeAnything(
      machineB(),
      copy,
      "SNAPSHOT",
      new RegExp(
        `^restoreSnapshot refused: ${copy}/${tree} is missing, which the manifest lists with 7 ` +
          `files: the snapshot is incomplete, or a copy of it left the directory out$`,
      ),
    );
    cpSync(join(taken.dir, tree), join(copy, tree), { recursive: true });
    await backOn(machineB(), taken, copy);
  });

  test("the manifest missing: refused, not a snapshot; put back, it restores", async () => {
    const taken = await takenOnA();
    const copy = copied(taken.dir);
    rmSync(join(copy, MANIFEST_FILE));
    await refusedBeforeAnything(
      machineB(),
      copy,
      "SNAPSHOT",
      new RegExp(
        `^restoreSnapshot refused: ${copy} is not a snapshot: it has no manifest\\.json, which a ` +
          `snapshot writes last \\(a copy made before the snapshot ended, or one that left it ` +
          `out, has none\\)$`,
      ),
    );
    cpSync(join(taken.dir, MANIFEST_FILE), join(copy, MANIFEST_FILE));
    await backOn(machineB(), taken, copy);
  });

  test(
    "a copy another user owns (rsync -a by that user): refused, saying how to copy it; given back, it restores",
    { skip: ROOT ? false : "needs root to give a copy to another user (skipped: not root)" },
    async () => {
      const taken = await takenOnA();
      const copy = copied(taken.dir);
      const own = (dir: string, uid: number) => {
        chownSync(dir, uid, uid);
        for (const e of readdirSync(dir, { withFileTypes: true })) {
          if (e.isDirectory()) own(join(dir, e.name), uid);
          else chownSync(join(dir, e.name), uid, uid);
        }
      };
      own(copy, 65534);
      const b = machineB();
      const how = ", so copy it as the user who will restore it \\(tar or rsync -a run by that " +
        "user\\), or give it to that user \\(chown -R\\)$";
      await refusedBeforeAnything(
        b,
        copy,
        "SNAPSHOT",
        new RegExp(
          `^restoreSnapshot refused: ${copy} belongs to another user \\(uid 65534, you are 0\\); ` +
            `a snapshot's directory must be this user's and private \\(chmod 700\\)${how}`,
        ),
      );
      await assert.rejects(
        inspectSnapshot(copy, { verify: true }),
        new RegExp(`inspectSnapshot refused: ${copy} belongs to another user`),
      );
      // Given back, but for one image, or the manifest: each named, with the same advice.
      const inside = "; what a snapshot holds must be root's or this user's" + how;
      const image = join(copy, `tree-${taken.pids[0]}`, `process-${taken.cuda[0]}.img`);
      for (const theirs of [image, join(copy, MANIFEST_FILE)]) {
        own(copy, 0);
        chownSync(theirs, 65534, 65534);
        await refusedBeforeAnything(
          b,
          copy,
          "SNAPSHOT",
          new RegExp(
            `^restoreSnapshot refused: ${theirs} belongs to another user \\(uid 65534, you ` +
              `are 0\\)${inside}`,
          ),
        );
      }
      own(copy, 0);
      await backOn(b, taken, copy);
    },
  );
});

describe("the command line, across two simulated machines", () => {
  test("--simulate: snapshot on A, the directory copied, inspect --verify and restore-snapshot on B", async () => {
    const dir = base();
    const envA = { CKPT_SIM_STATE: join(dir, "a", "machine.json") };
    const envB = { CKPT_SIM_STATE: join(dir, "b", "machine.json") };
    // B: a machine of two H200s with other UUIDs than a new one's (another seed), as its state file.
    const other = new SimulatedMachine({ gpus: 2, seed: 9 });
    mkdirSync(join(dir, "b"), { mode: 0o700 });
    writeFileSync(envB.CKPT_SIM_STATE, JSON.stringify(snapshotSimulator(other)), { mode: 0o600 });
    const onA = (...args: (string | number)[]) => cli(["--simulate", ...args], { env: envA });
    const onB = (...args: (string | number)[]) => cli(["--simulate", ...args], { env: envB });

    const spawned = await onA("spawn", "--memory-mib", "1024");
    assert.equal(spawned.code, 0, spawned.err);
    const pid = Number(spawned.out.trim());
    const snap = join(dir, "snap");
    const made = await onA("snapshot", "--pid", pid, "--dir", snap);
    assert.equal(made.code, 0, made.err);
    const copy = copied(snap);
    rmSync(snap, { recursive: true });

    const seen = await onB("inspect", "--verify", copy);
    assert.equal(seen.code, 0, seen.err);
    assert.match(seen.out, /every file read: each is the file the snapshot wrote/);
    const back = await onB("restore-snapshot", "--dir", copy, "--json");
    assert.equal(back.code, 0, back.err);
    const json = JSON.parse(back.out);
    assert.deepEqual(json.pids, [pid]);
    const [to] = Object.values(json.gpuMapping) as string[];
    assert.equal(to, other.gpus[0].uuid, "onto B's GPU 0");
    assert.equal((await onB("--get-state", "--pid", pid)).out, "running\n");
    assert.equal((await onA("--get-state", "--pid", pid)).code, 1, "not on A");

    // A second copy missing an image: one line naming it, exit 1 (the files are checked before
    // the pids, which the first copy's processes now hold).
    const broken = copied(copy);
    const tree = readdirSync(broken).find((n) => n.startsWith("tree-"))!;
    rmSync(join(broken, tree, `process-${pid}.img`));
    const r = await onB("restore-snapshot", "--dir", broken);
    assert.equal(r.code, 1);
    assert.equal(r.err.trim().split("\n").length, 1);
    assert.match(
      r.err,
      new RegExp(
        `^cuda-checkpoint: restore-snapshot refused: ${broken}/${tree}/process-${pid}\\.img is ` +
          `missing, which the manifest lists \\(\\d+ bytes\\): the snapshot is incomplete, or a ` +
          `copy of it left the file out\\n$`,
      ),
    );
  });
});
