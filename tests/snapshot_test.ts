// Snapshots (core/snapshot/take.ts, restore.ts) end to end on the simulated driver and its simulated criu, with the
// file system's store: process trees to a directory and back with their pids and GPU memory;
// everything refused before anything changes; every failure after that putting things back as
// the error says; deadlines, aborts and progress; jobs; restores onto other GPUs.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { join } from "node:path";
import {
  CheckpointUnsupportedError,
  CudaError,
  RefusedError,
  restoreSnapshot,
  snapshot,
  SnapshotError,
} from "../mod.ts";
import type { SnapshotDir, SnapshotEvent, SnapshotStore } from "../snapshot.ts";
import { EngineError, type RestoreRequest } from "../core/engine.ts";
import type { Machine } from "../core/machine.ts";
import { MANIFEST_FILE } from "../core/snapshot/layout.ts";
import { engineWith, forward, hostWith, machineWith } from "./support/forward.ts";
import { SimulatedCriu, SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import { mappingProblems } from "../core/mapping.ts";
import { Handle } from "../core/process.ts";
import { settlesWithin } from "../core/time.ts";
import { parseGpuUuid } from "../core/options.ts";
import { tempDirs } from "./support/temp_dirs.ts";
import { runProgram } from "./cli_support.ts";
import { FileSnapshotStore } from "../os/snapshot_store.ts";

const base = tempDirs("ckpt-snapshot-test-");
/** Where a new snapshot may go: `snap` in a new folder, removed after the test. */
function newDir(): string {
  return join(base(), "snap");
}

/** A tree: a plain root, two CUDA children (1 and 2 GiB, on GPU 0), a plain grandchild. */
async function job(sim = new SimulatedMachine({ gpus: 2 })) {
  const root = sim.spawn({ cuda: false, command: "bash run.sh" });
  const a = sim.spawn({ parent: root.pid, memoryMiB: 1024, gpu: 0, command: "python rank0.py" });
  const b = sim.spawn({ parent: root.pid, memoryMiB: 2048, gpu: 0, command: "python rank1.py" });
  const c = sim.spawn({ parent: a.pid, cuda: false, command: "tee log" });
  await a.write(0, new TextEncoder().encode("rank 0 weights"));
  await b.write(4096, new TextEncoder().encode("rank 1 weights"));
  const hashes = [await a.memoryChunkedSha256(), await b.memoryChunkedSha256()];
  return { sim, root, a, b, c, pids: [root.pid, a.pid, b.pid, c.pid], hashes };
}

/** The live process with `pid`, which must exist. */
function live(sim: SimulatedMachine, pid: number): SimulatedProcess {
  const p = sim.process(pid);
  assert.ok(p && p.pid === pid, `process ${pid} lives`);
  return p;
}

async function refusedWith(promise: Promise<unknown>, code: string, pattern: RegExp) {
  const err = await promise.then(() => undefined, (e) => e);
  assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
  assert.equal(err.code, code, err.message);
  assert.match(err.message, pattern);
}

/** The simulated criu with a restore of its own, and no wake (a tree is not held). */
function restoringWith(criu: SimulatedCriu, restore: SimulatedCriu["restore"]) {
  return {
    kind: criu.kind,
    probe: () => criu.probe(),
    dump: (r: Parameters<typeof criu.dump>[0]) => criu.dump(r),
    stop: (pids: readonly number[]) => criu.stop(pids),
    kill: (pids: readonly number[]) => criu.kill(pids),
    restore,
  };
}

describe("a snapshot and its restore", () => {
  test("a command line longer than a manifest holds (a Java classpath): kept to its first 4096 characters", async () => {
    const sim = new SimulatedMachine();
    const command = `java -cp ${"a".repeat(5000)} Main`;
    const p = sim.spawn({ memoryMiB: 16, command });
    const dir = newDir();
    const { manifest } = await snapshot([p.pid], dir, { machine: sim });
    assert.equal(manifest.trees[0].processes[0].command, command.slice(0, 4096));
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("a tree to disk, ended, then back with its pids, its CUDA processes running, memory intact", async () => {
    const { sim, a, b, pids, hashes } = await job();
    const dir = newDir();
    const made = await snapshot([pids[0]], dir, { machine: sim });
    const m = made.manifest;
    assert.equal(m.format, "ckpt-cuda-snapshot/2");
    assert.deepEqual(m.trees[0].processes.map((p) => p.pid), pids);
    assert.deepEqual(
      m.trees[0].processes.map((p) => p.cuda?.state),
      [undefined, "running", "running", undefined],
    );
    const gpu0 = sim.gpus[0].uuid;
    assert.ok(m.trees[0].processes[1].cuda!.gpuMemoryMiB![gpu0] >= 1024, "what rank 0 held");
    assert.deepEqual(
      m.trees[0].processes.slice(1, 3).map((p) => p.cuda!.restoreThreadId),
      [a.tid, b.tid],
      "the driver's restore thread, not the pid",
    );
    assert.equal(m.gpus.length, 2);
    assert.deepEqual(
      m.gpus.map((g) => g.totalMiB),
      sim.gpus.map((g) => g.memoryMiB),
      "as NVML tells",
    );
    assert.equal(m.driver.cudaVersion, 13000);
    assert.ok(m.files.length >= 4, "an image per process");
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    assert.equal(statSync(join(dir, MANIFEST_FILE)).mode & 0o777, 0o600);
    for (const pid of pids) assert.equal(sim.process(pid), undefined, `${pid} was ended`);
    assert.equal(sim.gpus[0].usedMiB, 0, "the GPU is free");
    // What each ended CUDA process held is kept until a restore brings it back (it guards a resume
    // of a tree criu brought back outside restoreSnapshot); then the new process's replaces it.
    const records = async () => [...await sim.heldRecords.list(), ...await sim.heldRecords.ended()];
    assert.deepEqual((await records()).map((r) => r.process.pid).sort(), [a.pid, b.pid].sort());

    const back = await restoreSnapshot(dir, { machine: sim });
    assert.deepEqual(back.pids, pids);
    assert.deepEqual(back.gpuMapping, {}, "in place");
    const t = back.timings;
    assert.ok(
      t.restoreMs > 0 && t.resumeMs > 0,
      `criu's part and the GPU's took time: ${JSON.stringify(t)}`,
    );
    assert.ok(
      t.checkMs + t.restoreMs <= back.ms + 1e-6 &&
        t.checkMs + t.restoreMs + t.resumeMs >= back.ms - 1e-6,
      `the parts make the whole, overlapping: ${JSON.stringify(t)} of ${back.ms}`,
    );
    const [a2, b2] = [live(sim, a.pid), live(sim, b.pid)];
    assert.equal(a2.state, "running");
    assert.equal(b2.state, "running");
    assert.deepEqual([await a2.memoryChunkedSha256(), await b2.memoryChunkedSha256()], hashes);
    assert.equal(live(sim, pids[3]).parent, a.pid, "the tree is the tree it was");
    assert.ok(sim.gpus[0].usedMiB >= 3072, "back on GPU 0");
    assert.deepEqual(
      await records(),
      [],
      "restored and resumed: none kept, of the ended or the new",
    );
  });

  test("a process whose GPU memory the host cannot tell: none in the manifest, the rest as told", async () => {
    const { sim, a, b, pids } = await job();
    const gpuMemory = async () => {
      const report = await sim.host.gpuMemory!();
      if (!("byPid" in report)) return report;
      return { ...report, byPid: new Map([...report.byPid, [a.pid, "unknown" as const]]) };
    };
    const host = hostWith(sim.host, { gpuMemory });
    const made = await snapshot([pids[0]], newDir(), { machine: machineWith(sim, { host }) });
    const [ra, rb] = [a, b].map((p) =>
      made.manifest.trees[0].processes.find((q) => q.pid === p.pid)
    );
    assert.equal(ra?.cuda?.gpuMemoryMiB, null, "unknown: none");
    assert.ok(Object.values(rb?.cuda?.gpuMemoryMiB ?? {})[0] >= 2048, "what rank 1 held");
  });

  test("a process listed or dumped without threads is recorded with its pid as its one thread", async () => {
    // A racy /proc read (or criu's pstree) can show a process whose task/ directory was empty by
    // then; the manifest needs a thread a process, and a restore checks each is free. The listing
    // counts where the engine tells nothing of what it dumped; what it dumped counts where it does.
    for (const seam of ["listed", "dumped"] as const) {
      const { sim, a, b, pids } = await job();
      const bare = <P extends { pid: number; threads: readonly number[] }>(ps: readonly P[]) =>
        ps.map((p) => p.pid === a.pid ? { ...p, threads: [] } : p);
      const host = hostWith(sim.host, {
        processTree: async (root) => bare((await sim.host.processTree!(root)) ?? []),
      });
      const engine = engineWith(sim.engine, {
        dump: async (request) => {
          const dumped = await sim.engine.dump(request); // its images written, either way
          return seam === "listed" ? [] : bare(dumped);
        },
      });
      const machine = machineWith(sim, seam === "listed" ? { host, engine } : { engine });
      const made = await snapshot([pids[0]], newDir(), { machine });
      const [ra, rb] = [a, b].map((p) =>
        made.manifest.trees[0].processes.find((q) => q.pid === p.pid)
      );
      assert.deepEqual(ra?.threads, [a.pid], `${seam}: its pid, for want of a thread`);
      assert.deepEqual(rb?.threads, [...b.threads], `${seam}: the others as they were`);
    }
  });

  test("every time in the manifest and the results is to the microsecond, on the real clock", async () => {
    await using sim = new SimulatedMachine({ clock: "real", speed: 200 });
    const target = sim.spawn({ memoryMiB: 64 });
    const dir = newDir();
    const made = await snapshot([target.pid], dir, { machine: sim });
    const back = await restoreSnapshot(dir, { machine: sim });
    const times = [made.ms, back.ms, ...Object.values(made.manifest.timings)];
    times.push(...Object.values(back.timings));
    const noisy = times.filter((ms) => Math.round(ms * 1000) / 1000 !== ms);
    assert.deepEqual(noisy, [], `no floating-point noise in ${times}`);
  });

  test("leaveRunning: the processes go on; the snapshot can be restored once they are gone", async () => {
    const { sim, a, pids, hashes } = await job();
    const dir = newDir();
    const made = await snapshot([pids[0]], dir, { machine: sim, leaveRunning: true });
    assert.equal(made.manifest.options.leaveRunning, true);
    assert.equal(live(sim, a.pid).state, "running");
    // Told by pidsInUse, or by identify where the host has no pidsInUse: the process has it.
    for (const host of [sim.host, hostWith(sim.host, { pidsInUse: undefined })]) {
      await refusedWith(
        restoreSnapshot(dir, { machine: machineWith(sim, { host }) }),
        "PID_TAKEN",
        new RegExp(
          `pid ${pids[0]} \\(bash run\\.sh\\) must be free .*, and process ${pids[0]} has it`,
        ),
      );
    }
    for (const pid of pids) sim.process(pid)?.exit();
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
  });

  test("the same snapshot restored twice at once: one is refused, and the other's processes live", async () => {
    // Both found the pids free (the host answers neither till both asked); each failing restore
    // then ended what the other made, as it ran the snapshot's command (on Deno at times both
    // failed, and no process was left).
    const { sim, pids, hashes, a } = await job();
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim });
    let asked: (() => void)[] | undefined = [];
    const pidsInUse = async (ids: readonly number[]) => {
      if (asked) {
        await new Promise<void>((go) => asked!.push(go) === 2 && asked!.forEach((g) => g()));
      }
      asked = undefined;
      return await sim.host.pidsInUse!(ids);
    };
    const machine = machineWith(sim, { host: hostWith(sim.host, { pidsInUse }) });
    const both = await Promise.allSettled([1, 2].map(() => restoreSnapshot(dir, { machine })));
    const back = both.flatMap((r) => r.status === "fulfilled" ? [r.value.pids] : []);
    const refused = both.flatMap((r) => r.status === "rejected" ? [r.reason] : []);
    assert.deepEqual(back, [pids], "one restored");
    assert.ok(refused[0] instanceof RefusedError && refused[0].code === "PID_TAKEN", refused[0]);
    const why = "another restore under way in this program is bringing it back";
    assert.match(refused[0].message, new RegExp(`pid ${pids[0]} must be free .*, and ${why}`));
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
  });

  test("a pid still some process's session or group is taken: refused, naming that process", async () => {
    const { sim, pids, hashes, a } = await job();
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim });
    // A process forked by the tree after its dump and not yet reaped by init keeps the tree's
    // session: the kernel gives the root's pid to no new process while it does.
    const plain = sim.host;
    const leftOver = { id: pids[0], holder: 31337, as: "session" as const };
    const host = hostWith(plain, {
      pidsInUse: (ids: readonly number[]) =>
        Promise.resolve(ids.includes(leftOver.id) ? [leftOver] : []),
    });
    await refusedWith(
      restoreSnapshot(dir, { machine: machineWith(sim, { host }) }),
      "PID_TAKEN",
      new RegExp(
        `pid ${pids[0]} \\(bash run\\.sh\\) must be free .* process 31337 still has it as its ` +
          `session \\(a process left over .* ps -o pid,stat,pgid,sid,args -p 31337\\)`,
      ),
    );
    assert.equal(sim.process(pids[0]), undefined, "nothing was made");
    await restoreSnapshot(dir, { machine: machineWith(sim, { host: plain }) });
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
  });

  test("a thread id of the snapshot's taken: refused naming that id and the pid it is a thread of", async () => {
    const { sim, a, pids } = await job();
    const dir = newDir();
    const made = await snapshot([pids[0]], dir, { machine: sim });
    const thread = made.manifest.trees[0].processes[1].threads[1];
    const pidsInUse = (ids: readonly number[]) =>
      Promise.resolve(
        ids.includes(thread) ? [{ id: thread, holder: 31337, as: "pid" as const }] : [],
      );
    const host = hostWith(sim.host, { pidsInUse });
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { host }) }).catch((e) => e);
    assert.ok(err instanceof RefusedError && err.code === "PID_TAKEN", String(err));
    assert.equal(err.pid, thread, "the id that must be free");
    assert.match(
      err.message,
      new RegExp(
        `thread id ${thread} of pid ${a.pid} \\(python rank0\\.py\\) must be free .*, and process ` +
          `31337 has it now; end that process, or restore where ${thread} is free$`,
      ),
    );
  });

  test("a host that tells pids only by identify: a thread id another process has is refused as its thread, not its pid", async () => {
    const { sim, a, pids } = await job();
    const dir = newDir();
    const made = await snapshot([pids[0]], dir, { machine: sim });
    const thread = made.manifest.trees[0].processes[1].threads[1];
    // No pidsInUse: each id is identified, and a thread id of process 31337 names that process.
    const identify = (id: number) =>
      id === thread ? Promise.resolve({ pid: 31337, start: 1 }) : sim.host.identify!(id);
    const host = hostWith(sim.host, { pidsInUse: undefined, identify });
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { host }) }).catch((e) => e);
    assert.ok(err instanceof RefusedError && err.code === "PID_TAKEN", String(err));
    assert.match(
      err.message,
      new RegExp(
        `thread id ${thread} of pid ${a.pid} \\(python rank0\\.py\\) must be free .*, and a ` +
          `thread of process 31337 has it now;`,
      ),
    );
  });

  test("a file that goes between its seal and the end: nothing is ended, all put back", async () => {
    for (const cut of [false, true]) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 256 });
      await p.write(0, new Uint8Array(1 << 20).fill(9));
      const dir = newDir(), image = join(dir, `tree-${p.pid}`, `pages-${p.pid}.img`);
      // Someone else removes (or cuts) an image as the manifest is written.
      const onProgress = (e: SnapshotEvent) => {
        if (e.type !== "phase" || e.phase !== "write") return;
        if (cut) truncateSync(image, 10);
        else rmSync(image);
      };
      const err = await snapshot([p.pid], dir, { machine: sim, onProgress }).catch((e) => e);
      assert.ok(err instanceof SnapshotError, String(err));
      assert.equal(err.code, "WRITE_FAILED");
      const whole = "its files could not be confirmed whole before the processes were ended";
      const why = cut ? new RegExp(`${whole}: .*pages-\\d+\\.img has 10 bytes`) : /missing/;
      assert.match(err.message, why);
      assert.equal(live(sim, p.pid).state, "running", "put back, not ended");
      assert.throws(() => readdirSync(dir), /ENOENT/, "the directory it made removed");
    }
  });

  test("more images than this program may hold open at once: it ends nothing, and says why", async () => {
    // A restore holds every image open until its engine is done, so the snapshot's last check
    // does too: 60 trees (180 files) under an open-file limit of 150 would make a snapshot its
    // restore cannot open. Run in a child with that limit (both runtimes raise only the soft one).
    const dir = newDir();
    const code = `import { snapshot } from ${JSON.stringify(import.meta.resolve("../mod.ts"))};
      import { SimulatedMachine } from ${JSON.stringify(import.meta.resolve("../mock/mod.ts"))};
      const sim = new SimulatedMachine();
      const pids = Array.from({ length: 60 }, () => sim.spawn({ memoryMiB: 16 }).pid);
      const err = await snapshot(pids, ${JSON.stringify(dir)}, { machine: sim }).catch((e) => e);
      const states = new Set(pids.map((pid) => sim.process(pid)?.state));
      console.log(JSON.stringify({ code: err.code, message: err.message, states: [...states] }));
      await sim.close();`;
    const eval_ = "Deno" in globalThis ? ["eval", code] : ["-e", code];
    const limited = 'ulimit -n 150 && exec "$0" "$@"';
    const run = await runProgram("bash", ["-c", limited, process.execPath, ...eval_]);
    assert.equal(run.code, 0, run.err);
    const said = JSON.parse(run.out.trim().split("\n").at(-1)!);
    assert.equal(said.code, "WRITE_FAILED", said.message);
    const whole = "its files could not be confirmed whole before the processes were ended";
    // The first open refused is a file's or a directory's listing (under load, on Deno), each named
    // by the path its user knows, not by the /proc/<pid>/fd/<n> the store reads it through.
    assert.match(said.message, new RegExp(`^snapshot failed: ${whole}: .* EMFILE: too many`));
    assert.doesNotMatch(said.message, /\/proc\/[0-9]+\/fd\//);
    assert.match(said.message, /Every process was put back as it was, and keeps running/);
    assert.deepEqual(said.states, ["running"]);
    assert.throws(() => readdirSync(dir), /ENOENT/, "the directory it made removed");
  });

  test("a CUDA process checkpointed before the snapshot comes back checkpointed", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const { CudaProcess } = await import("../mod.ts");
    await new CudaProcess(p.pid, { machine: sim }).suspend();
    const dir = newDir();
    const made = await snapshot([p.pid], dir, { machine: sim });
    const cuda = made.manifest.trees[0].processes[0].cuda!;
    assert.equal(cuda.state, "checkpointed");
    assert.ok(cuda.gpuMemoryMiB && Object.values(cuda.gpuMemoryMiB)[0] >= 1024, "from its record");
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(live(sim, p.pid).state, "checkpointed");
    // It keeps the record of what it held: a later snapshot says it, and its resume's room is
    // checked (it had none: the next manifest said null, and the resume checked nothing).
    const again = await snapshot([p.pid], newDir(), { machine: sim });
    assert.deepEqual(again.manifest.trees[0].processes[0].cuda!.gpuMemoryMiB, cuda.gpuMemoryMiB);
    await restoreSnapshot(again.dir, { machine: sim });
    const resumed = await new CudaProcess(p.pid, { machine: sim }).resume();
    assert.equal(resumed.roomCheck, "checked");
  });

  test("several trees at once; progress in phases, bytes growing, each step", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const roots = [
      sim.spawn({ memoryMiB: 4096, gpu: 0 }),
      sim.spawn({ memoryMiB: 4096, gpu: 1 }),
    ];
    const events: SnapshotEvent[] = [];
    const t0 = sim.now();
    const made = await snapshot(roots.map((r) => r.pid), newDir(), {
      machine: sim,
      onProgress: (e) => events.push(e),
    });
    const took = sim.now() - t0;
    const phases = events.filter((e) => e.type === "phase").map((e) => e.phase);
    assert.deepEqual(phases, ["check", "suspend", "dump", "write", "end"]);
    const bytes = events.filter((e) => e.type === "bytes");
    assert.deepEqual(new Set(bytes.map((e) => e.root)), new Set(roots.map((r) => r.pid)));
    for (const root of roots) {
      const mine = bytes.filter((e) => e.root === root.pid).map((e) => e.bytes);
      assert.deepEqual(mine, [...mine].sort((x, y) => x - y), "bytes only grow");
      assert.ok(mine[mine.length - 1] > 4.3e9, `a 4 GiB process's image: ${mine.at(-1)} bytes`);
    }
    assert.ok(events.some((e) => e.type === "step-start" && e.step === "checkpoint"));
    // Together, not one after another: criu's fixed cost once, then both images at the disk's
    // durable rate (4.84 s), where one dump of a 4 GiB process alone takes 2.52 s (twice: 5.04).
    assert.ok(
      made.manifest.timings.dumpMs < 5_000,
      `dump took ${made.manifest.timings.dumpMs} ms`,
    );
    assert.ok(took < 25_000, `the whole snapshot took ${took} ms`);
  });

  test("progress tells what each CUDA process holds over all its GPUs, at the suspend and the restore", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const p = sim.spawn({ memoryMiB: 1024, gpu: [0, 1] });
    const events: SnapshotEvent[] = [];
    const onProgress = (e: SnapshotEvent) => void events.push(e);
    const dir = newDir();
    const { manifest } = await snapshot([p.pid], dir, { machine: sim, onProgress });
    await restoreSnapshot(dir, { machine: sim, onProgress });
    const held = Object.values(manifest.trees[0].processes[0].cuda!.gpuMemoryMiB!);
    assert.equal(held.length, 2, "on both GPUs");
    const told = events.flatMap((e) =>
      e.type === "phase" && e.gpuMemoryMiB ? [[e.phase, e.gpuMemoryMiB[p.pid]]] : []
    );
    const sum = held[0] + held[1];
    assert.deepEqual(told, [["suspend", sum], ["restore", sum], ["resume", sum]]);
  });

  test("a progress listener that throws is ignored: the snapshot and its restore go on", async () => {
    const { sim, a, pids, hashes } = await job();
    let told = 0;
    const onProgress = () => {
      told++;
      throw new Error("the listener's own bug");
    };
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim, onProgress });
    await restoreSnapshot(dir, { machine: sim, onProgress });
    assert.ok(told > 4, `told each event: ${told}`);
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
  });

  test("each tree is dumped once its own CUDA processes are suspended, not after every tree's", async () => {
    const sim = new SimulatedMachine();
    const big = sim.spawn({ memoryMiB: 16384 });
    const small = sim.spawn({ memoryMiB: 256 });
    const events: SnapshotEvent[] = [];
    const made = await snapshot([big.pid, small.pid], newDir(), {
      machine: sim,
      onProgress: (e) => events.push(e),
    });
    const i = (found: (e: SnapshotEvent) => boolean, what: string) => {
      const at = events.findIndex(found);
      assert.ok(at >= 0, `an event: ${what}`);
      return at;
    };
    const smallDumped = i(
      (e) => e.type === "bytes" && e.root === small.pid,
      "the small tree's bytes",
    );
    const bigSuspended = i(
      (e) => e.type === "step-end" && e.pid === big.pid && e.step === "checkpoint",
      "the big process checkpointed",
    );
    assert.ok(
      smallDumped < bigSuspended,
      "the small tree's dump began while the big one was suspending",
    );
    const { suspendMs, dumpMs, totalMs } = made.manifest.timings;
    assert.ok(
      suspendMs + dumpMs > totalMs,
      `the two overlap: ${suspendMs} + ${dumpMs} > ${totalMs}`,
    );
    const ats = events.map((e) => e.at);
    assert.deepEqual(
      ats,
      [...ats].sort((x, y) => x - y),
      "every event's time counts from the snapshot's start",
    );
    assert.equal(sim.process(big.pid), undefined, "ended once dumped");
  });

  test("each tree's GPU restore begins once criu brought it back; every restore before any unlock", async () => {
    const sim = new SimulatedMachine();
    const big = sim.spawn({ memoryMiB: 16384 });
    const small = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    // Without digests: their real hashing would hold a tree back while virtual time runs on.
    const machine = machineWith(sim, { store: new FileSnapshotStore({ digests: false }) });
    await snapshot([big.pid, small.pid], dir, { machine });
    const events: SnapshotEvent[] = [];
    const back = await restoreSnapshot(dir, { machine, onProgress: (e) => events.push(e) });
    const steps = events.filter((e) => e.type === "step-start" || e.type === "step-end");
    const smallStart = steps.find((e) => e.type === "step-start" && e.pid === small.pid);
    assert.equal(smallStart?.step, "restore");
    const criuDone = back.timings.checkMs + back.timings.restoreMs;
    assert.ok(
      smallStart.at < criuDone,
      `the small process's GPU restore began at ${smallStart.at} ms, before criu's last tree at ${criuDone} ms`,
    );
    const lastRestore = steps.findLastIndex((e) => e.type === "step-end" && e.step === "restore");
    const firstUnlock = steps.findIndex((e) => e.type === "step-start" && e.step === "unlock");
    assert.ok(lastRestore >= 0 && lastRestore < firstUnlock, "every restore before any unlock");
    assert.deepEqual([live(sim, big.pid).state, live(sim, small.pid).state], [
      "running",
      "running",
    ]);
  });

  test("an engine that brings the GPU half back itself (criu's CUDA plugin): nothing left to do", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    const hash = await p.memoryChunkedSha256();
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const criu = sim.engine;
    const { CudaProcess } = await import("../mod.ts");
    const plugin = restoringWith(criu, async (r) => {
      await criu.restore(r);
      await new CudaProcess(r.root, { machine: sim }).resume(); // as the plugin does
    });
    const events: SnapshotEvent[] = [];
    await restoreSnapshot(dir, {
      machine: machineWith(sim, { engine: plugin }),
      onProgress: (e) => events.push(e),
    });
    assert.equal(live(sim, p.pid).state, "running");
    assert.equal(await live(sim, p.pid).memoryChunkedSha256(), hash);
    assert.deepEqual(events.filter((e) => e.type === "step-start"), [], "no step of its own");
  });

  test("an engine that waits till a tree can be restored (criu: a port in TIME_WAIT) is a wait event of that tree, in the checks", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const criu = sim.engine, why = "port 45265 held in TIME_WAIT on this host";
    const ready = (r: RestoreRequest) => Promise.resolve(r.onWait!(1500, why));
    const engine = { ...restoringWith(criu, (r) => criu.restore(r)), ready };
    const events: SnapshotEvent[] = [];
    await restoreSnapshot(dir, {
      machine: machineWith(sim, { engine }),
      onProgress: (e) => events.push(e),
    });
    const kinds: string[] = events.map((e) => e.type === "phase" ? e.phase : e.type);
    const wait = events.find((e) => e.type === "wait");
    assert.deepEqual(wait && { ...wait, at: 0 }, {
      type: "wait",
      root: p.pid,
      ms: 1500,
      why,
      at: 0,
    });
    const [check, waited, restore] = ["check", "wait", "restore"].map((k) => kinds.indexOf(k));
    assert.ok(check < waited && waited < restore, `in the checks: ${kinds}`);
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("an engine that cannot take one tree (criu: a port a socket holds): refused before any tree is restored", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn({ memoryMiB: 64 }), sim.spawn({ memoryMiB: 64 })];
    const dir = newDir();
    await snapshot([a.pid, b.pid], dir, { machine: sim });
    const criu = sim.engine, restored: number[] = [];
    const held = `sockets open on this host hold ports the tree of ${b.pid} binds: 8080 (LISTEN)`;
    // a's tree waits (a port in TIME_WAIT) till it is stopped; b's is refused meanwhile.
    let stopped = false;
    const waits = (r: RestoreRequest) =>
      new Promise<void>((_, reject) => {
        r.onWait!(60_000, "port 5000 held in TIME_WAIT on this host");
        r.signal!.addEventListener("abort", () => {
          stopped = true;
          reject(new EngineError("stopped while it waited"));
        });
      });
    const engine = {
      ...restoringWith(criu, (r) => (restored.push(r.root), criu.restore(r))),
      ready: (r: RestoreRequest) =>
        r.root === b.pid
          ? sim.clock.sleep(10).then(() => Promise.reject(new EngineError(held)))
          : waits(r),
    };
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine }) })
      .catch((e) => e);
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.code, "PREREQUISITE");
    assert.equal(err.message, `restoreSnapshot refused: ${held}`);
    assert.ok(stopped, "the other tree's wait was stopped");
    assert.deepEqual(restored, [], "no tree restored");
    // Once the port is free, the same snapshot comes back.
    await restoreSnapshot(dir, { machine: sim });
    assert.deepEqual([live(sim, a.pid).state, live(sim, b.pid).state], ["running", "running"]);
  });

  test("an established TCP connection: the simulated criu refuses it unless told, as criu does", async () => {
    const sim = new SimulatedMachine();
    const server = sim.spawn({ memoryMiB: 64, command: "python server.py", tcp: "listening" });
    const client = sim.spawn({ cuda: false, parent: server.pid, tcp: "established" });
    const dir = newDir();
    const err = await snapshot([server.pid], dir, { machine: sim }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "DUMP_FAILED");
    assert.match(err.message, /Connected TCP socket, consider using --tcp-established option/);
    assert.equal(err.log, undefined, "its dump.log went with the tree's directory: none named");
    assert.equal(live(sim, server.pid).state, "running", "put back");
    // Told, both ends of the connection (in the one tree) go to disk and come back with it.
    await snapshot([server.pid], dir, { machine: sim, tcpEstablished: true });
    assert.equal(sim.process(client.pid), undefined, "ended with its tree");
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(live(sim, client.pid).tcp, "established");
    assert.equal(live(sim, server.pid).tcp, "listening");
  });

  test("the signal every engine call is given ends with the call: nothing is kept listening on a caller's signal", async () => {
    // A program's own signal lives long; what hangs on a signal made from it lives as long (Deno).
    const sim = new SimulatedMachine(), p = sim.spawn({ memoryMiB: 64 });
    const given: AbortSignal[] = [], criu = sim.engine;
    const engine = {
      kind: criu.kind,
      probe: () => criu.probe(),
      stop: (pids: readonly number[]) => criu.stop(pids),
      kill: (pids: readonly number[]) => criu.kill(pids),
      dump: (r: Parameters<typeof criu.dump>[0]) => (given.push(r.signal!), criu.dump(r)),
      restore: (r: Parameters<typeof criu.restore>[0]) => (given.push(r.signal!), criu.restore(r)),
    };
    const machine = machineWith(sim, { engine }),
      dir = newDir(),
      signal = new AbortController().signal;
    await snapshot([p.pid], dir, { machine, signal });
    await restoreSnapshot(dir, { machine, signal });
    assert.equal(given.length, 2);
    assert.deepEqual(given.map((s) => s.aborted), [true, true], "each ended with its operation");
    assert.equal(signal.aborted, false, "the caller's own is not");
  });

  test("tcpEstablished reaches the engine's dump, the manifest and the engine's restore", async () => {
    for (const tcpEstablished of [false, true]) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 64 });
      const asked: string[] = [];
      const criu = sim.engine;
      const engine = {
        kind: criu.kind,
        probe: () => criu.probe(),
        stop: (pids: readonly number[]) => criu.stop(pids),
        kill: (pids: readonly number[]) => criu.kill(pids),
        dump: (r: Parameters<typeof criu.dump>[0]) => {
          asked.push(`dump ${r.tcpEstablished === true}`);
          return criu.dump(r);
        },
        restore: (r: Parameters<typeof criu.restore>[0]) => {
          asked.push(`restore ${r.tcpEstablished === true}`);
          return criu.restore(r);
        },
      };
      const machine = machineWith(sim, { engine });
      const dir = newDir();
      const { manifest } = await snapshot([p.pid], dir, { machine, tcpEstablished });
      assert.equal(manifest.options.tcpEstablished, tcpEstablished ? true : undefined);
      await restoreSnapshot(dir, { machine });
      assert.deepEqual(asked, [`dump ${tcpEstablished}`, `restore ${tcpEstablished}`]);
    }
  });

  test("a job's snapshot checkpoints nothing while a lock hangs; without job, the other rank is", async () => {
    for (const asJob of [false, true]) {
      const { sim, a, b, pids } = await job();
      const mark = sim.driver.calls.length;
      const release = a.hangNext("lock");
      const taking = snapshot([pids[0]], newDir(), { machine: sim, job: asJob });
      // Until b is locked: the suspend has begun, and a's lock hangs. The snapshot's directory is
      // real, so real time passes too.
      for (let i = 0; i < 400 && b.state === "running"; i++) {
        await sim.sleep(100);
        await new Promise((r) => setTimeout(r, 5));
      }
      assert.equal(b.state === "running", false, "b was locked");
      await sim.sleep(5_000);
      const meanwhile = sim.driver.calls.slice(mark).filter((c) => c.op === "checkpoint").length;
      assert.equal(a.state, "running", "a's lock still hangs");
      release();
      const taken = await taking;
      assert.equal(taken.manifest.options.job, asJob);
      assert.equal(meanwhile, asJob ? 0 : 1, asJob ? "no checkpoint while a lock hangs" : "b was");
    }
  });

  test("a job: every lock before any checkpoint, and at restore every restore before any unlock", async () => {
    const { sim, a, pids } = await job();
    const dir = newDir();
    // One lock waits for a kernel: without the job, the other's checkpoint would come before it.
    void a.launch(2000);
    const mark = sim.driver.calls.length;
    await snapshot([pids[0]], dir, { machine: sim, job: true });
    const calls = sim.driver.calls.slice(mark);
    const lastLock = Math.max(...calls.filter((c) => c.op === "lock").map((c) => c.at));
    const firstCheckpoint = Math.min(
      ...calls.filter((c) => c.op === "checkpoint").map((c) => c.started),
    );
    assert.ok(lastLock <= firstCheckpoint);
    const mark2 = sim.driver.calls.length;
    const back = await restoreSnapshot(dir, { machine: sim });
    assert.equal(back.manifest.options.job, true);
    const calls2 = sim.driver.calls.slice(mark2);
    const lastRestore = Math.max(...calls2.filter((c) => c.op === "restore").map((c) => c.at));
    const firstUnlock = Math.min(...calls2.filter((c) => c.op === "unlock").map((c) => c.started));
    assert.ok(lastRestore <= firstUnlock);
    // Left running, the job is resumed as one too (1 GiB and 2 GiB: apart, the first's unlock
    // would come while the other still restores).
    const mark3 = sim.driver.calls.length;
    await snapshot([pids[0]], newDir(), { machine: sim, job: true, leaveRunning: true });
    const calls3 = sim.driver.calls.slice(mark3);
    const restored = Math.max(...calls3.filter((c) => c.op === "restore").map((c) => c.at));
    const unlocked = Math.min(...calls3.filter((c) => c.op === "unlock").map((c) => c.started));
    assert.equal(calls3.filter((c) => c.op === "unlock").length, 2, "both resumed");
    assert.ok(restored <= unlocked, `the last restore ${restored}, the first unlock ${unlocked}`);
  });
});

