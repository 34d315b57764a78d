#!/usr/bin/env bash
# The examples' fill after the simulator makes a kernel's output when needed and fillPattern writes
# 32-bit words (issue 32): self_checkpoint.ts on the GPU at 16 and 1024 MiB (the kernel's bytes
# against the host's pattern, PASS), then bench/sim_speed.ts on this 16-core host, Bun, virtual
# clock, this tree against the one before (484b781) taking turns. One GPU,
# .carry/cuda-checkpoint-ours.xz (its Bun runs this tree's TypeScript):
#   timeout 500 bash tests/gpu/exp/sim_speed_gpu.sh
set -u
. tests/gpu/setup.sh # exp_session: $out, $d, our binary's Bun on PATH, the log
exp_session
for mib in 16 1024; do
  timeout 120 bun examples/self_checkpoint.ts --buffer-mib "$mib" >"$d/ex" 2>&1
  echo "== self_checkpoint.ts --buffer-mib $mib on the GPU: exit $?"
  grep -E "^(Device|Kernel output|Buffer hash|PASS|FAIL)" "$d/ex"
done
mkdir "$d/base"
if git archive 484b781 | tar -x -C "$d/base"; then base=(--baseline "$d/base"); else base=(); fi
timeout 330 bun bench/sim_speed.ts --runtimes bun --no-real --rounds 3 "${base[@]}" \
  --label gpu-host-made --out "$out"
echo "== sim_speed exit $?"
