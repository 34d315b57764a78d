#!/usr/bin/env bash
# Builds the `cuda-checkpoint` program as one self-contained binary with `bun build --compile`,
# which embeds the Bun runtime this project pins (node_modules/.bin/bun) and needs no network.
# The Bun driver's worker script (ffi/bun_worker.ts) is a second entry point: the native driver
# starts it as a worker when several processes are worked on at once.
#
#   bash cli/build.sh [OUTPUT]        # default: dist/cuda-checkpoint
#
# `deno task compile` builds the same program with `deno compile`, which downloads Deno's runtime
# (denort) from dl.deno.land: it needs that network access.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
out=${1:-dist/cuda-checkpoint}
mkdir -p "$(dirname "$out")"
bun build --compile --minify --sourcemap=none cli/main.ts ffi/bun_worker.ts --outfile "$out"