describe("refused before anything changes", () => {
  test("a snapshot on a driver without the checkpoint API: refused before any process is asked", async () => {
    const old = new SimulatedMachine({ driverVersion: 12040 });
    const p = old.spawn({ memoryMiB: 1024 });
    const err = await snapshot([p.pid], newDir(), { machine: old }).catch((e) => e);
    assert.ok(err instanceof CheckpointUnsupportedError, String(err));
    assert.match(err.message, /^snapshot refused: .*cuCheckpointProcessGetState/);
    assert.equal(old.driver.calls.length, 0, "no driver call");
    assert.equal(live(old, p.pid).state, "running");
  });

  test("a snapshot: a locked process, no such pid, a tree inside another, criu missing", async () => {
    const { sim, a, pids } = await job();
    await sim.driver.lock(a.pid, null);
    const dir = newDir();
    await refusedWith(
      snapshot([pids[0]], dir, { machine: sim }),
      "STATE",
      /its CUDA state is locked; a snapshot takes processes that are running or checkpointed/,
    );
    await sim.driver.unlock(a.pid);
    assert.throws(() => statSync(dir), "no directory was made");
    await refusedWith(
      snapshot([999_999], dir, { machine: sim }),
      "PREREQUISITE",
      /no process has pid 999999/,
    );
    const thread = sim.process(pids[0])!.threads[1];
    await refusedWith(
      snapshot([thread], dir, { machine: sim }),
      "PREREQUISITE",
      new RegExp(`^snapshot refused: ${thread} is a thread of process ${pids[0]}, not a process`),
    );
    // The message names the root inside first, then the tree that holds it.
    const inside = `process ${a.pid} is in the tree of ${pids[0]}; give the root of each tree once`;
    await refusedWith(
      snapshot([pids[0], a.pid], dir, { machine: sim }),
      "PREREQUISITE",
      new RegExp(`^snapshot refused: ${inside}$`),
    );
    const engine = new SimulatedCriu(sim, { problems: ["criu is not installed (simulated)."] });
    await refusedWith(
      snapshot([pids[0]], dir, { machine: machineWith(sim, { engine }) }),
      "PREREQUISITE",
      /simulated criu cannot work here: criu is not installed \(simulated\)\./,
    );
    assert.ok(sim.processes.every((p) => p.state === "running" || !p.usesCuda));
    assert.equal(
      sim.driver.calls.filter((c) => c.op === "lock").length,
      1,
      "only the test's own lock",
    );
  });

  test("a CUDA state this version does not know (a newer driver's): refused naming it, nothing made", async () => {
    // Not taken for a process without CUDA: that would dump a CUDA process never checkpointed.
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    p.answerNext("getState", { value: 9 });
    const dir = newDir();
    const err = await snapshot([p.pid], dir, { machine: sim }).catch((e) => e);
    assert.ok(err instanceof RangeError, String(err));
    assert.match(err.message, new RegExp(`^getState of process ${p.pid} gave state 9, which`));
    assert.throws(() => statSync(dir), "no directory was made");
    assert.equal(sim.driver.calls.filter((c) => c.op === "lock").length, 0, "nothing suspended");
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("refused for one reason while the engine's probe fails for another: no rejection left unhandled", async () => {
    // The probe and the GPU list are asked at once, awaited after other checks that may refuse.
    const sim = new SimulatedMachine();
    const engine = new SimulatedCriu(sim, { problems: ["criu is not installed (simulated)."] });
    const listGpus = () => Promise.reject(new Error("NVML went away"));
    const machine = { ...machineWith(sim, { engine }), driver: forward(sim, { listGpus }).driver };
    const refusals = [
      refusedWith(snapshot([999_999], newDir(), { machine }), "PREREQUISITE", /no process has pid/),
      refusedWith(restoreSnapshot(newDir(), { machine }), "SNAPSHOT", /does not exist/),
    ];
    for (const refused of refusals) await refused;
    await new Promise((resolve) => setTimeout(resolve, 0)); // a rejection left unhandled fails here
  });

  test("a machine without a snapshot engine, store, or process trees: refused, saying which", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const cases: [Partial<Machine>, string][] = [
      [{ engine: undefined }, "this simulated machine has no snapshot engine (criu)"],
      [{ store: undefined }, "this simulated machine has no snapshot store"],
      [
        { host: hostWith(sim.host, { processTree: undefined }) },
        "the simulated host cannot tell process trees, which a snapshot needs",
      ],
    ];
    for (const [missing, reason] of cases) {
      const dir = newDir();
      const machine = machineWith(sim, missing);
      const said = new RegExp(`: ${reason.replace(/[()]/g, "\\$&")}$`);
      await refusedWith(snapshot([p.pid], dir, { machine }), "PREREQUISITE", said);
      await refusedWith(restoreSnapshot(dir, { machine }), "PREREQUISITE", said);
      assert.throws(() => statSync(dir), "no directory was made");
    }
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("a host that lists an empty tree for a root, or none for a pid that is a process's own: no such process", async () => {
    // HostProcesses is a seam others implement: an empty list is no tree, as undefined is, and a
    // pid the host identifies as its own process is not said to be a thread of itself.
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const cases = [
      hostWith(sim.host, { processTree: () => Promise.resolve([]) }),
      hostWith(sim.host, {
        processTree: () => Promise.resolve(undefined),
        identify: (id) => Promise.resolve({ pid: id }),
      }),
    ];
    for (const host of cases) {
      const dir = newDir();
      const err = await snapshot([p.pid], dir, { machine: machineWith(sim, { host }) })
        .catch((e) => e);
      assert.ok(err instanceof RefusedError, String(err));
      assert.equal(err.code, "PREREQUISITE", err.message);
      assert.match(err.message, new RegExp(`^snapshot refused: no process has pid ${p.pid} `));
      assert.throws(() => statSync(dir), "no directory was made");
    }
    assert.equal(sim.driver.calls.filter((c) => c.op === "lock").length, 0, "nothing suspended");
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("a snapshot of a stopped CUDA process is refused (the driver would wait); a stopped process without CUDA comes back running", async () => {
    const { sim, a, c, pids, hashes } = await job();
    await sim.engine.stop([a.pid]);
    const dir = newDir(), mark = sim.driver.calls.length;
    await refusedWith(
      snapshot([pids[0]], dir, { machine: sim }),
      "STATE",
      new RegExp(`^snapshot of process ${a.pid} refused: it is stopped \\(SIGSTOP.*kill -CONT`),
    );
    const steps = sim.driver.calls.slice(mark).filter((x) => x.op !== "getRestoreThreadId");
    assert.deepEqual(steps.filter((x) => x.pid === a.pid), [], "only its restore thread asked");
    assert.throws(() => statSync(dir), "no directory was made");
    await sim.engine.wake([a.pid]);
    await sim.engine.stop([c.pid]);
    await snapshot([pids[0]], dir, { machine: sim });
    await restoreSnapshot(dir, { machine: sim });
    assert.deepEqual([live(sim, a.pid).state, live(sim, c.pid).stopped], ["running", false]);
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
  });

  test("a snapshot: a directory that is not empty, or that others may write in", async () => {
    const { sim, pids } = await job();
    const dir = newDir();
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(join(dir, "x"), "x");
    await refusedWith(snapshot([pids[0]], dir, { machine: sim }), "SNAPSHOT", /is not empty/);
    assert.ok(sim.processes.every((p) => p.state === "running"));
    // An empty one others may read is taken, and made private as a new one is.
    const open = newDir();
    mkdirSync(open, { mode: 0o755 });
    chmodSync(open, 0o755);
    await snapshot([pids[0]], open, { machine: sim });
    assert.equal(statSync(open).mode & 0o777, 0o700);
  });

  test("a snapshot whose tree directory cannot be made: refused, what it made removed, nothing suspended", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const files = new FileSnapshotStore();
    const store: SnapshotStore = {
      open: (dir) => files.open(dir),
      create: async (dir) =>
        new Proxy(await files.create(dir), {
          get(target, key) {
            if (key === "subdir") {
              return () => Promise.reject(new Error("no space left (simulated)"));
            }
            const value = Reflect.get(target, key);
            return typeof value === "function" ? value.bind(target) : value;
          },
        }),
    };
    const dir = newDir();
    await refusedWith(
      snapshot([p.pid], dir, { machine: machineWith(sim, { store }) }),
      "SNAPSHOT",
      /cannot hold a snapshot: no space left \(simulated\)/,
    );
    assert.throws(() => statSync(dir), /ENOENT/, "the directory and its trace were removed");
    assert.equal(sim.driver.calls.filter((c) => c.op === "lock").length, 0, "nothing suspended");
    assert.equal(live(sim, p.pid).state, "running");
  });

  test("bad input names the value", async () => {
    const sim = new SimulatedMachine();
    await assert.rejects(
      snapshot([], newDir(), { machine: sim }),
      /roots must be a non-empty array.*, got an empty array/,
    );
    await assert.rejects(
      snapshot([5, 5], newDir(), { machine: sim }),
      /roots names pid 5 twice/,
    );
    await assert.rejects(snapshot([5], "", { machine: sim }), /dir must be a path.*got ""/);
    await assert.rejects(snapshot([5], "   ", { machine: sim }), /dir must be a path.*got " {3}"/);
    await assert.rejects(
      snapshot([5], "/tmp/a\0b", { machine: sim }),
      /dir must be a path \(a non-empty string without NUL\), got "\/tmp\/a\\u0000b"/,
    );
    await assert.rejects(
      snapshot([5], newDir(), { machine: sim, leaveRuning: true } as never),
      /snapshot has no option "leaveRuning" \(did you mean "leaveRunning"\?\)/,
    );
    await assert.rejects(
      restoreSnapshot(newDir(), { machine: sim, gpuMapping: "0=1" } as never),
      /gpuMapping must be an object or Map/,
    );
    // Its options are checked before its directory, as a snapshot's are: a misspelt one is named.
    for (const take of [false, true]) {
      const bad = { machine: sim, checkRom: false } as never;
      await assert.rejects(
        take ? snapshot([5], "", bad) : restoreSnapshot("", bad),
        /has no option "checkRom"/,
        take ? "snapshot" : "restoreSnapshot",
      );
    }
  });

  describe("a restore", () => {
    async function taken() {
      const { sim, pids, a } = await job();
      const dir = newDir();
      await snapshot([pids[0]], dir, { machine: sim });
      return { sim, dir, pids, a };
    }

    test("no manifest, a corrupt one, a foreign one: not a snapshot, and why", async () => {
      const { sim, dir } = await taken();
      const text = readFileSync(join(dir, MANIFEST_FILE), "utf8");
      writeFileSync(join(dir, MANIFEST_FILE), text.slice(0, 100));
      await refusedWith(restoreSnapshot(dir, { machine: sim }), "SNAPSHOT", /not JSON.*truncated/);
      writeFileSync(join(dir, MANIFEST_FILE), JSON.stringify({ format: "other/1" }));
      await refusedWith(restoreSnapshot(dir, { machine: sim }), "SNAPSHOT", /format "other\/1"/);
      rmSync(join(dir, MANIFEST_FILE));
      await refusedWith(
        restoreSnapshot(dir, { machine: sim }),
        "SNAPSHOT",
        /has no manifest\.json/,
      );
      assert.equal(sim.processes.length, 0, "nothing was made");
    });

    test("an image file truncated or missing", async () => {
      const { sim, dir, pids } = await taken();
      const tree = join(dir, `tree-${pids[0]}`);
      const image = readdirSync(tree).find((n) => n.endsWith(".img"))!;
      const size = statSync(join(tree, image)).size;
      truncateSync(join(tree, image), size - 10);
      await refusedWith(
        restoreSnapshot(dir, { machine: sim }),
        "SNAPSHOT",
        new RegExp(`${image} has ${size - 10} bytes where the manifest says ${size}`),
      );
      rmSync(join(tree, image));
      await refusedWith(restoreSnapshot(dir, { machine: sim }), "SNAPSHOT", /is missing/);
    });

    test("a memory image with a byte changed that criu cannot read: refused for its digest", async () => {
      const { sim, dir, pids } = await taken();
      const tree = join(dir, `tree-${pids[0]}`);
      const image = readdirSync(tree).find((n) => n.startsWith("pages-"))!;
      const bytes = readFileSync(join(tree, image));
      bytes[1] ^= 0xff; // the simulated criu reads it no more (its JSON is broken), nor would criu
      writeFileSync(join(tree, image), bytes);
      await refusedWith(
        restoreSnapshot(dir, { machine: sim }),
        "SNAPSHOT",
        new RegExp(`${image} is not the file the snapshot wrote`),
      );
      assert.equal(sim.processes.length, 0, "no process is left");
    });

    test("a directory given through a symbolic link, or that others may write in", async () => {
      const { sim, dir } = await taken();
      symlinkSync(dir, `${dir}-link`);
      await refusedWith(
        restoreSnapshot(`${dir}-link`, { machine: sim }),
        "SNAPSHOT",
        /is a symbolic link/,
      );
      chmodSync(dir, 0o777);
      await refusedWith(
        restoreSnapshot(dir, { machine: sim }),
        "SNAPSHOT",
        /may be written by other users \(mode 0777\); a snapshot.s directory must be this user.s and private/,
      );
    });

    test("another driver, and no room", async () => {
      const { sim, dir } = await taken();
      const other = new SimulatedMachine({ gpus: 2, driverVersion: 12080 });
      await refusedWith(
        restoreSnapshot(dir, { machine: other }),
        "PREREQUISITE",
        /taken with a driver of CUDA 13\.0 \(580\.159\.04\), and this machine's is CUDA 12\.8/,
      );
      // A newer driver too: the process comes back with the libcuda it had, the snapshot's.
      await refusedWith(
        restoreSnapshot(dir, { machine: new SimulatedMachine({ gpus: 2, driverVersion: 13010 }) }),
        "PREREQUISITE",
        /taken with a driver of CUDA 13\.0 \(580\.159\.04\), and this machine's is CUDA 13\.1/,
      );
      const filler = sim.fillGpu(0, { leaveMiB: 1024 });
      await refusedWith(
        restoreSnapshot(dir, { machine: sim }),
        "NO_ROOM",
        /need \d+ MiB on GPU-\S+, which has 1024 MiB free/,
      );
      assert.deepEqual(sim.processes.map((p) => p.pid), [filler.pid], "nothing was made");
      filler.exit();
      await restoreSnapshot(dir, { machine: sim });
    });

    test("a driver that cannot tell its version is no other driver: the restore goes on", async () => {
      const { sim, dir, a } = await taken();
      const machine = forward(sim, {
        listGpus: () => sim.driver.listGpus!(),
        driverVersion: () => Promise.resolve({ code: 3, value: 0 }), // CUDA_ERROR_NOT_INITIALIZED
      });
      await restoreSnapshot(dir, { machine });
      assert.equal(live(sim, a.pid).state, "running");
    });

    test("an abort while the engine waits till a tree can be restored is a stop before it began", async () => {
      const { sim, dir } = await taken();
      const controller = new AbortController();
      let restores = 0;
      // A port in TIME_WAIT: the engine waits, stopped only by the restore's signal.
      const ready = (r: RestoreRequest) =>
        new Promise<void>((_, reject) => {
          r.signal!.addEventListener(
            "abort",
            () => reject(new EngineError("stopped as it waited")),
          );
          r.onWait!(60_000, "port 5000 held in TIME_WAIT on this host");
        });
      const engine = {
        ...restoringWith(sim.engine, (r) => (restores++, sim.engine.restore(r))),
        ready,
      };
      const onProgress = (e: SnapshotEvent) => e.type === "wait" && controller.abort();
      const err = await restoreSnapshot(dir, {
        machine: machineWith(sim, { engine }),
        signal: controller.signal,
        onProgress,
      }).catch((e) => e);
      assert.ok(err instanceof SnapshotError, String(err));
      assert.equal(err.code, "STOPPED", err.message);
      assert.match(err.message, /^restore stopped before it began: it was aborted/);
      assert.equal(restores, 0, "criu was never asked");
      assert.equal(sim.processes.length, 0);
    });

    test("the engine's wait among the checks counts in checkMs, not in restoreMs", async () => {
      const { sim, dir } = await taken();
      const engine = {
        ...restoringWith(sim.engine, (r) => sim.engine.restore(r)),
        ready: () => sim.sleep(1500), // a port in TIME_WAIT for 1.5 s
      };
      const back = await restoreSnapshot(dir, { machine: machineWith(sim, { engine }) });
      const t = back.timings;
      assert.ok(t.checkMs >= 1500, `the wait is a check: ${JSON.stringify(t)}`);
      assert.ok(
        t.checkMs + t.restoreMs <= back.ms + 1e-6,
        `criu's part counts from the checks' end: ${JSON.stringify(t)} of ${back.ms}`,
      );
    });

    test("a restore of several trees tells each phase once: check, restore, resume", async () => {
      const sim = new SimulatedMachine();
      const pids = [sim.spawn({ memoryMiB: 256 }).pid, sim.spawn({ memoryMiB: 512 }).pid];
      const dir = newDir();
      await snapshot(pids, dir, { machine: sim });
      const phases: string[] = [];
      const onProgress = (e: SnapshotEvent) => void (e.type === "phase" && phases.push(e.phase));
      await restoreSnapshot(dir, { machine: sim, onProgress });
      assert.deepEqual(phases, ["check", "restore", "resume"]);
    });
  });
});

describe("failures after things began to change", () => {
  /** `sim` whose host tells each process's start from `starts` (1 where unset): a pid reused. */
  const withStarts = (sim: SimulatedMachine, starts: Map<number, number>) => {
    const identify = async (id: number) => {
      const found = await sim.host.identify!(id);
      return found && { pid: found.pid, start: starts.get(found.pid) ?? 1 };
    };
    return machineWith(sim, { host: hostWith(sim.host, { identify }) });
  };

  test("a tree's root ended while suspended, its pid another's now: no dump of that one, every process put back", async () => {
    const { sim, root, a, b, pids } = await job();
    const starts = new Map<number, number>(), dir = newDir();
    const onProgress = (e: SnapshotEvent) =>
      e.type === "phase" && e.phase === "suspend" && starts.set(root.pid, 2);
    const err = await snapshot([root.pid], dir, { machine: withStarts(sim, starts), onProgress })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "DUMP_FAILED");
    assert.match(
      err.message,
      new RegExp(`process ${root.pid}, the root of a tree, ended before its dump`),
    );
    assert.match(err.message, /Every process was put back as it was, and keeps running/);
    assert.deepEqual(pids.map((pid) => live(sim, pid).pid), pids, "none ended");
    assert.deepEqual([a, b].map((p) => p.state), ["running", "running"]);
  });

  test("a process its tree forks as the tree is ended is ended too, not left running", async () => {
    // Each round of the end stops what the tree holds now, until a round finds no process new.
    const { sim, root, pids } = await job();
    let late: SimulatedProcess | undefined;
    const engine = engineWith(sim.engine, {
      stop: (stopping) => {
        late ??= sim.spawn({ parent: root.pid, cuda: false, command: "late" }); // forked before it
        return sim.engine.stop(stopping);
      },
    });
    await snapshot([pids[0]], newDir(), { machine: machineWith(sim, { engine }) });
    assert.ok(late, "the end stopped the tree");
    for (const pid of [...pids, late.pid]) {
      assert.equal(sim.process(pid), undefined, `${pid} ended`);
    }
  });

  test("it resolves once the ended processes' pids are free: a killed process holds its pid till reaped", async () => {
    // A restore right after it would otherwise find its pids taken.
    const { sim, pids } = await job();
    let unreaped = 0;
    const engine = engineWith(sim.engine, {
      kill: (killing) => (unreaped = 2, sim.engine.kill(killing)),
    });
    const pidsInUse = (ids: readonly number[]) => {
      if (unreaped === 0) return sim.host.pidsInUse!(ids);
      unreaped--;
      return Promise.resolve([{ id: ids[0], holder: ids[0], as: "pid" as const }]);
    };
    const host = hostWith(sim.host, { pidsInUse });
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: machineWith(sim, { engine, host }) });
    assert.equal(unreaped, 0, "it asked till the pids were free");
    await restoreSnapshot(dir, { machine: sim });
  });

  test("a tree the host cannot read at the end (its root exiting): its dumped processes are ended", async () => {
    const { sim, pids } = await job();
    let ending = false;
    const processTree = (root: number) =>
      ending ? Promise.reject(new Error(`ESRCH: ${root}`)) : sim.host.processTree!(root);
    const machine = machineWith(sim, { host: hostWith(sim.host, { processTree }) });
    await snapshot([pids[0]], newDir(), {
      machine,
      onProgress: (e) => ending ||= e.type === "phase" && e.phase === "end",
    });
    assert.ok(ending);
    for (const pid of pids) assert.equal(sim.process(pid), undefined, `${pid} ended`);
  });

  test("a host that cannot identify processes: the tree is ended all the same", async () => {
    const { sim, pids } = await job();
    const host = hostWith(sim.host, { identify: undefined });
    await snapshot([pids[0]], newDir(), { machine: machineWith(sim, { host }) });
    for (const pid of pids) assert.equal(sim.process(pid), undefined, `${pid} ended`);
  });

  test("a dumped pid another process has as a thread id by the end: that process is not ended", async () => {
    const { sim, root, c } = await job();
    const other = sim.spawn({ cuda: false, command: "another user's" });
    const [dir, threadOf] = [newDir(), new Map<number, number>()];
    const identify = (id: number) => sim.host.identify!(threadOf.get(id) ?? id);
    const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
    // As the dump begins, c's pid is taken for a thread of another process (as after pids wrap).
    const onProgress = (e: SnapshotEvent) =>
      e.type === "phase" && e.phase === "dump" && threadOf.set(c.pid, other.pid);
    await snapshot([root.pid], dir, { machine, onProgress });
    assert.equal(live(sim, other.pid).pid, other.pid, "the other process runs on");
    assert.equal(sim.process(c.pid), undefined, "c, of the tree, ended");
  });

  test("a dumped process whose pid another took before the end (the root): it runs on, the rest end", async () => {
    const { sim, root, a, b, c } = await job();
    const starts = new Map<number, number>(), dir = newDir();
    const onProgress = (e: SnapshotEvent) =>
      e.type === "phase" && e.phase === "write" && starts.set(root.pid, 2);
    await snapshot([root.pid], dir, { machine: withStarts(sim, starts), onProgress });
    assert.equal(live(sim, root.pid).pid, root.pid, "the process with the root's pid runs on");
    for (const p of [a, b, c]) assert.equal(sim.process(p.pid), undefined, `${p.pid} ended`);
  });

  test("a manifest larger than a restore reads (a million threads): refused before it is written, every process put back", async () => {
    const sim = new SimulatedMachine();
    const root = sim.spawn({ cuda: false });
    const rank = sim.spawn({ parent: root.pid, memoryMiB: 64 });
    for (let i = 0; i < 9; i++) sim.spawn({ parent: root.pid, cuda: false, extraThreads: 100_000 });
    const dir = newDir();
    const err = await snapshot([root.pid], dir, { machine: sim }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "WRITE_FAILED");
    assert.match(
      err.message,
      /manifest could not be written: \d+ bytes, more than a restore reads \(16777216\)/,
    );
    assert.equal(rank.state, "running");
    assert.equal(sim.processes.length, 11, "none ended");
  });

  test("a failed dump puts every process back, running, memory intact; no manifest", async () => {
    const { sim, a, b, pids, hashes } = await job();
    const dir = newDir();
    sim.engine.failNext("dump", { message: "Can't dump file 7 (simulated)" });
    const err = await snapshot([pids[0]], dir, { machine: sim }).catch((e) => e);
    assert.ok(err instanceof SnapshotError);
    assert.equal(err.code, "DUMP_FAILED");
    assert.match(err.message, /Can't dump file 7 \(simulated\)/);
    assert.match(err.message, /Every process was put back as it was, and keeps running/);
    assert.equal(live(sim, a.pid).state, "running");
    assert.equal(live(sim, b.pid).state, "running");
    assert.deepEqual([await a.memoryChunkedSha256(), await b.memoryChunkedSha256()], hashes);
    assert.throws(() => statSync(join(dir, MANIFEST_FILE)));
    assert.equal(err.log, undefined, "the dump's log went with the directory: none named");
    // A rollback that cannot resume keeps the directory: the log named is the one there.
    sim.engine.failNext("dump", { message: "Can't dump file 8 (simulated)" });
    a.failNext("restore", { code: 2 });
    const kept = await snapshot([pids[0]], dir, { machine: sim }).catch((e) => e);
    assert.ok(kept instanceof SnapshotError && kept.code === "DUMP_FAILED", String(kept));
    assert.match(kept.message, /could not all be resumed/);
    assert.equal(kept.log, join(dir, `tree-${pids[0]}`, "dump.log"));
    assert.match(readFileSync(kept.log!, "utf8"), /Error: Can't dump file 8 \(simulated\)/);
  });

  test("an abort while it checks its files at its end (the manifest written) still puts all back", async () => {
    // Before, the stop was asked before that check's wait: a Ctrl-C in it was let pass, and the
    // processes were ended (the command line said "the interrupt came too late", exit 0).
    const { sim, a, b, pids, hashes } = await job();
    const controller = new AbortController(), files = new FileSnapshotStore();
    const store: SnapshotStore = {
      open: (dir) => files.open(dir),
      create: async (dir) =>
        new Proxy(await files.create(dir), {
          get(target, key) {
            if (key !== "check") return Reflect.get(target, key)?.bind?.(target);
            return (...args: Parameters<SnapshotDir["check"]>) => {
              controller.abort();
              return target.check(...args);
            };
          },
        }),
    };
    const dir = newDir();
    const machine = machineWith(sim, { store });
    const err = await snapshot([pids[0]], dir, { machine, signal: controller.signal })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "STOPPED");
    assert.match(err.message, /snapshot stopped at its end: it was aborted/);
    assert.deepEqual([live(sim, a.pid).state, live(sim, b.pid).state], ["running", "running"]);
    assert.deepEqual([await a.memoryChunkedSha256(), await b.memoryChunkedSha256()], hashes);
    assert.throws(() => statSync(join(dir, MANIFEST_FILE)));
  });

  test("an abort during the dump, and a deadline, stop it and put everything back", async () => {
    const { sim, a, pids } = await job();
    // Aborted as the dump begins (a sleep of 2.5 s, before, stopped it in the suspend).
    const controller = new AbortController();
    const atDump = (e: SnapshotEvent) => {
      if (e.type === "phase" && e.phase === "dump") controller.abort();
    };
    const running = snapshot([pids[0]], newDir(), {
      machine: sim,
      signal: controller.signal,
      onProgress: atDump,
    });
    const err = await running.catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "STOPPED");
    // The message says where it was stopped: in the dump, not while suspending.
    assert.match(err.message, /^snapshot stopped while dumping: it was aborted/);
    assert.equal(live(sim, a.pid).state, "running");
    // Stopped as its CUDA processes are suspended (before any dump began): said so.
    const early = new AbortController();
    const onProgress = (e: SnapshotEvent) => {
      if (e.type === "phase" && e.phase === "suspend") early.abort();
    };
    const into = newDir();
    const first = await snapshot([pids[0]], into, {
      machine: sim,
      signal: early.signal,
      onProgress,
    })
      .catch((e) => e);
    assert.ok(first instanceof SnapshotError, String(first));
    assert.equal(first.code, "STOPPED", first.message);
    assert.match(
      first.message,
      /^snapshot stopped while suspending its CUDA processes: it was aborted/,
    );
    assert.equal(live(sim, a.pid).state, "running");
    assert.throws(() => statSync(into), "what it wrote was removed");

    const late = await snapshot([pids[0]], newDir(), { machine: sim, timeoutMs: 3_000 })
      .catch((e) => e);
    assert.ok(late instanceof SnapshotError, String(late));
    assert.equal(late.code, "STOPPED");
    assert.match(late.message, /deadline passed/);
    assert.ok(sim.processes.filter((p) => p.usesCuda).every((p) => p.state === "running"));
    // 0 is no deadline (as for a lock), for the snapshot and its restore alike.
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim, timeoutMs: 0 });
    await restoreSnapshot(dir, { machine: sim, timeoutMs: 0 });
    assert.equal(live(sim, a.pid).state, "running");
  });

  test("a snapshot behind another call on one of its processes ends at its deadline, STOPPED, that one untouched", async () => {
    // Its deadline's timer may fire a hair before the clock says it passed (the simulator's real
    // clock does): before, that said "it was aborted" (SUSPEND_FAILED). And its rollback resumed
    // the process its suspend never started on, waiting for the other call to end first.
    for (const [early, job] of [[0, false], [1, false], [0, true], [1, true]] as const) {
      const how = `early ${early}, job ${job}`;
      const sim = new SimulatedMachine();
      const timer = (ms: number, fn: () => void) => sim.clock.timer!(ms - early, fn);
      const machine = machineWith(sim, { clock: { ...sim.clock, timer } });
      const [a, b] = [sim.spawn({ memoryMiB: 64 }), sim.spawn({ memoryMiB: 64 })];
      let release = () => {};
      const holder = new Handle(a.pid, machine); // another operation of this program on a
      const busy = holder.ordered(() => new Promise<void>((r) => release = r)); // holds its turn
      let suspending = () => {};
      const inSuspend = new Promise<void>((r) => suspending = r);
      const onProgress = (e: SnapshotEvent) =>
        e.type === "phase" && e.phase === "suspend" && suspending();
      const made = snapshot([a.pid, b.pid], newDir(), { machine, timeoutMs: 1000, onProgress, job })
        .catch((e) => e);
      await inSuspend; // its checks read and write files, which take no virtual time
      await sim.sleep(3000); // past its deadline (whose timer moves no virtual time)
      // Before, its rollback waited for a's turn, taken only once released: it never ended.
      const ended = await settlesWithin(made, 10_000); // a real-time bound, not a speed goal
      assert.ok(ended, `${how}: it ended while the other call held a's turn`);
      const err = await made;
      assert.ok(err instanceof SnapshotError, String(err));
      assert.equal(err.code, "STOPPED", `${how}: ${err.message}`);
      assert.match(err.message, /deadline passed/);
      const before = sim.driver.calls.length;
      release();
      await busy;
      await sim.sleep(100);
      await holder.close();
      assert.deepEqual(sim.driver.calls.slice(before), [], `${how}: nothing more made`);
      assert.deepEqual([a.state, b.state], ["running", "running"], how);
    }
  });

  test("every engine call is given the time left of the snapshot's, and of the restore's, deadline", async () => {
    const { sim, pids } = await job();
    const given: [string, number | undefined][] = [];
    const engine = engineWith(sim.engine, {
      dump: (r) => (given.push(["dump", r.timeoutMs]), sim.engine.dump(r)),
      restore: (r) => (given.push(["restore", r.timeoutMs]), sim.engine.restore(r)),
    });
    const machine = machineWith(sim, { engine }), dir = newDir();
    await snapshot([pids[0]], dir, { machine, timeoutMs: 600_000 });
    await restoreSnapshot(dir, { machine, timeoutMs: 500_000 });
    assert.deepEqual(given.map(([call]) => call), ["dump", "restore"]);
    const [dump, restore] = given.map(([, ms]) => ms ?? 0);
    assert.ok(dump > 0 && dump <= 600_000 && restore > 0 && restore <= 500_000, `${given}`);
  });

  test("a deadline's timer is let go once the snapshot, or the restore, is over", async () => {
    // Else a program that gave a long deadline would be kept alive till it passed.
    const { sim, pids } = await job();
    let pending = 0;
    const clock = {
      ...sim.clock,
      timer: (ms: number, fn: () => void) => {
        pending++;
        const cancel = sim.clock.timer!(ms, fn);
        return () => (pending--, cancel());
      },
    };
    const machine = machineWith(sim, { clock }), dir = newDir();
    await snapshot([pids[0]], dir, { machine, timeoutMs: 3_600_000 });
    assert.equal(pending, 0, "the snapshot's");
    await restoreSnapshot(dir, { machine, timeoutMs: 3_600_000 });
    assert.equal(pending, 0, "the restore's");
  });

  test("a clock with no timer of its own gets no real one: only the steps check its deadline", async () => {
    // This clock's time stands still, so its deadline of 20 ms never passes; a real 20 ms timer
    // would abort the dump, which waits 60 real ms.
    const { sim, pids } = await job();
    const clock = { now: () => 0, sleep: sim.clock.sleep.bind(sim.clock) };
    const engine = engineWith(sim.engine, {
      dump: async (r) => {
        await new Promise((resolve) => setTimeout(resolve, 60));
        assert.equal(r.signal?.aborted ?? false, false, "the dump's signal not aborted");
        const { timeoutMs: _, ...untimed } = r; // the simulated criu's own timer is virtual
        return sim.engine.dump(untimed);
      },
    });
    const machine = machineWith(sim, { clock, engine });
    const made = await snapshot([pids[0]], newDir(), { machine, timeoutMs: 20 });
    assert.equal(made.manifest.trees[0].processes.length, 4);
  });

  test("an engine that cannot work here is known before GPU memory is asked for", async () => {
    const { sim, pids } = await job();
    let asked = 0;
    const host = hostWith(sim.host, {
      gpuMemory: () => (asked++, sim.host.gpuMemory!()),
    });
    const engine = engineWith(sim.engine, {
      probe: () => Promise.resolve({ problems: ["criu is not installed."] }),
    });
    const machine = machineWith(sim, { host, engine });
    const err = await snapshot([pids[0]], newDir(), { machine }).catch((e) => e);
    assert.match(String(err), /criu is not installed/);
    assert.equal(asked, 0, "NVML not asked");
  });

  test("the deadline aborts an engine call under way, on the machine's own clock", async () => {
    const { sim, pids } = await job();
    let aborted = false;
    const engine = engineWith(sim.engine, {
      dump: async (r) => {
        await sim.clock.sleep(60_000, r.signal).catch((e) => (aborted = true, Promise.reject(e)));
        return sim.engine.dump(r);
      },
    });
    const machine = machineWith(sim, { engine });
    const err = await snapshot([pids[0]], newDir(), { machine, timeoutMs: 30_000 }).catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "STOPPED", String(err));
    assert.match(err.message, /^snapshot stopped while dumping: its deadline passed/);
    assert.ok(aborted, "the dump's wait was cut short at the deadline");
  });

  test("a machine with no clock of its own: a real timer aborts the engine's call at the deadline", async () => {
    // A machine of one's own whose parts keep no clock: the deadline is on real time, and a real
    // timer must cut a dump that would otherwise wait 5 s, not only the steps' checks after it.
    const { sim, pids } = await job();
    let aborted = false;
    const engine = engineWith(sim.engine, {
      dump: async (r) => {
        await new Promise((resolve, reject) => {
          const late = setTimeout(resolve, 5_000);
          r.signal?.addEventListener("abort", () => (clearTimeout(late), reject(r.signal!.reason)));
        }).catch((e) => (aborted = true, Promise.reject(e)));
        return sim.engine.dump(r);
      },
    });
    const { clock: _, ...machine } = machineWith(sim, { engine });
    const t0 = performance.now();
    const err = await snapshot([pids[0]], newDir(), { machine, timeoutMs: 300 }).catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "STOPPED", String(err));
    assert.match(err.message, /^snapshot stopped while dumping: its deadline passed/);
    assert.ok(
      aborted,
      `the dump's wait was cut short at the deadline (${performance.now() - t0} ms)`,
    );
  });

  test("two processes failing to suspend: the error is the first one's", async () => {
    const { sim, a, b, pids } = await job();
    a.failNext("lock", { code: 901 });
    b.failNext("lock", { code: 902 });
    const err = await snapshot([pids[0]], newDir(), { machine: sim }).catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "SUSPEND_FAILED", String(err));
    assert.equal(err.cause instanceof CudaError && err.cause.code, 901, String(err.cause));
  });

  test("a tree's CUDA processes are suspended all or nothing: one lock fails, no other is checkpointed", async () => {
    const { sim, a, b, pids } = await job();
    b.failNext("lock", { code: 999 });
    const mark = sim.driver.calls.length;
    const err = await snapshot([pids[0]], newDir(), { machine: sim }).catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "SUSPEND_FAILED", String(err));
    const steps = sim.driver.calls.slice(mark).filter((c) => c.pid === a.pid).map((c) => c.op);
    assert.ok(!steps.includes("checkpoint"), `rank 0 is not checkpointed: ${steps}`);
    assert.deepEqual([live(sim, a.pid).state, live(sim, b.pid).state], ["running", "running"]);
  });

  test("a process on a GPU the driver hides is refused before anything is suspended", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const p = sim.spawn({ memoryMiB: 256, gpu: 1 });
    // As the native driver lists GPUs under CUDA_VISIBLE_DEVICES=0, while NVML sees both.
    const locks: number[] = [];
    const machine = forward(sim, {
      listGpus: async () => (await sim.driver.listGpus!()).slice(0, 1),
      lock: (pid, args) => (locks.push(pid), sim.driver.lock(pid, args)),
    });
    const dir = newDir();
    const err = await snapshot([p.pid], dir, { machine }).catch((e) => e);
    assert.ok(err instanceof RefusedError, String(err));
    assert.equal(err.code, "PREREQUISITE");
    const uuid = (await sim.driver.listGpus!())[1].uuid;
    assert.match(
      err.message,
      new RegExp(
        `process ${p.pid} holds memory on ${uuid}, a GPU the ` +
          `driver hides from us \\(is CUDA_VISIBLE_DEVICES set\\?\\)`,
      ),
    );
    assert.deepEqual(locks, []);
    assert.equal(live(sim, p.pid).state, "running");
    assert.throws(() => readdirSync(dir), /ENOENT/, "nothing made");
  });

  test("a manifest its restore would refuse is not written: the processes are put back", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const p = sim.spawn({ memoryMiB: 256, gpu: 1 });
    // A driver that does not tell its version: the manifest would say 0, which a restore refuses.
    const machine = forward(sim, {
      listGpus: () => sim.driver.listGpus!(),
      driverVersion: () => Promise.resolve({ code: 999, value: 0 }),
    });
    const dir = newDir();
    const err = await snapshot([p.pid], dir, { machine }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "WRITE_FAILED");
    assert.match(err.message, /its manifest could not be written: .*manifest\.json/);
    assert.match(err.message, /put back as it was, and keeps running/);
    assert.equal(live(sim, p.pid).state, "running");
    assert.throws(() => statSync(join(dir, MANIFEST_FILE)));
  });

  test("criu's restore fails: what it made is ended, and the snapshot restores later", async () => {
    const { sim, dir, pids } = await (async () => {
      const j = await job();
      const d = newDir();
      await snapshot([j.pids[0]], d, { machine: j.sim });
      return { ...j, dir: d };
    })();
    // A criu that fails having made the tree, and leaves it (the simulated one's own failure
    // ends what it made, which would hide a rollback that ends nothing).
    // Killed, its processes keep their pids a while, as the kernel's do until they are reaped:
    // here, till the host has been asked about them twice. The rollback waits for that.
    let killed: readonly number[] = [], asked = 0;
    const engine = {
      ...restoringWith(sim.engine, async (r: RestoreRequest) => {
        await sim.engine.restore(r);
        throw new EngineError("criu failed after making the tree (simulated)");
      }),
      kill: (pids: readonly number[]) => Promise.resolve(void (killed = pids)),
    };
    const host = hostWith(sim.host, {
      pidsInUse: async (ids) => {
        if (killed.length > 0 && ++asked === 2) await sim.engine.kill(killed);
        return await sim.host.pidsInUse!(ids);
      },
    });
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine, host }) })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError);
    assert.equal(err.code, "RESTORE_FAILED");
    // Never held stopped (this criu has no wake): it is not said to have been ended before it ran.
    assert.match(err.message, /\. The processes it had made were ended; the snapshot is unchanged/);
    assert.doesNotMatch(err.message, /before any of them ran/);
    assert.equal(sim.processes.length, 0, "no process is left");
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(live(sim, pids[1]).state, "running");
  });

  test("the rollback waits for a killed process's pid up to 10 s: one reaped after 5 s is free when it returns, one never reaped is given up on", async () => {
    // A task criu killed holds its pid until reaped (on an H200, by pid 1 after a while); the
    // next restore would meet PID_TAKEN. The wait is bounded: 200 looks, 50 ms apart.
    for (const reapedAfterMs of [5_000, Infinity]) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 256 });
      const dir = newDir();
      await snapshot([p.pid], dir, { machine: sim });
      let killedAt: number | undefined;
      const engine = {
        ...restoringWith(sim.engine, async (r: RestoreRequest) => {
          await sim.engine.restore(r);
          throw new EngineError("criu failed after making the tree (simulated)");
        }),
        kill: (pids: readonly number[]) => (killedAt ??= sim.now(), sim.engine.kill(pids)),
      };
      const zombie = () => killedAt !== undefined && sim.now() < killedAt + reapedAfterMs;
      const host = hostWith(sim.host, {
        pidsInUse: async (ids) => [
          ...await sim.host.pidsInUse!(ids),
          ...ids.includes(p.pid) && zombie()
            ? [{ id: p.pid, holder: p.pid, as: "pid" as const }]
            : [],
        ],
      });
      const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine, host }) })
        .catch((e) => e);
      assert.ok(err instanceof SnapshotError && err.code === "RESTORE_FAILED", String(err));
      const waited = sim.now() - killedAt!;
      if (reapedAfterMs === Infinity) {
        assert.ok(waited >= 10_000 && waited < 10_500, `gave up after ${waited} ms`);
      } else {
        assert.ok(waited >= 5_000 && waited < 5_500, `returned ${waited} ms after the kill`);
        assert.deepEqual(await host.pidsInUse!([p.pid]), [], "its pid is free");
      }
    }
  });

  test("a rollback whose host cannot tell who holds the pids, or whose kill fails, still says criu's failure, and a failed kill is said", async () => {
    // Tree a is made; b's criu fails without making anything. The rollback's own troubles (the
    // host's pid look-ups, the engine's kill) do not replace the restore's error.
    for (const trouble of ["pidsInUse", "kill"] as const) {
      const sim = new SimulatedMachine();
      const [a, b] = [sim.spawn({ memoryMiB: 256 }), sim.spawn({ memoryMiB: 256 })];
      const dir = newDir();
      await snapshot([a.pid, b.pid], dir, { machine: sim });
      const aMade = Promise.withResolvers<void>();
      let begun = false;
      const engine = engineWith(sim.engine, {
        restore: async (r) => {
          begun = true;
          if (r.root === a.pid) return void await sim.engine.restore(r).finally(aMade.resolve);
          await aMade.promise;
          throw new EngineError(`criu failed: Can't fork for ${b.pid}`);
        },
        kill: (pids) =>
          trouble === "kill" ? Promise.reject(new Error("kill: EPERM")) : sim.engine.kill(pids),
      });
      const host = hostWith(sim.host, {
        pidsInUse: (ids) =>
          begun && trouble === "pidsInUse"
            ? Promise.reject(new Error("EMFILE: too many open files"))
            : sim.host.pidsInUse!(ids),
      });
      const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine, host }) })
        .catch((e) => e);
      assert.ok(err instanceof SnapshotError, `${trouble}: ${err}`);
      assert.equal(err.code, "RESTORE_FAILED", err.message);
      assert.match(err.message, new RegExp(`failed: criu failed: Can't fork for ${b.pid}`));
      if (trouble === "pidsInUse") assert.equal(sim.process(a.pid), undefined, "a was ended");
      // A kill that failed is said, not "were ended" of processes that still run.
      if (trouble === "kill") {
        assert.match(err.message, /could not all be ended \(kill: EPERM\)/);
        assert.ok(sim.process(a.pid), "a is still there, as the message says");
      }
    }
  });

  test("criu fails before it made anything: said so, with criu's error as the cause and its log", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const log = "/var/tmp/ckpt-cuda-restore-1/restore.log";
    const failed = new EngineError(`criu failed: Can't fork for ${p.pid}`, { log });
    const engine = engineWith(sim.engine, { restore: () => Promise.reject(failed) });
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine }) })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "RESTORE_FAILED", String(err));
    assert.match(err.message, /\. No process was made/);
    assert.equal(err.cause, failed);
    assert.equal(err.log, log);
  });

  test("a tree let go whose root then exits: when another tree's criu fails, the child it left is ended", async () => {
    // A host that tells no pid's holder (neither pidsInUse nor identify): the rollback ends what
    // the engine made by its trees as listed, the root's tree being gone.
    const sim = new SimulatedMachine();
    const root = sim.spawn({ cuda: false, command: "bash run.sh" });
    const child = sim.spawn({ parent: root.pid, memoryMiB: 256, command: "python train.py" });
    const other = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([root.pid, other.pid], dir, { machine: sim });
    const made = Promise.withResolvers<void>();
    const engine = restoringWith(sim.engine, async (r) => {
      if (r.root === root.pid) return void await sim.engine.restore(r).finally(made.resolve);
      await made.promise;
      sim.process(root.pid)!.exit(); // its script ended, leaving its child running
      throw new EngineError("criu failed (simulated)");
    });
    const host = hostWith(sim.host, { pidsInUse: undefined, identify: undefined });
    const err = await restoreSnapshot(dir, { machine: machineWith(sim, { engine, host }) })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "RESTORE_FAILED", String(err));
    assert.equal(sim.process(child.pid), undefined, "the child the root left was ended");
  });

  test("a clock with no timer: a deadline passed as criu restores, or in the GPU half, is a stop, not a failure", async () => {
    // The run's signal never aborts at the deadline; the steps and the engine see it passed.
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 8192 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const clock = { now: () => sim.now(), sleep: sim.clock.sleep.bind(sim.clock) };
    // Without digests: their real hashing would hold the tree back while virtual time runs on.
    const machine = machineWith(sim, { clock, store: new FileSnapshotStore({ digests: false }) });
    const { timings: t } = await restoreSnapshot(dir, { machine });
    live(sim, p.pid).exit();
    const cases = [
      [t.checkMs + t.restoreMs / 2, /failed: it was stopped: its deadline passed/],
      [t.checkMs + t.restoreMs + t.resumeMs / 2, /their GPU restore failed: its deadline passed/],
    ] as const;
    for (const [ms, said] of cases) {
      const err = await restoreSnapshot(dir, { machine, timeoutMs: Math.round(ms) })
        .catch((e) => e);
      assert.ok(err instanceof SnapshotError, String(err));
      assert.equal(err.code, "STOPPED", err.message);
      assert.match(err.message, said);
      sim.process(p.pid)?.exit();
    }
  });

  test("a pid another process took after the checks fails criu's restore; the rollback leaves that process", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const other = new SimulatedMachine(); // a new machine: its next process takes p's pid
    let taker: SimulatedProcess | undefined;
    const onProgress = (e: SnapshotEvent) => {
      if (e.type === "phase" && e.phase === "restore") taker = other.spawn({ cuda: false });
    };
    const err = await restoreSnapshot(dir, { machine: other, onProgress }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "RESTORE_FAILED");
    assert.equal(taker?.pid, p.pid);
    assert.equal(taker.exited, false, "a process that was never the restore's is not ended");
  });

  test("an abort met while the files are checked is a stop, nothing changed", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    p.exit();
    // Before, it rejected with the signal's reason itself (no code): here, the command line's.
    const signal = AbortSignal.abort(new Error("interrupted (SIGINT)"));
    const err = await restoreSnapshot(dir, { machine: sim, signal }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "STOPPED");
    assert.match(err.message, /restore stopped before it began: it was aborted/);
    assert.equal(sim.processes.length, 0);
  });

  test("an abort met in the later checks (the pids, the room) is a stop before it began, nothing made", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const controller = new AbortController();
    let restores = 0;
    const machine = machineWith(sim, {
      // Aborted as the checks ask whether the snapshot's pids are free (its files checked).
      host: hostWith(sim.host, {
        pidsInUse: (ids) => (controller.abort(), sim.host.pidsInUse!(ids)),
      }),
      engine: restoringWith(sim.engine, (r) => (restores++, sim.engine.restore(r))),
    });
    const err = await restoreSnapshot(dir, { machine, signal: controller.signal }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "STOPPED");
    assert.match(
      err.message,
      /^restore stopped before it began: it was aborted\. Nothing was changed/,
    );
    assert.equal(restores, 0, "criu was never asked");
    assert.equal(sim.processes.length, 0);
  });

  test("an abort while one tree is restored: criu is not asked for the trees still waiting for a slot", async () => {
    const sim = new SimulatedMachine();
    const pids = [sim.spawn({ memoryMiB: 256 }).pid, sim.spawn({ memoryMiB: 256 }).pid];
    const dir = newDir();
    await snapshot(pids, dir, { machine: sim });
    const controller = new AbortController(), asked: number[] = [];
    const engine = {
      ...restoringWith(sim.engine, async (r: RestoreRequest) => {
        asked.push(r.root);
        await sim.engine.restore(r);
        controller.abort(); // as the first tree is back
      }),
      parallel: 1, // one tree at a time: the second waits for the first's slot
    };
    const machine = machineWith(sim, { engine });
    const err = await restoreSnapshot(dir, { machine, signal: controller.signal }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "STOPPED", err.message);
    assert.equal(asked.length, 1, `criu was asked for ${asked.join(" and ")}`);
    assert.equal(sim.processes.length, 0, "the tree it made was ended");
  });

  test("a restore's deadline, as criu restores or in the GPU half, is said as such", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const pids = [sim.spawn({ memoryMiB: 8192 }).pid, sim.spawn({ memoryMiB: 4096, gpu: 1 }).pid];
    const dir = newDir();
    await snapshot(pids, dir, { machine: sim });
    // At 3.2 s the small tree may be back and let go (once its images matched, in real time), the
    // large one not yet: one let go is not said to have run on its own (SIGCONT).
    const early = await restoreSnapshot(dir, { machine: sim, timeoutMs: 3_200 }).catch((e) => e);
    assert.ok(early instanceof SnapshotError, String(early));
    assert.equal(early.code, "STOPPED");
    assert.match(early.message, /failed: it was stopped: its deadline passed/);
    assert.doesNotMatch(early.message, /SIGCONT|aborted/);
    // One tree alone, its GPU half timed once: a deadline halfway through it is the deadline's.
    const one = new SimulatedMachine();
    const p = one.spawn({ memoryMiB: 8192 });
    const solo = newDir();
    await snapshot([p.pid], solo, { machine: one });
    const { timings: t } = await restoreSnapshot(solo, { machine: one });
    live(one, p.pid).exit();
    const timeoutMs = Math.round(t.checkMs + t.restoreMs + t.resumeMs / 2);
    const late = await restoreSnapshot(solo, { machine: one, timeoutMs }).catch((e) => e);
    assert.ok(late instanceof SnapshotError, String(late));
    assert.equal(late.code, "STOPPED");
    assert.match(late.message, /their GPU restore failed: its deadline passed/);
  });

  test("the GPU restore fails: the processes stay checkpointed, and the error says what to do", async () => {
    const { sim, pids, a, b, root } = await job();
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim });
    sim.fillGpu(0, { leaveMiB: 512 });
    const err = await restoreSnapshot(dir, { machine: sim, checkRoom: false }).catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "RESUME_FAILED");
    assert.match(err.message, /are back, but their GPU restore failed/);
    // The CUDA processes to resume (not their tree's others, which no toggle takes), the root to end.
    const resume =
      `cuda-checkpoint --toggle --pid ${a.pid},${b.pid}), or end them (kill ${root.pid})`;
    assert.ok(err.message.includes(resume), err.message);
    assert.equal(live(sim, pids[1]).state, "checkpointed");
  });

  test("the GPU restore fails: the driver's error is the cause, and a state the GPU half could not read is read again", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    // The driver refuses the restore (out of memory), then fails to tell the state once.
    let failed = false, unread = 0;
    const machine = forward(sim, {
      listGpus: () => sim.driver.listGpus!(),
      restore: () => (failed = true, Promise.resolve(2)), // CUDA_ERROR_OUT_OF_MEMORY
      getState: (pid) =>
        failed && unread++ === 0
          ? Promise.resolve({ code: 3, value: 0 })
          : sim.driver.getState(pid),
    });
    const err = await restoreSnapshot(dir, { machine }).catch((e) => e);
    assert.ok(err instanceof SnapshotError && err.code === "RESUME_FAILED", String(err));
    assert.ok(err.cause instanceof CudaError && err.cause.code === 2, String(err.cause));
    assert.ok(unread > 1, "its state was asked again");
    assert.match(err.message, /They are checkpointed: once the cause is fixed, resume them/);
    assert.equal(live(sim, p.pid).state, "checkpointed");
  });
});

