#!/usr/bin/env bash
# Issue 23: a GPU container checkpointed and restored by runc, through criu's CUDA plugin running
# OUR cuda-checkpoint, then NVIDIA's in its place, taking turns, timed side by side. On the GPU
# machine, as root, from the repo root, with these carried (48 MB in all; name the files, not all
# of .carry/): .carry/runc.tgz (bash tests/gpu/tools/carry-runc.sh), .carry/criu-cuda.tgz
# (bash tests/gpu/tools/carry-criu-cuda.sh), .carry/cuda-checkpoint-ours.xz (bash cli/carry.sh),
# .carry/cuda-checkpoint (NVIDIA's utility, never committed). One GPU is enough.
#
#   bash tests/gpu/container.sh          # about 1 min on one H100 (41 s with ROUNDS=4, MIB=1024)
#
# The container: `runc spec`, edited by python3: the process is tests/gpu/target.cu in fifo mode,
# exec'd by sh so that it is the container's init; no terminal; no network namespace (the host's:
# criu then has no namespace of its own to dump); a read-only rootfs of the host's /usr and /etc
# bound read-only (and /bin, /lib, /lib64, /sbin as the host has them: the same symlinks into /usr,
# or bound too), so the driver's libraries (libcuda.so.1 and what it loads) are the host's, as
# NVIDIA's container toolkit would mount them; the device files /dev/nvidia0 (each /dev/nvidiaN),
# /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia-uvm-tools in linux.devices and allowed in the
# device cgroup; the target's folder at /app (read-only) and a folder for its fifo and output at
# /io. criu finds its plugin through a criu configuration file holding `libdir`, named by the
# container's annotation org.criu.config (runc hands it to criu as its RPC configuration file, as
# it hands /etc/criu/runc.conf where no annotation is set); CONTAINER_LIBDIR_BY=env gives criu
# CRIU_LIBS_DIR in runc's environment instead (runc starts `criu swrk` with its own environment).
# runc runs `criu` from PATH, and the plugin runs `cuda-checkpoint` from criu's PATH: each runc
# call gets PATH=<the folder of the cuda-checkpoint under test>:/tmp/criu/usr/sbin:$PATH.
#
# a. traced (256 MiB, ours then NVIDIA's): a wrapper logs every call the plugin makes (arguments,
#    exit code, first lines of output, time); both sequences, pids named, must be the same.
# b. timed: ROUNDS rounds of MIB MiB, ours and NVIDIA's taking turns (round 1 ours first, round 2
#    NVIDIA's first). Each run: `runc run -d`, the target ready with its hash; `runc checkpoint
#    --image-path IMG --work-path WORK` (timed): the container gone; `runc restore -d` (timed):
#    running again, state `running` (the program under test, asked with the container's new host
#    pid), the memory's hash the same as at the start (the target computes it on the GPU); criu's
#    logs show "cuda_plugin: initialized" and the plugin's pause, checkpoint and resume of the pid;
#    then the target is told to exit and the container deleted.
# Every check is one line PASS/FAIL/SKIP, counted at the end (tests/gpu/verdicts.sh). Log:
# $OUT/container.txt; report: $OUT/container-report.md (every run, medians, ours/NVIDIA's);
# $OUT/container-logs.tgz (criu's logs of the traced runs and of every failure, the traces).
# g. the guard across criu (GUARD_MIB, default 4096): ours records what the process held at the
#    plugin's checkpoint; a filler takes the GPU; `runc restore`: ours refuses the plugin's
#    --action restore of the process criu made (another host pid and start) before the driver;
#    the process stays checkpointed; the filler ends; `--toggle` restores it, memory intact.
# CONTAINER_CRIU names the criu to unpack (default .carry/criu-cuda.tgz, criu 4.1.1; e.g.
# .carry/criu-dev-cuda.tgz, criu 4.2, made by tests/gpu/tools/carry-criu-cuda.sh with CRIU_OUT).
# CONTAINER_CASES picks cases by letter (default abg); CONTAINER_BUDGET (s, default 330) skips
# runs that no longer fit. The pieces (ct_start, ct_checkpoint, ct_restore, ct_end) are functions,
# for cases to come.
#
# Dry run without a GPU (CONTAINER_DRY_RUN=1; the mechanics of runc and criu only: no device
# files, a bash stand-in for the target, the plugin turns itself off, so what only a GPU can pass
# says SKIP): RUNC_BIN (a runc that runs here; Debian's 1.3.6 needs glibc 2.38), CRIU_ROOT (where
# criu-cuda.tgz is unpacked, default /tmp/criu), OURS_BIN, NVIDIA_BIN (default dist/cuda-checkpoint
# and .carry/cuda-checkpoint). A file an override stands for need not be carried.
set -uo pipefail
unset BUN_BE_BUN
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/verdicts.sh
. tests/gpu/targets.sh # alive, ask, wait_gone: the target's fifo protocol
dry=${CONTAINER_DRY_RUN:-}
out=${OUT:-tests/gpu/out}
bin=/tmp/ct${dry:+-dry} # scratch: bundles, the targets' folders, images, runc's state
criu_root=${CRIU_ROOT:-/tmp/criu}
criu_tgz=${CONTAINER_CRIU:-.carry/criu-cuda.tgz} # criu with its plugin: 4.1.1, or another build
criu_dir=$criu_root/usr/sbin
plugins=$criu_root/usr/lib/criu
runc_root=/tmp/runc
rounds=${ROUNDS:-2}
mib=${MIB:-1024}
budget=${CONTAINER_BUDGET:-330}
cases=${CONTAINER_CASES:-abg}
libdir_by=${CONTAINER_LIBDIR_BY:-conf}
step_limit=$((60 + mib / 20)) # s, for one runc checkpoint or restore (111 s for 1 GiB)
mark=ct-$$ # in the environment of every runc we start (and so of its criu): leftovers are ours
for d in "$bin"/state/*; do # containers of a run before this one that was cut off
  [[ -d $d ]] && timeout 10 "${RUNC_BIN:-$runc_root/usr/sbin/runc}" --root "$bin/state" delete -f "${d##*/}" >/dev/null 2>&1
