/**
 * `cuda-checkpoint list` (or `ps`): the CUDA processes of the machine, as a table or as JSON lines,
 * from `listCudaProcesses` (`/proc` and NVML on Linux, the simulator's own processes with
 * `--simulate`).
 *
 * @module
 */

import { listCudaProcesses } from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { CudaProcessInfo } from "../types.ts";
import { type Printer, warnUninspectable } from "./report.ts";

/**
 * A listed process as `--json` gives it: its state, restore thread id (where the driver gave one),
 * GPU memory in MiB by GPU UUID (`"unknown"` where NVML is missing), command line (where it could
 * be read).
 */
export interface ListedProcess {
  readonly pid: number;
  readonly state: CudaProcessInfo["state"];
  readonly restoreThreadId?: number;
  readonly gpuMemoryMiB: CudaProcessInfo["gpuMemory"];
  readonly command?: string;
}

/** Prints the listing; resolves to the exit code. */
export async function runList(machine: Machine, print: Printer, json: boolean): Promise<number> {
  const listing = await listCudaProcesses({ machine })
    .catch((error) => print.error(error));
  if (!listing) return 1;
  const rows: ListedProcess[] = listing.processes.map((p) => ({
    pid: p.pid,
    state: p.state,
    ...(p.restoreThreadId !== undefined ? { restoreThreadId: p.restoreThreadId } : {}),
    gpuMemoryMiB: p.gpuMemory,
    ...(p.command !== undefined ? { command: p.command } : {}),
  }));
  if (!json) printTable(rows, print);
  else for (const row of rows) print.json(row);
  warnUninspectable(listing.uninspectable, print);
  if (listing.gpuMemoryUnknown) print.more(`GPU memory is unknown: ${listing.gpuMemoryUnknown}`);
  return 0;
}

/** The table: a header, then a row per process, columns as wide as their widest cell. */
function printTable(rows: readonly ListedProcess[], print: Printer): void {
  const header = ["PID", "STATE", "RESTORE_TID", "GPU_MEMORY", "COMMAND"];
  const cells = rows.map((r) => [
    String(r.pid),
    r.state,
    r.restoreThreadId === undefined ? "-" : String(r.restoreThreadId),
    memoryText(r.gpuMemoryMiB),
    r.command ?? "-",
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  for (const line of [header, ...cells]) {
    print.out(
      line.map((cell, i) => i === line.length - 1 ? cell : cell.padEnd(widths[i])).join("  ")
        .trimEnd(),
    );
  }
}

/** GPU memory as the table shows it: the total in MiB, with each GPU's share when there are several. */
function memoryText(memory: CudaProcessInfo["gpuMemory"]): string {
  if (memory === "unknown") return "unknown";
  const values = Object.values(memory);
  const total = values.reduce((a, b) => a + b, 0);
  return values.length > 1 ? `${total} MiB (${values.join("+")})` : `${total} MiB`;
}
