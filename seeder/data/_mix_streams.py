"""``seeder.data.Mix`` over sharded streams: a mix in lanes, its weights changed per lane.

Every source is a sharded stream (:mod:`seeder.data._shards`: ``num_shards`` and ``iter_shard``,
or a ``datasets.IterableDataset``). The mix has ``lanes`` shards (by default the fewest shards of
a source); lane ``l`` reads the shards ``s`` of each source with ``s % lanes == l``, and its
position ``k`` comes from the source that the mix's blocks choose for (master seed, epoch, lane,
``k``, weights). Within a lane a source gives its items in its own order, shard after shard; when
they run out its next pass reads the same shards in a keyed order of (master seed, epoch, source,
pass, lane). ``length`` positions make an epoch, split over the lanes (the first
``length % lanes`` lanes one more).

Read by :class:`seeder.IterableDataLoader` like any sharded stream: each position seeded by
(lane, position), a state of lane positions that resumes on any world size and worker count.
A lane resumed at position ``k`` reads each source up to the items it gave before ``k`` (counted
from the blocks, read again from the shards): O(position) reading, no draws that count.

Weights change at an epoch's start, ``((epoch, 0), weights)``, or at a position per lane,
``((epoch, {lane: position, ...}), weights)``: lane ``l``'s positions before its own point follow
the weights before, those from it on the new ones (each lane's blocks start again at its point).
A resume with other plain weights changes them where each lane stopped: the mix's own state
(loaded first) continues the saved history, and the loader reading the mix, loading its state
next, says where each lane stood (:meth:`StreamMix.resume_lanes`); the change, kept in the mix's
state, replays on any later resume and topology. A state that says where only some lanes stopped
(one rank's of several, not gathered) changes the weights from the next epoch's start, with a
:class:`seeder.SeederWarning`.

Example:
    >>> import torch, seeder
    >>> class Tags(torch.utils.data.IterableDataset):
    ...     num_shards = 2
    ...     def __init__(self, tag): self.tag = tag
    ...     def iter_shard(self, shard, start): return (self.tag for _ in range(start, 50))
    ...     def __iter__(self): return self.iter_shard(0, 0)
    >>> s = seeder.Seeder(); s.init(0)
    >>> mix = seeder.data.Mix({"a": Tags("a"), "b": Tags("b")}, length=20, seeder=s,
    ...     weights=[((0, 0), {"a": 1, "b": 0}), ((0, {0: 4, 1: 7}), {"a": 0, "b": 1})])
    >>> ["".join(mix.iter_shard(lane, 0)) for lane in (0, 1)]
    ['aaaabbbbbb', 'aaaaaaabbb']
"""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.utils.data

from seeder._checks import check_int
from seeder._errors import SeederWarning, StateError
from seeder._seeding.participant import LoadContext
from seeder.data._mix import PASS_WORD, Mix, describe_point
from seeder.data._mix_resume import check_history, continued
from seeder.data._mix_weights import Point, at_lane, check_point
from seeder.data._permutation import keyed_permutation
from seeder.data._shards import open_shard, shard_count
from seeder.data._streams import set_epoch_of

__all__ = ["StreamMix"]

logger = logging.getLogger("seeder")

#: A plain resume waiting for the loader's lane stops: the saved history, the new weights, epoch.
_Pending = tuple[list[list[Any]], dict[str, float], int]


