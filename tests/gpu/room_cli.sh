#!/usr/bin/env bash
# Issue 16: the command line refuses a --toggle resume that would not fit, before the driver is
# asked, whichever program (or run of it) suspended the process; and resumes it intact once there
# is room. On driver 580 a restore that runs out of GPU memory inside the driver loses the process
# (docs/DRIVER.md#an-out-of-memory-restore-loses-the-process), so "resumes intact afterwards" also
# proves that the refused resume never reached the driver. Then two suspended targets with room for
# either alone: --all-or-nothing refuses the pair up front, without it one resumes and the other is
# refused (the first one's claim counted), and once there is room both run intact.
#
#   bash tests/gpu/room_cli.sh bun    # our compiled binary (.carry/cuda-checkpoint-ours.xz)
#   bash tests/gpu/room_cli.sh deno   # deno run -A cli/main.ts (.carry/deno.xz)
#
# Also uses NVIDIA's utility where .carry/cuda-checkpoint is carried (another tool's checkpoint,
# which leaves no record). One GPU is enough. Every step under `timeout`; log in $OUT/room-<rt>.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
rt=${1:-bun}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-room
mkdir -p "$out" "$bin"
: >"$bin/verdicts.txt"
exec > >(tee -a "$out/room-$rt.txt") 2>&1
verdict() { echo "$1 $2"; echo "$1 $2" >>"$bin/verdicts.txt"; }
check() { if [[ $1 == 0 ]]; then verdict PASS "$2"; else verdict FAIL "$2${3:+: $3}"; fi; }

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/room_cli.sh $rt"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv,noheader

case $rt in
  bun)
    xz -dc .carry/cuda-checkpoint-ours.xz >"$bin/cuda-checkpoint" && chmod +x "$bin/cuda-checkpoint" ||
      { verdict FAIL "setup: carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"; exit 1; }
    CK=("$bin/cuda-checkpoint")
    ;;
  deno)
    xz -dc .carry/deno.xz >"$bin/deno" && chmod +x "$bin/deno" ||
      { verdict FAIL "setup: carry .carry/deno.xz (bash tests/gpu/tools/carry-runtimes.sh deno)"; exit 1; }
    CK=("$bin/deno" run -A --quiet cli/main.ts)
    ;;
  *) echo "usage: bash tests/gpu/room_cli.sh bun|deno"; exit 2 ;;
esac
echo "ours: ${CK[*]}: $(timeout 60 "${CK[@]}" --version 2>&1)"
nvidia=
if [[ -f .carry/cuda-checkpoint ]]; then
  cp .carry/cuda-checkpoint "$bin/nvidia-cuda-checkpoint" && chmod +x "$bin/nvidia-cuda-checkpoint"
  nvidia=$bin/nvidia-cuda-checkpoint
fi
timeout 180 nvcc -O2 -o "$bin/target" tests/gpu/target.cu || { verdict FAIL "setup: nvcc"; exit 1; }
# The records are where they are for root, as on any machine (/run/ckpt-cuda): start clean.
rm -rf /run/ckpt-cuda

# ck ARGS...: runs ours, stdout and stderr kept apart in $bin/o and $bin/e; rc in $rc.
ck() {
  timeout 120 "${CK[@]}" "$@" >"$bin/o" 2>"$bin/e"
  rc=$?
  echo "   \$ cuda-checkpoint $* -> exit $rc"
  sed 's/^/     out| /' "$bin/o"
  sed 's/^/     err| /' "$bin/e"
}
state() { timeout 60 "${CK[@]}" --get-state --pid "$1" 2>&1; }

# start NAME ARGS...: "$bin/target" ARGS, its commands through the fifo $bin/NAME.in (held open
# for writing: fd_NAME), its output in $bin/NAME.out; sets pid_NAME and waits up to 20 s for its
# "ready" line. hash_of NAME: its memory's hash, computed on the GPU. stop NAME: it exits.
start() {
  local name=$1 fd
  shift
  rm -f "$bin/$name.in"
  mkfifo "$bin/$name.in"
  "$bin/target" "$@" <"$bin/$name.in" >"$bin/$name.out" 2>&1 &
  printf -v "pid_$name" %s $!
  exec {fd}>"$bin/$name.in"
  printf -v "fd_$name" %s "$fd"
  for _ in $(seq 100); do grep -q '^ready' "$bin/$name.out" && break; sleep 0.2; done
}
hash_of() {
  local out=$bin/$1.out fd=fd_$1 n
  n=$(grep -c '^hash' "$out")
  echo hash >&"${!fd}"
  for _ in $(seq 150); do (($(grep -c '^hash' "$out") > n)) && break; sleep 0.2; done
  grep '^hash' "$out" | tail -1 | cut -d' ' -f2
}
stop() {
  local fd=fd_$1 pid=pid_$1
  local f=${!fd}
  echo exit >&"$f"
  exec {f}>&-
  wait "${!pid}"
}
free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' '; }

# The target: a 4 GiB CUDA process that answers "hash" with its memory's hash.
start target cuda 4096
read -r _ pid tid hash0 < <(grep '^ready' "$bin/target.out")
[[ $pid == "$pid_target" ]] || { verdict FAIL "setup: target did not start: $(cat "$bin/target.out")"; exit 1; }
echo "target: pid $pid, thread $tid, hash $hash0"

