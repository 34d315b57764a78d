#!/usr/bin/env bash
# What the snapshots' integrity costs, on the GPU machine: bench/integrity.ts (issue 22's goal:
# at most 10% of the snapshot time and 15% of the restore time for 8 x 2 GiB processes, with and
# without digests taking turns; verification at 5 GB/s or more, the disk's own rate beside it),
# under the Bun of our compiled binary, as root, from the repo root, in one go:
#
#   bash tests/gpu/integrity.sh
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh: its Bun runs the benchmark, which
# uses the library of this working tree) and .carry/criu-cuda.tgz
# (bash tests/gpu/tools/carry-criu-cuda.sh; the library runs criu without its CUDA plugin).
# About 4-6 minutes on one H100 with the defaults (INTEGRITY_BUDGET, default 420 s, is the
# benchmark's --budget-s: no round starts that would end after it).
#
# Settings (environment): COUNT (8), MIB (2048), ROUNDS (2: each side twice, each first once; 4
# where the time allows), INTEGRITY_BUDGET (420), INTEGRITY_COLD (1: verify once more after
# dropping the page cache, in each run with integrity; 0: not), INTEGRITY_ARGS (more arguments for
# bench/integrity.ts, e.g. "--disk-mib 0"), INTEGRITY_TIMEOUT (540 s for the benchmark as a whole).
#
# Leaves in $OUT (or tests/gpu/out): integrity.txt (this log) and the report,
# integrity-bun-<host>.md and .json (commit them to bench/reports with a note: machine, driver,
# date, commit). Every check is one line PASS/FAIL; the summary at the end counts them (exit 1 on a
# FAIL: the setup, or the benchmark's exit status, which is 1 when a run failed or a target came
# back changed; a goal that is not met is printed, not failed).
#
# Dry run without a GPU (the mechanics only): INTEGRITY_DRY_RUN=1 builds the fake libcuda of
# tests/fixtures and a bash stand-in of target.cu's fifo mode, takes criu from $CKPT_CRIU_PATH or
# /tmp/criu/usr/sbin/criu as unpacked before, and runs the benchmark with OURS_BIN (default
# dist/cuda-checkpoint, bash cli/build.sh) as Bun, or node_modules/.bin/bun where there is none;
# COUNT 3, MIB 16, no cold verification unless set. Nothing of .carry/ is used.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
dry=${INTEGRITY_DRY_RUN:-}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-integrity${dry:+-dry}
work=$bin/work
count=${COUNT:-${dry:+3}}
count=${count:-8}
mib=${MIB:-${dry:+16}}
mib=${mib:-2048}
rounds=${ROUNDS:-2}
budget=${INTEGRITY_BUDGET:-420}
cold=${INTEGRITY_COLD:-${dry:+0}}
cold=${cold:-1}
read -r -a more <<<"${INTEGRITY_ARGS:-}"
mkdir -p "$out" "$bin"
rm -f "$out/integrity.txt" "$out"/integrity-bun-*.md "$out"/integrity-bun-*.json
: >"$bin/verdicts.txt"
exec > >(tee -a "$out/integrity.txt") 2>&1

verdict() { echo "$1 $2"; echo "$1 $2" >>"$bin/verdicts.txt"; }
# check NAME RC [WHY]: PASS where RC is 0, else FAIL (with WHY).
check() { if [[ $2 == 0 ]]; then verdict PASS "$1"; else verdict FAIL "$1${3:+: $3}"; fi; }

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/integrity.sh${dry:+ (DRY RUN: fake libcuda, stand-in targets)}"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)'); kernel $(uname -r); $(nproc) cores; $(free -g | awk '/^Mem:/ { print $2 " GiB of memory" }')"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null ||
  echo "(no nvidia-smi)"
df -h /tmp | tail -1

# Anything of this script's left behind (a target, a criu): ended at exit, by its command line.
cleanup() {
  local p
  for p in $(pgrep -f "$bin/" 2>/dev/null); do
    [[ $p == "$$" ]] && continue
    grep -qaF "$bin/" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p" 2>/dev/null
  done
  rm -rf "${work:?}"
}
trap cleanup EXIT

# ---- setup: criu, our binary's Bun, the target ----
criu=${CKPT_CRIU_PATH:-/tmp/criu/usr/sbin/criu}
if [[ -z $dry || ! -x $criu ]]; then
  criu=/tmp/criu/usr/sbin/criu
  if ! { [[ -f .carry/criu-cuda.tgz ]] && mkdir -p /tmp/criu && timeout 120 tar -C /tmp/criu -xzf .carry/criu-cuda.tgz; }; then
    verdict FAIL "setup: carry .carry/criu-cuda.tgz (bash tests/gpu/tools/carry-criu-cuda.sh)"
    verdict_summary "$bin/verdicts.txt" integrity
    exit 1
  fi
