// The progress of long work (cli/progress.ts): on a terminal, the live line of a toggle of one and
// of several processes, a snapshot, a restore and a recover, each frame with its phase, bytes done
// of bytes expected, the rate and the time left ("~" where estimated), its elapsed time moving on
// from frame to frame, erased before any other line; off a terminal with --json, the events as one
// JSON object per line of stderr; and the line on a real pseudo-terminal (util-linux's `script`).
// All on the simulator in virtual time (the line is drawn on the machine's clock), with no timed
// assertion. Runs unchanged under `deno test -A` and `bun test`.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";

import { main } from "../cli/main.ts";
import { Printer } from "../cli/report.ts";
import { Progress, type ProgressOptions, size } from "../cli/progress.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { loadSimulator, snapshotSimulator } from "../mock/state_file.ts";
import { cli } from "./cli_support.ts";
import { loud, runtime } from "./fixtures/fake.ts";
import { plantTrace } from "./support/trace.ts";
import { tempDirs } from "./support/temp_dirs.ts";

const base = tempDirs("ckpt-cli-progress-");
const CLEAR = "\r\x1b[2K";

/** Runs `main()` on a terminal: every write in order, as [stream, text]. */
async function onTerminal(args: (string | number)[], machine: SimulatedMachine) {
  const writes: ["out" | "err", string][] = [];
  const code = await main(args.map(String), {
    machine,
    isTerminal: true,
    stdout: (t) => writes.push(["out", t]),
    stderr: (t) => writes.push(["err", t]),
  });
  const frames = writes.filter(([s, t]) =>
    s === "err" && t.startsWith(CLEAR) && t.length > CLEAR.length
  )
    .map(([, t]) => t.slice(CLEAR.length));
  return { code, writes, frames, out: writes.filter(([s]) => s === "out").map(([, t]) => t) };
}

/** Every frame stands alone on the line (nothing written after it but the next frame or the erase), and the last is erased. */
function assertErasedBeforeOutput(writes: ["out" | "err", string][]): void {
  writes.forEach(([stream, text], i) => {
    if (stream !== "err" || !text.startsWith(CLEAR) || text === CLEAR) return;
    const next = writes[i + 1];
    assert.ok(next?.[0] === "err" && next[1].startsWith(CLEAR), `frame ${i} left on the line`);
  });
}

/** The elapsed times of the frames, in s: each later than the one before. */
function assertMovingOn(frames: string[]): void {
  const times = frames.map((f) => Number(/ ([0-9]+\.[0-9]) s(,|:|$)/.exec(f)?.[1]));
  assert.ok(times.every((t, i) => t > 0 && (i === 0 || t > times[i - 1])), times.join(" "));
}

/** A live line alone, on a clock the test moves (`clock.ms`), drawn by no timer. */
function lineOnClock(options: ProgressOptions) {
  const clock = {
    ms: 0,
    now: () => clock.ms,
    sleep: () => Promise.resolve(),
    timer: () => () => {},
  };
  const print = new Printer({ stdout: () => {}, stderr: () => {}, isTerminal: true });
  return { clock, line: new Progress(print, clock, options, false) };
}

/** What a line keeps when it stops (`kept`, each call's rates) through its `keep` option. */
function keeping() {
  const kept: Record<string, number>[] = [];
  return { kept, keep: (rates: Record<string, number>) => Promise.resolve(void kept.push(rates)) };
}

/** A Printer, on a terminal or not, and what it writes to stderr, in order. */
function printerKept(isTerminal: boolean) {
  const written: string[] = [];
  return {
    written,
    print: new Printer({ stdout: () => {}, stderr: (t) => written.push(t), isTerminal }),
  };
}

