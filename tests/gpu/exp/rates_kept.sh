#!/usr/bin/env bash
# The rates a run measured, kept for the next one's estimates: ours --toggle --events of one
# PyTorch process (tests/gpu/pytorch/train.py, $MIB MiB of weights, default 8192) four times, its records (and so
# rates.json) in a fresh directory. The first checkpoint and the first restore are estimated at the
# docs' rates (2 and 5 GB/s); each later one at the rate rates.json (0600) holds: the mean of what
# the run before measured and what it held before (that run's own where it held none); then the
# live line on a terminal (util-linux's script) shows that rate. Carry
# .carry/cuda-checkpoint-ours.xz:
#   MIB=16384 timeout 300 bash tests/gpu/exp/rates_kept.sh      (log: $OUT/log)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # exp_session: $out, $d (removed at exit) with ours in it, the log
. tests/gpu/targets.sh # ready_line
exp_session
export CKPT_RECORDS_DIR=$d/records
mkfifo "$d/cmd"
NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  python3 tests/gpu/pytorch/train.py --mib "${MIB:-8192}" --fifo "$d/cmd" </dev/null >"$d/out" 2>"$d/err" &
pid=$!
trap 'kill -9 $pid 2>/dev/null; rm -rf "$d"' EXIT
ready_line "$d/out" "$pid" 120 >/dev/null || { echo "FAIL: the target did not start: $(tail -3 "$d/err")"; exit 1; }
# toggle N: ours --toggle --events; prints "step bytes estimatedMs ms" of the step that moves memory.
toggle() {
  timeout 120 "$d/ours" --toggle --pid "$pid" --events 2>"$d/events$1" >/dev/null || echo "   exit $?"
  python3 - "$d/events$1" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
start = next(e for e in events if e["event"] == "step-start" and e.get("bytes"))
end = next(e for e in events if e["event"] == "step-end" and e["step"] == start["step"])
print(start["step"], start["bytes"], start["estimatedMs"], end["ms"])
EOF
}
rate_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))" "$CKPT_RECORDS_DIR/rates.json" "$1"; }
check() { # check NAME EXPECTED-MS ESTIMATED-MS
  if python3 -c "import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 1)" "$2" "$3"; then
    echo "PASS $1: estimated $3 ms (expected $2)"
  else echo "FAIL $1: estimated $3 ms, expected $2"; fi
}
declare -A ms
toggled=checkpoint # the step the next toggle makes
for n in 1 2 3 4; do
  before=$( [[ -f $CKPT_RECORDS_DIR/rates.json ]] && rate_of "$toggled" || echo 0)
  read -r step bytes est took < <(toggle $n)
  echo "== run $n: $step of $bytes bytes, estimated $est ms, took $took ms (off by $(python3 -c "import sys; t, e = map(float, sys.argv[1:]); print(f'{(e - t) / t * 100:+.0f}%')" "$took" "$est"))"
  case $n in
    1) check "first checkpoint at 2 GB/s" "$(python3 -c "print(round($bytes / 2e6))")" "$est" ;;
    2) check "first restore at 5 GB/s" "$(python3 -c "print(round($bytes / 5e6))")" "$est" ;;
    3) check "second checkpoint at the first's rate" "${ms[checkpoint]}" "$est" ;;
    4) check "second restore at the first's rate" "${ms[restore]}" "$est" ;;
  esac
  ms[$step]=$took
  kept=$(rate_of "$step")
  want=$(python3 -c "import sys; b, t, was = map(float, sys.argv[1:]); r = b / t; print((r + (was or r)) / 2)" "$bytes" "$took" "$before")
  python3 -c "import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 1e-6 * float(sys.argv[1]))" "$kept" "$want" &&
    echo "PASS run $n: rates.json keeps $step at $kept bytes/ms (this run's $bytes / $took, with $before kept before)" ||
    echo "FAIL run $n: rates.json keeps $step at $kept, not $want (this run's $bytes / $took, with $before kept before)"
  [[ $step == checkpoint ]] && toggled=restore || toggled=checkpoint
done
mode=$(stat -c %a "$CKPT_RECORDS_DIR/rates.json")
[[ $mode == 600 ]] && echo "PASS rates.json is 0600" || echo "FAIL rates.json is $mode"
echo "   rates.json: $(cat "$CKPT_RECORDS_DIR/rates.json")"
# On a terminal: the first frame's rate is the one kept (GB/s with one decimal).
want=$(python3 -c "print(f'{$(rate_of checkpoint) * 1000 / 1e9:.1f} GB/s')")
timeout 120 script -qfec "stty cols 120; $d/ours --toggle --pid $pid" /dev/null >"$d/raw"
first=$(python3 -c "import sys; print([p for p in open(sys.argv[1], newline='').read().split('\r\x1b[2K') if 'GB' in p][0])" "$d/raw")
echo "   the first frame: $first"
[[ $first == *"~$want,"* ]] && echo "PASS the live line's first frame at the kept ~$want" || echo "FAIL the first frame is not at ~$want"
timeout 120 "$d/ours" --toggle --pid "$pid" >/dev/null
s=$(timeout 30 "$d/ours" --get-state --pid "$pid")
[[ $s == running ]] && echo "PASS the target running at the end" || echo "FAIL the target: $s"
echo "== summary: $(grep -c '^PASS' "$out/log") PASS, $(grep -c '^FAIL' "$out/log") FAIL"
