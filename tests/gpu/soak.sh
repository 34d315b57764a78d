#!/usr/bin/env bash
# The reliability soak (issue 10) on a GPU machine, one runtime per run, from the repo root with
# .carry/ carried (bash tests/gpu/tools/carry-runtimes.sh deno, or bun):
#   bash tests/gpu/soak.sh deno      (or bun)
# Steps, each under its own timeout (tests/gpu/soak.ts says what each checks):
#   cycles     one 1 GiB target, 200 suspend/resume cycles, hash every 10, controller RSS steady
#   many       four 1 GiB targets, 50 cycles all at once
#   oom        a resume onto a full GPU is refused first and succeeds once freed; the driver's own
#              out-of-memory (checkRoom: false) leaves the process unrestorable
#   killed     targets killed while checkpointed, while locked, while a lock waits on them
#   interrupt  SIGINT to cuda-checkpoint in the middle of a group suspend
#   privilege  a getState by an unprivileged user (nobody): what the driver and our CLI say
# About 6 minutes on an H100. The log is $OUT/soak-<runtime>.txt (or tests/gpu/out); the last
# lines count PASS and FAIL. SOAK_CYCLES and SOAK_MANY_CYCLES shorten a run (200 and 50);
# SOAK_BUDGET (540 s) bounds the whole run: each step's timeout is cut to what is left of it.
set -uo pipefail
rt=${1:-deno}
out=${OUT:-tests/gpu/out}
mkdir -p "$out" /tmp/ckpt
log="$out/soak-$rt.txt"
exec > >(tee "$log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) runtime $rt"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv,noheader
xz -dc ".carry/$rt.xz" > "/tmp/ckpt/$rt" && chmod 755 "/tmp/ckpt/$rt" && export PATH=/tmp/ckpt:$PATH
"$rt" --version | head -1
timeout 120 nvcc -O2 -o /tmp/ckpt/target tests/gpu/target.cu || { echo "FAIL build: nvcc"; exit 1; }
if [ "$rt" = deno ]; then R=(deno run -A); else R=(bun); fi

start=$SECONDS
tally=$(mktemp)
budget=${SOAK_BUDGET:-540} # seconds for the whole run (a lent machine's command gets 600)
step() {
  local limit=$1 name=$2
  shift 2
  # Cut to what is left of the budget, keeping 30 s for the privilege step and the tally.
  local left=$((budget - SECONDS - 30))
  ((left < limit)) && limit=$left
  if ((limit < 15)); then
    echo "FAIL $name: not run, no time left in the ${budget}s budget" | tee -a "$tally"
    return
  fi
  echo "== $name (timeout ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$tally"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "FAIL $name: timed out after ${limit}s" | tee -a "$tally"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && ! grep -q "^FAIL $name" "$tally" &&
    echo "FAIL $name: exited $rc" | tee -a "$tally"
  echo "== $name rc=$rc in $((SECONDS - t0))s"
}

step 330 cycles "${R[@]}" tests/gpu/soak.ts /tmp/ckpt/target cycles "${SOAK_CYCLES:-200}"
step 150 many "${R[@]}" tests/gpu/soak.ts /tmp/ckpt/target many "${SOAK_MANY_CYCLES:-50}"
step 90 oom "${R[@]}" tests/gpu/soak.ts /tmp/ckpt/target oom
step 90 killed "${R[@]}" tests/gpu/soak.ts /tmp/ckpt/target killed
step 90 interrupt "${R[@]}" tests/gpu/soak.ts /tmp/ckpt/target interrupt

# An unprivileged user's getState of root's CUDA process: what libcuda answers (python3 ctypes)
# and what our command line says (--json carries the detail a terminal would show).
privilege() {
  local nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${nobody[@]}" true 2>/dev/null || nobody=(su nobody -s /bin/sh -c)
  coproc T { /tmp/ckpt/target cuda 16; }
  read -r -t 60 ready <&"${T[0]}" || { echo "FAIL privilege: the target did not start"; return; }
  local pid
  pid=$(cut -d' ' -f2 <<<"$ready")
  # A copy of the package and a home that nobody can read and write.
  local pkg=/tmp/ckpt/pkg home=/tmp/ckpt/nobody-home
  rm -rf "$pkg" "$home" && mkdir -p "$pkg" "$home" && cp -r mod.ts driver.ts snapshot.ts types.ts deno.json api core ffi os mock cli "$pkg/"
  chmod -R a+rX "$pkg" && chown 65534 "$home"
  local py='import ctypes,sys
cuda=ctypes.CDLL("libcuda.so.1"); s=ctypes.c_int(-1)
rc=cuda.cuCheckpointProcessGetState(int(sys.argv[1]),ctypes.byref(s))
name=ctypes.c_char_p(); cuda.cuGetErrorName(rc,ctypes.byref(name))
print("libcuda as nobody: cuCheckpointProcessGetState ->", rc, (name.value or b"?").decode(), "state", s.value)'
  local raw cli cli_rc cmd py3
  py3=$(command -v /usr/bin/python3 || command -v python3)
  if [ "${nobody[0]}" = su ]; then
    raw=$(timeout 30 su nobody -s /bin/sh -c "$py3 -c '$py' $pid" 2>&1)
  else
    raw=$(timeout 30 "${nobody[@]}" "$py3" -c "$py" "$pid" 2>&1)
  fi
  echo "$raw"
  cmd=(env "HOME=$home")
  if [ "$rt" = deno ]; then
    cmd+=("DENO_DIR=$home/deno" /tmp/ckpt/deno run -A "$pkg/cli/main.ts")
  else
    cmd+=(/tmp/ckpt/bun "$pkg/cli/main.ts")
  fi
  cmd+=(--get-state --pid "$pid" --json)
  if [ "${nobody[0]}" = su ]; then
    cli=$(timeout 60 su nobody -s /bin/sh -c "${cmd[*]}" 2>&1); cli_rc=$?
  else
    cli=$(timeout 60 "${nobody[@]}" "${cmd[@]}" 2>&1); cli_rc=$?
  fi
  echo "our CLI as nobody (exit $cli_rc): $cli"
  local as_root
  as_root=$(timeout 30 "${R[@]}" cli/main.ts --get-state --pid "$pid" 2>/dev/null)
  echo "our CLI as root: $as_root"
  echo exit >&"${T[1]}"; wait "$T_PID" 2>/dev/null
  if [ "$cli_rc" != 0 ] && [ "$as_root" = running ]; then
    echo "PASS privilege: without privilege getState fails (exit $cli_rc) and root's process is untouched"
  elif [ "$cli_rc" = 0 ]; then
    echo "PASS privilege: NOTE an unprivileged user may read the state ($cli); nothing changed"
  else
    echo "FAIL privilege: root's getState said $as_root"
  fi
  grep -q 'CAP_SYS_PTRACE' <<<"$cli" && echo "PASS privilege: the error names root or CAP_SYS_PTRACE" ||
    echo "NOTE privilege: the error does not name CAP_SYS_PTRACE (see the JSON above)"
}
echo "== privilege (each command under its own timeout)"
t0=$SECONDS; privilege 2>&1 | tee -a "$tally"; echo "== privilege in $((SECONDS - t0))s"

echo "== done in $((SECONDS - start))s"
pass=$(grep -c '^PASS ' "$tally"); fail=$(grep -c '^FAIL ' "$tally"); skip=$(grep -c '^SKIP ' "$tally")
echo "SOAK $rt: $pass PASS, $fail FAIL, $skip SKIP (log: $log)"
rm -f "$tally"
[ "$fail" = 0 ]
