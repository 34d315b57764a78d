// The simulator's wall time against the bytes a program wrote (issue 32, section 2): how long
// `examples/self_checkpoint.ts --virtual-time` takes with a 1 GiB buffer against a 16 MiB one, on
// Deno and on Bun, and, without `--virtual-time` (the real clock), how close the step times it
// prints are to the model's (the times the virtual clock prints, which are the model's exactly).
// Every round runs each runtime in turn (round r starts with runtime r mod 2) and, within a
// runtime, each size in turn; each run is a fresh process, timed from spawn to exit. CPU only.
//
//   deno run -A bench/sim_speed.ts [--rounds 3] [--big-mib 1024] [--small-mib 16]
//     [--runtimes deno,bun] [--no-real] [--root DIR] [--baseline DIR] [--label NAME] [--out DIR]
//   bun bench/sim_speed.ts ...
//
// --root runs the examples of another checkout (the code before a change: `git archive BASE |
// tar -x -C DIR`); --baseline runs those of another checkout too, taking turns with --root's in
// every round (the examples' wall times only, in a table of their own); --label names the report: bench/reports/sim-speed[-LABEL]-<runtime>-<host>.md
// and .json. Beside the runs: in a child, the wall time of one SimulatedMachine's suspend and resume
// of a process after writing --big-mib (and --small-mib) MiB of its memory, virtual clock, then the
// mean of 100 more (the code warm: the simulator's own cost, which the examples' wall time hides
// under the runtime's start and the example's own hashing); also of --small-mib MiB beside
// --big-mib MiB held in 1 MiB buffers outside the simulator (a runtime's collector pays for every
// buffer held, whoever holds it); and the machine's own cost of the bytes: a new buffer of --big-mib
// MiB filled once, then again.

import { spawn } from "node:child_process";
import process from "node:process";
import { resolve } from "node:path";
import { parseArgs } from "node:util";

import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    rounds: { type: "string", default: "3" },
    "big-mib": { type: "string", default: "1024" },
    "small-mib": { type: "string", default: "16" },
    runtimes: { type: "string", default: "deno,bun" },
    "no-real": { type: "boolean", default: false },
    root: { type: "string" },
    baseline: { type: "string" },
    label: { type: "string" },
    out: { type: "string" },
  },
});
const [rounds] = integers(values.rounds, "--rounds");
const [bigMiB] = integers(values["big-mib"], "--big-mib");
const [smallMiB] = integers(values["small-mib"], "--small-mib");
const runtimes = values.runtimes.split(",");
if (rounds < 1 || smallMiB < 1 || bigMiB < 1 || runtimes.some((r) => r !== "deno" && r !== "bun")) {
  console.error("sim_speed.ts: --rounds and sizes from 1; --runtimes a list of deno and bun");
  process.exit(2);
}
const ROOT = resolve(values.root ?? new URL("../", import.meta.url).pathname);
/** The checkouts whose examples run: ROOT ("this"), and the baseline where one is given. */
const CHECKOUTS: [string, string][] = [["this", ROOT]];
if (values.baseline) CHECKOUTS.push(["baseline", resolve(values.baseline)]);
const STEPS = ["lock", "checkpoint", "restore", "unlock"] as const;
const started = new Date();

/** How a run's clock went: virtual (the model's times, no waiting) or real. */
type ClockKind = "virtual" | "real";

interface Run {
  round: number;
  /** Which checkout's example ran: "this" or "baseline". */
  checkout: string;
  runtime: string;
  mib: number;
  clock: ClockKind;
  /** Spawn to exit, in ms. */
  wallMs: number;
  exit: number | null;
  pass: boolean;
  /** The step times the example printed, in ms, by step. */
  steps: Record<string, number>;
}

/** The argv of `runtime` running `script` (a path in ROOT, or code with `-e`) with `args`. */
function argvOf(runtime: string, script: string[], args: string[]): string[] {
  return runtime === "deno"
    ? ["deno", "run", "-A", ...script, ...args]
    : ["bun", ...script, ...args];
}

/** Runs a child in `cwd`; resolves to its time, exit status and stdout. */
function timed(
  argv: string[],
  cwd = ROOT,
): Promise<{ ms: number; exit: number | null; out: string }> {
  const t0 = performance.now();
  return new Promise((done) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd,
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "", err = "";
    child.stdout!.on("data", (d) => out += d);
    child.stderr!.on("data", (d) => err += d);
    child.on("close", (exit) => {
      if (exit !== 0) console.error(`${argv.join(" ")} exited ${exit}:\n${err}`);
      done({ ms: performance.now() - t0, exit, out });
    });
  });
}

