#!/usr/bin/env bash
# criu's restore counted for a tree of many processes: a bash root (a session of its own) with 16
# `sleep` children and one 1 GiB target (tests/gpu/target.cu), snapshotted and restored with
# --events. Each task criu forks starts as a copy of criu: does the tree's count (its processes'
# resident anonymous and shared memory) run past its images while criu restores it? Carry
# .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz:
#
#   bash tests/gpu/exp/tree_count.sh      (log: $OUT/tree-count.txt)
. "$(dirname "$0")/session.sh" tree-count
trap 'pkill -9 -P "${root:-0}" 2>/dev/null; end_started "target|bash"' EXIT
T_DIR=$bin/t
mkdir -p "$T_DIR" && mkfifo "$T_DIR/cmd"
# shellcheck disable=SC2016 # the root's own $1, $2
setsid bash -c 'for i in $(seq 16); do sleep 600 & done; "$1" fifo 1024 "$2/cmd" </dev/null >"$2/out" 2>&1 & wait' \
  root "$target" "$T_DIR" </dev/null >/dev/null 2>&1 &
root=$!
started+=("$root")
line=$(ready_line "$T_DIR/out" "$root" 120) && read -r _ pid _ hash <<<"$line"
[[ -n ${pid:-} ]] || fail_setup "the target did not start"
started+=("$pid")
echo "root $root, $(pgrep -P "$root" | wc -l) children, target $pid (hash $hash)"
round_trip "$root" snap "$pid"
python3 - "$bin/snap.events" <<'PY' | verdicts_of || verdict FAIL "the events unread"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
start = next(e["at"] for e in ev if e.get("phase") == "restore")
t = next(e for e in ev if e["event"] == "tree-end" and e["how"] == "restored")
counts = [e for e in ev if e["event"] == "bytes" and e["at"] >= start]
seen = ", ".join(f"{c['bytes'] / 1e9:.3f} GB at {c['at'] - start:.0f} ms" for c in counts)
most = max((c["bytes"] for c in counts), default=0)
print(f"   tree {t['root']}: back at {t['at'] - start:.0f} ms, {t['bytes'] / 1e9:.3f} GB of files;"
      f" counts: {seen}")
print(("PASS" if most <= 1.05 * t["bytes"] else "FAIL") +
      f" the tree's counts stay within its images: the most {most / t['bytes']:.3f} of them")
PY
hash_intact "the target answers its hash at the end" "$T_DIR" "$hash"
echo "   the restored tree: $(pgrep -P "$root" | wc -l) children of $root"
verdict_summary "$bin/verdicts.txt" tree-count
