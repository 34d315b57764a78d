#!/usr/bin/env bash
# This package refuses a stopped CUDA process (docs/ERRORS.md, STATE) where the driver would not
# answer (stopped_calls.sh): a PyTorch process of 256 MiB, SIGSTOPped, then lock, suspend and toggle
# through the library (stopped_refusal.ts, under our binary's Bun, this working tree) and `list`
# (our binary: it reports the process, not asking its state); let go, a suspend and resume, and its
# tensor checked. One GPU, .carry/cuda-checkpoint-ours.xz:
#   timeout 200 bash tests/gpu/exp/stopped_refusal.sh
set -u
. tests/gpu/setup.sh # torch_target
d=$(mktemp -d)
xz -dc .carry/cuda-checkpoint-ours.xz >"$d/ours" && chmod +x "$d/ours"
bun() { timeout 60 env BUN_BE_BUN=1 "$d/ours" --preload ./tests/gpu/unset_bun_be_bun.ts tests/gpu/exp/stopped_refusal.ts "$@"; }
torch_target "$d/t" && torch_ready "$d/t"; p=$tpid fd=$tfd
echo "== pid $p $(head -1 "$d/t.out")"
kill -STOP "$p"; echo "SIGSTOP: $(awk '{print $3}' /proc/$p/stat)"
bun stopped "$p"
echo "list (our binary):"; timeout 20 "$d/ours" list 2>&1 | sed 's/^/  /'; echo "  -> exit ${PIPESTATUS[0]}"
echo "still stopped: $(awk '{print $3}' /proc/$p/stat)"; kill -CONT "$p"; sleep 0.5
bun running "$p"
echo go >&$fd; sleep 1.5; echo "after: $(tail -1 "$d/t.out") (intact: 469762048.0)"
kill "$p"; wait; rm -rf "$d"
