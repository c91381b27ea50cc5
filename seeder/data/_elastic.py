"""Elastic data: one global order per epoch, each rank's part of global batch ``s``, per-sample
seeds by position.

The epoch's global order is the keyed permutation of ``range(N)`` that a one-replica
:class:`seeder.DistributedSampler` yields: it does not depend on the world size or the workers.
Global batch ``s`` holds positions ``origin + s*G .. origin + (s+1)*G`` (``G`` the global batch
size, ``origin`` 0 unless a resume changed ``G``); rank ``r`` of ``W`` fetches the ``r``-th of
``W`` contiguous slices of it. Before each sample, the fetching process seeds ``random``, NumPy,
torch CPU and the registered generators from ``derive(Domain.ELASTIC, task, epoch,
rank=position >> 32, stream=position & 0xFFFFFFFF)`` (those of the loader's ``sample_rngs``; the
others are watched: :mod:`.lazyseed`; the seeds of the runs of positions a process fetches are
computed ahead, :mod:`.elastic_seeds`): a sample's randomness is a pure function of (master
seed, epoch, its position in the global order), whatever the topology.

Example:
    >>> rank_slice(0, 8, 0, 2, 1, 10)      # step 0, G=8, world 2, rank 1, N=10: positions 4..8
    (4, 8)
    >>> rank_slice(1, 8, 0, 2, 1, 10)      # the last global batch holds 2 samples: one each
    (9, 10)
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np
import torch.utils.data

from seeder.data._batches import BatchSeedingDataset
from seeder.data._elastic_seeds import PositionSeeds
from seeder.data._lazyseed import sample_seeding
from seeder.data._order import FIRST_BLOCK, shuffle_key
from seeder.data._permutation import keyed_permutation
from seeder.data._sampler import DistributedSampler
from seeder.data._workers import FETCH_SEEDED, SeedSource, generator_words

__all__ = ["num_steps", "rank_slice", "ElasticView", "ElasticBatches"]

_CHUNK = (
    1 << 13
)  # positions per pass of the permutation (NumPy's per-call cost spread over many steps)


def num_steps(n: int, origin: int, global_batch: int, drop_last: bool) -> int:
    """Global steps of an epoch of ``n`` samples from position ``origin`` (a partial last step
    unless ``drop_last``).

    >>> num_steps(10, 0, 4, False), num_steps(10, 0, 4, True), num_steps(10, 3, 4, True)
    (3, 2, 1)
    """
    left = max(n - origin, 0)
    return left // global_batch if drop_last else -(-left // global_batch)


def rank_slice(
    step: int, global_batch: int, origin: int, world: int, rank: int, n: int
) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of ``rank``'s part of global batch ``step``: equal slices, a short
    last batch split evenly.

    >>> rank_slice(2, 4, 0, 2, 0, 10)     # the last global batch (2 samples) split 1 + 1
    (8, 9)
    """
    start = origin + step * global_batch
    size = min(global_batch, n - start)
    return start + rank * size // world, start + (rank + 1) * size // world


class ElasticView(BatchSeedingDataset):
    """The user's dataset fetched by keys ``(master, task, epoch, first position, indices)``; seeds
    before each sample.

    What torch's fetchers (in a worker or the main process) see in place of the user's dataset.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> view = ElasticView([10, 11, 12], SeedSource(s))
    >>> view.__getitems__((3, 1, 0, 5, [2, 0]))
    [12, 10]
    """

    def __init__(
        self, dataset: Any, source: SeedSource, sample_rngs: tuple[str, ...] = FETCH_SEEDED
    ):
        super().__init__(dataset, source)
        self.positions = PositionSeeds()  # this process's seeds, computed ahead
        self.sample_rngs = (
            sample_rngs  # the global RNGs seeded before every sample; the others are watched
        )

    def __getitems__(self, key: tuple[Any, ...]) -> list[Any]:
        master, task, epoch, first, indices = key
        gens = self.source.generators("seeder.ElasticDataLoader")
        width = generator_words(gens)
        seeds = self.positions.words(master, task, epoch, first, len(indices), width)
        return sample_seeding(self.sample_rngs).fetch(
            self.dataset.__getitem__, indices, seeds, gens, width
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "positions": PositionSeeds()}  # a spawned worker computes its own


class ElasticBatches(torch.utils.data.BatchSampler):
    """The elastic loader's batch sampler: this rank's part of each global batch, as fetch keys.

    ``sampler`` is the loader's one-replica :class:`seeder.DistributedSampler` (epoch, shuffle,
    task); ``loader`` (held weakly) gives the start step with ``pending_start()``, the seeder and
    the origin.
    """

    def __init__(
        self,
        sampler: DistributedSampler,
        batch_size: int,
        drop_last: bool,
        loader: Any,
        world: int,
        rank: int,
    ):
        super().__init__(sampler, batch_size, drop_last)
        self.world, self.rank = world, rank
        self.global_batch = batch_size * world
        self._loader = weakref.ref(loader)

    @property
    def loader(self) -> Any:
        """The loader this batch sampler serves."""
        return self._loader()

    def steps(self, origin: int) -> int:
        """Global steps of the epoch from ``origin``."""
        return num_steps(self.sampler.num_samples, origin, self.global_batch, self.drop_last)

    def __len__(self) -> int:
        loader = self.loader
        origin = loader.origin() if loader is not None else 0
        steps, n = self.steps(origin), self.sampler.num_samples
        if steps and not self.drop_last:  # a short last global batch may leave this rank nothing
            lo, hi = rank_slice(steps - 1, self.global_batch, origin, self.world, self.rank, n)
            steps -= lo == hi
        return steps

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        loader = self.loader
        epoch, start, token = loader.pending_start()
        origin = loader.take_origin(epoch, token)
        s = loader.seeder
        if not s.initialized:
            raise RuntimeError(
                "seeder.DataLoader takes its order and seeds from the seeder: call "
                "seeder.init(master_seed=...) before iterating"
            )
        sampler = self.sampler
        n = sampler.num_samples
        key = (
            shuffle_key(s, sampler.seed, "feistel", sampler.task, epoch, sampler.stream)
            if sampler.shuffle
            else None
        )
        return self._keys((s.get_master_seed(), sampler.task, epoch), n, key, origin, start)

    def _keys(
        self, head: tuple[int, int, int], n: int, key: Optional[int], origin: int, start: int
    ) -> Iterator[tuple[Any, ...]]:
        perm = keyed_permutation(n, key) if key is not None else None
        stop = self.steps(origin)
        first, chunk = (
            start,
            max(1, FIRST_BLOCK // self.batch_size),
        )  # steps computed in one pass: few at first
        while first < stop:
            slices = [
                rank_slice(step, self.global_batch, origin, self.world, self.rank, n)
                for step in range(first, min(first + chunk, stop))
            ]
            first, chunk = first + chunk, min(chunk * 4, max(1, _CHUNK // self.batch_size))
            pos = np.concatenate([np.arange(lo, hi, dtype=np.uint64) for lo, hi in slices])
            flat = (
                perm.apply_unchecked(pos) if perm is not None else pos.astype(np.int64)
            ).tolist()
            at = 0
            for lo, hi in slices:
                if lo < hi:
                    yield head + (lo, flat[at : at + hi - lo])
                at += hi - lo
