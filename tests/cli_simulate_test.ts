// `cuda-checkpoint --simulate`, in-process through `main()`: the simulated machine of the state
// file named by CKPT_SIM_STATE (a temporary file here) lives from one command to the next: spawn,
// operations, list, kill, reset; the notice on a terminal only; a bad state file or a spawn that
// does not fit is one line and exit 1. Runs unchanged under `deno test -A` and `bun test`.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { openSimulatedMachine } from "../cli/simulate.ts";
import { cli } from "./cli_support.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { processDir } from "./support/temp_dirs.ts";

const dir = processDir("ckpt-cli-simulate-");
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

/** A fresh state file, and `cli` with CKPT_SIM_STATE set to it and --simulate first. */
function machine() {
  const path = join(dir, `machine-${files++}.json`);
  const env = { CKPT_SIM_STATE: path };
  return {
    path,
    run: (args: (string | number)[], isTerminal = false) =>
      cli(["--simulate", ...args], { env, isTerminal }),
  };
}

describe("--simulate", () => {
  test("a process spawned in one run is there in the next, and keeps its state", async () => {
    const { run } = machine();
    const spawned = await run(["spawn", "--memory-mib", 1024, "--command", "python train.py"]);
    assert.equal(spawned.code, 0, spawned.err);
    assert.match(spawned.out, /^[0-9]+\n$/);
    const pid = Number.parseInt(spawned.out);
    assert.equal((await run(["--get-state", "--pid", pid])).out, "running\n");
    assert.match((await run(["--get-restore-tid", "--pid", pid])).out, /^[0-9]+\n$/);
    assert.deepEqual(await run(["--toggle", "--pid", pid]).then((r) => [r.code, r.out, r.err]), [
      0,
      "",
      "",
    ]);
    assert.equal((await run(["--get-state", "--pid", pid])).out, "checkpointed\n");
    const list = await run(["list"]);
    assert.match(
      list.out,
      new RegExp(`^${pid} +checkpointed +[0-9]+ +0 MiB +python train.py$`, "m"),
    );
    assert.equal((await run(["--toggle", "--pid", pid])).code, 0);
    assert.equal((await run(["--get-state", "--pid", pid])).out, "running\n");
  });

  test("a state file that cannot be saved after the command: said, and exit 1", async () => {
    const { path, run } = machine();
    const pids = [await run(["spawn"]), await run(["spawn"])].map((r) => r.out.trim()).join(",");
    // Once the machine is read (the command's interrupts are watched as it begins to act, and as
    // it saves), a directory takes the state file's name: the save cannot rename its file over it.
    const interrupts = {
      watch: () => {
        rmSync(path, { recursive: true });
        mkdirSync(join(path, "taken"), { recursive: true });
        return () => {};
      },
      exit: () => assert.fail("no interrupt"),
      raise: () => assert.fail("no interrupt"),
    };
    const env = { CKPT_SIM_STATE: path };
    const r = await cli(["--simulate", "--toggle", "--pid", pids], { env, interrupts });
    assert.equal(r.code, 1, "the toggle done, but what it did is not kept");
    assert.match(r.err, /^cuda-checkpoint: the simulated machine's state file: cannot write /m);
    rmSync(path, { recursive: true });
  });

  test("a --toggle resume that would not fit is refused before the driver, run after run", async () => {
    // Each command is a program of its own: the suspend's record of what the process held is in
    // the state file, where the next command finds it (as /run/ckpt-cuda is on a real machine).
    const { run } = machine();
    const pid = Number.parseInt((await run(["spawn", "--memory-mib", 4096])).out);
    assert.equal((await run(["--toggle", "--pid", pid])).code, 0);
    // A filler takes the GPU: 2048 MiB of its memory stay free, less than the target held.
    const list = JSON.parse((await run(["list", "--json"])).out || "{}");
    assert.equal(list.state, "checkpointed");
    const filler = Number.parseInt((await run(["spawn", "--memory-mib", 141_203])).out);
    const refused = await run(["--toggle", "--pid", pid]);
    assert.equal(refused.code, 1);
    assert.equal(refused.out, "");
    assert.deepEqual(refused.errLines, [
      `Error toggling CUDA in process ID ${pid}: "not enough free GPU memory for it: refused before asking the driver"`,
    ]);
    const said = await run(["--toggle", "--pid", pid, "--json"], true);
    const report = JSON.parse(said.out);
    assert.equal(report.error.code, "NO_ROOM");
    assert.equal(report.error.refused, true);
    assert.match(report.error.detail, /^toggle of process \d+ refused: it needs 4616 MiB on GPU-/);
    assert.match(said.err, /cuda-checkpoint: toggle of process \d+ refused: it needs 4616 MiB/);
    assert.equal((await run(["--get-state", "--pid", pid])).out, "checkpointed\n");
    // The filler ends: the same command resumes it, its room checked.
    assert.equal((await run(["kill", filler])).code, 0);
    const resumed = await run(["--toggle", "--pid", pid, "--json"], true);
    assert.equal(resumed.code, 0, resumed.err);
    assert.equal(JSON.parse(resumed.out).roomCheck, "checked");
    assert.doesNotMatch(resumed.err, /GPU room/, "a terminal is told nothing of a room checked");
    assert.equal((await run(["--get-state", "--pid", pid])).out, "running\n");
  });

  test("a process another tool checkpointed: its room cannot be checked, and a terminal says so", async () => {
    const { path, run } = machine();
    const pid = Number.parseInt((await run(["spawn", "--memory-mib", 64])).out);
    // Another tool (here the raw simulated driver) checkpoints it: no record is left.
    const m = await openSimulatedMachine({ path });
    assert.equal(await m.machine.driver.lock(pid, null), 0);
    assert.equal(await m.machine.driver.checkpoint(pid), 0);
    await m.save();
    await m.close();
    // Piped, NVIDIA's output (none); on a terminal, one more line that says it was not checked.
    const piped = await run(["--action", "restore", "--pid", pid]);
    assert.deepEqual([piped.code, piped.out, piped.err], [0, "", ""]);
    await run(["--action", "checkpoint", "--pid", pid]); // ours: recorded this time
    await run(["--action", "restore", "--pid", pid]);
    const m2 = await openSimulatedMachine({ path });
    assert.equal(await m2.machine.driver.checkpoint(pid), 0);
    await m2.save();
    await m2.close();
    const terminal = await run(["--action", "restore", "--pid", pid, "--json"], true);
    assert.equal(terminal.code, 0, terminal.err);
    assert.match(JSON.parse(terminal.out).roomCheck.unknown, /^no record of the GPU memory/);
    assert.match(
      terminal.err,
      new RegExp(
        `cuda-checkpoint: the GPU room for process ${pid} could not be checked before its restore: no record`,
      ),
    );
  });

  test("several processes, --all, and a process on two GPUs", async () => {
    const { run } = machine();
    const a = Number.parseInt((await run(["spawn"])).out);
    const spawned = await run(["spawn", "--gpu", "0,1", "--memory-mib", 2048, "--json"]);
    const b = JSON.parse(spawned.out).pid;
    assert.equal(typeof b, "number");
    const r = await run(["--toggle", "--all"]);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, `${a} done checkpointed\n${b} done checkpointed\n`);
    assert.equal(
      (await run(["--get-state", "-p", `${a},${b}`])).out,
      `${a} checkpointed\n${b} checkpointed\n`,
    );
  });

  test("kill ends a process; killing one that is not there fails", async () => {
    const { run } = machine();
    const pid = Number.parseInt((await run(["spawn"])).out);
    assert.deepEqual([(await run(["kill", pid])).code], [0]);
    const gone = await run(["--get-state", "--pid", pid]);
    assert.equal(gone.code, 1);
    assert.equal(
      gone.err,
      `Error getting process state for process ID ${pid}: "OS call failed or operation not supported on this OS"\n`,
    );
    const again = await run(["kill", pid]);
    assert.equal(again.code, 1);
    assert.equal(again.err, `cuda-checkpoint: no simulated process has pid ${pid}\n`);
  });

  test("--json: spawn, kill and reset each answer one object on stdout, saying what was done", async () => {
    const { path, run } = machine();
    const spawned = await run(["spawn", "--json"]);
    const pid = JSON.parse(spawned.out).pid;
    assert.deepEqual([spawned.code, JSON.parse(spawned.out), spawned.err], [
      0,
      { pid, spawned: true },
      "",
    ]);
    const killed = await run(["kill", pid, "--json"]);
    assert.deepEqual([killed.code, killed.out, killed.err], [
      0,
      `{"pid":${pid},"killed":true}\n`,
      "",
    ]);
    // A pid that is not there: the object says so too, for a program reading stdout.
    const again = await run(["kill", pid, "--json"]);
    assert.deepEqual([again.code, again.out], [1, `{"pid":${pid},"killed":false}\n`]);
    assert.equal(again.err, `cuda-checkpoint: no simulated process has pid ${pid}\n`);
    const reset = await run(["reset", "--json"]);
    assert.deepEqual([reset.code, JSON.parse(reset.out), reset.err], [
      0,
      { reset: true, path },
      "",
    ]);
  });

  test("a stopped process: lock and toggle refused in our words, exit 1, nothing done", async () => {
    // NVIDIA's utility would wait on it for good (docs/DRIVER.md): there is no line of its to keep.
    const { path, run } = machine();
    const pid = Number.parseInt((await run(["spawn"])).out);
    const state = JSON.parse(readFileSync(path, "utf8"));
    state.processes[0].stopped = true; // as a restore held it, or a SIGSTOP
    writeFileSync(path, JSON.stringify(state));
    const why = `it is stopped (SIGSTOP, Ctrl-Z, a debugger), and the driver answers no call on ` +
      `it, a lock's timeout included, till it runs again (kill -CONT ${pid})`;
    const lock = await run(["--action", "lock", "--pid", pid]);
    assert.deepEqual([lock.code, lock.err], [1, `Could not lock on process ID ${pid}: "${why}"\n`]);
    const toggle = await run(["--toggle", "--pid", pid, "--json"]);
    const { error } = JSON.parse(toggle.out);
    assert.deepEqual([toggle.code, error.code, error.refused], [1, "STATE", true]);
    assert.equal(JSON.parse(readFileSync(path, "utf8")).processes[0].state, "running");
  });

  test("reset empties the machine", async () => {
    const { run } = machine();
    await run(["spawn"]);
    assert.equal((await run(["reset"])).code, 0);
    assert.equal((await run(["list"])).out, "PID  STATE  RESTORE_TID  GPU_MEMORY  COMMAND\n");
  });

  test("on a terminal the first stderr line says it is simulated, and where; piped, nothing", async () => {
    const { run, path } = machine();
    const piped = await run(["spawn"]);
    assert.equal(piped.err, "");
    const terminal = await run(["--get-state", "--pid", Number.parseInt(piped.out)], true);
    assert.equal(terminal.err, `cuda-checkpoint: simulated machine, kept in ${path}\n`);
    assert.equal(terminal.out, "running\n");
    // inspect too runs on the simulated machine with --simulate (its snapshots, wherever kept).
    const empty = join(dir, `empty-${files++}`);
    mkdirSync(empty);
    const inspected = await run(["inspect", empty], true);
    assert.equal(inspected.code, 1);
    assert.ok(
      inspected.err.startsWith(`cuda-checkpoint: simulated machine, kept in ${path}\n`),
      inspected.err,
    );
  });

  test("a spawn that does not fit on the GPU is one line that reads right, exit 1", async () => {
    const { run } = machine();
    const r = await run(["spawn", "--memory-mib", 10_000_000]);
    assert.equal(r.code, 1);
    assert.equal(r.out, "");
    assert.match(
      r.err,
      /^cuda-checkpoint: spawn: GPU 0 has \d+ MiB free, too little for 10000520 MiB more \(its 10000000 MiB of memory and 520 MiB of CUDA context\)\n$/,
    );
    // Over two GPUs, each holds its share.
    const two = await run(["spawn", "--memory-mib", 10_000_000, "--gpu", "0,1"]);
    assert.match(
      two.err,
      /too little for 5000520 MiB more \(5000000 MiB, its share of 10000000 MiB of memory, and 520 MiB of CUDA context\)\n$/,
    );
    // With --json, stdout says it too, as for every command (before, it was empty).
    const json = await run(["spawn", "--memory-mib", 10_000_000, "--json"]);
    const { ok, error } = JSON.parse(json.out);
    assert.deepEqual([json.code, ok, error.name], [1, false, "RangeError"]);
    assert.match(error.message, /^spawn: GPU 0 has \d+ MiB free, too little/);
  });

  test("a state file that is not one is one line naming it, exit 1", async () => {
    const { run, path } = machine();
    writeFileSync(path, "this is not a simulated machine");
    const r = await run(["--get-state", "--pid", 4000]);
    assert.equal(r.code, 1);
    assert.match(r.err, /^cuda-checkpoint: .*\n$/);
    assert.ok(r.err.includes(path), r.err);
    // With --json, a program reading stdout is told too.
    const json = JSON.parse((await run(["list", "--json"])).out);
    assert.equal(json.ok, false);
    assert.equal(json.error.code, "OPEN");
    assert.ok(json.error.message.includes(path), json.error.message);
  });

  test("reset never replaces a file that is not a state file: exit 1, the file as it was", async () => {
    const { run, path } = machine();
    writeFileSync(path, "my own notes\n", { mode: 0o600 });
    const r = await run(["reset"]);
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /is not a simulated machine's state file \(it does not begin as one\); remove it or name another in CKPT_SIM_STATE\n$/,
    );
    assert.equal(readFileSync(path, "utf8"), "my own notes\n");
  });

  test("a snapshot of another machine's GPUs restored checkpointed: the next command loads", async () => {
    const { run } = machine();
    const elsewhere = new SimulatedMachine({ gpus: 2, seed: 7 }); // other GPUs (their UUIDs)
    const p = elsewhere.spawn({ memoryMiB: 512, gpu: 1 });
    const snap = join(dir, `elsewhere-${files}`);
    assert.equal((await cli(["--toggle", "--pid", p.pid], { machine: elsewhere })).code, 0);
    const taken = await cli(["snapshot", "--pid", p.pid, "--dir", snap], { machine: elsewhere });
    assert.equal(taken.code, 0, taken.err);
    const restored = await run(["restore-snapshot", snap]);
    assert.equal(restored.code, 0, restored.err);
    // Its record of what it held names the GPUs it left: a record of a real machine may too.
    const listed = await run(["list"]);
    assert.equal(listed.code, 0, listed.err);
    assert.match(listed.out, new RegExp(`^${p.pid} +checkpointed `, "m"));
  });

  test("an empty state file, as mktemp makes it, is a new machine, for reset or any command", async () => {
    for (const first of [["reset"], ["spawn"]]) {
      const { run, path } = machine();
      writeFileSync(path, "", { mode: 0o600 });
      const r = await run(first);
      assert.equal(r.code, 0, r.err);
      assert.equal((await run(["list", "--json"])).code, 0);
    }
  });

  test("kill takes one pid", async () => {
    const { run } = machine();
    const r = await run(["kill"]);
    assert.equal(r.code, 1);
    assert.deepEqual(r.errLines, [
      "--simulate kill takes the pid of one simulated process",
      "cuda-checkpoint: got none", // the bad value, on a terminal or not: the command is ours
      "Run cuda-checkpoint --help for what kill takes.",
    ]);
  });
});
