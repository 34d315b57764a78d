#!/usr/bin/env bash
# Ours side by side with another cuda-checkpoint on one PyTorch training process
# (tests/gpu/pytorch/train.py, MIB of weights, 1024 by default): --toggle to suspend, then to
# resume, each in turn, the order alternating by round. Carry .carry/cuda-checkpoint-ours.xz and
# the other as .carry/<name> (NVIDIA's: cuda-checkpoint) or .carry/<name>.xz (an older build of
# ours; two of ours do not fit one carry):
#   bash tests/gpu/exp/toggle_ab.sh <name> [rounds] [MIB]     (log: $OUT/toggle-ab.txt)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # unxz_to, describe_machine
. tests/gpu/targets.sh # ready_line
old=$1 rounds=${2:-4} mib=${3:-1024} out=${OUT:-tests/gpu/out} d=/tmp/toggle-ab
mkdir -p "$out" "$d"
exec > >(tee "$out/toggle-ab.txt") 2>&1
describe_machine
unxz_to .carry/cuda-checkpoint-ours.xz "$d/new" || exit 1
if [[ -f .carry/$old.xz ]]; then unxz_to ".carry/$old.xz" "$d/$old"; else cp ".carry/$old" "$d/$old"; fi || exit 1
rm -f "$d/cmd" && mkfifo "$d/cmd"
python3 tests/gpu/pytorch/train.py --mib "$mib" --fifo "$d/cmd" </dev/null >"$d/out" 2>"$d/err" &
P=$!
ready_line "$d/out" "$P" 180 >/dev/null || { echo "FAIL: the target did not start: $(tail -3 "$d/err")"; exit 1; }
ms() { local t0 t1; t0=$(date +%s%N); timeout 120 "$@" >/dev/null 2>&1 || echo "   FAIL: $*"; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
echo "round build suspend_ms resume_ms"
for ((r = 0; r < rounds; r++)); do
  order=("new" "$old"); ((r % 2)) && order=("$old" "new")
  for b in "${order[@]}"; do
    s=$(ms "$d/$b" --toggle --pid "$P"); u=$(ms "$d/$b" --toggle --pid "$P")
    echo "$r $b $s $u"
  done
done
kill -9 "$P" 2>/dev/null; wait "$P" 2>/dev/null
