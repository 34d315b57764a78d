/**
 * `snapshot`, `restore-snapshot`, `inspect` (`--verify`: every file's digest; the file system
 * only) and `recover` (what a snapshot killed outright left suspended, resumed). Text is a line per
 * process and a closing line of the manifest's figures (GPU memory as the host saw it before the
 * suspend, images as the sizes of its files); `--json` one object. A failure is one line saying
 * where every process was left, and exit 1. An interrupt stops a snapshot or restore, which puts
 * back what it changed (exit 128 + the signal's number); a second one exits at once.
 *
 * @module
 */

import type { InspectCommand, RecoverCommand, SnapshotCommand } from "./command.ts";
import type { RestoreSnapshotCommand } from "./command.ts";
import { inspectSnapshotAs, recoverSnapshotAs, restoreSnapshotAs } from "../api/functions.ts";
import { snapshot } from "../api/functions.ts";
import { formatDriverVersion } from "../core/driver.ts";
import { CheckpointError } from "../core/errors.ts";
import { bytesOf, mibOf } from "../core/snapshot/run.ts";
import type { Machine } from "../driver.ts";
import type { Manifest, ManifestProcess, SnapshotEvent } from "../snapshot.ts";
import { advised, type CliIo, watchInterrupts } from "./io.ts";
import { commandMessage, type Printer } from "./report.ts";
import { type Progress, progressOf, size } from "./progress.ts";

/** What a command made: its `--json` object's fields, its lines of text. */
type Made = { fields: object; lines: string[] };
/** The options of a snapshot and a restore but their own. */
type Whole = { machine: Machine; signal: AbortSignal; onProgress(e: SnapshotEvent): void };

/** Runs the command (`inspect` without a machine: on the disk); resolves to the exit code. */
export async function runDiskCommand(
  command: SnapshotCommand | RestoreSnapshotCommand | InspectCommand | RecoverCommand,
  machine: Machine | undefined,
  print: Printer,
  io: CliIo,
): Promise<number> {
  const { kind, dir, events } = command;
  const progress = kind === "inspect" ? undefined : await progressOf(print, events, machine!, {
    labels: kind === "recover"
      ? { resume: "resuming the suspended processes" }
      : kind === "snapshot" && command.leaveRunning
      ? { end: "resuming the CUDA processes" }
      : {},
    expect: "restore",
  });
  const orRecover = `, or all that its trace names with cuda-checkpoint recover ${dir}`;
  const watched = kind === "snapshot" || kind === "restore-snapshot";
  const watch = watchInterrupts(watched ? io.interrupts : undefined, print, {
    simulated: command.simulate,
    subject: kind,
    meanwhile: "it stops, and puts back every process it changed (interrupt again to exit " +
      "without waiting)",
    leftBehind: () => [
      `; processes of the ${kind} may be left suspended: see cuda-checkpoint list, and resume ` +
      `each with cuda-checkpoint --toggle --pid PID${kind === "snapshot" ? orRecover : ""}`,
    ],
  });
  const onProgress = (e: SnapshotEvent) => progress?.event(e);
  const whole: Whole = { machine: machine!, signal: watch.signal, onProgress };
  try {
    const { fields, lines } = kind === "inspect"
      ? await inspect(command, machine)
      : kind === "recover"
      ? await recover(command, machine!, progress)
      : kind === "snapshot"
      ? await take(command, whole)
      : await restore(command, whole);
    if (command.json) print.json({ ok: true, operation: kind, ...fields });
    else lines.forEach((line) => print.out(line));
    // Past the point where it could stop: what was done is the outcome, and the exit code says it.
    const late = `cuda-checkpoint: the interrupt came too late: ${kind} done`;
    if (watch.signal.aborted) print.err(late);
    return 0;
  } catch (error) {
    const message = advised(commandMessage(error), command.simulate);
    if (command.json) {
      const e = error instanceof Error ? error as Error & { log?: unknown } : undefined;
      const code = error instanceof CheckpointError ? error.code : undefined;
      const failure = { message, code, name: e?.name, log: e?.log || undefined };
      print.json({ ok: false, operation: kind, dir, error: failure });
    }
    print.err(`cuda-checkpoint: ${message}`);
    return watch.exitCode(1);
  } finally {
    watch.stop();
    await progress?.stop();
  }
}

async function take(c: SnapshotCommand, whole: Whole): Promise<Made> {
  const { leaveRunning, job, allowIpcImport, tcpEstablished, lockTimeoutMs } = c;
  const given = { leaveRunning, job, allowIpcImport, tcpEstablished, lockTimeoutMs, ...whole };
  const counted = new Map<number, number>(); // criu's count of each tree's images as it wrote them
  const onProgress = (e: SnapshotEvent) => {
    if (e.type === "bytes") counted.set(e.root, e.bytes);
    whole.onProgress(e);
  };
  const r = await snapshot(c.roots, c.dir, { ...given, timeoutMs: c.deadlineMs, onProgress });
  const m = r.manifest, left = m.options.leaveRunning;
  const all = [...counted.values()].reduce((a, b) => a + b, 0);
  const { timings, timings: { suspendMs, dumpMs } } = m;
  const fields = { dir: r.dir, ms: r.ms, timings, bytes: bytesOf(m.files), leftRunning: left };
  const times = `suspend ${secs(suspendMs)}, dump ${secs(dumpMs)}, ${secs(r.ms)} in all`;
  const ended = `the processes ${left ? "were left as they were" : "were ended"}`;
  return made(m, fields, `snapshot in ${r.dir}: ${summary(m, all)}; ${times}; ${ended}`);
}