done
rm -rf "${bin:?}"
mkdir -p "$out" "$bin/logs" "$bin/keep" "$bin/app" "$bin/ours-bin" "$bin/nvidia-bin" "$bin/state"
rm -f "$out/container.txt" "$out/container-report.md" "$out/container-logs.tgz"
: >"$bin/verdicts.txt"
: >"$bin/times.txt"
exec > >(tee -a "$out/container.txt") 2>&1

# verdict: tests/gpu/verdicts.sh's. check NAME RC: PASS where RC is 0, else FAIL (and, unlike
# verdicts.sh's, a failing status, for `|| ...`).
check() { if [[ $2 == 0 ]]; then verdict PASS "$1"; else verdict FAIL "$1"; return 1; fi; }
# gpu_check NAME RC WHY: check, but SKIP (saying WHY) in a dry run.
gpu_check() { if [[ -n $dry ]]; then verdict SKIP "$1 (dry run: $3)"; else check "$1" "$2"; fi; }
NO_GPU="no GPU: the plugin turns itself off, nothing holds GPU memory"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
left() { echo $((budget - SECONDS)); }
free_mib() { df -Pm "$bin" | awk 'NR == 2 { print $4 }'; }
who() { if [[ $1 == ours ]]; then echo our; else echo "NVIDIA's"; fi; }
whose() { if [[ $1 == ours ]]; then echo ours; else echo "NVIDIA's"; fi; }

echo "== $(date -u +%FT%TZ) $(hostname) tests/gpu/container.sh${dry:+ (DRY RUN: no GPU, stand-in target)} (cases $cases, rounds $rounds, $mib MiB, budget $budget s)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
echo "kernel $(uname -r); $(grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null | cut -d= -f2 | tr -d '"'); glibc $(ldd --version 2>/dev/null | head -1 | awk '{ print $NF }')"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,persistence_mode \
  --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
echo "driver: $(head -1 /proc/driver/nvidia/version 2>/dev/null || echo '(no /proc/driver/nvidia/version)')"
echo "cgroups: $(stat -fc %T /sys/fs/cgroup 2>/dev/null) at /sys/fs/cgroup"
df -h /tmp | tail -1

# ---- setup: runc, criu, the two programs, the target, the rootfs ----
carried=()
[[ -n ${RUNC_BIN:-} ]] || carried+=(.carry/runc.tgz)
[[ -n $dry && -x $criu_dir/criu ]] || carried+=("$criu_tgz")
[[ -n ${OURS_BIN:-} || -n $dry ]] || carried+=(.carry/cuda-checkpoint-ours.xz)
[[ -n ${NVIDIA_BIN:-} || -n $dry ]] || carried+=(.carry/cuda-checkpoint)
for f in "${carried[@]}"; do
  [[ -f $f ]] || { verdict FAIL "setup: $f is not carried (see tests/gpu/README.md)"; exit 1; }
done

# runc: Debian's binary; Debian's libseccomp.so.2 beside it only where this machine has none.
runc_ld=
if [[ -n ${RUNC_BIN:-} ]]; then
  runc=$RUNC_BIN
else
  runc=$runc_root/usr/sbin/runc
  if ! { mkdir -p "$runc_root" && tar -C "$runc_root" -xzf .carry/runc.tgz; }; then
    verdict FAIL "setup: unpacking .carry/runc.tgz"
    exit 1
  fi
  cat "$runc_root/usr/share/doc/runc/carried.txt"
  if ldd "$runc" | grep -q 'libseccomp.so.2 => not found'; then
    runc_ld=$runc_root/usr/lib/x86_64-linux-gnu
    echo "this machine has no libseccomp.so.2: runc runs with Debian's, LD_LIBRARY_PATH=$runc_ld"
  else
    echo "runc uses this machine's $(ldd "$runc" | awk '/libseccomp/ { print $3 }' | xargs -r readlink -f)"
  fi
fi
runc_v=$(timeout 20 env ${runc_ld:+LD_LIBRARY_PATH=$runc_ld} "$runc" --version 2>&1)
while read -r l; do echo "runc --version: $l"; done <<<"$runc_v"
[[ $runc_v == "runc version"* ]]
_rc=$?; check "setup: $(echo "$runc_v" | head -1) runs" $_rc || exit 1

if [[ -z $dry || ! -x $criu_dir/criu ]]; then
  if ! { mkdir -p "$criu_root" && tar -C "$criu_root" -xzf "$criu_tgz"; }; then
    verdict FAIL "setup: unpacking $criu_tgz"
    exit 1
  fi
