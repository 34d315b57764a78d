// The examples run as a user runs them, with this test's runtime, on the simulated driver (the
// native path runs on the fake libcuda in examples_native_test.ts), and their output is checked:
// the lines that teach (steps, states, times at the real driver's scale, memory, PASS).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { askCounter } from "../examples/counter.ts";
import { gpuMemoryFromChild } from "../examples/_support.ts";
import { FakeDir, noCompiler } from "./fixtures/fake.ts";
import { tempDirs } from "./support/temp_dirs.ts";
import { buildFakeNvml } from "./fixtures/fake_nvml.ts";
import {
  examplePath,
  expectedFillHash,
  ON_SIMULATOR,
  runExample,
  startExample,
} from "./examples_support.ts";

const EXAMPLES = [
  "self_checkpoint.ts",
  "counter.ts",
  "counter_criu.ts",
  "migrate.ts",
  "preempt.ts",
  "snapshot_all.ts",
  "snapshot.ts",
  "pytorch.ts",
];
// Each example run is cut at 60 s (runExample); a test makes one or a few, under a second each on
// a quiet machine: its own limit is above the cut, so a slow machine shows the example's output.
const SLOW = { timeout: 120_000 };
/** A new folder for a test (its TMPDIR, a --dir), removed after it. */
const base = tempDirs("ckpt-examples-test-");

/** A number printed with three decimals in a line that matches `pattern` (its first group). */
function msIn(out: string, pattern: RegExp): number {
  const found = pattern.exec(out);
  assert.ok(found, `no line matches ${pattern} in:\n${out}`);
  return Number(found[1]);
}

describe("examples: each opens with what it shows and how to run it, and takes --help", () => {
  for (const file of EXAMPLES) {
    test(file, SLOW, async () => {
      const source = readFileSync(examplePath(file), "utf8");
      assert.match(source, /^\/\*\*\n \* \S/, "it opens with a doc comment");
      // After `npm ci` the runtimes are under node_modules: npx runs them.
      assert.match(source.slice(0, 3000), new RegExp(`npx deno run -A examples/${file}`));
      assert.match(source.slice(0, 3000), new RegExp(`npx bun examples/${file}`));
      assert.doesNotMatch(source.slice(0, 3000), /^ \* {3}(sudo )?(deno|bun) /m, "no bare runtime");
      const help = await runExample(file, ["--help"]);
      assert.equal(help.code, 0, help.err);
      assert.equal(help.lines[0], `Usage: npx deno run -A examples/${file} [options]`);
      assert.equal(help.lines[1], `   or: npx bun examples/${file} [options]`);
      assert.match(help.out, /--driver native\|sim/);
      assert.match(help.out, /--virtual-time/);
      const bad = await runExample(file, ["--no-such-option"]);
      assert.equal(bad.code, 2);
      assert.match(bad.err, new RegExp(`^${file}: .*no-such-option.*\\nRun with --help`, "s"));
    });
  }
});

