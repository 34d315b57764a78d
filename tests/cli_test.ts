// Golden tests of `cuda-checkpoint` (cli/), run in-process through `main()` on the simulated
// driver: every NVIDIA message (docs/DRIVER.md#messages-and-exit-codes) word for word, each one
// checked against a log of NVIDIA's own utility on a GPU (tests/gpu/reports/cli-h100-log.txt), so
// a line we made up cannot pass; the GPU compare (tests/gpu/run_cli.sh) is the proof that both
// tools print the same line for the same case, these are its regression tests. CRIU's
// contract (help names --action, the state and thread id parse, a failure exits nonzero), and our
// extras (several pids, --all, --all-or-nothing, list, --json, --version, a terminal's extra lines
// and progress (the live line and --json's events: tests/cli_progress_test.ts), bad input,
// internal errors). Runs unchanged under `deno test -A` and `bun test`.
// The compiled binary: tests/cli_binary_test.ts; the native driver in a subprocess:
// tests/cli_native_test.ts; --simulate's state file: tests/cli_simulate_test.ts.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import { parseCommandLine } from "../cli/args.ts";
import { NVIDIA_MESSAGES, UsageError } from "../cli/command.ts";
import { helpText } from "../cli/help.ts";
import { main } from "../cli/main.ts";
import { VERSION } from "../core/version.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { listCudaProcesses } from "../mod.ts";
import { cli, HELP_FIRST_LINE } from "./cli_support.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";

/** A simulator with two GPUs and a CUDA process of 1 GiB on GPU 0. */
function machine() {
  const sim = new SimulatedMachine({ gpus: 2 });
  const target = sim.spawn({ memoryMiB: 1024, command: "python train.py" });
  return { sim, target, pid: target.pid };
}

const GOLDEN_HELP = new URL("./fixtures/cli_help.txt", import.meta.url);

describe("regression: NVIDIA's lines for bad input", () => {
  const rows: [string, (string | number)[], string][] = [
    ["no operation", [], NVIDIA_MESSAGES.noOperation],
    ["no operation, only a pid", ["--pid", 5], NVIDIA_MESSAGES.noOperation],
    ["an operation without pid", ["--get-state"], NVIDIA_MESSAGES.missingPid],
    ["--pid abc", ["--get-state", "--pid", "abc"], NVIDIA_MESSAGES.badPid],
    ["--pid -5", ["--get-state", "--pid", "-5"], NVIDIA_MESSAGES.badPid],
    ["-p 12x", ["--get-state", "-p", "12x"], NVIDIA_MESSAGES.badPid],
    [
      "--timeout -5",
      ["--action", "lock", "--pid", 5, "--timeout", "-5"],
      NVIDIA_MESSAGES.badTimeout,
    ],
    [
      "--timeout with restore",
      ["--action", "restore", "-p", 5, "-t", 5],
      NVIDIA_MESSAGES.timeoutNotLock,
    ],
    [
      "--timeout with --get-state",
      ["--get-state", "-p", 5, "-t", 5],
      NVIDIA_MESSAGES.timeoutNotLock,
    ],
    ["--timeout with --toggle", ["--toggle", "-p", 5, "-t", 5], NVIDIA_MESSAGES.timeoutNotLock],
    [
      "--device-map bad",
      ["--action", "restore", "-p", 5, "--device-map", "bad"],
      NVIDIA_MESSAGES.badDeviceMap,
    ],
    ["--action foo", ["--action", "foo", "--pid", 5], NVIDIA_MESSAGES.badAction],
  ];
  for (const [what, args, message] of rows) {
    test(`${what}: "${message}", then the help, on stderr; exit 1`, async () => {
      const r = await cli(args, { machine: new SimulatedMachine() });
      assert.equal(r.code, 1);
      assert.equal(r.out, "", "stdout stays clean");
      assert.deepEqual(r.errLines, [message], "one line, exactly NVIDIA's (not on a terminal)");
      assert.ok(r.err.endsWith(`${message}\n\n${helpText()}`), "a blank line, then the help");
    });
  }

  // What getopt_long prints before NVIDIA's line, named by the program as it was run (measured
  // side by side with NVIDIA's utility on two H200s, driver 580).
  const getoptRows: [string, (string | number)[], string][] = [
    ["an unknown option", ["--frobnicate"], "unrecognized option '--frobnicate'"],
    ["an unknown option with a value", ["--frob=1"], "unrecognized option '--frob=1'"],
    [
      "an unknown option after a command",
      ["--get-state", "-p", 5, "--bogus"],
      "unrecognized option '--bogus'",
    ],
    ["an unknown short option", ["-x"], "invalid option -- 'x'"],
    ["--pid without its value", ["--get-state", "--pid"], "option '--pid' requires an argument"],
    ["-p without its value", ["--get-state", "-p"], "option requires an argument -- 'p'"],
    [
      "--action without its value",
      ["--pid", 5, "--action"],
      "option '--action' requires an argument",
    ],
    [
      "a value for a flag",
      ["--get-state=yes", "-p", 5],
      "option '--get-state' doesn't allow an argument",
    ],
    [
      "the start of two options",
      ["--get-", "-p", 5],
      "option '--get-' is ambiguous; possibilities: '--get-state' '--get-restore-tid'",
    ],
  ];
  for (const [what, args, getopt] of getoptRows) {
    test(`${what}: getopt's line, then "${NVIDIA_MESSAGES.badOption}"; exit 1`, async () => {
      const r = await cli(args, {
        machine: new SimulatedMachine(),
        programName: "/opt/bin/cuda-checkpoint",
      });
      assert.equal(r.code, 1);
      assert.equal(r.out, "");
      assert.deepEqual(r.errLines, [
        `/opt/bin/cuda-checkpoint: ${getopt}`,
        NVIDIA_MESSAGES.badOption,
      ]);
      assert.ok(r.err.endsWith(`${NVIDIA_MESSAGES.badOption}\n\n${helpText()}`));
      const unnamed = await cli(args, { machine: new SimulatedMachine() });
      assert.equal(
        unnamed.errLines[0],
        `cuda-checkpoint: ${getopt}`,
        "named cuda-checkpoint by default",
      );
    });
  }

  test("every message is one NVIDIA's utility printed in a recorded GPU run", () => {
    // tests/gpu/run_cli.sh records each case's stderr of both programs; the lines under
    // "nvidia:" are what NVIDIA's own utility printed (H100, driver 580.159.04). A message of ours
    // that claims to be NVIDIA's must be among them, word for word.
    const log = readFileSync(new URL("./gpu/reports/cli-h100-log.txt", import.meta.url), "utf8");
    const printed = new Set<string>();
    let nvidia = false;
    for (const line of log.split("\n")) {
      if (/^ {4}nvidia: /.test(line)) nvidia = true;
      else if (/^ {4}ours {2}: /.test(line) || /^(PASS|FAIL|SKIP) /.test(line)) nvidia = false;
      else if (nvidia && line.startsWith("      err| ")) printed.add(line.slice(11));
    }
    assert.ok(printed.size > 10, `NVIDIA's lines were found in the log (${printed.size})`);
    for (const message of Object.values(NVIDIA_MESSAGES)) {
      assert.ok(printed.has(message), `NVIDIA's utility printed ${JSON.stringify(message)}`);
    }
  });
});

