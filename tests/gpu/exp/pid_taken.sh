#!/usr/bin/env bash
# A pid taken after a restore's checks, on the GPU machine, as root, from the repo root:
#
#   bash tests/gpu/exp/pid_taken.sh [late]
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. N + 1 targets
# of 64 MiB, N the cores (criu's restores run N at once), snapshotted together; the restore starts
# N criu runs and the last tree waits for a slot: meanwhile a `sleep` takes that tree's pid
# (through /proc/sys/kernel/ns_last_pid). Expected: restore-snapshot fails (RESTORE_FAILED, criu's
# "Can't fork"), the sleep still runs (before, the rollback ended whatever held a failed tree's
# pid), and no target is left. Where the sleep could not take the pid before that tree began, the
# run says so (SKIP): nothing was shown. About 1 minute. OURS_XZ: another build of ours to unpack
# (the one before the mend, to see it end the sleep).
#
# `late`: the pid is taken after criu began on its tree. One target; criu is run through a wrapper
# (installed as /usr/local/sbin/ckpt-criu-taker, removed at the end) that, on a restore, has a
# `sleep` of nobody's take the target's pid before it runs criu. Expected: RESTORE_FAILED with
# "Can't fork", the sleep still runs (before, the rollback ended a holder of a pid free when criu
# began: root ending another user's process).
mode=${1:-slot}
. "$(dirname "$0")/session.sh" "pid-taken-$mode"
taker='' wrapper=/usr/local/sbin/ckpt-criu-taker
cleanup() {
  end_started target
  [[ -n $taker ]] && kill -9 "$taker" 2>/dev/null
  if [[ $mode == late ]]; then
    pkill -9 -u 65534 -x sleep # the wrapper's, taker or not (interrupted before it was read)
    rm -f "$wrapper" /run/ckpt-take-pid /run/ckpt-taker
  fi
}
trap cleanup EXIT

# The restore's verdicts where the sleep $taker took pid $1 ($2: when, or nothing): criu failed
# "Can't fork", and the rollback left the sleep running.
taken_verdicts() {
  [[ $rc == 1 && $(grep -c RESTORE_FAILED "$bin/restore.json") == 1 ]]
  check "the restore failed, RESTORE_FAILED" $?
  grep -q "Can't fork" "$bin/restore.json"
  check "criu said why: Can't fork for the pid" $?
  alive "$taker" && [[ $(ps -o comm= -p "$taker") == sleep ]]
  check "the sleep that took pid $1 ${2:+$2 }still runs (the rollback left it)" $?
}

if [[ $mode == late ]]; then
  for c in setsid setpriv pkill; do command -v $c >/dev/null || fail_setup "no $c for the sleep"; done
  start_target late 64 >/dev/null || fail_setup "the target did not start"
  pid=$T_PID
  timeout 120 "${CK[@]}" snapshot --pid "$pid" --dir "$bin/snap" --json >"$bin/snap.json"
  check "snapshot of the target $pid: $(head -c 300 "$bin/snap.json")" $?
  wait_gone "$pid" || fail_setup "pid $pid still taken after the snapshot ended its target"
  echo "$pid" >/run/ckpt-take-pid
  rm -f /run/ckpt-taker
  # The wrapper's sleep: setsid -f forks (setsid is pid - 1, the sleep pid), setpriv does not.
  cat >"$wrapper" <<WRAP
#!/bin/bash
if [[ \$1 == restore && -s /run/ckpt-take-pid && ! -e /run/ckpt-taker ]]; then
  p=\$(cat /run/ckpt-take-pid)
  for ((i = 0; i < 300; i++)); do
    echo \$((p - 2)) >/proc/sys/kernel/ns_last_pid
    setsid -f setpriv --reuid=65534 --regid=65534 --clear-groups sleep 600 </dev/null >/dev/null 2>&1
    sleep 0.01
    if [[ \$(stat -c %u /proc/\$p 2>/dev/null) == 65534 ]]; then echo "\$p" >/run/ckpt-taker; break; fi
    pkill -9 -u 65534 -x sleep # a miss: it took another pid
  done
fi
$(printf 'exec %q "$@"' "$criu")
WRAP
  chmod 0755 "$wrapper"
  CKPT_CRIU_PATH=$wrapper timeout 120 "${CK[@]}" restore-snapshot "$bin/snap" --json >"$bin/restore.json"
  rc=$?
  echo "restore-snapshot: exit $rc; $(head -c 1200 "$bin/restore.json")"
  taker=$(cat /run/ckpt-taker 2>/dev/null)
  if [[ -z $taker ]]; then
    verdict SKIP "the wrapper's sleep could not take pid $pid (nothing shown)"
  else
    echo "a sleep of nobody's, $(ps -o pid=,user=,comm= -p "$taker"), took pid $pid after criu began"
    taken_verdicts "$pid" "after criu began"
  fi
  verdict_summary "$bin/verdicts.txt" pid-taken-late
  exit
fi

n=$(($(nproc) + 1))
pids=()
for ((i = 1; i <= n; i++)); do
  start_target "p$i" 64 >/dev/null || fail_setup "target $i did not start"
  pids+=("$T_PID")
done
last=${pids[-1]}
echo "$n targets: ${pids[*]}; the last, $last, waits for a slot in the restore"
timeout 120 "${CK[@]}" snapshot --pid "$(IFS=,; echo "${pids[*]}")" --dir "$bin/snap" --json >"$bin/snap.json"
_rc=$?
check "snapshot of the $n targets: $(head -c 300 "$bin/snap.json")" $_rc
wait_gone "${pids[@]}"

timeout 120 "${CK[@]}" restore-snapshot "$bin/snap" --json --events >"$bin/restore.json" 2>"$bin/events" &
restoring=$!
for ((i = 0; i < 3000; i++)); do
  grep -q '"phase":"restore"' "$bin/events" 2>/dev/null && break
  sleep 0.01
done
for ((i = 0; i < 200; i++)); do
  echo $((last - 1)) >/proc/sys/kernel/ns_last_pid
  sleep 600 &
  p=$!
  if [[ $p == "$last" ]]; then taker=$p; break; fi
  kill -9 "$p" 2>/dev/null
  taken "$last" && break # criu has it: too late
done
wait "$restoring"
rc=$?
echo "restore-snapshot: exit $rc; $(head -c 1200 "$bin/restore.json")"
if [[ -z $taker ]]; then
  verdict SKIP "the sleep could not take pid $last before its tree began (nothing shown)"
else
  echo "sleep $taker took pid $last while the restore ran"
  taken_verdicts "$last"
  left=0
  for p in "${pids[@]::${#pids[@]}-1}"; do alive "$p" && left=$((left + 1)); done
  [[ $left == 0 ]]
  check "no target left running of the $((n - 1)) criu made ($left)" $?
fi
verdict_summary "$bin/verdicts.txt" pid-taken
