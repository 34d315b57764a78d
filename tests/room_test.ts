// The room check and process identity on the simulator: records follow the process, not the
// number a handle was made with, nor the handle; a reused pid is another process; the check's
// state belongs to a session that closes with its driver; checkRoom: false skips the read.
// Runs unchanged under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { join } from "node:path";

import {
  CudaProcess,
  GpuRoomError,
  RefusedError,
  restoreSnapshot,
  runGroup,
  snapshot,
} from "../mod.ts";
import type { HeldRecord, ProcessIdentity } from "../core/host.ts";
import type { Machine } from "../core/machine.ts";
import { sessionOf } from "../core/process.ts";
import { heldIn } from "../core/room.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";
import { heldWhenCheckpointed } from "./support/held.ts";
import { tempDirs } from "./support/temp_dirs.ts";

const base = tempDirs("ckpt-room-test-");

describe("a thread id and the pid are one process, for the room too", () => {
  test("suspended through the pid, a resume through a thread id is refused for room like the pid's", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 4096, extraThreads: 3 });
    await new CudaProcess(target.pid, { machine: sim }).suspend();
    const filler = sim.fillGpu(0, { leaveMiB: 1024 });
    const calls = sim.driver.calls.length;
    for (const id of [target.pid, target.threads[1], target.threads[3], target.tid]) {
      await assert.rejects(
        new CudaProcess(id, { machine: sim }).resume(),
        (err: unknown) => err instanceof GpuRoomError && err.pid === id,
        `through ${id}`,
      );
    }
    assert.deepEqual(
      sim.driver.calls.slice(calls).filter((c) => c.op !== "getState"),
      [],
      "no restore reached the driver, through any id",
    );
    assert.equal(target.restoreRefused, false, "the driver never ran out");
    filler.exit();
    const outcome = await new CudaProcess(target.threads[2], { machine: sim }).resume();
    assert.equal(outcome.roomCheck, "checked");
    assert.equal(target.state, "running");
  });

  test("suspended through a thread id by a group, recorded for the process", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024, extraThreads: 2 });
    const result = await runGroup("suspend", [target.threads[2]], { machine: sim });
    assert.equal(result.ok, true);
    assert.deepEqual(heldWhenCheckpointed(sim, target.pid), {
      [sim.gpus[0].uuid]: 1024 + sim.gpus[0].contextMiB,
    });
    sim.fillGpu(0);
    const back = await runGroup("resume", [target.pid], { machine: sim });
    assert.ok(back.processes[0].error instanceof GpuRoomError);
    assert.equal(target.state, "checkpointed");
  });

  test("checkRoom: false skips the read before the checkpoint; nothing is recorded or checked", async () => {
    const sim = new SimulatedMachine();
    let reads = 0;
    const host = sim.host;
    const counted = {
      ...forward(sim),
      host: hostWith(host, { gpuMemory: () => (reads++, host.gpuMemory!()) }),
    };
    const target = sim.spawn({ memoryMiB: 1024 });
    const proc = new CudaProcess(target.pid, { machine: counted });
    await proc.suspend({ checkRoom: false });
    assert.equal(reads, 0, "no NVML read");
    assert.equal(heldWhenCheckpointed(sim, target.pid), undefined);
    const resumed = await proc.resume();
    assert.deepEqual(resumed.roomCheck, {
      unknown: "no record of the GPU memory it held (kept in memory): another program " +
        "checkpointed it, or it was checkpointed on another machine or without the record",
    });
    await proc.suspend();
    assert.equal(reads, 1, "one read when asked for");
    assert.equal((await proc.resume({ checkRoom: false })).roomCheck, "skipped");
    assert.equal(reads, 1);
  });
});

describe("what a process holds, as the host tells it", () => {
  test("a process the host lists with no GPU memory is not recorded as holding none", async () => {
    // NVML lists a process with 0 MiB (its memory not counted yet): no figure, rather than 0,
    // which would let any restore of it through unchecked.
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    const host = sim.host;
    const gpuMemory = async () => {
      const report = await host.gpuMemory!();
      if (!("byPid" in report)) return report;
      const byPid = new Map(report.byPid).set(target.pid, { [sim.gpus[0].uuid]: 0 });
      return { ...report, byPid };
    };
    const machine = { ...forward(sim), host: hostWith(host, { gpuMemory }) };
    const proc = new CudaProcess(target.pid, { machine });
    await proc.suspend();
    assert.equal(heldWhenCheckpointed(sim, target.pid), undefined);
    const resumed = await proc.resume();
    assert.ok(typeof resumed.roomCheck === "object", `not checked: ${resumed.roomCheck}`);
    assert.match(resumed.roomCheck.unknown, /^no record of the GPU memory it held/);
  });
});

