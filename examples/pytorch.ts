/**
 * The program a PyTorch user runs first: it finds the PyTorch processes of this machine (the CUDA
 * processes `listCudaProcesses()` finds whose command line names python or torch), takes one to
 * disk with `snapshot` (its CUDA state suspended, criu dumping the process, a manifest written,
 * the process ended) and brings it back with `restoreSnapshot` (the same pid, its GPU memory put
 * back on the GPU), then checks that it runs again holding the GPU memory it held.
 *
 *   sudo npx deno run -A examples/pytorch.ts [--pid PID | --yes] [--dir DIR] [--keep]
 *   sudo npx bun examples/pytorch.ts --pid PID
 *
 * On a GPU machine it lists them and acts only when told which: `--pid PID`, or `--yes` for the
 * one holding the most GPU memory (a snapshot ends the process until it is restored). It needs
 * root and criu 4.0 or later (or `CKPT_CRIU_PATH`). Where the NVIDIA driver, criu or root is
 * missing, it says which and runs the same steps on the simulated driver and its simulated criu,
 * with a stand-in process whose command line looks like a PyTorch training job.
 *
 * The driver and criu bring back the process and its memory; whether a model's weights and its
 * optimizer's state are bit for bit what they were is the program's own to check
 * (tests/gpu/pytorch/train.py computes a digest of its whole state on the GPU, and
 * tests/gpu/pytorch.sh compares it across a snapshot). docs/PYTORCH.md says what works with
 * PyTorch and what does not.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { listCudaProcesses, restoreSnapshot, snapshot } from "../mod.ts";
import type { CudaProcessInfo, CudaProcessListing } from "../types.ts";
import type { Manifest, SnapshotEvent } from "../snapshot.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import {
  chooseMachine,
  type ExampleMachine,
  type ExampleSpec,
  intOption,
  messageOf,
  parseExampleArgs,
  readText,
  removeOnInterrupt,
  table,
  totalMiB,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "pytorch.ts",
  about: `
Finds the PyTorch processes of this machine (CUDA processes whose command line names python or
torch), takes one to disk with snapshot (suspended, dumped by criu, ended) and brings it back with
restoreSnapshot (the same pid, its GPU memory), then checks that it runs with the GPU memory it
held. On a GPU machine it acts only on --pid PID, or with --yes on the one holding the most GPU
memory. Without an NVIDIA driver, criu or root: the same steps on the simulated driver, with a
stand-in training process. Exits 1 when a step fails.`,
  options: {
    pid: { type: "string", value: "PID", help: "the PyTorch process to snapshot and restore" },
    yes: { type: "boolean", help: "take the PyTorch process that holds the most GPU memory" },
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

/** What the simulator runs in place of a PyTorch job: its command line, its GPU memory. */
const STAND_IN = {
  command: "python3 train.py --model resnet50 --batch-size 256 --epochs 90 (simulated)",
  memoryMiB: 6144,
};

const args = parseExampleArgs(SPEC);
const wantedPid = args.values.pid === undefined
  ? undefined
  : intOption(SPEC, args, "pid", 1, 2 ** 31 - 1);
// A folder of its own for the snapshot, where --dir names none.
const work = args.values.dir ? undefined : mkdtempSync(join(tmpdir(), "ckpt-pytorch-example-"));
removeOnInterrupt(args.values.keep ? undefined : work); // Ctrl-C: the folder goes too
const dir = (args.values.dir as string | undefined) ?? join(work!, "snapshot");
const step = (() => {
  let n = 0;
  return (text: string) => console.log(`${++n}. ${text}`);
})();
const WHAT = "a stand-in PyTorch training process and a simulated criu";

