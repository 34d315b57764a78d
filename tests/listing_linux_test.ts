// The Linux host (os/linux_host.ts) on this machine's /proc: it finds this test's own process with its
// command line, folds threads into their process, sees libcuda mapped into a process (a fake one,
// put in with LD_PRELOAD), reports a process it may not read (a reader that fails as the kernel
// does for another user's process: this runs as root here), survives processes that end while it
// reads, and, with the fake libcuda as the driver and the fake NVML, gives the whole listing.
// Runs unchanged under `deno test -A` and `bun test`; the parts that compile fakes need cc.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import process from "node:process";

import { listCudaProcesses } from "../mod.ts";
import { LinuxHost, type ProcReader } from "../os/linux_host.ts";
import { openNativeDriver } from "../ffi/native.ts";
import { FakeDir, noCompiler } from "./fixtures/fake.ts";
import { buildFakeNvml, controlFakeNvml, fakeNvmlUuid } from "./fixtures/fake_nvml.ts";

const onLinux = process.platform === "linux" ? false : "needs Linux's /proc";

/** A reader of the real /proc through node:fs, which tests wrap to fail in chosen ways. */
const nodeReader: ProcReader = {
  list: (path) => readdir(path),
  read: (path) => readFile(path, "utf8"),
};

/** An error as node:fs gives it, with its `code`. */
function fsError(code: string, path: string): Error {
  return Object.assign(new Error(`${code}: open '${path}'`), { code });
}

/**
 * Starts `sleep 600` (with extra environment), waits until its command line is sleep's (Deno
 * starts it by its full path, Bun by the name), and gives that command line with spaces.
 */
