// The criu engine (os/criu.ts). With a stand-in for criu (tests/fixtures/fake_criu.sh, installed
// as root's in a private directory, its settings written into it: criu runs with a minimal
// environment): how it is found, what it is run with (no plugin directory, no outside
// configuration, leave-running, shell-job), what a failure says; and what its probe reports
// missing. criu chosen with care and bounded by the request's deadline and signal:
// tests/criu_trust_test.ts and tests/criu_bound_test.ts. With the real criu, where this machine
// has it and runs as root: a plain process tree to disk and back through `snapshot` and
// `restoreSnapshot`, bounded; otherwise that test skips, saying why.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { openCriuEngine } from "../os/criu.ts";
import { removeWorkDir, workDir } from "../os/trusted.ts";
import { parsePstree } from "../os/criu_images.ts";
import { EngineError } from "../core/engine.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";
import { loud } from "./fixtures/fake.ts";
import {
  criuImage,
  endedWithin,
  fakeCriu,
  inScratch,
  num,
  pstree,
  scratch,
  settlesWithin,
  varint,
} from "./support/fake_criu.ts";
import { criuLeftoversRemovedAfter, WORK_BASE, WORK_MINE as MINE } from "./support/temp_dirs.ts";

const root = process.getuid?.() === 0;

/** `text` as a regular expression's source that matches it alone. */
function escaped(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
}

/** The arguments and environment the fake recorded, a line each. */
function recorded(file: string): string[] {
  return readFileSync(file, "utf8").trim().split("\n");
}

criuLeftoversRemovedAfter();

