// The NVML binding (ffi/nvml.ts) against a fake libnvidia-ml compiled from
// tests/fixtures/fake_libnvml.c: the 24-byte nvmlProcessInfo_t read at the right offsets and
// stride, lists longer than the first room, MIG entries summed, NVML_VALUE_NOT_AVAILABLE as
// "unknown", _v2 where _v3 is missing, failures that become a reason, and every init matched by a
// shutdown. Runs unchanged under `deno test -A` and `bun test`; needs cc, no GPU.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";

import { openNvml } from "../ffi/nvml.ts";
import { LinuxHost } from "../os/linux_host.ts";
import { FakeDir, noCompiler, runtimeAdapter } from "./fixtures/fake.ts";
import { buildFakeNvml, controlFakeNvml, fakeNvmlUuid } from "./fixtures/fake_nvml.ts";

const MiB = 2n ** 20n;
const NOT_AVAILABLE = 0xffff_ffff_ffff_ffffn;

describe("NVML binding, against a fake libnvidia-ml", { skip: noCompiler }, () => {
  const dir = new FakeDir();
  after(() => dir.remove());

  test("reads each GPU's processes: pid, memory in MiB by UUID, MIG entries summed", async () => {
    const path = buildFakeNvml(dir, "nvml");
    const fake = await controlFakeNvml(path);
    fake.add(0, 100, 1544n * MiB);
    fake.add(0, 200, NOT_AVAILABLE);
    fake.add(0, 100, 64n * MiB); // a second MIG instance of the same process on GPU 0
    fake.add(0, 200, 32n * MiB); // the unknown one's second instance: it stays unknown
    fake.add(1, 100, 2048n * MiB);
    // More than the 64 entries the first call has room for: INSUFFICIENT_SIZE, then again.
    for (let i = 0; i < 70; i++) fake.add(1, 1000 + i, BigInt(i + 1) * MiB + MiB / 2n);
    const nvml = openNvml(await runtimeAdapter(), { libraryPath: path });
    try {
      const report = await nvml.gpuMemory();
      assert.ok("byPid" in report, `NVML read: ${JSON.stringify(report)}`);
      const [g0, g1] = [fakeNvmlUuid(0), fakeNvmlUuid(1)];
      assert.deepEqual(report.byPid.get(100), { [g0]: 1544 + 64, [g1]: 2048 });
      assert.equal(report.byPid.get(200), "unknown", "NVML_VALUE_NOT_AVAILABLE");
      for (let i = 0; i < 70; i++) {
        assert.deepEqual(report.byPid.get(1000 + i), { [g1]: i + 1.5 }, `pid ${1000 + i}`);
      }
      assert.equal(report.byPid.size, 72);
      // Free memory per GPU from nvmlDeviceGetMemoryInfo's 24-byte nvmlMemory_t, `free` at 8: the
      // fake's 80 GiB less what its processes hold (the unknown one counts as all ones, so GPU 0
      // wraps round: left out would be wrong, any number is what NVML said) and 1 MiB per index.
      const held1 = 2048 + Array.from({ length: 70 }, (_, i) => i + 1.5).reduce((a, b) => a + b);
      assert.equal(report.freeMiB?.get(g1), 80 * 1024 - held1 - 1, "GPU 1's free memory");
      assert.equal(report.freeMiB?.size, 2, "both GPUs' free memory read");
      // The total, nvmlMemory_t's first field: the fake's 80 GiB, not what is used or free.
      assert.equal(report.totalMiB?.get(g1), 80 * 1024, "GPU 1's total memory");
      assert.equal(fake.liveInits(), 0, "nvmlShutdown matched nvmlInit_v2");
      assert.equal(fake.v2Calls(), 0, "_v3 is preferred");
      assert.equal(nvml.libraryPath, path);
    } finally {
      await nvml.close();
      fake.close();
    }
  });

  test("an NVML without _v3 is read through _v2, the same struct", async () => {
    const path = buildFakeNvml(dir, "nvml-v2", ["-DNO_V3"]);
    const fake = await controlFakeNvml(path);
    fake.add(0, 4242, 600n * MiB);
    fake.add(0, 4243, 700n * MiB);
    const nvml = openNvml(await runtimeAdapter(), { libraryPath: path });
    try {
      const report = await nvml.gpuMemory();
      assert.ok("byPid" in report);
      assert.deepEqual(report.byPid.get(4243), { [fakeNvmlUuid(0)]: 700 });
      assert.ok(fake.v2Calls() > 0);
      assert.equal(report.freeMiB?.get(fakeNvmlUuid(0)), 80 * 1024 - 1300, "GPU 0's free memory");
    } finally {
      await nvml.close();
      fake.close();
    }
  });

  test("keepInitialized: one nvmlInit_v2 for every read, its nvmlShutdown at close", async () => {
    const path = buildFakeNvml(dir, "nvml-keep");
    const fake = await controlFakeNvml(path);
    fake.add(0, 4245, 256n * MiB);
    const nvml = openNvml(await runtimeAdapter(), { libraryPath: path, keepInitialized: true });
    try {
      for (let i = 0; i < 3; i++) {
        const report = await nvml.gpuMemory();
        assert.ok("byPid" in report, JSON.stringify(report));
        assert.deepEqual(report.byPid.get(4245), { [fakeNvmlUuid(0)]: 256 });
        assert.equal(fake.liveInits(), 1, `read ${i + 1}: still the one init`);
      }
    } finally {
      await nvml.close();
      assert.equal(fake.liveInits(), 0, "close shut it down");
      fake.close();
    }
  });

  test("an NVML without nvmlDeviceGetMemoryInfo: processes read, free memory left out", async () => {
    const path = buildFakeNvml(dir, "nvml-nomem", ["-DNO_MEMINFO"]);
    const fake = await controlFakeNvml(path);
    fake.add(1, 4244, 512n * MiB);
    const nvml = openNvml(await runtimeAdapter(), { libraryPath: path });
    try {
      const report = await nvml.gpuMemory();
      assert.ok("byPid" in report, JSON.stringify(report));
      assert.deepEqual(report.byPid.get(4244), { [fakeNvmlUuid(1)]: 512 });
      assert.equal(report.freeMiB?.size ?? 0, 0, "no free memory without the function");
    } finally {
      await nvml.close();
      fake.close();
    }
  });

  test("failures become the reason memory is unknown, and init is always shut down", async () => {
    const adapter = await runtimeAdapter();
    const cases: [string[], RegExp][] = [
      [["-DINIT_FAILS"], /nvmlInit_v2 failed: Driver Not Loaded \(NVML code 9\)/],
      [
        ["-DLIST_FAILS=4"],
        /nvmlDeviceGetComputeRunningProcesses_v3 \(GPU 1, GPU-2{8}-.*\) failed: Insufficient Permissions \(NVML code 4\)/,
      ],
      [["-DNO_LIST"], /has neither nvmlDeviceGetComputeRunningProcesses_v3 nor _v2/],
    ];
    for (const [i, [defines, reason]] of cases.entries()) {
      const path = buildFakeNvml(dir, `nvml-fails-${i}`, defines);
      const fake = await controlFakeNvml(path);
      const nvml = openNvml(adapter, { libraryPath: path });
      try {
        const report = await nvml.gpuMemory();
        assert.ok("unknown" in report, defines.join(" "));
        assert.match(report.unknown, reason);
        assert.equal(fake.liveInits(), 0, `${defines}: no init left open`);
      } finally {
        await nvml.close();
        fake.close();
      }
    }
  });

  test("a library that is not there is reported with the path tried", async () => {
    const missing = `${dir.path}/no-such-libnvidia-ml.so.1`;
    assert.throws(
      () => openNvml({} as never, { libraryPath: missing }),
      (error: unknown) => error instanceof Error && error.message.includes(missing),
    );
    const adapter = await runtimeAdapter();
    // The path given is the only one tried: no search after it.
    const only = new RegExp(
      `could not be loaded, so GPU memory is unknown; tried ${missing}: [^;]*$`,
    );
    assert.throws(() => openNvml(adapter, { libraryPath: missing }), only);
    // Through the host, it is a reason, not an error.
    await using host = new LinuxHost({ nvmlPath: missing });
    const report = await host.gpuMemory();
    assert.ok("unknown" in report);
    assert.match(report.unknown, /NVML \(libnvidia-ml\.so\.1\) could not be loaded/);
    assert.ok(report.unknown.includes(missing));
  });
});
