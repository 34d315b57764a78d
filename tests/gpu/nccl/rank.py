#!/usr/bin/env python3
"""One rank of a data-parallel training job on torch.distributed with NCCL, one rank per GPU, for
tests/gpu/nccl_job.sh (issue 30, part B). Every rank holds the same model (about N MiB of float32
weights, the same seed), trains on batches of its own, averages the gradients with all_reduce, and
steps SGD with momentum: after each step every rank holds the same weights, and two runs with the
same arguments make the same states at the same steps, bit for bit, so a job that was never
checkpointed (--reference) says what a checkpointed one must reach.

Started by tests/gpu/nccl/launch.sh (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in
its environment, NCCL's own settings too):

  python3 rank.py --mib N --fifo PATH [--seed S] [--batch B]
  python3 rank.py --mib N --reference M      prints "ref <step> <digest>" for steps 0..M, exits

With --fifo it prints "ready <pid> rank=<r> world=<w> step=0 all=<digest> mib=N params=<bytes>
device=<i> torch=<version> nccl=<version>", then answers, one line each, the commands sent through
the fifo (one per opening, as tests/gpu/target.cu reads them). A command that runs a collective
must reach every rank (the script sends it to each at once):

  digest      "digest step=<n> all=<hex> weights=<hex> optim=<hex> rng=<hex>" (no collective)
  train K     K steps (collectives), then "trained loss=<float> step=<n> all=<hex> ..."
  allreduce   an all_reduce of 1 Mi floats, each rank's r + 1: "allreduce ok sum=<s>" where every
              element is 1 + ... + world, else "allreduce bad ..."
  mem         "mem allocated=<B> reserved=<B> peak_reserved=<B> rss=<B>"
  exit        the process group destroyed, "bye", and the process ends

NCCL's NVLink multicast stays off (common.prepare_environment), as the GPU machines require.
--fake (the dry run of nccl_job.sh, without torch or a GPU) runs the same protocol over a stand-in
state: no collective, nothing about CUDA or NCCL.
"""

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024, help="MiB of weights (float32) in each rank")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=16)
    return common.served_args(p)


class Rank:
    """This rank's model, optimizer and steps."""

    def __init__(self, torch, dist, args):
        self.torch, self.dist, self.args = torch, dist, args
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ.get("LOCAL_RANK", self.rank))
        torch.cuda.set_device(self.local)
        self.dev = torch.device("cuda", self.local)
        common.deterministic(torch, args.seed)  # the same seed in every rank: the same weights
        # device_id: the communicator is made now, not at the first collective.
        dist.init_process_group("nccl", device_id=self.dev)
        self.net, self.width, self.layers = common.make_mlp(torch, args.mib, 0, self.dev, 0.1)
        self.net.train()
        self.params = list(self.net.parameters())
        self.opt = torch.optim.SGD(self.params, lr=1e-3, momentum=0.9)
        self.step, self.loss = 0, float("nan")
        self.digester = common.Digester(torch, self.dev)

    def train_step(self):
        torch, dist, a = self.torch, self.dist, self.args
        g = torch.Generator().manual_seed(a.seed * 1000003 + self.step * 7919 + self.rank)
        x = torch.randn(a.batch, self.width, generator=g).to(self.dev)
        y = torch.randn(a.batch, self.width, generator=g).to(self.dev)
        loss = torch.nn.functional.mse_loss(self.net(x), y)  # dropout: the CUDA generator
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in self.params:  # the mean of every rank's gradient
            dist.all_reduce(p.grad)
            p.grad.div_(self.world)
        self.opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        self.loss = mean.item() / self.world  # waits for the step
        self.step += 1

    def digest(self):
        torch, d = self.torch, self.digester
        weights = d.named(self.net.named_parameters())
        optim = common.sha(*(
            "%d.%s=%s" % (i, k, d.tensor(v) if torch.is_tensor(v) else repr(v))
            for i, p in enumerate(self.params)
            for k, v in sorted(self.opt.state.get(p, {}).items())
        ))
        rng = common.sha(
            bytes(torch.get_rng_state().tolist()),
            bytes(torch.cuda.get_rng_state().tolist()),
            repr(random.getstate()),
        )
        whole = common.sha(self.step, weights, optim, rng)
        return "step=%d all=%s weights=%s optim=%s rng=%s" % (self.step, whole, weights, optim, rng)

    def allreduce(self):
        torch = self.torch
        t = torch.full((1 << 20,), float(self.rank + 1), device=self.dev)
        self.dist.all_reduce(t)
        want = self.world * (self.world + 1) / 2
        wrong = int((t != want).sum().item())
        if wrong == 0:
            return "allreduce ok sum=%g" % want
        return "allreduce bad wrong=%d first=%g want=%g" % (wrong, t[0].item(), want)

    def train(self, k):
        for _ in range(k):
            self.train_step()
        if not math.isfinite(self.loss):
            raise RuntimeError("the loss is %r" % self.loss)
        return "trained loss=%.9g %s" % (self.loss, self.digest())


class FakeRank:
    """The dry run's stand-in: a step counter and its digest, the same in every rank."""

    def __init__(self, args):
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local, self.step, self.params = int(os.environ.get("LOCAL_RANK", self.rank)), 0, []

    def train_step(self):
        self.step += 1

    def digest(self):
        d = common.sha("fake", self.step)
        return "step=%d all=%s weights=%s optim=%s rng=%s" % (self.step, d, d, d, d)

    def allreduce(self):
        return "allreduce ok sum=%g (fake: no collective)" % (self.world * (self.world + 1) / 2)

    def train(self, k):
        for _ in range(k):
            self.train_step()
        return "trained loss=0 %s" % self.digest()


class FakeDist:
    def destroy_process_group(self):
        pass


def main():
    args = parse()
    torch = common.load_torch(args.fake)
    if args.fake:
        r, dist = FakeRank(args), FakeDist()
    else:
        import torch.distributed as dist  # noqa: E402

        r = Rank(torch, dist, args)
    if args.reference is not None:
        for step in range(args.reference + 1):
            if step:
                r.train_step()
            common.say("ref %d %s" % (r.step, r.digest().split(" all=")[1].split()[0]))
        dist.destroy_process_group()
        return
    nccl = "fake" if args.fake else ".".join(str(v) for v in torch.cuda.nccl.version())
    version = "fake" if args.fake else torch.__version__
    common.say(
        "ready %d rank=%d world=%d %s mib=%d params=%d device=%d torch=%s nccl=%s"
        % (
            os.getpid(), r.rank, r.world, r.digest(), args.mib,
            sum(p.numel() * p.element_size() for p in r.params), r.local, version, nccl,
        )
    )
    common.serve(args.fifo, {
        "digest": lambda a: "digest " + r.digest(),
        "train": lambda a: r.train(int(a[0]) if a else 1),
        "allreduce": lambda a: r.allreduce(),
        "mem": lambda a: "mem " + common.mem_line(torch, 0),
    })
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
