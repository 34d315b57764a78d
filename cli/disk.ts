/**
 * `snapshot`, `restore-snapshot` and `inspect`: whole process trees to disk and back, on this
 * machine's driver and criu, or (`--simulate`) on the simulated machine and its simulated criu.
 *
 * Text output is a line per process and a closing line; `--json` is one object. A failure is one
 * line, `cuda-checkpoint: ...`, saying where every process was left, and exit 1. On a terminal the
 * phase under way is shown on stderr, and Ctrl-C stops the snapshot or restore, which puts back
 * what it changed.
 *
 * @module
 */

import type { InspectCommand, RestoreSnapshotCommand, SnapshotCommand } from "./args.ts";
import { formatDriverVersion } from "../core/codes.ts";
import type { SnapshotEvent, SnapshotPhase } from "../core/disk.ts";
import { CheckpointError, messageOf } from "../core/errors.ts";
import { checkRestoreArgs, inspectIn, restoreFrom } from "../core/from_disk.ts";
import type { Manifest } from "../core/manifest.ts";
import { checkSnapshotArgs, takeSnapshot } from "../core/to_disk.ts";
import type { CliIo, CliMachine } from "./io.ts";
import type { Printer } from "./report.ts";

/** A command of this module. */
export type SnapshotCliCommand = SnapshotCommand | RestoreSnapshotCommand | InspectCommand;

/** Runs `snapshot`, `restore-snapshot` or `inspect`; resolves to the exit code. */
export async function runDiskCommand(
  command: SnapshotCliCommand,
  { machine }: CliMachine,
  print: Printer,
  io: CliIo,
): Promise<number> {
  const progress = print.terminal ? new PhaseLine(print) : undefined;
  const stop = new AbortController();
  const unwatch = io.interrupts?.watch(() => stop.abort(new Error("interrupted (Ctrl-C)")));
  try {
    switch (command.kind) {
      case "inspect": {
        const store = machine.store ?? new (await import("../os/snapshot_store.ts")).FileSnapshotStore();
        const { dir, manifest } = await inspectIn(store, command.dir);
        if (command.json) print.json({ ok: true, operation: "inspect", dir, manifest });
        else describe(manifest, dir, print);
        return 0;
      }
      case "snapshot": {
        const args = checkSnapshotArgs(command.roots, command.dir, {
          leaveRunning: command.leaveRunning,
          job: command.job,
          ...(command.lockTimeoutMs !== undefined ? { lockTimeoutMs: command.lockTimeoutMs } : {}),
          ...(command.deadlineMs !== undefined ? { timeoutMs: command.deadlineMs } : {}),
          signal: stop.signal,
          ...(progress ? { onProgress: (e: SnapshotEvent) => progress.event(e) } : {}),
        });
        const result = await takeSnapshot(machine, args.roots, args.dir, args.settings);
        progress?.stop();
        const m = result.manifest;
        if (command.json) {
          print.json({
            ok: true,
            operation: "snapshot",
            dir: result.dir,
            ms: round(result.ms),
            bytes: imageBytes(m),
            leftRunning: m.options.leaveRunning,
            processes: processesOf(m),
          });
        } else {
          for (const line of processLines(m)) print.out(line);
          print.out(
            `snapshot in ${result.dir}: ${summary(m)}; suspend ${secs(m.timings.suspendMs)}, ` +
              `dump ${secs(m.timings.dumpMs)}, ${secs(result.ms)} in all; the processes ${
                m.options.leaveRunning ? "keep running" : "were ended"
              }`,
          );
        }
        return 0;
      }
      default: { // restore-snapshot
        const args = checkRestoreArgs(command.dir, {
          ...(command.deadlineMs !== undefined ? { timeoutMs: command.deadlineMs } : {}),
          signal: stop.signal,
          ...(progress ? { onProgress: (e: SnapshotEvent) => progress.event(e) } : {}),
        });
        const result = await restoreFrom(machine, args.dir, {
          ...args.settings,
          ...(command.pairs ? { pairs: [...command.pairs] } : {}),
        });
        progress?.stop();
        const m = result.manifest;
        const moved = Object.entries(result.gpuMapping).filter(([a, b]) => a !== b);
        if (command.json) {
          print.json({
            ok: true,
            operation: "restore-snapshot",
            dir: result.dir,
            ms: round(result.ms),
            timings: {
              checkMs: round(result.timings.checkMs),
              restoreMs: round(result.timings.restoreMs),
              resumeMs: round(result.timings.resumeMs),
            },
            pids: result.pids,
            gpuMapping: result.gpuMapping,
            processes: processesOf(m),
          });
        } else {
          for (const line of processLines(m)) print.out(line);
          print.out(
            `restored from ${result.dir}: ${summary(m)}${
              moved.length > 0 ? `, onto ${moved.map(([, to]) => to).join(", ")}` : ""
            }, in ${secs(result.ms)}`,
          );
        }
        return 0;
      }
    }
  } catch (error) {
    progress?.stop();
    const message = messageOf(error);
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
  } finally {
    unwatch?.();
  }
}

