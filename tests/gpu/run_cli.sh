#!/usr/bin/env bash
# Issue 8, part 7: our compiled cuda-checkpoint side by side with NVIDIA's utility on real CUDA
# processes. On the GPU machine, from the repo root, with these carried (64 MiB in all; name the
# files, not all of .carry/): .carry/cuda-checkpoint (NVIDIA's), .carry/cuda-checkpoint-ours.xz
# (bash cli/carry.sh). No Deno or Bun: our binary is Bun too (BUN_BE_BUN=1), and runs the
# TypeScript here with it.
#
#   bash tests/gpu/run_cli.sh            # ~3-5 min; on one GPU the device-map part is skipped
#   bash tests/gpu/run_cli.sh --simulate # the dry run without a GPU: dist/cuda-checkpoint (or
#                                        # OURS_BIN) against a second copy of itself, on the
#                                        # simulated machine
#
# 1. unpacks ours to /tmp/ckpt/cuda-checkpoint, NVIDIA's to /tmp/ckpt/nvidia/cuda-checkpoint, builds
#    tests/gpu/target.cu; 2. tests/gpu/cli.ts compare: every operation and bad input, NVIDIA's and
#    ours on the same process in the same state: stdout, stderr, exit code and state after equal;
#    3. cli.ts map: restore onto the other GPU with --device-map (two GPUs); 4. cli.ts many: several
#    pids, --all-or-nothing, list, --json (ours only); 5. bench/cli_startup.ts: start-up, 20 rounds.
# Every check is one line PASS/FAIL/SKIP; the summary at the end counts them. Log: $OUT/log-cli.txt;
# reports: $OUT/cli-report.md, $OUT/cli-startup-*.md/.json (without $OUT: tests/gpu/out).
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
simulate=
case ${1:-} in
  --simulate) simulate=1 ;;
  "") ;;
  *) echo "usage: bash tests/gpu/run_cli.sh [--simulate]"; exit 2 ;;
esac
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt${simulate:+-sim}
budget=${RUN_CLI_BUDGET:-540} # seconds for the whole run: every step's timeout is cut to what is left
# RUN_CLI_STEPS picks steps (default all): "startup" alone measures start-up on a machine where the
# side-by-side run has been done already (NVIDIA's takes ~0.9 s a call on 4 GPUs: compare is slow there).
steps=" ${RUN_CLI_STEPS:-compare map many startup} "
mkdir -p "$out" "$bin/nvidia" "$bin/reports"
: >"$bin/verdicts.txt"
rm -f "$out/cli-report.md" "$out/log-cli.txt"
exec > >(tee -a "$out/log-cli.txt") 2>&1

verdict() { echo "$1 $2"; echo "$1 $2" >>"$bin/verdicts.txt"; }
left() { echo $((budget - SECONDS)); }
# step NAME LIMIT CMD...: runs CMD under timeout (LIMIT, or what is left of the budget), its PASS/FAIL/
# SKIP lines counted; a step that fails without a FAIL line of its own gets one.
step() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  if [[ $steps != *" ${name%% *} "* ]]; then
    echo "== $name: not in RUN_CLI_STEPS ($steps)"
    return 1
  fi
  (($(left) - 15 < limit)) && limit=$(($(left) - 15))
  if ((limit < 20)); then
    verdict SKIP "$name: no time left in the ${budget} s budget"
    return 1
  fi
  echo "== $name (timeout ${limit} s): $*"
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$bin/step.txt"
  rc=${PIPESTATUS[0]}
  grep -E '^(PASS|FAIL|SKIP) ' "$bin/step.txt" >>"$bin/verdicts.txt"
  echo "== $name: rc=$rc after $((SECONDS - t0)) s"
  if ((rc != 0)) && ! grep -q '^FAIL ' "$bin/step.txt"; then
    verdict FAIL "$name: exited $rc$( ((rc == 124 || rc == 137)) && echo " (timed out after $limit s)")"
  fi
  return "$rc"
}

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/run_cli.sh${simulate:+ --simulate} (budget ${budget} s)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,persistence_mode \
  --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"

