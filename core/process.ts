// One process as this package works on it, from a caller's {@link Handle} through its machine's
// {@link Session} down to each driver call, made in its {@link Turn}.

import { callDriver, checkCapability, type FailureDetail, readState } from "./calls.ts";
import { CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_INVALID_VALUE, type GpuPair } from "./driver.ts";
import { CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_READY, type LockArgs } from "./driver.ts";
import { CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OPERATING_SYSTEM } from "./driver.ts";
import { CUDA_ERROR_OUT_OF_MEMORY, type RestoreArgs } from "./driver.ts";
import { CudaError, RefusedError, WaitTimeoutError } from "./errors.ts";
import { type GpuImport, identityKey, type ProcessIdentity, sameProcess } from "./host.ts";
import { leaseOf, type Machine, type MachineLease, type MachineSource } from "./machine.ts";
import { checkMapping, explainRejectedMapping } from "./mapping.ts";
import { heldIn, type RoomCheck, RoomGuard } from "./room.ts";
import { type ProcessState, type Step, stepAllowed } from "./states.ts";
import { clockOf, Deadline, untilAborted } from "./time.ts";

/** The last operation made on each machine (as given), settled once it is queued. */
const MADE = new WeakMap<MachineSource, Promise<unknown>>();

/** The session of each machine in use, kept beside the machine. */
const SESSIONS = new WeakMap<Machine, Session>();

/** The session of `machine`, made on first use. */
export function sessionOf(machine: Machine): Session {
  return SESSIONS.get(machine) ?? SESSIONS.set(machine, new Session(machine)).get(machine)!;
}

/** What this package keeps for a machine in use: each process's order, and the room check. */
export class Session {
  readonly room: RoomGuard;
  #self: Promise<ProcessIdentity | undefined> | undefined;
  #release: Promise<string | undefined> | undefined;
  readonly #tails = new Map<string, Promise<unknown>>();
  /** The pids that restores of this program are bringing back: another restore of one is refused. */
  readonly restoring = new Set<number>();

  /** The session of `machine`: use {@link sessionOf}, which keeps one per machine. */
  constructor(readonly machine: Machine) {
    this.room = new RoomGuard(machine.host, () => this.selfIdentity());
  }

  /** The process `id` (a pid or a thread id) belongs to now; `undefined` where none or unknown. */
  async identify(id: number): Promise<ProcessIdentity | undefined> {
    return await this.machine.host?.identify?.(id).catch(() => undefined);
  }

  /**
   * Whether `p` is still that process (its pid, with the start it had: one without a start is
   * another where the host tells starts); `undefined` where the host cannot identify processes,
   * or failed to read it (not taken as gone).
   */
  async isStill(p: ProcessIdentity): Promise<boolean | undefined> {
    if (!this.machine.host?.identify) return undefined;
    const now = await this.machine.host.identify(p.pid).catch(() => null);
    return now === null ? undefined : now?.pid === p.pid && now.start === p.start;
  }

