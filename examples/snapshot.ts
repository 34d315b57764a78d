/**
 * A running CUDA program to disk and back: examples/counter.ts (an integer in GPU memory that a
 * kernel increments for each request) is started as a process of its own and asked (101); a
 * snapshot takes it to a directory (its CUDA state suspended, criu dumping the process, a
 * manifest written) and ends it; the snapshot is restored (the same pid, its GPU memory put back
 * on the GPU) and the counter asked again: 102.
 *
 *   sudo npx deno run -A examples/snapshot.ts [--dir DIR] [--keep]
 *   sudo npx bun examples/snapshot.ts
 *
 * It needs an NVIDIA driver with the checkpoint API, criu 4.0 or later (or `CKPT_CRIU_PATH`), root
 * and a kernel `criu check` likes. Where one is missing it says which, and runs the same steps on
 * the simulated driver and its simulated criu: a simulated process whose GPU memory holds the
 * counter, dumped into real files and restored, its memory compared byte for byte.
 */

import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { restoreSnapshot, snapshot } from "../mod.ts";
import type { NativeMachine } from "../driver.ts";
import type { Manifest, SnapshotEvent } from "../snapshot.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import { askCounter, COUNTER_START } from "./counter.ts";
import {
  alive,
  chooseMachine,
  type ExampleMachine,
  type ExampleSpec,
  messageOf,
  parseExampleArgs,
  readText,
  removeOnInterrupt,
  runtimeCommand,
  waitFor,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "snapshot.ts",
  about: `
A running CUDA program to disk and back with @ckpt/cuda's snapshot: the counter of
examples/counter.ts answers 101, is snapshotted (suspended, dumped by criu, ended), restored
with its pid and its GPU memory, and answers 102. Without an NVIDIA driver, criu or root, the
same steps on the simulated driver and its simulated criu. Exits 1 when a step fails.`,
  options: {
    dir: {
      type: "string",
      value: "DIR",
      help: "the snapshot's directory, new or empty (default: one in the temporary folder)",
    },
    keep: {
      type: "boolean",
      help: "keep the snapshot in the temporary folder afterwards (one in a --dir is always kept)",
    },
  },
};

const args = parseExampleArgs(SPEC);
const work = mkdtempSync(join(tmpdir(), "ckpt-snapshot-example-"));
removeOnInterrupt(args.values.keep ? undefined : work); // Ctrl-C: the folder goes too
const dir = (args.values.dir as string | undefined) ?? join(work, "snapshot");
const step = (() => {
  let n = 0;
  return (text: string) => console.log(`${++n}. ${text}`);
})();

let here: ExampleMachine;
try {
  here = await chooseMachine(args, {
    what: "a simulated process whose GPU memory holds the counter, and a simulated criu",
  });
} catch (error) {
  console.error(`snapshot.ts: ${messageOf(error)}`);
  rmSync(work, { recursive: true, force: true });
  process.exit(1);
}

let ok = false;
try {
  if (here.kind === "native") {
    const probe = await here.machine.engine.probe();
    if (probe.problems.length === 0) {
      for (const note of here.notes) console.log(note);
      console.log(`criu ${probe.version} is ready.`);
      console.log();
      ok = await onThisMachine(here.machine);
    } else {
      // The native driver is here, but the CRIU half is not: the simulator, saying why.
      await here.close();
      here = await chooseMachine({ ...args, driver: "sim" }, {
        what: "a simulated process whose GPU memory holds the counter, and a simulated criu",
      });
      console.log(`An NVIDIA driver is here, but criu cannot run: ${probe.problems.join(" ")}`);
      console.log("Running the same steps on the SIMULATED driver and its simulated criu.");
      console.log();
      ok = await onSimulator(here.machine as SimulatedMachine);
    }
  } else {
    for (const note of here.notes) console.log(note);
    console.log();
    ok = await onSimulator(here.machine);
  }
} catch (error) {
  console.log(`FAIL: ${messageOf(error)}`);
  // The counter's own words, where it said any: its log is about to go with the folder.
  const log = readText(join(work, "counter.log")).trim();
  if (log) console.log(`The counter's output:\n${log}`);
} finally {
  await here.close();
  // The folder this program made goes, whatever happened; --keep keeps it for a look.
  if (!args.values.keep) {
    rmSync(work, { recursive: true, force: true });
    if (args.values.dir && ok) console.log(`(the snapshot is in ${dir}: a --dir is kept)`);
  } else if (!args.values.dir) {
    console.log(`(the snapshot and the counter's output are in ${work})`);
  } else {
    const unused = readdirSync(work).length === 0; // the simulator's counter writes nothing
    if (unused) rmSync(work, { recursive: true, force: true });
    console.log(`(the snapshot is in ${dir}${unused ? "" : `, the counter's output in ${work}`})`);
  }
}
process.exit(ok ? 0 : 1);

/** Progress: one line per phase. */
function progress(e: SnapshotEvent): void {
  if (e.type === "phase" && e.phase !== "check") console.log(`     ${e.phase}...`);
  if (e.type === "wait") console.log(`     waiting ${Math.ceil(e.ms / 1000)} s: ${e.why}`);
}

/** The counter as a process of its own, snapshotted with the installed criu and restored. */
async function onThisMachine(machine: NativeMachine): Promise<boolean> {
  const socket = join(work, "counter.sock");
  const log = join(work, "counter.log");
  const counterFile = new URL("./counter.ts", import.meta.url).pathname;
  const [cmd, cmdArgs] = runtimeCommand(counterFile, ["--unix", socket, "--driver", "native"]);
  // Its output goes to a file and it runs in a session of its own: criu dumps and restores files
  // and sockets, not pipes to this program or a terminal.
  const out = openSync(log, "w");
  const child = spawn(cmd, cmdArgs, { stdio: ["ignore", out, out], detached: true });
  closeSync(out);
  const pid = child.pid!;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    const ready = await waitFor(() => /counter ready/.test(readText(log)), 60_000, exited);
    if (!ready) throw new Error(`the counter did not start:\n${readText(log)}`);
    step(`Started the counter: pid ${pid}`);
    const first = await askCounter({ unix: socket });
    step(`Asked it: ${first}`);
    const made = await snapshot([pid], dir, { machine, onProgress: progress });
    const m = made.manifest;
    const cuda = m.trees[0].processes.find((p) => p.cuda);
    const bytes = m.files.reduce((sum, f) => sum + f.bytes, 0);
    step(
      `Snapshot in ${made.dir}: ${m.trees[0].processes.length} process(es), GPU memory ${
        gpuMemory(m, cuda?.cuda?.gpuMemoryMiB)
      }, ${(bytes / 1e9).toFixed(2)} GB of images; suspend ${sec(m.timings.suspendMs)}, ` +
        `dump ${sec(m.timings.dumpMs)}, ${sec(made.ms)} in all`,
    );
    await exited;
    step(`The counter is ${alive(pid) ? "STILL RUNNING" : "gone"}`);
    const back = await restoreSnapshot(dir, { machine, onProgress: progress });
    step(
      `Restored: pid ${back.pids.join(", ")} ${alive(pid) ? "is back" : "is NOT back"}, in ${
        sec(back.ms)
      }`,
    );
    const second = await askCounter({ unix: socket });
    step(`Asked it again: ${second}`);
    return verdict(first, second);
  } finally {
    if (alive(pid)) process.kill(pid, "SIGKILL");
  }
}

