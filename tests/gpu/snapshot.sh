#!/usr/bin/env bash
# Snapshots on the GPU machine: `cuda-checkpoint snapshot`, `inspect` and `restore-snapshot`
# (docs/SNAPSHOTS.md) on real CUDA processes, with the real criu, from the repo root, as root.
#
#   bash tests/gpu/snapshot.sh bun    # our compiled binary: carry .carry/cuda-checkpoint-ours.xz
#   bash tests/gpu/snapshot.sh deno   # deno run -A cli/main.ts: carry .carry/deno.xz
#
# and .carry/criu-cuda.tgz for both (bash tests/gpu/tools/carry-criu-cuda.sh; ours runs criu
# without its CUDA plugin). One runtime per run: ours.xz and deno.xz together pass the 64 MiB a run
# carries. About 1-2 minutes on one GPU (52 s on an H100; cases a and g 45 s, b and k 20 s on an
# H200); SNAPSHOT_BUDGET, default 290 s, skips what no longer fits.
#
# a. 1 GiB and 4 GiB targets: snapshot --json (ok, the target gone), inspect, restore-snapshot
#    --json (ok, the same pid), --get-state running, the memory's hash as at the start; the
#    snapshot's and the restore's times and the image bytes printed.
# b. A tree: a bash parent (a session of its own) whose two background children are 1 GiB targets;
#    snapshot of the parent's pid with --job; the manifest lists the parent and both children,
#    the children with CUDA, options.job true; after the restore both run, their hashes intact.
# c. Room: a 4 GiB target snapshotted; a filler leaves about 2 GiB free; restore-snapshot exits 1
#    with error.code NO_ROOM and the pid is not taken (nothing was made); the filler ends; the
#    restore succeeds, hash intact.
# d. --leave-running: a 1 GiB target answers "hash" after its snapshot; it is killed, restored
#    from the snapshot, hash intact.
# e. Deno only: tests/criu_engine_test.ts with CKPT_CRIU_PATH, its real-criu test not skipped.
# f. Onto another GPU (two GPUs; SKIP on one): a target on GPU 0 snapshotted, restored with
#    --device-map swapping GPUs 0 and 1 (UUIDs as the snapshot's manifest names them); nvidia-smi
#    sees its memory on GPU 1 only; hash intact.
# g. Verified images: a 4 GiB target snapshotted; one byte near the end of its largest image
#    flipped (same size): inspect --verify and restore-snapshot refuse naming the file, nothing
#    left (the pid free; the refusal's detail says whether criu had loaded it into the target,
#    kept stopped and then ended); the byte put back: inspect --verify passes (its rate printed),
#    the restore brings the target back, hash intact.
# h. SIGTERM in the middle of a snapshot of a 4 GiB target, 1 s in (the suspend) and 0.5 s into
#    criu's dump: ours exits 143, the target runs with its memory intact, and the same --dir takes a
#    snapshot again; and SIGINT to ours' whole process group 0.5 s into the dump, as a terminal's
#    Ctrl-C: exit 130, the same.
# i. SIGKILL in the middle of a snapshot of a 4 GiB target: the target is left suspended;
#    `recover DIR` resumes it, hash intact, and the directory is emptied.
# j. A snapshot that moves: a 1 GiB target snapshotted; the directory copied with tar (modes and
#    owners kept) into another directory and the original removed; inspect --verify of the copy
#    passes; a second copy with its largest image removed is refused by restore-snapshot (code
#    SNAPSHOT, the file named as missing, nothing made: the pid free); restore-snapshot from the
#    first copy brings the target back, hash intact. About 20 s.
# k. A shell job: a 1 GiB target that leads no session (started without setsid, in this script's
#    session and process group), snapshotted and restored: criu puts it in its own session, and
#    the restore keeps it stopped until its memory images matched their digests; it runs (ps
#    state not T), hash intact. About 15 s.
# l. Two targets (4 GiB, 1 GiB), the 4 GiB one killed once checkpointed, during the snapshot: it
#    fails, exit 1, naming the ended one and the other as put back, which runs, hash intact; no
#    directory is left.
# m. --toggle --job of two 4 GiB targets, SIGINT 0.8 s in, while they checkpoint (after the locks):
#    exit 130, both rolled back, running, hashes intact.
# n. A 4 GiB target suspended with --toggle, snapshotted (taken checkpointed, its GPU memory known
#    from the record), restored (back checkpointed); a filler leaves about 2 GiB: its --toggle
#    resume is refused NO_ROOM (the restore kept the record); the filler ends: resumed, intact.
# SNAPSHOT_CASES picks cases by letter (default abcdefghijklmn).
#
# The targets are tests/gpu/target.cu in fifo mode (as in criu_cli.sh): setsid, stdin /dev/null,
# stdout to a file, commands through a named fifo. Every check is one line PASS/FAIL/SKIP; the
# summary at the end counts them (exit 1 on any FAIL). Log: $OUT/snapshot-<runtime>.txt; criu's
# logs of failures: $OUT/snapshot-<runtime>-logs.tgz (where there were any).
#
# Dry run without a GPU (the mechanics only; nothing about the driver): SNAPSHOT_DRY_RUN=1 builds
# the fake libcuda of tests/fixtures (every pid is a running CUDA process; no NVML, so no room
# check: c's refusal and f's nvidia-smi checks SKIP) and a bash stand-in of the target's fifo mode;
# criu is $CKPT_CRIU_PATH or /tmp/criu/usr/sbin/criu as unpacked before; ours is OURS_BIN (default
# dist/cuda-checkpoint, `bash cli/build.sh`) for bun, DENO_BIN (default node_modules/.bin/deno)
# for deno; nothing of .carry/ is used. Overrides: TARGET_BIN (a built target), SIZES_A (MiB of
# case a, default "1024 4096").
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh
. tests/gpu/setup.sh # criu, ours, the target or its stand-in
rt=${1:-}
case $rt in
  bun | deno) ;;
  *) echo "usage: bash tests/gpu/snapshot.sh bun|deno"; exit 2 ;;
