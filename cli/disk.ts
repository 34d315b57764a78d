/**
 * `snapshot`, `restore-snapshot`, `inspect` and `recover`: whole process trees to disk and back,
 * on this machine's driver and criu, or (`--simulate`) on the simulated machine and its simulated
 * criu; `inspect` (`--verify`: every file's digest) reads only the file system, and `recover`
 * resumes what a snapshot killed outright left suspended.
 *
 * Text output is a line per process and a closing line; `--json` is one object. A failure is one
 * line, `cuda-checkpoint: <subcommand> ...`, saying where every process was left, and exit 1. On
 * a terminal the phase under way is shown on stderr. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the
 * snapshot or restore, which puts back what it changed, and the command exits 128 + the signal's
 * number; a second one exits at once.
 *
 * @module
 */

import type {
  InspectCommand,
  RecoverCommand,
  RestoreSnapshotCommand,
  SnapshotCommand,
} from "./args.ts";
import {
  inspectSnapshotAs,
  recoverSnapshotAs,
  restoreSnapshotAs,
  snapshot,
} from "../api/functions.ts";
import { formatDriverVersion } from "../core/driver.ts";
import { CheckpointError } from "../core/errors.ts";
import { roundMs } from "../core/time.ts";
import type { Machine } from "../driver.ts";
import type { Manifest, SnapshotEvent, SnapshotPhase } from "../snapshot.ts";
import type { CliIo } from "./io.ts";
import { commandMessage, type Printer } from "./report.ts";
import { InterruptWatch } from "./signals.ts";

/** A command of this module. */
type DiskCommand = SnapshotCommand | RestoreSnapshotCommand | InspectCommand | RecoverCommand;

/**
 * Runs `snapshot`, `restore-snapshot`, `inspect` or `recover`; resolves to the exit code (128 + the
 * signal's number where an interrupt stopped it). `simulated`: on the state file's machine.
 */
export async function runDiskCommand(
  command: DiskCommand,
  machine: Machine,
  print: Printer,
  io: CliIo,
  simulated = false,
): Promise<number> {
  if (command.kind === "inspect") return await runInspect(command, machine, print);
  if (command.kind === "recover") return await runRecover(command, machine, print);
  const progress = print.terminal ? phaseLine(print) : undefined;
  const interrupts = watchInterrupts(command, io, print, simulated, progress);
  /** The exit code: the interrupt's, or `code`. */
  const exit = (code: number) => interrupts.exitCode(code);
  const watch = {
    ...("deadlineMs" in command && command.deadlineMs !== undefined
      ? { timeoutMs: command.deadlineMs }
      : {}),
    signal: interrupts.signal,
    ...(progress ? { onProgress: (e: SnapshotEvent) => progress.event(e) } : {}),
  };
  /** Success: the `--json` object (after `ok` and `operation`), or the lines of text. */
  const done = (fields: object, lines: readonly string[]) => {
    progress?.stop();
    if (command.json) print.json({ ok: true, operation: command.kind, ...fields });
    else for (const line of lines) print.out(line);
    return exit(0);
  };
  try {
    switch (command.kind) {
      case "snapshot": {
        const result = await snapshot(command.roots, command.dir, {
          machine,
          leaveRunning: command.leaveRunning,
          job: command.job,
          allowIpcImport: command.allowIpcImport ?? false,
          tcpEstablished: command.tcpEstablished ?? false,
          ...(command.lockTimeoutMs !== undefined ? { lockTimeoutMs: command.lockTimeoutMs } : {}),
          ...watch,
        });
        const m = result.manifest;
        return done({
          dir: result.dir,
          ms: roundMs(result.ms),
          bytes: imageBytes(m),
          leftRunning: m.options.leaveRunning,
          processes: processesOf(m),
        }, [
          ...processLines(m),
          `snapshot in ${result.dir}: ${summary(m)}; suspend ${secs(m.timings.suspendMs)}, ` +
          `dump ${secs(m.timings.dumpMs)}, ${secs(result.ms)} in all; the processes ${
            m.options.leaveRunning ? "keep running" : "were ended"
          }`,
        ]);
      }
      default: { // restore-snapshot
        const result = await restoreSnapshotAs(command.kind, command.dir, {
          machine,
          ...watch,
          ...(command.gpuMapping ? { gpuMapping: command.gpuMapping } : {}),
          checkRoom: command.checkRoom ?? true,
        });
        const m = result.manifest;
        const moved = Object.entries(result.gpuMapping).filter(([a, b]) => a !== b);
        return done({
          dir: result.dir,
          ms: roundMs(result.ms),
          timings: {
            checkMs: roundMs(result.timings.checkMs),
            restoreMs: roundMs(result.timings.restoreMs),
            resumeMs: roundMs(result.timings.resumeMs),
          },
          pids: result.pids,
          gpuMapping: result.gpuMapping,
          processes: processesOf(m),
        }, [
          ...processLines(m),
          `restored from ${result.dir}: ${summary(m)}${
            moved.length > 0 ? `, onto ${moved.map(([, to]) => to).join(", ")}` : ""
          }, in ${secs(result.ms)}`,
        ]);
      }
    }
  } catch (error) {
    progress?.stop();
    return exit(failed(command, print, error, interrupts.signal.reason));
  } finally {
    interrupts.stop();
  }
}