  /** Resolves once every operation queued on any process has settled (those queued meanwhile too). */
  async settled(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all(this.#tails.values());
  }

  /** Whether an operation on `process` is queued or under way: one made now would wait for it. */
  busy(process: ProcessIdentity): boolean {
    return this.#tails.has(identityKey(process));
  }

  /** Runs `operation` once every operation queued before it on the same process has settled. */
  inOrder<T>(process: ProcessIdentity, operation: () => Promise<T>): Promise<T> {
    const key = identityKey(process), before = this.#tails.get(key);
    const run = before ? before.then(operation, operation) : operation();
    // The queue holds a promise that never rejects, so that one failure does not fail the rest.
    const tail = run.then(() => {}, () => {});
    this.#tails.set(key, tail);
    tail.then(() => this.#tails.get(key) === tail && this.#tails.delete(key));
    return run;
  }

  /** The import of GPU memory that makes a checkpoint of `pid` unrestorable (before 610). */
  async gpuImport(pid: number): Promise<GpuImport | undefined> {
    const host = this.machine.host, found = await host?.gpuImport?.(pid).catch(() => undefined);
    if (!found) return undefined;
    this.#release ??= (async () => (await host?.facts?.())?.driverRelease)().catch(() => undefined);
    // 610 restores CUDA IPC memory of a job it launched; not NCCL's, exported as shareable handles.
    return found.exporter !== undefined && Number.parseInt(await this.#release ?? "") >= 610
      ? undefined
      : found;
  }

  /** This program as the host identifies it (the owner of its room claims), where it can. */
  selfIdentity(): Promise<ProcessIdentity | undefined> {
    return this.#self ??= (async () => {
      const pid = this.machine.host?.self;
      return pid === undefined ? undefined : await this.identify(pid) ?? { pid };
    })();
  }
}

type InTurn<T> = (turn: Turn) => Promise<T>;

/** Whether `err` is {@link Handle.ordered}'s, given up by `until`'s abort. */
export const gaveUp = (err: unknown, until: AbortSignal): boolean =>
  until.aborted && err === until.reason;

/** One process through one machine: it leases the machine, and refuses a pid reused since. */
export class Handle {
  #lease: MachineLease | undefined;
  #closed = false;
  /** The process it (with its forks) was first used on: a pid that later names another is refused. */
  #first: { identity?: ProcessIdentity } = {};
  readonly #running = new Set<Promise<unknown>>();

  /** A handle on `pid` (or a thread id, checked by the caller: what the driver is called with). */
  constructor(readonly pid: number, private readonly source: MachineSource) {}

