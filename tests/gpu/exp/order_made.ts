/**
 * Operations on one process are queued in the order they were made, on a real GPU and this
 * machine's host (whose reads of /proc take their own time):
 *
 *   deno run -A tests/gpu/exp/order_made.ts <target binary> [rounds]
 *   bun tests/gpu/exp/order_made.ts <target binary> [rounds]
 *
 * A target with 256 MiB; each round makes `suspend()` then `resume()` in one tick, through one
 * handle and through two, and then `state()`: it must be `running` each time, the resume having
 * restored what the suspend checkpointed. Before the order was kept while the host was read, 7-13
 * of 40 rounds ended `checkpointed` (a fake libcuda, this machine's host). Its memory's hash is
 * checked at the end. Prints one JSON line; exits 1 on any failure.
 */

import process from "node:process";
import { CudaProcess } from "../../../mod.ts";
import { openMachine } from "../../../driver.ts";
import { startTarget } from "../native_env.ts";

const [targetPath, roundsArg = "40"] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: order_made.ts <target binary> [rounds]");
  process.exit(2);
}
const machine = await openMachine();
const target = await startTarget(targetPath, "cuda", 256);
const out: Record<string, unknown> = { rounds: Number(roundsArg) };
let ok = true;
try {
  for (const handles of [1, 2]) {
    const wrong: string[] = [];
    for (let round = 0; round < Number(roundsArg); round++) {
      const a = new CudaProcess(target.pid, { machine });
      const b = handles === 1 ? a : new CudaProcess(target.pid, { machine });
      const [x, y] = await Promise.all([a.suspend(), b.resume()]);
      const end = await a.state();
      if (end !== "running") {
        wrong.push(`${round}: suspend ${x.status}, resume ${y.status}, ends ${end}`);
        await a.resume();
      }
      await Promise.all([a.close(), b.close()]);
    }
    out[`outOfOrder${handles}`] = wrong.length;
    if (wrong.length > 0) [ok, out[`first${handles}`]] = [false, wrong[0]];
  }
  const hash = await target.memoryHash();
  out.memoryIntact = hash === target.readyHash;
  ok &&= hash === target.readyHash;
} catch (err) {
  ok = false;
  out.error = String(err);
} finally {
  await target.exit();
  await machine.close();
}
console.log(JSON.stringify({ ok, ...out }));
process.exit(ok ? 0 : 1);