describe("self_checkpoint.ts", () => {
  test("without a GPU, its first lines say so, and it runs on the simulator", SLOW, async () => {
    const run = await runExample("self_checkpoint.ts", ["--virtual-time"]);
    assert.equal(run.code, 0, run.out + run.err);
    if (/^NVIDIA driver found/.test(run.out)) {
      assert.match(run.out, /^PASS: GPU buffer contents survived checkpoint\/restore\.$/m);
      return;
    }
    assert.match(run.lines[0], /^No usable NVIDIA driver here \(.+\)\.$/);
    assert.match(run.lines[1], /^Running on the SIMULATED driver instead: /);
    assert.match(run.out, /^PASS: GPU buffer contents survived checkpoint\/restore\.$/m);
  });

  test(
    "prints the sample's lesson: device, buffer, hash, each step and its state, PASS",
    SLOW,
    async () => {
      const run = await runExample("self_checkpoint.ts", ON_SIMULATOR);
      assert.equal(run.code, 0, run.out + run.err);
      const out = run.out;
      assert.match(run.lines[0], /^Running on the SIMULATED driver \(--driver sim\): /);
      assert.match(out, /^\[Process checkpoint example: @ckpt\/cuda on (Deno|Bun) [\d.]+\]$/m);
      assert.match(out, /^PID: +4000 \(a simulated process\)$/m);
      assert.match(out, /^Device: +NVIDIA H200 \(GPU 0, GPU-[0-9a-f-]{36}\)$/m);
      assert.match(out, /^Compute capability: sm_90$/m);
      assert.match(out, /^Buffer size: +16 MiB$/m);
      assert.match(out, /^Lock timeout: +5000 ms$/m);
      assert.match(out, /^Kernel output against the host's computation .*: identical$/m);
      const hash = expectedFillHash(16).slice(0, 16);
      assert.match(out, new RegExp(`^Buffer hash \\(before\\): ${hash}$`, "m"));
      assert.match(out, new RegExp(`^Buffer hash \\(after\\):  ${hash}$`, "m"));
      // The table, in the sample's shape: initial, then each step with the state after it.
      const table = out.slice(out.indexOf("step "), out.indexOf("total"));
      assert.deepEqual(
        table.split("\n").filter((l) => /^[a-z]/.test(l)).map((l) => l.split(/ {2,}/)),
        [
          ["step", "duration (ms)", "state after"],
          ["initial", "-", "running"],
          ["lock", table.match(/^lock +([\d.]+)/m)![1], "locked"],
          ["checkpoint", table.match(/^checkpoint +([\d.]+)/m)![1], "checkpointed"],
          ["restore", table.match(/^restore +([\d.]+)/m)![1], "locked"],
          ["unlock", table.match(/^unlock +([\d.]+)/m)![1], "running"],
        ],
      );
      // The simulated driver's times, at the real driver's scale (16 MiB: about 0.3 s and 0.2 s).
      const checkpoint = msIn(out, /^checkpoint +([\d.]+) +checkpointed$/m);
      const restore = msIn(out, /^restore +([\d.]+) +locked$/m);
      assert.ok(checkpoint > 150 && checkpoint < 600, `checkpoint ${checkpoint} ms`);
      assert.ok(restore > 100 && restore < 500, `restore ${restore} ms`);
      assert.ok(msIn(out, /^lock +([\d.]+) +locked$/m) < 20);
      const total = msIn(out, /^total +([\d.]+)$/m);
      assert.ok(Math.abs(total - (checkpoint + restore)) < 20, `total ${total}`);
      assert.match(
        out,
        /^GPU memory this process holds: (\d+) MiB before, none while checkpointed, \1 MiB after$/m,
      );
      assert.match(out, /^Restore thread id: \d+ /m);
      assert.match(out, /^PASS: GPU buffer contents survived checkpoint\/restore\.$/m);
    },
  );

  test("--json: one object with every figure", SLOW, async () => {
    const run = await runExample("self_checkpoint.ts", [
      ...ON_SIMULATOR,
      "--json",
      "--buffer-mib",
      "64",
      "--lock-timeout-ms",
      "1000",
    ]);
    assert.equal(run.code, 0, run.err);
    const result = JSON.parse(run.out);
    assert.equal(result.driver, "simulated");
    assert.equal(result.bufferMiB, 64);
    assert.equal(result.lockTimeoutMs, 1000);
    assert.equal(result.hashBefore, expectedFillHash(64));
    assert.equal(result.hashAfter, result.hashBefore);
    assert.deepEqual(result.steps.map((s: { state: string }) => s.state), [
      "locked",
      "checkpointed",
      "locked",
      "running",
    ]);
    assert.equal(result.initialState, "running");
    const [gpu] = Object.keys(result.gpuMemoryMiB.before);
    assert.equal(result.gpuMemoryMiB.before[gpu], 64 + 520);
    assert.deepEqual(result.gpuMemoryMiB.checkpointed, {});
    assert.deepEqual(result.gpuMemoryMiB.after, result.gpuMemoryMiB.before);
    assert.equal(typeof result.restoreThreadId, "number");
    assert.equal(result.pass, true);
    assert.match(run.err, /^Running on the SIMULATED driver/, "the note goes to stderr");
  });

  test("bad values are usage errors, a GPU the simulator lacks too", SLOW, async () => {
    const zero = await runExample("self_checkpoint.ts", [...ON_SIMULATOR, "--buffer-mib", "0"]);
    assert.equal(zero.code, 2);
    assert.match(zero.err, /--buffer-mib must be an integer from 1 to \d+, got "0"/);
    const gpu = await runExample("self_checkpoint.ts", [...ON_SIMULATOR, "--device", "3"]);
    assert.equal(gpu.code, 2);
    assert.match(gpu.err, /--device 3: the simulated machine has 1 GPU\n/);
    // A negative value is a value (parseArgs alone takes it for an option); a typo gets the name.
    const negative = await runExample("self_checkpoint.ts", [
      ...ON_SIMULATOR,
      "--buffer-mib",
      "-5",
    ]);
    assert.equal(negative.code, 2);
    assert.match(negative.err, /--buffer-mib must be an integer from 1 to \d+, got "-5"/);
    const typo = await runExample("self_checkpoint.ts", [...ON_SIMULATOR, "--bufer-mib", "5"]);
    assert.equal(typo.code, 2);
    assert.match(typo.err, /Unknown option '--bufer-mib' \(did you mean --buffer-mib\?\)/);
  });

  // 1 TiB, the most the option takes: more than a simulated H200 holds (a GPU's cuMemAlloc would
  // be out of memory), whatever this host has (the simulator keeps no buffer whole).
  test("a buffer its simulated GPU cannot hold is refused before it is written", SLOW, async () => {
    for (const file of ["self_checkpoint.ts", "migrate.ts"]) {
      const big = await runExample(file, [...ON_SIMULATOR, "--buffer-mib", String(1 << 20)]);
      assert.equal(big.code, 1, big.err);
      assert.match(
        big.err,
        /--buffer-mib 1048576: spawn: GPU 0 has 14\d{4} MiB free, too little for 1049\d{3} MiB more \(its 1048576 MiB of memory and \d+ MiB of CUDA context\)/,
      );
      assert.doesNotMatch(big.out, /PASS|Wrote/);
    }
  });
});

describe("counter.ts and counter_criu.ts", () => {
  test("answers 101, then 102, on a unix socket and on UDP", SLOW, async () => {
    const unix = join(base(), "counter.sock");
    const server = startExample("counter.ts", [...ON_SIMULATOR, "--unix", unix]);
    const udp = startExample("counter.ts", [...ON_SIMULATOR, "--port", "0"]);
    try {
      await server.waitFor(
        /^counter ready: pid \d+, unix .*counter\.sock, value 100 in GPU memory/m,
      );
      // Its simulated process is not one that `cuda-checkpoint --simulate --pid N` could reach,
      // and the counter says so rather than offer a pid that names another machine's process.
      const ready = (await server.waitFor(/^counter ready: .*$/m))[0];
      assert.doesNotMatch(ready, /simulated process \d+/);
      await server.waitFor(
        /^No other program can checkpoint this counter: its simulated machine lives inside this program, and cuda-checkpoint --simulate works on a machine of its own/m,
      );
      assert.equal(await askCounter({ unix }), 101);
      assert.equal(await askCounter({ unix }), 102);
      const asked = await runExample("counter.ts", ["--ask", "--unix", unix]);
      assert.equal(asked.out, "103\n");
      await server.waitFor(/^request: counter is now 103$/m);
      const port = Number((await udp.waitFor(/udp 127\.0\.0\.1:(\d+)/))[1]);
      assert.equal(await askCounter({ port }), 101);
      assert.equal(await askCounter({ port }), 102);
    } finally {
      await server.stop();
      await udp.stop();
    }
  });

  test("addresses no counter can have are refused at once, naming them (before: --ask --port 0 hung 5 s, then crashed)", async () => {
    const cases = [
      [
        "counter.ts",
        ["--ask", "--port", "0"],
        /--port must be an integer from 1 to 65535, got "0"/,
      ],
      ["counter.ts", ["--unix", ""], /--unix must be a socket's path, got ""/],
      ["counter_criu.ts", [...ON_SIMULATOR, "--unix", ""], /--unix must be a socket's path/],
      ["counter_criu.ts", [...ON_SIMULATOR, "--udp", "--unix", "/x.sock"], /--udp and --unix/],
    ] as const;
    for (const [file, args, said] of cases) {
      const r = await runExample(file, [...args]);
      assert.deepEqual([r.code, r.out], [2, ""], `${file} ${args.join(" ")}: ${r.err}`);
      assert.match(r.err, said);
      assert.doesNotMatch(r.err, /Uncaught|at .*\.ts:\d+/, "no stack trace");
    }
  });

  test(
    "counter_criu.ts whose counter cannot start keeps no empty folder behind",
    SLOW,
    async () => {
      const tmp = base();
      const args = [...ON_SIMULATOR, "--unix", "/nonexistent/c.sock"];
      const run = await runExample("counter_criu.ts", args, { TMPDIR: tmp });
      assert.equal(run.code, 1, run.out + run.err);
      assert.match(run.out, /^FAIL: .*(ENOENT|listen)/m); // Deno says ENOENT, Bun "Failed to listen"
      assert.doesNotMatch(run.out, /are in /, "it points at no folder");
      assert.deepEqual(readdirSync(tmp), [], "its empty folder is gone (before, kept)");
    },
  );

  test("--ask with no counter there fails at once and says what to start", SLOW, async () => {
    const dir = base();
    const unix = join(dir, "nobody.sock");
    const asked = await runExample("counter.ts", ["--ask", "--unix", unix]);
    assert.equal(asked.code, 1);
    assert.equal(asked.out, "");
    assert.match(asked.err, /^counter\.ts --ask: .*ENOENT/);
    assert.ok(
      asked.err.includes(
        `Is a counter running (npx deno run -A examples/counter.ts --unix ${unix})`,
      ),
      asked.err,
    );
  });

  test(
    "counter_criu.ts without a GPU runs the CUDA half and says why the CRIU half is skipped",
    SLOW,
    async () => {
      const dir = base();
      const run = await runExample("counter_criu.ts", [
        ...ON_SIMULATOR,
        "--unix",
        join(dir, "c.sock"),
      ]);
      assert.equal(run.code, 0, run.out + run.err);
      assert.match(run.lines[0], /^Running on the SIMULATED driver/);
      assert.match(run.out, /^ {2}an NVIDIA driver with the checkpoint API +NO /m);
      assert.match(run.out, /^ {2}criu +(yes|NO) /m);
      assert.match(
        run.out,
        /^The CRIU half is SKIPPED: it needs an NVIDIA driver with the checkpoint API and /m,
      );
      assert.match(run.out, /^2\. Asked it: 101$/m);
      assert.match(run.out, /^3\. GPU memory it holds: \d+ MiB$/m);
      assert.match(
        run.out,
        /^4\. Suspended its CUDA state \(lock \+ checkpoint\): \d+ ms, checkpointed$/m,
      );
      assert.match(run.out, /^5\. GPU memory it holds now: none$/m);
      assert.match(run.out, /^6\. criu dump: SKIPPED$/m);
      assert.match(run.out, /^7\. criu restore: SKIPPED$/m);
      assert.match(
        run.out,
        /^8\. Resumed its CUDA state \(restore \+ unlock\): \d+ ms, running; GPU memory \d+ MiB$/m,
      );
      assert.match(run.out, /^9\. Asked it again: 102$/m);
      assert.match(run.out, /^PASS \(CUDA half only\): the counter answered 101, then 102/m);
      assert.match(run.out, /^ {2}skipped because an NVIDIA driver with the checkpoint API: /m);
    },
  );
});

describe("migrate.ts, preempt.ts, snapshot_all.ts on the simulator", () => {
  test("migrate.ts moves the process round two GPUs, its memory intact", SLOW, async () => {
    const run = await runExample("migrate.ts", [...ON_SIMULATOR, "--buffer-mib", "64"]);
    assert.equal(run.code, 0, run.out + run.err);
    assert.match(run.out, /^GPUs the driver sees: 2$/m);
    assert.match(run.out, /device map 0 -> 1 -> 0 \(every GPU the driver sees is named\)/);
    const hash = expectedFillHash(64).slice(0, 16);
    assert.match(
      run.out,
      new RegExp(`^1 +GPU 0 -> GPU 1 +[\\d.]+ +[\\d.]+ +GPU 1 +GPU 1: 584 MiB +${hash}$`, "m"),
    );
    assert.match(
      run.out,
      new RegExp(`^2 +GPU 1 -> GPU 0 +[\\d.]+ +[\\d.]+ +GPU 0 +GPU 0: 584 MiB +${hash}$`, "m"),
    );
    assert.ok(msIn(run.out, /^1 +GPU 0 -> GPU 1 +([\d.]+)/m) > 200, "a 64 MiB checkpoint's time");
    assert.match(
      run.out,
      /^PASS: the process went round 2 GPUs and is back on GPU 0; its 64 MiB are intact\.$/m,
    );
  });

  test(
    "preempt.ts frees the low-priority job's memory for the high-priority job, then resumes it",
    SLOW,
    async () => {
      const run = await runExample("preempt.ts", ON_SIMULATOR);
      assert.equal(run.code, 0, run.out + run.err);
      const out = run.out;
      assert.match(out, /^Low-priority job: 2 process\(es\) of 4096 MiB \(pids \d+, \d+\)/m);
      assert.match(
        out,
        /^High-priority job arrives: it needs 16384 MiB; GPU 0 has \d+ MiB free: it does not fit\.$/m,
      );
      assert.equal(
        out.match(
          /train\.py --rank \d \(simulated\) +4616 MiB +[\d.]+ +[\d.]+ +done, checkpointed$/gm,
        )?.length,
        2,
      );
      assert.match(
        out,
        /^Suspended 2 processes in [\d.]+ ms \(all at once\); GPU memory freed: 9232 MiB\./m,
      );
      assert.ok(
        msIn(out, /^Suspended 2 processes in ([\d.]+) ms/m) > 1000,
        "2 x 4 GiB take seconds",
      );
      assert.match(out, /^High-priority job: 16384 MiB on GPU 0, a 1 s kernel, done/m);
      assert.equal(
        out.match(/train\.py --rank \d \(simulated\) +4616 MiB +[\d.]+ +[\d.]+ +done, running$/gm)
          ?.length,
        2,
      );
      assert.match(out, /^While suspended, they made no step\.$/m);
      const carried =
        /^Each process carried on from its step: (\d+) -> (\d+), (\d+) -> (\d+); GPU memory back as before\.$/m
          .exec(out);
      assert.ok(carried, out);
      assert.equal(Number(carried[2]), Number(carried[1]) + 1);
      assert.equal(Number(carried[4]), Number(carried[3]) + 1);
      assert.match(out, /^Their data \(the first 16 MiB of each buffer\): intact\.$/m);
      assert.match(out, /^PASS: the low-priority job was preempted/m);
      // The figures add up: the server, the two processes and what is free fill the GPU.
      const server = Number(/inference server \(pid \d+\) holding (\d+) MiB/.exec(out)?.[1]);
      const free = Number(/GPU 0 has (\d+) MiB free/.exec(out)?.[1]);
      assert.equal(server + 2 * 4616 + free, 143771, out);
      // A job larger than the GPU is refused before anything is suspended.
      const big = await runExample("preempt.ts", [...ON_SIMULATOR, "--high-mib", "200000"]);
      assert.equal(big.code, 2, big.out + big.err);
      assert.match(big.err, /--high-mib 200000: GPU 0 has 143771 MiB in all.*empty GPU/);
      assert.doesNotMatch(big.out, /Preempting/);
    },
  );

  test(
    "snapshot_all.ts suspends every CUDA process at once, rolls back, and resumes them",
    SLOW,
    async () => {
      const run = await runExample("snapshot_all.ts", [...ON_SIMULATOR, "--show-rollback"]);
      assert.equal(run.code, 0, run.out + run.err);
      const out = run.out;
      assert.match(
        out,
        /^CUDA processes on this machine: 4 \(of 6 processes; GPU memory from the simulator\)\.$/m,
      );
      // All or nothing brought the three back: the library says rolled-back.
      assert.equal(out.match(/ rolled-back, running$/gm)?.length, 3);
      assert.match(out, /failed, rolled back, running$/m);
      assert.match(out, /^ {2}checkpoint of process \d+ failed: CUDA_ERROR_OUT_OF_MEMORY \(2\)/m);
      assert.match(out, /^All 4 checkpointed in [\d.]+ ms; GPU memory released: 13352 MiB\.$/m);
      assert.match(out, /^\d+ +python train\.py --rank 0 +2568 MiB( +[\d.]+){4} +done, running$/m);
      assert.match(
        out,
        /^\d+ +vllm serve llama-3-8b --tp 2 +7184 MiB( +[\d.]+){4} +done, running$/m,
      );
      const all = msIn(out, /^runGroup\("suspend"\): ([\d.]+) ms for all 4 at once/m);
      const sum = msIn(out, /their steps add up to ([\d.]+) ms/);
      assert.ok(all > 1000 && all < sum, `all at once ${all} ms, one by one ${sum} ms`);
      assert.match(out, /^PASS: 4 processes suspended and resumed together/m);
    },
  );

  test(
    "snapshot_all.ts: a deadline the resume would outlast is the suspend's alone",
    SLOW,
    async () => {
      // 100 ms: the suspend's steps begin in time; a resume held to it was rolled back, which
      // suspended every process again, and the program failed.
      const run = await runExample("snapshot_all.ts", [...ON_SIMULATOR, "--deadline-ms", "100"]);
      assert.equal(run.code, 0, run.out + run.err);
      assert.doesNotMatch(run.out, /rolled back/);
      assert.match(run.out, /^PASS: 4 processes suspended and resumed together/m);
      const bad = await runExample("snapshot_all.ts", [
        ...ON_SIMULATOR,
        "--deadline-ms",
        "2147483648",
      ]);
      assert.equal(bad.code, 2);
      assert.match(
        bad.err,
        /--deadline-ms must be an integer from 1 to 2147483647, got "2147483648"/,
      );
    },
  );
});

describe("the GPU memory of a process, asked by a child process (self_checkpoint.ts)", () => {
  // On two H200s (driver 580) a process that had checkpointed itself waited in its own NVML call
  // for a restore that only it could make. So it asks through examples/_gpu_memory.ts, run by this
  // runtime as a child. These check that path: the child is started, loads the NVML it is told,
  // and its answer is read.
  const fakes = noCompiler ? undefined : new FakeDir();
  const nvml = fakes ? buildFakeNvml(fakes, "child-nvml") : undefined;
  after(() => fakes?.remove());
  const withNvml = async <T>(path: string, run: () => Promise<T>): Promise<T> => {
    const before = process.env.CKPT_LIBNVML_PATH;
    process.env.CKPT_LIBNVML_PATH = path;
    try {
      return await run();
    } finally {
      if (before === undefined) delete process.env.CKPT_LIBNVML_PATH;
      else process.env.CKPT_LIBNVML_PATH = before;
    }
  };

  test("through NVML: each pid asked has an entry (none on a GPU here)", {
    skip: noCompiler,
    timeout: 30_000,
  }, async () => {
    const answer = await withNvml(nvml!, () => gpuMemoryFromChild([process.pid, 1], 20_000));
    assert.ok(answer instanceof Map, `got ${String(answer)}`);
    assert.deepEqual([...answer.entries()], [[process.pid, {}], [1, {}]]);
  });

  test("without NVML: the child's reason, naming the library", { timeout: 30_000 }, async () => {
    const missing = join(tmpdir(), "no-such-dir-ckpt", "libnvidia-ml.so.1");
    const answer = await withNvml(missing, () => gpuMemoryFromChild([process.pid], 20_000));
    assert.equal(typeof answer, "string");
    assert.match(answer as string, /no-such-dir-ckpt\/libnvidia-ml\.so\.1/);
  });

  test("a child that takes too long is given up, saying so", { timeout: 30_000 }, async () => {
    const answer = await gpuMemoryFromChild([process.pid], 1);
    assert.equal(answer, "a child process asking NVML gave no answer in 1 ms");
  });
});

describe("snapshot.ts", () => {
  test("a snapshot that fails says why and leaves no folder of its own behind", SLOW, async () => {
    const tmp = base();
    writeFileSync(join(tmp, "a-file"), "");
    // A --dir inside a file: the snapshot cannot be made there.
    const run = await runExample(
      "snapshot.ts",
      [...ON_SIMULATOR, "--dir", join(tmp, "a-file", "snap")],
      { TMPDIR: tmp },
    );
    assert.equal(run.code, 1, run.out + run.err);
    assert.match(run.out, /^FAIL: .*a-file/m);
    assert.doesNotMatch(run.out, /are in /, "it points at no folder");
    assert.deepEqual(readdirSync(tmp), ["a-file"], "the folder it made is gone");
  });

  test(
    "without a GPU: the same steps on the simulator and its criu, memory intact, 101 then 102",
    SLOW,
    async () => {
      const dir = base();
      const snap = join(dir, "snap");
      const run = await runExample("snapshot.ts", [...ON_SIMULATOR, "--dir", snap, "--keep"]);
      assert.equal(run.code, 0, run.out + run.err);
      assert.match(run.lines[0], /^Running on the SIMULATED driver/);
      assert.match(run.out, /^2\. Asked it: 101$/m);
      assert.match(
        run.out,
        /^3\. Snapshot in .*snap: GPU memory \d+ MiB on GPU 0 \(NVIDIA H200\); suspend/m,
      );
      assert.match(run.out, /^4\. The counter is gone$/m);
      assert.match(run.out, /^5\. Restored: pid \d+, running, in [\d.]+ s$/m);
      assert.match(run.out, /^6\. Its GPU memory is the same, byte for byte$/m);
      assert.match(run.out, /^PASS: the counter answered 101, then 102 after a snapshot/m);
      // --keep: the snapshot is there, with its manifest.
      const manifest = JSON.parse(readFileSync(join(snap, "manifest.json"), "utf8"));
      assert.match(manifest.format, /^ckpt-cuda-snapshot\/\d+$/);
      // A --dir without --keep is kept too (the user's), and said so: before, in silence.
      const own = join(dir, "own");
      const again = await runExample("snapshot.ts", [...ON_SIMULATOR, "--dir", own]);
      assert.equal(again.code, 0, again.out + again.err);
      assert.ok(again.out.endsWith(`(the snapshot is in ${own}: a --dir is kept)\n`), again.out);
      assert.ok(existsSync(join(own, "manifest.json")));
    },
  );
});

describe("snapshot.ts and pytorch.ts interrupted", () => {
  test(
    "Ctrl-C or SIGTERM ends them and takes the folder they made with them (before, left behind)",
    SLOW,
    async () => {
      const cases = [["snapshot.ts", "SIGINT", 130], ["pytorch.ts", "SIGTERM", 143]] as const;
      for (const [file, signal, code] of cases) {
        const tmp = base();
        // The real clock, so that it is still under way when the signal comes.
        const run = startExample(file, ["--driver", "sim"], { TMPDIR: tmp });
        await run.waitFor(/^2\. /m);
        const exited = new Promise((end) => run.child.once("exit", (c, s) => end(c ?? s)));
        run.child.kill(signal);
        // Its exit status, or (Deno) the signal itself once the handler has run.
        assert.ok([code, signal].includes(await exited as never), run.output());
        assert.deepEqual(readdirSync(tmp), [], `${file}: nothing left in the temporary folder`);
      }
    },
  );
});

describe("pytorch.ts", () => {
  test(
    "without a GPU: a stand-in PyTorch process found among others, to disk and back, intact",
    SLOW,
    async () => {
      const dir = base();
      const snap = join(dir, "snap");
      const run = await runExample("pytorch.ts", [...ON_SIMULATOR, "--dir", snap, "--keep"]);
      assert.equal(run.code, 0, run.out + run.err);
      assert.match(run.lines[0], /^Running on the SIMULATED driver/);
      // Only the CUDA process whose command line names python or torch is listed.
      assert.match(run.out, /^1\. PyTorch processes here: 1 \(of 2 CUDA processes; /m);
      assert.match(run.out, /^ *4000 +running +\d+ MiB +- +python3 train\.py /m);
      assert.doesNotMatch(run.out, /render --frames/);
      assert.match(run.out, /^2\. Taking process 4000 to disk: python3 train\.py /m);
      assert.match(
        run.out,
        /^3\. Snapshot in .*snap: GPU memory \d+ MiB, .* of images \(the simulated criu writes only the bytes written to the GPU\); suspend/m,
      );
      assert.match(run.out, /^4\. Process 4000 is gone: its GPU memory is free$/m);
      assert.match(run.out, /^5\. Restored in [\d.]+ s: pid 4000, running, GPU memory \d+ MiB$/m);
      assert.match(run.out, /^6\. Its GPU memory is the same, byte for byte$/m);
      assert.match(run.out, /^PASS: PyTorch process 4000 went to disk and came back running/m);
      const manifest = JSON.parse(readFileSync(join(snap, "manifest.json"), "utf8"));
      assert.match(manifest.trees[0].processes[0].command, /^python3 train\.py/);
    },
  );

  test("--pid of a process that is not listed fails, saying so", SLOW, async () => {
    const run = await runExample("pytorch.ts", [...ON_SIMULATOR, "--pid", "4010"]);
    assert.equal(run.code, 1, run.out + run.err);
    assert.match(run.out, /^FAIL: --pid 4010 is not one of the PyTorch processes listed above$/m);
  });
});
