"""The worker side of :class:`seeder.IterableDataLoader`: shares, per-batch seeds, states.

* :func:`stream_share` tells a plain iterable dataset which part of the data is its own:
  ``StreamShare(index, count, ...)`` with ``index = rank * num_workers + worker`` and
  ``count = world_size * num_workers``; keep the items ``i`` with ``i % count == index``.
* :class:`WorkerStream` is what torch's workers (or the main process with 0 workers)
  iterate in place of the user's dataset. Before drawing the items of its ``j``-th batch,
  worker ``w`` seeds ``random``, NumPy's global RNG, torch's CPU generator and the
  registered generators from ``derive_seed(master, Domain.STREAM, task, epoch, rank,
  stream=j * num_workers + w)``: a stream's randomness is a pure function of (master
  seed, epoch, rank, worker, batches produced). It yields ``(batch, record)`` where the
  record holds the worker, the batches produced and the dataset's ``state_dict()`` right
  after producing the batch; a last ``(None, record)`` with ``"end": True`` says the worker
  is exhausted.
* A worker resumes from its saved record: ``load_state_dict`` of the dataset's state, or,
  for a dataset without one (or a ``datasets`` stream with a shuffle buffer, whose buffer
  is not in its state), by replaying the batches it had produced, each seeded as before
  (counted; progress logged every :data:`REPLAY_LOG_EVERY` batches).

Example:
    >>> stream_share()
    StreamShare(index=0, count=1, rank=0, world_size=1, worker=0, num_workers=1, epoch=0)
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
import warnings
from collections.abc import Iterator
from typing import Any, Callable, NamedTuple, Optional

import torch
import torch.utils.data

from seeder._errors import SeederWarning, StateError
from seeder._seeding.derive import MAX_KEY, Domain, stream_seeds
from seeder.data._workers import SeedSource, seed_globals

__all__ = [
    "StreamShare",
    "stream_share",
    "WorkerStream",
    "is_stateful",
    "REPLAY_LOG_EVERY",
    "keep_batch",
    "set_epoch_of",
    "warn_threaded_maps",
    "check_dataset_state",
]

logger = logging.getLogger("seeder")

#: A replay logs its progress every this many batches.
REPLAY_LOG_EVERY = 1000


class StreamShare(NamedTuple):
    """Which part of an iterable dataset this process (rank and worker) reads: items ``i % count ==
    index``.

    Args:
        index: this process's share, ``rank * num_workers + worker``.
        count: the number of shares, ``world_size * num_workers``.
        rank: the global rank.
        world_size: the number of ranks.
        worker: the DataLoader worker id (0 without workers).
        num_workers: the workers per rank (1 without workers).
        epoch: the epoch the loader is in.

    Example:
        >>> share = StreamShare(3, 4, 1, 2, 1, 2, 0)
        >>> [i for i in range(10) if i % share.count == share.index]
        [3, 7]
    """

    # These two fields shadow tuple.index and tuple.count: their names are the public API.
    index: int  # type: ignore[assignment]
    count: int  # type: ignore[assignment]
    rank: int
    world_size: int
    worker: int
    num_workers: int
    epoch: int


_CURRENT: list[Optional[StreamShare]] = [None]


def stream_share() -> StreamShare:
    """This rank's and worker's share of an iterable dataset, for its ``__iter__`` to call.

    Returns:
        Under :class:`seeder.IterableDataLoader`, the loader's global rank, worker and epoch;
        elsewhere, torch's worker info and rank 0 of 1.

    Example:
        >>> import torch, seeder
        >>> class Numbers(torch.utils.data.IterableDataset):
        ...     def __iter__(self):
        ...         share = seeder.data.stream_share()
        ...         return iter(range(share.index, 10, share.count))
        >>> s = seeder.Seeder(); s.init(0)
        >>> [b.tolist() for b in seeder.IterableDataLoader(Numbers(), batch_size=4, seeder=s)]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """
    current = _CURRENT[0]
    if current is not None:
        return current
    info = torch.utils.data.get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return StreamShare(worker, workers, 0, 1, worker, workers, 0)


def is_stateful(dataset: Any) -> bool:
    """Whether ``dataset`` resumes from its own ``state_dict()`` exactly (else a worker replays its
    batches).

    A ``datasets.IterableDataset`` with a shuffle buffer does not: the buffer is not in its state.

    >>> is_stateful([1, 2])
    False
    """
    if not (
        callable(getattr(dataset, "state_dict", None))
        and callable(getattr(dataset, "load_state_dict", None))
    ):
        return False
    if not type(dataset).__module__.startswith("datasets."):
        return True
    return not any(
        type(n).__name__ == "BufferShuffledExamplesIterable" for n in _below(dataset._ex_iterable)
    )


def check_dataset_state(dataset: Any, state: Any, epoch: int, worker: int) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` (a worker's dataset state) fits it.

    The dataset's own ``check_state_dict(state)`` decides where it has one; otherwise ``state``
    is loaded into a copy of the dataset (the dataset itself is not touched; a dataset that
    cannot be copied is checked at its worker's first batch). A ``datasets`` stream applies
    its state only at its next ``__iter__`` and ignores one of another epoch: its state must
    be ``{"examples_iterable": dict, "epoch": epoch}``.

    Args:
        dataset: the loader's dataset (split by rank where seeder splits it).
        state: the dataset state saved for ``worker``.
        epoch: the epoch of the loader state that holds it.
        worker: the worker it belongs to (named in the message).

    Raises:
        StateError: the dataset rejects ``state``, or it keeps no state at all.

    >>> check_dataset_state([1, 2], {"pos": 1}, 0, 0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: worker 0's saved dataset state does not fit list: list has no ...
    """
    name = type(dataset).__name__
    fix = "the state is corrupt or from another dataset: resume with the dataset it was saved with"
    if not is_stateful(dataset):
        raise StateError(
            f"worker {worker}'s saved dataset state does not fit {name}: {name} has "
            f"no state_dict()/load_state_dict(), so its workers keep none; {fix}"
        )
    if type(dataset).__module__.startswith("datasets."):
        if not (
            isinstance(state, dict)
            and set(state) == {"examples_iterable", "epoch"}
            and isinstance(state["examples_iterable"], dict)
            and state["epoch"] == epoch
        ):
            raise StateError(
                f"worker {worker}'s saved datasets state {state!r:.200} is not a "
                f"datasets.IterableDataset state of epoch {epoch} "
                f"({{'examples_iterable': ..., 'epoch': {epoch}}}); {fix}"
            )
        return  # its load_state_dict keeps the state until the next __iter__: a copy checks nothing
    own = getattr(dataset, "check_state_dict", None)
    try:
        if callable(own):
            own(state)
            return
        trial = copy.deepcopy(dataset)
    except StateError:
        raise
    except Exception as exc:  # whatever a dataset raises for a state it cannot take: whose, and why
        if callable(own):
            raise StateError(
                f"worker {worker}'s saved dataset state {state!r:.200} is refused by "
                f"{name}.check_state_dict ({type(exc).__name__}: {exc}); "
                f"{fix}"
            ) from exc
        logger.debug(
            "seeder.IterableDataLoader: %s cannot be copied (%s) to check a saved state; "
            "a state it rejects raises at the worker's first batch",
            name,
            exc,
        )
        return
    try:
        trial.load_state_dict(copy.deepcopy(state))
    except StateError:
        raise
    except Exception as exc:  # whatever a dataset raises for a state it cannot take: whose, and why
        raise StateError(
            f"worker {worker}'s saved dataset state {state!r:.200} does not load into "
            f"{name} ({type(exc).__name__}: {exc}); {fix}"
        ) from exc


