// Tests of the native driver (ffi/): the libcuda search and its messages, the symbol table, and,
// through a fake libcuda compiled from tests/fixtures/fake_libcuda.c, the argument passing,
// the nonblocking calls (Deno) and the worker pool (Bun). Runs unchanged under `deno test -A` and
// `bun test`; needs no GPU. Where a C compiler is missing, or a real libcuda is present, the tests
// that depend on that skip and say so.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

import { CheckpointUnsupportedError, DriverLoadError } from "../core/errors.ts";
import {
  CHECKPOINT_SYMBOL_NAMES,
  CUDA_SYMBOLS,
  detectRuntime,
  findLibcuda,
  LIBCUDA_ENV_VAR,
  LIBCUDA_SEARCH_PATHS,
  LIBCUDA_SONAME,
  type NativeDriver,
  nativeDriverAvailable,
  openNativeDriver,
} from "../ffi/mod.ts";
import { bunDefinition, type CudaSymbolName } from "../ffi/symbols.ts";

const runtime = detectRuntime();
const FIXTURE = new URL("./fixtures/fake_libcuda.c", import.meta.url).pathname;

function loud(message: string): string {
  console.warn(`\n*** SKIPPED (ffi_test): ${message} ***\n`);
  return message;
}

/** A tryOpen that fails for every path with a loader-like message, recording the order. */
function failingOpen(calls: string[]): (path: string) => never {
  return (path) => {
    calls.push(path);
    throw new Error(`${path}: cannot open shared object file: No such file or directory`);
  };
}

function notCapable(message: string): Error {
  const error = new Error(message);
  error.name = "NotCapable";
  return error;
}

describe("findLibcuda: search order", () => {
  test("tries the system loader first, then every usual location, in order", () => {
    const calls: string[] = [];
    assert.throws(
      () =>
        findLibcuda({ tryOpen: failingOpen(calls), getEnv: () => undefined, platform: "linux" }),
      DriverLoadError,
    );
    assert.deepEqual(calls, [LIBCUDA_SONAME, ...LIBCUDA_SEARCH_PATHS]);
    assert.equal(calls[0], "libcuda.so.1");
    for (
      const expected of [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
        "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
        "/usr/local/cuda/compat/libcuda.so.1",
      ]
    ) {
      assert.ok(calls.includes(expected), `${expected} is searched`);
    }
    assert.ok(!calls.some((p) => p.includes("stubs")), "the toolkit's stub is never tried");
  });

  test("stops at the first path that opens and says where it came from", () => {
    const calls: string[] = [];
    const target = LIBCUDA_SEARCH_PATHS[1];
    const found = findLibcuda({
      tryOpen: (path) => {
        calls.push(path);
        if (path !== target) throw new Error("nope");
        return { handle: path };
      },
      platform: "linux",
    });
    assert.deepEqual(found.library, { handle: target });
    assert.equal(found.path, target);
    assert.equal(found.source, "search");
    assert.deepEqual(calls, [LIBCUDA_SONAME, LIBCUDA_SEARCH_PATHS[0], target]);
    assert.deepEqual(found.tried.map((t) => t.path), [LIBCUDA_SONAME, LIBCUDA_SEARCH_PATHS[0]]);
  });

  test("the system loader's libcuda.so.1 wins when it opens", () => {
    const found = findLibcuda({ tryOpen: (path) => path.length, platform: "linux" });
    assert.equal(found.path, LIBCUDA_SONAME);
    assert.equal(found.source, "system");
    assert.equal(found.tried.length, 0);
  });

  test("an explicit libraryPath is the only path tried, before the environment", () => {
    const calls: string[] = [];
    let envRead = false;
    const error = assert.throws(
      () =>
        findLibcuda({
          tryOpen: failingOpen(calls),
          libraryPath: "/opt/driver/libcuda.so.1",
          getEnv: () => {
            envRead = true;
            return "/from/env/libcuda.so.1";
          },
          platform: "linux",
        }),
      DriverLoadError,
    );
    assert.deepEqual(calls, ["/opt/driver/libcuda.so.1"]);
    assert.equal(envRead, false);
    void error;
  });

  test(`${LIBCUDA_ENV_VAR} overrides the search`, () => {
    const calls: string[] = [];
    const seen: string[] = [];
    const found = findLibcuda({
      tryOpen: (path) => {
        calls.push(path);
        return "lib";
      },
      getEnv: (name) => {
        seen.push(name);
        return name === "CKPT_LIBCUDA_PATH" ? "/custom/libcuda.so.1" : undefined;
      },
      platform: "linux",
    });
    assert.deepEqual(seen, ["CKPT_LIBCUDA_PATH"]);
    assert.deepEqual(calls, ["/custom/libcuda.so.1"]);
    assert.equal(found.source, "env");
    assert.equal(found.path, "/custom/libcuda.so.1");
  });

  test(`a wrong ${LIBCUDA_ENV_VAR} is reported, not replaced by another library`, () => {
    const calls: string[] = [];
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: failingOpen(calls),
        getEnv: () => "/wrong/libcuda.so.1",
        platform: "linux",
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError);
    assert.deepEqual(calls, ["/wrong/libcuda.so.1"]);
    assert.match(
      caught.message,
      /\/wrong\/libcuda\.so\.1 \(from CKPT_LIBCUDA_PATH\): .*No such file/,
    );
    assert.match(caught.message, /given explicitly/);
  });

  test("an empty environment variable counts as not set", () => {
    const calls: string[] = [];
    assert.throws(() =>
      findLibcuda({ tryOpen: failingOpen(calls), getEnv: () => "", platform: "linux" })
    );
    assert.equal(calls[0], LIBCUDA_SONAME);
  });
});

