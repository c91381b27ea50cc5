"""A stream loader's iteration, main-process side: the worker stream, its position, the round robin.

:func:`worker_stream` builds what torch's workers iterate (:mod:`seeder.data._streams`, or by
shard :mod:`seeder.data._shard_stream`), and :func:`arm` tells it where an iteration starts.
:class:`StreamCursor` is a :class:`seeder.IterableDataLoader`'s position: the round robin's
position as of the batches handed to the training loop, the last few such positions (a framework
that fetches ahead saves an older one), a loaded resume point, and which iterator is the newest.
:class:`StreamIter` is what ``iter(loader)`` returns: batches in the round robin, whatever order
the workers produce them in, with a look-ahead for the epoch's last batch
(:meth:`StreamIter.exhausted`).

Example:
    >>> cursor = StreamCursor(fresh(0, 2))
    >>> progress, token = cursor.start(0, lambda: fresh(0, 2))
    >>> cursor.handed(token, dict(progress, batch=1)); cursor.current()["batch"]
    1
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Sequence
from typing import Any, Callable, Optional, Protocol

from seeder._seeding.core import Seeder
from seeder._seeding.rngbase import next_keeping
from seeder.data._discardwatch import FIRST_WATCHED, DiscardWatch
from seeder.data._elastic import check_sample_rngs
from seeder.data._shard_state import fresh_progress
from seeder.data._shard_stream import ShardStream
from seeder.data._shards import fresh_assignment
from seeder.data._streams import WorkerStream
from seeder.data._workers import FETCH_SEEDED, SeedSource, fetch_adapters

__all__ = [
    "StreamCursor",
    "StreamIter",
    "KEPT_POSITIONS",
    "fresh",
    "fresh_for",
    "arm",
    "worker_stream",
    "split_by_rank",
]

#: Positions kept behind the newest, for :meth:`IterableDataLoader.state_dict_at` (a framework
#: fetches a few batches ahead).
KEPT_POSITIONS = 8


def fresh(epoch: int, workers: int) -> dict[str, Any]:
    """The position at the start of ``epoch`` over ``workers`` workers: nothing handed out.

    >>> fresh(3, 1)["workers"]
    [{'produced': 0, 'state': None, 'done': False}]
    """
    return {
        "epoch": epoch,
        "batch": 0,
        "next_worker": 0,
        "complete": False,
        "workers": [{"produced": 0, "state": None, "done": False} for _ in range(workers)],
    }


class StreamCursor:
    """A stream loader's position: as of the batches handed out, the last few, a loaded resume
    point, the newest iterator.

    Args:
        progress: the position the loader starts at.

    >>> StreamCursor(fresh(0, 1)).current()["batch"]
    0
    """

    def __init__(self, progress: dict[str, Any]) -> None:
        #: The position as of the batches the newest iterator handed out.
        self.progress = progress
        #: The positions after the last batches handed out, the newest last.
        self.kept: collections.deque[dict[str, Any]] = collections.deque(maxlen=KEPT_POSITIONS + 1)
        #: A loaded position, until the next iterator starts there.
        self.resume: Optional[dict[str, Any]] = None
        #: Identifies the newest iterator; only it moves the position.
        self.live_token: Optional[object] = None
        #: ``load_state_dict`` calls: an iterator started before the last one stops.
        self.loads = 0

    def current(self) -> dict[str, Any]:
        """The position a state saved now holds: the loaded one until an iterator starts."""
        return self.resume if self.resume is not None else self.progress

    def start(
        self, epoch: int, fresh_start: Callable[[], dict[str, Any]]
    ) -> tuple[dict[str, Any], object]:
        """A new iterator of ``epoch`` starts: ``(its position, its token)``; a loaded position of
        ``epoch`` is used once, else ``fresh_start()``."""
        resume, self.resume = self.resume, None
        progress = resume if resume is not None and resume["epoch"] == epoch else fresh_start()
        self.live_token = token = object()
        self.progress = progress
        self.kept.clear()
        self.kept.append(progress)
        return progress, token

    def handed(self, token: object, progress: dict[str, Any]) -> None:
        """The iterator ``token`` handed a batch out and stands at ``progress``; only the newest
        moves the position."""
        if token is self.live_token:
            self.progress = progress
            self.kept.append(progress)

    def kept_at(self, epoch: int, batches_done: int) -> Optional[dict[str, Any]]:
        """The kept position after ``batches_done`` batches of ``epoch``, if any."""
        if self.resume is None:
            for progress in reversed(self.kept):
                if progress["epoch"] == epoch and progress["batch"] == batches_done:
                    return progress
        return None

    def loaded(self, progress: dict[str, Any]) -> None:
        """A state was loaded: the next iterator starts at ``progress``; older ones stop."""
        self.resume = self.progress = progress
        self.live_token = None
        self.loads += 1


_STALE = (
    "this iterator of seeder.IterableDataLoader was started before loader.load_state_dict(): "
    "it stops here instead of yielding batches that the loaded state does not continue. Call "
    "iter(loader) again (a new for loop) to continue from the loaded position"
)


#: A resumed epoch's discard watch that outlives its iterator, by loader: dropped with the loader.
_WAITING: weakref.WeakKeyDictionary[Any, DiscardWatch] = weakref.WeakKeyDictionary()


class StreamedLoader(Protocol):
    """What a stream loader's iterator reads of its loader (:class:`seeder.IterableDataLoader`)."""

    @property
    def cursor(self) -> StreamCursor: ...

    @property
    def num_workers(self) -> int: ...