def _below(node: Any) -> Iterator[Any]:
    """``node`` and every ``datasets`` examples iterable it wraps."""
    yield node
    for child in [getattr(node, "ex_iterable", None), *(getattr(node, "ex_iterables", None) or ())]:
        if child is not None:
            yield from _below(child)


def warn_threaded_maps(dataset: Any) -> None:
    """Warn if a ``datasets`` stream runs ``.map``/``.filter`` functions in its shard-reading thread
    pool.

    ``.shuffle(..., max_buffer_input_shards > 1)`` reads several shards at once in threads;
    functions mapped *below* the shuffle run there, in no fixed order, so their draws from
    the global RNGs differ from run to run (with or without a resume).

    >>> warn_threaded_maps([1, 2])
    """
    if not type(dataset).__module__.startswith("datasets."):
        return
    for node in _below(dataset._ex_iterable):
        if type(node).__name__ == "InterleavedShardsExamplesIterable" and node.max_input_shards > 1:
            mapped = [
                n
                for n in _below(node)
                if type(n).__name__ in ("MappedExamplesIterable", "FilteredExamplesIterable")
            ]
            if mapped:
                warnings.warn(
                    "this datasets stream reads shards in a thread pool (.shuffle with "
                    "max_buffer_input_shards > 1) and runs a .map/.filter below the shuffle in "
                    "those threads, in no fixed order: random draws there are not reproducible, "
                    "resumed or not. Apply .map after .shuffle, or pass max_buffer_input_shards=1",
                    SeederWarning,
                    stacklevel=3,
                )
            return


