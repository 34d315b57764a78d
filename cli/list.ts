/**
 * `cuda-checkpoint list` (or `ps`): the CUDA processes of the machine (`listCudaProcesses`), as a
 * table or as JSON lines.
 *
 * @module
 */

import { listCudaProcesses } from "../mod.ts";
import type { Machine } from "../driver.ts";
import type { CudaProcessInfo } from "../types.ts";
import { type Printer, warnUninspectable } from "./report.ts";

/**
 * A listed process as `--json` gives it: GPU memory in MiB by GPU UUID (`"unknown"` without NVML);
 * the restore thread and command line where known.
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
  const listing = await listCudaProcesses({ machine }).catch((error) => print.error(error));
  if (!listing) return 1;
  const rows: ListedProcess[] = listing.processes.map((p) => ({
    pid: p.pid,
    state: p.state,
    ...(p.restoreThreadId !== undefined ? { restoreThreadId: p.restoreThreadId } : {}),
    gpuMemoryMiB: p.gpuMemory,
    ...(p.command !== undefined ? { command: p.command } : {}),
  }));
  if (json) rows.forEach((row) => print.json(row));
  else {
    // A header, then a row each, each column as wide as its widest cell; GPU memory in MiB, with
    // each GPU's share when there are several.
    const header = ["PID", "STATE", "RESTORE_TID", "GPU_MEMORY", "COMMAND"];
    const cells = rows.map((r) => {
      const mib = r.gpuMemoryMiB === "unknown" ? [] : Object.values(r.gpuMemoryMiB);
      const total = `${mib.reduce((a, b) => a + b, 0)} MiB`;
      return [
        String(r.pid),
        r.state,
        r.restoreThreadId === undefined ? "-" : String(r.restoreThreadId),
        r.gpuMemoryMiB === "unknown"
          ? "unknown"
          : mib.length > 1
          ? `${total} (${mib.join("+")})`
          : total,
        r.command ?? "-",
      ];
    });
    const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
    for (const line of [header, ...cells]) {
      print.out(
        line.map((cell, i) => i === 4 ? cell : cell.padEnd(widths[i])).join("  ").trimEnd(),
      );
    }
  }
  warnUninspectable(listing.uninspectable, print);
  if (listing.gpuMemoryUnknown) print.more(`GPU memory is unknown: ${listing.gpuMemoryUnknown}`);
  return 0;
}
