// The native driver on a real GPU. Where libcuda cannot be opened (CI, laptops) every test here
// is skipped with a loud message; tests/gpu/run.sh runs this file, and the full conformance run,
// on the GPU machine.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { CudaError, CudaProcess } from "../../mod.ts";
import { CUresult, openMachine } from "../../driver.ts";
import { openNativeDriver } from "../../ffi/native.ts";

// Opening libcuda makes no driver call (cuInit comes with the first one), so the first test below
// still sees this process before cuInit.
const available = await openNativeDriver()
  .then((d) => d[Symbol.asyncDispose]().then(() => true), () => false);
const skip = available ? false : "no NVIDIA driver (libcuda) here: GPU tests skipped";
if (!available) {
  console.warn(
    "\n!!! SKIPPING GPU TESTS: libcuda could not be opened on this machine. They run on the GPU " +
      "machine through tests/gpu/run.sh. !!!\n",
  );
}

describe("native driver on a real GPU", () => {
  test(
    "before any cuInit, this test process is not a CUDA process: NOT_INITIALIZED",
    { skip },
    async () => {
      await assert.rejects(new CudaProcess(process.pid).state(), (err: unknown) => {
        assert.ok(err instanceof CudaError);
        assert.equal(err.code, CUresult.CUDA_ERROR_NOT_INITIALIZED);
        return true;
      });
    },
  );

  test("has the checkpoint API and a 12.8+ driver", { skip }, async () => {
    await using machine = await openMachine();
    const d = machine.driver;
    const v = await d.driverVersion();
    assert.equal(v.code, 0);
    assert.ok(v.value >= 12080, `cuDriverGetVersion ${v.value}`);
    assert.equal(d.checkpointSupported, true);
    assert.equal(d.errorName(CUresult.CUDA_ERROR_ILLEGAL_STATE), "CUDA_ERROR_ILLEGAL_STATE");
  });

  test("listGpus gives every GPU nvidia-smi lists, with its UUID and name", { skip }, async () => {
    await using machine = await openMachine();
    const smi = execFileSync("nvidia-smi", [
      "--query-gpu=index,uuid,name",
      "--format=csv,noheader",
    ], {
      encoding: "utf8",
    }).trim().split("\n").map((line) => {
      const [index, uuid, name] = line.split(",").map((x) => x.trim());
      return { index: Number(index), uuid, name };
    });
    assert.deepEqual(await machine.driver.listGpus(), smi);
  });

  test(
    "a pid that does not exist gives CUDA_ERROR_OPERATING_SYSTEM with a clear message",
    { skip },
    async () => {
      // No pid reaches pid_max: that one cannot exist.
      const missing = Number(readFileSync("/proc/sys/kernel/pid_max", "utf8").trim());
      await assert.rejects(new CudaProcess(missing).state(), (err: unknown) => {
        assert.ok(err instanceof CudaError);
        assert.equal(err.code, CUresult.CUDA_ERROR_OPERATING_SYSTEM);
        assert.match(
          err.message,
          new RegExp(
            `^getState of process ${missing} failed: CUDA_ERROR_OPERATING_SYSTEM.*No process has this pid`,
          ),
        );
        return true;
      });
    },
  );

  test(
    "after cuInit alone (listGpus), the driver counts this process as running",
    { skip },
    async () => {
      // Found on two H200s, driver 580.159.04, 2026-11-21: no context, no allocation, yet getState
      // no longer says NOT_INITIALIZED.
      await using machine = await openMachine();
      await machine.driver.listGpus();
      assert.equal(await new CudaProcess(process.pid, { machine }).state(), "running");
    },
  );

  test(
    "a lock timeout that a C unsigned int cannot hold is refused before any call, the process " +
      "left running; a libraryPath that is no name is refused before anything opens",
    { skip },
    async () => {
      await using machine = await openMachine();
      await machine.driver.listGpus(); // cuInit: this process is a running CUDA process now
      for (const timeoutMs of [-5, 2 ** 32, 1.5, Number.NaN]) {
        // Were it passed on, -5 would wrap to 49 days: on this very process, a lock that hangs.
        await assert.rejects(
          machine.driver.lock(process.pid, { timeoutMs }),
          /LockArgs\.timeoutMs must be an integer/,
        );
      }
      assert.deepEqual(await machine.driver.getState(process.pid), { code: 0, value: 0 });
      for (const libraryPath of ["", 42]) {
        await assert.rejects(
          openMachine({ libraryPath: libraryPath as string }),
          (e: unknown) => e instanceof TypeError && /libraryPath/.test(e.message),
        );
      }
    },
  );
});
