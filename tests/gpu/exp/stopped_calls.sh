#!/usr/bin/env bash
# Which driver calls wait while a CUDA process is held, in each state: SIGSTOPped (restore_stopped.sh
# found restore, unlock and --get-state waiting on a checkpointed one), or, with `freeze`, in a
# cgroup (v2) of its own frozen as `docker pause` and `podman pause` do (and what /proc tells of it:
# its threads' states, its cgroup, the cgroup's cgroup.events). NVIDIA's utility
# (.carry/cuda-checkpoint) on PyTorch processes of 256 MiB, one per case, each call cut off at 8 s;
# then each is let go (SIGCONT, or thawed), brought back to running where it can be, and its tensor
# checked. One GPU:  timeout 300 bash tests/gpu/exp/stopped_calls.sh [freeze]
set -u
N=$PWD/.carry/cuda-checkpoint
. tests/gpu/setup.sh # torch_target
d=$(mktemp -d) cg=/sys/fs/cgroup how=${1:-stop}
declare -A pid fdof
start() { torch_target "$d/$1"; pid[$1]=$tpid; fdof[$1]=$tfd; } # NAME: its fifo target
ms() { local t0=$(date +%s%N) out; out=$(timeout 8 "$N" "$@" 2>&1); local rc=$?
  echo "  $* -> rc $rc in $((($(date +%s%N) - t0) / 1000000)) ms${out:+: $out}"; }
state() { echo "  state: $(timeout 8 "$N" --get-state --pid "$1" 2>&1 || echo "(rc $?)")"; }
threads() { for t in /proc/$1/task/*; do awk '{print $3}' "$t/stat"; done | sort | uniq -c | tr '\n' ' '; }
if [[ $how == freeze ]]; then # PID CASE, each
  echo "cgroup: $(stat -fc %T $cg); controllers: $(cat $cg/cgroup.controllers 2>&1)"
  cases="getstate-running lock-running tid-running checkpoint-locked unlock-locked restore-checkpointed"
  place() { mkdir -p "$cg/ckpt-frozen-$2" && echo "$1" >"$cg/ckpt-frozen-$2/cgroup.procs" ||
    echo "  could not move it into $cg/ckpt-frozen-$2"; }
  hold() { echo 1 >"$cg/ckpt-frozen-$2/cgroup.freeze"; sleep 0.3
    echo "  frozen: $(grep frozen "$cg/ckpt-frozen-$2/cgroup.events"); threads: $(threads "$1"); /proc/$1/cgroup: $(cat "/proc/$1/cgroup")"; }
  held() { echo "  still frozen: $(grep frozen "$cg/ckpt-frozen-$2/cgroup.events")"; }
  letgo() { echo 0 >"$cg/ckpt-frozen-$2/cgroup.freeze"; }
  unplace() { sleep 0.2; echo "$1" >"$cg/cgroup.procs" 2>/dev/null; rmdir "$cg/ckpt-frozen-$2" 2>/dev/null; }
else
  cases="getstate-running lock-running tid-running checkpoint-locked unlock-locked getstate-locked unlock-checkpointed"
  place() { :; }
  hold() { kill -STOP "$1"; echo "  SIGSTOP: $(awk '{print $3}' "/proc/$1/stat")"; }
  held() { echo "  still stopped: $(awk '{print $3}' "/proc/$1/stat")"; }
  letgo() { kill -CONT "$1"; }
  unplace() { :; }
fi
for c in $cases; do start "$c"; done
for c in $cases; do torch_ready "$d/$c"; done
for c in $cases; do
  p=${pid[$c]}; echo "== $c: pid $p $(head -1 "$d/$c.out")"
  place "$p" "$c"
  case $c in *-locked) ms --action lock --pid "$p";; *-checkpointed) ms --action lock --pid "$p"; ms --action checkpoint --pid "$p";; esac
  state "$p"
  hold "$p" "$c"
  case $c in
    getstate-*) state "$p";;
    lock-running) ms --action lock --pid "$p" --timeout 3000;;
    tid-running) ms --get-restore-tid --pid "$p";;
    checkpoint-locked) ms --action checkpoint --pid "$p";;
    unlock-*) ms --action unlock --pid "$p";;
    restore-*) ms --action restore --pid "$p";;
  esac
  held "$p" "$c"; letgo "$p" "$c"; sleep 0.5
  state "$p"
  s=$(timeout 8 "$N" --get-state --pid "$p" 2>/dev/null)
  [[ $s == checkpointed* ]] && ms --action restore --pid "$p" && s=locked
  [[ $s == locked* ]] && ms --action unlock --pid "$p"
  state "$p"
  echo go >&"${fdof[$c]}"; sleep 1.5; echo "  after: $(tail -1 "$d/$c.out")"
  kill "$p" 2>/dev/null; unplace "$p" "$c"
done
for c in $cases; do kill "${pid[$c]}" 2>/dev/null; done
rm -rf "$d"
