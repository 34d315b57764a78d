#!/usr/bin/env bash
# Packs Debian's criu 4.1 and the libraries it needs into .carry/criu.tgz (about 6 MB), for the GPU
# machine, which has no criu and reaches no registry. From the project root:
#
#   bash tests/gpu/tools/carry-criu.sh
#
# The packages come from the Debian suite $CRIU_SUITE (default trixie), through this machine's own
# package mirror and Debian's archive key: criu 3.17 of bookworm fails on the GPU machine's kernel
# (its vDSO), 4.1 works there. This criu has no CUDA plugin (carry-criu-cuda.sh builds one); it is
# enough for NVIDIA's documented workflow, where cuda-checkpoint suspends the process first. On the
# GPU machine (never unpack it into /):
#   mkdir -p /tmp/criu && tar -C /tmp/criu -xzf .carry/criu.tgz
#   export LD_LIBRARY_PATH=/tmp/criu/usr/lib/x86_64-linux-gnu; /tmp/criu/usr/sbin/criu check
set -euo pipefail
# shellcheck source=tests/gpu/tools/debian_sources.sh
. "$(dirname "$0")/debian_sources.sh"
# shellcheck source=tests/gpu/tools/carry_dir.sh
. "$(dirname "$0")/carry_dir.sh"
suite=${CRIU_SUITE:-trixie}
out=.carry/criu.tgz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

debian_sources "$work" deb "$suite" || exit 1
mkdir -p "$work/deb" "$work/root"
apt=(apt-get "${apt_dirs[@]}")
"${apt[@]}" update -qq 2>&1 | quiet || echo "warning: apt-get update of $suite failed" >&2
# criu and every library it links that a bare Debian or Ubuntu system may lack.
packages=(criu libcompel1 libgnutls30t64 libnftables1 libnl-3-200 libprotobuf-c1 libnet1 libbsd0
  libuuid1 libmd0 libmnl0 libnftnl11 libjansson4 libxtables12 libgmp10 libunistring5 libidn2-0
  libtasn1-6 libnettle8t64 libhogweed6t64 libp11-kit0 libffi8 libedit2)
# A package the suite no longer has is reported and skipped; criu itself must be there.
(cd "$work/deb" && "${apt[@]}" download "${packages[@]}" 2>&1 | quiet) ||
  echo "warning: some packages were not downloaded (see above)" >&2
for deb in "$work"/deb/*.deb; do dpkg -x "$deb" "$work/root"; done
[[ -x $work/root/usr/sbin/criu ]] || { echo "no criu in the downloaded packages" >&2; exit 1; }
tar -C "$work/root" -czf "$out.tmp" . && mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1)"
