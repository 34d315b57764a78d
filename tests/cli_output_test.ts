// What `cuda-checkpoint` prints, whoever chose the text: a process's command line holding an escape
// sequence reaches no terminal raw, in `list`, `snapshot`, `inspect`, `restore-snapshot`, errors
// and `--json` (which stays valid JSON, meaning the same); the subcommands' errors name the
// subcommand and say a path's trouble in words; `inspect` runs with no libcuda, and the message for
// a missing libcuda advises `--simulate`. In-process through `main()` on the simulated machine,
// and as a program for what needs a process of its own. Runs under `deno test -A` and `bun test`.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

import { helpText } from "../cli/help.ts";
import { escapeControls } from "../cli/io.ts";
import { commandMessage } from "../cli/report.ts";
import { snapshot } from "../mod.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { cli, runProgram } from "./cli_support.ts";
import { runtime } from "./fixtures/fake.ts";
import { forward, hostWith, machineWith } from "./support/forward.ts";
import { processDir } from "./support/temp_dirs.ts";

/** A command line that clears the screen, homes the cursor and prints a fake PASS over a line. */
const EVIL = "train.py\x1b[2J\x1b[H\r\x1b[32mPASS\x1b[0m\x07 \u009b2J \u0090x\u009c \x7f\x1b";
/** Every character that must not reach a terminal: C0 but the newline, DEL, C1. */
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;
/** How EVIL's start is printed. */
const SHOWN = "train.py\\u001b[2J\\u001b[H\\u000d\\u001b[32mPASS";

const scratch = processDir("ckpt-cli-output-");
after(() => rmSync(scratch, { recursive: true, force: true }));
let dirs = 0;
const newDir = () => join(scratch, `d${dirs++}`);

/** Asserts that `text` holds no control character but newlines. */
function assertClean(text: string, what: string): void {
  const found = CONTROL.exec(text);
  assert.equal(found, null, `${what} holds U+${found?.[0].charCodeAt(0).toString(16)}: ${text}`);
}