describe("the live line on a terminal", () => {
  test("a toggle of one pid: its step, GPU memory done of all of it, the rate, the time left", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 8192 }); // 8 GiB and its CUDA context: 9.1 GB
    const suspend = await onTerminal(["--toggle", "-p", p.pid], sim);
    assert.equal(suspend.code, 0);
    assert.deepEqual(suspend.out, []);
    assert.equal(
      suspend.frames[0],
      `toggle ${p.pid} checkpoint 0.4 s: ~0.8 of 9.1 GB, ~2.0 GB/s, ~4.2 s left`,
    );
    for (const frame of suspend.frames) {
      assert.match(
        frame,
        new RegExp(
          `^toggle ${p.pid} checkpoint [0-9.]+ s: ~[0-9.]+ of 9\\.1 GB, ~2\\.0 GB/s, (~[0-9.]+ s left|longer than estimated)$`,
        ),
      );
    }
    assertMovingOn(suspend.frames);
    assertErasedBeforeOutput(suspend.writes);
    assert.equal(suspend.writes.at(-1)![1], CLEAR, "erased at the end");
    // The resume: its GPU memory from the record of the checkpoint, at the restore's rate.
    const resume = await onTerminal(["--toggle", "-p", p.pid], sim);
    assert.equal(
      resume.frames[0],
      `toggle ${p.pid} restore 0.4 s: ~2.0 of 9.1 GB, ~5.0 GB/s, ~1.4 s left`,
    );
  });

  test("several pids: n/N done, what all move together, this run's rate once one is measured; each pid's step", async () => {
    const sim = new SimulatedMachine();
    const [big, small] = [sim.spawn({ memoryMiB: 8192 }), sim.spawn({ memoryMiB: 1024 })];
    const r = await onTerminal(["--toggle", "-p", `${big.pid},${small.pid}`], sim);
    assert.equal(r.code, 0);
    assert.deepEqual(r.out, [`${big.pid} done checkpointed\n`, `${small.pid} done checkpointed\n`]);
    assert.equal(
      r.frames[0],
      `toggle 0.4 s, 0/2 done: ~1.6 of 10.8 GB, ~4.0 GB/s, ~4.2 s left; ${big.pid} checkpoint, ${small.pid} checkpoint`
        .slice(0, 78) + "…",
    );
    // Once the small one is checkpointed, its rate (measured here) is the big one's estimate.
    const later = r.frames.find((f) => f.includes("1/2 done"))!;
    assert.match(
      later,
      new RegExp(
        `^toggle [0-9.]+ s, 1/2 done: ~[0-9.]+ of 10\\.8 GB, ~[0-9.]+ GB/s, ~[0-9.]+ s left; ${big.pid} checkpoi(nt|…)$`,
      ),
    );
    assertMovingOn(r.frames);
    assertErasedBeforeOutput(r.writes);
  });

  test("a snapshot and its restore: each phase, with what it moves", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096, command: "python serve.py" });
    const dir = join(base(), "snap");
    const made = await onTerminal(["snapshot", "--pid", p.pid, "--dir", dir], sim);
    assert.equal(made.code, 0);
    const phases = [...new Set(made.frames.map((f) => f.replace(/ [0-9.]+ s(:.*)?$/, "")))];
    assert.deepEqual(phases, ["suspending the CUDA processes", "dumping"]);
    assert.match(
      made.frames[0],
      /^suspending the CUDA processes 0\.4 s: ~0\.8 of 4\.8 GB, ~2\.0 GB\/s, ~2\.0 s left$/,
    );
    const dumping = made.frames.filter((f) => f.startsWith("dumping"));
    for (const f of dumping) {
      assert.match(
        f,
        /^dumping [0-9.]+ s(: [0-9.]+ of ~4\.8 GB written, [0-9.]+ [GM]B\/s, ~[0-9.]+ s left)?$/,
      );
    }
    assert.ok(dumping.some((f) => f.includes("written")), "criu's count shows");
    assertMovingOn(made.frames);
    assertErasedBeforeOutput(made.writes);
    // The closing line's images are the manifest's files; criu's count, which differs on the
    // simulator (its files hold only what was written), is said beside them.
    assert.match(
      made.out.at(-1)!,
      /: 1 tree, 1 process \(1 with CUDA, 4616 MiB of GPU memory\), [0-9.]+ (B|kB) of images \(the manifest's files; simulated criu counted 4\.87 GB as it wrote them\); suspend/,
    );
    const back = await onTerminal(["restore-snapshot", dir], sim);
    assert.equal(back.code, 0);
    const restoring = back.frames.filter((f) => f.startsWith("restoring the process trees"));
    assert.equal(
      restoring[0],
      "restoring the process trees 0.4 s: ~0.8 of 4.8 GB, ~2.0 GB/s, ~2.0 s left",
    );
    assert.ok(
      back.frames.some((f) =>
        /^resuming on the GPUs [0-9.]+ s: ~[0-9.]+ of 4\.8 GB, ~5\.0 GB\/s, /.test(f)
      ),
    );
    assertMovingOn(back.frames);
    assertErasedBeforeOutput(back.writes);
  });

  test("an interrupt: the line erased before what it says, then the line of putting things back", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 });
    const writes: ["out" | "err", string][] = [];
    const code = await main(["snapshot", "--pid", String(p.pid), "--dir", join(base(), "s")], {
      machine: sim,
      isTerminal: true,
      stdout: (t) => writes.push(["out", t]),
      stderr: (t) => writes.push(["err", t]),
      interrupts: {
        // Ctrl-C 2 s in, during the suspend (virtual time, which the snapshot's own calls move).
        watch: (onInterrupt) => sim.clock.timer!(2000, () => onInterrupt()),
        exit: () => assert.fail("one interrupt only"),
        raise: (signal) => assert.fail(`raised ${signal}`),
      },
    });
    assert.equal(code, 130);
    const said = writes.findIndex(([, t]) => t.startsWith("cuda-checkpoint: snapshot interrupted"));
    assert.ok(said > 0, JSON.stringify(writes.slice(-3)));
    assert.equal(writes[said - 1][1], CLEAR, "the line was erased first");
    const frame = `${CLEAR}suspending the CUDA processes 1.8 s: ~3.6 of 4.8 GB, `;
    assert.ok(writes[said - 2][1].startsWith(frame), writes[said - 2][1]);
    const after = writes.slice(said + 1).filter(([, t]) => t.startsWith(CLEAR) && t !== CLEAR);
    const back =
      /^putting things back [0-9.]+ s: ~[0-9.]+ of 4\.8 GB, ~5\.0 GB\/s, ~[0-9.]+ s left; [0-9]+ restore$/;
    assert.ok(after.some(([, t]) => back.test(t.slice(CLEAR.length))), "the rollback, its figures");
    assertErasedBeforeOutput(writes);
    assert.equal(sim.process(p.pid)!.state, "running", "put back");
  });

  test("an interrupt while two checkpoints run: each undone as it ends, the line counting both back", async () => {
    const sim = new SimulatedMachine();
    const pids = [sim.spawn({ memoryMiB: 8192 }).pid, sim.spawn({ memoryMiB: 8192 }).pid];
    const writes: string[] = [];
    const code = await main(["snapshot", "--pid", pids.join(","), "--dir", join(base(), "s")], {
      machine: sim,
      isTerminal: true,
      stdout: (t) => writes.push(t),
      stderr: (t) => writes.push(t),
      interrupts: {
        watch: (onInterrupt) => sim.clock.timer!(2000, () => onInterrupt()), // in the checkpoints
        exit: () => assert.fail("one interrupt only"),
        raise: (signal) => assert.fail(`raised ${signal}`),
      },
    });
    assert.equal(code, 130);
    const back = writes.filter((t) => t.startsWith(`${CLEAR}putting things back`));
    const figures =
      /^putting things back [0-9.]+ s: ~[0-9.]+ of 18\.3 GB, ~[0-9.]+ GB\/s, ~[0-9.]+ s left$/;
    assert.ok(back.length >= 3, `the rollback shows: ${JSON.stringify(writes.slice(-4))}`);
    assert.ok(back.every((t) => figures.test(t.slice(CLEAR.length))), JSON.stringify(back));
    assert.deepEqual(pids.map((pid) => sim.process(pid)!.state), ["running", "running"]);
  });

  test("a snapshot's line names a tree's checkpoint still under way beside another's dump, where it fits whole", async () => {
    const sim = new SimulatedMachine();
    for (const columns of [140, 80]) {
      const [big, small] = [sim.spawn({ memoryMiB: 8192 }), sim.spawn({ memoryMiB: 2048 })];
      const frames: string[] = [];
      const code = await main(
        ["snapshot", "--pid", `${big.pid},${small.pid}`, "--dir", join(base(), `s${columns}`)],
        {
          machine: sim,
          isTerminal: true,
          columns: () => columns,
          stdout: () => {},
          stderr: (t) => t.startsWith(CLEAR) && t !== CLEAR && frames.push(t.slice(CLEAR.length)),
        },
      );
      assert.equal(code, 0);
      const beside = frames.filter((f) =>
        f.startsWith("dumping") && f.endsWith(`; ${big.pid} checkpoint`)
      );
      if (columns === 140) assert.ok(beside.length > 0, JSON.stringify(frames));
      assert.ok(frames.every((f) => !f.endsWith("…")), `none cut at ${columns}: ${frames}`);
    }
  });

  test("recover: the resumes of what a snapshot killed outright left suspended", async () => {
    const sim = new SimulatedMachine();
    const a = sim.spawn({ memoryMiB: 8192 });
    const dir = join(base(), "snap");
    mkdirSync(dir, { mode: 0o700 });
    assert.equal((await cli(["--action", "lock", "-p", a.pid], { machine: sim })).code, 0);
    assert.equal((await cli(["--action", "checkpoint", "-p", a.pid], { machine: sim })).code, 0);
    plantTrace(dir, [{ pid: a.pid, start: a.start }], [`tree-${a.pid}`]);
    const r = await onTerminal(["recover", dir], sim);
    assert.equal(r.code, 0);
    assert.match(
      r.frames[0],
      /^resuming the suspended processes 0\.4 s: ~2\.0 of 9\.1 GB, ~5\.0 GB\/s, ~1\.4 s left$/,
    );
    assertErasedBeforeOutput(r.writes);
  });

  test("a rate measured slower than the usual (one process done) never takes the bytes shown back", () => {
    const { clock, line } = lineOnClock({ total: 2, columns: 120 });
    line.event({ type: "phase", phase: "toggle", at: 0 });
    for (const [pid, mib] of [[4000, 1024], [4010, 16384]]) {
      line.event({ type: "step-start", pid, step: "checkpoint", at: 0, gpuMemoryMiB: mib });
    }
    clock.ms = 1000; // each at the usual 2 GB/s: 1.06 GB (the small one, 99%) and 2.0 GB
    assert.match(line.text(), /: ~3\.1 of 18\.3 GB, ~4\.0 GB\/s, /);
    // The small one took 1 s (1.07 GB/s): at that rate the big one has moved 1.07 GB, not 2.0.
    const end = { type: "step-end", pid: 4000, step: "checkpoint", at: 1000, ms: 1000 } as const;
    line.event({ ...end, ok: true, rollback: false });
    assert.match(line.text(), /: ~3\.1 of 18\.3 GB, ~1\.1 GB\/s, /);
    clock.ms = 2000; // 1.07 + 2.15 GB: more than shown, so shown
    assert.match(line.text(), /: ~3\.2 of 18\.3 GB, /);
    // A new phase moves other bytes: it starts from none.
    line.event({ type: "phase", phase: "toggle", at: 2000 });
    line.event({ type: "step-start", pid: 4010, step: "restore", at: 2000, gpuMemoryMiB: 16384 });
    assert.match(line.text(), /: ~0\.0 of 17\.2 GB, /);
    line.stop();
  });

  test("one process undone while the others' checkpoints go on: the line keeps their figures", () => {
    const clock = { now: () => 1000, sleep: () => Promise.resolve(), timer: () => () => {} };
    const print = new Printer({ stdout: () => {}, stderr: () => {}, isTerminal: true });
    const line = new Progress(print, clock, { total: 3, columns: 120 }, false);
    line.event({ type: "phase", phase: "toggle", at: 0 });
    for (const [pid, mib] of [[4000, 2048], [4010, 40960], [4020, 40960]]) {
      line.event({ type: "step-start", pid, step: "checkpoint", at: 0, gpuMemoryMiB: mib });
    }
    const failed = { pid: 4000, step: "checkpoint", at: 900, ms: 900, ok: false } as const;
    line.event({ type: "step-end", ...failed, rollback: false });
    line.event({ type: "step-start", pid: 4000, step: "unlock", at: 900, rollback: true });
    assert.match(
      line.text(),
      /^toggle 0\.0 s, 0\/3 done: ~[0-9.]+ of 85\.9 GB, .*; 4010 checkpoint, 4020 checkpoint, 4000 unlock \(undoing\)$/,
    );
    for (const pid of [4010, 4020]) { // done, then undone: an all-or-nothing group's rollback
      line.event({ type: "step-end", ...failed, pid, ok: true, rollback: false });
      line.event({ type: "step-start", pid, step: "unlock", at: 1000, rollback: true });
    }
    assert.match(
      line.text(),
      /^putting things back 0\.0 s; 4000 unlock \(undoing\), 4010 unlock/,
    );
    line.stop();
  });

  test("drawn from 0.3 s on, however late a tick comes; erased once before the lines that follow it; stopped for good", () => {
    // A clock whose one timer the test fires, as a tick the event loop ran late (at 0.36 s).
    let fire = () => {};
    const clock = {
      ms: 0,
      now: () => clock.ms,
      sleep: () => Promise.resolve(),
      timer: (_ms: number, fn: () => void) => {
        fire = fn;
        return () => void (fire = () => {});
      },
    };
    const { print, written: writes } = printerKept(true);
    const line = new Progress(print, clock, { total: 1 }, false);
    line.event({ type: "phase", phase: "suspend", at: 0 });
    clock.ms = 250;
    fire();
    assert.deepEqual(writes, [], "not before 0.3 s");
    clock.ms = 360;
    fire();
    assert.deepEqual(writes, [`${CLEAR}suspending the CUDA processes 0.4 s`]);
    print.err("first");
    print.err("second");
    line.stop();
    assert.deepEqual(writes.slice(1), [CLEAR, "first\n", "second\n"], "one erase, none after it");
    clock.ms = 1000;
    fire();
    assert.equal(writes.length, 4, "stopped: the timer cancelled, the line not drawn again");
  });

  test("the line alone: estimates, this run's measured rate, the width", () => {
    let now = 0;
    const timers: (() => void)[] = [];
    const clock = {
      now: () => now,
      sleep: () => Promise.resolve(),
      timer: (_ms: number, fn: () => void) => (timers.push(fn), () => {}),
    };
    const { print, written } = printerKept(true);
    const line = new Progress(print, clock, { total: 3, columns: 100 }, false);
    line.event({ type: "phase", phase: "toggle", at: 0 });
    line.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: 4096 });
    now = 250;
    line.event({ type: "step-start", pid: 4102, step: "lock", at: 250 });
    line.event({ type: "process-end", pid: 4100, at: 250, status: "done" });
    now = 1250;
    assert.equal(
      line.text(),
      "toggle 1.3 s, 1/3 done: ~2.5 of 4.3 GB, ~2.0 GB/s, ~0.9 s left; 4101 checkpoint, 4102 lock",
    );
    timers.shift()!();
    assert.deepEqual(written, [`${CLEAR}${line.text()}`], "drawn by the timer, once past 300 ms");
    print.out("a line of output");
    assert.equal(written[1], CLEAR, "erased before it");
    // 4101's checkpoint took 1.718 s: 2.5 GB/s, this run's rate from now on.
    now = 1718;
    line.event({
      type: "step-end",
      pid: 4101,
      step: "checkpoint",
      at: 1718,
      ms: 1718,
      ok: true,
      rollback: false,
    });
    line.event({ type: "step-start", pid: 4103, step: "checkpoint", at: 1718, gpuMemoryMiB: 1024 });
    now = 1918;
    assert.equal(
      line.text(),
      "toggle 1.9 s, 1/3 done: ~4.8 of 5.4 GB, ~2.5 GB/s, ~0.2 s left; 4102 lock, 4103 checkpoint",
    );
    now = 3000;
    assert.match(line.text(), /~5\.4 of 5\.4 GB, ~2\.5 GB\/s, longer than estimated; /);
    // A rollback's step says so, and moves no bytes toward the goal: the line counts its own.
    for (const [pid, step, ok] of [[4102, "lock", false], [4103, "checkpoint", true]] as const) {
      line.event({ type: "step-end", pid, step, at: 3000, ms: 1000, ok, rollback: false });
    }
    line.event({
      type: "step-start",
      pid: 4101,
      step: "restore",
      at: 3000,
      gpuMemoryMiB: 4096,
      rollback: true,
    });
    // No n/N done while things go back: the processes' ends came with their forward steps.
    const back = "putting things back 3.0 s: ~0.0 of 4.3 GB, ~5.0 GB/s, ~0.9 s left";
    assert.equal(line.text(), `${back}; 4101 restore (undoing)`);
    now = 3500;
    assert.match(line.text(), /^putting things back 3\.5 s: ~2\.5 of 4\.3 GB, .*; 4101/);
    const undone = { step: "restore", at: 3900, ms: 900, ok: true, rollback: true } as const;
    line.event({ type: "step-end", pid: 4101, ...undone });
    line.event({ type: "step-start", pid: 4101, step: "unlock", at: 3900, rollback: true });
    const unlocking = "putting things back 3.5 s: 4.3 of 4.3 GB; 4101 unlock (undoing)";
    assert.equal(line.text(), unlocking, "a later undoing step keeps what was put back");
    line.event({ type: "step-end", pid: 4101, ...undone, step: "unlock", ms: 1 });
    assert.equal(line.text(), "putting things back 3.5 s: 4.3 of 4.3 GB");
    line.stop();
    const narrow = new Progress(print, clock, { total: 1, columns: 30 }, false);
    narrow.event({ type: "phase", phase: "checkpoint", at: 0 });
    narrow.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: 100 });
    assert.equal(narrow.text(), "checkpoint checkpoint 0.0 s:…");
    narrow.stop();
    // Minutes once 100 s or more are left: 400 000 MiB (419.4 GB) at 2 GB/s is 210 s.
    const long = new Progress(print, clock, { total: 1, columns: 100 }, false);
    long.event({ type: "phase", phase: "checkpoint", at: 0 });
    long.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: 400_000 });
    assert.equal(
      long.text(),
      "checkpoint checkpoint 0.0 s: ~0.0 of 419.4 GB, ~2.0 GB/s, ~3 min left",
    );
    long.stop();
    // No width given: the terminal's, where it tells (one of no size, 0, tells none: 80).
    for (const columns of [30, 0]) {
      const io = { stdout: () => {}, stderr: () => {}, isTerminal: true, columns: () => columns };
      const told = new Progress(new Printer(io), clock, { total: 1 }, false);
      told.event({ type: "phase", phase: "checkpoint", at: 0 });
      told.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: 4e5 });
      const whole = "checkpoint checkpoint 0.0 s: ~0.0 of 419.4 GB, ~2.0 GB/s, ~3 min left";
      assert.equal(told.text(), columns ? "checkpoint checkpoint 0.0 s:…" : whole, `${columns}`);
      told.stop();
    }
    // 100 s exactly is minutes already: 2e11 bytes at the usual 2 GB/s.
    const hundred = new Progress(print, clock, { total: 1, columns: 100 }, false);
    hundred.event({ type: "phase", phase: "checkpoint", at: 0 });
    const mib = 2e11 / 2 ** 20; // exactly 2e11 bytes
    hundred.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: mib });
    assert.match(hundred.text(), /, ~2 min left$/);
    hundred.stop();
  });

  test("a restore's waits for ports in TIME_WAIT, among its checks: the longest counted down, then the images' estimate", () => {
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({ type: "phase", phase: "check", at: 0 });
    const why = "port 45265 held in TIME_WAIT on this host";
    line.event({ type: "wait", root: 4242, ms: 57_250, why, at: 0 });
    clock.ms = 1000; // another tree's shorter wait: the longer one is what the restore waits for
    line.event({ type: "wait", root: 4343, ms: 2000, why: "port 5000 held in TIME_WAIT", at: 0 });
    assert.equal(line.text(), `checking 1.0 s: waiting 57 s more: ${why}`);
    clock.ms = 57_000;
    assert.equal(line.text(), `checking 57.0 s: waiting 1 s more: ${why}`);
    clock.ms = 57_250;
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 4e9 });
    clock.ms = 58_250; // 1 s into the restore: criu's usual 2 GB/s, not 58 s of it
    assert.equal(
      line.text(),
      "restoring the process trees 58.3 s: ~2.0 of 4.0 GB, ~2.0 GB/s, ~1.0 s left",
    );
    line.stop();
  });

  test("the figures at their edges: seconds up to 100, a dump of all it held, 1 GB", () => {
    // 75 s left is said in seconds: minutes start at 100 s.
    const slow = lineOnClock({ columns: 120 });
    slow.line.event({ type: "phase", phase: "suspend", at: 0, gpuMemoryMiB: { 4100: 143_051 } });
    assert.equal(
      slow.line.text(),
      "suspending the CUDA processes 0.0 s: ~0.0 of 150.0 GB, ~75 s left",
    );
    slow.line.stop();
    // criu's count has reached the GPU memory suspended: a size, no estimate of what is left.
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({ type: "phase", phase: "suspend", at: 0, gpuMemoryMiB: { 4242: 1024 } });
    line.event({ type: "phase", phase: "dump", at: 0 });
    clock.ms = 1000;
    line.event({ type: "bytes", root: 4242, bytes: 1024 * 2 ** 20, at: 1000 });
    assert.equal(line.text(), "dumping 1.0 s: 1.07 GB written, 1.1 GB/s");
    line.stop();
    assert.deepEqual([1e9, 1e6, 1e3, 999].map(size), ["1.00 GB", "1.0 MB", "1.0 kB", "999 B"]);
  });

  test("--events: each event's at is the time since the command began, not the clock's", () => {
    const clock = {
      ms: 5000,
      now: () => clock.ms,
      sleep: () => Promise.resolve(),
      timer: () => () => {},
    };
    const { print, written: lines } = printerKept(false);
    const events = new Progress(print, clock, {}, true);
    clock.ms = 5250;
    events.event({ type: "phase", phase: "toggle", at: 5250 });
    assert.deepEqual(JSON.parse(lines[0]), { event: "phase", phase: "toggle", at: 250 });
  });

  test("a dump's line alone: criu's rate since the dump began, of every tree's count", () => {
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({ type: "phase", phase: "check", at: 0 });
    line.event({
      type: "phase",
      phase: "suspend",
      at: 0,
      gpuMemoryMiB: { 4242: 2048, 4343: 2048 },
    });
    clock.ms = 3000; // 3 s of checks and suspends: none of it criu's writing
    line.event({ type: "phase", phase: "dump", at: 3000 });
    clock.ms = 4000;
    line.event({ type: "bytes", root: 4242, bytes: 1e9, at: 4000 });
    line.event({ type: "bytes", root: 4343, bytes: 1e9, at: 4000 });
    assert.equal(line.text(), "dumping 4.0 s: 2.0 of ~4.3 GB written, 2.0 GB/s, ~1.1 s left");
    line.stop();
  });

  test("a dump beside a tree's checkpoint: no rate of criu's while it holds that dump back, then its own", () => {
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({
      type: "phase",
      phase: "suspend",
      at: 0,
      gpuMemoryMiB: { 4242: 1024, 4343: 8192 },
    });
    line.event({ type: "step-start", pid: 4343, step: "checkpoint", at: 0 });
    clock.ms = 1000; // 4242's tree checkpointed: its dump begins, 4343's checkpoint goes on
    line.event({ type: "phase", phase: "dump", at: 1000 });
    clock.ms = 2000;
    line.event({ type: "bytes", root: 4242, bytes: 1.7e9, at: 2000 });
    clock.ms = 4500; // criu has written all it can; the rate since 1 s would fall, 0.5 GB/s by now
    assert.equal(line.text(), "dumping 4.5 s: 1.7 of ~9.7 GB written; 4343 checkpoint");
    clock.ms = 5000;
    const ended = { pid: 4343, step: "checkpoint", at: 5000, ms: 5000, ok: true } as const;
    line.event({ type: "step-end", ...ended, rollback: false });
    clock.ms = 5200; // nothing new written yet: no rate (not 0.0 MB/s and ~Infinity min left)
    assert.equal(line.text(), "dumping 5.2 s: 1.7 of ~9.7 GB written");
    clock.ms = 6000;
    line.event({ type: "bytes", root: 4343, bytes: 1e9, at: 6000 });
    // criu's rate since that checkpoint ended: 1 GB in 1 s, not 2.7 GB in 5 s.
    assert.equal(line.text(), "dumping 6.0 s: 2.7 of ~9.7 GB written, 1.0 GB/s, ~7.0 s left");
    line.stop();
  });

  test("a tree back with less than a tenth of the images: the usual rate still, not its own", () => {
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 4e9 });
    clock.ms = 1000; // a small tree back at once: too little to tell criu's rate by
    line.event({
      type: "tree-end",
      root: 4242,
      how: "restored",
      bytes: 2e8,
      at: 1000,
      gpuMemoryMiB: {},
    });
    assert.equal(
      line.text(),
      "restoring the process trees 1.0 s: ~2.0 of 4.0 GB, ~2.0 GB/s, ~1.0 s left",
    );
    line.stop();
  });

  test("n/N done counts a process already where it was asked to go (unchanged)", () => {
    const { line } = lineOnClock({ total: 2, columns: 120 });
    line.event({ type: "phase", phase: "toggle", at: 0 });
    line.event({ type: "process-end", pid: 4100, at: 0, status: "unchanged" });
    assert.match(line.text(), /^toggle 0\.0 s, 1\/2 done/);
    line.stop();
  });

  test("a restore's images alone: criu's rate since the restore began, of every tree back; kept", async () => {
    const { kept, keep } = keeping();
    const { clock, line } = lineOnClock({ columns: 120, rates: { restore: 4e6 }, keep });
    line.event({ type: "phase", phase: "check", at: 0 });
    clock.ms = 2000; // 2 s of checks: not criu's
    line.event({ type: "phase", phase: "restore", at: 2000, imageBytes: 4e9 });
    clock.ms = 3000;
    line.event({
      type: "tree-end",
      root: 4242,
      how: "restored",
      bytes: 2e9,
      at: 3000,
      gpuMemoryMiB: {},
    });
    assert.equal(
      line.text(),
      "restoring the process trees 3.0 s: ~2.0 of 4.0 GB, ~2.0 GB/s, ~1.0 s left",
    );
    clock.ms = 4000;
    line.event({
      type: "tree-end",
      root: 4343,
      how: "restored",
      bytes: 2e9,
      at: 4000,
      gpuMemoryMiB: {},
    });
    assert.equal(line.text(), "restoring the process trees 4.0 s: 4.0 of 4.0 GB", "all back");
    await line.stop();
    await line.stop();
    assert.deepEqual(kept, [{ restore: 4e6, images: 2e6 }], "once, beside the rates it was given");
  });

  test("a tree's images count at least its GPU memory (a simulated criu's files hold less); criu's rate from the restore's start, kept", async () => {
    const { kept, keep } = keeping();
    const { clock, line } = lineOnClock({ columns: 120, keep });
    const gpuMemoryMiB = { 4242: 4096, 4343: 4096 }, gib = 2 ** 30;
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 2000, gpuMemoryMiB });
    clock.ms = 2000;
    const tree = { type: "tree-end", how: "restored", bytes: 1000, at: 2000 } as const;
    line.event({ ...tree, root: 4242, gpuMemoryMiB: { 4242: 4096 } });
    // criu's own rate, 4 GiB in 2 s, not 1000 bytes; the time left from it.
    assert.equal(
      line.text(),
      "restoring the process trees 2.0 s: ~4.3 of 8.6 GB, ~2.1 GB/s, ~2.0 s left",
    );
    // The resume begins with the first tree back; the next tree's rate is still the restore's.
    line.event({ type: "phase", phase: "resume", at: 2000, gpuMemoryMiB: { 4242: 4096 } });
    clock.ms = 4000;
    line.event({ ...tree, root: 4343, gpuMemoryMiB: { 4343: 4096 } });
    await line.stop();
    assert.deepEqual(kept, [{ images: 8 * gib / 4000 }], "8 GiB in 4 s, not in the resume's 2 s");
  });

  test("a restore's resume names the processes whose trees criu still restores; a recover's names none", () => {
    const { clock, line } = lineOnClock({ columns: 160 });
    const gpuMemoryMiB = { 4242: 1024, 4343: 1024 };
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 3e9, gpuMemoryMiB });
    clock.ms = 1000;
    const tree = { type: "tree-end", how: "restored", bytes: 1.5e9, at: 1000 } as const;
    line.event({ ...tree, root: 4242, gpuMemoryMiB: { 4242: 1024 } });
    line.event({ type: "phase", phase: "resume", at: 1000, gpuMemoryMiB });
    line.event({ type: "step-start", pid: 4242, step: "restore", at: 1000, gpuMemoryMiB: 1024 });
    assert.match(
      line.text(),
      /^resuming on the GPUs 1\.0 s: .*; 4242 restore, 4343 waits for its tree, criu ~1\.5 of 3\.0 GB back$/,
    );
    clock.ms = 1500;
    line.event({ ...tree, root: 4343, gpuMemoryMiB: { 4343: 1024 }, at: 1500 });
    assert.match(line.text(), /; 4242 restore$/, "its tree back");
    line.stop();
    const recover = lineOnClock({ columns: 160 }).line;
    recover.event({ type: "phase", phase: "resume", at: 0, gpuMemoryMiB });
    assert.doesNotMatch(recover.text(), /waits/, "no trees in a recover");
    recover.stop();
  });

  test("a tree back counts only the GPU memory of processes the restore's total counts (not one taken checkpointed)", () => {
    const { clock, line } = lineOnClock({ columns: 120 });
    line.event({
      type: "phase",
      phase: "restore",
      at: 0,
      imageBytes: 2e6,
      gpuMemoryMiB: { 100: 1024 },
    });
    clock.ms = 1000; // a simulated criu's tree of a process taken checkpointed, 4 GiB, 1 MB of files
    line.event({
      type: "tree-end",
      root: 200,
      how: "restored",
      bytes: 1e6,
      at: 1000,
      gpuMemoryMiB: { 200: 4096 },
    });
    assert.match(
      line.text(),
      /^restoring the process trees 1\.0 s: ~1\.1 of 1\.1 GB, ~2\.0 GB\/s/,
      "not all back",
    );
    line.stop();
  });

  test("a resume says criu's part while a tree with none to resume is still to come (one taken checkpointed)", () => {
    const { clock, line } = lineOnClock({ columns: 160 });
    const gpuMemoryMiB = { 100: 1024, 200: 4096 }; // 200 taken checkpointed: restored, not resumed
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 2e6, gpuMemoryMiB });
    clock.ms = 1000;
    const tree = { type: "tree-end", how: "restored", bytes: 1e6 } as const;
    line.event({ ...tree, root: 100, at: 1000, gpuMemoryMiB: { 100: 1024 } });
    line.event({ type: "phase", phase: "resume", at: 1000, gpuMemoryMiB: { 100: 1024 } });
    clock.ms = 3000; // 100 resumed; 200's tree still restoring
    assert.match(line.text(), /^resuming on the GPUs 3\.0 s: .*; criu ~[0-9.]+ of 5\.4 GB back$/);
    line.event({ ...tree, root: 200, at: 3000, gpuMemoryMiB: { 200: 4096 } });
    assert.doesNotMatch(line.text(), /criu/, "all back");
    line.stop();
  });

  test("a restore's trees as criu reads them back: its count and rate, not the kept one's; a tree back counts once", () => {
    const { clock, line } = lineOnClock({ columns: 120, rates: { images: 1e6 } });
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 8e9 });
    clock.ms = 1000;
    line.event({ type: "bytes", root: 4242, bytes: 1.5e9, at: 1000 });
    line.event({ type: "bytes", root: 4343, bytes: 1.5e9, at: 1000 });
    const shows = (text: string) =>
      assert.equal(line.text(), `restoring the process trees ${text}`);
    shows("1.0 s: ~3.0 of 8.0 GB, ~3.0 GB/s, ~1.7 s left");
    clock.ms = 1500;
    const tree = { type: "tree-end", how: "restored", gpuMemoryMiB: {} } as const;
    line.event({ ...tree, root: 4242, bytes: 2e9, at: 1500 });
    shows("1.5 s: ~3.5 of 8.0 GB, ~2.3 GB/s, ~1.9 s left");
    clock.ms = 2000;
    line.event({ type: "bytes", root: 4343, bytes: 3e9, at: 2000 });
    shows("2.0 s: ~5.0 of 8.0 GB, ~2.5 GB/s, ~1.2 s left");
    line.stop();
  });

  test("criu's count shown as counted, not the kept rate's estimate above it; 99% at most till all trees are back", () => {
    const { clock, line } = lineOnClock({ columns: 120, rates: { images: 3e6 } });
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 100e9 });
    clock.ms = 9900; // criu slower than the rate kept: 8.9 GB counted where 29.7 would be estimated
    line.event({ type: "bytes", root: 4242, bytes: 8.9e9, at: 9900 });
    assert.match(line.text(), /: ~8\.9 of 100\.0 GB, ~3\.0 GB\/s, ~30 s left$/);
    clock.ms = 11_000; // a count past the images (criu's own memory in a task it forked)
    line.event({ type: "bytes", root: 4242, bytes: 101e9, at: 11_000 });
    assert.match(line.text(), /: ~99\.0 of 100\.0 GB, /);
    line.stop();
  });

  test("the images' estimate before any tree is back: at the rate criu's restores last ran at", () => {
    const { clock, line } = lineOnClock({ columns: 120, rates: { images: 1e6 } });
    line.event({ type: "phase", phase: "restore", at: 0, imageBytes: 4e9 });
    clock.ms = 1000;
    assert.equal(
      line.text(),
      "restoring the process trees 1.0 s: ~1.0 of 4.0 GB, ~1.0 GB/s, ~3.0 s left",
    );
    line.stop();
  });

  test("a process whose checkpoint failed: its memory no longer expected, nor waited for", () => {
    const { clock, line } = lineOnClock({ total: 2, columns: 120 });
    line.event({ type: "phase", phase: "toggle", at: 0 });
    for (const pid of [4101, 4102]) {
      line.event({ type: "step-start", pid, step: "checkpoint", at: 0, gpuMemoryMiB: 4096 });
    }
    clock.ms = 1000;
    line.event({
      type: "step-end",
      pid: 4101,
      step: "checkpoint",
      at: 1000,
      ms: 1000,
      ok: false,
      rollback: false,
    });
    assert.equal(
      line.text(),
      "toggle 1.0 s, 0/2 done: ~2.0 of 4.3 GB, ~2.0 GB/s, ~1.1 s left; 4102 checkpoint",
    );
    line.stop();
  });
});

