// criu's images where this package reads them, with no protobuf library (the few fields it needs,
// by number): the processes of a dumped tree (`pstree.img`), and the addresses and ports its TCP
// sockets bind (`files.img`, which criu_ports.ts checks free on this host before a restore).

import type { DumpedProcess } from "../core/engine.ts";

/** The first word of criu's images, and the second of `pstree.img` and of `files.img`. */
const IMG_COMMON_MAGIC = 0x54564319, PSTREE_MAGIC = 0x50273030, FILES_MAGIC = 0x56303138;
/** An address and port a socket binds: the address as the kernel's 32-bit words (all 0: any). */
export type Bound = Readonly<{ port: number; addr: readonly number[]; v6only?: boolean }>;
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
  return messages(bytes, FILES_MAGIC, "files").flatMap((m): Bound[] => {
    const entry = fields(m), isk = entry.get(4)?.at(-1);
    if (number(entry, 1) !== 4 || !(isk instanceof Uint8Array)) return [];
    const sk = fields(isk, 11), port = number(sk, 7) ?? 0;
    if (number(sk, 5) !== 6 || number(sk, 8) || port === 0) return [];
    const addr = (sk.get(11) ?? []).filter((w) => typeof w === "number") as number[];
    return [{ port, addr, ...(number(sk, 15) ? { v6only: true } : {}) }];
  });
}

/** The messages of a criu image: after its two magic words, each after its length (32 bits). */
function messages(bytes: Uint8Array, magic: number, name: string): Uint8Array[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const word = (at: number) => view.getUint32(at, true);
  const not = `it does not start with criu's ${name} magic`;
  if (bytes.length < 8 || word(0) !== IMG_COMMON_MAGIC || word(4) !== magic) throw new Error(not);
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
