#!/usr/bin/env bash
# The examples on a GPU machine, one runtime per run. From the repo root, with .carry/ carried
# (the runtime, and .carry/criu-cuda.tgz or .carry/criu.tgz for the CRIU workflow):
#   bash tests/gpu/run_examples.sh deno      (or bun)
# Runs each example under timeout and checks what it printed, one line `PASS: ...` or
# `FAIL: ...` per check (`SKIP: ...` where this machine cannot run one), then a summary; exits 1
# if any check failed. Logs: $OUT/examples-<runtime>.txt (every example's output is in it too),
# and $OUT/examples-<runtime>-each.tgz, each example's output in its own file ($OUT defaults to
# tests/gpu/out).
#   self_checkpoint.ts  --buffer-mib 16 and 4096: PASS, the sample's table, the GPU memory released
#                       while checkpointed, the kernel's bytes as the host computes them, and the
#                       16 MiB hash equal to the simulator's (the same PTX pattern)
#   counter.ts          UDP on the GPU: 101, then 102
#   counter_criu.ts     with criu: 101, then 102 across criu dump and restore
#   migrate.ts          with 2+ GPUs: round all GPUs and back, memory intact
#   preempt.ts          its own job processes: memory freed, high-priority job, carried on
#   snapshot_all.ts     against three targets of tests/gpu/target.cu (two CUDA, one not): all
#                       suspended and resumed, memory released and back, each target's own hash
set -uo pipefail
rt=${1:-}
if [ "$rt" != deno ] && [ "$rt" != bun ]; then
  echo "usage: bash tests/gpu/run_examples.sh deno|bun" >&2
  exit 2
fi
out=${OUT:-tests/gpu/out}
tmp=/tmp/ckpt-examples
# Each example's output goes to $each, and comes back as one archive: a run returns 8 files at most.
each=$tmp/each
rm -rf "$each"
mkdir -p "$out" "$tmp" "$each"
exec > >(tee -a "$out/examples-$rt.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) runtime $rt"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv,noheader
gpus=$(nvidia-smi -L | grep -c '^GPU ')
xz -dc ".carry/$rt.xz" > "$tmp/$rt" && chmod +x "$tmp/$rt" && export PATH=$tmp:$PATH
"$rt" --version | head -1
if [ "$rt" = deno ]; then R=(deno run -A); else R=(bun); fi

passed=0 failed=0 skipped=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "SKIP: $*"; skipped=$((skipped + 1)); }
# check NAME COMMAND...: PASS or FAIL as the command succeeds.
check() {
  local name=$1
  shift
  if "$@" > /dev/null 2>&1; then pass "$name"; else fail "$name"; fi
}
# has FILE REGEX: the file has a line matching the (extended) regex.
has() { grep -qE -- "$2" "$1"; }
# ex NAME SECONDS ARGS...: runs an example with the runtime; its output in $out, shown here too.
ex() {
  local name=$1 secs=$2
  shift 2
  local file="$each/examples-$rt-$name.txt"
  echo "== $name: ${R[*]} $*"
  timeout "$secs" "${R[@]}" "$@" > "$file" 2>&1
  local rc=$?
  cat "$file"
  echo "== $name: exit $rc"
  return $rc
}
# send FD PID LINE: writes a line to a target's fifo, if the target is still there to read it.
send() { kill -0 "$2" 2> /dev/null && (trap '' PIPE && echo "$3" >&"$1") 2> /dev/null; }
# The number of the first group of REGEX in FILE (0 when there is none).
number() { sed -nE "s/$2/\\1/p" "$1" | head -1 | grep -E '^[0-9.]+$' || echo 0; }

# --- self_checkpoint.ts ----------------------------------------------------------------------
ex self-sim 120 examples/self_checkpoint.ts --driver sim --virtual-time
simhash=$(sed -nE 's/^Buffer hash \(before\): ([0-9a-f]+)$/\1/p' "$each/examples-$rt-self-sim.txt" | head -1)
for mib in 16 4096; do
  name=self-$mib
  f="$each/examples-$rt-$name.txt"
  ex "$name" $((mib > 1024 ? 120 : 60)) examples/self_checkpoint.ts --buffer-mib "$mib"
  check "self_checkpoint $mib MiB: exit 0" test $? -eq 0
  check "self_checkpoint $mib MiB: ran on the GPU" has "$f" '^NVIDIA driver found'
  check "self_checkpoint $mib MiB: PASS" has "$f" '^PASS: GPU buffer contents survived checkpoint/restore\.$'
  check "self_checkpoint $mib MiB: the kernel (PTX) wrote what the host computes" \
    has "$f" "^Kernel output against the host's computation .*: identical$"
  shape=ok
  for row in '^step +duration \(ms\) +state after$' '^initial +- +running$' '^lock +[0-9.]+ +locked$' \
    '^checkpoint +[0-9.]+ +checkpointed$' '^restore +[0-9.]+ +locked$' '^unlock +[0-9.]+ +running$' \
    '^total +[0-9.]+$'; do
    has "$f" "$row" || { shape=bad; echo "   missing row: $row"; }
  done
  check "self_checkpoint $mib MiB: the table has the sample's shape" test $shape = ok
  check "self_checkpoint $mib MiB: GPU memory released while checkpointed and back after" \
    has "$f" '^GPU memory this process holds: [0-9]+ MiB before, none while checkpointed, [0-9]+ MiB after$'
  check "self_checkpoint $mib MiB: compute capability read" has "$f" '^Compute capability: sm_[0-9]+$'
