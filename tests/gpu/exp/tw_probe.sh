#!/usr/bin/env bash
# Where the NCCL job's TIME_WAIT comes from (issue 32): a job of two ranks (sockets only) started,
# and the host's TCP sockets listed once every rank is ready, before any snapshot: a TIME_WAIT on
# a rank's listening port then is NCCL's own, not the kill's. Then whether this kernel lets a
# TIME_WAIT be ended by SOCK_DESTROY (netlink sock_diag), as ss -K does (tw_probe.py). Root, 2 GPUs:
# `timeout 200 bash tests/gpu/exp/tw_probe.sh`; on two H200s: tests/gpu/reports/nccl-job-h200x2-session9.txt.
set -u
. tests/gpu/targets.sh
d=$(mktemp -d /tmp/twprobe.XXXX)
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
setsid bash tests/gpu/nccl/launch.sh "$d" 2 29610 --mib 64 </dev/null >"$d/launcher.out" 2>&1 &
parent=$!
for r in 0 1; do ready_line "$d/r$r.out" "$parent" >/dev/null || { echo "rank $r not ready"; tail "$d/r$r.err"; }; done
echo "== ready at $(date +%T.%N); ranks: $(pgrep -P $parent | tr '\n' ' ')"
echo "== TCP right after ready"; python3 tests/gpu/exp/tw_probe.py list
sleep 5; echo "== TCP 5 s later"; python3 tests/gpu/exp/tw_probe.py list
python3 tests/gpu/exp/tw_probe.py destroy
echo "== TCP after SOCK_DESTROY"; python3 tests/gpu/exp/tw_probe.py list
kill -9 -- -$parent 2>/dev/null; kill -9 $parent $(pgrep -P $parent) 2>/dev/null; rm -rf "$d"
