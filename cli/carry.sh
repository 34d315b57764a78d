#!/usr/bin/env bash
# Packs our compiled cuda-checkpoint for a GPU machine: .carry/cuda-checkpoint-ours.xz (xz -9,
# about 40 MB; .carry/ is git-ignored), which tests/gpu/run_cli.sh, tests/gpu/criu_cli.sh and
# bench/run.sh unpack there. Builds dist/cuda-checkpoint first (bash cli/build.sh) when it is
# missing, older than a source file it is built from, or when asked:
#
#   bash cli/carry.sh [--rebuild]
#
# The binary is Bun as well: `BUN_BE_BUN=1 cuda-checkpoint script.ts` runs TypeScript with its Bun,
# so no Deno or Bun need be carried for the scripts that use it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=dist/cuda-checkpoint
out=.carry/cuda-checkpoint-ours.xz
rebuild=
case ${1:-} in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) echo "usage: bash cli/carry.sh [--rebuild]" >&2; exit 2 ;;
esac
if [[ -z $rebuild && -x $bin ]]; then
  newer=$(find api cli core ffi os mock mod.ts driver.ts snapshot.ts types.ts deno.json -newer "$bin" -type f -name '*.ts' -o -newer "$bin" -name deno.json | head -3)
  [[ -z $newer ]] || { echo "sources newer than $bin: $(echo "$newer" | tr '\n' ' ')"; rebuild=1; }
fi
if [[ -n $rebuild || ! -x $bin ]]; then
  echo "building $bin (bash cli/build.sh)..."
  bash cli/build.sh
fi
"$bin" --version >/dev/null || { echo "$bin does not run" >&2; exit 1; }
mkdir -p .carry
xz -9 -T0 -c "$bin" > "$out.tmp"
mv "$out.tmp" "$out"
xz -t "$out"
echo "$out: $(du -h "$out" | cut -f1) from $bin ($("$bin" --version))"
total=0
for f in .carry/cuda-checkpoint .carry/cuda-checkpoint-ours.xz .carry/criu-cuda.tgz; do
  if [[ -f $f ]]; then
    total=$((total + $(stat -c %s "$f")))
  else
    echo "note: $f is missing (tests/gpu/run_cli.sh and criu_cli.sh need it; see tests/gpu/README.md)"
  fi
done
echo "carry for tests/gpu/run_cli.sh and criu_cli.sh: .carry/cuda-checkpoint, $out, .carry/criu-cuda.tgz:" \
  "$((total / 1048576)) MiB of the 64 MiB a run may carry (name these files, not all of .carry/)"