describe("--events: the events, one JSON object per line of stderr", () => {
  test("a toggle of several pids: the phase, each step with its bytes and estimate, each process", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn({ memoryMiB: 1024 }), sim.spawn({ memoryMiB: 2048 })];
    const r = await cli(["--toggle", "-p", `${a.pid},${b.pid}`, "--json", "--events"], {
      machine: sim,
    });
    assert.equal(r.code, 0);
    assert.equal(r.out.trim().split("\n").length, 2, "the results on stdout, as before");
    const events = r.err.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(events.map((e) => [e.event, e.pid ?? e.phase, e.step, e.ok ?? e.status]), [
      ["phase", "toggle", undefined, undefined],
      ["step-start", a.pid, "lock", undefined],
      ["step-start", b.pid, "lock", undefined],
      ["step-end", a.pid, "lock", true],
      ["step-start", a.pid, "checkpoint", undefined],
      ["step-end", b.pid, "lock", true],
      ["step-start", b.pid, "checkpoint", undefined],
      ["step-end", a.pid, "checkpoint", true],
      ["process-end", a.pid, undefined, "done"],
      ["step-end", b.pid, "checkpoint", true],
      ["process-end", b.pid, undefined, "done"],
    ]);
    const started = events.find((e) => e.pid === a.pid && e.step === "checkpoint");
    assert.deepEqual([started.gpuMemoryMiB, started.bytes, started.estimatedMs], [
      1544,
      1544 * 2 ** 20,
      810,
    ]);
    const ats = events.map((e) => e.at);
    assert.deepEqual(ats, [...ats].sort((x, y) => x - y), "at only grows");
    assert.ok(events.filter((e) => e.event === "step-end").every((e) => e.ms > 0));
    const piped = await cli(["--toggle", "-p", `${a.pid},${b.pid}`, "--json"], { machine: sim });
    assert.equal(piped.err, "", "nothing on stderr without --events: NVIDIA's lines only");
  });

  test("a step's estimate: the usual rate, then this run's once a step of its kind ended", () => {
    let now = 0;
    const clock = { now: () => now, sleep: () => Promise.resolve(), timer: () => () => {} };
    const { print, written: lines } = printerKept(false);
    const events = new Progress(print, clock, { total: 2 }, true);
    events.event({ type: "phase", phase: "toggle", at: 0 });
    events.event({ type: "step-start", pid: 4101, step: "checkpoint", at: 0, gpuMemoryMiB: 1024 });
    now = 400; // 1 GiB in 400 ms: 2.7 GB/s, this run's rate from now on
    events.event({
      type: "step-end",
      pid: 4101,
      step: "checkpoint",
      at: 400,
      ms: 400,
      ok: true,
      rollback: false,
    });
    events.event({
      type: "step-start",
      pid: 4102,
      step: "checkpoint",
      at: 400,
      gpuMemoryMiB: 2048,
    });
    const started = lines.map((l) => JSON.parse(l)).filter((e) => e.event === "step-start");
    assert.deepEqual(started.map((e) => [e.pid, e.bytes, e.estimatedMs]), [
      [4101, 1024 * 2 ** 20, 537], // at 2 GB/s (docs/DRIVER.md)
      [4102, 2048 * 2 ** 20, 800], // at this run's 2.7 GB/s, not 1074 ms at 2 GB/s
    ]);
    events.stop();
  });

  test("a step's estimate: the rate the runs before on this machine measured (each the mean of its own and the one kept), kept with its records for the next", async () => {
    const sim = new SimulatedMachine();
    const { pid } = sim.spawn({ memoryMiB: 4096 });
    const toggle = async (machine: SimulatedMachine) => {
      const r = await cli(["--toggle", "-p", `${pid}`, "--events"], { machine });
      assert.equal(r.code, 0, r.err);
      const events = r.err.trim().split("\n").map((l) => JSON.parse(l));
      const moved = events.find((e) => e.event === "step-start" && e.bytes);
      const ended = events.find((e) => e.event === "step-end" && e.step === moved.step);
      return { step: moved.step, bytes: moved.bytes, estimatedMs: moved.estimatedMs, ms: ended.ms };
    };
    const first = await toggle(sim); // nothing kept: docs/DRIVER.md's 2 GB/s
    assert.equal(first.step, "checkpoint");
    assert.equal(first.estimatedMs, Math.round(first.bytes / 2e6));
    assert.notEqual(first.estimatedMs, Math.round(first.ms), "the model's time is not 2 GB/s's");
    const back = await toggle(sim); // nothing kept of a restore yet: 5 GB/s
    assert.equal(back.estimatedMs, Math.round(back.bytes / 5e6));
    assert.deepEqual(sim.heldRecords.kept, {
      checkpoint: first.bytes / first.ms,
      restore: back.bytes / back.ms,
    });
    // Another program on this machine (the state saved and loaded again) estimates at that rate.
    const again = loadSimulator(JSON.parse(JSON.stringify(snapshotSimulator(sim))));
    const second = await toggle(again);
    assert.equal(second.step, "checkpoint");
    assert.equal(second.estimatedMs, Math.round(first.ms));
    // What a run keeps: the mean of its own rate and the one kept before it (one run's is noisy).
    again.heldRecords.kept = { restore: 1e6 };
    const third = await toggle(again); // a restore, estimated at the 1 GB/s kept
    assert.equal(third.step, "restore");
    assert.equal(third.estimatedMs, Math.round(third.bytes / 1e6));
    const mean = (1e6 + third.bytes / third.ms) / 2, kept = again.heldRecords.kept;
    assert.deepEqual(Object.keys(kept), ["restore"]);
    assert.ok(Math.abs(kept.restore / mean - 1) < 0.01, `${kept.restore} kept, ${mean} the mean`);
    assert.ok(third.bytes / third.ms > 2e6, "far from the 1 GB/s kept: the mean is neither");
    again.heldRecords.kept = {};
    const piped = await cli(["--toggle", "-p", `${pid}`], { machine: again });
    assert.equal(piped.code, 0);
    assert.deepEqual(again.heldRecords.kept, {}, "kept only by runs that show progress");
    // A step of less than 1 GiB is mostly the driver's fixed cost: its rate is not kept.
    const small = again.spawn({ memoryMiB: 16 });
    const r = await cli(["--toggle", "-p", `${small.pid}`, "--events"], { machine: again });
    assert.equal(r.code, 0);
    assert.match(r.err, /"step":"checkpoint".*"estimatedMs"/, "it showed progress");
    assert.deepEqual(again.heldRecords.kept, {}, "nothing kept of a small step");
  });

  test("a toggle of one pid: each driver step as it starts and ends, with its own time", async () => {
    const sim = new SimulatedMachine();
    const { pid } = sim.spawn({ memoryMiB: 1024 });
    for (const steps of [["lock", "checkpoint"], ["restore", "unlock"]]) {
      const r = await cli(["--toggle", "-p", `${pid}`, "--json", "--events"], { machine: sim });
      assert.equal(r.code, 0, r.err);
      const events = r.err.trim().split("\n").map((l) => JSON.parse(l));
      const result = JSON.parse(r.out);
      assert.deepEqual(result.steps.map((s: { step: string }) => s.step), steps);
      const seen = events.filter((e) => e.event.startsWith("step-")).map((e) => [e.event, e.step]);
      const expected = steps.flatMap((s) => [["step-start", s], ["step-end", s]]);
      assert.deepEqual(seen, expected, "every step, in order, not only the one that moves memory");
      const ended = events.filter((e) => e.event === "step-end");
      const mine = result.steps.map((s: { step: string; ms: number }) => [s.step, s.ms]);
      assert.deepEqual(ended.map((e) => [e.step, e.ms]), mine, "each step's own time");
      assert.deepEqual(events.at(-1), {
        event: "process-end",
        pid,
        at: events.at(-1).at,
        status: "done",
      });
    }
  });

  test("a toggle of one pid whose checkpoint fails: its undoing unlock is told as a rollback", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 1024 });
    target.failNext("checkpoint", { code: 2 });
    const r = await cli(["--toggle", "-p", `${target.pid}`, "--events"], { machine: sim });
    assert.equal(r.code, 1);
    const events = r.err.trim().split("\n").filter((l) => l.startsWith("{")).map((l) =>
      JSON.parse(l)
    );
    const steps = events.filter((e) => e.event === "step-end").map((
      e,
    ) => [e.step, e.ok, e.rollback]);
    assert.deepEqual(steps, [["lock", true, false], ["checkpoint", false, false], [
      "unlock",
      true,
      true,
    ]]);
    assert.deepEqual(events.at(-1), {
      event: "process-end",
      pid: target.pid,
      at: events.at(-1).at,
      status: "failed",
    });
    assert.equal(target.state, "running", "put back");
  });

  test("a toggle of one pid whose state cannot be read: no step is blamed", async () => {
    const sim = new SimulatedMachine();
    const gone = sim.spawn().pid + 1000; // no such process
    const r = await cli(["--toggle", "-p", `${gone}`, "--events"], { machine: sim });
    assert.equal(r.code, 1);
    const events = r.err.trim().split("\n").filter((l) => l.startsWith("{")).map((l) =>
      JSON.parse(l)
    );
    assert.deepEqual(events.map((e) => e.event), ["phase", "process-end"], r.err);
    assert.equal(events[1].status, "failed");
  });

  test("a snapshot and its restore: phases with what they move, criu's count, each tree's files", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const p = [sim.spawn({ memoryMiB: 2048, gpu: 0 }), sim.spawn({ memoryMiB: 1024, gpu: 1 })];
    const dir = join(base(), "snap");
    const made = await cli(
      ["snapshot", "--pid", `${p[0].pid},${p[1].pid}`, "--dir", dir, "--json", "--events"],
      { machine: sim },
    );
    assert.equal(made.code, 0, made.err);
    const events = made.err.trim().split("\n").map((l) => JSON.parse(l));
    const phases = events.filter((e) => e.event === "phase");
    assert.deepEqual(phases.map((e) => e.phase), ["check", "suspend", "dump", "write", "end"]);
    const held = { [p[0].pid]: 2568, [p[1].pid]: 1544 };
    assert.deepEqual(phases[1].gpuMemoryMiB, held, "each CUDA process's GPU memory");
    for (const { pid } of p) {
      const counts = events.filter((e) => e.event === "bytes" && e.root === pid).map((e) =>
        e.bytes
      );
      assert.ok(
        counts.length > 0 && counts.every((n, i) => i === 0 || n > counts[i - 1]),
        "criu's count grows",
      );
    }
    const trees = events.filter((e) => e.event === "tree-end");
    assert.deepEqual(trees.map((e) => e.how), ["dumped", "dumped"]);
    // Each tree's CUDA processes' GPU memory, by pid: each tree here is one process.
    const own = (es: { root: number; gpuMemoryMiB: object }[]) =>
      Object.fromEntries(es.map((e) => [e.root, e.gpuMemoryMiB]));
    const each = { [p[0].pid]: { [p[0].pid]: 2568 }, [p[1].pid]: { [p[1].pid]: 1544 } };
    assert.deepEqual(own(trees), each);
    const result = JSON.parse(made.out);
    assert.equal(
      trees.reduce((sum, e) => sum + e.bytes, 0),
      result.bytes,
      "the manifest's files, as the result says",
    );
    const back = await cli(["restore-snapshot", dir, "--json", "--events"], { machine: sim });
    assert.equal(back.code, 0, back.err);
    const again = back.err.trim().split("\n").map((l) => JSON.parse(l));
    const restore = again.find((e) => e.phase === "restore");
    assert.deepEqual([restore.imageBytes, restore.gpuMemoryMiB], [result.bytes, held]);
    assert.deepEqual(
      again.filter((e) => e.event === "tree-end").map((e) => [e.how, e.bytes]).sort(),
      trees.map((e) => ["restored", e.bytes]).sort(),
    );
    assert.deepEqual(own(again.filter((e) => e.event === "tree-end")), each);
    assert.ok(again.some((e) => e.phase === "resume"));
    for (const { pid } of p) { // criu's count of each tree read back grows to what its dump wrote
      const count = (es: typeof events) => es.filter((e) => e.event === "bytes" && e.root === pid);
      const read = count(again).map((e) => e.bytes), wrote = count(events).map((e) => e.bytes);
      assert.ok(read.length > 1 && read.every((n, i) => i === 0 || n > read[i - 1]), `${read}`);
      assert.equal(read[read.length - 1], wrote[wrote.length - 1]);
    }
  });
});

