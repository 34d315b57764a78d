#!/usr/bin/env python3
"""A PyTorch training process for tests/gpu/pytorch.sh: N MiB of random weights (a residual stack
of Linear layers, with dropout), an optimizer with state (SGD with momentum, or Adam), every RNG in
use (Python's, torch's CPU and CUDA generators, the data loader's shuffle), a data loader's
position, deterministic algorithms on. It reports a digest of its whole state on request; two runs
with the same arguments make the same states at the same steps, bit for bit, so a run that was
never checkpointed (--reference) says what a checkpointed one must reach.

  python3 train.py --mib N --fifo PATH [--optim sgd|adam] [--seed S] [--batch B] [--no-pin]
  python3 train.py --mib N --reference M      prints "ref <step> <digest>" for steps 0..M, exits

With --fifo it prints "ready <pid> step=0 all=<digest> weights=... optim=... rng=... loader=...
mib=N params=<bytes> layers=L width=W optimizer=<name> torch=<version> gpu=<name>" (--fake: a stand-in
state without torch, for the dry run), then answers, one line each, the commands sent through the
fifo (one per opening, as tests/gpu/target.cu):

  digest       "digest step=<n> all=<hex> weights=<hex> optim=<hex> rng=<hex> loader=<epoch>.<pos>:<hex>"
  train K      K training steps, then "trained loss=<float> step=<n> all=<hex> ..." (as digest)
  mem          "mem allocated=<B> reserved=<B> peak_reserved=<B> rss=<B>": the caching allocator's
               figures (torch.cuda.memory_allocated/_reserved) and the host memory (VmRSS)
  scratch MIB  allocates MIB MiB on the GPU, writes it and frees it: the caching allocator keeps it
               reserved ("scratch" + the mem figures)
  empty_cache  torch.cuda.empty_cache(): what the allocator held but did not use goes back
  exit         "bye", and the process ends

The data loader has no worker processes (num_workers=0: workers would be children of the target,
and part of its snapshot); with pinned memory (pin_memory=True) unless --no-pin.
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024, help="MiB of weights (float32)")
    p.add_argument("--width", type=int, default=0, help="the layers' width (default by size)")
    p.add_argument("--optim", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--no-pin", action="store_true", help="the data loader without pinned memory")
    return common.served_args(p)


class Trainer:
    """The training state and its steps, on the GPU."""

    def __init__(self, torch, args):
        self.torch = torch
        common.deterministic(torch, args.seed)
        dev = torch.device("cuda", 0)
        self.dev = dev
        self.net, self.width, self.layers = common.make_mlp(torch, args.mib, args.width, dev, 0.1)
        self.net.train()
        self.params = list(self.net.parameters())
        if args.optim == "sgd":
            self.opt = torch.optim.SGD(self.params, lr=1e-3, momentum=0.9)
        else:
            self.opt = torch.optim.Adam(self.params, lr=1e-4)
        self.base_lr = self.opt.param_groups[0]["lr"]
        width, seed = self.width, args.seed

        class Synthetic(torch.utils.data.Dataset):
            """Sample i: a pair of vectors drawn from a generator seeded by i (no file, no worker)."""

            def __len__(self):
                return 4096

            def __getitem__(self, i):
                g = torch.Generator().manual_seed(seed * 1000003 + i)
                return torch.randn(width, generator=g), torch.randn(width, generator=g)

        self.shuffle = torch.Generator().manual_seed(seed + 1)
        self.loader = torch.utils.data.DataLoader(
            Synthetic(),
            batch_size=args.batch,
            shuffle=True,
            generator=self.shuffle,
            num_workers=0,
            pin_memory=not args.no_pin,
            drop_last=True,
        )
        self.it = iter(self.loader)
        self.epoch, self.pos, self.step = 0, 0, 0
        self.loss = float("nan")
        self.digester = common.Digester(torch, dev)

    def train_step(self):
        torch = self.torch
        try:
            x, y = next(self.it)
        except StopIteration:
            self.epoch, self.pos = self.epoch + 1, 0
            self.it = iter(self.loader)
            x, y = next(self.it)
        self.pos += 1
        noise = torch.randn(x.shape)  # torch's CPU generator
        for group in self.opt.param_groups:  # Python's generator
            group["lr"] = self.base_lr * (1.0 + 1e-3 * (random.random() - 0.5))
        # From the loader's pinned batch; the noise, made here, is pageable.
        x = x.to(self.dev, non_blocking=True) + 1e-3 * noise.to(self.dev)
        y = y.to(self.dev, non_blocking=True)
        loss = torch.nn.functional.mse_loss(self.net(x), y)  # dropout: the CUDA generator
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.loss = loss.item()  # waits for the step
        self.step += 1

    def parts(self):
        torch, d = self.torch, self.digester
        weights = d.named(self.net.named_parameters())
        optim = []
        for i, p in enumerate(self.params):
            for key, value in sorted(self.opt.state.get(p, {}).items()):
                optim.append("%d.%s=%s" % (i, key, d.tensor(value) if torch.is_tensor(value) else repr(value)))
        optim.append(repr([{k: v for k, v in g.items() if k != "params"} for g in self.opt.param_groups]))
        rng = common.sha(
            bytes(torch.get_rng_state().tolist()),
            bytes(torch.cuda.get_rng_state().tolist()),
            repr(random.getstate()),
        )
        loader = "%d.%d:%s" % (self.epoch, self.pos, common.sha(bytes(self.shuffle.get_state().tolist())))
        return weights, common.sha(*optim), rng, loader

    def mem(self):
        return common.mem_line(self.torch)

    def scratch(self, mib):
        t = self.torch.empty(mib << 20, dtype=self.torch.uint8, device=self.dev)
        t.fill_(1)
        del t
        self.torch.cuda.synchronize()

    def empty_cache(self):
        self.torch.cuda.empty_cache()

    def about(self, mib):
        torch = self.torch
        return "mib=%d params=%d layers=%d width=%d optimizer=%s torch=%s gpu=%s" % (
            mib,
            common.param_bytes(self.net),
            self.layers,
            self.width,
            type(self.opt).__name__.lower(),
            torch.__version__,
            torch.cuda.get_device_name(0).replace(" ", "_"),
        )


class FakeTrainer:
    """The dry run's stand-in: a state in Python objects, trained by a seeded generator."""

    def __init__(self, args):
        self.rng = random.Random(args.seed)
        self.weights = [self.rng.getrandbits(32) for _ in range(max(1, args.mib) * 16)]
        self.momentum = [0] * len(self.weights)
        self.epoch, self.pos, self.step, self.loss = 0, 0, 0, float("nan")
        self.held = 0

    def train_step(self):
        i = self.rng.randrange(len(self.weights))
        self.momentum[i] = (self.momentum[i] * 9 + self.rng.getrandbits(16)) % (1 << 32)
        self.weights[i] = (self.weights[i] + self.momentum[i]) % (1 << 32)
        self.pos += 1
        self.step += 1
        self.loss = 1.0 / self.step

    def parts(self):
        return (
            common.sha(repr(self.weights)),
            common.sha(repr(self.momentum)),
            common.sha(repr(self.rng.getstate())),
            "%d.%d:%s" % (self.epoch, self.pos, common.sha(self.pos)),
        )

    def mem(self):
        return common.mem_line(None, self.held + 4 * len(self.weights))

    def scratch(self, mib):
        self.held = max(self.held, mib << 20)

    def empty_cache(self):
        self.held = 0

    def about(self, mib):
        return "mib=%d params=%d layers=1 width=0 optimizer=fake torch=none gpu=none" % (mib, 4 * len(self.weights))