class StreamIter:
    """What ``iter(loader)`` returns: batches in the round robin, counted as handed out.

    Each batch comes with its worker's record (batches produced, the dataset's state after it),
    whatever order the batches arrive in; the position moves only as a batch is handed to the
    training loop. :meth:`exhausted` looks ahead without moving it.

    Args:
        loader: the :class:`seeder.IterableDataLoader` (its position).
        inner: torch's iterator over the loader's worker stream: ``(batch, record)`` pairs.
        progress: the position this iterator starts from.
        token: the cursor's ``live_token`` for this iterator (only the newest moves the position).
    """

    def __init__(self, loader: StreamedLoader, inner: Any, progress: dict[str, Any], token: object):
        self._loader, self._inner, self._progress, self._token = loader, inner, progress, token
        self._loads = loader.cursor.loads
        self._workers = len(progress["workers"])
        self._queues: list[collections.deque[Any]] = [
            collections.deque() for _ in range(self._workers)
        ]
        self._restore = fetch_adapters() if loader.num_workers == 0 else []
        # Resumed inside the epoch: a loop that skips the batches it had trained drops these.
        start = progress["batch"]
        self._watch = (
            DiscardWatch(start, progress["epoch"], "seeder.IterableDataLoader")
            if start >= FIRST_WATCHED and not progress["complete"]
            else None
        )

    def __iter__(self) -> StreamIter:
        return self

    def _pull(self) -> None:
        # The main process produces with 0 workers: the training loop's streams are put back.
        batch, record = next_keeping(self._restore, self._inner)
        self._queues[record["worker"]].append((batch, record))

    def __next__(self) -> Any:
        watch = self._watch
        if watch is None:
            return self._next()
        watch.next_asked()
        try:
            batch = self._next()
        except StopIteration:
            self._watch = None
            if watch.ended():
                _WAITING[self._loader] = watch  # it waits for a use that says the loop trains
            raise
        watch.handed()
        if not watch.active:
            self._watch = None
        return batch

    def _next(self) -> Any:
        cursor = self._loader.cursor
        live = cursor.live_token is self._token
        if not live and cursor.loads != self._loads:  # before anything is produced: draws nothing
            raise RuntimeError(_STALE)
        progress = self._progress
        skipped = 0
        while not progress["complete"]:
            w = progress["next_worker"]
            records = progress["workers"]
            if records[w]["done"]:
                skipped += 1
                if skipped > self._workers:  # loaded states are checked for this; never spin
                    raise RuntimeError(
                        f"seeder.IterableDataLoader: every worker of epoch {progress['epoch']} is "
                        "exhausted but the position does not say the epoch is complete; nothing "
                        "is left to yield. Please report this with the loader's state_dict()"
                    )
                progress = self._progress = dict(progress, next_worker=(w + 1) % self._workers)
                continue
            if not self._queues[w]:
                try:
                    self._pull()
                except StopIteration:  # every worker ends with an end record: one died quietly
                    raise RuntimeError(
                        f"seeder.IterableDataLoader: worker {w} stopped without its "
                        "end record; the epoch is incomplete"
                    ) from None
                continue
            skipped = 0
            batch, record = self._queues[w].popleft()
            progress = dict(progress, workers=list(records), next_worker=(w + 1) % self._workers)
            if record.get("end"):
                progress["workers"][w] = dict(records[w], done=True)
                progress["complete"] = all(r["done"] for r in progress["workers"])
            else:
                progress["workers"][w] = {
                    "produced": record["produced"],
                    "state": record["state"],
                    "done": False,
                }
                progress["batch"] += 1
            self._progress = progress
            cursor.handed(self._token, progress)
            if not record.get("end"):
                return batch
        raise StopIteration

    def exhausted(self) -> bool:
        """Whether the epoch has no batch left after those handed out; the position does not move.

        Looks ahead as torch's workers prefetch: the next batch (or the end records that
        follow) is produced and queued, not handed out, so the state stays that of the
        batches the training loop received.

        Returns:
            ``True`` once every worker's next record is its end.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(3))
            >>> s = seeder.Seeder(); s.init(0)
            >>> it = iter(seeder.IterableDataLoader(Count(), batch_size=2, seeder=s))
            >>> next(it).tolist(), it.exhausted(), next(it).tolist(), it.exhausted()
            ([0, 1], False, [2], True)
        """
        progress, done = self._progress, [r["done"] for r in self._progress["workers"]]
        if progress["complete"]:
            return True
        w = progress["next_worker"]
        while True:  # ends: each pass pulls from a finite stream, or marks or skips an ended worker
            if all(done):
                return True
            if done[w]:
                w = (w + 1) % self._workers
                continue
            if not self._queues[w]:
                try:
                    self._pull()
                except StopIteration:
                    return False  # __next__ says which worker died
                continue
            if not self._queues[w][0][1].get("end"):
                return False
            done[w] = True
            w = (w + 1) % self._workers


