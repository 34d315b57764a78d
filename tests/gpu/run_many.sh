#!/usr/bin/env bash
# The GPU proof of the many-process pieces (issue 7, parts 1-3), one runtime per run:
#   bash tests/gpu/run_many.sh deno     (or bun), from the repo root with .carry/ carried.
# The listing on real processes, group operations with rollback and deadline, and the listing
# benchmark with 300 idle processes; the log goes to $OUT/log-<runtime>-many.txt.
set -o pipefail
rt=$1
mkdir -p /tmp/ckpt; xz -dc .carry/$rt.xz > /tmp/ckpt/$rt && chmod +x /tmp/ckpt/$rt; export PATH=/tmp/ckpt:$PATH
exec > >(tee -a $OUT/log-$rt-many.txt) 2>&1
echo "== $(date -u +%FT%TZ) $rt"; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
timeout 120 nvcc -O2 -o /tmp/ckpt/target tests/gpu/target.cu || exit 1
if [ $rt = deno ]; then R="deno run -A"; else R="bun"; fi
for s in listing group; do echo "== $s"; timeout 150 $R tests/gpu/$s.ts /tmp/ckpt/target; echo "== rc=$?"; done
echo "== bench/listing"; timeout 150 $R bench/listing.ts --processes 300 --runs 5; echo "== rc=$?"