def describe(t):
    weights, optim, rng, loader = t.parts()
    every = common.sha(t.step, weights, optim, rng, loader)
    return "step=%d all=%s weights=%s optim=%s rng=%s loader=%s" % (t.step, every, weights, optim, rng, loader)


def main():
    args = parse()
    torch = common.load_torch(args.fake)
    t = FakeTrainer(args) if args.fake else Trainer(torch, args)
    if args.reference is not None:
        for step in range(args.reference + 1):
            if step:
                t.train_step()
            common.say("ref", step, describe(t).split()[1].split("=")[1])
        common.say("ref-done")
        return

    def train(a):
        for _ in range(int(a[0]) if a else 1):
            t.train_step()
        return "trained loss=%r %s" % (t.loss, describe(t))

    def scratch(a):
        t.scratch(int(a[0]))
        return "scratch " + t.mem()

    def empty(_):
        t.empty_cache()
        return "emptied " + t.mem()

    common.say("ready", os.getpid(), describe(t), t.about(args.mib))
    common.serve(
        args.fifo,
        {
            "digest": lambda _: "digest " + describe(t),
            "train": train,
            "mem": lambda _: "mem " + t.mem(),
            "scratch": scratch,
            "empty_cache": empty,
        },
    )


if __name__ == "__main__":
    main()
