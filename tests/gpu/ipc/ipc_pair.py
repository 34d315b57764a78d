#!/usr/bin/env python3
"""Two PyTorch processes that share GPU memory, for tests/gpu/ipc_probe.sh (issue 30, part A).

  python3 ipc_pair.py --kind lone|legacy|expandable|event --dir DIR [--mib N]

The parent allocates N MiB on GPU 0 (a known pattern) and, but for --kind lone, starts a child
with torch.multiprocessing (the spawn method) and hands it over a queue:
  legacy      the CUDA tensor itself: the child opens it with CUDA IPC (cudaIpcOpenMemHandle), as
              PyTorch's DataLoader workers and NCCL's P2P transport do
  expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch's cuMem
              allocator: the child imports the segment through a shareable handle)
  event       only an interprocess CUDA event (torch.cuda.Event(interprocess=True), its IPC
              handle opened by the child); the child holds 16 MiB of its own and no shared memory
  lone        no child: the control, a PyTorch process that shares nothing
The child writes DIR/child.out and DIR/child.err and reads its commands from DIR/child.cmd; the
parent writes its stdout (the script sends it to DIR/parent.out) and reads DIR/parent.cmd. Each
prints "ready <pid> kind=<kind> role=<role> digest=<hex> ..." (the parent's line comes once the
child is ready and names it: child=<pid>), then answers "digest" (the digest of the memory it
sees, tests/gpu/pytorch/common.py's) and ends on "exit". The parent keeps the tensor alive while
the child may use it, as CUDA IPC requires; on exit it waits 10 s for the child, then ends it.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pytorch"))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=["lone", "legacy", "expandable", "event"], required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--mib", type=int, default=64)
    return p.parse_args()


def pattern(torch, mib):
    """N MiB of int32 words, i * 2654435761 (wrapping), on GPU 0."""
    n = (mib << 20) // 4
    return (torch.arange(n, dtype=torch.int64, device="cuda") * 2654435761).to(torch.int32)


def child_main(kind, d, q, back):
    """The child: opens what the parent sent, says ready, answers its fifo."""
    sys.stdout = open(os.path.join(d, "child.out"), "w", buffering=1)
    sys.stderr = open(os.path.join(d, "child.err"), "w", buffering=1)
    torch = common.load_torch(False)  # the environment is the parent's: the same allocator
    digester = common.Digester(torch, torch.device("cuda", 0))
    item = q.get(timeout=300)
    if kind == "event":
        event = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), item)
        event.synchronize()
        own = torch.ones((16 << 20) // 4, device="cuda")  # memory of its own, none shared

        def digest():
            return "event-only/" + digester.tensor(own)

    else:
        shared = item  # opened through CUDA IPC on receipt

        def digest():
            return digester.tensor(shared)

    first = digest()
    common.say("ready", os.getpid(), "kind=%s role=importer digest=%s parent=%d" % (kind, first, os.getppid()))
    back.put((os.getpid(), first))
    common.serve(os.path.join(d, "child.cmd"), {"digest": lambda _: "digest " + digest()})
    sys.stdout.flush()


def main():
    args = parse()
    if args.kind == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # before torch
    torch = common.load_torch(False)
    digester = common.Digester(torch, torch.device("cuda", 0))
    tensor = pattern(torch, args.mib)
    torch.cuda.synchronize()
    mine = digester.tensor(tensor)
    info = "alloc_conf=%s torch=%s" % (os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(default)"), torch.__version__)
    child = None
    if args.kind == "lone":
        common.say("ready", os.getpid(), "kind=lone role=lone digest=%s %s" % (mine, info))
    else:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        q, back = ctx.Queue(), ctx.Queue()
        child = ctx.Process(target=child_main, args=(args.kind, args.dir, q, back), daemon=False)
        child.start()
        if args.kind == "event":
            event = torch.cuda.Event(interprocess=True)
            event.record()
            torch.cuda.synchronize()
            q.put(event.ipc_handle())
        else:
            q.put(tensor)
        cpid, theirs = back.get(timeout=300)
        common.say(
            "ready",
            os.getpid(),
            "kind=%s role=exporter digest=%s child=%d child_digest=%s %s" % (args.kind, mine, cpid, theirs, info),
        )
    common.serve(os.path.join(args.dir, "parent.cmd"), {"digest": lambda _: "digest " + digester.tensor(tensor)})
    if child is not None:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(5)


if __name__ == "__main__":
    main()