# 1. Suspend with our --toggle: a record of what it held, private to root.
ck --toggle --pid "$pid"
check $((rc != 0)) "suspend: --toggle exits 0" "exit $rc"
[[ $(state "$pid") == checkpointed ]]
check $? "suspend: the target is checkpointed"
record=$(ls /run/ckpt-cuda/"$pid"-*.json 2>/dev/null | head -1)
echo "record: $record: $(cat "$record" 2>/dev/null)"
[[ -n $record && $(stat -c %a /run/ckpt-cuda) == 700 && $(stat -c %a "$record") == 600 ]]
check $? "the record is in /run/ckpt-cuda (0700), one file of mode 0600, keyed by pid and start"
held=$(grep -o '"GPU-[^"]*":[0-9.]*' "$record" | head -1 | cut -d: -f2)
echo "held: ${held:-?} MiB"

# 2. A filler takes the GPU: 2 GiB stay free, less than the target held.
fill=$(($(free_mib) - 2048 - 600))
start filler fill "$fill"
echo "filler: pid $pid_filler holds $fill MiB; free now $(free_mib) MiB"

# 3. The resume is refused before the driver, through the pid and through a thread id.
t0=$SECONDS
ck --toggle --pid "$pid"
line="Error toggling CUDA in process ID $pid: \"not enough free GPU memory for it: refused before asking the driver\""
[[ $rc == 1 && ! -s $bin/o && $(cat "$bin/e") == "$line" ]]
check $? "refused: exit 1, one line on stderr, nothing on stdout" "$(cat "$bin/e")"
ck --toggle --pid "$tid" --json
grep -q '"code":"NO_ROOM"' "$bin/o" && [[ $rc == 1 ]]
check $? "refused through a thread id too, --json says NO_ROOM"
[[ $(state "$pid") == checkpointed ]]
check $? "still checkpointed after the refusals ($((SECONDS - t0)) s)"
[[ -f $record ]]
check $? "the record stays for the next try"

# 4. The filler ends: the same command resumes it, its memory intact.
stop filler
echo "filler gone; free now $(free_mib) MiB"
ck --toggle --pid "$pid" --json
[[ $rc == 0 ]] && grep -q '"roomCheck":"checked"' "$bin/o"
check $? "resumed once there is room, its room checked"
[[ $(state "$pid") == running ]]
check $? "running again"
h=$(hash_of target)
[[ $h == "$hash0" ]]
check $? "memory intact after the refused resume and the retry (hash $h)" "want $hash0"
[[ ! -e $record ]]
check $? "the record is gone once restored"

# 5. Another tool's checkpoint leaves no record: ours resumes it and says the room went unchecked.
if [[ -n $nvidia ]]; then
  timeout 120 "$nvidia" --toggle --pid "$pid"
  echo "   NVIDIA's --toggle: exit $?; state $(state "$pid")"
  ck --toggle --pid "$pid" --json
  [[ $rc == 0 ]] && grep -q '"roomCheck":{"unknown":"no record' "$bin/o"
  check $? "checkpointed by NVIDIA's utility: resumed, and --json says the room could not be checked"
  h=$(hash_of target)
  [[ $h == "$hash0" ]]
  check $? "memory intact (hash $h)" "want $hash0"
else
  verdict SKIP "another tool's checkpoint: NVIDIA's utility was not carried (.carry/cuda-checkpoint)"
fi

# 6. Two checkpointed targets, room for either alone but not both: --all-or-nothing refuses the
# pair before the driver is asked; without it one resumes and the other is refused (the first's
# claim counted before NVML sees its memory); once the filler ends the other resumes; both intact.
start target2 cuda 4096
read -r _ pid2 _ hash2 < <(grep '^ready' "$bin/target2.out")
echo "second target: pid $pid2, hash $hash2"
ck --toggle --pid "$pid,$pid2"
[[ $rc == 0 && $(state "$pid") == checkpointed && $(state "$pid2") == checkpointed ]]
check $? "joint: both suspended by one --toggle"
fill=$(($(free_mib) - ${held%.*} * 3 / 2 - 600))
start filler2 fill "$fill"
echo "filler: pid $pid_filler2 holds $fill MiB; free now $(free_mib) MiB, room for one of the two (${held:-?} MiB each)"
ck --toggle --pid "$pid,$pid2" --all-or-nothing --json
[[ $rc == 1 ]] && grep -q '"code":"NO_ROOM"' "$bin/o" && grep -q 'processes it restores need' "$bin/o"
check $? "joint: --all-or-nothing refused the pair before any step, naming what both need"
[[ $(state "$pid") == checkpointed && $(state "$pid2") == checkpointed ]]
check $? "joint: both still checkpointed"
ck --toggle --pid "$pid,$pid2" --json
[[ $rc == 1 && $(grep -c '"ok":true' "$bin/o") == 1 ]] && grep -q '"code":"NO_ROOM"' "$bin/o"
check $? "joint: without it, one resumed and the other refused NO_ROOM"
refused=$(grep '"code":"NO_ROOM"' "$bin/o" | sed -n 's/^{"pid":\([0-9]*\),.*/\1/p')
echo "refused: ${refused:-none}"
stop filler2
ck --toggle --pid "${refused:-$pid2}" --json
[[ $rc == 0 && $(state "$pid") == running && $(state "$pid2") == running ]]
check $? "joint: once the filler ended, the refused one resumed: both running"
h=$(hash_of target)
[[ $h == "$hash0" ]]
check $? "joint: the first's memory intact (hash $h)" "want $hash0"
h=$(hash_of target2)
[[ $h == "$hash2" ]]
check $? "joint: the second's memory intact (hash $h)" "want $hash2"
stop target2
stop target
verdict_summary "$bin/verdicts.txt" "$rt"