describe("findLibcuda: errors", () => {
  test("the not-found message lists every path with its reason, the variable and --allow-ffi", () => {
    const reasons = new Map<string, string>();
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: (path) => {
          const reason = `reason-${reasons.size}: ${path} is not there`;
          reasons.set(path, reason);
          throw new Error(reason);
        },
        getEnv: () => undefined,
        platform: "linux",
        runtime: "deno",
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError, "a DriverLoadError");
    assert.equal(caught.name, "DriverLoadError");
    assert.deepEqual(caught.tried, [LIBCUDA_SONAME, ...LIBCUDA_SEARCH_PATHS]);
    const lines = caught.message.split("\n");
    for (const [path, reason] of reasons) {
      assert.ok(
        lines.some((line) => line.includes(path) && line.includes(reason)),
        `the message has a line with ${path} and its reason`,
      );
    }
    assert.match(caught.message, new RegExp(`Tried ${reasons.size} locations`));
    assert.match(caught.message, /CKPT_LIBCUDA_PATH/);
    assert.match(caught.message, /--allow-ffi/);
    assert.match(caught.message, /--allow-env/);
    assert.match(caught.message, /driver 570/);
  });

  test("a multi-line loader message is kept on one line", () => {
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: () => {
          throw new Error("first line\n   second line");
        },
        libraryPath: "/x.so",
        platform: "linux",
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError);
    assert.match(caught.message, /\/x\.so \(the libraryPath option\): first line second line/);
  });

  test("the runtimes' repeated prefixes are left out of the reason", () => {
    const messages: Record<string, string> = {
      "/a.so":
        "Could not open library: Could not open library: /a.so: cannot open shared object file",
      "/b.so": 'Failed to open library "/b.so": /b.so: cannot open shared object file',
    };
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: (path) => {
          throw new Error(messages[path]);
        },
        platform: "linux",
        searchPaths: ["/a.so", "/b.so"],
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError);
    assert.match(caught.message, /\n {2}- \/a\.so: cannot open shared object file\n/);
    assert.match(caught.message, /\n {2}- \/b\.so: cannot open shared object file\n/);
  });

  test("a missing FFI permission stops the search and says --allow-ffi", () => {
    const calls: string[] = [];
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: (path) => {
          calls.push(path);
          throw notCapable(
            'Requires ffi access to "libcuda.so.1", run again with the --allow-ffi flag',
          );
        },
        platform: "linux",
        runtime: "deno",
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError);
    assert.deepEqual(calls, [LIBCUDA_SONAME], "no further path is tried");
    assert.match(caught.message, /needs the FFI permission: run Deno with --allow-ffi/);
    assert.equal((caught.cause as Error).name, "NotCapable");
  });

  test("PermissionDenied (Deno 1) counts as a missing permission too", () => {
    const error = new Error("denied");
    error.name = "PermissionDenied";
    assert.throws(
      () =>
        findLibcuda({
          tryOpen: () => {
            throw error;
          },
          platform: "linux",
        }),
      /--allow-ffi/,
    );
  });

  test("an unreadable environment variable counts as not set and is mentioned", () => {
    const calls: string[] = [];
    let caught: unknown;
    try {
      findLibcuda({
        tryOpen: failingOpen(calls),
        getEnv: () => {
          throw notCapable("Requires env access");
        },
        platform: "linux",
        runtime: "deno",
      });
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof DriverLoadError);
    assert.equal(calls[0], LIBCUDA_SONAME, "the search went on");
    assert.match(
      caught.message,
      /CKPT_LIBCUDA_PATH could not be read \(Deno needs --allow-env=CKPT_LIBCUDA_PATH\)/,
    );
  });

  test("a platform other than Linux fails at once, saying checkpointing is Linux-only", () => {
    for (const platform of ["darwin", "windows", "win32"]) {
      const calls: string[] = [];
      assert.throws(
        () => findLibcuda({ tryOpen: failingOpen(calls), platform }),
        (error: unknown) =>
          error instanceof DriverLoadError && /Linux-only/.test(error.message) &&
          error.message.includes(platform),
      );
      assert.equal(calls.length, 0);
    }
  });
});

