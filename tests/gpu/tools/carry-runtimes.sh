#!/usr/bin/env bash
# Packs the Deno and Bun binaries that `npm ci` put under node_modules into .carry/<runtime>.xz,
# for the GPU machine, which has neither and reaches no registry. From the project root:
#
#   bash tests/gpu/tools/carry-runtimes.sh [deno] [bun]      # deno when none is named
#
# Deno is about 30 MB packed and Bun about 38 MB: together they pass the 64 MiB a run may carry, so
# pack (and carry) one per run. On the GPU machine the scripts of tests/gpu unpack it themselves;
# by hand: xz -dc .carry/deno.xz > /tmp/deno && chmod +x /tmp/deno (likewise bun).
set -euo pipefail
# shellcheck source=tests/gpu/tools/carry_dir.sh
. "$(dirname "$0")/carry_dir.sh"
runtimes=("${@:-deno}")
for rt in "${runtimes[@]}"; do
  case $rt in
    deno) bin=$(find node_modules/@deno -type f -name deno -perm -u+x 2>/dev/null | head -1) ;;
    bun)
      bin=$(find node_modules/@oven node_modules/bun -type f \( -name bun -o -name bun.exe \) \
        -perm -u+x 2>/dev/null | head -1)
      ;;
    *) echo "unknown runtime: $rt (deno or bun)" >&2; exit 2 ;;
  esac
  [[ -n $bin ]] || { echo "no $rt binary under node_modules: run npm ci first" >&2; exit 1; }
  xz -T2 -6 -c "$bin" >".carry/$rt.xz.tmp"
  mv ".carry/$rt.xz.tmp" ".carry/$rt.xz"
  echo ".carry/$rt.xz: $(du -h ".carry/$rt.xz" | cut -f1) (from $bin)"
done
du -ch .carry/* | tail -1