/** One run of self_checkpoint.ts with `--json`, of checkout `[checkout, root]`. */
async function example(
  [checkout, root]: [string, string],
  runtime: string,
  mib: number,
  clock: ClockKind,
  round: number,
) {
  const args = ["--driver", "sim", "--json", "--buffer-mib", String(mib)];
  const r = await timed(
    argvOf(runtime, ["examples/self_checkpoint.ts"], [
      ...args,
      ...(clock === "virtual" ? ["--virtual-time"] : []),
    ]),
    root,
  );
  let pass = false, steps: Record<string, number> = {};
  try {
    const json = JSON.parse(r.out);
    pass = json.pass === true;
    steps = Object.fromEntries(json.steps.map((s: { step: string; ms: number }) => [s.step, s.ms]));
  } catch { /* not JSON: the run failed, and says so on stderr */ }
  const run: Run = {
    round,
    checkout,
    runtime,
    mib,
    clock,
    wallMs: r.ms,
    exit: r.exit,
    pass,
    steps,
  };
  runs.push(run);
  console.log(
    `round ${round} ${checkout} ${runtime} ${mib} MiB ${clock}: ${fmt(r.ms / 1000, 2)} s, ${
      pass ? "PASS" : "FAIL"
    }, ${STEPS.map((s) => `${s} ${fmt(steps[s], 1)}`).join(", ")}`,
  );
}

/**
 * Suspend and resume, wall ms, of a process of `size` MiB after writing all of it (a child), with
 * `held` MiB more in 1 MiB buffers of the child's own, outside the simulator: the first cycle, then
 * the mean of WARM_CYCLES more (the code warm: the simulator's own cost).
 */
async function suspendCost(runtime: string, size: number, held: number, round: number) {
  const url = (path: string) => JSON.stringify(new URL(path, `file://${ROOT}/`).href);
  const code = `const { SimulatedMachine } = await import(${url("mock/mod.ts")});
    const { CudaProcess } = await import(${url("mod.ts")});
    const held = Array.from({ length: ${held} }, (_, i) => new Uint8Array(1 << 20).fill(i));
    const sim = new SimulatedMachine(), bytes = ${mib(size)};
    const t = sim.spawn({ memoryMiB: ${size} }), piece = new Uint8Array(64 << 20).fill(7);
    for (let at = 0; at < bytes; at += piece.length) {
      await t.write(at, piece.subarray(0, Math.min(piece.length, bytes - at)));
    }
    const p = new CudaProcess(t.pid, { machine: sim });
    let t0 = performance.now(); await p.suspend(); const suspend = performance.now() - t0;
    t0 = performance.now(); await p.resume(); const resume = performance.now() - t0;
    t0 = performance.now();
    for (let i = 0; i < ${WARM_CYCLES}; i++) { await p.suspend(); await p.resume(); }
    const warm = (performance.now() - t0) / ${WARM_CYCLES};
    console.log(JSON.stringify({ suspend, resume, warm, held: held.length }));`;
  const argv = runtime === "deno" ? ["deno", "eval", code] : ["bun", "-e", code];
  const r = await timed(argv);
  let got = { suspend: NaN, resume: NaN, warm: NaN };
  try {
    got = JSON.parse(r.out);
  } catch { /* the child failed, and said so on stderr */ }
  const { suspend: suspendMs, resume: resumeMs, warm: warmMs } = got;
  suspends.push({ round, runtime, mib: size, held, suspendMs, resumeMs, warmMs });
  console.log(
    `round ${round} ${runtime} ${size} MiB written, ${held} MiB held elsewhere: suspend ${
      fmt(suspendMs, 1)
    } ms, resume ${fmt(resumeMs, 1)} ms, then ${fmt(warmMs, 3)} ms a cycle (wall, in process)`,
  );
}

/** The machine's own cost of `mib` MiB: a new buffer filled once (fresh memory), then again. */
async function memoryCost(runtime: string): Promise<{ fresh: number; touched: number }> {
  const code = `const b = new Uint8Array(${mib(bigMiB)}); let t = performance.now(); b.fill(1); ` +
    `const f = performance.now() - t; t = performance.now(); b.fill(2); ` +
    `console.log(JSON.stringify({ fresh: f, touched: performance.now() - t }));`;
  const argv = runtime === "deno" ? ["deno", "eval", code] : ["bun", "-e", code];
  return JSON.parse((await timed(argv)).out);
}

function mib(n: number): number {
  return n * 2 ** 20;
}

