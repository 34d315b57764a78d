#!/usr/bin/env bash
# PyTorch processes on the GPU machine (issue 31): training, inference with CUDA graphs and
# torch.compile, and an inference server, suspended in place, taken to disk and back, side by side
# with NVIDIA's README workflow, and through the room check. From the repo root, as root:
#
#   bash tests/gpu/pytorch.sh bun|deno [CASE...] [--sizes=MIB,MIB] [--rounds=N]
#
# bun: our compiled binary (carry .carry/cuda-checkpoint-ours.xz: bash cli/carry.sh); deno: deno
# run -A cli/main.ts (carry .carry/deno.xz). And criu: .carry/criu-dev-cuda.tgz (criu 4.2, which
# dumps inet sockets on kernel 6.18) where carried, else .carry/criu-cuda.tgz (4.1.1: the two
# server cases then SKIP); PT_CRIU_TGZ names another. NVIDIA's utility (.carry/cuda-checkpoint)
# for "versus", else that case runs NVIDIA's workflow with our --toggle and says so. python3 with
# torch is the machine's own. Log $OUT/pytorch-<rt>.txt, report $OUT/pytorch-<rt>-report.md,
# criu's logs and the targets' stderr of failures $OUT/pytorch-<rt>-logs.tgz.
#
# Cases (default: every one but example; the training cases at each of --sizes, default 1024,4096;
# 16384 is opt-in: --sizes=16384, with PT_SNAP_DIR on a disk with room, or only toggle and room):
#   toggle     tests/gpu/pytorch/train.py (N MiB of weights, SGD with momentum, every RNG, a data
#              loader): 2 steps, `cuda-checkpoint --toggle` twice; its whole state bit for bit as
#              before, then one more step as the reference run that was never checkpointed (the
#              same program with --reference, run first, alone). GPU memory (NVML), RSS running
#              and checkpointed, the times.
#   snapshot   the same through `snapshot --pid P --dir D --json` and `restore-snapshot --dir D
#              --json`: the same pid back, state bit for bit, training goes on; image bytes, times.
#   versus     one process, taken to disk and back 2 x --rounds times, by ours (snapshot,
#              restore-snapshot) and NVIDIA's README workflow made durable (--toggle, criu dump,
#              sync; criu restore --restore-detached, --toggle) in turns; every phase timed, the
#              state checked after each round (PT_VERSUS_SIZES, default the first size).
#   room       the room check with PyTorch's caching allocator: what torch.cuda.memory_reserved,
#              NVML and our record say the process holds; a filler (tests/gpu/target.cu fill)
#              leaves too little: the resume refused before the driver (NO_ROOM, the exact line),
#              still checkpointed; once the filler is gone, resumed, state bit for bit; then what
#              torch.cuda.empty_cache() gives back (PT_ROOM_SIZES, default the first size).
#   infer      tests/gpu/pytorch/infer.py (PT_INFER_MIB, default 1024): a CUDA graph replayed and a
#              torch.compile'd function (said plainly where compile is unavailable); their outputs
#              bit for bit after --toggle and after a snapshot; the compile caches it maps; then a
#              restore with those caches moved away (criu needs the files it maps) and put back.
#   listen     tests/gpu/pytorch/server.py (PT_SERVER_MIB, default 256) listening on 127.0.0.1:
#              asked, snapshotted while it listens, restored: it answers on the same port, the
#              model intact.
#   connected  the server and a client holding a connection to it (client.py hold), children of
#              one bash parent, snapshotted together: NEEDS criu's --tcp-established. With
#              PT_TCP_ARGS (words added to our snapshot and restore-snapshot, such as
#              --tcp-established) through the command line; without, through the library
#              (tests/gpu/pytorch/snap_lib.ts, openMachine({ criu: { extraArgs } })) with
#              PT_TCP_CRIU_ARGS, default --tcp-established, and --network-lock=skip where there
#              is no iptables-restore (both ends are in the snapshot: nothing can send while it
#              dumps; measured on the H200, which has neither iptables nor nft). After the
#              restore the held connection answers again, and a new client is served.
#   example    examples/pytorch.ts --pid P on a training process (with this runtime): PASS, state
#              bit for bit, training goes on.
# Timing: PT_BUDGET (default 450 s) skips a case that no longer fits, saying so. About 5 minutes
# for the default on one H200 (estimated, not yet measured).
#
# Dry run without a GPU: PT_DRY_RUN=1 runs the Python targets with --fake (no torch), a bash
# stand-in of our --toggle and --get-state (SIGSTOP and SIGCONT), and no criu: it checks the
# script's mechanics, never the driver; the snapshot cases SKIP.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh # alive, taken, ask, wait_gone, ready_line, end_started
. tests/gpu/setup.sh   # unxz_to, unpack_tgz, build_target

usage() {
  echo "usage: bash tests/gpu/pytorch.sh bun|deno [toggle|snapshot|versus|room|infer|listen|connected|example|all]... [--sizes=MIB,...] [--rounds=N]"
}
rt=${1:-}
case $rt in
  bun | deno) shift ;;
  *) usage; exit 2 ;;
esac
ALL="toggle snapshot versus room infer listen connected example"
cases=""
sizes=${PT_SIZES:-1024 4096}
rounds=${PT_ROUNDS:-2}
for a in "$@"; do
  case $a in
    --sizes=*) sizes=${a#--sizes=}; sizes=${sizes//,/ } ;;
    --rounds=*) rounds=${a#--rounds=} ;;
    all) cases="$ALL" ;;
    toggle | snapshot | versus | room | infer | listen | connected | example) cases="$cases $a" ;;
    *) usage; exit 2 ;;
  esac
done
cases=${cases:-toggle snapshot versus room infer listen connected}
read -r -a sizes <<<"$sizes"
read -r -a versus_sizes <<<"${PT_VERSUS_SIZES:-${sizes[0]}}"
read -r -a room_sizes <<<"${PT_ROOM_SIZES:-${sizes[0]}}"
infer_mib=${PT_INFER_MIB:-1024}
server_mib=${PT_SERVER_MIB:-256}
optim=${PT_OPTIM:-sgd}
budget=${PT_BUDGET:-450}
dry=${PT_DRY_RUN:-}
PY=${PYTHON:-python3}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-pt${dry:+-dry}
snaps=${PT_SNAP_DIR:-$bin/snaps}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=$bin/cache/inductor TRITON_CACHE_DIR=$bin/cache/triton
export TORCHINDUCTOR_COMPILE_THREADS=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
mkdir -p "$out" "$bin" "$snaps"
rm -rf "${bin:?}"/t-* "${bin:?}"/ref-* "$bin/logs" "${snaps:?}"/pt-*
mkdir -p "$bin/logs" "$bin/cache" "$bin/empty"
rm -f "$out/pytorch-$rt.txt" "$out/pytorch-$rt-report.md" "$out/pytorch-$rt-logs.tgz"
: >"$bin/verdicts.txt"
: >"$bin/figures.txt"
: >"$bin/versus.txt"
exec > >(tee -a "$out/pytorch-$rt.txt") 2>&1

