// The simulator's memory hash against the one it replaced (issue 16, item 10): how long
// `SimulatedProcess.memoryChunkedSha256()` takes for a process of 1, 4 and 40 GiB with a few
// writes (its first call, and a call after a few more writes), against the SHA-256 of every byte
// that `memoryDigest()` computed before (its algorithm is copied here as the baseline). Each
// round takes a fresh process; the two sides take turns (round r starts with the chunked hash when
// r is even). Once per size it also hashes every byte read back with `ChunkedSha256`, as a program
// reading a real GPU would, and checks that the value is the cached one. CPU only: no GPU.
//
//   deno run -A bench/digest.ts [--sizes-mib 1024,4096,40960] [--rounds 3]
//     [--baseline-max-mib N] [--out DIR]
//   bun bench/digest.ts ...
//
// --baseline-max-mib leaves out the baseline and the check over every byte above N MiB (at 40 GiB
// each takes about 20 s per round). The report goes to bench/reports/digest-<runtime>-<host>.md
// and .json.

import { createHash, type Hash } from "node:crypto";
import process from "node:process";
import { parseArgs } from "node:util";

import { SimulatedMachine, type SimulatedProcess } from "../mock/mod.ts";
import { ChunkedSha256 } from "../examples/_chunked_sha256.ts";
import { PAGE_SIZE } from "../mock/memory.ts";
import { integers } from "./harness.ts";
import { environment, fmt, median, publish, type Report } from "./report.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    "sizes-mib": { type: "string", default: "1024,4096,40960" },
    rounds: { type: "string", default: "3" },
    "baseline-max-mib": { type: "string" },
    out: { type: "string" },
  },
});
const sizesMiB = integers(values["sizes-mib"], "--sizes-mib");
const [rounds] = integers(values.rounds, "--rounds");
const baselineMaxMiB = values["baseline-max-mib"] === undefined
  ? Infinity
  : integers(values["baseline-max-mib"], "--baseline-max-mib")[0];
if (sizesMiB.some((s) => s < 2) || rounds < 1) {
  console.error("digest.ts: --sizes-mib must be at least 2 each, --rounds at least 1");
  process.exit(2);
}
const GOAL_MIB = 40960;
const GOAL_MS = 50;
const PIECE = 64 * 2 ** 20;
const started = new Date();

/** What was timed: the chunked hash three ways, the old SHA-256, and the check over every byte. */
type Kind = "first" | "after writes" | "unchanged" | "old SHA-256" | "every byte, chunked";

interface Run {
  sizeMiB: number;
  round: number;
  kind: Kind;
  ms: number;
  hash: string;
}

/**
 * The writes before the first hash: the first 4 KiB, 8 KiB across the middle chunk border, a MiB
 * (less below 8 MiB) from 3/4 on, and the last byte.
 */
function firstWrites(size: number): [number, number][] {
  const middle = Math.floor(size / 2 / 2 ** 20) * 2 ** 20;
  const quarter = Math.floor(size * 0.75) + 1000;
  return [[0, 4096], [middle - 4096, 8192], [quarter, Math.min(2 ** 20, size >> 3)], [size - 1, 1]];
}

/** The few writes between the first hash and the next: one to a chunk written before. */
function moreWrites(size: number): [number, number][] {
  return [[Math.floor(size / 3), 100], [10, 20], [Math.floor(size / 5), PAGE_SIZE]];
}

/** The pages each process was written in (the baseline hashes only those; the rest are zero). */
const writtenPages = new WeakMap<SimulatedProcess, Set<number>>();

async function write(p: SimulatedProcess, writes: [number, number][], salt: number) {
  const pages = writtenPages.get(p) ?? new Set<number>();
  writtenPages.set(p, pages);
  for (const [at, n] of writes) {
    await p.write(at, Uint8Array.from({ length: n }, (_, i) => (i * 7 + salt) % 251 + 1));
    for (let i = Math.floor(at / PAGE_SIZE); i <= Math.floor((at + n - 1) / PAGE_SIZE); i++) {
      pages.add(i);
    }
  }
}

