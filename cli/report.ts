/**
 * What `cuda-checkpoint` says about each process: NVIDIA's error lines, the `<pid> <result>` lines
 * of several pids, and the JSON objects of `--json`, with their field names in one place.
 *
 * @module
 */

import type { CliOperation } from "./command.ts";
import { type CliIo, escapeControls } from "./io.ts";
import { CheckpointError, CudaError, messageOf } from "../core/errors.ts";
import { PATH_ERRORS, RefusedError } from "../core/errors.ts";
import type { RoomCheck, StepRecord } from "../types.ts";
import { callDriver, stateOf } from "../core/calls.ts";
import type { CheckpointDriver } from "../core/driver.ts";
import type { ProcessOutcome, ProcessState } from "../mod.ts";

/**
 * An error as `--json` gives it: `message` the line printed on stderr (NVIDIA's, where it has one);
 * `code` the driver's `CUresult`, or for an operation `refused` before the driver was asked, why
 * (`NO_ROOM`, ...); `codeName` and `name` the code's and the error class's names; `detail`
 * everything known (what failed, the state the process is in, what was done about it).
 */
export interface ErrorReport {
  readonly message: string;
  readonly code?: number | string;
  readonly codeName?: string;
  readonly name?: string;
  readonly refused?: boolean;
  readonly detail: string;
}

/**
 * What became of one process: one `--json` line, keys left out where they do not apply. `ok`:
 * whether it is where the operation takes it; `state`: where it is now, where known; `status`, for
 * a step or toggle (`rolled-back`: `--all-or-nothing` or an interrupt brought it back, else
 * `rollback-failed`), and `reason` (`deadline`, `another-failed`) where it was not started or
 * stopped before a step; `ms`: the whole operation's time on it; `steps`: the driver calls made;
 * `roomCheck`: where a restore was made, `"checked"` or why its room could not be (`{ unknown }`);
 * `rollback`: its own after a failed step, or all-or-nothing's.
 */
export interface PidReport {
  readonly pid: number;
  readonly operation: CliOperation;
  readonly ok: boolean;
  readonly state?: ProcessState;
  readonly restoreThreadId?: number;
  readonly status?: ProcessOutcome["status"] | "rollback-failed";
  readonly reason?: string;
  readonly ms?: number;
  readonly steps?: readonly StepRecord[];
  readonly error?: ErrorReport;
  readonly roomCheck?: RoomCheck;
  readonly rollback?: { ok: boolean; steps: readonly StepRecord[]; error?: ErrorReport };
}

/**
 * What NVIDIA's utility would quote for a refusal: the driver's words for its code, or ours; for
 * one it would not make (`IPC`: it would lose the process; a stopped process, no state: it would
 * wait), the reason itself.
 */
const REFUSAL_TEXT: Readonly<Record<Exclude<RefusedError["code"], "IPC">, string>> = {
  STATE: "the operation cannot be performed in the present state",
  MAPPING: "invalid argument",
  UNSUPPORTED: "operation not supported",
  NO_ROOM: "not enough free GPU memory for it: refused before asking the driver",
  REPLACED: "the pid names another process now",
  PREREQUISITE: "a prerequisite is missing",
  PID_TAKEN: "the pid is taken",
  SNAPSHOT: "not a snapshot this version can read",
};

/** The report of an error: NVIDIA's line for a failed operation on a pid, and all that is known. */
export function errorReport(operation: CliOperation, pid: number, error: unknown): ErrorReport {
  const text = error instanceof CudaError
    ? error.description || error.codeName
    : error instanceof RefusedError
    ? error.code === "IPC" || !error.state && error.code === "STATE"
      ? error.reason
      : REFUSAL_TEXT[error.code]
    : messageOf(error);
  const message = operation === "get-state"
    ? `Error getting process state for process ID ${pid}: "${text}"`
    : operation === "get-restore-tid"
    ? `Could not find restore thread for process ID ${pid}`
    : operation === "toggle"
    ? `Error toggling CUDA in process ID ${pid}: "${text}"`
    : `Could not ${operation} on process ID ${pid}: "${text}"`;
  // Keys left undefined are left out of the JSON line, as those that do not apply.
  return {
    message,
    name: error instanceof CheckpointError ? error.name : undefined,
    code: error instanceof CudaError || error instanceof RefusedError ? error.code : undefined,
    codeName: error instanceof CudaError ? error.codeName : undefined,
    refused: error instanceof RefusedError || undefined,
    detail: messageOf(error),
  };
}

/** Why a process was not started or was stopped, in words. */
const REASONS: Readonly<Record<string, string>> = {
  "another-failed": "another process failed, and --all-or-nothing (or --job) was given",
  deadline: "the deadline passed",
  aborted: "the command was interrupted",
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
    const { pid, ok, status, state } = report;
    // What a query that succeeded answers: the state, or the restore thread id.
    const answer = ok && status === undefined ? String(report.restoreThreadId ?? state) : undefined;
    const word = status ? [status, state].filter(Boolean).join(" ") : answer ?? "error";
    const line = json ? JSON.stringify(report) : several ? `${pid} ${word}` : answer;
    if (line !== undefined) print.out(line);
  }
  // The failures first: a group's hundreds of processes not started do not bury them.
  for (const { error } of reports) {
    if (error) print.err(error.message);
    if (error && error.detail !== error.message && !error.message.endsWith(`"${error.detail}"`)) {
      print.more(error.detail);
    }
  }
  for (const { pid, status, reason, rollback, state } of reports) {
    if (status === "not-started" || status === "stopped") {
      const what = status === "stopped" ? "was stopped before a step" : "was not started";
      // A stop between steps undoes the first ones: say so, as a rollback says it.
      const steps = rollback?.steps.map((s) => s.step).join(", ");
      const undone = !steps
        ? ""
        : rollback!.ok
        ? `; what it had done was undone (${steps}): it is ${state} again`
        : `; undoing what it had done failed (${rollback!.error?.detail}): it is ${state}`;
      print.err(`Process ID ${pid} ${what}: ${REASONS[reason ?? ""] ?? reason}${undone}`);
    }
    if (rollback && (status === "rolled-back" || status === "rollback-failed")) {
      const back = `was brought back to ${state}`; // why: the failure's or stop's line
      const failed = `could not be brought back: ${rollback.error?.detail}`;
      print.more(`process ID ${pid} ${rollback.ok ? back : failed}`);
    }
  }
  for (const { pid, roomCheck } of reports) {
    if (roomCheck === undefined || typeof roomCheck === "string") continue;
    const unknown = `the GPU room for process ${pid} could not be checked before its restore`;
    print.more(`${unknown}: ${roomCheck.unknown}`);
  }
  return reports.every((r) => r.ok) ? 0 : 1;
}