/** The same on the simulated machine: the counter's integer in a simulated process's memory. */
async function onSimulator(sim: SimulatedMachine): Promise<boolean> {
  const counter = sim.spawn({ memoryMiB: 1024, command: "npx deno run -A examples/counter.ts" });
  const bump = async () => {
    const [value] = new Uint32Array((await counter_(sim, counter.pid).read(0, 4)).slice().buffer);
    const next = value + 1;
    await counter_(sim, counter.pid).write(0, new Uint8Array(new Uint32Array([next]).buffer));
    return next;
  };
  await counter.write(0, new Uint8Array(new Uint32Array([COUNTER_START]).buffer));
  step(`Started the (simulated) counter: pid ${counter.pid}, 1 GiB of GPU memory`);
  const first = await bump();
  step(`Asked it: ${first}`);
  const hash = await counter.memoryChunkedSha256();
  const made = await snapshot([counter.pid], dir, { machine: sim, onProgress: progress });
  const m = made.manifest;
  step(
    `Snapshot in ${made.dir}: GPU memory ${
      gpuMemory(m, m.trees[0].processes[0].cuda?.gpuMemoryMiB)
    }; suspend ${sec(m.timings.suspendMs)}, dump ${sec(m.timings.dumpMs)} (simulated times)`,
  );
  step(`The counter is ${sim.process(counter.pid) ? "STILL RUNNING" : "gone"}`);
  const back = await restoreSnapshot(dir, { machine: sim, onProgress: progress });
  const restored = counter_(sim, counter.pid);
  step(`Restored: pid ${back.pids.join(", ")}, ${restored.state}, in ${sec(back.ms)}`);
  const same = await restored.memoryChunkedSha256() === hash;
  step(`Its GPU memory is ${same ? "the same, byte for byte" : "NOT the same"}`);
  const second = await bump();
  step(`Asked it again: ${second}`);
  return same && verdict(first, second);
}

function counter_(sim: SimulatedMachine, pid: number) {
  const p = sim.process(pid);
  if (!p) throw new Error(`the simulated counter (pid ${pid}) is gone`);
  return p;
}

function verdict(first: number, second: number): boolean {
  const pass = first === COUNTER_START + 1 && second === COUNTER_START + 2;
  console.log();
  console.log(
    pass
      ? `PASS: the counter answered ${first}, then ${second} after a snapshot and its restore.`
      : `FAIL: the counter answered ${first}, then ${second} (expected 101, then 102).`,
  );
  return pass;
}

/** A process's GPU memory, as the manifest holds it: `1544 MiB on GPU 0 (NVIDIA H200)`. */
function gpuMemory(
  m: Manifest,
  byGpu: Readonly<Record<string, number>> | null | undefined,
): string {
  if (!byGpu) return "unknown";
  const parts = Object.entries(byGpu).map(([uuid, mib]) => {
    const gpu = m.gpus.find((g) => g.uuid === uuid);
    return `${Math.round(mib)} MiB on ${gpu ? `GPU ${gpu.index} (${gpu.name})` : uuid}`;
  });
  return parts.length > 0 ? parts.join(", ") : "none";
}

function sec(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
