# Pairs of processes that share GPU memory, for tests/gpu/ipc_probe.sh and ipc_refuse.sh (sourced
# from the repo root, after verdicts.sh and targets.sh): start KIND NAME, stop, driver,
# field. Expects $PY, $bin, CK (our cuda-checkpoint, as an array) and NV (NVIDIA's, or empty).
# shellcheck shell=bash

started=()
# Only ours: a Python (the spawned children's command lines do not name $bin).
cleanup() { end_started python; }
trap cleanup EXIT

# driver PID: "state,restore-tid" as ours says (and NVIDIA's, where carried: "/ theirs ...").
driver() {
  local s t n=""
  s=$(timeout 60 "${CK[@]}" --get-state --pid "$1" 2>&1 | head -1 | tr ' ,' '__')
  t=$(timeout 60 "${CK[@]}" --get-restore-tid --pid "$1" 2>&1 | head -1 | tr ' ,' '__')
  if ((${#NV[@]})); then
    n="/nvidia:$(timeout 60 "${NV[@]}" --get-state --pid "$1" 2>&1 | head -1 | tr ' ,' '__'),$(timeout 60 "${NV[@]}" --get-restore-tid --pid "$1" 2>&1 | head -1 | tr ' ,' '__')"
  fi
  echo "$s,$t$n"
}
# A field of a line: `name=value`, or `name value` (how the targets answer a question).
field() {
  local re=" $2[= ]([^ ]*)"
  [[ " $1 " =~ $re ]] && echo "${BASH_REMATCH[1]}"
}

# start KIND NAME: a pair (or the lone process) in a session of its own; sets D, P (the parent or
# the lone process), C (the child, none for lone), READY (the parent's ready line).
start() {
  local kind=$1 line
  D=$bin/p-$2 P='' C='' READY=''
  rm -rf "$D"
  mkdir -p "$D"
  mkfifo "$D/parent.cmd" "$D/child.cmd"
  if [[ $kind == fd ]]; then
    setsid "$PY" "$PWD/tests/gpu/ipc/cumem_fd.py" --dir "$D" </dev/null >"$D/parent.out" 2>"$D/parent.err" &
  else
    setsid "$PY" "$PWD/tests/gpu/ipc/ipc_pair.py" --kind "$kind" --dir "$D" </dev/null >"$D/parent.out" 2>"$D/parent.err" &
  fi
  P=$!
  disown "$P"
  started+=("$P")
  if ! line=$(ready_line "$D/parent.out" "$P"); then
    echo "   $kind did not start: $(tail -5 "$D/parent.out" "$D/parent.err" "$D/child.err" 2>/dev/null | tr '\n' ' ')"
    kill -9 "$P" 2>/dev/null
    return 1
  fi
  READY=$line
  C=$(field "$line" child)
  [[ -n $C ]] && started+=("$C")
  echo "   $kind: $line"
  [[ -n $C ]] && echo "   $kind child: $(grep -m1 '^ready ' "$D/child.out")"
  grep -h '^note ' "$D/parent.out" "$D/child.out" 2>/dev/null | sed 's/^/   /'
  return 0
}
# stop: "exit" to the child and the parent, then SIGKILL whatever is left.
stop() {
  local i
  [[ -n $C ]] && timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$D/child.cmd" 2>/dev/null
  timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$D/parent.cmd" 2>/dev/null
  for ((i = 0; i < 100; i++)); do alive "$P" || break; sleep 0.1; done
  kill -9 "$P" ${C:+"$C"} 2>/dev/null
}

