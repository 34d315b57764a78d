/**
 * Runs a parsed `cuda-checkpoint` command on its machine: opens the driver the command needs,
 * hands the command to its module (loaded only then), saves the simulated machine after it, and
 * closes what it opened.
 *
 * @module
 */

import type { Command, OperationCommand } from "./args.ts";
import { type Machine, openMachine } from "./machine.ts";
import type { CliIo } from "./io.ts";
import { Printer } from "./report.ts";

/** A command that works on a machine: anything but help and version. */
export type MachineCommand = Exclude<Command, { kind: "help" } | { kind: "version" }>;

/** Runs the command; resolves to the exit code. */
export async function run(command: MachineCommand, io: CliIo): Promise<number> {
  const print = new Printer(io);
  // One process and no progress line to draw meanwhile (off a terminal, or a query, which shows
  // none): the driver's calls may block this thread, and no worker thread need start.
  const callingThread = command.kind === "operation" && command.targets !== "all" &&
    command.targets.length === 1 &&
    (command.operation === "get-state" || command.operation === "get-restore-tid" ||
      !print.terminal);
  let machine: Machine;
  try {
    machine = await openMachine(io, {
      simulate: command.simulate,
      callingThread,
      fresh: command.kind === "reset",
    });
  } catch (error) {
    print.err(`cuda-checkpoint: ${error instanceof Error ? error.message : String(error)}`);
    if (error instanceof Error && error.name === "DriverLoadError") {
      print.more("without a GPU, --simulate runs the same commands on a simulated machine");
    }
    return 1;
  }
  let code = 1;
  try {
    if (machine.simulated) {
      print.more(`simulated machine, kept in ${machine.simulated.path}`);
    }
    code = await dispatch(command, machine, print, io);
  } finally {
    try {
      // What the command did to the simulated machine, for the next command.
      await machine.simulated?.save();
    } catch (error) {
      print.err(`cuda-checkpoint: ${error instanceof Error ? error.message : String(error)}`);
      code = 1;
    } finally {
      await machine.close();
    }
  }
  return code;
}

async function dispatch(
  command: MachineCommand,
  machine: Machine,
  print: Printer,
  io: CliIo,
): Promise<number> {
  switch (command.kind) {
    case "operation":
      return await operate(command, machine, print, io);
    case "list":
      return await (await import("./list.ts")).runList(machine, print, command.json);
    case "snapshot":
    case "restore-snapshot":
    case "inspect":
      return await (await import("./snapshot.ts")).runSnapshotCommand(command, machine, print, io);
    default:
      return simulator(command, machine, print);
  }
}

/**
 * An operation on one pid (NVIDIA's output exactly; an interrupt ends the program, as it ends
 * NVIDIA's) or several (a line each; an interrupt stops the group and brings back what it changed).
 */
async function operate(
  command: OperationCommand,
  machine: Machine,
  print: Printer,
  io: CliIo,
): Promise<number> {
  if (command.targets !== "all" && command.targets.length === 1) {
    const pid = command.targets[0];
    const op = command.operation;
    if (op === "get-state" || op === "get-restore-tid" || pid === 0) {
      // One driver call: nothing of the library's process handling is loaded.
      const { runQuery } = await import("./query.ts");
      return await runQuery(op, pid, machine.driver, print, command.json);
    }
    const { runOne } = await import("./single.ts");
    return await runOne({ ...command, operation: op }, pid, machine.driver, print);
  }
  const { runMany } = await import("./many.ts");
  return await runMany(command, machine, print, io.interrupts);
}

/** `--simulate spawn`, `kill` and `reset`. */
async function simulator(
  command: Extract<MachineCommand, { kind: "spawn" | "kill" | "reset" }>,
  machine: Machine,
  print: Printer,
): Promise<number> {
  const sim = machine.simulated!;
  try {
    switch (command.kind) {
      case "spawn": {
        const gpus = command.gpus;
        const pid = sim.spawn({
          ...(command.memoryMiB !== undefined ? { memoryMiB: command.memoryMiB } : {}),
          ...(gpus !== undefined ? { gpu: gpus.length === 1 ? gpus[0] : gpus } : {}),
          ...(command.command !== undefined ? { command: command.command } : {}),
        });
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
    print.err(`cuda-checkpoint: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
}
