/**
 * The progress line of `cuda-checkpoint` on a terminal: which step runs on which pid, for how
 * long, and the elapsed time, redrawn in place on stderr. It shows only once an operation has run
 * for a moment, so quick calls print nothing, and it is cleared before the results are printed.
 *
 * @module
 */

/** A step starting or ending (the group operations' events, or the single-pid path's own). */
export interface ProgressEvent {
  /** Whether the step starts or ends. */
  readonly type: "step-start" | "step-end";
  /** The process. */
  readonly pid: number;
  /** The step (`lock`, `checkpoint`, ..., or `toggle` for one pid). */
  readonly step: string;
  /** The process's GPU memory in MiB, where known. */
  readonly gpuMemoryMiB?: number;
  /** Whether it was part of a rollback. */
  readonly rollback?: boolean;
}

/** Options of {@link ProgressLine}. */
export interface ProgressOptions {
  /** Writes to stderr. */
  readonly write: (text: string) => void;
  /** How many processes the operation has. */
  readonly total: number;
  /** The clock, in ms. Default `performance.now()`. */
  readonly now?: () => number;
  /** How long an operation runs before the line appears, in ms. Default 300. */
  readonly delayMs?: number;
  /** How often the line is redrawn, in ms. Default 100. */
  readonly intervalMs?: number;
  /** The terminal's width. Default 80. */
  readonly columns?: number;
}

/** A running step. */
interface Running {
  readonly step: string;
  readonly since: number;
  readonly mib?: number;
  readonly rollback: boolean;
}

/** Erases the terminal line the cursor is on and goes to its start. */
const CLEAR = "\r\x1b[2K";

/** The progress line (see the module documentation). */
export class ProgressLine {
  readonly #o: Required<Omit<ProgressOptions, "write" | "total">>;
  readonly #write: (text: string) => void;
  readonly #total: number;
  readonly #running = new Map<number, Running>();
  readonly #finished = new Set<number>();
  readonly #start: number;
  #timer: ReturnType<typeof setInterval> | undefined;
  #shown = false;

  /** Starts timing; the line appears after `delayMs`. */
  constructor(options: ProgressOptions) {
    this.#write = options.write;
    this.#total = options.total;
    this.#o = {
      now: options.now ?? (() => performance.now()),
      delayMs: options.delayMs ?? 300,
      intervalMs: options.intervalMs ?? 100,
      columns: options.columns ?? 80,
    };
    this.#start = this.#o.now();
    this.#timer = setInterval(() => this.#draw(), this.#o.intervalMs);
  }

  /** Takes a step's start or end. */
  event(event: ProgressEvent): void {
    if (event.type === "step-start") {
      this.#running.set(event.pid, {
        step: event.step,
        since: this.#o.now(),
        mib: event.gpuMemoryMiB,
        rollback: event.rollback === true,
      });
    } else {
      this.#running.delete(event.pid);
    }
  }

  /** Counts a process as finished (for the "n/total done" part). */
  finished(pid: number): void {
    this.#finished.add(pid);
  }

  /** The line as it would be drawn now, without the control characters. */
  text(): string {
    const now = this.#o.now();
    const parts = [...this.#running].map(([pid, r]) =>
      `${pid} ${r.rollback ? "rollback " : ""}${r.step}${
        r.mib === undefined ? "" : ` ${formatMiB(r.mib)}`
      } ${seconds(now - r.since)}`
    );
    const count = this.#total > 1 ? ` [${this.#finished.size}/${this.#total} done]` : "";
    let line = `cuda-checkpoint: ${seconds(now - this.#start)}${count} ${parts.join(", ")}`;
    const width = this.#o.columns - 1;
    if (line.length > width) line = `${line.slice(0, width - 1)}…`;
    return line;
  }

  /** Stops and clears the line, so that what follows starts on a clean line. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#shown) this.#write(CLEAR);
    this.#shown = false;
  }

  #draw(): void {
    if (this.#o.now() - this.#start < this.#o.delayMs) return;
    this.#shown = true;
    this.#write(`${CLEAR}${this.text()}`);
  }
}

/** `1.2 s`. */
function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
}

/** `512 MiB`, `1.5 GiB`. */
function formatMiB(mib: number): string {
  return mib < 1024 ? `${Math.round(mib)} MiB` : `${(mib / 1024).toFixed(1)} GiB`;
}
