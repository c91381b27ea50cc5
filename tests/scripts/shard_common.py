"""Sharded streams the shard tests share: a plain one through the protocol (``num_shards``,
``iter_shard``) and a ``datasets`` one with an augmenting ``.map``; every example draws from
random, NumPy's global RNG and torch.

``Shards`` rows are ``[shard, position, torch draw, random draw, numpy draw]``: an example's
identity and what it drew.
"""

import random

import numpy as np
import torch

SIZES = [5, 7, 3, 9, 4, 6, 2, 8]
#: A mix's weights before and after a resume.
MIX_OLD, MIX_NEW = {"x": 3.0, "y": 1.0}, {"x": 1.0, "y": 3.0}
#: A mix's lanes (the fewest shards of its sources) and positions per epoch.
MIX_LANES, MIX_LENGTH = 4, 40


class Shards(torch.utils.data.IterableDataset):
    def __init__(self, sizes=SIZES):
        self.sizes = list(sizes)

    @property
    def num_shards(self):
        return len(self.sizes)

    def iter_shard(self, shard, start):
        for pos in range(start, self.sizes[shard]):
            yield torch.tensor(
                [
                    shard,
                    pos,
                    int(torch.randint(0, 10**6, ())),
                    int(random.random() * 1e6),
                    int(np.random.randint(0, 10**6)),
                ]
            )

    def __iter__(self):
        for shard in range(self.num_shards):
            yield from self.iter_shard(shard, 0)


def augment(example):
    return {
        "x": example["x"],
        "noise": float(np.random.random()),
        "jitter": float(torch.rand(())),
        "r": random.random(),
    }


def hf_sharded(n=40, shards=8, shuffle=False):
    """A ``datasets`` stream of ``shards`` shards, an augmenting ``.map`` after the shuffle."""
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"x": list(range(n))}).to_iterable_dataset(num_shards=shards)
    if shuffle:
        ds = ds.shuffle(seed=3, buffer_size=4)
    return ds.map(augment).with_format("torch")


def rows(batches):
    """Every example of ``batches`` (plain lists or dicts of lists) as a sorted list of tuples."""
    out = []
    for b in batches:
        if isinstance(b, dict):
            keys = sorted(b)
            out.extend(zip(*[b[k] for k in keys]))
        else:
            out.extend(tuple(r) for r in b)
    return sorted(out)


def flat(batch):
    if isinstance(batch, dict):
        return {k: v.tolist() for k, v in sorted(batch.items())}
    return batch.tolist()


def mixed(s, weights):
    """A ``seeder.data.Mix`` of two plain streams over ``MIX_LANES`` lanes (a lane of row ``r``:
    ``r[0] % MIX_LANES``), built for the seeder ``s``."""
    from seeder.data import Mix

    sources = {"x": Shards(), "y": Shards([3, 4, 2, 5])}
    return Mix(sources, weights=weights, length=MIX_LENGTH, seeder=s)
