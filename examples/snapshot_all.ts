/**
 * Suspends every CUDA process of the machine at once, as before a snapshot of the whole machine
 * (CRIU of each, a VM snapshot, a driver update), then resumes them all: the listing
 * (`listCudaProcesses`: `/proc`, the driver, NVML), `runGroup("suspend")` with all-or-nothing
 * rollback and a deadline, and `runGroup("resume")`. Prints a table of each process (pid, command,
 * GPU memory, the time of each step) and checks that every process runs again with the GPU memory
 * it had.
 *
 *   sudo npx deno run -A examples/snapshot_all.ts --yes [--deadline-ms 60000]
 *   sudo npx bun examples/snapshot_all.ts --yes
 *
 * On a GPU machine it acts on every CUDA process there is (but itself), so it only lists them
 * unless given `--yes`. Without a usable NVIDIA driver it runs on a simulated machine of two H200s
 * with a few processes (a training job, an inference server, a notebook, and two processes that
 * are not CUDA processes); `--show-rollback` there makes one checkpoint fail first, to show the
 * all-or-nothing rollback. Exits 1 when the group failed or a process did not come back.
 */

import process from "node:process";
import {
  type GroupOptions,
  type GroupResult,
  listCudaProcesses,
  type ProcessOutcome,
  runGroup,
} from "../mod.ts";
import type { CudaProcessInfo } from "../types.ts";
import type { SimulatedMachine } from "../mock/mod.ts";
import {
  type ExampleSpec,
  intOption,
  type MemoryByGpu,
  messageOf,
  ms,
  openExampleMachine,
  parseExampleArgs,
  table,
  totalMiB,
} from "./_support.ts";
import { MAX_TIMER_MS } from "../core/options.ts";

const SPEC: ExampleSpec = {
  file: "snapshot_all.ts",
  about: `
Lists every CUDA process of this machine, suspends them all at once (all or nothing, with a
deadline), prints a table of each (pid, command, GPU memory, time per step), resumes them all
and checks that each runs again with its GPU memory. On a GPU machine it needs --yes to act.`,
  options: {
    yes: { type: "boolean", help: "suspend and resume them (on a GPU machine; else only a list)" },
    "deadline-ms": {
      type: "string",
      value: "MS",
      default: "60000",
      help: "deadline for suspending all (the resume has none: it brings back what it can)",
    },
    "lock-timeout-ms": {
      type: "string",
      value: "MS",
      default: "10000",
      help: "each process's lock timeout (cut to the deadline)",
    },
    "show-rollback": {
      type: "boolean",
      help: "on the simulator: make one checkpoint fail first, to show the rollback",
    },
  },
};

const args = parseExampleArgs(SPEC);
const deadlineMs = intOption(SPEC, args, "deadline-ms", 1, MAX_TIMER_MS);
const lockTimeoutMs = intOption(SPEC, args, "lock-timeout-ms", 0, 2 ** 32 - 1);
process.exitCode = await snapshotAll() ? 0 : 1;