esac
dry=${SNAPSHOT_DRY_RUN:-}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-snap${dry:+-dry}
budget=${SNAPSHOT_BUDGET:-290}
cases=${SNAPSHOT_CASES:-abcdefghijklmn}
read -r -a sizes_a <<<"${SIZES_A:-1024 4096}"
mkdir -p "$out" "$bin"
rm -rf "${bin:?}"/t-* "${bin:?}"/snap-* "$bin/logs"
mkdir -p "$bin/logs"
rm -f "$out/snapshot-$rt.txt" "$out/snapshot-$rt-logs.tgz"
: >"$bin/verdicts.txt"
: >"$bin/times.txt"
exec > >(tee -a "$out/snapshot-$rt.txt") 2>&1

# verdict and check: tests/gpu/verdicts.sh.
# fail_setup WHY: a FAIL; the script ends.
fail_setup() {
  verdict FAIL "setup: $1"
  exit 1
}
left() { echo $((budget - SECONDS)); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# jv FILE EXPR: a Python expression over j, the JSON object in FILE: strings bare, the rest as JSON,
# "?" where FILE is no JSON or EXPR does not apply.
jv() {
  python3 -c 'import json, sys
try:
    j = json.load(open(sys.argv[1]))
    v = eval(sys.argv[2], {"j": j})
    print(v if isinstance(v, str) else json.dumps(v))
except Exception:
    print("?")' "$1" "$2"
}

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/snapshot.sh $rt${dry:+ (DRY RUN: fake libcuda, stand-in targets)} (budget $budget s)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)'); kernel $(uname -r)"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null ||
  echo "(no nvidia-smi)"
df -h /tmp | tail -1

# ---- setup: criu, ours, the target ----
setup_criu
export CKPT_CRIU_PATH=$criu

if [[ -n $dry ]]; then
  fake_libcuda
  export CKPT_LIBCUDA_PATH=$bin/libcuda.so.1
  echo "dry run: CKPT_LIBCUDA_PATH=$CKPT_LIBCUDA_PATH (fake, two GPUs of one chip)"
  write_stand_in "$bin/stand-in-target"
fi
case $rt in
  bun)
    if [[ -z $dry ]]; then
      unxz_to .carry/cuda-checkpoint-ours.xz "$bin/cuda-checkpoint" ||
        fail_setup "unpacking .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"
      CK=("$bin/cuda-checkpoint")
    else
      CK=("$(realpath "${OURS_BIN:-dist/cuda-checkpoint}")")
    fi
    ;;
  deno)
    if [[ -z $dry ]]; then
      unxz_to .carry/deno.xz "$bin/deno" ||
        fail_setup "unpacking .carry/deno.xz (bash tests/gpu/tools/carry-runtimes.sh deno)"
      DENO=$bin/deno
    else
      DENO=$(realpath "${DENO_BIN:-node_modules/.bin/deno}")
    fi
    CK=("$DENO" run -A --quiet cli/main.ts)
    ;;
esac
v=$(timeout 120 "${CK[@]}" --version 2>&1)
[[ $v == *"@ckpt/cuda"* ]]
check "setup: ours runs (${CK[*]}): $v" $?
# A binary built before snapshots answers NVIDIA's "Invalid option(s)" to the command.
v=$(timeout 60 "${CK[@]}" inspect --dir /nonexistent-snapshot 2>&1 | head -1)
[[ $v != *"Invalid option"* ]]
check "setup: ours knows snapshots (inspect of nothing says: $v)" $? "rebuild it: bash cli/carry.sh"

target=${TARGET_BIN:-}
if [[ -z $target && -n $dry ]]; then
  target=$bin/stand-in-target
elif [[ -z $target ]]; then
  build_target
fi
[[ $("$target" fifo 2>&1) == *"fifo mode needs"* ]] || { verdict FAIL "setup: $target has no fifo mode"; exit 1; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[[ -n $dry && $gpus == 0 ]] && gpus=2 # the fake's
echo "GPUs: $gpus"

# ---- targets ----
started=() # every pid started here (targets, parents, fillers): the ones left are ended at exit
cleanup() {
  local p
  for p in "${started[@]}"; do
    # Only ours: its command line names this script's folder (a pid may have been reused).
    if alive "$p" && grep -qaF "$bin/" "/proc/$p/cmdline" 2>/dev/null; then kill -9 "$p" 2>/dev/null; fi
  done
  rm -rf "${bin:?}"/snap-*
}
trap cleanup EXIT

# wait_ready OUTFILE PID: the "ready <pid> <tid> <hash>" line of a target started elsewhere, while
# PID (the target, or its parent) lives, for 120 s at most.
wait_ready() {
  local i line
  for ((i = 0; i < 1200; i++)); do
    line=$(head -1 "$1" 2>/dev/null)
    [[ $line == ready* ]] && { echo "$line"; return 0; }
    alive "$2" || break
    sleep 0.1
  done
  echo "(not ready: $(head -3 "$1" 2>/dev/null | tr '\n' ' '))"
  return 1
}

state() { timeout 60 "${CK[@]}" --get-state --pid "$1" 2>&1 | head -2 | tr '\n' ' ' | sed 's/ $//'; }

# intact WHAT DIR PID HASH: PASS where --get-state says running and the target in DIR answers the
# hash it had when it started.
intact() {
  local s a="(not asked: not running)"
  s=$(state "$3")
  [[ $s == running ]] && a=$(ask "$2" hash 120)
  [[ $s == running && $a == "hash $4" ]]
  check "$1: $s, memory intact: $a (ready $4)" $?
}

# ck NAME LIMIT ARGS...: ours, stdout in $bin/NAME.out, stderr in $bin/NAME.err; sets rc and ms.
ck() {
  local name=$1 limit=$2 t0 t1
  shift 2
  t0=$(now)
  timeout -k 10 "$limit" "${CK[@]}" "$@" >"$bin/$name.out" 2>"$bin/$name.err"
  rc=$?
  t1=$(now)
  ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
  echo "   \$ cuda-checkpoint $* -> exit $rc in $ms ms"
  head -c 1500 "$bin/$name.out" | sed 's/^/     out| /'
  echo
  head -20 "$bin/$name.err" | sed 's/^/     err| /'
  ((rc == 124 || rc == 137)) && echo "     (timed out after $limit s)"
  if ((rc != 0)); then # criu's log, where the error names one
    local log
    log=$(jv "$bin/$name.out" 'j["error"]["log"]')
    if [[ $log != "?" && -f $log ]]; then
      echo "     the end of $log:"
      tail -15 "$log" | sed 's/^/     | /'
      cp "$log" "$bin/logs/$name-$(basename "$log")" 2>/dev/null
    fi
  fi
  return "$rc"
}

# keep_logs DIR NAME: criu's dump logs of a snapshot, kept for the archive (on a failure).
keep_logs() {
  local f
  for f in "$1"/tree-*/dump.log; do [[ -f $f ]] && cp "$f" "$bin/logs/$2-$(basename "$(dirname "$f")").log"; done
}

# snap_ok NAME: the --json of a snapshot or restore says ok.
snap_ok() { [[ $(jv "$bin/$1.out" 'j["ok"]') == true ]]; }

# skip_unless SECONDS CASE: SKIP the case where less is left of the budget, or where SNAPSHOT_CASES
# (default: every letter) does not name it.
skip_unless() {
  if [[ ${cases} != *"${2:0:1}"* ]]; then
    verdict SKIP "$2: not asked for (SNAPSHOT_CASES=$cases)"
    return 1
  fi
  (($(left) >= $1)) && return 0
  verdict SKIP "$2: $(left) s left of the $budget s budget, it needs about $1 s"
  return 1
}

gb() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.2f GB", b / 1e9; else printf "? GB" }'; }

free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | tr -d ' '; }

