#!/usr/bin/env bash
# A short check of the tree on the GPU after changes that touch the library's error and group
# paths: gpu_test.ts, tests/gpu/group.ts (groups, all-or-nothing, a deadline) and
# self_checkpoint.ts at 1 GiB, under our binary's Bun running this tree's TypeScript. Carry
# .carry/cuda-checkpoint-ours.xz:   timeout 280 bash tests/gpu/exp/sanity.sh   (log: $OUT/log)
set -u
. tests/gpu/setup.sh # exp_session: $out, $d, our binary's Bun on PATH, the log
exp_session
timeout 60 nvcc -O2 -o "$d/target" tests/gpu/target.cu || exit 1
timeout 100 bun test ./tests/gpu/gpu_test.ts 2>&1 | tail -6
echo "== gpu_test exit ${PIPESTATUS[0]}"
timeout 100 bun tests/gpu/group.ts "$d/target" 2>&1 | tail -4
echo "== group.ts exit ${PIPESTATUS[0]}"
timeout 60 bun examples/self_checkpoint.ts --buffer-mib 1024 2>&1 | grep -E "^(Device|Buffer hash|PASS|FAIL)"
echo "== self_checkpoint exit ${PIPESTATUS[0]}"
