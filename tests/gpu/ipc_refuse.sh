#!/usr/bin/env bash
# Issue 30, part A, proven: no suspend of a process that imported another's GPU memory reaches the
# driver, and nothing loses a process. From the repo root, as root, on one GPU:
#
#   bash tests/gpu/ipc_refuse.sh bun
#
# For each pair of tests/gpu/ipc/ipc_pair.py (legacy CUDA IPC, PyTorch's expandable segments, an
# IPC event), with our command line: --toggle of the importer, --action checkpoint of it once
# locked, --toggle --job and --all-or-nothing of the pair, snapshot of the importer's tree, each
# refused (exit 1, IPC, naming the exporter), the importer still running and reading the shared
# memory; the exporter alone suspended and resumed (it is not an importer), the importer reading
# the memory after; list. An import through a file descriptor (cumem_fd.py, NCCL's path) shows no
# sign: it is not suspended here (that would lose it), only shown unrefused by a dry look (the
# library's listing). Last, a PyTorch process started as a rank of several on this host
# (WORLD_SIZE=2) is refused unless NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 are both set, and one rank
# per host is not. Carry .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz (for the
# snapshot case; without it that case says SKIP). About 1 minute. Log $OUT/ipc-refuse-<rt>.txt.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh # alive, ask, and pairs.sh's ready_line and end_started
. tests/gpu/setup.sh   # unxz_to, describe_machine

rt=${1:-bun}
PY=${PYTHON:-python3}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-ipc-refuse
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out" "$bin"
rm -rf "${bin:?}"/p-*
: >"$bin/verdicts.txt"
exec > >(tee -a "$out/ipc-refuse-$rt.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/ipc_refuse.sh $rt"
describe_machine
unxz_to .carry/cuda-checkpoint-ours.xz "$bin/cuda-checkpoint" || { verdict FAIL "setup: carry .carry/cuda-checkpoint-ours.xz"; exit 1; }
CK=("$bin/cuda-checkpoint")
NV=()
criu=""
if [[ -f .carry/criu-cuda.tgz ]]; then
  mkdir -p /tmp/criu && tar -C /tmp/criu -xzf .carry/criu-cuda.tgz && criu=/tmp/criu/usr/sbin/criu
fi
. tests/gpu/ipc/pairs.sh

state() { timeout 30 "${CK[@]}" --get-state --pid "$1" 2>&1 | head -1; }
# refused CASE PID... -- ARGS: ours with ARGS exits 1 naming IPC and the exporter, each PID as it was.
refused() {
  local what=$1 rc said p before=() ok=0
  shift
  local pids=()
  while [[ $1 != -- ]]; do pids+=("$1"); shift; done
  shift
  for p in "${pids[@]}"; do before+=("$(state "$p")"); done
  said=$(timeout 120 "${CK[@]}" "$@" 2>&1)
  rc=$?
  echo "   ours $*: exit $rc: $(echo "$said" | head -3 | tr '\n' ' ')"
  [[ $rc == 1 && $said == *"$P"* && ($said == *IPC* || $said == *"CUDA IPC"*) ]] || ok=1
  for i in "${!pids[@]}"; do [[ $(state "${pids[$i]}") == "${before[$i]}" ]] || ok=1; done
  check "$kind: $what refused before any step, naming the exporter; every process as it was" $ok
}
reads() {
  local a
  a=$(ask "$D" digest 60 "$1")
  [[ $(field "$a" digest) == "$(field "$READY" digest)" || $kind == event ]]
  _rc=$?; check "$kind: the $1's view of the shared memory intact ($a)" $_rc
}

for kind in legacy expandable event; do
  echo
  echo "== $kind"
  start "$kind" "$kind" || { verdict FAIL "$kind: did not start"; continue; }
  refused "--toggle of the importer" "$C" -- --toggle --pid "$C"
  refused "--toggle --job of the pair" "$P" "$C" -- --toggle --job --pid "$P,$C"
  refused "--toggle --all-or-nothing of the pair" "$P" "$C" -- --toggle --all-or-nothing --pid "$P,$C"
  timeout 30 "${CK[@]}" --action lock --pid "$C" >/dev/null 2>&1
  refused "--action checkpoint of the locked importer" "$C" -- --action checkpoint --pid "$C"
  timeout 30 "${CK[@]}" --action unlock --pid "$C" >/dev/null 2>&1
  [[ $(state "$C") == running ]]
  _rc=$?; check "$kind: the importer runs again after its lock and unlock" $_rc
  if [[ -n $criu ]]; then
    CKPT_CRIU_PATH=$criu refused "snapshot of the importer" "$C" -- snapshot --pid "$C" --dir "$bin/snap-$kind"
    [[ ! -e $bin/snap-$kind/manifest.json ]]
    _rc=$?; check "$kind: the refused snapshot wrote no manifest" $_rc
  else
    verdict SKIP "$kind: snapshot refused (no .carry/criu-cuda.tgz)"
  fi
  said=$(timeout 60 "${CK[@]}" --toggle --pid "$P" 2>&1)
  _rc=$?; echo "   exporter suspended: $said"; check "$kind: the exporter alone suspends" $_rc
  [[ $(state "$P") == checkpointed ]]
  _rc=$?; check "$kind: the exporter is checkpointed" $_rc
  said=$(timeout 60 "${CK[@]}" --toggle --pid "$P" 2>&1)
  _rc=$?; echo "   exporter resumed: $said"; check "$kind: the exporter resumes" $_rc
  reads parent
  reads child
  timeout 60 "${CK[@]}" list 2>&1 | sed 's/^/   list: /'
  stop
done

echo
echo "== fd (NCCL's cuMem path: no sign; not suspended, which would lose it)"
if start fd fd; then
  echo "   $(timeout 60 "${CK[@]}" list --json 2>&1 | grep -E "\"pid\":($P|$C)[,}]" | tr '\n' ' ')"
  verdict SKIP "fd: an import through a file descriptor leaves no sign: not refused, and not suspended here (docs/API.md#shared-gpu-memory)"
  stop