# filler_start LEFT: a filler on GPU 0 leaving about LEFT MiB free (its own context takes about
# 600), commands on fd 4; sets fill (its MiB), fpid and filled (its ready line); fails where it is
# not ready. filler_end: it exits and is waited for.
filler_start() {
  fill=$(($(free_mib) - $1 - 600))
  rm -f "$bin/fill-in"
  mkfifo "$bin/fill-in"
  "$target" fill "$fill" <"$bin/fill-in" >"$bin/filler.out" 2>&1 &
  fpid=$!
  exec 4>"$bin/fill-in"
  started+=("$fpid")
  filled=$(wait_ready "$bin/filler.out" "$fpid")
}
filler_end() {
  echo exit >&4
  exec 4>&-
  wait "$fpid"
}

# round_trip LABEL MIB: case a for one size.
round_trip() {
  local label=$1 mib=$2 d p h snap s a bytes sms rms
  start_target "$label" "$mib" || { verdict FAIL "$label: the target did not start"; return; }
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-$label
  ck "$label-snapshot" 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok "$label-snapshot" && [[ $rc == 0 && $(jv "$bin/$label-snapshot.out" '[x["pid"] for x in j["processes"]]') == "[$p]" ]]
  check "$label: snapshot --json of pid $p: ok, the process listed" $? "exit $rc"
  [[ $(jv "$bin/$label-snapshot.out" 'j["processes"][0]["cuda"]["state"]') == running ]]
  _rc=$?; check "$label: the snapshot took it as a running CUDA process ($(jv "$bin/$label-snapshot.out" 'j["processes"][0]["cuda"]["gpuMemoryMiB"]'))" $_rc
  sms=$(jv "$bin/$label-snapshot.out" 'round(j["ms"])')
  bytes=$(jv "$bin/$label-snapshot.out" 'j["bytes"]')
  wait_gone "$p"
  check "$label: the snapshot ended it (pid $p free)" $?
  ck "$label-inspect" 60 inspect "$snap"
  [[ $rc == 0 ]] && grep -q "$p" "$bin/$label-inspect.out"
  check "$label: inspect exits 0 and names pid $p" $?
  ck "$label-inspect-json" 60 inspect --dir "$snap" --json
  s=$(jv "$bin/$label-inspect-json.out" '"%s, job %s, %d files, suspend %.0f ms, dump %.0f ms" % (j["manifest"]["format"], j["manifest"]["options"]["job"], len(j["manifest"]["files"]), j["manifest"]["timings"]["suspendMs"], j["manifest"]["timings"]["dumpMs"])')
  [[ $rc == 0 && $s != "?" ]]
  check "$label: inspect --json: $s" $?
  ck "$label-restore" 240 restore-snapshot --dir "$snap" --json
  snap_ok "$label-restore" && [[ $rc == 0 && $(jv "$bin/$label-restore.out" 'j["pids"]') == "[$p]" ]]
  check "$label: restore-snapshot --json: ok, pid $p back" $? "exit $rc"
  rms=$(jv "$bin/$label-restore.out" 'round(j["ms"])')
  alive "$p"
  check "$label: pid $p lives again" $?
  intact "$label" "$d" "$p" "$h"
  echo "   $label: snapshot $sms ms (its own), restore $rms ms (its own), image $(gb "$bytes") ($bytes bytes)"
  echo "$label $mib $sms $rms $bytes" >>"$bin/times.txt"
  ((rc != 0)) && keep_logs "$snap" "$label"
  rm -rf "$snap"
  stop_target "$d" "$p"
}

# ---- a. round trips ----
echo
echo "== a. snapshot, inspect, restore-snapshot of one target (${sizes_a[*]} MiB)"
for mib in "${sizes_a[@]}"; do
  skip_unless $((20 + mib / 100)) "a-$mib" && round_trip "a-$mib" "$mib"
done

