#!/usr/bin/env bash
# `recover` of a snapshot killed as it ended its trees, on the GPU machine, as root, from the repo
# root:
#
#   bash tests/gpu/exp/recover_stopped.sh
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. The state such
# a kill leaves, made by hand: a bash parent (a session of its own) with a 256 MiB target child is
# snapshotted with --leave-running, and its trace (in-progress.json, copied during the dump) put
# back beside the complete manifest; the target suspended (--toggle); parent and target SIGSTOPped,
# as the end's first round does before its SIGKILL. Expected: `recover` resumes the target and
# wakes both (before, the parent stayed stopped for good), the memory intact, the trace removed
# and the manifest kept. About 30 s.
. "$(dirname "$0")/session.sh" recover-stopped
trap 'end_started "target|recover-parent"' EXIT
stat_of() { ps -o stat= -p "$1" 2>/dev/null | tr -d ' '; }

start_parented recover-parent 256 || fail_setup "the target did not start"
d=$T_DIR parent=$T_ROOT p=$T_PID h=$T_HASH

snap=$bin/snap
timeout 120 "${CK[@]}" snapshot --pid "$parent" --dir "$snap" --leave-running --json --events \
  >"$bin/snap.json" 2>"$bin/snap.events" &
taking=$!
for ((i = 0; i < 6000; i++)); do
  [[ -f $snap/in-progress.json ]] && grep -q '"phase":"dump"' "$bin/snap.events" && break
  sleep 0.01
done
cp -p "$snap/in-progress.json" "$bin/trace.json" 2>/dev/null
wait "$taking"
src=$?
[[ $src == 0 && -s $bin/trace.json && -f $snap/manifest.json ]]
_rc=$?
check "snapshot --leave-running of the tree: exit $src, trace copied during the dump: $(tr -d '\n ' <"$bin/trace.json" | head -c 300)" $_rc

timeout 60 "${CK[@]}" --toggle --pid "$p"
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
cp -p "$bin/trace.json" "$snap/in-progress.json"
kill -STOP "$parent" "$p"
sleep 0.2
echo "as a kill at the end leaves it: target $s, stat parent $(stat_of "$parent"), target $(stat_of "$p")"
[[ $s == checkpointed && $(stat_of "$parent") == T* && $(stat_of "$p") == T* ]]
check "the state made: the target checkpointed, both stopped" $?

timeout 120 "${CK[@]}" recover --dir "$snap" --json >"$bin/recover.json" 2>"$bin/recover.err"
rc=$?
echo "recover: exit $rc; $(head -c 600 "$bin/recover.json"); $(head -3 "$bin/recover.err")"
[[ $rc == 0 ]]
check "recover: exit 0" $?
sleep 0.2
sp=$(stat_of "$parent") st=$(stat_of "$p")
[[ $sp != T* ]]
check "the parent runs again (stat $sp; before the mend it stayed T)" $?
[[ $st != T* ]]
check "the target runs again (stat $st)" $?
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
a=$(ask "$d" hash 60)
[[ $s == running && $a == "hash $h" ]]
check "the target: $s, memory intact: $a (ready $h)" $?
[[ -f $snap/manifest.json && ! -e $snap/in-progress.json ]]
check "the manifest kept, the trace removed" $?
verdict_summary "$bin/verdicts.txt" recover-stopped
