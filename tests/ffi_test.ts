// Tests of the native driver (ffi/): the libcuda search and its messages, the symbol table, and,
// through a fake libcuda compiled from tests/fixtures/fake_libcuda.c, what the driver passes to the
// library and when: arguments and structs, codes answered without a call, cuInit once before the
// first lock, the GPU list, calls off the main thread, the cap on calls in flight, and closing.
// Runs unchanged under `deno test -A` and `bun test`; needs no GPU. Where a C compiler is missing,
// or a real libcuda is present, the tests that depend on that skip and say so.
// Bun's worker pool: tests/ffi_bun_test.ts; subprocesses (a planted library, exiting without
// close()): tests/ffi_process_test.ts.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { tmpdir } from "node:os";
import process from "node:process";

import { CHECKPOINT_FUNCTIONS } from "../core/driver.ts";
import { DriverLoadError } from "../core/errors.ts";
import { Handle } from "../core/process.ts";
import { act } from "../core/action.ts";
import { SharedMachine } from "../core/machine.ts";
import { CudaProcess } from "../api/cuda_process.ts";
import { findLibcuda, LIBCUDA_ENV_VAR, LIBCUDA_SEARCH_PATHS, LIBCUDA_SONAME } from "../ffi/find.ts";
import { type NativeDriver, openNativeDriver } from "../ffi/native.ts";
import { bunDefinition, CUDA_SYMBOLS } from "../ffi/symbols.ts";
import { openMachine } from "../os/this_machine.ts";
import { LinuxHost } from "../os/linux_host.ts";
import { absolutePath, openCandidate } from "../ffi/find.ts";
import type { FfiAdapter, FfiLibrary } from "../ffi/adapter.ts";
import { cText, linkPointers, readInt } from "../ffi/adapter.ts";
import {
  FakeDir,
  knownUuid,
  loud,
  noCompiler,
  othersThan,
  runtime,
  turnsWhile,
  withCounters,
} from "./fixtures/fake.ts";

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
  test("the not-found message lists every path with its reason and the variable, not --allow-ffi", () => {
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
    // Its cause is the last path's reason (the usual locations' last), not the first's.
    const last = reasons.get(LIBCUDA_SEARCH_PATHS[LIBCUDA_SEARCH_PATHS.length - 1]);
    assert.equal((caught.cause as Error).message, last);
    assert.match(caught.message, /CKPT_LIBCUDA_PATH/);
    // Every try reached the loader, so Deno's permission is not what is missing: no word of it.
    assert.doesNotMatch(caught.message, /--allow-ffi|On Deno/);
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
  const table = CUDA_SYMBOLS as Record<
    string,
    { parameters: readonly string[]; result: string; nonblocking?: boolean; optional?: boolean }
  >;
  const device = [
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetName",
  ];

  test("has the C names of the base, device and checkpoint functions, each returning i32", () => {
    assert.deepEqual(
      Object.keys(table).sort(),
      [
        "cuDriverGetVersion",
        "cuInit",
        "cuGetErrorName",
        "cuGetErrorString",
        ...device,
        ...CHECKPOINT_FUNCTIONS,
      ].sort(),
    );
    for (const name of Object.keys(table)) assert.equal(table[name].result, "i32", name);
  });

  test("only the version and error names run on the calling thread: nothing else may wait", () => {
    for (const [name, fn] of Object.entries(table)) {
      const sync = ["cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString"].includes(name);
      assert.equal(fn.nonblocking !== true, sync, name);
    }
  });

  test("the checkpoint and device functions are optional; the base ones are not", () => {
    for (const [name, fn] of Object.entries(table)) {
      const optional = name.startsWith("cuCheckpoint") || device.includes(name);
      assert.equal(fn.optional === true, optional, name);
    }
  });

  test("parameters match the C signatures", () => {
    assert.deepEqual(table.cuDriverGetVersion.parameters, ["buffer"]);
    assert.deepEqual(table.cuInit.parameters, ["u32"]);
    assert.deepEqual(table.cuGetErrorName.parameters, ["i32", "buffer"]);
    assert.deepEqual(table.cuDeviceGetCount.parameters, ["buffer"]);
    assert.deepEqual(table.cuDeviceGet.parameters, ["buffer", "i32"]);
    assert.deepEqual(table.cuDeviceGetUuid_v2.parameters, ["buffer", "i32"]);
    assert.deepEqual(table.cuDeviceGetName.parameters, ["buffer", "i32", "i32"]);
    for (const name of CHECKPOINT_FUNCTIONS) {
      assert.deepEqual(table[name].parameters, ["i32", "buffer"], `${name}(int pid, T*)`);
    }
  });

  test("bun:ffi definitions are derived with Bun's type names", () => {
    assert.deepEqual(bunDefinition(CUDA_SYMBOLS.cuCheckpointProcessLock), {
      args: ["i32", "ptr"],
      returns: "i32",
    });
    assert.deepEqual(bunDefinition(CUDA_SYMBOLS.cuInit), { args: ["u32"], returns: "i32" });
  });

  test("relative library paths are made absolute against the directory given", () => {
    assert.equal(absolutePath("./lib/libcuda.so.1", "/srv/app"), "/srv/app/./lib/libcuda.so.1");
    assert.equal(absolutePath("/abs//p.so", "/ignored"), "/abs//p.so");
    assert.equal(absolutePath("lib.so", "/"), "/lib.so");
  });

  test("a relative path's .. is left to the kernel, which follows the symbolic link first", () => {
    // sub/link -> real/inner, so sub/link/../fake.so is real/fake.so, not sub/fake.so.
    const dir = mkdtempSync(join(tmpdir(), "ckpt-dotdot-"));
    try {
      mkdirSync(join(dir, "real/inner"), { recursive: true });
      mkdirSync(join(dir, "sub"));
      symlinkSync(join(dir, "real/inner"), join(dir, "sub/link"));
      writeFileSync(join(dir, "real/fake.so"), "the one named");
      writeFileSync(join(dir, "sub/fake.so"), "another");
      const path = absolutePath("sub/link/../fake.so", dir);
      assert.equal(readFileSync(path, "utf8"), "the one named");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * An adapter whose C library answers `dlopen` of a bare name with a handle where `found` is given
 * (the system loader's pick, which `dlinfo(RTLD_DI_LINKMAP)` gives as the link map's `l_name`, at
 * offset 8), and with NULL otherwise; every library it opens, and each libc call, recorded.
 */
function loaderAdapter(
  o: { found?: string; bareNamesSafe: boolean; env?: () => string | undefined },
) {
  const opened: string[] = [], libc: string[] = [];
  const LINK_MAP = 0x1000n, NAME = 0x2000n;
  const library = (path: string) => ({
    present: new Set<never>(),
    call: ({ symbol, args }: { symbol: string; args: readonly unknown[] }) => {
      if (path !== "libc.so.6") throw new Error(`${symbol} called on ${path}`);
      libc.push(symbol);
      if (symbol === "dlopen") return o.found ? 7n : 0n;
      if (symbol === "dlinfo") {
        new DataView((args[2] as Uint8Array).buffer).setBigUint64(0, LINK_MAP, true);
      }
      return symbol === "dlerror" ? 0n : 0;
    },
    callOffThread: () => Promise.reject(new Error("not here")),
    threadCount: () => 0,
    close: () => (libc.push(`close ${path}`), Promise.resolve()),
  });
  const adapter: FfiAdapter = {
    kind: "fake",
    platform: "linux",
    bareNamesSafe: o.bareNamesSafe,
    getEnv: (name) => name === "LD_LIBRARY_PATH" ? o.env?.() : undefined,
    cwd: () => "/work",
    open: <N extends string>(path: string) => (opened.push(path), library(path) as FfiLibrary<N>),
    // l_name, 8 bytes into the link map; anything else read is a wrong address.
    readPointer: (address) => address === LINK_MAP + 8n ? NAME : assert.fail(`read ${address}`),
    cString: (address) => address === NAME ? o.found! : assert.fail(`string at ${address}`),
  };
  return { adapter, opened, libc };
}

describe("a bare library name: the system loader's pick, by its path", () => {
  const table = {} as const;

  test("the path the loader found (the link map's l_name) is what opens; its handle is let go", () => {
    const found = "/usr/lib/x86_64-linux-gnu/libfake.so.1";
    for (const bareNamesSafe of [true, false]) {
      const { adapter, opened, libc } = loaderAdapter({ found, bareNamesSafe });
      assert.equal(openCandidate(adapter, "libfake.so.1", table).path, found);
      assert.deepEqual(opened, ["libc.so.6", found]);
      assert.deepEqual(libc, ["dlopen", "dlinfo", "dlclose", "close libc.so.6"]);
    }
    // A relative path the loader found (a relative LD_LIBRARY_PATH) gets the cwd in front.
    const { adapter } = loaderAdapter({ found: "lib/libfake.so.1", bareNamesSafe: true });
    assert.equal(openCandidate(adapter, "libfake.so.1", table).path, "/work/lib/libfake.so.1");
  });

  test("an LD_LIBRARY_PATH that has the loader search the current directory, or unread: not asked", () => {
    const found = "/usr/lib/x86_64-linux-gnu/libfake.so.1";
    const denied = () => {
      throw new Error("NotCapable: no permission to read LD_LIBRARY_PATH");
    };
    // glibc splits at ":" and ";", and searches an empty or relative element from the cwd.
    for (
      const env of [() => "/x:", () => ":/x", () => "/x::/y", () => "lib", () => "/x;", denied]
    ) {
      const { adapter, opened } = loaderAdapter({ found, bareNamesSafe: true, env });
      const said = env === denied
        ? "LD_LIBRARY_PATH cannot be read (on Deno: --allow-env=LD_LIBRARY_PATH)"
        : `LD_LIBRARY_PATH=${JSON.stringify(env())} has an empty or relative element`;
      assert.throws(() => openCandidate(adapter, "libfake.so.1", table), {
        message: `not asked of the system loader, which may search the current directory: ${said}`,
      });
      assert.deepEqual(opened, [], "nothing opened, libc included");
    }
    // Unset, empty (glibc searches nothing then), or only absolute directories: the loader's pick.
    for (const env of [() => undefined, () => "", () => "/x:/y;/z"]) {
      const { adapter } = loaderAdapter({ found, bareNamesSafe: false, env });
      assert.equal(openCandidate(adapter, "libfake.so.1", table).path, found);
    }
  });

  test("a name the loader does not find: Deno's open takes it as it is, Bun's is never asked", () => {
    const deno = loaderAdapter({ bareNamesSafe: true });
    assert.equal(openCandidate(deno.adapter, "libfake.so.1", table).path, "libfake.so.1");
    assert.deepEqual(deno.opened, ["libc.so.6", "libfake.so.1"]);
    // Bun's dlopen would try the current directory for it: the loader's answer is the error.
    const bun = loaderAdapter({ bareNamesSafe: false });
    assert.throws(
      () => openCandidate(bun.adapter, "libfake.so.1", table),
      /^Error: libfake\.so\.1: not found by the system loader$/,
    );
    assert.deepEqual(bun.opened, ["libc.so.6"]);
  });
});

describe("the adapter's helpers", () => {
  test("a pointer field is written into the argument's own bytes, where it starts in its buffer", () => {
    const whole = new Uint8Array(24), holder = whole.subarray(8);
    const target = new Uint8Array(1);
    linkPointers(
      { symbol: "f", args: [holder], links: [{ arg: 0, offset: 8, target }] },
      (buf) => buf === target ? 0x1122334455667788n : 0n,
    );
    const view = new DataView(whole.buffer);
    assert.equal(view.getBigUint64(16, true), 0x1122334455667788n);
    assert.equal(view.getBigUint64(0, true), 0n, "nothing written before the argument");
  });

  test("a C int and an unsigned int, and text without its NUL", () => {
    const all = new Uint8Array([0xff, 0xff, 0xff, 0xff]);
    assert.equal(readInt(all), -1);
    assert.equal(readInt(all, true), 4294967295);
    assert.equal(cText(new TextEncoder().encode("H200\0junk")), "H200");
    assert.equal(cText(new TextEncoder().encode("H200")), "H200", "a buffer filled to its end");
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
    assert.doesNotMatch(realError.message, /--allow-ffi/, "the tests run with the FFI permission");
  });

  test("openMachine checks the host's and criu's options before it opens libcuda", async () => {
    // A library that is not there: reaching it would reject with a DriverLoadError instead.
    const libraryPath = "/nonexistent/libcuda.so.1";
    await assert.rejects(
      openMachine({ libraryPath, host: { recordDir: "/x" } as never }),
      (e) =>
        e instanceof TypeError &&
        /no option "recordDir" \(did you mean "recordsDir"\?\)/.test(e.message),
    );
    await assert.rejects(
      openMachine({ libraryPath, criu: { path: "/usr/sbin/criu" } as never }),
      (e) => e instanceof TypeError && /criu options has no option "path"/.test(e.message),
    );
    // Their values too (a value the host read later made it fail after a suspend, or not at all).
    for (
      const [host, said] of [
        [{ nvml: "false" }, /^host\.nvml must be true or false, got "false"$/],
        [{ recordsDir: true }, /^host\.recordsDir must be an absolute path, got true$/],
        [{ recordsDir: "records" }, /^host\.recordsDir must be an absolute path, got "records"$/],
        [{ procRoot: "" }, /^host\.procRoot must be an absolute path, got ""$/],
        [{ nvmlPath: 5 }, /^host\.nvmlPath must be an absolute path, got 5$/],
        // A NUL would end the C string there: another library than the one named.
        [
          { nvmlPath: "/opt/nvml\0.so" },
          /^host\.nvmlPath must be an absolute path, got "\/opt\/nvml\\u0000\.so"$/,
        ],
      ] as const
    ) {
      const opened = openMachine({ libraryPath, host: host as never });
      await assert.rejects(opened, (e) => e instanceof TypeError && said.test(e.message));
    }
    const criu = openMachine({ libraryPath, criu: { criuPath: "criu" } });
    await assert.rejects(
      criu,
      (e) => e instanceof TypeError && /criuPath must be an/.test(e.message),
    );
    await assert.rejects(
      openMachine({ libraryPath, host: { recordsDir: false } }),
      DriverLoadError,
    );
    await assert.rejects(openMachine({ libraryPath }), DriverLoadError);
    // The host refuses them itself, made on its own too (as criu's engine does its paths).
    assert.throws(
      () => new LinuxHost({ nvml: "false" as never }),
      /^TypeError: host\.nvml must be/,
    );
    assert.throws(() => new LinuxHost({ procRoot: "proc" }), /host\.procRoot must be an absolute/);
  });
});

// ---------------------------------------------------------------------------------------------
// A fake libcuda, to exercise the driver without a GPU. Each build is a library of its own, with
// its own state and counters, so that tests of cuInit and of a self-locked process start clean.

const fakes = noCompiler ? undefined : new FakeDir();
const fake = fakes && {
  v13: fakes.build("libcuda_13000"),
  v128: fakes.build("libcuda_12080", ["-DFAKE_VERSION=12080"]),
  old: fakes.build("libcuda_12040", ["-DFAKE_VERSION=12040", "-DNO_CHECKPOINT"]),
  stub: fakes.build("libcuda_stub", ["-DSTUB"]),
};
after(() => fakes?.remove());

async function withDriver<T>(
  path: string,
  body: (driver: NativeDriver) => Promise<T>,
  maxWorkers?: number,
): Promise<T> {
  const driver = await openNativeDriver({ libraryPath: path, maxWorkers });
  try {
    return await body(driver);
  } finally {
    await driver[Symbol.asyncDispose]();
  }
}

const OS = 304; // CUDA_ERROR_OPERATING_SYSTEM
const NOT_SUPPORTED = 801; // CUDA_ERROR_NOT_SUPPORTED

describe(`native driver (${runtime}) against a fake libcuda`, { skip: noCompiler }, () => {
  test("opens by path, reports kind, version and checkpoint support", async () => {
    await withDriver(fake!.v13, async (driver) => {
      assert.equal(driver.kind, runtime === "bun" ? "native (Bun)" : "native (Deno)");
      assert.equal(driver.libraryPath, fake!.v13);
      assert.equal(driver.checkpointSupported, true);
      assert.deepEqual(driver.missingFunctions, []);
      assert.deepEqual(await driver.driverVersion(), { code: 0, value: 13000 });
    });
  });

  test("with CUDA_VISIBLE_DEVICES set, the GPU list is not taken for every GPU", async () => {
    const before = process.env.CUDA_VISIBLE_DEVICES;
    try {
      delete process.env.CUDA_VISIBLE_DEVICES;
      await withDriver(fake!.v13, (driver) => {
        assert.equal(driver.listsEveryGpu, true);
        return Promise.resolve();
      });
      process.env.CUDA_VISIBLE_DEVICES = "0";
      await withDriver(fake!.v13, (driver) => {
        assert.equal(driver.listsEveryGpu, false, "GPU 1 is hidden from this process");
        return Promise.resolve();
      });
    } finally {
      if (before === undefined) delete process.env.CUDA_VISIBLE_DEVICES;
      else process.env.CUDA_VISIBLE_DEVICES = before;
    }
  });

  test(`${LIBCUDA_ENV_VAR} chooses the library`, async () => {
    const before = process.env[LIBCUDA_ENV_VAR];
    process.env[LIBCUDA_ENV_VAR] = fake!.v128;
    try {
      const driver = await openNativeDriver();
      driver.close();
      assert.equal(driver.libraryPath, fake!.v128);
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
    const absent = join(fakes!.path, "absent.so");
    await assert.rejects(
      openNativeDriver({ libraryPath: absent }),
      (error: unknown) => error instanceof DriverLoadError && error.message.includes(absent),
    );
  });

  test("maxWorkers must be an integer from 1 to 1024 (a RangeError, a TypeError for no number, before anything opens)", async () => {
    for (const maxWorkers of [0, -1, 1.5, Number.NaN, 1025, "4" as unknown as number]) {
      const Err = typeof maxWorkers === "number" ? RangeError : TypeError;
      await assert.rejects(
        openNativeDriver({ libraryPath: join(fakes!.path, "absent.so"), maxWorkers }),
        (error: unknown) =>
          error instanceof Err && /maxWorkers must be an integer from 1 to 1024/.test(
            error.message,
          ),
        String(maxWorkers),
      );
    }
  });

  test("libraryPath must be a non-empty string (a TypeError, before anything opens)", async () => {
    // A NUL would cut the path short where dlopen reads it: another file than the one named.
    const cut = `${fake?.v13 ?? "/usr/lib/libcuda.so.1"}\0/elsewhere/libcuda.so.1`;
    for (const libraryPath of [42, "", "  ", cut] as unknown as string[]) {
      await assert.rejects(
        openNativeDriver({ libraryPath }),
        (error: unknown) =>
          error instanceof TypeError &&
          /libraryPath must be a non-empty string without NUL, got/.test(error.message),
        String(libraryPath),
      );
    }
  });

  test("lock, checkpoint, restore, unlock walk the state machine", async () => {
    await withDriver(fake!.v13, async (d) => {
      const pid = 1001;
      assert.deepEqual(await d.getState(pid), { code: 0, value: 0 });
      // A timeout the C unsigned int cannot hold is refused, not wrapped, and the process untouched.
      for (const timeoutMs of [-5, 1.5, 2 ** 32, Number.NaN]) {
        await assert.rejects(d.lock(pid, { timeoutMs }), /LockArgs\.timeoutMs must be an integer/);
      }
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

  test("out-parameters reach the caller; 0 and negative pids are passed to the library", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        assert.deepEqual(await d.getRestoreThreadId(4242), { code: 0, value: 4243 });
        const before = counters.fake_calls();
        assert.deepEqual(await d.getState(-5), { code: OS, value: 0 });
        assert.deepEqual(await d.getState(999999), { code: OS, value: 0 });
        assert.equal(await d.lock(0, null), OS);
        assert.equal(counters.fake_calls() - before, 3, "the library answered all three itself");
      });
    });
  });

  test("a pid no C int holds answers OPERATING_SYSTEM without a call, never wrapped", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const before = counters.fake_calls();
        // 2^32 + 1011 wrapped to a C int would be 1011, a process the fake has.
        assert.equal(await d.lock(2 ** 32 + 1011, null), OS);
        assert.deepEqual(await d.getState(1.5), { code: OS, value: 0 });
        assert.equal(await d.checkpoint(Number.NaN), OS);
        assert.equal(await d.unlock(-(2 ** 31) - 1), OS);
        assert.equal(await d.restore(Infinity, null), OS);
        assert.deepEqual(await d.getRestoreThreadId("7" as unknown as number), {
          code: OS,
          value: 0,
        });
        assert.equal(counters.fake_calls(), before, "no call reached the library");
        assert.deepEqual(await d.getState(1011), { code: 0, value: 0 }, "1011 is still running");
        // The C int's own bounds are passed on: the library answers for them.
        const edge = counters.fake_calls();
        await d.getState(2 ** 31 - 1);
        await d.getState(-(2 ** 31));
        assert.equal(counters.fake_calls() - edge, 2, "2^31 - 1 and -2^31 reached the library");
      });
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

  test("GPU pairs before driver 13.0 answer NOT_SUPPORTED without a call", async () => {
    await withCounters(fake!.v128, async (counters) => {
      await withDriver(fake!.v128, async (d) => {
        const pid = 1004;
        assert.equal(await d.lock(pid, null), 0);
        assert.equal(await d.checkpoint(pid), 0);
        const before = counters.fake_calls();
        const pairs = [{ oldUuid: knownUuid(1), newUuid: knownUuid(2) }];
        assert.equal(await d.restore(pid, { gpuPairs: pairs }), NOT_SUPPORTED);
        assert.equal(counters.fake_calls(), before, "the library was not called");
        assert.equal(await d.restore(pid, { gpuPairs: [] }), 0, "an empty list is passed as NULL");
        assert.equal(await d.unlock(pid), 0);
      });
    });
  });

  test("a driver without the checkpoint API opens; its calls answer NOT_SUPPORTED", async () => {
    await withDriver(fake!.old, async (d) => {
      assert.equal(d.checkpointSupported, false);
      assert.deepEqual([...d.missingFunctions].sort(), [...CHECKPOINT_FUNCTIONS].sort());
      assert.deepEqual(await d.driverVersion(), { code: 0, value: 12040 });
      assert.equal(d.errorName(401), "CUDA_ERROR_ILLEGAL_STATE", "the base functions still work");
      assert.deepEqual(await d.getState(1), { code: NOT_SUPPORTED, value: 0 });
      assert.deepEqual(await d.getRestoreThreadId(1), { code: NOT_SUPPORTED, value: 0 });
      assert.equal(await d.lock(1, null), NOT_SUPPORTED);
      assert.equal(await d.checkpoint(1), NOT_SUPPORTED);
      assert.equal(await d.restore(1, null), NOT_SUPPORTED);
      assert.equal(await d.unlock(1), NOT_SUPPORTED);
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

  test("several processes are checkpointed and restored at once", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const pids = [2001, 2002, 2003, 2004, 2005, 2006];
        const ok = [0, 0, 0, 0, 0, 0];
        assert.deepEqual(await Promise.all(pids.map((pid) => d.lock(pid, null))), ok);
        counters.fake_reset_in_flight();
        assert.deepEqual(await Promise.all(pids.map((pid) => d.checkpoint(pid))), ok);
        assert.equal(counters.fake_in_flight(), 0, "no checkpoint left in flight");
        assert.equal(counters.fake_max_in_flight(), 6, "the 6 checkpoints were in flight at once");
        counters.fake_reset_in_flight();
        assert.deepEqual(await Promise.all(pids.map((pid) => d.restore(pid, null))), ok);
        assert.equal(counters.fake_max_in_flight(), 6, "the 6 restores were in flight at once");
        assert.deepEqual(await Promise.all(pids.map((pid) => d.unlock(pid))), ok);
      });
    });
  });

  test("maxWorkers caps the calls in flight; the rest wait their turn", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const pids = [3001, 3002, 3003, 3004];
        assert.deepEqual(await Promise.all(pids.map((pid) => d.lock(pid, null))), [0, 0, 0, 0]);
        counters.fake_reset_in_flight();
        const codes = await Promise.all(pids.map((pid) => d.checkpoint(pid)));
        assert.deepEqual(codes, [0, 0, 0, 0], "all 4 calls completed");
        assert.equal(counters.fake_max_in_flight(), 2, "2 in flight at once, never more");
        const workers = (d as NativeDriver & { workerCount: number }).workerCount;
        assert.ok(workers <= 2, `${workers} worker threads`);
        for (const pid of pids) await d.unlock(pid); // ILLEGAL_STATE: checkpointed; only cleanup
      }, 2);
    });
  });

  test("by default 64 calls in flight at once, on Deno 24 at most: its file operations keep threads", async () => {
    // Deno runs each call that waits on one of its 32 threads for blocking work, which its file
    // operations share: with all 32 taken by checkpoints of seconds, every file read of the
    // program waited for one to end (949 ms behind 32 checkpoints of 1 s, measured). Bun's
    // workers are the package's own: as many as maxWorkers, 64 by default (64 restores at once
    // took 15.8 s on an H200 where 16 at a time took 20.3 s).
    const most = runtime === "deno" ? 24 : 64;
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const pids = Array.from({ length: 65 }, (_, i) => 3101 + i);
        await Promise.all(pids.map((pid) => d.lock(pid, null)));
        counters.fake_reset_in_flight();
        const checkpoints = Promise.all(pids.map((pid) => d.checkpoint(pid)));
        const read = await Promise.race([
          readFile("/proc/self/stat", "utf8").then(() => "the file read"),
          checkpoints.then(() => "the checkpoints"),
        ]);
        assert.deepEqual(await checkpoints, pids.map(() => 0));
        assert.equal(counters.fake_max_in_flight(), most, `${most} in flight at once`);
        assert.equal(read, "the file read", "a file read ends while the checkpoints run");
        for (const pid of pids) await d.unlock(pid); // ILLEGAL_STATE: checkpointed; only cleanup
      });
    });
  });

  test("openMachine leaves libcuda unopened when a host or criu option's value is bad", async () => {
    const path = fakes!.build("libcuda_bad_option");
    const mapped = () => readFileSync("/proc/self/maps", "utf8").includes(path);
    await assert.rejects(
      openMachine({ libraryPath: path, host: { nvml: false }, criu: { criuPath: "criu" } }),
      (e) => e instanceof TypeError && /criuPath must be an absolute path/.test(e.message),
    );
    assert.equal(mapped(), false, "the library is not left mapped");
    // The check itself: an opened machine maps it until closed.
    const machine = await openMachine({ libraryPath: path, host: { nvml: false } });
    assert.equal(mapped(), true);
    await machine.close();
    assert.equal(mapped(), false);
  });

  test("the last handle of a shared machine closes its driver, threads and all, before close() resolves", async () => {
    const [first, second] = othersThan(process.pid, 3201, 3202); // no live thread: a handle's
    const proc = new Handle(
      first,
      new SharedMachine(() => openMachine({ libraryPath: fake!.v13, host: { nvml: false } })),
    );
    const machine = await proc.machine();
    const d = machine.driver as NativeDriver & { workerCount: number };
    const lock = { lockTimeoutMs: 0, pairs: null, checkRoom: true, allowIpcImport: false };
    await Promise.all([act(proc, "lock", lock), act(new Handle(second, machine), "lock", lock)]);
    await act(proc, "unlock", lock);
    if (runtime === "bun") assert.ok(d.workerCount >= 1, "calls started worker threads");
    await proc.close();
    assert.equal(d.workerCount, 0, "every worker ended before close() resolved");
    await assert.rejects(d.getState(first), /closed/);
  });

  test("closing a machine while a resume runs waits for it: the process is never left locked", async () => {
    await withCounters(fake!.v13, async (counters) => {
      // A second driver on the same library (the loader shares its state) watches the process.
      await withDriver(fake!.v13, async (watch) => {
        const [pid] = othersThan(process.pid, 3301); // another process: a resume of it
        assert.equal(await watch.lock(pid, null), 0);
        assert.equal(await watch.checkpoint(pid), 0);
        const machine = await openMachine({ libraryPath: fake!.v13, host: { nvml: false } });
        const resumed = new CudaProcess(pid, { machine }).resume({ checkRoom: false });
        while (counters.fake_in_flight() === 0) await new Promise((r) => setTimeout(r, 5));
        // Asked while the restore sleeps in the driver: the unlock after it must still be made.
        await machine.close();
        assert.equal((await resumed).state, "running");
        assert.deepEqual(await watch.getState(pid), { code: 0, value: 0 }, "running, not locked");
        await assert.rejects(machine.driver.getState(pid), /closed/, "closed once it was done");
      });
    });
  });

  test("the event loop keeps running during a long call", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const pid = 2101;
        assert.equal(await d.lock(pid, null), 0);
        let pending = true;
        const call = d.checkpoint(pid).finally(() => pending = false);
        const turns = await turnsWhile(() => pending, () => counters.fake_in_flight() > 0);
        assert.equal(await call, 0);
        assert.ok(turns >= 1, "JavaScript ran while the native checkpoint was running");
      });
    });
  });

  test("getState waits for a checkpoint in flight, off the main thread", async () => {
    await withCounters(fake!.v13, async (counters) => {
      await withDriver(fake!.v13, async (d) => {
        const pid = 2102;
        assert.equal(await d.lock(pid, null), 0);
        const checkpoint = d.checkpoint(pid);
        while (counters.fake_in_flight() === 0) await new Promise((r) => setTimeout(r, 1));
        let pending = true;
        const state = d.getState(pid).finally(() => pending = false);
        // A getState made on the main thread would block it until the checkpoint ends.
        const turns = await turnsWhile(() => pending, () => counters.fake_state_waiting() > 0);
        assert.deepEqual(await state, { code: 0, value: 2 }, "the state the checkpoint left");
        assert.equal(await checkpoint, 0);
        assert.ok(turns >= 1, "JavaScript ran while getState waited in the library");
      });
    });
  });

  test("close(): calls in flight finish, later calls reject", async () => {
    const d = await openNativeDriver({ libraryPath: fake!.v13 });
    const pid = 2201;
    assert.equal(await d.lock(pid, null), 0);
    const running = d.checkpoint(pid);
    d.close();
    assert.equal(await running, 0);
    await assert.rejects(
      d.unlock(pid),
      /unlock: this native \((Deno|Bun)\) driver has been closed/,
    );
    await assert.rejects(d.getState(pid), /closed/);
    await assert.rejects(d.driverVersion(), /closed/);
    await assert.rejects(d.listGpus(), /closed/);
    assert.equal(d.errorName(401), undefined);
    d.close(); // twice is harmless
  });

  test("[Symbol.asyncDispose] resolves once the calls in flight have settled", async () => {
    await withCounters(fake!.v13, async (counters) => {
      const d = await openNativeDriver({ libraryPath: fake!.v13 });
      const pid = 2202;
      assert.equal(await d.lock(pid, null), 0);
      let settled = false;
      const running = d.checkpoint(pid).finally(() => settled = true);
      await d[Symbol.asyncDispose]();
      assert.equal(settled, true, "the checkpoint had settled");
      assert.equal(counters.fake_in_flight(), 0);
      assert.equal(await running, 0);
      await d[Symbol.asyncDispose](); // twice is harmless
    });
  });

  test("closing lets go of the library, in every thread that opened it", async () => {
    const path = fakes!.build("libcuda_unload");
    const mapped = () => readFileSync("/proc/self/maps", "utf8").includes(path);
    const d = await openNativeDriver({ libraryPath: path, maxWorkers: 4 });
    const pids = [2301, 2302, 2303, 2304];
    await Promise.all(pids.map((pid) => d.lock(pid, null))); // starts workers on Bun
    await Promise.all(pids.map((pid) => d.unlock(pid)));
    assert.ok(mapped(), "the library is loaded while the driver is open");
    await d[Symbol.asyncDispose]();
    assert.equal(mapped(), false, "no handle is left open, so the loader unloaded it");
  });
});

