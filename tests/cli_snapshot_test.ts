// `cuda-checkpoint snapshot`, `restore-snapshot` and `inspect` (cli/disk.ts), in-process
// through `main()`: what each takes and refuses, its lines and its --json, a failure as one line
// and exit 1; and the whole round trip on the simulated machine of a state file (--simulate),
// across separate runs, as a user would type it.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseCommandLine } from "../cli/args.ts";
import { UsageError } from "../cli/command.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { type DumpRequest, EngineError } from "../core/engine.ts";
import { cli } from "./cli_support.ts";
import { plantTrace } from "./support/trace.ts";
import { hostWith, machineWith } from "./support/forward.ts";
import { tempDirs } from "./support/temp_dirs.ts";

/** A new folder, removed after the test. */
const base = tempDirs("ckpt-cli-snapshot-");

describe("the command line of snapshots", () => {
  test("what each takes", () => {
    assert.deepEqual(
      parseCommandLine([
        "snapshot",
        "--pid",
        "4242,4300",
        "--dir",
        "/s",
        "--job",
        "--timeout",
        "0",
      ]),
      {
        kind: "snapshot",
        roots: [4242, 4300],
        dir: "/s",
        leaveRunning: false,
        job: true,
        lockTimeoutMs: 0,
        json: false,
        events: false,
        simulate: false,
      },
    );
    assert.deepEqual(parseCommandLine(["inspect", "/s", "--json"]), {
      kind: "inspect",
      dir: "/s",
      verify: false,
      json: true,
      events: false,
      simulate: false,
    });
    assert.equal(
      (parseCommandLine(["inspect", "--verify", "/s"]) as { verify: boolean }).verify,
      true,
    );
    // The one directory, given both ways alike, is one directory.
    assert.equal((parseCommandLine(["inspect", "/s", "--dir", "/s"]) as { dir: string }).dir, "/s");
    assert.deepEqual(parseCommandLine(["recover", "/s"]), {
      kind: "recover",
      dir: "/s",
      json: false,
      events: false,
      simulate: false,
    });
    for (
      const [args, why] of [
        [["restore-snapshot", "/s", "--verify"], /^restore-snapshot takes no --verify$/],
        [["--toggle", "--pid", "5", "--verify"], /^--verify is only valid with inspect$/],
        [["recover"], /^recover needs the snapshot's directory, as DIR or --dir DIR$/],
      ] as const
    ) {
      assert.throws(
        () => parseCommandLine(args),
        (e: Error) => e instanceof UsageError && why.test(e.message),
      );
    }
    const map = "GPU-11111111-1111-1111-1111-111111111111=GPU-22222222-2222-2222-2222-222222222222";
    const restore = parseCommandLine([
      "restore-snapshot",
      "--dir",
      "/s",
      "-d",
      map,
      "--deadline",
      "60000",
    ]);
    assert.equal(restore.kind, "restore-snapshot");
    assert.equal((restore as { deadlineMs: number }).deadlineMs, 60000);
  });

  test("what each refuses, in one line naming it", () => {
    const rows: [string[], RegExp][] = [
      [["snapshot", "--dir", "/s"], /^snapshot needs --pid/],
      [
        ["snapshot", "--pid", "5"],
        /^snapshot needs the snapshot's directory, as DIR or --dir DIR$/,
      ],
      [
        ["snapshot", "--pid", "5", "--dir", "/s", "--device-map", "a=b"],
        /^snapshot takes no --device-map: the GPUs to restore onto are given to restore-snapshot$/,
      ],
      [["inspect", "/s", "-d", "a=b"], /^inspect takes no --device-map/],
      [["restore-snapshot", "/s", "--timeout", "x"], /^restore-snapshot takes no --timeout$/],
      [["inspect", "/s", "--dir", "/t"], /^inspect takes one directory.*"\/t" and "\/s"$/],
      [["restore-snapshot", "/s", "/t"], /^restore-snapshot takes one directory/],
      [["restore-snapshot", "--dir", "/s", "--pid", "5"], /^restore-snapshot takes no --pid$/],
      [["restore-snapshot", "--dir", "/s", "--leave-running"], /takes no --leave-running/],
      [["inspect"], /^inspect needs the snapshot's directory/],
      [["snapshot", "--pid", "5", "--dir", "/s", "--toggle"], /^snapshot takes no --toggle$/],
      [["--toggle", "--pid", "5", "--dir", "/s"], /^--dir is only valid with snapshot/],
      [["--get-state", "--pid", "5,6", "--job"], /^--job is only valid for --action and --toggle/],
      [["list", "--job"], /^list takes no --job$/],
      // Of several strays, the one typed first is named (each order: the table's named one).
      [["list", "--job", "--all-or-nothing"], /^list takes no --job$/],
      [["list", "--all-or-nothing", "--job"], /^list takes no --all-or-nothing$/],
      [["--simulate", "list", "--parent", "3", "--memory-mib", "5"], /^--parent is only valid/],
      [["list", "--leave-running", "--dir", "/s"], /^--leave-running is only valid with snapshot/],
      // Ours, not NVIDIA's: its line for a stray argument is not kept.
      [["list", "4000"], /^unexpected argument "4000": list takes no argument$/],
      [["--simulate", "kill", "4000", "5000"], /^unexpected argument "5000": kill takes one pid$/],
      [["snapshot", "--pid", "5", "--dir", ""], /^--dir must name a directory/],
    ];
    for (const [args, pattern] of rows) {
      assert.throws(() => parseCommandLine(args), (e: unknown) => {
        assert.ok(e instanceof UsageError, `${args.join(" ")}: ${e}`);
        assert.match(e.message, pattern, args.join(" "));
        return true;
      });
    }
  });

  test("a round trip on a driver given to main(): lines, inspect, --json; --deadline 0 is none", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024, command: "python serve.py" });
    const hash = await p.memoryChunkedSha256();
    const dir = join(base(), "snap");
    const none = ["--deadline", "0"];
    const made = await cli(["snapshot", "--pid", p.pid, "--dir", dir, ...none], { machine: sim });
    assert.equal(made.code, 0, made.err);
    const lines = made.out.trim().split("\n");
    assert.match(lines[0], new RegExp(`^${p.pid} running \\d+ MiB python serve\\.py$`));
    assert.match(
      lines[1],
      /^snapshot in .*snap: 1 tree, 1 process \(1 with CUDA, \d+ MiB of GPU memory\), \d+ B of images \(the manifest's files; simulated criu counted 1\.66 GB as it wrote them\); suspend .*; the processes were ended$/,
    );
    assert.equal(sim.process(p.pid), undefined);

    const shown = await cli(["inspect", dir], { machine: sim });
    assert.equal(shown.code, 0, shown.err);
    assert.match(
      shown.out,
      /^snapshot .*snap \(ckpt-cuda-snapshot\/\d+\)\n {2}taken .* on simulated/,
    );
    assert.match(shown.out, /driver CUDA 13\.0 \(580\.159\.04\), simulated criu 4\.1\.1/);
    // Without a machine, on this one: the file system alone, no libcuda (CI has none) opened.
    const here = await cli(["inspect", "--dir", dir, "--json"]);
    assert.equal(here.code, 0, here.err);
    const read = JSON.parse(here.out);
    assert.equal(read.ok, true);
    assert.equal(read.manifest.trees[0].root, p.pid);
    // snapshot --json: the manifest's timings, and the command's whole time beside them.
    const again = sim.spawn({ memoryMiB: 1024 }), other = join(base(), "json");
    const taken = await cli(["snapshot", "-p", again.pid, other, "--json"], { machine: sim });
    const { timings, ms } = JSON.parse(taken.out);
    const { manifest } = JSON.parse((await cli(["inspect", other, "--json"])).out);
    assert.deepEqual(timings, manifest.timings);
    assert.ok(timings.suspendMs > 0 && timings.dumpMs > 0 && ms >= timings.totalMs, taken.out);

    const back = await cli(["restore-snapshot", "--dir", dir, "--json", ...none], { machine: sim });
    assert.equal(back.code, 0, back.err);
    const json = JSON.parse(back.out);
    assert.equal(json.ok, true);
    assert.deepEqual(json.pids, [p.pid]);
    assert.equal(json.processes[0].cuda.state, "running");
    assert.equal(await sim.process(p.pid)!.memoryChunkedSha256(), hash);
    // --leave-running, of a process suspended before: left as it was, and said so.
    assert.equal((await cli(["--toggle", "--pid", p.pid], { machine: sim })).code, 0);
    const kept = await cli(["snapshot", "-p", p.pid, join(base(), "kept"), "--leave-running"], {
      machine: sim,
    });
    assert.match(kept.out, /; the processes were left as they were\n$/, kept.err);
    assert.equal(sim.process(p.pid)?.state, "checkpointed");
  });

  test("restore-snapshot --device-map: each process's GPU memory where it is now, the closing line only the GPUs used", async () => {
    const sim = new SimulatedMachine({ gpus: 3 });
    const [g0, g1, g2] = sim.gpus.map((g) => g.uuid);
    const a = sim.spawn({ memoryMiB: 1024, gpu: 0 }), b = sim.spawn({ memoryMiB: 512, gpu: 1 });
    const dir = join(base(), "snap");
    const made = await cli(["snapshot", "--pid", `${a.pid},${b.pid}`, dir], { machine: sim });
    assert.equal(made.code, 0, made.err);
    // GPU 2 held nothing: the map moves it, but no process was restored onto GPU 0.
    const map = ["--device-map", `${g0}=${g1},${g1}=${g2},${g2}=${g0}`];
    const back = await cli(["restore-snapshot", dir, ...map, "--json"], { machine: sim });
    assert.equal(back.code, 0, back.err);
    const json = JSON.parse(back.out);
    const listed = await cli(["list", "--json"], { machine: sim });
    const now = listed.out.trim().split("\n").map((l) => JSON.parse(l).gpuMemoryMiB);
    assert.deepEqual(now.map((m) => Object.keys(m)), [[g1], [g2]], "moved as mapped");
    assert.deepEqual(json.processes.map((p: { cuda: object }) => p.cuda), [
      { state: "running", gpuMemoryMiB: now[0] },
      { state: "running", gpuMemoryMiB: now[1] },
    ]);
    // Text: the same restore, again, says onto the GPUs the processes are on now.
    for (const p of [a, b]) sim.process(p.pid)!.exit();
    const text = await cli(["restore-snapshot", dir, ...map], { machine: sim });
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, new RegExp(`, onto ${g1}, ${g2}, in [\\d.]+ s\n$`));
  });

  test("restore-snapshot --device-map --json: a process taken checkpointed was not moved, and is not said to be", async () => {
    const sim = new SimulatedMachine({ gpus: 2 });
    const [g0, g1] = sim.gpus.map((g) => g.uuid);
    const a = sim.spawn({ memoryMiB: 1024, gpu: 0 }), c = sim.spawn({ memoryMiB: 512, gpu: 1 });
    assert.equal((await cli(["--toggle", "--pid", c.pid], { machine: sim })).code, 0);
    const dir = join(base(), "snap");
    const made = await cli(["snapshot", "--pid", `${a.pid},${c.pid}`, dir], { machine: sim });
    assert.equal(made.code, 0, made.err);
    const map = ["--device-map", `${g0}=${g1},${g1}=${g0}`];
    const back = await cli(["restore-snapshot", dir, ...map, "--json"], { machine: sim });
    assert.equal(back.code, 0, back.err);
    const [ran, kept] = JSON.parse(back.out).processes.map((p: { cuda: object }) => p.cuda);
    assert.deepEqual(Object.keys(ran.gpuMemoryMiB), [g1], "running: moved as mapped");
    assert.equal(kept.state, "checkpointed");
    // Checkpointed, it holds no GPU; its memory goes back where it was taken when resumed.
    assert.deepEqual(Object.keys(kept.gpuMemoryMiB), [g1], "checkpointed: where it was taken");
  });

  test("the closing line: criu's count said only where it is not the manifest's files'", async () => {
    // An engine whose count, as it ends, is what its files hold (as a real criu's may be), or
    // within 1% of it (a file's header it does not count, say): the same figure, not said twice.
    for (const more of [0, 0.005]) {
      const sim = new SimulatedMachine();
      const p = sim.spawn({ memoryMiB: 256 });
      const engine = new Proxy(sim.engine, {
        get(target, key) {
          const value = Reflect.get(target, key);
          if (key !== "dump") return typeof value === "function" ? value.bind(target) : value;
          return async (r: DumpRequest) => {
            const dumped = await target.dump({ ...r, onBytes: undefined });
            const files = readdirSync(r.imagesDir).map((f) => statSync(join(r.imagesDir, f)).size);
            const sum = files.reduce((a, b) => a + b, 0);
            r.onBytes?.(sum + Math.round(sum * more));
            return dumped;
          };
        },
      });
      const dir = join(base(), "snap");
      const made = await cli(["snapshot", "--pid", p.pid, dir], {
        machine: machineWith(sim, { engine }),
      });
      assert.equal(made.code, 0, made.err);
      assert.match(
        made.out,
        / of images \(the manifest's files\); suspend /,
        `${more * 100}% more`,
      );
    }
  });

  test("a job's snapshot: inspect says it was taken as one job; restored with no map, no GPU is said", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256 });
    const dir = join(base(), "job");
    const made = await cli(["snapshot", "--pid", p.pid, dir, "--job"], { machine: sim });
    assert.equal(made.code, 0, made.err);
    const shown = await cli(["inspect", dir], { machine: sim });
    assert.equal(shown.code, 0, shown.err);
    assert.match(
      shown.out,
      /\n {2}1 tree, 1 process \(.*\), .* of images \(the manifest's files\), as one job\n/,
    );
    // Back where it was taken: nothing was moved, so the closing line names no GPU.
    const back = await cli(["restore-snapshot", dir], { machine: sim });
    assert.equal(back.code, 0, back.err);
    assert.match(
      back.out,
      /\nrestored from .*job: 1 tree, .* \(the manifest's files\), in [\d.]+ s\n$/,
    );
  });

  test("--leave-running: the closing line's time in all includes the resume, which the manifest's does not", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 4096 });
    const dir = join(base(), "snap");
    const made = await cli(["snapshot", "--pid", p.pid, dir, "--leave-running"], { machine: sim });
    assert.equal(made.code, 0, made.err);
    const inAll = Number(/, ([0-9.]+) s in all; /.exec(made.out)?.[1]) * 1000;
    const { totalMs } = JSON.parse((await cli(["inspect", dir, "--json"])).out).manifest.timings;
    // Resuming 4 GiB at the simulated driver's 5 GB/s takes most of a second.
    assert.ok(inAll > totalMs + 500, `in all ${inAll} ms, the manifest's total ${totalMs} ms`);
    assert.equal(sim.process(p.pid)!.state, "running");
  });

  test("a failure: one line, exit 1; --json says the code", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 1024 });
    await sim.driver.lock(p.pid, null);
    const dir = join(base(), "snap");
    const r = await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim });
    assert.equal(r.code, 1);
    assert.equal(r.out, "");
    assert.match(
      r.err,
      /^cuda-checkpoint: snapshot of process \d+ refused: its CUDA state is locked/,
    );
    assert.equal(r.err.trim().split("\n").length, 1);
    const j = await cli(["restore-snapshot", "--dir", dir, "--json"], { machine: sim });
    assert.equal(j.code, 1);
    const json = JSON.parse(j.out);
    assert.equal(json.ok, false);
    assert.equal(json.error.code, "SNAPSHOT");
    // criu's failure: its log, named as the error names it (a copy kept beside criu's work).
    const log = "/run/ckpt-cuda-work/dump-4242.log";
    const failing = new Proxy(sim.engine, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "dump") {
          return () => Promise.reject(new EngineError("criu: Error (x)", { log }));
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    await sim.driver.unlock(p.pid);
    const dumped = await cli(["snapshot", "--pid", p.pid, "--dir", dir, "--json"], {
      machine: machineWith(sim, { engine: failing }),
    });
    assert.equal(dumped.code, 1);
    const e = JSON.parse(dumped.out).error;
    assert.deepEqual([e.code, e.name, e.log], ["DUMP_FAILED", "SnapshotError", log]);
  });

  test("the machine given to main() is used whole: its host's pidsInUse refuses a pid still a session", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: "python serve.py" });
    const dir = join(base(), "snap");
    assert.equal((await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim })).code, 0);
    // A process forked by the tree and not yet reaped keeps its session: only pidsInUse says so.
    const leftOver = { id: p.pid, holder: 31337, as: "session" as const };
    const host = hostWith(sim.host, {
      pidsInUse: (ids) => Promise.resolve(ids.includes(p.pid) ? [leftOver] : []),
    });
    const r = await cli(["restore-snapshot", "--dir", dir], {
      machine: machineWith(sim, { host }),
    });
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      new RegExp(
        `^cuda-checkpoint: restore-snapshot of process ${p.pid} refused: pid ${p.pid} ` +
          `\\(python serve\\.py\\) must be free .* process 31337 still has it as its session`,
      ),
    );
    assert.equal(sim.process(p.pid), undefined, "nothing was made");
  });
});

