"""Elastic data: one global order per epoch, each rank's part of a global batch, per-sample seeds
by position.

The epoch's global order is the keyed permutation of ``range(N)`` that a one-replica
:class:`seeder.DistributedSampler` yields: it does not depend on the world size or the workers.
Global batch ``s`` holds positions ``origin + s*G .. origin + (s+1)*G`` (``G`` the global batch
size, ``origin`` 0 unless a resume changed ``G``); rank ``r`` of ``W`` fetches the ``r``-th of
``W`` contiguous slices of it (:func:`rank_slice`, :class:`ElasticBatches`).

Sample ``p`` of the global order is seeded from ``derive(Domain.ELASTIC, task, epoch,
rank=p >> 32, stream=p & 0xFFFFFFFF)``: its randomness is a pure function of (master seed,
epoch, position), whatever the topology. Three parts do the seeding in the fetching process:

* :class:`PositionSeeds` computes the seed words of the runs of positions the process is about
  to fetch, ahead and in one vectorised pass.
* :class:`SampleSeeding` seeds the loader's ``sample_rngs`` before every sample and watches the
  other global RNGs once a batch (a sample that drew from one warns).
* :class:`ElasticView` is what torch's fetchers see in place of the user's dataset: it fetches
  each sample once, seeded.

Example:
    >>> rank_slice(0, 8, 0, 2, 1, 10)  # step 0, G=8, world 2, rank 1, N=10: positions 4..8
    (4, 8)
    >>> rank_slice(1, 8, 0, 2, 1, 10)  # the last global batch holds 2 samples: one each
    (9, 10)
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Protocol

import numpy as np
import torch.utils.data

from seeder._errors import SeederWarning
from seeder._seeding.derive import MAX_KEY, Domain, stream_seeds
from seeder._seeding.rngbase import RNGAdapter
from seeder.data._batches import BatchSeedingDataset, KeyedLoader, rebuilt_error
from seeder.data._order import FIRST_BLOCK, shuffle_key
from seeder.data._permutation import keyed_permutation
from seeder.data._provenance import Ranges
from seeder.data._sampler import DistributedSampler
from seeder.data._workers import FETCH_SEEDED, SeedSource, fetch_adapters, generator_words

__all__ = [
    "num_steps",
    "rank_slice",
    "ElasticView",
    "ElasticBatches",
    "ElasticOwner",
    "AHEAD_POSITIONS",
    "position_seeds",
    "PositionSeeds",
    "SampleSeeding",
    "sample_seeding",
    "check_sample_rngs",
]

#: The most positions one pass computes ahead.
AHEAD_POSITIONS = 1 << 12
_ELASTIC = int(Domain.ELASTIC)


def position_seeds(
    master: int, task: int, epoch: int, positions: np.ndarray, width: int
) -> np.ndarray:
    """Seed words (``len(positions)`` x ``width``, uint64) of ``positions`` (uint64, one ``2**32``
    block).

    >>> from seeder._seeding.derive import derive_seed
    >>> words = position_seeds(7, 1, 0, np.array([2**32 + 3], np.uint64), 1)
    >>> int(words[0, 0]) == derive_seed(7, Domain.ELASTIC, 1, 0, 1, 3)
    True
    """
    hi = int(positions[0]) >> 32
    block = stream_seeds(master, _ELASTIC, task, epoch, hi, width)
    return block.seeds((positions & np.uint64(MAX_KEY)).astype(np.uint32))


class PositionSeeds:
    """Seed words of runs of positions, for one process: each run computed ahead in one pass with
    those that follow.

    A process fetches runs of consecutive positions (its rank's part of a global batch) at a fixed
    stride (the global batch size times the processes that share the batches), and one
    vectorised pass costs about as much for thousands of positions as for one batch. At a miss it
    computes the next runs at the stride it saw (1, then 4, 16 ... runs, up to
    :data:`AHEAD_POSITIONS` positions) and hands each out when asked; a run asked for out of that
    pattern (a resume, another epoch) starts over from one run.

    >>> from seeder._seeding.derive import derive_seed
    >>> want = [derive_seed(7, Domain.ELASTIC, 1, 0, 0, p) for p in (40, 41)]
    >>> PositionSeeds().words(7, 1, 0, 40, 2, 1) == want
    True
    """

    def __init__(self) -> None:
        self._key: Optional[tuple[int, int, int, int]] = None
        self._runs: dict[int, list[int]] = {}
        self._last: Optional[int] = None
        self._ahead = 1

    def words(
        self, master: int, task: int, epoch: int, first: int, count: int, width: int
    ) -> list[int]:
        """The seed words of positions ``first .. first + count - 1``, ``width`` per position, as
        one flat list."""
        if count <= 0:
            return []
        key = (master, task, epoch, width)
        if key != self._key:
            self._key, self._runs, self._last, self._ahead = key, {}, None, 1
        run = self._runs.pop(first, None)
        last, self._last = self._last, first
        size = count * width
        if run is not None and len(run) >= size:
            return run if len(run) == size else run[:size]
        if self._runs:  # runs computed ahead that were not asked for: the pattern changed
            self._runs.clear()
            self._ahead = 1
        end = (
            (first >> 32) + 1
        ) << 32  # the runs computed together share the derivation's rank word
        if (
            first + count > end
        ):  # a run across a 2**32 boundary: split there, nothing computed ahead
            pos = np.arange(first, first + count, dtype=np.uint64)
            cut = end - first
            parts = [
                position_seeds(master, task, epoch, part, width) for part in (pos[:cut], pos[cut:])
            ]
            return np.concatenate(parts).ravel().tolist()
        stride = first - last if last is not None and first - last >= count else count
        ahead = self._ahead
        self._ahead = min(ahead * 4, max(1, AHEAD_POSITIONS // count))
        ahead = min(
            ahead, (end - first - count) // stride + 1
        )  # the runs that end inside the block
        starts = first + stride * np.arange(ahead, dtype=np.uint64)
        pos = (starts[:, None] + np.arange(count, dtype=np.uint64)[None, :]).ravel()
        flat = position_seeds(master, task, epoch, pos, width).ravel().tolist()
        runs = self._runs
        for j in range(1, ahead):
            runs[first + j * stride] = flat[j * size : (j + 1) * size]
        return flat[:size] if ahead > 1 else flat


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
        TypeError: ``names`` is a string, or not iterable.
        ValueError: a name is not one of the three.

    >>> check_sample_rngs(["torch", "python"]), check_sample_rngs({"numpy"}), check_sample_rngs(())
    (('python', 'torch'), ('numpy',), ())
    """
    try:
        listed = None if isinstance(names, (str, bytes)) else list(names)
    except TypeError:
        listed = None
    if listed is None:
        raise TypeError(
            f"sample_rngs must be a collection of RNG names (a list, tuple or set) out of "
            f"{FETCH_SEEDED}, not a string or a single value; got {names!r}"
        )
    bad = [n for n in listed if n not in FETCH_SEEDED]
    if bad:
        raise ValueError(
            f"sample_rngs names the global RNGs items draw from, out of {FETCH_SEEDED}; got {bad!r}"
        )
    return tuple(n for n in FETCH_SEEDED if n in listed)


class SampleSeeding:
    """Seeds ``seeded`` before each sample; watches ``watched`` once a batch, warns and seeds one a
    sample drew from.

    Which global RNGs a sample draws from is known only after it ran, and a sample fetched again
    would run the user's ``__getitem__`` twice. So the RNGs a loader is told its items draw from
    (``sample_rngs``, by default :data:`seeder.data._workers.FETCH_SEEDED`) are seeded before
    every sample, whether or not it draws, and the others are watched: their states
    (:meth:`seeder._seeding.rngbase.RNGAdapter.watcher`) are compared before and after each
    batch. A batch in which a sample drew from a watched RNG warns once
    (:class:`seeder.SeederWarning`, naming the RNG and ``sample_rngs``): that sample's draws did
    not come from its own seed. The RNG is seeded before every sample from then on.

    One comparison per batch sees every draw: the watched RNGs are not seeded within the batch,
    so the samples' draws add up. Every draw moves a Mersenne Twister's position, except a draw of
    a multiple of 624 words, which regenerates the key (the compared key words then stay the same
    with a chance of 2**-64 or less); a used Gaussian cache is empty afterwards. Not seen: a
    dataset that reads an RNG's state without drawing (``random.getstate()``), or that puts back
    a state it drew from.

    Args:
        seeded: adapters seeded before every sample.
        watched: adapters compared before and after each batch (one without a watcher is seeded
            instead).
        what: names the loader in the warning.

    Example:
        >>> import random
        >>> seeding = SampleSeeding(fetch_adapters())
        >>> items = seeding.fetch(lambda i: random.random(), [0, 1, 2], [7, 7, 8])
        >>> items[0] == items[1] != items[2], [a.name for a in seeding.seeded]
        (True, ['python', 'numpy', 'torch'])
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
            f"sample_rngs leaves out, so its items depend on the world size and workers (seeded "
            f"before every sample from now on). For exact items, pass sample_rngs with "
            + ", ".join(repr(n) for n in names)
            + " or leave it out (see docs/elastic.md#sample_rngs)",
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

    >>> sample_seeding(("torch",)) is sample_seeding(("torch",))
    True
    >>> [a.name for a in sample_seeding().seeded]
    ['python', 'numpy', 'torch']
    """
    key = tuple(names)
    seeding = _PROCESS.get(key)
    if seeding is None:
        adapters = fetch_adapters()
        seeding = _PROCESS[key] = SampleSeeding(
            [a for a in adapters if a.name in key], [a for a in adapters if a.name not in key]
        )
    return seeding


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
        super().__init__(dataset, source, "seeder.ElasticDataLoader")
        self.positions = PositionSeeds()  # this process's seeds, computed ahead
        self.sample_rngs = (
            sample_rngs  # the global RNGs seeded before every sample; the others are watched
        )

    def __getitems__(self, key: tuple[Any, ...]) -> list[Any]:
        master, task, epoch, first, indices = key
        gens = self.source.generators("seeder.ElasticDataLoader")
        width = generator_words(gens)
        seeds = self.positions.words(master, task, epoch, first, len(indices), width)
        return self.held.fetch(
            self.dataset,
            self.source.registered,
            lambda: sample_seeding(self.sample_rngs).fetch(
                self.dataset.__getitem__, indices, seeds, gens, width
            ),
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "positions": PositionSeeds()}  # a spawned worker computes its own


class ElasticOwner(KeyedLoader, Protocol):
    """What :class:`ElasticBatches` reads from its loader (:class:`seeder.ElasticDataLoader`)."""

    def origin(self) -> int:
        """Position of global step 0's first sample in this epoch."""

    def take_origin(self, epoch: int, token: object) -> int:
        """The origin of the iterator starting now."""


class ElasticBatches(torch.utils.data.BatchSampler):
    """The elastic loader's batch sampler: this rank's part of each global batch, as fetch keys.

    ``sampler`` is the loader's one-replica :class:`seeder.DistributedSampler` (epoch, shuffle,
    task); ``loader`` (held weakly) gives the start step with ``pending_start()``, the seeder and
    the origin.
    """

    sampler: DistributedSampler

    def __init__(
        self,
        sampler: DistributedSampler,
        batch_size: int,
        drop_last: bool,
        loader: ElasticOwner,
        world: int,
        rank: int,
    ):
        super().__init__(sampler, batch_size, drop_last)
        self.world, self.rank = world, rank
        self.global_batch = batch_size * world
        self._loader = weakref.ref(loader)

    @property
    def loader(self) -> Optional[ElasticOwner]:
        """The loader this batch sampler serves (``None`` once it is dropped)."""
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

    # Yields fetch keys (tuples), not torch's index lists: torch's fetcher hands each one whole to
    # ElasticView.__getitems__.
    def __iter__(self) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        loader = self.loader
        if loader is None:  # dropped: only a loader rebuilt around this batch sampler iterates it
            raise rebuilt_error("seeder.ElasticDataLoader")
        epoch, start, token = loader.pending_start()
        skips = loader.pending_skips(epoch)
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
        head = (s.get_master_seed(), sampler.task, epoch)
        return self._keys(head, n, key, origin, start, skips)

    def _keys(
        self,
        head: tuple[int, int, int],
        n: int,
        key: Optional[int],
        origin: int,
        start: int,
        skips: Ranges,
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
                if not skips or step not in skips
                else (0, 0)  # a skipped step: nothing fetched
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