describe("symbol table", () => {
  const expected: CudaSymbolName[] = [
    "cuDriverGetVersion",
    "cuInit",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuCheckpointProcessGetState",
    "cuCheckpointProcessGetRestoreThreadId",
    "cuCheckpointProcessLock",
    "cuCheckpointProcessCheckpoint",
    "cuCheckpointProcessRestore",
    "cuCheckpointProcessUnlock",
  ];
  const table = CUDA_SYMBOLS as Record<
    string,
    { parameters: readonly string[]; result: string; nonblocking?: boolean; optional?: boolean }
  >;

  test("has exactly the ten C names, each returning a CUresult (i32)", () => {
    assert.deepEqual(Object.keys(table).sort(), [...expected].sort());
    for (const name of expected) assert.equal(table[name].result, "i32", name);
  });

  test("the six checkpoint functions are optional, the others are not", () => {
    assert.deepEqual([...CHECKPOINT_SYMBOL_NAMES].sort(), expected.slice(4).sort());
    for (const name of expected) {
      assert.equal(table[name].optional === true, name.startsWith("cuCheckpoint"), name);
    }
  });

  test("lock, checkpoint, restore and unlock are nonblocking; version and error names are not", () => {
    for (
      const name of [
        "cuCheckpointProcessLock",
        "cuCheckpointProcessCheckpoint",
        "cuCheckpointProcessRestore",
        "cuCheckpointProcessUnlock",
      ]
    ) {
      assert.equal(table[name].nonblocking, true, name);
    }
    for (const name of ["cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString"]) {
      assert.notEqual(table[name].nonblocking, true, name);
    }
  });

  test("parameters match the C signatures", () => {
    assert.deepEqual(table.cuDriverGetVersion.parameters, ["buffer"]);
    assert.deepEqual(table.cuInit.parameters, ["u32"]);
    assert.deepEqual(table.cuGetErrorName.parameters, ["i32", "buffer"]);
    assert.deepEqual(table.cuGetErrorString.parameters, ["i32", "buffer"]);
    for (const name of CHECKPOINT_SYMBOL_NAMES) {
      assert.deepEqual(table[name].parameters, ["i32", "buffer"], `${name}(int pid, T*)`);
    }
  });

  test("bun:ffi definitions are derived with Bun's type names", () => {
    assert.deepEqual(bunDefinition("cuCheckpointProcessLock"), {
      args: ["i32", "ptr"],
      returns: "i32",
    });
    assert.deepEqual(bunDefinition("cuInit"), { args: ["u32"], returns: "i32" });
  });
});

// ---------------------------------------------------------------------------------------------
// The real search, on this machine.

