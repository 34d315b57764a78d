#!/usr/bin/env bash
# A caller killed in the middle of a driver call, on the GPU machine, as root, from the repo root:
#
#   bash tests/gpu/exp/caller_killed.sh [MIB] [int]
#
# Carry .carry/cuda-checkpoint (NVIDIA's utility), .carry/cuda-checkpoint-ours.xz and
# .carry/criu-cuda.tgz (the session's setup wants it). What is the target left in when the program
# that asked the driver to checkpoint or restore it dies before the call returns: a Ctrl-C on one
# pid ends NVIDIA's utility and ours by the signal, and a SIGKILL (the OOM killer, a runner's
# timeout) any program. For each caller (NVIDIA's utility, ours), each step (checkpoint of a locked
# target, restore of a checkpointed one) and each moment (early, late in the call): the caller is
# started, killed (SIGKILL; ours with SIGINT too, `int`: those alone), then the target's state is
# read every 0.2 s for 5 s (the states seen, with their times; a get-state waits while the driver
# works), then the target is brought back from wherever it is and its memory checked. A target of
# MIB (default 4096) MiB. About 3 minutes; `int` 1.
. "$(dirname "$0")/session.sh" caller-killed
trap 'end_started "target"' EXIT
mib=${1:-4096}
nv=$PWD/.carry/cuda-checkpoint
[[ -x $nv ]] || fail_setup "carry NVIDIA's utility as .carry/cuda-checkpoint"
state() { timeout 30 "$nv" --get-state --pid "$1" 2>&1 | head -1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The call's own time, uninterrupted: where in it the kills below land.
start_target timing "$mib" || fail_setup "the target did not start"
p=$T_PID
timeout 60 "$nv" --action lock --pid "$p"
t=$(now_ms); timeout 120 "$nv" --action checkpoint --pid "$p"; c=$(($(now_ms) - t))
t=$(now_ms); timeout 120 "$nv" --action restore --pid "$p"; r=$(($(now_ms) - t))
timeout 60 "$nv" --action unlock --pid "$p"
echo "uninterrupted, NVIDIA's utility: checkpoint $c ms, restore $r ms ($mib MiB)"
stop_target "$T_DIR" "$p"

# case CALLER SIGNAL STEP DELAY
case_of() {
  local who=$1 sig=$2 step=$3 delay=$4 caller seen='' last='' s i t0 rc a
  [[ $who == nvidia ]] && caller=("$nv") || caller=("${CK[@]}")
  start_target "$who-$sig-$step-$delay" "$mib" || { verdict FAIL "$who $step: no target"; return; }
  p=$T_PID
  timeout 60 "$nv" --action lock --pid "$p"
  [[ $step == restore ]] && timeout 120 "$nv" --action checkpoint --pid "$p"
  s=$(state "$p")
  t0=$(now_ms)
  # A job of a script starts with SIGINT ignored, which ours then leaves so: give it back.
  env --default-signal=INT "${caller[@]}" --action "$step" --pid "$p" >"$bin/$who-$step.out" 2>&1 &
  local c=$!
  sleep "$delay"
  kill -s "$sig" "$c" 2>/dev/null
  wait "$c"
  rc=$?
  echo "$who $step from $s, $sig after ${delay}s: the caller ended $(($(now_ms) - t0)) ms in, exit $rc: $(head -c 200 "$bin/$who-$step.out" | tr '\n' ' ')"
  for ((i = 0; i < 25; i++)); do
    s=$(state "$p")
    [[ $s != "$last" ]] && seen+="${seen:+, }$s at $(($(now_ms) - t0)) ms" && last=$s
    sleep 0.2
  done
  echo "  states seen: $seen"
  # Back from wherever it is: restore where checkpointed, unlock where locked.
  [[ $last == checkpointed ]] && timeout 120 "$nv" --action restore --pid "$p"
  [[ $(state "$p") == locked ]] && timeout 60 "$nv" --action unlock --pid "$p"
  s=$(state "$p")
  a=$(ask "$T_DIR" hash 60)
  [[ $s == running && $a == "hash $T_HASH" ]]
  check "$who $step killed by $sig after ${delay}s: left $last (seen: $seen); brought back: $s, memory $a (ready $T_HASH)" $?
  stop_target "$T_DIR" "$p"
}

if [[ ${2:-} != int ]]; then
  early=0.3 late=$(awk -v c="$c" 'BEGIN { printf "%.2f", c * 0.7 / 1000 }')
  for who in nvidia ours; do
    for delay in "$early" "$late"; do case_of "$who" KILL checkpoint "$delay"; done
  done
  early=0.15 late=$(awk -v r="$r" 'BEGIN { printf "%.2f", r * 0.7 / 1000 }')
  for who in nvidia ours; do
    for delay in "$early" "$late"; do case_of "$who" KILL restore "$delay"; done
  done
fi
case_of ours INT checkpoint 0.3
case_of ours INT restore 0.15
verdict_summary "$bin/verdicts.txt" caller-killed
