#!/usr/bin/env bash
# deno_ffi_only.ts on a PyTorch process of 256 MiB: Deno without /proc (no --allow-all) refuses the
# suspend (IPC, unknown), then suspends and resumes with allowIpcImport; the tensor checked. One GPU,
# .carry/deno.xz:   timeout 150 bash tests/gpu/exp/deno_ffi_only.sh   (log: $OUT/log)
set -u
. tests/gpu/setup.sh # torch_target
out=${OUT:-tests/gpu/out}; mkdir -p "$out"; exec > >(tee "$out/log") 2>&1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
unxz_to .carry/deno.xz "$d/deno" || exit 1
torch_target "$d/t" && torch_ready "$d/t"; echo "== pid $tpid $(head -1 "$d/t.out"); $("$d/deno" --version | head -1)"
timeout 100 "$d/deno" run --no-prompt --allow-ffi --allow-env --allow-sys tests/gpu/exp/deno_ffi_only.ts "$tpid"
echo "== exit $?"
echo go >&"$tfd"; sleep 1.5; echo "after: $(tail -1 "$d/t.out") (intact: 469762048.0)"
kill "$tpid"
