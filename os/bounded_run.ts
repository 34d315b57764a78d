// A program run as root with a bound: an argument array, a deadline and an abort signal. One that
// overstays is ended (SIGTERM, then SIGKILL after a grace), its children are killed and waited
// for, and what it worked on is sent SIGCONT (criu may have left it stopped); processes are known
// with their start times, so that a reused pid is never signalled. At this program's exit (a
// second Ctrl-C, `process.exit`, `Deno.exit`) each run under way is ended so at once; a SIGKILL of
// this program cannot be seen, and the run goes on (docs/SNAPSHOTS.md, "The engine").

import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import process from "node:process";
import { descendants, type ProcEntry, procTable, statOf } from "./linux_host.ts";
import { errorCode } from "./private.ts";
import { settlesWithin } from "../core/time.ts";

/** How long a program has between SIGTERM and SIGKILL, in ms. */
const GRACE_MS = 2000;
/** How long the children of an ended program have to go after SIGKILL, in ms. */
const CHILDREN_WAIT_MS = 2000;
/** The most output of each stream kept (its end), in characters. */
const MAX_OUTPUT = 64 * 1024;

/** What bounds a run. */
export interface RunBound {
  /** Ends the run when it aborts. */
  readonly signal?: AbortSignal;
  /** Ends the run once this many ms have passed. */
  readonly timeoutMs?: number;
  /**
   * The processes the program works on, read before it starts and again when it is ended
   * (before it is signalled): each is sent SIGCONT once the program and its children are gone.
   */
  readonly worksOn?: () => Promise<readonly number[]>;
}

/**
 * How an overstaying run was ended: why (its deadline passed, or its signal aborted), when (ms after
 * it started), whether it outlived SIGTERM and was `killed` with SIGKILL, its `children` (and
 * theirs) killed with SIGKILL and waited for, those still there after the wait (another process's
 * children now: reported, not hidden), and the processes it worked on that were sent SIGCONT.
 */
export type Ending = Readonly<{
  why: "deadline" | "aborted";
  afterMs: number;
  killed: boolean;
  children: readonly number[];
  childrenLeft: readonly number[];
  continued: readonly number[];
}>;

/** What a run came to: its exit code (128 for a signal), the end of each output, how it was ended. */
export type RunResult = Readonly<{ code: number; stdout: string; stderr: string; ended?: Ending }>;

type Signal = "SIGSTOP" | "SIGCONT" | "SIGTERM" | "SIGKILL";

/** The runs under way, each ended at once by {@link endAllNow} when this program exits. */
const running = new Set<{ pid: number; gone: () => boolean; worksOn: readonly number[] }>();
let watching = false;

/** Kills every run under way and its children, and sends SIGCONT to what it worked on: at exit. */
function endAllNow(): void {
  const table = new Map<number, ProcEntry>();
  for (const name of running.size > 0 ? readdirSync("/proc") : []) {
    const stat = /^[0-9]+$/.test(name) && statOf(name);
    if (stat) table.set(+name, stat);
  }
  // Sent now; one gone, or not ours to signal, is left: nothing more can be done now.
  const send = (pid: number, signal: Signal) => Promise.try(kill, pid, signal).catch(() => {});
  for (const run of running) {
    if (!run.gone()) send(run.pid, "SIGKILL");
    for (const p of descendants(table, run.pid)) send(p, "SIGKILL");
    for (const p of run.worksOn) if (table.has(p)) send(p, "SIGCONT");
  }
  running.clear();
}

/**
 * Runs `program` with `args` and exactly the environment `env`, bounded as `bound` says; resolves
 * once it has exited (and its children are gone, where it was ended); rejects where it cannot
 * start. A signal already aborted starts nothing: it resolves at once as ended.
 */
