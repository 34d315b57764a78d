// Ctrl-C (SIGINT), SIGTERM or SIGHUP during an operation on several processes, a snapshot or a
// restore: the command stops, every process it changed is brought back, the lines say what became
// of each and one more what was left changed, and the command exits 128 + the signal's number
// (130, 143, 129); a second interrupt, of any of the three, exits at once, naming the steps still
// inside the driver. In-process with a fake source of interrupts on the virtual clock, then as a
// program (this runtime running cli/main.ts) on a `--simulate` machine in real time, with real
// signals. Runs unchanged under `deno test -A` and `bun test`.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";

import { type Interrupts, main } from "../cli/main.ts";
import { watchInterrupts } from "../cli/io.ts";
import { openSimulatedMachine } from "../cli/simulate.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import type { RestoreRequest } from "../core/engine.ts";
import { machineWith } from "./support/forward.ts";
import { BINARY, binaryBuilt, cli } from "./cli_support.ts";
import { type Interrupted, runInterrupted } from "./support/interrupted.ts";
import { runtime } from "./fixtures/fake.ts";
import { processDir } from "./support/temp_dirs.ts";

type Signal = "SIGINT" | "SIGTERM" | "SIGHUP";

/**
 * Interrupts a test sends itself, on the simulator's clock: once the command watches (its group
 * is about to start), each of `plan`'s actions runs its `ms` later (virtual time, which the
 * command's own driver calls move), and `fire()` in it is one Ctrl-C (`fire("SIGTERM")` a
 * SIGTERM).
 */
function fakeInterrupts(
  sim: SimulatedMachine,
  plan: { ms: number; act: (fire: (signal?: Signal) => void) => void }[],
) {
  let handler: ((signal?: Signal) => void) | undefined;
  let watched = 0;
  const exits: number[] = [];
  const fire = (signal?: Signal) => {
    assert.ok(handler, "an interrupt is being watched");
    handler(signal);
  };
  const interrupts: Interrupts = {
    watch(onInterrupt) {
      watched++;
      handler = onInterrupt;
      for (const { ms, act } of plan) sim.sleep(ms).then(() => act(fire));
      return () => handler = undefined;
    },
    exit: (code) => exits.push(code),
    raise: (signal) => assert.fail(`raised ${signal}`),
  };
  return {
    interrupts,
    exits,
    get watched() {
      return watched;
    },
    get watching() {
      return handler !== undefined;
    },
  };
}

