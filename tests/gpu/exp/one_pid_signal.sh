#!/usr/bin/env bash
# Our one-pid --toggle ended by a signal on a real terminal (util-linux's script), on a PyTorch
# process of 8 GiB of weights (tests/gpu/pytorch/train.py): its suspend and resume timed whole
# first, then SIGINT 0.6 of the way through the suspend and SIGTERM 0.6 of the way through the
# resume. Each time it ends by the signal (128 + its number), its live line erased, and leaves the
# process where the driver's step took it: checkpointed, then locked (the restore ends in the
# target; the unlock never begins). An unlock then (by NVIDIA's utility), and the process's whole
# state is as it was and it trains on. NVIDIA's utility does the same off a terminal
# (caller_killed.sh); its own toggle's wall time runs on well past its driver steps, so the same
# fractions do not land inside them. `--simulate` is held to the same outcome by
# tests/interrupt_test.ts. Carry .carry/cuda-checkpoint-ours.xz and .carry/cuda-checkpoint:
#   timeout 300 bash tests/gpu/exp/one_pid_signal.sh      (log: $OUT/log)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # exp_session: $out, $d (removed at exit) with ours in it, the log
. tests/gpu/targets.sh # ready_line, ask (the trainer answers through $d/cmd and $d/out)
exp_session
verdict() { echo "$1 $2"; }
nv=$PWD/.carry/cuda-checkpoint
[[ -x $nv ]] || { echo "FAIL: carry NVIDIA's utility as .carry/cuda-checkpoint"; exit 1; }
mkfifo "$d/cmd"
NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  python3 tests/gpu/pytorch/train.py --mib 8192 --fifo "$d/cmd" </dev/null >"$d/out" 2>"$d/err" &
pid=$!
trap 'kill -9 "$pid" 2>/dev/null; rm -rf "$d"' EXIT
ready_line "$d/out" "$pid" 120 >/dev/null || { echo "FAIL: no target: $(tail -3 "$d/err")"; exit 1; }
state() { timeout 60 "$nv" --get-state --pid "$pid" 2>&1; } # waits while the driver works
# ended WHO PROGRAM SIGNAL DELAY WANT: PROGRAM --toggle on a terminal, SIGNAL after DELAY seconds;
# it ends by the signal, its line (if drawn) erased, and the process is left WANT.
ended() {
  local who=$1 prog=$2 sig=$3 delay=$4 want=$5 rc code s t0 t1 last
  t0=$(date +%s%N)
  timeout 120 script -qfec "stty cols 100; timeout --preserve-status -s $sig $delay $prog --toggle --pid $pid" \
    /dev/null >"$d/raw"
  rc=$? t1=$(date +%s%N)
  s=$(state)
  code=$((128 + $(kill -l "$sig")))
  last=$(python3 -c 'import sys; print(repr(open(sys.argv[1], newline="").read().split("\r\x1b[2K")[-1]))' "$d/raw")
  echo "   $who: exit $rc after $(((t1 - t0) / 1000000)) ms; then $s; after its last erase: $last"
  [[ $rc == "$code" ]] && verdict PASS "$who: $sig ended it ($rc)" ||
    verdict FAIL "$who: $sig: exit $rc, not $code"
  [[ $s == "$want" ]] && verdict PASS "$who: $sig $delay s in: left $s, where the step took it" ||
    verdict FAIL "$who: $sig $delay s in: left $s, not $want"
  [[ $last != *GB* ]] && verdict PASS "$who: no live line left drawn" ||
    verdict FAIL "$who: a line left drawn: $last"
}
# back WHO: unlocked, running, its whole state as it was at the start, and it trains on.
back() {
  local s all
  timeout 60 "$nv" --action unlock --pid "$pid"
  s=$(state)
  all=$(ask "$d" digest | grep -o ' all=[0-9a-f]*')
  [[ $s == running && -n $all && $all == "$before" ]] &&
    verdict PASS "$1: unlocked, running, its state intact ($all)" ||
    verdict FAIL "$1: $s, digest$all against$before"
  [[ $(ask "$d" "train 3") == "trained loss="* ]] && verdict PASS "$1: it trains on" ||
    verdict FAIL "$1: no training: $(tail -1 "$d/out")"
}
# round WHO PROGRAM: its two toggles timed, then each ended 0.6 of the way through, then back.
round() {
  local t0 t1 t2 ok=1
  before=$(ask "$d" digest | grep -o ' all=[0-9a-f]*')
  t0=$(date +%s%N)
  timeout 120 "$2" --toggle --pid "$pid" || ok=0
  t1=$(date +%s%N)
  timeout 120 "$2" --toggle --pid "$pid" || ok=0
  t2=$(date +%s%N)
  echo "   $1 uninterrupted: suspend $(((t1 - t0) / 1000000)) ms, resume $(((t2 - t1) / 1000000)) ms"
  ((ok)) && [[ $(state) == running ]] || { verdict FAIL "$1: the timed toggles"; return; }
  ended "$1" "$2" INT "$(awk -v n=$((t1 - t0)) 'BEGIN { printf "%.2f", n * 0.6 / 1e9 }')" checkpointed
  ended "$1" "$2" TERM "$(awk -v n=$((t2 - t1)) 'BEGIN { printf "%.2f", n * 0.6 / 1e9 }')" locked
  back "$1"
}
round ours "$d/ours"
echo "== summary: $(grep -c '^PASS' "$out/log") PASS, $(grep -c '^FAIL' "$out/log") FAIL"
