#!/usr/bin/env bash
# Whether the driver restores (and unlocks) a checkpointed CUDA process that is SIGSTOPped, as a
# held tree is until its images' digests matched (issue 32: could the GPU restore overlap the
# digests?). NVIDIA's utility (.carry/cuda-checkpoint) on a PyTorch process of 1 GiB, once running
# and once stopped, each step timed; then the stopped one let go and its tensor checked. One GPU:
#   timeout 200 bash tests/gpu/exp/restore_stopped.sh
set -u
N=$PWD/.carry/cuda-checkpoint
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
d=$(mktemp -d)
target() {
  python3 -c "
import torch, time, sys
x = torch.full((256 * 2**20,), 7.0, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True)
for line in sys.stdin:
    print('sum', float(x.sum()), flush=True)
" <"$1" >"$2" 2>&1 &
  echo $!
}
ms() { local t0=$(date +%s%N); timeout 60 "$@"; local rc=$?; echo "  $* -> rc $rc in $((($(date +%s%N) - t0) / 1000000)) ms"; }
for how in running stopped; do
  mkfifo "$d/in-$how"; exec {fd}<>"$d/in-$how"
  p=$(target "$d/in-$how" "$d/out-$how")
  for i in $(seq 100); do grep -q ready "$d/out-$how" && break; sleep 0.2; done
  echo "== $how: pid $p $(cat "$d/out-$how")"
  ms "$N" --action lock --pid "$p"; ms "$N" --action checkpoint --pid "$p"
  echo "  state: $("$N" --get-state --pid "$p")"
  [[ $how == stopped ]] && kill -STOP "$p" && echo "  SIGSTOP: $(awk '{print $3}' /proc/$p/stat)"
  ms "$N" --action restore --pid "$p"; echo "  state: $(timeout 10 "$N" --get-state --pid "$p")"
  ms "$N" --action unlock --pid "$p"; echo "  state: $(timeout 10 "$N" --get-state --pid "$p")"
  [[ $how == stopped ]] && echo "  still stopped: $(awk '{print $3}' /proc/$p/stat)" && kill -CONT "$p"
  echo go >&$fd; sleep 2; echo "  after: $(tail -1 "$d/out-$how")"
  kill "$p"; exec {fd}>&-
done
rm -rf "$d"
