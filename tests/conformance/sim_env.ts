/** The conformance environment for the simulated driver. */

import { SimulatedMachine, type SimulatedMachineOptions } from "../../mock/mod.ts";
import type { ConformanceEnv, Target } from "./runner.ts";

/** A fresh simulated machine as a conformance environment. */
export function simulatedEnv(options: SimulatedMachineOptions = {}): ConformanceEnv & {
  sim: SimulatedMachine;
} {
  const sim = new SimulatedMachine(options);
  return {
    name: "simulated",
    machine: sim,
    sim,
    spawn({ cuda, memoryMiB }): Promise<Target> {
      const p = cuda ? sim.spawn({ memoryMiB }) : sim.spawn({ cuda });
      // Contents to lose, as the real target fills its memory with a pattern.
      if (cuda && memoryMiB > 0) {
        void p.write(0, Uint8Array.from({ length: 4096 }, (_, i) => (i * 31 + p.pid) & 255));
      }
      return Promise.resolve({
        pid: p.pid,
        threadId: p.threads[p.threads.length - 1],
        threadIds: () => Promise.resolve([...p.threads]),
        launchKernel(ms: number) {
          // Launched, not awaited: nobody waits on the kernel, so it moves no virtual time by
          // itself, and its end with the process is no unhandled rejection.
          void p.launch(ms);
          return Promise.resolve();
        },
        memoryHash: () => p.read(0, 0).then(() => p.memoryChunkedSha256()),
        exit() {
          p.exit();
          return Promise.resolve();
        },
      });
    },
    missingPid: () => Promise.resolve(999_999),
    gpuUuids: () => Promise.resolve(sim.gpus.map((g) => g.uuid)),
    fillGpu(leaveMiB: number) {
      // Each filler takes a CUDA context besides the memory it allocates.
      const fillers = sim.gpus
        .filter((g) => g.freeMiB > leaveMiB + g.contextMiB)
        .map((g) => sim.spawn({ gpu: g.index, memoryMiB: g.freeMiB - leaveMiB - g.contextMiB }));
      return Promise.resolve(() => {
        for (const f of fillers) f.exit();
        return Promise.resolve();
      });
    },
    sleep: (ms: number) => sim.sleep(ms),
    now: () => sim.now(),
  };
}