/** A simulated machine whose host says a process started at `starts.get(pid)` (a test's clock). */
function withStarts(sim: SimulatedMachine, starts: Map<number, number>): Machine {
  const host = sim.host;
  const identify = async (id: number): Promise<ProcessIdentity | undefined> => {
    const found = await host.identify!(id);
    return found && { pid: found.pid, start: starts.get(found.pid) ?? 1 };
  };
  return { ...forward(sim), host: hostWith(host, { identify }) };
}

/** A handle on a simulated process; `replace()`: it ends and another gets its pid (a later start). */
function handleOnReusedPid() {
  const sim = new SimulatedMachine();
  const starts = new Map<number, number>();
  const machine = withStarts(sim, starts);
  const target = sim.spawn();
  starts.set(target.pid, 100);
  const proc = new CudaProcess(target.pid, { machine });
  return { sim, machine, target, proc, replace: () => starts.set(target.pid, 200) };
}

describe("a pid that is reused is another process", () => {
  test("a handle made for one process refuses to act on the next one with its pid", async () => {
    const { sim, machine, target, proc, replace } = handleOnReusedPid();
    assert.equal(await proc.state(), "running");
    replace();
    const before = sim.driver.calls.length;
    await assert.rejects(proc.lock(), (err: unknown) => {
      assert.ok(err instanceof RefusedError);
      assert.equal(err.code, "REPLACED");
      assert.match(err.message, /the process this handle was made for has ended/);
      return true;
    });
    assert.equal(sim.driver.calls.length, before, "nothing reached the driver");
    // A new handle is for the new process.
    assert.equal((await new CudaProcess(target.pid, { machine }).lock()).state, "locked");
  });

  test("restoreThreadId() first (CRIU's flow) ties the handle too, and is refused once replaced", async () => {
    // Before, it went round the check: it answered the new process's thread, and a handle first
    // used through it then suspended whatever held the pid later.
    const { sim, target, proc, replace } = handleOnReusedPid();
    assert.equal(await proc.restoreThreadId(), target.tid);
    replace();
    const before = sim.driver.calls.length;
    for (const call of [() => proc.restoreThreadId(), () => proc.suspend()]) {
      const err = await call().catch((e) => e);
      assert.ok(err instanceof RefusedError && err.code === "REPLACED", String(err));
    }
    const err = await proc.suspend().catch((e) => e);
    assert.match(err.message, /^suspend of process \d+ refused: the process this handle was/);
    assert.equal(sim.driver.calls.length, before, "nothing reached the driver");
    assert.equal(target.state, "running");
  });

  test("a record of an earlier process with the pid is not this process's", async () => {
    const sim = new SimulatedMachine();
    const starts = new Map<number, number>();
    const machine = withStarts(sim, starts);
    const target = sim.spawn({ memoryMiB: 4096 });
    starts.set(target.pid, 100);
    await new CudaProcess(target.pid, { machine }).suspend();
    sim.fillGpu(0);
    // Same pid, a later start: not the process the record was written for.
    starts.set(target.pid, 300);
    await assert.rejects(new CudaProcess(target.pid, { machine }).resume(), (err: unknown) => {
      // Nothing known, nothing refused: the driver's own answer.
      assert.ok(!(err instanceof GpuRoomError), String(err));
      return true;
    });
  });
});

describe("the room check belongs to the machine's session", () => {
  test("two handles share it; a machine without a host keeps its records for itself", async () => {
    const sim = new SimulatedMachine();
    const bare: Machine = { driver: sim.driver }; // no host: no /proc, no NVML, no shared records
    const target = sim.spawn({ memoryMiB: 256 });
    const a = new CudaProcess(target.pid, { machine: bare });
    const b = new CudaProcess(target.pid, { machine: bare });
    await a.suspend();
    const resumed = await b.resume();
    assert.deepEqual(resumed.roomCheck, {
      unknown: "no record of the GPU memory it held (kept in memory): another program " +
        "checkpointed it, or it was checkpointed on another machine or without the record",
    });
    assert.equal(target.state, "running");
    await Promise.all([a.close(), b.close()]);
    assert.notEqual(sessionOf(bare), sessionOf(sim), "each machine has its own");
  });
});

/**
 * A simulated machine whose records count each `list` and `ended` read. Once `reset`, a `gated`
 * read waits until 30 records were written (1 s at most), claims for `list`, records of what a
 * process held for `ended`: as each of 30 restores writes one before its read, all 30 reads are
 * then asked for while the first is under way.
 */