  /** A handle of a group's own on the process: its caller closing this one meanwhile stops nothing. */
  fork(): Handle {
    if (!this.#closed) this.#session().catch(() => {}); // leased, as it is used: it stays open
    const forked = new Handle(this.pid, this.source);
    [forked.#first, forked.#closed] = [this.#first, this.#closed];
    return forked;
  }

  async machine(): Promise<Machine> {
    return (await this.#session()).machine;
  }

  /** The state; refused (`STATE`) where the process is stopped: the driver would not answer. */
  state(): Promise<ProcessState> {
    return this.ordered(async (turn) => {
      await turn.refuseStopped("getState");
      return turn.state();
    });
  }

  /** The restore thread id, at once (the driver answers even while the process is busy). */
  restoreThreadId(): Promise<number> {
    const call = (t: Turn) => callDriver(t.machine.driver, "getRestoreThreadId", this.pid);
    return this.ordered(call, "restoreThreadId", false);
  }

  /** Resolves once the process is in `state`, asking every `intervalMs` (checked by the caller). */
  async waitForState(
    state: ProcessState,
    o: { timeoutMs?: number; signal?: AbortSignal; intervalMs: number },
  ): Promise<void> {
    const machine = await this.machine(), clock = clockOf(machine), start = clock.now();
    // A look behind another operation waits for its turn till the timeout, no longer.
    const late = new AbortController(), ms = o.timeoutMs;
    const cancel = new Deadline(clock, ms).onPassed(machine.clock, () => late.abort());
    const until = o.signal ? AbortSignal.any([o.signal, late.signal]) : late.signal;
    let seen: ProcessState | undefined, asked = false;
    const timedOut = () => new WaitTimeoutError(this.pid, state, ms!, seen, asked);
    try {
      for (;;) {
        o.signal?.throwIfAborted();
        // Stopped (a debugger, criu's tree held until verified), it is not asked: not there yet.
        const read = async (t: Turn) => await t.stopped() ? undefined : t.state();
        seen = await this.ordered(read, "waitForState", true, until).catch((err) => {
          throw err === late.signal.reason ? timedOut() : err;
        });
        asked = true;
        if (seen === state) return;
        if (seen === "failed") {
          const reason = `it is failed, which is final: it will never be ${state}`;
          const where = { operation: "waitForState", pid: this.pid, state: seen };
          throw new RefusedError({ code: "STATE", ...where, reason });
        }
        o.signal?.throwIfAborted();
        const left = ms === undefined ? Infinity : ms - (clock.now() - start);
        if (left <= 0) throw timedOut();
        await clock.sleep(Math.min(o.intervalMs, left), o.signal);
      }
    } finally {
      cancel();
    }
  }

  /**
   * Runs `body` (for `op`) in the process's {@link Turn} (`queued`: no other operation in between);
   * an abort of `until` while it waits behind another operation gives it up (rejects with its
   * reason; `body` never runs): made with none ahead, it runs.
   */
  ordered<T>(body: InTurn<T>, op = "getState", queued = true, until?: AbortSignal): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closedError());
    // Queued in the order made: after the one made before it on the machine (by any handle), as
    // the machine's opening and the host's reading of each process take their own time.
    const before = MADE.get(this.source);
    let started = false, behind = false;
    const queuing = (async () => {
      const session = await this.#session(), found = await session.identify(this.pid);
      await before;
      if (found && this.#first.identity && !sameProcess(this.#first.identity, found)) {
        const reason = `the process this handle was made for has ended, and ${this.pid} now ` +
          `names another process`;
        throw new RefusedError({ code: "REPLACED", operation: op, pid: this.pid, reason });
      }
      this.#first.identity ??= found;
      // No process has the id now (the driver will say so): the process it named, or the number.
      const identity = found ?? this.#first.identity ?? { pid: this.pid };
      const run = async () => {
        if (behind) until?.throwIfAborted();
        started = true;
        return await body(new Turn(this.pid, identity, session));
      };
      behind = queued && session.busy(identity);
      if (behind) until?.throwIfAborted();
      return { queued: queued ? session.inOrder(identity, run) : run() };
    })();
    MADE.set(this.source, queuing.catch(() => {}));
    const made = queuing.then((q) => q.queued);
    const running = until ? untilAborted(made, until, () => behind && !started) : made;
    // Kept among this handle's operations until it settles: close waits for them.
    this.#running.add(running);
    const forget = () => this.#running.delete(running);
    running.then(forget, forget);
    return running;
  }

  /** Waits for this handle's operations, then lets go of its machine. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
    const held = this.#lease;
    this.#lease = undefined;
    await held?.release();
  }

  /** The session of this handle's machine, leased on first use. */
  #session(): Promise<Session> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (!this.#lease) {
      const taken = this.#lease = leaseOf(this.source);
      // A machine that failed to open is not kept: the next call tries again.
      taken.machine.catch(() => {
        if (this.#lease === taken) this.#lease = undefined;
        taken.release().catch(() => {});
      });
    }
    return this.#lease.machine.then(sessionOf);
  }

  #closedError(): Error {
    const closed = "this handle has been closed; make a new CudaProcess to go on";
    return new Error(`CudaProcess(${this.pid}): ${closed}`);
  }
}

/** The process while its turn is held: each step is one driver call, the room check around it. */
export class Turn {
  /** Whether the process is the program making the calls (it checkpoints itself). */
  readonly self: boolean;
  readonly machine: Machine;

  /** The turn of `pid` (as given: what the driver is called with) of `identity` in `session`. */
  constructor(readonly pid: number, readonly identity: ProcessIdentity, readonly session: Session) {
    this.machine = session.machine;
    this.self = identity.pid === this.machine.host?.self;
  }

  /** Refuses (`UNSUPPORTED`) where the driver lacks the function of one of `steps`. */
  async capable(steps: readonly Step[], shown: string): Promise<void> {
    for (const step of new Set(steps)) {
      await checkCapability(this.machine.driver, step, this.pid, 0, shown);
    }
  }

  state(): Promise<ProcessState> {
    return readState(this.machine.driver, this.pid);
  }

  /** Whether the process is stopped (every thread) or frozen, where the host can tell. */
  async stopped(): Promise<boolean> {
    return !!await isStopped(this.machine, this.identity.pid);
  }

