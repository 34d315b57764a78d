// How the driver's time for N processes suspended and resumed at once grows with N, on one GPU and
// spread over the GPUs: C threads (bench/many.c, one pthread per process, no library of ours), N
// targets of --mib each, per count and placement --trials trials. Each line gives the group's
// suspend (lock + checkpoint) and resume (restore + unlock) and each process's checkpoint and
// restore time (min / median / max ms): if the driver ran some part of every restore one at a
// time, the restores' times would spread from one restore's to the group's. For the simulator's
// timing model (mock/timing.ts), which was fitted at 4 and 8 processes of 4 GiB. As root:
//
//   bun tests/gpu/exp/many_curve.ts --target /tmp/ckpt/target [--counts 1,2,4,8,16,32,64]
//     [--mib 256] [--trials 2] [--placements gpu0,spread]
import { benchArgs, gpuCount, LineChild, setup, startTargets } from "../../../bench/harness.ts";

const v = benchArgs({
  counts: { type: "string", default: "1,2,4,8,16,32,64" },
  mib: { type: "string", default: "256" },
  trials: { type: "string", default: "2" },
  placements: { type: "string", default: "gpu0,spread" },
});
const s = await setup(v, "many");
const gpus = gpuCount(1);
const spread = (xs: number[]) => {
  const a = [...xs].sort((x, y) => x - y);
  return `${a[0].toFixed(0)}/${a[a.length >> 1].toFixed(0)}/${a[a.length - 1].toFixed(0)}`;
};
try {
  for (const placement of v.placements.split(",")) {
    if (placement === "spread" && gpus < 2) continue;
    for (const count of v.counts.split(",").map(Number)) {
      const gpuOf = (i: number) => placement === "spread" ? i % gpus : 0;
      const targets = await startTargets(s.target!, count, +v.mib, gpuOf);
      const c = new LineChild(s.cBin, ["--lib", s.libcuda, ...targets.map((t) => String(t.pid))]);
      try {
        await c.next(30_000);
        for (let t = 0; t < +v.trials; t++) {
          c.send("threads");
          const r = await c.next(600_000);
          if (r.ok !== true) throw new Error(`trial failed: ${JSON.stringify(r).slice(0, 400)}`);
          const ps = r.processes as { checkpointMs: number; restoreMs: number }[];
          console.log(
            `${placement} ${count} x ${v.mib} MiB trial ${t}: suspend ${
              Number(r.suspendMs).toFixed(0)
            } ms, resume ${Number(r.resumeMs).toFixed(0)} ms; checkpoints ${
              spread(ps.map((p) => p.checkpointMs))
            }, restores ${spread(ps.map((p) => p.restoreMs))} (min/median/max ms)`,
          );
        }
      } finally {
        await c.close();
        await Promise.all(targets.map((t) => t.exit()));
      }
    }
  }
} finally {
  await s.cleanup();
}