function countedReads(gated: "list" | "ended") {
  const sim = new SimulatedMachine(), records = sim.heldRecords;
  const reads = { list: 0, ended: 0 };
  let puts = 0, written = Promise.withResolvers<void>();
  const counts = (r: HeldRecord) => (r.claim !== undefined) === (gated === "list");
  const heldRecords = new Proxy(records, {
    get(target, key) {
      if (key === "put") {
        return (r: HeldRecord) =>
          target.put(r).then(() => void (counts(r) && ++puts === 30 && written.resolve()));
      }
      if (key === "list" || key === "ended") {
        return async () => {
          reads[key]++;
          const late = new Promise((r) => setTimeout(r, 1000));
          if (key === gated) await Promise.race([written.promise, late]);
          return await target[key]();
        };
      }
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const machine = machineWith(sim, { host: hostWith(sim.host, { heldRecords }) });
  const reset = () =>
    void ([puts, written, reads.list, reads.ended] = [0, Promise.withResolvers(), 0, 0]);
  return { sim, reads, machine, reset };
}

describe("restores at once share their reads of the records", () => {
  test("a resume of 30 at once lists the records twice, not once a process", async () => {
    // Each restore's check reads every record (the claims of other programs); one listing begun
    // after a restore made its claim serves it as well as its own would, so those asking before
    // it begins share it. Once per process, 200 processes read 40 000 records (3.6 s).
    const { sim, reads, machine, reset } = countedReads("list");
    const targets = Array.from({ length: 30 }, () => sim.spawn({ memoryMiB: 256 }));
    const pids = targets.map((t) => t.pid);
    assert.equal((await runGroup("suspend", pids, { machine })).ok, true);
    reset();
    const back = await runGroup("resume", pids, { machine });
    assert.deepEqual(back.processes.map((p) => p.roomCheck), pids.map(() => "checked"));
    assert.ok(targets.every((t) => t.state === "running"));
    assert.equal(reads.list, 2, "the first, and one for the 29 that asked meanwhile");
  });

  test("a restore of 30 trees reads the ended processes' records twice, not once a tree", async () => {
    // Each process brought back forgets the record its ended self left (kept for a resume after
    // criu brought it back some other way), found among the ended ones by its lasting mark.
    const { sim, reads, machine, reset } = countedReads("ended");
    const pids = Array.from({ length: 30 }, () => sim.spawn({ memoryMiB: 64 }).pid);
    const dir = join(base(), "snap");
    await snapshot(pids, dir, { machine });
    assert.equal((await sim.heldRecords.ended()).length, 30, "each ended process's record kept");
    reset();
    await restoreSnapshot(dir, { machine });
    assert.ok(pids.every((pid) => sim.process(pid)?.state === "running"));
    assert.equal((await sim.heldRecords.ended()).length, 0, "each forgotten by its successor");
    assert.equal(reads.ended, 2, "the first, and one for the 29 that asked meanwhile");
  });

  test("a restore never shares a listing begun before its claim was written", async () => {
    // Two programs (sessions) on one GPU with room for one of X1, X2. In each, a small restore's
    // listing (B1's, B2's) begins before either X claims, and answers once both X claims are in:
    // were an X served by it, neither would see the other's claim and one would run out.
    const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 10_000, contextMiB: 500 }] });
    const records = sim.heldRecords, both = Promise.withResolvers<void>();
    let armed = false, claims = 0;
    const session = () => {
      const heldRecords = new Proxy(records, {
        get(target, key) {
          if (key === "put") {
            return (r: HeldRecord) =>
              target.put(r).then(() => {
                const big = Object.values(r.heldMiB)[0] > 1000;
                if (armed && r.claim && big && ++claims === 2) setTimeout(both.resolve, 5);
              });
          }
          if (key === "list") {
            return async () => {
              const early = await target.list(); // as read when it began
              const late = new Promise((ok) => setTimeout(ok, 1000));
              if (armed) await Promise.race([both.promise, late]);
              return early;
            };
          }
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      return machineWith(sim, { host: hostWith(sim.host, { heldRecords }) });
    };
    const [m1, m2] = [session(), session()];
    const proc = (memoryMiB: number, machine: Machine) =>
      new CudaProcess(sim.spawn({ memoryMiB }).pid, { machine });
    const [b1, b2, x1, x2] = [proc(100, m1), proc(100, m2), proc(3000, m1), proc(3000, m2)];
    for (const p of [b1, b2, x1, x2]) await p.suspend();
    sim.spawn({ memoryMiB: 4000 }); // 4500 with its context: 5500 free, 3500 for each X
    armed = true;
    const small = Promise.all([b1.resume(), b2.resume()]);
    await new Promise((ok) => setTimeout(ok, 10));
    const outcomes = await Promise.allSettled([x1.resume(), x2.resume()]);
    await small;
    assert.equal(claims, 2);
    for (const o of outcomes) {
      if (o.status === "rejected") assert.ok(o.reason instanceof GpuRoomError, String(o.reason));
    }
    assert.deepEqual([x1, x2].map((p) => sim.process(p.pid)?.restoreRefused), [false, false]);
  });

  for (const stuck of ["list", "gpuMemory"] as const) {
    test(`a ${stuck} read that never settles holds a later restore a while, not for good`, async () => {
      // One read lost (a host's promise never settled, a file system that hung once): the
      // restore that made it waits, and the next read begins all the same, a second later.
      const sim = new SimulatedMachine(), host = sim.host, records = host.heldRecords!;
      let hang = false;
      const hung = <T>(read: () => Promise<T>) =>
        hang ? (hang = false, new Promise<T>(() => {})) : read();
      const heldRecords = new Proxy(records, {
        get(target, key) {
          if (key === "list" && stuck === "list") return () => hung(() => target.list());
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      const gpuMemory = () => stuck === "gpuMemory" ? hung(host.gpuMemory!) : host.gpuMemory!();
      const machine = machineWith(sim, { host: hostWith(host, { heldRecords, gpuMemory }) });
      const [a, b] = [0, 1].map(() => new CudaProcess(sim.spawn().pid, { machine }));
      await a.suspend();
      await b.suspend();
      hang = true;
      void a.resume(); // its check's read never answers
      await new Promise((ok) => setTimeout(ok, 10));
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise((ok) => timer = setTimeout(() => ok("still waiting"), 3000));
      const resumed = b.resume().then((o) => o.roomCheck);
      assert.equal(await Promise.race([resumed, late]), "checked");
      clearTimeout(timer);
    });
  }
});

describe("a restore of this very process, and a rollback's checkpoint", () => {
  test("an all-or-nothing resume of this process reads no GPU memory first: NVML would wait", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    await new CudaProcess(target.pid, { machine: sim }).suspend(); // recorded, as by another program
    sim.selfPid = target.pid; // now it is the program making the calls
    let reads = 0;
    const host = hostWith(sim.host, { gpuMemory: () => (reads++, sim.host.gpuMemory!()) });
    for (const job of [false, true]) {
      const result = await runGroup("resume", [target.pid], {
        machine: { ...forward(sim), host },
        allOrNothing: true,
        job,
      });
      assert.equal(result.ok, true, `job: ${job}`);
      assert.deepEqual(result.processes[0].roomCheck, {
        unknown: "a process's restore of itself is not checked: NVML would wait for it",
      });
      assert.equal(reads, 0, `job: ${job}: no NVML read`);
      await sim.driver.lock(target.pid, null);
      await sim.driver.checkpoint(target.pid);
    }
  });

  test("a failed resume's outcome keeps its restore's room check, not its rollback checkpoint's", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    await new CudaProcess(target.pid, { machine: sim }).suspend();
    target.failNext("unlock", { code: 999 }); // brought back: locked again, then checkpointed
    let failing = false; // once the restore has ended, no record can be written
    const records = sim.host.heldRecords!;
    const heldRecords = new Proxy(records, {
      get(t, key) {
        if (key === "put" && failing) return () => Promise.reject(new Error("disk full"));
        const value = Reflect.get(t, key);
        return typeof value === "function" ? value.bind(t) : value;
      },
    });
    const result = await runGroup("resume", [target.pid], {
      machine: { ...forward(sim), host: hostWith(sim.host, { heldRecords }) },
      onProgress: (e) => void (e.type === "step-end" && e.step === "restore" && (failing = true)),
    });
    const [outcome] = result.processes;
    assert.deepEqual([outcome.status, outcome.rollback?.ok], ["failed", true]);
    assert.deepEqual(outcome.rollback?.steps.map((s) => s.step), ["checkpoint"]);
    assert.equal(outcome.roomCheck, "checked");
    assert.equal(target.state, "checkpointed");
  });
});

describe("what a process holds, by the host's report", () => {
  test("memory on one of its GPUs and none on the other is held (all of it kept); none at all is not", () => {
    const who = { pid: 4242 },
      byPid = (memory: Record<string, number>) => ({
        byPid: new Map([[4242, memory]]),
      });
    const split = { "GPU-a": 4616, "GPU-b": 0 };
    assert.deepEqual(heldIn(byPid(split), who), split);
    assert.equal(heldIn(byPid({ "GPU-a": 0, "GPU-b": 0 }), who), undefined);
    assert.equal(heldIn(byPid(split), { pid: 4243 }), undefined, "another process");
    assert.equal(heldIn({ unknown: "NVML is not there" }, who), undefined);
  });
});
