#!/usr/bin/env python3
"""GPU memory shared through a POSIX file descriptor (cuMem), for tests/gpu/ipc_probe.sh: what
NCCL's cuMem path does between ranks, without PyTorch, through ctypes against libcuda.

  python3 cumem_fd.py --dir DIR [--mib N] [--keep-fds]

The exporter (this process) creates N MiB on GPU 0 with cuMemCreate, asking for a POSIX file
descriptor handle, maps it (cuMemAddressReserve, cuMemMap, cuMemSetAccess), writes a known pattern
into it, exports it (cuMemExportToShareableHandle), starts the importer (this file again, --role
importer, its child) and hands it the descriptor over a unix socket (SCM_RIGHTS). The importer
imports it (cuMemImportFromShareableHandle), maps it and reads it back. Both then close the
descriptor (--keep-fds: both keep it open) and the socket, and answer commands, one per opening
of a fifo: DIR/parent.cmd, DIR/child.cmd ("digest": the SHA-256 of the N MiB read back; "exit").
Each prints "note fd-target=<what the descriptor is>" and "ready <pid> kind=fd role=... digest=<hex>
...": the exporter on stdout (the script sends it to DIR/parent.out) once the importer is ready,
naming it (child=<pid>); the importer in DIR/child.out.
"""

import argparse
import ctypes
import hashlib
import os
import random
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pytorch"))
import common  # noqa: E402

POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
GRANULARITY_MINIMUM = 0


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", AllocFlags),
    ]


class AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


U64, SIZE, VOIDP, INT = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int
SIGNATURES = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [ctypes.POINTER(INT), INT],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(VOIDP), INT],
    "cuCtxSetCurrent": [VOIDP],
    "cuCtxSynchronize": [],
    "cuMemGetAllocationGranularity": [ctypes.POINTER(SIZE), ctypes.POINTER(AllocationProp), INT],
    "cuMemCreate": [ctypes.POINTER(U64), SIZE, ctypes.POINTER(AllocationProp), U64],
    "cuMemExportToShareableHandle": [VOIDP, U64, INT, U64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(U64), VOIDP, INT],
    "cuMemAddressReserve": [ctypes.POINTER(U64), SIZE, SIZE, U64, U64],
    "cuMemMap": [U64, SIZE, SIZE, U64, U64],
    "cuMemSetAccess": [U64, SIZE, ctypes.POINTER(AccessDesc), SIZE],
    "cuMemcpyHtoD_v2": [U64, VOIDP, SIZE],
    "cuMemcpyDtoH_v2": [VOIDP, U64, SIZE],
    "cuGetErrorName": [INT, ctypes.POINTER(ctypes.c_char_p)],
}