describe("an interrupt during an operation on several processes, in-process", () => {
  test("toggle: the done ones come back at once, the one in its checkpoint when it ends; exit 130", async () => {
    const sim = new SimulatedMachine();
    const big = sim.spawn({ memoryMiB: 4096 });
    const small = [sim.spawn(), sim.spawn()];
    await small[0].write(100, new Uint8Array([7, 8, 9]));
    const digest = await small[0].memoryChunkedSha256();
    const seen: string[][] = [];
    const look = () => seen.push([big, ...small].map((p) => p.state));
    const fake = fakeInterrupts(sim, [
      // The small ones are done, the big one is in its checkpoint: interrupt.
      { ms: 600, act: (fire) => (look(), fire()) },
      // The small ones are back, the big one still in its checkpoint.
      { ms: 1000, act: look },
    ]);
    const pids = [big, ...small].map((p) => p.pid).join(",");
    const r = await cli(["--toggle", "--pid", pids], { machine: sim, interrupts: fake.interrupts });
    assert.deepEqual(seen, [
      ["locked", "checkpointed", "checkpointed"],
      ["locked", "running", "running"],
    ]);
    assert.equal(r.code, 130, r.err);
    assert.equal(
      r.out,
      [big, ...small].map((p) => `${p.pid} rolled-back running\n`).join(""),
    );
    assert.deepEqual(r.errLines, [
      "cuda-checkpoint: interrupted: no new step starts, and each process this command changed " +
      "is brought back once its step inside the driver ends (interrupt again to exit without " +
      "waiting)",
      "cuda-checkpoint: interrupted: every process is as it was before",
    ]);
    assert.ok([big, ...small].every((p) => p.state === "running"));
    assert.equal(await small[0].memoryChunkedSha256(), digest);
    assert.equal(fake.watching, false, "no longer watched once the command is over");
  });

  test("on a terminal, each one brought back is named, not blamed on another's failure", async () => {
    const sim = new SimulatedMachine();
    const procs = [sim.spawn({ memoryMiB: 4096 }), sim.spawn()];
    const fake = fakeInterrupts(sim, [{ ms: 600, act: (fire) => fire() }]);
    const pids = procs.map((p) => p.pid).join(",");
    const r = await cli(["--toggle", "--pid", pids], {
      machine: sim,
      interrupts: fake.interrupts,
      isTerminal: true,
    });
    assert.equal(r.code, 130, r.err);
    assert.match(r.err, new RegExp(`process ID ${procs[1].pid} was brought back to running\n`));
    assert.doesNotMatch(r.err, /another process failed/, "none failed: it was the interrupt");
  });

  test("a job's member stopped between its steps says the command was interrupted", async () => {
    const sim = new SimulatedMachine();
    const [stuck, other] = [sim.spawn(), sim.spawn()];
    const release = stuck.hangNext("lock");
    const fake = fakeInterrupts(sim, [
      { ms: 100, act: (fire) => fire() },
      { ms: 200, act: () => release() },
    ]);
    const pids = `${stuck.pid},${other.pid}`;
    const r = await cli(["--toggle", "--job", "--pid", pids], {
      machine: sim,
      interrupts: fake.interrupts,
    });
    assert.equal(r.code, 130, r.err);
    const said = r.errLines.find((l) => l.startsWith(`Process ID ${other.pid} was stopped`));
    assert.match(said ?? r.err, /before a step: the command was interrupted; what it had done/);
    assert.deepEqual([stuck.state, other.state], ["running", "running"]);
  });

  test("a process that cannot come back is named in the closing line, with what it was", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn({ memoryMiB: 4096 }), sim.spawn()];
    a.exitDuring("checkpoint", { afterMs: 1000 });
    b.failNext("restore", { code: 999, state: "failed" }); // its rollback fails
    const fake = fakeInterrupts(sim, [{ ms: 500, act: (fire) => fire() }]);
    const r = await cli(["--toggle", "--pid", `${a.pid},${b.pid}`, "--json"], {
      machine: sim,
      interrupts: fake.interrupts,
    });
    assert.equal(r.code, 130);
    const lines = r.out.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => [l.pid, l.status, l.rollback?.ok]), [
      [a.pid, "failed", undefined],
      [b.pid, "rollback-failed", false],
    ]);
    assert.equal(
      r.errLines.at(-1),
      `cuda-checkpoint: interrupted: left changed: ${a.pid} gone (was running), ${b.pid} failed (was running)`,
    );
  });

  test("a second interrupt exits at once, naming the step still inside the driver", async () => {
    const sim = new SimulatedMachine();
    const [stuck, other] = [sim.spawn(), sim.spawn()];
    const release = stuck.hangNext("lock");
    let otherThen = "";
    const fake = fakeInterrupts(sim, [
      { ms: 100, act: (fire) => fire() },
      {
        ms: 200,
        act: (fire) => {
          otherThen = other.state;
          fire();
          release(); // let the test's own command end
        },
      },
    ]);
    let err = "";
    const code = await main(["--action", "lock", "--pid", `${stuck.pid},${other.pid}`], {
      machine: sim,
      interrupts: fake.interrupts,
      stdout: () => {},
      stderr: (t) => err += t,
    });
    assert.equal(otherThen, "running", "unlocked again without waiting for the stuck one");
    assert.deepEqual(fake.exits, [130]);
    assert.match(
      err,
      new RegExp(
        `interrupted again: exiting without waiting for the driver, which finishes its steps all the same: ${stuck.pid} \\(lock\\)\ncuda-checkpoint: check each process with: cuda-checkpoint --get-state --pid ${stuck.pid},${other.pid}\n`,
      ),
    );
    assert.equal(code, 130, "the command itself ends once the stuck call does");
    assert.equal(stuck.state, "running", "unlocked again once its lock ended");
  });

  for (const [signal, code] of [["SIGTERM", 143], ["SIGHUP", 129]] as const) {
    test(`${signal} acts as the first Ctrl-C: all come back; exit ${code}`, async () => {
      const sim = new SimulatedMachine();
      const procs = [sim.spawn({ memoryMiB: 4096 }), sim.spawn(), sim.spawn()];
      const fake = fakeInterrupts(sim, [{ ms: 600, act: (fire) => fire(signal) }]);
      const pids = procs.map((p) => p.pid).join(",");
      const r = await cli(["--toggle", "--pid", pids], {
        machine: sim,
        interrupts: fake.interrupts,
      });
      assert.equal(r.code, code, r.err);
      assert.equal(r.out, procs.map((p) => `${p.pid} rolled-back running\n`).join(""));
      assert.match(r.errLines[0], new RegExp(`^cuda-checkpoint: interrupted by ${signal}: `));
      assert.ok(procs.every((p) => p.state === "running"));
      assert.deepEqual(fake.exits, []);
    });
  }

  test("a second interrupt of another kind exits at once, with its own code", async () => {
    const sim = new SimulatedMachine();
    const [stuck, other] = [sim.spawn(), sim.spawn()];
    const release = stuck.hangNext("lock");
    const fake = fakeInterrupts(sim, [
      { ms: 100, act: (fire) => fire("SIGINT") },
      { ms: 200, act: (fire) => (fire("SIGHUP"), release()) },
    ]);
    const r = await cli(["--action", "lock", "--pid", `${stuck.pid},${other.pid}`], {
      machine: sim,
      interrupts: fake.interrupts,
    });
    assert.deepEqual(fake.exits, [129]);
    assert.match(r.err, /interrupted again: exiting without waiting for the driver/);
    assert.equal(r.code, 130, "the command itself ends, once the stuck call does, as the first");
  });

  test("one pid on a terminal: an interrupt ends it by the signal, as NVIDIA's, its live line erased first", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 }); // a checkpoint of about 1.9 s
    let err = "", watching = false;
    const raised: [Signal, string, boolean][] = []; // each signal raised, stderr then, still watched
    const interrupts: Interrupts = {
      watch(onInterrupt) {
        watching = true;
        sim.sleep(1000).then(() => onInterrupt("SIGTERM"));
        return () => watching = false;
      },
      exit: (code) => assert.fail(`exited ${code}: a shell sees a death by the signal only`),
      raise: (signal) => raised.push([signal, err, watching]),
    };
    const stdout = () => {}, stderr = (text: string) => err += text;
    await main(["--toggle", "--pid", `${p.pid}`], {
      machine: sim,
      isTerminal: true,
      interrupts,
      stdout,
      stderr,
    });
    assert.equal(raised.length, 1, "one signal raised, at the interrupt");
    const [[signal, then, watched]] = raised, erase = "\r\x1b[2K";
    assert.equal(signal, "SIGTERM", "the signal that came");
    assert.equal(watched, false, "its watch removed first: the runtime's default ends the program");
    const drawn = then.lastIndexOf(`toggle ${p.pid}`);
    assert.ok(
      drawn > 0 && then.endsWith(erase),
      `the line drawn, then erased: ${JSON.stringify(then)}`,
    );
  });

  test(
    "one pid on --simulate on a terminal: the line stays erased while the simulated step ends; saved before the signal",
    {
      timeout: 30_000,
    },
    async () => {
      const { path, pids } = await machineFile((sim) => [sim.spawn({ memoryMiB: 4096 }).pid]);
      let err = "";
      const raised = new Promise<[Signal, string]>((resolve) => {
        const interrupts: Interrupts = {
          watch(onInterrupt) {
            setTimeout(() => onInterrupt("SIGTERM"), 900); // its checkpoint takes about 1.9 s
            return () => {};
          },
          exit: (code) => assert.fail(`exited ${code}`),
          raise: (signal) => resolve([signal, err]),
        };
        // It never resolves: after the signal no driver call answers (the program would be gone).
        void main(["--simulate", "--toggle", "--pid", `${pids[0]}`], {
          env: { CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" },
          isTerminal: true,
          interrupts,
          stdout: () => {},
          stderr: (text) => err += text,
        });
      });
      const [signal, then] = await raised, erase = "\r\x1b[2K";
      assert.equal(signal, "SIGTERM");
      assert.ok(then.includes(`toggle ${pids[0]}`), `a line was drawn: ${JSON.stringify(then)}`);
      assert.ok(
        then.endsWith(erase),
        `erased, and not drawn again: ${JSON.stringify(then.slice(-120))}`,
      );
      const state = await cli(["--simulate", "--get-state", "--pid", `${pids[0]}`], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.equal(state.out, "checkpointed\n", "the step under way ended, and was saved");
    },
  );

  test("--simulate: an interrupt while the machine is saved ends the command once it is (143), what it did kept", async () => {
    const { path } = await machineFile(() => []);
    const interrupts: Interrupts = {
      watch(onInterrupt) {
        queueMicrotask(() => onInterrupt("SIGTERM")); // at the save's first wait (the file's open)
        return () => {};
      },
      exit: (code) => assert.fail(`exited ${code}: a first interrupt waits for the save`),
      raise: (signal) => assert.fail(`raised ${signal}: the program's exit raises it`),
    };
    const env = { CKPT_SIM_STATE: path };
    const r = await cli(["--simulate", "spawn"], { env, interrupts });
    assert.equal(r.code, 143, r.err);
    assert.match(r.err, /interrupted by SIGTERM: the simulated machine is saved first/);
    const state = await cli(["--simulate", "--get-state", "--pid", r.out.trim()], { env });
    assert.equal(state.out, "running\n", "the process it spawned was saved");
  });

  test("--simulate: a second interrupt while the machine is saved exits at once, saying the file is as before", async () => {
    const { path } = await machineFile(() => []);
    const exits: number[] = [];
    const interrupts: Interrupts = {
      watch(onInterrupt) {
        queueMicrotask(() => (onInterrupt("SIGTERM"), onInterrupt("SIGHUP"))); // in the save
        return () => {};
      },
      exit: (code) => exits.push(code), // a program ends here; in-process the save goes on
      raise: (signal) => assert.fail(`raised ${signal}`),
    };
    const r = await cli(["--simulate", "spawn"], { env: { CKPT_SIM_STATE: path }, interrupts });
    assert.deepEqual(exits, [129], "at once, with the second's own code");
    assert.deepEqual(r.errLines.slice(1), [
      "cuda-checkpoint: interrupted again: exiting without waiting",
      "cuda-checkpoint: the simulated machine was not saved: its state file is as before this command",
    ]);
  });

  test("--simulate: after the command's own interrupt the save is not watched: a second signal ends it at once", async () => {
    const { path, pids } = await machineFile((sim) => [sim.spawn().pid, sim.spawn().pid]);
    let watched = 0;
    const interrupts: Interrupts = {
      watch(onInterrupt) {
        if (++watched === 1) queueMicrotask(() => onInterrupt()); // the group's: Ctrl-C at once
        return () => {};
      },
      exit: (code) => assert.fail(`exited ${code}`),
      raise: (signal) => assert.fail(`raised ${signal}`),
    };
    const env = { CKPT_SIM_STATE: path };
    const r = await cli(["--simulate", "--toggle", "--pid", pids.join(",")], { env, interrupts });
    assert.equal(r.code, 130, r.err);
    assert.equal(watched, 1, "the group's watch only: the program's default ends it at a second");
  });

  test("one pid on a terminal: an interrupt that names no signal raises SIGINT; once done, not watched", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 }), q = sim.spawn({ memoryMiB: 16 });
    const raised: Signal[] = [];
    let watching = false;
    const interrupts = (interrupt: boolean): Interrupts => ({
      watch(onInterrupt) {
        watching = true;
        if (interrupt) sim.sleep(1000).then(() => onInterrupt());
        return () => watching = false;
      },
      exit: (code) => assert.fail(`exited ${code}`),
      raise: (signal) => raised.push(signal),
    });
    const io = { machine: sim, isTerminal: true, stdout: () => {}, stderr: () => {} };
    await main(["--toggle", "--pid", `${p.pid}`], { ...io, interrupts: interrupts(true) });
    assert.deepEqual(raised, ["SIGINT"], "SIGINT, where the interrupt names none");
    assert.equal(watching, false, "unwatched at the interrupt");
    // No interrupt: the command ends as before, its watch removed (the program's default again).
    const code = await main(["--toggle", "--pid", `${q.pid}`], {
      ...io,
      interrupts: interrupts(false),
    });
    assert.deepEqual(
      [code, raised.length, watching],
      [0, 1, false],
      "ended, none raised, unwatched",
    );
  });

  test("one pid on a terminal, with interrupts of one's own that cannot raise: not watched, as before", async () => {
    const sim = new SimulatedMachine(), p = sim.spawn();
    let watched = 0;
    const interrupts = { watch: () => (watched++, () => {}), exit: () => assert.fail("no exit") };
    const io = { machine: sim, isTerminal: true, interrupts, stdout: () => {}, stderr: () => {} };
    assert.equal(await main(["--toggle", "--pid", `${p.pid}`], io), 0);
    assert.equal(watched, 0, "the program's default ends it at an interrupt, as before raise");
  });

  test("one pid off a terminal is not watched: the program ends at the interrupt, as NVIDIA's does", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    const fake = fakeInterrupts(sim, []);
    const r = await cli(["--toggle", "--pid", p.pid], {
      machine: sim,
      interrupts: fake.interrupts,
    });
    assert.equal(r.code, 0);
    assert.equal(fake.watched, 0);
    const q = await cli(["--get-state", "--pid", `${p.pid},${p.pid + 100}`], {
      machine: sim,
      interrupts: fake.interrupts,
    });
    assert.equal(q.code, 1);
    assert.equal(fake.watched, 0, "queries are not watched either");
  });
});

