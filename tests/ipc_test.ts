// Processes that share GPU memory (issue 30, part A): the simulator answers as driver 580 was
// measured to (docs/DRIVER.md, "Processes that share GPU memory": an importer checkpoints, then
// never restores), and this package refuses every checkpoint of an importer that shows the sign,
// before any step: one process, a group, a job, a snapshot, the command line. Runs under
// `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { CudaError, CudaProcess, RefusedError, runGroup, snapshot } from "../mod.ts";
import {
  CUDA_ERROR_INVALID_VALUE,
  CUDA_ERROR_NOT_SUPPORTED,
  CUDA_ERROR_OPERATING_SYSTEM,
} from "../core/driver.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { cli } from "./cli_support.ts";
import { hostWith, machineWith } from "./support/forward.ts";
import { tempDirs } from "./support/temp_dirs.ts";

const base = tempDirs("ckpt-ipc-test-");

/** An exporter and its importer on one simulated machine (of `gpus` H200s). */
function pair(through: "legacy" | "cumem" | "fd" = "legacy", gpus = 1) {
  const sim = new SimulatedMachine({ gpus });
  const exporter = sim.spawn({ memoryMiB: 512, command: "python parent.py" });
  const importer = sim.spawn({ memoryMiB: 64, ipcImport: { exporter: exporter.pid, through } });
  return { sim, exporter, importer };
}

/** No state-changing call reached the driver since `from` (a count of its calls). */
function noStep(sim: SimulatedMachine, from = 0): void {
  const steps = sim.driver.calls.slice(from)
    .filter((c) => ["lock", "checkpoint", "restore", "unlock"].includes(c.op));
  assert.deepEqual(steps.map((c) => `${c.op} ${c.pid}`), [], "no step was made");
}

