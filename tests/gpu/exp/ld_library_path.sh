#!/usr/bin/env bash
# Session 43: libcuda and NVML are never loaded through an LD_LIBRARY_PATH that has the loader
# search the current directory (an empty or relative element). A PyTorch target of 256 MiB; in a
# directory holding a planted libcuda.so.1 (tests/fixtures/fake_libcuda.c, -DPLANTED: its
# constructor leaves "planted-library-ran" there), with LD_LIBRARY_PATH=":" and then "lib:" (a
# relative element), each tree given (the old first) runs --get-state, a --toggle there and back,
# and list --json (the target's line); the marker is looked for after each. The target's tensor checked
# at the end. One GPU, .carry/deno.xz:
#   timeout 200 bash tests/gpu/exp/ld_library_path.sh OLD_TREE .   (log: $OUT/log)
# LD_CASES (default ': lib:') names other values, space-separated ('/nonexistent;' splits there too).
set -u
. tests/gpu/setup.sh # torch_target, unxz_to
out=${OUT:-tests/gpu/out}; mkdir -p "$out"; exec > >(tee "$out/log") 2>&1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
unxz_to .carry/deno.xz "$d/deno" || exit 1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $("$d/deno" --version | head -1)"
echo "libcuda.so.1 here: $(ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 /lib/libcuda.so.1 2>/dev/null | tr '\n' ' '); LD_LIBRARY_PATH of the machine: '${LD_LIBRARY_PATH-(unset)}'"
mkdir -p "$d/plant/lib"
timeout 60 cc -shared -fPIC -O1 -DPLANTED -o "$d/plant/libcuda.so.1" tests/fixtures/fake_libcuda.c -lpthread ||
  { echo "FAIL: the planted library did not build"; exit 1; }
torch_target "$d/t" && torch_ready "$d/t" || { echo "FAIL: no target"; exit 1; }
echo "== target pid $tpid: $(head -1 "$d/t.out")"
fails=0
for tree in "$@"; do
  tree=$(cd "$tree" && pwd)
  for search in ${LD_CASES:-":" "lib:"}; do
    echo "-- tree $tree, LD_LIBRARY_PATH='$search'"
    for args in "--get-state --pid $tpid" "--toggle --pid $tpid" "--get-state --pid $tpid" \
      "--toggle --pid $tpid" "--get-state --pid $tpid" "list --json"; do
      rm -f "$d/plant/planted-library-ran"
      # shellcheck disable=SC2086 # the arguments are this script's own words
      said=$(cd "$d/plant" && LD_LIBRARY_PATH=$search timeout 60 "$d/deno" run -A "$tree/cli/main.ts" $args 2>&1)
      rc=$?
      [[ $args == list* ]] && said=$(echo "$said" | grep -E "\"pid\":$tpid[,}]|rror" | head -2)
      planted=no; [[ -e $d/plant/planted-library-ran ]] && planted=YES
      echo "   $args: exit $rc, planted library loaded: $planted: $(echo "$said" | head -2 | cut -c1-220 | tr '\n' ' ')"
      [[ $planted == no ]] || fails=$((fails + 1))
    done
  done
done
echo go >&"$tfd"; sleep 1.5; echo "== after: $(tail -1 "$d/t.out") (intact: 469762048.0); loads of the planted library: $fails"
kill "$tpid"
