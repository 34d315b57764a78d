#!/usr/bin/env bash
# Type-checks every JSDoc example of the product (deno check --doc-only). Deno adds an import of
# the module's exports to each example, which noUnusedLocals then reports as unused (TS6133,
# TS6192); those are its noise, not the example's. Any other error is a stale example.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(deno check --doc-only mod.ts driver.ts snapshot.ts types.ts api/*.ts core/*.ts os/*.ts \
  ffi/*.ts mock/*.ts cli/*.ts 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
if [[ $? -ne 0 ]] && ! grep -qE '^TS[0-9]+ \[ERROR\]' <<<"$out"; then
  echo "$out" >&2 # it failed for another reason than a type error: a module not found, ...
  exit 1
fi
bad=$(grep -E '^TS[0-9]+ \[ERROR\]' <<<"$out" | grep -vcE '^TS(6133|6192) ')
if ((bad > 0)); then
  awk '/^TS[0-9]+ \[ERROR\]/ { show = $1 !~ /^TS(6133|6192)$/ } show' <<<"$out" >&2
  echo "$bad JSDoc example(s) do not type-check" >&2
  exit 1
fi
echo "every JSDoc example type-checks"