export async function runBounded(
  program: string,
  args: readonly string[],
  env: Record<string, string>,
  bound: RunBound = {},
): Promise<RunResult> {
  // Known before it starts, for an exit of this program that cannot wait to read them.
  const worksOn = await bound.worksOn?.().catch(() => []) ?? [];
  if (bound.signal?.aborted) {
    const none = { afterMs: 0, killed: false, children: [], childrenLeft: [], continued: [] };
    return { code: 128, stdout: "", stderr: "", ended: { why: "aborted", ...none } };
  }
  if (!watching) {
    watching = true;
    process.on("exit", endAllNow);
    globalThis.addEventListener?.("unload", endAllNow); // Deno.exit() fires this, not "exit"
  }
  const t0 = performance.now();
  // A session of its own: a terminal's Ctrl-C or hangup reaches this program, which stops the run
  // as its bound says, never the run directly (a criu dying mid-dump, its tree untended); and a
  // tree criu restores (--shell-job) joins criu's session, not the terminal's.
  const child = spawn(program, args, { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const output = { stdout: "", stderr: "" };
  const collect = (name: "stdout" | "stderr") =>
    new Promise<void>((r) => {
      const stream = child[name]!.setEncoding("utf8");
      stream.on("data", (d: string) => output[name] = (output[name] + d).slice(-MAX_OUTPUT));
      stream.once("close", () => r()).once("error", () => r());
    });
  const closed = Promise.all([collect("stdout"), collect("stderr")]);
  let exitedNow = false;
  const exited = new Promise<{ code: number | null; sig: string | null }>((r, fail) => {
    child.once("error", fail).once("exit", (code, sig) => {
      exitedNow = true;
      r({ code, sig });
    });
  });
  const run = { pid: child.pid!, gone: () => exitedNow, worksOn };
  if (child.pid !== undefined) running.add(run);
  let ending: Promise<Ending> | undefined;
  const end = (why: Ending["why"]) => {
    if (ending || exitedNow) return;
    ending = endRun(run, exited, why, performance.now() - t0, bound);
    ending.catch(() => {}); // awaited once the program has exited, or it rejects the run there
  };
  const timer = bound.timeoutMs === undefined
    ? undefined
    : setTimeout(() => end("deadline"), Math.max(0, bound.timeoutMs));
  const onAbort = () => end("aborted");
  bound.signal?.addEventListener("abort", onAbort, { once: true });
  const exit = await exited.finally(() => {
    running.delete(run);
    clearTimeout(timer);
    bound.signal?.removeEventListener("abort", onAbort);
  });
  // Where it could not be ended as its bound says (a signal refused), the run fails, saying so.
  const ended = ending ? await ending : undefined;
  // A child of the program that still holds its output must not hold this run.
  const streams = [child.stdout!, child.stderr!];
  if (!(await settlesWithin(closed, 1000))) streams.forEach((stream) => stream.destroy());
  return { code: exit.code ?? (exit.sig ? 128 : -1), ...output, ...(ended ? { ended } : {}) };
}

/** What an overstaying criu run was ended for, and what it left, in one sentence. */
export function endedSentence(op: string, root: number, e: Ending, bound: RunBound): string {
  const why = e.why === "deadline"
    ? `its deadline of ${bound.timeoutMs} ms passed`
    : "it was aborted";
  const how = e.killed
    ? `criu outlived SIGTERM and was killed with SIGKILL ${GRACE_MS} ms later`
    : "criu ended on SIGTERM";
  const whose = op === "restore" ? "the processes it had made" : "its child processes";
  let left = e.children.length > 0 ? `; ${whose} (${e.children.join(", ")}) were killed` : "";
  if (e.childrenLeft.length > 0) { // some of those children
    left += `, though ${e.childrenLeft.join(", ")} still ran after ${CHILDREN_WAIT_MS / 1000} s`;
  }
  if (op === "dump") {
    left += e.continued.length > 0
      ? `; the tree's processes (${e.continued.join(", ")}) were sent SIGCONT, in case criu had ` +
        `left them stopped`
      : "; none of the tree's processes was left to send SIGCONT to";
  }
  return `criu ${op} of the tree of ${root} was ended after ${e.afterMs} ms (${why}): ${how}${left}`;
}

/**
 * Ends the run of `pid` (see {@link runBounded}). `gone` says whether its exit was seen: once it
 * was, the pid may be reaped and another process's, so it is signalled no more.
 */
async function endRun(
  { pid, gone }: { pid: number; gone: () => boolean },
  exited: Promise<unknown>,
  why: Ending["why"],
  afterMs: number,
  bound: RunBound,
): Promise<Ending> {
  const table = await procTable(), children = descendants(table, pid);
  const worksOn = await bound.worksOn?.().catch(() => []) ?? [];
  const startOf = new Map([...table].map(([p, e]) => [p, e.start]));
  // By pid, not ChildProcess.kill(): Deno's sends no second signal once one was sent. Only while
  // its exit is unseen: until then its pid and group (detached: all it started since) are its own.
  if (!gone()) signalEach([pid, -pid], "SIGTERM");
  let killed = false;
  if (!(await settlesWithin(exited, GRACE_MS))) {
    // More children may have come meanwhile: theirs too.
    const later = await procTable();
    for (const p of descendants(later, pid)) {
      if (!children.includes(p)) children.push(p);
      startOf.set(p, later.get(p)!.start);
    }
    killed = !gone();
    if (killed) signalEach([pid], "SIGKILL");
    await exited;
  }
  for (const p of children) signalSame(p, startOf.get(p), "SIGKILL");
  // Each waited for until it is gone (or a zombie), or CHILDREN_WAIT_MS have passed.
  const stays = (p: number) => {
    const now = statOf(p);
    return !!now && now.start === startOf.get(p) && now.state !== "Z";
  };
  const deadline = performance.now() + CHILDREN_WAIT_MS;
  while (children.some(stays) && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const childrenLeft = children.filter(stays);
  const now = await procTable();
  const woken = worksOn.filter((p) => now.has(p) && signalSame(p, now.get(p)!.start, "SIGCONT"));
  return { why, afterMs: Math.round(afterMs), killed, children, childrenLeft, continued: woken };
}

/** Sends `signal` to each pid; one already gone (or not yet reaped) is no error. */
export function signalEach(pids: readonly number[], signal: Signal): void {
  for (const pid of pids) kill(pid, signal);
}

/** Sends `signal` to `pid`: false where there is no such process (ESRCH); other errors thrown. */
function kill(pid: number, signal: Signal): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch (err) {
    if (errorCode(err) === "ESRCH") return false;
    throw err;
  }
}

/** `pid` and the processes descended from it, parents first; empty where there is no such process. */
export async function treeOf(pid: number): Promise<number[]> {
  const table = await procTable();
  return table.has(pid) ? [pid, ...descendants(table, pid)] : [];
}

/** Sends `signal` to `pid` where it is still the process that started at `start`. */
function signalSame(pid: number, start: number | undefined, signal: Signal): boolean {
  const now = statOf(pid);
  return !!now && (start === undefined || now.start === start) && kill(pid, signal);
}