def worker_stream(
    dataset: Any,
    seeder: Seeder,
    layout: tuple[Optional[int], bool, Callable[[Any], Any], int],
    task: int,
    shards: Optional[int],
    sample_rngs: Optional[Sequence[str]],
) -> Any:
    """What torch's workers iterate: the stream by shard, or (without shards) split by rank."""
    batch_size, drop_last, collate_fn, num_workers = layout
    common = (SeedSource(seeder), batch_size, drop_last, collate_fn, num_workers)
    if shards is None:
        return WorkerStream(
            split_by_rank(dataset, seeder), *common, seeder.rank, seeder.world_size, task
        )
    rngs = check_sample_rngs(FETCH_SEEDED if sample_rngs is None else sample_rngs)
    return ShardStream(dataset, *common, seeder.rank, seeder.world_size, task, shards, rngs)


def fresh_for(stream: Any, shards: Optional[int], epoch: int) -> dict[str, Any]:
    """The position at the start of ``epoch``: nothing handed out (the fresh deal of shards)."""
    workers = max(stream.num_workers, 1)
    if shards is None:
        return fresh(epoch, workers)
    order = stream.shard_order(epoch)
    return fresh_progress(
        epoch, fresh_assignment(shards, stream.rank, stream.world_size, workers, order)
    )


def arm(stream: Any, generation: int, progress: dict[str, Any]) -> None:
    """Tell the worker stream where iteration ``generation`` starts (its workers read it)."""
    if isinstance(stream, ShardStream):
        stream.plan = {
            "generation": generation,
            "assignment": progress["assignment"],
            "workers": progress["workers"],
        }
        return
    stream.resume = (
        {"generation": generation, "workers": progress["workers"]}
        if progress["batch"] or progress["complete"] or any(r["done"] for r in progress["workers"])
        else None
    )


def split_by_rank(dataset: Any, seeder: Seeder) -> Any:
    """A ``datasets.IterableDataset`` split by global rank (unless split already); anything else as
    it is."""
    if not type(dataset).__module__.startswith("datasets.") or seeder.world_size == 1:
        return dataset
    if getattr(dataset, "_distributed", None) is not None:
        return dataset
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(dataset, rank=seeder.rank, world_size=seeder.world_size)
