"""``seeder.IterableDataLoader``: exact mid-epoch resume of a stream (an ``IterableDataset``).

Its workers (:class:`seeder.data._streams.WorkerStream`) seed every batch from (master seed,
epoch, rank, worker, batches produced) and send each batch with the dataset's state right
after it. The main process hands batches out in a fixed round robin over the workers (worker
``0, 1, ..., 0, 1, ...``, an exhausted worker skipped), whatever order they arrive in, and
keeps, per worker, the state as of the last batch *handed to the training loop*: prefetched
batches are not in the state, and a resumed loader produces them again.

* Sharding: a ``datasets.IterableDataset`` is split by global rank with
  ``datasets.distributed.split_dataset_by_node`` and by worker by ``datasets`` itself
  (over its shards); a plain dataset reads :func:`seeder.data.stream_share`.
* Epochs follow ``seeder.reseed(1, epoch)``; a dataset with ``set_epoch`` gets it in the
  process that iterates it (workers included, persistent or not).
* Resume is exact with the same ``num_workers``, ``batch_size``, ``drop_last`` and world
  size (another ``num_workers`` raises :class:`seeder.StateError`): from the dataset's
  own ``load_state_dict`` (O(1)) where it has one, else by a counted replay of the
  batches each worker had produced (see :mod:`seeder.data._streams`). A state is checked
  whole before it loads (:mod:`seeder.data._stream_checks`).

Example:
    >>> import torch, seeder
    >>> class Noise(torch.utils.data.IterableDataset):
    ...     def __iter__(self):
    ...         return (torch.rand(1).item() for _ in range(6))
    >>> s = seeder.Seeder(); s.init(7); s.reseed(1, 0)
    >>> loader = seeder.IterableDataLoader(Noise(), batch_size=2, seeder=s)
    >>> it = iter(loader); first = next(it); state = loader.state_dict(); rest = list(it)
    >>> again = seeder.IterableDataLoader(Noise(), batch_size=2, seeder=s)
    >>> again.load_state_dict(state)
    >>> all(torch.equal(a, b) for a, b in zip(again, rest)), len(rest)
    (True, 2)
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch
import torch.utils.data
from torch.utils.data import default_collate, default_convert

from seeder._checks import check_int
from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._seeding.default import UsesSeeder, check_seeder, resolve_seeder
from seeder._seeding.derive import TRAIN_TASK
from seeder._seeding.distributed import refuse_in_worker
from seeder.data._stream_checks import STREAM_STATE_VERSION, check_stream_state, run_epoch
from seeder.data._stream_iter import StreamIter
from seeder.data._streams import (
    WorkerStream,
    check_dataset_state,
    keep_batch,
    set_epoch_of,
    warn_threaded_maps,
)
from seeder.data._workers import SeedSource, dataloader_generator

__all__ = ["IterableDataLoader"]

logger = logging.getLogger("seeder")

#: Positions kept behind the newest, for :meth:`IterableDataLoader.state_dict_at` (a framework
#: fetches a few batches ahead).
KEPT_POSITIONS = 8


def _fresh(epoch: int, workers: int) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "batch": 0,
        "next_worker": 0,
        "complete": False,
        "workers": [{"produced": 0, "state": None, "done": False} for _ in range(workers)],
    }


def _split_by_rank(dataset: Any, seeder: Seeder) -> Any:
    """A ``datasets.IterableDataset`` split by global rank (unless split already); anything else as
    it is."""
    if not type(dataset).__module__.startswith("datasets.") or seeder.world_size == 1:
        return dataset
    if getattr(dataset, "_distributed", None) is not None:
        return dataset
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(dataset, rank=seeder.rank, world_size=seeder.world_size)


@contextlib.contextmanager
def _showing(loader: Any, dataset: Any) -> Iterator[None]:
    """``loader.dataset`` is ``dataset`` inside the block, the user's dataset again after it."""
    user = loader.__dict__["dataset"]
    object.__setattr__(loader, "dataset", dataset)
    try:
        yield
    finally:
        object.__setattr__(loader, "dataset", user)