describe("nothing a process chose reaches a terminal raw", () => {
  test("list: the command line's controls are escaped, the rest of the table as it was", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: EVIL });
    const r = await cli(["list"], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assertClean(r.out, "list");
    const lines = r.out.split("\n");
    assert.equal(lines.length, 3, "a header, a row, the end");
    assert.match(lines[1], new RegExp(`^${p.pid} +running .*MiB +${escape(SHOWN)}`));
    assert.ok(lines[1].endsWith("\\u0007 \\u009b2J \\u0090x\\u009c \\u007f\\u001b"), lines[1]);
  });

  test("a newline in a command line starts no line of its own: a forged row stays in its row", async () => {
    const sim = new SimulatedMachine();
    const forged = "train.py\n4242  checkpointed  80000 MiB  PASS";
    const p = sim.spawn({ memoryMiB: 256, command: forged });
    const r = await cli(["list"], { machine: sim });
    assert.equal(r.code, 0, r.err);
    const lines = r.out.split("\n");
    assert.equal(lines.length, 3, `a header, a row, the end: ${r.out}`);
    assert.ok(lines[1].startsWith(`${p.pid} `), lines[1]);
    assert.ok(lines[1].endsWith("train.py\\u000a4242  checkpointed  80000 MiB  PASS"), lines[1]);
    // In a snapshot's lines and inspect's too.
    const dir = newDir();
    const made = await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim });
    assert.equal(made.code, 0, made.err);
    assert.equal(made.out.split("\n").length, 3, made.out);
    const shown = await cli(["inspect", dir], { machine: sim });
    assert.ok(!shown.out.split("\n").some((l) => l.startsWith("4242")), shown.out);
    assert.ok(shown.out.includes("train.py\\u000a4242"), shown.out);
    // --json keeps it as it was.
    const json = await cli(["inspect", dir, "--json"], { machine: sim });
    assert.equal(JSON.parse(json.out).manifest.trees[0].processes[0].command, forged);
  });

  test("escapeControls: exactly every control but the newline, character by character", () => {
    // C0 but \n (the tab and vertical tab too: both move the cursor), DEL, C1; the bidi controls
    // and the separators; nothing else, U+00A0 and U+2028's neighbours included.
    const escaped = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
    const controls = [0x061c, 0x200e, 0x200f, 0x2028, 0x2029, 0x202a, 0x202b, 0x202c, 0x202d]
      .concat([0x202e, 0x2066, 0x2067, 0x2068, 0x2069]);
    for (let code = 0; code <= 0x206f; code++) {
      if (code > 0xa0 && !controls.includes(code) && !controls.includes(code - 1)) continue;
      const c = String.fromCharCode(code);
      const control = (code < 0x20 && code !== 0x0a) || (code >= 0x7f && code <= 0x9f) ||
        controls.includes(code);
      assert.equal(
        escapeControls(`a${c}b`),
        control ? `a${escaped(c)}b` : `a${c}b`,
        `U+${code.toString(16)}`,
      );
    }
  });

  test("bidi controls and line and paragraph separators are escaped too, in text and --json (issue 29, item 13e)", async () => {
    // U+202E shows what follows backwards (`gpj.exe` as `exe.jpg`); U+2028 and U+2029 break a
    // line where a terminal or a log viewer takes them as newlines. They printed raw.
    const sim = new SimulatedMachine();
    const sly = "train.py \u202egpj.exe\u202c \u2066x\u2069 \u200fy\u200e \u061cz a\u2028b\u2029c";
    const p = sim.spawn({ memoryMiB: 256, command: sly });
    const r = await cli(["list"], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assert.doesNotMatch(r.out, /[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/);
    assert.ok(
      r.out.includes(
        "train.py \\u202egpj.exe\\u202c \\u2066x\\u2069 \\u200fy\\u200e \\u061cz a\\u2028b\\u2029c",
      ),
      r.out,
    );
    const json = await cli(["list", "--json"], { machine: sim });
    assert.doesNotMatch(json.out, /[\u2028\u202e]/);
    assert.equal(JSON.parse(json.out).command, sly, "the JSON means the same");
    assert.equal(JSON.parse(json.out).pid, p.pid);
  });

  test("list --json: valid JSON with C1 and DEL escaped too, giving back the command line", async () => {
    const sim = new SimulatedMachine();
    sim.spawn({ command: EVIL });
    const r = await cli(["list", "--json"], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assertClean(r.out, "list --json");
    assert.equal(JSON.parse(r.out).command, EVIL);
  });

  test("snapshot, inspect and restore-snapshot: every line, text and --json", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: EVIL });
    const dir = newDir();
    // On a terminal: the phase line is the command line's own, and keeps its controls.
    const made = await cli(["snapshot", "--pid", p.pid, "--dir", dir], {
      machine: sim,
      isTerminal: true,
    });
    assert.equal(made.code, 0, made.err);
    assertClean(made.out, "snapshot");
    assert.ok(made.out.includes(SHOWN), made.out);
    assert.ok(made.err.includes("\r\x1b[2K"), "the progress line erases itself");
    for (const args of [["inspect", dir], ["inspect", dir, "--json"]]) {
      const shown = await cli(args, { machine: sim });
      assert.equal(shown.code, 0, shown.err);
      assertClean(shown.out, args.join(" "));
      if (args.includes("--json")) {
        const json = JSON.parse(shown.out);
        assert.equal(json.manifest.trees[0].processes[0].command, EVIL);
      } else assert.ok(shown.out.includes(SHOWN), shown.out);
    }
    const back = await cli(["restore-snapshot", "--dir", dir], { machine: sim });
    assert.equal(back.code, 0, back.err);
    assertClean(back.out, "restore-snapshot");
    assert.ok(back.out.includes(SHOWN), back.out);
  });

  test("an error that quotes a command line: escaped", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: EVIL });
    const dir = newDir();
    assert.equal((await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim })).code, 0);
    // Its pid still another process's session: the refusal names the command line.
    const leftOver = { id: p.pid, holder: 31337, as: "session" as const };
    const host = hostWith(sim.host, {
      pidsInUse: (ids) => Promise.resolve(ids.includes(p.pid) ? [leftOver] : []),
    });
    for (const json of [false, true]) {
      const r = await cli(["restore-snapshot", "--dir", dir, ...(json ? ["--json"] : [])], {
        machine: machineWith(sim, { host }),
      });
      assert.equal(r.code, 1);
      assert.ok(r.err.includes(`(${SHOWN}`), r.err);
      assertClean(r.err, "the error");
      assertClean(r.out, "the --json error");
      if (json) assert.ok(JSON.parse(r.out).error.message.includes(`(${EVIL}`));
    }
  });

  test("bad input that echoes an argument: getopt's line and ours, escaped", async () => {
    const r = await cli(["--get-state", "--pid", "5", "--\x1b[2Jx"]);
    assert.equal(r.code, 1);
    assertClean(r.err, "the usage error");
    assert.ok(r.err.startsWith("cuda-checkpoint: unrecognized option '--\\u001b[2Jx'\n"), r.err);
  });

  test("bad input with --json: the object on stdout escapes what JSON leaves raw (C1, DEL, bidi)", async () => {
    // JSON.stringify escapes C0 only: a CSI (U+009B) or a right-to-left override in the value
    // would reach a terminal through the usage object unless main() escapes its line too.
    const value = "5\u009b2J\x7f\u202eexe";
    const r = await cli(["--get-state", "--pid", value, "--json"]);
    assert.equal(r.code, 1);
    assertClean(r.out, "the usage object");
    assert.doesNotMatch(r.out, /[\u202a-\u202e]/);
    assert.deepEqual(JSON.parse(r.out).error, {
      message: "pid must be a non-negative integer",
      code: "USAGE",
      detail: `got ${JSON.stringify(value)}`,
    });
  });
});

