// What the simulated machine's records say a process held when it was checkpointed (the room
// check's records, which every CudaProcess on the simulator shares).
import type { SimulatedMachine } from "../../mock/mod.ts";

/** MiB by GPU UUID that `pid` held at its checkpoint, as recorded; `undefined` where none is. */
export function heldWhenCheckpointed(
  sim: SimulatedMachine,
  pid: number,
): Readonly<Record<string, number>> | undefined {
  return sim.heldRecords.liveEntries().find((r) => r.process.pid === pid)?.heldMiB;
}
