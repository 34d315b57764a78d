#!/usr/bin/env bash
# membw.c on the GPU host: 8 files of 2 GiB in /tmp, cached, read by 8 criu-like threads and by 16
# (then 8) digest-like threads, alone and at once; then OpenSSL's SHA-256 on 1, 8 and 16 cores at
# once, and the criu-like threads alone and beside 8 and 16 such hashing processes (is a core's
# hashing what slows criu, where reading the same bytes does not?). Log: $OUT/membw.txt.
#   timeout 300 bash tests/gpu/exp/membw.sh [read|hash]   (one part; both where left out)
set -u
cd "$(dirname "$0")" || exit 1
out=${OUT:-/tmp} d=/tmp/membw-files
exec > >(tee "$out/membw.txt") 2>&1
date -u; nproc; grep -m1 "model name" /proc/cpuinfo; grep -c -m1 sha_ni /proc/cpuinfo | sed 's/^/sha_ni: /'
cat /sys/kernel/mm/transparent_hugepage/enabled
mkdir -p "$d" && cc -O2 -pthread -o "$d/membw" membw.c || exit 1
head -c 2147483648 /dev/urandom >"$d/membw-0.bin"
for i in 1 2 3 4 5 6 7; do cp "$d/membw-0.bin" "$d/membw-$i.bin"; done
cat "$d"/membw-*.bin >/dev/null
part=${1:-}
if [[ $part != hash ]]; then
  timeout 100 "$d/membw" "$d" 8 16 2
  timeout 100 "$d/membw" "$d" 8 8 2
fi
sha() { timeout 30 openssl speed -multi "$1" -seconds "$2" -bytes 262144 -evp sha256 2>/dev/null | tail -1; }
[[ $part == read ]] && counts=() || counts=(0 8 16 0)
for n in "${counts[@]}"; do
  ((n > 0)) && echo "openssl sha256, $n at once: $(sha "$n" 3)"
  pid=
  ((n > 0)) && { sha "$n" 10 >/dev/null & pid=$! && sleep 1; }
  echo "beside $n hashing processes:"; timeout 60 "$d/membw" "$d" 8 0 2
  [[ -n $pid ]] && wait "$pid"
done
rm -rf "$d"
