/**
 * `snapshot`, `restore-snapshot`, `inspect` and `recover`: process trees to disk and back, on this
 * machine's driver and criu or (`--simulate`) the simulated machine and its criu; `inspect`
 * (`--verify`: every file's digest) reads only the file system; `recover` resumes what a snapshot
 * killed outright left suspended. Text is a line per process and a closing line of the manifest's
 * figures (GPU memory as the host saw it before the suspend, images as the sizes of the files it
 * lists); `--json` one object. A failure is one line, `cuda-checkpoint: <subcommand> ...`, saying
 * where every process was left, and exit 1. An interrupt stops a snapshot or restore, which puts
 * back what it changed (exit 128 + the signal's number); a second one exits at once.
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
import type { Manifest, ManifestProcess, SnapshotEvent } from "../snapshot.ts";
import { type CliIo, watchInterrupts } from "./io.ts";
import { commandMessage, type Printer } from "./report.ts";
import { type Progress, progressOf, size } from "./progress.ts";

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
  const progress = progressOf(print, command.events, machine, {
    labels: command.kind === "recover"
      ? { resume: "resuming the suspended processes" }
      : command.kind === "snapshot" && command.leaveRunning
      ? { end: "resuming the CUDA processes" }
      : {},
    expect: "restore",
  });
  if (command.kind === "recover") return await runRecover(command, machine, print, progress);
  const { kind, dir } = command;
  const sim = simulated ? " --simulate" : "";
  const watch = watchInterrupts(io.interrupts, print, {
    simulated,
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
  const counted = new Map<number, number>(); // criu's count of each tree's images as it wrote them
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
    const { m, fields, closing } = kind === "snapshot"
      ? await take(command as SnapshotCommand, options, counted)
      : await restore(command as RestoreSnapshotCommand, options);
    progress?.stop();
    if (command.json) {
      print.json({ ok: true, operation: kind, ...fields, processes: processesOf(m) });
    } else for (const line of [...processLines(m), closing]) print.out(line);
    return watch.exitCode(0);
  } catch (error) {
    progress?.stop();
    return watch.exitCode(failed(command, print, error, watch.signal.reason));
  } finally {
    watch.stop();
  }
}

/** What a snapshot or restore made: its manifest, its `--json` fields, its closing line. */
type Made = { m: Manifest; fields: object; closing: string };
/** The options of both: the machine, the deadline, the stop signal, the progress. */
type Whole = {
  machine: Machine;
  timeoutMs?: number;
  signal: AbortSignal;
  onProgress(e: SnapshotEvent): void;
};

/** `snapshot`; `counted`: criu's count of each tree's images as it wrote them. */
async function take(
  c: SnapshotCommand,
  options: Whole,
  counted: Map<number, number>,
): Promise<Made> {
  const r = await snapshot(c.roots, c.dir, {
    ...options,
    leaveRunning: c.leaveRunning,
    job: c.job,
    allowIpcImport: c.allowIpcImport ?? false,
    tcpEstablished: c.tcpEstablished ?? false,
    ...(c.lockTimeoutMs !== undefined ? { lockTimeoutMs: c.lockTimeoutMs } : {}),
  });
  const m = r.manifest, left = m.options.leaveRunning;
  const all = [...counted.values()].reduce((a, b) => a + b, 0);
  return {
    m,
    fields: { dir: r.dir, ms: roundMs(r.ms), bytes: imageBytes(m), leftRunning: left },
    closing: `snapshot in ${r.dir}: ${summary(m, all)}; suspend ${secs(m.timings.suspendMs)}, ` +
      `dump ${secs(m.timings.dumpMs)}, ${secs(r.ms)} in all; the processes ${
        left ? "keep running" : "were ended"
      }`,
  };
}

/** `restore-snapshot`. */
async function restore(c: RestoreSnapshotCommand, options: Whole): Promise<Made> {
  const r = await restoreSnapshotAs(c.kind, c.dir, {
    ...options,
    ...(c.gpuMapping ? { gpuMapping: c.gpuMapping } : {}),
    checkRoom: c.checkRoom ?? true,
  });
  const timings = Object.fromEntries(Object.entries(r.timings).map(([k, ms]) => [k, roundMs(ms)]));
  const moved = Object.entries(r.gpuMapping).filter(([a, b]) => a !== b).map(([, to]) => to);
  return {
    m: r.manifest,
    fields: { dir: r.dir, ms: roundMs(r.ms), timings, pids: r.pids, gpuMapping: r.gpuMapping },
    closing: `restored from ${r.dir}: ${summary(r.manifest)}${
      moved.length > 0 ? `, onto ${moved.join(", ")}` : ""
    }, in ${secs(r.ms)}`,
  };
}

/** `inspect`: the manifest, checked against its files, from the machine's store or the disk. */
export async function runInspect(
  command: InspectCommand,
  machine: Machine | undefined,
  print: Printer,
): Promise<number> {
  try {
    const { dir, manifest: m, verified } = await inspectSnapshotAs(command.kind, command.dir, {
      ...(machine ? { machine } : {}),
      verify: command.verify,
    });
    if (command.json) {
      print.json({ ok: true, operation: command.kind, dir, verified, manifest: m });
      return 0;
    }
    const { driver, engine, tool } = m;
    for (
      const line of [
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
        verified
          ? `  every file read: each is the file the snapshot wrote (its digest as the manifest says)`
          : `  every file present, private, of its size (--verify reads each and checks its digest)`,
      ]
    ) print.out(line);
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
    const e = error instanceof Error ? error : undefined;
    print.json({
      ok: false,
      operation: command.kind,
      dir: command.dir,
      error: {
        message,
        ...(error instanceof CheckpointError ? { code: error.code } : {}),
        ...(e ? { name: e.name } : {}),
        ...(e && "log" in e && e.log ? { log: e.log } : {}),
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
      const cuda = p.cuda ? `${p.cuda.state} ${memory}` : "no CUDA";
      return `${p.pid} ${cuda}${p.command ? ` ${p.command}` : ""}`;
    })
  );
}

/**
 * The manifest's figures: trees, processes, their GPU memory, the images' bytes (its files'); and
 * criu's own count as it wrote them (`counted`), where that differs (a simulated criu counts the
 * memory it copies, and writes only what was written to it).
 */
function summary(m: Manifest, counted?: number): string {
  const all = m.trees.flatMap((t) => t.processes);
  const cuda = all.filter((p) => p.cuda);
  const mib = Math.round(cuda.reduce((sum, p) => sum + mibOf(p), 0));
  const bytes = imageBytes(m);
  const other = counted !== undefined && Math.abs(counted - bytes) > 0.01 * Math.max(counted, bytes)
    ? `; ${m.engine.kind} counted ${size(counted)} as it wrote them`
    : "";
  const trees = m.trees.length, processes = all.length;
  return `${trees} tree${trees === 1 ? "" : "s"}, ${processes} process${
    processes === 1 ? "" : "es"
  } ` +
    `(${cuda.length} with CUDA, ${mib} MiB of GPU memory), ${size(bytes)} of images (the ` +
    `manifest's files${other})`;
}

/** A process's GPU memory in MiB, over its GPUs (0 where unknown). */
function mibOf(p: ManifestProcess): number {
  return Object.values(p.cuda?.gpuMemoryMiB ?? {}).reduce((a, b) => a + b, 0);
}

function imageBytes(m: Manifest): number {
  return m.files.reduce((sum, f) => sum + f.bytes, 0);
}

function secs(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
