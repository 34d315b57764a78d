// The records of held GPU memory on a Linux host (os/records.ts), with no GPU: kept private to
// their owner, written whole, read strictly, keyed by the process (pid and start time, from
// /proc), gone when their process is gone; a claim of a program that died is left out. And the
// Linux host's process identity: a thread id belongs to its process. Runs unchanged under
// `deno test -A` and `bun test`.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import {
  chmod,
  chown,
  mkdir,
  readdir,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from "node:fs/promises";
import { join } from "node:path";
import process from "node:process";

import { LinuxHost } from "../os/linux_host.ts";
import { FileHeldRecords, recordsDirectory } from "../os/records.ts";
import { readSmallFile } from "../os/private.ts";
import { loud } from "./fixtures/fake.ts";
import { processDir } from "./support/temp_dirs.ts";

const root = processDir("ckpt-records-test-"); // removed at the end even where a filter ran none
after(() => rm(root, { recursive: true, force: true }));
let dirs = 0;
const fresh = () => join(root, `held-${dirs++}`);

/** A child that lives until killed, and its identity as the Linux host reads it. */
async function child() {
  const c = spawn("sleep", ["60"], { stdio: "ignore" });
  const host = new LinuxHost({ nvml: false, recordsDir: false });
  const id = await host.identify(c.pid!);
  assert.ok(id && id.start !== undefined, "the host reads the child's start time");
  return { id, kill: () => c.kill() };
}

const GPU = "GPU-11111111-1111-1111-1111-111111111111";