const runs: Run[] = [];
const suspends: {
  round: number;
  runtime: string;
  mib: number;
  /** MiB the child held besides, outside the simulator. */
  held: number;
  suspendMs: number;
  resumeMs: number;
  /** Suspend + resume, the mean of WARM_CYCLES after the first. */
  warmMs: number;
}[] = [];
/** How many suspend + resume cycles after the first a child times. */
const WARM_CYCLES = 100;
/** What the children measure: MiB written, MiB held elsewhere. */
const COSTS = [[bigMiB, 0], [smallMiB, 0], [smallMiB, bigMiB]] as const;
const sizes = [bigMiB, smallMiB];
const clocks: ClockKind[] = values["no-real"] ? ["virtual"] : ["virtual", "real"];
const memory: Record<string, { fresh: number; touched: number }> = {};
for (let round = 0; round < rounds; round++) {
  for (let k = 0; k < runtimes.length; k++) {
    const runtime = runtimes[(round + k) % runtimes.length];
    for (const clock of clocks) {
      for (let s = 0; s < sizes.length; s++) {
        for (let c = 0; c < CHECKOUTS.length; c++) {
          const checkout = CHECKOUTS[(round + s + c) % CHECKOUTS.length];
          await example(checkout, runtime, sizes[(round + s) % sizes.length], clock, round);
        }
      }
    }
    for (const [size, held] of COSTS) await suspendCost(runtime, size, held, round);
    if (round === 0) memory[runtime] = await memoryCost(runtime);
  }
}

const of = (rt: string, size: number, clock: ClockKind, checkout = "this") =>
  runs.filter((r) =>
    r.checkout === checkout && r.runtime === rt && r.mib === size && r.clock === clock
  );
const wall = (rt: string, size: number, clock: ClockKind, checkout = "this") =>
  median(of(rt, size, clock, checkout).map((r) => r.wallMs));
/** The model's time of a step: what the virtual clock printed (the same in every run). */
const model = (rt: string, size: number, step: string) => of(rt, size, "virtual")[0]?.steps[step];
/** The real clock's median time of a step over the model's. */
const realRatio = (rt: string, size: number, step: string) =>
  median(of(rt, size, "real").map((r) => r.steps[step])) / model(rt, size, step);

/** The median of one of the children's times. */
const ownMs = (rt: string, size: number, held: number, key: "suspendMs" | "resumeMs" | "warmMs") =>
  median(
    suspends.filter((s) => s.runtime === rt && s.mib === size && s.held === held).map((s) =>
      s[key]
    ),
  );

const goals: Report["goals"] = runtimes.flatMap((rt) => {
  const own = ownMs(rt, bigMiB, 0, "warmMs") / ownMs(rt, smallMiB, bigMiB, "warmMs");
  const ratio = wall(rt, bigMiB, "virtual") / wall(rt, smallMiB, "virtual");
  const ok = runs.filter((r) => r.runtime === rt).every((r) => r.exit === 0 && r.pass);
  return [
    {
      goal: `${rt}: ${bigMiB} MiB within 1.5x of ${smallMiB} MiB, virtual time (median wall time)`,
      value: Number.isFinite(ratio) ? ratio : null,
      met: Number.isFinite(ratio) ? ratio <= 1.5 && ok : null,
      note: "ratio",
    },
    {
      goal: `${rt}: the simulator's own suspend + resume after writing ${bigMiB} MiB within ` +
        `1.5x of after ${smallMiB} MiB beside ${bigMiB} MiB held outside it (warm cycles)`,
      value: Number.isFinite(own) ? own : null,
      met: Number.isFinite(own) ? own <= 1.5 : null,
      note: "ratio",
    },
    ...(values["no-real"] ? [] : ["checkpoint", "restore"].map((step) => {
      const r = realRatio(rt, bigMiB, step);
      return {
        goal: `${rt}: real clock, ${bigMiB} MiB: ${step} as printed within 10% of the model's`,
        value: Number.isFinite(r) ? r : null,
        met: Number.isFinite(r) ? Math.abs(r - 1) <= 0.1 && ok : null,
        note: "printed / model",
      };
    })),
  ];
});

