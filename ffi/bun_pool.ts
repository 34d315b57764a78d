// The Bun adapter's worker threads: one call per worker at a time, one started when a call finds
// none idle (the driver caps the calls in flight), ended once idle 10 s. A worker keeps the process
// alive only while it runs a call; one that ends meanwhile rejects that call, the next starts one.

import type { WorkerClose, WorkerReply, WorkerRequest, WorkerResult } from "./bun_types.ts";

/** A Worker as Bun has it: `ref`/`unref` decide whether it keeps the process alive. */
type RefWorker = Worker & { ref?(): void; unref?(): void };

type Job = { request: WorkerRequest; resolve(result: WorkerResult): void; reject(e: Error): void };

interface Worked {
  readonly worker: RefWorker;
  job: Job | undefined;
  /** Asked to close: it takes no more calls. */
  retiring: boolean;
  /** Resolves when the thread has ended. */
  readonly ended: Promise<void>;
  idle?: ReturnType<typeof setTimeout>; // what ends it once idle
}

/** Worker threads running `bun:ffi` calls (see the module documentation). */
export class WorkerPool {
  #workers = new Set<Worked>();
  #closing = false;
  #nextId = 1;

  /** Workers run the script at `url` (`bun_worker.ts`, or a stand-in); one idle `idleMs` ends. */
  constructor(private readonly url: URL, private readonly idleMs = 10_000) {}

  /** How many worker threads exist now. */
  get size(): number {
    return this.#workers.size;
  }

  /** Runs one call on an idle worker, or a new one. */
  run(request: Omit<WorkerRequest, "id">): Promise<WorkerResult> {
    const closed = `${request.symbol}: the worker pool has been closed`;
    if (this.#closing) return Promise.reject(new Error(closed));
    return new Promise<WorkerResult>((resolve, reject) => {
      const job: Job = { request: { ...request, id: this.#nextId++ }, resolve, reject };
      const slot = [...this.#workers].findLast((w) => !w.job && !w.retiring) ?? this.#spawn();
      slot.job = job;
      clearTimeout(slot.idle);
      slot.worker.ref?.(); // a call in flight keeps the process alive, as a pending FFI call would
      slot.worker.postMessage(job.request);
    });
  }

  /** Closes the pool: idle workers end now, busy ones once their call returns; resolves after. */
  close(): Promise<void> {
    this.#closing = true;
    for (const w of this.#workers) if (!w.job) this.#retire(w);
    return Promise.all([...this.#workers].map((w) => w.ended)).then(() => undefined);
  }

  #spawn(): Worked {
    const worker: RefWorker = new Worker(this.url, { type: "module" });
    const ended = Promise.withResolvers<void>();
    const w: Worked = { worker, job: undefined, retiring: false, ended: ended.promise };
    worker.addEventListener("message", (e: MessageEvent<WorkerReply>) => this.#reply(w, e.data));
    worker.addEventListener("error", (event: ErrorEvent) => {
      event.preventDefault();
      this.#lost(w, `it failed: ${event.message}`);
      worker.terminate();
    });
    worker.addEventListener("close", (event) => {
      const code = (event as unknown as { code?: number }).code;
      this.#lost(w, `exit code ${code ?? "unknown"}`);
      ended.resolve();
    });
    this.#workers.add(w);
    return w;
  }

  #reply(w: Worked, reply: WorkerReply): void {
    const job = w.job;
    if (!job || job.request.id !== reply.id) return;
    w.job = undefined;
    w.worker.unref?.();
    if ("code" in reply) job.resolve(reply);
    else job.reject(new Error(`${job.request.symbol} could not be called: ${reply.error}`));
    if (this.#closing) return this.#retire(w);
    ((w.idle = setTimeout(() => this.#retire(w), this.idleMs)) as { unref?(): void }).unref?.();
  }

  /** The thread ended or failed: its call, if any, rejects, and it takes no more. */
  #lost(w: Worked, why: string): void {
    this.#workers.delete(w);
    const job = w.job;
    w.job = undefined;
    const ended = `the Bun worker thread running it ended before the call returned (${why})`;
    job?.reject(new Error(`${job.request.symbol} did not return: ${ended}`));
  }

  /** Asks a worker to close its libraries and end; terminates it if it does not. */
  #retire(w: Worked): void {
    if (w.retiring) return;
    w.retiring = true;
    w.worker.unref?.();
    w.worker.postMessage({ close: true } satisfies WorkerClose);
    const timer = setTimeout(() => w.worker.terminate(), 2000); // 2 s to close, then terminated
    (timer as { unref?(): void }).unref?.();
    void w.ended.then(() => clearTimeout(timer));
  }
}