describe("running criu", () => {
  test("a dump: no plugins, no outside configuration, leave-running, shell-job, a log", () =>
    inScratch(async (s) => {
      const record = join(s.dir, "record");
      const tree = join(s.dir, "pstree.img");
      writeFileSync(
        tree,
        pstree([
          { pid: 4242, ppid: 0, threads: [4242] },
          { pid: 4250, ppid: 4242, threads: [4250, 4251, 300000] },
        ]),
      );
      const engine = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_RECORD: record, FAKE_CRIU_PSTREE: tree }),
        extraArgs: ["--tcp-established"],
        env: {
          PATH: "/usr/bin:/bin",
          CRIU_CONFIG_FILE: "/evil.conf",
          CRIU_LIBS_DIR: "/usr/lib/criu",
        },
      });
      const images = join(s.dir, "tree-4242");
      mkdirSync(images, { mode: 0o700 });
      const seen: number[] = [];
      const dumped = await engine.dump({
        root: 4242,
        imagesDir: images,
        onBytes: (b) => seen.push(b),
      });
      assert.deepEqual(dumped, [
        { pid: 4242, parent: 0, threads: [4242] },
        { pid: 4250, parent: 4242, threads: [4250, 4251, 300000] },
      ], "what criu dumped, read from its pstree.img");
      const lines = recorded(record);
      const args = lines.filter((l) => l.startsWith("arg ")).map((l) => l.slice(4));
      assert.equal(args[0], "dump");
      for (
        const a of [
          "--no-default-config",
          "--leave-running",
          "--shell-job",
          "-v4",
          "--tcp-established",
        ]
      ) {
        assert.ok(args.includes(a), `criu dump is run with ${a}: ${args.join(" ")}`);
      }
      assert.equal(args[args.indexOf("--tree") + 1], "4242");
      assert.equal(args[args.indexOf("--images-dir") + 1], images);
      assert.equal(args[args.indexOf("--log-file") + 1], join(images, "dump.log"));
      assert.ok(lines.includes("libdir empty"), "its plugin directory is empty");
      assert.ok(lines.includes("env CRIU_CONFIG_FILE=unset"), "no configuration from outside");
      assert.ok(lines.includes("env CRIU_LIBS_DIR=unset"), "no plugin directory from outside");
      assert.ok(seen.length > 0 && seen[seen.length - 1] >= 2048, `bytes told: ${seen}`);
    }));

  test("a failed dump: criu's own error lines and its log, in an EngineError", () =>
    inScratch(async (s) => {
      const engine = openCriuEngine({ criuPath: fakeCriu(s.dir, { FAKE_CRIU_EXIT: "1" }) });
      const err = await engine.dump({ root: 7, imagesDir: s.dir }).catch((e) => e);
      assert.ok(err instanceof EngineError);
      assert.match(err.message, /criu dump of the tree of 7 failed \(exit 1\)/);
      assert.match(err.message, /Can't dump file 7 of that type .*chr 195:255/);
      const kept = String(err.log);
      assert.match(kept, /\/dump-7\.log$/, "kept, as the snapshot's rollback removes dump.log");
      assert.equal(readFileSync(kept, "utf8"), readFileSync(join(s.dir, "dump.log"), "utf8"));
      rmSync(kept, { force: true });
    }));

  test("a dump whose connections criu cannot hold says what to do: install iptables, or --network-lock=skip", () =>
    inScratch(async (s) => {
      const said = "criu/sk-tcp.c:81): tcp: Failed to lock TCP connection 4396";
      const vars = { FAKE_CRIU_EXIT: "1", FAKE_CRIU_ERROR: said };
      const engine = openCriuEngine({ criuPath: fakeCriu(s.dir, vars) });
      const err = await engine.dump({ root: 7, imagesDir: s.dir, tcpEstablished: true })
        .catch((e) => e);
      assert.match(err.message, /Failed to lock TCP connection 4396/);
      assert.match(err.message, /install iptables, or, where both ends .* --network-lock=skip/);
      const other = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_EXIT: "1" }, { name: "criu-other" }),
      });
      const plain = await other.dump({ root: 7, imagesDir: s.dir }).catch((e) => e);
      assert.doesNotMatch(plain.message, /iptables/, "only where criu said so");
    }));

  test("a failed run says criu's last four lines of Error, FAILED or Can't (not the open-file limit it goes on after), without their times; else its last lines, or its stderr, or no output", () =>
    inScratch(async (s) => {
      // A criu that writes $FAKE_LOG as its log, where given, and $FAKE_STDERR to stderr; exit 3.
      const body = [
        'while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; shift; done',
        '[ -n "$FAKE_LOG" ] && printf "%s" "$FAKE_LOG" >"$log"',
        '[ -n "$FAKE_STDERR" ] && printf "%s" "$FAKE_STDERR" >&2',
        "exit 3",
      ].join("\n");
      let runs = 0;
      const said = async (vars: Record<string, string>) => {
        const criu = fakeCriu(s.dir, vars, { body, name: `criu-${runs++}` });
        const err = await openCriuEngine({ criuPath: criu }).restore({ root: 7, imagesDir: s.dir })
          .catch((e) => e);
        assert.ok(err instanceof EngineError, String(err));
        rmSync(err.log!, { force: true });
        const why = "criu restore of the tree of 7 failed (exit 3): ";
        assert.ok(err.message.startsWith(why) && err.message.endsWith(` (log: ${err.log})`));
        return err.message.slice(why.length, -` (log: ${err.log})`.length);
      };
      const log = [
        "(00.000010) Version: 4.1.1 (gitid 0)",
        "(00.000020) Error (criu/a.c:1): first",
        "(00.000030) Warn  (criu/b.c:2): Can't open the second ",
        "(00.000040) Error (criu/c.c:3): third",
        "(00.000050) Restoring processes",
        "(00.006060)   4242: Error (criu/d.c:4): fourth",
        "(00.007070) Restoring FAILED.",
        "",
      ];
      assert.equal(
        await said({ FAKE_LOG: log.join("\n") }),
        "Warn  (criu/b.c:2): Can't open the second; Error (criu/c.c:3): third; " +
          "4242: Error (criu/d.c:4): fourth; Restoring FAILED.",
      );
      // None of those: its last lines (of four, the empty one after the last newline left out).
      const quiet = [
        "(00.000010) Version: 4.1.1",
        "(00.000020) Seizing 7",
        "(00.000030) Forking 7",
      ];
      assert.equal(
        await said({ FAKE_LOG: [...quiet, "(00.000040) Waiting for 7", ""].join("\n") }),
        "Seizing 7; Forking 7; Waiting for 7",
      );
      // No log: its stderr; nothing at all: said so.
      assert.equal(
        await said({ FAKE_STDERR: "criu: unrecognized option '--x'\n" }),
        "criu: unrecognized option '--x'",
      );
      assert.equal(await said({}), "no output");
      // Where criu lacks CAP_SYS_RESOURCE (a container; the GPU machines of 2026-12): an Error it
      // logs at its start and goes on after, not why it failed (criu 4.1.1, "Can't fork" for 618).
      const limit = "(00.000330) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for " +
        "self: Operation not permitted";
      const fork = "(00.012810) Error (criu/cr-restore.c:1230): Can't fork for 618: File exists";
      assert.equal(
        await said({
          FAKE_LOG: [limit, fork, "(00.012900) Error (x.c:1): Restoring FAILED.", ""].join("\n"),
        }),
        "Error (criu/cr-restore.c:1230): Can't fork for 618: File exists; Error (x.c:1): Restoring FAILED.",
      );
    }));

  test("a restore tells onBytes the memory of pstree.img's processes (its pages read back so far); without one, nothing", () =>
    inScratch(async (s) => {
      const me = [{ pid: process.pid, ppid: 0, threads: [process.pid] }];
      writeFileSync(join(s.dir, "pstree.img"), pstree(me)); // a tree of this very process
      const engine = openCriuEngine({ criuPath: fakeCriu(s.dir, { FAKE_CRIU_ROOT: "4242" }) });
      const seen: number[] = [];
      await engine.restore({ root: 4242, imagesDir: s.dir, onBytes: (b) => seen.push(b) });
      const status = readFileSync("/proc/self/status", "utf8");
      const held = [...status.matchAll(/^Rss(?:Anon|Shmem):\s*(\d+) kB/gm)]
        .reduce((sum, m) => sum + Number(m[1]) * 1024, 0);
      const told = seen[seen.length - 1];
      assert.ok(told > held / 2 && told < held * 2, `told ${seen}, this process holds ${held}`);
      const none = join(s.dir, "none");
      mkdirSync(none);
      const not: number[] = [];
      await engine.restore({ root: 4242, imagesDir: none, onBytes: (b) => not.push(b) });
      assert.deepEqual(not, [], "no pstree.img, no count");
    }));

  test("a restore: detached, shell-job, its pidfile read; a root it did not make is an error", () =>
    inScratch(async (s) => {
      const record = join(s.dir, "record");
      const ok = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_RECORD: record, FAKE_CRIU_ROOT: "4242" }),
      });
      await ok.restore({ root: 4242, imagesDir: s.dir });
      const args = recorded(record).filter((l) => l.startsWith("arg ")).map((l) => l.slice(4));
      assert.equal(args[0], "restore");
      for (const a of ["--restore-detached", "--shell-job", "--no-default-config", "--pidfile"]) {
        assert.ok(args.includes(a), `criu restore is run with ${a}`);
      }
      assert.notEqual(
        args[args.indexOf("--work-dir") + 1],
        s.dir,
        "it writes nothing beside the images",
      );
      const wrong = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_ROOT: "99" }, { name: "criu-99" }),
      });
      const err = await wrong.restore({ root: 4242, imagesDir: s.dir }).catch((e) => e);
      assert.match(err.message, /criu restored the tree of 4242 as 99/);
      // Its log is kept beside the work directories, for the error to name; the test's own.
      assert.ok(err.log, "the error names the log");
      rmSync(err.log, { force: true });
    }));

  test("a failed dump's log is kept beside the work directories, named by path, not /proc/<pid>/fd/<n> (issue 29, item 13f)", () =>
    inScratch(async (s) => {
      const snap = await new FileSnapshotStore().create(join(s.dir, "snap"));
      const base = WORK_BASE;
      try {
        await snap.subdir("tree-7");
        const imagesDir = await snap.enginePath("tree-7");
        assert.match(imagesDir, /^\/proc\/\d+\/fd\/\d+$/, "criu writes through the open directory");
        const engine = openCriuEngine({ criuPath: fakeCriu(s.dir, { FAKE_CRIU_EXIT: "1" }) });
        const err = await engine.dump({ root: 7, imagesDir }).catch((e) => e);
        // The snapshot's rollback removes its directory: the error names a copy that stays.
        assert.equal(err.log, join(base, "dump-7.log"));
        assert.ok(err.message.endsWith(`(log: ${err.log})`), err.message);
        await snap.removeCreated();
        assert.match(readFileSync(err.log, "utf8"), /Dumping FAILED/, "the log is kept");
        rmSync(err.log, { force: true });
      } finally {
        await snap.close();
      }
    }));

  test("a dump whose pstree.img cannot be read then says so, naming it as given or, through the snapshot's open directory, by its path (not /proc/<pid>/fd/<n>); criu's log kept", () =>
    inScratch(async (s) => {
      const base = WORK_BASE;
      const engine = openCriuEngine({ criuPath: fakeCriu(s.dir) }); // it writes no pstree.img
      const unread = (file: string) =>
        new RegExp(`^criu's ${file} cannot be read: .*(ENOENT|[Nn]o such file)`);
      // A directory given through a link: named as given, the link not followed.
      const real = join(s.dir, "tree-7"), link = join(s.dir, "images-7");
      mkdirSync(real, { mode: 0o700 });
      symlinkSync(real, link);
      const err = await engine.dump({ root: 7, imagesDir: link }).catch((e) => e);
      assert.ok(err instanceof EngineError, String(err));
      assert.match(err.message, unread(`${escaped(link)}/pstree\\.img`));
      assert.equal(err.log, join(base, "dump-7.log"));
      assert.match(readFileSync(err.log, "utf8"), /Dumping finished successfully/, "criu's log");
      rmSync(err.log, { force: true });
      const snap = await new FileSnapshotStore().create(join(s.dir, "snap"));
      try {
        await snap.subdir("tree-8");
        const imagesDir = await snap.enginePath("tree-8");
        assert.match(imagesDir, /^\/proc\/\d+\/fd\/\d+$/, "criu writes through the open directory");
        const pinned = await engine.dump({ root: 8, imagesDir }).catch((e) => e);
        assert.ok(pinned instanceof EngineError, String(pinned));
        assert.match(
          pinned.message,
          unread(`${escaped(realpathSync(s.dir))}/\\S+/tree-8/pstree\\.img`),
        );
        rmSync(pinned.log!, { force: true });
        await snap.removeCreated();
      } finally {
        await snap.close();
      }
    }));

  test("restore work directories: each removed when its restore ends, the log of one that failed kept; those of programs gone removed (issue 29, item 13h)", () =>
    inScratch(async (s) => {
      const base = WORK_BASE;
      const mine = MINE;
      // The last removed takes the base along (where nothing else is there).
      const ours = () =>
        (existsSync(base) ? readdirSync(base) : []).filter((n) => n.startsWith(mine));
      const ok = openCriuEngine({ criuPath: fakeCriu(s.dir, { FAKE_CRIU_ROOT: "4243" }) });
      await ok.restore({ root: 4243, imagesDir: s.dir });
      assert.deepEqual(ours(), [], "a restore that succeeded leaves nothing");
      // Left by programs that are gone (one killed outright), or by this pid's earlier owner.
      const dead = [`${2 ** 22 + 7}-1-restore-x`, `${process.pid}-1-restore-y`];
      for (const d of dead) {
        mkdirSync(join(base, d, "no-plugins"), { recursive: true, mode: 0o700 });
      }
      // Failed runs' kept logs: a day old, gone; newer, kept.
      const [old, fresh] = ["dump-2000000001.log", "dump-2000000002.log"].map((n) => join(base, n));
      for (const f of [old, fresh]) writeFileSync(f, "log");
      utimesSync(old, new Date(Date.now() - 2 * 86_400_000), new Date(Date.now() - 2 * 86_400_000));
      const failing = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_EXIT: "1" }, { name: "criu-1" }),
      });
      const err = await failing.restore({ root: 4244, imagesDir: s.dir }).catch((e) => e);
      assert.ok(err instanceof EngineError, String(err));
      assert.equal(err.log, join(base, "restore-4244.log"));
      assert.ok(err.message.endsWith(`(log: ${err.log})`), err.message);
      assert.match(readFileSync(err.log, "utf8"), /Dumping FAILED/, "its log, kept");
      assert.deepEqual(ours(), [], "a restore that failed leaves no work directory");
      for (const d of dead) assert.ok(!existsSync(join(base, d)), `${d} removed`);
      assert.ok(!existsSync(old) && existsSync(fresh), "the day-old log removed, the newer kept");
      rmSync(err.log, { force: true });
      rmSync(fresh, { force: true });
    }));

  test("kill: a process already gone is no error", { timeout: 30_000 }, async () => {
    const child = spawn("sleep", ["30"]);
    const gone = new Promise((r) => child.on("exit", (_c, sig) => r(sig)));
    try {
      await openCriuEngine({ criuPath: "/bin/true" }).kill([child.pid!, 2 ** 22 + 12345]);
      assert.equal(await gone, "SIGKILL");
    } finally {
      child.kill("SIGKILL");
      await gone;
    }
  });
});