def keep_batch(batch: Any) -> Any:
    """The collate function torch's loop gets: the worker already collated (picklable, module
    level).

    >>> keep_batch(3)
    3
    """
    return batch


def set_epoch_of(dataset: Any, epoch: int) -> None:
    """``dataset.set_epoch(epoch)`` where it has one, unless its ``epoch`` already says so.

    The main process sets it before the workers start; a worker only sets an epoch that differs.
    ``datasets.IterableDataset`` keeps its epoch in shared memory and sets it with a
    read-modify-write (``_epoch += epoch - _epoch``): two workers setting it at once can
    leave it at ``2 * epoch`` and shuffle the stream by another epoch's order.

    Example:
        >>> class Stream:
        ...     epoch, calls = 0, 0
        ...     def set_epoch(self, epoch):
        ...         self.epoch, self.calls = epoch, self.calls + 1
        >>> s = Stream()
        >>> set_epoch_of(s, 1); set_epoch_of(s, 1); (s.epoch, s.calls)
        (1, 1)
    """
    set_epoch = getattr(dataset, "set_epoch", None)
    if callable(set_epoch) and getattr(dataset, "epoch", None) != epoch:
        set_epoch(epoch)


def _unloadable(dataset: Any, worker: int, state: Any, exc: BaseException) -> StateError:
    """The error for a dataset that fails as it resumes from a saved state: whose, what to do."""
    return StateError(
        f"seeder.IterableDataLoader: worker {worker}'s {type(dataset).__name__} "
        f"raised {type(exc).__name__}: {exc} resuming from its saved dataset state "
        f"{state!r:.200}; if the state is corrupt or from another dataset, resume "
        "with the dataset it was saved with"
    )