let here: ExampleMachine | undefined;
let ok = false;
try {
  here = await chooseMachine(args, { what: WHAT });
  if (here.kind === "native") {
    const probe = await here.machine.engine.probe();
    if (probe.problems.length > 0) {
      // The driver is here, but criu cannot run: the simulator, saying why.
      await here.close();
      here = await chooseMachine({ ...args, driver: "sim" }, { what: WHAT });
      console.log(`An NVIDIA driver is here, but criu cannot run: ${probe.problems.join(" ")}`);
      console.log("Running the same steps on the SIMULATED driver and its simulated criu.");
    } else {
      for (const note of here.notes) console.log(note);
      console.log(`criu ${probe.version ?? "(version unknown)"} is ready.`);
    }
  } else {
    for (const note of here.notes) console.log(note);
  }
  console.log();
  ok = await run(here);
} catch (error) {
  console.log(`FAIL: ${messageOf(error)}`);
} finally {
  await here?.close();
  // --keep keeps the temporary folder; a --dir is the user's, always kept (said where it holds one).
  const kept = args.values.keep ? "" : args.values.dir && ok ? ": a --dir is kept" : undefined;
  if (kept !== undefined) console.log(`(the snapshot is in ${dir}${kept})`);
  if (!args.values.keep && work) rmSync(work, { recursive: true, force: true });
}
process.exit(ok ? 0 : 1);

/** A command line that looks like a PyTorch program's. */
function isPyTorch(command: string | undefined): boolean {
  return command !== undefined && /\bpython[0-9.]*\b|torch/i.test(command);
}

/** The steps, on this machine or on the simulator. */
async function run(here: ExampleMachine): Promise<boolean> {
  const machine = here.machine;
  const simulated = here.kind === "simulated";
  let hash: string | undefined;
  if (simulated) {
    const sim = machine as SimulatedMachine;
    const job = sim.spawn(STAND_IN);
    sim.spawn({ memoryMiB: 2048, command: "./render --frames 1000 (simulated)" });
    sim.spawn({ cuda: false, command: "python3 -m http.server 8000 (simulated)" });
    // Its "weights": a pattern in the first MiB of its GPU memory, to compare after the restore.
    const weights = new Uint8Array(1 << 20).map((_, i) => (i * 2654435761) >>> 24);
    await job.write(0, weights);
    hash = await job.memoryChunkedSha256();
  }

  const listing = await listCudaProcesses({ machine });
  const found = listing.processes.filter((p) => isPyTorch(p.command) && p.pid !== process.pid);
  step(
    `PyTorch processes here: ${found.length} (of ${listing.processes.length} CUDA processes; ` +
      `GPU memory ${gpuMemorySource(listing, simulated)}).`,
  );
  if (found.length > 0) console.log(listTable(found, simulated));
  if (found.length === 0) {
    console.log(
      "None is running. Start one (any training script, or `python3 tests/gpu/pytorch/train.py " +
        "--mib 1024 --fifo /tmp/train.cmd` from this repository) and run this again.",
    );
    return true;
  }

  const target = choose(found, simulated);
  if (!target) return true;
  if (target.state !== "running") {
    console.log(`FAIL: process ${target.pid} is ${target.state}; a snapshot takes running ones.`);
    return false;
  }
  const pid = target.pid;
  const before = target.gpuMemory;
  const rss = simulated ? undefined : rssMiB(pid);
  step(
    `Taking process ${pid} to disk: ${target.command ?? "?"} (GPU memory ${memory(before)}${
      rss === undefined ? "" : `, host memory ${rss} MiB`
    })`,
  );
  const made = await snapshot([pid], dir, { machine, onProgress: progress });
  const m = made.manifest;
  const bytes = m.files.reduce((sum, f) => sum + f.bytes, 0);
  step(
    `Snapshot in ${made.dir}: GPU memory ${manifestMemory(m)}, ${size(bytes)} of images${
      simulated ? " (the simulated criu writes only the bytes written to the GPU)" : ""
    }; suspend ${sec(m.timings.suspendMs)}, dump ${sec(m.timings.dumpMs)}, ${sec(made.ms)} in all${
      simulated ? " (simulated times)" : ""
    }`,
  );
  const gone = !(await listCudaProcesses({ machine, gpuMemory: false })).processes.some((p) =>
    p.pid === pid
  );
  step(`Process ${pid} is ${gone ? "gone: its GPU memory is free" : "STILL THERE"}`);

  const back = await restoreSnapshot(dir, { machine, onProgress: progress });
  const after = (await listCudaProcesses({ machine })).processes.find((p) => p.pid === pid);
  step(
    `Restored in ${sec(back.ms)}: pid ${back.pids.join(", ")}, ${
      after ? `${after.state}, GPU memory ${memory(after.gpuMemory)}` : "NOT FOUND"
    }`,
  );
  let same = true;
  if (simulated) {
    const now = await (machine as SimulatedMachine).process(pid)?.memoryChunkedSha256();
    same = now === hash;
    step(`Its GPU memory is ${same ? "the same, byte for byte" : "NOT the same"}`);
  }
  // The GPU memory it holds again, as the listing reports it (NVML): the same, within 1%.
  const held = after !== undefined && before !== "unknown" && after.gpuMemory !== "unknown"
    ? Math.abs(totalMiB(after.gpuMemory) - totalMiB(before)) <=
      Math.max(2, totalMiB(before) / 100)
    : after !== undefined;
  const pass = gone && after?.state === "running" && held && same;
  console.log();
  console.log(
    pass
      ? `PASS: PyTorch process ${pid} went to disk and came back running, holding the GPU memory ` +
        `it held${simulated ? " (on the simulator)" : ""}.`
      : `FAIL: process ${pid} did not come back as it was (see above).`,
  );
  return pass;
}

