# shellcheck shell=bash disable=SC2154 # $bin, $work, $dry: the sourcing script's
# Sourced by integrity.sh, criu_speed.sh, snapshot.sh, pytorch.sh and nccl_job.sh: the setup they
# share, on the GPU machine and in their dry runs (the fake libcuda, a stand-in target). The
# sourcing script sets $bin (its scratch folder), $work (integrity.sh and criu_speed.sh: the
# benchmark's folder under $bin) and
# $dry (not empty: a dry run), sources verdicts.sh (verdict and check: PASS/FAIL lines) and
# defines fail_setup WHY (a line "FAIL setup: WHY", then the script's end).
#   describe_machine         the commit, kernel, cores and memory, the GPUs, /tmp's disk
#   end_leftovers            every process whose command line names $bin/ killed (not this shell),
#                            $work removed: the EXIT trap of a benchmark's script
#   unpack_tgz TGZ DIR [fresh]  a carried tree unpacked into DIR (made where missing; emptied first
#                            with "fresh"); fails where TGZ is missing or tar fails (2 min at most)
#   unxz_to XZ FILE          a carried program unpacked to FILE, executable (2 min at most)
#   setup_criu               sets $criu: in a dry run $CKPT_CRIU_PATH, else /tmp/criu/usr/sbin/criu,
#                            where it runs; else .carry/criu-cuda.tgz unpacked to /tmp/criu; then
#                            a check line with its version and what `criu check` says
#   setup_newest_criu DIR [TGZ]  sets $criu: TGZ, else criu 4.2 (.carry/criu-dev-cuda.tgz) where
#                            carried, else 4.1.1 (.carry/criu-cuda.tgz), unpacked fresh into DIR,
#                            exported as CKPT_CRIU_PATH, with a check line of what `criu check`
#                            says; empty where none unpacks (a FAIL line says so)
#   setup_bun                sets BUN=(...), the Bun that runs a benchmark: our compiled binary
#                            (.carry/cuda-checkpoint-ours.xz; in a dry run OURS_BIN, default
#                            dist/cuda-checkpoint, or node_modules/.bin/bun where there is none);
#                            then a check line with its version
#   fake_libcuda             tests/fixtures/fake_libcuda.c built into $bin/libcuda.so.1
#   write_stand_in FILE      a bash stand-in of target.cu at FILE: "ready <pid> <pid> <hash>", then
#                            "hash" and "exit", through the fifo of the fifo mode (one command per
#                            opening) or, without one, from stdin ("fill" mode: it holds nothing)
#   build_target             sets $target: tests/gpu/target.cu built with nvcc, a PASS line
#   fifo_target              sets $target for a benchmark's fifo targets: in a dry run the stand-in
#                            at $bin/stand-in-target and the fake libcuda built, else build_target;
#                            then a check line that it has the fifo mode
#   torch_target PATH        a PyTorch process holding 256 MiB (a tensor of 7.0), started in the
#                            background: "ready" in PATH.out, then its tensor's sum for each line
#                            written to the fifo PATH.in (held open on fd $tfd); its pid in $tpid
#   torch_ready PATH         waits up to 30 s for torch_target PATH's "ready"
#   exp_criu_session NAME    the start of a short run of tests/gpu/exp on criu (below)

describe_machine() {
  echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)'); kernel $(uname -r); $(nproc) cores; $(free -g | awk '/^Mem:/ { print $2 " GiB of memory" }')"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null ||
    echo "(no nvidia-smi)"
  df -h /tmp | tail -1
}

end_leftovers() {
  local p
  for p in $(pgrep -f "$bin/" 2>/dev/null); do
    [[ $p == "$$" ]] && continue
    grep -qaF "$bin/" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p" 2>/dev/null
  done
  rm -rf "${work:?}"
}

