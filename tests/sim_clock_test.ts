// Virtual time moves only while the program waits on the simulator (a driver call, sim.sleep, an
// awaited kernel), never because an unrelated promise is pending; and closing the driver.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SimulatedMachine, VirtualClock } from "../mock/mod.ts";
import { CudaProcess } from "../mod.ts";
import { CUDA_ERROR_NOT_READY, CUDA_SUCCESS } from "../core/driver.ts";

describe("the virtual clock", () => {
  test("the issue's example: an unawaited 3 s kernel, other awaits, then lock (200 ms) gives NOT_READY at t=200", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 64 });
    target.launch(3000);
    await target.memoryChunkedSha256();
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(sim.now(), 0, "nothing waited on the simulator yet");
    assert.equal(await sim.driver.lock(target.pid, { timeoutMs: 200 }), CUDA_ERROR_NOT_READY);
    assert.equal(sim.now(), 200);
    assert.equal(target.state, "running");
  });

  test("awaiting a kernel alone moves time to its end", async () => {
    const sim = new SimulatedMachine();
    await sim.spawn().launch(500);
    assert.equal(sim.now(), 500);
  });

  test("kernels on one process run one after another; awaiting the second waits for both", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    p.launch(300);
    await p.launch(200);
    assert.equal(sim.now(), 500);
  });

  test("concurrent waits overlap in virtual time, firing in time order", async () => {
    const sim = new SimulatedMachine();
    const seen: number[] = [];
    const wall = performance.now();
    await Promise.all(
      [5000, 10, 60_000].map((ms) => sim.sleep(ms).then(() => seen.push(sim.now()))),
    );
    assert.deepEqual(seen, [10, 5000, 60_000]);
    assert.ok(performance.now() - wall < 1000);
  });

  test("a lock with timeout 0 waits for an unawaited kernel to end", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    p.launch(2300);
    assert.equal(await sim.driver.lock(p.pid, { timeoutMs: 0 }), CUDA_SUCCESS);
    assert.ok(sim.now() >= 2300 && sim.now() < 2301);
  });

  test("a passive timer alone does not move the clock; a driving one fires it in its turn", async () => {
    const clock = new VirtualClock();
    const seen: string[] = [];
    clock.setTimer(5, () => seen.push("passive"), { passive: true });
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(seen.length, 0);
    assert.equal(clock.moving, false);
    await new Promise<void>((r) => clock.setTimer(10, () => (seen.push("driving"), r())));
    assert.deepEqual(seen, ["passive", "driving"]);
  });

  test("a timer of NaN ms, or without a function, is refused: the clock goes on", async () => {
    const clock = new VirtualClock(), sim = new SimulatedMachine({ clock }), p = sim.spawn();
    assert.throws(
      () => clock.setTimer(NaN, () => {}),
      /^TypeError: setTimer: ms must be a number, got NaN$/,
    );
    assert.throws(
      () => clock.setTimer(1, 5 as never),
      /^TypeError: setTimer: fn must be a function, got 5$/,
    );
    await new CudaProcess(p.pid, { machine: sim }).suspend(); // would wait for good at NaN ms
    assert.equal(p.state, "checkpointed");
    assert.ok(Number.isFinite(sim.now()));
  });

  test("timers due at one time fire in the order they were set", async () => {
    const clock = new VirtualClock();
    const seen: number[] = [];
    for (const n of [1, 2, 3]) clock.setTimer(10, () => seen.push(n));
    await new Promise<void>((r) => clock.setTimer(20, r));
    assert.deepEqual(seen, [1, 2, 3]);
  });

  test("a hold let go twice counts once: another hold still moves the clock", async () => {
    const clock = new VirtualClock();
    const [first, second] = [clock.hold(), clock.hold()];
    first();
    first();
    assert.equal(clock.moving, true, "the second hold is still there");
    let fired = false;
    clock.setTimer(5, () => fired = true, { passive: true }); // only a hold moves time to it
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(fired, true);
    second();
    assert.equal(clock.moving, false);
  });

  test("a cleared timer never fires", async () => {
    const clock = new VirtualClock();
    let fired = false;
    const h = clock.setTimer(5, () => fired = true);
    clock.clearTimer(h);
    await new Promise<void>((r) => clock.setTimer(10, r));
    assert.equal(fired, false);
  });

  test("a sleep aborted lets its time go: a wait for a state, aborted, stops the clock there", async () => {
    const sim = new SimulatedMachine();
    const proc = new CudaProcess(sim.spawn().pid, { machine: sim });
    const stop = new AbortController();
    void sim.sleep(5).then(() => stop.abort());
    const waiting = proc.waitForState("checkpointed", { signal: stop.signal, intervalMs: 60_000 });
    await assert.rejects(waiting);
    await new Promise((r) => setTimeout(r, 10)); // a minute of sleep, were it still under way
    assert.ok(sim.now() < 10, `the clock stopped at the abort, not at ${sim.now()} ms`);
    await assert.rejects(sim.sleep(1000, stop.signal), "an aborted signal: no sleep");
  });

  test("a kernel of a process that exits rejects when awaited, and not at all when not", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    p.launch(1000); // nobody awaits it: no unhandled rejection may follow
    const awaited = p.launch(1000);
    p.exit();
    await assert.rejects(awaited, /process \d+ exited before its kernel finished/);
    await new Promise((r) => setTimeout(r, 20));
  });

  test("work launched while checkpointed waits for unlock", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 64 });
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    let ran = false;
    const kernel = p.launch(5).then(() => ran = true);
    await sim.sleep(1000);
    assert.equal(ran, false);
    await sim.driver.restore(p.pid, null);
    await sim.driver.unlock(p.pid);
    await kernel;
    assert.equal(ran, true);
  });

  test("the real clock, sped up, runs a 1 GiB checkpoint in about its measured time", async () => {
    // At 10x, about 75 real ms; the upper bound leaves a busy machine 300 ms of its own (it failed
    // once at 50x, 2141 simulated ms: 43 real ms, on two cores loaded 7).
    const sim = new SimulatedMachine({ clock: "real", speed: 10 });
    const p = sim.spawn({ memoryMiB: 1024 });
    const t = sim.now();
    await sim.driver.lock(p.pid, null);
    await sim.driver.checkpoint(p.pid);
    const ms = sim.now() - t;
    assert.ok(ms >= 740 && ms < 4000, `took ${ms} simulated ms`);
    sim.close();
  });
});