/**
 * Watches the program's interrupts (SIGINT, SIGTERM, SIGHUP) while `command` runs
 * ({@link InterruptWatch}): each erases the progress line first; the first stops the command; a
 * second exits at once, saying what may be left suspended (and, for a snapshot, that `recover`
 * resumes what its trace names).
 */
function watchInterrupts(
  command: SnapshotCommand | RestoreSnapshotCommand,
  io: CliIo,
  print: Printer,
  simulated: boolean,
  progress?: { stop(): void },
): InterruptWatch {
  const kind = command.kind;
  return new InterruptWatch(io.interrupts, print, simulated, {
    subject: kind,
    meanwhile: "it stops, and puts back every process it changed (interrupt again to exit " +
      "without waiting)",
    leftBehind: () => ({
      rest:
        `; processes of the ${kind} may be left suspended: see cuda-checkpoint list${
          simulated ? " --simulate" : ""
        }, and resume each with cuda-checkpoint --toggle --pid PID` + (kind === "snapshot"
          ? `, or all that its trace names with cuda-checkpoint recover ${command.dir}` +
            (simulated ? " --simulate" : "")
          : ""),
    }),
    ...(progress ? { onEach: () => progress.stop() } : {}),
  });
}

/** `inspect`: the manifest, checked against its files, from the machine's store or the disk. */
export async function runInspect(
  command: InspectCommand,
  machine: Machine | undefined,
  print: Printer,
): Promise<number> {
  try {
    const { dir, manifest, verified } = await inspectSnapshotAs(command.kind, command.dir, {
      ...(machine ? { machine } : {}),
      verify: command.verify,
    });
    if (command.json) print.json({ ok: true, operation: command.kind, dir, verified, manifest });
    else {
      for (const line of describe(manifest, dir)) print.out(line);
      print.out(
        verified
          ? `  every file read: each is the file the snapshot wrote (its digest as the manifest says)`
          : `  every file present, private, of its size (--verify reads each and checks its digest)`,
      );
    }
    return 0;
  } catch (error) {
    return failed(command, print, error);
  }
}

/**
 * `recover`: the processes that a snapshot killed outright left suspended (its `in-progress.json`),
 * resumed; what it had written removed.
 */
async function runRecover(command: RecoverCommand, machine: Machine, print: Printer) {
  try {
    const r = await recoverSnapshotAs(command.kind, command.dir, {
      machine,
      checkRoom: command.checkRoom ?? true,
    });
    if (command.json) {
      print.json({ ok: true, operation: command.kind, ...r });
      return 0;
    }
    const list = (pids: readonly number[]) => pids.length > 0 ? pids.join(", ") : "none";
    print.out(`resumed: ${list(r.resumed)}`);
    if (r.gone.length > 0) {
      print.out(`gone (ended, or the pid is another process's): ${list(r.gone)}`);
    }
    print.out(
      r.complete
        ? `the snapshot in ${r.dir} is complete, and kept; its trace was removed`
        : `removed what the interrupted snapshot had written in ${r.dir}`,
    );
    return 0;
  } catch (error) {
    return failed(command, print, error);
  }
}

/**
 * A failure: the `--json` object where asked, and the error's line, which names the subcommand
 * (each is run under its own name; or it says that it stopped, where the error is the interrupt,
 * `abort`, itself); exit code 1.
 */
