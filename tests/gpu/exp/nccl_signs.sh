#!/usr/bin/env bash
# What tells an NCCL rank apart (issue 30, part B): two ranks of tests/gpu/nccl/rank.py (one per GPU)
# with NCCL's defaults, with legacy IPC (NCCL_CUMEM_ENABLE=0), with P2P off, and with P2P and shared
# memory off; after one all_reduce, for each rank: its threads' names, what it maps and holds under
# /dev/shm, its sockets' count, NCCL_* of its environment. On a machine with 2 GPUs:
#   bash tests/gpu/exp/nccl_signs.sh     (log: $OUT/nccl-signs.txt)
set -u
cd "$(dirname "$0")/../../.." || exit 1
out=${OUT:-tests/gpu/out}; mkdir -p "$out"
exec > >(tee "$out/nccl-signs.txt") 2>&1
base=/tmp/nccl-signs port=29600
for set in "" "NCCL_CUMEM_ENABLE=0" "NCCL_P2P_DISABLE=1" "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"; do
  d=$base/$((port++)); rm -rf "$d"; mkdir -p "$d"
  echo "== ${set:-defaults}"
  env $set setsid bash tests/gpu/nccl/launch.sh "$d" 2 "$port" --mib 64 </dev/null >"$d/l.out" 2>&1 &
  L=$!
  for i in $(seq 90); do grep -q ready "$d/r0.out" "$d/r1.out" 2>/dev/null && [[ $(grep -l ready "$d"/r*.out | wc -l) == 2 ]] && break; sleep 1; done
  for r in 0 1; do timeout 30 bash -c 'printf "allreduce\n" >"$1"' _ "$d/r$r.cmd" & done; wait
  sleep 3; tail -1 "$d/r0.out"
  for p in $(pgrep -P "$L"); do
    echo "-- pid $p"
    echo "threads: $(cat /proc/$p/task/*/comm | sort | uniq -c | tr -s ' \n' ' ')"
    echo "maps /dev/shm: $(grep -o '/dev/shm/[^ ]*' /proc/$p/maps | sort | uniq -c | tr -s ' \n' ' ')"
    echo "maps nccl: $(grep -io '[^ /]*nccl[^ ]*' /proc/$p/maps | sort -u | tr '\n' ' ')"
    echo "fds: $(ls -l /proc/$p/fd 2>/dev/null | awk '{print $NF}' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | tr -s ' \n' ' ')"
    echo "env: $(tr '\0' '\n' </proc/$p/environ | grep '^NCCL_' | tr '\n' ' ')"
  done
  for r in 0 1; do timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$d/r$r.cmd" & done; wait
  sleep 1; kill -9 -- -"$L" 2>/dev/null; kill -9 $(pgrep -P "$L") "$L" 2>/dev/null
done
