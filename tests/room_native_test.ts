// The room check before a restore (core/room.ts) on the native path, without a GPU: the fake
// libcuda (tests/fixtures/fake_libcuda.c) as the driver, and the Linux host reading the fake
// libnvidia-ml (tests/fixtures/fake_libnvml.c) through ffi/nvml.ts: what the process held is read
// by NVML before its checkpoint, free memory by nvmlDeviceGetMemoryInfo before its restore, and a
// resume that would not fit is refused before libcuda is asked. Runs under `deno test -A` and
// `bun test`; needs cc.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";

import { CudaProcess, GpuRoomError } from "../mod.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import type { HostProcesses } from "../core/listing.ts";
import { heldWhenCheckpointed } from "../core/room.ts";
import { openLinuxHost, type ProcReader } from "../ffi/host.ts";
import { openNativeDriver } from "../ffi/mod.ts";
import { FakeDir, noCompiler, openCounters } from "./fixtures/fake.ts";
import { buildFakeNvml, controlFakeNvml, fakeNvmlUuid } from "./fixtures/fake_nvml.ts";

const MiB = 2n ** 20n;
const GiB = 1024n * MiB;

/** The driver with a host of its own, as the simulator has one: the room check then uses it. */
function withHost(driver: CheckpointDriver, host: HostProcesses): CheckpointDriver {
  return new Proxy(driver, {
    get(target, key) {
      if (key === "hostProcesses") return () => host;
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

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
      await using native = await openNativeDriver({ libraryPath: libcuda });
      await using host = openLinuxHost({ nvmlPath, reader });
      const driver = withHost(native, host);
      const pid = 424_242; // the fake libcuda takes every pid as a running CUDA process
      const gpu0 = fakeNvmlUuid(0);
      try {
        nvml.add(0, pid, 1544n * MiB);
        const proc = new CudaProcess(pid, { driver });
        await proc.suspend();
        assert.deepEqual(heldWhenCheckpointed(driver, pid), { [gpu0]: 1544 });

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
          pendingMiB: 0,
        });
        assert.match(
          err.message,
          /It held 1544 MiB for GPU-1{8}-.* and that GPU has 1000 MiB free/,
        );
        // One checkpoint call only: the getState that saw it still checkpointed, no restore (the
        // fake's restore of a checkpointed process would succeed and leave it locked).
        assert.equal(counters.fake_calls() - calls, 1, "libcuda was asked nothing but its state");
        assert.equal(await proc.state(), "checkpointed");

        // The other process ends: the resume goes through, and the record is forgotten.
        nvml.clear();
        await proc.resume();
        assert.equal(await proc.state(), "running");
        assert.equal(heldWhenCheckpointed(driver, pid), undefined);
        assert.equal(nvml.liveInits(), 1, "the host keeps one nvmlInit_v2 while open");
      } finally {
        await host.close();
        assert.equal(nvml.liveInits(), 0, "closing the host shut NVML down");
        nvml.close();
        counters.close();
      }
    });
  },
);
