// The room check across criu's dump and restore (issue 23): criu's CUDA plugin checkpoints a
// process through `cuda-checkpoint --action checkpoint`, criu dumps it and ends it, and a restore
// brings back a new process (a new start time) that the plugin restores through `cuda-checkpoint
// --action restore`. The record of what the first held must guard the second's restore: it is
// found by what outlasts the round trip (the pid in its own namespace, the user, the command
// line), never by a pid alone. On the simulator (its criu ends and brings back processes as the
// real one does), in the records' directory, and in /proc (no GPU needed).
// Runs unchanged under `deno test -A` and `bun test`.
import { afterEach, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";

import { CudaProcess, GpuRoomError, snapshot } from "../mod.ts";
import { ENDED_RECORD_KEEP_MS, type HeldRecord, type ProcessIdentity } from "../core/host.ts";
import { keptEnded, MemoryHeldRecords, sameProcess } from "../core/host.ts";
import type { Machine } from "../core/machine.ts";
import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import { hostWith, machineWith } from "./support/forward.ts";
import { FileHeldRecords } from "../os/records.ts";
import { LinuxHost, type ProcReader } from "../os/linux_host.ts";

const dirs: string[] = [];
async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/**
 * What criu's plugin and criu do to `p`: checkpointed through the library (as our command line
 * does for the plugin's `--action checkpoint`), dumped, ended; then brought back, checkpointed,
 * as a new process with its pid. Returns the process criu made.
 */
async function throughCriu(
  sim: SimulatedMachine,
  p: SimulatedProcess,
  machine: Machine = sim,
): Promise<SimulatedProcess> {
  await new CudaProcess(p.pid, { machine }).suspend();
  const images = await tempDir("ckpt-room-criu-");
  await sim.engine.dump({ root: p.pid, imagesDir: images });
  await sim.engine.kill([p.pid]);
  assert.equal(p.exited, true);
  await sim.engine.restore({ root: p.pid, imagesDir: images });
  const back = sim.process(p.pid)!;
  assert.ok(back !== p && back.start > p.start, "criu made a new process, with a new start");
  assert.equal(back.state, "checkpointed");
  return back;
}

describe("the room check follows a process through criu's dump and restore", () => {
  test("onto a full GPU, the process criu brought back is refused with what the one before held; with room, restored", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096, command: "python serve.py --port 8000" });
    const back = await throughCriu(sim, p);
    assert.equal((await sim.heldRecords.list()).length, 0, "no live process has a record");
    assert.equal((await sim.heldRecords.ended()).length, 1, "the ended one's record is kept");

    const filler = sim.fillGpu(0, { leaveMiB: 1024 });
    const calls = sim.driver.calls.length;
    const err = await new CudaProcess(back.pid, { machine: sim }).resume().catch((e) => e);
    assert.ok(err instanceof GpuRoomError, `refused for room, got ${err}`);
    assert.ok(err.shortage.neededMiB >= 4096, `needs what it held: ${err.shortage.neededMiB}`);
    assert.equal(err.shortage.freeMiB, 1024);
    assert.deepEqual(
      sim.driver.calls.slice(calls).filter((c) => c.op !== "getState"),
      [],
      "no restore reached the driver",
    );
    assert.equal(back.restoreRefused, false, "the driver never ran out: the process is not lost");
    assert.equal(back.state, "checkpointed");

    // The record is the new process's now: a retry finds it at once, and so does a retry once
    // there is room.
    assert.deepEqual((await sim.heldRecords.ended()).length, 0);
    const live = await sim.heldRecords.list();
    assert.deepEqual(live.map((r) => r.process), [{ pid: back.pid, start: back.start }]);
    await assert.rejects(new CudaProcess(back.pid, { machine: sim }).resume(), GpuRoomError);
    filler.exit();
    const outcome = await new CudaProcess(back.pid, { machine: sim }).resume();
    assert.equal(outcome.roomCheck, "checked");
    assert.equal(back.state, "running");
    assert.deepEqual(await sim.heldRecords.list(), [], "restored: its record is gone");
    assert.deepEqual(await sim.heldRecords.ended(), []);
  });

  test("a snapshot's tree that criu brought back outside its restore (the restore killed while it held it) is guarded by the ended one's record", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096, command: "python serve.py --port 8000" });
    const dir = path.join(await tempDir("ckpt-room-snap-"), "snap");
    const { manifest } = await snapshot([p.pid], dir, { machine: sim });
    await sim.engine.restore({ root: p.pid, imagesDir: path.join(dir, manifest.trees[0].images) });
    sim.fillGpu(0, { leaveMiB: 1024 });
    // What SNAPSHOTS.md and a second Ctrl-C during a restore advise then: cuda-checkpoint --toggle.
    const err = await new CudaProcess(p.pid, { machine: sim }).resume().catch((e) => e);
    assert.ok(err instanceof GpuRoomError, `refused for room, not lost to the driver: ${err}`);
    assert.equal(sim.process(p.pid)!.restoreRefused, false, "the driver was not asked");
  });

  test("a process whose command line is not the one recorded is not taken for it: its room is unknown, and said so", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 2048, command: "trainer --rank 0" });
    const back = await throughCriu(sim, p);
    // The kept record says another command line ran under this pid before.
    const [kept] = await sim.heldRecords.ended();
    await sim.heldRecords.remove(kept.process);
    await sim.heldRecords.put({ ...kept, mark: `${p.pid}:trainer --rank 1` });
    const outcome = await new CudaProcess(back.pid, { machine: sim }).resume();
    assert.equal(back.state, "running");
    assert.ok(typeof outcome.roomCheck === "object", `unknown, got ${outcome.roomCheck}`);
    assert.match(outcome.roomCheck.unknown, /no record of the GPU memory it held/);
    assert.match(outcome.roomCheck.unknown, /on another machine/);
    assert.equal((await sim.heldRecords.ended()).length, 1, "the other's record is left alone");
  });

  test("several ended processes with the same mark: checked against the most each held on each GPU, none taken, and the refusal says so", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024, command: "worker" });
    const back = await throughCriu(sim, p);
    const [kept] = await sim.heldRecords.ended();
    const gpu = Object.keys(kept.heldMiB)[0];
    await sim.heldRecords.put({
      ...kept,
      process: { pid: p.pid, start: back.start + 100 }, // another ended process of this mark
      heldMiB: { [gpu]: 30_000 },
      at: kept.at - 1000,
    });
    sim.fillGpu(0, { leaveMiB: 20_000 });
    const err = await new CudaProcess(back.pid, { machine: sim }).resume().catch((e) => e);
    assert.ok(err instanceof GpuRoomError, `refused for room, got ${err}`);
    assert.equal(err.shortage.neededMiB, 30_000);
    assert.match(err.message, /2 ended processes have its lasting mark.*the most any of them held/);
    assert.equal((await sim.heldRecords.ended()).length, 2, "both are still kept");
    // A retry weighs both again, and says so again.
    const again = await new CudaProcess(back.pid, { machine: sim }).resume().catch((e) => e);
    assert.match(again.message, /2 ended processes have its lasting mark/);
  });

  test("two containers whose processes share a mark: the one restored first takes nothing from the other, whose restore is refused, not lost (issue 29, item 9)", async () => {
    // Two rootful containers running the same command as pid 1 had the same mark: the one
    // restored first took the other's 8,000 MiB record, and the other's restore was then checked
    // against 1,000 MiB with 7,500 MiB free, a restore that loses the process on driver 580.
    const sim = new SimulatedMachine();
    const same = hostWith(sim.host, { lastingMark: () => Promise.resolve("1:0:same") });
    const machine = machineWith(sim, { host: same });
    const big = await throughCriu(sim, sim.spawn({ memoryMiB: 8000, command: "serve" }), machine);
    const small = await throughCriu(sim, sim.spawn({ memoryMiB: 1000, command: "serve" }), machine);
    const free = sim.fillGpu(0, { leaveMiB: 9_500 });
    await new CudaProcess(small.pid, { machine }).resume();
    assert.equal(small.state, "running");
    free.exit();
    sim.fillGpu(0, { leaveMiB: 7_500 });
    const err = await new CudaProcess(big.pid, { machine }).resume().catch((e) => e);
    assert.ok(err instanceof GpuRoomError, `refused for room, got ${err}`);
    assert.ok(
      err.shortage.neededMiB >= 8000,
      `needs what the larger held: ${err.shortage.neededMiB}`,
    );
    assert.match(err.message, /2 ended processes have its lasting mark/);
    assert.equal(big.restoreRefused, false, "the driver never ran out: the process is not lost");
    assert.equal(big.state, "checkpointed");
  });
});

