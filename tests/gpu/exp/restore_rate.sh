#!/usr/bin/env bash
# criu's restore rate as the live line measures it and keeps it for the next run's estimate
# (rates.json's `images`): four targets of 2 GiB (tests/gpu/target.cu), each a tree of its own,
# snapshotted and restored with --events and a fresh records directory, rounds taking turns with
# BASE where given (a copy of the project's source, run by ours's own Bun). The rate kept must be
# the trees' images (at least their GPU memory) over the time from the restore's start to the last
# tree back, though the resume begins with the first tree back. Then a restore on a terminal
# (util-linux's script): its first frame estimates criu's restore at the rate kept. Carry
# .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz (and BASE, e.g. `git archive` of an
# older commit unpacked under tests/gpu/out/):
#
#   BASE=tests/gpu/out/base bash tests/gpu/exp/restore_rate.sh      (log: $OUT/restore-rate.txt)
#
# About 2 minutes.
. "$(dirname "$0")/session.sh" restore-rate
trap 'end_started "target"' EXIT
pids=() dirs=() hashes=()
for n in 1 2 3 4; do
  start_target "t$n" 2048 || fail_setup "target $n did not start"
  pids+=("$T_PID") dirs+=("$T_DIR") hashes+=("$T_HASH")
done
all=$(IFS=,; echo "${pids[*]}")
ours=("${CK[@]}")
base=(env BUN_BE_BUN=1 "${CK[@]}" --preload ./tests/gpu/unset_bun_be_bun.ts "${BASE:-}/cli/main.ts")
# round N WHO: a snapshot and its restore by WHO (ours, base), in records of their own.
round() {
  local n=$1 who=$2 records=$bin/records-$1 cmd
  [[ $who == ours ]] && cmd=("${ours[@]}") || cmd=("${base[@]}")
  mkdir -m 700 -p "$records" # private, as the records must be
  CKPT_RECORDS_DIR=$records timeout 300 "${cmd[@]}" snapshot --pid "$all" --dir "$bin/snap-$n" \
    >"$bin/snap-$n.out" 2>&1
  check "round $n ($who): snapshot" $? "$(tail -2 "$bin/snap-$n.out")"
  wait_gone "${pids[@]}"
  CKPT_RECORDS_DIR=$records timeout 300 "${cmd[@]}" restore-snapshot "$bin/snap-$n" --json \
    --events >"$bin/rest-$n.json" 2>"$bin/events-$n"
  check "round $n ($who): restore" $? "$(tail -2 "$bin/events-$n")"
  python3 - "$bin/events-$n" "$records/rates.json" "$bin/rest-$n.json" "$n" "$who" <<'EOF' | verdicts_of ||
import json, sys
events, rates, result, n, who = sys.argv[1:]
ev = [json.loads(l) for l in open(events) if l.startswith("{")]
at = {e["phase"]: e["at"] for e in ev if e["event"] == "phase"}
trees = [e for e in ev if e["event"] == "tree-end" and e["how"] == "restored"]
held = lambda e: sum(e.get("gpuMemoryMiB", {}).values()) * 2**20
read = sum(max(e["bytes"], held(e)) for e in trees)
last = max(e["at"] for e in trees)
want = read / (last - at["restore"])
kept = json.load(open(rates)).get("images", 0)
restore_ms = json.load(open(result))["timings"]["restoreMs"]
print(f"   round {n} ({who}): {len(trees)} trees, {read / 1e9:.2f} GB back {last - at['restore']:.0f} ms"
      f" after the restore began (criu's restore {restore_ms:.0f} ms; the resume began at"
      f" {at['resume'] - at['restore']:.0f} ms): {want / 1e6:.2f} GB/s; kept {kept / 1e6:.2f} GB/s"
      f" ({kept / want:.2f}x)")
if who == "ours":
    ok = abs(kept / want - 1) < 0.02
    print(("PASS" if ok else "FAIL") + f" round {n}: the rate kept is criu's over the whole restore")
EOF
    verdict FAIL "round $n ($who): its events or rates.json unread"
}
rounds=(ours)
[[ -n ${BASE:-} ]] && rounds=(ours base ours base)
for i in "${!rounds[@]}"; do round $((i + 1)) "${rounds[$i]}"; done
# On a terminal, with round 1's records: the restore's first frames at the rate it kept.
kept=$(python3 -c "import json,sys; print(f'{json.load(open(sys.argv[1]))[\"images\"] / 1e6:.1f}')" \
  "$bin/records-1/rates.json")
CKPT_RECORDS_DIR=$bin/records-1 timeout 300 "${ours[@]}" snapshot --pid "$all" --dir "$bin/snap-t" \
  >/dev/null 2>&1
check "the terminal's snapshot" $?
wait_gone "${pids[@]}"
CKPT_RECORDS_DIR=$bin/records-1 timeout 300 script -qfec \
  "stty cols 160; ${ours[*]} restore-snapshot $bin/snap-t" /dev/null >"$bin/raw"
check "the terminal's restore" $?
first=$(python3 -c "import sys; print([p for p in open(sys.argv[1], newline='').read().split('\r\x1b[2K') if p.startswith('restoring the process trees')][0])" "$bin/raw")
echo "   the first frame: $first"
[[ $first == *"~$kept GB/s,"* ]]
check "the restore's first frame estimates at the kept ~$kept GB/s" $? "$first"
for i in "${!pids[@]}"; do
  hash_intact "target $((i + 1)) answers its hash at the end" "${dirs[$i]}" "${hashes[$i]}"
done
verdict_summary "$bin/verdicts.txt" restore-rate