/** Each process of the snapshot, for --json. */
function processesOf(m: Manifest) {
  return m.trees.flatMap((t) =>
    t.processes.map((p) => ({
      pid: p.pid,
      tree: t.root,
      ...(p.command ? { command: p.command } : {}),
      ...(p.cuda
        ? {
          cuda: {
            state: p.cuda.state,
            gpuMemoryMiB: p.cuda.gpuMemoryMiB ?? "unknown",
          },
        }
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
          p.cuda.gpuMemoryMiB
            ? `${Math.round(Object.values(p.cuda.gpuMemoryMiB).reduce((a, b) => a + b, 0))} MiB`
            : "(memory unknown)"
        }`
        : "no CUDA";
      return `${p.pid} ${cuda}${p.command ? ` ${p.command}` : ""}`;
    })
  );
}

function summary(m: Manifest): string {
  const all = m.trees.flatMap((t) => t.processes);
  const cuda = all.filter((p) => p.cuda);
  const mib = cuda.reduce(
    (sum, p) => sum + Object.values(p.cuda!.gpuMemoryMiB ?? {}).reduce((a, b) => a + b, 0),
    0,
  );
  return `${plural(m.trees.length, "tree")}, ${
    plural(all.length, "process", "processes")
  } (${cuda.length} with CUDA, ${Math.round(mib)} MiB of GPU memory), ${
    gb(imageBytes(m))
  } of images`;
}

function imageBytes(m: Manifest): number {
  return m.files.reduce((sum, f) => sum + f.bytes, 0);
}

/** `inspect`'s text: the manifest, readably. */
function describe(m: Manifest, dir: string, print: Printer): void {
  print.out(`snapshot ${dir} (${m.format})`);
  print.out(`  taken ${m.createdAt} on ${m.host.hostname} (kernel ${m.host.kernel})`);
  print.out(
    `  driver CUDA ${formatDriverVersion(m.driver.cudaVersion)}${
      m.driver.release ? ` (${m.driver.release})` : ""
    }, ${m.engine.kind}${
      m.engine.version ? ` ${m.engine.version}` : ""
    }, by ${m.tool.name} ${m.tool.version}`,
  );
  for (const g of m.gpus) {
    print.out(
      `  GPU ${g.index}: ${g.name}, ${g.uuid}${
        g.totalMiB !== undefined ? `, ${Math.round(g.totalMiB)} MiB` : ""
      }`,
    );
  }
  print.out(`  ${summary(m)}${m.options.job ? ", as one job" : ""}`);
  for (const line of processLines(m)) print.out(`  ${line}`);
}

/** On a terminal: the phase under way and the bytes written, on one line of stderr. */
class PhaseLine {
  readonly #print: Printer;
  #phase: SnapshotPhase | undefined;
  readonly #bytes = new Map<number, number>();
  #shown = false;

  constructor(print: Printer) {
    this.#print = print;
  }

  event(e: SnapshotEvent): void {
    if (e.type === "phase") this.#phase = e.phase;
    else if (e.type === "bytes") this.#bytes.set(e.root, e.bytes);
    else return;
    const bytes = [...this.#bytes.values()].reduce((a, b) => a + b, 0);
    const text = `cuda-checkpoint: ${PHASES[this.#phase!] ?? this.#phase}${
      this.#phase === "dump" && bytes > 0 ? `, ${gb(bytes)} written` : ""
    } (${secs(e.at)})`;
    this.#print.raw(`\r\x1b[K${text}`);
    this.#shown = true;
  }

  stop(): void {
    if (this.#shown) this.#print.raw("\r\x1b[K");
    this.#shown = false;
  }
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

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
