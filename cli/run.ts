/**
 * Runs a parsed `cuda-checkpoint` command on its machine: opens the machine the command needs
 * (the one given to `main()`, the simulated machine of the state file with `--simulate`, or this
 * machine: libcuda alone for a query of one pid, which loads nothing else), hands the command to
 * its module (loaded only then), saves the simulated machine after it, and closes what it opened.
 *
 * @module
 */

import type { Command } from "./args.ts";
import type { CliIo } from "./io.ts";
import type { Machine } from "../driver.ts";
import type { SavedMachine } from "./simulate.ts";
import { Printer, printReports } from "./report.ts";

/** A command that works on a machine: anything but help and version. */
export type MachineCommand = Exclude<Command, { kind: "help" } | { kind: "version" }>;

/** Runs the command; resolves to the exit code. */
export async function run(command: MachineCommand, io: CliIo): Promise<number> {
  const op = command.kind === "operation" ? command : undefined;
  const one = op && op.targets !== "all" && op.targets.length === 1 ? op.targets[0] : undefined;
  // A query of one pid (or anything of pid 0, which NVIDIA's utility hands to the driver as it is)
  // is one driver call: nothing of the library's process handling is loaded.
  const query = one !== undefined &&
    (op!.operation === "get-state" || op!.operation === "get-restore-tid" || one === 0);
  // One process and no progress line to draw meanwhile (off a terminal, or a query, which shows
  // none): the driver's calls may block this thread, and no worker thread need start.
  const callingThread = query || (one !== undefined && io.isTerminal !== true);
  if (command.kind === "inspect" && !command.simulate) {
    // It reads the file system (or the given machine's store) only: nothing here is opened.
    const { runInspect } = await import("./disk.ts");
    return await runInspect(command, io.machine, new Printer(io));
  }
  let opened: CliMachine;
  try {
    opened = await openCliMachine(io, command, callingThread, query);
  } catch (error) {
    const print = new Printer(io);
    if (error instanceof Error && error.name === "DriverLoadError") {
      for (const line of noDriver(error).split("\n")) print.err(line);
    } else print.error(error);
    return 1;
  }
  const { machine, simulated } = opened;
  const print = new Printer(io);
  let code = 1;
  try {
    if (simulated) print.more(`simulated machine, kept in ${simulated.path}`);
    switch (command.kind) {
      case "operation":
        if (query) {
          const { query: ask } = await import("./query.ts");
          const report = await ask(command.operation, one!, machine.driver);
          code = printReports([report], print, command.json, false);
        } else if (one !== undefined) {
          code = await (await import("./single.ts")).runOne(command, one, machine, print);
        } else {
          const { runMany } = await import("./many.ts");
          code = await runMany(command, machine, print, io.interrupts, simulated !== undefined);
        }
        break;
      case "list":
        code = await (await import("./list.ts")).runList(machine, print, command.json);
        break;
      case "snapshot":
      case "restore-snapshot":
      case "inspect":
      case "recover":
        code = await (await import("./disk.ts")).runDiskCommand(
          command,
          machine,
          print,
          io,
          simulated !== undefined,
        );
        break;
      default:
        code = await simulator(command, simulated!, print);
    }
  } finally {
    try {
      // What the command did to the simulated machine, for the next command.
      await simulated?.save();
    } catch (error) {
      print.error(error);
      code = 1;
    } finally {
      await opened.close();
    }
  }
  return code;
}

/**
 * The library's message for a libcuda that could not be loaded, for the command line: the paths
 * tried and what to check, with `--simulate` where the library advises its simulator, and without
 * Deno's permission flags, which are the program's to have (a failure for want of them says so
 * in the reason of each path).
 */
function noDriver(error: Error): string {
  const simulate = "Without a GPU, --simulate runs the same commands on a simulated machine.";
  const lines = error.message.split("\n")
    .filter((line) => !/^(Deno needs --allow-ffi|\(On Deno, run with --allow-ffi)/.test(line))
    .map((line) =>
      line.replace(/On a machine without a GPU, pass a SimulatedMachine[^.]*\./, simulate)
    );
  if (!lines.some((line) => line.includes(simulate))) lines.push(simulate);
  return `cuda-checkpoint: ${lines.join("\n")}`;
}

/** `--simulate spawn`, `kill` and `reset`. */
async function simulator(
  command: Extract<MachineCommand, { kind: "spawn" | "kill" | "reset" }>,
  sim: SavedMachine,
  print: Printer,
): Promise<number> {
  try {
    switch (command.kind) {
      case "spawn": {
        const { memoryMiB, gpus: gpu, command: line } = command;
        const pid = sim.spawn({ memoryMiB, gpu, command: line });
        if (command.json) print.json({ pid, spawned: true });
        else print.out(String(pid));
        return 0;
      }
      case "kill": {
        const killed = sim.kill(command.pid);
        if (command.json) print.json({ pid: command.pid, killed });
        if (!killed) print.err(`No simulated process has pid ${command.pid}`);
        return killed ? 0 : 1;
      }
      case "reset":
        await sim.reset();
        if (command.json) print.json({ reset: true, path: sim.path });
        return 0;
    }
  } catch (error) {
    print.error(error);
    return 1;
  }
}

/**
 * Opens the machine the command works on. `callingThread`: the driver's calls are made on this
 * thread (no worker threads on Bun); `driverOnly`: the driver alone, which loads nothing else.
 */
async function openCliMachine(
  io: CliIo,
  { simulate, kind }: MachineCommand,
  callingThread: boolean,
  driverOnly: boolean,
): Promise<CliMachine> {
  if (simulate) {
    const { openSimulatedMachine } = await import("./simulate.ts");
    // `--simulate reset` starts a new machine without reading the state file.
    const simulated = await openSimulatedMachine({ env: { ...io.env }, fresh: kind === "reset" });
    return { machine: simulated.machine, simulated, close: () => simulated.close() };
  }
  if (io.machine) return { machine: io.machine, close: () => Promise.resolve() };
  if (driverOnly) {
    const { openNativeDriver } = await import("../ffi/native.ts");
    const driver = await openNativeDriver({ callingThread });
    return { machine: { driver }, close: () => driver[Symbol.asyncDispose]() };
  }
  const { openMachine } = await import("../os/this_machine.ts");
  const machine = await openMachine({
    callingThread,
    ...(io.env ? { criu: { env: io.env } } : {}),
  });
  return { machine, close: () => machine.close() };
}

/**
 * The machine a command works on, the simulated machine of the state file with `--simulate`, and
 * `close()`, which lets go of what was opened here (save the simulated machine first; a machine
 * given to `main()` is the caller's).
 */
interface CliMachine {
  readonly machine: Machine;
  readonly simulated?: SavedMachine;
  close(): Promise<void>;
}