describe("the subcommands, as a new user meets them", () => {
  test("errors name the subcommand, not the library's function", async () => {
    const empty = newDir();
    mkdirSync(empty);
    const sim = new SimulatedMachine();
    for (const sub of ["inspect", "restore-snapshot"]) {
      const r = await cli([sub, "--dir", empty], { machine: sim });
      assert.equal(r.code, 1);
      assert.match(r.err, new RegExp(`^cuda-checkpoint: ${sub} refused: .* is not a snapshot`));
      assert.doesNotMatch(r.err, /inspectSnapshot|restoreSnapshot/);
      const j = await cli([sub, "--dir", empty, "--json"], { machine: sim });
      assert.match(JSON.parse(j.out).error.message, new RegExp(`^${sub} refused: `));
    }
  });

  test("a directory inside a file: said in words, naming it, not the system's raw line", async () => {
    const file = newDir();
    writeFileSync(file, "");
    const inside = join(file, "snap");
    const r = await cli(["inspect", inside]);
    assert.equal(r.code, 1);
    assert.doesNotMatch(r.err, /ENOTDIR: not a directory, lstat/);
    assert.match(r.err, new RegExp(`^cuda-checkpoint: inspect refused: ${escape(inside)}`));
    assert.match(r.err, /: (.* is not a directory|a part of the path above it is a file)/);
  });

  test("a path that is a file: inspect, snapshot and recover say the store's sentence alike, the path once", async () => {
    const file = newDir();
    writeFileSync(file, "");
    const sim = new SimulatedMachine();
    const pid = String(sim.spawn({ memoryMiB: 256 }).pid);
    const said: string[] = [];
    for (const sub of ["inspect", "snapshot", "recover"]) {
      const args = sub === "snapshot" ? [sub, "--pid", pid, "--dir", file] : [sub, file];
      const r = await cli(args, { machine: sim });
      assert.equal(r.code, 1, `${sub}: ${r.err}`);
      const prefix = `cuda-checkpoint: ${sub} refused: `;
      assert.ok(r.err.startsWith(prefix), `${sub}: ${r.err}`);
      const sentence = r.err.slice(prefix.length).trim();
      assert.equal(sentence.split(file).length, 2, `${sub} names the path once: ${sentence}`);
      said.push(sentence);
    }
    assert.equal(new Set(said).size, 1, `one sentence for all three: ${said.join(" | ")}`);
  });

  test("a directory the system will not make: the path as given, not the store's /proc/<pid>/fd/ one; also for the library's snapshot()", async () => {
    // /proc/1 opens as a directory, and mkdir in it says ENOENT.
    const dir = "/proc/1/x";
    const sim = new SimulatedMachine();
    const pid = sim.spawn({ memoryMiB: 256 }).pid;
    const expected = `snapshot refused: ${dir} cannot be made: it does not exist (ENOENT)`;
    const r = await cli(["snapshot", "--pid", String(pid), "--dir", dir], { machine: sim });
    assert.equal(r.code, 1, r.err);
    assert.equal(r.err, `cuda-checkpoint: ${expected}\n`);
    const j = await cli(["snapshot", "--pid", String(pid), "--dir", dir, "--json"], {
      machine: sim,
    });
    assert.equal(JSON.parse(j.out).error.message, expected);
    await assert.rejects(snapshot([pid], dir, { machine: sim }), (err: Error) => {
      assert.equal(err.message, expected);
      return true;
    });
    assert.doesNotMatch(r.err + j.out, /\/proc\/\d+\/fd\//);
  });

  test("the system's raw line for a path becomes a sentence that names the path", () => {
    const raw = new Error("/s/x cannot be looked at: ENOTDIR: not a directory, lstat '/s/x'");
    assert.equal(
      commandMessage(raw),
      "/s/x cannot be looked at: /s/x: a part of the path above it is a file, not a directory " +
        "(ENOTDIR)",
    );
    const other = "EWEIRD: who knows, open '/s'";
    assert.equal(commandMessage(new Error(other)), other, "a code without words stays as it was");
  });

  test("the directory as DIR or --dir for all three; restore-snapshot DIR is not refused", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = newDir();
    const made = await cli(["snapshot", dir, "--pid", p.pid], { machine: sim });
    assert.equal(made.code, 0, made.err);
    assert.equal((await cli(["inspect", "--dir", dir], { machine: sim })).code, 0);
    const back = await cli(["restore-snapshot", dir, "--json"], { machine: sim });
    assert.equal(back.code, 0, back.err);
    assert.deepEqual(JSON.parse(back.out).pids, [p.pid]);
  });

  test("snapshot --timeout: the help says what it is, as the command takes it", () => {
    const option = helpText().split("\n\n").find((p) => p.startsWith("--timeout|-t <ms>"));
    assert.ok(option, "the help has --timeout");
    assert.match(option.replace(/\s+/g, " "), /for snapshot: each CUDA process's lock timeout/);
    assert.doesNotMatch(option, /lock only/);
  });

  test("--all-or-nothing --json: a process brought back says rolled-back, as its line does", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn(), sim.spawn({ memoryMiB: 4096 })];
    b.failNext("checkpoint", { code: 999 });
    const args = ["--toggle", "--pid", `${a.pid},${b.pid}`, "--all-or-nothing"];
    const text = await cli(args, { machine: sim });
    assert.equal(text.out.split("\n")[0], `${a.pid} rolled-back running`);
    b.failNext("checkpoint", { code: 999 });
    const json = await cli([...args, "--json"], { machine: sim });
    const first = JSON.parse(json.out.split("\n")[0]);
    assert.deepEqual([first.status, first.ok, first.rollback.ok], ["rolled-back", false, true]);
  });

  test("--json: a process whose rollback failed says rollback-failed, as its line does", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn(), sim.spawn({ memoryMiB: 4096 })];
    const args = ["--toggle", "--pid", `${a.pid},${b.pid}`, "--all-or-nothing"];
    for (const json of [[], ["--json"]]) {
      // b's checkpoint fails; a, checkpointed, cannot be brought back: its restore fails too.
      b.failNext("checkpoint", { code: 999 });
      a.failNext("restore", { code: 999 });
      const r = await cli([...args, ...json], { machine: sim, isTerminal: true });
      const first = r.out.split("\n")[0];
      if (json.length === 0) assert.equal(first, `${a.pid} rollback-failed checkpointed`);
      else assert.deepEqual(JSON.parse(first).status, "rollback-failed");
      // On a terminal, why it could not be brought back (as before the status had its word).
      assert.match(r.err, new RegExp(`process ID ${a.pid} could not be brought back: restore`));
      await cli(["--toggle", "--pid", `${a.pid}`], { machine: sim }); // running again
    }
  });
});

