/**
 * `snapshot`, `restore-snapshot`, `inspect` and `recover`: process trees to disk and back, on this
 * machine's driver and criu or (`--simulate`) the simulated machine and its simulated criu;
 * `inspect` (`--verify`: every file's digest) reads only the file system; `recover` resumes what a
 * snapshot killed outright left suspended.
 *
 * Text output is a line per process and a closing line whose figures are the manifest's (GPU memory
 * as the host saw it before the suspend, images as the sizes of the files it lists); `--json` is one
 * object. A failure is one line, `cuda-checkpoint: <subcommand> ...`, saying where every process was
 * left, and exit 1. Progress: `progress.ts`. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops a snapshot or
 * restore, which puts back what it changed, and the command exits 128 + the signal's number; a
 * second one exits at once.
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
import type { Manifest, SnapshotEvent } from "../snapshot.ts";
import type { CliIo } from "./io.ts";
import { commandMessage, type Printer } from "./report.ts";
import { type Progress, progressOf, size } from "./progress.ts";
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
  const leaveRunning = command.kind === "snapshot" && command.leaveRunning;
  const progress = progressOf(print, command.json, machine, {
    labels: {
      end: leaveRunning ? "resuming the CUDA processes" : "ending the processes",
      ...(command.kind === "recover" ? { resume: "resuming the suspended processes" } : {}),
    },
    expect: "restore",
  });
  if (command.kind === "recover") return await runRecover(command, machine, print, progress);
  const watch = watchInterrupts(command, io, print, simulated);
  /** criu's count of each tree's images as it wrote them, for the closing line. */
  const counted = new Map<number, number>();
  const options = {
    machine,
    ...(command.deadlineMs !== undefined ? { timeoutMs: command.deadlineMs } : {}),
    signal: watch.signal,
    onProgress: (e: SnapshotEvent) => {
      if (e.type === "bytes") counted.set(e.root, e.bytes);
      progress?.event(e);
    },
  };
  try {
    const [fields, lines] = command.kind === "snapshot"
      ? taken(
        await snapshot(command.roots, command.dir, {
          ...options,
          leaveRunning: command.leaveRunning,
          job: command.job,
          allowIpcImport: command.allowIpcImport ?? false,
          tcpEstablished: command.tcpEstablished ?? false,
          ...(command.lockTimeoutMs !== undefined ? { lockTimeoutMs: command.lockTimeoutMs } : {}),
        }),
        [...counted.values()].reduce((a, b) => a + b, 0),
      )
      : restored(
        await restoreSnapshotAs(command.kind, command.dir, {
          ...options,
          ...(command.gpuMapping ? { gpuMapping: command.gpuMapping } : {}),
          checkRoom: command.checkRoom ?? true,
        }),
      );
    progress?.stop();
    if (command.json) print.json({ ok: true, operation: command.kind, ...fields });
    else for (const line of lines) print.out(line);
    return watch.exitCode(0);
  } catch (error) {
    progress?.stop();
    return watch.exitCode(failed(command, print, error, watch.signal.reason));
  } finally {
    watch.stop();
  }
}

/** A snapshot's `--json` fields and lines; `counted`: criu's count of the images it wrote. */
function taken(
  result: Awaited<ReturnType<typeof snapshot>>,
  counted: number,
): [object, string[]] {
  const m = result.manifest;
  return [{
    dir: result.dir,
    ms: roundMs(result.ms),
    bytes: imageBytes(m),
    leftRunning: m.options.leaveRunning,
    processes: processesOf(m),
  }, [
    ...processLines(m),
    `snapshot in ${result.dir}: ${summary(m, counted)}; suspend ${secs(m.timings.suspendMs)}, ` +
    `dump ${secs(m.timings.dumpMs)}, ${secs(result.ms)} in all; the processes ${
      m.options.leaveRunning ? "keep running" : "were ended"
    }`,
  ]];
}