describe("the simulator, as driver 580 answers an importer", () => {
  for (
    const [through, code] of [
      ["legacy", CUDA_ERROR_INVALID_VALUE],
      ["cumem", CUDA_ERROR_NOT_SUPPORTED],
      ["fd", CUDA_ERROR_NOT_SUPPORTED],
    ] as const
  ) {
    test(`${through}: it checkpoints, and every restore fails; it stays checkpointed`, async () => {
      const { sim, importer } = pair(through);
      assert.equal(await sim.driver.lock(importer.pid, null), 0);
      assert.equal(await sim.driver.checkpoint(importer.pid), 0);
      assert.equal(await sim.driver.restore(importer.pid, null), code);
      // A second restore (NVIDIA's utility after ours, one H200): "OS call failed", whatever the
      // first said (tests/gpu/reports/ipc-probe-h200.txt).
      assert.equal(await sim.driver.restore(importer.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
      assert.equal(importer.state, "checkpointed");
    });
  }

  test("legacy, its exporter gone: invalid argument first, as with it alive", async () => {
    // One H200, 580.159.04 (tests/gpu/reports/ipc-gone-h200-session43.txt): the first restore of
    // a legacy importer says invalid argument whether its exporter is alive or gone, later ones
    // the OS call failed.
    const { sim, exporter, importer } = pair();
    await sim.driver.lock(importer.pid, null);
    await sim.driver.checkpoint(importer.pid);
    exporter.exit();
    assert.equal(await sim.driver.restore(importer.pid, null), CUDA_ERROR_INVALID_VALUE);
    assert.equal(await sim.driver.restore(importer.pid, null), CUDA_ERROR_OPERATING_SYSTEM);
  });

  test("suspended anyway (allowIpcImport): each refused resume says why, not 'out of memory'", async () => {
    for (
      const [through, gone] of [["legacy", true], ["legacy", false], ["cumem", false]] as const
    ) {
      const { sim, exporter, importer } = pair(through);
      const p = new CudaProcess(importer.pid, { machine: sim });
      await p.suspend({ allowIpcImport: true });
      if (gone) exporter.exit();
      // The first (invalid argument, or not supported), then the OS call failed.
      for (const attempt of [1, 2]) {
        const err = await p.resume().catch((e) => e), at = `${through} ${gone} ${attempt}`;
        assert.match(
          String(err),
          /refuses to restore it, as driver 580 does for a process whose GPU memory came from another \(it maps \/dev\/shm\/cuda\.shm/,
          at,
        );
        assert.doesNotMatch(String(err), /out of memory/, at);
      }
    }
  });

  test("an importer resumed with a GPU mapping is told of its import, not of its mapping", async () => {
    // Its restore's invalid argument is the import's (a mapping's refusal has that code too).
    const { sim, importer } = pair("legacy", 2);
    const p = new CudaProcess(importer.pid, { machine: sim });
    await p.suspend({ allowIpcImport: true });
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    const err = await p.resume({ gpuMapping: { [g0]: g1, [g1]: g0 } }).catch((e) => e);
    assert.ok(err instanceof CudaError && err.code === CUDA_ERROR_INVALID_VALUE, String(err));
    assert.match(
      String(err),
      /as driver 580 does for a process whose GPU memory came from another/,
    );
    assert.doesNotMatch(String(err), /GPU mapping/);
  });

  test("the host shows the sign of a legacy or cuMem import, and none of an fd import", async () => {
    for (const through of ["legacy", "cumem", "fd"] as const) {
      const { sim, exporter, importer } = pair(through);
      const sign = await sim.host.gpuImport!(importer.pid);
      assert.deepEqual(
        sign,
        through === "fd" ? undefined : {
          exporter: exporter.pid,
          sign: `it maps /dev/shm/cuda.shm.0.${exporter.pid.toString(16)}.1, named after ` +
            `process ${exporter.pid}`,
        },
      );
      assert.equal(await sim.host.gpuImport!(exporter.pid), undefined, "the exporter shows none");
    }
  });
});

describe("a checkpoint of an importer is refused before any step", () => {
  test("suspend, toggle and a checkpoint once locked: IPC, naming the exporter; nothing changed", async () => {
    const { sim, exporter, importer } = pair();
    const proc = new CudaProcess(importer.pid, { machine: sim });
    for (const act of [() => proc.suspend(), () => proc.toggle()]) {
      const mark = sim.driver.calls.length;
      const err = await act().catch((e) => e);
      assert.ok(err instanceof RefusedError, String(err));
      assert.equal(err.code, "IPC");
      assert.match(err.message, new RegExp(`of process ${importer.pid} refused: it maps `));
      assert.match(err.message, new RegExp(`that process ${exporter.pid} exported to it`));
      assert.match(err.message, /--allow-ipc-import/);
      noStep(sim, mark);
    }
    await proc.lock();
    const err = await proc.checkpoint().catch((e) => e);
    assert.equal(err.code, "IPC");
    assert.equal(importer.state, "locked");
    await proc.unlock();
    assert.equal(importer.state, "running");
  });

  test("a host whose look for an import fails outright is read as finding none: the suspend goes on", async () => {
    const sim = new SimulatedMachine(), { pid } = sim.spawn();
    const host = hostWith(sim.host, { gpuImport: () => Promise.reject(new Error("EIO")) });
    const done = await new CudaProcess(pid, { machine: machineWith(sim, { host }) }).suspend();
    assert.equal(done.state, "checkpointed");
  });

  test("one whose maps the host cannot read is refused too, saying how to let it or go on", async () => {
    const sim = new SimulatedMachine(), { pid } = sim.spawn();
    const sign = 'its maps cannot be read (Requires all access to "/proc/4000/maps")';
    const host = hostWith(sim.host, { gpuImport: () => Promise.resolve({ sign, unknown: true }) });
    const machine = machineWith(sim, { host });
    const err = await new CudaProcess(pid, { machine }).suspend().catch((e) => e);
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.code, "IPC");
    assert.equal(
      err.message,
      `suspend of process ${pid} refused: ${sign}: whether it imported GPU memory, which no ` +
        `driver before 610 restores, cannot be told; let this program read it, or pass ` +
        `allowIpcImport (--allow-ipc-import). Nothing was done to it`,
    );
    noStep(sim);
    const allowed = await new CudaProcess(pid, { machine }).suspend({ allowIpcImport: true });
    assert.equal(allowed.state, "checkpointed");
  });

  test("its maps unread, suspended anyway, its restore refused: said as an earlier out of memory", async () => {
    const sim = new SimulatedMachine(), target = sim.spawn();
    const sign = 'its maps cannot be read (Requires all access to "/proc/4000/maps")';
    const host = hostWith(sim.host, { gpuImport: () => Promise.resolve({ sign, unknown: true }) });
    const proc = new CudaProcess(target.pid, { machine: machineWith(sim, { host }) });
    await proc.suspend({ allowIpcImport: true });
    target.failNext("restore", { code: CUDA_ERROR_OPERATING_SYSTEM }); // left checkpointed
    const err = await proc.resume().catch((e) => e);
    // Whether it imported GPU memory is not known: the sign is not said as where it came from.
    assert.match(
      err.message,
      /the driver refuses to restore it, as driver 580 does after a restore of it ran out of memory/,
    );
    assert.doesNotMatch(err.message, /came from another/);
  });

  test("allowIpcImport is taken by a checkpoint once locked and by a toggle, as by a suspend", async () => {
    for (const how of ["checkpoint", "toggle"] as const) {
      const { importer, sim } = pair();
      const proc = new CudaProcess(importer.pid, { machine: sim });
      if (how === "checkpoint") await proc.lock();
      const outcome = await proc[how]({ allowIpcImport: true });
      assert.equal(outcome.state, "checkpointed", how);
      assert.equal(importer.state, "checkpointed", how);
    }
  });

  test("the exporter alone suspends and resumes", async () => {
    const { sim, exporter } = pair();
    const proc = new CudaProcess(exporter.pid, { machine: sim });
    assert.equal((await proc.suspend()).state, "checkpointed");
    assert.equal((await proc.resume()).state, "running");
  });

  test("a group, all or nothing, and a job: the whole is refused before any step", async () => {
    for (const options of [{ allOrNothing: true }, { job: true }]) {
      const { sim, exporter, importer } = pair();
      const result = await runGroup("suspend", [exporter.pid, importer.pid], {
        machine: sim,
        ...options,
      });
      assert.equal(result.ok, false);
      assert.equal(result.processes[1].error instanceof RefusedError, true);
      assert.equal((result.processes[1].error as RefusedError).code, "IPC");
      noStep(sim);
      assert.deepEqual([exporter.state, importer.state], ["running", "running"]);
    }
  });

  test("a snapshot of the importer's tree is refused before anything changes", async () => {
    const { sim, importer } = pair();
    const dir = join(base(), "snap");
    const err = await snapshot([importer.pid], dir, { machine: sim }).catch((e) => e);
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.code, "IPC");
    assert.equal(err.operation, "snapshot");
    noStep(sim);
  });

  test("a snapshot with allowIpcImport takes the importer's tree: suspended, dumped, ended", async () => {
    // The refusal is skipped once, at the checks; the suspend itself must not refuse it again.
    const { sim, importer } = pair();
    const dir = join(base(), "snap");
    const { manifest } = await snapshot([importer.pid], dir, {
      machine: sim,
      allowIpcImport: true,
    });
    assert.deepEqual(manifest.trees.map((t) => t.root), [importer.pid]);
    assert.equal(manifest.trees[0].processes[0].cuda?.state, "running");
    const checkpoints = sim.driver.calls.filter((c) => c.op === "checkpoint").map((c) => c.pid);
    assert.deepEqual(checkpoints, [importer.pid]);
    assert.equal(sim.process(importer.pid), undefined, "ended once on disk");
  });

  test("allowIpcImport: it is checkpointed, and its resume then fails as the driver's does", async () => {
    const { sim, importer } = pair();
    const proc = new CudaProcess(importer.pid, { machine: sim });
    assert.equal((await proc.suspend({ allowIpcImport: true })).state, "checkpointed");
    const err = await proc.resume().catch((e) => e);
    assert.ok(err instanceof CudaError, String(err));
    assert.equal(err.code, CUDA_ERROR_INVALID_VALUE);
    assert.equal(importer.state, "checkpointed");
  });

  test("an import through a file descriptor shows no sign: it is not refused (and is lost)", async () => {
    const { sim, importer } = pair("fd");
    const proc = new CudaProcess(importer.pid, { machine: sim });
    assert.equal((await proc.suspend()).state, "checkpointed");
    assert.equal((await proc.resume().catch((e) => e)).code, CUDA_ERROR_NOT_SUPPORTED);
  });

  test("keyed to the driver's release: 610 and later are not refused; one unknown is", async () => {
    const cases: [string | undefined, boolean][] = [
      ["610.12", false],
      ["595.71", true],
      [undefined, true],
    ];
    for (const [release, refused] of cases) {
      const { sim, importer } = pair();
      const facts = () =>
        Promise.resolve({
          hostname: "h",
          kernel: "k",
          ...(release ? { driverRelease: release } : {}),
        });
      const machine = machineWith(sim, { host: hostWith(sim.host, { facts }) });
      const err = await new CudaProcess(importer.pid, { machine }).suspend().then(
        () => undefined,
        (e) => e,
      );
      assert.equal(err?.code === "IPC", refused, `driver ${release}`);
    }
  });
});

describe("NCCL ranks with others on this host, P2P or shared memory on: refused too", () => {
  // Two ranks of one job on two GPUs, as the simulator models them (SpawnOptions.nccl).
  function ranks(
    nccl: { p2pDisable?: boolean; shmDisable?: boolean } = {},
    release = "580.159.04",
  ) {
    const sim = new SimulatedMachine({ gpus: 2 });
    const pids = [0, 1].map((gpu) =>
      sim.spawn({ memoryMiB: 512, gpu, nccl: { localRanks: 2, ...nccl } }).pid
    );
    const facts = () => Promise.resolve({ hostname: "h", kernel: "k", driverRelease: release });
    return { sim, pids, machine: machineWith(sim, { host: hostWith(sim.host, { facts }) }) };
  }
  const sign = (without: string) =>
    `it has libnccl.so.2 loaded, LOCAL_WORLD_SIZE=2 in its environment, without ${without}`;

  test("the simulator shows the sign the Linux host reads, and loses such a rank once checkpointed", async () => {
    const { sim, pids: [rank] } = ranks({ p2pDisable: true });
    assert.deepEqual(await sim.host.gpuImport!(rank), {
      ncclRanks: 2,
      sign: sign("NCCL_SHM_DISABLE=1"),
    });
    assert.equal(await sim.driver.lock(rank, null), 0);
    assert.equal(await sim.driver.checkpoint(rank), 0);
    assert.equal(await sim.driver.restore(rank, null), CUDA_ERROR_NOT_SUPPORTED);
    assert.equal(sim.process(rank)!.state, "checkpointed");
  });

  test("a job of the two is refused before any step, saying how to start one that comes back", async () => {
    // On 610 too: its IPC support is for processes its own launcher started, and not measured.
    for (const release of ["580.159.04", "610.12"]) {
      const { sim, pids, machine } = ranks({}, release);
      const result = await runGroup("suspend", pids, { machine, job: true });
      assert.equal(result.ok, false);
      const error = result.processes.map((p) => p.error).find((e) => e instanceof RefusedError);
      assert.equal((error as RefusedError).code, "IPC", release);
      assert.match(
        error!.message,
        new RegExp(
          `${sign("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1")}: its job's ranks on this host ` +
            `share memory through NCCL's P2P or shared-memory transport, .* start every rank ` +
            `with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, or pass allowIpcImport`,
        ),
      );
      noStep(sim);
    }
  });

  test("both transports off, or one rank on the host: suspended and resumed as any job", async () => {
    const off = ranks({ p2pDisable: true, shmDisable: true });
    assert.equal((await runGroup("suspend", off.pids, { machine: off.sim, job: true })).ok, true);
    assert.equal((await runGroup("resume", off.pids, { machine: off.sim, job: true })).ok, true);
    const sim = new SimulatedMachine();
    const alone = sim.spawn({ nccl: { localRanks: 1 } });
    assert.equal(
      (await new CudaProcess(alone.pid, { machine: sim }).toggle()).state,
      "checkpointed",
    );
    assert.equal((await new CudaProcess(alone.pid, { machine: sim }).toggle()).state, "running");
  });
});

describe("the command line", () => {
  test("--toggle of the importer exits 1 with the refusal; --allow-ipc-import suspends it", async () => {
    const { sim, exporter, importer } = pair();
    const refused = await cli(["--toggle", "--pid", importer.pid], { machine: sim });
    assert.equal(refused.code, 1);
    assert.match(
      refused.err,
      new RegExp(
        `^Error toggling CUDA in process ID ${importer.pid}: "it maps \\S+, named after process ` +
          `${exporter.pid}: it holds GPU memory that process ${exporter.pid} exported to it ` +
          `through CUDA IPC, .* or pass allowIpcImport \\(--allow-ipc-import\\) if you know`,
      ),
    );
    assert.equal(importer.state, "running");
    const allowed = await cli(["--toggle", "--allow-ipc-import", "--pid", importer.pid], {
      machine: sim,
    });
    assert.equal(allowed.code, 0, allowed.err);
    assert.equal(importer.state, "checkpointed");
  });

  test("--toggle --job of an exporter and its importer: the importer's line says where it still is", async () => {
    const { sim, exporter, importer } = pair();
    const r = await cli(["--toggle", "--job", "-p", `${exporter.pid},${importer.pid}`, "--json"], {
      machine: sim,
    });
    assert.equal(r.code, 1);
    const [first, second] = r.out.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual([first.status, first.reason], ["not-started", "another-failed"]);
    assert.deepEqual([second.status, second.error.code, second.state], [
      "failed",
      "IPC",
      "running",
    ]);
    noStep(sim);
  });

  test("--allow-ipc-import goes with a checkpoint, a toggle or a snapshot only", async () => {
    const r = await cli(["--action", "lock", "--allow-ipc-import", "--pid", "1"]);
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /--allow-ipc-import is only valid with --action checkpoint, --toggle and snapshot/,
    );
  });
});
