"""Batches of ``seeder.DataLoader`` as keys, and the dataset view that seeds the RNGs before
fetching each one.

A batch key is ``(master, task, epoch, rank, batch, indices)``. :class:`BatchKeys` (the
loader's batch sampler) yields them in the sampler's order from any start batch in O(1);
:class:`BatchSeedingDataset` seeds the global RNGs and the registered generators from
:func:`seeder._seeding.derive.batch_seeds` of the key, then fetches the indices, wherever it runs.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> BatchSeedingDataset([10, 11, 12], SeedSource(s)).__getitems__((3, 1, 0, 0, 0, [2, 0]))
    [12, 10]
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator
from typing import Any, Optional, Protocol

import torch.utils.data

from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.derive import batch_seeds
from seeder.data._heldrngs import HeldRNGs
from seeder.data._provenance import Ranges
from seeder.data._sampler import DistributedSampler
from seeder.data._workers import SeedSource, generator_words, seed_globals

__all__ = ["BatchSeedingDataset", "BatchKeys", "KeyedLoader", "KeptByAccelerate", "rebuilt_error"]


def rebuilt_error(kind: str) -> RuntimeError:
    """The error of a seeder loader's batch sampler iterated by another loader built around it
    (``accelerate.Accelerator.skip_first_batches`` builds one).

    A plain ``Accelerator.prepare`` keeps seeder's loaders as they are (they carry accelerate's
    ``_is_accelerate_prepared``): where accelerate is loaded, that it still reads it is checked
    first (:class:`seeder._internals.DependencyChanged` if not).

    >>> "SeederAccelerator" in str(rebuilt_error("seeder.DataLoader"))
    True
    """
    if "accelerate" in sys.modules:
        require("accelerate:Accelerator.prepare_data_loader._is_accelerate_prepared")
    return RuntimeError(
        f"this {kind} was rebuilt into another DataLoader (accelerate's skip_first_batches() "
        f"does so), which neither seeds batches nor counts its position. Prepare it with "
        f"seeder.integrations.accelerate.SeederAccelerator, or iterate the {kind} itself, its "
        f"position restored by load_checkpoint_state "
        f"(see docs/huggingface.md#a-plain-accelerator)"
    )


class KeptByAccelerate:
    """The mark of seeder's loaders for accelerate: ``Accelerator.prepare`` returns a loader that
    carries it as it is (accelerate's own mark of a loader already prepared).

    A seeder loader shards by global rank, seeds each batch and counts its position itself; the
    torch DataLoader accelerate would rebuild around it does none of that. It also answers as a
    stateful loader: ``Accelerator.save_state``/``load_state`` keep its ``state_dict()`` (the
    position in the epoch) in their folder.

    >>> KeptByAccelerate._is_accelerate_prepared, KeptByAccelerate.use_stateful_dataloader
    (True, True)
    """

    _is_accelerate_prepared = True
    use_stateful_dataloader = True


class KeyedLoader(Protocol):
    """What a batch sampler of batch keys reads from its loader (:class:`seeder.DataLoader`)."""

    @property
    def seeder(self) -> Seeder:
        """The seeder whose master seed heads the keys."""

    def pending_start(self) -> tuple[int, int, object]:
        """``(epoch, first batch, token)`` of the iterator being created (an error naming the fix
        when the loader is not creating one: another loader iterates its batch sampler)."""

    def pending_skips(self, epoch: int) -> Ranges:
        """The batches of the iterator being created that it leaves out."""


class BatchSeedingDataset(torch.utils.data.Dataset):
    """The user's dataset, fetched by batch keys ``(master, task, epoch, rank, batch, indices)``,
    seeding before each.

    What torch's fetchers (in a worker, or the main process) see in place of the user's dataset:
    before fetching the indices it seeds ``random``, NumPy, torch's CPU generator and every
    registered generator from the batch's seeds (:func:`seeder._seeding.derive.batch_seeds`, taken
    from a cached block of the epoch's batches).

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(3)
    >>> view = BatchSeedingDataset([10, 11, 12], SeedSource(s))
    >>> view.__getitems__((3, 1, 0, 0, 0, [2, 0]))
    [12, 10]
    """

    def __init__(self, dataset: Any, source: SeedSource, what: str = "seeder.DataLoader"):
        self.dataset = dataset
        self.source = source
        self.held = HeldRNGs(what)  # the dataset's own RNG objects, which seeder does not seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, key: tuple[Any, ...]) -> list[Any]:
        master, task, epoch, rank, batch, indices = key
        gens = self.source.generators("seeder.DataLoader")
        seeds = batch_seeds(master, task, epoch, rank, batch, generator_words(gens))
        seed_globals(seeds[0])
        for fn, _, stream in gens:
            fn(seeds[stream])
        ds = self.dataset
        getitems = getattr(ds, "__getitems__", None)
        if getitems is not None:
            return self.held.fetch(ds, self.source.registered, lambda: getitems(indices))
        return self.held.fetch(ds, self.source.registered, lambda: [ds[i] for i in indices])


class BatchKeys(torch.utils.data.BatchSampler):
    """The loader's batch sampler: batch keys of the current epoch from the loader's start position.

    ``loader`` (held weakly) gives the start with ``pending_start()`` and the seeder with
    ``seeder``.
    """

    sampler: DistributedSampler

    def __init__(
        self, sampler: DistributedSampler, batch_size: int, drop_last: bool, loader: KeyedLoader
    ):
        super().__init__(sampler, batch_size, drop_last)
        self._loader = weakref.ref(loader)  # no cycle: a dropped loader leaves the seeder at once

    @property
    def loader(self) -> Optional[KeyedLoader]:
        """The loader this batch sampler serves (``None`` once it is dropped)."""
        return self._loader()

    def _owner(self) -> KeyedLoader:
        loader = self._loader()
        if loader is None:  # dropped: only a loader rebuilt around this batch sampler iterates it
            raise rebuilt_error("seeder.DataLoader")
        return loader

    def __len__(self) -> int:
        n = self.sampler.num_samples
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # Yields batch keys (tuples), not torch's index lists: torch's fetcher hands each one whole to
    # BatchSeedingDataset.__getitems__.
    def __iter__(self) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        owner = self._owner()
        epoch, start, _ = owner.pending_start()
        return self._keys(epoch, start, owner.pending_skips(epoch))

    def _keys(self, epoch: int, start: int, skips: Ranges) -> Iterator[tuple[Any, ...]]:
        s = self._owner().seeder
        if not s.initialized:
            raise RuntimeError(
                "seeder.DataLoader takes its order and seeds from the seeder: call "
                "seeder.init(master_seed=...) before iterating"
            )
        head = (s.get_master_seed(), self.sampler.task, epoch, self.sampler.rank)
        # skipped batches' samples are drawn from the order, never fetched
        for b, indices in self._batches(epoch, start):
            if not skips or b not in skips:
                yield head + (b, indices)

    def _batches(self, epoch: int, start: int) -> Iterator[tuple[int, list[Any]]]:
        """``(batch index, its indices)`` for each batch of ``epoch`` from ``start`` on, in the
        sampler's order (``(epoch, index)`` pairs where the sampler yields them)."""
        sampler, bs = self.sampler, self.batch_size
        b = start
        buf: list[Any] = []
        for block in sampler.blocks(epoch, min(start * bs, sampler.num_samples)):
            lst = block.tolist()
            if sampler.with_epoch:
                lst = [(epoch, i) for i in lst]
            if buf:
                need = bs - len(buf)
                buf.extend(lst[:need])
                lst = lst[need:]
                if len(buf) < bs:
                    continue
                yield b, buf
                b, buf = b + 1, []
            full = len(lst) - len(lst) % bs
            for j in range(0, full, bs):
                yield b, lst[j : j + bs]
                b += 1
            buf = lst[full:]
        if buf and not self.drop_last:
            yield b, buf