done
gpuhash=$(sed -nE 's/^Buffer hash \(before\): ([0-9a-f]+)$/\1/p' "$each/examples-$rt-self-16.txt" | head -1)
check "self_checkpoint 16 MiB: the GPU's hash ($gpuhash) is the simulator's ($simhash)" \
  test -n "$gpuhash" -a "$gpuhash" = "$simhash"
c16=$(number "$each/examples-$rt-self-16.txt" '^checkpoint +([0-9.]+) +checkpointed$')
c4096=$(number "$each/examples-$rt-self-4096.txt" '^checkpoint +([0-9.]+) +checkpointed$')
echo "   checkpoint 16 MiB: $c16 ms, 4096 MiB: $c4096 ms"
check "self_checkpoint: a checkpoint of 4096 MiB takes longer than one of 16 MiB" \
  awk -v a="$c16" -v b="$c4096" 'BEGIN { exit !(b > a && a > 0) }'
echo "== self-json: ${R[*]} examples/self_checkpoint.ts --json"
timeout 60 "${R[@]}" examples/self_checkpoint.ts --json > "$each/examples-$rt-self.json" \
  2> "$each/examples-$rt-self-json-stderr.txt"
cat "$each/examples-$rt-self.json" "$each/examples-$rt-self-json-stderr.txt"
check "self_checkpoint --json: stdout is one JSON object, native, pass true" python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["pass"] is True and r["driver"] == "native" else 1)' "$each/examples-$rt-self.json"

# --- counter.ts (UDP) -------------------------------------------------------------------------
echo "== counter: ${R[*]} examples/counter.ts --port 10000"
timeout 120 "${R[@]}" examples/counter.ts --port 10000 > "$each/examples-$rt-counter.txt" 2>&1 &
counter=$!
for _ in $(seq 300); do has "$each/examples-$rt-counter.txt" '^counter ready' && break; sleep 0.1; done
a1=$(timeout 30 "${R[@]}" examples/counter.ts --ask --port 10000)
a2=$(timeout 30 "${R[@]}" examples/counter.ts --ask --port 10000)
kill "$counter" 2>/dev/null
wait "$counter" 2>/dev/null
cat "$each/examples-$rt-counter.txt"
check "counter.ts on the GPU (UDP): answered 101, then 102 (got $a1, $a2)" test "$a1 $a2" = "101 102"

# --- counter_criu.ts --------------------------------------------------------------------------
criu=""
if [ -f .carry/criu-cuda.tgz ]; then
  mkdir -p /tmp/criu && tar -C /tmp/criu -xzf .carry/criu-cuda.tgz && criu=/tmp/criu/usr/sbin/criu
elif [ -f .carry/criu.tgz ]; then
  mkdir -p /tmp/criu && tar -C /tmp/criu -xzf .carry/criu.tgz
  # Debian's criu needs its libraries; only criu gets them, not the runtime or the counter.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/criu/usr/lib/x86_64-linux-gnu exec /tmp/criu/usr/sbin/criu "$@"\n' \
    > /tmp/criu/criu.sh && chmod +x /tmp/criu/criu.sh && criu=/tmp/criu/criu.sh
fi
if [ -n "$criu" ]; then
  f="$each/examples-$rt-counter-criu.txt"
  ex counter-criu 150 examples/counter_criu.ts --criu "$criu" --images-dir "$tmp/criu-images"
  check "counter_criu: exit 0" test $? -eq 0
  check "counter_criu: the CRIU half ran (nothing missing)" has "$f" '^6\. criu dump --tree'
  check "counter_criu: GPU memory released before the dump" has "$f" '^5\. GPU memory it holds now: none$'
  check "counter_criu: the counter came back with the same pid, checkpointed" \
    has "$f" '^7\. criu restore .*; pid [0-9]+ is back, its CUDA state checkpointed$'
  check "counter_criu: 101, then 102 across criu dump and restore" \
    has "$f" '^PASS: the counter answered 101, then 102 after a CRIU dump and restore\.$'
  rm -rf "$tmp/criu-images"
else
  skip "counter_criu: no .carry/criu-cuda.tgz or .carry/criu.tgz (tests/gpu/tools/carry-criu*.sh)"
fi

