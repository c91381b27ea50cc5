"""The sampler's order as pure functions: shard sizes, a rank's positions, and its indices in
blocks.

Rank ``r`` of ``R`` takes positions ``r, r + R, r + 2R, ...`` of the shuffled (and padded
or cut) index list, exactly as :class:`torch.utils.data.DistributedSampler` does. The
shuffled list is a keyed permutation of ``range(N)`` (``"feistel"``, O(1) to start
anywhere) or ``torch.randperm`` (``"torch"``, torch's own order). Nothing here keeps state.

Example:
    >>> shard_sizes(7, 2, drop_last=False)
    (4, 8)
    >>> [int(i) for b in index_blocks("feistel", 7, 4, 2, 1, None, 0) for i in b]
    [1, 3, 5, 0]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np
import torch

from seeder._seeding.core import Seeder
from seeder._seeding.derive import shuffle_seed
from seeder.data._permutation import keyed_permutation

__all__ = [
    "MODES",
    "FIRST_BLOCK",
    "BLOCK",
    "M64",
    "shard_sizes",
    "positions",
    "index_blocks",
    "shuffle_key",
]

#: Permutation modes: the O(1) keyed permutation and torch's ``randperm`` order.
MODES = ("feistel", "torch")
#: Size of the first block in ``"feistel"`` mode: small, so that the first index comes fast.
FIRST_BLOCK = 1 << 10
#: Largest block computed at once (a few MiB of temporaries).
BLOCK = 1 << 16
#: Largest shuffle key (keys are 64-bit words).
M64 = (1 << 64) - 1


def shard_sizes(n: int, replicas: int, drop_last: bool) -> tuple[int, int]:
    """``(num_samples, total_size)`` of each rank's shard, exactly as torch's DistributedSampler
    computes them.

    >>> shard_sizes(7, 2, drop_last=True)
    (3, 6)
    >>> # a float division would round up to 2**63
    >>> shard_sizes(2**63 - 1, 1, drop_last=False)[0] == 2**63 - 1
    True
    """
    if drop_last and n % replicas != 0:
        num_samples = -(
            -(n - replicas) // replicas
        )  # torch's math.ceil((n - R) / R), in integers: exact past 2**53
    else:
        num_samples = -(-n // replicas)
    return num_samples, num_samples * replicas


def positions(n: int, replicas: int, rank: int, start: int, stop: int) -> np.ndarray:
    """Global positions (uint64) of ``rank``'s samples ``start:stop``, wrapped into ``range(n)``
    (torch's padding).

    >>> positions(5, 2, 1, 0, 3).tolist()
    [1, 3, 0]
    """
    pos = np.arange(start, stop, dtype=np.uint64)
    pos *= np.uint64(replicas)
    pos += np.uint64(rank)
    if stop > start and (stop - 1) * replicas + rank >= n:
        np.remainder(pos, np.uint64(n), out=pos)
    return pos


def index_blocks(
    mode: str, n: int, num_samples: int, replicas: int, rank: int, key: Optional[int], start: int
) -> Iterator[np.ndarray]:
    """``rank``'s dataset indices (int64 arrays) from its sample ``start`` on; ``key=None``:
    sequential order.

    ``mode`` is one of :data:`MODES`; ``num_samples`` the shard size (:func:`shard_sizes`);
    ``key`` the shuffle key (``"torch"``: torch's generator seed).

    >>> [b.tolist() for b in index_blocks("torch", 4, 4, 1, 0, None, 1)]
    [[1, 2, 3]]
    """
    if mode == "torch":
        return _torch_blocks(n, num_samples, replicas, rank, key, start)
    return _feistel_blocks(n, num_samples, replicas, rank, key, start)


def _feistel_blocks(
    n: int, num_samples: int, replicas: int, rank: int, key: Optional[int], start: int
) -> Iterator[np.ndarray]:
    perm = keyed_permutation(n, key) if key is not None else None
    size, j = FIRST_BLOCK, start
    while j < num_samples:
        stop = min(num_samples, j + size)
        pos = positions(n, replicas, rank, j, stop)
        yield perm.apply_unchecked(pos) if perm is not None else pos.view(np.int64)
        j, size = stop, min(size * 4, BLOCK)


def _torch_blocks(
    n: int, num_samples: int, replicas: int, rank: int, key: Optional[int], start: int
) -> Iterator[np.ndarray]:
    if start >= num_samples:
        return
    perm = None
    if key is not None:
        g = torch.Generator()
        g.manual_seed(key)
        perm = torch.randperm(n, generator=g).numpy()
    for j in range(start, num_samples, BLOCK):
        pos = positions(n, replicas, rank, j, min(num_samples, j + BLOCK))
        yield perm[pos.view(np.int64)] if perm is not None else pos.view(np.int64)


def shuffle_key(
    seeder: Seeder, seed: Optional[int], mode: str, task: int, epoch: int, stream: int
) -> int:
    """The shuffle key of ``epoch``: derived from ``seed`` if given (``"torch"``: torch's ``seed +
    epoch``), else from ``seeder``.

    >>> shuffle_key(Seeder(), 5, "torch", 1, 2, 0)
    7
    """
    if seed is not None:
        if mode == "torch":
            return (seed + epoch) & M64
        return shuffle_seed(seed, task, epoch, stream)
    if not seeder.initialized:
        raise RuntimeError(
            "DistributedSampler takes its shuffle order from the seeder: call "
            "seeder.init(master_seed=...) before iterating, or pass seed= to the sampler"
        )
    return shuffle_seed(seeder.get_master_seed(), task, epoch, stream)