unpack_tgz() {
  [[ -f $1 ]] || return 1
  if [[ ${3:-} == fresh ]]; then rm -rf "$2" || return 1; fi
  mkdir -p "$2" && timeout 120 tar -C "$2" -xzf "$1"
}

unxz_to() {
  timeout 120 xz -dc "$1" >"$2.tmp" && chmod +x "$2.tmp" && mv "$2.tmp" "$2"
}

# ours_bun DIR: our binary (.carry/cuda-checkpoint-ours.xz) as DIR/ours, and DIR/bun its own Bun
# (BUN_BE_BUN=1: it runs this tree's TypeScript), DIR first on PATH.
ours_bun() {
  unxz_to .carry/cuda-checkpoint-ours.xz "$1/ours" || return 1
  printf '#!/bin/sh\nBUN_BE_BUN=1 exec %s "$@"\n' "$1/ours" >"$1/bun" && chmod +x "$1/bun" &&
    export PATH=$1:$PATH
}

# exp_session: the start of a short run of tests/gpu/exp: its log ($OUT/log, as it goes), a
# temporary directory $d removed at exit holding ours_bun, and a line naming the tree and the GPU.
exp_session() {
  out=${OUT:-tests/gpu/out}
  mkdir -p "$out"
  exec > >(tee "$out/log") 2>&1
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
  ours_bun "$d" || exit 1
  export NO_COLOR=1
  echo "== $(date -u +%FT%TZ) tree $(git log --oneline -1 | cut -c1-60) $(git status --short | wc -l) changed"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}

# exp_criu_session NAME (through tests/gpu/exp/session.sh): the start of a tests/gpu/exp run: $bin
# (/tmp/ckpt-NAME, emptied) with its verdicts, the log $OUT/NAME.txt (as it goes), a line naming
# the GPUs, criu (exported as CKPT_CRIU_PATH), ours as CK=(...) from OURS_XZ (default
# .carry/cuda-checkpoint-ours.xz), the target built; fail_setup, dry (empty) and started=() set.
exp_criu_session() {
  dry='' out=${OUT:-tests/gpu/out} bin=/tmp/ckpt-$1
  fail_setup() {
    verdict FAIL "setup: $1"
    exit 1
  }
  rm -rf "$bin"
  mkdir -p "$out" "$bin"
  : >"$bin/verdicts.txt"
  exec > >(tee -a "$out/$1.txt") 2>&1
  echo "== $(date -u +%FT%TZ) tests/gpu/exp: $1"
  nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
  setup_criu
  export CKPT_CRIU_PATH=$criu
  unxz_to "${OURS_XZ:-.carry/cuda-checkpoint-ours.xz}" "$bin/cuda-checkpoint" ||
    fail_setup "unpacking ${OURS_XZ:-.carry/cuda-checkpoint-ours.xz}"
  CK=("$bin/cuda-checkpoint")
  build_target
  started=()
}

setup_criu() {
  local said
  criu=${CKPT_CRIU_PATH:-/tmp/criu/usr/sbin/criu}
  if [[ -z $dry || ! -x $criu ]]; then
    criu=/tmp/criu/usr/sbin/criu
    unpack_tgz .carry/criu-cuda.tgz /tmp/criu ||
      fail_setup "carry .carry/criu-cuda.tgz (bash tests/gpu/tools/carry-criu-cuda.sh)"
  fi
  said=$(timeout 60 "$criu" check 2>&1 | tail -1)
  [[ $said == *"Looks good"* ]]
  _rc=$?; check "setup: $("$criu" --version 2>/dev/null | head -1) at $criu: criu check says: $said" $_rc
}