/**
 * Runs `cuda-checkpoint --simulate <args>` (a shell's words) as a program on this runtime under
 * util-linux's `script`, its terminal; on the state file `state`. Resolves to what the terminal got.
 */
function underScript(state: string): (args: string) => string {
  const main = new URL("../cli/main.ts", import.meta.url).pathname;
  const program = [process.execPath, ...(runtime === "deno" ? ["run", "-A"] : []), main];
  return (args) =>
    execFileSync("script", ["-qec", `${program.join(" ")} --simulate ${args}`, "/dev/null"], {
      env: { ...process.env, CKPT_SIM_STATE: state },
      encoding: "utf8",
      timeout: 30_000,
    });
}

describe("on a real pseudo-terminal", () => {
  const script = spawnSync("script", ["--version"]).status === 0;
  const noScript = loud("util-linux's script is not installed (apt-get install bsdutils)");
  test(
    "cuda-checkpoint as a program under util-linux's script: the line drawn, then erased",
    {
      skip: script ? false : noScript,
    },
    () => {
      const run = underScript(join(base(), "machine.json"));
      const pid = run("spawn --memory-mib 4096").trim().split("\n").at(-1)!.trim();
      const shown = run(`--toggle --pid ${pid}`);
      assert.match(
        shown,
        new RegExp(
          `^(cuda-checkpoint: simulated machine[^\\n]*\\r?\\n)?\\r\\x1b\\[2Ktoggle ${pid} checkpoint 0\\.4 s: ~0\\.8 of 4\\.8 GB, ~2\\.0 GB/s, ~2\\.0 s left\\r\\x1b\\[2K`,
        ),
      );
      assert.ok(shown.endsWith(CLEAR), JSON.stringify(shown.slice(-40)));
    },
  );

  test(
    "stderr to a file, stdout the terminal: stderr decides, so nothing of a terminal's in the file",
    { skip: script ? false : noScript },
    () => {
      const dir = base(), log = join(dir, "stderr.log");
      const run = underScript(join(dir, "machine.json"));
      const pid = run("spawn --memory-mib 4096").trim().split("\n").at(-1)!.trim();
      run(`--toggle --pid ${pid} 2>${log}`);
      // Not a terminal: no live line, no notice of the simulated machine; NVIDIA's output (none).
      assert.equal(readFileSync(log, "utf8"), "");
      assert.match(run(`--get-state --pid ${pid} 2>${log}`), /^checkpointed\r?\n$/);
    },
  );
});
