/**
 * What `cuda-checkpoint` says about each process: NVIDIA's error lines, the `<pid> <result>` lines
 * of several pids, and the JSON objects of `--json`, with their field names in one place.
 *
 * @module
 */

import type { CliOperation } from "./args.ts";
import { type CliIo, escapeControls } from "./io.ts";
import {
  CheckpointError,
  CudaError,
  messageOf,
  type RefusalCode,
  RefusedError,
} from "../core/errors.ts";
import type { RoomCheck } from "../types.ts";
import { PATH_ERRORS } from "../os/private.ts";
import type { ProcessState } from "../mod.ts";

/**
 * An error as `--json` gives it: `message` the line printed on stderr (NVIDIA's, where it has one);
 * `code` the driver's `CUresult`, or for an operation `refused` before the driver was asked, why
 * (`NO_ROOM`, `MAPPING`, ...); `codeName` and `name` the code's and the error class's names;
 * `detail` everything known (what failed, the state the process is in, what was done about it).
 */
export interface ErrorReport {
  readonly message: string;
  readonly code?: number | string;
  readonly codeName?: string;
  readonly name?: string;
  readonly refused?: boolean;
  readonly detail: string;
}

/** A step (`lock`, `checkpoint`, `restore` or `unlock`) as `--json` gives it: its time in ms. */
export interface StepReport {
  readonly step: string;
  readonly ms: number;
  readonly ok: boolean;
}

/** What became of one process: one `--json` line (keys are left out where they do not apply). */
export interface PidReport {
  readonly pid: number;
  readonly operation: CliOperation;
  /** Whether the process is now where the operation takes it. */
  readonly ok: boolean;
  /** Its state afterwards, where known. */
  readonly state?: ProcessState;
  readonly restoreThreadId?: number;
  /** For a step or toggle (`rolled-back`: `--all-or-nothing` or an interrupt brought it back). */
  readonly status?: "done" | "unchanged" | "failed" | "stopped" | "not-started" | "rolled-back";
  /** Why it was not started, or stopped between steps: `deadline`, `another-failed`. */
  readonly reason?: string;
  /** The whole operation's time on this process, in ms. */
  readonly ms?: number;
  /** The driver calls made, in order. */
  readonly steps?: readonly StepReport[];
  readonly error?: ErrorReport;
  /** Where a restore was made: `"checked"`, or why its room could not be (`{ "unknown": "..." }`). */
  readonly roomCheck?: RoomCheck;
  /** Its rollback (its own after a failed step, or all-or-nothing's), where one was made. */
  readonly rollback?: {
    readonly ok: boolean;
    readonly steps: readonly StepReport[];
    readonly error?: ErrorReport;
  };
}

/**
 * What NVIDIA's utility would quote for an operation this package refused before asking the
 * driver: the driver's own description of the code it would have answered (a toggle of a locked
 * process, a mapping the GPUs rule out), or, for a restore refused for room, which NVIDIA's would
 * have made, what happened instead.
 */
const REFUSAL_TEXT: Readonly<Record<RefusalCode, string>> = {
  STATE: "the operation cannot be performed in the present state",
  MAPPING: "invalid argument",
  UNSUPPORTED: "operation not supported",
  NO_ROOM: "not enough free GPU memory for it: refused before asking the driver",
  REPLACED: "the pid names another process now",
  PREREQUISITE: "a prerequisite is missing",
  PID_TAKEN: "the pid is taken",
  SNAPSHOT: "not a snapshot this version can read",
  IPC: "it imported GPU memory of another process (CUDA IPC): its checkpoint could never be " +
    "restored, refused before asking the driver",
};

/**
 * The report of an error: NVIDIA's line for a failed operation on a pid, with the driver's
 * description of the code, and everything known.
 */
export function errorReport(operation: CliOperation, pid: number, error: unknown): ErrorReport {
  const text = error instanceof CudaError
    ? error.description || error.codeName
    : error instanceof RefusedError
    ? REFUSAL_TEXT[error.code]
    : messageOf(error);
  const message = operation === "get-state"
    ? `Error getting process state for process ID ${pid}: "${text}"`
    : operation === "get-restore-tid"
    ? `Could not find restore thread for process ID ${pid}`
    : operation === "toggle"
    ? `Error toggling CUDA in process ID ${pid}: "${text}"`
    : `Could not ${operation} on process ID ${pid}: "${text}"`;
  return {
    message,
    ...(error instanceof CheckpointError ? { name: error.name } : {}),
    ...(error instanceof CudaError ? { code: error.code, codeName: error.codeName } : {}),
    ...(error instanceof RefusedError ? { code: error.code, refused: true } : {}),
    detail: messageOf(error),
  };
}

/** Why a process was not started or was stopped, in words. */
const REASONS: Readonly<Record<string, string>> = {
  "another-failed": "another process failed and --all-or-nothing was given",
  deadline: "the deadline passed",
  aborted: "it was aborted",
};

/**
 * Prints the reports and returns the exit code. On stdout: the `--json` objects; else NVIDIA's
 * output for one pid (the state or thread id a query asked for, nothing for a step), or the
 * `<pid> <result>` line each of several. On stderr: what went wrong with each process (NVIDIA's
 * line, or ours where it has none), then, on a terminal, what more there is to say.
 */
