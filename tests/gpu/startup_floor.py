#!/usr/bin/env python3
"""Start-up floor on a GPU machine (issue 16, item 9): each program spawned fresh, in turns, N rounds.

  python3 tests/gpu/startup_floor.py OURS NVIDIA PID [ROUNDS]

Compares our cuda-checkpoint --get-state with NVIDIA's, Bun's own start (our binary is Bun too:
BUN_BE_BUN=1 runs an empty script) and /bin/true, so that what our code adds can be told from
what the runtime costs.
"""
import os, statistics, subprocess, sys, tempfile, time

ours, nvidia, pid = sys.argv[1], sys.argv[2], sys.argv[3]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 41
empty = tempfile.NamedTemporaryFile("w", suffix=".js", delete=False)
empty.write("0\n")
empty.close()
env_bun = dict(os.environ, BUN_BE_BUN="1")
programs = [
    ("ours --get-state", [ours, "--get-state", "--pid", pid], None),
    ("nvidia --get-state", [nvidia, "--get-state", "--pid", pid], None),
    ("bun: an empty script", [ours, empty.name], env_bun),
    ("/bin/true", ["/bin/true"], None),
]
times = {name: [] for name, _, _ in programs}
for r in range(rounds):
    order = programs[r % len(programs):] + programs[: r % len(programs)]
    for name, argv, env in order:
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[name].append((time.perf_counter() - t0) * 1000)
print(f"start-up, spawn to exit, ms, {rounds} rounds in turns (median, p10, p90):")
for name, _, _ in programs:
    t = sorted(times[name])
    print(f"  {name:24} {statistics.median(t):6.2f} {t[len(t) // 10]:6.2f} {t[len(t) * 9 // 10]:6.2f}")
