"""Sharded streams: which shards a process reads, from where, and each example's seed.

A stream is *sharded* when it says how many shards it has and reads any one of them from any
position:

* a plain ``IterableDataset`` declares ``num_shards`` (an int >= 1) and
  ``iter_shard(shard, start)``, an iterator over shard ``shard``'s examples from position
  ``start`` on (the same examples, in the same order, in every process and run);
* a ``datasets.IterableDataset`` uses its own shards (``n_shards``): shard ``i`` is
  ``dataset.shard(n_shards, i)``, read from ``start`` by skipping ``start`` examples.

The shards of an epoch are *dealt*: the epoch's ``order`` (shard ids, :func:`shard_order`: a
``datasets`` stream's own order of the epoch, else ``0, 1, ...``) goes to the ``P = world_size *
num_workers`` processes in turn, process ``p = rank * num_workers + worker`` taking ``order[p::P]``
(:func:`deal`), and each process reads its shards one after the other. Example ``pos`` of shard
``s`` is seeded from the elastic loader's per-sample key at the virtual position
``2**63 + s * 2**32 + pos`` (:func:`virtual_position`; the elastic loader's positions stay below
``2**63``): what it draws is a function of (master seed, epoch, shard, position), whatever the
topology. Positions are counted as the training loop gets the examples, so a state of every shard's
position continues the epoch on any topology: every example once, each drawing what it drew in
the uninterrupted run.

Example:
    >>> deal([0, 1, 2, 3, 4], 2)
    [[0, 2, 4], [1, 3]]
    >>> hex(virtual_position(3, 5))
    '0x8000000300000005'
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np

from seeder._checks import is_int
from seeder._errors import StateError
from seeder._seeding.derive import MAX_KEY

__all__ = [
    "MAX_SHARDS",
    "shard_count",
    "is_sharded",
    "open_shard",
    "deal",
    "shard_order",
    "virtual_position",
    "fresh_assignment",
    "redeal",
    "check_positions",
]

logger = logging.getLogger("seeder")

#: The most shards a stream may have (one derivation word, its top bit marking a stream).
MAX_SHARDS = 1 << 31
_STREAM_BIT = 1 << 63


def is_sharded(dataset: Any) -> bool:
    """Whether ``dataset`` declares shards through the protocol (``num_shards``, ``iter_shard``).

    >>> is_sharded([1]), is_sharded(type("S", (), {"num_shards": 2, "iter_shard": len})())
    (False, True)
    """
    return hasattr(dataset, "num_shards") and callable(getattr(dataset, "iter_shard", None))


def _is_datasets(dataset: Any) -> bool:
    return type(dataset).__module__.startswith("datasets.")


def shard_count(dataset: Any) -> Optional[int]:
    """The shards ``dataset`` has (module docs), or ``None`` for a stream that declares none.

    Args:
        dataset: the loader's dataset.

    Returns:
        ``num_shards`` of the protocol, ``n_shards`` of a ``datasets.IterableDataset``, else
        ``None``.

    Raises:
        ValueError: a declared count that is not an int in ``[1, 2**31]``; a ``datasets`` stream
            already split by node (give seeder the whole stream).

    >>> class Two:
    ...     num_shards = 2
    ...     def iter_shard(self, shard, start): return iter(())
    >>> shard_count(Two()), shard_count([1, 2])
    (2, None)
    """
    if _is_datasets(dataset):
        if getattr(dataset, "_distributed", None) is not None:
            raise ValueError(
                "this datasets stream is already split by node (split_dataset_by_node): "
                "seeder deals its shards over ranks and workers itself; pass the whole stream"
            )
        count = dataset.n_shards
    elif is_sharded(dataset):
        count = dataset.num_shards
    else:
        return None
    if not (is_int(count) and 1 <= count <= MAX_SHARDS):
        raise ValueError(
            f"{type(dataset).__name__}.num_shards must be an int in [1, 2**31], got {count!r}"
        )
    return int(count)


def _unbatch(batch: Any) -> Any:
    """The one example of a ``datasets`` batch of size 1 (a dict of columns)."""
    return {k: v[0] for k, v in batch.items()}


def open_shard(dataset: Any, shard: int, start: int, num_shards: int) -> Iterator[Any]:
    """An iterator over shard ``shard``'s examples from position ``start`` on.

    Args:
        dataset: a sharded stream (module docs).
        shard: the shard, in ``[0, num_shards)``.
        start: how many of its examples to pass over.
        num_shards: the stream's shard count.

    Returns:
        The iterator (a ``datasets`` shard read past ``start`` examples, which it reads).

    >>> class Rows:
    ...     num_shards = 2
    ...     def iter_shard(self, shard, start):
    ...         return iter(range(10 * shard + start, 10 * shard + 3))
    >>> list(open_shard(Rows(), 1, 1, 2))
    [11, 12]
    """
    if _is_datasets(dataset):
        one = dataset.shard(num_shards=num_shards, index=shard, contiguous=True)
        one.set_epoch(dataset.epoch)  # a shard starts at epoch 0: its buffer follows the stream's
        # iter() reads the shard itself: __iter__ would split it again over torch's workers
        rows = map(_unbatch, one.iter(batch_size=1))
        for _ in itertools.islice(rows, start):  # now, before the first example is seeded
            pass
        return rows
    return iter(dataset.iter_shard(shard, start))


def deal(order: Sequence[int], processes: int) -> list[list[int]]:
    """``order`` dealt to ``processes`` in turn: process ``p`` gets ``order[p::processes]``.

    >>> deal([5, 6, 7], 4)
    [[5], [6], [7], []]
    """
    return [list(order[p::processes]) for p in range(processes)]


def shard_order(dataset: Any, num_shards: int, epoch: int) -> list[int]:
    """The order epoch ``epoch`` deals the shards in.

    A ``datasets.IterableDataset`` reads its shards in another order every epoch past 0: it
    shuffles its data sources with ``numpy.random.default_rng(epoch)`` as it starts iterating
    (``set_epoch``), unless ``.skip``/``.take`` fix the order. Its order is that: the shard ids
    ``0 .. n-1`` (of ``dataset.shard(n, i)``) shuffled by ``default_rng(epoch).shuffle``, checked
    against what ``datasets`` does to the sources of the stream; a stream whose sources
    ``datasets`` shuffles otherwise (several sources: ``interleave_datasets``,
    ``concatenate_datasets``) is dealt in the order ``0 .. n-1`` every epoch (logged). Any other
    stream: ``0 .. n-1``.

    Args:
        dataset: a sharded stream.
        num_shards: its shard count.
        epoch: the epoch.

    Returns:
        The shard ids, each once.

    >>> shard_order([1, 2], 3, 5)
    [0, 1, 2]
    """
    order = list(range(num_shards))
    if not _is_datasets(dataset) or epoch == 0 or num_shards == 1:
        return order
    from datasets.iterable_dataset import DataSourcesShufflingDisallowed

    source = dataset._ex_iterable
    try:
        shuffled = source.shuffle_data_sources(np.random.default_rng(epoch))
    except DataSourcesShufflingDisallowed:  # .skip()/.take(): datasets keeps the order
        return order
    np.random.default_rng(epoch).shuffle(order)
    if not _sources_in(source, shuffled, order):
        logger.info(
            "seeder.IterableDataLoader: this datasets stream shuffles its sources otherwise than "
            "one list of %d shards; its shards are dealt in the order 0..%d every epoch",
            num_shards,
            num_shards - 1,
        )
        return list(range(num_shards))
    return order


def _leaf(node: Any) -> Any:
    """The one examples iterable at the bottom of a ``datasets`` pipeline, ``None`` for several."""
    while not getattr(node, "ex_iterables", None):
        child = getattr(node, "ex_iterable", None)
        if child is None:
            return node
        node = child
    return None


def _sources_in(source: Any, shuffled: Any, order: list[int]) -> bool:
    """Whether ``shuffled`` reads the sources of ``source`` in ``order``: every list of its
    arguments as long as the shards, and at least one, taken in that order (the same objects)."""
    old, new = _leaf(source), _leaf(shuffled)
    kwargs, moved = getattr(old, "kwargs", None), getattr(new, "kwargs", None)
    if not (isinstance(kwargs, dict) and isinstance(moved, dict)):
        return False
    lists = [k for k, v in kwargs.items() if isinstance(v, list) and len(v) == len(order)]
    return bool(lists) and all(
        isinstance(moved.get(k), list)
        and len(moved[k]) == len(order)
        and all(x is kwargs[k][i] for x, i in zip(moved[k], order))
        for k in lists
    )


def virtual_position(shard: int, pos: int) -> int:
    """The elastic loader's per-sample position that seeds example ``pos`` of shard ``shard``.

    Raises:
        OverflowError: ``pos`` past ``2**32 - 1`` (one derivation word per shard).

    >>> virtual_position(0, 0) == 2**63
    True
    """
    if pos > MAX_KEY:
        raise OverflowError(
            f"shard {shard} reached example {pos}: a shard's examples are numbered up to "
            "2**32 - 1; split the stream into more shards"
        )
    return _STREAM_BIT | (shard << 32) | pos


def fresh_assignment(
    num_shards: int,
    rank: int,
    world_size: int,
    workers: int,
    order: Optional[Sequence[int]] = None,
) -> list[list[list[int]]]:
    """This rank's workers' shards at the start of an epoch: ``[[shard, 0], ...]`` per worker, the
    epoch's ``order`` (:func:`shard_order`; ``0 .. num_shards - 1`` by default) dealt.

    >>> fresh_assignment(5, 1, 2, 1)
    [[[1, 0], [3, 0]]]
    >>> fresh_assignment(3, 0, 1, 2, order=[2, 0, 1])
    [[[2, 0], [1, 0]], [[0, 0]]]
    """
    dealt = deal(range(num_shards) if order is None else order, world_size * workers)
    return [[[s, 0] for s in dealt[rank * workers + w]] for w in range(workers)]


def redeal(
    positions: dict[int, int], rank: int, world_size: int, workers: int
) -> list[list[list[int]]]:
    """This rank's workers' shards when resuming from ``positions`` on a new topology.

    The shards not ended, by shard id, dealt to every process of the new world.

    >>> redeal({0: 4, 3: 1, 5: 0}, 0, 1, 2)
    [[[0, 4], [5, 0]], [[3, 1]]]
    """
    dealt = deal(sorted(positions), world_size * workers)
    return [[[s, positions[s]] for s in dealt[rank * workers + w]] for w in range(workers)]


def check_positions(positions: Any, ended: Any, num_shards: int, what: str) -> dict[int, int]:
    """``positions`` (``[[shard, pos], ...]``) as a dict, checked with ``ended`` to cover every
    shard once.

    Args:
        positions: the shards not ended and their positions.
        ended: the ended shards.
        num_shards: the stream's shard count.
        what: names the state in messages.

    Returns:
        ``{shard: pos}``.

    Raises:
        StateError: a pair that is not two ints in range, a shard twice, a shard missing.

    >>> check_positions([[1, 3]], [0], 2, "s")
    {1: 3}
    """
    if not isinstance(positions, list) or not isinstance(ended, list):
        raise StateError(f"{what}: 'positions' and 'ended' must be lists; load the state saved")
    out: dict[int, int] = {}
    for pair in positions:
        if not (
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and is_int(pair[0])
            and is_int(pair[1])
            and 0 <= pair[0] < num_shards
            and 0 <= pair[1] <= MAX_KEY
        ):
            raise StateError(
                f"{what}: {pair!r:.80} is no [shard, position] of a stream of {num_shards} "
                "shards; the state is corrupt: load the state the loader saved"
            )
        if int(pair[0]) in out:
            raise StateError(f"{what}: shard {pair[0]} appears twice; the state is corrupt")
        out[int(pair[0])] = int(pair[1])
    if not all(is_int(s) and 0 <= s < num_shards for s in ended):
        raise StateError(f"{what}: 'ended' lists a shard outside [0, {num_shards}); corrupt state")
    both = set(out) & {int(s) for s in ended}
    missing = set(range(num_shards)) - set(out) - {int(s) for s in ended}
    if both or missing:
        raise StateError(
            f"{what}: shard(s) {sorted(missing)[:10]} are missing"
            + (f" and {sorted(both)[:10]} both ended and open" if both else "")
            + f" (of {num_shards}): the state holds some ranks' positions only; gather it on every "
            "rank with seeder.gather_state_dict() at the same step (rank 0 writes it) and load that"
        )
    return out
