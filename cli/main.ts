/**
 * `cuda-checkpoint`: the command line of `@ckpt/cuda`, a stand-in for NVIDIA's utility (driver 580)
 * that CRIU's CUDA plugin can run from `PATH`, with more: several pids, `--all`, `list`, `--json`,
 * progress, snapshots to disk and `--simulate`. Run as a program, it exits with the code of
 * {@link main}; imported, {@link main} runs one command line on the machine and output given. It
 * loads only its parser until the command is known (libcuda alone for a query), to start fast.
 *
 * @example
 * ```ts
 * import { main } from "@ckpt/cuda/cli";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 *
 * const sim = new SimulatedMachine();
 * const { pid } = sim.spawn({ memoryMiB: 1024 });
 * let out = "";
 * const io = { machine: sim, stdout: (t: string) => out += t, stderr: () => {} };
 * await main(["--toggle", "--pid", String(pid)], io); // 0
 * await main(["--get-state", "--pid", String(pid)], io); // 0, and out is "checkpointed\n"
 * ```
 *
 * @module
 */

import { parseCommandLine, wantsJson } from "./args.ts";
import { type Command, UsageError } from "./command.ts";
import { type CliIo, escapeControls, internalError, programIo, watchInterrupts } from "./io.ts";
import type { Machine } from "../driver.ts";
import type { Printer } from "./report.ts";
import type { SavedMachine } from "./simulate.ts";
import { VERSION } from "../core/version.ts";

export type { CliIo, Interrupts } from "./io.ts";

/**
 * Runs one `cuda-checkpoint` command line (the arguments after the program's name); resolves to
 * its exit code: 0 when everything asked succeeded, 128 + the signal's number when interrupted
 * (130, 143, 129; one pid on a terminal raises the signal instead), 1 otherwise. Never rejects:
 * bad input is its line on stderr, then NVIDIA's help (for NVIDIA's operations) or a line pointing
 * at `--help`; an unexpected error is one line. No control character of what it writes (a
 * process's command line, say) reaches a terminal.
 */
export async function main(args: readonly string[], io: CliIo): Promise<number> {
  const say = (text: string) => io.stderr(escapeControls(text));
  try {
    const command = parseCommandLine(args);
    if (command.kind === "help") io.stdout((await import("./help.ts")).helpText());
    else if (command.kind === "version") io.stdout(`cuda-checkpoint (@ckpt/cuda) ${VERSION}\n`);
    else return await run(command, io);
    return 0;
  } catch (error) {
    try {
      if (error instanceof UsageError) {
        const { message, detail, getopt, tail } = error;
        // NVIDIA's shape: getopt's line (where it has one), the message, a blank line, the help.
        if (getopt) say(`${io.programName ?? "cuda-checkpoint"}: ${getopt}\n`);
        say(`${message}\n`);
        // The bad value, on a terminal; always for our own commands, whose lines are not NVIDIA's.
        if (detail && (io.isTerminal || tail)) say(`cuda-checkpoint: ${detail}\n`);
        say(tail ? `${tail}\n` : `\n${(await import("./help.ts")).helpText()}`);
        // With --json, a program reading stdout learns it too.
        const usage = JSON.stringify({ ok: false, error: { message, code: "USAGE", detail } });
        if (wantsJson(args)) io.stdout(escapeControls(`${usage}\n`));
      } else say(internalError(error));
    } catch {
      // Nowhere left to say it: the exit code says it.
    }
    return 1;
  }
}

/** A command that works on a machine: anything but help and version. */
type MachineCommand = Exclude<Command, { kind: "help" } | { kind: "version" }>;

/**
 * Runs a command on its machine: opens the one it needs (the one given to `main()`, the state
 * file's with `--simulate`, or this one: libcuda alone for a query of one pid), hands the command
 * to its module (loaded only then), saves the simulated machine after it, and closes what it
 * opened. Resolves to the exit code.
 */