fi

echo
echo "== nccl: a PyTorch process as a rank of a job, told by its environment (docs/API.md#jobs)"
# env... : a PyTorch process holding GPU memory, started with the environment given; sets N.
torch_rank() {
  rm -f "$bin/rank.out"
  env "$@" "$PY" -c 'import os, torch, time; x = torch.ones(1 << 20, device="cuda"); print("ready", os.getpid(), flush=True); time.sleep(600)' \
    >"$bin/rank.out" 2>&1 &
  N=$!
  ready_line "$bin/rank.out" "$N" 30 >/dev/null
}
for env in "WORLD_SIZE=2" "LOCAL_WORLD_SIZE=4 WORLD_SIZE=8 NCCL_P2P_DISABLE=1" \
  "WORLD_SIZE=2 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" "LOCAL_WORLD_SIZE=1 WORLD_SIZE=8"; do
  # shellcheck disable=SC2086 # env: words
  torch_rank $env || { verdict FAIL "nccl $env: the process did not start: $(tail -3 "$bin/rank.out")"; continue; }
  if ! grep -q 'libnccl[^/]*\.so' "/proc/$N/maps"; then
    verdict SKIP "nccl $env: this PyTorch does not load libnccl as a library of its own"
  elif [[ $env != *SHM_DISABLE=1* && $env != "LOCAL_WORLD_SIZE=1 "* ]]; then
    said=$(timeout 60 "${CK[@]}" --toggle --pid "$N" 2>&1)
    rc=$?
    echo "   ours --toggle: exit $rc: $(head -c 400 <<<"$said")"
    [[ $rc == 1 && $said == *"NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"* && $(state "$N") == running ]]
    _rc=$?; check "nccl $env: --toggle refused before any step, saying what to set; it runs" $_rc
  else
    timeout 60 "${CK[@]}" --toggle --pid "$N" && [[ $(state "$N") == checkpointed ]] &&
      timeout 60 "${CK[@]}" --toggle --pid "$N" && [[ $(state "$N") == running ]]
    _rc=$?; check "nccl $env: not refused: suspended and resumed" $_rc
  fi
  kill -9 "$N" 2>/dev/null; wait "$N" 2>/dev/null
done
verdict_summary "$bin/verdicts.txt" "$rt"