fi
criu_v=$("$criu_dir/criu" --version 2>&1 | tr '\n' ' ')
echo "criu --version: $criu_v"
c=$(timeout 60 "$criu_dir/criu" check 2>&1 | tail -1)
[[ $c == *"Looks good"* ]]
check "setup: criu check ($criu_dir/criu): $c" $?
[[ -f $plugins/cuda_plugin.so ]]
check "setup: the CUDA plugin is at $plugins/cuda_plugin.so" $?
echo "criu's own default plugin folder (unused here): $("$criu_dir/criu" --help 2>&1 | grep -A1 -- '--libdir' | grep -oE 'default [^)]*' | head -1)"
ls /usr/lib/criu/*.so 2>/dev/null && echo "note: this machine has plugins in /usr/lib/criu, which criu would also load"
# How criu finds the plugin folder: a configuration file named by the container's annotation
# org.criu.config (the same file /etc/criu/runc.conf would be), or CRIU_LIBS_DIR.
conf=$bin/criu-runc.conf
printf 'libdir %s\n' "$plugins" >"$conf"
case $libdir_by in
  conf) echo "criu's plugin folder: 'libdir $plugins' in $conf, named by the annotation org.criu.config" ;;
  env) echo "criu's plugin folder: CRIU_LIBS_DIR=$plugins in runc's environment" ;;
  *) verdict FAIL "setup: CONTAINER_LIBDIR_BY is conf or env, not $libdir_by"; exit 1 ;;
esac

# The two programs, each the only cuda-checkpoint in a folder of its own.
if [[ -n ${OURS_BIN:-} || -n $dry ]]; then
  cp "${OURS_BIN:-dist/cuda-checkpoint}" "$bin/ours-bin/cuda-checkpoint" || { verdict FAIL "setup: copying ours"; exit 1; }
elif ! xz -dc .carry/cuda-checkpoint-ours.xz >"$bin/ours-bin/cuda-checkpoint"; then
  verdict FAIL "setup: unpacking .carry/cuda-checkpoint-ours.xz"
  exit 1
fi
cp "${NVIDIA_BIN:-.carry/cuda-checkpoint}" "$bin/nvidia-bin/cuda-checkpoint" || { verdict FAIL "setup: copying NVIDIA's"; exit 1; }
chmod +x "$bin/ours-bin/cuda-checkpoint" "$bin/nvidia-bin/cuda-checkpoint"
ours=$bin/ours-bin/cuda-checkpoint
nvidia=$bin/nvidia-bin/cuda-checkpoint
v=$(timeout 30 "$ours" --version 2>&1 | head -1)
[[ $v == *"@ckpt/cuda"* ]]
check "setup: ours runs: $v" $?
h=$(timeout 30 "$nvidia" -h 2>&1 | head -c 2047)
[[ $h == *--action* ]]
gpu_check "setup: NVIDIA's -h names --action (what the plugin asks)" $? "NVIDIA's utility needs libcuda"
bindir() { if [[ $1 == ours ]]; then echo "$bin/ours-bin"; else echo "$bin/nvidia-bin"; fi; }
prog_bin() { echo "$(bindir "$1")/cuda-checkpoint"; }

# The target, at /app/target in the container.
if [[ -n $dry ]]; then
  # A stand-in of target.cu's fifo mode: "ready", then "hash" answered with a fixed hash.
  cat >"$bin/app/target" <<'EOF'
#!/bin/bash
[[ $1 == fifo && -n ${3:-} ]] || { echo "target: fifo mode needs <MiB> <fifo path>" >&2; exit 2; }
hash=$(printf '%x' $((($2 + 7) * 40503)))
echo "ready $$ $$ $hash"
while [[ -p $3 ]]; do
  read -r line <"$3" || continue
  case $line in
    hash*) echo "hash $hash" ;;
    exit*) exit 0 ;;
    *) echo "error unknown command: $line" ;;
  esac
done
EOF
  chmod +x "$bin/app/target"
else
  t0=$SECONDS
  timeout 180 nvcc -O2 -o "$bin/app/target" tests/gpu/target.cu
  check "setup: nvcc built tests/gpu/target.cu in $((SECONDS - t0)) s" $? || exit 1
fi
target=$bin/app/target

# The device files, as NVIDIA's container toolkit passes them. /dev/nvidia-uvm appears once a CUDA
# program has run on the host (nvidia-modprobe makes it); run one where it is missing.
if [[ -z $dry && ! -e /dev/nvidia-uvm ]]; then
  echo "no /dev/nvidia-uvm yet: running the target once on the host"
  echo exit | timeout 60 "$target" cuda 1 >/dev/null
fi
devices=()
for d in /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
  [[ -c $d ]] && devices+=("$d")
done
for d in "${devices[@]}"; do echo "device for the container: $d $(stat -c 'char %Hr:%Lr' "$d")"; done
if [[ -z $dry ]]; then
  miss=()
  for d in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do [[ -c $d ]] || miss+=("$d"); done
  ((${#miss[@]} == 0))
  check "setup: the device files are there${miss[*]:+ (missing: ${miss[*]})}" $?
fi
echo "libcuda.so.1 on this host: $(ldconfig -p 2>/dev/null | awk '/libcuda.so.1 / { print $NF }' | head -2 | tr '\n' ' ')"

# The rootfs: the host's /usr and /etc bound read-only; /bin, /lib, /lib64, /sbin as the host has
# them (the same symlink, or bound read-only too); mount points for the rest. Each bind is of the
# folder's own mount only; a host mount below one (a driver library bound into /usr, as on a host
# that is itself a container) is bound by itself after it, so that runc names every mount of the
# container to criu as external.
rootfs=$bin/rootfs
mkdir -p "$rootfs"/{usr,etc,app,io,proc,dev,sys,tmp}
binds=(/usr /etc)
for d in bin lib lib64 sbin; do
  if [[ -L /$d ]]; then
    ln -sfn "$(readlink "/$d")" "$rootfs/$d"
  elif [[ -d /$d ]]; then
    mkdir -p "$rootfs/$d"
    binds+=("/$d")
  fi
done
# shellcheck disable=SC2016 # the script is Python's
under=$(python3 -c '
import sys
tops, seen = sys.argv[1:], []
for line in open("/proc/self/mountinfo"):
    mp = line.split()[4].encode().decode("unicode_escape")
    if any(mp.startswith(t + "/") for t in tops) and mp not in seen:
        seen.append(mp)
print(" ".join(seen))' "${binds[@]}")
read -r -a under <<<"$under"
binds+=("${under[@]}")
echo "rootfs $rootfs: bound read-only ${binds[*]}; links $(cd "$rootfs" && for l in *; do [[ -L $l ]] && printf '/%s->%s ' "$l" "$(readlink "$l")"; done)"

# make_bundle DIR MIB IO: DIR/config.json, from `runc spec` edited for the target of MIB MiB whose
# fifo and output are in the host folder IO.
make_bundle() {
  local dir=$1
  mkdir -p "$dir"
  (cd "$dir" && timeout 20 env ${runc_ld:+LD_LIBRARY_PATH=$runc_ld} "$runc" spec) || return 1
  python3 - "$dir/config.json" "$rootfs" "$bin/app" "$3" "$2" "$libdir_by" "$conf" "${binds[*]}" "${devices[@]}" <<'EOF'
import json, os, stat, sys
path, rootfs, app, io, mib, libdir_by, conf, binds = sys.argv[1:9]
devices = sys.argv[9:]
c = json.load(open(path))
p = c["process"]
p["terminal"] = False
# sh execs the target: the container's init is the CUDA program itself.
p["args"] = ["/bin/sh", "-c", f"exec /app/target fifo {mib} /io/cmd </dev/null >/io/out 2>&1"]
c["root"] = {"path": rootfs, "readonly": True}
c["hostname"] = "cuda-ct"
lx = c["linux"]
# No network namespace: the container shares the host's, so criu has none of its own to dump.
lx["namespaces"] = [n for n in lx["namespaces"] if n["type"] != "network"]
mounts = c["mounts"]
for src in binds.split():
    mounts.append({"destination": src, "type": "bind", "source": src, "options": ["bind", "ro", "nosuid"]})
mounts.append({"destination": "/app", "type": "bind", "source": app, "options": ["bind", "ro", "nosuid", "nodev"]})
mounts.append({"destination": "/io", "type": "bind", "source": io, "options": ["bind", "rw", "nosuid", "nodev"]})
lx["devices"] = []
rules = lx.setdefault("resources", {}).setdefault("devices", [{"allow": False, "access": "rwm"}])
for d in devices:
    st = os.stat(d)
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    lx["devices"].append({"path": d, "type": "c", "major": major, "minor": minor,
                          "fileMode": stat.S_IMODE(st.st_mode), "uid": 0, "gid": 0})
    rules.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
if libdir_by == "conf":
    c.setdefault("annotations", {})["org.criu.config"] = conf
json.dump(c, open(path, "w"), indent=2)
EOF
}

# ---- the container's steps ----
# rn SECONDS DIR ARGS...: runc, bounded, with DIR (the folder of the cuda-checkpoint the plugin is
# to run) and criu's folder first in PATH. (LD_LIBRARY_PATH, where set, holds libseccomp only: criu
# finds its own libraries by its RPATH.)
rn() {
  local limit=$1 dir=$2 envs
  shift 2
  envs=(CT_MARK="$mark" PATH="$dir:$criu_dir:$PATH")
  [[ -n $runc_ld ]] && envs+=(LD_LIBRARY_PATH="$runc_ld")
  [[ $libdir_by == env ]] && envs+=(CRIU_LIBS_DIR="$plugins")
  timeout -k 10 "$limit" env "${envs[@]}" "$runc" --root "$bin/state" "$@"
}
nodir=$bin/ours-bin # for runc calls that run no criu
host_pid() { rn 20 "$nodir" state "$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null; }
ct_status() { rn 20 "$nodir" state "$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])' 2>/dev/null || echo gone; }
containers=() # every container started, deleted at exit

# ct_start LABEL MIB: a container of the target; sets C_ID, C_DIR (its /io), C_BUNDLE, C_PID (host
# pid), C_HASH.
ct_start() {
  C_ID=ct-$1 C_DIR=$bin/t-$1 C_BUNDLE=$bin/b-$1 C_PID='' C_HASH=''
  rm -rf "$C_DIR" "$C_BUNDLE"
  mkdir -p "$C_DIR"
  mkfifo "$C_DIR/cmd"
  : >"$C_DIR/out"
  make_bundle "$C_BUNDLE" "$2" "$C_DIR" || { echo "the bundle of $C_ID was not made"; return 1; }
  containers+=("$C_ID")
  rn 60 "$nodir" run -d --bundle "$C_BUNDLE" "$C_ID" </dev/null >"$C_DIR/runc-run.txt" 2>&1 ||
    { echo "runc run -d $C_ID exited $?: $(head -5 "$C_DIR/runc-run.txt")"; return 1; }
  local word i
  for ((i = 0; i < 1200; i++)); do
    read -r word _ _ C_HASH < <(head -1 "$C_DIR/out" 2>/dev/null)
    [[ ${word:-} == ready ]] && break
    C_HASH=
    [[ $(ct_status "$C_ID") == running ]] || break
    sleep 0.1
  done
  C_PID=$(host_pid "$C_ID")
  if [[ -z $C_HASH || -z $C_PID ]]; then
    echo "container $C_ID did not get ready: $(head -3 "$C_DIR/out"; head -3 "$C_DIR/runc-run.txt")"
    return 1
  fi
  echo "container $C_ID: host pid $C_PID, $2 MiB, hash $C_HASH"
}

# ct_runc LABEL DIR ACTION LOG ARGS...: `runc ACTION ARGS...` (stdin /dev/null) with criu and the
# plugin running the cuda-checkpoint in DIR, timed into C_SECS; runc's output in
# $bin/logs/LABEL-runc-ACTION.txt, criu's LOG (in the work path $bin/work-LABEL) copied to
# $bin/logs/LABEL-LOG; where runc fails, the ends of both printed. Its status is runc's.
ct_runc() {
  local label=$1 dir=$2 action=$3 log=$4 t0 rc
  shift 4
  t0=$(now)
  rn "$step_limit" "$dir" "$action" "$@" </dev/null >"$bin/logs/$label-runc-$action.txt" 2>&1
  rc=$?
  C_SECS=$(secs "$t0" "$(now)")
  cp "$bin/work-$label/$log" "$bin/logs/$label-$log" 2>/dev/null
  if ((rc != 0)); then
    echo "runc $action exited $rc: $(tail -5 "$bin/logs/$label-runc-$action.txt")"
    echo "the end of criu's $log:"
    tail -20 "$bin/logs/$label-$log" 2>/dev/null | sed 's/^/    /'
  fi
  return $rc
}

# ct_checkpoint LABEL DIR: `runc checkpoint` with criu and the plugin running the cuda-checkpoint
# in DIR; sets C_SECS and C_IMG; criu's log in $bin/logs/LABEL-dump.log.
ct_checkpoint() {
  C_IMG=$bin/img-$1
  rm -rf "$C_IMG" "$bin/work-$1"
  ct_runc "$1" "$2" checkpoint dump.log --image-path "$C_IMG" --work-path "$bin/work-$1" "$C_ID"
}

# ct_restore LABEL DIR: `runc restore -d` the same way; sets C_SECS and C_PID (the new host pid).
ct_restore() {
  local rc
  ct_runc "$1" "$2" restore restore.log -d --image-path "$C_IMG" --work-path "$bin/work-$1" \
    --bundle "$C_BUNDLE" "$C_ID"
  rc=$?
  C_PID=$(host_pid "$C_ID")
  return $rc
}

# ct_end: the target told to exit, the container deleted (killed where it does not end).
ct_end() {
  local i
  if [[ $(ct_status "$C_ID") == running ]]; then
    # shellcheck disable=SC2016 # $1 is the inner shell's
    timeout 5 bash -c 'printf "exit\n" >"$1"' _ "$C_DIR/cmd" 2>/dev/null
    for ((i = 0; i < 50; i++)); do [[ $(ct_status "$C_ID") == running ]] || break; sleep 0.1; done
  fi
  rn 20 "$nodir" delete "$C_ID" >/dev/null 2>&1 || { rn 20 "$nodir" kill "$C_ID" KILL >/dev/null 2>&1; sleep 0.5; rn 20 "$nodir" delete -f "$C_ID" >/dev/null 2>&1; }
  [[ $(ct_status "$C_ID") == gone ]]
}

cleanup() {
  local id p
  for id in "${containers[@]}"; do
    [[ $(ct_status "$id") == gone ]] || { rn 20 "$nodir" kill "$id" KILL >/dev/null 2>&1; sleep 0.3; rn 20 "$nodir" delete -f "$id" >/dev/null 2>&1; }
  done
  # A criu that outlived its runc (a bound that fired): ours by the mark in its environment.
  for p in $(pgrep -x criu); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "CT_MARK=$mark" && kill -9 "$p" 2>/dev/null
  done
  rm -rf "$bin"/img-*
}
trap cleanup EXIT

plugin_lines() { grep -hE 'cuda_plugin: ' "$@" 2>/dev/null | grep -vE 'hook [0-9]+ ->' | head -"${LINES_MAX:-16}" | sed 's/^/    | /'; }

# round_trip PROGRAM MIB LABEL [DIR]: one container through checkpoint and restore with PROGRAM's
# cuda-checkpoint (or the one in DIR, a tracer of it) under the plugin; every check; the times into
# $bin/times.txt.
round_trip() {
  local prog=$1 m=$2 label=$3 dir=${4:-$(bindir "$1")} p0 p1 ck rs size s a ok=0 want w missing=()
  if (($(free_mib) < m * 3 + 2048)); then
    verdict SKIP "$label: $(free_mib) MiB free under $bin, the image needs about $((m * 5 / 2)) MiB"
    return
  fi
  echo "-- $label: $(who "$prog") cuda-checkpoint under criu's plugin, $m MiB"
  ct_start "$label" "$m" || { verdict FAIL "$label: the container did not start"; ct_end; return; }
  p0=$C_PID
  if [[ ! -s $bin/maps.txt && -z $dry ]]; then
    # What the container's CUDA program loaded: the driver's libraries from the host's /usr.
    awk '$6 ~ /\.so/ { print $6 }' "/proc/$p0/maps" 2>/dev/null | sort -u >"$bin/maps.txt"
    echo "   the libraries the target mapped in its container:"
    sed 's/^/     /' "$bin/maps.txt"
    grep -q '/libcuda\.so' "$bin/maps.txt"
    _rc=$?; check "$label: the container's target loaded the host's libcuda ($(grep -m1 '/libcuda\.so' "$bin/maps.txt"))" $_rc
  fi
  s=$(timeout 30 "$(prog_bin "$prog")" --get-state --pid "$p0" 2>&1 | head -1 | cut -c1-100)
  [[ $s == running ]]
  _rc=$?; gpu_check "$label: $(who "$prog") --get-state --pid $p0 (host pid): $s" $_rc "$NO_GPU"
  ct_checkpoint "$label" "$dir"
  _rc=$?; check "$label: runc checkpoint (the plugin running $(whose "$prog")) in $C_SECS s" $_rc || ok=1
  ck=$C_SECS
  size=$(du -sh "$C_IMG" 2>/dev/null | cut -f1)
  s=$(ct_status "$C_ID")
  for ((w = 0; w < 50; w++)); do alive "$p0" || break; sleep 0.1; done
  [[ $s == gone ]] && ! alive "$p0"
  check "$label: after the checkpoint the container is gone (runc state: $s) and pid $p0 ended; image $size" $? || ok=1
  if ((ok != 0)); then
    cp "$bin/logs/$label-"* "$bin/keep/" 2>/dev/null
    rm -rf "$C_IMG"
    ct_end
    return
  fi
  ct_restore "$label" "$dir"
  check "$label: runc restore -d in $C_SECS s" $? || ok=1
  rs=$C_SECS
  rm -rf "$C_IMG"
  p1=$C_PID
  s=$(ct_status "$C_ID")
  [[ $s == running && -n $p1 ]]
  check "$label: the container runs again (runc state: $s), host pid ${p1:-none} (was $p0)" $? || ok=1
  s=$(timeout 30 "$(prog_bin "$prog")" --get-state --pid "${p1:-0}" 2>&1 | head -1 | cut -c1-100)
  [[ $s == running ]]
  _rc=$?; gpu_check "$label: $(who "$prog") --get-state --pid ${p1:-?}: $s (want running)" $_rc "$NO_GPU" || ok=1
  a="(not asked)"
  [[ $(ct_status "$C_ID") == running ]] && a=$(ask "$C_DIR" hash)
  [[ $a == "hash $C_HASH" ]]
  check "$label: GPU memory intact after the round trip: $a (ready $C_HASH)" $? || ok=1
  grep -qF 'Plugin "cuda_plugin"' "$bin/logs/$label-dump.log" 2>/dev/null &&
    grep -qF 'Plugin "cuda_plugin"' "$bin/logs/$label-restore.log" 2>/dev/null
  check "$label: criu loaded cuda_plugin from $plugins in the checkpoint and in the restore" $? || ok=1
  # The plugin's own lines: initialized in both criu runs; the pid paused and checkpointed at the
  # dump, resumed (its new host pid) at the restore.
  want=("$label-dump.log:cuda_plugin: initialized" "$label-restore.log:cuda_plugin: initialized"
    "$label-dump.log:pausing devices on pid $p0" "$label-dump.log:Checkpointing CUDA devices on pid $p0"
    "$label-restore.log:resuming devices on pid ${p1:-?}")
  missing=()
  for w in "${want[@]}"; do grep -qF "${w#*:}" "$bin/logs/${w%%:*}" 2>/dev/null || missing+=("${w#*:} (${w%%:*})"); done
  w=${#missing[@]}
  [[ -n $dry ]] && missing=() # no plugin at work: the list says nothing
  gpu_check "$label: criu's logs show the plugin initialized, pausing and checkpointing pid $p0, resuming pid ${p1:-?}${missing[*]:+ (missing: ${missing[*]})}" "$w" "$NO_GPU" || ok=1
  LINES_MAX=14 plugin_lines "$bin/logs/$label-dump.log" "$bin/logs/$label-restore.log"
  echo "    checkpoint $ck s (image $size), restore $rs s; memory: $a (ready $C_HASH)"
  if ((ok != 0)) || [[ $label == trace-* ]]; then cp "$bin/logs/$label-"* "$bin/keep/" 2>/dev/null; fi
  ((ok == 0)) && echo "$prog $m $ck $rs $size $label" >>"$bin/times.txt"
  ct_end
  check "$label: the target exited and the container was deleted" $?
}

# ---- a. traced: every call the plugin makes, ours and NVIDIA's ----
# make_tracer NAME REAL: $bin/trace-NAME/cuda-checkpoint, which logs each call (arguments, exit
# code, time, the first lines of output) to $bin/trace-NAME.txt and passes REAL's output and exit
# code on.
make_tracer() {
  mkdir -p "$bin/trace-$1"
  : >"$bin/trace-$1.txt"
  cat >"$bin/trace-$1/cuda-checkpoint" <<EOF
#!/bin/bash
start=\$(date +%s%N)
output=\$("$2" "\$@" 2>&1)
rc=\$?
{ echo "call \$* rc=\$rc ms=\$(( (\$(date +%s%N) - start) / 1000000 ))"
  [[ \$1 == -h ]] || printf '%s\n' "\$output" | head -3 | sed 's/^/  | /'; } >>"$bin/trace-$1.txt"
[[ -n \$output ]] && printf '%s\n' "\$output"
exit \$rc
EOF
  chmod +x "$bin/trace-$1/cuda-checkpoint"
}

if [[ $cases == *a* ]]; then
  echo
  echo "== a. traced: the calls criu's plugin makes of each program, 256 MiB"
  for prog in ours nvidia; do
    make_tracer "$prog" "$(prog_bin "$prog")"
    round_trip "$prog" 256 "trace-$prog" "$bin/trace-$prog"
    echo "   the calls of $(who "$prog") cuda-checkpoint, as the plugin made them:"
    sed 's/^/     /' "$bin/trace-$prog.txt"
    cp "$bin/trace-$prog.txt" "$bin/keep/"
  done
  # The two sequences with the pids (the container's host pid before and after) and the restore
  # thread ids named in order of appearance, the times left out.
  for prog in ours nvidia; do
    ids=$(grep -oE -- '--pid [0-9]+' "$bin/trace-$prog.txt" | awk '{ print $2 }' | awk '!seen[$0]++')
    tids=$(grep -A1 'call --get-restore-tid' "$bin/trace-$prog.txt" | sed -n 's/^  | \([0-9][0-9]*\)$/\1/p' | awk '!seen[$0]++')
    norm=(-e 's/ ms=[0-9]+//')
    n=0
    for i in $ids; do grep -qx "$i" <<<"$tids" || { n=$((n + 1)); norm+=(-e "s/\\b$i\\b/<pid$n>/g"); }; done
    n=0
    for i in $tids; do n=$((n + 1)); norm+=(-e "s/\\b$i\\b/<tid$n>/g"); done
    sed -E "${norm[@]}" "$bin/trace-$prog.txt" >"$bin/trace-$prog.seq"
  done
  if [[ -n $dry && ! -s $bin/trace-ours.seq ]]; then
    verdict SKIP "a/trace: the plugin called neither program (dry run: $NO_GPU)"
  elif [[ -s $bin/trace-ours.seq ]] && cmp -s "$bin/trace-ours.seq" "$bin/trace-nvidia.seq"; then
    verdict PASS "a/trace: the plugin made the same $(grep -c '^call ' "$bin/trace-ours.seq") calls of ours as of NVIDIA's in a container, with the same exit codes and output"
  else
    verdict FAIL "a/trace: the plugin's calls differ between NVIDIA's (<) and ours (>)"
    diff "$bin/trace-nvidia.seq" "$bin/trace-ours.seq" | sed 's/^/    /'
  fi
else
  verdict SKIP "a: not asked (CONTAINER_CASES=$cases)"
fi

# ---- b. timed: ours and NVIDIA's taking turns ----
if [[ $cases == *b* ]]; then
  echo
  echo "== b. timed: $rounds round(s) of $mib MiB, ours and NVIDIA's taking turns"
  : >"$bin/times.txt"
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(ours nvidia); else order=(nvidia ours); fi
    for prog in "${order[@]}"; do
      # One run took 5-6 s for 1 GiB and 10 s for 4 GiB on an H100, start and end included.
      if (($(left) < 15 + mib / 200)); then
        verdict SKIP "b/$prog-r$r: $(left) s left of the $budget s budget"
        continue
      fi
      round_trip "$prog" "$mib" "b-$prog-r$r"
    done
  done
else
  verdict SKIP "b: not asked (CONTAINER_CASES=$cases)"
fi

# ---- g. the guard across criu: a restore through the plugin onto a full GPU ----
# Our binary recorded what the container's process held at the plugin's `--action checkpoint`
# (keyed by host pid and start, with what outlasts criu: its pid in its namespace, its uid, its
# command line). `runc restore` brings it back with another host pid and start; the plugin's
# `--action restore` of it onto a GPU a filler has taken is refused by ours before the driver (on
# driver 580 a restore that runs out of memory loses the process for good). criu 4.1.1 and 4.2 only
# log the plugin's failure: runc restore succeeds and the process is left checkpointed. Once the
# filler ends, `cuda-checkpoint --toggle` restores it: running, its GPU memory intact.
gpu_free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | tr -d ' '; }
guard() {
  local mg=${GUARD_MIB:-4096} label=g-guard p0 p1 rec s a fill fpid rc w ok=0 tr=$bin/trace-guard
  echo
  echo "== g. the guard across criu: our cuda-checkpoint under the plugin, $mg MiB, a full GPU at the restore"
  if [[ -n $dry ]]; then verdict SKIP "g: the guard needs a GPU (dry run: $NO_GPU)"; return; fi
  if (($(free_mib) < mg * 3 + 2048)); then verdict SKIP "g: $(free_mib) MiB free under $bin"; return; fi
  make_tracer guard "$(prog_bin ours)"
  ct_start "$label" "$mg" || { verdict FAIL "g: the container did not start"; ct_end; return; }
  p0=$C_PID
  ct_checkpoint "$label" "$tr"
  check "g: runc checkpoint, the plugin running ours ($C_SECS s)" $? || { ct_end; return; }
  for ((w = 0; w < 50; w++)); do alive "$p0" || break; sleep 0.1; done
  rec=$(ls /run/ckpt-cuda/"$p0"-*.json 2>/dev/null | head -1)
  echo "   the record of pid $p0: ${rec:-none}: $(cat "$rec" 2>/dev/null)"
  [[ -n $rec ]] && ! alive "$p0" && grep -q '"mark":"1:0:[0-9a-f]\{64\}:[0-9a-f]\{64\}"' "$rec"
  check "g: the container is gone; ours kept the record of what pid $p0 held, with its mark (pid 1 in its namespace, uid 0, its command line's and its cgroup's SHA-256)" $? || ok=1
  # A filler takes the GPU: 1 GiB less free than the process held.
  fill=$(($(gpu_free_mib) - mg + 1024))
  mkfifo "$bin/fin"
  "$target" fill "$fill" <"$bin/fin" >"$bin/filler.out" 2>&1 &
  fpid=$!
  exec 4>"$bin/fin"
  for _ in $(seq 150); do grep -q '^ready' "$bin/filler.out" && break; sleep 0.2; done
  echo "   filler: pid $fpid holds $fill MiB; free now $(gpu_free_mib) MiB"
  ct_restore "$label" "$tr"
  check "g: runc restore -d exits 0 ($C_SECS s): criu only logs the plugin's failure" $? || ok=1
  p1=$C_PID
  echo "   the calls the plugin made of ours:"
  sed 's/^/     /' "$tr.txt"
  grep -A2 -- "call --action restore --pid ${p1:-x} " "$tr.txt" | grep -q 'rc=1' &&
    grep -A2 -- "call --action restore --pid ${p1:-x} " "$tr.txt" | grep -q 'not enough free GPU memory for it: refused before asking the driver'
  check "g: ours refused the plugin's --action restore of pid ${p1:-?} (the process criu made, was $p0): not enough free GPU memory, before the driver" $? || ok=1
  s=$(timeout 30 "$(prog_bin ours)" --get-state --pid "${p1:-0}" 2>&1 | head -1)
  [[ $s == checkpointed ]]
  check "g: the container runs, its process checkpointed (state: $s), not lost" $? || ok=1
  ls /run/ckpt-cuda/"${p1:-x}"-*.json >/dev/null 2>&1 && ! ls /run/ckpt-cuda/"$p0"-*.json >/dev/null 2>&1
  check "g: the record moved to the process criu made (pid ${p1:-?})" $? || ok=1
  echo exit >&4
  exec 4>&-
  wait "$fpid" 2>/dev/null
  echo "   filler gone; free now $(gpu_free_mib) MiB"
  timeout 60 "$(prog_bin ours)" --toggle --pid "${p1:-0}" >"$bin/g-toggle.txt" 2>&1
  rc=$?
  check "g: once there is room, cuda-checkpoint --toggle --pid ${p1:-?} restores it (exit $rc: $(head -1 "$bin/g-toggle.txt"))" "$rc" || ok=1
  s=$(timeout 30 "$(prog_bin ours)" --get-state --pid "${p1:-0}" 2>&1 | head -1)
  a=$(ask "$C_DIR" hash)
  [[ $s == running && $a == "hash $C_HASH" ]]
  check "g: running, GPU memory intact: $a (ready $C_HASH)" $? || ok=1
  ((ok == 0)) || cp "$bin/logs/$label-"* "$tr.txt" "$bin/keep/" 2>/dev/null
  cp "$tr.txt" "$bin/keep/" 2>/dev/null
  rm -rf "$C_IMG"
  ct_end
  check "g: the target exited and the container was deleted" $?
}
if [[ $cases == *g* ]]; then guard; else verdict SKIP "g: not asked (CONTAINER_CASES=$cases)"; fi

# ---- report ----
med() { # PROGRAM COLUMN: the median of that column of the timed runs
  awk -v p="$1" -v c="$2" '$1 == p && $6 ~ /^b-/ { print $c }' "$bin/times.txt" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else printf "-" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
goal() { awk -v r="$1" 'BEGIN { if (r == "-") print "not measured"; else if (r + 0 <= 1.10) print "met"; else print "NOT met" }'; }
{
  echo "# A GPU container through runc checkpoint and restore, criu's CUDA plugin running ours and NVIDIA's cuda-checkpoint"
  echo
  echo "$(date -u +%FT%TZ), $(hostname), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'),"
  echo "kernel $(uname -r); $(echo "$runc_v" | head -1) (Debian's package); criu $("$criu_dir/criu" --version 2>/dev/null | head -1 | sed 's/Version: //') with its CUDA plugin;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with changes)')${dry:+; DRY RUN (no GPU)}."
  echo
  echo "Each run: a fresh container (rootfs of the host's /usr and /etc read-only, the NVIDIA device files,"
  echo "no network namespace) whose init is tests/gpu/target.cu holding the given GPU memory; \`runc checkpoint"
  echo "--image-path\` (criu's plugin locks and checkpoints through \`cuda-checkpoint\` on PATH; the container is"
  echo "gone after), \`runc restore -d\` (the plugin restores and unlocks); seconds are each runc command's wall"
  echo "time. After each: state \`running\` and the target's hash of its GPU memory, computed on the GPU, the same"
  echo "as at its start. The plugin folder given by $([[ $libdir_by == conf ]] && echo "a criu configuration file with \`libdir\`, named by the annotation org.criu.config" || echo "CRIU_LIBS_DIR in runc's environment")."
  echo
  echo "| run | program | GPU memory | checkpoint s | restore s | image |"
  echo "|---|---|---|---|---|---|"
  while read -r prog m ck rs size label; do
    echo "| $label | $prog | $m MiB | $ck | $rs | $size |"
  done <"$bin/times.txt"
  echo
  ck_o=$(med ours 3) ck_n=$(med nvidia 3) rs_o=$(med ours 4) rs_n=$(med nvidia 4)
  ck_r=$(ratio "$ck_o" "$ck_n") rs_r=$(ratio "$rs_o" "$rs_n")
  echo "Medians of the timed runs ($mib MiB, $rounds round(s) each, taking turns):"
  echo
  echo "| | ours | NVIDIA's | ours / NVIDIA's | goal: within 1.1x |"
  echo "|---|---|---|---|---|"
  echo "| checkpoint s | $ck_o | $ck_n | $ck_r | $(goal "$ck_r") |"
  echo "| restore s | $rs_o | $rs_n | $rs_r | $(goal "$rs_r") |"
} >"$out/container-report.md"
echo
cat "$out/container-report.md"
tar -C "$bin" -czf "$out/container-logs.tgz" keep 2>/dev/null
verdict_summary "$bin/verdicts.txt"