describe("criu's work directories, made by several runs at once", () => {
  test("each is named by this program and its operation; one that cannot be made fails the dump or restore before criu runs, saying why", () =>
    inScratch(async (s) => {
      const base = WORK_BASE;
      const mine = MINE;
      const record = join(s.dir, "record");
      const engine = openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_RECORD: record, FAKE_CRIU_ROOT: "4242" }),
      });
      const images = join(s.dir, "tree-4242");
      mkdirSync(images, { mode: 0o700 });
      await engine.restore({ root: 4242, imagesDir: s.dir });
      const failed = await engine.dump({ root: 4242, imagesDir: images }).catch((e) => e);
      assert.ok(failed instanceof EngineError && failed.log, String(failed)); // no pstree.img
      rmSync(failed.log, { force: true }); // its log, kept: this test's own
      const args = recorded(record).filter((l) => l.startsWith("arg ")).map((l) => l.slice(4));
      const after = (flag: string) => args.flatMap((a, i) => a === flag ? [args[i + 1]] : []);
      const named = (what: string) => new RegExp(`^${escaped(join(base, mine))}${what}-[^/]+$`);
      assert.match(after("--work-dir")[0], named("restore"));
      assert.match(after("--libdir")[1], named("dump"));
      // Their base, made by hand where others may read it: refused, as workDir says.
      rmSync(record);
      chmodSync(base, 0o755);
      try {
        for (
          const run of [
            () => engine.dump({ root: 4242, imagesDir: images }),
            () => engine.restore({ root: 4242, imagesDir: s.dir }),
          ]
        ) {
          const err = await run().catch((e) => e);
          assert.ok(err instanceof EngineError, String(err));
          assert.ok(err.cause instanceof Error, "what workDir threw, kept");
          assert.equal(err.message, err.cause.message);
          assert.match(
            err.message,
            /may be read or written by other users \(mode 0755, not 0700\); remove it; criu's work directories are made there$/,
          );
          assert.ok(err.message.startsWith(base), err.message);
        }
        assert.equal(existsSync(record), false, "criu never ran");
      } finally {
        chmodSync(base, 0o700);
      }
    }));

  test("old logs removed meanwhile by another run fail none of them", async () => {
    const base = WORK_BASE;
    rmSync(await workDir("first-"), { recursive: true }); // the base, made
    // Before, a run whose lstat of an old log came after another run's rm of it failed (ENOENT).
    const aged = new Date(Date.now() - 2 * 86_400_000);
    const logs = Array.from({ length: 50 }, (_, i) => join(base, `dump-${2_000_001_000 + i}.log`));
    for (const f of logs) {
      writeFileSync(f, "log");
      utimesSync(f, aged, aged);
    }
    const made = await Promise.allSettled(Array.from({ length: 8 }, () => workDir("race-")));
    for (const m of made) if (m.status === "fulfilled") rmSync(m.value, { recursive: true });
    assert.deepEqual(made.filter((m) => m.status === "rejected").map((m) => String(m.reason)), []);
    assert.deepEqual(logs.filter((f) => existsSync(f)), [], "each old log removed");
  });

  test("the last one removed takes its base along (none left in the temporary directory), unless something else is there; runs that make and remove them at once fail none", async () => {
    const base = WORK_BASE;
    const [a, b] = [await workDir("a-"), await workDir("b-")];
    await removeWorkDir(a);
    assert.ok(existsSync(b) && existsSync(base), "the other kept, and their base");
    const kept = join(base, "dump-2000002000.log"); // a failed run's log
    writeFileSync(kept, "log");
    await removeWorkDir(b);
    assert.deepEqual(
      readdirSync(base).filter((n) => n === "dump-2000002000.log" || n.startsWith(MINE)),
      ["dump-2000002000.log"],
    );
    rmSync(kept);
    const c = await workDir("c-");
    await removeWorkDir(c);
    // Gone, where nothing of another program's is there (as in a user's temporary directory).
    const left = existsSync(base) ? readdirSync(base) : undefined;
    assert.ok(left === undefined || left.length > 0, "the base left empty");
    // Each run's base may be removed by another's between its check and its mkdtemp.
    const runs = Array.from({ length: 4 }, async () => {
      for (let i = 0; i < 50; i++) await removeWorkDir(await workDir("busy-"));
    });
    const settled = await Promise.allSettled(runs);
    assert.deepEqual(
      settled.filter((r) => r.status === "rejected").map((r) => String(r.reason)),
      [],
    );
  });
});

