/**
 * Group operations on real processes:
 *
 *   deno run -A tests/gpu/group.ts <target binary>      (or: bun tests/gpu/group.ts <target>)
 *
 * 1. Four 1 GiB targets: runGroup("suspend"), then runGroup("resume"); every process done,
 *    memory intact.
 * 2. All-or-nothing with a member that cannot be checkpointed (a process that never used CUDA):
 *    it fails as it is planned, before any step, and the three others are not started (a group
 *    whose plans all passed would bring back those checkpointed).
 * 3. A second machine closed 100 ms into a resume on it: the close waits, and the process runs;
 *    then the command line's --toggle --events of that one pid tells every driver step.
 * 4. A deadline shorter than a busy target's kernel: its lock times out at the deadline and the
 *    processes after it are not started.
 * Prints one JSON line; exits 1 on any failure.
 */

import process from "node:process";
import { spawnSync } from "node:child_process";
import { CudaProcess, runGroup } from "../../mod.ts";
import { openMachine } from "../../driver.ts";
import { checks, startTarget } from "./native_env.ts";

const [targetPath] = process.argv.slice(2);
if (!targetPath) {
  console.error("usage: group.ts <target binary>");
  process.exit(2);
}
const machine = await openMachine();
const driver = machine.driver;
const targets = await Promise.all(
  Array.from({ length: 4 }, () => startTarget(targetPath, "cuda", 1024)),
);
const plain = await startTarget(targetPath, "nocuda");
const report: Record<string, unknown> = { runtime: driver.kind };
const { check, ok } = checks();
try {
  const pids = targets.map((t) => t.pid);
  const s = await runGroup("suspend", pids, { machine });
  const r = await runGroup("resume", pids, { machine });
  check('runGroup("suspend")', s.ok && s.processes.every((p) => p.status === "done"));
  check('runGroup("resume")', r.ok && r.processes.every((p) => p.status === "done"));
  report.suspendAllMs = Math.round(s.ms);
  report.resumeAllMs = Math.round(r.ms);

  const a = await runGroup("suspend", [...pids.slice(0, 3), plain.pid], {
    machine,
    allOrNothing: true,
  });
  const states = await Promise.all(pids.map((pid) => driver.getState(pid)));
  check("all-or-nothing failed", !a.ok);
  check("the plain process failed", a.processes[3].status === "failed");
  // Its state cannot be read (it never used CUDA), so the plans fail and no other starts.
  check("the others not started", a.processes.slice(0, 3).every((p) => p.status === "not-started"));
  check("all running again", states.every((st) => st.code === 0 && st.value === 0));
  report.allOrNothing = a.processes.map((p) =>
    `${p.status}${p.steps.length ? `(${p.steps.map((s) => s.step)})` : ""}${
      p.rollback ? `+rollback(${p.rollback.steps.map((s) => s.step)})` : ""
    }`
  );
  report.allOrNothingMs = Math.round(a.ms);

  // A machine closed while a resume runs on it waits for the resume: its unlock is still made.
  const [one] = pids.slice(1);
  await runGroup("suspend", [one], { machine });
  const other = await openMachine();
  const resumed = new CudaProcess(one, { machine: other }).resume();
  await new Promise((r) => setTimeout(r, 100)); // the restore of 1 GiB is under way
  const t0 = performance.now();
  await other.close();
  report.closeWaitedMs = Math.round(performance.now() - t0);
  check("the resume went on", (await resumed.catch(() => undefined))?.state === "running");
  check("running after the close", (await driver.getState(one)).value === 0);

  // The command line's --events for one pid: every driver step of a toggle, as it runs.
  const cli = new URL("../../cli/main.ts", import.meta.url).pathname;
  const run = "Deno" in globalThis ? ["run", "-A", cli] : [cli];
  const toggles: string[][] = (report.oneToggleEvents = []);
  for (const steps of [["lock", "checkpoint"], ["restore", "unlock"]]) {
    const toggle = ["--toggle", "--pid", `${one}`, "--events", "--json"];
    const r = spawnSync(process.execPath, [...run, ...toggle], { encoding: "utf8" });
    const told = r.stderr.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l))
      .filter((e) => e.event === "step-end").map((e) => `${e.step}${e.ok ? "" : " failed"}`);
    check(`--toggle --events of one pid: ${steps}`, r.status === 0 && `${told}` === `${steps}`);
    toggles.push(told);
  }

  await targets[0].launchKernel(5000);
  const d = await runGroup("suspend", pids, { machine, timeoutMs: 1000, concurrency: 1 });
  check("deadline passed", d.deadlinePassed && !d.ok);
  check("busy lock timed out", d.processes[0].status === "failed");
  check("the rest not started", d.processes.slice(1).every((p) => p.notStarted === "deadline"));
  report.deadline = {
    lockMs: Math.round(d.processes[0].steps[0]?.ms ?? -1),
    statuses: d.processes.map((p) => p.status),
  };

  let intact = 0;
  for (const t of targets) if ((await t.ask("hash")) === `hash ${t.readyHash}`) intact++;
  check("memory intact", intact === targets.length);
  report.memoryIntact = `${intact} of ${targets.length}`;
} finally {
  for (const t of [...targets, plain]) await t.exit();
  await machine.close();
}
console.log(JSON.stringify({ ok: ok(), ...report }));
process.exit(ok() ? 0 : 1);
