// TCP connections ended without a word. A dumped tree's, as criu ends those it dumps: each put in
// repair mode (TCP_REPAIR) before the kill, so that it sends its peer no FIN (the restored
// connection is still open there) and leaves no TIME_WAIT. And the TIME_WAITs that hold a port a
// restore needs (a connection accepted on a listener and closed holds the listener's port for 60 s,
// and criu cannot restore the listener there meanwhile): NCCL's ranks close their first
// connections as they start, so every job they make leaves some behind.

import { readdir, readlink } from "node:fs/promises";
import type { FfiTable } from "../ffi/adapter.ts";
import { LIBC } from "../ffi/find.ts";
import { runtimeAdapter } from "../ffi/runtime.ts";

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
  const deno = (globalThis as { Deno?: typeof Deno }).Deno; // Deno's FFI: only where no prompt
  if (deno && deno.permissions.querySync({ name: "ffi" }).state !== "granted") return;
  const libc = await runtimeAdapter({ callingThread: true })
    .then((ffi) => ffi.open(LIBC, LIBC_CALLS)).catch(() => undefined);
  if (!libc) return;
  try {
    await use((symbol, ...args) => Number(libc.call({ symbol, args })));
  } finally {
    await libc.close();
  }
}

/**
 * Puts the TCP connections of `pids` (stopped, to be killed) in repair mode. What cannot be (a
 * listener, a socket not TCP's, a process gone, a runtime without FFI or, on Deno, without the
 * permission for it) is left as it is.
 */
export async function muteConnections(pids: readonly number[]): Promise<void> {
  if (pids.length === 0) return;
  await withLibc(async (call) => {
    for (const pid of pids) {
      const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]), sockets = [];
      for (const fd of fds) {
        if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "")).startsWith("socket:")) {
          sockets.push(Number(fd));
        }
      }
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
 * Ends TIME_WAITs (of no process), each given by its ends as /proc/net/tcp and tcp6 print them (`ADDR:PORT` in
 * hex), as `ss -K` does: the kernel's SOCK_DESTROY over a sock_diag netlink socket (root; a kernel
 * that ends TIME_WAITs so, as 6.18 does). Returns how many it ended; none where it cannot.
 */
export async function endTimeWaits(ends: readonly (readonly [string, string])[]): Promise<number> {
  if (ends.length === 0) return 0;
  let ended = 0;
  await withLibc((call) => {
    const fd = call("socket", 16, 2 | 0o2000000, 4); // AF_NETLINK, SOCK_DGRAM|CLOEXEC, SOCK_DIAG
    for (const [i, pair] of (fd < 0 ? [] : ends).entries()) {
      const msg = new Uint8Array(72), view = new DataView(msg.buffer), answer = new Int32Array(64);
      view.setUint32(0, 72, true); // nlmsghdr: length, SOCK_DESTROY, NLM_F_REQUEST|NLM_F_ACK, seq
      view.setUint32(4, 21 | 5 << 16, true);
      view.setUint32(8, i, true);
      view.setUint32(16, (pair[0].length > 13 ? 10 : 2) | 6 << 8, true); // AF_INET6|AF_INET, TCP
      view.setUint32(20, 1 << 6, true); // TCPF_TIME_WAIT
      for (const [e, end] of pair.entries()) { // the port big-endian; each word of the address as
        // /proc printed it, in this host's order (little-endian)
        const [addr, port] = end.split(":");
        view.setUint16(24 + 2 * e, parseInt(port, 16));
        for (let w = 0; w < addr.length / 8; w++) {
          view.setUint32(28 + 16 * e + 4 * w, parseInt(addr.slice(8 * w, 8 * w + 8), 16), true);
        }
      }
      view.setBigUint64(64, 2n ** 64n - 1n); // INET_DIAG_NOCOOKIE
      const sent = call("send", fd, msg, 72, 0) === 72;
      if (sent && call("recv", fd, new Uint8Array(answer.buffer), 256, 0) >= 20 && !answer[4]) {
        ended++;
      }
    }
    if (fd >= 0) call("close", fd);
  });
  return ended;
}
