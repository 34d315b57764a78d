#!/usr/bin/env python3
"""A PyTorch inference process for tests/gpu/pytorch.sh: a model of N MiB of random weights on the
GPU (eval mode, no dropout), its forward pass captured once in a CUDA graph (torch.cuda.CUDAGraph)
and replayed, and a small post-processing function compiled with torch.compile (Inductor and
Triton: GELU, a mean, a sigmoid and a softmax). Where torch.compile is unavailable (no Triton, no
C compiler, an error), the function runs eagerly and the process says so: "note compile:
unavailable (...): eager instead", and compile=eager in its ready line.

  python3 infer.py --mib N --fifo PATH [--batch B] [--seed S] [--compile-mode default|reduce-overhead|none]

It prints "note compile: ..." and then "ready <pid> graph=<hex> compiled=<hex> eager=<hex>
weights=<hex> graph_eq_eager=yes|no compile=ok|eager replays=1 mib=N layers=L width=W torch=<v>
gpu=<name> cache=<dir>": the digests (tests/gpu/pytorch/common.py) of the graph's output, of the
compiled function's output on a fixed input, of an eager forward pass, and of the weights. Then it
answers, one line each, the commands sent through the fifo (one per opening):

  infer      replays the graph once and runs the compiled function on its fixed input: "infer
             graph=<hex> compiled=<hex> weights=<hex> replays=<n>" (the same input each time: the
             same digests, unless something changed)
  replay K   K replays, then as infer
  mem        the caching allocator's figures and the host memory (as train.py)
  exit       "bye"

Inductor's and Triton's caches are where TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR say (the
script sets both); the process maps the compiled launchers from there (/proc/<pid>/maps), so those
files must still be there when criu restores it. Compilation runs in this process
(TORCHINDUCTOR_COMPILE_THREADS=1): a pool of compile workers would be children of the target.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=512, help="MiB of weights (float32)")
    p.add_argument("--width", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=4321)
    p.add_argument("--compile-mode", choices=["default", "reduce-overhead", "none"], default="default")
    p.add_argument("--fifo", required=True)
    p.add_argument("--fake", action="store_true", help="a stand-in without torch (dry run)")
    return p.parse_args()


class Inference:
    def __init__(self, torch, args):
        self.torch = torch
        common.deterministic(torch, args.seed)
        dev = torch.device("cuda", 0)
        self.net, self.width, self.layers = common.make_mlp(torch, args.mib, args.width, dev, 0.0)
        self.net.eval()
        self.d = common.Digester(torch, dev)
        g = torch.Generator(device=dev).manual_seed(args.seed)
        self.static_in = torch.randn(args.batch, self.width, generator=g, device=dev)
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up before a capture, as PyTorch's docs do it
                for _ in range(3):
                    self.net(self.static_in)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = self.net(self.static_in)
            self.graph.replay()
            eager = self.net(self.static_in)
            torch.cuda.synchronize()
        self.replays = 1
        self.eager = self.d.tensor(eager)
        self.probe = self.static_out.clone()  # the compiled function's fixed input
        self.compiled, self.compile_ok, self.compile_note = self._compile(args.compile_mode)

    def _compile(self, mode):
        torch = self.torch

        def post(x):
            return torch.nn.functional.gelu(x) * torch.sigmoid(x.mean(-1, keepdim=True)) + torch.softmax(x, -1)

        if mode == "none":
            return post, False, "off (--compile-mode none): eager"
        t0 = time.monotonic()
        try:
            fn = torch.compile(post, fullgraph=True, dynamic=False, mode=mode)
            with torch.no_grad():
                fn(self.probe)  # compiles here
            torch.cuda.synchronize()
            return fn, True, "ok (torch.compile mode %s, compiled in %.1f s)" % (mode, time.monotonic() - t0)
        except Exception as error:  # no Triton, no compiler, ...: say so, go on eagerly
            first = str(error).splitlines()[0] if str(error) else ""
            return post, False, "unavailable (%s: %s): eager instead" % (type(error).__name__, first[:200])

    def outputs(self, replays):
        torch = self.torch
        with torch.no_grad():
            for _ in range(replays):
                self.graph.replay()
                self.replays += 1
            compiled = self.compiled(self.probe)
            torch.cuda.synchronize()
        return self.d.tensor(self.static_out), self.d.tensor(compiled)

    def weights(self):
        return self.d.named(self.net.named_parameters())

    def mem(self):
        return common.mem_line(self.torch)

    def about(self, mib):
        torch = self.torch
        return "mib=%d layers=%d width=%d torch=%s gpu=%s" % (
            mib,
            self.layers,
            self.width,
            torch.__version__,
            torch.cuda.get_device_name(0).replace(" ", "_"),
        )


class FakeInference:
    """The dry run's stand-in: fixed digests."""

    def __init__(self, args):
        self.seed, self.replays = args.seed, 1
        self.eager = common.sha("out", self.seed)
        self.compile_ok, self.compile_note = False, "off (--fake): eager"

    def outputs(self, replays):
        self.replays += replays
        return common.sha("out", self.seed), common.sha("post", self.seed)

    def weights(self):
        return common.sha("weights", self.seed)

    def mem(self):
        return common.mem_line(None, 1 << 20)

    def about(self, mib):
        return "mib=%d layers=1 width=0 torch=none gpu=none" % mib


def main():
    args = parse()
    torch = common.load_torch(args.fake)
    m = FakeInference(args) if args.fake else Inference(torch, args)
    graph, compiled = m.outputs(0)
    common.say("note compile:", m.compile_note)
    common.say(
        "ready",
        os.getpid(),
        "graph=%s compiled=%s eager=%s weights=%s graph_eq_eager=%s compile=%s replays=%d %s cache=%s"
        % (
            graph,
            compiled,
            m.eager,
            m.weights(),
            "yes" if graph == m.eager else "no",
            "ok" if m.compile_ok else "eager",
            m.replays,
            m.about(args.mib),
            os.environ.get("TORCHINDUCTOR_CACHE_DIR", "(default)"),
        ),
    )

    def infer(replays):
        g, c = m.outputs(replays)
        return "infer graph=%s compiled=%s weights=%s replays=%d" % (g, c, m.weights(), m.replays)

    common.serve(
        args.fifo,
        {
            "infer": lambda _: infer(1),
            "replay": lambda a: infer(int(a[0]) if a else 1),
            "mem": lambda _: "mem " + m.mem(),
        },
    )


if __name__ == "__main__":
    main()
