#!/usr/bin/env bash
# Builds criu from its source together with its CUDA plugin (Debian's criu package has no
# cuda_plugin.so) and packs criu, the plugin and every library they need but glibc's into
# .carry/criu-cuda.tgz (about 4 MB), for the GPU machine, which has no criu and reaches no
# registry. By default criu 4.1.1; from the project root:
#
#   bash tests/gpu/tools/carry-criu-cuda.sh [SRC]
#
# SRC (or $CRIU_SRC), optional: a criu source tree, a source tarball, or a git directory (bare or
# not) that has $CRIU_TAG: a tag, a branch or a commit (default v$CRIU_VERSION, v4.1.1). Without
# SRC, the upstream tarball criu_<version>.orig.tar.* is downloaded from the deb-src of Debian
# suite $CRIU_SUITE (default trixie), checked against the SHA256 of apt's signed Sources index;
# nothing else of the source package is fetched. $CRIU_VERSION is what the source's
# Makefile.versions should say (a warning where it does not). $CRIU_OUT (default
# .carry/criu-cuda.tgz, named from the caller's directory) is the file written: give another
# name for another criu, so that the 4.1.1 build stays where the GPU scripts look for it. For
# example, a commit of criu's development line, from a clone of it:
#
#   CRIU_TAG=<commit> CRIU_VERSION=4.2 CRIU_OUT=.carry/criu-dev-cuda.tgz \
#     bash tests/gpu/tools/carry-criu-cuda.sh ~/src/criu
#
# A build from git records `git describe` of what it built as criu's GitID (`criu --version`
# prints it). The build dependencies are installed with this machine's apt where missing. The
# packed tree is usr/sbin/criu (its RPATH finds the libraries beside it, so no LD_LIBRARY_PATH),
# usr/lib/x86_64-linux-gnu/*.so.* and usr/lib/criu/cuda_plugin.so. What to type on the GPU
# machine is printed at the end (and in tests/gpu/README.md).
set -euo pipefail
src=${1:-${CRIU_SRC:-}}
# SRC is named from the caller's directory; carry_dir.sh moves to the project root.
[[ -z $src || ! -e $src ]] || src=$(realpath -- "$src")
# So is CRIU_OUT; it must end in .tgz, so that a mistyped name replaces nothing else.
out=
if [[ -n ${CRIU_OUT:-} ]]; then
  [[ $CRIU_OUT == *.tgz ]] || { echo "CRIU_OUT must end in .tgz: $CRIU_OUT" >&2; exit 1; }
  out=$(realpath -m -- "$CRIU_OUT")
fi
# shellcheck source=tests/gpu/tools/debian_sources.sh
. "$(dirname "$0")/debian_sources.sh"
# shellcheck source=tests/gpu/tools/carry_dir.sh
. "$(dirname "$0")/carry_dir.sh"
version=${CRIU_VERSION:-4.1.1}
tag=${CRIU_TAG:-v$version}
suite=${CRIU_SUITE:-trixie}
out=${out:-$PWD/.carry/criu-cuda.tgz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. Build dependencies, installed only where missing.
deps=(build-essential pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
  protobuf-compiler libcap-dev libnl-3-dev libnet1-dev libbsd-dev libgnutls28-dev libnftables-dev
  uuid-dev patchelf xz-utils)
missing=()
for p in "${deps[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq 2>&1 | quiet
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 1; }
fi

# 2. The source, into $work/src.
mkdir -p "$work/src"
gitdir=
if [[ -n $src ]]; then
  for g in "$src" "$src/.git"; do
    if [[ -d $g ]] && git --git-dir="$g" rev-parse -q --verify "$tag^{commit}" >/dev/null 2>&1; then
      gitdir=$g
      break
    fi
  done
fi
gitid=
if [[ -n $gitdir ]]; then
  commit=$(git --git-dir="$gitdir" rev-parse "$tag^{commit}")
  gitid=$(git --git-dir="$gitdir" describe --always --tags "$commit")
  echo "source: $tag ($gitid, $commit) of the git directory $gitdir"
  git --git-dir="$gitdir" archive "$commit" | tar -x -C "$work/src"
elif [[ -n $src && -d $src ]]; then
  echo "source: the tree $src"
  cp -a "$src/." "$work/src/"
  make -s -C "$work/src" mrproper >/dev/null 2>&1 || true
elif [[ -n $src && -f $src ]]; then
  echo "source: the tarball $src"
  tar -xf "$src" -C "$work/src"
elif [[ -n $src ]]; then
  echo "no such source: $src" >&2
  exit 1
else
  debian_sources "$work" deb-src "$suite" || { echo "pass a criu source instead" >&2; exit 1; }
  mkdir -p "$work/dl"
  apt=(apt-get "${apt_dirs[@]}")
  "${apt[@]}" update -qq 2>&1 | quiet
  # --print-uris gives 'URI' NAME SIZE SHA256:HEX per file of the source package.
  line=$(cd "$work/dl" && "${apt[@]}" source --print-uris -qq criu |
    grep -F " criu_$version.orig.tar." | head -1) ||
    { echo "Debian $suite has no criu_$version.orig.tar.*; pass a criu $version source" >&2; exit 1; }
  read -r uri_quoted name _ hash <<<"$line"
  echo "source: Debian $suite, $name ($hash)"
  /usr/lib/apt/apt-helper download-file "${uri_quoted//\'/}" "$work/dl/$name" "$hash" 2>&1 | quiet
  [[ -s $work/dl/$name ]] || { echo "the download of $name failed" >&2; exit 1; }
  tar -xf "$work/dl/$name" -C "$work/src"
