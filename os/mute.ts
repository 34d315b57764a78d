// A dumped tree's TCP connections ended without a word, as criu ends those it dumps: each put in
// repair mode (TCP_REPAIR) before the kill, so that it sends no FIN and leaves no TIME_WAIT. Ended
// normally, a connection accepted on a listener holds that port for 60 s, and criu cannot restore
// the listener there meanwhile (NCCL's ranks: a job restored after its snapshot waited 58 s).

import { readdir, readlink } from "node:fs/promises";
import type { FfiTable } from "../ffi/adapter.ts";
import { LIBC } from "../ffi/find.ts";
import { runtimeAdapter } from "../ffi/runtime.ts";

/** The C library's functions it uses; `syscall` for pidfd_open and pidfd_getfd (Linux 5.6). */
const LIBC_CALLS = {
  syscall: { parameters: ["u64", "u64", "u64", "u64"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
} as const satisfies FfiTable<string>;
const SYS_PIDFD_OPEN = 434, SYS_PIDFD_GETFD = 438, IPPROTO_TCP = 6, TCP_REPAIR = 19;

/**
 * Puts the TCP connections of `pids` (stopped, to be killed) in repair mode. What cannot be (a
 * listener, a socket not TCP's, a process gone, a runtime without FFI or, on Deno, without the
 * permission for it) is left as it is.
 */
export async function muteConnections(pids: readonly number[]): Promise<void> {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno; // Deno's FFI: only where no prompt
  const ffi = !deno || deno.permissions.querySync({ name: "ffi" }).state === "granted";
  const libc = pids.length === 0 || !ffi ? undefined : await runtimeAdapter({ callingThread: true })
    .then((ffi) => ffi.open(LIBC, LIBC_CALLS)).catch(() => undefined);
  if (!libc) return;
  const call = (symbol: keyof typeof LIBC_CALLS, ...args: (number | Uint8Array)[]) =>
    Number(libc.call({ symbol, args }));
  try {
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
  } finally {
    await libc.close();
  }
}