describe("regression: NVIDIA's lines for what the driver says", () => {
  test("get-state of a pid that does not exist", async () => {
    const r = await cli(["--get-state", "--pid", 999999], { machine: new SimulatedMachine() });
    assert.equal(r.code, 1);
    assert.equal(r.out, "");
    assert.equal(
      r.err,
      'Error getting process state for process ID 999999: "OS call failed or operation not supported on this OS"\n',
    );
  });

  test("get-restore-tid of a process that is not a CUDA process", async () => {
    const sim = new SimulatedMachine();
    const bash = sim.spawn({ cuda: false, command: "bash" });
    const r = await cli(["--get-restore-tid", "--pid", bash.pid], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(r.out, "");
    assert.equal(r.err, `Could not find restore thread for process ID ${bash.pid}\n`);
  });

  test("unlock of a running process", async () => {
    const { sim, pid } = machine();
    const r = await cli(["--action", "unlock", "--pid", pid], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `Could not unlock on process ID ${pid}: "the operation cannot be performed in the present state"\n`,
    );
  });

  test('every failed step says Could not <step> on process ID <pid>: "<cuGetErrorString>"', async () => {
    const { sim, pid } = machine();
    const failures: [string[], string][] = [
      [["--action", "checkpoint"], "checkpoint"],
      [["--action", "restore"], "restore"],
      [["--action", "unlock"], "unlock"],
    ];
    for (const [args, step] of failures) {
      const r = await cli([...args, "--pid", pid], { machine: sim });
      assert.equal(r.code, 1);
      assert.equal(
        r.err,
        `Could not ${step} on process ID ${pid}: "the operation cannot be performed in the present state"\n`,
      );
    }
    assert.equal((await cli(["--action", "lock", "-p", pid], { machine: sim })).code, 0);
    const again = await cli(["--action", "lock", "-p", pid], { machine: sim });
    assert.equal(again.code, 1, "a lock of a locked process fails, as the driver says");
    assert.match(again.err, new RegExp(`^Could not lock on process ID ${pid}: "the operation`));
  });

  test("a toggle of a locked process fails with NVIDIA's toggle line", async () => {
    const { sim, pid } = machine();
    await cli(["--action", "lock", "--pid", pid], { machine: sim });
    const r = await cli(["--toggle", "--pid", pid], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `Error toggling CUDA in process ID ${pid}: "the operation cannot be performed in the present state"\n`,
    );
  });

  test("a lock that times out on a busy process: device not ready, still running", async () => {
    const { sim, target, pid } = machine();
    const kernel = target.launch(3000);
    const r = await cli(["--action", "lock", "--pid", pid, "--timeout", 200], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(r.err, `Could not lock on process ID ${pid}: "device not ready"\n`);
    assert.equal(target.state, "running");
    await kernel;
  });
});

describe("CRIU's CUDA plugin's contract", () => {
  test("-h exits 0 and its text names --action (the plugin checks for it), within 2047 bytes", async () => {
    const r = await cli(["-h"]);
    assert.equal(r.code, 0);
    assert.equal(r.err, "");
    assert.ok(r.out.includes("--action"));
    assert.ok(r.out.startsWith(HELP_FIRST_LINE));
    assert.ok(r.out.slice(0, 2047).includes("--action"), "within what the plugin keeps");
  });

  test("the help is the golden file's, word for word", async () => {
    const r = await cli(["--help"]);
    const golden = readFileSync(GOLDEN_HELP, "utf8").replaceAll("{VERSION}", VERSION);
    assert.equal(r.out, golden);
  });

  test("dump and restore as the plugin runs them: state and thread id parse, every step exits 0", async () => {
    const { sim, target, pid } = machine();
    const digest = await target.memoryChunkedSha256();
    const tid = await cli(["--get-restore-tid", "--pid", pid], { machine: sim });
    assert.equal(tid.code, 0);
    assert.match(tid.out, /^[0-9]+\n$/);
    assert.equal(Number.parseInt(tid.out), target.tid);
    const state = await cli(["--get-state", "--pid", Number.parseInt(tid.out)], { machine: sim });
    assert.equal(state.out, "running\n", "asked by the restore thread's id, as the plugin does");
    for (
      const args of [
        ["--action", "lock", "--pid", pid, "--timeout", 10000],
        ["--get-restore-tid", "--pid", pid],
        ["--action", "checkpoint", "--pid", pid],
      ]
    ) {
      const r = await cli(args, { machine: sim });
      assert.equal(r.code, 0, r.err);
      assert.equal(r.err, "");
    }
    assert.equal((await cli(["--get-state", "-p", pid], { machine: sim })).out, "checkpointed\n");
    assert.equal(sim.gpus[0].usedMiB, 0);
    for (const action of ["restore", "unlock"]) {
      const r = await cli(["--action", action, "--pid", pid], { machine: sim });
      assert.deepEqual([r.code, r.out, r.err], [0, "", ""]);
    }
    assert.equal((await cli(["--get-state", "-p", pid], { machine: sim })).out, "running\n");
    assert.equal(await target.memoryChunkedSha256(), digest);
  });

  test("a failure exits nonzero, with the output within the 127 bytes the plugin keeps", async () => {
    const r = await cli(["--action", "checkpoint", "--pid", machine().pid], {
      machine: machine().sim,
    });
    assert.equal(r.code, 1);
    assert.ok(r.err.length <= 127, r.err);
  });

  test("a lock without --timeout waits as long as it takes (CRIU leaves it out for 0)", async () => {
    const { sim, target, pid } = machine();
    // Longer than the library's default lock timeout (10 s), which the command line does not use.
    const kernel = target.launch(15_000);
    const r = await cli(["--action", "lock", "--pid", pid], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assert.equal(target.state, "locked");
    await kernel;
    // Several pids, the same.
    const more = [sim.spawn({ memoryMiB: 256 }), sim.spawn({ memoryMiB: 256 })];
    const kernels = more.map((p) => p.launch(15_000));
    const both = await cli(["--action", "lock", "--pid", more.map((p) => p.pid).join(",")], {
      machine: sim,
    });
    assert.equal(both.code, 0, both.err);
    assert.deepEqual(more.map((p) => p.state), ["locked", "locked"]);
    await Promise.all(kernels);
  });
});

describe("the minimum for one pid", () => {
  test("--get-state and --get-restore-tid make one driver call each; a step one, too", async () => {
    const { sim, pid } = machine();
    const calls = async (args: (string | number)[]) => {
      const before = sim.driver.calls.length;
      assert.equal((await cli(args, { machine: sim })).code, 0);
      return sim.driver.calls.slice(before).map((c) => c.op);
    };
    assert.deepEqual(await calls(["--get-state", "--pid", pid]), ["getState"]);
    assert.deepEqual(await calls(["--get-restore-tid", "--pid", pid]), ["getRestoreThreadId"]);
    assert.deepEqual(await calls(["--action", "lock", "--pid", pid]), ["lock"]);
    assert.deepEqual(await calls(["--action", "unlock", "--pid", pid]), ["unlock"]);
    assert.deepEqual(await calls(["--toggle", "--pid", pid]), ["getState", "lock", "checkpoint"]);
  });
});

describe("toggle and the device map", () => {
  test("--toggle suspends a running process and resumes a checkpointed one, silently", async () => {
    const { sim, target, pid } = machine();
    assert.deepEqual(
      [await cli(["--toggle", "--pid", pid], { machine: sim })].map((r) => [r.code, r.out, r.err]),
      [[0, "", ""]],
    );
    assert.equal(target.state, "checkpointed");
    assert.equal((await cli(["--toggle", "-p", pid], { machine: sim })).code, 0);
    assert.equal(target.state, "running");
  });

  test("restore with a full device map moves the process; a partial one is refused, retry allowed", async () => {
    const { sim, target, pid } = machine();
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    await cli(["--toggle", "--pid", pid], { machine: sim });
    const partial = await cli(["--action", "restore", "-p", pid, "-d", `${g0}=${g1}`], {
      machine: sim,
    });
    assert.equal(partial.code, 1);
    assert.deepEqual(partial.errLines, [
      `Could not restore on process ID ${pid}: "invalid argument"`,
    ]);
    assert.equal(target.state, "checkpointed");
    const onTerminal = await cli(["--action", "restore", "-p", pid, "-d", `${g0}=${g1}`], {
      machine: sim,
      isTerminal: true,
    });
    assert.match(
      onTerminal.errLines[1],
      /^cuda-checkpoint: restore of process \d+ refused: the GPU mapping cannot work: .*leaves out/,
    );
    const full = await cli(["--action", "restore", "-p", pid, "-d", `${g0}=${g1},${g1}=${g0}`], {
      machine: sim,
    });
    assert.equal(full.code, 0, full.err);
    assert.equal(target.gpuUuids[0], g1);
    assert.equal(target.state, "locked");
  });

  test("--toggle with a device map resumes onto other GPUs; of a running process it suspends", async () => {
    const { sim, target, pid } = machine();
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    const map = `${g0}=${g1},${g1}=${g0}`;
    // NVIDIA's utility (580, two H200s) checkpoints a running process given --toggle -d, exit 0:
    // the same command line serves both ways. (Its toggle back ignores the map; ours uses it.)
    const running = await cli(["--toggle", "-p", pid, "--device-map", map], { machine: sim });
    assert.deepEqual([running.code, running.out, running.err], [0, "", ""]);
    assert.equal(target.state, "checkpointed");
    assert.equal(target.gpuUuids[0], g0, "a suspend moves nothing");
    assert.equal(
      (await cli(["--toggle", "-p", pid, "--device-map", map], { machine: sim })).code,
      0,
    );
    assert.equal(target.gpuUuids[0], g1);
  });

  test("as getopt_long: a long option's start names it (NVIDIA's first); an operation twice is one", async () => {
    const { sim, target, pid } = machine();
    const ok = async (...args: (string | number)[]) => {
      const r = await cli(args, { machine: sim });
      assert.equal(r.code, 0, `${args.join(" ")}: ${r.err}`);
      return r.out;
    };
    assert.equal(await ok("--get-sta", "--pi", pid), "running\n");
    await ok("--act", "lock", "--p", pid, "--time", 5); // --p: --pid, not our --path-like ones
    assert.equal(target.state, "locked");
    await ok("--action", "checkpoint", "--action", "unlock", "-p", pid); // the last --action
    assert.equal(target.state, "running");
    await ok("--tog", "--toggle", "-p", pid);
    assert.equal(target.state, "checkpointed");
    await ok(
      "--d",
      `${sim.gpus[0].uuid}=${sim.gpus[0].uuid},${sim.gpus[1].uuid}=${sim.gpus[1].uuid}`,
      "--toggle",
      "-p",
      pid,
    );
    assert.equal(target.state, "running");
    // --json as another option's value is that value, and asks for no JSON.
    const r = await cli(["--get-state", "--pid", "--json"], { machine: sim });
    assert.deepEqual([r.code, r.out], [1, ""]);
  });

  test("malformed device maps are Invalid device remap, and say why on a terminal", async () => {
    const g = "GPU-00000000-0000-0000-0000-000000000001";
    const cases: [string, RegExp][] = [
      ["bad", /"bad" is not old=new/],
      [`${g}=`, /is not a GPU UUID/],
      [`${g}=${g}=${g}`, /is not old=new/],
      [`${g}=GPU-xyz`, /"GPU-xyz" is not a GPU UUID/],
      [`${g}=${g},${g}=${g}`, /mapped twice/],
      ["", /is not old=new/],
    ];
    for (const [map, why] of cases) {
      const r = await cli(["--action", "restore", "-p", 5, "-d", map], { isTerminal: true });
      assert.equal(r.code, 1, map);
      assert.equal(r.errLines[0], NVIDIA_MESSAGES.badDeviceMap, map);
      assert.match(r.errLines[1], why, map);
    }
  });
});

describe("our own checks of bad input", () => {
  const rows: [string, (string | number)[], string, RegExp?][] = [
    [
      "a pid beyond a C int (NVIDIA's line)",
      ["--get-state", "--pid", "2147483648"],
      NVIDIA_MESSAGES.badPid,
      /got 2147483648, more than the largest pid, 2147483647/,
    ],
    [
      "a huge pid",
      ["--get-state", "--pid", "99999999999"],
      NVIDIA_MESSAGES.badPid,
      /got 99999999999/,
    ],
    ["an empty pid in a list", ["--get-state", "--pid", "5,,6"], NVIDIA_MESSAGES.badPid, /got ""/],
    ["a pid given twice", ["--get-state", "-p", "5", "-p", "5"], "pid 5 is given twice"],
    [
      "a huge timeout",
      ["--action", "lock", "-p", 5, "-t", "4294967296"],
      NVIDIA_MESSAGES.badTimeout,
      /4294967295/,
    ],
    [
      "a timeout that is no number",
      ["--action", "lock", "-p", 5, "-t", "soon"],
      NVIDIA_MESSAGES.badTimeout,
      /"soon"/,
    ],
    [
      "--device-map with lock",
      ["--action", "lock", "-p", 5, "-d", "a=b"],
      NVIDIA_MESSAGES.badDeviceMap,
    ],
    ["--device-map with unlock", [
      "--action",
      "unlock",
      "-p",
      5,
      "-d",
      "GPU-00000000-0000-0000-0000-000000000001=GPU-00000000-0000-0000-0000-000000000001",
    ], NVIDIA_MESSAGES.remapNotRestore],
    [
      "--action of no step",
      ["--action", "foo", "--pid", 5],
      NVIDIA_MESSAGES.badAction,
      // The steps in the order they are taken: the line teaches the sequence.
      /^cuda-checkpoint: --action takes lock, checkpoint, restore, unlock; got "foo"$/,
    ],
    [
      "two operations",
      ["--get-state", "--toggle", "-p", 5],
      NVIDIA_MESSAGES.tooManyOperations,
      /--get-state and --toggle/,
    ],
    [
      "an unexpected argument",
      ["--get-state", "-p", 5, "now"],
      NVIDIA_MESSAGES.badOption,
      /unexpected argument "now"/,
    ],
    [
      "--all with --pid",
      ["--get-state", "--all", "-p", 5],
      "--all and --pid cannot be used together",
    ],
    [
      "--all-or-nothing with --get-state",
      ["--get-state", "-p", 5, "--all-or-nothing"],
      "--all-or-nothing is only valid for --action and --toggle operations",
    ],
    [
      "--memory-mib without spawn",
      ["--get-state", "-p", 5, "--memory-mib", 5],
      "--memory-mib is only valid with --simulate spawn",
    ],
    [
      "--launch-job",
      ["--launch-job", "./train"],
      "--launch-job (-j) is an option of NVIDIA's cuda-checkpoint from driver 590 (it starts a program with a job file); this cuda-checkpoint follows driver 580's, which lacks it",
    ],
    [
      "-j",
      ["-j", "./train"],
      "--launch-job (-j) is an option of NVIDIA's cuda-checkpoint from driver 590 (it starts a program with a job file); this cuda-checkpoint follows driver 580's, which lacks it",
    ],
  ];
  for (const [what, args, message, detail] of rows) {
    test(`${what}: one line, the help; exit 1`, async () => {
      const piped = await cli(args);
      assert.equal(piped.code, 1);
      assert.equal(piped.out, "");
      assert.deepEqual(piped.errLines, [message]);
      assert.ok(piped.err.endsWith(helpText()));
      if (detail) {
        const terminal = await cli(args, { isTerminal: true });
        assert.equal(terminal.errLines[0], message);
        assert.match(terminal.errLines[1], /^cuda-checkpoint: /);
        assert.match(terminal.errLines[1], detail);
      }
    });
  }

  // Our subcommands are not NVIDIA's: their bad input is their line and one line pointing at
  // --help, not the help's ninety lines that scroll the one that matters away.
  const ours: [string, (string | number)[], string][] = [
    ["spawn without --simulate", ["spawn"], "spawn is only valid with --simulate"],
    ["list with an operation", ["list", "--get-state"], "list takes no --get-state"],
    [
      "snapshot without --pid",
      ["snapshot", "/s"],
      "snapshot needs --pid PID[,PID...], the roots of its trees",
    ],
    ["inspect with a bad --pid", ["inspect", "/s", "--pid", "x"], "inspect takes no --pid"],
    [
      "snapshot of pid 0 (before: NVIDIA's 'must be a non-negative integer')",
      ["snapshot", "-p", "5,0", "/s"],
      "snapshot --pid 0: no process has pid 0; give the roots' pids",
    ],
    ["--dir twice", ["snapshot", "-p", 5, "--dir", "/a", "--dir", "/b"], "--dir is given twice"],
    ["--gpu twice", ["spawn", "--simulate", "--gpu", 0, "--gpu", 1], "--gpu is given twice"],
    [
      "a --deadline longer than a timer holds",
      ["snapshot", "-p", 5, "--dir", "/a", "--deadline", 2 ** 31],
      "--deadline must be a whole number of milliseconds from 0 to 2147483647",
    ],
    [
      "--tcp-established with list",
      ["list", "--tcp-established"],
      "--tcp-established is only valid with snapshot",
    ],
    [
      // No script of NVIDIA's runs a subcommand: its words, which blame the driver, are left out.
      "restore-snapshot with an unknown option",
      ["restore-snapshot", "/s", "--bogus"],
      'unknown option "--bogus"',
    ],
    ["snapshot with --dir and no value", ["snapshot", "-p", 5, "--dir"], "--dir needs a value"],
    ["list with --all=1", ["list", "--all=1"], "--all takes no value, got --all=1"],
  ];
  for (const [what, args, message] of ours) {
    test(`${what}: its line and one pointing at --help; exit 1`, async () => {
      const piped = await cli(args);
      assert.equal(piped.code, 1);
      assert.equal(piped.out, "");
      const sub = args[0];
      // getopt's line where it has one; the bad value, where one was read, piped or not.
      const lines = piped.err.split("\n").filter((l) => !l.startsWith("cuda-checkpoint: "));
      assert.deepEqual(lines, [message, `Run cuda-checkpoint --help for what ${sub} takes.`, ""]);
      assert.ok(piped.err.split("\n").length <= 5, piped.err);
    });
  }

  test("a mistyped subcommand is named unknown, with what it may have meant; the driver is not blamed", async () => {
    const hint = "Run cuda-checkpoint --help for its operations, subcommands and options.";
    for (
      const [args, line] of [
        [["lst"], 'unknown subcommand "lst" (did you mean list?)'],
        [["snapshto", "--pid", 5], 'unknown subcommand "snapshto" (did you mean snapshot?)'],
        // The start of one, more than two edits short of it.
        [["snap", "--pid", 5], 'unknown subcommand "snap" (did you mean snapshot?)'],
        [["toggle", "--pid", 5], 'unknown subcommand "toggle" (did you mean --toggle?)'],
        [["xyzzy"], 'unknown subcommand "xyzzy"'],
        [["--", "--get-state"], 'unknown subcommand "--get-state"'], // not "did you mean" itself
      ] as const
    ) {
      for (const isTerminal of [false, true]) {
        const r = await cli(args, { isTerminal });
        assert.equal(r.code, 1);
        assert.equal(r.out, "");
        assert.equal(r.err, `${line}\n${hint}\n`, args.join(" "));
      }
    }
    // After an operation of NVIDIA's, a stray word keeps NVIDIA's line (a script may depend on it).
    const stray = await cli(["--get-state", "-p", 5, "lst"]);
    assert.deepEqual(stray.errLines, [NVIDIA_MESSAGES.badOption]);
  });

  test("an unknown --option keeps NVIDIA's lines; on a terminal the next names what it may have meant", async () => {
    const piped = await cli(["--tgle", "--pid", 5]);
    const nvidia = ["cuda-checkpoint: unrecognized option '--tgle'", NVIDIA_MESSAGES.badOption];
    assert.deepEqual(piped.errLines, nvidia);
    const terminal = await cli(["--tgle", "--pid", 5], { isTerminal: true });
    assert.deepEqual(terminal.errLines, [
      ...nvidia,
      'cuda-checkpoint: unknown option "--tgle" (did you mean --toggle?)',
    ]);
    // One edit from a long option comes before a shorter one that begins it.
    const typo = await cli(["--all-or-nothng", "--toggle", "--all"], { isTerminal: true });
    assert.equal(
      typo.errLines.at(-1),
      'cuda-checkpoint: unknown option "--all-or-nothng" (did you mean --all-or-nothing?)',
    );
  });

  test("NVIDIA's operations keep NVIDIA's shape: the line, a blank line, the help", async () => {
    const r = await cli(["--get-state", "--pid", "x"]);
    assert.equal(r.err, `${NVIDIA_MESSAGES.badPid}\n\n${helpText()}`);
  });

  test("pid 0 goes to the driver, as NVIDIA's utility hands it over: the driver's line", async () => {
    const sim = new SimulatedMachine();
    for (
      const [args, line] of [
        [["--get-state", "--pid", "0"], "Error getting process state for process ID 0"],
        [["--action", "lock", "--pid", "0"], "Could not lock on process ID 0"],
        [["--toggle", "--pid", "0"], "Error toggling CUDA in process ID 0"],
      ] as const
    ) {
      const r = await cli([...args], { machine: sim });
      assert.equal(r.code, 1);
      assert.equal(r.out, "");
      assert.deepEqual(r.errLines, [
        `${line}: "OS call failed or operation not supported on this OS"`,
      ]);
    }
    assert.deepEqual(
      sim.driver.calls.map((c) => `${c.op} ${c.pid} ${c.code}`),
      ["getState 0 304", "lock 0 304", "getState 0 304"],
    );
    // Among other pids, its step failed as another's: "failed", in the text and in --json.
    const p = sim.spawn({ memoryMiB: 64 }).pid;
    const several = await cli(["--toggle", "-p", `0,${p},99999`], { machine: sim });
    assert.deepEqual(several.out.trim().split("\n"), [
      "0 failed",
      `${p} done checkpointed`,
      "99999 failed",
    ]);
    const json = await cli(["--toggle", "-p", "0", "--json"], { machine: sim });
    assert.equal(JSON.parse(json.out).status, "failed");
  });

  test("--device-map with lock is checked for its place once its value is good", async () => {
    const g = "GPU-00000000-0000-0000-0000-000000000001";
    const r = await cli(["--action", "lock", "-p", 5, "-d", `${g}=${g}`]);
    assert.deepEqual(r.errLines, [
      NVIDIA_MESSAGES.remapNotRestore,
    ]);
  });

  test("option forms: --pid=5, -p5, -p 5, and values that start with -", () => {
    for (
      const args of [["--get-state", "--pid=5"], ["--get-state", "-p5"], ["-p", "5", "--get-state"]]
    ) {
      assert.deepEqual(parseCommandLine(args), {
        kind: "operation",
        operation: "get-state",
        targets: [5],
        allOrNothing: false,
        job: false,
        json: false,
        events: false,
        simulate: false,
      });
    }
    assert.throws(() => parseCommandLine(["--get-state", "-p", "-5"]), UsageError);
  });

  test("the largest pid and the longest lock timeout are taken, one past them not", () => {
    const got = parseCommandLine(["--action", "lock", "-p", "2147483647", "-t", "4294967295"]);
    assert.ok(got.kind === "operation");
    assert.deepEqual([got.targets, got.timeoutMs], [[2147483647], 4294967295]);
    assert.throws(() => parseCommandLine(["--get-state", "-p", "2147483648"]), UsageError);
    const longer = ["--action", "lock", "-p", "5", "-t", "4294967296"];
    assert.throws(() => parseCommandLine(longer), UsageError);
  });

  test("--help wins over what follows it, not over an error before it", async () => {
    assert.equal((await cli(["--get-state", "--help", "--bogus"])).code, 0);
    assert.equal((await cli(["--bogus", "--help"])).code, 1);
  });

  test("no input reaches a shell: a pid list with shell syntax is a bad pid", async () => {
    const r = await cli(["--get-state", "--pid", "5;rm -rf /"]);
    assert.deepEqual(r.errLines, [NVIDIA_MESSAGES.badPid]);
  });
});

describe("several pids at once", () => {
  function three() {
    const sim = new SimulatedMachine({ gpus: 2 });
    const procs = [1024, 2048, 512].map((memoryMiB, i) =>
      sim.spawn({ memoryMiB, gpu: i % 2, command: `rank ${i}` })
    );
    return { sim, procs, pids: procs.map((p) => p.pid) };
  }

  test("--get-state of several pids: a line each, in the order given", async () => {
    const { sim, pids } = three();
    const r = await cli(["--get-state", "--pid", `${pids[2]},${pids[0]}`, "-p", pids[1]], {
      machine: sim,
    });
    assert.equal(r.code, 0);
    assert.equal(r.out, `${pids[2]} running\n${pids[0]} running\n${pids[1]} running\n`);
  });

  test("--get-restore-tid of several pids, one of them gone: exit 1, its line says error", async () => {
    const { sim, procs, pids } = three();
    procs[1].exit();
    const r = await cli(["--get-restore-tid", "--pid", pids.join(",")], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(
      r.out,
      `${pids[0]} ${procs[0].tid}\n${pids[1]} error\n${pids[2]} ${procs[2].tid}\n`,
    );
    assert.equal(r.err, `Could not find restore thread for process ID ${pids[1]}\n`);
  });

  test("--toggle of three processes runs them at once, in about the time of the largest", async () => {
    const { sim, pids } = three();
    const t0 = sim.now();
    const r = await cli(["--toggle", "--pid", pids.join(",")], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, pids.map((p) => `${p} done checkpointed\n`).join(""));
    const together = sim.now() - t0;
    const { sim: sim2, pids: pids2 } = three();
    const t1 = sim2.now();
    for (const pid of pids2) await cli(["--toggle", "--pid", pid], { machine: sim2 });
    assert.ok(together < (sim2.now() - t1) * 0.8, `${together} ms at once`);
  });

  test("--toggle of a mix suspends the running and resumes the checkpointed", async () => {
    const { sim, procs, pids } = three();
    await cli(["--toggle", "-p", pids[0]], { machine: sim });
    await cli(["--action", "lock", "-p", pids[2]], { machine: sim });
    const r = await cli(["--toggle", "-p", pids.join(",")], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(
      r.out,
      `${pids[0]} done running\n${pids[1]} done checkpointed\n${pids[2]} failed locked\n`,
    );
    assert.match(
      r.err,
      new RegExp(`^Error toggling CUDA in process ID ${pids[2]}: "the operation`),
    );
    assert.deepEqual(procs.map((p) => p.state), ["running", "checkpointed", "locked"]);
  });

  test("--toggle --all-or-nothing: a process that cannot toggle means nothing starts", async () => {
    const { sim, procs, pids } = three();
    await cli(["--action", "lock", "-p", pids[2]], { machine: sim });
    const r = await cli(["--toggle", "-p", pids.join(","), "--all-or-nothing"], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(
      r.out,
      `${pids[0]} not-started running\n${pids[1]} not-started running\n${pids[2]} failed locked\n`,
    );
    // The failure first, then those not started (hundreds of them would bury it).
    assert.match(r.errLines[0], new RegExp(`^Error toggling CUDA in process ID ${pids[2]}:`));
    assert.deepEqual(r.errLines.slice(1).map((l) => l.replace(/:.*/, "")), [
      `Process ID ${pids[0]} was not started`,
      `Process ID ${pids[1]} was not started`,
    ]);
    assert.match(r.errLines[1], /: another process failed, and --all-or-nothing/);
    assert.deepEqual(procs.map((p) => p.state), ["running", "running", "locked"]);
  });

  test("--toggle --all-or-nothing: when a resume fails, the ones being suspended come back", async () => {
    const { sim, procs, pids } = three();
    await cli(["--toggle", "-p", pids[0]], { machine: sim });
    procs[0].failNext("restore", { code: 2 });
    const r = await cli(["--toggle", "-p", pids.join(","), "--all-or-nothing", "--json"], {
      machine: sim,
    });
    assert.equal(r.code, 1);
    const lines = r.out.trim().split("\n").map((l) => JSON.parse(l));
    // The restore fails at once; the others are between their lock and checkpoint, are stopped
    // there, and unlocked again.
    assert.deepEqual(lines.map((l) => [l.pid, l.status, l.ok, l.state]), [
      [pids[0], "failed", false, "checkpointed"],
      [pids[1], "stopped", false, "running"],
      [pids[2], "stopped", false, "running"],
    ]);
    type Step = { step: string; ms: number };
    for (const line of lines.slice(1)) {
      assert.equal(line.rollback.ok, true);
      assert.deepEqual(line.rollback.steps.map((s: Step) => s.step), ["unlock"]);
      // Its time is that of every step it took, those undoing it too.
      const all = [...line.steps, ...line.rollback.steps].map((s: Step) => s.ms);
      assert.equal(line.ms, Math.round(all.reduce((a: number, b: number) => a + b) * 1000) / 1000);
      assert.ok(line.rollback.steps[0].ms > 0);
    }
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "running", "running"]);
    // In words: stopped, and what it had done undone.
    await cli(["--toggle", "-p", pids[0]], { machine: sim });
    procs[0].failNext("restore", { code: 2 });
    const text = await cli(["--toggle", "-p", pids.join(","), "--all-or-nothing"], {
      machine: sim,
    });
    assert.match(
      text.err,
      new RegExp(
        `Process ID ${pids[1]} was stopped before a step: another process failed, and ` +
          `--all-or-nothing \\(or --job\\) was given; what it had done was undone \\(unlock\\): ` +
          `it is running again`,
      ),
    );
  });

  test("--action lock of several: one already locked fails as it would alone; --json has every field", async () => {
    const { sim, pids } = three();
    await cli(["--action", "lock", "-p", pids[1]], { machine: sim });
    const alone = await cli(["--action", "lock", "-p", pids[1]], { machine: sim });
    const r = await cli(["--action", "lock", "-p", pids.join(","), "--json"], { machine: sim });
    assert.equal(r.code, 1, r.err);
    const [a, b] = r.out.trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(Object.keys(a), ["pid", "operation", "ok", "state", "status", "ms", "steps"]);
    assert.deepEqual(
      { ...a, ms: 0, steps: a.steps.map((s: object) => ({ ...s, ms: 0 })) },
      {
        pid: pids[0],
        operation: "lock",
        ok: true,
        state: "locked",
        status: "done",
        ms: 0,
        steps: [{ step: "lock", ms: 0, ok: true }],
      },
    );
    assert.deepEqual([b.status, b.ok, b.state], ["failed", false, "locked"]);
    assert.deepEqual(b.steps.map((s: { step: string; ok: boolean }) => [s.step, s.ok]), [
      ["lock", false],
    ]);
    assert.equal(b.error.code, 401);
    // The same line on stderr as the pid alone gets, NVIDIA's (beside --json's progress events).
    assert.equal(r.err, alone.err);
    assert.equal(
      alone.err,
      `Could not lock on process ID ${
        pids[1]
      }: "the operation cannot be performed in the present state"\n`,
    );
  });

  test("--action checkpoint --all-or-nothing: one failure rolls the others back", async () => {
    const { sim, procs, pids } = three();
    await cli(["--action", "lock", "-p", pids.join(",")], { machine: sim });
    procs[2].failNext("checkpoint", { code: 999 });
    const r = await cli(["--action", "checkpoint", "--all-or-nothing", "-p", pids.join(",")], {
      machine: sim,
      isTerminal: true,
    });
    assert.equal(r.code, 1);
    assert.equal(
      r.out,
      `${pids[0]} rolled-back locked\n${pids[1]} rolled-back locked\n${pids[2]} failed locked\n`,
    );
    assert.match(
      r.err,
      new RegExp(`Could not checkpoint on process ID ${pids[2]}: "unknown error"`),
    );
    assert.match(r.err, new RegExp(`process ID ${pids[0]} was brought back to locked`));
    assert.deepEqual(procs.map((p) => p.state), ["locked", "locked", "locked"]);
  });

  test("--all works on every CUDA process of the machine, not the others", async () => {
    const { sim, procs, pids } = three();
    sim.spawn({ cuda: false, command: "bash" });
    const r = await cli(["--toggle", "--all"], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, pids.map((p) => `${p} done checkpointed\n`).join(""));
    assert.deepEqual(procs.map((p) => p.state), ["checkpointed", "checkpointed", "checkpointed"]);
    const states = await cli(["--get-state", "--all"], { machine: sim });
    assert.equal(states.out, pids.map((p) => `${p} checkpointed\n`).join(""));
  });

  test("--all on a machine without CUDA processes prints nothing and exits 0", async () => {
    const sim = new SimulatedMachine();
    sim.spawn({ cuda: false });
    const r = await cli(["--toggle", "--all"], { machine: sim });
    assert.deepEqual([r.code, r.out, r.err], [0, "", ""]);
    const terminal = await cli(["--toggle", "--all"], { machine: sim, isTerminal: true });
    assert.equal(terminal.err, "cuda-checkpoint: no CUDA processes on this machine\n");
  });

  test("--all says on stderr how many processes could not be looked at", async () => {
    const { sim } = three();
    sim.spawn({ inspectable: false });
    const r = await cli(["--get-state", "--all"], { machine: sim });
    assert.equal(r.code, 0);
    assert.match(
      r.err,
      /^cuda-checkpoint: 1 process could not be looked at and may be a CUDA process \(pid \d+\): permission denied reading \/proc\/\d+\/maps/,
    );
  });

  test("the line about processes not looked at names their pids, the first eight", async () => {
    const { sim } = three();
    const hidden = Array.from({ length: 10 }, () => sim.spawn({ inspectable: false }).pid);
    const r = await cli(["--get-state", "--all"], { machine: sim });
    assert.equal(r.code, 0);
    assert.equal(
      r.err.split("\n")[0],
      `cuda-checkpoint: 10 processes could not be looked at and may be CUDA processes (pids ${
        hidden.slice(0, 8).join(", ")
      } and 2 more): pid ${hidden[0]}: permission denied reading /proc/${hidden[0]}/maps ` +
        "(simulated: spawned with inspectable: false)",
    );
  });

  test("the line gives three reasons at most: the first of each of the first three kinds", async () => {
    const { sim } = three();
    const reasons = ["no access", "gone mid-read", "maps unreadable", "a fourth kind"];
    const odd = reasons.map((notInspectable, i) => ({ pid: 90_001 + i, notInspectable }));
    const host = hostWith(sim.host, { scan: async () => [...await sim.host.scan(), ...odd] });
    const r = await cli(["--get-state", "--all"], { machine: machineWith(sim, { host }) });
    const [line] = r.err.split("\n");
    assert.ok(
      line.endsWith(
        "): pid 90001: no access; pid 90002: gone mid-read; pid 90003: maps unreadable",
      ),
      line,
    );
  });

  test("the line gives the first reason of each kind: ten hidden processes, and one stopped", async () => {
    const { sim } = three();
    const hidden = Array.from({ length: 10 }, () => sim.spawn({ inspectable: false }).pid);
    const stopped = sim.spawn().pid;
    await sim.engine.stop([stopped]);
    const r = await cli(["--get-state", "--all"], { machine: sim });
    assert.equal(r.code, 0);
    const [line] = r.err.split("\n");
    assert.ok(line.includes(`: pid ${hidden[0]}: permission denied reading /proc/${hidden[0]}/`));
    assert.ok(!line.includes(`pid ${hidden[1]}: `), "one reason of a kind");
    assert.ok(
      line.endsWith(
        `; pid ${stopped}: getState of process ${stopped} refused: it is stopped (SIGSTOP, ` +
          `Ctrl-Z, a debugger), and the driver answers no call on it, a lock's timeout included, ` +
          `till it runs again (kill -CONT ${stopped}). Nothing was done to it`,
      ),
      line,
    );
  });
});

describe("--json for one pid", () => {
  test("get-state, get-restore-tid and a step, each one object with stable names", async () => {
    const { sim, target, pid } = machine();
    const state = await cli(["--get-state", "-p", pid, "--json"], { machine: sim });
    assert.deepEqual(JSON.parse(state.out), {
      pid,
      operation: "get-state",
      ok: true,
      state: "running",
    });
    const tid = await cli(["--get-restore-tid", "-p", pid, "--json"], { machine: sim });
    assert.deepEqual(JSON.parse(tid.out), {
      pid,
      operation: "get-restore-tid",
      ok: true,
      restoreThreadId: target.tid,
    });
    const toggle = await cli(["--toggle", "-p", pid, "--json"], { machine: sim });
    const parsed = JSON.parse(toggle.out);
    const keys = ["pid", "operation", "ok", "state", "status", "ms", "steps"];
    assert.deepEqual(Object.keys(parsed), keys, "steps, as several pids' objects have");
    assert.deepEqual(parsed.steps.map((s: { step: string }) => s.step), ["lock", "checkpoint"]);
    assert.equal(parsed.state, "checkpointed");
    assert.ok(parsed.ms > 500 && parsed.ms < 1500, `${parsed.ms} ms of the simulator's time`);
  });

  test("a failed toggle, brought back: the error's detail says so; the text is NVIDIA's", async () => {
    const { sim, target, pid } = machine();
    target.failNext("checkpoint", { code: 999 });
    const one = await cli(["--toggle", "-p", pid, "--json"], { machine: sim });
    target.failNext("checkpoint", { code: 999 });
    const text = await cli(["--toggle", "-p", pid], { machine: sim });
    const o = JSON.parse(one.out);
    assert.deepEqual([one.code, o.ok, o.status, o.state], [1, false, "failed", "running"]);
    assert.match(o.error.detail, /^checkpoint of process \d+ failed: .*brought back to running$/);
    assert.deepEqual([text.code, text.out], [1, ""], "no stdout: NVIDIA's");
    assert.equal(text.err, `Error toggling CUDA in process ID ${pid}: "unknown error"\n`);
  });

  test("a command line refused where its --json object cannot be written: exit 1, never a rejection", async () => {
    // As stdout on a full disk throws ENOSPC: main() still resolves, its lines said on stderr.
    let err = "";
    const code = await main(["--get-state", "--pid", "abc", "--json"], {
      stdout: () => {
        throw new Error("ENOSPC: no space left on device, write");
      },
      stderr: (text) => err += text,
    });
    assert.equal(code, 1);
    assert.ok(err.startsWith("pid must be a non-negative integer\n\nUsage: "), err);
  });

  test("a command line refused: NVIDIA's lines on stderr, and with --json one object on stdout", async () => {
    const bad = await cli(["--get-state", "--pid", "abc", "--json"], { machine: machine().sim });
    assert.equal(bad.code, 1);
    assert.ok(bad.err.startsWith("pid must be a non-negative integer\n\nUsage: "), bad.err);
    assert.deepEqual(JSON.parse(bad.out), {
      ok: false,
      error: { message: "pid must be a non-negative integer", code: "USAGE", detail: 'got "abc"' },
    });
    const plain = await cli(["--get-state", "--pid", "abc"], { machine: machine().sim });
    assert.deepEqual(
      [plain.code, plain.out, plain.err],
      [1, "", bad.err],
      "without --json, as NVIDIA's",
    );
  });

  test("a failure: the NVIDIA line on stderr, and code, name and detail in the object", async () => {
    const { sim, pid } = machine();
    const r = await cli(["--action", "unlock", "-p", pid, "--json"], { machine: sim });
    assert.equal(r.code, 1);
    const parsed = JSON.parse(r.out);
    assert.equal(parsed.ok, false);
    assert.equal(parsed.state, "running");
    assert.equal(parsed.status, "failed");
    assert.deepEqual(
      { ...parsed.error, detail: undefined },
      {
        message:
          `Could not unlock on process ID ${pid}: "the operation cannot be performed in the present state"`,
        name: "CudaError",
        code: 401,
        codeName: "CUDA_ERROR_ILLEGAL_STATE",
        detail: undefined,
      },
    );
    assert.match(parsed.error.detail, /\(the process is running\)/);
    assert.equal(r.err, `${parsed.error.message}\n`);
  });
});

describe("list", () => {
  test("a table of the CUDA processes: pid, state, restore thread, GPU memory, command", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const a = sim.spawn({ memoryMiB: 1024, command: "python train.py --epochs 3" });
    const b = sim.spawn({ memoryMiB: 2048, gpu: [0, 1], command: "./infer" });
    sim.spawn({ cuda: false, command: "bash" });
    await cli(["--toggle", "-p", b.pid], { machine: sim });
    for (const word of ["list", "ps"]) {
      const r = await cli([word], { machine: sim });
      assert.equal(r.code, 0);
      assert.equal(
        r.out,
        [
          "PID   STATE         RESTORE_TID  GPU_MEMORY  COMMAND",
          `${a.pid}  running       ${a.tid}         1544 MiB    python train.py --epochs 3`,
          `${b.pid}  checkpointed  ${b.tid}         0 MiB       ./infer`,
          "",
        ].join("\n"),
      );
    }
  });

  test("GPU memory in whole MiB, where NVML's bytes make fractions of one", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const b = sim.spawn({ memoryMiB: 2048.7, gpu: [0, 1], command: "./infer" });
    const r = await cli(["list"], { machine: sim });
    const share = (await listCudaProcesses({ machine: sim })).processes[0].gpuMemory;
    assert.deepEqual(Object.values(share), [1544.35, 1544.35]);
    assert.match(r.out, new RegExp(`\n${b.pid} .* 3088 MiB \\(1544\\+1544\\)  \\./infer\n`));
  });

  test("--json: one object per process, memory by GPU UUID", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const b = sim.spawn({ memoryMiB: 2048, gpu: [0, 1], command: "./infer" });
    const r = await cli(["list", "--json"], { machine: sim });
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    assert.deepEqual(JSON.parse(r.out), {
      pid: b.pid,
      state: "running",
      restoreThreadId: b.tid,
      gpuMemoryMiB: { [g0]: 1544, [g1]: 1544 },
      command: "./infer",
    });
  });

  test("a host without GPU memory: unknown, and why on a terminal", async () => {
    const sim = new SimulatedMachine();
    const a = sim.spawn({ memoryMiB: 64 });
    const host = { kind: "test", scan: () => sim.host.scan() };
    const r = await cli(["list"], { machine: machineWith(sim, { host }), isTerminal: true });
    assert.match(r.out, new RegExp(`${a.pid}  running  ${a.tid}  +unknown`));
    assert.match(r.err, /GPU memory is unknown: the test host cannot tell GPU memory/);
  });
});

describe("on a terminal", () => {
  test("a failure gets a second line with everything known", async () => {
    const { sim, pid } = machine();
    const r = await cli(["--action", "unlock", "-p", pid], { machine: sim, isTerminal: true });
    assert.deepEqual(r.errLines, [
      `Could not unlock on process ID ${pid}: "the operation cannot be performed in the present state"`,
      `cuda-checkpoint: unlock of process ${pid} failed: CUDA_ERROR_ILLEGAL_STATE (401): the operation cannot be performed in the present state (the process is running)`,
    ]);
  });

  test("nothing of the kind when piped", async () => {
    await using sim = new SimulatedMachine({ clock: "real", speed: 2 });
    const target = sim.spawn({ memoryMiB: 1024 });
    const r = await cli(["--toggle", "-p", target.pid], { machine: sim });
    assert.deepEqual([r.code, r.out, r.err], [0, "", ""]);
  });
});

describe("the rest", () => {
  test("--version prints deno.json's version", async () => {
    const json = JSON.parse(readFileSync(new URL("../deno.json", import.meta.url), "utf8"));
    assert.equal(VERSION, json.version, "cli/version.ts follows deno.json");
    const r = await cli(["--version"]);
    assert.deepEqual([r.code, r.out, r.err], [
      0,
      `cuda-checkpoint (@ckpt/cuda) ${json.version}\n`,
      "",
    ]);
  });

  test("an unexpected error is one line, internal error, exit 1; never a stack trace", async () => {
    const { sim, pid } = machine();
    let err = "";
    const code = await main(["--get-state", "--pid", String(pid)], {
      machine: sim,
      stdout: () => {
        throw new Error("the pipe broke\n    at somewhere (file.ts:1:1)");
      },
      stderr: (t) => err += t,
    });
    assert.equal(code, 1);
    assert.equal(err, "cuda-checkpoint: internal error: the pipe broke\n");
  });

  test("a driver call that cannot be made is the operation's failure, with its reason", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn();
    const broken = forward(sim, {
      getState: () => Promise.reject(new Error("the worker thread ended")),
    });
    const r = await cli(["--get-state", "-p", target.pid], { machine: broken });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `Error getting process state for process ID ${target.pid}: "the worker thread ended"\n`,
    );
  });

  test("main() never closes a driver it was given", async () => {
    const { sim, pid } = machine();
    await cli(["--toggle", "-p", pid], { machine: sim });
    await cli(["--toggle", "-p", `${pid},${sim.spawn().pid}`], { machine: sim });
    assert.equal((await cli(["--get-state", "-p", pid], { machine: sim })).out, "running\n");
  });
});
