#!/usr/bin/env bash
# A snapshot taken where the driver hides the target's GPU, on a two-GPU machine, as root, from the
# repo root:
#
#   bash tests/gpu/exp/hidden_gpu.sh
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/criu-cuda.tgz. A 256 MiB
# target on GPU 0; `snapshot` run with CUDA_VISIBLE_DEVICES=1, so that the driver lists GPU 1 only
# while NVML sees the target's memory on GPU 0: a manifest its own restore refuses. Expected: the
# snapshot is refused before it suspends anything (PREREQUISITE, naming the GPU; a build of
# 2026-11-30 refused to write the manifest after the dump, WRITE_FAILED, and put the target back;
# before that, it ended the target and wrote that manifest: the restore refused it, the process was
# lost). The target running, memory intact. OURS_XZ: another build of ours to unpack. About 20 s.
. "$(dirname "$0")/session.sh" hidden-gpu
(($(nvidia-smi -L | grep -c "^GPU ") >= 2)) || fail_setup "needs two GPUs"
trap 'end_started target' EXIT

CUDA_VISIBLE_DEVICES=0 start_target h 256 || fail_setup "the target did not start"
p=$T_PID h=$T_HASH d=$T_DIR
CUDA_VISIBLE_DEVICES=1 timeout 120 "${CK[@]}" snapshot --pid "$p" --dir "$bin/snap" --json \
  >"$bin/snap.json" 2>"$bin/snap.err"
rc=$?
echo "snapshot with CUDA_VISIBLE_DEVICES=1: exit $rc; $(head -c 900 "$bin/snap.json")"
g0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
[[ $rc == 1 ]] && grep -q '"code":"PREREQUISITE"' "$bin/snap.json" && grep -q "$g0" "$bin/snap.json"
check "the snapshot was refused before the suspend (PREREQUISITE, naming $g0)" $?
[[ ! -e $bin/snap/manifest.json ]]
check "no manifest written" $?
s=$(timeout 60 "${CK[@]}" --get-state --pid "$p" 2>&1)
a=$(ask "$d" hash 60)
[[ $s == running && $a == "hash $h" ]]
check "the target was put back: $s, memory intact: $a (ready $h)" $?
if [[ -e $bin/snap/manifest.json ]]; then
  timeout 120 "${CK[@]}" restore-snapshot "$bin/snap" --json >"$bin/restore.json" 2>&1
  echo "restore-snapshot of what was written: exit $?; $(head -c 600 "$bin/restore.json")"
fi
verdict_summary "$bin/verdicts.txt" hidden-gpu