test("two trees: one's dump fails while the other still suspends; both are put back running", async () => {
  const sim = new SimulatedMachine();
  const big = sim.spawn({ memoryMiB: 16384 });
  const small = sim.spawn({ memoryMiB: 256 });
  const hashes = [await big.memoryChunkedSha256(), await small.memoryChunkedSha256()];
  sim.engine.failNext("dump", { message: "Can't dump (simulated)" });
  const err = await snapshot([big.pid, small.pid], newDir(), { machine: sim }).catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.equal(err.code, "DUMP_FAILED");
  assert.match(err.message, /Every process was put back as it was, and keeps running/);
  assert.deepEqual([live(sim, big.pid).state, live(sim, small.pid).state], ["running", "running"]);
  assert.deepEqual([await big.memoryChunkedSha256(), await small.memoryChunkedSha256()], hashes);
});

test("the root's parent in the manifest is the one listed, whatever parent the engine gives it", async () => {
  // The engine dumps the tree alone: what it says of the root's parent is not the host's word.
  const { sim, root, pids } = await job();
  const listed = (await sim.host.processTree!(root.pid))![0].parent;
  const engine = engineWith(sim.engine, {
    dump: async (r) =>
      (await sim.engine.dump(r)).map((d) => d.pid === root.pid ? { ...d, parent: listed + 1 } : d),
  });
  const { manifest } = await snapshot([pids[0]], newDir(), {
    machine: machineWith(sim, { engine }),
  });
  assert.deepEqual(manifest.trees[0].processes.map((p) => p.parent), [
    listed,
    root.pid,
    root.pid,
    pids[1],
  ]);
});