describe(`cuInit and the GPU list (${runtime})`, { skip: noCompiler }, () => {
  test("listGpus reads every GPU once, right after cuInit, preferring cuDeviceGetUuid_v2", async () => {
    const path = fakes!.build("libcuda_gpus");
    await withCounters(path, async (counters) => {
      await withDriver(path, async (d) => {
        assert.equal(counters.fake_init_count(), 0, "opening calls nothing that can wait");
        const gpus = await d.listGpus();
        assert.deepEqual(gpus, [
          { index: 0, uuid: "GPU-01010101-0101-0101-0101-010101010101", name: "Fake GPU 0" },
          { index: 1, uuid: "GPU-02020202-0202-0202-0202-020202020202", name: "Fake GPU 1" },
        ]);
        assert.equal(counters.fake_init_count(), 1, "cuInit came first (the fake needs it)");
        assert.equal(await d.listGpus(), gpus, "the same list, kept");
        assert.equal(await d.lock(2401, null), 0);
        assert.equal(counters.fake_init_count(), 1, "no second cuInit for the lock");
        assert.equal(await d.unlock(2401), 0);
      });
    });
  });

  test("without cuDeviceGetUuid_v2, cuDeviceGetUuid gives the UUIDs", async () => {
    await withDriver(fakes!.build("libcuda_uuid_v1", ["-DNO_UUID_V2"]), async (d) => {
      const gpus = await d.listGpus();
      assert.equal(gpus[1].uuid, "GPU-02020202-0202-0202-0202-0202020202ff", "the v1 answer");
    });
  });

  test("cuInit runs once per process, before the first restore or lock of itself, for every driver on the library", async () => {
    const path = fakes!.build("libcuda_init");
    await withCounters(path, async (counters) => {
      const a = await openNativeDriver({ libraryPath: path });
      const b = await openNativeDriver({ libraryPath: path });
      const [p1, p2, p3] = othersThan(process.pid, 2501, 2502, 2503);
      assert.deepEqual(
        await Promise.all([a.lock(p1, null), b.lock(p2, null), a.lock(p3, null)]),
        [0, 0, 0],
      );
      // As NVIDIA's utility: another process's lock needs no cuInit (about 20 ms, GPU list and all).
      assert.equal(counters.fake_init_count(), 0, "no cuInit for another's lock");
      assert.equal(await a.checkpoint(p1), 0);
      assert.equal(await b.restore(p1, null), 0);
      assert.equal(counters.fake_init_count(), 1, "the restore's cuInit came first");
      await b.listGpus();
      assert.equal(counters.fake_init_count(), 1, "one cuInit for both drivers and every call");
      await Promise.all([a[Symbol.asyncDispose](), b[Symbol.asyncDispose]()]);
    });
  });
  test("a lock of this very process makes its cuInit first (locked, it could make none)", async () => {
    const path = fakes!.build("libcuda_init_self");
    await withCounters(path, async (counters) => {
      await withDriver(path, async (d) => {
        assert.equal(await d.lock(process.pid, null), 0);
        assert.equal(counters.fake_locks_before_init(), 0, "no lock arrived before cuInit");
        assert.equal(counters.fake_init_count(), 1);
        assert.equal(await d.unlock(process.pid), 0);
      });
    });
  });
  test("CudaProcess locks itself given one of its thread ids by its pid, so that cuInit comes first", async () => {
    const path = fakes!.build("libcuda_init_tid");
    const tid = readdirSync("/proc/self/task").map(Number).find((t) => t !== process.pid);
    assert.ok(tid, "this test process has threads besides its main one");
    await withCounters(path, async (counters) => {
      await using machine = await openMachine({ libraryPath: path, host: { nvml: false } });
      const itself = new CudaProcess(tid, { machine });
      await itself.lock({ timeoutMs: 0 });
      assert.equal(counters.fake_locks_before_init(), 0, "no lock arrived before cuInit");
      assert.equal(counters.fake_init_count(), 1);
      await itself.unlock();
    });
  });

  test("a process that has locked itself can still make calls that need new threads", async () => {
    const path = fakes!.build("libcuda_self");
    await withCounters(path, async (counters) => {
      await withDriver(path, async (d) => {
        const self = process.pid;
        assert.equal(await d.lock(self, null), 0, "locks itself (cuInit came first)");
        try {
          // The fake blocks cuInit and the device queries of a self-locked process for 3 s, as
          // the real driver blocks them for good: none of these calls may make one.
          const started = Date.now();
          const pids = othersThan(self, 2601, 2602, 2603, 2604, 2605, 2606);
          const codes = await Promise.all(pids.map((pid) => d.lock(pid, null)));
          const states = await Promise.all(pids.map((pid) => d.getState(pid)));
          const gpus = await d.listGpus();
          const elapsed = Date.now() - started;
          assert.deepEqual(codes, [0, 0, 0, 0, 0, 0]);
          assert.ok(states.every((s) => s.code === 0 && s.value === 1));
          assert.equal(gpus.length, 2, "the list read before the lock");
          assert.ok(elapsed < 2000, `took ${elapsed} ms: something waited on the self-lock`);
          assert.equal(counters.fake_init_count(), 1);
          await Promise.all(pids.map((pid) => d.unlock(pid)));
        } finally {
          assert.equal(await d.unlock(self), 0);
        }
      }, 8);
    });
  });
});
