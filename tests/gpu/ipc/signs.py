#!/usr/bin/env python3
"""Every sign that might tell a process that imported another's GPU memory apart, read without
changing anything (tests/gpu/ipc_probe.sh, issue 30 part A). No torch, no CUDA: /proc, /dev/shm
and nvidia-smi only.

  python3 signs.py --label NAME --role PID=ROLE... [--driver PID=STATE,TID...] --json FILE
        prints what each process shows, writes it to FILE as JSON
  python3 signs.py --summary FILE...
        a table of the signs of every process of every FILE, and candidate rules checked against
        them (a rule separates where it holds for every importer and for nothing else)

For each process: its threads, resident memory, what it maps (/proc/<pid>/maps: /dev/nvidia*,
/dev/shm/*, memfd:, anon_inode:, and how many CUDA libraries), what its descriptors are
(/proc/<pid>/fd: /dev/nvidia*, /dev/shm/*, sockets, pidfds and other anon_inodes, memfds, pipes),
the /dev/shm/cuda.shm.* files it maps or holds and whose pid their names carry, NVML's memory for
it (nvidia-smi --query-compute-apps), and the driver's state and restore thread as given.
Roles with "importer" in them are the processes a rule should find.
"""

import argparse
import json
import os
import re
import subprocess
import sys

LIB_CUDA = re.compile(r"/(libcuda|libnvidia|libcudart|libcublas|libcudnn|libnccl|libtorch_cuda|libc10_cuda)[^/]*$")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def maps_of(pid):
    """(path, start, end) of every file-backed or named mapping."""
    out = []
    for line in read("/proc/%s/maps" % pid).splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((parts[5].strip(), start, end))
    return out


def fds_of(pid):
    """fd -> what it is (the link's target)."""
    out = {}
    try:
        names = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        return out
    for n in names:
        try:
            out[int(n)] = os.readlink("/proc/%s/fd/%s" % (pid, n))
        except OSError:
            pass
    return out


def status_of(pid):
    s = read("/proc/%s/status" % pid)
    get = lambda key: (re.search(r"^%s:\s+(.*)$" % key, s, re.M) or [None, "?"])[1]
    return {"threads": get("Threads"), "rss": get("VmRSS"), "ppid": get("PPid")}


def shm_pid(name):
    """The pid a /dev/shm/cuda.shm.* name carries: the hexadecimal field that names a process
    (live or not), or None. Names seen: cuda.shm.<gpu>.<pid in hex>.<n>."""
    fields = os.path.basename(name).split(".")[2:]
    for f in fields[1:2] + fields:
        if re.fullmatch(r"[0-9a-f]+", f):
            v = int(f, 16)
            if 1 < v < (1 << 22):
                return v
    return None


def nvml():
    """pid -> MiB by GPU, from nvidia-smi; or why not."""
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=60,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"unknown": str(error)}
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            out.setdefault(parts[0], {})[parts[2]] = parts[1]
    return out


def cuda_shm_everywhere():
    """Every /dev/shm/cuda.shm.* file, with the pids that hold it open and that map it."""
    files = {}
    try:
        names = sorted(n for n in os.listdir("/dev/shm") if n.startswith("cuda.shm."))
    except OSError:
        names = []
    for n in names:
        p = "/dev/shm/" + n
        try:
            size = os.stat(p).st_size
        except OSError:
            size = None
        files[p] = {"size": size, "names_pid": shm_pid(p), "holders": [], "mappers": []}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        for target in set(fds_of(d).values()):
            base = target.replace(" (deleted)", "")
            if base.startswith("/dev/shm/cuda.shm."):
                files.setdefault(base, {"size": None, "names_pid": shm_pid(base), "holders": [], "mappers": []})
                files[base]["holders"].append(int(d))
        for path in set(m[0] for m in maps_of(d)):
            base = path.replace(" (deleted)", "")
            if base.startswith("/dev/shm/cuda.shm."):
                files.setdefault(base, {"size": None, "names_pid": shm_pid(base), "holders": [], "mappers": []})
                files[base]["mappers"].append(int(d))
    return files