describe(`the program's watch over its signals (${runtime})`, () => {
  test("once a command stops watching, SIGTERM ends the program again, at once", () => {
    const fixture = new URL("./fixtures/unwatched.ts", import.meta.url).pathname;
    const argv = runtime === "deno" ? ["run", "-A", fixture] : [fixture];
    const r = spawnSync(process.execPath, argv, { encoding: "utf8", timeout: 30_000 });
    assert.deepEqual([r.signal, r.stdout], ["SIGTERM", ""], r.stderr);
  });

  test("started with SIGINT ignored (`cmd &` in a script), it stays so once a watch has stopped", () => {
    // The watch's listener gone, both runtimes would take SIGINT as its default (the end of the
    // program, during a --simulate save, say), were no listener kept for it; with stdio on pipes,
    // as Bun takes SIGINT over at its start where one is a terminal.
    const fixture = new URL("./fixtures/unwatched.ts", import.meta.url).pathname;
    const argv = runtime === "deno" ? ["run", "-A", fixture, "int"] : [fixture, "int"];
    const background = ["-c", '"$@" & wait $!', "bash", process.execPath, ...argv];
    const r = spawnSync("bash", background, { encoding: "utf8", timeout: 30_000 });
    assert.deepEqual([r.status, r.stdout], [0, "still running\n"], r.stderr);
    // In the foreground, SIGINT ends it as any program.
    const f = spawnSync(process.execPath, argv, { encoding: "utf8", timeout: 30_000 });
    assert.deepEqual([f.signal, f.stdout], ["SIGINT", ""], f.stderr);
  });

  test("a signal it was started with ignored, whichever of the three, no watch hears, nor a second; each watch hears the others", () => {
    // What /proc/self/status's SigIgn says, bit by bit: SIGQUIT (bit 2) beside SIGINT's (bit 1),
    // as a script's `cmd &` ignores both; SIGTERM's (bit 14) past the mask's last hex digit; and a
    // real-time signal's (bit 63) that makes the whole mask more than a double holds exactly.
    const fixture = new URL("./fixtures/watched.ts", import.meta.url).pathname;
    const argv = runtime === "deno" ? ["run", "-A", fixture] : [fixture];
    for (
      const [trap, ignored, heard] of [
        ["QUIT", [], "SIGHUP SIGINT SIGTERM"],
        ["HUP TERM", ["SIGHUP", "SIGTERM"], "SIGINT"],
        ["INT RTMAX", ["SIGINT"], "SIGHUP SIGTERM"],
      ] as const
    ) {
      const started = ["-c", `trap '' ${trap}; exec "$@"`, "bash", process.execPath, ...argv];
      const r = spawnSync("bash", [...started, "ignored", ...ignored], {
        encoding: "utf8",
        timeout: 30_000,
      });
      // The second watch hears as the first, though the first's listeners left none of the three
      // ignored in SigIgn's view.
      const said = `heard ${heard}\nheard ${heard}\nstill running\n`;
      assert.deepEqual([r.status, r.signal, r.stdout], [0, null, said], `${trap}: ${r.stderr}`);
    }
  });

  test("an interrupt's exit whose signal does not end it (a listener of the program's own) still exits, with its code", () => {
    const fixture = new URL("./fixtures/watched.ts", import.meta.url).pathname;
    const argv = runtime === "deno" ? ["run", "-A", fixture, "kept"] : [fixture, "kept"];
    const r = spawnSync(process.execPath, argv, { encoding: "utf8", timeout: 30_000 });
    // Its own listener took the watched SIGHUP, then the one exit raised; then exit(129) exited.
    assert.deepEqual([r.status, r.signal, r.stdout], [129, null, "its own\nits own\n"], r.stderr);
  });

  test("stdout's failure, said once written out, leaves an interrupt's exit by its signal", {
    skip: runtime === "deno" ? "Deno writes stdout at once: its failure throws there" : false,
  }, () => {
    // On Bun a large write goes out in exit's flush, which fails on a full device (ENOSPC).
    const fixture = new URL("./fixtures/watched.ts", import.meta.url).pathname;
    const full = openSync("/dev/full", "w");
    try {
      const r = spawnSync(process.execPath, [fixture, "full"], {
        encoding: "utf8",
        timeout: 30_000,
        stdio: ["ignore", full, "pipe"],
      });
      assert.deepEqual([r.status, r.signal], [null, "SIGHUP"], r.stderr);
      assert.match(r.stderr, /^cuda-checkpoint: internal error: .*(ENOSPC|[Nn]o space left)/m);
    } finally {
      closeSync(full);
    }
  });

  test("raise sends the program the signal it names, which ends it (one pid's interrupt)", () => {
    const fixture = new URL("./fixtures/unwatched.ts", import.meta.url).pathname;
    const argv = runtime === "deno" ? ["run", "-A", fixture, "raise"] : [fixture, "raise"];
    const r = spawnSync(process.execPath, argv, { encoding: "utf8", timeout: 30_000 });
    assert.deepEqual([r.signal, r.stdout], ["SIGHUP", ""], r.stderr);
  });
});