function failed(command: DiskCommand, print: Printer, error: unknown, abort?: unknown): number {
  const message = error === abort && abort !== undefined
    ? `${command.kind} stopped: ${commandMessage(error)}`
    : commandMessage(error);
  if (command.json) {
    print.json({
      ok: false,
      operation: command.kind,
      dir: command.dir,
      error: {
        message,
        ...(error instanceof CheckpointError ? { code: error.code } : {}),
        ...(error instanceof Error ? { name: error.name } : {}),
        ...(error instanceof Error && "log" in error && error.log ? { log: error.log } : {}),
      },
    });
  }
  print.err(`cuda-checkpoint: ${message}`);
  return 1;
}

/** Each process of the snapshot, for --json. */
function processesOf(m: Manifest) {
  return m.trees.flatMap((t) =>
    t.processes.map(({ pid, command, cuda }) => ({
      pid,
      tree: t.root,
      ...(command ? { command } : {}),
      ...(cuda
        ? { cuda: { state: cuda.state, gpuMemoryMiB: cuda.gpuMemoryMiB ?? "unknown" } }
        : {}),
    }))
  );
}

/** A line per process: pid, CUDA state and GPU memory (or "-"), command. */
function processLines(m: Manifest): string[] {
  return m.trees.flatMap((t) =>
    t.processes.map((p) => {
      const cuda = p.cuda
        ? `${p.cuda.state} ${
          p.cuda.gpuMemoryMiB ? `${Math.round(mibOf(p))} MiB` : "(memory unknown)"
        }`
        : "no CUDA";
      return `${p.pid} ${cuda}${p.command ? ` ${p.command}` : ""}`;
    })
  );
}

function summary(m: Manifest): string {
  const all = m.trees.flatMap((t) => t.processes);
  const cuda = all.filter((p) => p.cuda);
  const mib = cuda.reduce((sum, p) => sum + mibOf(p), 0);
  return `${plural(m.trees.length, "tree")}, ${
    plural(all.length, "process", "processes")
  } (${cuda.length} with CUDA, ${Math.round(mib)} MiB of GPU memory), ${
    gb(imageBytes(m))
  } of images`;
}

/** A process's GPU memory in MiB, over its GPUs (0 where unknown). */
function mibOf(p: Manifest["trees"][number]["processes"][number]): number {
  return Object.values(p.cuda?.gpuMemoryMiB ?? {}).reduce((a, b) => a + b, 0);
}

function imageBytes(m: Manifest): number {
  return m.files.reduce((sum, f) => sum + f.bytes, 0);
}

/** `inspect`'s text: the manifest, readably. */
function describe(m: Manifest, dir: string): string[] {
  const { driver, engine, tool } = m;
  return [
    `snapshot ${dir} (${m.format})`,
    `  taken ${m.createdAt} on ${m.host.hostname} (kernel ${m.host.kernel})`,
    `  driver CUDA ${formatDriverVersion(driver.cudaVersion)}${
      driver.release ? ` (${driver.release})` : ""
    }, ${engine.kind}${
      engine.version ? ` ${engine.version}` : ""
    }, by ${tool.name} ${tool.version}`,
    ...m.gpus.map((g) =>
      `  GPU ${g.index}: ${g.name}, ${g.uuid}${
        g.totalMiB !== undefined ? `, ${Math.round(g.totalMiB)} MiB` : ""
      }`
    ),
    `  ${summary(m)}${m.options.job ? ", as one job" : ""}`,
    ...processLines(m).map((line) => `  ${line}`),
  ];
}

/** On a terminal: the phase under way and the bytes written, on one line of stderr. */
function phaseLine(print: Printer) {
  let phase: SnapshotPhase | undefined;
  const written = new Map<number, number>();
  let shown = false;
  return {
    event(e: SnapshotEvent): void {
      if (e.type === "phase") phase = e.phase;
      else if (e.type === "bytes") written.set(e.root, e.bytes);
      else return;
      const bytes = [...written.values()].reduce((a, b) => a + b, 0);
      print.raw(
        `\r\x1b[Kcuda-checkpoint: ${PHASES[phase!] ?? phase}${
          phase === "dump" && bytes > 0 ? `, ${gb(bytes)} written` : ""
        } (${secs(e.at)})`,
      );
      shown = true;
    },
    stop(): void {
      if (shown) print.raw("\r\x1b[K");
      shown = false;
    },
  };
}

const PHASES: Readonly<Record<SnapshotPhase, string>> = {
  check: "checking",
  suspend: "suspending the CUDA processes",
  dump: "dumping",
  write: "writing the manifest",
  end: "ending the processes",
  restore: "restoring the processes",
  resume: "restoring the CUDA processes onto the GPUs",
  rollback: "putting things back",
};

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

function gb(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

function secs(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
