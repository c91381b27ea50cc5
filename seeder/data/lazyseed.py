"""Per-sample seeding at the cost of the RNGs a dataset draws from.

The elastic loader seeds the fetching process's global RNGs before every sample. Seeding
Python's ``random``, NumPy's global RNG or torch's CPU generator costs a microsecond or more
each (a Mersenne Twister's 624 words), often as much as the item itself. :class:`SampleSeeding`
fetches a batch in one loop: before every sample it seeds the registered generators, and the
global RNGs only once this process has seen a sample draw from them. It compares their states
(:meth:`seeder.rngbase.RNGAdapter.watcher`: for Python and NumPy a Mersenne Twister's position
and two key words, and the Gaussian cache; for torch the whole 5 KB state) before and after the
batch, and fetches a batch in which a sample drew from an unseeded one again, with it seeded
(as it is from then on). A dataset that draws nothing (tokenised text) is never seeded.

One comparison per batch sees every draw: the watched RNGs are not seeded within the batch, so
the samples' draws add up. Every draw moves the position, except a draw of a multiple of 624
words, which leaves the position where it was and regenerates the key (the compared key words
then stay the same with a chance of 2**-64 or less); a used Gaussian cache is empty afterwards.
Every draw a sample makes comes from an RNG seeded with that sample's seed, so the items are
those of seeding every RNG before every sample; only the cost differs.

Not seen by the comparison: a dataset that reads an RNG's state without drawing
(``random.getstate()``) and uses it, or that puts back a state it drew from.

Example:
    >>> import random
    >>> from seeder.data.workers import fetch_adapters
    >>> seeding = SampleSeeding(fetch_adapters())
    >>> items = seeding.fetch(lambda i: random.random(), [0, 1, 2], [7, 7, 8])
    >>> items[0] == items[1] != items[2], [a.name for a in seeding.seeded]
    (True, ['python'])
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
    """Seeds ``adapters`` before each sample: always those without a watcher, the others once seen drawing."""

    def __init__(self, adapters: Sequence[RNGAdapter]):
        watchers = [(a, a.watcher()) for a in adapters]
        self.seeded: List[RNGAdapter] = [a for a, w in watchers if w is None]
        self.watched: List[Tuple[RNGAdapter, Callable[[], Any]]] = [(a, w) for a, w in watchers if w is not None]
        self._arm()

    def _arm(self) -> None:
        """The seeding functions of what is seeded, and one call that reads what is watched."""
        self._seeds = [a.seed_function() for a in self.seeded]
        looks = tuple(w for _, w in self.watched)
        self._look: Optional[Callable[[], Tuple[Any, ...]]] = (lambda: tuple(look() for look in looks)) if looks else None

    def fetch(self, get: Callable[[Any], Any], indices: Sequence[Any], seeds: Sequence[int], generators: Generators = (),
              width: int = 1) -> List[Any]:
        """``[get(i) for i in indices]`` with the RNGs each sample draws from seeded: sample ``k``'s global RNGs
        from ``seeds[k * width]``, each registered generator ``(fn, shared, stream)`` from ``seeds[k * width + stream]``.
        """
        while True:
            look = self._look
            if look is None:
                return self._fetch(get, indices, seeds, generators, width)
            before = look()
            items = self._fetch(get, indices, seeds, generators, width)
            after = look()
            if after == before:
                return items
            drew = [aw for aw, then, now in zip(self.watched, before, after) if then != now]
            self.seeded.extend(a for a, _ in drew)
            self.watched = [aw for aw in self.watched if aw not in drew]
            self._arm()
            logger.debug("seeder: a sample drew from %s; seeded before every sample from now on, and the batch "
                         "fetched again", ", ".join(a.name for a, _ in drew))

    def _fetch(self, get: Callable[[Any], Any], indices: Sequence[Any], seeds: Sequence[int], generators: Generators,
               width: int) -> List[Any]:
        out: List[Any] = []
        append = out.append
        fns = self._seeds
        if width == 1 and not generators and not fns:  # no sample draws: nothing to seed
            return [get(index) for index in indices]
        if width == 1 and not generators and len(fns) == 1:  # one RNG drawn from (torch's, as a rule)
            seed_with = fns[0]
            for index, seed in zip(indices, seeds):
                seed_with(seed)
                append(get(index))
            return out
        at = 0
        for index in indices:
            seed = seeds[at]
            for seed_with in fns:
                seed_with(seed)
            for fn, _, stream in generators:
                fn(seeds[at + stream])
            append(get(index))
            at += width
        return out


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