class WorkerStream(torch.utils.data.IterableDataset):
    """The user's iterable dataset, batched, seeded per batch and with its state after each batch.

    ``control`` is a shared ``int64`` tensor ``[epoch, generation]`` the main process writes
    before each epoch (persistent workers read it too); ``resume`` applies to the
    generation it names only.
    """

    def __init__(
        self,
        dataset: Any,
        source: SeedSource,
        batch_size: Optional[int],
        drop_last: bool,
        collate_fn: Callable[[Any], Any],
        num_workers: int,
        rank: int,
        world_size: int,
        task: int,
    ):
        self.dataset, self.source = dataset, source
        self.batch_size, self.drop_last, self.collate_fn = batch_size, drop_last, collate_fn
        self.num_workers, self.rank, self.world_size, self.task = (
            num_workers,
            rank,
            world_size,
            task,
        )
        self.stateful = is_stateful(dataset)
        self.control = torch.zeros(2, dtype=torch.int64).share_memory_()
        self.resume: Optional[dict[str, Any]] = None

    def __iter__(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        workers = max(self.num_workers, 1)
        epoch, generation = (int(v) for v in self.control.tolist())
        record: dict[str, Any] = {"produced": 0, "state": None, "done": False}
        if self.resume is not None and self.resume["generation"] == generation:
            record = self.resume["workers"][worker]
        share = StreamShare(
            self.rank * workers + worker,
            self.world_size * workers,
            self.rank,
            self.world_size,
            worker,
            workers,
            epoch,
        )
        return self._produce(share, record)

    def _produce(
        self, share: StreamShare, record: dict[str, Any]
    ) -> Iterator[tuple[Any, dict[str, Any]]]:
        worker, epoch = share.worker, share.epoch
        if record["done"]:
            yield None, {"worker": worker, "end": True}
            return
        master, _, _, gens = self.source.inputs("seeder.IterableDataLoader")
        words = 1 + max((stream for _, _, stream in gens), default=0)
        seeds = stream_seeds(master, int(Domain.STREAM), self.task, epoch, self.rank, words)
        produced = int(record["produced"])
        loaded = record["state"]
        items = self._open(share, loaded)
        # without a state, the batches produced are drawn again, seeded as before, and dropped
        j = produced if loaded is not None else 0
        replay = _Replay(worker, epoch, produced - j)
        while True:
            self._seed_batch(share, j, seeds, gens)
            got = self._draw(share, items, loaded)
            loaded = None
            if not got or (self.drop_last and len(got) < self._take()):
                if j < produced:
                    raise _ran_out(worker, j, produced, epoch)
                yield None, {"worker": worker, "end": True}
                return
            j += 1
            if j <= produced:
                replay.step(j)
                continue
            batch = self.collate_fn(got[0] if self.batch_size is None else got)
            state = self.dataset.state_dict() if self.stateful else None
            yield batch, {"worker": worker, "produced": j, "state": state}

    def _take(self) -> int:
        return 1 if self.batch_size is None else self.batch_size

    def _open(self, share: StreamShare, loaded: Any) -> Iterator[Any]:
        """The dataset's iterator for this epoch, from the worker's saved state where it has one."""
        ds = self.dataset
        set_epoch_of(ds, share.epoch)
        _CURRENT[0] = share
        try:
            if loaded is not None:
                ds.load_state_dict(loaded)
            return iter(ds)
        except Exception as exc:
            if loaded is None:
                raise
            raise _unloadable(ds, share.worker, loaded, exc) from exc
        finally:
            _CURRENT[0] = None

    def _seed_batch(
        self,
        share: StreamShare,
        j: int,
        seeds: Any,
        gens: list[tuple[Callable[[int], Any], bool, int]],
    ) -> None:
        """Seed the global RNGs and the registered generators for the worker's ``j``-th batch."""
        stream = j * share.num_workers + share.worker
        if stream > MAX_KEY:
            raise OverflowError(
                f"seeder.IterableDataLoader: worker {share.worker} reached batch {j} of epoch "
                f"{share.epoch}; per-batch seeds are numbered up to 2**32 (batches x num_workers); "
                "start a new epoch sooner"
            )
        words_ = seeds.seed(stream)
        seed_globals(words_[0])
        for fn, _, k in gens:
            fn(words_[k])

    def _draw(self, share: StreamShare, items: Iterator[Any], loaded: Any) -> list[Any]:
        """The next batch's items (fewer at the end)."""
        _CURRENT[0] = share
        try:
            return list(itertools.islice(items, self._take()))
        except Exception as exc:  # the first items after a load: a state taken but unusable
            if loaded is None:
                raise
            raise _unloadable(self.dataset, share.worker, loaded, exc) from exc
        finally:
            _CURRENT[0] = None


class _Replay:
    """A replay's progress, logged every :data:`REPLAY_LOG_EVERY` batches and at its end."""

    def __init__(self, worker: int, epoch: int, batches: int):
        self.worker, self.epoch, self.batches = worker, epoch, batches
        self.started = time.perf_counter()

    def step(self, j: int) -> None:
        if j % REPLAY_LOG_EVERY == 0 or j == self.batches:
            logger.info(
                "seeder.IterableDataLoader: worker %d replayed %d/%d batches of epoch %d (%.2f s)",
                self.worker,
                j,
                self.batches,
                self.epoch,
                time.perf_counter() - self.started,
            )


def _ran_out(worker: int, j: int, produced: int, epoch: int) -> StateError:
    """The error for a worker whose dataset ends before the batches its saved position counts."""
    return StateError(
        f"seeder.IterableDataLoader: worker {worker} ran out after {j} of the "
        f"{produced} batches its saved position says it produced in epoch {epoch}: the "
        "dataset yields less than when the state was saved. Resume with the data the state "
        "was saved with (see docs/dataloader.md#iterable-datasets-streams)"
    )
