/**
 * The help text of `cuda-checkpoint`: what `--help` prints, and what follows a usage error of
 * NVIDIA's operations. It names `--action`, which CRIU's CUDA plugin looks for.
 *
 * @module
 */

import { VERSION } from "../core/version.ts";

/** The help text, ending with a newline. */
export const helpText = (): string =>
  `Usage: cuda-checkpoint <operation> --pid <pid>[,<pid>...] [options]
Checkpoint and restore the CUDA state of Linux processes (@ckpt/cuda ${VERSION}). Works as NVIDIA's
cuda-checkpoint utility (driver 580) does, and on several processes at once.

Operations:
--get-state --pid <pid>
        Prints the checkpoint state of <pid>: running, locked, checkpointed or failed

--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>] [--device-map <map>]
        Makes one step on <pid>. lock waits up to <ms> for work already submitted to the GPU
        (no --timeout, or 0: as long as it takes); restore can move the process to other GPUs

--toggle --pid <pid> [--device-map <map>]
        Suspends a running process (lock, checkpoint); resumes a checkpointed one (restore, unlock)

--get-restore-tid --pid <pid>
        Prints the id of the thread the driver restores <pid> from

list | ps
        Lists the CUDA processes of this machine: pid, state, restore thread, GPU memory, command

snapshot --pid <pid>[,<pid>...] [--dir] <dir> [--leave-running] [--job] [--timeout <ms>]
         [--deadline <ms>] [--allow-ipc-import] [--tcp-established]
        Saves the process trees of <pid>... to the new directory <dir> through criu (4.0 or
        later, as root), their CUDA processes included, then ends them (--leave-running: they go
        on). --timeout: each CUDA process's lock timeout (default 10000). --tcp-established:
        take established TCP connections too (both ends in the snapshot, or the peer gone)

restore-snapshot [--dir] <dir> [--device-map <map>]
        Brings a snapshot's processes back with their pids, onto the GPUs they left, or onto those
        the map names (the snapshot's GPU UUIDs to this machine's); checks everything first

inspect [--dir] <dir> [--verify]
        Prints what a snapshot holds, checked against its files (needs no GPU driver); --verify
        reads every file and checks its digest, as restore-snapshot does before it begins

recover [--dir] <dir> [--no-room-check]
        After a snapshot was killed outright (SIGKILL, a power cut): resumes the processes it had
        suspended (its <dir>/in-progress.json names them), and removes what it had written

Options:
--pid|-p <pid>[,<pid>...]
        The process (or one of its threads). Several pids, repeated or in a comma list, are worked
        on at once, and each gets a line "<pid> <result>" (done, failed, ..., as --json's status)

--all
        Every CUDA process of this machine, at once

--all-or-nothing
        With several processes: when one fails, bring the others back to where they were

--job
        With several processes, or a snapshot, that share GPU state (NCCL ranks, CUDA IPC): all
        or nothing, each locked before any is checkpointed and restored before any is unlocked

--deadline <ms>
        For snapshot and restore-snapshot: the time the whole may take (0: no limit), else undone

--timeout|-t <ms>
        For --action lock: how long to wait, 0 to 4294967295 milliseconds; for snapshot: each
        CUDA process's lock timeout. No other operation takes it

--device-map|-d <old>=<new>[,<old>=<new>...]
        For restore and --toggle (resuming): restore onto other GPUs, by GPU UUID
        (GPU-xxxxxxxx-...). Must name every GPU the driver sees, even one the process does not use

--no-room-check
        For restore, --toggle (resuming), restore-snapshot and recover: do not check first that the
        GPUs have room for what each process held (needed where this machine's records of what it
        held cannot be read). On driver 580 a restore that runs out of GPU memory loses the process

--allow-ipc-import
        For --action checkpoint, --toggle (suspending) and snapshot: checkpoint a process even
        though it maps another process's CUDA IPC memory (before driver 610 it never restores),
        or is an NCCL rank with others on this host and NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
        not both set (on 580 such ranks never restore): refused unless this is given

--json
        One JSON object per line and per process instead of text. Operations: pid, operation, ok,
        state, restoreThreadId, status (done, failed, stopped, not-started, rolled-back,
        rollback-failed), reason, ms, steps, error {message, code, codeName, detail}, rollback.
        list: pid, state, restoreThreadId, gpuMemoryMiB ({GPU UUID: MiB} or "unknown"), command

--events
        Long work (a step, --toggle, snapshot, restore-snapshot, recover) writes its progress on
        stderr, one JSON object per line, instead of the live line a terminal shows:
        {"event":"phase",phase,gpuMemoryMiB:{<pid>:<MiB>},imageBytes}, {"event":"step-start",
        pid,step,rollback,gpuMemoryMiB,bytes,estimatedMs}, {"event":"step-end",pid,step,ms,ok,
        rollback}, {"event":"process-end",pid,status}, {"event":"bytes",root,bytes} (criu's count,
        written or read back), {"event":"tree-end",root,how:"dumped"|"restored",bytes,gpuMemoryMiB}
        (its files, as the manifest lists them), {"event":"wait",root,ms,why} (the restore waits ms
        before criu: a port in TIME_WAIT; 0: one ended); at: ms since it began. Other lines: text

--simulate
        Works on a simulated machine kept in a state file ($CKPT_SIM_STATE, else one in
        $XDG_RUNTIME_DIR or the temporary folder) instead of the GPU driver. Also:
          --simulate spawn [--memory-mib <n>] [--gpu <i>[,<j>]] [--command <text>] [--parent <pid>]
              prints the pid (--parent: of a live simulated process, whose tree it joins)
          --simulate kill <pid>
          --simulate reset
        Calls take no time unless CKPT_SIM_CLOCK=real: the driver's times (CKPT_SIM_SPEED scales it)

--version
        Prints the version

--help|-h
        Prints this help

Exit status: 0 when everything asked succeeded; 1 when anything failed or the command line was
wrong; 128 + the signal's number when interrupted: 130 (Ctrl-C, SIGINT), 143 (SIGTERM), 129
(SIGHUP). Errors are on stderr, with NVIDIA's messages; on a terminal a second line says more,
and long work shows a live line: its phase, bytes done of bytes expected, the rate, the time left
("~": estimated from the GPU memory and the driver's usual rates, or this run's own).
Ctrl-C, SIGTERM or SIGHUP during an operation on several processes, a snapshot or a
restore-snapshot stops it: every process it changed is brought back, it says what it could not,
and exits as above; a second one of the three exits at once. With --simulate, one that comes
while the simulated machine is saved after a command ends it once saved.
NVIDIA's --launch-job (driver 590 and later) is not supported.
Environment: CKPT_LIBCUDA_PATH and CKPT_LIBNVML_PATH (the libcuda and NVML to load),
CKPT_CRIU_PATH (the criu to run), CKPT_RECORDS_DIR (the records of GPU memory held),
CKPT_SIM_STATE, CKPT_SIM_CLOCK and CKPT_SIM_SPEED (the simulated machine).
`;