# 1. The programs and the target.
if [[ -n $simulate ]]; then
  built=${OURS_BIN:-dist/cuda-checkpoint}
  [[ -x $built ]] || { verdict FAIL "setup: no $built (bash cli/build.sh)"; exit 1; }
  cp "$built" "$bin/cuda-checkpoint"
  cp "$built" "$bin/nvidia/cuda-checkpoint" # a stand-in: ours again
else
  if [[ ! -f .carry/cuda-checkpoint-ours.xz || ! -f .carry/cuda-checkpoint ]]; then
    verdict FAIL "setup: carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh) and .carry/cuda-checkpoint (NVIDIA's)"
    exit 1
  fi
  if ! { xz -dc .carry/cuda-checkpoint-ours.xz >"$bin/cuda-checkpoint.tmp" &&
    chmod +x "$bin/cuda-checkpoint.tmp" && mv "$bin/cuda-checkpoint.tmp" "$bin/cuda-checkpoint"; }; then
    verdict FAIL "setup: unpacking .carry/cuda-checkpoint-ours.xz"
    exit 1
  fi
  cp .carry/cuda-checkpoint "$bin/nvidia/cuda-checkpoint" && chmod +x "$bin/nvidia/cuda-checkpoint"
fi
ours=$bin/cuda-checkpoint
nvidia=$bin/nvidia/cuda-checkpoint
v=$(timeout 30 "$ours" --version 2>&1)
if [[ $v == *"@ckpt/cuda"* ]]; then
  verdict PASS "setup: ours runs: $v"
else
  verdict FAIL "setup: ours --version said: $v"
  exit 1
fi
echo "bun inside ours: $(BUN_BE_BUN=1 timeout 30 "$ours" --version 2>&1)"
echo "NVIDIA's: $(ls -l "$nvidia"); its -h begins: $(timeout 30 "$nvidia" -h 2>&1 | head -2 | tr '\n' ' ')"
if [[ -z $simulate ]]; then
  t0=$SECONDS
  if timeout 180 nvcc -O2 -o "$bin/target" tests/gpu/target.cu; then
    verdict PASS "setup: nvcc built tests/gpu/target.cu in $((SECONDS - t0)) s"
  else
    verdict FAIL "setup: nvcc tests/gpu/target.cu"
    exit 1
  fi
fi
common=(--ours "$ours" --nvidia "$nvidia" --call-timeout-ms 30000 --report "$out/cli-report.md")
if [[ -n $simulate ]]; then common+=(--simulate); else common+=(--target "$bin/target"); fi
cli=(env BUN_BE_BUN=1 "$ours" tests/gpu/cli.ts)

# 2-4. Side by side, the device map, several pids.
step "compare (NVIDIA's and ours on the same process)" 300 "${cli[@]}" compare "${common[@]}"
step "map (--device-map across two GPUs)" 150 "${cli[@]}" map "${common[@]}"
step "many (several pids, list, --json)" 120 "${cli[@]}" many "${common[@]}"

# 5. Start-up: whole program, spawn to exit, 20 rounds (the benchmark's goals become PASS/FAIL).
startup=(--ours "$ours" --nvidia "$nvidia" --rounds "${RUN_CLI_ROUNDS:-20}" --out "$bin/reports")
[[ -z $simulate ]] && startup+=(--target "$bin/target")
rm -f "$bin/reports"/cli-startup-*
step "startup (bench/cli_startup.ts)" 150 env BUN_BE_BUN=1 "$ours" --preload "$PWD/tests/gpu/unset_bun_be_bun.ts" \
  bench/cli_startup.ts "${startup[@]}"
rc=$?
[[ -z $simulate && $rc == 0 ]] && verdict PASS "startup: both programs gave the same answers in every round"
while IFS= read -r line; do
  case $line in
    *"-> met") verdict PASS "startup: ${line#goal: }" ;;
    *"-> NOT met") verdict FAIL "startup: ${line#goal: }" ;;
  esac
done < <(grep '^goal: ' "$bin/step.txt")
for f in "$bin/reports"/cli-startup-*; do [[ -f $f ]] && cp "$f" "$out/" && echo "copied $f to $out"; done

verdict_summary "$bin/verdicts.txt" "${simulate:+SIMULATED dry run}"
