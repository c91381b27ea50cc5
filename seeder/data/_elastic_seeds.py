"""The elastic loader's per-sample seed words, computed for the batches a fetching process is about
to ask for.

Sample ``p`` of an epoch's global order is seeded from ``derive(Domain.ELASTIC, task, epoch,
rank=p >> 32, stream=p & 0xFFFFFFFF)``. A process fetches runs of consecutive positions (its
rank's part of a global batch) at a fixed stride (the global batch size times the processes
that share the batches), and one vectorised pass costs about as much for thousands of positions
as for one batch. :class:`PositionSeeds` computes, at a miss, the next runs at the stride it saw
(1, then 4, 16 ... runs, up to :data:`AHEAD_POSITIONS` positions) and hands each out when asked;
a run asked for out of that pattern (a resume, another epoch) starts over from one run.

Example:
    >>> from seeder._seeding.derive import Domain, derive_seed
    >>> seeds = PositionSeeds()
    >>> seeds.words(7, 1, 0, 40, 2, 1) == [derive_seed(7, Domain.ELASTIC, 1, 0, 0, p) for p in (40, 41)]
    True
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from seeder._seeding.derive import MAX_KEY, Domain, stream_seeds

__all__ = ["AHEAD_POSITIONS", "position_seeds", "PositionSeeds"]

#: The most positions one pass computes ahead.
AHEAD_POSITIONS = 1 << 12
_ELASTIC = int(Domain.ELASTIC)


def position_seeds(
    master: int, task: int, epoch: int, positions: np.ndarray, width: int
) -> np.ndarray:
    """Seed words (``len(positions)`` x ``width``, uint64) of ``positions`` (uint64, one ``2**32``
    block).

    >>> from seeder._seeding.derive import derive_seed
    >>> int(position_seeds(7, 1, 0, np.array([2**32 + 3], np.uint64), 1)[0, 0]) == derive_seed(7, Domain.ELASTIC, 1, 0, 1, 3)
    True
    """
    hi = int(positions[0]) >> 32
    block = stream_seeds(master, _ELASTIC, task, epoch, hi, width)
    return block.seeds((positions & np.uint64(MAX_KEY)).astype(np.uint32))


class PositionSeeds:
    """Seed words of runs of positions, for one process: each run computed ahead in one pass with
    those that follow."""

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