  /** Refuses (`STATE`) a stopped process: the driver would answer it only once it runs again. */
  refuseStopped(operation: string): Promise<void> {
    return refuseStopped(this.machine, operation, this.identity.pid, this.pid);
  }

  async lock(timeoutMs: number): Promise<void> {
    const room = this.session.room;
    // Locking this very process: the room check's NVML reads stop until it runs again.
    if (this.self) await room.beforeSelfLock();
    await this.#call("lock", { timeoutMs }).catch((err) => {
      if (this.self) room.selfRunning();
      const timedOut = `its work on the GPU did not finish within the ${timeoutMs} ms its lock ` +
        `could wait (its timeout, or what was left of a deadline), so it was not locked`;
      throw err instanceof CudaError && err.code === CUDA_ERROR_NOT_READY && timeoutMs > 0
        ? err.withDetail(timedOut)
        : err;
    });
    // Locked from running: what it held when last checkpointed is no longer what it holds.
    await room.forget(this.identity);
  }

  /** `checkpoint`; with `checkRoom`, what it holds read first and recorded after (or a warning). */
  async checkpoint(checkRoom: boolean): Promise<RoomCheck | undefined> {
    const room = this.session.room;
    // Never of this very process: NVML waits in a process that has checkpointed itself.
    const held = checkRoom && !this.self ? heldIn(await room.report(), this.identity) : undefined;
    await this.#call("checkpoint");
    return held ? await room.recorded(this.identity, held) : undefined;
  }

  /** `restore`, its room checked and claimed first with `checkRoom`; errors name `shown`. */
  async restore(
    pairs: readonly GpuPair[] | null,
    checkRoom: boolean,
    shown: string,
  ): Promise<RoomCheck> {
    const driver = this.machine.driver;
    await checkCapability(driver, "restore", this.pid, pairs?.length ?? 0, shown);
    if (pairs) await checkMapping(driver, shown, this.pid, pairs);
    const reservation = checkRoom
      ? await this.session.room.reserve(this, shown, pairs, () => this.#checkpointedNow())
      : undefined;
    let ok = false;
    try {
      await this.#call("restore", pairs && { gpuPairs: pairs });
      ok = true;
    } finally {
      await reservation?.done(ok);
    }
    return reservation?.check ?? "skipped";
  }

  async unlock(): Promise<void> {
    await this.#call("unlock");
    if (this.self) this.session.room.selfRunning();
  }

  /** A step's driver call; its failure says the state, and why where the code would mislead. */
  #call(step: Step, args: LockArgs | RestoreArgs | null = null): Promise<number> {
    const explain = (code: number) => this.#why(step, code, (args as RestoreArgs | null)?.gpuPairs);
    // Itself by its pid, not a thread's id: the native driver makes its cuInit before such a lock.
    const pid = this.self ? this.identity.pid : this.pid;
    return callDriver(this.machine.driver, step, pid, args, explain);
  }

  /** What the error of `step`, failed with `code`, says besides the code. */
  async #why(step: Step, code: number, pairs?: readonly GpuPair[]): Promise<FailureDetail> {
    if (code === CUDA_ERROR_ILLEGAL_STATE) {
      const state = await this.state().catch(() => undefined);
      // Refused as illegal in a state the step accepts: something else changed it meanwhile.
      const detail = state === "failed"
        ? "the failed state is final"
        : state !== undefined && stepAllowed(step, state)
        ? "another program (or another thread id of this process) changed its state meanwhile"
        : undefined;
      return { state, detail };
    }
    // Exited: the process the host once found is gone now (not where the host cannot tell).
    const { host } = this.machine, was = this.identity;
    if (code === CUDA_ERROR_OPERATING_SYSTEM && was.start !== undefined && host?.identify) {
      const now = await host.identify(was.pid).catch(() => was);
      if (now === undefined || !sameProcess(now, was)) return { detail: "the process has exited" };
    }
    if (step !== "restore") return {};
    const free = "even once memory is free (docs/ERRORS.md#out-of-memory)";
    const lost = `on driver 580 the process cannot be restored after this, ${free}`;
    if (code === CUDA_ERROR_OUT_OF_MEMORY) return { detail: lost };
    // Refused although checkpointed, as driver 580 does (the detail below says when); an
    // importer's first refusal is invalid argument (legacy IPC, mapped or not) or not supported.
    const first = code === CUDA_ERROR_INVALID_VALUE || code === CUDA_ERROR_NOT_SUPPORTED;
    if (!first && code !== CUDA_ERROR_OPERATING_SYSTEM) return {};
    const ipc = await this.session.gpuImport(this.identity.pid), imported = ipc && !ipc.unknown;
    if (code === CUDA_ERROR_INVALID_VALUE && pairs?.length && !imported) {
      return { detail: await explainRejectedMapping(this.machine.driver, pairs) };
    }
    if (first && !imported || !await this.#checkpointedNow()) return {};
    const as = imported
      ? `for a process whose GPU memory came from another (${ipc.sign})`
      : "after a restore of it ran out of memory (docs/ERRORS.md#out-of-memory)";
    const refused = "the process is checkpointed, yet the driver refuses to restore it";
    return { detail: `${refused}, as driver 580 does ${as}` };
  }

  /** Whether the driver says, now, that the process is there and checkpointed; never rejects. */
  async #checkpointedNow(): Promise<boolean> {
    return await this.state().catch(() => undefined) === "checkpointed";
  }
}