async function run(command: MachineCommand, io: CliIo): Promise<number> {
  const { Printer, printReports, query } = await import("./report.ts");
  const print = new Printer(io, command.json);
  const op = command.kind === "operation" ? command : undefined;
  const one = op && op.targets !== "all" && op.targets.length === 1 ? op.targets[0] : undefined;
  // One driver call, as query() makes it: nothing of the library's process handling is loaded.
  const oneCall = one !== undefined && (op!.operation.startsWith("get-") || one === 0);
  if (command.kind === "inspect" && !command.simulate) {
    // It reads the file system (or the given machine's store) only: nothing here is opened.
    return await (await import("./disk.ts")).runDiskCommand(command, io.machine, print, io);
  }
  // One process and no live line to draw: the driver's calls may block this thread.
  const opened = await open(command, io, oneCall, oneCall || (one !== undefined && !io.isTerminal))
    .catch((error) => {
      if (error?.name !== "DriverLoadError") return print.error(error, "OPEN");
      const [message, ...more] = noDriver(error), detail = more.join("\n"), name = error.name;
      [`cuda-checkpoint: ${message}`, ...more].forEach((line) => print.err(line));
      const failure = { message, code: "DRIVER_LOAD", name, detail };
      if (command.json) print.json({ ok: false, error: failure });
    });
  if (!opened) return 1;
  const { machine, simulated, close } = opened;
  let code = 1;
  try {
    if (simulated) print.more(`simulated machine, kept in ${simulated.path}`);
    const processes = () => import("./processes.ts");
    if (command.kind === "operation" && oneCall) {
      const report = await query(command.operation, one!, machine.driver);
      code = printReports([report], print, command.json, false);
    } else if (command.kind === "operation" && one !== undefined) {
      const { runOne } = await processes();
      code = await runOne(command, one, machine, print, io.interrupts, simulated);
    } else if (command.kind === "operation") {
      code = await (await processes()).runMany(command, machine, print, io.interrupts);
    } else if (command.kind === "list") {
      code = await (await processes()).runList(machine, print, command.json);
    } else if (command.kind === "spawn" || command.kind === "kill" || command.kind === "reset") {
      code = simulator(command, simulated!, print);
    } else code = await (await import("./disk.ts")).runDiskCommand(command, machine, print, io);
  } finally {
    // What the command did, for the next command (an interrupt meanwhile ends it once saved, 128 +
    // its number; one after the command's own, at once); then what was opened is closed.
    const meanwhile = "the simulated machine is saved first (interrupt again to exit at once)";
    const how = { meanwhile, simulated: true };
    const watch = watchInterrupts(simulated && code < 128 ? io.interrupts : undefined, print, how);
    await (simulated?.save() ?? Promise.resolve()).catch((error) => (print.error(error), code = 1))
      .finally(() => (watch.stop(), close()));
    code = watch.exitCode(code);
  }
  return code;
}

/** The lines of a DriverLoadError's message, its pointer to the simulator made `--simulate`. */
function noDriver(error: Error): string[] {
  const simulate = "Without a GPU, --simulate runs the same commands on a simulated machine.";
  const lines = error.message.split("\n").map((line) =>
    line.replace(/On a machine without a GPU, pass a SimulatedMachine[^.]*\./, simulate)
      .replace(" and leave out libraryPath", "")
  );
  if (!lines.some((line) => line.includes(simulate))) lines.push(simulate);
  return lines;
}

/** `--simulate spawn`, `kill` and `reset`. */
function simulator(
  command: Extract<MachineCommand, { kind: "spawn" | "kill" | "reset" }>,
  sim: SavedMachine,
  print: Printer,
): number {
  try {
    if (command.kind === "spawn") {
      const { memoryMiB, gpus: gpu, command: line, parent } = command;
      const pid = sim.spawn({ memoryMiB, gpu, command: line, parent });
      if (command.json) print.json({ pid, spawned: true });
      else print.out(String(pid));
    } else if (command.kind === "kill") {
      const killed = sim.kill(command.pid);
      if (command.json) print.json({ pid: command.pid, killed });
      if (!killed) print.err(`cuda-checkpoint: no simulated process has pid ${command.pid}`);
      return killed ? 0 : 1;
    } else {
      sim.reset();
      if (command.json) print.json({ reset: true, path: sim.path });
    }
    return 0;
  } catch (error) {
    print.error(error);
    return 1;
  }
}

/** Opens the machine: `driverOnly`, libcuda alone; `callingThread`, no worker threads. */
async function open(
  { simulate, kind }: MachineCommand,
  io: CliIo,
  driverOnly: boolean,
  callingThread: boolean,
): Promise<{ machine: Machine; simulated?: SavedMachine; close(): Promise<void> }> {
  if (simulate) {
    // `--simulate reset` starts a new machine, replacing a state file it need not read whole.
    const { openSimulatedMachine } = await import("./simulate.ts");
    const simulated = await openSimulatedMachine({ env: { ...io.env }, fresh: kind === "reset" });
    return { machine: simulated.machine, simulated, close: () => simulated.close() };
  }
  if (io.machine) return { machine: io.machine, close: () => Promise.resolve() };
  if (driverOnly) {
    const driver = await (await import("../ffi/native.ts")).openNativeDriver({ callingThread });
    return { machine: { driver }, close: () => driver[Symbol.asyncDispose]() };
  }
  const { openMachine } = await import("../os/this_machine.ts");
  const machine = await openMachine({ callingThread, criu: io.env && { env: io.env } });
  return { machine, close: () => machine.close() };
}

if (import.meta.main) {
  const program = programIo();
  await program.exit(await main(program.args, program.io));
}
