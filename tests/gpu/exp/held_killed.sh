#!/usr/bin/env bash
# A process of a restored tree killed while the restore holds it stopped (its images not yet
# verified), on the GPU machine, as root, from the repo root:
#
#   bash tests/gpu/exp/held_killed.sh [MIB]
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. A bash root
# (a session of its own) with a CUDA target child of MIB (8192), snapshotted once. Then three
# restores of that snapshot, the first two on two cores (so that the digests outlast criu and the
# tree is held for seconds): in the first the target is SIGKILLed once criu made it and it is held
# (state T), a zombie under its stopped parent; in the second the root is, which nothing reaps.
# Expected of each: restore-snapshot fails (RESTORE_FAILED, "process P ended while it
# was held"), no process of the tree is left and the snapshot is unchanged: the third restore
# brings both back, the target's memory intact. Where the kill came too late (the tree let go
# first), the run says so (SKIP). About 1 minute. OURS_XZ: another build of ours; the one before
# (edd3bbb, one H200, reports/held-killed-h200-session28-before-edd3bbb.txt) said the zombie "ran
# while it was held (something sent it SIGCONT)", its exit having grown its CPU time, and missed
# the root gone: that restore succeeded, listing the dead root, its CUDA child left running.
mib=${1:-8192}
. "$(dirname "$0")/session.sh" held-killed
cleanup() { end_started "target|held-killed-parent"; }
trap cleanup EXIT
command -v taskset >/dev/null || fail_setup "no taskset (util-linux) to hold the tree for long"

start_parented held-killed-parent "$mib" || fail_setup "the target did not start"
d=$T_DIR root=$T_ROOT p=$T_PID h=$T_HASH
timeout 180 "${CK[@]}" snapshot --pid "$root" --dir "$bin/snap" --json >"$bin/snap.json"
check "snapshot of the tree $root (target $p, $mib MiB): $(head -c 300 "$bin/snap.json")" $?
wait_gone "$root" "$p" || fail_setup "the tree's pids still taken after the snapshot ended it"

# kill_held NAME VICTIM: a restore during which VICTIM is SIGKILLed once held stopped.
kill_held() {
  local i s seen=''
  # On two cores, where the digests outlast criu's restore by seconds (on all 16, by a moment).
  taskset -c 0,1 timeout 180 "${CK[@]}" restore-snapshot "$bin/snap" --json --events \
    >"$bin/$1.json" 2>"$bin/$1.events" &
  local restoring=$!
  # Once criu is done with the tree (its tree-end event) and the victim is in its stop.
  for ((i = 0; i < 6000; i++)); do
    kill -0 "$restoring" 2>/dev/null || break
    if grep -q '"event":"tree-end"' "$bin/$1.events" 2>/dev/null; then
      s=$(ps -o stat= -p "$2" 2>/dev/null)
      if [[ $s == T* ]]; then
        kill -9 "$2" && seen=$s
        break
      fi
    fi
    sleep 0.01
  done
  wait "$restoring"
  local rc=$?
  echo "$1: restore-snapshot exit $rc; $(head -c 1500 "$bin/$1.json")"
  if [[ -z $seen ]]; then
    verdict SKIP "$1: $2 was not seen held before the tree was let go (nothing shown)"
    end_started "target|held-killed-parent"
    wait_gone "$root" "$p"
    return
  fi
  echo "$1: $2 killed while held ($seen)"
  [[ $rc == 1 && $(grep -c RESTORE_FAILED "$bin/$1.json") == 1 ]]
  check "$1: the restore failed, RESTORE_FAILED" $?
  grep -qi "process $2 ended while it was held" "$bin/$1.json" && ! grep -q SIGCONT "$bin/$1.json"
  check "$1: it says process $2 ended while it was held (not that it ran)" $?
  wait_gone "$root" "$p"
  check "$1: no process of the tree is left (pids $root and $p free)" $?
}

kill_held target "$p"
kill_held root "$root"

timeout 180 "${CK[@]}" restore-snapshot "$bin/snap" --json >"$bin/again.json"
rc=$?
echo "again: restore-snapshot exit $rc; $(head -c 600 "$bin/again.json")"
[[ $rc == 0 ]] && alive "$root" && alive "$p"
check "the snapshot, unchanged, restores: root $root and target $p run" $?
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
a=$(ask "$d" hash 60)
[[ $s == running && $a == "hash $h" ]]
check "the target: $s, memory intact: $a (ready $h)" $?
verdict_summary "$bin/verdicts.txt" held-killed