class Cuda:
    """The few driver calls used here, each checked: a failure raises, naming the call."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        for name, argtypes in SIGNATURES.items():
            f = getattr(self.lib, name)
            f.argtypes, f.restype = argtypes, INT

    def __getattr__(self, name):
        f = getattr(self.lib, name)

        def call(*args):
            res = f(*args)
            if res != 0:
                text = ctypes.c_char_p()
                self.lib.cuGetErrorName(res, ctypes.byref(text))
                raise RuntimeError("%s failed: %s (%d)" % (name, (text.value or b"?").decode(), res))

        return call

    def context(self):
        self.cuInit(0)
        dev, ctx = INT(), VOIDP()
        self.cuDeviceGet(ctypes.byref(dev), 0)
        self.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        self.cuCtxSetCurrent(ctx)

    def prop(self):
        p = AllocationProp()
        p.type, p.requestedHandleTypes = PINNED, POSIX_FD
        p.location.type, p.location.id = DEVICE, 0
        return p

    def size_for(self, mib):
        g = SIZE()
        self.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(self.prop()), GRANULARITY_MINIMUM)
        want = mib << 20
        return (want + g.value - 1) // g.value * g.value

    def map(self, handle, size):
        """Maps an allocation handle read-write on GPU 0; returns its address."""
        ptr = U64()
        self.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0)
        self.cuMemMap(ptr, size, 0, handle, 0)
        desc = AccessDesc()
        desc.location.type, desc.location.id, desc.flags = DEVICE, 0, READWRITE
        self.cuMemSetAccess(ptr, size, ctypes.byref(desc), 1)
        return ptr.value

    def digest(self, ptr, size):
        buf = ctypes.create_string_buffer(size)
        self.cuMemcpyDtoH_v2(ctypes.cast(buf, VOIDP), ptr, size)
        return hashlib.sha256(buf.raw).hexdigest()[:32]


def fd_target(fd):
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError as error:
        return "(%s)" % error


def exporter(args):
    cu = Cuda()
    cu.context()
    size = cu.size_for(args.mib)
    handle = U64()
    cu.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(cu.prop()), 0)
    ptr = cu.map(handle.value, size)
    data = random.Random(1234).randbytes(size)
    cu.cuMemcpyHtoD_v2(ptr, data, size)
    cu.cuCtxSynchronize()
    mine = cu.digest(ptr, size)
    fd = INT(-1)
    cu.cuMemExportToShareableHandle(ctypes.byref(fd), handle.value, POSIX_FD, 0)
    common.say("note fd-target=%s (the exported descriptor, in the exporter)" % fd_target(fd.value))
    path = os.path.join(args.dir, "fd.sock")
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--role", "importer", "--dir", args.dir, "--size", str(size),
         "--expect", mine] + (["--keep-fds"] if args.keep_fds else []),
        stdin=subprocess.DEVNULL,
        stdout=open(os.path.join(args.dir, "child.out"), "w"),
        stderr=open(os.path.join(args.dir, "child.err"), "w"),
    )
    server.settimeout(120)
    conn, _ = server.accept()
    socket.send_fds(conn, [b"fd"], [fd.value])
    conn.settimeout(120)
    answer = conn.recv(256).decode(errors="replace").strip()
    conn.close()
    server.close()
    os.unlink(path)
    if not args.keep_fds:
        os.close(fd.value)
    common.say(
        "ready",
        os.getpid(),
        "kind=fd role=exporter digest=%s child=%d child_says=%s size=%d kept_fd=%s"
        % (mine, child.pid, answer.replace(" ", "_"), size, "yes" if args.keep_fds else "no"),
    )
    common.serve(os.path.join(args.dir, "parent.cmd"), {"digest": lambda _: "digest " + cu.digest(ptr, size)})
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(5)


def importer(args):
    cu = Cuda()
    cu.context()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(100):
        try:
            sock.connect(os.path.join(args.dir, "fd.sock"))
            break
        except OSError:
            time.sleep(0.1)
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    fd = fds[0]
    common.say("note fd-target=%s (the received descriptor, in the importer)" % fd_target(fd))
    handle = U64()
    cu.cuMemImportFromShareableHandle(ctypes.byref(handle), VOIDP(fd), POSIX_FD)
    if not args.keep_fds:
        os.close(fd)
    ptr = cu.map(handle.value, args.size)
    mine = cu.digest(ptr, args.size)
    sock.sendall(("ok digest=%s" % mine).encode())
    sock.close()
    common.say(
        "ready",
        os.getpid(),
        "kind=fd role=importer digest=%s matches=%s parent=%d" % (mine, "yes" if mine == args.expect else "NO", os.getppid()),
    )
    common.serve(os.path.join(args.dir, "child.cmd"), {"digest": lambda _: "digest " + cu.digest(ptr, args.size)})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--keep-fds", action="store_true")
    p.add_argument("--role", choices=["exporter", "importer"], default="exporter")
    p.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--expect", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    common.prepare_environment()
    try:
        (importer if args.role == "importer" else exporter)(args)
    except Exception as error:
        common.say("error %s: %s" % (type(error).__name__, error))
        sys.exit(2)


if __name__ == "__main__":
    main()