test("a process that comes into a tree after it was listed, before its dump, is in the manifest and comes back", async () => {
  // The manifest lists each tree as dumped, not as first listed: a restore must wait for the pid
  // of every process criu brings back, and a tree's processes are the root first, each after its
  // parent.
  const sim = new SimulatedMachine();
  const root = sim.spawn({ memoryMiB: 256, command: "python train.py" });
  let child: SimulatedProcess | undefined;
  const onProgress = (e: SnapshotEvent) => {
    if (e.type === "phase" && e.phase === "dump") {
      child = sim.spawn({ parent: root.pid, cuda: false, command: "sh -c sync" });
    }
  };
  const dir = newDir();
  const { manifest } = await snapshot([root.pid], dir, { machine: sim, onProgress });
  assert.ok(child, "spawned as the dump began");
  const listed = manifest.trees[0].processes;
  assert.deepEqual(listed.map((p) => p.pid), [root.pid, child.pid]);
  assert.equal(listed[1].parent, root.pid);
  assert.equal(listed[0].command, "python train.py", "what was learnt when it was listed stays");
  assert.equal(listed[0].cuda?.state, "running");
  assert.equal(sim.process(child.pid), undefined, "ended with its tree");
  const back = await restoreSnapshot(dir, { machine: sim });
  assert.deepEqual(back.pids, [root.pid, child.pid]);
  assert.equal(live(sim, child.pid).usesCuda, false);
  assert.equal(live(sim, root.pid).state, "running");
});