// ---- as a program: libcuda is this process's to load, or not ----

const MAIN = new URL("../cli/main.ts", import.meta.url).pathname;
const NO_LIBCUDA = { CKPT_LIBCUDA_PATH: join(scratch, "no-such-libcuda.so.1") };

/** Runs cli/main.ts as a program with this runtime. */
function program(args: (string | number)[], env: Record<string, string>) {
  const argv = runtime === "deno" ? ["run", "-A", MAIN, ...args] : [MAIN, ...args];
  return runProgram(process.execPath, argv, env);
}

describe("a failure of one pid, on a terminal", () => {
  test("an error NVIDIA's line already quotes whole is not said again below it", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    const gone = () => Promise.reject(new Error("the library went away"));
    const r = await cli(["--action", "lock", "-p", p.pid], {
      machine: forward(sim, { lock: gone }),
      isTerminal: true,
    });
    assert.equal(r.code, 1);
    assert.equal(r.err, `Could not lock on process ID ${p.pid}: "the library went away"\n`);
  });
});

describe(`as a script its runtime runs (${runtime} cli/main.ts)`, () => {
  test("getopt's line names the program cuda-checkpoint, not the runtime", async () => {
    // Run by the runtime's own path: npm's package installs Bun as bin/bun.exe, which the line
    // named ("…/bun.exe: unrecognized option") before that name was taken for a runtime's.
    const r = await program(["--get-state", "--pid", 5, "--bogus"], {});
    assert.equal(r.code, 1);
    assert.ok(r.err.startsWith("cuda-checkpoint: unrecognized option '--bogus'\n"), r.err);
  });
});

