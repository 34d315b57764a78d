// The room check before a restore (core/room.ts) on the native path, without a GPU: the fake
// libcuda (tests/fixtures/fake_libcuda.c) as the driver, and the Linux host reading the fake
// libnvidia-ml (tests/fixtures/fake_libnvml.c) through ffi/nvml.ts and keeping its records in a
// private directory (os/records.ts): what the process held is read by NVML before its
// checkpoint and recorded there, free memory by nvmlDeviceGetMemoryInfo before its restore, and a
// resume that would not fit is refused before libcuda is asked, by this program or another that
// shares the directory. Runs under `deno test -A` and `bun test`; needs cc.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CudaProcess, GpuRoomError } from "../mod.ts";
import { LinuxHost, type ProcReader } from "../os/linux_host.ts";
import { openNativeDriver } from "../ffi/native.ts";
import { FakeDir, noCompiler, openCounters } from "./fixtures/fake.ts";
import { cli } from "./cli_support.ts";
import { buildFakeNvml, controlFakeNvml, fakeNvmlUuid } from "./fixtures/fake_nvml.ts";

const MiB = 2n ** 20n;
const GiB = 1024n * MiB;

describe(
  "the room check on the native path (fake libcuda, fake NVML)",
  { skip: noCompiler },
  () => {
    const dir = new FakeDir();
    after(() => dir.remove());

    test("what NVML says the process held, against what NVML says is free", async () => {
      const libcuda = dir.build("libcuda-room", ["-DFAKE_CUDA_DELAY_MS=1"]);
      const nvmlPath = buildFakeNvml(dir, "nvml-room");
      const nvml = await controlFakeNvml(nvmlPath);
      const counters = await openCounters(libcuda);
      // Whatever PID namespace the test runs in, the host takes NVML's pids as /proc's.
      const reader: ProcReader = {
        list: (path) => readdir(path),
        read: (path) =>
          path === "/proc/self/status" ? Promise.resolve("NSpid:\t1\n") : readFile(path, "utf8"),
      };
      const records = await mkdtemp(join(tmpdir(), "ckpt-records-"));
      const recordsDir = join(records, "held");
      await using native = await openNativeDriver({ libraryPath: libcuda });
      await using host = new LinuxHost({ nvmlPath, reader, recordsDir });
      const machine = { driver: native, host };
      // The fake libcuda takes every pid as a running CUDA process; a live process of this
      // machine lends its pid, so that the host can tell its start time, as for a real target.
      const child = spawn("sleep", ["60"], { stdio: "ignore" });
      const pid = child.pid!;
      const start = (await host.identify(pid))?.start;
      assert.ok(start !== undefined && start > 0, "the host reads the start time from /proc");
      const gpu0 = fakeNvmlUuid(0);
      // The record is keyed by the process: its pid and its start time.
      const record = join(recordsDir, `${pid}-${start}.json`);
      try {
        nvml.add(0, pid, 1544n * MiB);
        const proc = new CudaProcess(pid, { machine });
        await proc.suspend();
        assert.deepEqual((await host.heldRecords!.get({ pid, start }))?.heldMiB, { [gpu0]: 1544 });
        assert.equal((await stat(recordsDir)).mode & 0o777, 0o700, "a private directory");
        assert.equal((await stat(record)).mode & 0o777, 0o600, "a private record");

        // Checkpointed, it holds nothing; another process now holds all of GPU 0 but 1000 MiB.
        nvml.clear();
        nvml.add(0, 777, 80n * GiB - 1000n * MiB);
        const calls = counters.fake_calls();
        const err = await proc.resume().then(() => undefined, (e) => e);
        assert.ok(err instanceof GpuRoomError, `a GpuRoomError, got ${err}`);
        assert.deepEqual(err.shortage, {
          gpu: gpu0,
          neededMiB: 1544,
          freeMiB: 1000,
          claimedMiB: 0,
        });
        assert.match(err.message, /it needs 1544 MiB on GPU-1{8}-.*, which has 1000 MiB free/);
        // Two getState calls only: the one the resume starts from, and the one that saw it still
        // checkpointed when the room was short; no restore (the fake's restore of a checkpointed
        // process would succeed and leave it locked).
        assert.equal(counters.fake_calls() - calls, 2, "libcuda was asked nothing but its state");
        assert.equal(await proc.state(), "checkpointed");

        // Another program (its own driver and host, the same records) is refused the same way:
        // the record is the machine's, not this handle's.
        {
          await using otherNative = await openNativeDriver({ libraryPath: libcuda });
          await using otherHost = new LinuxHost({ nvmlPath, reader, recordsDir });
          const other = new CudaProcess(pid, { machine: { driver: otherNative, host: otherHost } });
          await assert.rejects(other.resume(), GpuRoomError);
          await other.close();
        }

        // The other process ends: the resume goes through, and the record is forgotten.
        nvml.clear();
        const outcome = await proc.resume();
        assert.equal(outcome.roomCheck, "checked");
        assert.equal(await proc.state(), "running");
        assert.equal(await host.heldRecords!.get({ pid, start }), undefined);
        await assert.rejects(stat(record), /ENOENT|No such file/, "the record file is gone");
        assert.equal(nvml.liveInits(), 1, "the host keeps one nvmlInit_v2 while open");
      } finally {
        await host.close();
        assert.equal(nvml.liveInits(), 0, "closing the host shut NVML down");
        nvml.close();
        counters.close();
        await rm(records, { recursive: true, force: true });
        child.kill();
      }
    });

    test("the command line: a --toggle resume that does not fit is refused, run after run", async () => {
      // Each command line is a program of its own (its own session): what the suspend recorded
      // is in the records' directory, where the next one finds it.
      const libcuda = dir.build("libcuda-room-cli", ["-DFAKE_CUDA_DELAY_MS=1"]);
      const nvmlPath = buildFakeNvml(dir, "nvml-room-cli");
      const nvml = await controlFakeNvml(nvmlPath);
      const records = await mkdtemp(join(tmpdir(), "ckpt-records-cli-"));
      const reader: ProcReader = {
        list: (path) => readdir(path),
        read: (path) =>
          path === "/proc/self/status" ? Promise.resolve("NSpid:\t1\n") : readFile(path, "utf8"),
      };
      await using native = await openNativeDriver({ libraryPath: libcuda });
      await using host = new LinuxHost({ nvmlPath, reader, recordsDir: join(records, "held") });
      const child = spawn("sleep", ["60"], { stdio: "ignore" });
      const pid = child.pid!;
      const run = (args: (string | number)[]) => cli(args, { machine: { driver: native, host } });
      try {
        nvml.add(0, pid, 4616n * MiB);
        const suspended = await run(["--toggle", "--pid", pid]);
        assert.deepEqual([suspended.code, suspended.out, suspended.err], [0, "", ""]);
        nvml.clear();
        nvml.add(0, 777, 80n * GiB - 2048n * MiB);
        const refused = await run(["--toggle", "--pid", pid]);
        assert.equal(refused.code, 1);
        assert.equal(
          refused.err,
          `Error toggling CUDA in process ID ${pid}: "not enough free GPU memory for it: refused before asking the driver"\n`,
        );
        assert.equal((await run(["--get-state", "--pid", pid])).out, "checkpointed\n");
        nvml.clear();
        const resumed = await run(["--toggle", "--pid", pid, "--json"]);
        assert.equal(resumed.code, 0, resumed.err);
        assert.equal(JSON.parse(resumed.out).roomCheck, "checked");
        assert.equal((await run(["--get-state", "--pid", pid])).out, "running\n");
      } finally {
        nvml.close();
        child.kill();
        await rm(records, { recursive: true, force: true });
      }
    });
  },
);
