# shellcheck shell=bash
# Sourced by the carry-*.sh scripts beside it that fetch from Debian (before carry_dir.sh, which
# moves to the project root), never run: apt pointed at a sources list of their own instead of
# this machine's, so that they read another suite's indexes (or its deb-src) and change nothing of
# the machine's apt.
#   debian_sources DIR TYPE SUITE...   writes DIR/sources.list: one line of TYPE (deb or deb-src)
#                                      a suite, from this machine's own Debian mirror, checked
#                                      against Debian's archive key; makes DIR/lists for its
#                                      indexes; sets apt_dirs, the apt-get and apt-cache options
#                                      that read them and nothing of the machine's own. Fails,
#                                      writing nothing but a line to stderr, where no mirror is
#                                      found.
#   quiet                              apt's output (stdin) without empty lines and the notes that
#                                      a download as root is unsandboxed
debian_sources() {
  local dir=$1 type=$2 uri s
  shift 2
  uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [[ -n $uri ]] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [[ -n $uri ]] || { echo "cannot find this machine's Debian package mirror" >&2; return 1; }
  mkdir -p "$dir/lists/partial"
  for s in "$@"; do
    echo "$type [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $s main"
  done >"$dir/sources.list"
  # shellcheck disable=SC2034 # the caller's
  apt_dirs=(-oDir::Etc::SourceList="$dir/sources.list" -oDir::Etc::SourceParts=/dev/null
    -oDir::State::Lists="$dir/lists")
}

quiet() { grep -v -e unsandboxed -e '^$' || true; }
