/**
 * What `cuda-checkpoint` says about each process: NVIDIA's error lines, the `<pid> <result>` lines
 * of several pids, and the JSON objects of `--json`, with their field names in one place.
 *
 * @module
 */

import type { CliOperation } from "./args.ts";
import type { CliIo } from "./io.ts";
import { CudaError, type RefusalCode, RefusedError } from "../core/errors.ts";
import type { RoomCheck } from "../core/room.ts";
import type { ProcessState } from "../core/states.ts";

/** An error as `--json` gives it. */
export interface ErrorReport {
  /** The line printed on stderr: NVIDIA's, where it has one. */
  readonly message: string;
  /**
   * The driver's `CUresult` for a driver error (a number); for an operation refused before the
   * driver was asked, why, as a string (`NO_ROOM`, `MAPPING`, `STATE`, `UNSUPPORTED`).
   */
  readonly code?: number | string;
  /** The driver code's name, such as `CUDA_ERROR_ILLEGAL_STATE` (driver errors only). */
  readonly codeName?: string;
  /** True where the operation was refused before the driver was asked. */
  readonly refused?: boolean;
  /** Everything known: what failed, the state the process is in, what was done about it. */
  readonly detail: string;
}

/** A step as `--json` gives it. */
export interface StepReport {
  /** `lock`, `checkpoint`, `restore` or `unlock`. */
  readonly step: string;
  /** Its time in ms. */
  readonly ms: number;
  /** Whether it succeeded. */
  readonly ok: boolean;
}

/** What became of one process: one `--json` line (keys are left out where they do not apply). */
export interface PidReport {
  /** The pid as given. */
  readonly pid: number;
  /** The operation, as the command line names it (`get-state`, `lock`, `toggle`, ...). */
  readonly operation: CliOperation;
  /** Whether the process is now where the operation takes it. */
  readonly ok: boolean;
  /** Its state afterwards, where known. */
  readonly state?: ProcessState;
  /** `--get-restore-tid`'s answer. */
  readonly restoreThreadId?: number;
  /** For a step or toggle: `done`, `unchanged`, `failed`, `stopped` or `not-started`. */
  readonly status?: "done" | "unchanged" | "failed" | "stopped" | "not-started";
  /** Why it was not started, or stopped between steps: `deadline`, `another-failed`. */
  readonly reason?: string;
  /** The whole operation's time on this process, in ms. */
  readonly ms?: number;
  /** The driver calls made, in order. */
  readonly steps?: readonly StepReport[];
  /** Why it failed. */
  readonly error?: ErrorReport;
  /**
   * Where a restore was made: whether its room was checked first (`"checked"`), or why it could
   * not be (`{ "unknown": "..." }`).
   */
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
};

/** NVIDIA's line for a failed operation on a pid, with the driver's description of the code. */
export function nvidiaLine(operation: CliOperation, pid: number, error: unknown): string {
  const text = error instanceof CudaError
    ? error.description || error.codeName
    : error instanceof RefusedError
    ? REFUSAL_TEXT[error.code]
    : error instanceof Error
    ? error.message
    : String(error);
  switch (operation) {
    case "get-state":
      return `Error getting process state for process ID ${pid}: "${text}"`;
    case "get-restore-tid":
      return `Could not find restore thread for process ID ${pid}`;
    case "toggle":
      return `Error toggling CUDA in process ID ${pid}: "${text}"`;
    default:
      return `Could not ${operation} on process ID ${pid}: "${text}"`;
  }
}

/** The report of an error. */
export function errorReport(operation: CliOperation, pid: number, error: unknown): ErrorReport {
  const detail = error instanceof Error ? error.message : String(error);
  return {
    message: nvidiaLine(operation, pid, error),
    ...(error instanceof CudaError ? { code: error.code, codeName: error.codeName } : {}),
    ...(error instanceof RefusedError ? { code: error.code, refused: true } : {}),
    detail,
  };
}

/**
 * What NVIDIA's utility prints for one pid, from its report: the state or the thread id on
 * stdout (or the `--json` object), the error line on stderr; then, on a terminal, what more there
 * is to say. Resolves to the exit code.
 */
export function printOne(
  report: PidReport,
  print: Printer,
  json: boolean,
): number {
  if (json) print.json(report);
  else if (report.ok && report.state !== undefined && report.operation === "get-state") {
    print.out(report.state);
  } else if (report.ok && report.restoreThreadId !== undefined) {
    print.out(String(report.restoreThreadId));
  }
  if (report.error) print.failure(report.error);
  const note = roomNote(report);
  if (note) print.more(note);
  return report.ok ? 0 : 1;
}

/** The line a terminal gets where a restore's room could not be checked; `undefined` otherwise. */
export function roomNote(report: PidReport): string | undefined {
  const check = report.roomCheck;
  if (check === undefined || typeof check === "string") return undefined;
  return `the GPU room for process ${report.pid} could not be checked before its restore: ${check.unknown}`;
}

/** The word for a process in the `<pid> <result>` lines of several pids. */
export function resultWord(report: PidReport): string {
  if (report.status === undefined) {
    if (!report.ok) return "error";
    return report.operation === "get-restore-tid"
      ? String(report.restoreThreadId)
      : report.state ?? "error";
  }
  let word: string = report.status;
  if (report.status === "done" && report.rollback) {
    word = report.rollback.ok ? "rolled-back" : "rollback-failed";
  }
  return report.state === undefined ? word : `${word} ${report.state}`;
}

/** Writes to stdout and stderr; stderr's extra lines only on a terminal. */
export class Printer {
  readonly #io: CliIo;

  /** A printer on `io`. */
  constructor(io: CliIo) {
    this.#io = io;
  }

  /** Whether stderr is a terminal. */
  get terminal(): boolean {
    return this.#io.isTerminal === true;
  }

  /** A line on stdout. */
  out(line: string): void {
    this.#io.stdout(`${line}\n`);
  }

  /** A line on stderr. */
  err(line: string): void {
    this.#io.stderr(`${line}\n`);
  }

  /** Text on stderr as it is (a progress line). */
  raw(text: string): void {
    this.#io.stderr(text);
  }

  /** A line on stderr, on a terminal only. */
  more(line: string): void {
    if (this.terminal) this.err(`cuda-checkpoint: ${line}`);
  }

  /** A value as one JSON line on stdout. */
  json(value: unknown): void {
    this.out(JSON.stringify(value));
  }

  /** NVIDIA's line for a failure, then (on a terminal) everything known about it. */
  failure(error: ErrorReport): void {
    this.err(error.message);
    if (error.detail !== error.message && !error.message.endsWith(`"${error.detail}"`)) {
      this.more(error.detail);
    }
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
