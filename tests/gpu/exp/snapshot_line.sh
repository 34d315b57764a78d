#!/usr/bin/env bash
# A snapshot's and a restore's live line on a real terminal (util-linux's script, 160 columns), on
# the GPU machine, as root, from the repo root:
#
#   bash tests/gpu/exp/snapshot_line.sh      (log: $OUT/snapshot-line.txt)
#
# Carry .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz. Two targets (tests/gpu/target.cu,
# 8 GiB and 1 GiB), each a tree of its own, snapshotted into one directory and restored by ours.
# The small tree's dump begins while the big one still checkpoints: the line names that step beside
# the dump, where the whole list fits, with no rate of criu's till it ends; no frame is cut; both
# targets answer their hash after.
# About 1 minute.
. "$(dirname "$0")/session.sh" snapshot-line
trap 'end_started "target"' EXIT
start_named big 8192
start_named small 1024
# shown KIND ARGS...: ours under a terminal of 160 columns; its frames, some of them, and checks.
shown() {
  local kind=$1
  shift
  timeout 180 script -qfec "stty cols 160; ${CK[*]} $*" /dev/null >"$bin/raw-$kind"
  local rc=$?
  check "$kind: exit 0" $rc "exit $rc"
  python3 - "$bin/raw-$kind" "$kind" "$big" >"$bin/said-$kind" <<'EOF'
import re, sys
raw = open(sys.argv[1], encoding="utf-8", newline="").read()
kind, big = sys.argv[2], sys.argv[3]
frames = [p for p in raw.split("\r\x1b[2K")[1:] if p and not p.startswith("\r")]
frames = [f for f in frames if re.match(r".*? [0-9]+\.[0-9] s", f) and "\n" not in f]
phases = []
for f in frames:
    phase = re.match(r"(.*?) [0-9]+\.[0-9] s", f).group(1)
    if not phases or phases[-1][0] != phase:
        phases.append((phase, f))
for phase, first in phases:
    print(f"   first of {phase!r}: {first!r}")
listed = [f for f in frames if "; " in f]
print(f"   {len(frames)} frames, {len(listed)} naming steps under way; e.g. {listed[:2]}")
cut = [f for f in frames if f.endswith("\u2026")]
print(("FAIL" if cut else "PASS") + f" {kind}: no frame cut ({len(cut)} cut)")
odd = [f for f in frames if "Infinity" in f or "NaN" in f or " 0.0 MB/s" in f]
print(("FAIL" if odd else "PASS") + f" {kind}: no rate of 0, no Infinity or NaN ({odd[:1]})")
if kind == "snapshot":
    beside = [f for f in frames if f.startswith("dumping") and f.endswith(f"; {big} checkpoint")]
    print(("PASS" if beside else "FAIL") + f" snapshot: {len(beside)} dump frames name {big}'s checkpoint under way")
    rated = [f for f in beside if "/s" in f]
    print(("FAIL" if rated else "PASS") + f" snapshot: no rate of criu's while that checkpoint holds a dump back ({rated[:1]})")
    print(f"   the dump's frames: {[f for f in frames if f.startswith('dumping')][::3]}")
EOF
  verdicts_of <"$bin/said-$kind"
}
shown snapshot snapshot --pid "$big,$small" --dir "$bin/snap"
wait_gone "$big" "$small"
shown restore restore-snapshot "$bin/snap"
hash_intact "the 8 GiB target answers its hash after the restore" "$big_dir" "$big_hash"
hash_intact "the 1 GiB target answers its hash after the restore" "$small_dir" "$small_hash"
verdict_summary "$bin/verdicts.txt" snapshot-line