async function restore(c: RestoreSnapshotCommand, whole: Whole): Promise<Made> {
  const { gpuMapping, checkRoom, deadlineMs: timeoutMs } = c;
  const r = await restoreSnapshotAs(c.kind, c.dir, { ...whole, gpuMapping, checkRoom, timeoutMs });
  // Each process's GPU memory where it is now: a running one's moved as mapped (none else moved).
  const to = (gpu: string) => r.gpuMapping[gpu] ?? gpu;
  const now: Where = ({ state, gpuMemoryMiB: mib }) =>
    state === "running" && mib
      ? Object.fromEntries(Object.entries(mib).map(([g, n]) => [to(g), n]))
      : mib;
  const used = r.manifest.trees.flatMap((t) => t.processes).flatMap(({ cuda }) =>
    cuda?.state === "running" ? Object.keys(cuda.gpuMemoryMiB ?? {}) : []
  );
  const moved = [...new Set(used.filter((g) => to(g) !== g).map(to))];
  const said = moved.length > 0 ? `, onto ${moved.join(", ")}` : "";
  const fields = { dir: r.dir, ms: r.ms, timings: r.timings, pids: r.pids };
  const closing = `restored from ${r.dir}: ${summary(r.manifest)}${said}, in ${secs(r.ms)}`;
  return made(r.manifest, { ...fields, gpuMapping: r.gpuMapping }, closing, now);
}

/** What a snapshot or restore made: its fields and processes, a line each and its closing line. */
function made(m: Manifest, fields: object, closing: string, where: Where = (c) => c.gpuMemoryMiB) {
  const processes = m.trees.flatMap((t) =>
    t.processes.map(({ pid, command, cuda }) => ({
      pid,
      tree: t.root,
      command: command || undefined,
      cuda: cuda && { state: cuda.state, gpuMemoryMiB: where(cuda) ?? "unknown" },
    }))
  );
  return { fields: { ...fields, processes }, lines: [...processLines(m), closing] };
}

/** `inspect`: the manifest, checked against its files, from the machine's store or the disk. */
async function inspect(c: InspectCommand, machine: Machine | undefined): Promise<Made> {
  const options = { machine, verify: c.verify };
  const { dir, manifest: m, verified } = await inspectSnapshotAs(c.kind, c.dir, options);
  const { driver, engine, tool } = m;
  const release = driver.release ? ` (${driver.release})` : "";
  const version = engine.version ? ` ${engine.version}` : "";
  return {
    fields: { dir, verified, manifest: m },
    lines: [
      `snapshot ${dir} (${m.format})`,
      `  taken ${m.createdAt} on ${m.host.hostname} (kernel ${m.host.kernel})`,
      `  driver CUDA ${formatDriverVersion(driver.cudaVersion)}${release}, ` +
      `${engine.kind}${version}, by ${tool.name} ${tool.version}`,
      ...m.gpus.map((g) => {
        const total = g.totalMiB !== undefined ? `, ${Math.round(g.totalMiB)} MiB` : "";
        return `  GPU ${g.index}: ${g.name}, ${g.uuid}${total}`;
      }),
      `  ${summary(m)}${m.options.job ? ", as one job" : ""}`,
      ...processLines(m).map((line) => `  ${line}`),
      verified
        ? `  every file read: each is the file the snapshot wrote (its digest as the manifest says)`
        : `  every file present, private, of its size (--verify reads each and checks its digest)`,
    ],
  };
}

/** `recover`: what a snapshot killed outright left suspended, resumed; what it wrote removed. */
async function recover(c: RecoverCommand, machine: Machine, progress: Progress | undefined) {
  progress?.event({ type: "phase", phase: "resume", at: 0 });
  const onProgress = progress && ((e: SnapshotEvent) => progress.event(e));
  const r = await recoverSnapshotAs(c.kind, c.dir, { machine, checkRoom: c.checkRoom, onProgress });
  const list = (pids: readonly number[]) => pids.length > 0 ? pids.join(", ") : "none";
  const gone = `gone (ended, or the pid is another process's): ${list(r.gone)}`;
  return {
    fields: r,
    lines: [
      `resumed (or found running): ${list(r.resumed)}`,
      ...(r.gone.length > 0 ? [gone] : []),
      r.complete
        ? `the snapshot in ${r.dir} is complete, and kept; its trace was removed`
        : `removed what the interrupted snapshot had written in ${r.dir}`,
    ],
  };
}

/** Where a process's GPU memory is, MiB by GPU (`null`: unknown); the manifest's, by default. */
type Where = (cuda: NonNullable<ManifestProcess["cuda"]>) => Record<string, number> | null;

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
  const all = m.trees.flatMap((t) => t.processes), cuda = all.filter((p) => p.cuda);
  const mib = Math.round(cuda.reduce((sum, p) => sum + mibOf(p), 0));
  const bytes = bytesOf(m.files);
  const other = counted !== undefined && Math.abs(counted - bytes) > 0.01 * Math.max(counted, bytes)
    ? `; ${m.engine.kind} counted ${size(counted)} as it wrote them`
    : "";
  const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
  const trees = count(m.trees.length, "tree", "trees");
  return `${trees}, ${count(all.length, "process", "processes")} (${cuda.length} with CUDA, ` +
    `${mib} MiB of GPU memory), ${size(bytes)} of images (the manifest's files${other})`;
}

const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
