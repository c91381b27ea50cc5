"""Per-sample seeding at the cost of the RNGs a dataset draws from.

The elastic loader seeds the fetching process's global RNGs before every sample. Seeding
Python's ``random`` and NumPy's global RNG costs microseconds each (a Mersenne Twister's 624
words), often more than the item itself. :class:`SampleSeeding` seeds torch's CPU generator
and the registered generators before every sample, and Python's and NumPy's global RNGs only
once this process has seen a sample draw from them: it compares their states
(:meth:`seeder.rngbase.RNGAdapter.watcher`, a 2.5 KB copy each) before and after each
fetch, and fetches a sample that drew from an unseeded one again, with it seeded (as it is
from then on). Every draw a sample makes comes from an RNG seeded with that sample's seed, so
the items are those of seeding every RNG every time; only the cost differs.

Not seen by the comparison: a dataset that reads an RNG's state without drawing
(``random.getstate()``) and uses it.

Example:
    >>> import random
    >>> from seeder.data.workers import fetch_adapters
    >>> seeding = SampleSeeding(fetch_adapters())
    >>> items = [seeding.fetch(lambda i: random.random(), 0, 7, [], [7]) for _ in range(2)]
    >>> items[0] == items[1], [a.name for a in seeding.seeded]
    (True, ['torch', 'python'])
"""
from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..rngbase import RNGAdapter
from .workers import fetch_adapters

__all__ = ["SampleSeeding", "sample_seeding"]

logger = logging.getLogger("seeder")

Generators = Sequence[Tuple[Callable[[int], Any], bool, int]]


class SampleSeeding:
    """Seeds ``adapters`` before each fetch: always those without a watcher, the others once seen drawing."""

    def __init__(self, adapters: Sequence[RNGAdapter]):
        watchers = [(a, a.watcher()) for a in adapters]
        self.seeded: List[RNGAdapter] = [a for a, w in watchers if w is None]
        self.watched: List[Tuple[RNGAdapter, Callable[[], Any]]] = [(a, w) for a, w in watchers if w is not None]
        self._arm()

    def _arm(self) -> None:
        """One call that seeds what is seeded, one that reads what is watched."""
        self._seeds = [a.seed for a in self.seeded]
        looks = [w for _, w in self.watched]
        self._look: Optional[Callable[[], Any]] = (lambda: [look() for look in looks]) if looks else None

    def fetch(self, get: Callable[[Any], Any], index: Any, seed: int, generators: Generators, words: Sequence[int]) -> Any:
        """``get(index)`` with the RNGs it draws from seeded: the global ones from ``seed``, each registered
        generator ``(fn, shared, stream)`` from ``words[stream]``."""
        for seed_with in self._seeds:
            seed_with(seed)
        for fn, _, stream in generators:
            fn(words[stream])
        look = self._look
        if look is None:
            return get(index)
        before = look()
        item = get(index)
        after = look()
        if after == before:
            return item
        drew = [aw for aw, then, now in zip(self.watched, before, after) if then != now]
        self.seeded.extend(a for a, _ in drew)
        self.watched = [aw for aw in self.watched if aw not in drew]
        self._arm()
        logger.debug("seeder: a sample drew from %s; seeded before every sample from now on, and fetched again",
                     ", ".join(a.name for a, _ in drew))
        return self.fetch(get, index, seed, generators, words)


_PROCESS: List[Optional[SampleSeeding]] = [None]


def sample_seeding() -> SampleSeeding:
    """This process's :class:`SampleSeeding` of the global RNGs (a forked worker starts from its parent's).

    >>> sample_seeding() is sample_seeding()
    True
    """
    seeding = _PROCESS[0]
    if seeding is None:
        seeding = _PROCESS[0] = SampleSeeding(fetch_adapters())
    return seeding