# ---- b. a tree of two CUDA children, as one job ----
echo
echo "== b. a bash parent with two 1 GiB targets, snapshot --job of the parent"
if skip_unless 60 b; then
  d=$bin/t-b
  rm -rf "$d"
  mkdir -p "$d/c1" "$d/c2"
  mkfifo "$d/c1/cmd" "$d/c2/cmd"
  # shellcheck disable=SC2016 # the parent's own $1..$3
  setsid bash -c 'for c in c1 c2; do "$1" fifo "$2" "$3/$c/cmd" </dev/null >"$3/$c/out" 2>&1 & done; wait' \
    snapshot-tree-parent "$target" 1024 "$d" </dev/null >"$d/parent.out" 2>&1 &
  parent=$!
  disown "$parent"
  started+=("$parent")
  r1=$(wait_ready "$d/c1/out" "$parent") && r2=$(wait_ready "$d/c2/out" "$parent")
  check "b: parent $parent started both children: ${r1:-?} / ${r2:-?}" $?
  [[ $r1 == ready* ]] || r1="x 0 0 0"
  [[ $r2 == ready* ]] || r2="x 0 0 0"
  read -r _ p1 _ h1 <<<"$r1"
  read -r _ p2 _ h2 <<<"$r2"
  started+=("$p1" "$p2")
  [[ $(ps -o ppid= -p "$p1" | tr -d ' ') == "$parent" && $(ps -o ppid= -p "$p2" | tr -d ' ') == "$parent" ]]
  check "b: both are the parent's children" $?
  snap=$bin/snap-b
  ck b-snapshot 240 snapshot --pid "$parent" --dir "$snap" --job --json
  snap_ok b-snapshot && [[ $rc == 0 ]]
  check "b: snapshot --job --json of pid $parent: ok" $? "exit $rc"
  wait_gone "$parent" "$p1" "$p2"
  check "b: the snapshot ended the three" $?
  ck b-inspect 60 inspect --dir "$snap" --json
  listed=$(jv "$bin/b-inspect.out" 'sorted(p["pid"] for t in j["manifest"]["trees"] for p in t["processes"])')
  want=$(printf '%s\n' "$parent" "$p1" "$p2" | sort -n | paste -sd, | sed 's/,/, /g')
  [[ $listed == "[$want]" ]]
  check "b: the manifest lists the parent and both children: $listed" $?
  withcuda=$(jv "$bin/b-inspect.out" 'sorted(p["pid"] for t in j["manifest"]["trees"] for p in t["processes"] if "cuda" in p)')
  [[ $withcuda == *"$p1"* && $withcuda == *"$p2"* ]]
  check "b: both children have CUDA (with CUDA: $withcuda)" $?
  if [[ -z $dry ]]; then # the fake libcuda calls every pid a CUDA process
    [[ $withcuda != *"$parent"* ]]
    check "b: the parent has none" $?
  fi
  [[ $(jv "$bin/b-inspect.out" 'j["manifest"]["options"]["job"]') == true ]]
  check "b: options.job is true" $?
  ck b-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok b-restore && [[ $rc == 0 ]]
  _rc=$?; check "b: restore-snapshot --json: ok, pids $(jv "$bin/b-restore.out" 'j["pids"]')" $_rc "exit $rc"
  intact "b: child 1, pid $p1" "$d/c1" "$p1" "$h1"
  intact "b: child 2, pid $p2" "$d/c2" "$p2" "$h2"
  [[ $(ps -o ppid= -p "$p1" | tr -d ' ') == "$parent" ]]
  check "b: the restored children are the restored parent's again" $?
  ((rc != 0)) && keep_logs "$snap" b
  rm -rf "$snap"
  stop_target "$d/c1" "$p1"
  stop_target "$d/c2" "$p2"
  for ((i = 0; i < 50; i++)); do alive "$parent" || break; sleep 0.1; done
  alive "$parent" && kill -9 "$parent" 2>/dev/null
fi

# ---- c. no room: refused before anything is made ----
echo
echo "== c. restore-snapshot onto a GPU without room: NO_ROOM, nothing made; then with room"
if skip_unless 90 c && start_target c 4096; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-c
  ck c-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok c-snapshot && [[ $rc == 0 ]]
  _rc=$?; check "c: snapshot of a 4 GiB target: ok ($(jv "$bin/c-snapshot.out" 'j["processes"][0]["cuda"]["gpuMemoryMiB"]'))" $_rc "exit $rc"
  wait_gone "$p"
  fpid=
  if [[ -n $dry ]]; then
    verdict SKIP "c: the refusal (dry run: no GPU to fill, no NVML for the room check)"
  else
    free=$(free_mib)
    filler_start 2048
    _rc=$?; check "c: a filler of $fill MiB started ($filled); free now $(free_mib) MiB (was $free)" $_rc
    ck c-refused 120 restore-snapshot --dir "$snap" --json
    code=$(jv "$bin/c-refused.out" 'j["error"]["code"]')
    [[ $rc == 1 && $code == NO_ROOM && $(jv "$bin/c-refused.out" 'j["ok"]') == false ]]
    check "c: refused: exit 1, error.code $code (want NO_ROOM)" $? "exit $rc"
    ! taken "$p"
    check "c: pid $p is not taken: nothing was made" $? "$(ps -o pid=,stat=,comm= -p "$p")"
    filler_end
    echo "   filler gone; free now $(free_mib) MiB"
  fi
  ck c-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok c-restore && [[ $rc == 0 ]]
  check "c: with room: restore-snapshot ok" $? "exit $rc"
  intact c "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$snap" c
  rm -rf "$snap"
  stop_target "$d" "$p"
else
  [[ $(left) -ge 90 && $cases == *c* ]] && verdict FAIL "c: the target did not start"
fi

