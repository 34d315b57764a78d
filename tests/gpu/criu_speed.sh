#!/usr/bin/env bash
# Our snapshot restore with criu 4.1.1 against a newer criu, on the GPU machine (issue 23, item 3):
# bench/criu_restore.ts under the Bun of our compiled binary, as root, from the repo root, in one
# go:
#
#   bash tests/gpu/criu_speed.sh
#
# Carry .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh: its Bun runs the benchmark, which uses
# the library of this working tree), .carry/criu-cuda.tgz (criu 4.1.1, side A, unpacked to
# /tmp/criu-a) and .carry/criu-dev-cuda.tgz (the newer criu, side B, unpacked to /tmp/criu-b; both
# from bash tests/gpu/tools/carry-criu-cuda.sh, CRIU_OUT names the second). The library runs each
# criu without its CUDA plugin. For each configuration (CASES): fresh targets (target.cu in fifo
# mode), one snapshot with A, then the same images restored by A and by B taking turns (ROUNDS
# each), every target checked intact after each restore, the disk's own read rate of the images
# beside them; images removed after each configuration (8 x 2 GiB make 22-37 GB, the disk has 64).
# About 6-7 minutes on one H100 with the defaults (an 8 GiB snapshot takes about 20 s, its restore
# 11 s from the page cache and 13 s cold with criu 4.1.1). CRIU_SPEED_BUDGET (default 480 s) is
# shared among the configurations still to run: each gets what is left over those left as its
# benchmark's --budget-s (no round starts that would end after it), and one that would get less
# than 60 s is skipped (SKIP).
#
# Settings (environment):
#   CASES              "1x8192w 1x8192c 8x2048w 8x2048c": COUNTxMIB, w (the page cache warm) or
#                      c (dropped before every restore); the first is the 2x goal's
#   ROUNDS             2: each side restores twice per configuration, each first once
#   CRIU_A_ARGS, CRIU_B_ARGS   more criu options for that side's dumps and restores (the library's
#                      extraArgs; e.g. what the newer criu needs for its fast restore)
#   WARM_DIGESTS       1: the store checks every image's digest before a restore (as shipped)
#   COLD_DIGESTS       0: cold, without digests, so that criu reads the images from the disk (with
#                      them the check reads every image first and criu reads the page cache)
#   SNAPSHOT_WITH      auto: A takes the snapshot; B takes its own if it cannot restore A's
#   CRIU_SPEED_BUDGET  480 (s), CRIU_SPEED_ARGS (more arguments for every benchmark run)
#
# Leaves in $OUT (or tests/gpu/out): criu_speed.txt (this log) and a report per configuration,
# criu-restore-<COUNT>x<MIB>-<warm|cold>-bun-<host>.md and .json (commit them to bench/reports
# with a note: machine, driver, criu versions, date, commit). Every check is one line PASS/FAIL/SKIP;
# the summary at the end counts them and prints one line per configuration (exit 1 on a FAIL: the
# setup, or a benchmark's exit status, which is 1 when a restore failed or a target came back
# changed; a goal that is not met is printed, not failed).
#
# Dry run without a GPU (the mechanics only): CRIU_SPEED_DRY_RUN=1 builds the fake libcuda of
# tests/fixtures and a bash stand-in of target.cu's fifo mode; criu A is $CRIU_A, else
# $CKPT_CRIU_PATH, else /tmp/criu/usr/sbin/criu as unpacked before (else .carry/criu-cuda.tgz is
# unpacked), and criu B is $CRIU_B, else the same binary; the benchmark runs with OURS_BIN (default
# dist/cuda-checkpoint, bash cli/build.sh) as Bun, or node_modules/.bin/bun where there is none;
# CASES "1x16w 2x16c" unless set, a budget of 120 s.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/setup.sh # our binary's Bun, the target or its stand-in
dry=${CRIU_SPEED_DRY_RUN:-}
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt-criu-speed${dry:+-dry}
work=$bin/work
cases=${CASES:-${dry:+1x16w 2x16c}}
cases=${cases:-1x8192w 1x8192c 8x2048w 8x2048c}
rounds=${ROUNDS:-2}
budget=${CRIU_SPEED_BUDGET:-${dry:+120}}
budget=${budget:-480}
warm_digests=${WARM_DIGESTS:-1}
cold_digests=${COLD_DIGESTS:-0}
read -r -a more <<<"${CRIU_SPEED_ARGS:-}"
mkdir -p "$out" "$bin"
rm -f "$out/criu_speed.txt" "$out"/criu-restore-*-bun-*.md "$out"/criu-restore-*-bun-*.json
: >"$bin/verdicts.txt"
exec > >(tee -a "$out/criu_speed.txt") 2>&1

# verdict and check: tests/gpu/verdicts.sh.
# fail_setup WHY: a FAIL and the summary; the script ends.
fail_setup() {
  verdict FAIL "setup: $1"
  verdict_summary "$bin/verdicts.txt" criu_speed
  exit 1
}

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/criu_speed.sh${dry:+ (DRY RUN: fake libcuda, stand-in targets)}"
describe_machine
echo "cases: $cases; rounds $rounds; budget $budget s; digests warm $warm_digests, cold $cold_digests"

# Anything of this script's left behind (a target, a criu): ended at exit, by its command line.
trap end_leftovers EXIT

