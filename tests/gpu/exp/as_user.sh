#!/usr/bin/env bash
# Ours as a user, not root, on a CUDA process of that user's (uid 65534; tests/gpu/target.cu, built
# with nvcc): --get-state, --toggle there and back, --get-state, the target's hash of its memory
# the same after; and what ours leaves in the temporary directory. Carry
# .carry/cuda-checkpoint-ours.xz:
#   timeout 300 bash tests/gpu/exp/as_user.sh      (log: $OUT/log)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # exp_session: $out, $d (removed at exit) with ours in it, the log
. tests/gpu/targets.sh # ready_line
exp_session
chmod 755 "$d" # the user runs ours and its target from it
mkfifo "$d/cmd" && chown 65534 "$d/cmd" && chmod 666 "$d/cmd"
timeout 180 nvcc -O2 -o "$d/target" tests/gpu/target.cu || { echo "FAIL: nvcc"; exit 1; }
chmod 755 "$d/target"
as() { setpriv --reuid 65534 --regid 65534 --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
ls -a /tmp > "$d/tmp.before"
as "$d/target" fifo 1024 "$d/cmd" </dev/null >"$d/out" 2>&1 &
pid=$!
trap 'kill -9 "$pid" 2>/dev/null; rm -rf "$d"' EXIT
line=$(ready_line "$d/out" "$pid" 120) || { echo "FAIL: target did not start: $(head -3 "$d/out")"; exit 1; }
read -r _ tpid _ hash <<<"$line"
echo "target pid $tpid (uid $(stat -c %u /proc/$tpid)), hash $hash"
for step in "--get-state" "--toggle" "--get-state" "--toggle" "--get-state"; do
  printf '%s: ' "$step"; as timeout 60 "$d/ours" $step --pid "$tpid" 2>&1; echo "   (exit $?)"
done
echo "as root for comparison: $(timeout 30 "$d/ours" --get-state --pid "$tpid")"
echo hash > "$d/cmd"; sleep 1; echo "the target's answers: $(tail -2 "$d/out" | tr '\n' ' ')"
ls -a /tmp > "$d/tmp.after"
echo "left in /tmp by ours as the user: $(comm -13 "$d/tmp.before" "$d/tmp.after" | tr '\n' ' ')"
ls -la /tmp/ckpt-cuda-65534 /tmp/ckpt-cuda-65534/held 2>&1 | head -8
