"""Batches of ``seeder.DataLoader`` as keys, and the dataset view that seeds before fetching each one.

A batch key is ``(master, task, epoch, rank, batch, indices)``. :class:`BatchKeys` (the
loader's batch sampler) yields them in the sampler's order from any start batch in O(1);
:class:`PositionedDataset` seeds the global RNGs and the registered generators from
:func:`batch_seeds` of the key, then fetches the indices, wherever it runs.

Example:
    >>> batch_seeds(1, 1, 0, 0, 0, words=2) != batch_seeds(1, 1, 0, 1, 0, words=2)
    True
"""
from __future__ import annotations

import weakref
from typing import Any, Iterator, List, Tuple

import numpy as np
import torch.utils.data

from ..derive import Domain
from .sampler import DistributedSampler
from .workers import SeedSource, seed_globals

__all__ = ["LOADER_DOMAIN", "batch_seeds", "PositionedDataset", "BatchKeys"]

#: Derivation domain of the per-batch seeds (after ``seeder.derive.Domain.DALI``; reserved for the loader).
LOADER_DOMAIN = int(Domain.LOADER)

def batch_seeds(master: int, task: int, epoch: int, rank: int, batch: int, words: int = 1) -> List[int]:
    """The seed words of batch ``batch`` of ``epoch`` on ``rank``: word 0 seeds the global RNGs, word ``k`` generator ``k``.

    >>> batch_seeds(1, 1, 0, 0, 5) == batch_seeds(1, 1, 0, 0, 5) != batch_seeds(1, 1, 0, 0, 6)
    True
    """
    ss = np.random.SeedSequence(master, spawn_key=(LOADER_DOMAIN, task, epoch, rank, batch))
    return [int(w) for w in ss.generate_state(words, np.uint64)]


class PositionedDataset(torch.utils.data.Dataset):
    """The user's dataset, fetched by batch keys ``(master, task, epoch, rank, batch, indices)``; seeds before each batch.

    What torch's fetchers (in a worker, or the main process) see in place of the user's dataset.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> view = PositionedDataset([10, 11, 12], SeedSource(s))
    >>> view.__getitems__((3, 1, 0, 0, 0, [2, 0]))
    [12, 10]
    """

    def __init__(self, dataset: Any, source: SeedSource):
        self.dataset = dataset
        self.source = source

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, key: Tuple[Any, ...]) -> List[Any]:
        master, task, epoch, rank, batch, indices = key
        _, _, _, gens = self.source.resolve("seeder.DataLoader")
        words = 1 + max((stream for _, _, stream in gens), default=0)
        seeds = batch_seeds(master, task, epoch, rank, batch, words)
        seed_globals(seeds[0])
        for fn, _, stream in gens:
            fn(seeds[stream])
        ds = self.dataset
        getitems = getattr(ds, "__getitems__", None)
        if getitems is not None:
            return getitems(indices)
        return [ds[i] for i in indices]


class BatchKeys(torch.utils.data.BatchSampler):
    """The loader's batch sampler: batch keys of the current epoch from the loader's start position.

    ``loader`` (held weakly) gives the start with ``pending_start()`` and the seeder with ``seeder``.
    """

    def __init__(self, sampler: DistributedSampler, batch_size: int, drop_last: bool, loader: Any):
        super().__init__(sampler, batch_size, drop_last)
        self._loader = weakref.ref(loader)  # no cycle: a dropped loader leaves the seeder at once

    @property
    def loader(self) -> Any:
        """The loader this batch sampler serves."""
        return self._loader()

    def __len__(self) -> int:
        n = self.sampler.num_samples
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Tuple[Any, ...]]:
        epoch, start, _ = self.loader.pending_start()
        return self._keys(epoch, start)

    def _keys(self, epoch: int, start: int) -> Iterator[Tuple[Any, ...]]:
        sampler, bs = self.sampler, self.batch_size
        s = self.loader.seeder
        if not s.initialized:
            raise RuntimeError("seeder.DataLoader takes its order and seeds from the seeder: call seeder.init(master_seed=...) "
                               "before iterating")
        head = (s.get_master_seed(), sampler.task, epoch, sampler.rank)
        pair = sampler.with_epoch
        b, buf = start, []
        for block in sampler.blocks(epoch, min(start * bs, sampler.num_samples)):
            lst = block.tolist()
            if pair:
                lst = [(epoch, i) for i in lst]
            if buf:
                need = bs - len(buf)
                buf.extend(lst[:need])
                lst = lst[need:]
                if len(buf) < bs:
                    continue
                yield head + (b, buf)
                b, buf = b + 1, []
            full = len(lst) - len(lst) % bs
            for j in range(0, full, bs):
                yield head + (b, lst[j:j + bs])
                b += 1
            buf = lst[full:]
        if buf and not self.drop_last:
            yield head + (b, buf)
