// The simulated CRIU, so that the snapshot flow runs in tests without root, criu or a GPU.

import { join } from "node:path";
import type { DumpedProcess, DumpRequest, EngineProbe } from "../core/engine.ts";
import type { RestoreRequest, SnapshotEngine, TreeRequest } from "../core/engine.ts";
import { checkAmount, checkChoice, checkFlag, checkFunction } from "../core/options.ts";
import { checkInteger, checkKeys, checkName, checkSignal, or } from "../core/options.ts";
import { describeValue, MAX_PID, mustBe, orElse } from "../core/options.ts";
import { CHECKPOINTED, emptyDirectory, type ProcessImage, restoredProcess } from "./criu_files.ts";
import { EngineLog, imageOf, memoryOf, PAGES_NAME, readTree, writeImages } from "./criu_files.ts";
import type { MachineView, SimulatedProcess } from "./sim_process.ts";
import { CRIU_TIMING, criuImageBytes } from "./timing.ts";
import { Waits } from "./waits.ts";

/** Options of {@link SimulatedCriu}. */
export interface SimulatedCriuOptions {
  /** The version `probe()` reports, as `criu --version` gives it. Default `"4.1.1"`. */
  version?: string;
  /** What `probe()` reports missing, a sentence each; while any is, runs reject. Default none. */
  problems?: readonly string[];
}

/** An operation of the simulated CRIU that {@link SimulatedCriu.failNext} can make fail. */
export type CriuOperation = "dump" | "restore";

/** What {@link SimulatedCriu.failNext} takes. */
export interface CriuFault {
  /** The failure's words, as criu's last log line gives them. Default: says it was injected. */
  message?: string;
}

/** The most image bytes one step of a dump or restore moves: onBytes is told after each. */
const PIECE_BYTES = 0.5e9;

/**
 * The simulated machine's CRIU: it dumps a tree of processes into an images directory, leaving
 * them running, and restores it, in the time the measured criu took. A dump refuses a CUDA process
 * not checkpointed; a restored one is checkpointed, a new process with its old pid and a new start
 * number; the restored root has no parent. Images of another simulated machine restore too.
 *
 * @example
 * ```ts
 * import { CudaProcess } from "@ckpt/cuda";
 * import { SimulatedMachine } from "@ckpt/cuda/mock";
 * import { mkdtempSync } from "node:fs";
 *
 * const sim = new SimulatedMachine();
 * const job = sim.spawn({ memoryMiB: 1024 });
 * await new CudaProcess(job.pid, { machine: sim }).suspend(); // criu cannot dump GPU mappings
 * const imagesDir = mkdtempSync("/tmp/images-");
 * await sim.engine.dump({ root: job.pid, imagesDir });
 * await sim.engine.kill([job.pid]);
 * await sim.engine.restore({ root: job.pid, imagesDir });
 * console.log(sim.process(job.pid)!.state); // "checkpointed": a new process, with the old pid
 * ```
 */
export class SimulatedCriu implements SnapshotEngine {
  /** Always `"simulated criu"`. */
  readonly kind: string = "simulated criu";
  /** The version `probe()` reports. */
  readonly version: string;
  /** What `probe()` reports missing. */
  readonly problems: readonly string[];
  readonly #faults = new Map<CriuOperation, string>();
  readonly #machine: MachineView;

  /** The CRIU of `machine` (whose `engine` has the defaults), for another version or problems. */
  constructor(machine: MachineView, options: SimulatedCriuOptions = {}) {
    if (typeof machine?.adopt !== "function" || typeof machine?.tree !== "function") {
      throw new TypeError(`SimulatedCriu takes a SimulatedMachine, got ${describeValue(machine)}`);
    }
    const o = checkKeys(options, "SimulatedCriu options", ["version", "problems"]);
    this.#machine = machine;
    this.version = checkName(or(o.version, "4.1.1"), "SimulatedCriu: version");
    const problems = or(o.problems, []);
    const what = "SimulatedCriu: problems";
    if (!Array.isArray(problems)) mustBe(TypeError, what, "an array of sentences", problems);
    this.problems = Object.freeze(problems.map((p, i) => checkName(p, `${what}[${i}]`)));
  }

  /** Its version and problems, as given to the constructor. */
  probe(): Promise<EngineProbe> {
    const probe = { version: this.version, problems: [...this.problems] };
    return this.#machine.waitOn("probe the simulated criu", () => Promise.resolve(probe));
  }

  /** Makes the next `op` fail with `fault.message` after its fixed cost, as criu fails. */
  failNext(op: CriuOperation, fault: CriuFault = {}): void {
    checkChoice(op, "failNext: op", ["dump", "restore"] as const);
    checkKeys(fault, "failNext fault", ["message"]);
    const injected = `simulated criu: failure injected by failNext(${JSON.stringify(op)})`;
    this.#faults.set(op, checkName(or(fault.message, injected), "failNext: message"));
  }

