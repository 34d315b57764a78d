#!/usr/bin/env bash
# Whether a process's host memory shows the driver's progress while it copies: PyTorch processes
# (tests/gpu/pytorch/train.py) suspended and resumed by ours (--toggle), one of 16 GiB of weights,
# then two of 8 GiB at once; each one's resident memory (/proc/<pid>/status VmRSS) sampled every
# 20 ms meanwhile, against its GPU memory (nvidia-smi) before. Carry .carry/cuda-checkpoint-ours.xz:
#   timeout 300 bash tests/gpu/exp/rss_during.sh      (log: $OUT/log)
set -u
cd "$(dirname "$0")/../../.." || exit 1
. tests/gpu/setup.sh   # exp_session: $out, $d (removed at exit) with ours in it, the log
. tests/gpu/targets.sh # ready_line
exp_session
pids=()
start() { # start N MIB
  mkfifo "$d/cmd$1"
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    python3 tests/gpu/pytorch/train.py --mib "$2" --fifo "$d/cmd$1" </dev/null >"$d/out$1" 2>"$d/err$1" &
  pids+=($!)
  ready_line "$d/out$1" "$!" 180 >/dev/null || { echo "FAIL: target $1 did not start: $(tail -3 "$d/err$1")"; exit 1; }
}
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$d"' EXIT
# sample NAME PID...: ours --toggle of them, their VmRSS every 20 ms till it ends, summed up.
sample() {
  local name=$1
  shift
  local list
  list=$(IFS=,; echo "$*")
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$d/gpu"
  python3 - "$d/ours" "$name" "$d/gpu" "$@" <<'PY'
import subprocess, sys, time
ours, name, gpu_file, pids = sys.argv[1], sys.argv[2], sys.argv[3], [int(p) for p in sys.argv[4:]]
gpu = {int(l.split(",")[0]): int(l.split(",")[1]) for l in open(gpu_file) if l.strip()}
def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
t0 = time.monotonic()
run = subprocess.Popen([ours, "--toggle", "--pid", ",".join(map(str, pids))], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
rows = []
while run.poll() is None:
    rows.append((time.monotonic() - t0, [rss(p) for p in pids]))
    time.sleep(0.02)
end = time.monotonic() - t0
rows.append((end, [rss(p) for p in pids]))
print(f"== {name}: exit {run.returncode} in {end:.2f} s {run.stdout.read().strip()!r}, {len(rows)} samples")
for i, pid in enumerate(pids):
    first = rows[0][1][i]
    series = [(t, r[i] - first) for t, r in rows]
    moved = [(t, d) for t, d in series if abs(d) > 64 << 20]
    total = series[-1][1]
    print(f"   pid {pid}: GPU {gpu.get(pid, '?')} MiB before; RSS {first / 2**20:.0f} -> {rows[-1][1][i] / 2**20:.0f} MiB ({total / 2**20:+.0f})")
    if moved:
        t1, t2 = moved[0][0], next(t for t, d in series if abs(d) >= abs(total) * 0.99)
        print(f"   moving from {t1:.2f} s to {t2:.2f} s: {abs(total) / max(t2 - t1, 1e-3) / 1e9:.2f} GB/s; at each tenth of the time from the call:")
        marks = []
        for k in range(1, 11):
            tk = end * k / 10
            d = min(series, key=lambda s: abs(s[0] - tk))[1]
            marks.append(f"{100 * d / total:.0f}%" if total else "-")
        print("   " + " ".join(marks))
PY
}
start 1 16384
sample "suspend one of 16 GiB" "${pids[0]}"
sample "resume one of 16 GiB" "${pids[0]}"
kill -9 "${pids[0]}"; pids=()
start 2 8192; start 3 8192
sample "suspend two of 8 GiB" "${pids[@]}"
sample "resume two of 8 GiB" "${pids[@]}"
for p in "${pids[@]}"; do echo "pid $p: $(timeout 30 "$d/ours" --get-state --pid "$p")"; done