fi
# A tarball or an archive may hold the tree in one folder.
s=$work/src
if [[ ! -f $s/Makefile ]]; then
  top=("$s"/*)
  [[ ${#top[@]} -eq 1 && -f ${top[0]}/Makefile ]] && s=${top[0]}
fi
[[ -f $s/Makefile && -f $s/plugins/cuda/cuda_plugin.c ]] ||
  { echo "not a criu source tree with plugins/cuda: ${src:-the download}" >&2; exit 1; }
v=$(awk '/^CRIU_VERSION_(MAJOR|MINOR|SUBLEVEL)[ \t]/ && $3 != "" {printf "%s%s", (n++ ? "." : ""), $3}' \
  "$s/Makefile.versions")
[[ $v == "$version" ]] || echo "warning: the source is criu $v, not $version" >&2

# 3. Build criu and the plugin (these two targets build no manual pages). An archive has no .git,
# so criu's Makefile would record GitID 0: give it the description of what was archived.
echo "building criu $v${gitid:+ ($gitid)} with its CUDA plugin ($(nproc) jobs)..."
make -C "$s" -j"$(nproc)" PREFIX=/usr ${gitid:+GITID="$gitid"} criu cuda_plugin >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; exit 1; }
nm -D --defined-only "$s/plugins/cuda/cuda_plugin.so" | grep -qw CR_PLUGIN_DESC ||
  { echo "cuda_plugin.so has no CR_PLUGIN_DESC: criu would not load it" >&2; exit 1; }

# 4. Stage: criu (stripped, its RPATH pointing at the libraries), the plugin, the libraries.
st=$work/root
libs=$st/usr/lib/x86_64-linux-gnu
mkdir -p "$st/usr/sbin" "$st/usr/lib/criu" "$libs" "$st/usr/share/doc/criu"
install -m 755 "$s/criu/criu" "$st/usr/sbin/criu"
install -m 755 "$s/plugins/cuda/cuda_plugin.so" "$st/usr/lib/criu/cuda_plugin.so"
strip --strip-unneeded "$st/usr/sbin/criu" "$st/usr/lib/criu/cuda_plugin.so"
# shellcheck disable=SC2016 # $ORIGIN is for the loader, not for the shell
patchelf --force-rpath --set-rpath '$ORIGIN/../lib/x86_64-linux-gnu' "$st/usr/sbin/criu"
glibc='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl)\.so'
ldd "$s/criu/criu" "$s/plugins/cuda/cuda_plugin.so" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r soname path; do
  [[ $soname =~ $glibc ]] || cp -L "$path" "$libs/$soname"
done
cp "$s/COPYING" "$st/usr/share/doc/criu/COPYING"
ver=$(env -u LD_LIBRARY_PATH "$st/usr/sbin/criu" --version) || { echo "the staged criu does not run" >&2; exit 1; }
if env -u LD_LIBRARY_PATH ldd "$st/usr/sbin/criu" "$st/usr/lib/criu/cuda_plugin.so" | grep 'not found'; then
  echo "the staged criu or its plugin misses a library" >&2
  exit 1
fi

# 5. Pack.
mkdir -p "$(dirname "$out")"
tar -C "$st" --owner=0 --group=0 -czf "$out.tmp" . && mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1), criu $v, cuda_plugin.so and $(find "$libs" -type f | wc -l) libraries"
echo "criu --version: ${ver//$'\n'/; }"
rel=${out#"$PWD"/}
cat <<EOF
On the GPU machine, as root (never unpack it into /: its libraries would replace the system's):
  mkdir -p /tmp/criu && tar -C /tmp/criu -xzf $rel
  /tmp/criu/usr/sbin/criu --version; /tmp/criu/usr/sbin/criu check
  export PATH=/DIR/OF/cuda-checkpoint:\$PATH   # the plugin runs "cuda-checkpoint" found on PATH
  /tmp/criu/usr/sbin/criu dump -t PID -D IMG --shell-job --libdir /tmp/criu/usr/lib/criu -v4 -o dump.log
  /tmp/criu/usr/sbin/criu restore -D IMG --shell-job --libdir /tmp/criu/usr/lib/criu -v4 -o restore.log
Name the plugin's folder with --libdir DIR (-L DIR) or CRIU_LIBS_DIR=DIR. Without either criu looks
in /usr/lib/criu only and, where that is absent, loads no plugin without a word: a restore of a CUDA
dump then "succeeds" without it. (A --libdir without the plugin fails: "Missing required plugin".)
The plugin turns itself off unless /proc/driver/nvidia/gpus/ exists and "cuda-checkpoint -h" prints
"--action": look for "cuda_plugin: initialized" in the log. Its lock waits criu's --timeout (10 s).
EOF