fi
c=$(timeout 60 "$criu" check 2>&1 | tail -1)
[[ $c == *"Looks good"* ]]
check "setup: $("$criu" --version 2>/dev/null | head -1) at $criu: criu check says: $c" $?

if [[ -z $dry ]]; then
  ours=$bin/cuda-checkpoint
  if ! { timeout 120 xz -dc .carry/cuda-checkpoint-ours.xz >"$ours.tmp" && chmod +x "$ours.tmp" &&
    mv "$ours.tmp" "$ours"; }; then
    verdict FAIL "setup: unpacking .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"
    verdict_summary "$bin/verdicts.txt" integrity
    exit 1
  fi
  BUN=(env BUN_BE_BUN=1 "$ours" --preload ./tests/gpu/unset_bun_be_bun.ts)
elif [[ -x ${OURS_BIN:-dist/cuda-checkpoint} ]]; then
  BUN=(env BUN_BE_BUN=1 "$(realpath "${OURS_BIN:-dist/cuda-checkpoint}")" --preload ./tests/gpu/unset_bun_be_bun.ts)
else
  BUN=("$(realpath node_modules/.bin/bun)")
fi
v=$(timeout 60 "${BUN[@]}" --version 2>&1 | head -1)
[[ $v =~ ^[0-9]+\.[0-9]+ ]]
check "setup: Bun $v (${BUN[*]})" $?

if [[ -n $dry ]]; then
  if ! timeout 120 cc -shared -fPIC -O2 -DFAKE_CUDA_DELAY_MS=20 -DFAKE_ONE_CHIP -o "$bin/libcuda.so.1" \
    tests/fixtures/fake_libcuda.c -lpthread; then
    verdict FAIL "setup: cc tests/fixtures/fake_libcuda.c"
    verdict_summary "$bin/verdicts.txt" integrity
    exit 1
  fi
  more+=(--libcuda "$bin/libcuda.so.1")
  target=$bin/stand-in-target
  # target.cu's fifo mode in bash: "ready <pid> <pid> <hash>", then "hash" and "exit" through the
  # fifo, one command per opening.
  cat >"$target" <<'EOF'
#!/bin/bash
mode=${1:-cuda} mib=${2:-16} fifo=${3:-}
if [[ $mode == fifo && -z $fifo ]]; then echo "target: fifo mode needs <MiB> <fifo path>" >&2; exit 2; fi
h=$(printf '%x' $(((mib + 1) * 2654435761)))
echo "ready $$ $$ $h"
while :; do
  [[ -p $fifo ]] || exit 0
  read -r line <"$fifo" || continue
  case $line in
    hash*) echo "hash $h" ;;
    exit*) exit 0 ;;
    *) echo "error unknown command: $line" ;;
  esac
done
EOF
  chmod +x "$target"
else
  target=$bin/target
  t0=$SECONDS
  if ! timeout 180 nvcc -O2 -o "$target" tests/gpu/target.cu; then
    verdict FAIL "setup: nvcc tests/gpu/target.cu"
    verdict_summary "$bin/verdicts.txt" integrity
    exit 1
  fi
  verdict PASS "setup: nvcc built tests/gpu/target.cu in $((SECONDS - t0)) s"
fi
[[ $("$target" fifo 2>&1) == *"fifo mode needs"* ]]
check "setup: $target has the fifo mode" $?

# ---- the benchmark ----
args=(--criu "$criu" --target "$target" --out "$out" --work "$work" --count "$count" --mib "$mib"
  --rounds "$rounds" --budget-s "$budget")
[[ $cold == 1 ]] && args+=(--cold-verify)
args+=("${more[@]}")
echo "== bench/integrity.ts ${args[*]}"
t0=$SECONDS
timeout -k 10 "${INTEGRITY_TIMEOUT:-540}" "${BUN[@]}" bench/integrity.ts "${args[@]}"
rc=$?
((rc == 124 || rc == 137)) && echo "(timed out after ${INTEGRITY_TIMEOUT:-540} s)"
check "bench/integrity.ts: every run back intact, the report written (exit $rc in $((SECONDS - t0)) s)" "$rc"
report=$(ls "$out"/integrity-bun-*.md 2>/dev/null | head -1)
[[ -n $report ]]
check "the report: ${report:-(none in $out)}" $?
[[ -n $report ]] && sed -n '/^## Goals/,/^## Every run/p' "$report"

verdict_summary "$bin/verdicts.txt" integrity