/**
 * The baseline: what `MemoryImage.sha256()` behind `memoryDigest()` computed before, the SHA-256
 * of every byte, fed page by page, the unwritten ones from one shared run of zeros.
 */
async function oldSha256(p: SimulatedProcess, size: number): Promise<string> {
  const hash = createHash("sha256");
  const pages = Math.ceil(size / PAGE_SIZE);
  let zeros = 0; // unwritten bytes not yet fed
  for (let i = 0; i < pages; i++) {
    const length = Math.min(PAGE_SIZE, size - i * PAGE_SIZE);
    if (!writtenPages.get(p)?.has(i)) {
      zeros += length;
      continue;
    }
    zeros = feedZeros(hash, zeros);
    hash.update(await p.read(i * PAGE_SIZE, length));
  }
  feedZeros(hash, zeros);
  return hash.digest("hex");
}

const ZEROS = new Uint8Array(16 * PAGE_SIZE);

function feedZeros(hash: Hash, n: number): 0 {
  for (let left = n; left > 0; left -= ZEROS.length) {
    hash.update(ZEROS.subarray(0, Math.min(left, ZEROS.length)));
  }
  return 0;
}

/** The chunked SHA-256 of every byte, read back in 64 MiB pieces as from a real GPU. */
async function chunkedOverRead(p: SimulatedProcess, size: number): Promise<string> {
  const hasher = new ChunkedSha256();
  for (let at = 0; at < size; at += PIECE) {
    hasher.update(await p.read(at, Math.min(PIECE, size - at)));
  }
  return hasher.digest();
}

async function timed(fn: () => Promise<string>): Promise<{ ms: number; hash: string }> {
  const t = performance.now();
  const hash = await fn();
  return { ms: performance.now() - t, hash };
}

const runs: Run[] = [];
const checks: { sizeMiB: number; same: boolean }[] = [];
const sim = new SimulatedMachine({ gpus: [{ memoryMiB: 200_000 }] });
for (const sizeMiB of sizesMiB) {
  const size = sizeMiB * 2 ** 20;
  const baseline = sizeMiB <= baselineMaxMiB;
  for (let round = 0; round < rounds; round++) {
    const p = sim.spawn({ memoryMiB: sizeMiB, command: `digest bench (${sizeMiB} MiB)` });
    const record = (kind: Kind, r: { ms: number; hash: string }) => {
      runs.push({ sizeMiB, round, kind, ...r });
      console.log(`${sizeMiB} MiB, round ${round}, ${kind}: ${fmt(r.ms, 2)} ms`);
    };
    const old = async () => {
      if (baseline) record("old SHA-256", await timed(() => oldSha256(p, size)));
    };
    await write(p, firstWrites(size), round);
    if (round % 2 === 1) await old();
    record("first", await timed(() => p.memoryChunkedSha256()));
    await write(p, moreWrites(size), round + 100);
    const again = await timed(() => p.memoryChunkedSha256());
    record("after writes", again);
    record("unchanged", await timed(() => p.memoryChunkedSha256()));
    if (round % 2 === 0) await old();
    if (baseline && round === 0) {
      const every = await timed(() => chunkedOverRead(p, size));
      record("every byte, chunked", every);
      checks.push({ sizeMiB, same: every.hash === again.hash });
    }
    p.exit();
  }
}
sim.close();

const medianOf = (sizeMiB: number, kind: Kind) =>
  median(runs.filter((r) => r.sizeMiB === sizeMiB && r.kind === kind).map((r) => r.ms));
const atGoal = sizesMiB.includes(GOAL_MIB);
const goalFor = (kind: Kind, goal: string) => {
  const ms = atGoal ? medianOf(GOAL_MIB, kind) : NaN;
  return {
    goal,
    value: Number.isFinite(ms) ? ms : null,
    met: Number.isFinite(ms) ? ms < GOAL_MS : null,
    note: "ms",
  };
};

