"""Iterable datasets the stream tests share: every item draws from random, NumPy's global RNG and
torch.

``Noisy`` has no state (a resume replays); ``Counted`` saves its position (a resume loads it).
Both read their share with ``seeder.data.stream_share()``. ``hf_stream`` is a ``datasets`` stream
with a ``.map`` that draws random numbers, optionally behind a shuffle buffer.
"""

import random

import numpy as np
import torch

import seeder


def row(i):
    return torch.tensor(
        [float(i), random.random(), float(np.random.random()), float(torch.rand(()))],
        dtype=torch.float64,
    )


class Noisy(torch.utils.data.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        share = seeder.data.stream_share()
        for i in range(share.index, self.n, share.count):
            yield row(i)


class Counted(Noisy):
    """Noisy with ``state_dict``: the items it has produced in this epoch."""

    def __init__(self, n):
        super().__init__(n)
        self.pos, self.start = 0, 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]

    def __iter__(self):
        share = seeder.data.stream_share()
        self.pos, self.start = self.start, 0
        while share.index + self.pos * share.count < self.n:
            i = share.index + self.pos * share.count
            self.pos += 1
            yield row(i)


def augment(example):
    return {
        "x": example["x"],
        "noise": float(np.random.random()),
        "jitter": float(torch.rand(())),
        "r": random.random(),
    }


def hf_stream(n, shuffle, shards=4):
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"x": list(range(n))}).to_iterable_dataset(num_shards=shards)
    if shuffle:
        ds = ds.shuffle(seed=3, buffer_size=8)
    return ds.map(augment).with_format("torch")


def flat(batch):
    """A batch as plain numbers (a tensor, or a dict of tensors from datasets), for exact
    comparison."""
    if isinstance(batch, dict):
        return {k: v.tolist() for k, v in sorted(batch.items())}
    return batch.tolist()
