"""``seeder.data.Mix`` over streams: a sharded stream whose shards are *lanes* of the mix.

Every source is a sharded stream (:mod:`seeder.data._shards`: ``num_shards`` and
``iter_shard``, or a ``datasets.IterableDataset``). The mix has ``lanes`` shards (by default the
fewest shards of a source); lane ``l`` reads the shards ``s`` of each source with
``s % lanes == l``, and its position ``k`` comes from the source that the mix's blocks choose for
(master seed, epoch, lane, ``k``, weights) (:mod:`seeder.data._mix`). Within a lane a source gives
its items in its own order, shard after shard; when they run out its next pass reads the same
shards in a keyed order of (master seed, epoch, source, pass, lane). ``length`` positions make an
epoch, split over the lanes (the first ``length % lanes`` lanes one more).

Read by :class:`seeder.IterableDataLoader` like any sharded stream: each position seeded by
(lane, position), a state of lane positions that resumes on any world size and worker count.
A lane resumed at position ``k`` reads each source up to the items it gave before ``k`` (counted
from the blocks, read again from the shards): O(position) reading, no draws that count.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch.utils.data

from seeder.data._mix import _PASS_WORD, Mix
from seeder.data._permutation import keyed_permutation
from seeder.data._shards import open_shard, shard_count
from seeder.data._streams import set_epoch_of

__all__ = ["StreamMix"]


class StreamMix(Mix, torch.utils.data.IterableDataset):
    """What ``seeder.data.Mix`` is over streams (module docs): a sharded stream of ``lanes``
    shards."""

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
        fewest = min(counts)
        if lanes is None:
            lanes = fewest
        if not (isinstance(lanes, int) and 1 <= lanes <= fewest):
            raise ValueError(
                f"Mix lanes must be an int in [1, {fewest}] (the fewest shards of a source: "
                f"{dict(zip(self.names, counts))}), got {lanes!r}"
            )
        if length is None:
            raise ValueError("a Mix of streams needs length=: the positions of an epoch")
        self.lanes = lanes
        self.sizes = [0] * len(self.names)  # unknown: streams
        late = [c for c in self.changes[1:] if c[1] != 0]
        if late:
            raise ValueError(
                f"a Mix of streams changes weights at an epoch's start ((epoch, 0)), got {late}: "
                "its lanes stop at different positions"
            )

    @property
    def num_shards(self) -> int:
        """The lanes: the mix's shards."""
        return self.lanes

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
                    perm = keyed_permutation(len(mine), self._key(_PASS_WORD + j, p, lane))
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
        return (
            f"seeder.data.Mix(<streams {self.names}>, weights={self.weights[-1]}, "
            f"lanes={self.lanes}, length={self.length})"
        )
