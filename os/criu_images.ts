// criu's images where this package reads them, with no protobuf library (the few fields it needs,
// by number): the processes of a dumped tree (`pstree.img`), and the addresses and ports its TCP
// sockets bind (`files.img`), which a restore checks free on this host before criu runs.

import { readdir, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import { type DumpedProcess, EngineError, type RestoreRequest } from "../core/engine.ts";
import { clockOf } from "../core/time.ts";

/** The first word of criu's images, and the second of `pstree.img` and of `files.img`. */
const IMG_COMMON_MAGIC = 0x54564319, PSTREE_MAGIC = 0x50273030, FILES_MAGIC = 0x56303138;
/** The longest a restore waits for ports in TIME_WAIT (the kernel's 60 s, and its timers' slack). */
const TIME_WAIT_MAX_MS = 90_000;
/** How much later than /proc says the kernel's timers may end a TIME_WAIT (up to 1.9 s seen). */
const TIMER_SLACK_MS = 2000;
/** /proc/net/tcp's states by number. */
const TCP_STATES =
  ",ESTABLISHED,SYN_SENT,SYN_RECV,FIN_WAIT1,FIN_WAIT2,TIME_WAIT,CLOSE,CLOSE_WAIT," +
  "LAST_ACK,LISTEN,CLOSING";

/** An address and port a socket binds: the address as the kernel's 32-bit words (all 0: any). */
export type Bound = {
  readonly port: number;
  readonly addr: readonly number[];
  readonly v6only?: boolean;
};
/**
 * A socket of this host on a port: its state, and where no process holds it any more (TIME_WAIT,
 * or a connection closed and orphaned), the ms it may hold the port yet.
 */
export type PortHolder = {
  readonly port: number;
  readonly state: string;
  readonly leftMs?: number;
};
type Fields = Map<number, (number | Uint8Array)[]>;

/**
 * The processes in criu's `pstree.img`, one `pstree_entry` each (the root first): fields 1 (pid),
 * 2 (ppid) and 5 (threads, packed or not).
 */
export function parsePstree(bytes: Uint8Array): DumpedProcess[] {
  const out = messages(bytes, PSTREE_MAGIC, "pstree").map((m) => {
    const f = fields(m, 5), pid = number(f, 1) ?? 0, parent = number(f, 2) ?? 0;
    if (pid <= 0) throw new Error("an entry has no pid");
    const threads = (f.get(5) ?? []).filter((t) => typeof t === "number" && t !== pid) as number[];
    return { pid, parent, threads: [pid, ...threads] };
  });
  if (out.length === 0) throw new Error("it holds no process");
  return out;
}

/**
 * What the TCP sockets in criu's `files.img` bind that are no connection (listening, or bound
 * only): of each `file_entry` of type 4 (INETSK), the `inet_sk_entry` in its field 4: proto (5; 6
 * is TCP), src_port (7), dst_port (8; 0: no connection), src_addr (11), v6only (15).
 */
export function boundPorts(bytes: Uint8Array): Bound[] {
  const out: Bound[] = [];
  for (const m of messages(bytes, FILES_MAGIC, "files")) {
    const entry = fields(m), isk = entry.get(4)?.at(-1);
    if (number(entry, 1) !== 4 || !(isk instanceof Uint8Array)) continue;
    const sk = fields(isk, 11), port = number(sk, 7) ?? 0;
    if (number(sk, 5) !== 6 || number(sk, 8) || port === 0) continue;
    const addr = (sk.get(11) ?? []).filter((w) => typeof w === "number") as number[];
    out.push({ port, addr, ...(number(sk, 15) ? { v6only: true } : {}) });
  }
  return out;
}

/**
 * The sockets on `ports` in the text of /proc/net/tcp and tcp6 (local `ADDR:PORT` in hex, the state,
 * `timer:when` in hundredths of a second, the inode: 0 where no process holds it): a TIME_WAIT or
 * an orphan with the time-wait timer (3) ends when it says, another orphan is looked at again.
 */
export function portHolders(table: string, ports: readonly number[]): PortHolder[] {
  const out: PortHolder[] = [];
  for (const line of table.split("\n")) {
    const [sl = "", local = "", , st = "", , timer = "", , , , inode] = line.trim().split(/\s+/);
    const port = parseInt(local.split(":")[1] ?? "", 16), [tr, when = ""] = timer.split(":");
    if (!/^[0-9]+:$/.test(sl) || !ports.includes(port)) continue;
    const state = TCP_STATES.split(",")[parseInt(st, 16)] || `state 0x${st}`;
    const leftMs = tr === "03" ? (parseInt(when, 16) || 0) * 10 : inode === "0" ? 1000 : undefined;
    out.push({ port, state, ...(leftMs === undefined ? {} : { leftMs }) });
  }
  return out;
}

/**
 * Before criu restores a tree: waits till this host lets a socket bind what the tree's TCP sockets
 * bind (a listener made and closed at once, with SO_REUSEADDR as criu's; else criu fails: "Address
 * already in use"); returns the ms waited. A port held only by sockets no process holds (TIME_WAIT:
 * a connection closed in the minute before the dump; NCCL's ranks close those they accept while
 * they start) is waited for, told by `onWait`; one held by a socket open now, or a wait beyond the
 * restore's time (or 90 s), is an error. A tree with a network namespace of its own (a
 * `netns-N.img`) binds nothing here; images that cannot be read are left to criu.
 */
export async function portsFree(request: RestoreRequest): Promise<number> {
  const { imagesDir, root, timeoutMs = Infinity } = request;
  const names = await readdir(imagesDir).catch(() => [] as string[]);
  if (names.some((n) => /^netns-[0-9]+\.img$/.test(n))) return 0;
  const bound = await readFile(path.join(imagesDir, "files.img"))
    .then((b) => boundPorts(new Uint8Array(b))).catch(() => []);
  const start = performance.now(), took = () => performance.now() - start;
  for (let waits = 0;; waits++) {
    const taken = (await Promise.all(bound.map(bindable))).flatMap((ok, i) => ok ? [] : [i]);
    const ports = [...new Set(taken.map((i) => bound[i].port))];
    if (ports.length === 0) return waits === 0 ? 0 : Math.ceil(took());
    const tables = ["tcp", "tcp6"].map((f) => readFile(`/proc/net/${f}`, "utf8").catch(() => ""));
    const holders = portHolders((await Promise.all(tables)).join("\n"), ports);
    const live = Map.groupBy(holders.filter((h) => h.leftMs === undefined), (h) => h.port);
    if (live.size > 0) {
      const count = (n: number) => n > 1 ? ` x${n}` : "";
      const each = [...live].map(([port, hs]) =>
        `${port} (${
          [...Map.groupBy(hs, (h) => h.state)].map(([st, n]) => st + count(n.length)).join(", ")
        })`
      );
      const free = "end what holds them, or restore where they are free";
      const held = `sockets open on this host hold ports the tree of ${root} binds`;
      throw new EngineError(`${held}: ${each.join(", ")}: ${free}`);
    }
    // None listed: gone since the bind was tried; look again.
    const ms = Math.max(250, ...holders.map((h) => h.leftMs!)), s = Math.ceil(ms / 1000);
    const why = `port ${ports.join(", ")} held in TIME_WAIT on this host`;
    if (took() + ms + (ms > 1000 ? TIMER_SLACK_MS : 0) > Math.min(timeoutMs, TIME_WAIT_MAX_MS)) {
      const left = timeoutMs < TIME_WAIT_MAX_MS
        ? `beyond the ${Math.floor((timeoutMs - took()) / 1000)} s the restore had left: give it ` +
          `a longer timeout, or restore again in ${s} s`
        : `after ${Math.round(took() / 1000)} s of waiting: restore again later`;
      const held = `the tree of ${root} binds port ${ports.join(", ")}, which this host holds`;
      throw new EngineError(`${held} in TIME_WAIT for ${s} s more, ${left}`);
    }
    request.onWait?.(ms, why);
    const stopped = `the restore of the tree of ${root} was stopped while it waited for ${why}`;
    await clockOf({}).sleep(ms, request.signal).catch(() => {
      throw new EngineError(stopped);
    });
  }
}

/**
 * Whether this host lets a listening socket bind `b` now (with SO_REUSEADDR, as Node's, Deno's and
 * Bun's listeners and criu's restored sockets have): `false` only where the address is in use.
 */
function bindable(b: Bound): Promise<boolean> {
  if (b.addr.length !== 1 && b.addr.length !== 4) return Promise.resolve(true); // criu's to judge
  const v4 = b.addr.length === 1, bytes = b.addr.flatMap((w) => [w, w >>> 8, w >>> 16, w >>> 24]);
  const host = v4
    ? bytes.map((x) => x & 255).join(".")
    : Array.from({ length: 8 }, (_, i) =>
      ((bytes[2 * i] & 255) * 256 + (bytes[2 * i + 1] & 255)).toString(16)).join(":");
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", (e: { code?: string }) => resolve(e.code !== "EADDRINUSE"));
    const options = { host, port: b.port, exclusive: true, backlog: 1, ipv6Only: !!b.v6only };
    server.listen(options, () => server.close(() => resolve(true)));
  });
}

