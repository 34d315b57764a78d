#!/usr/bin/env bash
# A restore's live line where the last tree back has no process to resume: an 8 GiB target
# (tests/gpu/target.cu) taken checkpointed (`--toggle` before the snapshot) beside a 1 GiB one,
# each a tree of its own, snapshotted into one directory and restored by ours on a terminal
# (util-linux's script, 160 columns). While criu still restores the big tree the resume's line says
# criu's part (`criu ~X of Y GB back`); restored again with --events, the images back, as the line
# counts them, reach the total with the last tree; the big target comes back checkpointed, and
# both answer their hash once it is toggled back. Carry .carry/cuda-checkpoint-ours.xz and .carry/criu-cuda.tgz:
#
#   bash tests/gpu/exp/taken_line.sh      (log: $OUT/taken-line.txt)
#
# About 1 minute.
. "$(dirname "$0")/session.sh" taken-line
trap 'end_started "target"' EXIT
start_named big 8192
start_named small 1024
timeout 120 "${CK[@]}" --toggle --pid "$big" >/dev/null
check "the 8 GiB target checkpointed before the snapshot" $?
snapshot_of "$big,$small" snap
timeout 180 script -qfec "stty cols 160; ${CK[*]} restore-snapshot $bin/snap" /dev/null >"$bin/raw"
check "restore: exit 0" $? "$(tail -c 300 "$bin/raw")"
python3 - "$bin/raw" <<'EOF' | verdicts_of || verdict FAIL "the terminal's frames unread"
import re, sys
raw = open(sys.argv[1], encoding="utf-8", newline="").read()
frames = [p for p in raw.split("\r\x1b[2K")[1:] if re.match(r"resuming on the GPUs [0-9.]+ s", p)]
frames = [f.split("\n")[0] for f in frames]
said = [f for f in frames if re.search(r"; criu ~[0-9.]+ of [0-9.]+ GB back$|, criu ~", f)]
print(f"   {len(frames)} resume frames, {len(said)} saying criu's part; e.g. {said[:1]}; last: {frames[-1:]}")
print(("PASS" if said else "FAIL") + " the resume says criu's part while the big tree is still to come")
EOF
s=$(timeout 30 "${CK[@]}" --get-state --pid "$big")
[[ $s == checkpointed ]]
check "the 8 GiB target is back checkpointed, as taken" $? "$s"
# Again with --events: the images back, as the line counts them, reach the total with the last tree
# (none left to say once every tree is back: the manifest's files all lie in its trees' folders).
round_trip "$big,$small" snap2
python3 - "$bin/snap2.events" <<'EOF' | verdicts_of || verdict FAIL "the second restore's events unread"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
phase = next(e for e in ev if e["event"] == "phase" and e["phase"] == "restore")
mib = {int(p): m for p, m in phase["gpuMemoryMiB"].items()}
total = max(phase["imageBytes"], sum(mib.values()) * 2**20)
trees = [e for e in ev if e["event"] == "tree-end" and e["how"] == "restored"]
back = sum(max(e["bytes"], sum(mib.get(int(p), 0) for p in e["gpuMemoryMiB"]) * 2**20) for e in trees)
print(f"   the restore phase: {total} bytes ({phase['imageBytes']} of files, {sum(mib.values())} MiB of"
      f" GPU memory, pids {sorted(mib)}); {len(trees)} trees back: {back} bytes")
print(("PASS" if back == total else "FAIL") + " the images back reach the total with the last tree")
EOF
s=$(timeout 30 "${CK[@]}" --get-state --pid "$big")
[[ $s == checkpointed ]]
check "the 8 GiB target is back checkpointed again" $? "$s"
timeout 120 "${CK[@]}" --toggle --pid "$big" >/dev/null
check "the 8 GiB target toggled back to running" $?
hash_intact "the 8 GiB target answers its hash" "$big_dir" "$big_hash"
hash_intact "the 1 GiB target answers its hash" "$small_dir" "$small_hash"
verdict_summary "$bin/verdicts.txt" taken-line
