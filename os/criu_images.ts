// criu's images where this package reads them, with no protobuf library (the few fields it needs,
// by number): the processes of a dumped tree (`pstree.img`), and the addresses and ports its TCP
// sockets bind (`files.img`), which a restore checks free on this host before criu runs.

import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { type DumpedProcess, EngineError, type RestoreRequest } from "../core/engine.ts";
import { clockOf } from "../core/time.ts";

/** The first word of criu's images, and the second of `pstree.img` and of `files.img`. */
const IMG_COMMON_MAGIC = 0x54564319, PSTREE_MAGIC = 0x50273030, FILES_MAGIC = 0x56303138;
/** The longest a restore waits for ports in TIME_WAIT (the kernel's 60 s, and its timers' slack). */
const TIME_WAIT_MAX_MS = 90_000;
/** /proc/net/tcp's numbers of the states a port's holder is named by. */
const TCP_STATES: Readonly<Record<string, string>> = {
  "01": "ESTABLISHED",
  "06": "TIME_WAIT",
  "0A": "LISTEN",
};

/**
 * An address and port a socket binds, the address as the kernel's 32-bit words (all 0: any), and
 * whether it has SO_REUSEADDR (`reuse`: then only a listening socket on the port stops criu's
 * restore, which sets the option: those in TIME_WAIT its connections left have it too).
 */
export type Bound = {
  readonly port: number;
  readonly addr: readonly number[];
  readonly reuse?: boolean;
};
/** A socket of this host on a port: its state, and the ms a TIME_WAIT one holds the port yet. */
export type PortHolder = Bound & { readonly state: string; readonly leftMs?: number };
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
 * is TCP), src_port (7), dst_port (8; 0: no connection), src_addr (11), and of its opts (14),
 * reuseaddr (7).
 */
export function boundPorts(bytes: Uint8Array): Bound[] {
  const out: Bound[] = [];
  for (const m of messages(bytes, FILES_MAGIC, "files")) {
    const entry = fields(m), isk = entry.get(4)?.at(-1);
    if (number(entry, 1) !== 4 || !(isk instanceof Uint8Array)) continue;
    const sk = fields(isk, 11), port = number(sk, 7) ?? 0;
    if (number(sk, 5) !== 6 || number(sk, 8) || port === 0) continue;
    const addr = (sk.get(11) ?? []).filter((w) => typeof w === "number") as number[];
    const opts = sk.get(14)?.at(-1),
      reuse = opts instanceof Uint8Array && !!number(fields(opts), 7);
    out.push({ port, addr, ...(reuse ? { reuse } : {}) });
  }
  return out;
}

/**
 * The sockets in the text of /proc/net/tcp and tcp6 (local `ADDR:PORT` in hex, the address as
 * 32-bit words; the state; `timer:when` in hundredths of a second) on a port of `bound` at the
 * same address, or where either address is any: listening, or any where the bound socket has no
 * SO_REUSEADDR.
 */
export function portHolders(table: string, bound: readonly Bound[]): PortHolder[] {
  const any = (a: readonly number[]) => a.every((w) => w === 0);
  const out: PortHolder[] = [];
  for (const line of table.split("\n")) {
    const [sl = "", local = "", , st = "", , timer = ""] = line.trim().split(/\s+/);
    const [hex = "", portHex = ""] = local.split(":");
    const port = parseInt(portHex, 16),
      addr = (hex.match(/.{8}/g) ?? []).map((w) => parseInt(w, 16));
    const same = (b: Bound) =>
      b.port === port && (any(b.addr) || any(addr) || b.addr.join() === addr.join()) &&
      (st === "0A" || !b.reuse);
    if (!/^[0-9]+:$/.test(sl) || !bound.some(same)) continue;
    const state = TCP_STATES[st] ?? `state 0x${st}`, when = parseInt(timer.split(":")[1], 16);
    out.push({ port, addr, state, ...(st === "06" ? { leftMs: (when || 0) * 10 } : {}) });
  }
  return out;
}

/**
 * Before criu restores a tree: waits till no socket of this host holds what the tree's TCP sockets
 * bind (criu could not bind it: "Address already in use"); returns the ms waited. A port in
 * TIME_WAIT (a connection its processes closed in the minute before the dump: NCCL's ranks close
 * those they accept while they start) is waited for, told by `onWait`; one held by a socket open
 * now, or a wait beyond the restore's time, is an error. A tree with a network namespace of its
 * own (a `netns-N.img`) binds nothing here; images that cannot be read are left to criu.
 */
export async function portsFree(request: RestoreRequest): Promise<number> {
  const { imagesDir, root, timeoutMs = Infinity } = request;
  const names = await readdir(imagesDir).catch(() => [] as string[]);
  if (names.some((n) => /^netns-[0-9]+\.img$/.test(n))) return 0;
  const bound = await readFile(path.join(imagesDir, "files.img"))
    .then((b) => boundPorts(new Uint8Array(b))).catch(() => []);
  if (bound.length === 0) return 0;
  // The kernel's timers may end a TIME_WAIT some seconds late: the port is looked at again.
  for (let waited = 0;;) {
    const tables = ["tcp", "tcp6"].map((f) => readFile(`/proc/net/${f}`, "utf8").catch(() => ""));
    const holders = portHolders((await Promise.all(tables)).join("\n"), bound);
    if (holders.length === 0) return waited;
    const live = holders.filter((h) => h.leftMs === undefined);
    const held = `ports the tree of ${root} binds`;
    if (live.length > 0) {
      const now = live.map((h) => `${h.port} (${h.state})`).join(", ");
      const free = "end what holds them, or restore where they are free";
      throw new EngineError(`sockets open on this host hold ${held}: ${now}: ${free}`);
    }
    const ports = [...new Set(holders.map((h) => h.port))].join(", ");
    const ms = Math.max(250, ...holders.map((h) => h.leftMs!)), s = Math.ceil(ms / 1000);
    const why = `port ${ports} held in TIME_WAIT on this host`;
    if (waited + ms > Math.min(timeoutMs, TIME_WAIT_MAX_MS)) {
      const left = timeoutMs < TIME_WAIT_MAX_MS
        ? `beyond the ${Math.floor((timeoutMs - waited) / 1000)} s the restore had left`
        : `after ${Math.round(waited / 1000)} s of waiting`;
      const then =
        `which this host holds in TIME_WAIT for ${s} s more, ${left}: restore again then`;
      throw new EngineError(`the ${held} include ${ports}, ${then}`);
    }
    if (waited === 0 || ms >= 1000) request.onWait?.(ms, why);
    const stopped = `the restore of the tree of ${root} was stopped while it waited for ${why}`;
    await clockOf({}).sleep(ms, request.signal).catch(() => {
      throw new EngineError(stopped);
    });
    waited += ms;
  }
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
