#!/usr/bin/env bash
# A tree's root ended while the snapshot suspends, its pid then taken by another user's process, on
# the GPU machine, as root, from the repo root:
#
#   bash tests/gpu/exp/root_taken.sh
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. A bash root
# (not a session or group leader: Linux gives no new process a pid that is a living group's or
# session's id) with a target child of 8 GiB, whose checkpoint takes seconds; once the
# snapshot is suspending, the root is killed and a `sleep` run as nobody (a session of its own, as
# criu can dump it) takes its pid (through /proc/sys/kernel/ns_last_pid). Expected: the snapshot fails (DUMP_FAILED, "the root of a tree,
# ended before its dump"), the sleep runs on (before, criu dumped the sleep's tree and the end
# killed it, as root), and the target runs again, its memory intact. Where the sleep could not take
# the pid in time, the run says so (SKIP). About 1 minute. OURS_XZ: another build of ours.
. "$(dirname "$0")/session.sh" root-taken
taker=''
cleanup() {
  end_started "target|root-taken-parent"
  [[ -n $taker ]] && kill -9 "$taker" 2>/dev/null
}
trap cleanup EXIT
command -v setpriv >/dev/null || fail_setup "no setpriv (util-linux) to run the sleep as nobody"

T_SETSID=0 start_parented root-taken-parent 8192 || fail_setup "the target did not start"
d=$T_DIR root=$T_ROOT p=$T_PID h=$T_HASH

timeout 120 "${CK[@]}" snapshot --pid "$root" --dir "$bin/snap" --json --events \
  >"$bin/snap.json" 2>"$bin/events" &
taking=$!
for ((i = 0; i < 3000; i++)); do
  grep -q '"phase":"suspend"' "$bin/events" 2>/dev/null && break
  sleep 0.01
done
kill -9 "$root"
wait_gone "$root"
for ((i = 0; i < 200; i++)); do
  echo $((root - 1)) >/proc/sys/kernel/ns_last_pid
  setpriv --reuid=65534 --regid=65534 --clear-groups setsid sleep 600 </dev/null >/dev/null 2>&1 &
  q=$!
  if [[ $q == "$root" ]]; then taker=$q; break; fi
  kill -9 "$q" 2>/dev/null
done
grep -q '"phase":"dump"' "$bin/events" && taker_late=1 || taker_late=0
wait "$taking"
rc=$?
echo "snapshot: exit $rc; $(head -c 1200 "$bin/snap.json")"
echo "phases: $(grep -o '"phase":"[a-z]*"' "$bin/events" | tr '\n' ' ')"
if [[ -z $taker || $taker_late == 1 ]]; then
  verdict SKIP "the sleep could not take pid $root before the dump began (nothing shown)"
else
  echo "sleep $taker (uid $(ps -o uid= -p "$taker" | tr -d ' ')) took pid $root while the snapshot suspended"
  [[ $rc == 1 && $(grep -c DUMP_FAILED "$bin/snap.json") == 1 ]]
  check "the snapshot failed, DUMP_FAILED" $?
  grep -q "process $root, the root of a tree, ended before its dump" "$bin/snap.json"
  check "it says why: the root ended before its dump" $?
  alive "$taker" && [[ $(ps -o comm= -p "$taker") == sleep ]]
  check "the sleep that took pid $root runs on (neither dumped nor ended)" $?
  s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
  a=$(ask "$d" hash 60)
  [[ $s == running && $a == "hash $h" ]]
  check "the target: $s, memory intact: $a (ready $h)" $?
  [[ ! -e $bin/snap/manifest.json ]]
  check "no manifest written" $?
fi
verdict_summary "$bin/verdicts.txt" root-taken
