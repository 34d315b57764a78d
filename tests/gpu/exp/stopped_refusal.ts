// Run by stopped_refusal.sh: `stopped PID` tries lock, suspend and toggle of a SIGSTOPped process
// (each refused before any driver call, or cut off at 10 s), `running PID` suspends and resumes it.
import process from "node:process";
import { CudaProcess, RefusedError } from "../../../mod.ts";

const [phase, pid] = [process.argv[2], Number(process.argv[3])];
const p = new CudaProcess(pid);
const acts: Record<string, () => Promise<{ state: string }>> = phase === "stopped"
  ? {
    lock: () => p.lock({ timeoutMs: 3000 }),
    suspend: () => p.suspend(),
    toggle: () => p.toggle(),
  }
  : { suspend: () => p.suspend(), resume: () => p.resume() };
for (const [name, act] of Object.entries(acts)) {
  const t0 = performance.now();
  const cut = new Promise((end) => setTimeout(() => end("cut off at 10 s"), 10_000));
  const r = await Promise.race([act().then((o) => `done: ${o.state}`, (e) => e), cut]);
  const ms = (performance.now() - t0).toFixed(1);
  const said = r instanceof RefusedError ? `refused ${r.code}: ${r.message}` : String(r);
  console.log(`${name} -> ${said} (${ms} ms)`);
}
console.log(`state: ${phase === "stopped" ? "(not read: it is stopped)" : await p.state()}`);
process.exit(0);
