// Time: a machine's clock, deadlines, rounded times, and work at most so much at once.

/** A clock in ms: the simulator's virtual time, or the real one. */
export interface Clock {
  /** Now, in ms. */
  now(): number;
  /** Resolves after `ms`; an abort of `signal` may end the wait (its timer let go) first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * Calls `fn` after `ms`, moving no virtual time; returns its cancel. Left out: steps check, and
   * no deadline (`waitForState`'s timeout among them) ends a wait for a process's turn.
   */
  timer?(ms: number, fn: () => void): () => void;
}

/** A time in ms to the microsecond, without floating-point noise. */
export const roundMs = (ms: number): number => Math.round(ms * 1000) / 1000;

/** The clock of a machine: its own where it keeps one (the simulator's), else the real clock. */
export function clockOf(machine: { readonly clock?: Clock }): Clock {
  const own = machine.clock;
  const sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const slept = own
      ? own.sleep(ms, signal)
      : new Promise<void>((resolve) => timer = setTimeout(resolve, ms));
    return signal ? untilAborted(slept, signal, () => (clearTimeout(timer), true)) : slept;
  };
  return { now: own ? () => own.now() : () => performance.now(), sleep };
}

/** Calls `fn` after `ms` on `clock`'s timer, or on a real one where it has none; its cancel. */
export function timerOn(clock: Clock | undefined, ms: number, fn: () => void): () => void {
  if (clock?.timer) return clock.timer(ms, fn);
  const handle = setTimeout(fn, ms);
  return () => clearTimeout(handle);
}

/** `p`, or its rejection with `signal`'s reason once that aborts, where `when()` says so then. */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal, when = () => true): Promise<T> {
  const { promise, resolve, reject } = Promise.withResolvers<T>();
  const onAbort = () => when() && reject(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  if (signal.aborted) onAbort();
  p.finally(() => signal.removeEventListener("abort", onAbort)).then(resolve, reject);
  return promise;
}

/** A deadline on a clock for a whole operation; `timeoutMs` undefined never passes. */
export class Deadline {
  readonly #start: number;
  readonly #now: () => number;
  #end: number;

  /** A deadline `timeoutMs` from now on `clock`'s time. */
  constructor(clock: { now(): number }, timeoutMs: number | undefined) {
    this.#now = () => clock.now();
    this.#start = clock.now();
    this.#end = timeoutMs === undefined ? Infinity : this.#start + timeoutMs;
  }

  /** The ms since it began, to the microsecond ({@link roundMs}). */
  elapsed(): number {
    return roundMs(this.#now() - this.#start);
  }

  /** Whole ms left (rounded up: a wait that uses them ends at the deadline), or `undefined`. */
  left(): number | undefined {
    return this.#end === Infinity ? undefined : Math.max(0, Math.ceil(this.#end - this.#now()));
  }

  passed(): boolean {
    return this.#now() >= this.#end;
  }

  /** Calls `fn` as it passes (`passed()` then, an early timer's too); none on a timerless clock. */
  onPassed(clock: Clock | undefined, fn: () => void): () => void {
    const left = this.left(), at = () => (this.#end = Math.min(this.#end, this.#now()), fn());
    return left !== undefined && (!clock || clock.timer) ? timerOn(clock, left, at) : () => {};
  }

  /** A lock timeout (0: forever) cut to what is left, at least 1 ms. */
  cut(lockTimeoutMs: number): number {
    const left = this.left();
    if (left === undefined) return lockTimeoutMs;
    return lockTimeoutMs === 0 ? Math.max(1, left) : Math.min(lockTimeoutMs, Math.max(1, left));
  }
}

/** Whether `p` settles within `ms`; no timer is left behind either way. */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<boolean>((r) => timer = setTimeout(() => r(false), ms));
  return await Promise.race([p.then(() => true, () => true), late])
    .finally(() => clearTimeout(timer));
}

/** Work in flight, at most so much at once; the rest wait their turn, in the order they came. */
export class Slots {
  readonly #size: number;
  #free: number;
  readonly #waiting: (() => void)[] = [];

  /** At most `size` at once (at least one). */
  constructor(size: number) {
    this.#free = this.#size = Math.max(1, Math.floor(size));
  }

  /** How many run now. */
  get busy(): number {
    return this.#size - this.#free;
  }

  /** Runs `task` once a slot is free, and frees it when the task settles. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}
