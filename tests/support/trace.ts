// A trace as a snapshot killed outright leaves it (docs/SNAPSHOTS.md): `in-progress.json` written
// by hand into a private directory, as the format says, not through the code under test. For the
// tests of `recover` (snapshot_trust, cli_snapshot, room_fail_closed). Not a test file.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Makes `dir` (mode 0700, where missing) and writes its trace: the processes a snapshot had
 * suspended (pid and, where given, start time) and the tree directories it had made (made too).
 */
export function plantTrace(
  dir: string,
  processes: readonly { pid: number; start?: number }[],
  made: readonly string[] = [],
): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const name of made) mkdirSync(join(dir, name), { mode: 0o700 });
  writeFileSync(
    join(dir, "in-progress.json"),
    JSON.stringify({
      format: "ckpt-cuda-in-progress/1",
      startedAt: new Date().toISOString(),
      processes,
      made,
    }),
    { mode: 0o600 },
  );
}