describe("the records keep those of ended processes that criu may bring back", () => {
  const gone = () => Promise.resolve(false);
  const record = (pid: number, extra: Partial<HeldRecord> = {}): HeldRecord => ({
    process: { pid, start: 100 },
    heldMiB: { "GPU-00000000-0000-0000-0000-000000000001": 4096 },
    at: Date.now(),
    ...extra,
  });

  test("an ended process's record with a mark is kept for ended() and left out of list(); without one, removed", async () => {
    const dir = await tempDir("ckpt-records-");
    const records = new FileHeldRecords(path.join(dir, "held"), gone);
    await records.put(record(11, { mark: "1:0:abc" }));
    await records.put(record(12));
    await records.put(record(13, { mark: "1:0:old", at: Date.now() - ENDED_RECORD_KEEP_MS - 1 }));
    assert.deepEqual(await records.list(), []);
    const ended = await records.ended();
    assert.deepEqual(ended.map((r) => [r.process.pid, r.mark]), [[11, "1:0:abc"]]);
    assert.deepEqual(await readdir(path.join(dir, "held")), ["11-100.json"]);
  });

  test("records in memory keep an ended process's marked record for 30 days, to the ms; without a mark, none", async () => {
    const records = new MemoryHeldRecords(() => false); // every process has ended
    await records.put(record(31, { mark: "1:0:abc" }));
    await records.put(record(32));
    assert.deepEqual(await records.list(), []);
    assert.deepEqual((await records.ended()).map((r) => r.process.pid), [31]);
    assert.deepEqual((await records.ended()).map((r) => r.process.pid), [31], "still kept");
    // The boundary, as both kinds of records share it: 30 days exactly is kept, a ms more is not.
    const at = 1_000_000;
    assert.equal(keptEnded(record(33, { mark: "m", at }), at + ENDED_RECORD_KEEP_MS), true);
    assert.equal(keptEnded(record(33, { mark: "m", at }), at + ENDED_RECORD_KEEP_MS + 1), false);
    assert.equal(keptEnded(record(34, { at }), at), false);
  });

  test("a record's mark is read strictly", async () => {
    const dir = await tempDir("ckpt-records-");
    const held = path.join(dir, "held");
    const records = new FileHeldRecords(held, () => Promise.resolve(true));
    await records.put(record(21, { mark: "1:0:abc" }));
    const file = path.join(held, "21-100.json");
    const text = JSON.parse(await readFile(file, "utf8"));
    await writeFile(file, JSON.stringify({ ...text, mark: "x".repeat(513) }), { mode: 0o600 });
    await assert.rejects(
      records.get({ pid: 21, start: 100 }),
      /record .*21-100\.json cannot be read: .*mark.*a string of 1 to 512 characters/,
    );
    await writeFile(file, JSON.stringify({ ...text, mark: 7 }), { mode: 0o600 });
    await assert.rejects(records.get({ pid: 21, start: 100 }), /mark/);
  });
});