describe(`without libcuda, as a program (${runtime})`, () => {
  test("inspect reads a snapshot; list says there is no driver and advises --simulate", {
    timeout: 60_000,
  }, async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: "python serve.py" });
    const dir = newDir();
    assert.equal((await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim })).code, 0);
    // The same environment makes list fail for want of libcuda: inspect never opened it.
    const listed = await program(["list"], NO_LIBCUDA);
    assert.equal(listed.code, 1);
    assert.match(listed.err, /^cuda-checkpoint: Could not load libcuda/);
    assert.match(listed.err, /--simulate runs the same commands on a simulated machine/);
    assert.doesNotMatch(listed.err, /SimulatedMachine|--allow-ffi|libraryPath/); // API words
    assert.match(listed.err, /unset CKPT_LIBCUDA_PATH to search them/);
    // With --json, stdout says it too: a program reading it learns why, not nothing.
    const json = JSON.parse((await program(["list", "--json"], NO_LIBCUDA)).out);
    assert.deepEqual([json.ok, json.error.code], [false, "DRIVER_LOAD"]);
    assert.match(json.error.message, /^Could not load libcuda/);
    const shown = await program(["inspect", dir], NO_LIBCUDA);
    assert.equal(shown.code, 0, shown.err);
    assert.match(shown.out, new RegExp(`^ {2}${p.pid} running .*python serve\\.py$`, "m"));
  });
});

