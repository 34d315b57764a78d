#!/usr/bin/env bash
# The launcher of a tests/gpu/nccl/rank.py job (issue 30, part B): one bash parent and WORLD ranks
# as its children, rank r on GPU r, so that the job is one process tree (a snapshot of the parent
# takes every rank; its connections between ranks are inside the snapshot). Started by
# tests/gpu/nccl_job.sh in a session of its own:
#
#   launch.sh DIR WORLD PORT [rank.py's arguments...]
#
# Rank r reads its commands from DIR/r<r>.cmd (a fifo made here) and writes DIR/r<r>.out and
# DIR/r<r>.err; with --reference among the arguments no fifo is given. The environment (NCCL_*,
# PYTHON) passes to the ranks as it is. The parent waits for every rank and exits with the first
# failure's status.
set -u
dir=$1 world=$2 port=$3
shift 3
here=$(dirname "$(readlink -f "$0")")
fifo=1
for a in "$@"; do [[ $a == --reference ]] && fifo=; done
export WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# PyTorch's TCPStore on libuv (its thread pt_tcpstore_uv) maps an io_uring, which criu cannot dump;
# the older TCPStore maps none (one H200, 2026-11-29: tests/gpu/reports/nccl-job-h200x2-session5.txt).
export USE_LIBUV=${USE_LIBUV:-0}
pids=()
for ((r = 0; r < world; r++)); do
  extra=()
  if [[ -n $fifo ]]; then
    rm -f "$dir/r$r.cmd"
    mkfifo "$dir/r$r.cmd"
    extra=(--fifo "$dir/r$r.cmd")
  fi
  RANK=$r LOCAL_RANK=$r "${PYTHON:-python3}" "$here/rank.py" "$@" "${extra[@]}" \
    </dev/null >"$dir/r$r.out" 2>"$dir/r$r.err" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p"
  s=$?
  ((status == 0 && s != 0)) && status=$s
done
exit "$status"
