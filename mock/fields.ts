// What makes a simulated process, as the state file and criu's images keep it, and the reader of
// the fields that only some processes have.

import type { StrictReader } from "../core/json.ts";
import { MAX_PID } from "../core/options.ts";

/** What makes a process: the fields the state file's snapshot and criu's image extend. */
export interface ProcessFields {
  pid: number;
  parent: number;
  threads: number[];
  command: string;
  cuda: boolean;
  libcuda: boolean;
  inspectable: boolean;
  memoryMiB: number;
  /** GPU memory it opened from another process through CUDA IPC, where it did. */
  ipcImport?: IpcImport;
  /** A TCP socket it holds, where it holds one. */
  tcp?: "listening" | "established";
}

/**
 * GPU memory a process opened from another through CUDA IPC, as measured on driver 580 (one H200,
 * docs/DRIVER.md): `legacy` (`cudaIpcOpenMemHandle`, PyTorch's tensors) maps the exporter's
 * `cuda.shm` file; `cumem` (PyTorch's expandable segments) does too; `fd` (cuMem through a file
 * descriptor, NCCL's path) leaves no sign. Each checkpoints, then never restores.
 */
export interface IpcImport {
  /** The exporter's pid. */
  readonly exporter: number;
  /** How it opened the memory. */
  readonly through: "legacy" | "cumem" | "fd";
}

/** Each way of opening another process's memory ({@link IpcImport.through}). */
export const IPC_KINDS = ["legacy", "cumem", "fd"] as const;
/** Each TCP socket a process may hold. */
export const TCP_STATES = ["listening", "established"] as const;

/**
 * The optional fields of a process that the state file and criu's images keep (`ipcImport`, `tcp`),
 * read from `v` (an object already read) strictly; `at` is its path in messages.
 */
export function readMoreFields(
  read: StrictReader,
  v: Record<string, unknown>,
  at: string,
): Pick<ProcessFields, "ipcImport" | "tcp"> {
  const out: Pick<ProcessFields, "ipcImport" | "tcp"> = {};
  const field = (f: string) => at ? `${at}.${f}` : f;
  if (v.ipcImport !== undefined) {
    const o = read.object(v.ipcImport, field("ipcImport"), ["exporter", "through"]);
    const through = read.string(o.through, field("ipcImport.through"));
    if (!(IPC_KINDS as readonly string[]).includes(through)) {
      read.fail(field("ipcImport.through"), '"legacy", "cumem" or "fd"', through);
    }
    out.ipcImport = {
      exporter: read.integer(o.exporter, field("ipcImport.exporter"), 1, MAX_PID),
      through: through as IpcImport["through"],
    };
  }
  if (v.tcp !== undefined) {
    if (v.tcp !== "listening" && v.tcp !== "established") {
      read.fail(field("tcp"), '"listening" or "established"', v.tcp);
    }
    out.tcp = v.tcp;
  }
  return out;
}