fail_setup() {
  verdict FAIL "setup: $1"
  exit 1
}
left() { echo $((budget - SECONDS)); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
gb() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.2f GB", b / 1e9; else printf "? GB" }'; }
to_mib() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%d", b / 1048576; else printf "?" }'; }
# field LINE KEY: the value of KEY=value in a target's line (its first occurrence).
field() {
  local re=" $2=([^ ]*)"
  [[ " $1 " =~ $re ]] && echo "${BASH_REMATCH[1]}"
}
# jv FILE EXPR: a Python expression over j, the JSON object in FILE ("?" where it does not apply).
jv() {
  python3 -c 'import json, sys
try:
    j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    v = eval(sys.argv[2], {"j": j})
    print(v if isinstance(v, str) else json.dumps(v))
except Exception:
    print("?")' "$1" "$2"
}
has_case() { [[ " $cases " == *" $1 "* ]]; }
# fits SECONDS NAME: 0 where the budget leaves SECONDS; else a SKIP line.
fits() {
  (($(left) >= $1)) && return 0
  verdict SKIP "$2: $(left) s left of the $budget s budget (PT_BUDGET), it needs about $1 s"
  return 1
}

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/pytorch.sh $rt${dry:+ (DRY RUN: --fake targets, a stand-in of ours, no criu)}"
echo "cases: $cases; sizes: ${sizes[*]} MiB; versus ${versus_sizes[*]} MiB x $rounds rounds; room ${room_sizes[*]} MiB; budget $budget s"
describe_machine
"$PY" -c 'import torch, sys; print("python %s, torch %s (CUDA %s), %s" % (sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"))' 2>/dev/null ||
  echo "python: $("$PY" --version 2>&1), no torch"
fake=()
[[ -n $dry ]] && fake=(--fake)

# ---- setup: ours, criu, NVIDIA's utility ----
if [[ -n $dry ]]; then
  # A stand-in of ours: --get-state, --toggle (SIGSTOP / SIGCONT), --version; nothing else.
  cat >"$bin/fake-ck" <<'EOF'
#!/bin/bash
st=/tmp/ckpt-pt-dry/fake-state; mkdir -p "$st"; op= pid= json=
while (($#)); do case $1 in --pid) pid=$2; shift ;; --json) json=1 ;; --version) echo "@ckpt/cuda (dry-run stand-in)"; exit 0 ;; *) op=${op:-$1} ;; esac; shift; done
[[ -n $pid && -d /proc/$pid ]] || { echo "Error: no process $pid" >&2; exit 1; }
s=$(cat "$st/$pid" 2>/dev/null || echo running)
case $op in
  --get-state) echo "$s" ;;
  --get-restore-tid) echo "$pid" ;;
  --toggle)
    if [[ $s == running ]]; then kill -STOP "$pid"; s=checkpointed; else kill -CONT "$pid"; s=running; fi
    echo "$s" >"$st/$pid"
    [[ -z $json ]] || echo "{\"pid\":$pid,\"ok\":true,\"state\":\"$s\",\"ms\":1}" ;;
  *) echo "dry run: $op is not in the stand-in" >&2; exit 1 ;;
esac
EOF
  chmod +x "$bin/fake-ck"
  rm -rf "$bin/fake-state"
  CK=("$bin/fake-ck")
  LIB=()
else
  case $rt in
    bun)
      unxz_to .carry/cuda-checkpoint-ours.xz "$bin/cuda-checkpoint" ||
        fail_setup "unpacking .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"
      CK=("$bin/cuda-checkpoint")
      LIB=(env BUN_BE_BUN=1 "$bin/cuda-checkpoint" --preload ./tests/gpu/unset_bun_be_bun.ts)
      ;;
    deno)
      unxz_to .carry/deno.xz "$bin/deno" ||
        fail_setup "unpacking .carry/deno.xz (bash tests/gpu/tools/carry-runtimes.sh deno)"
      CK=("$bin/deno" run -A --quiet cli/main.ts)
      LIB=("$bin/deno" run -A --quiet)
      ;;
  esac
fi
v=$(timeout 120 "${CK[@]}" --version 2>&1)
[[ $v == *"@ckpt/cuda"* ]]
_rc=$?; check "setup: ours runs (${CK[*]}): $v" $_rc

criu=
if [[ -z $dry ]]; then
  setup_newest_criu "$bin/criu" "${PT_CRIU_TGZ:-}"
elif [[ -x ${CKPT_CRIU_PATH:-} ]]; then
  criu=$CKPT_CRIU_PATH
fi
# criu before 4.2 cannot dump an inet socket on kernels from 6.16 on (SO_PASSCRED; criu 4.2 mends it).
inet_ok=yes
if [[ -n $criu ]]; then
  cv=$("$criu" --version 2>/dev/null | sed -n 's/^Version: *\([0-9.]*\).*/\1/p')
  kv=$(uname -r | cut -d. -f1,2)
  if [[ -z ${PT_FORCE_INET:-} ]] && [[ $(printf '%s\n' "$cv" 4.2 | sort -V | head -1) != 4.2 ]] &&
    [[ $(printf '%s\n' "$kv" 6.16 | sort -V | head -1) == 6.16 ]]; then
    inet_ok="criu $cv cannot dump an inet socket on kernel $(uname -r) (SO_PASSCRED): carry criu 4.2 (.carry/criu-dev-cuda.tgz), or PT_FORCE_INET=1 to try"
  fi
fi
NV=("${CK[@]}")
nv_name="ours (NVIDIA's utility not carried: .carry/cuda-checkpoint)"
if [[ -z $dry && -f .carry/cuda-checkpoint ]]; then
  install -m 755 .carry/cuda-checkpoint "$bin/nvidia-cuda-checkpoint"
  NV=("$bin/nvidia-cuda-checkpoint")
  nv_name="NVIDIA's utility"
fi
echo "versus: NVIDIA's README workflow with --toggle by $nv_name; snapshots in $snaps ($(df -h "$snaps" | awk 'NR == 2 { print $4 " free" }'))"

# ---- helpers ----
started=() # every pid started here: those still alive are killed at exit (only ours)
cleanup() {
  end_started "$bin/|tests/gpu/pytorch/" # the server's command line does not name $bin
  rm -rf "${snaps:?}"/pt-*
}
trap cleanup EXIT

