#!/usr/bin/env bash
# criu killed in the middle of a restore (a crash, the OOM killer), on the GPU machine, as root,
# from the repo root:
#
#   bash tests/gpu/exp/criu_crash.sh [DELAY_S ...]
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. A bash parent
# (a session of its own) with a 256 MiB target child; criu runs through a wrapper (installed as
# /usr/local/sbin/ckpt-criu-crash, removed at the end) that SIGKILLs criu itself, not its tasks,
# some time into a dump or a restore, and records what holds the tree's pids at that moment.
# Nothing of ours ends criu's tasks for it (the run ended by itself, not by our bound). First a
# snapshot whose dump criu dies in (0.2 s): it fails, and the tree keeps running, the target's
# memory intact. Then the snapshot, and restores criu dies in, DELAY_S into each (default 0.1 and
# 0.5 s): each fails, and once it has returned no pid of the tree is held (the rollback ended what
# criu had made, or waited for its zombies); last, a restore without the crash brings the tree
# back, the target running, its memory intact. About 30 s.
. "$(dirname "$0")/session.sh" criu-crash
wrapper=/usr/local/sbin/ckpt-criu-crash
cleanup() {
  end_started "target|crash-parent"
  rm -f "$wrapper" /run/ckpt-crash-delay /run/ckpt-crash-pids /run/ckpt-crash-ps
}
trap cleanup EXIT
delays=("$@")
((${#delays[@]} > 0)) || delays=(0.1 0.5)

start_parented crash-parent 256 || fail_setup "the target did not start"
d=$T_DIR parent=$T_ROOT p=$T_PID h=$T_HASH
snap=$bin/snap
echo "$parent,$p" >/run/ckpt-crash-pids

cat >"$wrapper" <<WRAP
#!/bin/bash
# criu, SIGKILLed (it alone) the delay in /run/ckpt-crash-delay into a dump or a restore
if [[ (\$1 == dump || \$1 == restore) && -s /run/ckpt-crash-delay ]]; then
  $(printf '%q' "$criu") "\$@" &
  c=\$!
  sleep "\$(cat /run/ckpt-crash-delay)"
  kill -9 "\$c"
  wait "\$c"
  ps -o pid=,stat=,ppid=,args= -p "\$(cat /run/ckpt-crash-pids)" | cut -c1-200 >/run/ckpt-crash-ps
  exit 137
fi
$(printf 'exec %q "$@"' "$criu")
WRAP
chmod 0755 "$wrapper"

echo 0.2 >/run/ckpt-crash-delay
CKPT_CRIU_PATH=$wrapper timeout 120 "${CK[@]}" snapshot --pid "$parent" --dir "$bin/snap0" --json >"$bin/snap0.json"
rc=$?
echo "criu killed 0.2 s into the dump; then: $(tr '\n' ';' </run/ckpt-crash-ps)"
echo "snapshot: exit $rc; $(head -c 700 "$bin/snap0.json")"
[[ $rc == 1 ]] && grep -q _FAILED "$bin/snap0.json"
check "criu killed 0.2 s into the dump: the snapshot failed" $?
sp=$(ps -o stat= -p "$parent" | tr -d ' ') st=$(ps -o stat= -p "$p" | tr -d ' ')
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
a=$(ask "$d" hash 60)
[[ $sp != T* && $sp != Z* && $st != T* && $s == running && $a == "hash $h" ]]
check "the tree runs on (parent $sp, target $st), the target $s, memory intact: $a (ready $h)" $?
rm -f /run/ckpt-crash-delay

timeout 120 "${CK[@]}" snapshot --pid "$parent" --dir "$snap" --json >"$bin/snap.json"
check "snapshot of the tree of $parent (target $p): $(head -c 300 "$bin/snap.json")" $?
wait_gone "$parent" "$p" || fail_setup "the tree's pids still taken after the snapshot"

for delay in "${delays[@]}"; do
  echo "$delay" >/run/ckpt-crash-delay
  : >/run/ckpt-crash-ps
  CKPT_CRIU_PATH=$wrapper timeout 120 "${CK[@]}" restore-snapshot "$bin/snap" --json >"$bin/restore.json"
  rc=$?
  echo "criu killed $delay s in; then: $(tr '\n' ';' </run/ckpt-crash-ps)"
  echo "restore-snapshot: exit $rc; $(head -c 700 "$bin/restore.json")"
  [[ $rc == 1 ]] && grep -q RESTORE_FAILED "$bin/restore.json"
  check "criu killed $delay s into the restore: RESTORE_FAILED" $?
  held=$(ps -o pid=,stat=,args= -p "$parent,$p" | cut -c1-120 | tr '\n' ';')
  [[ -z $held ]]
  check "criu killed $delay s into the restore: no pid of the tree held once it returned" $? "$held"
  wait_gone "$parent" "$p" >/dev/null
done

rm -f /run/ckpt-crash-delay
timeout 120 "${CK[@]}" restore-snapshot "$bin/snap" --json >"$bin/restore.json"
rc=$?
check "a restore without the crash: exit $rc; $(head -c 300 "$bin/restore.json")" $rc
started+=("$parent" "$p")
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p")
a=$(ask "$d" hash 60)
[[ $s == running && $a == "hash $h" ]]
check "the target: $s, memory intact: $a (ready $h)" $?
verdict_summary "$bin/verdicts.txt" criu-crash
