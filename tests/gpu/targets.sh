# Sourced by criu_cli.sh and snapshot.sh: tests/gpu/target.cu in fifo mode, a session of its own
# (setsid, stdin /dev/null, stdout to a file, one command per opening of a named fifo), so that
# criu has nothing it cannot dump. The sourcing script sets $bin (its scratch folder), $target (the
# built target) and the array started=() (pids it ends at exit).
#   alive PID                 a live process (a zombie is gone: nothing here reaps a restored one)
#   taken PID                 the pid is in use, zombies included
#   start_target NAME MIB     sets T_DIR, T_PID, T_HASH (the "ready" line's) and T_CHILD; with
#                             T_SETSID=0, started without setsid: a shell job, in this script's
#                             session and process group
#   start_named NAME MIB      start_target NAME MIB, its pid, directory and hash set as $NAME,
#                             $NAME_dir and $NAME_hash; the setup fails where it does not start
#   start_parented NAME MIB   a target of MIB as the child of a bash parent named NAME (a session of
#                             its own, or with T_SETSID=0 a shell job), in DIR $bin/t: sets T_DIR,
#                             T_ROOT (the parent), T_PID and T_HASH
#   ready_line FILE PID [SECONDS]  prints FILE's first "ready ..." line once it is there; fails
#                             (printing nothing) where PID ends first or SECONDS (300) pass
#   ask DIR COMMAND [SECONDS] [NAME]  sends a command through DIR/cmd (DIR/NAME.cmd), prints the
#                             next line of DIR/out (DIR/NAME.out)
#   hash_intact WHAT DIR HASH the target in DIR answers HASH (its ready line's): the sourcing
#                             script's check WHAT, with the answer
#   end_started REGEX         every pid of started=() still alive whose command line matches
#                             REGEX (a pid may have been reused) continued, then killed: an EXIT trap
#   stop_target DIR PID       "exit", else SIGKILL; DIR removed
#   wait_gone PID...          until each pid is free (reaped, not even a zombie), for a restore

alive() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $s != Z* ]]
}

taken() { ps -p "$1" >/dev/null 2>&1; }

start_target() {
  T_DIR=$bin/t-$1 T_PID='' T_HASH=''
  rm -rf "$T_DIR"
  mkdir -p "$T_DIR"
  mkfifo "$T_DIR/cmd"
  if [[ ${T_SETSID:-1} == 0 ]]; then
    "$target" fifo "$2" "$T_DIR/cmd" </dev/null >"$T_DIR/out" 2>&1 &
  else
    setsid "$target" fifo "$2" "$T_DIR/cmd" </dev/null >"$T_DIR/out" 2>&1 &
  fi
  T_CHILD=$!
  # Out of the job table (no "Killed" notice when criu kills it); bash still reaps it.
  disown "$T_CHILD"
  local line
  line=$(ready_line "$T_DIR/out" "$T_CHILD" 120) && read -r _ T_PID _ T_HASH <<<"$line"
  if [[ -z $T_PID ]]; then
    echo "target $1 did not start: $(head -3 "$T_DIR/out")"
    return 1
  fi
  started+=("$T_PID")
  # setsid forks only when it is a process group leader, which a background job here is not.
  [[ $T_PID == "$T_CHILD" ]] || echo "note: setsid forked: target $T_PID, child $T_CHILD"
  echo "target $1: pid $T_PID, $2 MiB, hash $T_HASH"
}

start_named() {
  start_target "$1" "$2" || fail_setup "the target $1 ($2 MiB) did not start"
  printf -v "$1" %s "$T_PID"
  printf -v "$1_dir" %s "$T_DIR"
  printf -v "$1_hash" %s "$T_HASH"
}

start_parented() {
  T_DIR=$bin/t T_ROOT='' T_PID='' T_HASH=''
  mkdir -p "$T_DIR"
  mkfifo "$T_DIR/cmd"
  # shellcheck disable=SC2016 # the parent's own $1, $2 and $3
  local run=(bash -c '"$1" fifo "$2" "$3/cmd" </dev/null >"$3/out" 2>&1 & wait' "$1" "$target" "$2" "$T_DIR")
  if [[ ${T_SETSID:-1} == 0 ]]; then
    "${run[@]}" </dev/null >"$T_DIR/parent.out" 2>&1 &
  else
    setsid "${run[@]}" </dev/null >"$T_DIR/parent.out" 2>&1 &
  fi
  T_ROOT=$!
  disown "$T_ROOT"
  started+=("$T_ROOT")
  local line
  line=$(ready_line "$T_DIR/out" "$T_ROOT" 120) && read -r _ T_PID _ T_HASH <<<"$line"
  [[ -n $T_PID ]] || { echo "the target of $1 did not start: $(head -3 "$T_DIR/out")"; return 1; }
  started+=("$T_PID")
  echo "parent $T_ROOT, target $T_PID (hash $T_HASH)"
}

ready_line() {
  local i
  for ((i = 0; i < ${3:-300} * 10; i++)); do
    grep -m1 '^ready ' "$1" 2>/dev/null && return 0
    alive "$2" || break
    sleep 0.1
  done
  grep -m1 '^ready ' "$1" 2>/dev/null
}

ask() {
  local out=$1/${4:+$4.}out n line i
  n=$(wc -l <"$out")
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
  timeout 20 bash -c 'printf "%s\n" "$1" >"$2"' _ "$2" "$1/${4:+$4.}cmd" || { echo "(the fifo was not read)"; return 1; }
  for ((i = 0; i < ${3:-60} * 10; i++)); do
    line=$(sed -n "$((n + 1))p" "$out")
    [[ -n $line ]] && { echo "$line"; return 0; }
    sleep 0.1
  done
  echo "(no answer in ${3:-60} s)"
  return 1
}

hash_intact() {
  local a
  a=$(ask "$2" hash 60)
  [[ $a == "hash $3" ]]
  check "$1" $? "$a"
}

stop_target() {
  local i
  if alive "$2"; then
    # shellcheck disable=SC2016
    timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$1/cmd" 2>/dev/null
    for ((i = 0; i < 50; i++)); do alive "$2" || break; sleep 0.1; done
    alive "$2" && kill -9 "$2" 2>/dev/null
  fi
  rm -rf "$1"
}

wait_gone() {
  local p i
  for p in "$@"; do
    for ((i = 0; i < 100; i++)); do taken "$p" || continue 2; sleep 0.1; done
    echo "note: pid $p is still taken: $(ps -o pid=,stat=,ppid=,comm= -p "$p")"
    return 1
  done
}

end_started() {
  local p
  for p in "${started[@]}"; do
    if alive "$p" && grep -qaE "$1" "/proc/$p/cmdline" 2>/dev/null; then
      kill -CONT "$p" 2>/dev/null
      kill -9 "$p" 2>/dev/null
    fi
  done
}
