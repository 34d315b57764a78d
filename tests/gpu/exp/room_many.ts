// A group suspend and resume of many processes on one GPU, four ways taking turns on the same
// targets: this tree ("now"), another checkout's (--before, its mod.ts), this tree with
// checkRoom: false ("no-room"), and C threads (bench/many.c, no room check: the floor); "w<N>" is
// this tree with maxWorkers: N (Deno runs 24 at most, bench/calls_at_once.ts). As root,
// the records in /run/ckpt-cuda. What it weighs: the room check's reads in a resume of many (the
// records and NVML, once a process before 8ffa4bb and its followers; shared by the restores that
// ask at once after them).
//
//   deno run -A tests/gpu/exp/room_many.ts --target /tmp/ckpt/target --before /tmp/before/mod.ts \
//     [--count 64] [--mib 256] [--trials 2] [--sides now,before,no-room,threads,w16,w64]
import {
  benchArgs,
  LineChild,
  memoryIntact,
  setup,
  startTargets,
  timed,
} from "../../../bench/harness.ts";
import { type GroupResult, runGroup } from "../../../mod.ts";

const v = benchArgs({
  before: { type: "string" },
  count: { type: "string", default: "64" },
  mib: { type: "string", default: "256" },
  trials: { type: "string", default: "2" },
  sides: { type: "string", default: "now,before,no-room,threads" },
});
const picked = v.sides.split(",");
const before = picked.includes("before") ? await import(v.before!) : undefined;
const s = await setup(v, "many");
const { openMachine } = await import(
  new URL("driver.ts", new URL(v.before ?? "../../../mod.ts", import.meta.url)).href
);
const old = await openMachine({ libraryPath: s.libcuda });
const { openMachine: openNow } = await import("../../../driver.ts");
const widths = new Map<string, Awaited<ReturnType<typeof openNow>>>();
for (const name of picked.filter((p) => /^w\d+$/.test(p))) {
  widths.set(name, await openNow({ libraryPath: s.libcuda, maxWorkers: +name.slice(1) }));
}
const [count, mib, trials] = [+v.count, +v.mib, +v.trials];
const targets = await startTargets(s.target!, count, mib, () => 0);
const pids = targets.map((t) => t.pid);
const c = new LineChild(s.cBin, ["--lib", s.libcuda, ...pids.map(String)]);
type Side = (action: "suspend" | "resume") => Promise<{ ok: boolean; ms?: number }>;
const ours = (g: Promise<GroupResult>) =>
  g.then((r) => {
    const bad = r.processes.find((p) => p.error);
    if (bad) console.error(`  ${bad.pid}: ${bad.error?.message}`);
    return r;
  });
const sides: Record<string, Side> = {
  now: (a) => ours(runGroup(a, pids, { machine: s.machine })),
  before: (a) => ours(before.runGroup(a, pids, { machine: old })),
  ...Object.fromEntries(
    [...widths].map(([name, machine]) => [name, (a) => ours(runGroup(a, pids, { machine }))]),
  ) as Record<string, Side>,
  "no-room": (a) => ours(runGroup(a, pids, { machine: s.machine, checkRoom: false })),
  threads: async (a) => {
    if (a === "resume") return { ok: true };
    c.send("threads");
    const r = await c.next(600_000);
    lastThreads = Number(r.resumeMs);
    return { ok: r.ok === true, ms: Number(r.suspendMs) };
  },
};
let lastThreads = 0;
const times: Record<string, { suspend: number[]; resume: number[] }> = {};
try {
  await c.next(30_000);
  await Promise.all(pids.map((p) => s.machine.driver.getState(p)));
  await Promise.all(pids.map((p) => old.driver.getState(p)));
  for (const m of widths.values()) await Promise.all(pids.map((p) => m.driver.getState(p)));
  const names = Object.keys(sides).filter((name) => picked.includes(name));
  for (let t = 0; t < trials; t++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(t + k) % names.length], side = sides[name];
      const [sMs0, sr] = await timed(() => side("suspend"));
      const sMs = name === "threads" ? sr.ms! : sMs0; // its own, without the pipe's round trip
      const [rMs0, rr] = await timed(() => side("resume"));
      const rMs = name === "threads" ? lastThreads : rMs0;
      const at = times[name] ??= { suspend: [], resume: [] };
      at.suspend.push(sMs);
      at.resume.push(rMs);
      console.log(
        `${count} x ${mib} MiB trial ${t} ${name.padEnd(7)}: suspend ${sMs.toFixed(0)} ms, ` +
          `resume ${rMs.toFixed(0)} ms${sr.ok && rr.ok ? "" : "  FAILED"}`,
      );
      if (!sr.ok || !rr.ok) throw new Error(`${name} failed`);
    }
  }
  const ok = (await memoryIntact(targets)).filter(Boolean).length;
  console.log(`memory intact: ${ok} of ${count}`);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  for (const [name, at] of Object.entries(times)) {
    console.log(
      `mean ${name.padEnd(7)}: suspend ${mean(at.suspend).toFixed(0)} ms, resume ` +
        `${mean(at.resume).toFixed(0)} ms (resume / threads ${
          (mean(at.resume) / mean(times.threads.resume)).toFixed(3)
        })`,
    );
  }
} finally {
  await c.close();
  await Promise.all(targets.map((t) => t.exit()));
  await old.close();
  for (const m of widths.values()) await m.close();
  await s.cleanup();
}
