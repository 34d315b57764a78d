#!/usr/bin/env bash
# Builds the `cuda-checkpoint` program as one self-contained binary.
#
#   bash cli/build.sh [bun|deno] [OUTPUT]      # default: bun, dist/cuda-checkpoint
#
# bun (`deno task build:cli`): `bun build --compile`, which embeds the Bun runtime this project
# pins (node_modules/.bin/bun) and needs no network. The Bun driver's worker script
# (ffi/bun_worker.ts) is a second entry point: the native driver starts it as a worker when several
# processes are worked on at once, and finds it at ffi/bun_worker.js under the build's root. So is
# the snapshot digests' worker (os/digest_worker.ts, found at os/digest_worker.js).
#
# deno (`deno task compile`): `deno compile`, which downloads Deno's runtime (denort) from
# dl.deno.land, so it needs that network access.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
runtime=${1:-bun}
out=${2:-dist/cuda-checkpoint}
mkdir -p "$(dirname "$out")"
# Built beside the output and moved over it only once it has built: a build that fails (deno
# compile offline, say) leaves the binary that was there.
tmp="$out.building.$$"
trap 'rm -f "$tmp"' EXIT
case $runtime in
  # --bytecode (which needs --format=esm): the modules are compiled to bytecode at build time, which
  # takes a third off the start-up (bench/reports/cli-startup-*). The binary runs as root wherever
  # it is started, so it reads no .env or bunfig.toml from the working directory: a .env there
  # could name the libcuda it loads, a bunfig.toml a script it runs first (Bun's defaults read both).
  # --compile-jit-policy=3: functions are compiled by the JIT after three times as many runs, so a
  # query of one pid starts no JIT threads (5 ms of a 2-core machine's 38, bench/cli_startup.ts).
  bun) bun build --compile --bytecode --format=esm --splitting --minify --sourcemap=none \
    --no-compile-autoload-dotenv --no-compile-autoload-bunfig --no-compile-autoload-tsconfig \
    --no-compile-autoload-package-json --compile-jit-policy=3 \
    cli/main.ts ffi/bun_worker.ts os/digest_worker.ts --outfile "$tmp" ;;
  deno) deno compile -A --output "$tmp" cli/main.ts ;;
  *)
    echo "usage: bash cli/build.sh [bun|deno] [OUTPUT]" >&2
    exit 2
    ;;
esac
mv -f "$tmp" "$out"