describe("inspect --verify and recover", () => {
  test("inspect --verify names a changed image and exits 1; put back, it passes", async () => {
    const sim = new SimulatedMachine();
    const p = sim.spawn({ memoryMiB: 256, command: "python serve.py" });
    const dir = join(base(), "snap");
    assert.equal((await cli(["snapshot", "--pid", p.pid, "--dir", dir], { machine: sim })).code, 0);
    const image = join(dir, `tree-${p.pid}`, `process-${p.pid}.img`);
    const original = readFileSync(image, "utf8");
    writeFileSync(image, original.replace("python serve.py", "python evil.py!"));
    const quick = await cli(["inspect", dir]);
    assert.equal(quick.code, 0, "without --verify the sizes alone are checked");
    assert.match(quick.out, /--verify reads each and checks its digest/);
    const bad = await cli(["inspect", "--verify", dir, "--json"]);
    assert.equal(bad.code, 1);
    const json = JSON.parse(bad.out);
    assert.equal(json.error.code, "SNAPSHOT");
    assert.match(
      json.error.message,
      new RegExp(`^inspect refused: .*process-${p.pid}\.img is not the file the snapshot wrote`),
    );
    writeFileSync(image, original);
    const good = await cli(["inspect", "--verify", dir]);
    assert.equal(good.code, 0, good.err);
    assert.match(good.out, /every file read: each is the file the snapshot wrote/);
  });

  test("recover resumes what a snapshot killed outright left suspended, and says what it did", async () => {
    const sim = new SimulatedMachine();
    const [a, b] = [sim.spawn({ memoryMiB: 256 }), sim.spawn({ memoryMiB: 256 })];
    const dir = join(base(), "snap");
    mkdirSync(dir, { mode: 0o700 });
    // What a snapshot killed after a checkpoint leaves: a process checkpointed (another not yet,
    // running), its trace.
    await sim.driver.lock(a.pid, null);
    await sim.driver.checkpoint(a.pid);
    const both = [a, b].map((p) => ({ pid: p.pid, start: p.start }));
    plantTrace(dir, both, [a, b].map((p) => `tree-${p.pid}`));
    const refused = await cli(["restore-snapshot", dir], { machine: sim });
    assert.equal(refused.code, 1);
    assert.match(refused.err, /was interrupted.*`cuda-checkpoint recover .*snap` resumes/);
    const r = await cli(["recover", dir], { machine: sim });
    assert.equal(r.code, 0, r.err);
    assert.equal(
      r.out,
      `resumed (or found running): ${a.pid}, ${b.pid}\n` +
        `removed what the interrupted snapshot had written in ${dir}\n`,
    );
    assert.equal(sim.process(a.pid)!.state, "running");
    assert.deepEqual(readdirSync(dir), []);
    const again = await cli(["recover", dir, "--json"], { machine: sim });
    assert.equal(again.code, 1);
    assert.match(JSON.parse(again.out).error.message, /^recover refused: .*nothing to recover/);
  });
});

