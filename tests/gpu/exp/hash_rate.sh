#!/usr/bin/env bash
# The host's cores and SHA-256 rates: lscpu, OpenSSL's own (where the host has the tool), and
# hash_rate.ts under our binary's Bun. Carry .carry/cuda-checkpoint-ours.xz:
#   timeout 200 bash tests/gpu/exp/hash_rate.sh      (log: $OUT/hash-rate.txt)
set -u
out=${OUT:-/tmp} d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
exec > >(tee "$out/hash-rate.txt") 2>&1
date -u
lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\)|NUMA node\(s\)|L3)"
grep -o -m1 -w sha_ni /proc/cpuinfo || echo "no sha_ni"
for bytes in 262144 8388608; do
  command -v openssl >/dev/null &&
    timeout 30 openssl speed -seconds 3 -bytes "$bytes" -evp sha256 2>/dev/null | tail -1
done
openssl version 2>/dev/null
xz -dc .carry/cuda-checkpoint-ours.xz >"$d/ours" && chmod +x "$d/ours"
BUN_BE_BUN=1 timeout 60 "$d/ours" --version
BUN_BE_BUN=1 timeout 120 "$d/ours" tests/gpu/exp/hash_rate.ts