# ---- d. --leave-running ----
echo
echo "== d. snapshot --leave-running: it goes on; killed, then restored from the snapshot"
if skip_unless 50 d && start_target d 1024; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-d
  size0=$(stat -c %s "$d/out")
  ck d-snapshot 240 snapshot --pid "$p" --dir "$snap" --leave-running --json
  snap_ok d-snapshot && [[ $rc == 0 && $(jv "$bin/d-snapshot.out" 'j["leftRunning"]') == true ]]
  check "d: snapshot --leave-running --json: ok, leftRunning true" $? "exit $rc"
  alive "$p"
  check "d: pid $p still lives" $?
  intact "d: it runs on" "$d" "$p" "$h"
  kill -9 "$p"
  wait_gone "$p"
  check "d: killed (pid $p free)" $?
  # criu refuses to restore a process whose open file changed size since the dump ("File ... has
  # bad size"): the answer written after the snapshot goes, as if the process had been ended then.
  truncate -s "$size0" "$d/out"
  ck d-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok d-restore && [[ $rc == 0 ]]
  check "d: restore-snapshot after the kill: ok" $? "exit $rc"
  intact "d: back from the snapshot" "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$snap" d
  rm -rf "$snap"
  stop_target "$d" "$p"
else
  [[ $(left) -ge 50 && $cases == *d* ]] && verdict FAIL "d: the target did not start"
fi

# ---- e. the engine's own test with the real criu (Deno) ----
echo
echo "== e. tests/criu_engine_test.ts with the real criu"
if [[ $rt != deno ]]; then
  verdict SKIP "e: Deno only (bash tests/gpu/snapshot.sh deno)"
elif skip_unless 40 e; then
  t0=$SECONDS
  # --no-check: type-checking is CI's (it needs node_modules/@types/node, not carried here).
  NO_COLOR=1 timeout 180 "$DENO" test -A --no-check tests/criu_engine_test.ts >"$bin/e.txt" 2>&1
  rc=$?
  sed 's/^/     | /' "$bin/e.txt" | tail -25
  # The test of the real criu skips (loudly) where it is not root or finds no usable criu.
  grep -q 'snapshot ends the tree, restoreSnapshot brings it back with its pids \.\.\. ok' "$bin/e.txt" &&
    ! grep -qE 'SKIPPED: (not root|no usable criu)|brings it back with its pids \.\.\. ignored' "$bin/e.txt"
  check "e: the real-criu test ran and passed, none skipped ($((SECONDS - t0)) s)" $?
  check "e: deno test tests/criu_engine_test.ts exits 0" "$rc" "exit $rc"
fi

# ---- f. onto the other GPU ----
echo
echo "== f. restore-snapshot --device-map onto the other GPU"
if ((gpus < 2)); then
  verdict SKIP "f: needs 2 GPUs (nvidia-h200-x2); this machine has $gpus"
elif skip_unless 50 f && start_target f 1024; then
  d=$T_DIR p=$T_PID h=$T_HASH
  # pid, GPU UUID for each GPU memory entry of pid $1 (nvidia-smi).
  where() {
    nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2>/dev/null |
      awk -F', *' -v p="$1" '$1 == p { print $2 }' | sort -u | paste -sd' '
  }
  [[ -z $dry ]] && echo "   before: pid $p on $(where "$p")"
  snap=$bin/snap-f
  ck f-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok f-snapshot && [[ $rc == 0 ]]
  check "f: snapshot: ok" $? "exit $rc"
  wait_gone "$p"
  ck f-inspect 60 inspect --dir "$snap" --json
  g0=$(jv "$bin/f-inspect.out" '[g["uuid"] for g in j["manifest"]["gpus"] if g["index"] == 0][0]')
  g1=$(jv "$bin/f-inspect.out" '[g["uuid"] for g in j["manifest"]["gpus"] if g["index"] == 1][0]')
  held=$(jv "$bin/f-inspect.out" '",".join(j["manifest"]["trees"][0]["processes"][0]["cuda"]["gpuMemoryMiB"] or {})')
  # GPUs 0 and 1 swapped, every other GPU onto itself: a mapping names every GPU of the snapshot.
  map=$(jv "$bin/f-inspect.out" '",".join("%s=%s" % (g["uuid"], {0: "'"$g1"'", 1: "'"$g0"'"}.get(g["index"], g["uuid"])) for g in j["manifest"]["gpus"])')
  [[ -z $dry ]] && { [[ $held == "$g0" ]]; check "f: the snapshot says it held memory on GPU 0 only ($held)" $?; }
  ck f-restore 240 restore-snapshot --dir "$snap" --device-map "$map" --json
  snap_ok f-restore && [[ $rc == 0 && $(jv "$bin/f-restore.out" 'j["gpuMapping"].get("'"$g0"'")') == "$g1" ]]
  _rc=$?; check "f: restore-snapshot --device-map (GPUs 0 and 1 swapped): ok, gpuMapping $(jv "$bin/f-restore.out" 'j["gpuMapping"]')" $_rc "exit $rc"
  if [[ -z $dry ]]; then
    w=$(where "$p")
    [[ $w == "$g1" ]]
    check "f: nvidia-smi sees pid $p on GPU 1 only: $w (GPU 1: $g1)" $?
  else
    verdict SKIP "f: where the memory is (dry run: no nvidia-smi)"
  fi
  intact "f: on the other GPU" "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$snap" f
  rm -rf "$snap"
  stop_target "$d" "$p"
fi