describe("a process's identity", () => {
  test("a start unknown on either side is no difference; two starts known must be equal", () => {
    assert.equal(sameProcess({ pid: 5, start: 10 }, { pid: 5 }), true);
    assert.equal(sameProcess({ pid: 5 }, { pid: 5, start: 10 }), true);
    assert.equal(sameProcess({ pid: 5, start: 10 }, { pid: 5, start: 11 }), false);
    assert.equal(sameProcess({ pid: 5 }, { pid: 6 }), false);
  });
});

describe("the Linux host's lasting mark tells apart what criu restores", () => {
  test("two processes alike but in other cgroups (two containers' pid 1) have other marks", async () => {
    const proc = (cgroup: string): ProcReader => ({
      list: () => Promise.resolve([]),
      read: (file) =>
        Promise.resolve(
          {
            status: "Name:\tserve\nUid:\t0\t0\t0\t0\nNSpid:\t4242\t1\n",
            cmdline: "python\0serve.py\0",
            cgroup,
            stat: "4242 (serve) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0",
          }[file.split("/").pop()!] ?? "",
        ),
    });
    const mark = (cgroup: string) =>
      new LinuxHost({ nvml: false, recordsDir: false, reader: proc(cgroup) })
        .lastingMark({ pid: 4242, start: 777 });
    const a = await mark("0::/system.slice/runc-aaaa.scope\n");
    assert.match(a ?? "", /^1:0:[0-9a-f]{64}:[0-9a-f]{64}$/);
    assert.equal(await mark("0::/system.slice/runc-aaaa.scope\n"), a, "the same container: same");
    assert.notEqual(await mark("0::/system.slice/runc-bbbb.scope\n"), a);
    assert.equal(await mark(""), undefined, "no cgroups read: no mark");
  });
});

/** Waits (2 s at most) till `pid` runs `program`: its command line read from /proc says so. */
async function execed(pid: number, program: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (cmdline.startsWith(`${program}\0`)) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe(
  "the Linux host's lasting mark, from /proc",
  { skip: process.platform !== "linux" },
  () => {
    test("the pid in its namespace, the uid and its command line's SHA-256; a stale start gives none", async () => {
      const child = spawn("sleep", ["30"], { stdio: "ignore" });
      try {
        const pid = child.pid!;
        // Read after its exec: while the kernel execs it, its command line reads empty (a flake
        // on a busy machine).
        await execed(pid, "sleep");
        const host = new LinuxHost({ nvml: false, recordsDir: false });
        const who: ProcessIdentity | undefined = await host.identify(pid);
        assert.ok(who?.start !== undefined);
        const mark = await host.lastingMark(who);
        const uid = process.getuid?.() ?? 0;
        assert.match(mark ?? "", new RegExp(`^${pid}:${uid}:[0-9a-f]{64}:[0-9a-f]{64}$`));
        assert.equal(await host.lastingMark({ pid }), mark, "the same without a start");
        assert.equal(await host.lastingMark({ pid, start: who.start + 1 }), undefined);
        const other = spawn("sleep", ["31"], { stdio: "ignore" });
        try {
          await execed(other.pid!, "sleep");
          const otherMark = await host.lastingMark({ pid: other.pid! });
          assert.notEqual(otherMark?.split(":")[2], mark?.split(":")[2], "another command line");
        } finally {
          other.kill("SIGKILL");
        }
        await host.close();
      } finally {
        child.kill("SIGKILL");
      }
      await new Promise((resolve) => child.once("exit", resolve));
      assert.equal(
        await new LinuxHost({ nvml: false, recordsDir: false }).lastingMark({ pid: child.pid! }),
        undefined,
        "an ended process has none",
      );
    });
  },
);