describe("what a second interrupt advises", () => {
  test("on a simulated machine, each command it names is one of that machine's", () => {
    for (const simulated of [false, true]) {
      let fire!: (signal?: Signal) => void;
      const exits: number[] = [], said: string[] = [];
      const interrupts = {
        watch: (f: typeof fire) => (fire = f, () => {}),
        exit: (c: number) => void exits.push(c),
        raise: (signal: Signal) => assert.fail(`raised ${signal}`),
      };
      const leftBehind = () => [
        " for the driver",
        "check each process with: cuda-checkpoint --get-state --pid 4000",
        "or end it (kill 4000)",
        "it runs again (kill -CONT 4000)",
      ];
      watchInterrupts(interrupts, { err: (l) => void said.push(l) }, {
        meanwhile: "",
        leftBehind,
        simulated,
      });
      fire();
      fire("SIGTERM");
      const sim = simulated ? " --simulate" : "";
      assert.deepEqual(said.slice(2, 5), [
        `cuda-checkpoint: check each process with: cuda-checkpoint${sim} --get-state --pid 4000`,
        `cuda-checkpoint: or end it (${simulated ? "cuda-checkpoint --simulate " : ""}kill 4000)`,
        // A signal to send is no subcommand of the simulator's: left as it is.
        "cuda-checkpoint: it runs again (kill -CONT 4000)",
      ]);
      assert.deepEqual(exits, [143]);
    }
  });
});