class IterableDataLoader(UsesSeeder, torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` over an ``IterableDataset`` that resumes bit for bit.

    Args:
        dataset: a ``torch.utils.data.IterableDataset`` (a ``datasets.IterableDataset`` too); a
            map-style dataset raises ``TypeError`` (its loader is :class:`seeder.DataLoader`).
        batch_size, drop_last, collate_fn, num_workers, persistent_workers, pin_memory,
            prefetch_factor, timeout, worker_init_fn, multiprocessing_context, generator: as
            in torch.
        shuffle, sampler, batch_sampler: refused (``ValueError``): a stream's order is its own.
        seeder: a :class:`seeder.Seeder` other than the default one (initialised first).
        task: the reseed task whose epoch it follows (1).

    Raises:
        TypeError: a map-style dataset.
        ValueError: ``shuffle``, ``sampler``, ``batch_sampler``; a bad ``batch_size`` or
            ``num_workers``.
        RuntimeError: the seeder is not initialised (the stream is sharded by global rank).

    A state is checked whole before it loads (:meth:`check_state_dict`); an iterator started
    before :meth:`load_state_dict` raises at its next batch.

    >>> import torch, seeder
    >>> class Count(torch.utils.data.IterableDataset):
    ...     def __iter__(self): return iter(range(5))
    >>> s = seeder.Seeder(); s.init(0)
    >>> [b.tolist() for b in IterableDataLoader(Count(), batch_size=2, seeder=s)]
    [[0, 1], [2, 3], [4]]
    """

    seeder_kind = "loader"

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Optional[Callable] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], Any]] = None,
        multiprocessing_context: Any = None,
        generator: Optional[torch.Generator] = None,
        *,
        seeder: Optional[Seeder] = None,
        task: int = TRAIN_TASK,
        **kwargs: Any,
    ) -> None:
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError(
                f"seeder.IterableDataLoader takes a torch.utils.data.IterableDataset "
                f"(a stream), got {type(dataset).__name__}: use seeder.DataLoader for "
                "a map-style dataset (with __getitem__ and __len__)"
            )
        if shuffle or sampler is not None or batch_sampler is not None:
            raise ValueError(
                f"seeder.IterableDataLoader over {type(dataset).__name__} takes no "
                "shuffle, sampler or batch_sampler: a stream's order is the dataset's "
                "own (use datasets' .shuffle(seed, buffer_size) or shuffle inside "
                "__iter__ with the global RNGs, which seeder seeds per batch)"
            )
        seeder = resolve_seeder(check_seeder(seeder))
        if not seeder.initialized:
            raise RuntimeError(
                "seeder.IterableDataLoader shards its stream by global rank: call "
                "seeder.init(master_seed=...) before building it"
            )
        if batch_size is not None:
            batch_size = check_int(batch_size, "batch_size", low=1)
        num_workers = check_int(num_workers, "num_workers", low=0)
        task = check_int(task, "task", low=0)
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None else default_convert
        user = dataset
        warn_threaded_maps(dataset)
        dataset = _split_by_rank(dataset, seeder)
        self._stream = WorkerStream(
            dataset,
            SeedSource(seeder),
            batch_size,
            bool(drop_last),
            collate_fn,
            num_workers,
            seeder.rank,
            seeder.world_size,
            task,
        )
        self._seeder, self._task = seeder, task
        last = seeder.last_reseed
        self._epoch = last[1] if last is not None and last[0] == task else 0
        self._progress = _fresh(self._epoch, max(num_workers, 1))
        self._kept: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=KEPT_POSITIONS + 1
        )  # the newest last
        self._resume: Optional[dict[str, Any]] = None
        self._generation = 0
        self._live_token: Optional[object] = None
        self._loads = 0  # load_state_dict calls: an iterator started before the last one stops
        if generator is None:
            generator = dataloader_generator(seeder=seeder)
        super().__init__(
            self._stream,
            batch_size=None,
            num_workers=num_workers,
            collate_fn=keep_batch,
            pin_memory=pin_memory,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            **kwargs,
        )
        for name, value in (
            ("dataset", user),
            ("batch_size", batch_size),
            ("drop_last", bool(drop_last)),
        ):
            object.__setattr__(
                self, name, value
            )  # what users read; torch's loop batches nothing itself
        seeder.join(self)

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs."""
        return self._epoch

    @property
    def live_token(self) -> Optional[object]:
        """Identifies the newest iterator; only it moves the position."""
        return self._live_token

    @property
    def loads(self) -> int:
        """How many times :meth:`load_state_dict` was called (an older iterator is stale)."""
        return self._loads

    @property
    def batches_done(self) -> int:
        """Batches of epoch :attr:`epoch` handed out so far, those before a resume's stop
        included."""
        progress = self._resume if self._resume is not None else self._progress
        return progress["batch"] if progress["epoch"] == self._epoch else 0

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next (what ``seeder.reseed(task, epoch)`` does)."""
        self._epoch = check_int(epoch, "epoch", low=0)

    def handed(self, progress: dict[str, Any]) -> None:
        """Record the position after a batch was handed to the training loop (called by the
        iterator)."""
        self._progress = progress
        self._kept.append(progress)

    def __iter__(self) -> Any:
        epoch = self._epoch
        resume, self._resume = self._resume, None
        progress = (
            resume
            if resume is not None and resume["epoch"] == epoch
            else _fresh(epoch, max(self.num_workers, 1))
        )
        self._generation += 1
        stream = self._stream
        stream.control.copy_(torch.tensor([epoch, self._generation], dtype=torch.int64))
        set_epoch_of(
            stream.dataset, epoch
        )  # before the workers start: they read it, and need not write it
        stream.resume = (
            {"generation": self._generation, "workers": progress["workers"]}
            if progress["batch"]
            or progress["complete"]
            or any(r["done"] for r in progress["workers"])
            else None
        )
        if progress["complete"]:
            logger.info(
                "seeder.IterableDataLoader: epoch %d was complete in the loaded state; nothing "
                "left to yield",
                epoch,
            )
        token = object()
        self._live_token = token
        self._progress = progress
        self._kept.clear()
        self._kept.append(progress)
        with _showing(
            self, self._stream
        ):  # torch's iterators read loader.dataset: give them the worker stream
            inner = super().__iter__()
        return StreamIter(self, inner, progress, token)

    # --------------------------------------------------------------- seeder
    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook: ``reseed(task, epoch)`` of this loader's task starts ``epoch``."""
        if task_id == self._task:
            self._epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """Epoch, round-robin position and, per worker, the dataset's state as of the last batch
        handed out.

        >>> import torch, seeder
        >>> class Count(torch.utils.data.IterableDataset):
        ...     def __iter__(self): return iter(range(5))
        >>> s = seeder.Seeder(); s.init(0)
        >>> loader = seeder.IterableDataLoader(Count(), batch_size=2, seeder=s); it = iter(loader); _ = next(it)
        >>> st = loader.state_dict(); st["batch"], st["workers"]
        (1, [{'produced': 1, 'state': None, 'done': False}])
        """
        progress = self._resume if self._resume is not None else self._progress
        if progress["epoch"] != self._epoch:
            progress = _fresh(self._epoch, max(self.num_workers, 1))
        return self._state_of(progress)

    def state_dict_at(self, batches_done: int) -> dict[str, Any]:
        """:meth:`state_dict` as it was when ``batches_done`` batches of this epoch had been handed
        out.

        For a training loop that fetches ahead (Lightning prefetches a batch from a loader with no
        length): the state of what it trained, not of what it fetched. The last
        ``KEPT_POSITIONS`` positions of the live iterator are kept; an older one raises
        :class:`seeder.StateError`.

        >>> import torch, seeder
        >>> class Count(torch.utils.data.IterableDataset):
        ...     def __iter__(self): return iter(range(6))
        >>> s = seeder.Seeder(); s.init(0)
        >>> loader = seeder.IterableDataLoader(Count(), batch_size=2, seeder=s); it = iter(loader); _ = next(it); _ = next(it)
        >>> loader.state_dict_at(1)["batch"], loader.state_dict()["batch"]
        (1, 2)
        """
        batches_done = check_int(batches_done, "batches_done", low=0)
        if self._resume is None:
            for progress in reversed(self._kept):
                if progress["epoch"] == self._epoch and progress["batch"] == batches_done:
                    return self._state_of(progress)
        if self.batches_done == batches_done:
            return self.state_dict()
        raise StateError(
            f"seeder.IterableDataLoader: the position after {batches_done} batch(es) of epoch "
            f"{self._epoch} is not kept (it stands at {self.batches_done}; the last "
            f"{KEPT_POSITIONS} positions of the live iterator are); save the state within that "
            f"many batches of the newest one handed out"
        )

    def _state_of(self, progress: dict[str, Any]) -> dict[str, Any]:
        return {
            "format": "seeder.stream_loader",
            "version": STREAM_STATE_VERSION,
            **progress,
            "workers": [dict(r) for r in progress["workers"]],
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "world_size": self._stream.world_size,
        }

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` unless this loader can continue from ``state``.

        Changes nothing.

        Checked whole: the layout (``num_workers``, ``batch_size``, ``drop_last``, world size),
        the position (``batch``, per-worker progress, ``next_worker`` and ``complete`` must be a
        position of the round robin), the epoch (inside ``seeder.load_state_dict``: the one its
        last reseed puts this loader in) and each worker's dataset state (the dataset's
        ``check_state_dict``, else loaded into a copy of the dataset).

        >>> import torch, seeder
        >>> class Count(torch.utils.data.IterableDataset):
        ...     def __iter__(self): return iter(range(5))
        >>> s = seeder.Seeder(); s.init(0)
        >>> loader = IterableDataLoader(Count(), batch_size=2, seeder=s)
        >>> loader.check_state_dict({**loader.state_dict(), "batch": -5})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder._errors.StateError: ...['batch'] is -5, but its workers produced 0 batch(es) ...
        """
        layout = {
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "world_size": self._stream.world_size,
        }
        stream = self._stream

        def check_dataset(worker: int, dataset_state: Any) -> None:
            check_dataset_state(stream.dataset, dataset_state, int(state["epoch"]), worker)

        check_stream_state(state, layout, run_epoch(self._seeder, self._task), check_dataset)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next ``iter(loader)`` yields exactly the batches not yet
        handed out.

        Validates first (:meth:`check_state_dict`); a bad state raises :class:`seeder.StateError`
        and changes nothing. An iterator started before the load raises at its next batch
        (call ``iter(loader)`` again); persistent workers already running are stopped (they hold
        the old position).
        """
        refuse_in_worker("seeder.IterableDataLoader.load_state_dict()")
        self.check_state_dict(state)
        progress = {k: state[k] for k in ("epoch", "batch", "next_worker", "complete")}
        progress["workers"] = [dict(r) for r in state["workers"]]
        self._epoch = int(state["epoch"])
        self._resume = progress
        self._progress = progress
        self._live_token = None
        self._loads += 1
        self._iterator = None  # torch's persistent iterator holds workers with the old position

    def __repr__(self) -> str:
        return (
            f"seeder.IterableDataLoader(<{type(self.dataset).__name__}>, "
            f"batch_size={self.batch_size}, num_workers={self.num_workers}, epoch={self._epoch})"
        )