async function snapshotAll(): Promise<boolean> {
  const here = await openExampleMachine(SPEC, args, {
    gpus: 2,
    what: "a simulated machine of two H200s with a few processes",
  });
  try {
    if (here.kind === "simulated") populate(here.machine);
    const listing = await listCudaProcesses({ machine: here.machine });
    const found = listing.processes.filter((p) => p.pid !== process.pid);
    console.log(
      `CUDA processes on this machine: ${found.length} (of ${listing.scanned} processes; ` +
        `GPU memory ${
          listing.gpuMemoryUnknown
            ? `unknown: ${listing.gpuMemoryUnknown}`
            : here.kind === "simulated"
            ? "from the simulator"
            : "from NVML"
        }).`,
    );
    for (const p of listing.uninspectable) {
      console.log(`  could not look at pid ${p.pid} (${p.command ?? "?"}): ${p.reason}`);
    }
    const before = await here.gpuMemory(found.map((p) => p.pid));
    if (found.length === 0) {
      console.log("Nothing to suspend.");
      return true;
    }
    if (here.kind === "native" && !args.values.yes) {
      console.log(listTable(found, before));
      console.log();
      console.log(
        `Not suspending: that would stop these ${found.length} processes for a moment (they are ` +
          `resumed right after). Run again with --yes to do it.`,
      );
      return true;
    }
    const pids = found.map((p) => p.pid);
    const options: GroupOptions = {
      machine: here.machine,
      allOrNothing: true,
      timeoutMs: deadlineMs,
      lockTimeoutMs: Math.min(lockTimeoutMs, deadlineMs),
    };

    if (args.values["show-rollback"] && here.kind === "simulated") {
      const victim = here.machine.process(pids[pids.length - 1])!;
      victim.failNext("checkpoint", { code: 2 /* CUDA_ERROR_OUT_OF_MEMORY */ });
      console.log(
        `First try: process ${victim.pid}'s checkpoint is made to fail (out of host memory), so ` +
          `all or nothing brings the others back:`,
      );
      const failed = await runGroup("suspend", pids, options);
      console.log(outcomeTable(found, before, failed, undefined));
      console.log(
        `Group: ${failed.ok ? "ok" : "failed"}, rolled back: ${failed.rolledBack}, ${
          ms(failed.ms)
        } ms. States now: ${failed.processes.map((p) => p.state).join(", ")}.`,
      );
      console.log();
      console.log("Second try, with nothing made to fail:");
    }

    console.log(
      `Suspending ${pids.length} processes at once: runGroup("suspend"), all or nothing, deadline ` +
        `${deadlineMs} ms.`,
    );
    const suspended = await runGroup("suspend", pids, options);
    const during = await here.gpuMemory(pids);
    if (!suspended.ok) {
      console.log(outcomeTable(found, before, suspended, undefined));
      console.log(
        `FAIL: the group failed${
          suspended.rolledBack ? "; every process was brought back to its state" : ""
        }${suspended.deadlinePassed ? " (the deadline passed)" : ""}.`,
      );
      return false;
    }
    const freed = typeof before === "string" || typeof during === "string"
      ? "unknown"
      : `${sum(before, pids) - sum(during, pids)} MiB`;
    // Steps begun before the deadline run to their end: the group may end after it.
    const late = suspended.ms > deadlineMs
      ? ` (past the ${deadlineMs} ms deadline: no step began after it, and those begun before ran to their end)`
      : "";
    console.log(
      `All ${pids.length} checkpointed in ${
        ms(suspended.ms)
      } ms${late}; GPU memory released: ${freed}.`,
    );
    // No deadline and no rollback for the resume: a resume rolled back would suspend them again.
    console.log('Resuming them all at once: runGroup("resume").');
    const resumed = await runGroup("resume", pids, { machine: here.machine });
    const after = await here.gpuMemory(pids);
    console.log();
    console.log(outcomeTable(found, before, suspended, resumed));
    console.log(
      `runGroup("suspend"): ${ms(suspended.ms)} ms for all ${pids.length} at once (their steps ` +
        `add up to ${ms(suspended.processes.reduce((a, p) => a + stepsMs(p), 0))} ms); ` +
        `runGroup("resume"): ${ms(resumed.ms)} ms.`,
    );
    const back = resumed.processes.every((p) => p.state === "running") &&
      (typeof before === "string" || typeof after === "string" ||
        pids.every((pid) => totalMiB(before.get(pid)) === totalMiB(after.get(pid))));
    console.log();
    console.log(
      resumed.ok && back
        ? `PASS: ${pids.length} processes suspended and resumed together; each runs again with ` +
          `the GPU memory it had.`
        : `FAIL: not every process runs again with the GPU memory it had (see the table${
          here.kind === "native"
            ? "; `cuda-checkpoint --toggle --pid P` resumes one left checkpointed, " +
              "`--action unlock` one left locked"
            : ""
        }).`,
    );
    return resumed.ok && back;
  } catch (error) {
    console.log(`FAIL: ${messageOf(error)}`);
    return false;
  } finally {
    await here.close();
  }
}