# ---- g. verified images ----
echo
echo "== g. one byte of an image changed: refused before anything changes; put back: restored"
if skip_unless 70 g && start_target g 4096; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-g
  ck g-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok g-snapshot && [[ $rc == 0 ]]
  check "g: snapshot: ok" $? "exit $rc"
  wait_gone "$p"
  img=$(ls -S "$snap/tree-$p"/pages-*.img 2>/dev/null | head -1)
  size=$(stat -c %s "$img" 2>/dev/null || echo 0)
  # Near its end: the last piece hashed, most likely while criu already loads the image.
  at=$((size > 99999 ? size - 12345 : size / 2))
  old=$(od -An -tx1 -j "$at" -N1 "$img" | tr -d ' ')
  printf "\\x$(printf '%02x' $((0x$old ^ 1)))" | dd of="$img" bs=1 seek="$at" conv=notrunc status=none
  echo "   flipped byte $at of $img ($(gb "$size")): 0x$old -> $(od -An -tx1 -j "$at" -N1 "$img" | tr -d ' ')"
  ck g-verify-bad 120 inspect --verify --dir "$snap"
  [[ $rc != 0 ]] && grep -q "$(basename "$img") is not the file the snapshot wrote" "$bin/g-verify-bad.err"
  check "g: inspect --verify refuses the changed image by name (exit $rc)" $?
  ck g-restore-bad 240 restore-snapshot --dir "$snap" --json
  [[ $rc != 0 && $(jv "$bin/g-restore-bad.out" 'j["error"]["code"]') == SNAPSHOT ]] && grep -q "$(basename "$img") is not the file" "$bin/g-restore-bad.out"
  _rc=$?; check "g: restore-snapshot refuses it (exit $rc, code $(jv "$bin/g-restore-bad.out" 'j["error"]["code"]'))" $_rc
  ! taken "$p"
  check "g: nothing was made: pid $p is free" $?
  # Found before criu ran, or while it loaded the image into the target kept stopped (then ended).
  if grep -q "stopped before any of them ran" "$bin/g-restore-bad.out"; then
    echo "   found while criu loaded the image into the target, kept stopped: ended before it ran"
  else
    echo "   found before criu started: nothing was made"
  fi
  printf "\\x$old" | dd of="$img" bs=1 seek="$at" conv=notrunc status=none
  ck g-verify 120 inspect --verify --dir "$snap" --json
  total=$(du -sb "$snap" | cut -f1)
  [[ $rc == 0 ]]
  _rc=$?; check "g: the byte put back, inspect --verify passes: $(gb "$total") in $ms ms ($(awk -v b="$total" -v m="$ms" 'BEGIN { printf "%.2f", b / m / 1e6 }') GB/s, spawn to exit)" $_rc "exit $rc"
  ck g-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok g-restore && [[ $rc == 0 ]]
  check "g: restore-snapshot: ok" $? "exit $rc"
  intact "g: restored" "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$snap" g
  rm -rf "$snap"
  stop_target "$d" "$p"
fi

# ---- h. SIGTERM in the middle of a snapshot ----
echo
echo "== h. SIGTERM during a snapshot of a 4 GiB target: everything put back, the --dir usable again"
# h-grp: SIGINT to ours' whole process group during the dump, as a terminal's Ctrl-C sends it (ours
# started under setsid, a group of its own): criu, in a session of its own, is not hit directly.
# `env --default-signal=INT`: a background job of this script starts with SIGINT ignored, which
# ours leaves be (as NVIDIA's utility does); a terminal's foreground job does not.
for delay in 1 dump grp; do
  skip_unless 60 "h-$delay" && start_target "h-$delay" 4096 || continue
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-h
  rm -rf "$snap"
  if [[ $delay == grp ]]; then
    setsid env --default-signal=INT "${CK[@]}" snapshot --pid "$p" --dir "$snap" >"$bin/h.out" 2>"$bin/h.err" &
  else
    "${CK[@]}" snapshot --pid "$p" --dir "$snap" >"$bin/h.out" 2>"$bin/h.err" &
  fi
  sp=$!
  if [[ $delay != 1 ]]; then
    # Once the target is checkpointed, while criu dumps: a fixed 4.5 s could land after the
    # snapshot had ended (a 4 GiB one ends in 4.3-4.5 s: "the interrupt came too late", exit 0).
    for ((i = 0; i < 300; i++)); do [[ $(state "$p") == checkpointed ]] && break; sleep 0.05; done
    sleep 0.5
  fi
  if [[ $delay == grp ]]; then
    kill -INT -- "-$sp"
    want=130 how="SIGINT to its process group 0.5 s into the dump"
  elif [[ $delay == dump ]]; then
    kill -TERM "$sp"
    want=143 how="SIGTERM 0.5 s into the dump"
  else
    sleep "$delay"
    kill -TERM "$sp"
    want=143 how="SIGTERM $delay s into the snapshot"
  fi
  for ((i = 0; i < 1200; i++)); do kill -0 "$sp" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$sp" 2>/dev/null && { kill -9 "$sp"; echo "   (ours did not exit in 120 s: killed)"; }
  wait "$sp"
  rc=$?
  sed 's/^/     err| /' "$bin/h.err" | head -8
  [[ $rc == "$want" ]]
  check "h-$delay: $how: ours exits $want ($rc)" $?
  intact "h-$delay: put back" "$d" "$p" "$h"
  [[ ! -e $snap/in-progress.json ]]
  _rc=$?
  left=$([[ -d $snap ]] && { ls -A "$snap" | paste -sd' '; } || echo 'no directory')
  check "h-$delay: no trace left ($left)" $_rc
  ck "h-$delay-again" 240 snapshot --pid "$p" --dir "$snap" --leave-running --json
  snap_ok "h-$delay-again" && [[ $rc == 0 ]]
  check "h-$delay: the same --dir takes a snapshot again (--leave-running)" $? "exit $rc"
  intact "h-$delay: after the second snapshot" "$d" "$p" "$h"
  rm -rf "$snap"
  stop_target "$d" "$p"
done