async function sleeper(
  env: Record<string, string> = {},
): Promise<ChildProcess & { command: string }> {
  const child = spawn("sleep", ["600"], { stdio: "ignore", env: { ...process.env, ...env } });
  for (let i = 0; i < 200; i++) {
    try {
      const cmdline = readFileSync(`/proc/${child.pid}/cmdline`, "utf8");
      if (cmdline === "sleep\x00600\x00" || cmdline.endsWith("/sleep\x00600\x00")) {
        return Object.assign(child, { command: cmdline.slice(0, -1).replaceAll("\x00", " ") });
      }
    } catch {
      // not there yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  child.kill();
  throw new Error("sleep did not start");
}

describe("the Linux host's /proc scan", { skip: onLinux }, () => {
  test("finds this process with its command line, and folds its threads into it", async () => {
    await using host = new LinuxHost({ nvml: false });
    const found = await host.scan();
    const me = found.find((p) => p.pid === process.pid);
    assert.ok(me, `pid ${process.pid} is in the scan`);
    const cmdline = readFileSync("/proc/self/cmdline", "utf8").replace(/\0+$/, "").split("\0");
    assert.equal(me.command, cmdline.join(" "));
    assert.equal(typeof me.cudaLibrary, "boolean");
    assert.equal(me.notInspectable, undefined, "its own maps are readable");
    const threads = readdirSync("/proc/self/task").map(Number).filter((t) => t !== process.pid);
    assert.ok(threads.length > 0, "a Deno or Bun process has threads besides its main one");
    const pids = new Set(found.map((p) => p.pid));
    for (const t of threads) assert.ok(!pids.has(t), `thread ${t} is not listed as a process`);
    assert.equal(pids.size, found.length, "each process once");
  });

  test("processTree: the root, then each descendant after its parent, with threads and command lines", async () => {
    const shell = spawn("bash", ["-c", "sleep 600 & (sleep 601 & wait) & wait"], {
      stdio: "ignore",
    });
    await using host = new LinuxHost({ nvml: false, recordsDir: false });
    try {
      let tree: Awaited<ReturnType<LinuxHost["processTree"]>>;
      // Four processes, and both sleeps exec'd (a fork is bash's command line until it has).
      const sleepsOf = (t: typeof tree) =>
        t?.flatMap((p) => p.command?.match(/sleep 60[01]$/)?.[0] ?? []) ?? [];
      for (let i = 0; i < 200; i++) {
        tree = await host.processTree(shell.pid!);
        if (tree?.length === 4 && sleepsOf(tree).length === 2) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(tree!.length, 4, JSON.stringify(tree!));
      const [top] = tree!;
      assert.deepEqual([top.pid, top.parent, top.threads], [shell.pid, process.pid, [shell.pid]]);
      // Deno starts it by its full path, Bun by its name.
      assert.match(top.command!, /(^|\/)bash -c sleep 600 & \(sleep 601 & wait\) & wait$/);
      const seen = new Set<number>();
      for (const p of tree!) {
        assert.ok(p === tree![0] || seen.has(p.parent), `${p.pid} after its parent ${p.parent}`);
        seen.add(p.pid);
      }
      assert.deepEqual(sleepsOf(tree!).sort(), ["sleep 600", "sleep 601"]);
      const thread = readdirSync("/proc/self/task").map(Number).find((t) => t !== process.pid)!;
      assert.equal(await host.processTree(thread), undefined, "a thread id is no root");
      assert.equal(await host.processTree(2 ** 22 + 5), undefined, "no process");
    } finally {
      for (const p of (await host.processTree(shell.pid!)) ?? []) process.kill(p.pid, "SIGKILL");
      await new Promise((r) => shell.once("exit", r));
    }
  });

  test("pidsInUse reads /proc once, whatever the number of ids (issue 29, item 13b)", async () => {
    // A manifest may list 1.5 million thread ids: one /proc read each took 66 s.
    let reads = 0;
    const counting: ProcReader = {
      list: (path) => (reads++, nodeReader.list(path)),
      read: (path) => (reads++, nodeReader.read(path)),
    };
    await using host = new LinuxHost({ nvml: false, recordsDir: false, reader: counting });
    const processes = readdirSync("/proc").filter((n) => /^[0-9]+$/.test(n)).length;
    const ids = Array.from({ length: 200_000 }, (_, i) => 0x3f000000 + i); // none in use
    const thread = readdirSync("/proc/self/task").map(Number).find((t) => t !== process.pid)!;
    const uses = await host.pidsInUse([...ids, thread, process.pid]);
    assert.deepEqual(uses.filter((u) => u.as === "pid" || u.as === "thread"), [
      { id: process.pid, holder: process.pid, as: "pid" },
      { id: thread, holder: process.pid, as: "thread" },
    ]);
    assert.ok(reads <= 2 * processes + 50, `${reads} reads for ${processes} processes`);
  });

  test("pidsInUse: a pid is in use while any process has it as its pid, group or session", async () => {
    // A shell leading a session of its own, with two children: one in its process group, one (job
    // control on) in a group of its own but still in the shell's session.
    const shell = spawn("bash", ["-c", "sleep 600 & set -m; sleep 600 & echo $!; wait"], {
      stdio: ["ignore", "pipe", "ignore"],
      detached: true,
    });
    const own = Number(
      await new Promise<string>((r) => shell.stdout!.once("data", (d) => r(`${d}`))),
    );
    await using host = new LinuxHost({ nvml: false });
    try {
      let inGroup = 0;
      for (let i = 0; i < 200 && !inGroup; i++) {
        const kids = readFileSync(`/proc/${shell.pid}/task/${shell.pid}/children`, "utf8");
        inGroup = kids.split(" ").map(Number).find((k) => k > 0 && k !== own) ?? 0;
        if (!inGroup) await new Promise((r) => setTimeout(r, 10));
      }
      const id = shell.pid!;
      const uses = (await host.pidsInUse([id, own, 0x3fffffff])).map((u) =>
        `${u.id} ${u.holder} ${u.as}`
      );
      assert.deepEqual(
        uses.sort(),
        [
          `${id} ${id} pid`,
          `${id} ${inGroup} group`,
          `${id} ${own} session`,
          `${own} ${own} pid`,
        ].sort(),
      );
      const thread = readdirSync("/proc/self/task").map(Number).find((t) => t !== process.pid)!;
      assert.deepEqual(await host.pidsInUse([thread]), [
        { id: thread, holder: process.pid, as: "thread" },
      ]);
      // The shell ended and reaped: its pid is still in use through the two children.
      process.kill(id, "SIGKILL");
      await new Promise((r) => shell.once("exit", r));
      for (let i = 0; i < 200 && (await host.identify(id)); i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(
        (await host.pidsInUse([id])).map((u) => `${u.holder} ${u.as}`).sort(),
        [`${inGroup} group`, `${own} session`].sort(),
      );
    } finally {
      for (const pid of [-shell.pid!, own]) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
    }
  });

  test("a process whose maps may not be read is reported, with the reason", async () => {
    const child = await sleeper();
    try {
      const denying: ProcReader = {
        list: nodeReader.list,
        read: (path) =>
          path === `/proc/${child.pid}/maps`
            ? Promise.reject(fsError("EACCES", path))
            : nodeReader.read(path),
      };
      await using host = new LinuxHost({ nvml: false, reader: denying });
      const entry = (await host.scan()).find((p) => p.pid === child.pid);
      assert.deepEqual(entry, {
        pid: child.pid,
        command: child.command,
        notInspectable: `permission denied reading /proc/${child.pid}/maps (another user's ` +
          `process, or one the kernel protects; root with CAP_SYS_PTRACE can read most)`,
      });
    } finally {
      child.kill();
    }
  });

  test("processes that end while it reads are left out, without failing the scan", async () => {
    const a = await sleeper();
    const b = await sleeper();
    try {
      // As the kernel answers once a process is gone: ENOENT, or ESRCH for a read under way.
      const vanishing: ProcReader = {
        list: nodeReader.list,
        read: (path) =>
          path === `/proc/${a.pid}/cmdline`
            ? Promise.reject(fsError("ENOENT", path))
            : path === `/proc/${b.pid}/maps`
            ? Promise.reject(fsError("ESRCH", path))
            : nodeReader.read(path),
      };
      await using host = new LinuxHost({ nvml: false, reader: vanishing });
      const pids = (await host.scan()).map((p) => p.pid);
      assert.ok(!pids.includes(a.pid!) && !pids.includes(b.pid!));
      assert.ok(pids.includes(process.pid));
    } finally {
      a.kill();
      b.kill();
    }
    // And for real: processes starting and ending throughout the scans.
    let churning = true;
    const churn = (async () => {
      while (churning) {
        const kids = Array.from({ length: 8 }, () => spawn("true", { stdio: "ignore" }));
        await Promise.all(kids.map((k) => new Promise((r) => k.on("exit", r))));
      }
    })();
    try {
      await using host = new LinuxHost({ nvml: false });
      for (let i = 0; i < 10; i++) assert.ok((await host.scan()).length > 0);
    } finally {
      churning = false;
      await churn;
    }
  });

  test("/proc that cannot be listed is an error that says what to allow", async () => {
    const closed: ProcReader = {
      list: (path) => Promise.reject(fsError("EACCES", path)),
      read: nodeReader.read,
    };
    await using host = new LinuxHost({ nvml: false, reader: closed });
    await assert.rejects(host.scan(), /\/proc could not be read .*--allow-read=\/proc/);
  });

  test("a PID namespace of its own makes GPU memory unknown, and says why", async () => {
    const nested: ProcReader = {
      list: nodeReader.list,
      read: (path) =>
        path === "/proc/self/status"
          ? Promise.resolve("Name:\tx\nNSpid:\t4321\t12\n")
          : nodeReader.read(path),
    };
    await using host = new LinuxHost({ reader: nested });
    const report = await host.gpuMemory();
    assert.ok("unknown" in report);
    assert.match(report.unknown, /PID namespace of its own \(a container: NSpid 4321 12\)/);
  });
});

describe("the Linux host with libcuda mapped, and the whole listing", {
  skip: onLinux || noCompiler,
}, () => {
  const dir = new FakeDir();
  after(() => dir.remove());
  // The fake is named as the driver's library is, so that maps shows ".../libcuda.so.1".
  const libcuda = onLinux || noCompiler
    ? ""
    : dir.build("libcuda", [], join(dir.path, "libcuda.so.1"));

  test("a process with libcuda mapped is seen as one; a plain one is not", async () => {
    const cuda = await sleeper({ LD_PRELOAD: libcuda });
    const plain = await sleeper();
    try {
      await using host = new LinuxHost({ nvml: false });
      const found = await host.scan();
      assert.equal(found.find((p) => p.pid === cuda.pid)?.cudaLibrary, true);
      assert.equal(found.find((p) => p.pid === plain.pid)?.cudaLibrary, false);
    } finally {
      cuda.kill();
      plain.kill();
    }
  });

  test("listCudaProcesses: /proc, the driver's answers and NVML's memory together", async () => {
    const nvmlPath = buildFakeNvml(dir, "nvml");
    const fake = await controlFakeNvml(nvmlPath);
    const cuda = await sleeper({ LD_PRELOAD: libcuda });
    const plain = await sleeper();
    const mib = 2n ** 20n;
    fake.add(0, cuda.pid!, 1544n * mib);
    fake.add(1, cuda.pid!, 520n * mib);
    // This process's /proc/self/status, whatever namespace the test runs in, says "no nesting".
    const reader: ProcReader = {
      list: nodeReader.list,
      read: (path) =>
        path === "/proc/self/status" ? Promise.resolve("NSpid:\t1\n") : nodeReader.read(path),
    };
    await using driver = await openNativeDriver({ libraryPath: libcuda });
    await using host = new LinuxHost({ nvmlPath, reader });
    try {
      const listing = await listCudaProcesses({ machine: { driver, host } });
      const entry = listing.processes.find((p) => p.pid === cuda.pid);
      // The fake libcuda says every pid is a running CUDA process whose restore thread is pid + 1.
      assert.deepEqual(entry, {
        pid: cuda.pid,
        state: "running",
        restoreThreadId: cuda.pid! + 1,
        gpuMemory: { [fakeNvmlUuid(0)]: 1544, [fakeNvmlUuid(1)]: 520 },
        command: cuda.command,
      });
      assert.ok(!listing.processes.some((p) => p.pid === plain.pid), "no libcuda: not asked");
      assert.equal(listing.gpuMemoryUnknown, undefined);
      // The host keeps NVML initialised from its first read until it is closed.
      assert.equal(fake.liveInits(), 1, "one nvmlInit_v2 kept while the host is open");
      await listCudaProcesses({ machine: { driver, host } });
      assert.equal(fake.liveInits(), 1, "a second read initialises nothing more");
      await host.close();
      assert.equal(fake.liveInits(), 0, "close shut NVML down");
    } finally {
      cuda.kill();
      plain.kill();
      fake.close();
    }
  });
});