let realDriver: NativeDriver | undefined;
let realError: unknown;
try {
  realDriver = await openNativeDriver();
} catch (error) {
  realError = error;
}
realDriver?.close();
const envOverride = process.env[LIBCUDA_ENV_VAR];
const absentSkip = realDriver
  ? loud(
    `a libcuda opened here (${realDriver.libraryPath}), so the "libcuda absent" tests cannot run`,
  )
  : false;

describe("openNativeDriver on a machine without libcuda", () => {
  test("rejects with a DriverLoadError that names what was tried", { skip: absentSkip }, () => {
    assert.ok(realError instanceof DriverLoadError, `got ${String(realError)}`);
    assert.ok(realError.tried.length > 0);
    for (const path of realError.tried) assert.ok(realError.message.includes(path), path);
    if (!envOverride) {
      assert.deepEqual(realError.tried, [LIBCUDA_SONAME, ...LIBCUDA_SEARCH_PATHS]);
    }
    assert.match(realError.message, /CKPT_LIBCUDA_PATH/);
    assert.match(realError.message, /--allow-ffi/);
  });

  test(
    "nativeDriverAvailable() answers false and does not throw",
    { skip: absentSkip },
    async () => {
      assert.equal(await nativeDriverAvailable(), false);
    },
  );
});

// ---------------------------------------------------------------------------------------------
// A fake libcuda, to exercise the bindings without a GPU.

function compilerMissing(): string | false {
  try {
    execFileSync("cc", ["--version"], { stdio: "ignore" });
    return false;
  } catch {
    return loud("no C compiler (cc) here, so the fake-libcuda tests cannot run");
  }
}

const noCompiler = compilerMissing();
const fakeDir = noCompiler ? "" : mkdtempSync(join(tmpdir(), "ckpt-fake-libcuda-"));

/** Compiles the fake with extra -D flags; returns its path. */
function buildFake(name: string, defines: string[]): string {
  const out = join(fakeDir, `${name}.so`);
  execFileSync("cc", ["-shared", "-fPIC", "-O1", ...defines, "-o", out, FIXTURE, "-lpthread"], {
    stdio: "inherit",
  });
  return out;
}

const fake = noCompiler ? undefined : {
  v13: buildFake("libcuda_13000", []),
  v128: buildFake("libcuda_12080", ["-DFAKE_VERSION=12080"]),
  old: buildFake("libcuda_12040", ["-DFAKE_VERSION=12040", "-DNO_CHECKPOINT"]),
  stub: buildFake("libcuda_stub", ["-DSTUB"]),
};

/** A UUID the fake knows: 16 bytes of 1 or 2. */
function knownUuid(n: 1 | 2): Uint8Array {
  return new Uint8Array(16).fill(n);
}

/**
 * The fake's counters of checkpoint and restore calls in flight, read through a second `dlopen` of
 * the same path: the loader shares the one copy of the library, and its counters, with the driver
 * (and, on Bun, with the driver's workers).
 */
interface InFlightCounters {
  /** The calls in flight now. */
  now(): number;
  /** The most in flight at once since the last reset. */
  max(): number;
  /** Resets the maximum to the calls in flight now. */
  reset(): void;
  close(): void;
}

async function openCounters(path: string): Promise<InFlightCounters> {
  const names = ["fake_in_flight", "fake_max_in_flight", "fake_reset_in_flight"] as const;
  let lib: { symbols: Record<string, () => number>; close(): void };
  if (runtime === "bun") {
    const { importBunFfi } = await import("../ffi/bun_types.ts");
    const ffi = await importBunFfi();
    const def = { args: [], returns: "i32" } as const;
    lib = ffi.dlopen(path, Object.fromEntries(names.map((n) => [n, def]))) as typeof lib;
  } else {
    const def = { parameters: [], result: "i32" } as const;
    lib = Deno.dlopen(
      path,
      Object.fromEntries(names.map((n) => [n, def])),
    ) as unknown as typeof lib;
  }
  return {
    now: () => lib.symbols.fake_in_flight(),
    max: () => lib.symbols.fake_max_in_flight(),
    reset: () => void lib.symbols.fake_reset_in_flight(),
    close: () => lib.close(),
  };
}