  /** Dumps the tree of `request.root` into `request.imagesDir` (empty), leaving it running. */
  dump(request: DumpRequest): Promise<readonly DumpedProcess[]> {
    return this.#operate("dump", request, async (r, run, log) => {
      const tree = this.#machine.tree(r.root);
      if (!tree) throw log.error(`no process with pid ${r.root}`);
      const why = tree.map((p) => undumpable(p, r.tcpEstablished === true)).find(Boolean);
      if (why) throw log.error(why);
      emptyDirectory(r.imagesDir, log);
      const images = tree.map((p) => imageOf(p, this.#machine.gpus)); // taken now: criu freezes first
      await this.#fixedCost("dump", run, log);
      let written = 0;
      for (const taken of images) {
        written = await this.#copy("dump", taken.image, run, r, written);
        const gone = tree.find((p) => p.exited);
        if (gone) throw log.error(`process ${gone.pid} ended during the dump`);
        writeImages(r.imagesDir, taken, log);
        log.line(`Dumped process ${taken.image.pid}`);
      }
      log.line(`Dumping finished successfully (${written} bytes of images)`);
      log.write();
      return images.map(({ image }, i) => ({
        pid: image.pid,
        parent: i === 0 ? 0 : image.parent,
        threads: [...image.threads],
      }));
    });
  }

  /**
   * Restores the tree of `request.root` from `request.imagesDir`, its processes made first, each
   * one's memory read as it is copied in; a failure leaves none of them, and writes no log file.
   */
  restore(request: RestoreRequest): Promise<void> {
    return this.#operate("restore", request, async (r, run, log) => {
      const made: SimulatedProcess[] = [];
      try {
        const images = readTree(r.imagesDir, r.root, log);
        const held = images.find((image) => image.tcp === "established");
        const tcp = `inet: process ${held?.pid} was dumped with a connected TCP socket`;
        if (held && !r.tcpEstablished) throw log.error(`${tcp}: restore with --tcp-established`);
        for (const t of images.flatMap((image) => image.threads)) {
          const other = this.#machine.process(t);
          if (other) throw log.error(`Can't fork for PID ${t}: process ${other.pid} has it`);
        }
        for (const image of images) made.push(restoredProcess(this.#machine, image, r.root));
        await this.#fixedCost("restore", run, log);
        let read = 0;
        for (const [i, image] of images.entries()) {
          read = await this.#copy("restore", image, run, r, read);
          // Its pages file is read as its memory is copied in, not before: the tree is made first.
          const pages = memoryOf(r.imagesDir, image, log);
          if (image.cuda && !made[i].exited) made[i].loadPages("host", pages, true);
          log.line(`Restored process ${image.pid}`);
        }
        const gone = made.find((p) => p.exited);
        if (gone) throw log.error(`process ${gone.pid} ended during the restore`);
        if (r.leaveStopped) {
          for (const p of made) p.setStopped(true);
          log.line("Leaving the tree stopped");
        }
        log.line("Restore finished successfully");
      } catch (err) {
        for (const p of made) p.exit();
        throw err;
      }
    });
  }

  /** Ends at once each live process that has one of `pids` as its pid or a thread id. */
  kill(pids: readonly number[]): Promise<void> {
    return this.#each(pids, "kill", (p) => p.exit());
  }

  /** Stops each live process of `pids` (SIGSTOP: {@link SimulatedProcess.stopped} until `wake`). */
  stop(pids: readonly number[]): Promise<void> {
    return this.#each(pids, "stop", (p) => p.setStopped(true));
  }

  /** Lets each live process of `pids` go on (SIGCONT); one not stopped, or gone, is no error. */
  wake(pids: readonly number[]): Promise<void> {
    return this.#each(pids, "wake", (p) => p.setStopped(false));
  }

  /** Whether a restore does not act on file `name`: a pages file (read late), or `dump.log`. */
  inertFile(name: string): boolean {
    return typeof name === "string" && (name === "dump.log" || PAGES_NAME.test(name));
  }

  /** `simulated criu 4.1.1`. */
  toString(): string {
    return `${this.kind} ${this.version}`;
  }

