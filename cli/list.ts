/**
 * `cuda-checkpoint list` (or `ps`): the CUDA processes of the machine (`listCudaProcesses`), as a
 * table or as JSON lines.
 *
 * @module
 */

import { listCudaProcesses } from "../mod.ts";
import type { Machine } from "../driver.ts";
import { type Printer, warnUninspectable } from "./report.ts";

/** Prints the listing; resolves to the exit code. */
export async function runList(machine: Machine, print: Printer, json: boolean): Promise<number> {
  const listing = await listCudaProcesses({ machine }).catch((error) => print.error(error));
  if (!listing) return 1;
  if (json) {
    // GPU memory in MiB by GPU UUID (`"unknown"` without NVML); an unknown restore thread or
    // command line left out (undefined).
    for (const { pid, state, restoreThreadId, gpuMemory, command } of listing.processes) {
      print.json({ pid, state, restoreThreadId, gpuMemoryMiB: gpuMemory, command });
    }
  } else {
    // A header, then a row each, each column as wide as its widest cell; GPU memory in MiB, with
    // each GPU's share when there are several.
    const rows = [["PID", "STATE", "RESTORE_TID", "GPU_MEMORY", "COMMAND"]];
    for (const p of listing.processes) {
      const mib = p.gpuMemory === "unknown" ? [] : Object.values(p.gpuMemory);
      const shares = mib.length > 1 ? ` (${mib.join("+")})` : "";
      const total = `${mib.reduce((a, b) => a + b, 0)} MiB${shares}`;
      const memory = p.gpuMemory === "unknown" ? "unknown" : total;
      rows.push([`${p.pid}`, p.state, `${p.restoreThreadId ?? "-"}`, memory, p.command ?? "-"]);
    }
    const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
    for (const row of rows) {
      print.out(row.map((cell, i) => i === 4 ? cell : cell.padEnd(widths[i])).join("  ").trimEnd());
    }
  }
  warnUninspectable(listing.uninspectable, print);
  if (listing.gpuMemoryUnknown) print.more(`GPU memory is unknown: ${listing.gpuMemoryUnknown}`);
  return 0;
}
