// One room check, one error class: a restore that would not fit is refused with a GpuRoomError
// (code NO_ROOM, the shortage named) on every path that restores, before the driver is asked:
// one process's resume, a group's, the command line's (its --json names the class), and a
// snapshot's restore (before criu brings anything back). Runs under `deno test -A` and `bun test`.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaProcess, GpuRoomError, restoreSnapshot, runGroup, snapshot } from "../mod.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { cli } from "./cli_support.ts";

/** A 4 GiB process suspended on GPU 0 of a simulated H200, which is then filled. */
async function suspendedOntoAFullGpu() {
  const sim = new SimulatedMachine();
  const target = sim.spawn({ memoryMiB: 4096 });
  await new CudaProcess(target.pid, { machine: sim }).suspend();
  const filler = sim.fillGpu(0, { leaveMiB: 1024 });
  const restores = () => sim.driver.calls.filter((c) => c.op === "restore").length;
  return { sim, target, filler, restores };
}

/** The refusal every path gives: its class, its code, and what it names. */
function isRoomRefusal(err: unknown, gpu: string): boolean {
  assert.ok(err instanceof GpuRoomError, `a GpuRoomError, got ${err}`);
  assert.equal(err.code, "NO_ROOM");
  assert.equal(err.shortage.gpu, gpu);
  assert.ok(err.shortage.neededMiB > err.shortage.freeMiB, JSON.stringify(err.shortage));
  return true;
}

describe("a restore that would not fit is a GpuRoomError on every path", () => {
  test("one process's resume", async () => {
    const { sim, target, restores } = await suspendedOntoAFullGpu();
    await assert.rejects(
      new CudaProcess(target.pid, { machine: sim }).resume(),
      (err) => isRoomRefusal(err, sim.gpus[0].uuid),
    );
    assert.equal(restores(), 0, "the driver was not asked");
    assert.equal(target.state, "checkpointed");
  });

  test("a group's resume, and a job's", async () => {
    for (const job of [false, true]) {
      const { sim, target, restores } = await suspendedOntoAFullGpu();
      const result = await runGroup("resume", [target.pid], { machine: sim, job });
      assert.equal(result.ok, false);
      assert.ok(isRoomRefusal(result.processes[0].error, sim.gpus[0].uuid));
      assert.equal(restores(), 0, "the driver was not asked");
      assert.equal(target.state, "checkpointed");
    }
  });

  test("the command line's --toggle, whose --json names the class", async () => {
    const { sim, target, restores } = await suspendedOntoAFullGpu();
    const r = await cli(["--toggle", "--pid", target.pid, "--json"], { machine: sim });
    assert.equal(r.code, 1);
    const error = JSON.parse(r.out).error;
    assert.deepEqual([error.name, error.code, error.refused], ["GpuRoomError", "NO_ROOM", true]);
    assert.equal(restores(), 0, "the driver was not asked");
  });

  test("a snapshot's restore, before criu brings anything back", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 4096 });
    const base = mkdtempSync(join(tmpdir(), "ckpt-room-paths-"));
    try {
      const dir = join(base, "snap");
      await snapshot([target.pid], dir, { machine: sim });
      const filler = sim.fillGpu(0, { leaveMiB: 1024 });
      await assert.rejects(
        restoreSnapshot(dir, { machine: sim }),
        (err) => isRoomRefusal(err, sim.gpus[0].uuid),
      );
      assert.equal(sim.process(target.pid), undefined, "criu made nothing");
      filler.exit();
      await restoreSnapshot(dir, { machine: sim });
      assert.equal(sim.process(target.pid)?.state, "running");
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
});
