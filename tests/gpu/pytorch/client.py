#!/usr/bin/env python3
"""The client of tests/gpu/pytorch/server.py (no torch, no CUDA).

  python3 client.py ask --port P [--seed S] [--timeout T]
        connects, sends "infer S", prints the answer's line, exits (0 where it got one)
  python3 client.py hold --port P --fifo PATH [--seed S]
        connects and keeps the connection: prints "connected local=<port> peer=<port>", asks once
        ("reply <answer>"), then for each command sent through the fifo (one per opening, as
        tests/gpu/target.cu): "ask S" sends "infer S" on the same connection and prints
        "reply <answer>"; "exit" closes it ("bye"). A connection that broke prints
        "error <what>" for the ask that found it so.

A held connection is an established TCP connection between two processes of the machine: criu
dumps it only with --tcp-established (both ends, in one snapshot), and restores it with the same.
"""

import argparse
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["ask", "hold"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--fifo")
    args = p.parse_args()
    if args.mode == "hold" and not args.fifo:
        p.error("hold needs --fifo PATH")
    return args


def request(sock, buf, seed):
    """Sends "infer SEED", returns the answer's line (buf keeps what came after it)."""
    sock.sendall(b"infer %d\n" % seed)
    while b"\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode(errors="replace")


def main():
    common.prepare_environment()
    args = parse()
    try:
        sock = socket.create_connection((args.host, args.port), timeout=args.timeout)
    except OSError as error:
        common.say("error cannot connect to %s:%d: %s" % (args.host, args.port, error))
        sys.exit(1)
    buf = bytearray()
    if args.mode == "ask":
        try:
            common.say(request(sock, buf, args.seed))
        except OSError as error:
            common.say("error %s" % error)
            sys.exit(1)
        sock.close()
        return
    # hold: no timeout while it waits (criu may keep it stopped for a while)
    sock.settimeout(None)
    common.say("connected local=%d peer=%d pid=%d" % (sock.getsockname()[1], sock.getpeername()[1], os.getpid()))
    common.say("reply " + request(sock, buf, args.seed))
    for line in common.commands(args.fifo):
        words = line.split()
        if words[:1] == ["exit"]:
            sock.close()
            common.say("bye")
            return
        if words[:1] == ["ask"]:
            try:
                sock.settimeout(args.timeout)
                common.say("reply " + request(sock, buf, int(words[1]) if len(words) > 1 else args.seed))
            except (OSError, ValueError) as error:
                common.say("error %s: %s" % (type(error).__name__, error))
            finally:
                sock.settimeout(None)
            continue
        common.say("error unknown command: %s" % line)


if __name__ == "__main__":
    main()