test("a manifest lists its files by path, whatever order the trees were given in", async () => {
  const sim = new SimulatedMachine();
  const first = sim.spawn({ memoryMiB: 256 }), second = sim.spawn({ memoryMiB: 256 });
  const { manifest } = await snapshot([second.pid, first.pid], newDir(), { machine: sim });
  const paths = manifest.files.map((f) => f.path);
  assert.ok(paths.some((p) => p.startsWith(`tree-${first.pid}/`)));
  assert.ok(paths.some((p) => p.startsWith(`tree-${second.pid}/`)));
  assert.deepEqual(paths, [...paths].sort(), "sorted: one snapshot's manifest reads as another's");
});

test("a host that fails to read a process (EMFILE) does not take it for ended: the rollback resumes it", async () => {
  const sim = new SimulatedMachine();
  const p = sim.spawn({ memoryMiB: 1024 }), hash = await p.memoryChunkedSha256();
  let failing = false;
  const identify = (id: number) =>
    failing ? Promise.reject(new Error("EMFILE: too many open files")) : sim.host.identify!(id);
  const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
  sim.engine.failNext("dump");
  const onProgress = (e: SnapshotEvent) =>
    void (e.type === "phase" && e.phase === "dump" && (failing = true));
  const err = await snapshot([p.pid], newDir(), { machine, onProgress }).catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.doesNotMatch(err.message, /had ended/);
  assert.match(err.message, /put back as it was/, err.message);
  assert.equal(live(sim, p.pid).state, "running");
  assert.equal(await p.memoryChunkedSha256(), hash);
});

