/**
 * The progress line of `cuda-checkpoint` on a terminal: which step runs on which pid, for how
 * long, and the elapsed time, redrawn in place on stderr every 100 ms. It shows only once an
 * operation has run for 300 ms, so quick calls print nothing, and it is cleared before the results
 * are printed.
 *
 * @module
 */

/**
 * A step (`lock`, ..., or `toggle` for one pid) starting or ending: the group operations' events,
 * or the single-pid path's own; with the process's GPU memory in MiB where known.
 */
export interface ProgressEvent {
  readonly type: "step-start" | "step-end";
  readonly pid: number;
  readonly step: string;
  readonly gpuMemoryMiB?: number;
  readonly rollback?: boolean;
}

/**
 * Options of {@link ProgressLine}: where it writes (stderr), how many processes the operation has,
 * the clock in ms (default `performance.now()`), the terminal's width (default 80).
 */
export interface ProgressOptions {
  readonly write: (text: string) => void;
  readonly total: number;
  readonly now?: () => number;
  readonly columns?: number;
}

/** Erases the terminal line the cursor is on and goes to its start. */
const CLEAR = "\r\x1b[2K";

/** The progress line (see the module documentation). */
export class ProgressLine {
  readonly #write: (text: string) => void;
  readonly #total: number;
  readonly #now: () => number;
  readonly #columns: number;
  /** The steps under way, by pid, each with the time it started. */
  readonly #running = new Map<number, ProgressEvent & { since: number }>();
  readonly #finished = new Set<number>();
  readonly #start: number;
  #timer: ReturnType<typeof setInterval> | undefined;
  #shown = false;

  /** Starts timing; the line appears after 300 ms. */
  constructor(options: ProgressOptions) {
    this.#write = options.write;
    this.#total = options.total;
    this.#now = options.now ?? (() => performance.now());
    this.#columns = options.columns ?? 80;
    this.#start = this.#now();
    this.#timer = setInterval(() => {
      if (this.#now() - this.#start < 300) return;
      this.#shown = true;
      this.#write(`${CLEAR}${this.text()}`);
    }, 100);
  }

  /** Takes a step's start or end. */
  event(event: ProgressEvent): void {
    if (event.type === "step-end") this.#running.delete(event.pid);
    else this.#running.set(event.pid, { ...event, since: this.#now() });
  }

  /** Counts a process as finished (for the "n/total done" part). */
  finished(pid: number): void {
    this.#finished.add(pid);
  }

  /** The line as it would be drawn now, without the control characters. */
  text(): string {
    const now = this.#now();
    const parts = [...this.#running].map(([pid, { step, gpuMemoryMiB: mib, rollback, since }]) =>
      `${pid} ${rollback ? "rollback " : ""}${step}${
        mib === undefined
          ? ""
          : mib < 1024
          ? ` ${Math.round(mib)} MiB`
          : ` ${(mib / 1024).toFixed(1)} GiB`
      } ${seconds(now - since)}`
    );
    const count = this.#total > 1 ? ` [${this.#finished.size}/${this.#total} done]` : "";
    const line = `cuda-checkpoint: ${seconds(now - this.#start)}${count} ${parts.join(", ")}`;
    const width = this.#columns - 1;
    return line.length > width ? `${line.slice(0, width - 1)}…` : line;
  }

  /** Stops and clears the line, so that what follows starts on a clean line. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#shown) this.#write(CLEAR);
    this.#shown = false;
  }
}

/** `1.2 s`. */
function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
}