async function withCounters<T>(
  path: string,
  body: (counters: InFlightCounters) => Promise<T>,
): Promise<T> {
  const counters = await openCounters(path);
  try {
    return await body(counters);
  } finally {
    counters.close();
  }
}

async function withDriver<T>(
  path: string,
  body: (driver: NativeDriver) => Promise<T>,
): Promise<T> {
  const driver = await openNativeDriver({ libraryPath: path });
  try {
    return await body(driver);
  } finally {
    driver.close();
  }
}

describe(`native driver (${runtime}) against a fake libcuda`, { skip: noCompiler }, () => {
  after(() => {
    if (fakeDir) rmSync(fakeDir, { recursive: true, force: true });
  });

  test("opens by path, reports kind, version and checkpoint support", async () => {
    await withDriver(fake!.v13, async (driver) => {
      assert.equal(driver.kind, runtime === "bun" ? "native (Bun)" : "native (Deno)");
      assert.equal(driver.libraryPath, fake!.v13);
      assert.equal(driver.checkpointSupported, true);
      assert.deepEqual(await driver.driverVersion(), { code: 0, value: 13000 });
    });
  });

  test(`${LIBCUDA_ENV_VAR} chooses the library`, async () => {
    const before = process.env[LIBCUDA_ENV_VAR];
    process.env[LIBCUDA_ENV_VAR] = fake!.v128;
    try {
      const driver = await openNativeDriver();
      driver.close();
      assert.equal(driver.libraryPath, fake!.v128);
      assert.equal(await nativeDriverAvailable(), true);
    } finally {
      if (before === undefined) delete process.env[LIBCUDA_ENV_VAR];
      else process.env[LIBCUDA_ENV_VAR] = before;
    }
  });

  test("the toolkit's stub library is refused with a reason", async () => {
    await assert.rejects(
      openNativeDriver({ libraryPath: fake!.stub }),
      (error: unknown) =>
        error instanceof DriverLoadError && /stub library/.test(error.message) &&
        error.message.includes(fake!.stub),
    );
  });

  test("a path that is not there is a DriverLoadError naming it", async () => {
    await assert.rejects(
      openNativeDriver({ libraryPath: join(fakeDir, "absent.so") }),
      (error: unknown) =>
        error instanceof DriverLoadError && error.message.includes(join(fakeDir, "absent.so")),
    );
  });

  test("lock, checkpoint, restore, unlock walk the state machine", async () => {
    await withDriver(fake!.v13, async (d) => {
      const pid = 1001;
      assert.deepEqual(await d.getState(pid), { code: 0, value: 0 });
      assert.equal(await d.lock(pid, { timeoutMs: 1000 }), 0);
      assert.deepEqual(await d.getState(pid), { code: 0, value: 1 });
      assert.equal(await d.lock(pid, null), 401, "lock while locked: ILLEGAL_STATE");
      assert.equal(await d.checkpoint(pid), 0);
      assert.deepEqual(await d.getState(pid), { code: 0, value: 2 });
      assert.equal(await d.restore(pid, null), 0, "restore works (cuInit was called first)");
      assert.deepEqual(await d.getState(pid), { code: 0, value: 1 });
      assert.equal(await d.unlock(pid), 0);
      assert.deepEqual(await d.getState(pid), { code: 0, value: 0 });
      assert.equal(await d.unlock(pid), 401);
    });
  });

  test("out-parameters and pids reach the library", async () => {
    await withDriver(fake!.v13, async (d) => {
      assert.deepEqual(await d.getRestoreThreadId(4242), { code: 0, value: 4243 });
      assert.deepEqual(await d.getState(-5), { code: 304, value: 0 });
      assert.deepEqual(await d.getState(999999), { code: 304, value: 0 });
      assert.equal(await d.lock(0, null), 304);
    });
  });

  test("lock args are passed as the 64-byte struct", async () => {
    await withDriver(fake!.v13, async (d) => {
      const pid = 1002;
      assert.equal(
        await d.lock(pid, { timeoutMs: 10, reserved: new Uint8Array([0, 0, 0, 7]) }),
        1,
        "a nonzero reserved byte: INVALID_VALUE",
      );
      assert.deepEqual(await d.getState(pid), { code: 0, value: 0 }, "still running");
      assert.equal(await d.lock(pid, { timeoutMs: 0xffff_ffff }), 0);
      assert.equal(await d.unlock(pid), 0);
    });
  });

  test("GPU pairs are passed by pointer and read by the library", async () => {
    await withDriver(fake!.v13, async (d) => {
      const pid = 1003;
      assert.equal(await d.lock(pid, null), 0);
      assert.equal(await d.checkpoint(pid), 0);
      const unknown = new Uint8Array(16).fill(9);
      assert.equal(
        await d.restore(pid, { gpuPairs: [{ oldUuid: knownUuid(1), newUuid: unknown }] }),
        1,
        "an unknown new UUID: INVALID_VALUE",
      );
      assert.deepEqual(await d.getState(pid), { code: 0, value: 2 }, "still checkpointed");
      assert.equal(
        await d.restore(pid, {
          gpuPairs: [
            { oldUuid: knownUuid(1), newUuid: knownUuid(2) },
            { oldUuid: knownUuid(2), newUuid: knownUuid(1) },
          ],
        }),
        0,
      );
      assert.equal(await d.unlock(pid), 0);
      assert.equal(await d.lock(pid, null), 0);
      assert.equal(await d.checkpoint(pid), 0);
      assert.equal(await d.restore(pid, { gpuPairs: [] }), 0, "an empty list: no mapping");
      assert.equal(await d.unlock(pid), 0);
    });
  });

  test("GPU pairs before driver 13.0 reject with CheckpointUnsupportedError", async () => {
    await withDriver(fake!.v128, async (d) => {
      const pid = 1004;
      assert.equal(await d.lock(pid, null), 0);
      assert.equal(await d.checkpoint(pid), 0);
      await assert.rejects(
        d.restore(pid, { gpuPairs: [{ oldUuid: knownUuid(1), newUuid: knownUuid(2) }] }),
        (error: unknown) =>
          error instanceof CheckpointUnsupportedError && /580/.test(error.message) &&
          /12\.8/.test(error.message) && error.driverVersion === 12080,
      );
      assert.equal(await d.restore(pid, { gpuPairs: [] }), 0, "an empty list is passed as NULL");
      assert.equal(await d.unlock(pid), 0);
    });
  });

  test("a driver without the checkpoint API opens, and its calls say what is needed", async () => {
    await withDriver(fake!.old, async (d) => {
      assert.equal(d.checkpointSupported, false);
      assert.deepEqual(await d.driverVersion(), { code: 0, value: 12040 });
      assert.equal(d.errorName(401), "CUDA_ERROR_ILLEGAL_STATE", "the base functions still work");
      const calls: [string, () => Promise<unknown>][] = [
        ["getState", () => d.getState(1)],
        ["getRestoreThreadId", () => d.getRestoreThreadId(1)],
        ["lock", () => d.lock(1, null)],
        ["checkpoint", () => d.checkpoint(1)],
        ["restore", () => d.restore(1, null)],
        ["unlock", () => d.unlock(1)],
      ];
      for (const [operation, call] of calls) {
        await assert.rejects(call(), (error: unknown) => {
          assert.ok(error instanceof CheckpointUnsupportedError, operation);
          assert.equal(error.code, 801);
          assert.equal(error.operation, operation);
          assert.equal(error.driverVersion, 12040);
          assert.match(
            error.message,
            /This driver \(version 12\.4, from cuDriverGetVersion 12040\) has no CUDA checkpoint support; NVIDIA driver 570 or later is needed/,
          );
          return true;
        });
      }
    });
  });

  test("error names and strings come from the library; unknown codes give undefined", async () => {
    await withDriver(fake!.v13, (d) => {
      assert.equal(d.errorName(401), "CUDA_ERROR_ILLEGAL_STATE");
      assert.equal(d.errorString(304), "OS call failed or operation not supported on this OS");
      assert.equal(d.errorName(12345), undefined);
      assert.equal(d.errorString(12345), undefined);
      assert.equal(d.errorName(2 ** 40), undefined);
      return Promise.resolve();
    });
  });

  test("a pid that does not fit a C int is refused, not wrapped", async () => {
    await withDriver(fake!.v13, async (d) => {
      await assert.rejects(d.lock(2 ** 32 + 1001, null), RangeError);
      await assert.rejects(d.getState(1.5), RangeError);
      await assert.rejects(d.checkpoint(Number.NaN), RangeError);
    });
  });

  test("several processes are checkpointed and restored at once", async () => {
    await withCounters(fake!.v13, (counters) =>
      withDriver(fake!.v13, async (d) => {
        const pids = [2001, 2002, 2003, 2004, 2005, 2006];
        const ok = [0, 0, 0, 0, 0, 0];
        assert.deepEqual(await Promise.all(pids.map((pid) => d.lock(pid, null))), ok);
        counters.reset();
        assert.deepEqual(await Promise.all(pids.map((pid) => d.checkpoint(pid))), ok);
        assert.equal(counters.now(), 0, "no checkpoint left in flight");
        assert.equal(counters.max(), 6, "the 6 checkpoints were in flight at once");
        counters.reset();
        assert.deepEqual(await Promise.all(pids.map((pid) => d.restore(pid, null))), ok);
        assert.equal(counters.now(), 0, "no restore left in flight");
        assert.equal(counters.max(), 6, "the 6 restores were in flight at once");
        assert.deepEqual(await Promise.all(pids.map((pid) => d.unlock(pid))), ok);
      }));
  });

  test("the event loop keeps running during a long call", async () => {
    await withCounters(fake!.v13, (counters) =>
      withDriver(fake!.v13, async (d) => {
        const pid = 2101;
        assert.equal(await d.lock(pid, null), 0);
        let pending = true;
        const call = d.checkpoint(pid).finally(() => pending = false);
        // A setTimeout(0) loop for as long as the call is pending, counting the turns in which
        // the native call was seen in flight: a call that blocked the thread would leave none.
        let turnsDuringCall = 0;
        await new Promise<void>((resolve) => {
          const turn = () => {
            if (counters.now() > 0) turnsDuringCall++;
            if (pending) setTimeout(turn, 0);
            else resolve();
          };
          setTimeout(turn, 0);
        });
        assert.equal(await call, 0);
        assert.ok(turnsDuringCall >= 1, "JavaScript ran while the native checkpoint was running");
      }));
  });

  test("close(): calls in flight finish, later calls reject", async () => {
    const d = await openNativeDriver({ libraryPath: fake!.v13 });
    const pid = 2201;
    assert.equal(await d.lock(pid, null), 0);
    const running = d.checkpoint(pid);
    d.close();
    assert.equal(await running, 0);
    await assert.rejects(d.unlock(pid), /closed/);
    await assert.rejects(d.driverVersion(), /closed/);
    assert.equal(d.errorName(401), undefined);
    d.close(); // twice is harmless
  });

  test(
    "Bun: the worker pool is capped and queues the rest",
    { skip: runtime === "bun" ? false : "only on Bun" },
    async () => {
      const { BunNativeDriver } = await import("../ffi/bun.ts");
      const counters = await openCounters(fake!.v13);
      const d = await BunNativeDriver.open({ libraryPath: fake!.v13, maxWorkers: 2 });
      try {
        assert.equal(d.workerCount, 0, "no worker before a call needs one");
        const pids = [3001, 3002, 3003, 3004];
        await Promise.all(pids.map((pid) => d.lock(pid, null)));
        assert.ok(d.workerCount <= 2);
        counters.reset();
        const codes = await Promise.all(pids.map((pid) => d.checkpoint(pid)));
        assert.deepEqual(codes, [0, 0, 0, 0], "all 4 calls completed");
        assert.equal(counters.now(), 0, "no checkpoint left in flight");
        assert.equal(counters.max(), 2, "2 checkpoints in flight at once, never more");
        assert.equal(d.workerCount, 2);
        for (const pid of pids) assert.deepEqual(await d.getState(pid), { code: 0, value: 2 });
      } finally {
        d.close();
        counters.close();
      }
      assert.equal(d.workerCount, 0, "close() ends idle workers");
    },
  );
});