/** The refusal (`IPC`) to checkpoint `pid`, which imported GPU memory from another process. */
export function importRefusal(operation: string, pid: number, imp: GpuImport): RefusedError {
  const reason = imp.unknown
    ? `${imp.sign}: whether it imported GPU memory, which no driver before 610 restores, cannot ` +
      `be told; let this program read it, or pass allowIpcImport (--allow-ipc-import)`
    : imp.exporter !== undefined
    ? `${imp.sign}: it holds GPU memory that process ${imp.exporter} exported to it through ` +
      `CUDA IPC, and a driver before 610 never restores such a process once it is checkpointed, ` +
      `so leave it out (or end it) and suspend the others, or pass allowIpcImport ` +
      `(--allow-ipc-import) if you know it holds none`
    : `${imp.sign}: its job's ranks on this host share memory through NCCL's P2P or shared-` +
      `memory transport, and on driver 580 such ranks never restored once checkpointed, so ` +
      `start every rank with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, or pass allowIpcImport ` +
      `(--allow-ipc-import) if the job turns them off itself or its ranks share nothing`;
  const detail = "nothing was done to it";
  return new RefusedError({ code: "IPC", operation, pid, reason, detail });
}

/** Refuses (`STATE`) `pid` (given as `shown`) where it is stopped: the driver would not answer. */
export async function refuseStopped(
  m: Machine,
  operation: string,
  pid: number,
  shown = pid,
): Promise<void> {
  const how = await isStopped(m, pid);
  if (!how) return;
  const [what, until] = how === "frozen"
    ? ["its cgroup is frozen (docker or podman pause)", "it is thawed (docker or podman unpause)"]
    : ["it is stopped (SIGSTOP, Ctrl-Z, a debugger)", `it runs again (kill -CONT ${pid})`];
  const reason =
    `${what}, and the driver answers no call on it, a lock's timeout included, till ${until}`;
  const detail = "nothing was done to it";
  throw new RefusedError({ code: "STATE", operation, pid: shown, reason, detail });
}

async function isStopped(m: Machine, pid: number): Promise<boolean | "frozen"> {
  return await m.host?.stopped?.(pid).catch(() => false) ?? false;
}

/** Whether an error says there is no process, or no CUDA in it: nothing is left to undo. */
export function isGone(err: unknown): boolean {
  return err instanceof CudaError &&
    (err.code === CUDA_ERROR_OPERATING_SYSTEM || err.code === CUDA_ERROR_NOT_INITIALIZED);
}