test("a process the host fails to read (EMFILE) as its tree is ended is not taken for the snapshot's own: not ended", async () => {
  const sim = new SimulatedMachine();
  const p = sim.spawn({ memoryMiB: 1024 });
  let failing = false;
  const identify = (id: number) =>
    failing ? Promise.reject(new Error("EMFILE: too many open files")) : sim.host.identify!(id);
  const machine = machineWith(sim, { host: hostWith(sim.host, { identify }) });
  const onProgress = (e: SnapshotEvent) =>
    void (e.type === "phase" && e.phase === "end" && (failing = true));
  await snapshot([p.pid], newDir(), { machine, onProgress });
  live(sim, p.pid); // a pid the host cannot say is still ours may be another process's now
});

test("a process that ends during the dump holds back no other: each other one runs, as a job too", async () => {
  for (const job of [false, true]) {
    const sim = new SimulatedMachine({ gpus: 2 });
    const gone = sim.spawn({ memoryMiB: 1024 }), other = sim.spawn({ memoryMiB: 2048, gpu: 1 });
    const hash = await other.memoryChunkedSha256();
    const onProgress = (e: SnapshotEvent) => {
      if (e.type === "phase" && e.phase === "dump") gone.exit();
    };
    const dir = newDir();
    const err = await snapshot([gone.pid, other.pid], dir, { machine: sim, job, onProgress })
      .catch((e) => e);
    assert.ok(err instanceof SnapshotError, String(err));
    assert.equal(err.code, "DUMP_FAILED");
    assert.match(
      err.message,
      new RegExp(`Every other process was put back .* \\(process ${gone.pid} had ended\\)`),
    );
    assert.equal(live(sim, other.pid).state, "running", `job: ${job}`);
    assert.equal(await other.memoryChunkedSha256(), hash);
    assert.throws(() => statSync(dir), "nothing is left to recover");
    // A host that cannot identify processes: none is taken for ended, each is put back.
    const blind = machineWith(sim, { host: hostWith(sim.host, { identify: undefined }) });
    const stop = new AbortController();
    const abortAtDump = (e: SnapshotEvent) =>
      void (e.type === "phase" && e.phase === "dump" && stop.abort());
    const two = [sim.spawn({ memoryMiB: 1024 }), other];
    const blinded = await snapshot(two.map((p) => p.pid), newDir(), {
      machine: blind,
      job,
      signal: stop.signal,
      onProgress: abortAtDump,
    }).catch((e) => e);
    assert.match(String(blinded), /Every process was put back as it was/);
    assert.deepEqual(two.map((p) => p.state), ["running", "running"]);
    // Ended after its dump, with leaveRunning: the snapshot is whole and the other runs on.
    const late = sim.spawn({ memoryMiB: 1024 });
    const tell = (e: SnapshotEvent) =>
      void (e.type === "phase" && e.phase === "write" && late.exit());
    const opts = { machine: sim, job, leaveRunning: true, onProgress: tell };
    await snapshot([late.pid, other.pid], newDir(), opts);
    assert.equal(live(sim, other.pid).state, "running");
  }
});