describe("--simulate: the round trip across runs", () => {
  test("spawn, snapshot (ended), restore-snapshot (back), get-state", async () => {
    const b = base();
    const env = { CKPT_SIM_STATE: join(b, "machine.json") };
    const sim = (...args: (string | number)[]) => cli(["--simulate", ...args], { env });
    const spawned = await sim("spawn", "--memory-mib", "2048");
    assert.equal(spawned.code, 0, spawned.err);
    const pid = Number(spawned.out.trim());
    const dir = join(b, "snap");
    const made = await sim("snapshot", "--pid", pid, "--dir", dir, "--json");
    assert.equal(made.code, 0, made.err);
    assert.equal(JSON.parse(made.out).processes[0].pid, pid);
    const gone = await sim("--get-state", "--pid", pid);
    assert.equal(gone.code, 1, "the process was ended");
    const back = await sim("restore-snapshot", "--dir", dir);
    assert.equal(back.code, 0, back.err);
    const state = await sim("--get-state", "--pid", pid);
    assert.equal(state.out, "running\n");
  });

  test("spawn --parent joins a tree: its snapshot takes both, its restore brings both back", async () => {
    const b = base();
    const env = { CKPT_SIM_STATE: join(b, "machine.json") };
    const sim = (...args: (string | number)[]) => cli(["--simulate", ...args], { env });
    const root = Number((await sim("spawn", "--memory-mib", "512")).out.trim());
    const child = await sim("spawn", "--memory-mib", "256", "--parent", root, "--json");
    assert.equal(child.code, 0, child.err);
    const pid = JSON.parse(child.out).pid;
    const dir = join(b, "snap");
    const made = await sim("snapshot", "--pid", root, "--dir", dir, "--json");
    assert.equal(made.code, 0, made.err);
    const taken = JSON.parse(made.out).processes.map((p: { pid: number }) => p.pid);
    assert.deepEqual(taken.sort(), [root, pid].sort(), "the child is in its root's snapshot");
    for (const p of [root, pid]) assert.equal((await sim("--get-state", "--pid", p)).code, 1);
    const back = await sim("restore-snapshot", "--dir", dir);
    assert.equal(back.code, 0, back.err);
    for (const p of [root, pid]) {
      assert.equal((await sim("--get-state", "--pid", p)).out, "running\n", `process ${p}`);
    }
    // A parent that is not a live simulated process, or not a pid: refused, naming the value.
    const none = await sim("spawn", "--parent", 4000000);
    assert.equal(none.code, 1);
    assert.match(none.err, /parent 4000000 is no live simulated process/);
    for (const given of ["root", "0"]) { // 0: no pid, where it was taken for "no parent"
      const bad = await sim("spawn", "--parent", given);
      assert.equal(bad.code, 1, given);
      const refused = `--parent must be the pid of a simulated process from 1 to \\d+.*"${given}"`;
      assert.match(bad.err, new RegExp(refused, "s"));
    }
    const elsewhere = await sim("--get-state", "--pid", root, "--parent", root);
    assert.match(elsewhere.err, /--parent is only valid with --simulate spawn/);
  });

  test("what a failure advises is a --simulate command too: copied, it acts on the simulated machine", async () => {
    const b = base();
    const env = { CKPT_SIM_STATE: join(b, "machine.json") };
    const sim = (...args: (string | number)[]) => cli(["--simulate", ...args], { env });
    const pid = Number((await sim("spawn", "--memory-mib", "4096")).out.trim());
    const dir = join(b, "snap");
    plantTrace(dir, [{ pid }], [`tree-${pid}`]);
    const refused = await sim("restore-snapshot", "--dir", dir);
    assert.match(
      refused.err,
      /was interrupted.*`cuda-checkpoint --simulate recover .*snap` resumes/,
    );
    const copied = /`(cuda-checkpoint [^`]*)`/.exec(refused.err)![1].split(" ").slice(1);
    assert.equal((await cli(copied, { env })).code, 0, "the advice, run as given");
    // A GPU restore of two trees that fails (no room, the check skipped): resume, or end them.
    const other = Number((await sim("spawn", "--memory-mib", "4096")).out.trim());
    await sim("snapshot", "--pid", `${pid},${other}`, "--dir", join(b, "again"));
    await sim("spawn", "--memory-mib", "141000");
    const failed = await sim("restore-snapshot", "--dir", join(b, "again"), "--no-room-check");
    const toggle = `cuda-checkpoint --simulate --toggle --pid ${pid},${other}`;
    assert.match(failed.err, new RegExp(`\\(${toggle}\\), or end them \\((.*)\\)$`, "m"));
    const ends = /or end them \((.*)\)$/m.exec(failed.err)![1].split("; ");
    for (const end of ends) {
      assert.equal((await cli(end.split(" ").slice(1), { env })).code, 0, end);
    }
    assert.deepEqual(ends.map((e) => Number(e.split(" ").at(-1))), [pid, other]);
  });
});