# --- migrate.ts -------------------------------------------------------------------------------
f="$each/examples-$rt-migrate.txt"
ex migrate 120 examples/migrate.ts --buffer-mib 1024
rc=$?
if [ "$gpus" -ge 2 ]; then
  check "migrate: exit 0" test $rc -eq 0
  check "migrate: round $gpus GPUs and back, memory intact" \
    has "$f" "^PASS: the process went round [0-9]+ GPUs and is back on GPU 0; its 1024 MiB are intact\.$"
  check "migrate: after move 1 it runs on GPU 1" has "$f" '^1 +GPU 0 -> GPU 1 +[0-9.]+ +[0-9.]+ +GPU 1 +GPU 1: '
else
  check "migrate: with one GPU it says migration needs two" has "$f" '^Migration needs two GPUs'
  skip "migrate: this machine has $gpus GPU; migration needs two"
fi

# --- preempt.ts -------------------------------------------------------------------------------
f="$each/examples-$rt-preempt.txt"
ex preempt 120 examples/preempt.ts
check "preempt: exit 0" test $? -eq 0
freed=$(number "$f" '.*GPU memory freed: ([0-9]+) MiB.*')
check "preempt: the low-priority job's GPU memory was freed ($freed MiB)" test "${freed%.*}" -gt 8192
check "preempt: the high-priority job ran" has "$f" '^High-priority job: 16384 MiB on GPU 0 .*filled and checked'
check "preempt: the job made no step while suspended" has "$f" '^While suspended, they made no step\.$'
check "preempt: the job carried on from its step, memory back as before" \
  has "$f" '^Each process carried on from its step: [0-9]+ -> [0-9]+, [0-9]+ -> [0-9]+; GPU memory back as before\.$'
check "preempt: PASS" has "$f" '^PASS: the low-priority job was preempted'

# --- snapshot_all.ts against targets ----------------------------------------------------------
if timeout 120 nvcc -O2 -o "$tmp/target" tests/gpu/target.cu; then
  declare -A ready_hash target_pid
  waits=()
  i=0
  for spec in "cuda 1024" "cuda 2048" "nocuda"; do
    i=$((i + 1))
    rm -f "$tmp/t$i.in" && mkfifo "$tmp/t$i.in"
    # shellcheck disable=SC2086
    "$tmp/target" $spec < "$tmp/t$i.in" > "$tmp/t$i.out" 2>&1 &
    waits+=($!)
    eval "exec $((10 + i))>$tmp/t$i.in"
    for _ in $(seq 300); do grep -q '^ready' "$tmp/t$i.out" && break; sleep 0.1; done
    target_pid[$i]=$(awk '/^ready/ { print $2 }' "$tmp/t$i.out")
    ready_hash[$i]=$(awk '/^ready/ { print $4 }' "$tmp/t$i.out")
    echo "   target $i ($spec): pid ${target_pid[$i]}, hash ${ready_hash[$i]}"
  done
  f="$each/examples-$rt-snapshot-list.txt"
  ex snapshot-list 120 examples/snapshot_all.ts
  check "snapshot_all without --yes: lists the targets and suspends nothing" \
    has "$f" '^Not suspending: '
  f="$each/examples-$rt-snapshot.txt"
  ex snapshot 150 examples/snapshot_all.ts --yes
  check "snapshot_all: exit 0" test $? -eq 0
  check "snapshot_all: PASS" has "$f" '^PASS: [0-9]+ processes suspended and resumed together'
  released=$(number "$f" '^All [0-9]+ checkpointed in [0-9.]+ ms; GPU memory released: ([0-9]+) MiB\.$')
  check "snapshot_all: GPU memory released ($released MiB, the targets hold 3072 + contexts)" \
    test "${released%.*}" -ge 3072
  for i in 1 2; do
    check "snapshot_all: target $i (pid ${target_pid[$i]}) suspended and resumed" \
      has "$f" "^${target_pid[$i]} .* done, running$"
    send $((10 + i)) "${target_pid[$i]}" hash
    for _ in $(seq 100); do grep -q '^hash ' "$tmp/t$i.out" && break; sleep 0.1; done
    now=$(awk '/^hash / { print $2 }' "$tmp/t$i.out" | tail -1)
    check "snapshot_all: target $i's memory intact (its own hash ${now:-none} = ${ready_hash[$i]})" \
      test -n "$now" -a "$now" = "${ready_hash[$i]}"
  done
  check "snapshot_all: the target that never used CUDA is not listed" \
    bash -c "! grep -qE '^${target_pid[3]} ' '$f'"
  for i in 1 2 3; do
    send $((10 + i)) "${target_pid[$i]}" exit
    eval "exec $((10 + i))>&-"
  done
  for w in "${waits[@]}"; do timeout 30 tail --pid="$w" -f /dev/null; done
else
  fail "snapshot_all: nvcc could not build tests/gpu/target.cu"
fi

echo "== summary ($rt): $passed passed, $failed failed, $skipped skipped"
tar -czf "$out/examples-$rt-each.tgz" -C "$tmp" each
[ "$failed" -eq 0 ]
