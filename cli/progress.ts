/**
 * The progress of long work (README, "Command line"): on a terminal, one live line on stderr,
 * redrawn on the machine's clock and erased before anything else is written; with `--events`,
 * each event as a JSON line on stderr instead (asked for: stderr stays NVIDIA's lines for
 * scripts). The driver says nothing while it copies a process's GPU memory: its progress is
 * estimated ("~") from this run's rates once a step of its kind ended, else those kept by the runs
 * before that showed progress (each run's mean with the one kept before it, beside the records of
 * held memory), else docs/DRIVER.md's ("Timings"); so is criu's restore till a tenth is read back.
 * criu's bytes: its count as it writes a dump (at least the GPU memory) or reads a restore back.
 *
 * @module
 */

import type { Clock } from "../driver.ts";
import type { HostProcesses, Rates } from "../core/host.ts";
import type { SnapshotEvent } from "../snapshot.ts";
import { roundMs, timerOn } from "../core/time.ts";
import type { Printer } from "./report.ts";

/** What progress follows: a snapshot's, restore's or group's events, or an operation's phase. */
export type Followed =
  | SnapshotEvent
  | { readonly type: "phase"; readonly phase: string; readonly at: number };

/**
 * Options of {@link progressOf}: how many processes an operation has (a count `n/N done`, and each
 * one's step), what the line calls a phase where not as {@link PHASES} does, the step a process not
 * yet in one is expected to make (`checkpoint` by default, and in a suspend), the terminal's width,
 * the rates measured before, and where this run's go when it stops.
 */
export interface ProgressOptions {
  readonly total?: number;
  readonly labels?: Readonly<Record<string, string>>;
  readonly expect?: "checkpoint" | "restore";
  readonly columns?: number;
  readonly rates?: Rates;
  readonly keep?: (rates: Rates) => Promise<void>;
}

/**
 * Bytes per ms where nothing was measured yet: the driver's checkpoint (1.7-2.2 GB/s) and restore
 * (4-6 GB/s) of one process (docs/DRIVER.md, "Timings"), criu's restore of images (about 2 GB/s).
 */
const RATES: Readonly<Record<string, number>> = { checkpoint: 2e6, restore: 5e6, images: 2e6 };
/** What the line calls each phase of a snapshot and a restore. */
const PHASES: Readonly<Record<string, string>> = {
  check: "checking",
  suspend: "suspending the CUDA processes",
  dump: "dumping",
  write: "writing the manifest",
  end: "ending the processes",
  restore: "restoring the process trees",
  resume: "resuming on the GPUs",
  rollback: "putting things back",
};
const MIB = 2 ** 20;
/** Erases the terminal line the cursor is on and goes to its start. */
const CLEAR = "\r\x1b[2K";

/**
 * JSON events where `events` is asked, a live line where `print` is a terminal, else nothing; the
 * rates the machine's records keep, read first, and this run's kept there.
 */
export async function progressOf(
  print: Printer,
  events: boolean,
  machine: { readonly clock?: Clock; readonly host?: HostProcesses },
  options: ProgressOptions = {},
): Promise<Progress | undefined> {
  if (!print.terminal && !events) return undefined;
  const records = machine.host?.heldRecords, keep = records?.keepRates?.bind(records);
  const rates = await records?.rates?.().catch(() => undefined); // estimates only: none is fine
  return new Progress(print, machine.clock, { ...options, rates, keep }, events);
}

/** See the module documentation. */
export class Progress {
  readonly #print: Printer;
  readonly #now: () => number;
  readonly #start: number;
  #o: ProgressOptions;
  #phase = "";
  #since: number;
  /** Each process's GPU memory in bytes; those the phase moves, and have moved; their steps. */
  readonly #held = new Map<number, number>();
  #moving = new Set<number>();
  #moved = new Set<number>();
  readonly #steps = new Map<number, { step: string; since: number; undoing: boolean }>();
  readonly #done = new Set<number>();
  /** This run's bytes and ms of each driver step, and of criu's restore so far (`images`). */
  readonly #measured = new Map<string, [number, number]>();
  /** criu's count of each tree's images written (or read back, 0 once back); the memory held. */
  readonly #written = new Map<number, number>();
  #suspended = 0;
  #dumpFrom: [number, number] | undefined; // criu's rate from: when, and what it had written then
  /** A restore's images, those of the trees back (and their pids), since when criu reads them. */
  #images = 0;
  #read = 0;
  #readFrom = 0;
  readonly #back = new Set<number>();
  /** An engine's wait till it can restore a tree: till when, and why. */
  #wait = { until: 0, why: "" };
  #floor = { of: new Set<number>(), done: 0 }; // the most shown moved, of that set of processes
  #cancel: (() => void) | undefined;
  #shown = false;
  readonly #events: boolean;