const env = environment({
  fake: false,
  libcuda: "none (the simulated driver)",
  noGpu: "the simulated driver, on the CPU",
  date: started,
});
const report: Report = {
  name: "digest",
  title:
    "@ckpt/cuda, the simulator's memory hash: chunked SHA-256 against the SHA-256 of every byte",
  description: "`SimulatedProcess.memoryChunkedSha256()` (the SHA-256 of the SHA-256s of 1 MiB " +
    "chunks, each chunk's digest cached until a write touches it, unwritten chunks sharing one) " +
    "on a fresh simulated process per round with a few writes: its first call, a call after a " +
    "few more writes, and a call with nothing written since. The baseline is the SHA-256 of " +
    "every byte that `memoryDigest()` computed before (its algorithm copied into the benchmark), " +
    "in the same run; the two take turns. Once per size, every byte read back and hashed with " +
    "`ChunkedSha256`, as a program reading a real GPU would, must give the cached value.",
  environment: env,
  config: {
    sizesMiB,
    rounds,
    baselineMaxMiB: Number.isFinite(baselineMaxMiB) ? baselineMaxMiB : "all",
    firstWrites: "4 KiB at 0, 8 KiB across the middle chunk border, 1 MiB at 3/4, the last byte",
    moreWrites: "100 B at 1/3, 20 B at byte 10 (a chunk written before), 64 KiB at 1/5",
  },
  goals: [
    goalFor("first", "40 GiB, a few writes: the first chunked hash under 50 ms (median)"),
    goalFor(
      "after writes",
      "40 GiB, a few more writes: the next chunked hash under 50 ms (median)",
    ),
    {
      goal: "the cached hash equals ChunkedSha256 over every byte read back, at every size checked",
      value: checks.length ? checks.filter((c) => c.same).length : null,
      met: checks.length ? checks.every((c) => c.same) : null,
      note: `sizes checked: ${checks.map((c) => `${c.sizeMiB} MiB`).join(", ") || "none"}`,
    },
  ],
  tables: [{
    title: `Medians over ${rounds} round(s), ms`,
    columns: [
      "MiB",
      "chunked, first",
      "chunked, after writes",
      "chunked, unchanged",
      "old SHA-256 of every byte",
      "old / first",
      "every byte read, chunked",
    ],
    rows: sizesMiB.map((s) => {
      const first = medianOf(s, "first");
      const old = medianOf(s, "old SHA-256");
      return [
        s,
        fmt(first, 2),
        fmt(medianOf(s, "after writes"), 2),
        fmt(medianOf(s, "unchanged"), 3),
        fmt(old, 0),
        Number.isFinite(old) ? `${fmt(old / first, 0)}x` : "-",
        fmt(medianOf(s, "every byte, chunked"), 0),
      ];
    }),
  }],
  runs,
  runTables: [{
    title: "Every run",
    columns: ["MiB", "round", "what", "ms", "hash"],
    rows: runs.map((r) => [r.sizeMiB, r.round, r.kind, fmt(r.ms, 2), r.hash.slice(0, 16)]),
  }],
  notes: [
    "The old SHA-256 and the chunked one are different values by design: the chunked hash is " +
    "not the SHA-256 of the bytes. The check compares the chunked hash with itself, computed " +
    "two ways.",
    "A hash of memory written all over still reads every byte the first time (about what the " +
    "'every byte read, chunked' column shows); only what is written since is hashed again.",
    ...(Number.isFinite(baselineMaxMiB)
      ? [`The baseline and the check were left out above ${baselineMaxMiB} MiB.`]
      : []),
  ],
};
publish(report, values.out, { digits: 2 });
process.exit(checks.every((c) => c.same) ? 0 : 1);
