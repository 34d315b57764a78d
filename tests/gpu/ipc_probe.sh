#!/usr/bin/env bash
# Issue 30, part A: what tells a process that imported another's GPU memory apart, before anything
# changes. On driver 580 such an importer suspends, then never restores (docs/DRIVER.md,
# "Processes that share GPU memory"), so a tool must
# refuse it up front: this probe records every sign a rule could use. From the repo root, as root:
#
#   bash tests/gpu/ipc_probe.sh bun|deno [KIND...] [--destructive[=KIND,...]]
#
# KINDs (default all): lone (a PyTorch process sharing nothing, the control); legacy (a PyTorch
# parent hands a CUDA tensor to a child through torch.multiprocessing: CUDA IPC); expandable (the
# same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the cuMem path); event (only an
# interprocess CUDA event is shared); fd (no PyTorch: cuMemCreate with a POSIX file descriptor
# handle, exported, passed over a unix socket, imported: tests/gpu/ipc/cumem_fd.py). For each
# process of each kind, nothing suspended: /proc/<pid>/maps (/dev/nvidia*, /dev/shm, memfd,
# anon_inode, CUDA libraries), /proc/<pid>/fd, the /dev/shm/cuda.shm.* files and who holds and
# maps them, NVML's memory per process, and the driver's state and restore thread (ours'
# --get-state and --get-restore-tid; NVIDIA's too where .carry/cuda-checkpoint is carried), then
# the digest each process reads of the shared memory (the importer reads what the exporter
# wrote). tests/gpu/ipc/signs.py collects and sums them up, with candidate rules checked.
#
# --destructive runs the confirmation once per KIND given (default legacy,fd) on a throwaway
# pair: the importer suspended with our --toggle, then resumed with --toggle; every exit code,
# message and state recorded; then the exporter's memory checked and the pair killed. That LOSES
# the importer's GPU state (as measured on 580): never on a process that matters.
#
# Carry .carry/cuda-checkpoint-ours.xz (bun) or .carry/deno.xz (deno); .carry/cuda-checkpoint
# (NVIDIA's) is optional. About 1-2 minutes (each pair starts two Pythons with torch); estimated,
# not yet measured. Log $OUT/ipc-probe-<rt>.txt; the report a reader turns into a detection rule:
# $OUT/ipc-probe-<rt>-report.txt; the JSON of every process's signs: $OUT/ipc-probe-<rt>-signs.tgz.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh # alive, ask, and pairs.sh's ready_line and end_started
. tests/gpu/setup.sh   # unxz_to

rt=${1:-}
case $rt in
  bun | deno) shift ;;
  *) echo "usage: bash tests/gpu/ipc_probe.sh bun|deno [lone|legacy|expandable|event|fd]... [--destructive[=KIND,...]]"; exit 2 ;;
esac
kinds=()
destructive=()
for a in "$@"; do
  case $a in
    --destructive) destructive=(legacy fd) ;;
    --destructive=*) IFS=, read -r -a destructive <<<"${a#--destructive=}" ;;
    lone | legacy | expandable | event | fd) kinds+=("$a") ;;
    *) echo "unknown argument: $a"; exit 2 ;;
  esac