/** The process to take: --pid, or with --yes (or on the simulator) the one holding the most. */
function choose(
  found: readonly CudaProcessInfo[],
  simulated: boolean,
): CudaProcessInfo | undefined {
  if (wantedPid !== undefined) {
    const p = found.find((f) => f.pid === wantedPid);
    if (!p) {
      throw new Error(`--pid ${wantedPid} is not one of the PyTorch processes listed above`);
    }
    return p;
  }
  if (!simulated && !args.values.yes) {
    console.log(
      "Not taking any to disk: a snapshot ends the process until it is restored. Run again with " +
        "--pid PID (one of the above), or --yes for the one holding the most GPU memory.",
    );
    return undefined;
  }
  const most = (p: CudaProcessInfo) => p.gpuMemory === "unknown" ? 0 : totalMiB(p.gpuMemory);
  return [...found].sort((a, b) => most(b) - most(a))[0];
}

function listTable(found: readonly CudaProcessInfo[], simulated: boolean): string {
  return table(
    [
      { title: "pid", align: "right" },
      { title: "state" },
      { title: "GPU memory", align: "right" },
      { title: "host memory", align: "right" },
      { title: "command" },
    ],
    found.map((p) => {
      const rss = simulated ? undefined : rssMiB(p.pid);
      return [
        String(p.pid),
        p.state,
        memory(p.gpuMemory),
        rss === undefined ? "-" : `${rss} MiB`,
        p.command ?? "",
      ];
    }),
  );
}

function gpuMemorySource(listing: CudaProcessListing, simulated: boolean): string {
  if (listing.gpuMemoryUnknown) return `unknown: ${listing.gpuMemoryUnknown}`;
  return simulated ? "from the simulator" : "from NVML";
}

/** A process's resident host memory (VmRSS) in MiB, or undefined where it cannot be read. */
function rssMiB(pid: number): number | undefined {
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readText(`/proc/${pid}/status`));
  return kb ? Math.round(Number(kb[1]) / 1024) : undefined;
}

function memory(m: CudaProcessInfo["gpuMemory"]): string {
  if (m === "unknown") return "unknown";
  const mib = totalMiB(m);
  return mib === 0 ? "none" : `${mib} MiB`;
}

/** The GPU memory the manifest says the snapshot's CUDA processes held, over their GPUs. */
function manifestMemory(m: Manifest): string {
  const mib = m.trees.flatMap((t) => t.processes).reduce(
    (sum, p) => sum + totalMiB(p.cuda?.gpuMemoryMiB ?? undefined),
    0,
  );
  return `${Math.round(mib)} MiB`;
}

function progress(e: SnapshotEvent): void {
  if (e.type === "phase" && e.phase !== "check") console.log(`     ${e.phase}...`);
  if (e.type === "wait") console.log(`     waiting ${Math.ceil(e.ms / 1000)} s: ${e.why}`);
}

function size(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

function sec(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