test("a process that ends as the rollback resumes it is named as ended; the other runs", async () => {
  const sim = new SimulatedMachine({ gpus: 2 });
  const dying = sim.spawn({ memoryMiB: 1024 }), other = sim.spawn({ memoryMiB: 2048, gpu: 1 });
  sim.engine.failNext("dump", { message: "Can't dump (simulated)" });
  let rollingBack = false;
  const onProgress = (e: SnapshotEvent) => {
    if (e.type === "phase") rollingBack = e.phase === "rollback";
    if (rollingBack && e.type === "step-start" && e.pid === dying.pid) dying.exit();
  };
  const err = await snapshot([dying.pid, other.pid], newDir(), { machine: sim, onProgress })
    .catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.match(
    err.message,
    new RegExp(`Every other process was put back .*\\(process ${dying.pid} had ended\\)`),
  );
  assert.equal(live(sim, other.pid).state, "running");
});

test("every process ends during the snapshot: none is said to be put back, and each is named", async () => {
  const sim = new SimulatedMachine({ gpus: 2 });
  const a = sim.spawn({ memoryMiB: 1024 }), b = sim.spawn({ memoryMiB: 2048, gpu: 1 });
  for (const p of [a, b]) p.exitDuring("checkpoint", { afterMs: 100 });
  const err = await snapshot([a.pid, b.pid], newDir(), { machine: sim }).catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.match(
    err.message,
    new RegExp(
      `No process was left to resume \\(processes ${a.pid}, ` +
        `${b.pid} had ended\\)`,
    ),
  );
  assert.doesNotMatch(err.message, /put back/);
});