  /** `fn` on each live process that has one of `pids` as its pid or a thread id (checked). */
  async #each(pids: readonly number[], what: string, fn: (p: SimulatedProcess) => void) {
    if (!Array.isArray(pids)) mustBe(TypeError, `${what}: pids`, "an array of pids", pids);
    pids.forEach((pid, i) => checkInteger(pid, `${what}: pids[${i}]`, 1, MAX_PID));
    return await this.#machine.waitOn(`${what} processes`, () => {
      pids.map((pid) => this.#machine.process(pid)).forEach((p) => p && fn(p));
      return Promise.resolve();
    });
  }

  /**
   * A dump or restore: the request checked (its keys, root, directory, timeout, signal, `onBytes`,
   * `leaveStopped`), then `body`, waited on, with its log, and its waits stopped (logged) by the
   * request's signal or timeout.
   */
  async #operate<R extends DumpRequest | RestoreRequest, T>(
    op: CriuOperation,
    request: R,
    body: (r: R, run: Waits, log: EngineLog) => Promise<T>,
  ): Promise<T> {
    const r = request as DumpRequest & RestoreRequest;
    const not = `${op} takes a request object, got ${describeValue(r)}`;
    if (typeof r !== "object" || r === null) throw new TypeError(not);
    const keys = ["root", "imagesDir", "signal", "timeoutMs", "tcpEstablished", "onBytes"] as const;
    const own = op === "dump" ? [] : ["leaveStopped", "onWait"] as const;
    checkKeys(r, `${op} request`, [...keys, ...own]);
    checkFlag(r.tcpEstablished, `${op}: tcpEstablished`, false);
    checkInteger(r.root, `${op}: root (a pid)`, 1, MAX_PID);
    checkName(r.imagesDir, `${op}: imagesDir`);
    if (r.timeoutMs !== undefined) checkAmount(r.timeoutMs, `${op}: timeoutMs`);
    checkSignal(r.signal, `${op}: signal`);
    for (const f of ["onBytes", "onWait"] as const) checkFunction(r[f], `${op}: ${f}`);
    checkFlag(r.leaveStopped, `${op}: leaveStopped`, false);
    const ms = r.timeoutMs;
    return await this.#machine.waitOn(`${op} the process tree of ${r.root}`, async () => {
      const first = `${op === "dump" ? "Dumping processes" : "Restoring"} (pid: ${r.root})`;
      // A restore writes nothing beside its images, nor anywhere else: its log is kept in memory.
      const file = op === "dump" ? join(r.imagesDir, "dump.log") : undefined;
      const version = `Version: ${this.version} (${this.kind})`;
      const log = new EngineLog(this.#machine, file, version, first);
      const run = new Waits(this.#machine);
      const stop = (why = "") => run.stop(log.error(`the ${op} was stopped${why}`));
      const onAbort = () => stop(), late = `: its timeout of ${ms} ms passed`;
      let cancelTimeout: (() => void) | undefined;
      if (r.signal?.aborted) stop();
      else if (ms === 0) stop(late);
      else {
        r.signal?.addEventListener("abort", onAbort, { once: true });
        if (ms !== undefined) cancelTimeout = this.#machine.startTimer(ms, () => stop(late));
      }
      try {
        run.check();
        const cannot = `criu cannot run here: ${this.problems.join("; ")}`;
        if (this.problems.length > 0) throw log.error(cannot);
        return await body(request, run, log);
      } finally {
        r.signal?.removeEventListener("abort", onAbort);
        cancelTimeout?.();
      }
    });
  }

  /** The fixed cost of `op`, after which a failure injected into it happens. */
  async #fixedCost(op: CriuOperation, run: Waits, log: EngineLog): Promise<void> {
    await run.sleep(op === "dump" ? CRIU_TIMING.dumpFixedMs : CRIU_TIMING.restoreFixedMs);
    const message = this.#faults.get(op);
    if (message === undefined) return;
    this.#faults.delete(op);
    throw log.error(message);
  }

  /** Moves an image's bytes at `op`'s rate piece by piece, telling the count from `n` on. */
  async #copy(op: CriuOperation, image: ProcessImage, run: Waits, r: TreeRequest, n: number) {
    const bytes = criuImageBytes(image.memoryMiB, image.cuda); // more than none
    const rate = op === "dump" ? CRIU_TIMING.dumpBytesPerSecond : CRIU_TIMING.restoreBytesPerSecond;
    for (let i = 0; i < Math.ceil(bytes / PIECE_BYTES); i++) {
      const piece = Math.min(PIECE_BYTES, bytes - PIECE_BYTES * i);
      await run.copy(this.#machine.disk[op], piece, rate / 1000);
      n += piece;
      orElse(() => r.onBytes?.(n), undefined); // one that throws does not stop the work
    }
    return n;
  }
}

/** Why criu cannot dump the process, or `undefined` where it can. */
function undumpable(p: SimulatedProcess, tcpEstablished: boolean): string | undefined {
  if (p.busy) return `process ${p.pid} has a ${p.busy} under way: wait for it`;
  // criu's own words (criu/sk-inet.c), for a connection it was not told to take.
  if (p.tcp === "established" && !tcpEstablished) {
    return `inet: Connected TCP socket, consider using --tcp-established option (process ${p.pid})`;
  }
  if (p.usesCuda && p.memoryLocation === "gpu") {
    return `process ${p.pid} still has its GPU state on the GPU (it is ${p.state}): it must be ` +
      `checkpointed first, as criu cannot dump its /dev/nvidia* mappings`;
  }
  if (p.usesCuda && p.state !== CHECKPOINTED) {
    return `process ${p.pid} is ${p.state}, not checkpointed: only a checkpointed CUDA process ` +
      `can be dumped`;
  }
  return undefined;
}
