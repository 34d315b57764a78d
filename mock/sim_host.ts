// The simulated machine as a host (`sim.host`), as Linux gives `/proc` and NVML, in no time.

import type {
  GpuImport,
  GpuMemoryReport,
  HostProcesses,
  MachineFacts,
  MemoryHeldRecords,
  PidUse,
  ProcessIdentity,
  ScannedProcess,
  TreeProcess,
} from "../core/host.ts";
import { sameProcess } from "../core/host.ts";
import type { MachineView, SimulatedProcess } from "./sim_process.ts";

/** The machine's facts; the driver release of the timings' version (13.0), none for others. */
const SIMULATED_HOST = { hostname: "simulated", kernel: "6.8.0-simulated" } as const;
const SIMULATED_DRIVER_RELEASES: Readonly<Record<number, string>> = { 13000: "580.159.04" };

/** The simulated machine as a host; its `self` is the machine's `selfPid`. @internal */
export class SimulatedHost implements HostProcesses {
  /** Always `"simulated"`. */
  readonly kind: string = "simulated";
  readonly #machine: MachineView;

  /** The host of `machine`. */
  constructor(machine: MachineView) {
    this.#machine = machine;
  }

  /** The machine's `selfPid`. */
  get self(): number | undefined {
    return this.#machine.selfPid;
  }

  /** The records of held GPU memory kept on the machine. */
  get heldRecords(): MemoryHeldRecords {
    return this.#machine.heldRecords;
  }

  /** Every live process. */
  scan(): Promise<readonly ScannedProcess[]> {
    const why = "(simulated: spawned with inspectable: false)";
    const scanned = ({ pid, command, inspectable, libcudaLoaded }: SimulatedProcess) =>
      inspectable
        ? { pid, command, cudaLibrary: libcudaLoaded }
        : { pid, command, notInspectable: `permission denied reading /proc/${pid}/maps ${why}` };
    return this.#machine.instantly("list processes", () => this.#machine.processes.map(scanned));
  }

  /** The GPU memory of every process that holds some, and each GPU's free and total memory. */
  gpuMemory(): Promise<GpuMemoryReport> {
    const { processes, gpus } = this.#machine;
    return this.#machine.instantly("read GPU memory", () => ({
      byPid: new Map(
        processes.map((p) => [p.pid, p.gpuMemoryMiB] as const)
          .filter(([, mib]) => Object.keys(mib).length > 0),
      ),
      freeMiB: new Map(gpus.map((g) => [g.uuid, g.freeMiB])),
      totalMiB: new Map(gpus.map((g) => [g.uuid, g.memoryMiB])),
    }));
  }

  /** The process that has `id` as its pid or a thread id, with its start number. */
  identify(id: number): Promise<ProcessIdentity | undefined> {
    return this.#machine.instantly("identify a process", () => {
      const p = this.#machine.process(id);
      return p ? { pid: p.pid, start: p.start } : undefined;
    });
  }

  /** What of a process outlasts a dump and restore: `<pid>:<command line>`; undefined if gone. */
  lastingMark(process: ProcessIdentity): Promise<string | undefined> {
    return this.#machine.instantly("read what outlasts a restore", () => {
      const p = this.#machine.process(process.pid);
      return p?.pid === process.pid && sameProcess(process, p)
        ? `${p.pid}:${p.command}`
        : undefined;
    });
  }

  /** Which of `ids` a live process uses as its pid or a thread id (there are no groups). */
  pidsInUse(ids: readonly number[]): Promise<readonly PidUse[]> {
    return this.#machine.instantly("look up pids", () =>
      ids.flatMap((id): PidUse[] => {
        const p = this.#machine.process(id);
        return p ? [{ id, holder: p.pid, as: p.pid === id ? "pid" : "thread" }] : [];
      }));
  }

  /** The tree of `root`: it first, then each descendant after its parent. */
  processTree(root: number): Promise<readonly TreeProcess[] | undefined> {
    const entry = ({ pid, parent, threads, command }: SimulatedProcess) => {
      return { pid, parent, threads: [...threads], command };
    };
    return this.#machine.instantly(
      "read a process tree",
      () => this.#machine.tree(root)?.map(entry),
    );
  }

  /** Hostname `simulated`, a simulated kernel, and driver 580.159.04 for version 13.0. */
  /** The sign of an import of CUDA IPC memory, as the Linux host reads it (none for `fd`). */
  gpuImport(pid: number): Promise<GpuImport | undefined> {
    return this.#machine.instantly("read a process's maps", () => {
      const imported = this.#machine.process(pid)?.ipcImport;
      if (!imported || imported.through === "fd") return undefined;
      const file = `cuda.shm.0.${imported.exporter.toString(16)}.1`;
      return {
        exporter: imported.exporter,
        sign: `it maps /dev/shm/${file}, named after process ${imported.exporter}`,
      };
    });
  }

  /** Its CPU time: a ms for each time it was let go on after a stop (SIGCONT). */
  cpuTime(pid: number): Promise<number | undefined> {
    return this.#machine.instantly("read a process's CPU time", () => {
      const p = this.#machine.process(pid);
      return p && !p.exited ? p.wakes * 1_000_000 : undefined;
    });
  }

  facts(): Promise<MachineFacts> {
    return this.#machine.instantly("read the machine's facts", () => {
      const release = SIMULATED_DRIVER_RELEASES[this.#machine.version];
      return { ...SIMULATED_HOST, ...(release ? { driverRelease: release } : {}) };
    });
  }
}
