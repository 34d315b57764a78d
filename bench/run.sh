#!/usr/bin/env bash
# The side-by-side benchmarks on the GPU machine, one runtime per run (the runtimes together are
# over the 64 MiB a run may carry). From the repo root, with .carry/<runtime>.xz carried:
#
#   bash bench/run.sh deno quick          # ~3-4 min: overhead 16 MiB + 1 GiB x 10 cycles;
#                                         #   many 2 and 4 x 4 GiB x 2 trials, all on GPU 0
#   bash bench/run.sh deno full overhead  # 16 MiB, 1 GiB, 4 GiB x 10 cycles (~3 min)
#   bash bench/run.sh deno full many      # 2, 4, 8 x 4 GiB x 3 trials on GPU 0 (~5 min), and
#                                         #   spread over the GPUs where there are several (again)
#   bash bench/run.sh deno full growth    # 1 process of 16 MiB .. 32 GiB; 1,2,4,8 x 4 GiB (~5 min)
#   bash bench/run.sh deno full listing   # listing vs per-pid queries, with NVIDIA's utility when
#                                         #   .carry/cuda-checkpoint is carried (~2 min)
#   bash bench/run.sh deno full cli       # our compiled dist/cuda-checkpoint (carried as
#                                         #   .carry/cuda-checkpoint-ours.xz) vs NVIDIA's: start-up
#   (bun instead of deno: the same; "all" runs overhead and many; a comma list picks several)
#
# Builds tests/gpu/target.cu with nvcc and bench/cycle.c, bench/many.c with cc, runs each benchmark
# under timeout, tees the log into $OUT/bench-<runtime>-<mode>.txt and copies the reports
# (bench/reports/*.md, *.json) into $OUT/reports. Without $OUT: bench/out.
# BENCH_ARGS (extra options for both benchmarks) and MANY_PLACEMENTS ("gpu0 spread") override.
set -uo pipefail
rt=${1:-deno}
mode=${2:-quick}
which=${3:-all}
case $rt in deno | bun) ;; *) echo "usage: bench/run.sh deno|bun [quick|full] [all|overhead|many]"; exit 2 ;; esac
case $mode in quick | full) ;; *) echo "mode: quick or full, not $mode"; exit 2 ;; esac
for w in ${which//,/ }; do
  case $w in all | overhead | many | growth | listing | cli) ;;
    *) echo "which: all or a comma list of overhead, many, growth, listing, cli; not $w"; exit 2 ;;
  esac
done
wants() { [[ ",$which," == *",$1,"* ]] || { [ "$which" = all ] && [[ $1 == overhead || $1 == many ]]; }; }
out=${OUT:-bench/out}
bin=/tmp/ckpt
mkdir -p "$out/reports" "$bin"
touch "$bin/started" # reports written after this are this run's
exec > >(tee -a "$out/bench-$rt-$mode.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) runtime $rt, $mode, $which"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,persistence_mode \
  --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
if [ -f ".carry/$rt.xz" ]; then
  xz -dc ".carry/$rt.xz" > "$bin/$rt" && chmod +x "$bin/$rt" && export PATH=$bin:$PATH
fi
"$rt" --version | head -1 || { echo "no $rt: carry .carry/$rt.xz"; exit 1; }
timeout 180 nvcc -O2 -o "$bin/target" tests/gpu/target.cu || { echo "nvcc failed"; exit 1; }
for c in cycle many; do
  cc -O2 -Wall -pthread -o "$bin/$c" "bench/$c.c" -ldl || { echo "cc $c.c failed"; exit 1; }
done
if [ "$rt" = deno ]; then R=(deno run -A); else R=(bun); fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$mode" = quick ]; then
  OVERHEAD=(--sizes 16,1024 --cycles 10 --warmup 1)
  MANY=(--counts 2,4 --mib 4096 --trials 2)
  placements=${MANY_PLACEMENTS:-gpu0}
  limit=240
else
  OVERHEAD=(--sizes 16,1024,4096 --cycles 10 --warmup 1)
  MANY=(--counts 2,4,8 --mib 4096 --trials 3)
  placements=${MANY_PLACEMENTS:-gpu0$([ "${gpus:-0}" -gt 1 ] && echo " spread")}
  limit=540
fi
# shellcheck disable=SC2206
extra=(${BENCH_ARGS:-})
status=0
run() {
  echo "== $* (timeout $limit s)"
  local start=$SECONDS rc
  timeout -k 10 "$limit" "$@"
  rc=$?
  echo "== rc=$rc after $((SECONDS - start)) s"
  ((rc == 0)) || status=1
  # Right away, so that a run cut off later still brings this report back.
  find bench/reports -newer "$bin/started" -name "*-$rt-*" -exec cp {} "$out/reports/" \;
}
if wants overhead; then
  run "${R[@]}" bench/overhead.ts --target "$bin/target" --c-bin "$bin/cycle" "${OVERHEAD[@]}" \
    "${extra[@]}"
fi
if wants many; then
  for p in $placements; do
    run "${R[@]}" bench/many.ts --target "$bin/target" --c-bin "$bin/many" --placement "$p" \
      "${MANY[@]}" "${extra[@]}"
  done
fi
if wants growth; then
  if [ "$mode" = quick ]; then G=(--sizes 16,1024 --counts 1,2 --cycles 1); else G=(); fi
  run "${R[@]}" bench/growth.ts --target "$bin/target" --c-bin "$bin/cycle" "${G[@]}" "${extra[@]}"
fi
nvidia=()
if [ -f .carry/cuda-checkpoint ]; then
  cp .carry/cuda-checkpoint "$bin/nvidia-cuda-checkpoint" && chmod +x "$bin/nvidia-cuda-checkpoint"
  nvidia=(--nvidia "$bin/nvidia-cuda-checkpoint")
fi
if wants listing; then
  run "${R[@]}" bench/listing.ts --target "$bin/target" --processes 300 --cuda 8 --rounds 5 \
    ${nvidia[1]:+--utility "${nvidia[1]}"} "${extra[@]}"
fi
if wants cli; then
  if [ -f .carry/cuda-checkpoint-ours.xz ]; then
    xz -dc .carry/cuda-checkpoint-ours.xz > "$bin/cuda-checkpoint" && chmod +x "$bin/cuda-checkpoint"
    run "${R[@]}" bench/cli_startup.ts --ours "$bin/cuda-checkpoint" "${nvidia[@]}" \
      --target "$bin/target" --rounds 20
  else
    echo "== cli: no .carry/cuda-checkpoint-ours.xz (build with cli/build.sh and xz it)"
  fi
fi
ls -l "$out/reports"
echo "== done, status $status, $SECONDS s in all"
exit $status