describe("criu's pstree.img", () => {
  test("packed or not, the processes in order; anything else is refused with why", () => {
    const entries = [{ pid: 7, ppid: 0, threads: [7, 9] }, {
      pid: 300000,
      ppid: 7,
      threads: [300000],
    }];
    const want = [{ pid: 7, parent: 0, threads: [7, 9] }, {
      pid: 300000,
      parent: 7,
      threads: [300000],
    }];
    assert.deepEqual(parsePstree(pstree(entries)), want);
    assert.deepEqual(parsePstree(pstree(entries, true)), want);
    const whole = pstree(entries);
    // Cut within a field, or after a whole one (the last entry's threads): its length says more.
    for (const cut of [2, 4]) {
      assert.throws(
        () => parsePstree(whole.subarray(0, whole.length - cut)),
        /^Error: its entry at byte \d+ is cut short$/,
        `${cut} bytes short`,
      );
    }
    assert.throws(() => parsePstree(new Uint8Array(16)), /does not start with criu's pstree magic/);
    const files = criuImage(0x56303138, [num(1, 7)]); // files.img's magic: another image
    assert.throws(() => parsePstree(files), /does not start with criu's pstree magic/);
    assert.throws(() => parsePstree(whole.subarray(0, 8)), /holds no process/);
    const noPid = criuImage(0x50273030, [[...num(2, 7), ...num(5, 9)]]);
    assert.throws(() => parsePstree(noPid), /an entry has no pid/);
  });

  test("fixed-width fields, which no pstree_entry has yet, are skipped by their width", () => {
    const fixed32 = [...varint(6 * 8 + 5), 1, 2, 3, 4],
      fixed64 = [...varint(7 * 8 + 1), ...[...Array(8).keys()]];
    const entry = [...num(1, 7), ...fixed32, ...num(2, 5), ...fixed64, ...num(5, 7), ...num(5, 9)];
    assert.deepEqual(parsePstree(criuImage(0x50273030, [entry])), [
      { pid: 7, parent: 5, threads: [7, 9] },
    ]);
  });
});

describe("what a restore does not act on", () => {
  test("inertFile: a pages file of a process, by its name, and the dump's log, nothing else", () => {
    const criu = openCriuEngine({ env: {} });
    for (const name of ["pages-1.img", "pages-4294967295.img", "dump.log"]) {
      assert.equal(criu.inertFile!(name), true, name);
    }
    for (const name of ["pages-0.img", "pages-012.img", "pages-12345678901.img", "pstree.img"]) {
      assert.equal(criu.inertFile!(name), false, name);
    }
  });
});

describe("what the probe reports missing", () => {
  test("criu not installed: one sentence naming what to do", async () => {
    const probe = await openCriuEngine({ env: { PATH: "/nonexistent" } }).probe();
    // The system's sbin may have a criu; only where it has none is this the answer.
    if (probe.version === undefined && probe.problems.length === 1) {
      assert.match(probe.problems[0], /criu is not installed .* install criu 4\.0 or later/);
    }
    const named = await openCriuEngine({ criuPath: "/nonexistent/criu" }).probe();
    assert.deepEqual(named.problems, ["criu was not found at /nonexistent/criu."]);
    assert.throws(() => openCriuEngine({ criuPath: "criu" }), /criuPath must be an absolute path/);
    const relative = await openCriuEngine({ env: { CKPT_CRIU_PATH: "./criu" } }).probe();
    assert.match(relative.problems[0], /CKPT_CRIU_PATH must be an absolute path, got "\.\/criu"/);
  });

  test("too old a criu, and extra arguments that are not options", () =>
    inScratch(async (s) => {
      const old = fakeCriu(s.dir, { FAKE_CRIU_VERSION: "3.17.1" });
      const probe = await openCriuEngine({ criuPath: old }).probe();
      assert.equal(probe.version, "3.17.1");
      assert.ok(
        probe.problems.some((p) => /criu 3\.17\.1 at .* is too old: .* criu 4\.0 or later/.test(p)),
        probe.problems.join(" | "),
      );
      assert.throws(
        () => openCriuEngine({ criuPath: old, extraArgs: ["-x; rm -rf /"] }),
        /extraArgs must be criu options starting with --, got "-x; rm -rf \/"/,
      );
      // One option as a string, not in an array: named whole, not by its first character.
      assert.throws(
        () => openCriuEngine({ criuPath: old, extraArgs: "--shell-job" as never }),
        /^TypeError: extraArgs must be an array of options, got "--shell-job"$/,
      );
      // A NUL would end the argument where criu reads it: refused, not cut short.
      assert.throws(
        () => openCriuEngine({ criuPath: old, extraArgs: ["--ext-unix-sk\0--x"] }),
        /extraArgs must be criu options starting with --, got "--ext-unix-sk\\u0000--x"/,
      );
      assert.throws(
        () => openCriuEngine({ libraryDir: "lib" }),
        /libraryDir must be an absolute path of a directory, got "lib"/,
      );
    }));

  test("root, and criu check", () =>
    inScratch(async (s) => {
      const failing = await openCriuEngine({
        criuPath: fakeCriu(s.dir, { FAKE_CRIU_CHECK_FAILS: "1" }, { name: "failing" }),
      }).probe();
      if (root) {
        assert.equal(failing.problems.length, 1);
        assert.match(failing.problems[0], /criu check reports .*PTRACE_O_SUSPEND_SECCOMP/);
        assert.doesNotMatch(failing.problems[0], /vDSO/, "no vDSO advice where it is not one");
        const fine = openCriuEngine({ criuPath: fakeCriu(s.dir) });
        assert.deepEqual((await fine.probe()).problems, []);
        // criu 4.0's check fails on a 6.x kernel's vDSO: the problem says to take 4.1 or later.
        const vdso = await openCriuEngine({
          criuPath: fakeCriu(s.dir, { FAKE_CRIU_CHECK_FAILS: "vdso", FAKE_CRIU_VERSION: "4.0" }, {
            name: "criu40",
          }),
        }).probe();
        assert.equal(vdso.problems.length, 1);
        assert.match(
          vdso.problems[0],
          /Unexpected rt vDSO area bounds.*criu 4\.0 cannot read this kernel's vDSO \(criu 4\.1 fixed that\): use criu 4\.1 or later\.$/,
        );
        // The same words from criu 4.1, which reads it: no advice to take 4.1.
        const vdso41 = await openCriuEngine({
          criuPath: fakeCriu(s.dir, { FAKE_CRIU_CHECK_FAILS: "vdso", FAKE_CRIU_VERSION: "4.1" }, {
            name: "criu41",
          }),
        }).probe();
        assert.equal(vdso41.problems.length, 1);
        assert.doesNotMatch(vdso41.problems[0], /fixed that/);
        // A check that exits 0 without its "Looks good." did not pass either.
        const body = 'case $1 in --version) echo "Version: 4.1.1" ;; ' +
          'check) echo "Warn (criu/cr-check.c:9): no seccomp filter dump" ;; esac; exit 0\n';
        const quiet = await openCriuEngine({
          criuPath: fakeCriu(s.dir, {}, { name: "quiet", body }),
        }).probe();
        assert.deepEqual(quiet.problems, [
          "criu check reports that this kernel lacks what criu needs: Warn (criu/cr-check.c:9): " +
          "no seccomp filter dump.",
        ]);
      } else {
        assert.ok(failing.problems.some((p) => /Snapshots need root/.test(p)));
      }
    }));
});

/** The real criu, where this machine has it and runs as root: or why the test skips. */
async function realCriu(): Promise<{ path: string } | string> {
  if (!root) return loud("not root: the test of the real criu needs root");
  const engine = openCriuEngine();
  const probe = await engine.probe();
  if (probe.problems.length > 0) return loud(`no usable criu here: ${probe.problems.join(" ")}`);
  return { path: "criu" };
}

const real = await realCriu();

describe("the real criu, on a tree without CUDA", () => {
  test(
    "snapshot ends the tree, restoreSnapshot brings it back with its pids",
    { skip: typeof real === "string" ? real : false, timeout: 120_000 },
    async () => {
      const { snapshot, restoreSnapshot } = await import("../mod.ts");
      const { machineWith } = await import("./support/forward.ts");
      const { SimulatedMachine } = await import("../mock/mod.ts");
      const { LinuxHost } = await import("../os/linux_host.ts");
      const s = scratch();
      // A shell that appends a line to a file five times a second.
      const out = join(s.dir, "out.txt");
      writeFileSync(out, "");
      const child = spawn("sh", ["-c", `while :; do date +%s >> ${out}; sleep 0.2; done`], {
        stdio: "ignore",
        detached: true, // setsid(): a session of its own
      });
      const reaped = new Promise((r) => child.once("exit", r));
      let pids: number[] = [child.pid!];
      await new Promise((r) => setTimeout(r, 500));
      const host = new LinuxHost({ nvml: false, recordsDir: false });
      // No process here uses CUDA: the simulated driver answers that none of these pids has it.
      // On the real clock: the snapshot waits on it for the ended tree to be reaped.
      const sim = new SimulatedMachine({ clock: "real" });
      try {
        const tree = await host.processTree(child.pid!);
        assert.ok(tree && tree.length >= 1);
        const dir = join(s.dir, "snap");
        const engine = openCriuEngine();
        const machine = machineWith(sim, { host, engine });
        // Bounded below the test's own timeout: a criu that hangs (criu 4.1.1 on a 6.18 kernel,
        // after "Waiting for PID to trap") is ended by the engine, and the test says so.
        const made = await snapshot([child.pid!], dir, { machine, timeoutMs: 45_000 });
        assert.equal(made.manifest.trees[0].root, child.pid);
        assert.ok(made.manifest.files.some((f) => f.path.endsWith("pstree.img")));
        // Ended and reaped (by this program for the root, by init for the rest) when it returns:
        // no process keeps a pid of the tree, nor has one as its session or group (a `date` or
        // `sleep` forked after the dump and not yet reaped by init once made criu's fork fail).
        const ids = made.manifest.trees[0].processes.map((p) => p.pid);
        pids = ids;
        assert.deepEqual(await host.pidsInUse(ids), [], "the tree was ended and reaped");
        const size = statSync(out).size;
        const back = await restoreSnapshot(dir, { machine, timeoutMs: 45_000 });
        assert.deepEqual(back.pids, made.manifest.trees[0].processes.map((p) => p.pid));
        assert.equal((await host.identify(child.pid!))?.pid, child.pid, "back with its pid");
        await new Promise((r) => setTimeout(r, 700));
        assert.ok(statSync(out).size > size, "it carries on writing");
      } finally {
        await host.close();
        // No process of the test is left: the tree (ours, or restored and detached) is killed,
        // and waited for.
        for (const target of [-child.pid!, ...pids]) {
          try {
            process.kill(target, "SIGKILL");
          } catch {
            // gone
          }
        }
        await settlesWithin(reaped, 5000);
        assert.deepEqual(await endedWithin(pids, 5000), [], "no process of the test is left");
        s.done();
      }
    },
  );
});
