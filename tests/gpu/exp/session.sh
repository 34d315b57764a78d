# shellcheck shell=bash
# Sourced first by the short runs of tests/gpu/exp on criu (pid_taken.sh, recover_stopped.sh,
# hidden_gpu.sh, root_taken.sh, the live line's and criu's counts'), with the run's NAME: strict
# mode, the repo root as the working directory, the GPU scripts' helpers (verdicts.sh, targets.sh,
# setup.sh), then setup.sh's exp_criu_session NAME. Its own helpers, on ours ($CK):
#   snapshot_of PIDS NAME [PID...]  a snapshot of PIDS (a comma list) into $bin/NAME, checked (its
#                             output in $bin/NAME.out), then PIDS and each PID gone, for a restore
#   round_trip PIDS NAME [PID...]  snapshot_of, then restore-snapshot --events, checked: its events
#                             in $bin/NAME.events
#
#   . "$(dirname "$0")/session.sh" NAME
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh
. tests/gpu/setup.sh
exp_criu_session "$1"

snapshot_of() {
  timeout 300 "${CK[@]}" snapshot --pid "$1" --dir "$bin/$2" >"$bin/$2.out" 2>&1
  check "$2: snapshot" $? "$(tail -2 "$bin/$2.out")"
  local pids
  IFS=, read -ra pids <<<"$1"
  wait_gone "${pids[@]}" "${@:3}"
}

round_trip() {
  snapshot_of "$@"
  timeout 300 "${CK[@]}" restore-snapshot "$bin/$2" --events >/dev/null 2>"$bin/$2.events"
  check "$2: restore with --events" $? "$(tail -2 "$bin/$2.events")"
}
