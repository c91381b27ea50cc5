"""A small training script with one injected cause of irreproducibility, for ``seeder locate``
(tests/test_locate.py).

``--cause`` picks it:

* ``clock-generator``: a module adds noise from a ``torch.Generator`` seeded from the clock;
* ``urandom-sum``: a custom operator (``torch.library``) sums rows in an order drawn from
  ``os.urandom``, standing in for a GPU kernel's atomics: identical inputs, different outputs;
* ``urandom-backward``: a custom gather whose backward accumulates in such an order (as an
  embedding's backward does with atomics on a GPU);
* ``set-vocab``: token ids from a vocabulary built from a ``set`` of strings (the hash seed);
* ``numpy-dataset``: a dataset adds noise from a NumPy ``Generator`` made without a seed;
* ``batch-order``: batches hold the same samples in an order from an unseeded ``random.Random``,
  feeding a batch norm;
* ``index-add`` (CUDA): ``index_add_`` of floats with repeated indices on the GPU;
* ``clock-noise``: the training loop adds noise drawn from a ``torch.Generator`` seeded from the
  clock (a GAN's latent noise), beside batches from seeded workers;
* ``none``: nothing: the runs are identical.

Everything else is seeded by seeder. The run makes ``--steps`` optimizer steps.
"""

import argparse
import os
import random
import time

import numpy as np
import torch

import seeder

parser = argparse.ArgumentParser()
parser.add_argument("--cause", default="none")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
args = parser.parse_args()
cause = args.cause
device = "cuda" if cause == "index-add" else "cpu"

lib = torch.library.Library("locate_toy", "DEF")
lib.define("shuffled_sum(Tensor x) -> Tensor")
lib.define("scatter_rows(Tensor grad, Tensor index, int n) -> Tensor")


def _urandom_order(n):
    return sorted(range(n), key=lambda _: os.urandom(4))


def shuffled_sum(x):
    out = torch.zeros_like(x[0])
    # float addition is not associative: the order shows in the last bits
    for i in _urandom_order(x.shape[0]):
        out = out + x[i]
    return out


def scatter_rows(grad, index, n):
    out = torch.zeros(n, grad.shape[1], dtype=grad.dtype)
    for i in _urandom_order(index.shape[0]):
        out[index[i]] += grad[i]
    return out


lib.impl("shuffled_sum", shuffled_sum, "CPU")
lib.impl("scatter_rows", scatter_rows, "CPU")


class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, index):
        ctx.save_for_backward(index)
        ctx.n = table.shape[0]
        return table[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return torch.ops.locate_toy.scatter_rows(grad, index, ctx.n), None


class Noise(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = torch.Generator().manual_seed(time.time_ns())

    def forward(self, x):
        return x + 0.1 * torch.randn(x.shape, generator=self.gen)


class Pool(torch.nn.Module):
    def forward(self, x):
        return x + torch.ops.locate_toy.shuffled_sum(x) if cause == "urandom-sum" else x


class Embed(torch.nn.Module):
    def __init__(self, n, d):
        super().__init__()
        # small: a last-bit change of its gradient shows after the update
        self.table = torch.nn.Parameter(torch.randn(n, d) * 1e-3)

    def forward(self, ids):
        # each position its own gradient
        scale = torch.linspace(500, 1500, ids.shape[0]).unsqueeze(1)
        return (
            Gather.apply(self.table, ids) if cause == "urandom-backward" else self.table[ids]
        ) * scale


class IndexAdd(torch.nn.Module):
    def forward(self, x):
        # thousands of rows onto 3 (repeated indices): the GPU's atomics add them in varying order
        scale = torch.linspace(0.5, 1.5, 512 * x.shape[0], device=x.device)[:, None]
        rows = x.repeat(512, 1) * scale
        index = torch.arange(rows.shape[0], device=x.device) % 3
        return torch.zeros(3, x.shape[1], device=x.device).index_add_(0, index, rows)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.norm = torch.nn.BatchNorm1d(16)
        self.noise = Noise() if cause == "clock-generator" else torch.nn.Identity()
        self.pool = IndexAdd() if cause == "index-add" else Pool()
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.pool(self.noise(self.norm(self.encoder(x)))))


class NoisyData(torch.utils.data.Dataset):
    def __init__(self, n=64):
        self.x = np.linspace(-1, 1, n * 8, dtype=np.float32).reshape(n, 8)
        self.rng = np.random.default_rng() if cause == "numpy-dataset" else None

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        noise = self.rng.normal(size=8).astype(np.float32) * 0.1 if self.rng is not None else 0
        return torch.from_numpy(self.x[i] + noise)


class ShuffledBatches(torch.utils.data.Sampler):
    """Fixed batches of 8 consecutive samples, each in an order from an unseeded random.Random."""

    def __init__(self, n):
        self.n, self.rng = n, random.Random(os.urandom(8))

    def __iter__(self):
        for start in range(0, self.n, 8):
            batch = list(range(start, start + 8))
            self.rng.shuffle(batch)
            yield batch

    def __len__(self):
        return self.n // 8


def vocab_batches():
    words = "the quick brown fox jumps over the lazy dog again and again".split()
    vocab = {w: i for i, w in enumerate(set(words))}
    embed = torch.nn.Embedding(len(vocab), 8)
    while True:
        ids = torch.tensor([vocab[w] for w in words[:8]])
        yield embed(ids).detach()


seeder.init()
seeder.reseed(0, 0)
model = Net().to(device)
if cause == "urandom-backward":
    model.encoder = torch.nn.Sequential(Embed(64, 8), torch.nn.Linear(8, 16), torch.nn.ReLU())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = NoisyData()
if cause == "batch-order":
    loader = torch.utils.data.DataLoader(data, batch_sampler=ShuffledBatches(len(data)))
else:
    loader = seeder.DataLoader(data, batch_size=8, shuffle=True, num_workers=args.workers)
seeder.reseed(1, 0)
batches = vocab_batches() if cause == "set-vocab" else iter(loader)
latent = torch.Generator().manual_seed(time.time_ns()) if cause == "clock-noise" else None
for _step in range(args.steps):
    x = next(batches)
    if latent is not None:
        x = x + torch.randn(x.shape, generator=latent)
    if cause == "urandom-backward":
        x = (torch.arange(32) * 7) % 5  # token ids, each repeated 6 or 7 times
    x = x.to(device)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", float(loss))
