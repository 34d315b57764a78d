# shellcheck shell=bash
# Sourced first by the short runs of tests/gpu/exp on criu (pid_taken.sh, recover_stopped.sh,
# hidden_gpu.sh, root_taken.sh), with the run's NAME: strict mode, the repo root as the working
# directory, the GPU scripts' helpers (verdicts.sh, targets.sh, setup.sh), then setup.sh's
# exp_criu_session NAME.
#
#   . "$(dirname "$0")/session.sh" NAME
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh
. tests/gpu/setup.sh
exp_criu_session "$1"
