// This host's TCP ports against what a snapshot's tree binds, before criu restores it: criu cannot
// bind a port this host still holds ("Address already in use"). TIME_WAITs on one (a connection
// closed in the minute before, as NCCL's ranks close their first) are ended.

import { readdir, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import { EngineError, type RestoreRequest } from "../core/engine.ts";
import { clockOf } from "../core/time.ts";
import { type Bound, boundPorts } from "./criu_images.ts";
import { endTimeWaits } from "./mute.ts";

/** The longest a restore waits for ports in TIME_WAIT (the kernel's 60 s, and its timers' lag). */
const TIME_WAIT_MAX_MS = 90_000;
/** How much later than /proc says the kernel's timers may end a TIME_WAIT (up to 1.9 s seen). */
const TIMER_SLACK_MS = 2000;
/** /proc/net/tcp's states by number. */
const TCP_STATES = ",ESTABLISHED,SYN_SENT,SYN_RECV,FIN_WAIT1,FIN_WAIT2,TIME_WAIT,CLOSE," +
  "CLOSE_WAIT,LAST_ACK,LISTEN,CLOSING";

/**
 * A socket of this host on a port: its state, its ends as /proc prints them (`ADDR:PORT` in hex),
 * and where no process holds it any more (TIME_WAIT, or a connection closed and orphaned), the ms
 * it may hold the port yet.
 */
export type PortHolder = Readonly<
  { port: number; state: string; ends: readonly [string, string]; leftMs?: number }
>;
/**
 * The sockets on `ports` in the text of /proc/net/tcp and tcp6 (local `ADDR:PORT` in hex, the state,
 * `timer:when` in hundredths of a second, the inode: 0 where no process holds it): a TIME_WAIT or
 * an orphan with the time-wait timer (3) ends when it says, another orphan is looked at again.
 */
export function portHolders(table: string, ports: readonly number[]): PortHolder[] {
  return table.split("\n").flatMap((line): PortHolder[] => {
    const [sl = "", local = "", remote = "", st = "", , timer = "", , , , inode] = line.trim()
      .split(/\s+/);
    const port = parseInt(local.split(":")[1] ?? "", 16), [tr, when = ""] = timer.split(":");
    if (!/^[0-9]+:$/.test(sl) || !ports.includes(port)) return [];
    const state = TCP_STATES.split(",")[parseInt(st, 16)] || `state 0x${st}`;
    const leftMs = tr === "03" ? (parseInt(when, 16) || 0) * 10 : inode === "0" ? 1000 : undefined;
    return [{ port, state, ends: [local, remote], ...(leftMs === undefined ? {} : { leftMs }) }];
  });
}

/**
 * Before any tree is restored (criu's engine's `ready`): waits till this host lets a socket bind
 * what the tree's TCP sockets bind (a listener made and closed at once, with criu's SO_REUSEADDR
 * and SO_REUSEPORT). A port held only by sockets no process holds is freed: its TIME_WAITs ended
 * (told by `onWait` as a wait of 0 ms), the rest waited for; one held by a socket open now, or a
 * wait beyond the restore's time (or 90 s), is an error. A tree with a network namespace of its
 * own (a `netns-N.img`) binds nothing here; images that cannot be read are left to criu.
 */
export async function portsFree(request: RestoreRequest): Promise<void> {
  const { imagesDir, root, timeoutMs = Infinity } = request;
  const names = await readdir(imagesDir).catch(() => [] as string[]);
  if (names.some((n) => /^netns-[0-9]+\.img$/.test(n))) return;
  const bound = await readFile(path.join(imagesDir, "files.img"))
    .then((b) => boundPorts(new Uint8Array(b))).catch(() => []);
  const start = performance.now(), took = () => performance.now() - start;
  const tried = new Set<string>(); // the TIME_WAITs asked to end: each once
  const portList = (ps: number[]) => `port${ps.length > 1 ? "s" : ""} ${ps.join(", ")}`;
  for (;;) {
    const { ports, holders } = await look(bound);
    if (ports.length === 0) return;
    const live = Map.groupBy(holders.filter((h) => h.leftMs === undefined), (h) => h.port);
    if (live.size > 0) {
      const named = ([s, hs]: [string, PortHolder[]]) => hs.length > 1 ? `${s} x${hs.length}` : s;
      const states = (hs: PortHolder[]) => [...Map.groupBy(hs, (h) => h.state)].map(named);
      const each = [...live].map(([port, hs]) => `${port} (${states(hs).join(", ")})`);
      const free = "end what holds them, or restore where they are free";
      const held = `sockets open on this host hold ports the tree of ${root} binds`;
      throw new EngineError(`${held}: ${each.join(", ")}: ${free}`);
    }
    // None listed: gone since the bind was tried; look again.
    const ms = Math.max(250, ...holders.map((h) => h.leftMs!)), s = Math.ceil(ms / 1000);
    const state = [...new Set(holders.map((h) => h.state))].join(", ") || "use";
    const why = `${portList(ports)} held in ${state} on this host`;
    const stopped = `the restore of the tree of ${root} was stopped while it waited for ${why}`;
    if (request.signal?.aborted) throw new EngineError(stopped);
    const fresh = holders.filter((h) => h.state === "TIME_WAIT" && !tried.has(h.ends.join()));
    fresh.forEach((h) => tried.add(h.ends.join()));
    if (fresh.length > 0) { // each asked to end once, then looked at again (gone, maybe ended by
      // another tree's restore); what is left (where the kernel would not end it) is waited for
      if (await endTimeWaits(fresh.map((h) => h.ends)) > 0) {
        const ended = `${portList([...new Set(fresh.map((h) => h.port))])} held in TIME_WAIT`;
        request.onWait?.(0, `${ended} on this host: ended rather than waited for`);
      }
      continue;
    }
    if (took() + ms + (ms > 1000 ? TIMER_SLACK_MS : 0) > Math.min(timeoutMs, TIME_WAIT_MAX_MS)) {
      const left = timeoutMs < TIME_WAIT_MAX_MS
        ? `beyond the ${Math.floor((timeoutMs - took()) / 1000)} s the restore had left: give it ` +
          `a longer timeout, or restore again in ${s} s`
        : `after ${Math.round(took() / 1000)} s of waiting: restore again later`;
      const held = `the tree of ${root} binds ${portList(ports)}, which this host holds`;
      throw new EngineError(`${held} in ${state} for ${s} s more, ${left}`);
    }
    request.onWait?.(ms, why);
    await clockOf({}).sleep(ms, request.signal).catch(() => {
      throw new EngineError(stopped);
    });
  }
}

/** This process's rounds of {@link look}, one at a time: no tree's probe holds another's port. */
let rounds: Promise<unknown> = Promise.resolve();

/** The ports of `bound` this host will not let a socket bind now, and its sockets on them. */
function look(bound: readonly Bound[]): Promise<{ ports: number[]; holders: PortHolder[] }> {
  const round = rounds.then(async () => {
    const ports: number[] = []; // one at a time: two probes of one port would block each other
    for (const b of bound) if (!ports.includes(b.port) && !await bindable(b)) ports.push(b.port);
    if (ports.length === 0) return { ports, holders: [] };
    const tables = ["tcp", "tcp6"].map((f) => readFile(`/proc/net/${f}`, "utf8").catch(() => ""));
    return { ports, holders: portHolders((await Promise.all(tables)).join("\n"), ports) };
  });
  rounds = round.catch(() => {});
  return round;
}

/**
 * Whether this host lets a listening socket bind `b` now, with SO_REUSEADDR and SO_REUSEPORT as
 * criu binds every socket it restores (it sets the image's own values after): `false` only where
 * the address is in use.
 */
function bindable(b: Bound): Promise<boolean> {
  if (b.addr.length !== 1 && b.addr.length !== 4) return Promise.resolve(true); // criu's to judge
  const bytes = new Uint8Array(Uint32Array.from(b.addr).buffer), view = new DataView(bytes.buffer);
  const host = bytes.length === 4
    ? bytes.join(".")
    : Array.from({ length: 8 }, (_, i) => view.getUint16(2 * i).toString(16)).join(":");
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", (e: { code?: string }) => resolve(e.code !== "EADDRINUSE"));
    const options = { host, port: b.port, exclusive: true, backlog: 1, reusePort: true };
    server.listen({ ...options, ipv6Only: !!b.v6only }, () => server.close(() => resolve(true)));
  });
}
