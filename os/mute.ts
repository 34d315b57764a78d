// TCP connections ended without a word: a dumped tree's, put in repair mode (TCP_REPAIR) before
// the kill as criu's own end of a dump does, so that their peers are told nothing (a restored
// connection is still open there) and no TIME_WAIT is left; and the TIME_WAITs on a port a
// restore needs (a listener's, whose closed connections hold it for 60 s: NCCL's ranks leave some).

import { readdir, readlink } from "node:fs/promises";
import type { FfiTable } from "../ffi/adapter.ts";
import { LIBC } from "../ffi/find.ts";
import { runtimeAdapter } from "../ffi/runtime.ts";
import { granted } from "./linux_host.ts";

/** The C library's functions it uses; `syscall` for pidfd_open and pidfd_getfd (Linux 5.6). */
const LIBC_CALLS = {
  syscall: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  send: { parameters: ["i32", "buffer", "u64", "i32"], result: "i32" },
  recv: { parameters: ["i32", "buffer", "u64", "i32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
} as const satisfies FfiTable<string>;
const SYS_PIDFD_OPEN = 434, SYS_PIDFD_GETFD = 438, IPPROTO_TCP = 6, TCP_REPAIR = 19;
type Call = (symbol: keyof typeof LIBC_CALLS, ...args: (number | Uint8Array)[]) => number;

/** Runs `use` with the C library, unless this runtime has no FFI or, on Deno, no permission yet. */
async function withLibc(use: (call: Call) => Promise<void> | void): Promise<void> {
  if (!granted({ name: "ffi" })) return; // Deno's FFI only where it asks no question
  const libc = await runtimeAdapter({ callingThread: true })
    .then((ffi) => ffi.open(LIBC, LIBC_CALLS)).catch(() => undefined);
  if (!libc) return;
  const call: Call = (symbol, ...args) => Number(libc.call({ symbol, args }));
  await Promise.try(use, call).finally(() => libc.close());
}

/**
 * Puts the TCP connections of `pids` (stopped, to be killed) in repair mode; what cannot be (a
 * listener, not TCP, a process gone, no FFI or, on Deno, no permission for it) is left as it is.
 */
export async function muteConnections(pids: readonly number[]): Promise<void> {
  if (pids.length === 0) return;
  await withLibc(async (call) => {
    for (const pid of pids) {
      const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]);
      const link = (fd: string) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => "");
      const links = await Promise.all(fds.map(link));
      const sockets = fds.filter((_, i) => links[i].startsWith("socket:")).map(Number);
      const pidfd = sockets.length > 0 ? call("syscall", SYS_PIDFD_OPEN, pid, 0, 0) : -1;
      if (pidfd < 0) continue;
      for (const fd of sockets) {
        const own = call("syscall", SYS_PIDFD_GETFD, pidfd, fd, 0);
        if (own < 0) continue;
        call("setsockopt", own, IPPROTO_TCP, TCP_REPAIR, new Uint8Array([1, 0, 0, 0]), 4);
        call("close", own);
      }
      call("close", pidfd);
    }
  });
}

/**
 * Ends TIME_WAITs (of no process), each given by its ends as /proc/net/tcp and tcp6 print them
 * (`ADDR:PORT` in hex), as `ss -K` does: SOCK_DESTROY over a sock_diag netlink socket
 * (CAP_NET_ADMIN, a kernel that ends TIME_WAITs so, as 6.18 does). Returns how many it ended.
 */
export async function endTimeWaits(ends: readonly (readonly [string, string])[]): Promise<number> {
  let ended = 0;
  const words = (hex: string) =>
    [0, 1, 2, 3].map((w) => parseInt(hex.slice(8 * w, 8 * w + 8) || "0", 16));
  await withLibc((call) => {
    const fd = call("socket", 16, 2 | 0o2000000, 4); // AF_NETLINK, SOCK_DGRAM|CLOEXEC, SOCK_DIAG
    if (fd < 0) return;
    try {
      for (const [seq, pair] of ends.entries()) {
        const [[src, sport], [dst, dport]] = pair.map((end) => end.split(":"));
        // nlmsghdr (SOCK_DESTROY, NLM_F_REQUEST|NLM_F_ACK), then inet_diag_req_v2: AF_INET6 or
        // AF_INET, TCP, TIME_WAIT, the ports (big-endian, below), each address's words as /proc
        // printed them (in this host's order), no interface, INET_DIAG_NOCOOKIE
        const family = src.length > 8 ? 10 : 2, head = [72, 21 | 5 << 16, seq, 0, family | 6 << 8];
        const msg = new Uint32Array([...head, 1 << 6, 0, ...words(src), ...words(dst), 0, ~0, ~0]);
        new DataView(msg.buffer).setUint32(24, parseInt(sport, 16) << 16 | parseInt(dport, 16));
        if (call("send", fd, new Uint8Array(msg.buffer), 72, 0) !== 72) continue;
        const answer = new Int32Array(64); // its NLMSG_ERROR (2): the error after the header
        const got = call("recv", fd, new Uint8Array(answer.buffer), 256, 0x40); // MSG_DONTWAIT
        const ok = got >= 20 && (answer[1] & 0xffff) === 2 && answer[2] === seq;
        if (ok && answer[4] === 0) ended++;
      }
    } finally {
      call("close", fd);
    }
  });
  return ended;
}
