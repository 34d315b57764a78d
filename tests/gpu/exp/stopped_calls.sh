#!/usr/bin/env bash
# Which driver calls wait while a CUDA process is SIGSTOPped, in each state (restore_stopped.sh
# found restore, unlock and --get-state waiting on a checkpointed one): NVIDIA's utility
# (.carry/cuda-checkpoint) on PyTorch processes of 256 MiB, one per case, each call cut off at 8 s;
# then each is let go (SIGCONT), brought back to running where it can be, and its tensor checked.
# One GPU:  timeout 300 bash tests/gpu/exp/stopped_calls.sh
set -u
N=$PWD/.carry/cuda-checkpoint
. tests/gpu/setup.sh # torch_target
d=$(mktemp -d)
declare -A pid fdof
start() { torch_target "$d/$1"; pid[$1]=$tpid; fdof[$1]=$tfd; } # NAME: its fifo target
ms() { local t0=$(date +%s%N) out; out=$(timeout 8 "$N" "$@" 2>&1); local rc=$?
  echo "  $* -> rc $rc in $((($(date +%s%N) - t0) / 1000000)) ms${out:+: $out}"; }
state() { echo "  state: $(timeout 8 "$N" --get-state --pid "$1" 2>&1 || echo "(rc $?)")"; }
cases="getstate-running lock-running tid-running checkpoint-locked unlock-locked getstate-locked unlock-checkpointed"
for c in $cases; do start "$c"; done
for c in $cases; do torch_ready "$d/$c"; done
for c in $cases; do
  p=${pid[$c]}; echo "== $c: pid $p $(head -1 "$d/$c.out")"
  case $c in *-locked) ms --action lock --pid "$p";; *-checkpointed) ms --action lock --pid "$p"; ms --action checkpoint --pid "$p";; esac
  state "$p"
  kill -STOP "$p"; echo "  SIGSTOP: $(awk '{print $3}' /proc/$p/stat)"
  case $c in
    getstate-*) state "$p";;
    lock-running) ms --action lock --pid "$p" --timeout 3000;;
    tid-running) ms --get-restore-tid --pid "$p";;
    checkpoint-locked) ms --action checkpoint --pid "$p";;
    unlock-*) ms --action unlock --pid "$p";;
  esac
  echo "  still stopped: $(awk '{print $3}' /proc/$p/stat)"; kill -CONT "$p"; sleep 0.5
  state "$p"
  s=$(timeout 8 "$N" --get-state --pid "$p" 2>/dev/null)
  [[ $s == checkpointed* ]] && ms --action restore --pid "$p" && s=locked
  [[ $s == locked* ]] && ms --action unlock --pid "$p"
  state "$p"
  echo go >&"${fdof[$c]}"; sleep 1.5; echo "  after: $(tail -1 "$d/$c.out")"
  kill "$p" 2>/dev/null
done
wait; rm -rf "$d"
