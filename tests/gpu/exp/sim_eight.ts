// The simulator's side of eight_durable.sh: a snapshot of N simulated CUDA processes of MIB each
// on one simulated H200 (virtual clock, one tree each), then their restore; prints both times.
//   deno run -A tests/gpu/exp/sim_eight.ts [N] [MIB]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { restoreSnapshot, snapshot } from "../../../mod.ts";
import { SimulatedMachine } from "../../../mock/mod.ts";

const [n, mib] = [Number(process.argv[2] ?? 8), Number(process.argv[3] ?? 2048)];
await using sim = new SimulatedMachine();
const procs = Array.from({ length: n }, () => sim.spawn({ memoryMiB: mib }));
const base = mkdtempSync(`${tmpdir()}/sim-eight-`);
try {
  let began = sim.now();
  await snapshot(procs.map((p) => p.pid), `${base}/s`, { machine: sim });
  const taken = sim.now() - began;
  await sim.sleep(1000);
  began = sim.now();
  await restoreSnapshot(`${base}/s`, { machine: sim });
  const back = sim.now() - began;
  const s = (ms: number) => (ms / 1000).toFixed(2);
  console.log(`simulated ${n} x ${mib} MiB (H200): snapshot ${s(taken)} s, restore ${s(back)} s`);
} finally {
  rmSync(base, { recursive: true, force: true });
}