/** The messages of a criu image: after its two magic words, each after its length (32 bits). */
function messages(bytes: Uint8Array, magic: number, name: string): Uint8Array[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const word = (at: number) => view.getUint32(at, true);
  if (bytes.length < 8 || word(0) !== IMG_COMMON_MAGIC || word(4) !== magic) {
    throw new Error(`it does not start with criu's ${name} magic`);
  }
  const out: Uint8Array[] = [];
  for (let at = 8; at < bytes.length;) {
    if (at + 4 > bytes.length) throw new Error(`it ends within an entry's length at byte ${at}`);
    const end = at + 4 + word(at);
    if (end > bytes.length) throw new Error(`its entry at byte ${at} is cut short`);
    out.push(bytes.subarray(at + 4, end));
    at = end;
  }
  return out;
}

/**
 * A protobuf message's values by field number, in order: varints as numbers, the others' bytes
 * (those of field `packed`: the varints in them); fixed-width ones skipped.
 */
function fields(message: Uint8Array, packed?: number): Fields {
  let at = 0;
  const varint = (): number => {
    let value = 0, shift = 0;
    for (;;) {
      if (at >= message.length) throw new Error("a number is cut short");
      const byte = message[at++];
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return value;
      shift += 7;
      if (shift > 63) throw new Error("a number is too long");
    }
  };
  const got: Fields = new Map();
  const add = (field: number, v: number | Uint8Array) =>
    (got.get(field) ?? got.set(field, []).get(field)!).push(v);
  while (at < message.length) {
    const key = varint(), field = Math.floor(key / 8), wire = key % 8;
    if (wire === 0) add(field, varint());
    else if (wire === 2) {
      const length = varint(), end = at + length;
      if (end > message.length) throw new Error("a field is cut short");
      if (field !== packed) add(field, message.subarray(at, end));
      while (field === packed && at < end) add(field, varint());
      at = end;
    } else if (wire === 5 || wire === 1) at += wire === 5 ? 4 : 8; // fixed32, fixed64
    else throw new Error(`a field of wire type ${wire}, which criu's entries do not have`);
  }
  return got;
}

/** A field's last value, where it is a number. */
function number(f: Fields, field: number): number | undefined {
  const v = f.get(field)?.at(-1);
  return typeof v === "number" ? v : undefined;
}