export function printReports(
  reports: readonly PidReport[],
  print: Printer,
  json: boolean,
  several: boolean,
): number {
  for (const report of reports) {
    const line = json
      ? JSON.stringify(report)
      : several
      ? `${report.pid} ${resultWord(report)}`
      : answer(report);
    if (line !== undefined) print.out(line);
  }
  for (const { pid, error, status, reason, rollback, state } of reports) {
    if (error) {
      print.err(error.message);
      if (error.detail !== error.message && !error.message.endsWith(`"${error.detail}"`)) {
        print.more(error.detail);
      }
    }
    if (status === "not-started" || status === "stopped") {
      const what = status === "stopped" ? "was stopped between steps" : "was not started";
      print.err(`Process ID ${pid} ${what}: ${REASONS[reason ?? ""] ?? reason}`);
    }
    if (rollback && status === "rolled-back") {
      print.more(
        rollback.ok
          ? `process ID ${pid} was brought back to ${state}: another process failed`
          : `process ID ${pid} could not be brought back: ${rollback.error?.detail}`,
      );
    }
  }
  for (const { pid, roomCheck } of reports) {
    if (roomCheck === undefined || typeof roomCheck === "string") continue;
    print.more(
      `the GPU room for process ${pid} could not be checked before its restore: ${roomCheck.unknown}`,
    );
  }
  return reports.every((r) => r.ok) ? 0 : 1;
}

/** What a query that succeeded answers: the state, or the restore thread id. */
function answer(report: PidReport): string | undefined {
  return report.ok && report.status === undefined
    ? String(report.restoreThreadId ?? report.state)
    : undefined;
}

/** The word for a process in the `<pid> <result>` lines of several pids. */
function resultWord(report: PidReport): string {
  if (report.status === undefined) return answer(report) ?? "error";
  let word: string = report.status;
  if (report.status === "rolled-back" && !report.rollback?.ok) word = "rollback-failed";
  return report.state === undefined ? word : `${word} ${report.state}`;
}

/**
 * Writes lines to stdout and stderr, each one line (a newline within it written `\u000a`, so that
 * a process's text cannot fake a line of ours) with its control characters escaped
 * ({@link escapeControls}); erases the live line first, where one shows.
 */
export class Printer {
  readonly #io: CliIo;
  /** The live line on stderr (`progress.ts`), erased before anything else is written. */
  live: { erase(): void } | undefined;

  constructor(io: CliIo) {
    this.#io = io;
  }

  /** Whether stderr is a terminal: extra lines, and the live line. */
  get terminal(): boolean {
    return this.#io.isTerminal === true;
  }

  /** Writes one line to stdout. */
  out(line: string): void {
    this.live?.erase();
    this.#io.stdout(escapeControls(`${line.replaceAll("\n", "\\u000a")}\n`));
  }

  /** Writes one line to stderr. */
  err(line: string): void {
    this.live?.erase();
    this.#io.stderr(escapeControls(`${line.replaceAll("\n", "\\u000a")}\n`));
  }

  /** The command line's own terminal controls on stderr, as they are (the live line). */
  raw(text: string): void {
    this.#io.stderr(text);
  }

  /** A line on stderr, on a terminal only. */
  more(line: string): void {
    if (this.terminal) this.err(`cuda-checkpoint: ${line}`);
  }

  /** `cuda-checkpoint: <message>` on stderr, for an error of the command rather than a process. */
  error(error: unknown): void {
    this.err(`cuda-checkpoint: ${commandMessage(error)}`);
  }

  /** One JSON line on stdout. */
  json(value: unknown): void {
    this.out(JSON.stringify(value));
  }
}

/**
 * One stderr line about processes that could not be looked at: how many, their pids (the first
 * eight), and why, from the first one's reason (such as another user's process seen without root,
 * or one the kernel keeps even from root, as a VM's pid 1 can be).
 */
export function warnUninspectable(
  uninspected: readonly { readonly pid: number; readonly reason: string }[],
  print: Printer,
): void {
  const count = uninspected.length;
  if (count === 0) return;
  const shown = uninspected.slice(0, 8).map((p) => p.pid).join(", ");
  const pids = count === 1
    ? `pid ${shown}`
    : `pids ${shown}${count > 8 ? ` and ${count - 8} more` : ""}`;
  const why = count === 1
    ? uninspected[0].reason
    : `pid ${uninspected[0].pid}: ${uninspected[0].reason}`;
  print.err(
    `cuda-checkpoint: ${count} process${count === 1 ? "" : "es"} could not be looked at and may ` +
      `be ${count === 1 ? "a CUDA process" : "CUDA processes"} (${pids}): ${why}`,
  );
}

/**
 * An error of a command as the command line says it: its message, with the system's raw lines
 * (`ENOTDIR: not a directory, lstat '/a/b'`) made into a sentence that names the path, in the
 * words of {@link PATH_ERRORS}. The snapshot store words its own (a directory made or opened, a
 * small file read); this is for the raw lines that other messages still carry (a file or folder
 * the store looks at or writes in os/private.ts, and core's `snapshot failed: ...` around an
 * engine's or a write's error).
 */
export function commandMessage(error: unknown): string {
  return messageOf(error).replace(
    /\b(E[A-Z]+): [^,\n]*, [a-z]+ '([^'\n]*)'/g,
    (raw, code: string, path: string) =>
      PATH_ERRORS[code] ? `${path}: ${PATH_ERRORS[code]} (${code})` : raw,
  );
}
