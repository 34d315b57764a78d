#!/usr/bin/env bash
# Runs tests/gpu/exp/room_many.ts on one GPU, as root, from the repo root: this tree against the
# tree before this session's room changes (1b1a56d's core/room.ts on a copy of this tree):
#
#   bash tests/gpu/exp/room_many.sh
#
# Carry .carry/deno.xz and tests/gpu/out/room_before.ts (`git show 1b1a56d:core/room.ts`).
# COUNT, MIB, TRIALS, SIDES as room_many.ts's options.
set -o pipefail
mkdir -p /tmp/ckpt && xz -dc .carry/deno.xz >/tmp/ckpt/deno && chmod +x /tmp/ckpt/deno
export PATH=/tmp/ckpt:$PATH
exec > >(tee -a "$OUT/room-many.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores"
timeout 120 nvcc -O2 -o /tmp/ckpt/target tests/gpu/target.cu || exit 1
rm -rf /tmp/before && mkdir /tmp/before && tar --exclude=.carry -cf - . | tar -xf - -C /tmp/before &&
  cp tests/gpu/out/room_before.ts /tmp/before/core/room.ts || exit 1
timeout 540 deno run -A tests/gpu/exp/room_many.ts --target /tmp/ckpt/target --before /tmp/before/mod.ts \
  --count "${COUNT:-64}" --mib "${MIB:-256}" --trials "${TRIALS:-2}" --sides "${SIDES:-now,before,no-room,threads}"
echo "== rc=$?"