# ---- i. SIGKILL in the middle of a snapshot, then recover ----
echo
echo "== i. SIGKILL during a snapshot of a 4 GiB target: recover resumes it"
if skip_unless 60 i && start_target i 4096; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-i
  "${CK[@]}" snapshot --pid "$p" --dir "$snap" >"$bin/i.out" 2>"$bin/i.err" &
  sp=$!
  # Killed once the process is checkpointed (its memory on the host), before criu is done.
  for ((i = 0; i < 300; i++)); do [[ $(state "$p") == checkpointed ]] && break; sleep 0.05; done
  kill -9 "$sp"
  wait "$sp" 2>/dev/null
  s=$(state "$p")
  echo "   killed: the target is $s; the directory holds $(ls -A "$snap" | paste -sd' ')"
  [[ $s == checkpointed || $s == locked ]] && [[ -f $snap/in-progress.json ]]
  check "i: SIGKILL left it $s, with $snap/in-progress.json" $?
  # criu may have been killed with ours, or may still be dumping: wait until no criu of ours runs.
  for ((i = 0; i < 600; i++)); do pgrep -x criu >/dev/null || break; sleep 0.1; done
  ck i-recover 120 recover --dir "$snap"
  [[ $rc == 0 ]]
  check "i: recover --dir: exit 0" $? "exit $rc"
  intact "i: recovered" "$d" "$p" "$h"
  [[ -z $(ls -A "$snap" 2>/dev/null) ]]
  _rc=$?; check "i: the partial snapshot is gone ($(ls -A "$snap" 2>/dev/null | paste -sd' '))" $_rc
  rm -rf "$snap"
  stop_target "$d" "$p"
fi

# ---- j. a snapshot that moves ----
echo
echo "== j. a snapshot copied elsewhere with tar, the original removed: verified, restored from the copy"
if skip_unless 60 j && start_target j 1024; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-j moved=$bin/snap-j-moved broken=$bin/snap-j-broken
  rm -rf "$snap" "$moved" "$broken"
  mkdir -m 700 "$moved" "$broken"
  ck j-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok j-snapshot && [[ $rc == 0 ]]
  check "j: snapshot of a 1 GiB target: ok" $? "exit $rc"
  wait_gone "$p"
  # copy FROM INTO: FROM's directory into the directory INTO, through tar, modes and owners kept.
  copy() { timeout 120 bash -o pipefail -c 'tar -C "$(dirname "$1")" -cpf - "$(basename "$1")" | tar -C "$2" -xpf -' _ "$1" "$2"; }
  # What each entry is, for comparing two copies: path, mode, owner, size.
  entries() { (cd "$1" && find . -printf '%P %m %U %s\n' | sort); }
  t0=$(now)
  copy "$snap" "$moved"
  crc=$?
  t1=$(now)
  copied=$moved/snap-j
  [[ $crc == 0 && $(entries "$snap") == "$(entries "$copied")" ]]
  _rc=$?; check "j: tar copied $(gb "$(du -sb "$snap" | cut -f1)") to $copied in $(secs "$t0" "$t1") s, every mode, owner and size kept" $_rc "tar exit $crc"
  rm -rf "$snap"
  [[ ! -e $snap ]]
  check "j: the original $snap removed" $?
  ck j-verify 120 inspect --verify --dir "$copied" --json
  [[ $rc == 0 && $(jv "$bin/j-verify.out" 'j["verified"]') == true ]]
  check "j: inspect --verify of the copy: every digest as the manifest says" $? "exit $rc"
  # A second copy, its largest image left out: refused before anything is made.
  copy "$copied" "$broken"
  img=$(ls -S "$broken/snap-j/tree-$p"/pages-*.img 2>/dev/null | head -1)
  rm -f "$img"
  ck j-broken 120 restore-snapshot --dir "$broken/snap-j" --json
  msg=$(jv "$bin/j-broken.out" 'j["error"]["message"]')
  [[ $rc == 1 && $(jv "$bin/j-broken.out" 'j["error"]["code"]') == SNAPSHOT &&
    $msg == *"$(basename "${img:-none}") is missing, which the manifest lists"* ]]
  _rc=$?; check "j: a copy without $(basename "${img:-its image}") refused (exit $rc): $msg" $_rc
  ! taken "$p"
  check "j: nothing was made: pid $p is free" $?
  rm -rf "$broken"
  ck j-restore 240 restore-snapshot --dir "$copied" --json
  snap_ok j-restore && [[ $rc == 0 && $(jv "$bin/j-restore.out" 'j["pids"]') == "[$p]" ]]
  _rc=$?; check "j: restore-snapshot from the copy: ok, pid $p back ($(jv "$bin/j-restore.out" 'round(j["ms"])') ms)" $_rc "exit $rc"
  intact "j: restored from the copy" "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$copied" j
  rm -rf "$moved"
  stop_target "$d" "$p"
fi

# ---- k. a shell job ----
echo
echo "== k. a target that leads no session: restored held until verified, then let go; it runs"
if skip_unless 40 k && T_SETSID=0 start_target k 1024; then
  d=$T_DIR p=$T_PID h=$T_HASH
  snap=$bin/snap-k
  [[ $(ps -o sid= -p "$p" | tr -d ' ') != "$p" ]]
  _rc=$?; check "k: pid $p leads no session (sid $(ps -o sid= -p "$p" | tr -d ' '), pgid $(ps -o pgid= -p "$p" | tr -d ' '))" $_rc
  ck k-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  snap_ok k-snapshot && [[ $rc == 0 ]]
  check "k: snapshot: ok" $? "exit $rc"
  wait_gone "$p"
  ck k-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok k-restore && [[ $rc == 0 ]]
  _rc=$?; check "k: restore-snapshot: ok ($(jv "$bin/k-restore.out" 'round(j["ms"])') ms)" $_rc "exit $rc"
  st=$(ps -o stat= -p "$p" | tr -d ' ')
  [[ -n $st && $st != T* ]]
  _rc=$?; check "k: let go: state $st, session $(ps -o sid= -p "$p" | tr -d ' '), group $(ps -o pgid= -p "$p" | tr -d ' ')" $_rc
  intact "k: restored" "$d" "$p" "$h"
  ((rc != 0)) && keep_logs "$snap" k
  rm -rf "$snap"
  stop_target "$d" "$p"
fi

