"""What the PyTorch targets of tests/gpu/pytorch.sh share (train.py, infer.py, server.py, client.py).

- The environment every program sets before it imports torch: NCCL's NVLink multicast off (the
  GPU machines' rule, tests/gpu/README.md), deterministic cuBLAS, torch.compile
  compiling in this process (no pool of compile workers: those would be children of the target,
  and part of its snapshot).
- The command protocol of tests/gpu/target.cu's fifo mode: one command per opening of a named
  fifo, one line answered on stdout per command, so that the process holds no descriptor of the
  fifo between commands and criu has nothing it cannot dump (tests/gpu/targets.sh's `ask`).
- A digest of tensors, bit for bit, computed on the GPU: for each chunk of 16 Mi 32-bit words, the
  sum of each word times a fixed odd multiplier (integer arithmetic, exact modulo 2^64, so the
  order of the sum does not matter), then SHA-256 over the dtype, the shape and the sums. Any one
  changed bit changes its chunk's sum. A tensor in host memory is hashed by its bytes.

`--fake` (the dry run of pytorch.sh, on a machine without torch or a GPU) runs the same protocol
over a stand-in state held in Python objects; nothing in it says anything about CUDA.
"""

import hashlib
import os
import struct
import sys

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def prepare_environment():
    """Before torch is imported: multicast off, deterministic cuBLAS, compile in this process."""
    os.environ.update(NO_MULTICAST)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def load_torch(fake):
    """torch, checked to see a GPU; None with --fake."""
    prepare_environment()
    if fake:
        return None
    import torch  # noqa: E402 (after the environment is set)

    if not torch.cuda.is_available():
        fail("torch %s sees no CUDA device" % torch.__version__)
    return torch


def deterministic(torch, seed):
    """Deterministic algorithms on, TF32 off, every generator seeded."""
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def say(*parts):
    """One line on stdout, flushed at once (the script reads it from a file)."""
    print(" ".join(str(p) for p in parts), flush=True)


def fail(message):
    say("error", message)
    sys.exit(2)


def rss_bytes(pid="self"):
    """Resident host memory of a process (VmRSS), in bytes; 0 where it cannot be read."""
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def served_args(p):
    """Adds --fifo, --reference and --fake to the parser `p` of a trained target (train.py, the
    NCCL job's rank.py), parses, and refuses anything but exactly one of --fifo and --reference."""
    p.add_argument("--fifo", help="the named fifo to read commands from")
    p.add_argument("--reference", type=int, metavar="M", help="print the digests of steps 0..M")
    p.add_argument("--fake", action="store_true", help="a stand-in state without torch (dry run)")
    args = p.parse_args()
    if (args.fifo is None) == (args.reference is None):
        p.error("give --fifo PATH or --reference M")
    return args


def commands(fifo):
    """The commands sent through the fifo, one per opening, as tests/gpu/target.cu reads them."""
    while True:
        try:
            with open(fifo, "r") as f:  # blocks until a writer opens it
                line = f.readline()
        except FileNotFoundError:
            return  # the script removed it: end
        line = line.strip()
        if line:  # a writer that wrote nothing: wait for the next
            yield line


def serve(fifo, handlers):
    """Answers each command through `handlers` (word -> function(args) -> line) until "exit"."""
    for line in commands(fifo):
        word, args = line.split()[0], line.split()[1:]
        if word == "exit":
            say("bye")
            return
        handler = handlers.get(word)
        if handler is None:
            say("error unknown command:", line)
            continue
        try:
            say(handler(args))
        except Exception as error:  # one line, so that the script's `ask` is not left waiting
            say("error %s: %s" % (type(error).__name__, str(error).splitlines()[0] if str(error) else ""))


def sha(*parts):
    """SHA-256 of the parts (bytes, or text as UTF-8), as 32 hex digits."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, (bytes, bytearray)) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


class Digester:
    """Digests of tensors, bit for bit; see the module's comment."""

    CHUNK = 1 << 24  # 32-bit words per chunk: 64 MiB of data, 256 MiB of int64 scratch at most

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self._mult = None

    def _multipliers(self):
        if self._mult is None:
            t = self.torch
            i = t.arange(self.CHUNK, dtype=t.int64, device=self.device)
            m = i * (0x9E3779B97F4A7C15 - (1 << 64)) + 0x632BE59BD9B4E019  # wraps, as intended
            m = m ^ (m >> 29)
            self._mult = m | 1  # odd: a changed bit always changes the sum
        return self._mult

    def tensor(self, t):
        """The digest of one tensor (32 hex digits)."""
        torch = self.torch
        head = "%s|%s" % (t.dtype, tuple(t.shape))
        t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        flat = t.reshape(-1).view(torch.uint8)
        if t.device.type != "cuda":
            return sha(head, bytes(flat.tolist()))  # small: RNG states, step counts
        n = flat.numel()
        whole = n - n % 4
        sums = []
        if whole:
            words = flat[:whole].view(torch.int32)
            mult = self._multipliers()
            for start in range(0, words.numel(), self.CHUNK):
                part = words[start : start + self.CHUNK]
                sums.append((part.to(torch.int64) * mult[: part.numel()]).sum())
        values = torch.stack(sums).tolist() if sums else []
        tail = bytes(flat[whole:].tolist()) if whole < n else b""
        return sha(head, struct.pack("<%dq" % len(values), *values), tail)

    def named(self, items):
        """The digest of named tensors, in the order given."""
        return sha(*("%s=%s" % (name, self.tensor(t)) for name, t in items))


def mem_line(torch, fake_bytes=0):
    """What the caching allocator holds and the host memory: the answer of "mem"."""
    if torch is None:
        return "allocated=%d reserved=%d peak_reserved=%d rss=%d" % (
            fake_bytes,
            fake_bytes,
            fake_bytes,
            rss_bytes(),
        )
    return "allocated=%d reserved=%d peak_reserved=%d rss=%d" % (
        torch.cuda.memory_allocated(),
        torch.cuda.memory_reserved(),
        torch.cuda.max_memory_reserved(),
        rss_bytes(),
    )


def layout(mib, width=0):
    """(width, layers) of a stack of square Linear layers holding about `mib` MiB of float32."""
    width = width or (4096 if mib >= 256 else 1024)
    return width, max(1, mib * (1 << 20) // (width * width * 4))


def make_mlp(torch, mib, width, device, dropout):
    """A residual stack of Linear layers (y = x + 0.1 * dropout(gelu(linear(x)))), random weights
    drawn from the seeded CUDA generator: about `mib` MiB of parameters."""
    width, layers = layout(mib, width)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.Linear(width, width, device=device) for _ in range(layers)
            )
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x):
            for lin in self.layers:
                x = x + 0.1 * self.drop(torch.nn.functional.gelu(lin(x)))
            return x

    return Mlp(), width, layers


def param_bytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())