state() { timeout 60 "${CK[@]}" --get-state --pid "$1" 2>&1 | head -2 | tr '\n' ' ' | sed 's/ $//'; }
nvml_mib() {
  [[ -n $dry ]] && { echo "?"; return; }
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
    awk -F', *' -v p="$1" '$1 == p { s += $2 } END { print s + 0 }'
}
free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | tr -d ' '; }
rss_mib() { awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"; }

# ck NAME LIMIT ARGS...: ours, stdout in $bin/NAME.out, stderr in $bin/NAME.err; sets rc and ms.
ck() {
  local name=$1 limit=$2 t0 t1 log
  shift 2
  t0=$(now)
  timeout -k 10 "$limit" "${CK[@]}" "$@" >"$bin/$name.out" 2>"$bin/$name.err"
  rc=$?
  t1=$(now)
  ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
  echo "   \$ cuda-checkpoint $* -> exit $rc in $ms ms"
  head -c 1200 "$bin/$name.out" | sed 's/^/     out| /'
  echo
  head -12 "$bin/$name.err" | sed 's/^/     err| /'
  ((rc == 124 || rc == 137)) && echo "     (timed out after $limit s)"
  if ((rc != 0)); then
    log=$(jv "$bin/$name.out" 'j["error"]["log"]')
    [[ $log != "?" && -f $log ]] && cp "$log" "$bin/logs/$name-$(basename "$log")"
  fi
  return "$rc"
}
# run_timed NAME LIMIT CMD...: any command, its output in $bin/NAME.log; sets rc and the seconds in s.
run_timed() {
  local name=$1 limit=$2 t0 t1
  shift 2
  t0=$(now)
  timeout -k 10 "$limit" "$@" >"$bin/$name.log" 2>&1
  rc=$?
  t1=$(now)
  s=$(secs "$t0" "$t1")
  echo "   \$ $* -> exit $rc in $s s"
  head -6 "$bin/$name.log" | sed 's/^/     | /'
  return "$rc"
}
keep_logs() { # DIR NAME: criu's logs of a snapshot or images directory
  local f
  for f in "$1"/tree-*/dump.log "$1"/*.log; do [[ -f $f ]] && cp "$f" "$bin/logs/$2-$(basename "$(dirname "$f")")-$(basename "$f")"; done
}

# pt_start NAME SCRIPT ARGS...: a Python target (tests/gpu/pytorch/SCRIPT) in a session of its
# own, stdin /dev/null, stdout to $bin/t-NAME/out, stderr to .../err; train.py and infer.py read
# their commands from .../cmd. Sets P_DIR, P_PID and P_READY (its ready line).
pt_start() {
  local name=$1 script=$2 child line
  shift 2
  P_DIR=$bin/t-$name P_PID='' P_READY=''
  rm -rf "$P_DIR"
  mkdir -p "$P_DIR"
  local extra=()
  if [[ $script == train.py || $script == infer.py ]]; then
    mkfifo "$P_DIR/cmd"
    extra=(--fifo "$P_DIR/cmd")
  fi
  setsid "$PY" "$PWD/tests/gpu/pytorch/$script" "$@" "${extra[@]}" "${fake[@]}" </dev/null >"$P_DIR/out" 2>"$P_DIR/err" &
  child=$!
  disown "$child" # out of the job table; bash still reaps it, so a restore finds its pid free
  if ! line=$(ready_line "$P_DIR/out" "$child" "${PT_START_S:-300}"); then
    echo "   $name did not start: $(tail -5 "$P_DIR/err" | tr '\n' ' ')"
    cp "$P_DIR/err" "$bin/logs/$name.err" 2>/dev/null
    kill -9 "$child" 2>/dev/null
    return 1
  fi
  P_READY=$line
  P_PID=$(awk '{ print $2 }' <<<"$line")
  started+=("$P_PID")
  [[ $P_PID == "$child" ]] || echo "   note: setsid forked: target $P_PID, child $child"
  echo "   $name: pid $P_PID started in $SECONDS s of the run: ${line:0:400}"
}
# pt_stop DIR PID: "exit" (a server: SIGTERM), else SIGKILL; its stderr kept where it said anything.
pt_stop() {
  local i
  [[ -s $1/err ]] && cp "$1/err" "$bin/logs/$(basename "$1").err"
  if alive "$2"; then
    kill -CONT "$2" 2>/dev/null
    if [[ -p $1/cmd ]]; then
      # shellcheck disable=SC2016
      timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$1/cmd" 2>/dev/null
    else
      kill -TERM "$2" 2>/dev/null
    fi
    for ((i = 0; i < 50; i++)); do alive "$2" || break; sleep 0.1; done
    alive "$2" && kill -9 "$2" 2>/dev/null
  fi
  rm -rf "$1"
}
# same_state WHAT BEFORE AFTER: PASS where the digest lines agree on all=; else which parts differ.
same_state() {
  local a b part diff=""
  a=$(field "$2" all) b=$(field "$3" all)
  if [[ -n $a && $a == "$b" ]]; then
    verdict PASS "$1: state bit for bit as before (weights, optimizer, RNG, loader: $a, step $(field "$3" step))"
    return 0
  fi
  for part in step weights optim rng loader; do
    [[ $(field "$2" $part) == "$(field "$3" $part)" ]] || diff="$diff $part"
  done
  verdict FAIL "$1: state changed (${diff# } differ): before '${2:0:300}', after '${3:0:300}'"
  return 1
}
# as_ref WHAT MIB LINE: PASS where LINE's digest is the reference run's at its step.
as_ref() {
  local step want got
  step=$(field "$3" step) got=$(field "$3" all)
  want=$(awk -v s="$step" '$1 == "ref" && $2 == s { print $3 }' "$bin/ref-$2.txt" 2>/dev/null)
  [[ -n $want && $got == "$want" ]]
  _rc=$?; check "$1: step $step as the run that was never checkpointed ($got; reference ${want:-none})" $_rc
}
# reference MIB STEPS: train.py --reference, alone, before the targets of that size.
reference() {
  local t0=$SECONDS
  [[ -s $bin/ref-$1.txt ]] && return 0
  timeout 600 "$PY" tests/gpu/pytorch/train.py --mib "$1" --optim "$optim" --reference "$2" "${fake[@]}" \
    >"$bin/ref-$1.txt" 2>"$bin/logs/ref-$1.err"
  local rc=$?
  grep -q '^ref-done' "$bin/ref-$1.txt"
  _rc=$?; check "ref-$1: the reference run (never checkpointed), steps 0..$2, in $((SECONDS - t0)) s" $_rc \
    "exit $rc: $(tail -3 "$bin/logs/ref-$1.err" | tr '\n' ' ')"
}
ref_steps=$((2 + 2 * rounds + 2))
# train_target LABEL MIB: a training target, checked against the reference at step 0 and after
# 2 steps; sets P_* and PRE (its digest line after the 2 steps). Fails where it did not start.
train_target() {
  reference "$2" "$ref_steps"
  pt_start "$1" train.py --mib "$2" --optim "$optim" || { verdict FAIL "$1: the target did not start"; return 1; }
  as_ref "$1: at start" "$2" "$P_READY"
  PRE=$(ask "$P_DIR" "train 2" 300)
  as_ref "$1: 2 steps" "$2" "$PRE"
}
# disk_ok LABEL PID: SKIP (1) where $snaps has less free than the process's GPU memory and RSS
# and a tenth more (what its images take).
disk_ok() {
  local need avail g r
  g=$(nvml_mib "$2") r=$(rss_mib "$2")
  [[ $g =~ ^[0-9]+$ && $r =~ ^[0-9]+$ ]] || return 0
  need=$(((g + r) * 11 / 10))
  avail=$(df -Pm "$snaps" | awk 'NR == 2 { print $4 }')
  ((avail >= need)) && return 0
  verdict SKIP "$1: its images need about $need MiB, $snaps has $avail MiB free (PT_SNAP_DIR=/dev/shm/... uses host memory)"
  return 1
}
record_of() { ls /run/ckpt-cuda/"$1"-*.json 2>/dev/null | head -1; }
record_mib() { grep -o '"GPU-[^"]*":[0-9.]*' "$1" 2>/dev/null | cut -d: -f2 | awk '{ s += $1 } END { printf "%d", s }'; }
# fig KEY=VALUE...: one line of figures for the report.
fig() { echo "$*" >>"$bin/figures.txt"; }

# ---- toggle ----
case_toggle() {
  local mib=$1 l="toggle-$1" d p g0 r0 mem0 s1 s2 gd rd after
  fits $((25 + mib / 150)) "$l" || return
  train_target "$l" "$mib" || return
  d=$P_DIR p=$P_PID
  g0=$(nvml_mib "$p") r0=$(rss_mib "$p") mem0=$(ask "$d" mem)
  echo "   before: NVML $g0 MiB, RSS $r0 MiB; torch: $mem0"
  ck "$l-suspend" 600 --toggle --pid "$p"
  s1=$ms
  [[ $rc == 0 && $(state "$p") == checkpointed ]]
  _rc=$?; check "$l: --toggle suspended it in $s1 ms: $(state "$p")" $_rc "exit $rc"
  gd=$(nvml_mib "$p") rd=$(rss_mib "$p")
  echo "   checkpointed: NVML $gd MiB, RSS $rd MiB (was $r0)"
  ck "$l-resume" 600 --toggle --pid "$p"
  s2=$ms
  [[ $rc == 0 && $(state "$p") == running ]]
  _rc=$?; check "$l: --toggle resumed it in $s2 ms: $(state "$p")" $_rc "exit $rc"
  after=$(ask "$d" digest 300)
  same_state "$l" "$PRE" "$after"
  as_ref "$l: one more step" "$mib" "$(ask "$d" "train 1" 300)"
  fig "case=toggle mib=$mib nvml=$g0 reserved=$(to_mib "$(field "$mem0" reserved)") rss=$r0 rss_ckpt=$rd suspend_ms=$s1 resume_ms=$s2 nvml_ckpt=$gd"
  pt_stop "$d" "$p"
}

# ---- snapshot ----
case_snapshot() {
  local mib=$1 l="snapshot-$1" d p snap g0 r0 sms rms bytes tim after g1
  [[ -n $criu ]] || { verdict SKIP "$l: no criu${dry:+ (dry run)}"; return; }
  fits $((40 + mib / 60)) "$l" || return
  train_target "$l" "$mib" || return
  d=$P_DIR p=$P_PID snap=$snaps/pt-$l
  disk_ok "$l" "$p" || { pt_stop "$d" "$p"; return; }
  g0=$(nvml_mib "$p") r0=$(rss_mib "$p")
  ck "$l-snap" 600 snapshot --pid "$p" --dir "$snap" --json
  [[ $rc == 0 && $(jv "$bin/$l-snap.out" 'j["ok"]') == true ]]
  _rc=$?; check "$l: snapshot --json of pid $p: ok" $_rc "exit $rc"
  sms=$(jv "$bin/$l-snap.out" 'j["ms"]') bytes=$(jv "$bin/$l-snap.out" 'j["bytes"]')
  wait_gone "$p"
  _rc=$?; check "$l: the snapshot ended it (pid $p free)" $_rc
  ck "$l-inspect" 120 inspect --dir "$snap" --json
  tim=$(jv "$bin/$l-inspect.out" '"suspend %.0f ms, dump %.0f ms" % (j["manifest"]["timings"]["suspendMs"], j["manifest"]["timings"]["dumpMs"])')
  ck "$l-restore" 600 restore-snapshot --dir "$snap" --json
  [[ $rc == 0 && $(jv "$bin/$l-restore.out" 'j["pids"]') == "[$p]" ]]
  _rc=$?; check "$l: restore-snapshot --json: pid $p back ($(jv "$bin/$l-restore.out" 'j["timings"]'))" $_rc "exit $rc"
  rms=$(jv "$bin/$l-restore.out" 'j["ms"]')
  [[ $(state "$p") == running ]]
  _rc=$?; check "$l: running again" $_rc
  after=$(ask "$d" digest 300)
  same_state "$l" "$PRE" "$after"
  as_ref "$l: one more step" "$mib" "$(ask "$d" "train 1" 300)"
  g1=$(nvml_mib "$p")
  echo "   $l: GPU $g0 MiB before, $g1 MiB after; RSS $r0 MiB; images $(gb "$bytes"); snapshot $sms ms ($tim), restore $rms ms"
  fig "case=snapshot mib=$mib nvml=$g0 nvml_after=$g1 rss=$r0 snapshot_ms=$sms restore_ms=$rms bytes=$bytes"
  ((rc != 0)) && keep_logs "$snap" "$l"
  rm -rf "$snap"
  pt_stop "$d" "$p"
}

# ---- versus: ours and NVIDIA's README workflow, in turns ----
case_versus() {
  local mib=$1 l="versus-$1" d p r side snap t0 t1 a b c e f bytes after ok pre=""
  [[ -n $criu ]] || { verdict SKIP "$l: no criu${dry:+ (dry run)}"; return; }
  fits $((30 + rounds * 2 * (12 + mib / 100))) "$l" || return
  train_target "$l" "$mib" || return
  d=$P_DIR p=$P_PID pre=$PRE
  disk_ok "$l" "$p" || { pt_stop "$d" "$p"; return; }
  for ((r = 1; r <= 2 * rounds; r++)); do
    side=ours
    ((r % 2 == 0)) && side=theirs
    snap=$snaps/pt-$l-$r
    rm -rf "$snap"
    echo "   -- round $r: $side"
    if [[ $side == ours ]]; then
      ck "$l-$r-snap" 600 snapshot --pid "$p" --dir "$snap" --json
      ok=$rc a=$(awk -v m="$ms" 'BEGIN { printf "%.2f", m / 1000 }')
      bytes=$(jv "$bin/$l-$r-snap.out" 'j["bytes"]')
      wait_gone "$p"
      ck "$l-$r-inspect" 120 inspect --dir "$snap" --json
      c=$(jv "$bin/$l-$r-inspect.out" '"%.2f %.2f" % (j["manifest"]["timings"]["suspendMs"] / 1000, j["manifest"]["timings"]["dumpMs"] / 1000)')
      ck "$l-$r-restore" 600 restore-snapshot --dir "$snap" --json
      ((ok == 0)) && ok=$rc
      b=$(awk -v m="$ms" 'BEGIN { printf "%.2f", m / 1000 }')
      e=$(jv "$bin/$l-$r-restore.out" '"%.2f %.2f" % (j["timings"]["restoreMs"] / 1000, j["timings"]["resumeMs"] / 1000)')
      echo "$mib $r ours snapshot=$a (suspend+dump ${c/ /+}) restore=$b (criu+resume ${e/ /+}) bytes=$bytes" >>"$bin/versus.txt"
      [[ $ok == 0 ]]
      _rc=$?; check "$l-$r: ours: snapshot $a s, restore-snapshot $b s, $(gb "$bytes")" $_rc
    else
      run_timed "$l-$r-toggle1" 600 "${NV[@]}" --toggle --pid "$p"
      ok=$rc a=$s
      mkdir -p "$snap"
      t0=$(now)
      timeout -k 10 600 "$criu" dump --shell-job --images-dir "$snap" --tree "$p" --libdir "$bin/empty" -v4 -o dump.log \
        >"$bin/$l-$r-dump.log" 2>&1
      rc=$?
      t1=$(now)
      ((ok == 0)) && ok=$rc
      b=$(secs "$t0" "$t1")
      echo "   criu dump -> exit $rc in $b s"
      run_timed "$l-$r-sync" 300 sync
      c=$s
      wait_gone "$p"
      bytes=$(du -sb "$snap" 2>/dev/null | cut -f1)
      t0=$(now)
      timeout -k 10 600 "$criu" restore --shell-job --restore-detached --images-dir "$snap" --libdir "$bin/empty" -v4 -o restore.log \
        >"$bin/$l-$r-crestore.log" 2>&1
      rc=$?
      t1=$(now)
      ((ok == 0)) && ok=$rc
      e=$(secs "$t0" "$t1")
      echo "   criu restore -> exit $rc in $e s; state $(state "$p")"
      run_timed "$l-$r-toggle2" 600 "${NV[@]}" --toggle --pid "$p"
      ((ok == 0)) && ok=$rc
      f=$s
      echo "$mib $r theirs snapshot=$(awk -v x="$a" -v y="$b" -v z="$c" 'BEGIN { printf "%.2f", x + y + z }') (toggle+dump+sync $a+$b+$c) restore=$(awk -v x="$e" -v y="$f" 'BEGIN { printf "%.2f", x + y }') (criu+toggle $e+$f) bytes=$bytes" >>"$bin/versus.txt"
      [[ $ok == 0 ]]
      _rc=$?; check "$l-$r: theirs: --toggle $a s, criu dump $b s, sync $c s; criu restore $e s, --toggle $f s; $(gb "$bytes")" $_rc
      ((ok != 0)) && keep_logs "$snap" "$l-$r"
    fi
    ((ok != 0)) && [[ $side == ours ]] && keep_logs "$snap" "$l-$r"
    rm -rf "$snap"
    [[ $(state "$p") == running ]]
    _rc=$?; check "$l-$r: $side: running again" $_rc
    [[ $(state "$p") == running ]] || break
    after=$(ask "$d" digest 300)
    same_state "$l-$r" "$pre" "$after" || break
    pre=$(ask "$d" "train 1" 300)
    as_ref "$l-$r: one more step" "$mib" "$pre"
  done
  pt_stop "$d" "$p"
}

# ---- room ----
case_room() {
  local mib=$1 l="room-$1" d p m1 m2 g1 r1 rd rec held fill fpid line m3 g3 m4 g4
  fits $((45 + mib / 100)) "$l" || return
  train_target "$l" "$mib" || return
  d=$P_DIR p=$P_PID
  m1=$(ask "$d" mem)
  m2=$(ask "$d" "scratch $((mib / 2))")
  g1=$(nvml_mib "$p") r1=$(rss_mib "$p")
  echo "   torch after training: allocated $(to_mib "$(field "$m1" allocated)") MiB, reserved $(to_mib "$(field "$m1" reserved)") MiB"
  echo "   after a $((mib / 2)) MiB scratch tensor, freed: allocated $(to_mib "$(field "$m2" allocated)") MiB, reserved $(to_mib "$(field "$m2" reserved)") MiB (the cache keeps it)"
  ck "$l-suspend" 600 --toggle --pid "$p" --json
  [[ $rc == 0 && $(state "$p") == checkpointed ]]
  _rc=$?; check "$l: --toggle suspended it ($ms ms)" $_rc "exit $rc"
  rd=$(rss_mib "$p")
  rec=$(record_of "$p") held=$(record_mib "$rec")
  echo "   record $rec: $(cat "$rec" 2>/dev/null)"
  echo "   held: torch reserved $(to_mib "$(field "$m2" reserved)") MiB, NVML $g1 MiB, record ${held:-?} MiB; RSS $r1 MiB running, $rd MiB checkpointed"
  if [[ -n $dry ]]; then
    verdict SKIP "$l: the record, the filler and the refusal (dry run: no NVML, no records)"
  else
    [[ -n $held && $held -ge $(to_mib "$(field "$m2" reserved)") ]]
    _rc=$?; check "$l: the record ($held MiB) covers what the caching allocator reserved ($(to_mib "$(field "$m2" reserved)") MiB)" $_rc
    [[ -n $held ]] && ((held - g1 <= 2 && g1 - held <= 2))
    _rc=$?; check "$l: the record ($held MiB) is what NVML said before the suspend ($g1 MiB)" $_rc
    if [[ -z $target ]]; then
      timeout 180 nvcc -O2 -o "$bin/target" tests/gpu/target.cu >"$bin/logs/nvcc.log" 2>&1 &&
        target=$bin/target
      _rc=$?; check "$l: nvcc built tests/gpu/target.cu (the filler)" $_rc
      [[ -n $target ]] || { pt_stop "$d" "$p"; return; }
    fi
    fill=$(($(free_mib) - ${held:-0} / 2))
    rm -f "$bin/fill.in"
    mkfifo "$bin/fill.in"
    "$target" fill "$fill" <"$bin/fill.in" >"$bin/filler.out" 2>&1 &
    fpid=$!
    started+=("$fpid")
    exec 4>"$bin/fill.in"
    for _ in $(seq 150); do grep -q '^ready' "$bin/filler.out" && break; sleep 0.2; done
    echo "   filler: pid $fpid holds $fill MiB; free now $(free_mib) MiB (the process held ${held:-?})"
    ck "$l-refused" 120 --toggle --pid "$p"
    line=$(cat "$bin/$l-refused.err")
    [[ $rc == 1 && $line == *"not enough free GPU memory"* ]]
    _rc=$?; check "$l: resume refused: exit $rc: $line" $_rc
    ck "$l-refused-json" 120 --toggle --pid "$p" --json
    [[ $rc == 1 && $(jv "$bin/$l-refused-json.out" 'j["error"]["code"]') == NO_ROOM ]]
    _rc=$?; check "$l: --json says $(jv "$bin/$l-refused-json.out" 'j["error"]["code"]')" $_rc "exit $rc"
    [[ $(state "$p") == checkpointed && -f $rec ]]
    _rc=$?; check "$l: still checkpointed, its record kept" $_rc
    echo exit >&4
    exec 4>&-
    wait "$fpid"
    echo "   filler gone; free now $(free_mib) MiB"
  fi
  ck "$l-resume" 600 --toggle --pid "$p" --json
  [[ $rc == 0 && $(state "$p") == running ]] && { [[ -n $dry ]] || grep -q '"roomCheck":"checked"' "$bin/$l-resume.out"; }
  _rc=$?; check "$l: resumed once there is room, the room checked ($ms ms)" $_rc "exit $rc"
  same_state "$l" "$PRE" "$(ask "$d" digest 300)"
  m3=$(ask "$d" mem) g3=$(nvml_mib "$p")
  [[ $(field "$m3" reserved) == "$(field "$m2" reserved)" ]]
  _rc=$?; check "$l: the caching allocator holds what it held (reserved $(to_mib "$(field "$m3" reserved)") MiB; NVML $g3 MiB, was $g1)" $_rc
  as_ref "$l: one more step" "$mib" "$(ask "$d" "train 1" 300)"
  m4=$(ask "$d" empty_cache) g4=$(nvml_mib "$p")
  echo "   torch.cuda.empty_cache(): reserved $(to_mib "$(field "$m4" reserved)") MiB, NVML $g4 MiB (was $g3): what a suspend would no longer copy"
  fig "case=room mib=$mib allocated=$(to_mib "$(field "$m1" allocated)") reserved=$(to_mib "$(field "$m2" reserved)") nvml=$g1 record=${held:-?} rss=$r1 rss_ckpt=$rd reserved_emptied=$(to_mib "$(field "$m4" reserved)") nvml_emptied=$g4"
  pt_stop "$d" "$p"
}
target=

# ---- infer ----
case_infer() {
  local l=infer d p g0 c0 w0 ans snap maps moved
  fits 150 "$l" || return
  PT_START_S=400 pt_start "$l" infer.py --mib "$infer_mib" --compile-mode "${PT_COMPILE_MODE:-default}" ||
    { verdict FAIL "$l: the target did not start"; return; }
  d=$P_DIR p=$P_PID
  g0=$(field "$P_READY" graph) c0=$(field "$P_READY" compiled) w0=$(field "$P_READY" weights)
  echo "   $(grep -m1 '^note compile' "$d/out")"
  if [[ $(field "$P_READY" compile) == ok ]]; then
    verdict PASS "$l: torch.compile works here: $(grep -m1 '^note compile' "$d/out" | cut -d' ' -f3-)"
  else
    verdict SKIP "$l: torch.compile $(grep -m1 '^note compile' "$d/out" | cut -d' ' -f3-): the compiled half ran EAGERLY"
  fi
  echo "   graph replay equals an eager forward pass, bit for bit: $(field "$P_READY" graph_eq_eager)"
  maps=$(grep -E "$bin/cache" "/proc/$p/maps" 2>/dev/null | awk '{ print $6 }' | sort -u)
  echo "   files of the compile caches it maps: $(grep -c . <<<"${maps:-}")${maps:+:}"
  [[ -n $maps ]] && sed 's/^/     /' <<<"$maps"
  [[ -n $maps ]] || echo "   (none: the cache probe below is left out)"
  infer_same() { # WHAT: the answer of "infer" has the ready line's digests
    ans=$(ask "$d" infer 120)
    [[ $(field "$ans" graph) == "$g0" && $(field "$ans" compiled) == "$c0" && $(field "$ans" weights) == "$w0" ]]
    _rc=$?; check "$l: $1: graph replay, compiled output and weights bit for bit as at start ($(field "$ans" replays) replays)" $_rc "$ans"
  }
  infer_same "before"
  ck "$l-suspend" 300 --toggle --pid "$p"
  ck "$l-resume" 300 --toggle --pid "$p"
  [[ $(state "$p") == running ]]
  _rc=$?; check "$l: --toggle twice: $(state "$p")" $_rc
  infer_same "after --toggle"
  if [[ -z $criu ]]; then
    verdict SKIP "$l: snapshot: no criu${dry:+ (dry run)}"
  elif disk_ok "$l" "$p"; then
    snap=$snaps/pt-$l
    ck "$l-snap" 600 snapshot --pid "$p" --dir "$snap" --json
    wait_gone "$p"
    ck "$l-restore" 600 restore-snapshot --dir "$snap" --json
    [[ $rc == 0 && $(state "$p") == running ]]
    _rc=$?; check "$l: snapshot and restore-snapshot: $(state "$p")" $_rc "exit $rc"
    infer_same "after a snapshot"
    rm -rf "$snap"
    if [[ -n $maps && ${PT_CACHE_PROBE:-1} == 1 ]] && alive "$p"; then
      # criu restores a mapped file by its path: the caches moved away, the restore must fail and
      # put nothing in place; put back, it goes through.
      ck "$l-snap2" 600 snapshot --pid "$p" --dir "$snap" --json
      _rc=$?; check "$l: a second snapshot, for the cache probe" $_rc "exit $rc"
      if ((_rc == 0)); then
        wait_gone "$p"
        moved=$bin/cache-moved
        rm -rf "$moved"
        mv "$bin/cache" "$moved"
        ck "$l-restore-nocache" 600 restore-snapshot --dir "$snap" --json
        echo "   restore without the caches: exit $rc: $(jv "$bin/$l-restore-nocache.out" 'j.get("error", {}).get("message", "ok")' | head -c 600)"
        [[ $rc != 0 ]] && ! taken "$p"
        _rc=$?; check "$l: with its compile caches moved away, the restore fails and leaves pid $p free" $_rc \
          "$(ps -o pid=,stat=,ppid=,args= -p "$p" | head -c 300)"
        mv "$moved" "$bin/cache"
        if ! alive "$p"; then
          ck "$l-restore2" 600 restore-snapshot --dir "$snap" --json
          [[ $rc == 0 ]]
          _rc=$?; check "$l: the caches put back: restore-snapshot ok" $_rc "exit $rc"
        fi
      fi
      infer_same "after the second restore"
      rm -rf "$snap"
    fi
  fi
  pt_stop "$d" "$p"
}

# ---- listen ----
case_listen() {
  local l=listen d p port w0 o0 a1 a2 snap
  [[ $inet_ok == yes ]] || { verdict SKIP "$l: $inet_ok"; return; }
  fits 50 "$l" || return
  pt_start "$l" server.py --mib "$server_mib" || { verdict FAIL "$l: the server did not start"; return; }
  d=$P_DIR p=$P_PID port=$(field "$P_READY" port) w0=$(field "$P_READY" weights) o0=$(field "$P_READY" out0)
  a1=$(timeout 60 "$PY" tests/gpu/pytorch/client.py ask --port "$port" --seed 0 2>&1)
  [[ $(field "$a1" weights) == "$w0" && $(field "$a1" out) == "$o0" ]]
  _rc=$?; check "$l: answers on 127.0.0.1:$port: $a1" $_rc
  if [[ -z $criu ]]; then
    verdict SKIP "$l: the snapshot: no criu${dry:+ (dry run)}"
    pt_stop "$d" "$p"
    return
  fi
  snap=$snaps/pt-$l
  ck "$l-snap" 300 snapshot --pid "$p" --dir "$snap" --json
  [[ $rc == 0 ]]
  _rc=$?; check "$l: snapshot while it listens: ok" $_rc "exit $rc"
  wait_gone "$p"
  a2=$(timeout 20 "$PY" tests/gpu/pytorch/client.py ask --port "$port" --timeout 5 2>&1)
  echo "   while it is on disk: $a2"
  ck "$l-restore" 300 restore-snapshot --dir "$snap" --json
  [[ $rc == 0 ]]
  _rc=$?; check "$l: restore-snapshot: ok" $_rc "exit $rc"
  a2=$(timeout 60 "$PY" tests/gpu/pytorch/client.py ask --port "$port" --seed 0 2>&1)
  [[ $(field "$a2" weights) == "$w0" && $(field "$a2" out) == "$o0" && $(field "$a2" pid) == "$p" && $(field "$a2" served) == 2 ]]
  _rc=$?; check "$l: answers again on the same port, the same pid, the model intact: $a2" $_rc
  ((rc != 0)) && keep_logs "$snap" "$l"
  rm -rf "$snap"
  pt_stop "$d" "$p"
}

# ---- connected ----
case_connected() {
  local l=connected t parent sp cp port w0 o0 i r0 r1 a snap via
  [[ $inet_ok == yes ]] || { verdict SKIP "$l: $inet_ok"; return; }
  fits 60 "$l" || return
  t=$bin/t-$l
  rm -rf "$t"
  mkdir -p "$t/s" "$t/c"
  mkfifo "$t/c/cmd"
  # shellcheck disable=SC2016 # the parent's own $1..$5
  setsid bash -c '
    "$1" "$2/server.py" --mib "$3" $5 </dev/null >"$4/s/out" 2>"$4/s/err" &
    for i in $(seq 3000); do grep -q "^ready " "$4/s/out" && break; sleep 0.1; done
    port=$(sed -n "s/^ready .* port=\([0-9]*\) .*/\1/p" "$4/s/out")
    "$1" "$2/client.py" hold --port "$port" --fifo "$4/c/cmd" </dev/null >"$4/c/out" 2>"$4/c/err" &
    wait' pt-connected-parent "$PY" "$PWD/tests/gpu/pytorch" "$server_mib" "$t" "${fake[*]}" </dev/null >"$t/parent.out" 2>&1 &
  parent=$!
  disown "$parent"
  started+=("$parent")
  for ((i = 0; i < 3000; i++)); do grep -q '^reply ' "$t/c/out" 2>/dev/null && break; alive "$parent" || break; sleep 0.1; done
  sp=$(awk '/^ready / { print $2; exit }' "$t/s/out") cp=$(field "$(grep -m1 '^connected' "$t/c/out")" pid)
  started+=("$sp" "$cp")
  port=$(field "$(grep -m1 '^ready' "$t/s/out")" port) w0=$(field "$(grep -m1 '^ready' "$t/s/out")" weights)
  o0=$(field "$(grep -m1 '^ready' "$t/s/out")" out0)
  r0=$(grep -m1 '^reply ' "$t/c/out")
  [[ -n $r0 && $(field "$r0" weights) == "$w0" ]]
  _rc=$?; check "$l: parent $parent, server $sp on port $port, client $cp: $(grep -m1 '^connected' "$t/c/out"); $r0" $_rc
  ((_rc == 0)) || { kill -9 "$parent" "$sp" "$cp" 2>/dev/null; return; }
  if [[ -z $criu ]]; then
    verdict SKIP "$l: the snapshot: no criu${dry:+ (dry run)}"
    r1=$(ask "$t/c" "ask 0" 60)
    echo "   the held connection, asked again: $r1"
    kill -9 "$parent" "$sp" "$cp" 2>/dev/null
    return
  fi
  snap=$snaps/pt-$l
  if [[ -n ${PT_TCP_ARGS:-} ]]; then
    via="ours with PT_TCP_ARGS=$PT_TCP_ARGS"
    # shellcheck disable=SC2086 # PT_TCP_ARGS: words
    ck "$l-snap" 300 snapshot --pid "$parent" --dir "$snap" --json $PT_TCP_ARGS
    # shellcheck disable=SC2086
    [[ $rc == 0 ]] && wait_gone "$parent" "$sp" "$cp" && ck "$l-restore" 300 restore-snapshot --dir "$snap" --json $PT_TCP_ARGS
  else
    local extra=() w words=${PT_TCP_CRIU_ARGS:-}
    if [[ -z $words ]]; then
      # criu holds the connection's traffic while it dumps, with iptables; without it, nothing
      # can send meanwhile anyway: both ends are in the snapshot (docs/PYTORCH.md).
      words=--tcp-established
      command -v iptables-restore >/dev/null || words="$words --network-lock=skip"
    fi
    for w in $words; do extra+=("--criu-arg=$w"); done
    via="the library (snap_lib.ts), criu args: $words"
    run_timed "$l-snap" 300 "${LIB[@]}" tests/gpu/pytorch/snap_lib.ts snapshot --dir "$snap" --pid "$parent" "${extra[@]}"
    [[ $rc == 0 ]] && wait_gone "$parent" "$sp" "$cp" &&
      run_timed "$l-restore" 300 "${LIB[@]}" tests/gpu/pytorch/snap_lib.ts restore --dir "$snap" "${extra[@]}"
  fi
  [[ $rc == 0 ]] && alive "$parent" && alive "$sp" && alive "$cp"
  _rc=$?; check "$l: NEEDS --tcp-established: the three to disk and back through $via" $_rc "exit $rc"
  if alive "$cp"; then
    r1=$(ask "$t/c" "ask 0" 60)
    [[ $r1 == "reply ok"* && $(field "$r1" weights) == "$w0" && $(field "$r1" out) == "$o0" && $(field "$r1" served) == 2 ]]
    _rc=$?; check "$l: the held connection answers after the restore: $r1" $_rc
  fi
  a=$(timeout 60 "$PY" tests/gpu/pytorch/client.py ask --port "$port" --seed 0 2>&1)
  [[ $(field "$a" weights) == "$w0" ]]
  _rc=$?; check "$l: a new client is served on port $port too: $a" $_rc
  if [[ $rc != 0 ]]; then
    cp "$bin/$l-snap.log" "$bin/$l-restore.log" "$bin/logs/" 2>/dev/null
    keep_logs "$snap" "$l"
  fi
  rm -rf "$snap"
  timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$t/c/cmd" 2>/dev/null
  kill -TERM "$sp" 2>/dev/null
  for ((i = 0; i < 50; i++)); do alive "$parent" || break; sleep 0.1; done
  kill -9 "$parent" "$sp" "$cp" 2>/dev/null
  cp "$t/s/err" "$bin/logs/$l-server.err" 2>/dev/null
}

# ---- example ----
case_example() {
  local mib=${sizes[0]} l=example d p snap run
  [[ -n $criu || -n $dry ]] || { verdict SKIP "$l: no criu"; return; }
  fits 60 "$l" || return
  train_target "$l" "$mib" || return
  d=$P_DIR p=$P_PID snap=$snaps/pt-$l
  if [[ -n $dry ]]; then
    run=(node_modules/.bin/deno run -A examples/pytorch.ts --driver sim --virtual-time)
  else # this runtime: our binary's Bun, or Deno
    run=("${LIB[@]}" examples/pytorch.ts --pid "$p" --dir "$snap")
  fi
  run_timed "$l" 300 "${run[@]}"
  sed 's/^/     | /' "$bin/$l.log" | tail -n +7 | head -40
  [[ $rc == 0 ]] && grep -q '^PASS' "$bin/$l.log"
  _rc=$?; check "$l: examples/pytorch.ts${dry:+ (on the simulator)}: exit $rc, $(grep -m1 -E '^(PASS|FAIL)' "$bin/$l.log")" $_rc
  [[ -n $dry ]] || same_state "$l" "$PRE" "$(ask "$d" digest 300)"
  as_ref "$l: one more step" "$mib" "$(ask "$d" "train 1" 300)"
  rm -rf "$snap"
  pt_stop "$d" "$p"
}

# ---- the run: the first size, then the other kinds, then the larger sizes ----
run_size() {
  local mib=$1
  if has_case toggle || has_case snapshot; then
    echo
    echo "== training process, $mib MiB of weights ($optim)"
  fi
  has_case toggle && case_toggle "$mib"
  has_case snapshot && case_snapshot "$mib"
  if has_case versus && [[ " ${versus_sizes[*]} " == *" $mib "* ]]; then
    echo
    echo "== versus, $mib MiB: ours (snapshot, restore-snapshot) and NVIDIA's README workflow (--toggle, criu dump, sync; criu restore, --toggle), in turns"
    case_versus "$mib"
  fi
  if has_case room && [[ " ${room_sizes[*]} " == *" $mib "* ]]; then
    echo
    echo "== room, $mib MiB: the caching allocator, NVML and the record; a resume without room refused"
    case_room "$mib"
  fi
}
run_size "${sizes[0]}"
if has_case infer; then
  echo
  echo "== inference: a CUDA graph and torch.compile ($infer_mib MiB)"
  case_infer
fi
if has_case listen; then
  echo
  echo "== an inference server listening on 127.0.0.1, snapshotted while it listens ($server_mib MiB)"
  case_listen
fi
if has_case connected; then
  echo
  echo "== the server and a client holding a connection, snapshotted together (NEEDS --tcp-established)"
  case_connected
fi
if has_case example; then
  echo
  echo "== examples/pytorch.ts on a training process"
  case_example
fi
for mib in "${sizes[@]:1}"; do run_size "$mib"; done

# ---- the report ----
{
  echo "# PyTorch processes: tests/gpu/pytorch.sh $rt"
  echo
  echo "$(date -u +%FT%TZ), $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); ${criu:+$("$criu" --version 2>/dev/null | head -1)}${dry:+ DRY RUN}"
  echo
  echo "## Each size (train.py, $optim; MiB unless said)"
  echo
  echo "| case | weights | GPU (NVML) | torch reserved | RSS | RSS checkpointed | times | images |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  while read -r line; do
    f() { field "$line" "$1"; }
    case $(f case) in
      toggle) echo "| --toggle | $(f mib) | $(f nvml) (checkpointed: $(f nvml_ckpt)) | $(f reserved) | $(f rss) | $(f rss_ckpt) | suspend $(f suspend_ms) ms, resume $(f resume_ms) ms | - |" ;;
      snapshot) echo "| snapshot | $(f mib) | $(f nvml) (after: $(f nvml_after)) | | $(f rss) | | snapshot $(f snapshot_ms) ms, restore $(f restore_ms) ms | $(gb "$(f bytes)") |" ;;
      room) echo "| room | $(f mib) | $(f nvml); record $(f record); after empty_cache $(f nvml_emptied) | $(f reserved) (allocated $(f allocated); after empty_cache $(f reserved_emptied)) | $(f rss) | $(f rss_ckpt) | | |" ;;
    esac
  done <"$bin/figures.txt"
  if [[ -s $bin/versus.txt ]]; then
    echo
    echo "## Ours and NVIDIA's README workflow, in turns (seconds, spawn to exit; theirs' --toggle by $nv_name)"
    echo
    echo '```'
    cat "$bin/versus.txt"
    echo '```'
  fi
  echo
  echo "## Verdicts"
  echo
  echo '```'
  cat "$bin/verdicts.txt"
  echo '```'
} >"$out/pytorch-$rt-report.md"
echo
echo "== figures (also in $out/pytorch-$rt-report.md)"
cat "$bin/figures.txt" "$bin/versus.txt"
if compgen -G "$bin/logs/*" >/dev/null; then
  tar -C "$bin" -czf "$out/pytorch-$rt-logs.tgz" logs && echo "logs of failures and stderr: $out/pytorch-$rt-logs.tgz"
fi
verdict_summary "$bin/verdicts.txt" "$rt${dry:+, DRY RUN}"
