#!/usr/bin/env bash
# Session 43: the code a CUDA IPC importer's restore gets once its exporter has exited, against one
# whose exporter is alive (the simulator gives OPERATING_SYSTEM for the first, INVALID_VALUE for
# the second; the driver's facts read either way). Two legacy pairs of tests/gpu/ipc/ipc_pair.py:
# each importer suspended with ours (--toggle --allow-ipc-import: it LOSES the importer's GPU
# state), then in the first pair the exporter killed (SIGKILL) and gone; then two resumes of each
# importer, their codes and states recorded. One GPU, .carry/deno.xz (.carry/cuda-checkpoint,
# NVIDIA's, optional):   timeout 240 bash tests/gpu/exp/ipc_gone.sh   (log: $OUT/ipc-gone.txt)
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh
. tests/gpu/setup.sh
bin=/tmp/ckpt-ipc-gone out=${OUT:-tests/gpu/out} PY=${PYTHON:-python3}
rm -rf "$bin"; mkdir -p "$bin" "$out"
exec > >(tee "$out/ipc-gone.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
unxz_to .carry/deno.xz "$bin/deno" || exit 1
CK=("$bin/deno" run -A --quiet cli/main.ts) NV=()
[[ -f .carry/cuda-checkpoint ]] && chmod +x .carry/cuda-checkpoint && NV=(.carry/cuda-checkpoint)
. tests/gpu/ipc/pairs.sh
for exporter in gone alive; do
  echo "-- a legacy pair, the exporter $exporter at the importer's resume"
  start legacy "$exporter" || continue
  said=$(timeout 60 "${CK[@]}" --toggle --pid "$C" --allow-ipc-import --json 2>&1)
  echo "   suspend of the importer $C: $(echo "$said" | head -1 | cut -c1-200); now $(driver "$C")"
  if [[ $exporter == gone ]]; then
    kill -9 "$P"
    for ((i = 0; i < 100; i++)); do taken "$P" || break; sleep 0.1; done
    echo "   the exporter $P killed: $(taken "$P" && echo 'still there' || echo gone); the importer $(alive "$C" && echo alive || echo gone)"
  fi
  for attempt in 1 2; do
    said=$(timeout 60 "${CK[@]}" --toggle --pid "$C" --json 2>&1)
    echo "   resume $attempt (ours): $(echo "$said" | grep -o '"codeName":"[A-Z_]*"\|"detail":"[^"]*' | head -2 | cut -c1-330 | tr '\n' ' '); now $(driver "$C")"
  done
  if ((${#NV[@]})); then
    echo "   resume 3 (NVIDIA's): $(timeout 60 "${NV[@]}" --toggle --pid "$C" 2>&1 | head -1); now $(driver "$C")"
  fi
  kill -9 "$C" "$P" 2>/dev/null
done
echo "== done"