describe("an interrupt during a snapshot or a restore, in-process", () => {
  const scratch = processDir("ckpt-interrupt-disk-");
  after(() => rmSync(scratch, { recursive: true, force: true }));
  let dirs = 0;

  /**
   * Interrupts that fire `signals` (one at each `when()` that comes true, checked every 10 ms of
   * the simulator's clock) once the command watches; `exits` records a forced exit's code.
   */
  function interruptsWhen(
    sim: SimulatedMachine,
    plan: [when: () => boolean, signal: Signal, then?: () => void][],
  ) {
    let handler: ((signal?: Signal) => void) | undefined;
    const exits: number[] = [];
    const interrupts: Interrupts = {
      watch(onInterrupt) {
        handler = onInterrupt;
        (async () => {
          for (const [when, signal, then] of plan) {
            while (!when()) await sim.sleep(10);
            handler?.(signal);
            then?.();
          }
        })();
        return () => handler = undefined;
      },
      exit: (code) => exits.push(code),
      raise: (signal) => assert.fail(`raised ${signal}`),
    };
    return { interrupts, exits, watching: () => handler !== undefined };
  }

  for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143], ["SIGHUP", 129]] as const) {
    test(`snapshot: ${signal} puts every process back, running; exit ${code}`, async () => {
      const sim = new SimulatedMachine();
      const procs = [sim.spawn({ memoryMiB: 4096 }), sim.spawn({ memoryMiB: 4096 })];
      const digest = await procs[0].memoryChunkedSha256();
      // Once the first is locked: the snapshot is suspending them.
      const fake = interruptsWhen(sim, [[() => procs[0].state !== "running", signal]]);
      const dir = join(scratch, `snap-${dirs++}`);
      const pids = procs.map((p) => p.pid).join(",");
      const r = await cli(["snapshot", "--pid", pids, "--dir", dir], {
        machine: sim,
        interrupts: fake.interrupts,
      });
      assert.equal(r.code, code, r.err);
      assert.equal(r.out, "");
      assert.match(
        r.errLines[0],
        new RegExp(
          `^cuda-checkpoint: snapshot interrupted${
            signal === "SIGINT" ? "" : ` by ${signal}`
          }: it stops, and puts back every process it changed`,
        ),
      );
      assert.match(r.errLines.at(-1)!, /^cuda-checkpoint: snapshot stopped .*keeps running/);
      assert.deepEqual(procs.map((p) => p.state), ["running", "running"]);
      assert.equal(await procs[0].memoryChunkedSha256(), digest);
      assert.equal(fake.watching(), false, "no longer watched once the command is over");
      assert.deepEqual(fake.exits, []);
    });
  }

  test("snapshot: an interrupt as the manifest is written still puts back; once ending, too late", async () => {
    for (const [phase, code] of [["write", 130], ["end", 0]] as const) {
      const sim = new SimulatedMachine();
      const procs = [sim.spawn({ memoryMiB: 1024 }), sim.spawn({ memoryMiB: 1024 })];
      let fire: ((signal?: Signal) => void) | undefined, err = "";
      const dir = join(scratch, `late-${phase}`);
      const args = [
        "snapshot",
        "--pid",
        procs.map((p) => p.pid).join(","),
        "--dir",
        dir,
        "--events",
      ];
      const got = await main(args, {
        machine: sim,
        stdout: () => {},
        stderr: (text) => {
          err += text;
          if (text.includes(`"phase":"${phase}"`)) queueMicrotask(() => fire?.());
        },
        interrupts: {
          watch: (f) => (fire = f, () => fire = undefined),
          exit: (c) => assert.fail(`exited ${c}`),
          raise: (signal) => assert.fail(`raised ${signal}`),
        },
      });
      assert.equal(got, code, err);
      const lines = err.split("\n").filter((l) => l.startsWith("cuda-checkpoint: "));
      assert.match(lines[0], /snapshot interrupted: it stops, and puts back/);
      if (phase === "write") {
        assert.match(
          lines[1],
          /snapshot stopped at its end: it was aborted\. Every process was put back/,
        );
        assert.deepEqual(procs.map((p) => p.state), ["running", "running"]);
        assert.equal(existsSync(dir), false);
      } else {
        assert.equal(lines[1], "cuda-checkpoint: the interrupt came too late: snapshot done");
        assert.equal(sim.processes.length, 0, "the processes were ended, as a snapshot does");
        assert.ok(existsSync(join(dir, "manifest.json")));
      }
    }
  });

  test("snapshot: a second interrupt exits at once, saying what may be left suspended", async () => {
    const sim = new SimulatedMachine();
    const [stuck, other] = [sim.spawn(), sim.spawn()];
    const release = stuck.hangNext("lock");
    const fake = interruptsWhen(sim, [
      [() => other.state !== "running", "SIGTERM"],
      [() => other.state === "running", "SIGTERM", release],
    ]);
    const r = await cli(
      ["snapshot", "--pid", `${stuck.pid},${other.pid}`, "--dir", join(scratch, "stuck")],
      { machine: sim, interrupts: fake.interrupts },
    );
    assert.deepEqual(fake.exits, [143]);
    assert.match(
      r.err,
      /cuda-checkpoint: interrupted again: exiting without waiting; processes of the snapshot may be left suspended: see cuda-checkpoint list/,
    );
    // The trace it leaves names them: the one command that resumes them all is said.
    assert.match(r.err, /or all that its trace names with cuda-checkpoint recover .*stuck\n/);
  });

  test("restore-snapshot: an interrupt puts back what it restored; exit 143", async () => {
    const sim = new SimulatedMachine();
    const procs = [sim.spawn({ memoryMiB: 4096 }), sim.spawn({ memoryMiB: 4096 })];
    const dir = join(scratch, "to-restore");
    const pids = procs.map((p) => p.pid).join(",");
    assert.equal((await cli(["snapshot", "--pid", pids, "--dir", dir], { machine: sim })).code, 0);
    // As criu's restore of the first tree returns (it is back, held until its images matched):
    // before, the signal came inside the simulated criu, which ended its own tree, so nothing of
    // the rollback was seen.
    let handler: ((signal?: Signal) => void) | undefined;
    const interrupts: Interrupts = {
      watch: (f) => (handler = f, () => handler = undefined),
      exit: () => assert.fail("a second signal"),
      raise: (signal) => assert.fail(`raised ${signal}`),
    };
    let back = 0;
    const restore = async (r: RestoreRequest) => {
      await sim.engine.restore(r);
      if (back++ === 0) handler?.("SIGTERM");
    };
    const engine = new Proxy(sim.engine, {
      get: (t, k) => k === "restore" ? restore : Reflect.get(t, k)?.bind?.(t) ?? Reflect.get(t, k),
    });
    const r = await cli(["restore-snapshot", dir], {
      machine: machineWith(sim, { engine }),
      interrupts,
    });
    assert.equal(r.code, 143, r.err);
    assert.match(r.errLines[0], /^cuda-checkpoint: restore-snapshot interrupted by SIGTERM: /);
    // What the restore left: the library's sentence; what it had made, ended.
    assert.match(r.errLines.at(-1)!, /^cuda-checkpoint: restore(-snapshot| of the snapshot) /);
    assert.match(r.err, /were ended; the snapshot is unchanged/);
    assert.equal(r.errLines.length, 2);
    assert.equal(sim.processes.length, 0, "what the restore made was ended");
  });
});

