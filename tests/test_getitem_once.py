"""Every loader calls the dataset once per sample per epoch: map-style and elastic with 0 and 2
workers, streams too.

The datasets count their calls in a file (workers are other processes) and their items start drawing
from Python's ``random``, NumPy's global RNG and torch's generator at different samples: a fetching
process sees its first draw from each in the middle of an epoch.
"""

from __future__ import annotations

import os
import random
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import seeder
from seeder import SeederWarning
from seeder._seeding.derive import Domain, derive_seed

N = 24


def draws(i: int) -> list:
    """What item ``i`` draws: nothing for the first 5, then Python's, NumPy's or torch's RNG by ``i
    % 3``."""
    if i < 5:
        return [-1.0]
    return [(random.random(), float(np.random.rand()), float(torch.rand(())))[i % 3]]


def counted(path: Path, what: int) -> None:
    """Append ``what`` to ``path`` in one write (O_APPEND: lines from several processes do not
    mix)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{what}\n".encode())
    finally:
        os.close(fd)


def calls(path: Path) -> Counter:
    return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


class Counting(torch.utils.data.Dataset):
    def __init__(self, path: Path):
        self.path = path

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        counted(self.path, i)
        return torch.tensor([float(i), *draws(i)], dtype=torch.float64)


class CountingStream(torch.utils.data.IterableDataset):
    """Yields this worker's share of ``range(N)``, counting each item it makes."""

    def __init__(self, path: Path):
        self.path = path

    def __iter__(self):
        share = seeder.data.stream_share()
        for i in range(share.index, N, share.count):
            counted(self.path, i)
            yield torch.tensor([float(i), *draws(i)], dtype=torch.float64)


@pytest.fixture
def s():
    s = seeder.Seeder()
    s.init(5)
    s.reseed(1, 0)
    return s


def rows(loader) -> dict:
    return {int(row[0]): row for batch in loader for row in batch}


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_loader_calls_getitem_once_per_sample(s, tmp_path, workers):
    path = tmp_path / "calls"
    loader = seeder.DataLoader(
        Counting(path), batch_size=4, shuffle=True, num_workers=workers, seeder=s
    )
    got = rows(loader)
    assert calls(path) == Counter(range(N)) and sorted(got) == list(range(N))
    s.reseed(1, 1)
    rows(loader)
    assert calls(path) == Counter({i: 2 for i in range(N)})  # once more in the next epoch


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("rngs", [("python", "numpy", "torch"), ("torch",)], ids=["all", "torch"])
def test_elastic_loader_calls_getitem_once_per_sample_and_stays_exact(s, tmp_path, workers, rngs):
    """Each sample once, with 0 or 2 workers, on 1 or 2 ranks; with every RNG seeded (the default)
    each item draws from the RNG seeded with its position's seed, however late its process first saw
    that RNG drawn from. With sample_rngs=("torch",) the first draw from Python's and NumPy's RNGs
    warns, and nothing is fetched twice."""
    path = tmp_path / "calls"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts = [
            seeder.ElasticDataLoader(
                Counting(path),
                batch_size=2,
                shuffle=True,
                num_workers=workers,
                num_replicas=2,
                rank=r,
                seeder=s,
                sample_rngs=rngs,
            )
            for r in (0, 1)
        ]
        got = {}
        for part in parts:
            got.update(rows(part))
    assert calls(path) == Counter(range(N)) and sorted(got) == list(range(N))
    if rngs != ("torch",):
        assert not [w for w in caught if issubclass(w.category, SeederWarning)]
        order = list(seeder.DistributedSampler(range(N), num_replicas=1, rank=0, seeder=s))
        for p, i in enumerate(order):
            seeded = derive_seed(5, Domain.ELASTIC, 1, 0, 0, p)
            (
                random.seed(seeded),
                np.random.seed(seeder._seeding.derive.numpy_seed(seeded)),
                torch.manual_seed(seeded),
            )
            assert got[i][1:].tolist() == draws(i), (p, i)
    elif workers == 0:  # a worker's warning goes to its own stderr
        assert any(
            issubclass(w.category, SeederWarning) and "sample_rngs" in str(w.message)
            for w in caught
        )


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_loader_makes_each_item_once(s, tmp_path, workers):
    path = tmp_path / "calls"
    loader = seeder.IterableDataLoader(
        CountingStream(path), batch_size=3, num_workers=workers, seeder=s
    )
    got = rows(loader)
    assert calls(path) == Counter(range(N)) and sorted(got) == list(range(N))
