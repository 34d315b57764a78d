#!/usr/bin/env bash
# What tells an NCCL rank apart (issue 30, part B): two ranks of tests/gpu/nccl/rank.py (one per GPU)
# with NCCL's defaults, with legacy IPC (NCCL_CUMEM_ENABLE=0), with P2P off, and with P2P and shared
# memory off; after one all_reduce, for each rank: its threads' names, what it maps and holds under
# /dev/shm, its deleted or memfd maps, its descriptors, the unix sockets it holds (by name, abstract
# ones with @), NCCL_* of its environment. First a one-rank job (NCCL loaded and a communicator, no
# peer: what must not be refused). On a machine with 2 GPUs:
#   bash tests/gpu/exp/nccl_signs.sh     (log: $OUT/nccl-signs.txt)
set -u
cd "$(dirname "$0")/../../.." || exit 1
out=${OUT:-tests/gpu/out}; mkdir -p "$out"
. tests/gpu/targets.sh # ready_line
exec > >(tee "$out/nccl-signs.txt") 2>&1
base=/tmp/nccl-signs port=29600 gpus=$(nvidia-smi -L | wc -l)
for set in "WORLD=1" "" "NCCL_CUMEM_ENABLE=0" "NCCL_P2P_DISABLE=1" "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"; do
  d=$base/$((port++)); rm -rf "$d"; mkdir -p "$d"
  echo "== ${set:-defaults}"
  world=2; [[ $set == WORLD=1 ]] && world=1 set=
  ((world > gpus)) && { echo "SKIP: $world ranks need $world GPUs, $gpus here"; continue; }
  env $set setsid bash tests/gpu/nccl/launch.sh "$d" $world "$port" --mib 64 ${NCCL_SIGNS_FAKE:+--fake} </dev/null >"$d/l.out" 2>&1 &
  L=$!
  for ((r = 0; r < world; r++)); do ready_line "$d/r$r.out" "$L" 90 >/dev/null; done
  # Waited for by pid: a bare wait would wait for the launcher and this script's tee too.
  w=(); for ((r = 0; r < world; r++)); do timeout 30 bash -c 'printf "allreduce\n" >"$1"' _ "$d/r$r.cmd" & w+=($!); done; wait "${w[@]}"
  sleep 3; tail -1 "$d/r0.out"
  for p in $(pgrep -P "$L"); do
    echo "-- pid $p"
    echo "threads: $(cat /proc/$p/task/*/comm | sort | uniq -c | tr -s ' \n' ' ')"
    echo "maps /dev/shm: $(grep -o '/dev/shm/[^ ]*' /proc/$p/maps | sort | uniq -c | tr -s ' \n' ' ')"
    echo "maps nccl: $(grep -io '[^ /]*nccl[^ ]*' /proc/$p/maps | sort -u | tr '\n' ' ')"
    echo "deleted/memfd maps: $(grep -o '[^ ]* (deleted)$\|memfd:.*' /proc/$p/maps | sort | uniq -c | tr -s ' \n' ' ')"
    socks=$(ls -l /proc/$p/fd 2>/dev/null | grep -o 'socket:\[[0-9]*' | grep -o '[0-9]*$' | tr '\n' ' ')
    echo "unix: $(awk -v s=" $socks " 'index(s, " " $7 " ") {print ($8 == "" ? "(unnamed)" : $8)}' /proc/net/unix | sed -E 's/[0-9a-f]{8,}/H/g; s/[0-9]+/N/g' | sort | uniq -c | tr -s ' \n' ' ')"
    echo "fds: $(ls -l /proc/$p/fd 2>/dev/null | awk '{print $NF}' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | tr -s ' \n' ' ')"
    echo "env: $(tr '\0' '\n' </proc/$p/environ | grep '^NCCL_' | tr '\n' ' ')"
  done
  w=(); for ((r = 0; r < world; r++)); do timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$d/r$r.cmd" & w+=($!); done; wait "${w[@]}"
  sleep 1; kill -9 -- -"$L" 2>/dev/null; kill -9 $(pgrep -P "$L") "$L" 2>/dev/null
done