done
((${#kinds[@]})) || kinds=(lone legacy expandable event fd)
for k in "${destructive[@]}"; do
  [[ $k == legacy || $k == expandable || $k == event || $k == fd ]] || { echo "--destructive: $k has no importer"; exit 2; }
done
PY=${PYTHON:-python3}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-ipc
report=$out/ipc-probe-$rt-report.txt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out" "$bin"
rm -rf "${bin:?}"/p-* "$bin"/signs-*.json
rm -f "$out/ipc-probe-$rt.txt" "$report" "$out/ipc-probe-$rt-signs.tgz"
: >"$bin/verdicts.txt"
exec > >(tee -a "$out/ipc-probe-$rt.txt") 2>&1

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/ipc_probe.sh $rt: ${kinds[*]}${destructive[*]:+; destructive: ${destructive[*]}}"
describe_machine
"$PY" -c 'import torch, sys; print("python %s, torch %s (CUDA %s)" % (sys.version.split()[0], torch.__version__, torch.version.cuda))' 2>&1 | tail -1
case $rt in
  bun)
    unxz_to .carry/cuda-checkpoint-ours.xz "$bin/cuda-checkpoint" || { verdict FAIL "setup: carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"; exit 1; }
    CK=("$bin/cuda-checkpoint")
    ;;
  deno)
    unxz_to .carry/deno.xz "$bin/deno" || { verdict FAIL "setup: carry .carry/deno.xz"; exit 1; }
    CK=("$bin/deno" run -A --quiet cli/main.ts)
    ;;
esac
v=$(timeout 120 "${CK[@]}" --version 2>&1)
[[ $v == *"@ckpt/cuda"* ]]
_rc=$?; check "setup: ours runs: $v" $_rc
NV=()
if [[ -f .carry/cuda-checkpoint ]]; then
  install -m 755 .carry/cuda-checkpoint "$bin/nvidia-cuda-checkpoint"
  NV=("$bin/nvidia-cuda-checkpoint")
fi
{
  echo "Processes that share GPU memory: the signs (tests/gpu/ipc_probe.sh $rt)"
  echo "$(date -u +%FT%TZ), $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
  "$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null
  echo "Nothing below was suspended unless the section says DESTRUCTIVE."
  echo
} >"$report"

. tests/gpu/ipc/pairs.sh # start, stop, driver, field, cleanup

# ---- the signs, nothing suspended ----
for kind in "${kinds[@]}"; do
  echo
  echo "== $kind"
  start "$kind" "$kind" || { verdict FAIL "$kind: did not start"; continue; }
  roles=(--role "$P=$([[ $kind == lone ]] && echo lone || echo "$kind-exporter")")
  drv=(--driver "$P=$(driver "$P")")
  if [[ -n $C ]]; then
    roles+=(--role "$C=$kind-importer")
    drv+=(--driver "$C=$(driver "$C")")
  fi
  timeout 120 "$PY" tests/gpu/ipc/signs.py --label "$kind" "${roles[@]}" "${drv[@]}" --json "$bin/signs-$kind.json" >"$bin/signs-$kind.txt"
  _rc=$?; check "$kind: signs recorded ($(grep -c '^-- pid' "$bin/signs-$kind.txt") processes)" $_rc
  cat "$bin/signs-$kind.txt" >>"$report"
  sed 's/^/   /' "$bin/signs-$kind.txt"
  pd=$(field "$READY" digest)
  a=$(ask "$D" digest 60 parent)
  [[ $(field "$a" digest) == "$pd" ]]
  _rc=$?; check "$kind: the $([[ -n $C ]] && echo exporter || echo process) reads its memory as written ($a)" $_rc
  if [[ -n $C && $kind != event ]]; then
    a=$(ask "$D" digest 60 child)
    [[ $(field "$a" digest) == "$pd" ]]
    _rc=$?; check "$kind: the importer reads the exporter's memory ($a)" $_rc
  fi
  echo >>"$report"
  stop
done

echo
echo "== summary of the signs"
{
  echo "=== summary"
  timeout 60 "$PY" tests/gpu/ipc/signs.py --summary "$bin"/signs-*.json
  echo
} | tee -a "$report"

# ---- the destructive confirmation ----
for kind in "${destructive[@]}"; do
  echo
  echo "== DESTRUCTIVE: $kind: the importer suspended, then resumed (a throwaway pair)"
  start "$kind" "d-$kind" || { verdict FAIL "destructive $kind: did not start"; continue; }
  {
    echo "=== DESTRUCTIVE: $kind (exporter $P, importer $C)"
    echo "before: importer $(driver "$C"), exporter $(driver "$P")"
    for step in suspend resume; do
      t0=$(date +%s.%N)
      o=$(timeout 120 "${CK[@]}" --toggle --pid "$C" 2>&1)
      rc=$?
      echo "ours --toggle ($step) of the importer: exit $rc in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s: ${o:-(nothing)}"
      echo "  then: importer $(driver "$C")"
    done
    if ((${#NV[@]})) && [[ $(timeout 60 "${CK[@]}" --get-state --pid "$C" 2>&1) == checkpointed ]]; then
      o=$(timeout 120 "${NV[@]}" --toggle --pid "$C" 2>&1)
      rc=$?
      echo "NVIDIA's --toggle of the importer: exit $rc: ${o:-(nothing)}; then: $(driver "$C")"
    fi
    a=$(ask "$D" digest 60 parent)
    echo "the exporter afterwards: $(driver "$P"); its memory: $a (as written: $(field "$READY" digest))"
    echo
  } >"$bin/d-$kind.txt" # not a pipe: $a is read below
  tee -a "$report" <"$bin/d-$kind.txt"
  s=$(timeout 60 "${CK[@]}" --get-state --pid "$C" 2>&1 | head -1)
  # Either outcome is what the probe is for: recorded, not judged (on 580 the importer is lost).
  verdict PASS "destructive $kind: recorded: the importer $([[ $s == running ]] && echo "CAME BACK, running" || echo "did not come back: $s") (the report has every answer)"
  [[ $(field "$a" digest) == "$(field "$READY" digest)" ]]
  _rc=$?; check "destructive $kind: the exporter's memory is intact after its importer's suspend ($a)" $_rc
  kill -9 "$C" 2>/dev/null
  stop
done

tar -C "$bin" -czf "$out/ipc-probe-$rt-signs.tgz" $(cd "$bin" && ls signs-*.json 2>/dev/null) 2>/dev/null
echo "report: $report"
verdict_summary "$bin/verdicts.txt" "$rt"