describe(`a reader that goes away, as a program (${runtime})`, () => {
  test(
    "stdout closed early (| head -1): the command goes on, stderr says every line, no error of its own",
    {
      timeout: 60_000,
    },
    async () => {
      const { spawn } = await import("node:child_process");
      const state = join(mkdtempSync(join(tmpdir(), "ckpt-epipe-")), "machine.json");
      const run = async (argv: string[], readFirst = false) => {
        const child = spawn(
          process.execPath,
          runtime === "deno" ? ["run", "-A", MAIN, ...argv] : [MAIN, ...argv],
          {
            env: { ...process.env, CKPT_SIM_STATE: state, NO_COLOR: "1" },
            stdio: ["ignore", "pipe", "pipe"],
          },
        );
        // As `head` does once it has its line: here at once, or (readFirst) after a first read.
        if (readFirst) child.stdout.once("data", () => child.stdout.destroy());
        else child.stdout.destroy();
        let err = "";
        child.stderr.on("data", (d) => err += d);
        return { code: await new Promise((done) => child.on("close", done)), err };
      };
      // Each of 3000 pids fails (exit 1): every one of their lines still reaches stderr.
      const pids = Array.from({ length: 3000 }, (_, i) => i + 1).join(",");
      const failing = await run(["--simulate", "--get-state", "--pid", pids]);
      assert.equal(failing.code, 1, failing.err.slice(-300));
      assert.doesNotMatch(failing.err, /internal error|EPIPE|Broken pipe/);
      const lines = failing.err.split("\n");
      assert.equal(lines.filter((l) => l.startsWith("Error getting process state")).length, 3000);
      // A line longer than a pipe holds (a process's 100 000-character command), its reader gone
      // after a first read: what was still to go is dropped, and no error of the runtime's shows.
      await run(["--simulate", "spawn", "--command", "x".repeat(100_000)]);
      for (let i = 0; i < 6; i++) { // the reader's timing varies: a few tries
        assert.deepEqual(await run(["--simulate", "list"], true), { code: 0, err: "" });
      }
      // A command that succeeds exits 0 though nothing read its output.
      assert.deepEqual(await run(["--help"]), { code: 0, err: "" });
      rmSync(join(state, ".."), { recursive: true, force: true });
    },
  );

  test("stdout on a full device (/dev/full): the failure said on stderr, exit 1, large or small", {
    timeout: 60_000,
  }, async () => {
    const { spawn } = await import("node:child_process");
    const { closeSync, openSync } = await import("node:fs");
    for (const argv of [["--help"], ["--version"]]) {
      const full = openSync("/dev/full", "w");
      const child = spawn(
        process.execPath,
        runtime === "deno" ? ["run", "-A", MAIN, ...argv] : [MAIN, ...argv],
        { env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", full, "pipe"] },
      );
      closeSync(full);
      let err = "";
      child.stderr!.on("data", (d) => err += d);
      const code = await new Promise((done) => child.on("close", done));
      // --help (about 10 kB) fails once the runtime writes it out, --version at once: both said.
      assert.equal(code, 1, `${argv[0]}: ${err}`);
      assert.match(err, /^cuda-checkpoint: internal error: .*ENOSPC|[Nn]o space left/m, argv[0]);
    }
  });
});

// In-process, where this machine has no libcuda to find (CI's): the search's own advice.
const here = await cli(["list"]);
const found = !(here.code === 1 && here.err.includes("Could not load libcuda"));

describe("without libcuda, in-process", () => {
  test("the message advises --simulate, not the library's simulator or Deno's flags", {
    skip: found ? "this machine has a libcuda" : false,
  }, () => {
    assert.match(here.err, /Is the NVIDIA driver installed/);
    assert.match(
      here.err,
      /Without a GPU, --simulate runs the same commands on a simulated machine/,
    );
    assert.doesNotMatch(here.err, /SimulatedMachine|--allow-ffi/);
  });
});

function escape(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
}