test("--leave-running: a resume that fails for one process names it, and the others run", async () => {
  const sim = new SimulatedMachine({ gpus: 2 });
  const a = sim.spawn({ memoryMiB: 1024 }), b = sim.spawn({ memoryMiB: 2048, gpu: 1 });
  b.failNext("restore", { code: 2 });
  const dir = newDir();
  const err = await snapshot([a.pid, b.pid], dir, { machine: sim, leaveRunning: true })
    .catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.equal(err.code, "RESUME_FAILED");
  assert.match(err.message, /is complete, but not every CUDA process could be resumed/);
  assert.match(
    err.message,
    new RegExp(
      `Left so: ${b.pid} checkpointed; \`cuda-checkpoint ` +
        `recover ${dir}\` resumes them once the cause is fixed \\(the others run\\)`,
    ),
  );
  assert.deepEqual([live(sim, a.pid).state, live(sim, b.pid).state], ["running", "checkpointed"]);
  // One already running again when its resume came (resumed meanwhile: unchanged) is not "left so".
  const c = sim.spawn({ memoryMiB: 512 }), d = sim.spawn({ memoryMiB: 512, gpu: 1 });
  d.failNext("restore", { code: 2 });
  let ending = false, meanwhile = false;
  const machine = forward(sim, {
    listGpus: () => sim.driver.listGpus!(),
    getState: async (pid) => {
      if (ending && pid === c.pid && !meanwhile) {
        meanwhile = true;
        await sim.driver.restore(pid, null);
        await sim.driver.unlock(pid);
      }
      return await sim.driver.getState(pid);
    },
  });
  const onProgress = (e: SnapshotEvent) =>
    void (e.type === "phase" && (ending = e.phase === "end"));
  const again = newDir();
  const err2 = await snapshot([c.pid, d.pid], again, { machine, leaveRunning: true, onProgress })
    .catch((e) => e);
  assert.ok(err2 instanceof SnapshotError, String(err2));
  assert.equal(err2.code, "RESUME_FAILED", err2.message);
  assert.ok(meanwhile, "resumed by another as the snapshot ended");
  assert.match(err2.message, new RegExp(`Left so: ${d.pid} checkpointed; \``));
  assert.deepEqual([live(sim, c.pid).state, live(sim, d.pid).state], ["running", "checkpointed"]);
});

test("two trees: one's GPU restore fails in the driver; the other runs, the failed one is left checkpointed, said so", async () => {
  const sim = new SimulatedMachine();
  const big = sim.spawn({ memoryMiB: 8192 });
  const small = sim.spawn({ memoryMiB: 256 });
  const dir = newDir();
  await snapshot([big.pid, small.pid], dir, { machine: sim });
  sim.fillGpu(0, { leaveMiB: 2048 }); // room for the small one, not for the big one
  const err = await restoreSnapshot(dir, { machine: sim, checkRoom: false }).catch((e) => e);
  assert.ok(err instanceof SnapshotError, String(err));
  assert.equal(err.code, "RESUME_FAILED");
  // Checkpointed again, the small one would be stuck with the big one, which driver 580 will not
  // restore after its out-of-memory restore (docs/DRIVER.md).
  assert.match(err.message, /so the job's other processes were resumed rather than checkpointed/);
  assert.match(err.message, new RegExp(`left so: ${big.pid} checkpointed, ${small.pid} running`));
  assert.deepEqual(
    [live(sim, big.pid).state, live(sim, small.pid).state],
    ["checkpointed", "running"],
  );
});

describe("onto other GPUs", () => {
  test("a mapping moves the processes; another chip is refused before anything changes", async () => {
    const sim = new SimulatedMachine({ gpus: [{}, {}, { name: "NVIDIA H100 80GB HBM3" }] });
    const p = sim.spawn({ memoryMiB: 1024, gpu: 0 });
    const hash = await p.memoryChunkedSha256();
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: sim });
    const [g0, g1, g2] = sim.gpus.map((g) => g.uuid);
    await refusedWith(
      restoreSnapshot(dir, { machine: sim, gpuMapping: { [g0]: g2, [g1]: g1, [g2]: g0 } }),
      "MAPPING",
      /onto GPU-\S+ \(GPU 2, NVIDIA H100 80GB HBM3\): a process is restored only onto GPUs of the chip/,
    );
    assert.equal(sim.processes.length, 0);
    const back = await restoreSnapshot(dir, {
      machine: sim,
      gpuMapping: { [g0]: g1, [g1]: g0, [g2]: g2 },
    });
    assert.equal(back.gpuMapping[g0], g1);
    const moved = live(sim, p.pid);
    assert.ok((moved.gpuMemoryMiB[g1] ?? 0) >= 1024, "on GPU 1 now");
    assert.equal(moved.gpuMemoryMiB[g0] ?? 0, 0);
    assert.equal(await moved.memoryChunkedSha256(), hash);
  });

  test("onto a machine with the snapshot's GPUs and more: the mapping is completed, as the driver wants", async () => {
    const two = new SimulatedMachine({ gpus: 2, seed: 7 });
    const p = two.spawn({ memoryMiB: 1024, gpu: 0 });
    const hash = await p.memoryChunkedSha256();
    const dir = newDir();
    await snapshot([p.pid], dir, { machine: two });
    const four = new SimulatedMachine({ gpus: 4, seed: 7 }); // the same two GPUs, and two more
    const [g0, g1, g2, g3] = four.gpus.map((g) => g.uuid);
    assert.deepEqual([g0, g1], two.gpus.map((g) => g.uuid));
    const back = await restoreSnapshot(dir, { machine: four, gpuMapping: { [g0]: g2, [g1]: g1 } });
    assert.deepEqual(back.gpuMapping, { [g0]: g2, [g1]: g1, [g2]: g0, [g3]: g3 });
    const moved = live(four, p.pid);
    assert.ok((moved.gpuMemoryMiB[g2] ?? 0) >= 1024, "on GPU 2 now");
    assert.equal(await moved.memoryChunkedSha256(), hash);
    moved.exit();
    // Each GPU it leaves out goes onto itself where that is free (GPU 2), else onto one left.
    const again = await restoreSnapshot(dir, { machine: four, gpuMapping: { [g0]: g3, [g1]: g1 } });
    assert.deepEqual(again.gpuMapping, { [g0]: g3, [g1]: g1, [g2]: g2, [g3]: g0 });
    live(four, p.pid).exit();
    // Onto a machine with one of the snapshot's GPUs but not the other: refused before criu.
    const uuid = (n: number) => `GPU-${String(n).repeat(8)}-1111-1111-1111-111111111111`;
    const partly = new SimulatedMachine({
      gpus: [{ uuid: g0 }, ...[2, 3, 4].map((n) => ({ uuid: uuid(n) }))],
    });
    await refusedWith(
      restoreSnapshot(dir, { machine: partly }),
      "MAPPING",
      /is not a GPU of this machine/,
    );
    assert.equal(partly.processes.length, 0);
  });

  test("a mapping from another machine's GPUs is checked only where it goes", () => {
    const here = [
      { index: 0, uuid: "GPU-11111111-1111-1111-1111-111111111111", name: "NVIDIA H200" },
      { index: 1, uuid: "GPU-22222222-2222-2222-2222-222222222222", name: "NVIDIA H200" },
    ];
    const pair = (a: string, b: string) => ({ oldUuid: parseGpuUuid(a), newUuid: parseGpuUuid(b) });
    const elsewhere = "GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa";
    assert.deepEqual(mappingProblems([pair(elsewhere, here[1].uuid)], here), []);
    const twice = mappingProblems([
      pair(elsewhere, here[1].uuid),
      pair("GPU-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb", here[1].uuid),
    ], here);
    assert.match(twice.join("; "), /onto the same GPU/);
    // One GPU of this machine among them: a mapping of this machine, with all its rules.
    assert.match(
      mappingProblems([pair(here[0].uuid, here[1].uuid)], here).join("; "),
      /leaves out/,
    );
  });
});

describe("what a simulated machine leaves behind", () => {
  test("one never closed leaves no ckpt-sim-* folder in the temporary directory: a snapshot, a failed restore, a restore", async () => {
    const ours = () => readdirSync(tmpdir()).filter((name) => name.startsWith("ckpt-sim-"));
    const before = new Set(ours());
    const { sim, a, pids, hashes } = await job();
    const dir = newDir();
    await snapshot([pids[0]], dir, { machine: sim });
    sim.engine.failNext("restore");
    await assert.rejects(restoreSnapshot(dir, { machine: sim }), /failure injected/);
    await restoreSnapshot(dir, { machine: sim });
    assert.equal(await live(sim, a.pid).memoryChunkedSha256(), hashes[0]);
    assert.deepEqual(
      ours().filter((name) => !before.has(name)),
      [],
      "new in the temporary directory",
    );
    // The machine is left open, as the docs' examples leave theirs.
  });
});