  constructor(print: Printer, clock: Clock | undefined, o: ProgressOptions, events: boolean) {
    [this.#print, this.#o, this.#events] = [print, o, events];
    this.#now = clock ? () => clock.now() : () => performance.now();
    this.#start = this.#since = this.#now();
    if (events) return;
    print.live = this;
    const tick = () => {
      this.#cancel = timerOn(clock, 200, () => {
        if (this.#now() - this.#start >= 300) {
          print.raw(`${CLEAR}${this.text()}`);
          this.#shown = true;
        }
        tick();
      });
    };
    tick();
  }

  /** Takes an event; with `--events`, writes it as JSON. */
  event(e: Followed): void {
    const now = this.#now();
    const mib = "gpuMemoryMiB" in e ? e.gpuMemoryMiB : undefined;
    const bytes = typeof mib === "number" ? mib * MIB : "pid" in e ? this.#held.get(e.pid) : 0;
    if (e.type === "phase") {
      [this.#phase, this.#since, this.#moving, this.#moved] = [e.phase, now, new Set(), new Set()];
      for (const [pid, held] of Object.entries(typeof mib === "object" ? mib : {})) {
        this.#held.set(Number(pid), held * MIB);
        this.#moving.add(Number(pid));
      }
      if (e.phase === "suspend") this.#suspended += this.#sum(this.#moving);
      // A restore's images hold at least the GPU memory of its processes (a simulated criu's
      // files hold only what was written to them).
      if ("imageBytes" in e) this.#images = Math.max(e.imageBytes ?? 0, this.#sum(this.#moving));
      if (e.phase === "restore") this.#readFrom = now;
    } else if (e.type === "step-start") {
      // Undoing, where no other process's step goes forward: the bytes it puts back, as they go.
      const forward = [...this.#steps.values()].some((s) => !s.undoing);
      if (e.rollback && !forward && this.#phase !== "rollback") {
        const undoing = [...this.#moving].filter((pid) => RATES[this.#steps.get(pid)?.step ?? ""]);
        [this.#phase, this.#moving, this.#moved] = ["rollback", new Set(undoing), new Set()];
      }
      if (bytes) this.#held.set(e.pid, bytes);
      this.#steps.set(e.pid, { step: e.step, since: now, undoing: !!e.rollback });
      const moves = RATES[e.step] && bytes && (!e.rollback || this.#phase === "rollback");
      if (moves) this.#moving.add(e.pid);
    } else if (e.type === "step-end") {
      this.#steps.delete(e.pid);
      if (this.#phase === "dump") this.#dumpFrom = [now, sumOf(this.#written)];
      if (!e.ok && RATES[e.step]) this.#moving.delete(e.pid);
      else if (this.#moving.has(e.pid) && RATES[e.step] && bytes && e.ms > 0) {
        this.#moved.add(e.pid);
        const [b, ms] = this.#measured.get(e.step) ?? [0, 0];
        this.#measured.set(e.step, [b + bytes, ms + e.ms]);
      }
    } else if (e.type === "process-end") {
      if (e.status === "done" || e.status === "unchanged") this.#done.add(e.pid);
    } else if (e.type === "bytes") this.#written.set(e.root, e.bytes);
    else if (e.type === "tree-end" && e.how === "restored") {
      // At least its GPU memory, as the total (a simulated criu's files hold less); criu's rate
      // since the restore began, not since the resume did, with the first tree back.
      const pids = Object.keys(e.gpuMemoryMiB).map(Number); // those the total counts, as it does
      pids.forEach((pid) => this.#back.add(pid));
      if (this.#written.has(e.root)) this.#written.set(e.root, 0); // in what is back now, counted
      this.#read += Math.max(e.bytes, this.#sum(pids));
      this.#measured.set("images", [this.#read, Math.max(1, now - this.#readFrom)]);
    } else if (e.type === "wait" && now + e.ms > this.#wait.until) { // the longest of trees' waits
      this.#wait = { until: now + e.ms, why: e.why }; // among the checks: the restore comes after
    }
    if (!this.#events) return;
    const { type, ...fields } = e;
    const estimate = e.type === "step-start" && bytes && RATES[e.step]
      ? { bytes, estimatedMs: Math.round(bytes / this.#rate(e.step)) }
      : {};
    const at = roundMs(now - this.#start);
    this.#print.err(JSON.stringify({ event: type, ...fields, at, ...estimate }));
  }

  /** The line as it would be drawn now, without its control characters. */
  text(): string {
    const now = this.#now(), total = this.#o.total ?? 0;
    const label = this.#o.labels?.[this.#phase] ?? PHASES[this.#phase] ?? this.#phase;
    const named = (s: { step: string; undoing: boolean }) =>
      `${s.step}${s.undoing ? " (undoing)" : ""}`;
    const one = total === 1 ? [...this.#steps.values()][0] : undefined;
    const figures = now < this.#wait.until
      ? `waiting ${Math.ceil((this.#wait.until - now) / 1000)} s more: ${this.#wait.why}`
      : this.#phase === "dump"
      ? this.#dumped(now)
      : this.#phase === "restore" && this.#images > 0
      ? estimated(...this.#criu(now)) // the images of the trees back, and criu's count of the rest
      : this.#driver(now);
    const elapsed = `${(Math.max(0, now - this.#start) / 1000).toFixed(1)} s`;
    const steps = total !== 1 ? [...this.#steps].map(([pid, s]) => `${pid} ${named(s)}`) : [];
    for (const p of this.#moving) if (this.#waits(p)) steps.push(`${p} waits for its tree`);
    const [back, images] = this.#phase === "resume" ? this.#criu(now) : [0, 0];
    if (back < images) steps.push(`criu ~${amounts(back, images)} back`); // trees still to come
    const head = `${label}${one ? ` ${named(one)}` : ""} ${elapsed}${
      total > 1 && this.#phase !== "rollback" ? `, ${this.#done.size}/${total} done` : ""
    }${figures ? `: ${figures}` : ""}`;
    const all = steps.length > 0 ? `${head}; ${steps.join(", ")}` : head;
    const width = (this.#o.columns || this.#print.io.columns?.() || 80) - 1; // 0: no size told
    // A snapshot's or restore's steps under way (a tree's beside another's phase), where all fit.
    const line = total > 1 || all.length <= width ? all : head;
    return line.length > width ? `${line.slice(0, width - 1)}…` : line;
  }

  /** Erases the line, where it shows; the timer draws it again. */
  erase(): void {
    if (this.#shown) this.#print.raw(CLEAR);
    this.#shown = false;
  }

  /** Stops the timer, erases the line, keeps each 1 GiB step's rate, the mean with the one kept. */
  async stop(): Promise<void> {
    this.#cancel?.();
    this.#cancel = undefined;
    this.erase();
    if (this.#print.live === this) this.#print.live = undefined;
    const big = [...this.#measured].filter(([, [b]]) => b >= 2 ** 30); // less: the fixed cost's
    const was = this.#o.rates ?? {}, keep = this.#o.keep; // one run's alone is noisy (a first)
    const rates = big.map(([s, [b, ms]]) => [s, ((was[s] ?? b / ms) + b / ms) / 2]);
    this.#o = { ...this.#o, keep: undefined }; // kept once: stop is idempotent
    if (big.length > 0) await keep?.({ ...was, ...Object.fromEntries(rates) }).catch(() => {});
  }

  /** Bytes per ms of a step: this run's measured rate (`own`), else the one kept, else RATES'. */
  #rate(step: string, own = true): number {
    const [bytes, ms] = (own && this.#measured.get(step)) || [0, 0];
    return ms > 0 ? bytes / ms : this.#o.rates?.[step] ?? RATES[step];
  }

  #sum(pids: Iterable<number>): number {
    return [...pids].reduce((sum, pid) => sum + (this.#held.get(pid) ?? 0), 0);
  }

  /** The driver steps': what the phase's processes have moved, the rate, the time left. */
  #driver(now: number): string {
    let done = 0, rate = 0, left = 0;
    const total = this.#sum(this.#moving);
    for (const pid of this.#moving) {
      const bytes = this.#held.get(pid)!, s = this.#steps.get(pid);
      const running = s && RATES[s.step] ? s : undefined;
      const expected = this.#phase === "suspend" ? "checkpoint" : this.#o.expect ?? "checkpoint";
      const r = this.#rate(running?.step ?? expected), ran = running ? now - running.since : 0;
      const [back, images, criu] = this.#waits(pid) ? this.#criu(now) : [0, 0, 1];
      if (this.#moved.has(pid)) done += bytes;
      else {
        done += Math.min(bytes * 0.99, r * ran);
        left = Math.max(left, (bytes - r * ran) / r + (images - back) / criu); // its tree's first
        if (running) rate += r;
      }
    }
    if (this.#floor.of !== this.#moving) this.#floor = { of: this.#moving, done: 0 };
    done = this.#floor.done = Math.max(this.#floor.done, done); // a slower rate measured takes none
    return total === 0 ? "" : estimated(done, total, rate, left);
  }

  /** A dump's: criu's count, its rate, the time left to the GPU memory it holds at least. */
  #dumped(now: number): string {
    const written = sumOf(this.#written), [from, base] = this.#dumpFrom ?? [this.#since, 0];
    const rate = (written - base) / Math.max(1, now - from);
    if (written === 0) return "";
    // Held back by a tree's checkpoint, or nothing written since one ended: no rate of criu's.
    const waits = this.#steps.size > 0 || written === base;
    if (waits) return `${amounts(written, this.#suspended, "~")} written`;
    if (this.#suspended <= written) return `${size(written)} written, ${perSecond(rate)}`;
    const left = timeLeft((this.#suspended - written) / rate);
    return `${amounts(written, this.#suspended, "~")} written, ${perSecond(rate)}, ~${left}`;
  }

  /** criu's restore: the images back (counted where criu counts, else estimated), all, its rate. */
  #criu(now: number): [number, number, number] {
    const [total, read] = [this.#images, this.#read + sumOf(this.#written)];
    const own = read / Math.max(1, now - this.#readFrom); // from a tenth back; till then, the usual
    const rate = read > total / 10 ? own : this.#rate("images", false);
    const guess = this.#written.size > 0 ? read : Math.max(read, rate * (now - this.#readFrom));
    return [this.#read >= total ? total : Math.min(total * 0.99, guess), total, rate]; // all back
  }

  /** Whether a restore's process resumes once criu has restored its tree, not back yet. */
  #waits(pid: number): boolean {
    return this.#phase === "resume" && this.#images > 0 && !this.#back.has(pid) &&
      !this.#steps.has(pid);
  }
}

/** The sum of a map's values: criu's counts of every tree. */
const sumOf = (of: Map<number, number>): number => [...of.values()].reduce((a, b) => a + b, 0);

/** `~12.4 of 34.4 GB, ~2.0 GB/s, ~11 s left`, all estimated; `34.4 of 34.4 GB` once all done. */
function estimated(done: number, total: number, rate: number, leftMs = (total - done) / rate) {
  if (done >= total) return amounts(total, total);
  const left = leftMs > 0 ? `~${timeLeft(leftMs)}` : "longer than estimated";
  return `~${amounts(done, total)}${rate > 0 ? `, ~${perSecond(rate)}` : ""}, ${left}`;
}

/** `12.4 of 34.4 GB`: both in the unit of the second (`of ~34.4 GB`: with its mark). */
function amounts(done: number, total: number, mark = ""): string {
  const [scale, unit] = total >= 1e9 ? [1e9, "GB"] : total >= 1e6 ? [1e6, "MB"] : [1e3, "kB"];
  return `${(done / scale).toFixed(1)} of ${mark}${(total / scale).toFixed(1)} ${unit}`;
}

/** `2.1 GB/s`, from bytes per ms. */
function perSecond(bytesPerMs: number): string {
  const perS = bytesPerMs * 1000;
  return perS >= 1e9 ? `${(perS / 1e9).toFixed(1)} GB/s` : `${(perS / 1e6).toFixed(1)} MB/s`;
}

/** `4.4 s left`, `11 s left`, `3 min left`. */
function timeLeft(ms: number): string {
  const s = ms / 1000;
  if (s >= 100) return `${Math.round(s / 60)} min left`;
  return `${s < 10 ? s.toFixed(1) : Math.round(s)} s left`;
}

/** `34.83 GB`, `512.0 MB`, `4.1 kB`, `312 B`. */
export function size(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(2)} GB`;
  if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(1)} MB`;
  return bytes >= 1e3 ? `${(bytes / 1e3).toFixed(1)} kB` : `${Math.round(bytes)} B`;
}
