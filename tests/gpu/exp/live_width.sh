#!/usr/bin/env bash
# The live line on a real terminal of a given width (util-linux's script, `stty cols N`): ours
# --toggle of one and of two PyTorch processes (tests/gpu/pytorch/train.py, 8 GiB of weights, so
# that a suspend takes seconds). Every line drawn fits N - 1 columns and the terminal is left
# erased; at 200 columns none is cut; an interrupted toggle's rollback counts its bytes. Carry
# .carry/cuda-checkpoint-ours.xz:
#   timeout 300 bash tests/gpu/exp/live_width.sh      (log: $OUT/log)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # exp_session: $out, $d (removed at exit) with ours in it, the log
. tests/gpu/targets.sh # ready_line
exp_session
verdict() { echo "$1 $2"; }
pids=()
for i in 1 2; do
  mkfifo "$d/cmd$i"
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    python3 tests/gpu/pytorch/train.py --mib 8192 --fifo "$d/cmd$i" </dev/null >"$d/out$i" 2>"$d/err$i" &
  pids+=($!)
done
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$d"' EXIT
for i in 0 1; do
  ready_line "$d/out$((i + 1))" "${pids[i]}" 120 >/dev/null ||
    { echo "FAIL: target $i did not start: $(tail -3 "$d/err$((i + 1))")"; exit 1; }
done
# shown COLS NAME ARGS...: ours under a terminal of COLS columns; every line drawn (each after an
# erase, \r ESC[2K) fits COLS - 1 characters, and the last erase leaves no line drawn after it.
shown() {
  local cols=$1 name=$2
  shift 2
  timeout 120 script -qfec "stty cols $cols; $d/ours $*" /dev/null >"$d/raw"
  echo "   exit $? in $cols columns: $*"
  python3 - "$d/raw" "$cols" "$name" <<'EOF'
import sys
raw = open(sys.argv[1], encoding="utf-8", newline="").read()
cols, name = int(sys.argv[2]), sys.argv[3]
parts = raw.split("\r\x1b[2K")
drawn = [p for p in parts[1:-1] if "GB" in p]
widest = max((len(p) for p in drawn), default=0)
print(f"   {len(drawn)} lines drawn, the widest {widest}; the last: {drawn[-1] if drawn else ''!r}")
print(f"   after the last erase: {parts[-1]!r}")
ok = len(drawn) >= 3 and widest <= cols - 1
print(("PASS" if ok else "FAIL") + f" {name}: {len(drawn)} lines drawn, each within {cols - 1} columns")
cut = [p for p in drawn if "\u2026" in p]
if cols >= 200:
    print(("FAIL" if cut else "PASS") + f" {name}: no line cut ({len(cut)} cut)")
ok = len(parts) > 1 and "GB" not in parts[-1]
print(("PASS" if ok else "FAIL") + f" {name}: the line erased at the end")
EOF
}
shown 50 "one pid, 50 columns" --toggle --pid "${pids[0]}"
shown 200 "one pid back, 200 columns" --toggle --pid "${pids[0]}"
shown 60 "two pids, 60 columns" --toggle --pid "${pids[0]},${pids[1]}"
shown 60 "two pids back, 60 columns" --toggle --pid "${pids[0]},${pids[1]}"
# An interrupt (SIGTERM 1.5 s in) during two checkpoints: the group puts both back, and the line
# says so with the bytes it puts back, the rate and the time left.
timeout 120 script -qfec "stty cols 120; timeout -s TERM 1.5 $d/ours --toggle --pid ${pids[0]},${pids[1]}" /dev/null >"$d/raw"
python3 - "$d/raw" <<'EOF'
import re, sys
parts = open(sys.argv[1], encoding="utf-8", newline="").read().split("\r\x1b[2K")
back = [p for p in parts if p.startswith("putting things back")]
print(f"   {len(back)} lines putting things back, the first and last: {back[:1]} {back[-1:]}")
ok = len(back) >= 3 and all(re.search(r"^putting things back [0-9.]+ s: ~?[0-9.]+ of [0-9.]+ GB", p) for p in back)
print(("PASS" if ok else "FAIL") + " interrupted: the rollback's line counts the bytes it puts back")
totals = {m.group(1) for m in (re.search(r" of ([0-9.]+ GB)", p) for p in back) if m}
ok = len(totals) == 1
print(("PASS" if ok else "FAIL") + f" interrupted: one total all along, of both ({sorted(totals)})")
EOF
for i in 0 1; do
  s=$(timeout 30 "$d/ours" --get-state --pid "${pids[i]}")
  [[ $s == running ]] && verdict PASS "target $i running at the end" || verdict FAIL "target $i: $s"
done
echo "== summary: $(grep -c '^PASS' "$out/log") PASS, $(grep -c '^FAIL' "$out/log") FAIL"
