#!/usr/bin/env bash
# Packs Debian's runc into .carry/runc.tgz (about 5 MB) for tests/gpu/container.sh on the GPU
# machine, which has no runc and reaches no registry. From the project root:
#
#   bash tests/gpu/tools/carry-runc.sh
#
# It takes the newest runc of the Debian suites $RUNC_SUITES (default "bookworm trixie forky sid":
# bookworm has 1.1.5, trixie 1.1.15, forky and sid 1.3.6 when this was written), as apt picks it
# from indexes read through a temporary sources list (this machine's own mirror, Debian's archive
# key; apt checks each .deb against its signed index). $RUNC_VERSION pins one version instead.
# Only the packages are downloaded: nothing is installed here.
#
# Debian's runc is linked against glibc and libseccomp.so.2: runc 1.3.6 needs glibc 2.38 (Ubuntu
# 24.04 has 2.39; Debian 12 has 2.36, so it does not run on bookworm) and libseccomp >= 2.5.0
# (Ubuntu 24.04's libseccomp2 is 2.5.5). The pack holds Debian's libseccomp.so.2 of the same suite
# as well, beside the binary, for a machine that lacks it: container.sh uses it only then. The
# packed tree:
#   usr/sbin/runc                                  Debian's binary, unchanged
#   usr/lib/x86_64-linux-gnu/libseccomp.so.2       the fallback
#   usr/share/doc/{runc,libseccomp2}/copyright     their licences
#   usr/share/doc/runc/carried.txt                 the packages' names, versions and suites
# On the GPU machine (container.sh does it): mkdir -p /tmp/runc && tar -C /tmp/runc -xzf .carry/runc.tgz
set -euo pipefail
# shellcheck source=tests/gpu/tools/debian_sources.sh
. "$(dirname "$0")/debian_sources.sh"
# shellcheck source=tests/gpu/tools/carry_dir.sh
. "$(dirname "$0")/carry_dir.sh"
read -r -a suites <<<"${RUNC_SUITES:-bookworm trixie forky sid}"
pin=${RUNC_VERSION:-}
out=.carry/runc.tgz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

debian_sources "$work" deb "${suites[@]}" || exit 1
mkdir -p "$work/deb" "$work/x" "$work/root"
apt=("${apt_dirs[@]}" -oAPT::Default-Release=)
apt-get "${apt[@]}" update -qq 2>&1 | quiet

# madison PACKAGE: "VERSION SUITE" per suite that has it, newest first (apt-cache madison's third
# field is "URI SUITE/COMPONENT ARCH Packages").
madison() {
  apt-cache "${apt[@]}" madison "$1" |
    awk -F'|' '{ gsub(/ /, "", $2); split($3, w, " "); split(w[2], c, "/"); print $2, c[1] }'
}
madison runc | sed 's/^/runc /'
version=${pin:-$(apt-cache "${apt[@]}" policy runc | awk '/Candidate:/ { print $2 }')}
[[ -n $version && $version != "(none)" ]] || { echo "no runc in ${suites[*]}" >&2; exit 1; }
suite=$(madison runc | awk -v v="$version" '$1 == v { print $2; exit }')
[[ -n $suite ]] || { echo "no runc $version in ${suites[*]}" >&2; exit 1; }
echo "taking runc $version (Debian $suite)"

# libseccomp2: the newest of the suite runc came from (the one it was built against, or later).
seccomp=$(madison libseccomp2 | awk -v s="$suite" '$2 == s { print $1; exit }')
[[ -n $seccomp ]] || { echo "Debian $suite has no libseccomp2" >&2; exit 1; }
(cd "$work/deb" && apt-get "${apt[@]}" download "runc=$version" "libseccomp2=$seccomp" 2>&1 | quiet)
ls "$work/deb"/runc_*.deb "$work/deb"/libseccomp2_*.deb >/dev/null ||
  { echo "the downloads failed" >&2; exit 1; }
dep=$(dpkg-deb -f "$work/deb"/runc_*.deb Depends)
echo "runc $version depends on: $dep"
for d in "$work/deb"/*.deb; do dpkg-deb -x "$d" "$work/x"; done

# Stage.
st=$work/root
mkdir -p "$st/usr/sbin" "$st/usr/lib/x86_64-linux-gnu" "$st/usr/share/doc/runc" "$st/usr/share/doc/libseccomp2"
install -m 755 "$work/x/usr/sbin/runc" "$st/usr/sbin/runc"
lib=$(find "$work/x" -name 'libseccomp.so.2*' \( -type f -o -type l \) | sort | head -1)
[[ -n $lib ]] || { echo "libseccomp2 has no libseccomp.so.2" >&2; exit 1; }
cp -L "$lib" "$st/usr/lib/x86_64-linux-gnu/libseccomp.so.2"
cp "$work/x/usr/share/doc/runc/copyright" "$st/usr/share/doc/runc/copyright"
cp "$work/x/usr/share/doc/libseccomp2/copyright" "$st/usr/share/doc/libseccomp2/copyright"
glibc=$(objdump -T "$st/usr/sbin/runc" | grep -oE 'GLIBC_[0-9.]+' | sort -Vu | tail -1)
{
  echo "runc $version (Debian $suite), Depends: $dep"
  echo "libseccomp2 $seccomp (Debian $suite), packed as a fallback only"
  echo "runc needs ${glibc/_/ } or later"
  echo "packed $(date -u +%FT%TZ) by tests/gpu/tools/carry-runc.sh"
} >"$st/usr/share/doc/runc/carried.txt"
cat "$st/usr/share/doc/runc/carried.txt"
if "$st/usr/sbin/runc" --version >/dev/null 2>&1; then
  "$st/usr/sbin/runc" --version | head -1
else
  echo "note: this runc does not run here (glibc $(ldd --version | head -1 | awk '{ print $NF }')); it needs ${glibc/_/ }"
fi

# Pack.
tar -C "$st" --owner=0 --group=0 -czf "$out.tmp" . && mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1), runc $version"
