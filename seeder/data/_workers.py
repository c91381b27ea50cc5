"""DataLoader workers: per-worker seeds, per-sample seeds, and a generator for the loader itself.

* :data:`worker_init_fn` seeds ``random``, NumPy and torch in each worker, then every
  generator registered with the seeder, from ``derive(Domain.WORKER, task, epoch,
  global rank, stream=worker id)`` where ``(task, epoch)`` is the last ``reseed``.
  It is a picklable object: with the ``spawn`` start method it carries the master
  seed, rank, last reseed and registered generators to the worker.
* :class:`SeededDataset` wraps a dataset. Per sample (default), it reseeds those
  RNGs before every item from ``derive(Domain.SAMPLE, task, epoch, rank=index >> 32,
  stream=index & 0xFFFFFFFF)``: augmentations are a pure function of (master seed,
  epoch, index), whatever the number of workers, ``persistent_workers`` or a
  resume. With ``per_sample=False`` it reseeds each worker once per epoch (what
  ``worker_init_fn`` does), which also works with ``persistent_workers=True``.
  :class:`seeder.DistributedSampler` over a ``SeededDataset`` yields the
  ``(epoch, index)`` pairs it needs.
* :func:`dataloader_generator` gives ``DataLoader(generator=...)``, so that starting
  an epoch's iterator does not draw from torch's global RNG (a resumed run would
  otherwise draw once more than the run it continues).

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(42)
    >>> fn = make_worker_init_fn(seeder=s)
    >>> fn(0)           # what a DataLoader worker calls
    >>> import random; a = random.random(); fn(0); a == random.random()
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import torch
import torch.utils.data

from seeder._checks import check_bool, is_int
from seeder._seeding import derive
from seeder._seeding.core import Seeder
from seeder._seeding.default import check_seeder, resolve_seeder
from seeder._seeding.derive import TRAIN_TASK, Domain, check_key, index_words, stream_seeds
from seeder._seeding.rngbase import RNGAdapter, keep_states, restore_states
from seeder._seeding.rngs import adapter_for, global_adapters
from seeder.data._heldrngs import HeldRNGs

__all__ = [
    "FETCH_SEEDED",
    "WorkerInitFn",
    "worker_init_fn",
    "make_worker_init_fn",
    "SeededDataset",
    "sample_seed",
    "dataloader_generator",
    "SeedSource",
    "SeedInputs",
    "fetch_adapters",
    "seed_globals",
]

_VECTOR_MIN = 8  # batches at least this long derive their per-sample seeds in one NumPy pass


# --------------------------------------------------------------------------- where seeds come from
class SeedInputs(NamedTuple):
    """What seeding in a fetch needs from the seeder."""

    master: int  #: the master seed
    rank: int  #: the global rank
    last_reseed: Optional[tuple[int, int]]  #: ``(task, epoch)`` of the last ``reseed``, or ``None``
    generators: list[
        tuple[Callable[[int], Any], bool, int]
    ]  #: ``(seed_fn, shared, stream)`` of each registered generator


class SeedSource:
    """Where worker-side seeding finds the seeder: a live :class:`Seeder`, or a picklable copy of
    one.

    The live seeder serves the main process and forked workers. Pickling copies the master seed,
    rank, last reseed and the registered generators, which travel in the same pickle as the dataset,
    so they stay the dataset's own objects in the worker.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(4)
    >>> SeedSource(s).inputs("example")[:3]
    (4, 0, None)
    """

    def __init__(self, seeder: Optional[Seeder] = None):
        self._seeder = seeder
        self._snap: Optional[dict[str, Any]] = None
        self._unpickled: Optional[SeedInputs] = None

    def _live(self) -> Seeder:
        return resolve_seeder(self._seeder)

    def __getstate__(self) -> dict[str, Any]:
        if self._snap is not None:
            return dict(self._snap)
        s = self._live()
        if not s.initialized:
            return {"master": None, "rank": 0, "last": None, "generators": []}
        gens = [(m.gen, m.shared, m.stream) for m in s.generators()]
        return {
            "master": s.get_master_seed(),
            "rank": s.rank,
            "last": s.last_reseed,
            "generators": gens,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._seeder = None
        self._snap = state
        self._unpickled = None

    def generators(self, what: str) -> list[tuple[Callable[[int], Any], bool, int]]:
        """``inputs(what).generators`` without the rest (a fetch's hot path: the key holds the
        others)."""
        if self._snap is None:
            s = self._live()
            if not s.initialized:
                return self.inputs(what).generators  # raises
            return [(m.seed, m.shared, m.stream) for m in s.generators()]
        return (self._unpickled or self.inputs(what)).generators

    def registered(self) -> list[Any]:
        """The registered generators' objects (what they were registered as), live or pickled.

        >>> import seeder, torch
        >>> s = seeder.Seeder(); s.init(4); g = torch.Generator(); _ = s.register_generator(g)
        >>> SeedSource(s).registered() == [g]
        True
        """
        if self._snap is not None:
            return [gen for gen, _, _ in self._snap["generators"]]
        s = self._live()
        return [m.gen for m in s.generators()] if s.initialized else []

    def inputs(self, what: str) -> SeedInputs:
        """The seeder's :class:`SeedInputs` now (live), or as pickled; ``what`` names the caller in
        errors."""
        if self._snap is None:
            s = self._live()
            if not s.initialized:
                raise RuntimeError(
                    f"{what} needs an initialised seeder: call seeder.init(master_seed=...) before "
                    f"the DataLoader starts its workers"
                )
            gens = [(m.seed, m.shared, m.stream) for m in s.generators()]
            return SeedInputs(s.get_master_seed(), s.rank, s.last_reseed, gens)
        if self._unpickled is None:
            snap = self._snap
            if snap["master"] is None:
                raise RuntimeError(
                    f"{what} was pickled (spawn start method) before seeder.init(); call "
                    "seeder.init(master_seed=...) before iterating the DataLoader"
                )
            gens = []
            for gen, shared, stream in snap["generators"]:
                adapter = adapter_for(gen)
                gens.append((adapter.seed if adapter is not None else gen, shared, stream))
            self._unpickled = SeedInputs(snap["master"], snap["rank"], snap["last"], gens)
        return self._unpickled


#: The global streams :func:`seed_globals` seeds, by adapter name
#: (:func:`seeder._seeding.rngs.global_adapters`).
FETCH_SEEDED = ("python", "numpy", "torch")
_FETCH_ADAPTERS: list[RNGAdapter] = []


def fetch_adapters() -> list[RNGAdapter]:
    """The adapters of the global RNGs a fetch seeds (:data:`FETCH_SEEDED`; not accelerators:
    workers do not own them).

    >>> [a.name for a in fetch_adapters()]
    ['python', 'numpy', 'torch']
    """
    if not _FETCH_ADAPTERS:
        _FETCH_ADAPTERS.extend(a for a in global_adapters() if a.name in FETCH_SEEDED)
    return _FETCH_ADAPTERS


def seed_globals(seed: int) -> None:
    """Seed ``random``, NumPy's global RNG and torch's CPU generator through their adapters.

    >>> import random
    >>> seed_globals(7); a = random.random(); seed_globals(7); a == random.random()
    True
    """
    for adapter in _FETCH_ADAPTERS or fetch_adapters():
        adapter.seed(seed)


def generator_words(generators: list[tuple[Callable[[int], Any], bool, int]]) -> int:
    """Seed words a fetch needs: word 0 for the global RNGs, word ``k`` for generator stream
    ``k``."""
    return 1 + max((stream for _, _, stream in generators), default=0) if generators else 1


def _seed_worker(
    source: SeedSource, worker_id: int, task: Optional[int], epoch: Optional[int], what: str
) -> None:
    master, rank, last, gens = source.inputs(what)
    if task is None:
        task, epoch = last if last is not None else (0, 0)
    words = generator_words(gens)
    mine = stream_seeds(master, int(Domain.WORKER), task, epoch, rank, words).seed(worker_id)
    shared: list[int] = []
    if any(sh for _, sh, _ in gens):
        shared = stream_seeds(master, int(Domain.WORKER), task, epoch, 0, words).seed(worker_id)
    seed_globals(mine[0])
    for fn, is_shared, stream in gens:
        fn((shared if is_shared else mine)[stream])


# --------------------------------------------------------------------------- worker_init_fn
class WorkerInitFn:
    """A DataLoader ``worker_init_fn`` that seeds each worker from the seeder.

    Seeds ``random``, NumPy and torch CPU with ``derive(Domain.WORKER, task, epoch, rank,
    stream=worker_id)`` (``(task, epoch)`` of the last ``reseed``, ``rank`` the global rank),
    then every registered generator with its own word of that seed sequence (shared generators
    use rank 0's), then calls ``fn(worker_id)`` if given.

    Args:
        fn: called with the worker id after the seeding, or ``None``.
        seeder: the :class:`seeder.Seeder` to seed from; the default one if ``None``.

    Raises:
        TypeError: ``fn`` is not callable, or ``seeder`` is not a :class:`seeder.Seeder`.

    Example:
        >>> import random, seeder
        >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
        >>> init = WorkerInitFn(seeder=s)
        >>> init(3); a = random.random(); init(3); b = random.random()
        >>> a == b
        True
    """

    def __init__(
        self, fn: Optional[Callable[[int], Any]] = None, *, seeder: Optional[Seeder] = None
    ):
        if fn is not None and not callable(fn):
            raise TypeError(f"fn must be a callable fn(worker_id) or None, got {type(fn).__name__}")
        check_seeder(seeder)
        self.fn = fn
        self._source = SeedSource(seeder)

    def __call__(self, worker_id: int) -> None:
        check_key(worker_id, "worker_id")
        _seed_worker(self._source, worker_id, None, None, "seeder.data.worker_init_fn")
        if self.fn is not None:
            self.fn(worker_id)

    def __repr__(self) -> str:
        return f"seeder.data.WorkerInitFn(fn={self.fn!r})"


def make_worker_init_fn(
    fn: Optional[Callable[[int], Any]] = None, *, seeder: Optional[Seeder] = None
) -> WorkerInitFn:
    """A ``worker_init_fn`` that seeds each worker from ``seeder`` and then calls ``fn(worker_id)``.

    Args:
        fn: called with the worker id after the seeding, or ``None``.
        seeder: the :class:`seeder.Seeder` to seed from; the default one if ``None``.

    Returns:
        A :class:`WorkerInitFn` (picklable: it works with spawned workers).

    Raises:
        TypeError: ``fn`` is not callable.

    Example:
        >>> import torch
        >>> init = make_worker_init_fn(lambda worker_id: torch.set_num_threads(1))
        >>> loader = torch.utils.data.DataLoader(range(4), worker_init_fn=init)
    """
    return WorkerInitFn(fn, seeder=seeder)


#: ``DataLoader(worker_init_fn=seeder.data.worker_init_fn)``: the default seeder's
#: :class:`WorkerInitFn`.
worker_init_fn = WorkerInitFn()


def dataloader_generator(*, seeder: Optional[Seeder] = None) -> torch.Generator:
    """A ``torch.Generator`` for ``DataLoader(generator=...)``: iterators stop drawing from torch's
    global RNG.

    Every ``iter(loader)`` draws a base seed for its workers from ``generator``, or from the global
    torch RNG when none is given, shifting the training stream by one draw; a run resumed mid-epoch
    would then be one draw off the run it continues. The worker seeds themselves come from
    :data:`worker_init_fn`, so this generator's values do not matter; it is seeded from the
    seeder so that it is the same in every run.

    Args:
        seeder: the :class:`seeder.Seeder` to seed it from; the default one if ``None``.

    Returns:
        A new CPU generator.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(3)
        >>> before = torch.random.get_rng_state()
        >>> loader = torch.utils.data.DataLoader(range(4), generator=dataloader_generator(seeder=s))
        >>> _ = list(loader)
        >>> torch.equal(before, torch.random.get_rng_state())  # the global stream did not move
        True
    """
    s = resolve_seeder(seeder)
    g = torch.Generator()
    if s.initialized:
        g.manual_seed(s.derive(Domain.WORKER, 0, 0, stream=derive.MAX_KEY))
    else:
        g.manual_seed(0)
    return g


# --------------------------------------------------------------------------- per-sample seeds
def sample_seed(
    index: int, epoch: int, *, task: int = TRAIN_TASK, seeder: Optional[Seeder] = None
) -> int:
    """The seed :class:`SeededDataset` uses for sample ``index`` in ``epoch``.

    ``derive(Domain.SAMPLE, task, epoch, index)``: the same on every rank, for every number of
    workers. Use it to seed your own per-sample generator, e.g.
    ``np.random.default_rng(seeder.data.sample_seed(i, epoch))``.

    Args:
        index: the sample's index in the dataset, in ``[0, 2**64)``.
        epoch: the epoch, in ``[0, 2**32)``.
        task: the task of the derivation (1, the training loop, unless given).
        seeder: the :class:`seeder.Seeder` to derive from; the default one if ``None``.

    Returns:
        A 64-bit seed.

    Raises:
        ValueError: ``index``, ``epoch`` or ``task`` out of range.
        RuntimeError: the seeder has no master seed yet.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(5)
        >>> first = sample_seed(3, 0, seeder=s)
        >>> first == sample_seed(3, 0, seeder=s), first == sample_seed(3, 1, seeder=s)
        (True, False)
    """
    if not is_int(index) or not 0 <= index < 2**64:
        raise ValueError(f"index must be an int in [0, 2**64), got {index!r}")
    index = int(index)
    s = resolve_seeder(seeder)
    hi, lo = index_words(index)
    return s.derive(Domain.SAMPLE, task, epoch, rank=hi, stream=lo)


class SeededDataset(torch.utils.data.Dataset):
    """Wrap a map-style dataset so that its randomness is reseeded per sample (or per epoch in each
    worker).

    Items are fetched with ``(epoch, index)`` keys, which :class:`seeder.DistributedSampler`
    yields when its dataset is a ``SeededDataset``. Attributes of the wrapped dataset are
    reachable through the wrapper.

    Args:
        dataset: a map-style dataset (with ``__getitem__``).
        per_sample: ``True``: before each item, ``random``, NumPy, torch CPU and every registered
            generator are seeded from :func:`sample_seed` (registered generator ``k`` gets word
            ``k`` of the same sequence); in the main process (``num_workers=0``) the three global
            RNGs are put back afterwards, so the training loop's stream is the same as with
            workers. ``False``: inside a worker, the first item of each epoch reseeds the worker as
            :data:`seeder.data.worker_init_fn` would for that epoch (fresh randomness every epoch
            even with ``persistent_workers=True``); in the main process it does nothing.
        task: the task of the derivation (1, the training loop, unless given).
        seeder: the :class:`seeder.Seeder` to seed from; the default one if ``None``.

    Raises:
        TypeError: ``dataset`` has no ``__getitem__``; an item is asked for without an
            ``(epoch, index)`` key.
        ValueError: ``task`` out of range, or a key with negative numbers.

    Example:
        >>> import random, seeder
        >>> s = seeder.Seeder(); s.init(9)
        >>> class Noisy(torch.utils.data.Dataset):
        ...     def __len__(self): return 4
        ...     def __getitem__(self, i): return i + random.random()
        >>> ds = SeededDataset(Noisy(), seeder=s)
        >>> ds[(0, 2)] == ds[(0, 2)] != ds[(1, 2)]
        True
    """

    def __init__(
        self,
        dataset: Any,
        *,
        per_sample: bool = True,
        task: int = TRAIN_TASK,
        seeder: Optional[Seeder] = None,
    ):
        if not callable(getattr(dataset, "__getitem__", None)):
            raise TypeError(
                f"SeededDataset wraps a map-style dataset (with __getitem__), got "
                f"{type(dataset).__name__}"
            )
        per_sample = check_bool(per_sample, "per_sample")
        check_seeder(seeder)
        self.dataset = dataset
        self.per_sample = per_sample
        self.task = check_key(task, "task")
        self._source = SeedSource(seeder)
        self._held = HeldRNGs("seeder.data.SeededDataset")  # the dataset's own RNG objects
        self._init_transient()

    def _init_transient(self) -> None:
        self._worker_epoch: Optional[int] = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_worker_epoch", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transient()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "_source", "per_sample", "task"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __len__(self) -> int:
        return len(self.dataset)

    def _key(self, key: Any) -> tuple[int, int]:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError(
                f"SeededDataset items are fetched with (epoch, index) keys, got {key!r}; build the "
                f"sampler over the wrapper: seeder.DistributedSampler(seeded_dataset), and pass "
                f"the same wrapper to the DataLoader"
            )
        epoch, index = key
        if not (is_int(index) and is_int(epoch)) or index < 0 or epoch < 0:
            raise ValueError(
                f"SeededDataset key must be (epoch, index) with non-negative ints, got {key!r}"
            )
        return int(epoch), int(index)

    def _deriver(self, master: int, epoch: int, hi: int, words: int) -> Any:
        return stream_seeds(master, int(Domain.SAMPLE), self.task, epoch, hi, words)

    def _sample_seeds(
        self, master: int, words: int, keys: list[tuple[int, int]]
    ) -> list[list[int]]:
        """The seed words of every key: one vectorised pass for a batch of one epoch, else one by
        one."""
        split = [(e, *index_words(i)) for e, i in keys]
        epoch, hi, _ = split[0]
        if len(keys) >= _VECTOR_MIN and all(e == epoch and h == hi for e, h, _ in split):
            streams = np.fromiter((lo for _, _, lo in split), dtype=np.uint32, count=len(keys))
            return self._deriver(master, epoch, hi, words).seeds(streams).tolist()
        return [self._deriver(master, e, h, words).seed(lo) for e, h, lo in split]

    def _fetch(self, keys: list[tuple[int, int]]) -> list[Any]:
        info = torch.utils.data.get_worker_info()
        if not self.per_sample:
            out = []
            for epoch, index in keys:
                if info is not None and epoch != self._worker_epoch:
                    _seed_worker(self._source, info.id, self.task, epoch, "SeededDataset")
                    self._worker_epoch = epoch
                out.append(self.dataset[index])
            return out
        return self._fetch_per_sample(keys, restore=info is None)

    def _fetch_per_sample(self, keys: list[tuple[int, int]], restore: bool) -> list[Any]:
        if not keys:
            return []
        master, _, _, gens = self._source.inputs("SeededDataset")
        all_seeds = self._sample_seeds(master, generator_words(gens), keys)
        # main process: leave the training loop's global streams untouched
        kept = keep_states(fetch_adapters()) if restore else None
        try:
            out = []
            for (_, index), seeds in zip(keys, all_seeds):
                seed_globals(seeds[0])
                for fn, _, stream in gens:
                    fn(seeds[stream])
                out.append(self.dataset[index])
            return out
        finally:
            if kept is not None:
                restore_states(kept, strict=True)

    def __getitem__(self, key: Any) -> Any:
        keys = [self._key(key)]
        return self._held.fetch(self.dataset, self._source.registered, lambda: self._fetch(keys))[0]

    def __getitems__(self, keys: Sequence[Any]) -> list[Any]:
        pairs = [self._key(k) for k in keys]
        return self._held.fetch(self.dataset, self._source.registered, lambda: self._fetch(pairs))

    def __repr__(self) -> str:
        return (
            f"seeder.data.SeededDataset({self.dataset!r}, per_sample={self.per_sample}, "
            f"task={self.task})"
        )