/**
 * Writes lines to stdout and stderr, each one line (a newline within it written `\u000a`, so that
 * a process's text cannot fake a line of ours) with its control characters escaped
 * ({@link escapeControls}); erases the live line first, where one shows.
 */
export class Printer {
  /** The live line on stderr (`progress.ts`), erased before anything else is written. */
  live: { erase(): void } | undefined;

  constructor(readonly io: CliIo, private readonly asJson = false) {}

  /** Whether stderr is a terminal: extra lines, and the live line. */
  get terminal(): boolean {
    return this.io.isTerminal === true;
  }

  out(line: string, to: "stdout" | "stderr" = "stdout"): void {
    this.live?.erase();
    this.io[to](escapeControls(`${line.replaceAll("\n", "\\u000a")}\n`));
  }

  err(line: string): void {
    this.out(line, "stderr");
  }

  /** The command line's own terminal controls on stderr, as they are (the live line). */
  raw(text: string): void {
    this.io.stderr(text);
  }

  /** A line on stderr, on a terminal only. */
  more(line: string): void {
    if (this.terminal) this.err(`cuda-checkpoint: ${line}`);
  }

  /** `cuda-checkpoint: <message>` on stderr, for an error of the command (`asJson`: JSON too). */
  error(error: unknown, orCode?: string): void {
    const { code = orCode, name } = Object(error) as { code?: unknown; name?: string };
    const message = commandMessage(error);
    this.err(`cuda-checkpoint: ${message}`);
    if (this.asJson) this.json({ ok: false, error: { message, code, name } });
  }

  json(value: unknown): void {
    this.out(JSON.stringify(value));
  }
}

/**
 * One stderr line about processes that could not be looked at: how many, their pids (the first
 * eight), and why: the first reason of each kind, numbers aside, up to three (another user's
 * process seen without root, say, and one stopped).
 */
export function warnUninspectable(
  uninspected: readonly { readonly pid: number; readonly reason: string }[],
  print: Printer,
): void {
  const count = uninspected.length, one = count === 1;
  if (count === 0) return;
  const shown = uninspected.slice(0, 8).map((p) => p.pid).join(", ");
  const pids = one ? `pid ${shown}` : `pids ${shown}${count > 8 ? ` and ${count - 8} more` : ""}`;
  const kinds = uninspected.map((p) => p.reason.replace(/\d+/g, "#")); // numbers aside
  const firsts = uninspected.filter((_, i) => kinds.indexOf(kinds[i]) === i).slice(0, 3);
  const why = firsts.map((p) => `${one ? "" : `pid ${p.pid}: `}${p.reason}`).join("; ");
  const what = `${count} process${one ? "" : "es"} could not be looked at and may be`;
  const cuda = one ? "a CUDA process" : "CUDA processes";
  print.err(`cuda-checkpoint: ${what} ${cuda} (${pids}): ${why}`);
}

/**
 * An error of a command as the command line says it: its message, with the system's raw lines
 * that it may carry (`ENOTDIR: not a directory, lstat '/a/b'`) made sentences that name the path,
 * in the words of {@link PATH_ERRORS}.
 */
export function commandMessage(error: unknown): string {
  return messageOf(error).replace(
    /\b(E[A-Z]+): [^,\n]*, [a-z]+ '([^'\n]*)'/g,
    (raw, code: string, path: string) =>
      PATH_ERRORS[code] ? `${path}: ${PATH_ERRORS[code]} (${code})` : raw,
  );
}

/**
 * The fast path of a query of one pid, and of anything of pid 0 (which NVIDIA's utility hands to
 * the driver): the one driver call, without a session, host or queue; never rejects.
 */
export async function query(
  operation: CliOperation,
  pid: number,
  driver: CheckpointDriver,
): Promise<PidReport> {
  try {
    if (operation === "get-restore-tid") {
      const restoreThreadId = await callDriver(driver, "getRestoreThreadId", pid);
      return { pid, operation, ok: true, restoreThreadId };
    }
    if (operation === "get-state" || operation === "toggle") {
      const state = stateOf(await callDriver(driver, "getState", pid), pid);
      if (operation === "get-state") return { pid, operation, ok: true, state };
    } else await callDriver(driver, operation, pid, operation === "lock" ? { timeoutMs: 0 } : null);
    // Only pid 0 comes here, and the driver knows no process 0: this is not reached on a driver
    // that keeps to the seam's rules.
    throw new Error(`the driver answered CUDA_SUCCESS for ${operation} of process ${pid}`);
  } catch (error) {
    const status = operation.startsWith("get-") ? undefined : "failed" as const; // as a step's
    return { pid, operation, ok: false, status, error: errorReport(operation, pid, error) };
  }
}