describe("closing the driver", () => {
  test("later calls reject saying so; calls and sleeps under way reject; nothing is left pending", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 });
    await sim.driver.lock(p.pid, null);
    const ckpt = sim.driver.checkpoint(p.pid);
    const nap = sim.sleep(10_000);
    const kernelWaitedOn = sim.spawn().launch(10_000);
    kernelWaitedOn.then(() => {}, () => {});
    sim.close();
    await assert.rejects(ckpt, /simulated driver was closed/);
    await assert.rejects(nap, /simulated driver was closed/);
    await assert.rejects(kernelWaitedOn, /simulated driver was closed/);
    await assert.rejects(
      sim.driver.getState(p.pid),
      /the simulated driver was closed: cannot call cuCheckpointProcessGetState/,
    );
    await assert.rejects(sim.driver.listGpus(), /simulated driver was closed/);
    await assert.rejects(sim.driver.driverVersion(), /simulated driver was closed/);
    assert.throws(() => sim.spawn(), /simulated driver was closed: cannot spawn a process/);
    assert.equal((sim.time as VirtualClock).pending, 0);
  });

  test("asyncDispose closes it", async () => {
    const sim = new SimulatedMachine();
    await sim[Symbol.asyncDispose]();
    await assert.rejects(sim.driver.lock(4000, null), /closed/);
  });

  test("on the real clock, a program with an unawaited kernel exits; so does one closed mid-sleep", () => {
    const mod = new URL("../mock/mod.ts", import.meta.url).pathname;
    const file = join(tmpdir(), `sim_exit_${process.pid}.ts`);
    writeFileSync(
      file,
      `import { SimulatedMachine } from ${JSON.stringify(mod)};
const sim = new SimulatedMachine({ clock: "real" });
sim.spawn().launch(60_000);
const idle = new SimulatedMachine({ clock: "real" });
idle.sleep(60_000).catch(() => console.log("sleep rejected"));
idle.close();
console.log("done");
`,
    );
    const args = "Deno" in globalThis ? ["run", "-A", file] : [file];
    const t = performance.now();
    const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 20_000 });
    rmSync(file, { force: true });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, "done\nsleep rejected\n");
    assert.ok(performance.now() - t < 15_000);
  });
});
