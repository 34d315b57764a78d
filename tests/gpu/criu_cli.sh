#!/usr/bin/env bash
# Issue 8, part 7: our compiled cuda-checkpoint under CRIU, on the GPU machine, from the repo root,
# with these carried (64 MiB in all; name the files, not all of .carry/): .carry/criu-cuda.tgz
# (bash tests/gpu/tools/carry-criu-cuda.sh), .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh),
# .carry/cuda-checkpoint (NVIDIA's). Root, one GPU is enough.
#
#   bash tests/gpu/criu_cli.sh           # ~4 min on one H100 (ROUNDS=2, SIZES="1024 4096")
#
# a. NVIDIA's documented workflow with OUR binary and criu without its CUDA plugin: a target with
#    1 GiB, `cuda-checkpoint --toggle`, `criu dump`, `criu restore --restore-detached`, state
#    checkpointed, toggle, running, memory intact.
# b. CRIU's CUDA plugin running `cuda-checkpoint` from PATH: first one traced run each with ours and
#    with NVIDIA's (a wrapper logs every call the plugin makes, its exit code and output; the two
#    sequences must agree), then timed dumps and restores of 1 GiB and 4 GiB targets, ours and
#    NVIDIA's taking turns (ours 1 GiB, NVIDIA's 1 GiB, ours 4 GiB, NVIDIA's 4 GiB; the next round
#    starts with NVIDIA's): dump, restore, state running, memory intact, the plugin's log lines.
#
# The targets are tests/gpu/target.cu in its fifo mode: setsid (a session of their own: no
# --shell-job), stdin /dev/null, stdout to a file, commands through a named fifo they open anew for
# each command; so CRIU has nothing it cannot dump, and a restored target still answers "hash".
# Every check is one line PASS/FAIL/SKIP, counted at the end. Log: $OUT/log-criu.txt; reports:
# $OUT/criu-report.md, $OUT/criu-logs.tgz (criu's logs of the traced runs and of any failure).
# Overrides: ROUNDS, SIZES (MiB), CRIU_CLI_BUDGET (s, default 540); for a dry run without a GPU
# (the mechanics only: criu runs, its plugin turns itself off): TARGET_BIN (a built target),
# NVIDIA_BIN (a stand-in for NVIDIA's), OURS_BIN (ours, such as dist/cuda-checkpoint, instead of
# .carry/cuda-checkpoint-ours.xz), CKPT_LIBCUDA_PATH (a fake libcuda for ours). A file an override
# stands for need not be carried. Without a GPU (no /proc/driver/nvidia/gpus/*) the checks that
# only a GPU can pass say SKIP: the states between programs (the fake keeps each program's own),
# and the plugin's calls (it turns itself off).
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh
out=${OUT:-tests/gpu/out}
bin=/tmp/ckpt
criu_root=/tmp/criu
criu=$criu_root/usr/sbin/criu
plugins=$criu_root/usr/lib/criu
rounds=${ROUNDS:-2}
read -r -a sizes <<<"${SIZES:-1024 4096}"
budget=${CRIU_CLI_BUDGET:-540}
logs=$bin/criu-logs # kept (packed into $OUT/criu-logs.tgz): the traced runs' and the failures'
work=$bin/criu-work # every criu log, while it runs
mkdir -p "$out" "$bin/nvidia" "$bin/ours-bin" "$bin/no-plugins" "$logs" "$work"
rm -rf "${logs:?}"/* "${work:?}"/* "$out/criu-report.md" "$out/log-criu.txt" "$out/criu-logs.tgz"
: >"$bin/criu-verdicts.txt"
: >"$bin/criu-times.txt"
exec > >(tee -a "$out/log-criu.txt") 2>&1

verdict() { echo "$1 $2"; echo "$1 $2" >>"$bin/criu-verdicts.txt"; }
check() { if [[ $2 == 0 ]]; then verdict PASS "$1"; else verdict FAIL "$1"; fi; }
# A dry run: no GPU here (what CRIU's CUDA plugin looks for).
nogpu=
compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null || nogpu=1
# gpu_check NAME RC WHY: check, but SKIP (saying WHY) where a dry run cannot pass it.
gpu_check() { if [[ -n $nogpu ]]; then verdict SKIP "$1 (dry run: $3)"; else check "$1" "$2"; fi; }
NO_STATE="the fake libcuda keeps each program's states to itself"
NO_PLUGIN="no GPU here, so CRIU's CUDA plugin turns itself off"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
left() { echo $((budget - SECONDS)); }
echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/criu_cli.sh (rounds $rounds, sizes ${sizes[*]} MiB, budget $budget s)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)'); kernel $(uname -r)"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,persistence_mode \
  --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
echo "GPUs the plugin looks for: $(echo /proc/driver/nvidia/gpus/*)"
df -h /tmp | tail -1

# ---- setup ----
carried=(.carry/criu-cuda.tgz)
[[ -n ${OURS_BIN:-} ]] || carried+=(.carry/cuda-checkpoint-ours.xz)
[[ -n ${NVIDIA_BIN:-} ]] || carried+=(.carry/cuda-checkpoint)
for f in "${carried[@]}"; do
  [[ -f $f ]] || { verdict FAIL "setup: $f is not carried (see tests/gpu/README.md)"; exit 1; }
done
if ! { mkdir -p "$criu_root" && tar -C "$criu_root" -xzf .carry/criu-cuda.tgz; }; then
  verdict FAIL "setup: unpacking .carry/criu-cuda.tgz"
  exit 1
fi
echo "criu: $("$criu" --version | tr '\n' ' ')"
c=$(timeout 60 "$criu" check 2>&1)
echo "criu check: $c"
[[ $c == *"Looks good"* ]]
check "setup: criu check says Looks good" $?
[[ -f $plugins/cuda_plugin.so ]]
check "setup: $plugins/cuda_plugin.so is there" $?
if [[ -n ${OURS_BIN:-} ]]; then
  if ! { cp "$OURS_BIN" "$bin/cuda-checkpoint.tmp" && chmod +x "$bin/cuda-checkpoint.tmp" &&
    mv "$bin/cuda-checkpoint.tmp" "$bin/cuda-checkpoint"; }; then
    verdict FAIL "setup: copying OURS_BIN ($OURS_BIN)"
    exit 1
  fi
elif ! { xz -dc .carry/cuda-checkpoint-ours.xz >"$bin/cuda-checkpoint.tmp" &&
  chmod +x "$bin/cuda-checkpoint.tmp" && mv "$bin/cuda-checkpoint.tmp" "$bin/cuda-checkpoint"; }; then
  verdict FAIL "setup: unpacking .carry/cuda-checkpoint-ours.xz"
  exit 1
fi
ours=$bin/cuda-checkpoint
nvidia=$bin/nvidia/cuda-checkpoint
cp "${NVIDIA_BIN:-.carry/cuda-checkpoint}" "$nvidia" && chmod +x "$nvidia"
cp "$ours" "$bin/ours-bin/cuda-checkpoint" # the only file there: PATH=$bin/ours-bin:$PATH finds ours
v=$(timeout 30 "$bin/ours-bin/cuda-checkpoint" --version 2>&1)
[[ $v == *"@ckpt/cuda"* ]]
check "setup: ours runs: $v" $?
echo "on PATH for CRIU, ours:    $(PATH=$bin/ours-bin:$PATH type -a cuda-checkpoint | head -3 | tr '\n' ' ')"
echo "on PATH for CRIU, NVIDIA's: $(PATH=$bin/nvidia:$PATH type -a cuda-checkpoint | head -3 | tr '\n' ' ')"
target=${TARGET_BIN:-$bin/target}
if [[ -z ${TARGET_BIN:-} ]]; then
  t0=$SECONDS
  timeout 180 nvcc -O2 -o "$target" tests/gpu/target.cu
  check "setup: nvcc built tests/gpu/target.cu in $((SECONDS - t0)) s" $?
fi
[[ $("$target" fifo 2>&1) == *"fifo mode needs"* ]] || { verdict FAIL "setup: $target has no fifo mode"; exit 1; }

# ---- targets ----
started=() # every target pid, to end the ones left at exit
cleanup() {
  local p
  for p in "${started[@]}"; do
    if alive "$p" && grep -qa "fifo" "/proc/$p/cmdline" 2>/dev/null; then kill -9 "$p" 2>/dev/null; fi
  done
}
trap cleanup EXIT

who() { if [[ $1 == ours ]]; then echo our; else echo "NVIDIA's"; fi; }

state() { timeout 30 "$1" --get-state --pid "$2" 2>&1 | head -3 | tr '\n' ' ' | sed 's/ $//'; }

# A run of criu: its rc; on failure, the end of its log.
run_criu() {
  local log=$1 rc
  shift
  timeout -k 10 300 "$@" -v4 -o "$log"
  rc=$?
  if ((rc != 0)); then
    echo "criu exited $rc; the end of $log:"
    tail -25 "$log" | sed 's/^/    /'
    grep -qiE 'ext-unix-sk|external (unix )?socket' "$log" &&
      echo "    (the target holds a socket to a peer outside it: criu would need --ext-unix-sk)"
    cp "$log" "$logs/" 2>/dev/null # kept
  fi
  return $rc
}

plugin_lines() { grep -hE 'cuda_plugin: |cuda-checkpoint' "$@" 2>/dev/null | head -"${LINES_MAX:-20}" | sed 's/^/    | /'; }

free_mib() { df -Pm /tmp | awk 'NR == 2 { print $4 }'; }

# ---- a. NVIDIA's documented workflow, with ours, criu without the plugin ----
echo
echo "== a. cuda-checkpoint --toggle (ours), criu dump, criu restore --restore-detached (no CUDA plugin)"
img=$bin/img-a
rm -rf "$img"
mkdir -p "$img"
if start_target a 1024; then
  d=$T_DIR p=$T_PID h=$T_HASH
  timeout 60 "$ours" --toggle --pid "$p"
  check "a: ours --toggle --pid $p (suspend) exits 0" $?
  s=$(state "$ours" "$p")
  [[ $s == checkpointed ]]
  gpu_check "a: ours --get-state: $s (want checkpointed)" $? "$NO_STATE"
  t0=$(now)
  run_criu "$work/a-dump.log" "$criu" dump --tree "$p" --images-dir "$img" --libdir "$bin/no-plugins"
  rc=$?
  t1=$(now)
  check "a: criu dump --tree $p (no plugin) in $(secs "$t0" "$t1") s, image $(du -sh "$img" | cut -f1)" $rc
  wait_gone "$p"
  check "a: the dumped process is gone" $?
  t0=$(now)
  run_criu "$work/a-restore.log" "$criu" restore --restore-detached --images-dir "$img" --libdir "$bin/no-plugins"
  rc=$?
  t1=$(now)
  check "a: criu restore --restore-detached in $(secs "$t0" "$t1") s" $rc
  rm -rf "$img"
  alive "$p"
  check "a: pid $p lives again" $?
  s=$(state "$ours" "$p")
  [[ $s == checkpointed ]]
  gpu_check "a: ours --get-state after the restore: $s (want checkpointed)" $? "$NO_STATE"
  timeout 60 "$ours" --toggle --pid "$p"
  check "a: ours --toggle --pid $p (resume) exits 0" $?
  s=$(state "$ours" "$p")
  [[ $s == running ]]
  check "a: ours --get-state: $s (want running)" $?
  a="(not asked: a CUDA call of a process that is not running waits)"
  [[ $s == running ]] && a=$(ask "$d" hash)
  [[ $a == "hash $h" ]]
  check "a: memory intact after dump and restore: $a (ready $h)" $?
  stop_target "$d" "$p"
else
  verdict FAIL "a: the target did not start"
fi

# ---- b. CRIU's CUDA plugin running cuda-checkpoint from PATH ----
# plugin_run PROGRAM MIB LABEL PATHDIR: one dump and restore with the plugin; records the times.
plugin_run() {
  local prog=$1 mib=$2 label=$3 dir=$4 img d p h t0 t1 t2 t3 rc s1 s2 a size ok=0
  if (($(free_mib) < mib * 3 + 2048)); then
    verdict SKIP "b/$label: $(free_mib) MiB free in /tmp, the image needs about $((mib * 5 / 2)) MiB"
    return
  fi
  img=$bin/img-$label
  rm -rf "$img"
  mkdir -p "$img"
  start_target "$label" "$mib" || { verdict FAIL "b/$label: the target did not start"; return; }
  d=$T_DIR p=$T_PID h=$T_HASH
  t0=$(now)
  run_criu "$work/$label-dump.log" env PATH="$dir:$PATH" "$criu" dump --tree "$p" --images-dir "$img" \
    --libdir "$plugins"
  rc=$?
  t1=$(now)
  size=$(du -sh "$img" | cut -f1)
  if ((rc != 0)); then
    verdict FAIL "b/$label: criu dump (plugin, $(who "$prog") cuda-checkpoint) exited $rc"
    plugin_lines "$work/$label-dump.log"
    rm -rf "$img"
    stop_target "$d" "$p"
    return
  fi
  wait_gone "$p" # criu killed it; its pid must be free for the restore
  t2=$(now)
  run_criu "$work/$label-restore.log" env PATH="$dir:$PATH" "$criu" restore --restore-detached \
    --images-dir "$img" --libdir "$plugins"
  rc=$?
  t3=$(now)
  rm -rf "$img"
  ((rc == 0)) || ok=1
  s1=$(state "$ours" "$p")
  s2=$(state "$nvidia" "$p")
  [[ $s1 == running && $s2 == running ]] || ok=1
  a=
  [[ $s1 == running ]] && a=$(ask "$d" hash)
  [[ $a == "hash $h" ]] || ok=1
  echo "    dump $(secs "$t0" "$t1") s (image $size), restore $(secs "$t2" "$t3") s (criu rc $rc);" \
    "state: ours says $s1, NVIDIA's says $s2; memory: ${a:-not asked} (ready $h)"
  check "b/$label: criu dump + restore, the plugin running $(who "$prog") cuda-checkpoint: running, memory intact" $ok
  # The plugin's own lines: it locked, checkpointed, restored and unlocked through the binary.
  local want=("pausing devices on pid $p" "Checkpointing CUDA devices on pid $p" "resuming devices on pid $p")
  local missing=()
  for w in "${want[@]}"; do grep -qF "$w" "$work/$label-dump.log" "$work/$label-restore.log" || missing+=("$w"); done
  ((${#missing[@]} == 0))
  gpu_check "b/$label: criu's log shows the plugin's lock, checkpoint and restore of pid $p${missing[*]:+ (missing: ${missing[*]})}" $? "$NO_PLUGIN"
  LINES_MAX=12 plugin_lines "$work/$label-dump.log" "$work/$label-restore.log"
  # Kept: the logs of a failed run, and of the traced runs.
  if ((ok != 0)) || [[ $label == trace-* ]]; then cp "$work/$label-"*.log "$logs/" 2>/dev/null; fi
  rm -f "$work/$label-"*.log
  a=${a#hash }
  echo "$prog $mib $(secs "$t0" "$t1") $(secs "$t2" "$t3") $size ${s1// /_} ${a// /_}=$h" >>"$bin/criu-times.txt"
  stop_target "$d" "$p"
}

# A wrapper that logs every call the plugin makes (arguments, exit code, output, time) and passes
# the program's own output and exit code on.
make_tracer() { # NAME REAL
  mkdir -p "$bin/trace-$1"
  cat >"$bin/trace-$1/cuda-checkpoint" <<EOF
#!/bin/bash
t0=\$(date +%s.%N)
out=\$("$2" "\$@" 2>&1)
rc=\$?
t1=\$(date +%s.%N)
{ printf 'call %s rc=%s ms=%s\n' "\$*" "\$rc" "\$(awk -v a="\$t0" -v b="\$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }')"
  printf '%s\n' "\$out" | head -\$([ "\$1" = -h ] && echo 1 || echo 5) | sed 's/^/  | /'; } >>"$bin/trace-$1.txt"
[ -n "\$out" ] && printf '%s\n' "\$out"
exit \$rc
EOF
  chmod +x "$bin/trace-$1/cuda-checkpoint"
  : >"$bin/trace-$1.txt"
}

echo
echo "== b. CRIU's CUDA plugin, cuda-checkpoint from PATH"
echo "-- traced: one run each, 256 MiB, every call the plugin makes"
make_tracer ours "$ours"
make_tracer nvidia "$nvidia"
for prog in ours nvidia; do
  plugin_run "$prog" 256 "trace-$prog" "$bin/trace-$prog"
  echo "   the calls of $(who "$prog") cuda-checkpoint, as the plugin made them:"
  sed 's/^/     /' "$bin/trace-$prog.txt"
  # The sequence with the pid and every restore thread id named, the times left out.
  norm=()
  pid=$(grep -m1 -oE 'call --get-restore-tid --pid [0-9]+' "$bin/trace-$prog.txt" | grep -oE '[0-9]+$')
  [[ -n $pid ]] && norm+=(-e "s/\\b$pid\\b/<pid>/g")
  while read -r tid; do
    [[ $tid != "$pid" ]] && norm+=(-e "s/\\b$tid\\b/<tid>/g")
  done < <(grep -A1 'call --get-restore-tid' "$bin/trace-$prog.txt" | sed -n 's/^  | \([0-9][0-9]*\)$/\1/p' | sort -u)
  norm+=(-e 's/ ms=[0-9.]+//')
  # Every call and its output, but -h's (each program's own help text).
  awk '/^call /{ h = ($2 == "-h") } !(h && /^  \| /)' "$bin/trace-$prog.txt" | sed -E "${norm[@]}" \
    >"$bin/trace-$prog.seq"
done
if [[ -n $nogpu && ! -s $bin/trace-ours.seq && ! -s $bin/trace-nvidia.seq ]]; then
  verdict SKIP "b/trace: the plugin called neither program (dry run: $NO_PLUGIN)"
elif [[ -s $bin/trace-ours.seq ]] && cmp -s "$bin/trace-ours.seq" "$bin/trace-nvidia.seq"; then
  verdict PASS "b/trace: the plugin made the same $(grep -c '^call ' "$bin/trace-ours.seq") calls of ours as of NVIDIA's, with the same exit codes and output"
else
  verdict FAIL "b/trace: the plugin's calls, exit codes or output differ between NVIDIA's (<) and ours (>)"
  diff "$bin/trace-nvidia.seq" "$bin/trace-ours.seq" | sed 's/^/    /'
fi

echo "-- timed: ours and NVIDIA's taking turns, ${rounds} round(s)"
: >"$bin/criu-times.txt"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(ours nvidia); else order=(nvidia ours); fi
  for mib in "${sizes[@]}"; do
    for prog in "${order[@]}"; do
      if (($(left) < 60 + mib / 50)); then
        verdict SKIP "b/$prog-$mib-r$r: $(left) s left of the $budget s budget"
        continue
      fi
      echo "-- round $r: $(who "$prog") cuda-checkpoint, $mib MiB"
      if [[ $prog == ours ]]; then dir=$bin/ours-bin; else dir=$bin/nvidia; fi
      plugin_run "$prog" "$mib" "$prog-$mib-r$r" "$dir"
    done
  done
done

# ---- summary ----
{
  echo "# CRIU with our cuda-checkpoint and with NVIDIA's"
  echo
  echo "$(date -u +%FT%TZ), $(hostname), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1),"
  echo "criu $("$criu" --version 2>/dev/null | head -1 | sed 's/Version: //') with its CUDA plugin; kernel $(uname -r)."
  echo "Each run: a fresh target of the size given, \`criu dump --tree PID\` with the plugin (which"
  echo "locks and checkpoints through \`cuda-checkpoint\` on PATH), then \`criu restore --restore-detached\`"
  echo "(which restores and unlocks through it); seconds from \`date +%s.%N\` around each criu call."
  echo
  echo "| program | GPU memory | dump s | restore s | image | state after | memory (now=ready) |"
  echo "|---|---|---|---|---|---|---|"
  while read -r prog mib dump restore size st mem; do
    echo "| $prog | $mib MiB | $dump | $restore | $size | $st | $mem |"
  done <"$bin/criu-times.txt"
  echo
  echo "Medians:"
  echo
  echo "| GPU memory | ours dump | NVIDIA's dump | ours restore | NVIDIA's restore |"
  echo "|---|---|---|---|---|"
  for mib in "${sizes[@]}"; do
    med() { awk -v p="$1" -v m="$mib" -v c="$2" '$1 == p && $2 == m { print $c }' "$bin/criu-times.txt" |
      sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else printf "-" }'; }
    echo "| $mib MiB | $(med ours 3) | $(med nvidia 3) | $(med ours 4) | $(med nvidia 4) |"
  done
} >"$out/criu-report.md"
echo
cat "$out/criu-report.md"
tar -C "$bin" -czf "$out/criu-logs.tgz" criu-logs trace-ours.txt trace-nvidia.txt 2>/dev/null
verdict_summary "$bin/criu-verdicts.txt"
