#!/usr/bin/env bash
# Ours against a process whose cgroup is frozen (`stopped_calls.sh freeze` found the driver answers
# it in nothing): --toggle and --action lock are refused at once (exit 1, saying it is frozen and to
# thaw it), `list` names it among the uninspectable, and once thawed the toggle runs both ways and the
# tensor is intact. PyTorch target of 256 MiB. One GPU, .carry/cuda-checkpoint-ours.xz (its Bun
# runs this tree's TypeScript):   timeout 200 bash tests/gpu/exp/frozen_refusal.sh   (log: $OUT/log)
set -u
. tests/gpu/setup.sh # exp_session: $out, $d, our binary's Bun on PATH, the log
exp_session
ours() { local t0=$(date +%s%N) o; o=$(timeout 20 bun cli/main.ts "$@" 2>&1); local rc=$?
  echo "  ours $* -> rc $rc in $((($(date +%s%N) - t0) / 1000000)) ms: $o"; }
torch_target "$d/t" && torch_ready "$d/t"; p=$tpid f=$tfd
g=/sys/fs/cgroup/ckpt-frozen-ours; mkdir -p "$g"; echo "$p" >"$g/cgroup.procs"
echo "== pid $p in $g: $(head -1 "$d/t.out")"
echo 1 >"$g/cgroup.freeze"; sleep 0.3; echo "  $(grep frozen "$g/cgroup.events")"
ours --toggle --pid "$p"
ours --action lock --pid "$p" --timeout 3000
ours list
echo 0 >"$g/cgroup.freeze"; sleep 0.3; echo "  thawed: $(grep frozen "$g/cgroup.events")"
ours --toggle --pid "$p"
ours --get-state --pid "$p"
ours --toggle --pid "$p"
ours --get-state --pid "$p"
echo go >&"$f"; sleep 1.5; echo "  after: $(tail -1 "$d/t.out")"
kill "$p"; sleep 0.3; rmdir "$g"