# ---- setup: the two criu, our binary's Bun, the target ----
if [[ -n $dry ]]; then
  criu_a=${CRIU_A:-${CKPT_CRIU_PATH:-/tmp/criu/usr/sbin/criu}}
  if [[ ! -x $criu_a ]]; then
    unpack_tgz .carry/criu-cuda.tgz /tmp/criu-a fresh || fail_setup "no criu: set CRIU_A, or carry .carry/criu-cuda.tgz"
    criu_a=/tmp/criu-a/usr/sbin/criu
  fi
  criu_b=${CRIU_B:-$criu_a}
else
  unpack_tgz .carry/criu-cuda.tgz /tmp/criu-a fresh ||
    fail_setup "unpacking .carry/criu-cuda.tgz (criu 4.1.1: bash tests/gpu/tools/carry-criu-cuda.sh)"
  unpack_tgz .carry/criu-dev-cuda.tgz /tmp/criu-b fresh ||
    fail_setup "unpacking .carry/criu-dev-cuda.tgz (the newer criu: CRIU_OUT=.carry/criu-dev-cuda.tgz bash tests/gpu/tools/carry-criu-cuda.sh)"
  criu_a=/tmp/criu-a/usr/sbin/criu criu_b=/tmp/criu-b/usr/sbin/criu
fi
for side in A B; do
  [[ $side == A ]] && c=$criu_a || c=$criu_b
  v=$(timeout 60 "$c" --version 2>&1 | tr '\n' ' ' | sed 's/ *$//')
  said=$(timeout 60 "$c" check --no-default-config 2>&1 | tail -1)
  [[ $said == *"Looks good"* ]]
  check "setup: criu $side at $c: ${v:-(no version)}; criu check says: $said" $?
done

setup_bun

fifo_target
if [[ -n $dry ]]; then more+=(--libcuda "$bin/libcuda.so.1"); fi

# ---- the configurations ----
read -r -a list <<<"$cases"
start=$SECONDS
left_cases=${#list[@]}
for c in "${list[@]}"; do
  if [[ ! $c =~ ^([0-9]+)x([0-9]+)([wc])$ ]]; then
    verdict FAIL "case $c: not COUNTxMIB followed by w or c"
    ((left_cases--))
    continue
  fi
  count=${BASH_REMATCH[1]} mib=${BASH_REMATCH[2]} cache=${BASH_REMATCH[3]}
  left=$((budget - (SECONDS - start)))
  share=$((left / left_cases))
  ((left_cases--))
  echo
  [[ $cache == c ]] && how="dropped before each restore" || how="warm"
  echo "== case $c: $count x $mib MiB, the page cache $how; $share s of the $left s left"
  if ((share < 60)); then
    verdict SKIP "case $c: $share s of the budget for it (CRIU_SPEED_BUDGET $budget s)"
    continue
  fi
  args=(--criu-a "$criu_a" --criu-b "$criu_b" --target "$target" --out "$out" --work "$work"
    --count "$count" --mib "$mib" --rounds "$rounds" --budget-s "$share"
    --snapshot-with "${SNAPSHOT_WITH:-auto}")
  [[ -n ${CRIU_A_ARGS:-} ]] && args+=("--criu-a-args=$CRIU_A_ARGS")
  [[ -n ${CRIU_B_ARGS:-} ]] && args+=("--criu-b-args=$CRIU_B_ARGS")
  if [[ $cache == c ]]; then
    args+=(--cold --digests "$( ((cold_digests)) && echo on || echo off)")
  else
    args+=(--digests "$( ((warm_digests)) && echo on || echo off)")
  fi
  args+=("${more[@]}")
  echo "== bench/criu_restore.ts ${args[*]}"
  # A round that starts just before its share's end may run past it (a round more), but the
  # whole stays within the budget and a minute: under the GPU machine's 10 minutes a command.
  limit=$((share + 150))
  ((limit > left + 60)) && limit=$((left + 60))
  t0=$SECONDS
  timeout -k 10 "$limit" "${BUN[@]}" bench/criu_restore.ts "${args[@]}"
  rc=$?
  ((rc == 124 || rc == 137)) && echo "(timed out after $limit s)"
  name=criu-restore-${count}x${mib}-$([[ $cache == c ]] && echo cold || echo warm)
  check "case $c: bench/criu_restore.ts: every restore back intact, the report written (exit $rc in $((SECONDS - t0)) s)" "$rc"
  report=$(ls "$out/$name"-bun-*.md 2>/dev/null | head -1)
  [[ -n $report ]]
  check "case $c: the report: ${report:-(none in $out)}" $?
  [[ -n $report ]] && sed -n '/^## Goals/,/^## Every run/p' "$report"
  rm -rf "${work:?}"
done

# ---- one line per configuration ----
echo
echo "== criu's part and the whole restore per configuration (medians, s), from the reports"
python3 - "$out" <<'EOF' || echo "(no summary: python3 failed)"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "criu-restore-*-bun-*.json"))):
    j = json.load(open(f))
    c = j["config"]
    rows = {r[0]: r for r in j["tables"][0]["rows"]}
    a, b = rows.get("A"), rows.get("B")
    cold = [g for g in j["goals"][1:3] if g["value"] is not None]
    print(f'{c["count"]} x {c["mib"]} MiB {"cold" if c["cold"] else "warm"}, digests {"on" if c["digests"] else "off"}: '
          f'criu A ({a[1]}) {a[5]} s, B ({b[1]}) {b[5]} s, A / B {a[8]}; whole {a[3]} / {b[3]} s (A / B {a[9]}); '
          f'runs ok {a[2]}, {b[2]}'
          + "".join(f'; cold goal {g["goal"][0]}: {g["value"]:.3f} ({"met" if g["met"] else "not met" if g["met"] is False else "-"})' for g in cold))
EOF

verdict_summary "$bin/verdicts.txt" criu_speed
