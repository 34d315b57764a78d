#!/usr/bin/env bash
# Session 43: the simulator's snapshot and restore of eight processes of 2 GiB at once against the
# GPU's, on one machine: eight targets (tests/gpu/target.cu, a tree each) snapshotted together with
# ours (Deno, durable: every image fsynced) and restored together, twice, each hash checked; the
# disk's durable rate (dd conv=fdatasync, 4.5 GiB); then tests/gpu/exp/sim_eight.ts's virtual
# times of the same case. Carry .carry/deno.xz and .carry/criu-cuda.tgz:
#   OURS_XZ=.carry/deno.xz bash tests/gpu/exp/eight_durable.sh   (log: $OUT/eight-durable.txt)
# About 2 minutes.
. "$(dirname "$0")/session.sh" eight-durable
CK=("$bin/cuda-checkpoint" run -A --quiet cli/main.ts) # OURS_XZ's deno, this tree's command line
trap 'end_started "target"' EXIT
echo "   $(df -h "$bin" | tail -1)"
dd if=/dev/zero of="$bin/dd" bs=4M count=1152 conv=fdatasync 2>&1 | tail -1
rm -f "$bin/dd"
pids=() dirs=() hashes=()
for i in 1 2 3 4 5 6 7 8; do
  start_target "t$i" 2048 || fail_setup "target $i did not start"
  pids+=("$T_PID") dirs+=("$T_DIR") hashes+=("$T_HASH")
done
all=$(IFS=,; echo "${pids[*]}")
for round in 1 2; do
  sync
  t0=$(date +%s%N)
  timeout 300 "${CK[@]}" snapshot --pid "$all" --dir "$bin/snap-$round" --json >"$bin/s$round.json" 2>&1
  check "round $round: snapshot of 8 x 2 GiB in $(( ($(date +%s%N) - t0) / 1000000 )) ms" $? "$(tail -2 "$bin/s$round.json")"
  echo "   $(grep -o '"timings":{[^}]*}' "$bin/s$round.json"), $(du -sb "$bin/snap-$round" | cut -f1) bytes of images"
  wait_gone "${pids[@]}"
  t0=$(date +%s%N)
  timeout 300 "${CK[@]}" restore-snapshot --dir "$bin/snap-$round" --json >"$bin/r$round.json" 2>&1
  check "round $round: restore of 8 x 2 GiB in $(( ($(date +%s%N) - t0) / 1000000 )) ms" $? "$(tail -2 "$bin/r$round.json")"
  echo "   $(grep -o '"timings":{[^}]*}' "$bin/r$round.json")"
  for i in "${!pids[@]}"; do hash_intact "round $round: target ${pids[$i]}" "${dirs[$i]}" "${hashes[$i]}"; done
  rm -rf "$bin/snap-$round"
done
timeout 120 "$bin/cuda-checkpoint" run -A tests/gpu/exp/sim_eight.ts 8 2048
verdict_summary "$bin/verdicts.txt" eight-durable