const env = environment({
  fake: false,
  libcuda: "(the simulator)",
  noGpu: "simulator",
  date: started,
});
const report: Report = {
  name: values.label ? `sim-speed-${values.label}` : "sim-speed",
  title: "@ckpt/cuda, the simulator's wall time against the bytes written (self_checkpoint.ts)",
  description: `\`examples/self_checkpoint.ts --driver sim --json\` of ${
    ROOT === resolve(
        new URL("../", import.meta.url).pathname,
      )
      ? "this checkout"
      : `the checkout in ${ROOT}`
  } with a ${bigMiB} MiB and a ${smallMiB} MiB buffer: with ` +
    "`--virtual-time`, the wall time from spawn to exit (the example fills the whole buffer with " +
    "its kernel's pattern, hashes it, checkpoints, restores and hashes it again); on the real " +
    "clock, the step times it prints against the model's (those of the virtual clock). Runtimes " +
    "take turns in every round, sizes within a runtime.",
  environment: env,
  config: {
    rounds,
    bigMiB,
    smallMiB,
    runtimes,
    real: !values["no-real"],
    root: ROOT,
    baseline: values.baseline ?? null,
  },
  goals,
  tables: [
    {
      title: `Wall time, medians over ${rounds} round(s) (s)`,
      columns: ["runtime", "clock", `${bigMiB} MiB`, `${smallMiB} MiB`, "ratio"],
      rows: runtimes.flatMap((rt) =>
        clocks.map((c) => [
          rt,
          c,
          fmt(wall(rt, bigMiB, c) / 1000, 2),
          fmt(wall(rt, smallMiB, c) / 1000, 2),
          fmt(wall(rt, bigMiB, c) / wall(rt, smallMiB, c), 2),
        ])
      ),
    },
    ...(values["no-real"] ? [] : [{
      title: "Real clock: printed step times (medians, ms) against the model's",
      columns: ["runtime", "MiB", "checkout", ...STEPS.flatMap((s) => [s, `${s} model`])],
      rows: runtimes.flatMap((rt) =>
        sizes.flatMap((size) =>
          CHECKOUTS.map(([checkout]) => [
            rt,
            size,
            checkout,
            ...STEPS.flatMap((s) => [
              fmt(median(of(rt, size, "real", checkout).map((r) => r.steps[s])), 1),
              fmt(model(rt, size, s), 1),
            ]),
          ])
        )
      ),
    }]),
    ...(values.baseline === undefined ? [] : [{
      title: `Wall time against the baseline (${values.baseline}), medians (s)`,
      columns: ["runtime", "clock", "MiB", "this", "baseline", "this / baseline"],
      rows: runtimes.flatMap((rt) =>
        clocks.flatMap((c) =>
          sizes.map((size) => [
            rt,
            c,
            size,
            fmt(wall(rt, size, c) / 1000, 2),
            fmt(wall(rt, size, c, "baseline") / 1000, 2),
            fmt(wall(rt, size, c) / wall(rt, size, c, "baseline"), 2),
          ])
        )
      ),
    }]),
    {
      title: "Suspend and resume after writing the whole memory: wall ms in the process (medians)",
      columns: [
        "runtime",
        "MiB written",
        "MiB held outside the simulator",
        "first suspend",
        "first resume",
        `suspend + resume, mean of ${WARM_CYCLES} more`,
      ],
      rows: runtimes.flatMap((rt) =>
        COSTS.map(([size, held]) => [
          rt,
          size,
          held,
          fmt(ownMs(rt, size, held, "suspendMs"), 1),
          fmt(ownMs(rt, size, held, "resumeMs"), 1),
          fmt(ownMs(rt, size, held, "warmMs"), 3),
        ])
      ),
    },
    {
      title: `The machine's own cost of ${bigMiB} MiB: a new buffer filled, then filled again (ms)`,
      columns: ["runtime", "first fill (fresh memory)", "second fill"],
      rows: runtimes.map((rt) => [rt, fmt(memory[rt]?.fresh, 0), fmt(memory[rt]?.touched, 0)]),
    },
  ],
  runs: [...runs, ...suspends],
  runTables: [{
    title: "Every run",
    columns: ["round", "checkout", "runtime", "MiB", "clock", "wall s", "exit", "pass", ...STEPS],
    rows: runs.map((r) => [
      r.round,
      r.checkout,
      r.runtime,
      r.mib,
      r.clock,
      fmt(r.wallMs / 1000, 2),
      r.exit,
      r.pass,
      ...STEPS.map((s) => fmt(r.steps[s], 1)),
    ]),
  }],
  notes: [
    "The lock (0.2 ms) and unlock (1.5 ms) of the model are below a real timer's granularity: " +
    "their real-clock times are shown, not judged.",
    "The wall time at 1024 MiB includes the example's own check: the SHA-256 of every byte, made " +
    "once for it (the simulator makes a kernel's output when it is first needed). Before that " +
    "(the baseline, where there is one), the example wrote every byte into new memory, whose " +
    "first touch the last table prices on this machine, and then hashed it.",
  ],
};
publish(report, values.out, { digits: 2 });
process.exit(runs.every((r) => r.exit === 0 && r.pass) ? 0 : 1);