describe("the Linux host's identity of a process", () => {
  test("this process and a thread of it are one process, with a start time", async () => {
    const host = new LinuxHost({ nvml: false, recordsDir: false });
    const me = await host.identify(process.pid);
    assert.equal(me?.pid, process.pid);
    assert.ok(me!.start! > 0);
    const tasks = await readdir(`/proc/${process.pid}/task`);
    const other = tasks.map(Number).find((t) => t !== process.pid);
    if (other !== undefined) assert.deepEqual(await host.identify(other), me);
    assert.equal(await host.identify(2 ** 31 - 2), undefined, "no process has it");
    assert.equal(host.self, process.pid);
  });

  test("a zombie (exited, its parent not waiting for it) is no process", async () => {
    // The shell's child exits; the shell became `sleep`, which never reaps it.
    const c = spawn("sh", ["-c", "sleep 0 & echo $!; exec sleep 30"], { stdio: "pipe" });
    try {
      const zombie = Number(
        await new Promise<string>((r) => c.stdout.once("data", (d) => r(`${d}`))),
      );
      const state = () =>
        readFile(`/proc/${zombie}/status`, "utf8").then((s) => /^State:\s*(\S)/m.exec(s)?.[1]);
      for (let i = 0; i < 200 && await state() !== "Z"; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(await state(), "Z", "the child is a zombie");
      const host = new LinuxHost({ nvml: false, recordsDir: false });
      assert.equal(await host.identify(zombie), undefined);
      assert.equal((await host.identify(c.pid!))?.pid, c.pid, "its parent is a process");
    } finally {
      c.kill("SIGKILL");
    }
  });
});

describe("records in a private directory", () => {
  test("written whole, 0600 in a 0700 directory, keyed by pid and start, read back", async () => {
    const dir = fresh();
    const { id, kill } = await child();
    try {
      const records = new FileHeldRecords(dir, () => Promise.resolve(true));
      assert.equal(await records.get(id), undefined);
      await records.put({ process: id, heldMiB: { [GPU]: 1544 }, at: 1 });
      assert.equal((await stat(dir)).mode & 0o777, 0o700);
      const file = join(dir, `${id.pid}-${id.start}.json`);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      assert.deepEqual(await records.get(id), { process: id, heldMiB: { [GPU]: 1544 }, at: 1 });
      assert.equal(await records.get({ pid: id.pid, start: id.start! + 1 }), undefined);
      assert.deepEqual((await readdir(dir)).filter((n) => n.endsWith(".tmp")), [], "no leftovers");
      // Whole: a new record replaces the file (written aside, then renamed), never rewrites it.
      const inode = (await stat(file)).ino;
      await records.put({ process: id, heldMiB: { [GPU]: 2000 }, at: 2 });
      assert.notEqual((await stat(file)).ino, inode, "replaced by a rename, not written in place");
      assert.equal((await records.get(id))?.heldMiB[GPU], 2000);
      await records.remove(id);
      assert.deepEqual(await readdir(dir), []);
    } finally {
      kill();
    }
  });

  test("a record whose process the host fails to read (EMFILE) is kept: not taken for gone", async () => {
    const dir = fresh();
    const emfile = Object.assign(new Error("EMFILE: too many open files"), { code: "EMFILE" });
    const reader = { list: () => Promise.resolve([]), read: () => Promise.reject(emfile) };
    const records = new LinuxHost({ nvml: false, recordsDir: dir, reader }).heldRecords!;
    const record = { process: { pid: 4500, start: 12 }, heldMiB: { [GPU]: 1024 }, at: 1 };
    await records.put(record);
    assert.deepEqual(await records.list(), [record]);
    assert.deepEqual(await readdir(dir), ["4500-12.json"], "not removed");
  });

  test("a record whose process is gone, or that is not one, goes at the next listing", async () => {
    const dir = fresh();
    const host = new LinuxHost({ nvml: false, recordsDir: dir });
    const records = host.heldRecords!;
    const live = await child();
    const dead = await child();
    try {
      await records.put({ process: live.id, heldMiB: { [GPU]: 1 }, at: 1 });
      await records.put({ process: dead.id, heldMiB: { [GPU]: 2 }, at: 1 });
      dead.kill();
      await new Promise((r) => setTimeout(r, 100));
      await writeFile(join(dir, "77-1.json"), "{not json", { mode: 0o600 });
      const listed = await records.list();
      assert.deepEqual(listed.map((r) => r.process.pid), [live.id.pid]);
      assert.deepEqual((await readdir(dir)).sort(), [`${live.id.pid}-${live.id.start}.json`]);
    } finally {
      live.kill();
    }
  });

  test("a claim of a program that died is left out; the record stays", async () => {
    const dir = fresh();
    const host = new LinuxHost({ nvml: false, recordsDir: dir });
    const records = host.heldRecords!;
    const target = await child();
    const claimer = await child();
    try {
      await records.put({
        process: target.id,
        heldMiB: { [GPU]: 1 },
        at: 1,
        claim: { needMiB: { [GPU]: 1 }, by: claimer.id, since: 2 },
      });
      assert.ok((await records.list())[0].claim, "the claimer lives: its claim counts");
      claimer.kill();
      await new Promise((r) => setTimeout(r, 100));
      const [record] = await records.list();
      assert.equal(record.claim, undefined);
      assert.deepEqual(record.heldMiB, { [GPU]: 1 });
    } finally {
      target.kill();
    }
  });

  test("a record read strictly: another format, a bad UUID or an amount out of range is refused, naming it", async () => {
    const dir = fresh();
    const { id, kill } = await child();
    try {
      const records = new FileHeldRecords(dir, () => Promise.resolve(true));
      await records.put({ process: id, heldMiB: { [GPU]: 1 }, at: 1 });
      const file = join(dir, `${id.pid}-${id.start}.json`);
      const good = JSON.parse(await readFile(file, "utf8"));
      const text = JSON.stringify(good);
      const at = (field: string) => new RegExp(`the record ${file} cannot be read: .*${field}`);
      for (
        const [bad, field] of [
          [JSON.stringify({ ...good, format: "ckpt-cuda-held/2" }), "format must be"],
          [JSON.stringify({ ...good, heldMiB: { "not-a-gpu": 1 } }), "heldMiB key must be"],
          [JSON.stringify({ ...good, heldMiB: { [GPU]: -1 } }), "must be a number from 0"],
          [JSON.stringify({ ...good, process: { pid: "x" } }), "process.pid must be"],
          // JSON's 1e400 is Infinity once parsed; 1e300 MiB is more than any GPU holds.
          [text.replace('":1},"at"', '":1e400},"at"'), "must be a number from 0, got Infinity"],
          [text.replace('":1},"at"', '":1e300},"at"'), "must be a number from 0 to 16777216"],
        ] as const
      ) {
        assert.ok(bad !== text, "the record was spoiled");
        await writeFile(file, bad);
        await assert.rejects(records.get(id), at(field), bad);
      }
      // The most it may say of a GPU, 16 TiB, is read.
      await writeFile(file, text.replace('":1},"at"', '":16777216},"at"'));
      assert.deepEqual((await records.get(id))?.heldMiB, { [GPU]: 16777216 });
    } finally {
      kill();
    }
  });

  test("the rates of steps: none at first, kept whole (0600) beside the records, which they leave be; read strictly", async () => {
    const dir = fresh();
    const { id, kill } = await child();
    try {
      const records = new FileHeldRecords(dir, () => Promise.resolve(true));
      assert.deepEqual(await records.rates(), {}, "none kept yet");
      await records.put({ process: id, heldMiB: { [GPU]: 1 }, at: 1 });
      await records.keepRates({ checkpoint: 1.5e6, images: 2.25e6 });
      await records.keepRates({ checkpoint: 1.75e6, restore: 4e6 }); // replaces, whole
      assert.deepEqual(await records.rates(), { checkpoint: 1.75e6, restore: 4e6 });
      const file = join(dir, "rates.json");
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      assert.deepEqual(JSON.parse(await readFile(file, "utf8")).format, "ckpt-cuda-rates/1");
      assert.deepEqual((await records.list()).map((r) => r.process), [id], "no record of them");
      assert.ok((await readdir(dir)).includes("rates.json"), "a listing leaves them be");
      for (
        const [bad, field] of [
          ["{not json", "it is not JSON"],
          ['{"format":"ckpt-cuda-rates/2","checkpoint":1}', "format must be"],
          ['{"format":"ckpt-cuda-rates/1","checkpoint":0}', "checkpoint must be a number above 0"],
          ['{"format":"ckpt-cuda-rates/1","restore":"fast"}', "restore must be a number above 0"],
        ] as const
      ) {
        await writeFile(file, bad);
        await assert.rejects(records.rates(), new RegExp(`${file} cannot be read: ${field}`));
      }
    } finally {
      kill();
    }
  });

  test("a record read only as a regular file under the size cap: a FIFO hangs nothing", {
    timeout: 20_000,
  }, async () => {
    const dir = fresh();
    const live = await child();
    const other = await child();
    try {
      const records = new FileHeldRecords(dir, () => Promise.resolve(true));
      await records.put({ process: live.id, heldMiB: { [GPU]: 1 }, at: 1 });
      const file = join(dir, `${other.id.pid}-${other.id.start}.json`);
      execFileSync("mkfifo", ["-m", "600", file]);
      await assert.rejects(records.get(other.id), new RegExp(`${file} is not a regular file`));
      // A listing leaves it out (it blocks nobody), and keeps it while its process lives.
      assert.deepEqual((await records.list()).map((r) => r.process.pid), [live.id.pid]);
      assert.ok((await readdir(dir)).includes(`${other.id.pid}-${other.id.start}.json`));
      await rm(file);
      await writeFile(file, " ".repeat(70_000), { mode: 0o600 });
      await assert.rejects(
        records.get(other.id),
        new RegExp(`${file} is 70000 bytes, more than it can be \\(65536\\)`),
      );
      // Exactly the cap is read (a good record padded with spaces to 65536 bytes).
      const good = await readFile(join(dir, `${live.id.pid}-${live.id.start}.json`), "utf8");
      await writeFile(file, good.padEnd(65536, " "));
      assert.deepEqual((await records.get(other.id))?.heldMiB, { [GPU]: 1 });
      await rm(file);
      await symlink(join(dir, `${live.id.pid}-${live.id.start}.json`), file);
      await assert.rejects(records.get(other.id), new RegExp(`${file} is a symbolic link`));
      assert.deepEqual((await records.list()).map((r) => r.process.pid), [live.id.pid]);
    } finally {
      live.kill();
      other.kill();
    }
  });

  test("a file that says it is small but reads longer (as /proc's say 0 bytes) is cut at the cap", async () => {
    const status = await readFile("/proc/self/status", "utf8");
    assert.ok(
      (await stat("/proc/self/status")).size < 64 && status.length > 64,
      "as this test needs",
    );
    await assert.rejects(
      readSmallFile("/proc/self/status", "the status", 64),
      /^Error: the status grew past 64 bytes as it was read$/,
    );
  });

  test("a record that cannot be written leaves no temporary file beside it", async () => {
    const dir = fresh();
    const records = new FileHeldRecords(dir, () => Promise.resolve(true));
    await records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 }); // the directory, made
    // A directory (not empty) where the record goes: the rename into place fails.
    await mkdir(join(dir, "2.json", "inside"), { recursive: true });
    await assert.rejects(
      records.put({ process: { pid: 2 }, heldMiB: {}, at: 1 }),
      new RegExp(`cannot write ${join(dir, "2.json")}: `),
    );
    assert.deepEqual((await readdir(dir)).sort(), ["1.json", "2.json"]);
  });

  test("a directory that changed owner after its first use is refused at the next", {
    skip: process.getuid?.() === 0 ? false : loud("not root: owners can be changed by root only"),
  }, async () => {
    const dir = fresh();
    const records = new FileHeldRecords(dir, () => Promise.resolve(true));
    await records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 });
    await chown(dir, 65534, 65534);
    const theirs = new RegExp(
      `the records of held GPU memory cannot be used: ${dir} belongs to another user \\(uid 65534`,
    );
    await assert.rejects(records.get({ pid: 1 }), theirs);
    await assert.rejects(records.list(), theirs);
    await assert.rejects(records.put({ process: { pid: 1 }, heldMiB: {}, at: 2 }), theirs);
  });

  test("a directory others may read or write, or a symbolic link, is refused, naming it", async () => {
    const open = fresh();
    await mkdir(open, { mode: 0o755 });
    await chmod(open, 0o755);
    const records = new FileHeldRecords(open, () => Promise.resolve(true));
    await assert.rejects(
      records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 }),
      new RegExp(`${open} may be read or written by other users \\(mode 0755, not 0700\\)`),
    );
    await chmod(open, 0o750); // its group may read it: refused too, records are private
    await assert.rejects(
      records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 }),
      new RegExp(`${open} may be read or written by other users \\(mode 0750, not 0700\\)`),
    );
    const real = fresh();
    await mkdir(real, { mode: 0o700 });
    const link = fresh();
    await symlink(real, link);
    await assert.rejects(
      new FileHeldRecords(link, () => Promise.resolve(true)).get({ pid: 1 }),
      new RegExp(`${link} is a symbolic link`),
    );
  });

  test("a directory above them that another user may write, or owns, is refused (they could swap it)", async () => {
    // Issue 29, item 13c: a non-root user's records live in <temp>/ckpt-cuda-<uid>/held, whose
    // parent went unchecked: its owner swapped `held` between the check and the reads.
    const parent = fresh();
    await mkdir(parent, { mode: 0o700 });
    await chmod(parent, 0o777);
    const held = join(parent, "held");
    const records = new FileHeldRecords(held, () => Promise.resolve(true));
    const open = new RegExp(
      `records of held GPU memory cannot be used: ${parent} may be written by other users ` +
        `\\(mode 0777\\): another user could swap ${held} for their own`,
    );
    await assert.rejects(records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 }), open);
    await assert.rejects(records.get({ pid: 1 }), open);
    await assert.rejects(records.list(), open);
    await chmod(parent, 0o1777); // sticky, as /tmp: nobody can rename another's entry
    await records.put({ process: { pid: 1 }, heldMiB: {}, at: 1 });
    assert.equal((await records.get({ pid: 1 }))?.at, 1);
    if (process.getuid?.() !== 0) return;
    await chmod(parent, 0o755);
    await chown(parent, 65534, 65534);
    await assert.rejects(
      records.get({ pid: 1 }),
      new RegExp(`${parent} belongs to another user \\(uid 65534, you are 0\\)`),
    );
  });

  test("where they are kept: CKPT_RECORDS_DIR, else /run/ckpt-cuda as root, else the user's own", () => {
    const env = (vars: Record<string, string>) => (name: string) => vars[name];
    assert.equal(recordsDirectory(env({ CKPT_RECORDS_DIR: "/x/held" })), "/x/held");
    // A relative one is made absolute now, against this process's directory.
    assert.equal(recordsDirectory(env({ CKPT_RECORDS_DIR: "held" })), join(process.cwd(), "held"));
    const uid = process.getuid?.();
    if (uid === 0) assert.equal(recordsDirectory(env({})), "/run/ckpt-cuda");
    else {
      assert.equal(
        recordsDirectory(env({ XDG_RUNTIME_DIR: "/run/user/1000" })),
        "/run/user/1000/ckpt-cuda",
      );
    }
  });
});
