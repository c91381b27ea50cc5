"""``seeder.data.Mix``: sources mixed by weight, position by position, as a pure function.

Position ``k`` of an epoch's mix comes from one source, chosen in blocks of :data:`BLOCK` positions:
the weights become integer quotas per block (largest remainder: each block holds every source's
share to within one position, a source of positive weight at least once), and each block's
sources are arranged by a keyed permutation of (master seed, task, epoch, segment, block). Which
source gives position ``k`` is a function of (master seed, epoch, ``k``, weights) alone.

Within a source, the mix takes its items in the source's own order (index 0, 1, ...); once a
source has given all its items (a pass), its next pass is a keyed permutation of (master seed,
task, epoch, source, pass): no item repeats before its pass ends.

Weights may change at a position of an epoch: ``weights=[((0, 0), before), ((e, K), after)]``
keeps epoch ``e``'s positions ``< K`` as they were (each source's count of items before ``K``
included) and follows ``after`` from ``K`` on, and in every later epoch: a run resumed at
position ``K`` of epoch ``e`` with other weights continues the epoch as if it had been built that
way, and one log line says so.

A mix built with plain weights (a dict) loading a state saved with other weights does the same
by itself: the saved history up to the state's stop (where the loader reading the mix in order
stood when it was saved, :meth:`Mix.reader_stop`), these weights from there on, one log line.

Over streams, ``Mix`` is a :class:`seeder.data._mix_streams.StreamMix` (every source an
``IterableDataset`` with shards): ``lanes`` shards, each lane a mix of its own whose weights may
change at a position per lane (``(epoch, {lane: position})``); its lanes follow the change points
of the history projected on them (:meth:`Mix._segments`).

Example:
    >>> import torch, seeder
    >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
    >>> mix = seeder.data.Mix({"a": torch.arange(100), "b": -torch.arange(1, 101)},
    ...                       weights={"a": 3, "b": 1}, seeder=s)
    >>> names = [mix.locate(k)[0] for k in range(BLOCK)]
    >>> names.count("a"), names.count("b")
    (768, 256)
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np
import torch
import torch.utils.data

from seeder._checks import check_int
from seeder._seeding.core import Seeder
from seeder._seeding.default import check_seeder, resolve_seeder
from seeder._seeding.derive import MAX_KEY, TRAIN_TASK, Domain, derive_seed
from seeder.data._mix_resume import STATE_VERSION, reader_stop, resumed_history
from seeder.data._mix_weights import (
    BLOCK,
    Point,
    Weights,
    at_lane,
    check_point,
    plain_point,
    quotas,
    weight_history,
)
from seeder.data._permutation import keyed_permutation
from seeder.data._workers import SeedSource

__all__ = ["Mix", "PASS_WORD", "describe_point"]

logger = logging.getLogger("seeder")

# rank words of the mix's keys in the SAMPLER domain (the samplers' shuffle keys use rank 0)
_PATTERN_WORD = 0x4D49_0000
#: The rank word of the keys of a source's passes (plus the source's index).
PASS_WORD = 0x4D50_0000
_GOLDEN, _M64 = 0x9E3779B97F4A7C15, (1 << 64) - 1


class Mix(torch.utils.data.Dataset):
    """Map-style sources mixed by weight: position ``k`` is an item of one source (module docs).

    Read it in order (``seeder.DataLoader(mix, shuffle=False)``, or
    ``seeder.ElasticDataLoader(mix, shuffle=False)``, whose global order is the positions): the
    mix does the shuffling, each source's items in its order, then its passes reshuffled.

    Args:
        sources: ``{name: dataset}``, each with ``__len__`` and ``__getitem__`` (not empty).
        weights: ``{name: weight}``; or ``[((0, 0), weights), ((epoch, position), weights), ...]``:
            the weights from each (epoch, position) on (increasing, the first ``(0, 0)``; for
            streams the position is ``0`` or one per lane, ``{lane: position, ...}``).
        length: positions per epoch (the sum of the sources' lengths by default; required for
            streams).
        lanes: for streams (every source an ``IterableDataset`` with shards): the mix's shards
            (the fewest shards of a source by default); see the module docs.
        seeder: a :class:`seeder.Seeder` other than the default one (initialised first).
        task: the reseed task whose epoch the mix follows (1).

    Raises:
        ValueError: bad weights (negative, NaN, infinite, all zero, names that do not match the
            sources), an empty source, bad positions.
        TypeError: ``sources`` is not a dict of datasets.
        RuntimeError: the seeder is not initialised.

    Example:
        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
        >>> mix = seeder.data.Mix({"x": torch.arange(3), "y": torch.arange(10, 12)},
        ...                       weights={"x": 1, "y": 1}, length=6, seeder=s)
        >>> sorted(int(mix[k]) for k in range(len(mix)))
        [0, 1, 2, 2, 10, 11]
    """

    def __new__(cls, sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        if (
            cls is Mix
            and isinstance(sources, Mapping)
            and sources
            and all(isinstance(v, torch.utils.data.IterableDataset) for v in sources.values())
        ):
            if Mix._over_streams is None:
                raise RuntimeError(
                    "a Mix of streams is seeder.data._mix_streams.StreamMix: build it as "
                    "seeder.data.Mix, which imports it"
                )
            return super().__new__(Mix._over_streams)
        return super().__new__(cls)

    #: What ``Mix`` is over streams: its subclass that is an ``IterableDataset``
    #: (:class:`seeder.data._mix_streams.StreamMix`, which ``seeder.data.Mix`` imports).
    _over_streams: Optional[type] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if issubclass(cls, torch.utils.data.IterableDataset):
            Mix._over_streams = cls

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Union[Weights, Sequence[tuple[tuple[int, int], Weights]]],
        *,
        length: Optional[int] = None,
        lanes: Optional[int] = None,
        seeder: Optional[Seeder] = None,
        task: int = TRAIN_TASK,
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(f"Mix takes a dict of name to dataset, got {sources!r:.80}")
        self.names = [str(n) for n in sources]
        self.sources = [sources[n] for n in sources]
        # plain weights: a resume with other weights keeps the checkpoint's past (load_state_dict)
        self._plain = isinstance(weights, Mapping)
        self.changes, self.weights = weight_history(weights, self.names)
        self.quotas = [quotas(list(w.values())) for w in self.weights]
        self._measure(lanes, length)
        self.length = sum(self.sizes) if length is None else check_int(length, "length", low=1)
        self._given = self._history()  # as built: what a loaded state is compared with
        self.task = check_int(task, "task", low=0)
        seeder = resolve_seeder(check_seeder(seeder))
        if not seeder.initialized:
            raise RuntimeError(
                "seeder.data.Mix derives its order from the master seed: call "
                "seeder.init(master_seed=...) first"
            )
        self._source = SeedSource(seeder)
        self._seeder: Optional[Seeder] = seeder  # its loaders say where a resume stops; not pickled
        last = seeder.last_reseed
        self._epoch = torch.tensor(last[1] if last is not None and last[0] == task else 0)
        self._epoch.share_memory_()  # persistent workers see the epoch the main process sets
        self._cache: dict[Any, Any] = {}
        for i in range(1, len(self.changes)):
            logger.info(
                "seeder.data.Mix: positions from %s of epoch %d on follow the weights %s "
                "(before: %s); those before stay as they were",
                describe_point(self.changes[i][1]),
                self.changes[i][0],
                self.weights[i],
                self.weights[i - 1],
            )
        seeder.join(self)

    def _measure(self, lanes: Any, length: Any) -> None:
        """The sources' sizes (map-style: their lengths)."""
        if lanes is not None:
            raise ValueError("Mix lanes= applies to a mix of streams; map-style sources have none")
        lane_points = [(e, list(p)) for e, p in self.changes if not isinstance(p, int)]
        if lane_points:
            raise ValueError(
                f"Mix weights {lane_points} change at a position per lane: a mix of streams has "
                "lanes, map-style sources have one order of positions ((epoch, position))"
            )
        self.sizes = [len(src) for src in self.sources]
        empty = [n for n, size in zip(self.names, self.sizes) if size == 0]
        if empty:
            raise ValueError(f"Mix sources {empty} are empty: a source needs at least one item")

    # ------------------------------------------------------------------ state
    seeder_kind = "mix"
    #: The same state on every rank: it moves to another world size with the elastic loaders.
    seeder_elastic = True

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the mix: its sources, length and weights, the epoch, and where
        the loader reading it stands.

        Returns:
            ``{"format": "seeder.mix", "version", "epoch", "names", "length", "weights",
            "stop"}``: plain values (``weights``: ``[[epoch, position, {name: weight}], ...]``,
            a mix of streams' position ``0`` or a list by lane;
            ``stop``: ``[epoch, position]`` of the in-order loader reading the mix, ``None``
            without one: :meth:`reader_stop`).

        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> Mix({"a": torch.arange(4)}, weights={"a": 2}, seeder=s).state_dict()["weights"]
        [[0, 0, {'a': 2.0}]]
        """
        stop = self.reader_stop()
        return {
            "format": "seeder.mix",
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "names": list(self.names),
            "length": self.length,
            "weights": self._history(),
            "stop": None if stop is None else list(stop),
        }

    def _history(self) -> list[list[Any]]:
        return [[e, plain_point(p), dict(w)] for (e, p), w in zip(self.changes, self.weights)]

    def reader_stop(self) -> Optional[tuple[int, int]]:
        """``(epoch, position)``: where the loader reading this mix in order stands, the first
        position of the epoch it has not handed out (over all ranks); ``None`` without one
        (:func:`seeder.data._mix_resume.reader_stop`).

        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
        >>> mix = Mix({"a": torch.arange(8)}, weights={"a": 1}, seeder=s)
        >>> loader = seeder.DataLoader(mix, batch_size=3, shuffle=False, seeder=s)
        >>> _ = next(iter(loader)); mix.reader_stop()
        (0, 3)
        """
        return reader_stop(
            self, self.epoch, self.length, self._seeder.participants() if self._seeder else []
        )

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` unless the run that saved ``state`` continues in this
        mix (:meth:`resumed_weights`). Changes nothing.

        Args:
            state: what :meth:`state_dict` returned.

        Raises:
            StateError: what differs, and the ``weights=`` that continues with new weights.
        """
        self.resumed_weights(state)

    def resumed_weights(self, state: Any) -> list[list[Any]]:
        """The weights (``[[epoch, position, {name: weight}], ...]``) this mix follows once
        ``state`` is loaded. Changes nothing.

        The same sources and length as the saved run. Built with a history, the mix keeps its
        own, which must start with the saved one (a change after it in or after the saved
        epoch). Built with plain weights other than those the state stands in, it follows the
        saved history up to the state's stop (:meth:`reader_stop` when it was saved) and these
        weights from there on: the past as it was (:mod:`seeder.data._mix_resume`).

        Args:
            state: what :meth:`state_dict` returned.

        Returns:
            The history.

        Raises:
            StateError: not a mix state; other sources or length; a corrupt state; other weights
                this mix cannot follow, naming the ``weights=`` history to pass.

        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> saved = Mix({"a": torch.arange(4)}, weights={"a": 1}, seeder=s).state_dict()
        >>> saved["stop"] = [0, 3]
        >>> t = seeder.Seeder(); t.init(0)
        >>> Mix({"a": torch.arange(4)}, weights={"a": 2}, seeder=t).resumed_weights(saved)
        [[0, 0, {'a': 1.0}], [0, 3, {'a': 2.0}]]
        """
        streams = isinstance(self, torch.utils.data.IterableDataset)
        return resumed_history(
            state, self._given, self._plain, self.names, self.length, streams=streams
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Read ``state``'s epoch and follow its weights (:meth:`resumed_weights`; one log line
        when plain weights start at its stop); later epochs follow the seeder's reseeds.

        Args:
            state: what :meth:`state_dict` returned.

        Raises:
            StateError: the state does not continue in this mix; nothing changed.
        """
        history = self.resumed_weights(state)
        self.set_epoch(state["epoch"])  # a resume inside the epoch skips its reseed
        if history == self._history():
            return
        self._follow(history)
        last = history[-1]
        if len(history) > 1 and last[2] != history[-2][2] and last[2] == self._given[0][2]:
            logger.info(
                "seeder.data.Mix: resumed with the weights %s from position %d of epoch %d on "
                "(the checkpoint's: %s); the positions before stay as they were",
                last[2],
                last[1],
                last[0],
                history[-2][2],
            )

    def _follow(self, history: list[list[Any]]) -> None:
        """Follow the checked ``history`` from now on."""
        self.changes = [(int(e), check_point(p, "weights")) for e, p, _ in history]
        self.weights = [{n: float(w[n]) for n in self.names} for _, _, w in history]
        self.quotas = [quotas(list(w.values())) for w in self.weights]
        self._cache = {}

    def elastic_step(self, state: dict[str, Any]) -> None:
        """A mix has no step of its own: a world change takes it from the loader.

        >>> Mix.elastic_step(None, {}) is None
        True
        """
        return None

    # ------------------------------------------------------------------ epoch
    @property
    def epoch(self) -> int:
        """The epoch whose mix ``mix[k]`` reads."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch``'s mix (what ``seeder.reseed(task, epoch)`` does).

        Args:
            epoch: an int >= 0.
        """
        self._epoch.fill_(check_int(epoch, "epoch", low=0))

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook of ``seeder.reseed``: a reseed of the mix's task sets its epoch."""
        if task_id == self.task:
            self.set_epoch(epoch)

    # ------------------------------------------------------------------ the mix
    def __len__(self) -> int:
        return self.length

    def _key(self, word: int, stream: int, lane: int = 0) -> int:
        master = self._source.inputs("seeder.data.Mix").master
        key = derive_seed(master, Domain.SAMPLER, self.task, self.epoch, word, stream)
        return (key + lane * _GOLDEN) & _M64  # a stream's lanes: keys apart (0: map-style's)

    def _segments(self, lane: int = 0) -> tuple[list[int], list[int]]:
        """The epoch's segments of ``lane``: where each starts, and which weights (index of the
        history) it follows (the history's change points at this lane's positions)."""
        epoch = self.epoch
        key = ("segments", epoch, lane)
        hit = self._cache.get(key)
        if hit is None:
            changes = [(e, at_lane(p, lane)) for e, p in self.changes]
            base = max(i for i, c in enumerate(changes) if c <= (epoch, 0))
            later = [i for i, c in enumerate(changes) if c[0] == epoch and c[1] > 0]
            hit = self._cache[key] = ([0] + [changes[i][1] for i in later], [base] + later)
        return hit

    def _pattern(self, segment: int, block: int, lane: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Block ``block`` of the weights ``segment`` (an index of the history): its sources, and
        each source's count before each offset."""
        key = ("pattern", self.epoch, segment, block, lane)
        hit = self._cache.get(key)
        if hit is None:
            q = self.quotas[segment]
            base = np.repeat(np.arange(len(q)), q)
            if block > MAX_KEY:
                raise OverflowError("seeder.data.Mix: more than 2**42 positions in one epoch")
            perm = keyed_permutation(BLOCK, self._key(_PATTERN_WORD + segment, block, lane))
            pattern = base[perm(np.arange(BLOCK, dtype=np.int64))]
            before = np.zeros((BLOCK + 1, len(q)), dtype=np.int64)
            np.cumsum(pattern[:, None] == np.arange(len(q))[None, :], axis=0, out=before[1:])
            if len(self._cache) > 64:
                self._cache.clear()
            hit = self._cache[key] = (pattern, before)
        return hit

    def _counts(self, segment: int, offset: int, lane: int = 0) -> np.ndarray:
        """Each source's items in the first ``offset`` positions of ``segment``."""
        block, rest = divmod(offset, BLOCK)
        _, before = self._pattern(segment, block, lane)
        return block * self.quotas[segment] + before[rest]

    def _base(self, n: int, lane: int = 0) -> np.ndarray:
        """Each source's items before the epoch's ``n``-th segment starts."""
        key = ("base", self.epoch, n, lane)
        hit = self._cache.get(key)
        if hit is None:
            starts, which = self._segments(lane)
            hit = np.zeros(len(self.names), dtype=np.int64)
            for s in range(n):
                hit = hit + self._counts(which[s], starts[s + 1] - starts[s], lane)
            self._cache[key] = hit
        return hit

    def _take(self, k: int, lane: int = 0) -> tuple[int, int]:
        """``(source, count)``: position ``k`` (of ``lane``) is item ``count`` of the epoch of
        source ``j``."""
        starts, which = self._segments(lane)
        n = bisect.bisect_right(starts, k) - 1
        segment = which[n]
        block, rest = divmod(k - starts[n], BLOCK)
        pattern, before = self._pattern(segment, block, lane)
        j = int(pattern[rest])
        return j, int(self._base(n, lane)[j] + block * self.quotas[segment][j] + before[rest, j])

    def _counts_at(self, k: int, lane: int = 0) -> np.ndarray:
        """Each source's items before position ``k`` (of ``lane``)."""
        starts, which = self._segments(lane)
        n = bisect.bisect_right(starts, k) - 1
        return self._base(n, lane) + self._counts(which[n], k - starts[n], lane)

    def locate(self, position: int) -> tuple[str, int]:
        """The source and index of ``position`` in the current epoch's mix.

        Args:
            position: an int >= 0 (past ``len(mix)`` too: the mix goes on).

        Returns:
            ``(source name, index in that source)``.

        Example:
            >>> import torch, seeder
            >>> s = seeder.Seeder(); s.init(1)
            >>> mix = seeder.data.Mix({"x": torch.arange(3)}, weights={"x": 1}, seeder=s)
            >>> [mix.locate(k) for k in range(4)][:3]
            [('x', 0), ('x', 1), ('x', 2)]
        """
        j, count = self._take(check_int(position, "position", low=0))
        size = self.sizes[j]
        passes, at = divmod(count, size)
        if passes == 0:
            return self.names[j], at
        if passes > MAX_KEY:
            raise OverflowError("seeder.data.Mix: a source ran more than 2**32 passes")
        perm = keyed_permutation(size, self._key(PASS_WORD + j, passes))
        return self.names[j], int(perm(np.array([at], dtype=np.int64))[0])

    def __getitem__(self, position: int) -> Any:
        name, index = self.locate(int(position))
        return self.sources[self.names.index(name)][index]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}, "_seeder": None}

    def __repr__(self) -> str:
        # the data, not the weights: a loader's dataset identity hashes the repr, and the
        # weights may change on a resume
        return f"seeder.data.Mix({dict(zip(self.names, self.sizes))}, length={self.length})"


def describe_point(point: Point) -> str:
    """A change point in a log line.

    >>> describe_point(5), describe_point((3, 0))
    ('5', 'lane positions [3, 0] (per lane)')
    """
    return str(point) if isinstance(point, int) else f"lane positions {list(point)} (per lane)"
