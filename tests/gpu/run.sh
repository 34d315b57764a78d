#!/usr/bin/env bash
# The GPU proof, for one runtime per run (the two runtimes together are over the 64 MiB a run may
# carry). On the GPU machine, from the repo root, with .carry/ carried:
#   bash tests/gpu/run.sh deno      (or bun)
# Builds the CUDA target, measures a CUDA context's GPU memory, runs the GPU tests, the conformance
# run (states, codes and times against the simulator), a self-checkpoint made together with
# another process's, the example and the parallel benchmark, each under timeout, and leaves logs
# and reports in $OUT (or tests/gpu/out).
set -uo pipefail
rt=${1:-deno}
out=${OUT:-tests/gpu/out}
mkdir -p "$out" /tmp/ckpt
exec > >(tee -a "$out/log-$rt.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) runtime $rt"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv,noheader
xz -dc ".carry/$rt.xz" > "/tmp/ckpt/$rt" && chmod +x "/tmp/ckpt/$rt" && export PATH=/tmp/ckpt:$PATH
"$rt" --version | head -1
timeout 120 nvcc -O2 -o /tmp/ckpt/target tests/gpu/target.cu || { echo "nvcc failed"; exit 1; }
run() { echo "== $*"; timeout "${STEP_TIMEOUT:-300}" "$@"; echo "== rc=$?"; }
# The GPU memory one CUDA process holds beyond its own allocation (its context), as nvidia-smi
# reports it, for the simulator's context model.
context_memory() {
  for mib in 16 1024; do
    coproc T { /tmp/ckpt/target cuda "$mib"; }
    read -r ready <&"${T[0]}"
    pid=$(cut -d' ' -f2 <<<"$ready")
    sleep 1
    echo "context: target with $mib MiB: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep "^$pid,")"
    echo exit >&"${T[1]}"
    wait "$T_PID" 2>/dev/null
  done
}
[ "$rt" = deno ] && context_memory
if [ "$rt" = deno ]; then
  run deno test -A --no-check tests/gpu/gpu_test.ts
  run deno run -A tests/gpu/conformance.ts /tmp/ckpt/target "$out"
  run deno run -A tests/gpu/self_concurrent.ts /tmp/ckpt/target
  run deno run -A examples/self_checkpoint.ts
  run deno run -A bench/parallel.ts /tmp/ckpt/target 4 4096
else
  run bun test ./tests/gpu/gpu_test.ts
  run bun tests/gpu/conformance.ts /tmp/ckpt/target "$out"
  run bun tests/gpu/self_concurrent.ts /tmp/ckpt/target
  run bun examples/self_checkpoint.ts
  run bun bench/parallel.ts /tmp/ckpt/target 4 4096
fi
echo "== done"