class StreamMix(Mix, torch.utils.data.IterableDataset):
    """What ``seeder.data.Mix`` is over streams (module docs): a sharded stream of ``lanes``
    shards."""

    _pending: Optional[_Pending] = None

    def _measure(self, lanes: Any, length: Any) -> None:
        counts = []
        for name, src in zip(self.names, self.sources):
            count = shard_count(src)
            if count is None:
                raise ValueError(
                    f"Mix source {name!r} is a stream without shards: a stream mix reads each "
                    "source by shard (declare num_shards and iter_shard(shard, start); a datasets "
                    "stream has its own)"
                )
            counts.append(count)
        self.shard_counts = counts
        if length is None:
            raise ValueError("a Mix of streams needs length=: the positions of an epoch")
        self.lanes = self._lane_count(lanes, counts)
        self.length = check_int(length, "length", low=1)
        self.sizes = [0] * len(self.names)  # unknown: streams
        self._check_points(self.changes, ValueError, "")

    def _lane_count(self, lanes: Any, counts: list[int]) -> int:
        fewest = min(counts)
        if lanes is None:
            return fewest
        if not (isinstance(lanes, int) and 1 <= lanes <= fewest):
            raise ValueError(
                f"Mix lanes must be an int in [1, {fewest}] (the fewest shards of a source: "
                f"{dict(zip(self.names, counts))}), got {lanes!r}"
            )
        return lanes

    def _check_points(
        self, changes: Sequence[tuple[int, Point]], error: type[Exception], why: str
    ) -> None:
        """Raise ``error`` (its message ending in ``why``) unless every change is at an epoch's
        start or at one position per lane, each within its lane."""
        for epoch, point in changes[1:]:
            if isinstance(point, int):
                if point:
                    raise error(
                        "a Mix of streams changes weights at an epoch's start ((epoch, 0)) or at "
                        f"a position per lane ((epoch, {{lane: position, ...}})), got "
                        f"{(epoch, point)}: its lanes stop at different positions{why}"
                    )
                continue
            if len(point) != self.lanes:
                raise error(
                    f"the Mix weights change in epoch {epoch} at {list(point)}, positions of "
                    f"{len(point)} lane(s), but the mix has {self.lanes}: give "
                    f"{{lane: position}} for each lane 0..{self.lanes - 1}{why}"
                )
            ends = [self.lane_length(n) for n in range(self.lanes)]
            over = {n: p for n, p in enumerate(point) if p > ends[n]}
            if over:
                raise error(
                    f"the Mix weights change in epoch {epoch} at lane position(s) {over}, past "
                    f"the lanes' ends ({ends} positions): a lane changes weights at most at its "
                    f"end (its length){why}"
                )

    def resumed_weights(self, state: Any) -> list[list[Any]]:
        """:meth:`Mix.resumed_weights`, each change point checked against the lanes.

        Raises:
            StateError: as :meth:`Mix.resumed_weights`; a change point of other lanes.
        """
        history = super().resumed_weights(state)
        changes = [(int(e), check_point(p, "weights")) for e, p, _ in history]
        self._check_points(changes, StateError, ": build the mix as the saved run did")
        return history

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Read ``state``'s epoch and follow its weights (:meth:`resumed_weights`). Plain weights
        other than the saved ones start at the next epoch until the loader reading the mix loads
        its state and says where each lane stopped (:meth:`resume_lanes`).

        Args:
            state: what :meth:`state_dict` returned.

        Raises:
            StateError: the state does not continue in this mix; nothing changed.
        """
        history = self.resumed_weights(state)
        self._pending = None
        self.set_epoch(state["epoch"])
        if history == self._history():
            return
        self._follow(history)
        epoch, last = int(state["epoch"]), history[-1]
        if not (self._plain and last[:2] == [epoch + 1, 0] and last not in state["weights"]):
            return
        self._pending = ([list(h) for h in state["weights"]], dict(last[2]), epoch)
        if self._seeder is None or not any(
            getattr(p, "dataset", None) is self for p in self._seeder.participants()
        ):
            logger.info(
                "seeder.data.Mix: resumed with the weights %s from the start of epoch %d (the "
                "checkpoint's: %s, to the end of epoch %d): no loader reads the mix to say "
                "where each lane stopped",
                last[2],
                epoch + 1,
                history[-2][2],
                epoch,
            )

    def resume_lanes(self, epoch: int, stops: Mapping[int, Optional[int]]) -> None:
        """Take the plain weights this mix resumed with (:meth:`load_state_dict`) from each lane's
        stop: what the loader reading the mix does once it loaded its state. One log line names
        the weights and the epoch; without every lane's stop, a :class:`seeder.SeederWarning`
        says the weights change at the next epoch's start.

        Args:
            epoch: the epoch of the loader's state.
            stops: ``{lane: position}`` where the state says each lane stood (``None``: ended).
        """
        pending, self._pending = self._pending, None
        if pending is None or pending[2] != epoch:
            return
        old, new, _ = pending
        before = self._history()[-2][2]
        at = self._lane_stops(stops)
        if at is None:
            warnings.warn(
                f"seeder.data.Mix: the weights {new} start at epoch {epoch + 1} (the "
                f"checkpoint's {before} finish epoch {epoch}): this rank's state has only lanes "
                f"{sorted(stops)} of {self.lanes}. To change them at each lane's stop, load a "
                "seeder.gather_state_dict() on every rank",
                SeederWarning,
                stacklevel=2,
            )
            return
        if at == tuple(self.lane_length(n) for n in range(self.lanes)):
            logger.info(
                "seeder.data.Mix: resumed with the weights %s from the start of epoch %d (the "
                "checkpoint's: %s; every lane of epoch %d had ended)",
                new,
                epoch + 1,
                before,
                epoch,
            )
            return
        self._follow(continued(old, new, (epoch, at)))
        logger.info(
            "seeder.data.Mix: resumed with the weights %s in epoch %d from each lane's stop, %s "
            "(the checkpoint's: %s before it); the positions before stay as they were",
            new,
            epoch,
            describe_point(at),
            before,
        )

    def _check_stops(self, stops: Mapping[int, Optional[int]]) -> None:
        """Raise :class:`seeder.StateError` unless every stop lies within its lane."""
        over = {n: p for n, p in stops.items() if p is not None and p > self.lane_length(n)}
        if over:
            raise StateError(
                f"the loader's state has lane(s) of the Mix at {over}, past their ends (lanes of "
                f"{self.lane_length(0)} positions or one less): the state is corrupt; load the "
                "state saved with this mix"
            )

    def _lane_stops(self, stops: Mapping[int, Optional[int]]) -> Optional[Point]:
        """Every lane's stop (an ended lane at its end), ``None`` without every lane's."""
        if set(stops) != set(range(self.lanes)):
            return None
        at = []
        for lane in range(self.lanes):
            stop = stops[lane]
            at.append(self.lane_length(lane) if stop is None else int(stop))
        return check_point(at, "stops")

    def reader_stop(self) -> Optional[tuple[int, int]]:
        """``None``: a mix of streams stops at a position per lane, which the loader reading it
        says (:meth:`resume_lanes`).

        >>> StreamMix.reader_stop(None) is None
        True
        """
        return None

    @property
    def num_shards(self) -> int:
        """The lanes: the mix's shards."""
        return self.lanes

    def stream_state(self) -> dict[str, Any]:
        """What a loader's state keeps of the mix: its sources, lanes, length and weights.

        >>> import torch, seeder
        >>> class One(torch.utils.data.IterableDataset):
        ...     num_shards = 1
        ...     def iter_shard(self, shard, start): return iter(range(start, 4))
        ...     def __iter__(self): return self.iter_shard(0, 0)
        >>> s = seeder.Seeder(); s.init(0)
        >>> Mix({"a": One()}, weights={"a": 1}, length=4, seeder=s).stream_state()["weights"]
        [[0, 0, {'a': 1.0}]]
        """
        return {
            "names": list(self.names),
            "lanes": self.lanes,
            "length": self.length,
            "weights": self._history(),
        }

    def check_stream_state(
        self,
        saved: Any,
        epoch: int,
        load: Optional[LoadContext] = None,
        stops: Optional[Mapping[int, Optional[int]]] = None,
    ) -> None:
        """Raise :class:`seeder.StateError` unless a state saved with ``saved`` (its
        :meth:`stream_state`) continues in this mix: the same sources, lanes and length, and the
        saved weights the start of this mix's, a change after them in a later epoch or, in the
        saved epoch, at or after each lane's stop (a change of weights is given, not guessed);
        in a seeder load, plain weights (the mix's own part continues the saved ones).

        Args:
            saved: ``stream_state()`` of the mix the state was saved with.
            epoch: the epoch the state stands in.
            load: the run of a seeder load, else ``None``.
            stops: ``{lane: position}`` where the state says lanes stood (``None``: ended).

        Raises:
            StateError: what differs, and the ``weights=`` that continues with new weights.
        """
        self._same_build(saved)
        old, new = saved["weights"], self._history()
        check_history(old, self.names)
        changes = [(int(e), check_point(p, "weights")) for e, p, _ in old]
        self._check_points(changes, StateError, ": the state is corrupt")
        self._check_stops(stops or {})
        if self._plain and load is not None:
            return  # a seeder load: the mix's own part, checked and loaded first, continues them
        later = new[len(old) :]
        if new[: len(old)] == old and all(self._planned(h, epoch, stops) for h in later):
            return
        pairs = [((e, p), w) for e, p, w in old]
        at = None if stops is None else self._lane_stops(stops)
        here = (
            f"; from each lane's stop in epoch {epoch} on, + [(({epoch}, {list(at)}), new weights)]"
            if isinstance(at, tuple)
            else ""
        )
        raise StateError(
            f"the state was saved in epoch {epoch} over a Mix with the weights {old!r}, this "
            f"one has {new!r}: a mix keeps its past only with the saved weights as the start "
            f"of its own. To change them from a later epoch E on, pass weights={pairs!r} + "
            f"[((E, 0), new weights)]{here}"
        )

    def _same_build(self, saved: Any) -> None:
        """Raise :class:`seeder.StateError` unless ``saved`` is a stream state of a mix of these
        sources, lanes and length."""
        mine = self.stream_state()
        if not isinstance(saved, dict) or set(saved) != set(mine):
            raise StateError(
                f"this state was not saved over a seeder.data.Mix of streams ({saved!r:.80}): "
                "resume with the stream it was saved with"
            )
        for key in ("names", "lanes", "length"):
            if saved[key] != mine[key]:
                raise StateError(
                    f"the state was saved over a Mix with {key}={saved[key]!r}, this one has "
                    f"{mine[key]!r}: build the mix as the saved run did"
                )

    def _planned(
        self, change: list[Any], epoch: int, stops: Optional[Mapping[int, Optional[int]]]
    ) -> bool:
        """Whether ``change`` comes after the saved stop: a later epoch, or the saved one at or
        after each lane's stop (those ``stops`` name)."""
        if change[0] != epoch or stops is None:
            return bool(change[0] > epoch)
        point = check_point(change[1], "weights")
        return all(
            at_lane(point, lane) >= (self.lane_length(lane) if stop is None else stop)
            for lane, stop in stops.items()
        )

    def lane_length(self, lane: int) -> int:
        """Positions of ``lane`` in an epoch."""
        return self.length // self.lanes + (lane < self.length % self.lanes)

    def _reader(self, j: int, lane: int, skip: int) -> Iterator[Any]:
        """Source ``j``'s items in ``lane``, pass after pass, past the first ``skip`` (read now)."""
        src, count = self.sources[j], self.shard_counts[j]
        mine = np.arange(lane, count, self.lanes, dtype=np.int64)
        epoch = self.epoch
        set_epoch_of(src, epoch)

        def passes() -> Iterator[Any]:
            for p in itertools.count():
                order = mine
                if p:
                    perm = keyed_permutation(len(mine), self._key(PASS_WORD + j, p, lane))
                    order = mine[perm(np.arange(len(mine), dtype=np.int64))]
                given = 0
                for s in order.tolist():
                    for item in open_shard(src, s, 0, count):
                        given += 1
                        yield item
                if not given:
                    raise ValueError(
                        f"seeder.data.Mix: source {self.names[j]!r} has no items in lane {lane} "
                        f"(its shards {mine.tolist()}) but a weight > 0"
                    )

        items = passes()
        for _ in itertools.islice(items, skip):  # now: before any example is seeded
            pass
        return items

    def iter_shard(self, shard: int, start: int) -> Iterator[Any]:
        """Lane ``shard``'s positions from ``start`` on, each an item of the source chosen for it.

        Args:
            shard: the lane.
            start: the position in the lane.

        Returns:
            The iterator (the sources already read up to ``start``).
        """
        lane = shard
        counts = self._counts_at(start, lane)
        readers = [self._reader(j, lane, int(c)) for j, c in enumerate(counts)]
        return self._lane(lane, start, readers)

    def _lane(self, lane: int, start: int, readers: list[Iterator[Any]]) -> Iterator[Any]:
        for k in range(start, self.lane_length(lane)):
            j, _ = self._take(k, lane)
            yield next(readers[j])

    def __iter__(self) -> Iterator[Any]:
        for lane in range(self.lanes):
            yield from self.iter_shard(lane, 0)

    def __getitem__(self, position: int) -> Any:
        raise TypeError("a Mix of streams is read in order: iterate it (seeder.IterableDataLoader)")

    def __repr__(self) -> str:
        return f"seeder.data.Mix(<streams {self.names}>, lanes={self.lanes}, length={self.length})"
