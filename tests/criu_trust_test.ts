// criu chosen with care (issue 22, item 8): a criu that another user could have put or changed is
// refused, named with its fault, whether it is found in PATH or named; criu runs with a minimal
// environment (a fixed PATH, no LD_PRELOAD, LD_LIBRARY_PATH only from an explicit, checked
// library directory); its work directories are private. Each case failed on the code before: a
// 0777 criu first in PATH ran, with the caller's whole environment, its directories under $TMPDIR.
// Runs under `deno test -A` and `bun test`; the cases that change a file's owner need root (the
// tests run as root in CI) and skip, saying so, without it.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, readFileSync, statSync, symlinkSync } from "node:fs";
import { rmSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { openCriuEngine } from "../os/criu.ts";
import { EngineError } from "../core/engine.ts";
import { loud } from "./fixtures/fake.ts";
import { fakeCriu, inScratch } from "./support/fake_criu.ts";
import { criuLeftoversRemovedAfter } from "./support/temp_dirs.ts";

criuLeftoversRemovedAfter();

/** The problems of a probe but the one a user who is not root has besides (run as root). */
const trustOnly = (problems: readonly string[]) =>
  problems.filter((p) => !p.startsWith("Snapshots need root"));

const notRoot = process.getuid?.() === 0
  ? false
  : loud("not root: owners can be changed by root only");

/** A criu stand-in that writes its environment (one variable a line) to `out`, then acts as one. */
function envWriter(dir: string, out: string, name = "criu"): string {
  const body = `env > '${out}'\n` +
    readFileSync(new URL("./fixtures/fake_criu.sh", import.meta.url), "utf8")
      .replace(/^#!.*\n/, "");
  return fakeCriu(dir, {}, { body, name });
}

/** A directory in `s` made with `mode`, `mode` set exactly (the umask left out). */
function dirWith(parent: string, name: string, mode: number): string {
  const dir = join(parent, name);
  mkdirSync(dir);
  chmodSync(dir, mode);
  return dir;
}

describe("a criu another user could change is refused, naming the path and the fault", () => {
  test("a 0777 criu first in PATH", () =>
    inScratch(async (s) => {
      const bin = dirWith(s.dir, "bin", 0o755);
      const criu = fakeCriu(bin, {}, { mode: 0o777 });
      const engine = openCriuEngine({ env: { PATH: `${bin}:/usr/bin` } });
      const probe = await engine.probe();
      assert.deepEqual(probe.problems, [
        `criu at ${criu} is refused: ${criu} may be written by other users (mode 0777).`,
      ]);
      const err = await engine.dump({ root: 1, imagesDir: s.dir }).catch((e) => e);
      assert.ok(err instanceof EngineError, String(err));
      assert.match(err.message, /may be written by other users \(mode 0777\)/);
      // Named, it is refused alike; group-writable too.
      chmodSync(criu, 0o775);
      const named = await openCriuEngine({ criuPath: criu }).probe();
      assert.deepEqual(named.problems, [
        `criu at ${criu} is refused: ${criu} may be written by its group (mode 0775).`,
      ]);
    }));

  test("a criu in a directory others may write, or behind a link into one", () =>
    inScratch(async (s) => {
      const open = dirWith(s.dir, "open", 0o777);
      const criu = fakeCriu(open);
      const probe = await openCriuEngine({ criuPath: criu }).probe();
      assert.deepEqual(probe.problems, [
        `criu at ${criu} is refused: ${open} may be written by other users (mode 0777).`,
      ]);
      // A link in a trusted directory does not make its target trusted.
      const safe = dirWith(s.dir, "safe", 0o755);
      symlinkSync(criu, join(safe, "criu"));
      const linked = await openCriuEngine({ env: { PATH: safe } }).probe();
      assert.deepEqual(linked.problems, [
        `criu at ${join(safe, "criu")} (${criu}) is refused: ${open} may be written by other ` +
        `users (mode 0777).`,
      ]);
      // The sticky bit on a directory above (as /tmp has) is no fault: nobody can replace an
      // entry of root's there.
      chmodSync(open, 0o1777);
      assert.deepEqual(trustOnly((await openCriuEngine({ criuPath: criu }).probe()).problems), []);
    }));

  test(
    "a criu, or a directory above it, of another user",
    { skip: notRoot },
    () =>
      inScratch(async (s) => {
        const theirs = dirWith(s.dir, "theirs", 0o755);
        const criu = fakeCriu(theirs);
        chownSync(theirs, 65534, 65534);
        const probe = await openCriuEngine({ criuPath: criu }).probe();
        assert.deepEqual(probe.problems, [
          `criu at ${criu} is refused: ${theirs} belongs to another user (uid 65534, you are 0).`,
        ]);
        chownSync(theirs, 0, 0);
        chownSync(criu, 65534, 65534);
        const file = await openCriuEngine({ env: { PATH: theirs } }).probe();
        assert.deepEqual(file.problems, [
          `criu at ${criu} is refused: ${criu} belongs to another user (uid 65534, you are 0).`,
        ]);
        chownSync(criu, 0, 0);
        assert.deepEqual((await openCriuEngine({ criuPath: criu }).probe()).problems, []);
      }),
  );
});

describe("criu runs with a minimal environment", () => {
  test("a fixed PATH; no LD_PRELOAD, LD_LIBRARY_PATH or anything else of the caller's", () =>
    inScratch(async (s) => {
      const out = join(s.dir, "env.txt");
      const engine = openCriuEngine({
        criuPath: envWriter(s.dir, out),
        env: {
          PATH: "/opt/evil/bin:/usr/bin",
          LD_PRELOAD: "/tmp/evil.so",
          LD_LIBRARY_PATH: "/tmp/evil",
          HOME: "/root",
          SECRET_TOKEN: "x",
        },
      });
      const images = dirWith(s.dir, "tree-7", 0o700);
      await engine.dump({ root: 7, imagesDir: images }).catch(() => {}); // no pstree: an error
      const env = readFileSync(out, "utf8").trim().split("\n")
        .filter((l) => !/^(PWD|SHLVL|_|OLDPWD)=/.test(l)); // what sh sets itself
      assert.deepEqual(env.sort(), ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]);
    }));

  test("LD_LIBRARY_PATH only from a library directory named explicitly, and checked", () =>
    inScratch(async (s) => {
      const out = join(s.dir, "env.txt");
      const criu = envWriter(s.dir, out);
      const lib = dirWith(s.dir, "lib", 0o755);
      fakeCriu(lib, {}, { name: "libcriu.so.2", body: "", mode: 0o644 });
      symlinkSync("libcriu.so.2", join(lib, "libcriu.so"));
      const images = dirWith(s.dir, "tree-7", 0o700);
      await openCriuEngine({ criuPath: criu, libraryDir: lib }).dump({ root: 7, imagesDir: images })
        .catch(() => {});
      assert.ok(readFileSync(out, "utf8").split("\n").includes(`LD_LIBRARY_PATH=${lib}`));
      // Through the environment variable as well.
      const viaEnv = openCriuEngine({ criuPath: criu, env: { CKPT_CRIU_LIBRARY_DIR: lib } });
      assert.deepEqual(trustOnly((await viaEnv.probe()).problems), []);
      // A library others may write, or a directory of them, is refused.
      chmodSync(join(lib, "libcriu.so.2"), 0o666);
      const file = await openCriuEngine({ criuPath: criu, libraryDir: lib }).probe();
      assert.deepEqual(file.problems, [
        `criu's library directory ${lib} is refused: ${
          join(lib, "libcriu.so.2")
        } may be written by other users (mode 0666).`,
      ]);
      chmodSync(join(lib, "libcriu.so.2"), 0o644);
      chmodSync(lib, 0o1777);
      const dir = await openCriuEngine({ criuPath: criu, libraryDir: lib }).probe();
      assert.deepEqual(dir.problems, [
        `criu's library directory ${lib} is refused: ${lib} may be written by other users ` +
        `(mode 01777).`,
      ]);
    }));

  test("every directory the loader searches below the library directory is checked too", () =>
    // ld.so looks in <dir>/glibc-hwcaps/x86-64-v2/, tls/, x86_64/ ... before <dir>: a library
    // planted there ran inside criu as root (issue 29, item 8). Each case passed before.
    inScratch(async (s) => {
      const criu = fakeCriu(s.dir);
      const lib = dirWith(s.dir, "lib", 0o755);
      const hwcaps = dirWith(dirWith(lib, "glibc-hwcaps", 0o755), "x86-64-v2", 0o755);
      const planted = fakeCriu(hwcaps, {}, { name: "libcriu.so.2", body: "", mode: 0o644 });
      const probe = () => openCriuEngine({ criuPath: criu, libraryDir: lib }).probe();
      assert.deepEqual(
        trustOnly((await probe()).problems),
        [],
        "a tree of root's, written by nobody else",
      );
      chmodSync(planted, 0o666);
      assert.deepEqual((await probe()).problems, [
        `criu's library directory ${lib} is refused: ${planted} may be written by other users ` +
        `(mode 0666).`,
      ]);
      chmodSync(planted, 0o644);
      const tls = dirWith(lib, "tls", 0o777);
      assert.deepEqual((await probe()).problems, [
        `criu's library directory ${lib} is refused: ${tls} may be written by other users ` +
        `(mode 0777).`,
      ]);
      chmodSync(tls, 0o755);
      // A link in it leads into a directory others may write: what it leads to is not trusted.
      const open = dirWith(s.dir, "open", 0o777);
      const target = fakeCriu(open, {}, { name: "libcriu.so.3", body: "", mode: 0o644 });
      const link = join(lib, "libcriu.so.3");
      symlinkSync(target, link);
      assert.deepEqual((await probe()).problems, [
        `criu's library directory ${lib} is refused: ${open} may be written by other users ` +
        `(mode 0777).`,
      ]);
      unlinkSync(link);
      if (!notRoot) {
        const theirs = fakeCriu(tls, {}, { name: "libcriu.so.2", body: "", mode: 0o644 });
        chownSync(theirs, 65534, 65534);
        assert.deepEqual((await probe()).problems, [
          `criu's library directory ${lib} is refused: ${theirs} belongs to another user ` +
          `(uid 65534, you are 0).`,
        ]);
      }
    }));

  test("its work directories are private, and not under the caller's TMPDIR", () =>
    inScratch(async (s) => {
      const record = join(s.dir, "record");
      const criu = fakeCriu(s.dir, { FAKE_CRIU_RECORD: record, FAKE_CRIU_ROOT: "4242" });
      const engine = openCriuEngine({ criuPath: criu });
      await engine.restore({ root: 4242, imagesDir: s.dir });
      const images = dirWith(s.dir, "tree-4242", 0o700);
      const failed = await engine.dump({ root: 4242, imagesDir: images }).catch((e) => e);
      assert.ok(failed instanceof EngineError && failed.log, String(failed)); // no pstree: its log
      const args = readFileSync(record, "utf8").split("\n").filter((l) => l.startsWith("arg "))
        .map((l) => l.slice(4));
      const dirs = args.flatMap((a, i) =>
        a === "--work-dir" || a === "--libdir" ? [args[i + 1]] : []
      );
      assert.equal(dirs.length, 3, args.join(" "));
      const base = process.getuid?.() === 0 ? "/run/ckpt-cuda-work/" : "ckpt-cuda-work-";
      for (const d of dirs) {
        assert.ok(d.includes(base), `${d} is under the private base`);
        const above = d.slice(0, d.indexOf(base) + base.length);
        if (process.getuid?.() === 0) {
          assert.equal(statSync(above).mode & 0o777, 0o700, `${above} is 0700`);
        }
      }
      rmSync(failed.log, { force: true });
    }));
});