// ---- as a program, with real signals ----

const MAIN = new URL("../cli/main.ts", import.meta.url).pathname;
const dir = processDir("ckpt-interrupt-");
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

/** A simulated machine in a new state file, with processes made by `setup`; their pids. */
async function machineFile(
  setup: (sim: SimulatedMachine) => number[],
): Promise<{ path: string; pids: number[] }> {
  const path = join(dir, `machine-${files++}.json`);
  const machine = await openSimulatedMachine({ path });
  try {
    const pids = setup(machine.machine);
    await machine.save();
    return { path, pids };
  } finally {
    await machine.close();
  }
}

/**
 * Runs cli/main.ts as a program on this runtime, on the machine in `path` in real time, and
 * sends it SIGINT `delaysMs` after it has taken the machine's lock (each after the one before).
 */
function interruptProgram(args: string[], path: string, delaysMs: number[]): Promise<Interrupted> {
  const env = { ...process.env, CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" } as Record<
    string,
    string
  >;
  const argv = runtime === "deno" ? ["run", "-A", MAIN, ...args] : [MAIN, ...args];
  return runInterrupted(process.execPath, argv, env, async (send, running) => {
    while (!existsSync(`${path}.lock`) && running()) await sleep(10);
    for (const ms of delaysMs) {
      await sleep(ms);
      send();
    }
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Runs cli/main.ts as a program, as {@link interruptProgram} does, and sends it each signal of
 * `plan` its `ms` after the one before (the first after it took the machine's lock), through
 * the pid the lock file holds: the program's own.
 */
function signalProgram(
  args: string[],
  path: string,
  plan: [ms: number, signal: "SIGINT" | "SIGTERM" | "SIGHUP"][],
  binary = false,
): Promise<Interrupted> {
  const env = { ...process.env, CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" } as Record<
    string,
    string
  >;
  const [file, argv] = binary
    ? [BINARY, args]
    : [process.execPath, runtime === "deno" ? ["run", "-A", MAIN, ...args] : [MAIN, ...args]];
  return runInterrupted(file, argv, env, async (_sigint, running) => {
    let pid = NaN;
    while (!(pid > 0) && running()) {
      try {
        pid = Number(readFileSync(`${path}.lock`, "utf8").trim()) || NaN;
      } catch {
        // Not taken yet.
      }
      if (!(pid > 0)) await sleep(10);
    }
    for (const [ms, signal] of plan) {
      await sleep(ms);
      if (running()) process.kill(pid, signal);
    }
  });
}

/**
 * A state file of three processes, the first of which exits while it is being locked, `afterMs`
 * into its lock (its lock then finds it gone): the file and the three pids.
 */
function oneOfThreeGoneInLock(afterMs: number) {
  return machineFile((sim) => {
    const slow = sim.spawn();
    slow.exitDuring("lock", { afterMs });
    return [slow.pid, sim.spawn().pid, sim.spawn().pid];
  });
}

describe(`SIGINT to cuda-checkpoint as a program (${runtime}), --simulate in real time`, () => {
  test("the others come back at once, the one whose lock ends later then; ended by SIGINT", {
    timeout: 60_000,
  }, async () => {
    // One process's lock waits 3 s and then finds it gone (it exits: a rank killed while locked).
    const { path, pids } = await oneOfThreeGoneInLock(3000);
    const r = await interruptProgram(
      ["--simulate", "--action", "lock", "--pid", pids.join(",")],
      path,
      [1000],
    );
    assert.deepEqual([r.code, r.signal], [null, "SIGINT"], r.err); // ended by it
    assert.equal(
      r.out,
      `${pids[0]} failed\n${pids[1]} rolled-back running\n${pids[2]} rolled-back running\n`,
    );
    assert.match(r.err, /^cuda-checkpoint: interrupted: no new step starts/);
    assert.match(
      r.err,
      new RegExp(
        `cuda-checkpoint: interrupted: left changed: ${pids[0]} gone \\(was running\\)\n$`,
      ),
    );
    // Saved: the next command sees the two back and the third gone.
    const state = await cli(["--simulate", "--get-state", "--pid", pids.slice(1).join(",")], {
      env: { CKPT_SIM_STATE: path },
    });
    assert.equal(state.out, `${pids[1]} running\n${pids[2]} running\n`);
  });

  test("a shell's loop stops at a Ctrl-C that ended it, as at any program a signal ends", {
    timeout: 60_000,
  }, async () => {
    // A shell running a loop stops only where its child died by the SIGINT both were sent (as a
    // terminal's Ctrl-C sends it to the whole group), and runs on after an exit 130.
    const { path, pids } = await oneOfThreeGoneInLock(3000);
    const env = { ...process.env, CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" };
    const command = runtime === "deno" ? ["run", "-A", MAIN] : [MAIN];
    const loop = `for i in 1 2; do "$@"; echo "after run $i: $?"; done; echo "the loop ran on"`;
    const args = ["--simulate", "--action", "lock", "--pid", pids.join(",")];
    const shell = spawn("bash", ["-c", loop, "bash", process.execPath, ...command, ...args], {
      env,
      detached: true, // a group of its own, the terminal's foreground group here
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "", err = "";
    shell.stdout.on("data", (d) => out += d);
    shell.stderr.on("data", (d) => err += d);
    const ended = new Promise((resolve) => shell.on("close", resolve));
    while (!existsSync(`${path}.lock`)) await sleep(10);
    await sleep(1000);
    process.kill(-shell.pid!, "SIGINT");
    await ended;
    assert.equal(
      out,
      `${pids[0]} failed\n${pids[1]} rolled-back running\n${pids[2]} rolled-back running\n`,
      err,
    );
  });

  test(
    "started with SIGINT ignored (a shell's background job): it goes on, as NVIDIA's would; SIGTERM still acts",
    {
      timeout: 60_000,
    },
    async () => {
      // A shell without job control starts `cmd &` with SIGINT ignored, so that a Ctrl-C meant for
      // the foreground leaves it be. One process's lock waits 2 s and then finds it gone.
      const { path, pids } = await oneOfThreeGoneInLock(2000);
      const env = { ...process.env, CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" };
      const command = runtime === "deno" ? ["run", "-A", MAIN] : [MAIN];
      const args = ["--simulate", "--action", "lock", "--pid", pids.join(",")];
      const background = ["-c", '"$@" & wait $!', "bash", process.execPath, ...command, ...args];
      const send =
        (lock: string, signals: ("SIGINT" | "SIGTERM")[]) =>
        async (_: unknown, running: () => boolean) => {
          // The lock's pid once written: a lock made but still empty read as 0 was kill(0, ...),
          // a signal to this test's own process group (the test runner and all above it).
          let pid = NaN;
          while (!(pid > 0) && running()) {
            try {
              pid = Number(readFileSync(lock, "utf8").trim()) || NaN;
            } catch {
              // Not made yet.
            }
            if (!(pid > 0)) await sleep(10);
          }
          for (const signal of signals) {
            await sleep(500), running() && pid > 0 && process.kill(pid, signal);
          }
        };
      const r = await runInterrupted("bash", background, env, send(`${path}.lock`, ["SIGINT"]));
      assert.equal(r.code, 1, r.err); // the gone one failed
      assert.equal(r.out, `${pids[0]} failed\n${pids[1]} done locked\n${pids[2]} done locked\n`);
      assert.doesNotMatch(r.err, /interrupted/);
      // The same with SIGTERM after the SIGINT: it brings back what it locked, as in the foreground.
      const { path: path2, pids: pids2 } = await oneOfThreeGoneInLock(2000);
      const r2 = await runInterrupted(
        "bash",
        background.map((a) => a === pids.join(",") ? pids2.join(",") : a),
        { ...env, CKPT_SIM_STATE: path2 },
        send(`${path2}.lock`, ["SIGINT", "SIGTERM"]),
      );
      assert.equal(r2.code, 143, r2.err); // the shell's `wait`: ended by SIGTERM
      assert.match(r2.err, /^cuda-checkpoint: interrupted by SIGTERM: no new step/);
      assert.equal(
        r2.out,
        `${pids2[0]} failed\n${pids2[1]} rolled-back running\n${pids2[2]} rolled-back running\n`,
      );
    },
  );

  test(
    "a second SIGINT ends it at once; the state file is left as it was",
    { timeout: 60_000 },
    async () => {
      const { path, pids } = await machineFile((sim) => {
        const stuck = sim.spawn();
        stuck.hangNext("lock");
        return [stuck.pid, sim.spawn().pid];
      });
      const r = await interruptProgram(
        ["--simulate", "--action", "lock", "--pid", pids.join(",")],
        path,
        [800, 500],
      );
      assert.deepEqual([r.code, r.signal], [null, "SIGINT"], r.err); // ended by it
      assert.equal(r.out, "");
      assert.match(
        r.err,
        new RegExp(`which finishes its steps all the same: ${pids[0]} \\(lock\\)`),
      );
      assert.match(r.err, /the simulated machine was not saved: its state file is as before/);
      const state = await cli(["--simulate", "--get-state", "--pid", pids.join(",")], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.equal(state.out, `${pids[0]} running\n${pids[1]} running\n`);
    },
  );
});

describe(`SIGTERM and SIGHUP to cuda-checkpoint as a program (${runtime}), --simulate in real time`, () => {
  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    test(`a group operation: ${signal} brings back what it changed, then ends it`, {
      timeout: 60_000,
    }, async () => {
      // As the SIGINT case: one process's lock waits 2 s and then finds it gone.
      const { path, pids } = await oneOfThreeGoneInLock(2000);
      const r = await signalProgram(
        ["--simulate", "--action", "lock", "--pid", pids.join(",")],
        path,
        [[700, signal]],
      );
      assert.deepEqual([r.code, r.signal], [null, signal], r.err); // ended by it
      assert.equal(
        r.out,
        `${pids[0]} failed\n${pids[1]} rolled-back running\n${pids[2]} rolled-back running\n`,
      );
      assert.match(r.err, new RegExp(`^cuda-checkpoint: interrupted by ${signal}: no new step`));
      assert.equal(existsSync(`${path}.lock`), false, "no lock left behind");
      // Saved: the two back, running, and the third gone.
      const state = await cli(["--simulate", "--get-state", "--pid", pids.join(",")], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.match(
        state.out,
        new RegExp(`^${pids[0]} error\n${pids[1]} running\n${pids[2]} running\n$`),
      );
    });
  }

  test(
    "snapshot: SIGHUP with stderr gone (a dropped session, a reader that left) still puts every process back; exit 129",
    {
      timeout: 60_000,
    },
    async () => {
      const { path, pids } = await machineFile((sim) => [sim.spawn({ memoryMiB: 4096 }).pid]);
      const snap = join(dir, "snap-no-stderr");
      const env = { ...process.env, CKPT_SIM_STATE: path, CKPT_SIM_CLOCK: "real" } as Record<
        string,
        string
      >;
      const argv = runtime === "deno" ? ["run", "-A", MAIN] : [MAIN];
      const args = ["--simulate", "snapshot", "--pid", `${pids[0]}`, "--dir", snap];
      // Its stderr a pipe whose reader has left: every line it writes there fails (EPIPE).
      const pipeline = `"$0" "$@" 2>&1 >/dev/null | head -c 0`;
      const r = await runInterrupted(
        "bash",
        ["-o", "pipefail", "-c", pipeline, process.execPath, ...argv, ...args],
        env,
        async (_send, running) => {
          while (!existsSync(`${path}.lock`) && running()) {
            await sleep(10);
          }
          await sleep(800);
          const pid = Number(readFileSync(`${path}.lock`, "utf8").trim());
          if (running() && pid > 0) {
            process.kill(pid, "SIGHUP");
          }
        },
      );
      assert.equal(r.code, 129, `${r.signal} ${r.err}`);
      assert.equal(existsSync(join(snap, "in-progress.json")), false, "put back, nothing left");
      const state = await cli(["--simulate", "--get-state", "--pid", `${pids[0]}`], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.equal(state.out, "running\n");
    },
  );

  // SIGINT's 130 (where 1 was) is checked in-process above.
  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    test(`snapshot: ${signal} puts every process back, running, then ends it`, {
      timeout: 60_000,
    }, async () => {
      const { path, pids } = await machineFile((sim) => [
        sim.spawn({ memoryMiB: 4096 }).pid,
        sim.spawn({ memoryMiB: 4096 }).pid,
      ]);
      const snap = join(dir, `snap-${signal}`);
      const r = await signalProgram(
        ["--simulate", "snapshot", "--pid", pids.join(","), "--dir", snap],
        path,
        [[800, signal]],
      );
      assert.deepEqual([r.code, r.signal], [null, signal], r.err); // ended by it
      assert.equal(r.out, "");
      assert.match(r.err, new RegExp(`^cuda-checkpoint: snapshot interrupted`));
      assert.match(
        r.err,
        /\ncuda-checkpoint: snapshot stopped .* put back as it was, and keeps running/,
      );
      assert.equal(existsSync(`${path}.lock`), false, "no lock left behind");
      const state = await cli(["--simulate", "--get-state", "--pid", pids.join(",")], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.equal(state.out, `${pids[0]} running\n${pids[1]} running\n`);
    });
  }

  test(
    "one pid: a signal mid-step leaves it as the driver leaves a killed caller's target: the step ended, no other begun, saved",
    {
      timeout: 60_000,
    },
    async () => {
      const { path, pids } = await machineFile((sim) => [sim.spawn({ memoryMiB: 4096 }).pid]);
      const toggle = ["--simulate", "--toggle", "--pid", `${pids[0]}`];
      const env = { CKPT_SIM_STATE: path };
      // Its checkpoint takes about 1.9 s, its restore 0.75 s: each signal comes before the end.
      for (
        const [ms, signal, after] of [[700, "SIGTERM", "checkpointed"], [300, "SIGHUP", "locked"]]
      ) {
        const r = await signalProgram(toggle, path, [[ms as number, signal as "SIGTERM"]]);
        assert.deepEqual([r.code, r.signal], [null, signal], r.err); // ended by it, as NVIDIA's
        assert.equal(existsSync(`${path}.lock`), false, "no lock left behind");
        const state = await cli(["--simulate", "--get-state", "--pid", `${pids[0]}`], { env });
        assert.equal(state.out, `${after}\n`, `${signal}: where the step in the driver took it`);
      }
    },
  );

  test(
    "one pid on --simulate: a signal while a call hangs (an injected hang) still ends it; nothing saved, said",
    {
      timeout: 60_000,
    },
    async () => {
      const { path, pids } = await machineFile((sim) => {
        const p = sim.spawn({ memoryMiB: 4096 });
        p.hangNext("lock");
        return [p.pid];
      });
      const r = await signalProgram(["--simulate", "--toggle", "--pid", `${pids[0]}`], path, [
        [500, "SIGTERM"],
      ]);
      assert.deepEqual([r.code, r.signal], [null, "SIGTERM"], r.err); // not waiting on the hang
      assert.match(r.err, /cannot save the simulated machine now: 1 driver call/);
      assert.equal(existsSync(`${path}.lock`), false, "no lock left behind");
      const state = await cli(["--simulate", "--get-state", "--pid", `${pids[0]}`], {
        env: { CKPT_SIM_STATE: path },
      });
      assert.equal(state.out, "running\n", "the file as it was before the command");
    },
  );

  test("the compiled binary: SIGTERM during a snapshot puts every process back, then ends it", {
    timeout: 60_000,
    skip: binaryBuilt ? false : `${BINARY} is not built: run \`bash cli/build.sh\``,
  }, async () => {
    const { path, pids } = await machineFile((sim) => [
      sim.spawn({ memoryMiB: 4096 }).pid,
      sim.spawn({ memoryMiB: 4096 }).pid,
    ]);
    const r = await signalProgram(
      ["--simulate", "snapshot", "--pid", pids.join(","), "--dir", join(dir, "snap-binary")],
      path,
      [[800, "SIGTERM"]],
      true,
    );
    assert.deepEqual([r.code, r.signal], [null, "SIGTERM"], r.err); // ended by it
    assert.match(r.err, /^cuda-checkpoint: snapshot interrupted by SIGTERM: /);
    const state = await cli(["--simulate", "--get-state", "--pid", pids.join(",")], {
      env: { CKPT_SIM_STATE: path },
    });
    assert.equal(state.out, `${pids[0]} running\n${pids[1]} running\n`);
  });

  test("snapshot: a second signal ends it at once, saying what may be left suspended", {
    timeout: 60_000,
  }, async () => {
    const { path, pids } = await machineFile((sim) => {
      const stuck = sim.spawn();
      stuck.hangNext("lock");
      return [stuck.pid, sim.spawn().pid];
    });
    const r = await signalProgram(
      ["--simulate", "snapshot", "--pid", pids.join(","), "--dir", join(dir, "snap-stuck")],
      path,
      [[800, "SIGHUP"], [500, "SIGTERM"]],
    );
    assert.deepEqual([r.code, r.signal], [null, "SIGTERM"], r.err); // ended by it
    assert.match(r.err, /interrupted again: exiting without waiting; processes of the snapshot/);
    // Every command it names works on the simulated machine too.
    assert.match(
      r.err,
      /see cuda-checkpoint --simulate list, and resume each with cuda-checkpoint/,
    );
    assert.match(r.err, /cuda-checkpoint --simulate --toggle --pid PID, or all that its trace/);
    assert.match(r.err, /cuda-checkpoint --simulate recover .*snap-stuck\n/);
    assert.match(r.err, /the simulated machine was not saved/);
  });
});