setup_newest_criu() {
  local dir=$1 tgz=${2:-} said
  criu=
  if [[ -z $tgz ]]; then
    tgz=.carry/criu-cuda.tgz
    [[ -f .carry/criu-dev-cuda.tgz ]] && tgz=.carry/criu-dev-cuda.tgz
  fi
  if ! unpack_tgz "$tgz" "$dir" fresh || [[ ! -x $dir/usr/sbin/criu ]]; then
    verdict FAIL "setup: no criu from $tgz (carry .carry/criu-dev-cuda.tgz or .carry/criu-cuda.tgz)"
    return 1
  fi
  criu=$dir/usr/sbin/criu
  said=$(timeout 60 "$criu" check 2>&1 | tail -1)
  [[ $said == *"Looks good"* ]]
  _rc=$?; check "setup: $("$criu" --version 2>/dev/null | head -1 | tr -s ' ') from $tgz: criu check says: $said" $_rc
  export CKPT_CRIU_PATH=$criu
}

setup_bun() {
  local v
  if [[ -z $dry ]]; then
    unxz_to .carry/cuda-checkpoint-ours.xz "$bin/cuda-checkpoint" ||
      fail_setup "unpacking .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh)"
    BUN=(env BUN_BE_BUN=1 "$bin/cuda-checkpoint" --preload ./tests/gpu/unset_bun_be_bun.ts)
  elif [[ -x ${OURS_BIN:-dist/cuda-checkpoint} ]]; then
    BUN=(env BUN_BE_BUN=1 "$(realpath "${OURS_BIN:-dist/cuda-checkpoint}")" --preload ./tests/gpu/unset_bun_be_bun.ts)
  else
    BUN=("$(realpath node_modules/.bin/bun)")
  fi
  v=$(timeout 60 "${BUN[@]}" --version 2>&1 | head -1)
  [[ $v =~ ^[0-9]+\.[0-9]+ ]]
  check "setup: Bun $v (${BUN[*]})" $?
}

fake_libcuda() {
  timeout 120 cc -shared -fPIC -O2 -DFAKE_CUDA_DELAY_MS=20 -DFAKE_ONE_CHIP -o "$bin/libcuda.so.1" \
    tests/fixtures/fake_libcuda.c -lpthread || fail_setup "cc tests/fixtures/fake_libcuda.c"
}

write_stand_in() {
  cat >"$1" <<'EOF'
#!/bin/bash
mode=${1:-cuda} mib=${2:-16} fifo=${3:-}
if [[ $mode == fifo && -z $fifo ]]; then echo "target: fifo mode needs <MiB> <fifo path>" >&2; exit 2; fi
h=$(printf '%x' $(((mib + 1) * 2654435761)))
echo "ready $$ $$ $h"
while :; do
  if [[ -n $fifo ]]; then
    [[ -p $fifo ]] || exit 0
    read -r line <"$fifo" || continue
  else
    read -r line || exit 0
  fi
  case $line in
    hash*) echo "hash $h" ;;
    exit*) exit 0 ;;
    *) echo "error unknown command: $line" ;;
  esac
done
EOF
  chmod +x "$1"
}

build_target() {
  local t0=$SECONDS
  target=$bin/target
  timeout 180 nvcc -O2 -o "$target" tests/gpu/target.cu || fail_setup "nvcc tests/gpu/target.cu"
  verdict PASS "setup: nvcc built tests/gpu/target.cu in $((SECONDS - t0)) s"
}

fifo_target() {
  if [[ -n $dry ]]; then
    fake_libcuda
    target=$bin/stand-in-target
    write_stand_in "$target"
  else
    build_target
  fi
  [[ $("$target" fifo 2>&1) == *"fifo mode needs"* ]]
  check "setup: $target has the fifo mode" $?
}

torch_target() {
  mkfifo "$1.in" && exec {tfd}<>"$1.in"
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 -c "
import torch, sys
x = torch.full((64 * 2**20,), 7.0, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True)
for line in sys.stdin:
    print('sum', float(x.sum()), flush=True)
" <"$1.in" >"$1.out" 2>&1 &
  tpid=$!
}

torch_ready() {
  local i
  for i in $(seq 150); do grep -q ready "$1.out" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}
