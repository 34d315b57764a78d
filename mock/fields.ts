// What makes a simulated process, as the state file and criu's images keep it, and their one
// reader of it.

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
  /** The NCCL rank it is, where it is one. */
  nccl?: NcclRank;
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

/** An NCCL rank, as its environment tells (`SpawnOptions.nccl`). */
export interface NcclRank {
  /** The ranks of its job on its host. */
  readonly localRanks: number;
  /** Whether NCCL's P2P transport is off (`NCCL_P2P_DISABLE=1`). */
  readonly p2pDisable: boolean;
  /** Whether NCCL's shared-memory transport is off (`NCCL_SHM_DISABLE=1`). */
  readonly shmDisable: boolean;
}

/** Whether a rank shares memory with another on its host, so that on 580 it never restores. */
export const sharesMemory = (n: NcclRank | undefined): boolean =>
  n !== undefined && n.localRanks > 1 && !(n.p2pDisable && n.shmDisable);

/** Each way of opening another process's memory ({@link IpcImport.through}). */
export const IPC_KINDS = ["legacy", "cumem", "fd"] as const;
/** The keys of an {@link NcclRank}. */
export const NCCL_KEYS = ["localRanks", "p2pDisable", "shmDisable"] as const;
/** Each TCP socket a process may hold. */
export const TCP_STATES = ["listening", "established"] as const;

/**
 * A process's fields read strictly from `v` (an object already read), `at` its path in messages:
 * its pid as the caller read it, each thread id up to `maxId`.
 */
export function readFields(
  read: StrictReader,
  v: Record<string, unknown>,
  at: string,
  pid: number,
  maxId: number,
): ProcessFields {
  const field = (f: string) => at ? `${at}.${f}` : f;
  const threads = read.array(v.threads, field("threads"), 1, 100_002)
    .map((t, i) => read.integer(t, field(`threads[${i}]`), 1, maxId));
  const parent = read.integer(v.parent, field("parent"), 0, MAX_PID);
  const cuda = read.boolean(v.cuda, field("cuda"));
  const libcuda = read.boolean(v.libcuda, field("libcuda"));
  const lib = `${field("libcuda")} must be true for a CUDA process`;
  if (cuda && !libcuda) read.refuse(field("libcuda"), lib);
  const memoryMiB = read.amount(v.memoryMiB, field("memoryMiB"));
  if (!cuda && memoryMiB) read.fail(field("memoryMiB"), "0 for a process without CUDA", memoryMiB);
  const command = read.string(v.command, field("command"), 1 << 20);
  const inspectable = read.boolean(v.inspectable, field("inspectable"));
  let ipcImport: IpcImport | undefined;
  if (v.ipcImport !== undefined) {
    const o = read.object(v.ipcImport, field("ipcImport"), ["exporter", "through"]);
    const through = read.choice(o.through, field("ipcImport.through"), IPC_KINDS);
    const exporter = read.integer(o.exporter, field("ipcImport.exporter"), 1, MAX_PID);
    ipcImport = { exporter, through };
  }
  const rank = v.nccl === undefined ? undefined : read.object(v.nccl, field("nccl"), NCCL_KEYS);
  const flag = (k: string) => read.boolean(rank![k], field(`nccl.${k}`));
  const nccl = rank && {
    localRanks: read.integer(rank.localRanks, field("nccl.localRanks"), 1, 1 << 20),
    ...{ p2pDisable: flag("p2pDisable"), shmDisable: flag("shmDisable") },
  };
  const tcp = v.tcp === undefined ? undefined : read.choice(v.tcp, field("tcp"), TCP_STATES);
  const more = { ...ipcImport && { ipcImport }, ...nccl && { nccl }, ...tcp && { tcp } };
  return { pid, parent, threads, command, cuda, libcuda, inspectable, memoryMiB, ...more };
}
