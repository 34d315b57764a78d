// Tests of the native driver in subprocesses, under the runtime that runs the tests (Deno or Bun):
// a libcuda planted in the current directory is never loaded, a relative library path is made
// absolute, and a program that never closes the driver still ends. Uses the fake libcuda of
// tests/fixtures/fake_libcuda.c and the program tests/fixtures/native_child.ts.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, realpathSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";

import { LIBCUDA_ENV_VAR } from "../ffi/find.ts";
import { FakeDir, noCompiler, runtime } from "./fixtures/fake.ts";

const CHILD = new URL("./fixtures/native_child.ts", import.meta.url).pathname;
const fakes = noCompiler ? undefined : new FakeDir();
after(() => fakes?.remove());

/** Runs the child program in `cwd` (`LD_LIBRARY_PATH` unset unless given); its JSON lines, status, time. */
function child(cwd: string, args: string[], ldLibraryPath?: string) {
  const env: Record<string, string | undefined> = {
    ...process.env,
    LD_LIBRARY_PATH: ldLibraryPath,
  };
  delete env[LIBCUDA_ENV_VAR];
  if (ldLibraryPath === undefined) delete env.LD_LIBRARY_PATH;
  const argv = runtime === "deno" ? ["run", "-A", CHILD, ...args] : [CHILD, ...args];
  const started = Date.now();
  const run = spawnSync(process.execPath, argv, { cwd, env, encoding: "utf8", timeout: 10_000 });
  const lines = (run.stdout ?? "").split("\n").filter((line) => line.startsWith("{"));
  return {
    status: run.status,
    ms: Date.now() - started,
    stderr: run.stderr,
    results: lines.map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

describe(`native driver in a subprocess (${runtime})`, { skip: noCompiler }, () => {
  test("a libcuda.so.1 or libc.so.6 planted in the current directory is never loaded", () => {
    const dir = realpathSync(fakes!.path);
    fakes!.build("planted", ["-DPLANTED"], join(dir, "libcuda.so.1"));
    fakes!.build("planted-libc", ["-DPLANTED"], join(dir, "libc.so.6"));
    const run = child(dir, ["search"]);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(
      existsSync(join(dir, "planted-library-ran")),
      false,
      "the planted library's constructor ran: it was loaded",
    );
    assert.equal(run.results.length, 2, run.stderr);
    for (const result of run.results) {
      if ("opened" in result) {
        // A machine with a real libcuda: the system loader's must be the one that opened.
        assert.ok(!String(result.opened).startsWith(dir), `${result.what} opened ${result.opened}`);
      } else {
        assert.equal(result.error, "DriverLoadError", String(result.what));
      }
    }
  });

  test("an empty or relative element of LD_LIBRARY_PATH never has the loader take the current directory's", () => {
    // A directory of its own: a libc.so.6 found there would be the runtime's own from its start.
    const dir = join(realpathSync(fakes!.path), "ld-library-path");
    mkdirSync(dir);
    fakes!.build("planted-ld", ["-DPLANTED"], join(dir, "libcuda.so.1"));
    // glibc splits at ":" and ";", and searches an empty or a relative element from the cwd.
    for (
      const search of ["/nonexistent:", ":/nonexistent", "/nonexistent::/x", ".", "/nonexistent;"]
    ) {
      const run = child(dir, ["search"], search);
      assert.equal(run.status, 0, run.stderr);
      const ran = existsSync(join(dir, "planted-library-ran"));
      assert.equal(ran, false, `LD_LIBRARY_PATH=${search}: the planted library ran`);
      assert.equal(run.results.length, 2, run.stderr);
      for (const result of run.results) {
        if ("opened" in result) {
          assert.ok(
            !String(result.opened).startsWith(dir),
            `${result.what} opened ${result.opened}`,
          );
        } else {
          const why = `LD_LIBRARY_PATH=${JSON.stringify(search)} has an empty or relative element`;
          assert.ok(String(result.message).includes(why), `${result.what}: ${result.message}`);
        }
      }
    }
  });

  test("a relative libraryPath is made absolute against the current directory", () => {
    const dir = realpathSync(fakes!.path);
    mkdirSync(join(dir, "sub"), { recursive: true });
    fakes!.build("relative", [], join(dir, "sub", "libcuda_relative.so"));
    const run = child(dir, ["relative", "./sub/../sub/libcuda_relative.so"]);
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(run.results, [
      // The directory in front, the rest as given: the kernel resolves the "..".
      { what: "relative", opened: `${dir}/./sub/../sub/libcuda_relative.so` },
    ]);
  });

  test("a program that never closes the driver still ends", () => {
    const path = fakes!.build("forget");
    const run = child(fakes!.path, ["forget", path]);
    assert.equal(run.status, 0, `status ${run.status} after ${run.ms} ms: ${run.stderr}`);
    assert.deepEqual(run.results, [{ what: "forget", locks: [0, 0, 0, 0], states: [1, 1, 1, 1] }]);
    assert.ok(run.ms < 5000, `it took ${run.ms} ms to end`);
  });
});