def one(pid, role, driver, nvml_all):
    maps = maps_of(pid)
    fds = fds_of(pid)
    mapped = {}
    libs = set()
    for path, start, end in maps:
        if path.startswith("/dev/nvidia") or path.startswith("/dev/shm/") or path.startswith("memfd:") or path.startswith("anon_inode:") or "cuda" in path.lower() and not path.startswith("/"):
            m = mapped.setdefault(path, {"ranges": 0, "bytes": 0})
            m["ranges"] += 1
            m["bytes"] += end - start
        if LIB_CUDA.search(path.replace(" (deleted)", "")):
            libs.add(path)
    kinds = {}
    for fd, target in sorted(fds.items()):
        if target.startswith("/dev/nvidia"):
            k = target
        elif target.startswith("/dev/shm/"):
            k = target
        elif target.startswith("socket:"):
            k = "socket"
        elif target.startswith("anon_inode:"):
            k = target
        elif target.startswith("pipe:"):
            k = "pipe"
        elif target.startswith("/memfd:"):
            k = "memfd:" + target[len("/memfd:"):]
        elif target.startswith("/dev/"):
            k = target
        else:
            k = "file"
        kinds[k] = kinds.get(k, 0) + 1
    cuda_shm_maps = sorted({p.replace(" (deleted)", "") for p, _, _ in maps if "/dev/shm/cuda.shm." in p})
    cuda_shm_fds = sorted({t.replace(" (deleted)", "") for t in fds.values() if "/dev/shm/cuda.shm." in t})
    return {
        "pid": int(pid),
        "role": role,
        "cmdline": read("/proc/%s/cmdline" % pid).replace("\0", " ").strip()[:200],
        "status": status_of(pid),
        "mapped": mapped,
        "cuda_libraries": len(libs),
        "fds": kinds,
        "cuda_shm_maps": [{"path": p, "names_pid": shm_pid(p)} for p in cuda_shm_maps],
        "cuda_shm_fds": cuda_shm_fds,
        "nvml_mib": nvml_all.get(str(pid), {}) if "unknown" not in nvml_all else "unknown",
        "driver": driver.get(str(pid), "?"),
    }


def derived(p):
    """The signs a rule could use, as short values."""
    own = lambda e: e["names_pid"] == p["pid"]
    nvidia_fds = sum(n for k, n in p["fds"].items() if k.startswith("/dev/nvidia"))
    nvidia_maps = sum(m["ranges"] for k, m in p["mapped"].items() if k.startswith("/dev/nvidia"))
    other_shm = sorted({k for k in p["mapped"] if k.startswith("/dev/shm/") and "/cuda.shm." not in k})
    return {
        "maps cuda.shm named after itself": sum(1 for e in p["cuda_shm_maps"] if own(e)),
        "maps cuda.shm named after another pid": sum(1 for e in p["cuda_shm_maps"] if not own(e)),
        "holds an fd to a cuda.shm file": len(p["cuda_shm_fds"]),
        "maps other /dev/shm files": ",".join(re.sub(r"[0-9a-f]{6,}", "*", os.path.basename(k)) for k in other_shm) or "-",
        "pidfds held": p["fds"].get("anon_inode:[pidfd]", 0),
        "anon_inode kinds": ",".join(sorted(k[len("anon_inode:"):] for k in p["fds"] if k.startswith("anon_inode:"))) or "-",
        "memfds held": sum(n for k, n in p["fds"].items() if k.startswith("memfd:")),
        "sockets held": p["fds"].get("socket", 0),
        "/dev/nvidia* fds": nvidia_fds,
        "/dev/nvidia* map ranges": nvidia_maps,
        "/dev/nvidia-uvm fds": p["fds"].get("/dev/nvidia-uvm", 0),
        "CUDA libraries mapped": p["cuda_libraries"],
        "threads": p["status"]["threads"],
        "NVML MiB": "unknown" if p["nvml_mib"] == "unknown" else (sum(int(v) for v in p["nvml_mib"].values() if v.isdigit()) if p["nvml_mib"] else "none"),
        "driver state,restore tid": p["driver"],
    }


