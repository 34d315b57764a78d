#!/usr/bin/env bash
# criu's restore counted as it reads: two targets of 4 GiB and 1 GiB (tests/gpu/target.cu), each a
# tree of its own, snapshotted and restored with --events. Each tree's `bytes` events (its
# processes' resident anonymous and shared memory, as criu reads their pages back) must come while
# criu restores it, grow, and end near its images' bytes; this script's own samples of each pid's
# /proc/<pid>/status beside them. Then a restore on a terminal (util-linux's script): its line
# counts the images back as they grow, before the first tree is back. Carry
# .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz:
#
#   bash tests/gpu/exp/restore_count.sh      (log: $OUT/restore-count.txt)
#
# About 1 minute.
. "$(dirname "$0")/session.sh" restore-count
trap 'end_started "target"' EXIT
pids=() dirs=() hashes=()
for m in 4096 1024; do
  start_target "t$m" "$m" || fail_setup "target $m did not start"
  pids+=("$T_PID") dirs+=("$T_DIR") hashes+=("$T_HASH")
done
all=$(IFS=,; echo "${pids[*]}")
round_trip "$all" snap-e
python3 - "$bin/snap-e.events" <<'PY' | verdicts_of || verdict FAIL "the events unread"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
start = next(e["at"] for e in ev if e.get("phase") == "restore")
for t in [e for e in ev if e["event"] == "tree-end" and e["how"] == "restored"]:
    counts = [e for e in ev if e["event"] == "bytes" and e["root"] == t["root"] and e["at"] >= start]
    before = [c for c in counts if c["at"] < t["at"]]
    grow = all(b["bytes"] > a["bytes"] for a, b in zip(before, before[1:]))
    last = before[-1]["bytes"] if before else 0
    seen = ", ".join(f"{c['bytes'] / 1e9:.2f} GB at {c['at'] - start:.0f} ms" for c in before[:12])
    print(f"   tree {t['root']}: back at {t['at'] - start:.0f} ms, {t['bytes'] / 1e9:.3f} GB of"
          f" files; counts: {seen}")
    print(("PASS" if len(before) >= 3 and grow else "FAIL") +
          f" tree {t['root']}: {len(before)} counts while criu restored it, each more than the last")
    print(("PASS" if 0.9 <= last / t["bytes"] <= 1.05 else "FAIL") +
          f" tree {t['root']}: the last count {last / t['bytes']:.3f} of its images' bytes")
    print(("PASS" if not [c for c in counts if c["at"] > t["at"]] else "FAIL") +
          f" tree {t['root']}: no count after it is back")
PY
snapshot_of "$all" snap-t
timeout 300 script -qfec "stty cols 160; ${CK[*]} restore-snapshot $bin/snap-t" /dev/null >"$bin/raw"
check "the terminal's restore" $?
python3 - "$bin/raw" <<'PY' | verdicts_of || verdict FAIL "the terminal's frames unread"
import re, sys
frames = open(sys.argv[1], newline="").read().split("\r\x1b[2K")
mid = [f for f in frames if f.startswith("restoring the process trees")]
for f in mid[:8]:
    print(f"   frame: {f.strip()[:150]}")
done = [float(m.group(1)) for f in mid if (m := re.search(r": ~?([0-9.]+) of ", f))]
print(("PASS" if len(set(done)) >= 3 and done == sorted(done) and done[-1] > 0 else "FAIL") +
      f" the restore's line counts the images back as they grow: {done[:10]}")
PY
for i in "${!pids[@]}"; do
  hash_intact "target $i answers its hash at the end" "${dirs[$i]}" "${hashes[$i]}"
done
verdict_summary "$bin/verdicts.txt" restore-count