# ---- l. one of two trees ends during the snapshot ----
echo
echo "== l. one of two targets killed during the snapshot: the other put back running, the ended one named"
if skip_unless 50 l && start_target l-gone 4096; then
  gd=$T_DIR gp=$T_PID
  if start_target l-kept 1024; then
    d=$T_DIR p=$T_PID h=$T_HASH
    snap=$bin/snap-l
    rm -rf "$snap"
    "${CK[@]}" snapshot --pid "$gp,$p" --dir "$snap" >"$bin/l.out" 2>"$bin/l.err" &
    sp=$!
    # Killed once checkpointed: its tree is dumped, or about to be.
    for ((i = 0; i < 300; i++)); do [[ $(state "$gp") == checkpointed ]] && break; sleep 0.05; done
    kill -9 "$gp"
    wait "$sp"
    rc=$?
    sed 's/^/     err| /' "$bin/l.err" | head -6
    [[ $rc == 1 ]] && grep -q "Every other process was put back as it was, and keeps running (process $gp had ended)" "$bin/l.err"
    check "l: the snapshot failed (exit $rc), naming $gp as ended and the other as put back" $?
    intact "l: the other" "$d" "$p" "$h"
    [[ ! -e $snap ]]
    _rc=$?; check "l: nothing left of the snapshot ($(ls -A "$snap" 2>/dev/null | paste -sd' '))" $_rc
    stop_target "$d" "$p"
  fi
  rm -rf "$gd"
fi

# ---- m. Ctrl-C during a job's checkpoints ----
echo
echo "== m. --toggle --job of two 4 GiB targets, SIGINT while they checkpoint: both back, exit 130"
if skip_unless 40 m && start_target m-a 4096; then
  da=$T_DIR pa=$T_PID ha=$T_HASH
  if start_target m-b 4096; then
    # With SIGINT as a terminal's foreground job has it (h-grp says why).
    env --default-signal=INT "${CK[@]}" --toggle --pid "$pa,$T_PID" --job >"$bin/m.out" 2>"$bin/m.err" &
    sp=$!
    # Its start and the locks take about 0.1 s, the checkpoints about two seconds: into them (a
    # getState would wait behind a checkpoint, so none is asked meanwhile).
    sleep 0.8
    kill -INT "$sp"
    wait "$sp"
    rc=$?
    sed 's/^/     out| /' "$bin/m.out"
    sed 's/^/     err| /' "$bin/m.err" | head -6
    [[ $rc == 130 ]] && grep -q "rolled-back" "$bin/m.out"
    check "m: exit $rc, each process rolled back" $?
    intact "m: a" "$da" "$pa" "$ha"
    intact "m: b" "$T_DIR" "$T_PID" "$T_HASH"
    stop_target "$T_DIR" "$T_PID"
  fi
  stop_target "$da" "$pa"
fi

# ---- n. a process taken checkpointed keeps the record of its GPU memory ----
echo
echo "== n. a 4 GiB target suspended, snapshotted, restored checkpointed: its resume still checks room"
if [[ -n $dry && $cases == *n* ]]; then
  verdict SKIP "n: dry run: the fake libcuda keeps no state (every pid runs) and has no NVML"
elif skip_unless 60 n && start_target n 4096; then
  d=$T_DIR p=$T_PID h=$T_HASH
  ck n-suspend 120 --toggle --pid "$p"
  [[ $rc == 0 && $(state "$p") == checkpointed ]]
  check "n: suspended by --toggle" $? "exit $rc"
  snap=$bin/snap-n
  ck n-snapshot 240 snapshot --pid "$p" --dir "$snap" --json
  mib=$(jv "$bin/n-snapshot.out" 'j["processes"][0]["cuda"]["gpuMemoryMiB"]')
  snap_ok n-snapshot && [[ $(jv "$bin/n-snapshot.out" 'j["processes"][0]["cuda"]["state"]') == checkpointed && $mib == *GPU-* ]]
  check "n: the snapshot took it checkpointed, its GPU memory known from the record: $mib" $? "exit $rc"
  wait_gone "$p"
  ck n-restore 240 restore-snapshot --dir "$snap" --json
  snap_ok n-restore && [[ $(state "$p") == checkpointed ]]
  check "n: restore-snapshot brought it back checkpointed" $? "exit $rc, $(state "$p")"
  filler_start 2048
  echo "   a filler of $fill MiB; free now $(free_mib) MiB"
  ck n-refused 120 --toggle --pid "$p" --json
  [[ $rc == 1 && $(jv "$bin/n-refused.out" 'j["error"]["code"]') == NO_ROOM && $(state "$p") == checkpointed ]]
  check "n: its resume refused NO_ROOM before the driver: the restore kept its record" $? "exit $rc"
  filler_end
  ck n-resume 120 --toggle --pid "$p" --json
  [[ $rc == 0 && $(jv "$bin/n-resume.out" 'j["roomCheck"]') == checked ]]
  check "n: with room: resumed, its room checked" $? "exit $rc"
  intact n "$d" "$p" "$h"
  rm -rf "$snap"
  stop_target "$d" "$p"
fi

# ---- summary ----
echo
echo "== times (each command's own ms, from its --json)"
printf '   %-10s %8s %12s %12s %14s\n' case MiB "snapshot ms" "restore ms" "image bytes"
while read -r label mib sms rms bytes; do
  printf '   %-10s %8s %12s %12s %14s (%s)\n' "$label" "$mib" "$sms" "$rms" "$bytes" "$(gb "$bytes")"
done <"$bin/times.txt"
if compgen -G "$bin/logs/*" >/dev/null; then
  tar -C "$bin" -czf "$out/snapshot-$rt-logs.tgz" logs && echo "criu's logs of the failures: $out/snapshot-$rt-logs.tgz"
fi
verdict_summary "$bin/verdicts.txt" "$rt${dry:+, DRY RUN: fake libcuda, stand-in targets}"
