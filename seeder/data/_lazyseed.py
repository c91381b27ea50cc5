"""Per-sample seeding of the global RNGs a dataset draws from, with each sample fetched once.

The elastic loader seeds the fetching process's global RNGs before every sample. Which ones a
sample will draw from is known only after it ran, and a sample fetched again would run the
user's ``__getitem__`` twice, so the RNGs a loader is told its items draw from
(``sample_rngs``, by default Python's ``random``, NumPy's global RNG and torch's CPU generator:
:data:`seeder.data._workers.FETCH_SEEDED`) are seeded before every sample, whether or not it
draws. The others are watched: :class:`SampleSeeding` compares their states
(:meth:`seeder._seeding.rngbase.RNGAdapter.watcher`: for Python and NumPy a Mersenne Twister's
position and two key words, and the Gaussian cache; for torch the whole 5 KB state) before and after
each batch. A batch in which a sample drew from a watched RNG warns once
(:class:`seeder.SeederWarning`, naming the RNG and ``sample_rngs``): that sample's draws did not
come from its own seed, so they depend on what the process fetched before. The RNG is seeded
before every sample from then on. Each sample is fetched once either way.

One comparison per batch sees every draw: the watched RNGs are not seeded within the batch, so
the samples' draws add up. Every draw moves the position, except a draw of a multiple of 624
words, which leaves the position where it was and regenerates the key (the compared key words
then stay the same with a chance of 2**-64 or less); a used Gaussian cache is empty afterwards.
Not seen by the comparison: a dataset that reads an RNG's state without drawing
(``random.getstate()``) and uses it, or that puts back a state it drew from.

Example:
    >>> import random
    >>> from seeder.data._workers import fetch_adapters
    >>> seeding = SampleSeeding(fetch_adapters())
    >>> items = seeding.fetch(lambda i: random.random(), [0, 1, 2], [7, 7, 8])
    >>> items[0] == items[1] != items[2], [a.name for a in seeding.seeded]
    (True, ['python', 'numpy', 'torch'])
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Optional

from seeder._errors import SeederWarning
from seeder._seeding.rngbase import RNGAdapter
from seeder.data._workers import FETCH_SEEDED, fetch_adapters

__all__ = ["SampleSeeding", "sample_seeding", "check_sample_rngs"]

logger = logging.getLogger("seeder")

Generators = Sequence[tuple[Callable[[int], Any], bool, int]]


def check_sample_rngs(names: Any) -> tuple[str, ...]:
    """``names`` as a tuple in :data:`~seeder.data._workers.FETCH_SEEDED` order; raise if it is not
    a collection of them.

    Args:
        names: the global RNGs a dataset's items draw from: any of ``"python"``, ``"numpy"``,
            ``"torch"``.

    Returns:
        The names, each once, in the order ``("python", "numpy", "torch")``.

    Raises:
        TypeError: ``names`` is a string or not a list, tuple, set or frozenset.
        ValueError: a name is not one of the three.

    >>> check_sample_rngs(["torch", "python"]), check_sample_rngs(())
    (('python', 'torch'), ())
    """
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise TypeError(
            f"sample_rngs must be a list or tuple of RNG names out of {FETCH_SEEDED}, got {names!r}"
        )
    bad = [n for n in names if n not in FETCH_SEEDED]
    if bad:
        raise ValueError(
            f"sample_rngs names the global RNGs items draw from, out of {FETCH_SEEDED}; got {bad!r}"
        )
    return tuple(n for n in FETCH_SEEDED if n in names)


class SampleSeeding:
    """Seeds ``seeded`` before each sample; watches ``watched`` once a batch, warns and seeds one a
    sample drew from.

    Args:
        seeded: adapters seeded before every sample.
        watched: adapters compared before and after each batch (one without a watcher is seeded
            instead).
        what: names the loader in the warning.
    """

    def __init__(
        self,
        seeded: Sequence[RNGAdapter],
        watched: Sequence[RNGAdapter] = (),
        what: str = "seeder.ElasticDataLoader",
    ):
        watchers = [(a, a.watcher()) for a in watched]
        self.seeded: list[RNGAdapter] = list(seeded) + [a for a, w in watchers if w is None]
        self.watched: list[tuple[RNGAdapter, Callable[[], Any]]] = [
            (a, w) for a, w in watchers if w is not None
        ]
        self.what = what
        self._arm()

    def _arm(self) -> None:
        """The seeding functions of what is seeded, and one call that reads what is watched."""
        self._seeds = [a.seed_function() for a in self.seeded]
        looks = tuple(w for _, w in self.watched)
        self._look: Optional[Callable[[], tuple[Any, ...]]] = (
            (lambda: tuple(look() for look in looks)) if looks else None
        )

    def fetch(
        self,
        get: Callable[[Any], Any],
        indices: Sequence[Any],
        seeds: Sequence[int],
        generators: Generators = (),
        width: int = 1,
    ) -> list[Any]:
        """``[get(i) for i in indices]``, each once, sample ``k``'s seeded RNGs seeded from
        ``seeds[k * width]`` before it and each registered generator ``(fn, shared, stream)`` from
        ``seeds[k * width + stream]``.
        """
        look = self._look
        if look is None:
            return self._fetch(get, indices, seeds, generators, width)
        before = look()
        items = self._fetch(get, indices, seeds, generators, width)
        after = look()
        if after != before:
            self._drew([aw for aw, then, now in zip(self.watched, before, after) if then != now])
        return items

    def _drew(self, drew: list[tuple[RNGAdapter, Callable[[], Any]]]) -> None:
        """Samples drew from watched RNGs: say so once, and seed them before every sample from now
        on."""
        self.seeded.extend(a for a, _ in drew)
        self.watched = [aw for aw in self.watched if aw not in drew]
        self._arm()
        names = [a.name for a, _ in drew]
        warnings.warn(
            f"{self.what}: a sample drew from the global RNG(s) {', '.join(names)}, which "
            f"sample_rngs leaves out: its draws did not come from its own seed, so they depend on "
            f"what this process fetched before (the world size and workers). Pass sample_rngs with "
            + ", ".join(repr(n) for n in names)
            + " (or leave sample_rngs out: "
            "all three are seeded) for exact items; seeded before every sample from now on",
            SeederWarning,
            stacklevel=2,
        )

    def _fetch(
        self,
        get: Callable[[Any], Any],
        indices: Sequence[Any],
        seeds: Sequence[int],
        generators: Generators,
        width: int,
    ) -> list[Any]:
        fns = self._seeds
        if width == 1 and not generators:
            if not fns:  # no sample draws: nothing to seed
                return [get(index) for index in indices]
            out: list[Any] = []
            append = out.append
            if len(fns) == 1:  # one RNG drawn from (torch's, as a rule)
                seed_with = fns[0]
                for index, seed in zip(indices, seeds):
                    seed_with(seed)
                    append(get(index))
                return out
            for index, seed in zip(indices, seeds):
                for seed_with in fns:
                    seed_with(seed)
                append(get(index))
            return out
        out = []
        at = 0
        for index in indices:
            seed = seeds[at]
            for seed_with in fns:
                seed_with(seed)
            for fn, _, stream in generators:
                fn(seeds[at + stream])
            out.append(get(index))
            at += width
        return out


_PROCESS: dict[tuple[str, ...], SampleSeeding] = {}


def sample_seeding(names: Sequence[str] = FETCH_SEEDED) -> SampleSeeding:
    """This process's :class:`SampleSeeding` of the global RNGs ``names`` (the others watched); a
    forked worker starts from its parent's.

    >>> sample_seeding(("torch",)) is sample_seeding(("torch",)), [a.name for a in sample_seeding().seeded]
    (True, ['python', 'numpy', 'torch'])
    """
    key = tuple(names)
    seeding = _PROCESS.get(key)
    if seeding is None:
        adapters = fetch_adapters()
        seeding = _PROCESS[key] = SampleSeeding(
            [a for a in adapters if a.name in key], [a for a in adapters if a.name not in key]
        )
    return seeding
