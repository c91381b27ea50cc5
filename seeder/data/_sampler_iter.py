"""The sampler's iteration: C-speed iteration over blocks of indices that knows how far it got.

The sampler hands its indices out in blocks, one list iterator each, chained at C speed
(:class:`SamplerIterator`, an ``itertools.chain``); :class:`Progress` records the block being
drawn from, so the number of indices drawn is known at any moment without a Python call per
index. :class:`SamplerIterator` speaks torchdata's ``Stateful`` iterator protocol, and an
iteration started before the sampler loaded a state stops (:func:`check_not_stopped`).

Example:
    >>> p = Progress(0)
    >>> it = SamplerIterator.from_iterable(it for _, it in p.draw([np.array([4, 5, 6])], None))
    >>> next(it), p.yielded()
    (4, 1)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import Any, Optional, Protocol

import numpy as np

from seeder._checks import is_int
from seeder._errors import StateError
from seeder.data._audit import LoaderWatch

__all__ = ["Progress", "SamplerIterator", "check_not_stopped"]


class Progress:
    """How far one ``iter(sampler)`` got: the block being drawn from and its list iterator.

    The sampler hands its indices out in blocks, one list iterator each, chained at C speed
    (:class:`SamplerIterator`). Recording the block being drawn from gives the number of indices
    drawn at any moment without a Python call per index.

    >>> p = Progress(0); p.current, p.current_len = iter([7, 8, 9]), 3; _ = next(p.current)
    >>> p.yielded()
    1
    """

    def __init__(self, start: int):
        self.start = self.block_start = start
        self.current: Optional[Iterator[int]] = None
        self.current_len = 0
        self.started = False
        self.stopped = (
            False  # stop() was called: the owner loaded another state under this iteration
        )
        self._items: Optional[list[Any]] = None
        self._stopped_at = 0

    def stop(self) -> None:
        """End the iteration at the index it has reached: the current block is emptied, its owner
        raises next.

        >>> p = Progress(0); blocks = p.draw([np.array([1, 2, 3])], None)
        >>> _, it = next(blocks); first = next(it); p.stop(); list(it), p.yielded()
        ([], 1)
        """
        self._stopped_at = self.yielded()
        self.stopped = True
        if self._items is not None:
            self._items.clear()

    def yielded(self) -> int:
        """Indices drawn so far in this epoch (the start position included)."""
        if self.stopped:
            return self._stopped_at
        if self.current is None:
            return self.block_start
        return self.block_start + self.current_len - operator.length_hint(self.current)

    def draw(
        self, blocks: Iterable[np.ndarray], epoch: Optional[int]
    ) -> Iterator[tuple[int, Iterator[Any]]]:
        """For each block: ``(end position, C-level iterator over its indices)``, recording
        progress.

        ``epoch`` not ``None``: the iterators yield ``(epoch, index)`` pairs.

        >>> p = Progress(2); [(end, list(it)) for end, it in p.draw([np.array([5, 6])], 1)]
        [(4, [(1, 5), (1, 6)])]
        """
        end = self.start
        for block in blocks:
            self.block_start = end
            end += len(block)
            items = self._items = block.tolist()
            self.current, self.current_len = iter(items), len(items)
            yield (
                end,
                (zip(itertools.repeat(epoch), self.current) if epoch is not None else self.current),
            )
        self.current = self._items = None
        self.block_start = end


class IteratedSampler(Protocol):
    """What a sampler's iterator reads of its sampler (:class:`seeder.DistributedSampler`)."""

    @property
    def num_samples(self) -> int: ...

    @property
    def loader_watch(self) -> LoaderWatch: ...


class SamplerIterator(itertools.chain):
    """``iter(DistributedSampler)``: C-speed iteration, and torchdata's ``Stateful`` iterator
    protocol.

    torchdata's ``StatefulDataLoader`` saves ``state_dict()`` (the indices drawn so far) with
    the sampler's own state, and on resume calls ``load_state_dict`` on a fresh iterator
    before drawing from it: the iterator then starts there, in O(1). ``sampler`` is anything
    with ``num_samples`` and a ``loader_watch`` (:class:`seeder.data._audit.LoaderWatch`).

    >>> from seeder.data._audit import LoaderWatch
    >>> class Sampler: num_samples = 2; loader_watch = LoaderWatch()
    >>> it = SamplerIterator.from_iterable([iter([1, 2])])
    >>> it.progress, it.sampler = Progress(0), Sampler()
    >>> it.state_dict()
    {'format': 'seeder.sampler_iter', 'yielded': 0}
    """

    progress: Progress
    sampler: IteratedSampler

    def state_dict(self) -> dict[str, Any]:
        """The number of indices drawn so far; the loader asking for it saves the position, so the
        sampler is told."""
        self.sampler.loader_watch.note_position_saved()
        return {"format": "seeder.sampler_iter", "yielded": self.progress.yielded()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start at ``state['yielded']``; only before the first index is drawn.

        Inside an epoch, warns once per cause (:class:`seeder.SeederWarning`) of what the loader
        would not continue (workers' random numbers without :class:`seeder.data.SeededDataset`).
        """
        if not isinstance(state, dict) or state.get("format") != "seeder.sampler_iter":
            raise StateError(
                "not a seeder sampler iterator state: pass the dict returned by "
                "iter(sampler).state_dict()"
            )
        yielded: Any = state.get("yielded")  # loaded content: checked here
        if not is_int(yielded) or not 0 <= yielded <= self.sampler.num_samples:
            raise StateError(
                f"sampler iterator state['yielded'] must be an int in [0, "
                f"{self.sampler.num_samples}], got {yielded!r}"
            )
        if self.progress.started:
            raise RuntimeError("load the sampler iterator's state before drawing from it")
        self.progress.start = self.progress.block_start = int(yielded)
        self.sampler.loader_watch.iterator_resumed(self.sampler, int(yielded))


def check_not_stopped(progress: Progress) -> None:
    """Raise ``RuntimeError`` if the sampler loaded a state under this iteration (it stops).

    >>> p = Progress(0); p.stop(); check_not_stopped(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: this iterator of the sampler was started before sampler.load_state_dict(): ...
    """
    if progress.stopped:
        raise RuntimeError(
            "this iterator of the sampler was started before sampler.load_state_dict(): it stops "
            "here instead of yielding indices that the loaded state does not continue; call "
            "iter(sampler) again (or iter() on the DataLoader around it) to continue from the "
            "loaded position"
        )