RULES = [
    ("A: maps a cuda.shm file named after another pid, and holds no fd to one",
     lambda d: d["maps cuda.shm named after another pid"] > 0 and d["holds an fd to a cuda.shm file"] == 0),
    ("B: maps a cuda.shm file named after another pid",
     lambda d: d["maps cuda.shm named after another pid"] > 0),
    ("C: holds a pidfd", lambda d: d["pidfds held"] > 0),
    ("D: maps a cuda.shm file but holds none", lambda d: (d["maps cuda.shm named after itself"] + d["maps cuda.shm named after another pid"]) > 0 and d["holds an fd to a cuda.shm file"] == 0),
]


def text_of(label, procs, shm):
    lines = ["=== %s" % label]
    for p in procs:
        lines.append("-- pid %d (%s): %s" % (p["pid"], p["role"], p["cmdline"]))
        lines.append("   status: %s" % json.dumps(p["status"]))
        lines.append("   driver (state,restore tid): %s; NVML: %s" % (p["driver"], json.dumps(p["nvml_mib"])))
        lines.append("   maps:")
        for k, m in sorted(p["mapped"].items()):
            lines.append("     %-60s %3d ranges %12d bytes" % (k, m["ranges"], m["bytes"]))
        lines.append("     (and %d CUDA/NVIDIA libraries)" % p["cuda_libraries"])
        lines.append("   fds: " + ", ".join("%s x%d" % (k, n) for k, n in sorted(p["fds"].items())))
        for e in p["cuda_shm_maps"]:
            lines.append("   maps %s (its name carries pid %s%s)" % (e["path"], e["names_pid"], ", itself" if e["names_pid"] == p["pid"] else ""))
        for f in p["cuda_shm_fds"]:
            lines.append("   holds %s" % f)
    lines.append("-- /dev/shm/cuda.shm.* on the machine:")
    if not shm:
        lines.append("   none")
    for path, e in sorted(shm.items()):
        lines.append("   %s: %s bytes, its name carries pid %s; held by %s; mapped by %s" % (path, e["size"], e["names_pid"], e["holders"] or "none", e["mappers"] or "none"))
    return "\n".join(lines)


def summary(files):
    rows = []
    for f in files:
        with open(f) as fh:
            data = json.load(fh)
        for p in data["processes"]:
            rows.append(("%s/%s" % (data["label"], p["role"]), p["role"], derived(p)))
    if not rows:
        print("(nothing to sum up)")
        return
    keys = list(rows[0][2].keys())
    width = max(len(k) for k in keys) + 2
    cols = [r[0] for r in rows]
    print("Signs by process (scenario/role):")
    for i, c in enumerate(cols):
        print("  [%d] %s" % (i, c))
    print()
    print("%-*s%s" % (width, "sign", "".join("%-14s" % ("[%d]" % i) for i in range(len(cols)))))
    for k in keys:
        print("%-*s%s" % (width, k, "".join("%-14s" % str(r[2][k])[:13] for r in rows)))
    print()
    print("Candidate rules (a rule separates where it holds for every importer and for no other process):")
    for name, rule in RULES:
        hits = {c for c, role, d in rows if rule(d)}
        importers = {c for c, role, d in rows if "importer" in role}
        missed, wrong = sorted(importers - hits), sorted(hits - importers)
        verdict = "separates" if importers and not missed and not wrong else "does not separate"
        print("  %s: %s%s%s" % (name, verdict, "; misses %s" % ", ".join(missed) if missed else "", "; also holds for %s" % ", ".join(wrong) if wrong else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label")
    ap.add_argument("--role", action="append", default=[], metavar="PID=ROLE")
    ap.add_argument("--driver", action="append", default=[], metavar="PID=STATE,TID")
    ap.add_argument("--json")
    ap.add_argument("--summary", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
        return
    if not (args.label and args.role and args.json):
        ap.error("give --label, --role PID=ROLE... and --json FILE, or --summary FILE...")
    driver = dict(d.split("=", 1) for d in args.driver)
    nvml_all = nvml()
    procs = [one(*r.split("=", 1), driver, nvml_all) for r in args.role]
    shm = cuda_shm_everywhere()
    with open(args.json, "w") as f:
        json.dump({"label": args.label, "processes": procs, "cuda_shm": shm}, f, indent=1)
    print(text_of(args.label, procs, shm))


if __name__ == "__main__":
    sys.exit(main())
