# shellcheck shell=bash
# Sourced by the carry-*.sh scripts beside it, never run: moves to the project root (three levels
# up from here, whatever the caller's directory) and makes .carry/ there, kept out of git by
# .git/info/exclude as well as .gitignore. The exclude file is asked of git, so that a worktree
# (where .git is a file) finds the repository's own. Outside a git checkout .carry/ is made all
# the same; only the exclude line is left out.
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
mkdir -p .carry
if exclude=$(git rev-parse --git-path info/exclude 2>/dev/null); then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.carry/' "$exclude" 2>/dev/null || echo '/.carry/' >>"$exclude"
fi