/** On the simulator: a machine with a few processes, some of them CUDA processes. */
function populate(sim: SimulatedMachine): void {
  sim.spawn({ memoryMiB: 2048, gpu: 0, command: "python train.py --rank 0" });
  sim.spawn({ memoryMiB: 2048, gpu: 1, command: "python train.py --rank 1" });
  sim.spawn({ memoryMiB: 6144, gpu: [0, 1], command: "vllm serve llama-3-8b --tp 2" });
  sim.spawn({ memoryMiB: 512, gpu: 1, command: "jupyter kernel (a notebook)" });
  sim.spawn({ cuda: false, command: "bash" });
  sim.spawn({ cuda: false, libcuda: true, command: "python -c 'import torch' (never used CUDA)" });
}

function sum(memory: Map<number, MemoryByGpu>, pids: readonly number[]): number {
  return pids.reduce((a, pid) => a + totalMiB(memory.get(pid)), 0);
}

function stepsMs(p: ProcessOutcome): number {
  return p.steps.reduce((a, s) => a + s.ms, 0);
}

function memoryText(memory: Map<number, MemoryByGpu> | string, pid: number): string {
  return typeof memory === "string" ? "unknown" : `${totalMiB(memory.get(pid))} MiB`;
}

function listTable(found: readonly CudaProcessInfo[], memory: Map<number, MemoryByGpu> | string) {
  return table(
    [{ title: "pid" }, { title: "state" }, { title: "GPU memory" }, { title: "command" }],
    found.map((p) => [String(p.pid), p.state, memoryText(memory, p.pid), p.command ?? ""]),
  );
}

/** One row per process: its memory, each step's time, and what became of it. */
function outcomeTable(
  found: readonly CudaProcessInfo[],
  memory: Map<number, MemoryByGpu> | string,
  suspended: GroupResult,
  resumed: GroupResult | undefined,
): string {
  const stepMs = (p: ProcessOutcome | undefined, step: string) => {
    const s = p?.steps.find((r) => r.step === step);
    return s ? ms(s.ms) : "-";
  };
  const result = (p: ProcessOutcome | undefined) => {
    if (!p) return "";
    // A failed process's own rollback, or (rolled-back) all or nothing's.
    const rollback = p.rollback && p.status !== "rolled-back" ? ", rolled back" : "";
    const failed = p.rollback?.ok === false ? ", ROLLBACK FAILED" : "";
    return `${p.status}${failed || rollback}, ${p.state ?? "?"}`;
  };
  const errors = [...suspended.processes, ...(resumed?.processes ?? [])]
    .flatMap((p) => [p.error, p.rollback?.error].filter((e) => e !== undefined))
    .map((e) => `  ${e.message}`);
  return [
    table(
      [
        { title: "pid" },
        { title: "command" },
        { title: "GPU memory", align: "right" },
        { title: "lock (ms)", align: "right" },
        { title: "checkpoint (ms)", align: "right" },
        ...(resumed
          ? [{ title: "restore (ms)", align: "right" as const }, {
            title: "unlock (ms)",
            align: "right" as const,
          }]
          : []),
        { title: "result" },
      ],
      found.map((info) => {
        const s = suspended.processes.find((p) => p.pid === info.pid);
        const r = resumed?.processes.find((p) => p.pid === info.pid);
        return [
          String(info.pid),
          info.command ?? "",
          memoryText(memory, info.pid),
          stepMs(s, "lock"),
          stepMs(s, "checkpoint"),
          ...(resumed ? [stepMs(r, "restore"), stepMs(r, "unlock")] : []),
          result(r ?? s),
        ];
      }),
    ),
    ...errors,
  ].join("\n");
}