/** A restore's `--json` fields and lines. */
function restored(result: Awaited<ReturnType<typeof restoreSnapshotAs>>): [object, string[]] {
  const { manifest: m, timings } = result;
  const moved = Object.entries(result.gpuMapping).filter(([a, b]) => a !== b);
  return [{
    dir: result.dir,
    ms: roundMs(result.ms),
    timings: {
      checkMs: roundMs(timings.checkMs),
      restoreMs: roundMs(timings.restoreMs),
      resumeMs: roundMs(timings.resumeMs),
    },
    pids: result.pids,
    gpuMapping: result.gpuMapping,
    processes: processesOf(m),
  }, [
    ...processLines(m),
    `restored from ${result.dir}: ${summary(m)}${
      moved.length > 0 ? `, onto ${moved.map(([, to]) => to).join(", ")}` : ""
    }, in ${secs(result.ms)}`,
  ]];
}

/**
 * Watches the program's interrupts while `command` runs ({@link InterruptWatch}): the first stops
 * it; a second exits at once, saying what may be left suspended (and, for a snapshot, that
 * `recover` resumes what its trace names).
 */
function watchInterrupts(
  command: SnapshotCommand | RestoreSnapshotCommand,
  io: CliIo,
  print: Printer,
  simulated: boolean,
): InterruptWatch {
  const { kind, dir } = command;
  const sim = simulated ? " --simulate" : "";
  return new InterruptWatch(io.interrupts, print, simulated, {
    subject: kind,
    meanwhile: "it stops, and puts back every process it changed (interrupt again to exit " +
      "without waiting)",
    leftBehind: () => ({
      rest: `; processes of the ${kind} may be left suspended: see cuda-checkpoint list${sim}, ` +
        `and resume each with cuda-checkpoint --toggle --pid PID` +
        (kind === "snapshot"
          ? `, or all that its trace names with cuda-checkpoint recover ${dir}${sim}`
          : ""),
    }),
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

/** `recover`: what a snapshot killed outright left suspended, resumed; what it wrote removed. */
async function runRecover(
  command: RecoverCommand,
  machine: Machine,
  print: Printer,
  progress: Progress | undefined,
) {
  try {
    progress?.event({ type: "phase", phase: "resume", at: 0 });
    const r = await recoverSnapshotAs(command.kind, command.dir, {
      machine,
      checkRoom: command.checkRoom ?? true,
      ...(progress ? { onProgress: (e) => progress.event(e) } : {}),
    }).finally(() => progress?.stop());
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
 * (or says that it stopped, where the error is the interrupt, `abort`, itself); exit code 1.
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

/** A line per process: pid, CUDA state and GPU memory (or "no CUDA"), command. */
function processLines(m: Manifest): string[] {
  return m.trees.flatMap((t) =>
    t.processes.map((p) => {
      const memory = p.cuda?.gpuMemoryMiB ? `${Math.round(mibOf(p))} MiB` : "(memory unknown)";
      return `${p.pid} ${p.cuda ? `${p.cuda.state} ${memory}` : "no CUDA"}${
        p.command ? ` ${p.command}` : ""
      }`;
    })
  );
}

/**
 * The manifest's figures: trees, processes, their GPU memory, and the images' bytes (its files');
 * where criu's own count as it wrote (`counted`) differs from them, that too (a simulated criu
 * counts the memory it copies, and writes only what was written to it).
 */
function summary(m: Manifest, counted?: number): string {
  const all = m.trees.flatMap((t) => t.processes);
  const cuda = all.filter((p) => p.cuda);
  const mib = cuda.reduce((sum, p) => sum + mibOf(p), 0);
  const bytes = imageBytes(m);
  const other = counted !== undefined && Math.abs(counted - bytes) > 0.01 * Math.max(counted, bytes)
    ? `; ${m.engine.kind} counted ${size(counted)} as it wrote them`
    : "";
  return `${plural(m.trees.length, "tree")}, ${
    plural(all.length, "process", "processes")
  } (${cuda.length} with CUDA, ${Math.round(mib)} MiB of GPU memory), ${
    size(bytes)
  } of images (the manifest's ` +
    `files${other})`;
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

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

function secs(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
