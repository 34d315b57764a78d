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
# About 3-6 minutes on one GPU with the defaults (ROUNDS=4: 4 minutes on an H200, 2026-11-30);
# INTEGRITY_BUDGET, default 420 s, is the benchmark's --budget-s: no round starts that would end
# after it.
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
. tests/gpu/setup.sh # criu, our binary's Bun, the target or its stand-in
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

# verdict and check: tests/gpu/verdicts.sh.
# fail_setup WHY: a FAIL and the summary; the script ends.
fail_setup() {
  verdict FAIL "setup: $1"
  verdict_summary "$bin/verdicts.txt" integrity
  exit 1
}

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/integrity.sh${dry:+ (DRY RUN: fake libcuda, stand-in targets)}"
describe_machine

# Anything of this script's left behind (a target, a criu): ended at exit, by its command line.
trap end_leftovers EXIT

# ---- setup: criu, our binary's Bun, the target ----
setup_criu
setup_bun
fifo_target
if [[ -n $dry ]]; then more+=(--libcuda "$bin/libcuda.so.1"); fi

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
