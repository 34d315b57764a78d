#!/usr/bin/env bash
# Which driver calls wait while a CUDA process's cgroup is frozen (cgroup v2 cgroup.freeze, as
# `podman pause` and `docker pause` do), in each state, as stopped_calls.sh asked of SIGSTOP: NVIDIA's
# utility (.carry/cuda-checkpoint) on PyTorch processes of 256 MiB, one per case, each in a cgroup of
# its own, each call cut off at 8 s; what /proc tells of a frozen process (its threads' states,
# its cgroup and the cgroup's cgroup.events); then each is thawed, brought back to running where
# it can be, and its tensor checked. One GPU:  timeout 300 bash tests/gpu/exp/frozen_calls.sh
set -u
N=$PWD/.carry/cuda-checkpoint
. tests/gpu/setup.sh # torch_target
d=$(mktemp -d)
cg=/sys/fs/cgroup
echo "cgroup: $(stat -fc %T $cg); controllers: $(cat $cg/cgroup.controllers 2>&1)"
declare -A pid fdof
start() { torch_target "$d/$1"; pid[$1]=$tpid; fdof[$1]=$tfd; } # NAME: its fifo target
ms() { local t0=$(date +%s%N) out; out=$(timeout 8 "$N" "$@" 2>&1); local rc=$?
  echo "  $* -> rc $rc in $((($(date +%s%N) - t0) / 1000000)) ms${out:+: $out}"; }
state() { echo "  state: $(timeout 8 "$N" --get-state --pid "$1" 2>&1 || echo "(rc $?)")"; }
threads() { for t in /proc/$1/task/*; do awk '{print $3}' "$t/stat"; done | sort | uniq -c | tr '\n' ' '; }
cases="getstate-running lock-running tid-running checkpoint-locked unlock-locked restore-checkpointed"
for c in $cases; do start "$c"; done
for c in $cases; do torch_ready "$d/$c"; done
for c in $cases; do
  p=${pid[$c]}; g=$cg/ckpt-frozen-$c; echo "== $c: pid $p $(head -1 "$d/$c.out")"
  mkdir -p "$g" && echo "$p" >"$g/cgroup.procs" || echo "  could not move it into $g"
  case $c in *-locked) ms --action lock --pid "$p";; *-checkpointed) ms --action lock --pid "$p"; ms --action checkpoint --pid "$p";; esac
  state "$p"
  echo 1 >"$g/cgroup.freeze"; sleep 0.3
  echo "  frozen: $(grep frozen "$g/cgroup.events"); threads: $(threads "$p"); /proc/$p/cgroup: $(cat /proc/$p/cgroup)"
  case $c in
    getstate-*) state "$p";;
    lock-running) ms --action lock --pid "$p" --timeout 3000;;
    tid-running) ms --get-restore-tid --pid "$p";;
    checkpoint-locked) ms --action checkpoint --pid "$p";;
    unlock-*) ms --action unlock --pid "$p";;
    restore-*) ms --action restore --pid "$p";;
  esac
  echo "  still frozen: $(grep frozen "$g/cgroup.events")"; echo 0 >"$g/cgroup.freeze"; sleep 0.5
  state "$p"
  s=$(timeout 8 "$N" --get-state --pid "$p" 2>/dev/null)
  [[ $s == checkpointed* ]] && ms --action restore --pid "$p" && s=locked
  [[ $s == locked* ]] && ms --action unlock --pid "$p"
  state "$p"
  echo go >&"${fdof[$c]}"; sleep 1.5; echo "  after: $(tail -1 "$d/$c.out")"
  kill "$p" 2>/dev/null; sleep 0.2; echo "$p" >"$cg/cgroup.procs" 2>/dev/null; rmdir "$g" 2>/dev/null
done
for c in $cases; do kill "${pid[$c]}" 2>/dev/null; done
rm -rf "$d"
