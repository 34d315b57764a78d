#!/usr/bin/env python3
"""A small inference server for tests/gpu/pytorch.sh: a model of N MiB of random weights held on
the GPU, answering over TCP (127.0.0.1). One thread, one selector over the listening socket and
its connections (poll(2)); a connection may ask many times.

  python3 server.py --mib N [--port P] [--seed S]

Port 0 (the default) takes a free port. It prints "ready <pid> port=<p> weights=<hex> out0=<hex>
mib=N ...": the weights' digest and the output's for request seed 0 (tests/gpu/pytorch/common.py's
digests), then serves until SIGTERM or SIGKILL. A request is one line, answered by one line:

  infer S     the model on an input drawn from a generator seeded with S: "ok served=<n>
              weights=<hex> out=<hex> pid=<pid>" (n counts the requests this process answered)
  digest      "ok served=<n> weights=<hex> pid=<pid>"
  quit        closes the connection

The answer proves the model intact: its weights' digest is the one in the ready line, and the
output for a seed is the same bits every time. Its only inet sockets are the listening one and
what it accepted; criu dumps a listening socket as is, an open connection only with
--tcp-established.
"""

import argparse
import os
import selectors
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--width", type=int, default=0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seed", type=int, default=777)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fake", action="store_true", help="a stand-in without torch (dry run)")
    return p.parse_args()


class Model:
    def __init__(self, torch, args):
        self.torch = torch
        common.deterministic(torch, args.seed)
        self.dev = torch.device("cuda", 0)
        self.net, self.width, self.layers = common.make_mlp(torch, args.mib, args.width, self.dev, 0.0)
        self.net.eval()
        self.batch = args.batch
        self.d = common.Digester(torch, self.dev)

    def weights(self):
        return self.d.named(self.net.named_parameters())

    def out(self, seed):
        torch = self.torch
        x = torch.randn(self.batch, self.width, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            y = self.net(x.to(self.dev))
        torch.cuda.synchronize()
        return self.d.tensor(y)

    def about(self, mib):
        return "mib=%d layers=%d width=%d torch=%s" % (mib, self.layers, self.width, self.torch.__version__)


class FakeModel:
    def __init__(self, args):
        self.seed = args.seed

    def weights(self):
        return common.sha("weights", self.seed)

    def out(self, seed):
        return common.sha("out", self.seed, seed)

    def about(self, mib):
        return "mib=%d layers=1 width=0 torch=none" % mib


def main():
    args = parse()
    torch = common.load_torch(args.fake)
    model = FakeModel(args) if args.fake else Model(torch, args)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(16)
    listener.setblocking(False)
    sel = selectors.PollSelector()  # poll(2): no epoll descriptor for criu to carry
    sel.register(listener, selectors.EVENT_READ, None)
    served = 0
    common.say(
        "ready",
        os.getpid(),
        "port=%d weights=%s out0=%s %s" % (listener.getsockname()[1], model.weights(), model.out(0), model.about(args.mib)),
    )

    def answer(line):
        nonlocal served
        words = line.split()
        if words[:1] == ["infer"] and len(words) == 2:
            served += 1
            return "ok served=%d weights=%s out=%s pid=%d" % (served, model.weights(), model.out(int(words[1])), os.getpid())
        if words == ["digest"]:
            return "ok served=%d weights=%s pid=%d" % (served, model.weights(), os.getpid())
        return "error unknown request: %r" % line

    while True:
        for key, _ in sel.select():
            if key.data is None:  # the listening socket
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(True)
                sel.register(conn, selectors.EVENT_READ, bytearray())
                continue
            conn, buf = key.fileobj, key.data
            try:
                chunk = conn.recv(4096)
            except ConnectionError:
                chunk = b""
            if not chunk:
                sel.unregister(conn)
                conn.close()
                continue
            buf += chunk
            while b"\n" in buf:
                line, _, rest = bytes(buf).partition(b"\n")
                buf[:] = rest
                text = line.decode(errors="replace").strip()
                if text == "quit":
                    sel.unregister(conn)
                    conn.close()
                    break
                try:
                    reply = answer(text)
                except Exception as error:
                    reply = "error %s: %s" % (type(error).__name__, error)
                conn.sendall((reply + "\n").encode())


if __name__ == "__main__":
    main()
