/**
 * A group's deadline and abort, and `waitForState`'s timeout, end a wait for a process's turn, on a
 * real GPU:
 *
 *   deno run -A tests/gpu/exp/turn_deadline.ts <target binary> [kernel ms]
 *   bun tests/gpu/exp/turn_deadline.ts <target binary> [kernel ms]
 *
 * A target with 256 MiB runs a kernel of 6 s (by default); this program's `lock()` with no timeout
 * waits for it, holding the process's turn. A group suspend of it with `timeoutMs: 1000`, the same
 * as a job, and one with a signal aborted after 1 s must each end within 2.5 s, the process
 * `not-started`, nothing done to it; a `waitForState` with `timeoutMs: 1000` must end as soon, a
 * `WaitTimeoutError` saying the state is unknown: the lock ends locked once the kernel does, and
 * after an unlock the target's memory is intact. Before, each ended only when the lock did. Then,
 * with no other operation on it, a `waitForState` with a timeout of 0 looks once: 300 waits for
 * `running` (an interval of 1 ms) each resolve, and one for `locked` says it is running. Prints
 * one JSON line; exits 1 on any failure.
 */

import process from "node:process";
import { CudaProcess, runGroup, WaitTimeoutError } from "../../../mod.ts";
import { openMachine } from "../../../driver.ts";
import { startTarget } from "../native_env.ts";

/** A wait for `checkpointed` with a timeout of 1 s, told as a group's member would be. */
async function waitFor(pid: number) {
  const waiting = new CudaProcess(pid, { machine });
  try {
    await waiting.waitForState("checkpointed", { timeoutMs: 1000 });
    return { status: "resolved", notStarted: undefined, steps: [] };
  } catch (err) {
    const unasked = err instanceof WaitTimeoutError && err.state === undefined;
    return { status: unasked ? "not-started" : "failed", notStarted: String(err), steps: [] };
  } finally {
    await waiting.close();
  }
}

const [targetPath, kernelArg = "6000"] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: turn_deadline.ts <target binary> [kernel ms]");
  process.exit(2);
}
const machine = await openMachine();
const target = await startTarget(targetPath, "cuda", 256);
const out: Record<string, unknown> = { kernelMs: Number(kernelArg) };
const failures: string[] = [];
const fail = (what: string) => void failures.push(what);
try {
  for (const how of ["deadline", "job", "abort", "waitForState"]) {
    await target.launchKernel(Number(kernelArg));
    const holder = new CudaProcess(target.pid, { machine });
    const t0 = performance.now();
    const locking = holder.lock({ timeoutMs: 0 }); // waits for the kernel, holding the turn
    const c = new AbortController();
    const timer = setTimeout(() => c.abort(), 1000);
    const group = {
      machine,
      ...(how === "abort" ? { signal: c.signal } : { timeoutMs: 1000 }),
      ...(how === "job" ? { job: true } : {}),
    };
    const o = how === "waitForState"
      ? await waitFor(target.pid)
      : (await runGroup("suspend", [target.pid], group)).processes[0];
    const groupMs = performance.now() - t0;
    clearTimeout(timer);
    const locked = await locking;
    const lockMs = performance.now() - t0;
    out[how] = {
      groupMs: Math.round(groupMs),
      lockMs: Math.round(lockMs),
      status: o.status,
      notStarted: o.notStarted,
      steps: o.steps.length,
      lockEnded: locked.state,
    };
    if (groupMs > 2500) fail(`${how}: it took ${Math.round(groupMs)} ms`);
    if (o.status !== "not-started" || o.steps.length > 0) fail(`${how}: ${o.status}`);
    if (locked.state !== "locked") fail(`${how}: the lock ended ${locked.state}`);
    await holder.unlock();
    await holder.close();
  }
  // With no other operation on it, a timeout of 0 still looks once (its turn comes at once).
  const free = new CudaProcess(target.pid, { machine });
  await free.waitForState("running", { timeoutMs: 0 });
  let falseTimeouts = 0; // a look behind none given up while the host read /proc
  for (let i = 0; i < 300; i++) {
    await free.waitForState("running", { timeoutMs: 0, intervalMs: 1 }).catch(() =>
      falseTimeouts++
    );
  }
  out.falseTimeouts = falseTimeouts;
  if (falseTimeouts > 0) fail(`${falseTimeouts} of 300 waits for "running" timed out`);
  const looked = await free.waitForState("locked", { timeoutMs: 0 }).catch((e) => e);
  out.zeroLooked = looked instanceof WaitTimeoutError ? looked.state : String(looked);
  if (out.zeroLooked !== "running") fail(`timeout 0 said ${out.zeroLooked}`);
  await free.close();
  const hash = await target.memoryHash();
  out.memoryIntact = hash === target.readyHash;
  if (hash !== target.readyHash) fail("memory changed");
} catch (err) {
  fail(String(err));
} finally {
  await target.exit();
  await machine.close();
}
console.log(JSON.stringify({ ok: failures.length === 0, ...out, failures }));
process.exit(failures.length === 0 ? 0 : 1);
