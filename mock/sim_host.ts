// The simulated machine as a host (`sim.host`), as Linux gives `/proc` and NVML, in no time.

import type { HostProcesses, PidUse } from "../core/host.ts";
import { ncclRank, sameProcess } from "../core/host.ts";
import type { MachineView, SimulatedProcess } from "./sim_process.ts";
import type { NcclRank } from "./fields.ts";

/** The simulated machine `m` as a host; its `self` is the machine's `selfPid`. */
export function simulatedHost(m: MachineView): HostProcesses {
  const why = "(simulated: spawned with inspectable: false)";
  const scanned = ({ pid, command, inspectable, libcudaLoaded }: SimulatedProcess) =>
    inspectable
      ? { pid, command, cudaLibrary: libcudaLoaded }
      : { pid, command, notInspectable: `permission denied reading /proc/${pid}/maps ${why}` };
  const entry = ({ pid, parent, threads, command }: SimulatedProcess) => {
    return { pid, parent, threads: [...threads], command };
  };
  return {
    kind: "simulated",
    get self() {
      return m.selfPid;
    },
    heldRecords: m.heldRecords,
    scan: () => m.instantly("list processes", () => m.processes.map(scanned)),
    gpuMemory: () =>
      m.instantly("read GPU memory", () => ({
        byPid: new Map(
          m.processes.map((p) => [p.pid, p.gpuMemoryMiB] as const)
            .filter(([, mib]) => Object.keys(mib).length > 0),
        ),
        freeMiB: new Map(m.gpus.map((g) => [g.uuid, g.freeMiB])),
        totalMiB: new Map(m.gpus.map((g) => [g.uuid, g.memoryMiB])),
      })),
    identify: (id) =>
      m.instantly("identify a process", () => {
        const p = m.process(id);
        return p ? { pid: p.pid, start: p.start } : undefined;
      }),
    // What of a process outlasts a dump and restore: `<pid>:<command line>`; undefined if gone.
    lastingMark: (process) =>
      m.instantly("read what outlasts a restore", () => {
        const p = m.process(process.pid);
        return p && sameProcess(process, p) ? `${p.pid}:${p.command}` : undefined;
      }),
    // There are no groups nor sessions.
    pidsInUse: (ids) =>
      m.instantly("look up pids", () =>
        ids.flatMap((id): PidUse[] => {
          const p = m.process(id);
          return p ? [{ id, holder: p.pid, as: p.pid === id ? "pid" : "thread" }] : [];
        })),
    processTree: (root) => m.instantly("read a process tree", () => m.tree(root)?.map(entry)),
    // The sign of an import of CUDA IPC memory, as the Linux host reads it (none for `fd`).
    gpuImport: (pid) =>
      m.instantly("read a process's maps", () => {
        const rank = m.process(pid)?.nccl;
        const found = rank && ncclRank("libnccl.so.2", environOf(rank));
        if (found) return found;
        const imported = m.process(pid)?.ipcImport;
        if (!imported || imported.through === "fd") return undefined;
        const file = `cuda.shm.0.${imported.exporter.toString(16)}.1`;
        const sign = `it maps /dev/shm/${file}, named after process ${imported.exporter}`;
        return { exporter: imported.exporter, sign };
      }),
    // Its CPU time: a ms for each time it was let go on after a stop (SIGCONT).
    cpuTime: (pid) =>
      m.instantly("read a process's CPU time", () => {
        const p = m.process(pid);
        return p && !p.exited ? p.wakes * 1_000_000 : undefined;
      }),
    stopped: (pid) => m.instantly("read a process's state", () => m.process(pid)?.stopped === true),
    // Hostname `simulated`, a simulated kernel, and driver 580.159.04 for version 13.0.
    facts: () =>
      m.instantly("read the machine's facts", () => {
        const release = m.version === 13000 ? { driverRelease: "580.159.04" } : {};
        return { hostname: "simulated", kernel: "6.8.0-simulated", ...release };
      }),
  };
}

/** The environment torchrun gives such a rank, as /proc/PID/environ holds it. */
function environOf({ localRanks, p2pDisable, shmDisable }: NcclRank): string {
  const off = (yes: boolean) => (yes ? "1" : "0");
  return `LOCAL_WORLD_SIZE=${localRanks}\0NCCL_P2P_DISABLE=${off(p2pDisable)}\0` +
    `NCCL_SHM_DISABLE=${off(shmDisable)}\0`;
}
