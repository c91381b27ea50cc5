"""``seeder.IterableDataLoader``: exact mid-epoch resume of a stream (an ``IterableDataset``).

Its workers (:class:`seeder.data._streams.WorkerStream`) seed every batch from (master seed,
epoch, rank, worker, batches produced) and send each batch with the dataset's state right
after it. The main process hands batches out in a fixed round robin over the workers (worker
``0, 1, ..., 0, 1, ...``, an exhausted worker skipped), whatever order they arrive in, and
keeps, per worker, the state as of the last batch *handed to the training loop*: prefetched
batches are not in the state, and a resumed loader produces them again.

* Sharding: a ``datasets.IterableDataset`` is split by global rank with
  ``datasets.distributed.split_dataset_by_node`` and by worker by ``datasets`` itself
  (over its shards); a plain dataset reads :func:`seeder.data.stream_share`. A stream that
  declares its shards (:mod:`seeder.data._shards`; ``by_shard=True`` for a ``datasets`` stream)
  is read by :class:`seeder.data._shard_stream.ShardStream` instead: each example seeded by
  (shard, position), a state of shard positions (:mod:`seeder.data._shard_state`) that resumes
  on any world size and worker count.
* Epochs follow ``seeder.reseed(1, epoch)``; a dataset with ``set_epoch`` gets it in the
  process that iterates it (workers included, persistent or not).
* Resume is exact with the same ``num_workers``, ``batch_size``, ``drop_last`` and world
  size (another ``num_workers`` raises :class:`seeder.StateError`): from the dataset's
  own ``load_state_dict`` (O(1)) where it has one, else by a counted replay of the
  batches each worker had produced (see :mod:`seeder.data._streams`). A state is checked
  whole before it loads (:mod:`seeder.data._stream_state`).

This module is the loader and its load; :mod:`seeder.data._stream_state` the state's checks,
:mod:`seeder.data._stream_iter` its iteration (the round robin, the position as of the batches
handed out), :mod:`seeder.data._streams` the worker side (example: :class:`IterableDataLoader`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Optional

import torch
import torch.utils.data
from torch.utils.data import default_collate, default_convert

from seeder._checks import check_int
from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._seeding.default import check_seeder, resolve_seeder
from seeder._seeding.derive import TRAIN_TASK
from seeder._seeding.distributed import refuse_in_worker
from seeder._seeding.participant import LoadContext
from seeder._state.streams import MERGED_FORMAT, SHARD_FORMAT
from seeder.data._answers import StreamAnswers
from seeder.data._seederloader import SeederLoader
from seeder.data._shard_state import (
    SHARD_STATE_KEYS,
    log_redeal,
    refuse_sharded,
    shard_fields,
    shard_progress,
    shard_stops,
    shards_of,
)
from seeder.data._stream_iter import (
    KEPT_POSITIONS,
    StreamCursor,
    StreamIter,
    arm,
    fresh_for,
    worker_stream,
)
from seeder.data._stream_state import STREAM_STATE_VERSION, check_stream_state, run_epoch
from seeder.data._streams import (
    check_dataset_state,
    keep_batch,
    set_epoch_of,
    warn_threaded_maps,
)
from seeder.data._torchargs import TorchArgs, torch_signature
from seeder.data._workers import dataloader_generator

__all__ = [
    "IterableDataLoader",
]

logger = logging.getLogger("seeder")

#: A sharded stream's resume position (progress, how it was dealt), ``None`` for a plain stream.
_Resume = Optional[tuple[dict[str, Any], str]]


def _check_sharded(
    state: Any,
    layout: dict[str, Any],
    stream: Any,
    shards: int,
    epoch: Optional[int],
    load: Optional[LoadContext],
) -> tuple[dict[str, Any], str]:
    """:func:`seeder.data._shard_state.shard_progress` with this module's round-robin check; a
    dataset's own ``check_stream_state`` gets ``load``."""

    def same_layout(st: Any, lay: dict[str, Any], e: Optional[int]) -> None:
        check_stream_state(st, layout, e, lambda w, s: None, SHARD_FORMAT, SHARD_STATE_KEYS)

    def check_source(source: Any, epoch: int, stops: dict[int, Optional[int]]) -> None:
        own = getattr(stream.dataset, "check_stream_state", None)
        if callable(own):
            own(source, epoch, load=load, stops=stops)

    sharded = {**layout, "rank": stream.rank, "num_shards": shards}
    return shard_progress(state, sharded, epoch, same_layout, check_source)


def _check_loader_state(
    state: Any,
    stream: Any,
    shards: Optional[int],
    layout: dict[str, Any],
    epoch: Optional[int],
    load: Optional[LoadContext],
) -> Optional[tuple[dict[str, Any], str]]:
    """:meth:`IterableDataLoader.check_state_dict`'s checks; a sharded stream's resume position."""
    if shards is not None:
        return _check_sharded(state, layout, stream, shards, epoch, load)
    refuse_sharded(state, stream.dataset)

    def check_dataset(worker: int, dataset_state: Any) -> None:
        check_dataset_state(stream.dataset, dataset_state, int(state["epoch"]), worker)

    check_stream_state(state, layout, epoch, check_dataset)
    return None


def _loaded(
    state: dict[str, Any], checked: Optional[tuple[dict[str, Any], str]], stream: Any
) -> dict[str, Any]:
    """The position a checked ``state`` continues from (a re-deal logged)."""
    if checked is None:
        progress = {k: state[k] for k in ("epoch", "batch", "next_worker", "complete")}
        progress["workers"] = [dict(r) for r in state["workers"]]
        return progress
    progress, how = checked
    if how != "exact":
        log_redeal(progress, how, max(stream.num_workers, 1), stream.world_size)
    return progress


class IterableDataLoader(StreamAnswers, SeederLoader):
    """A ``torch.utils.data.DataLoader`` over an ``IterableDataset`` that resumes bit for bit.

    A state is checked whole before it loads (:meth:`check_state_dict`); an iterator started before
    :meth:`load_state_dict` raises at its next batch.

    Args:
        dataset: a ``torch.utils.data.IterableDataset`` (a ``datasets.IterableDataset`` too).
        batch_size, drop_last, collate_fn, num_workers, pin_memory, timeout, worker_init_fn,
            multiprocessing_context, generator, prefetch_factor, persistent_workers,
            pin_memory_device, in_order: as torch's ``DataLoader``.
        shuffle, sampler, batch_sampler: refused: a stream's order is its own.
        seeder: a :class:`seeder.Seeder` other than the default one (initialised first).
        task: the reseed task whose epoch it follows (1).
        by_shard: read by shard, examples seeded by (shard, position) (default for a stream with
            ``num_shards`` and ``iter_shard``; ``True`` for a ``datasets`` stream's ``n_shards``).
        sample_rngs: by shard: the RNGs examples draw from, seeded before each (all by default).

    Raises:
        TypeError: a map-style dataset (its loader is :class:`seeder.DataLoader`).
        ValueError: ``shuffle``, ``sampler``, ``batch_sampler``; a bad ``batch_size``,
            ``num_workers``, or ``by_shard``/``sample_rngs`` for a stream without shards.
        RuntimeError: the seeder is not initialised (the stream is sharded by global rank).

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

    @torch_signature
    def __init__(
        self,
        dataset: Any,
        *args: Any,
        seeder: Optional[Seeder] = None,
        task: int = TRAIN_TASK,
        by_shard: Optional[bool] = None,
        sample_rngs: Optional[Sequence[str]] = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError(
                f"seeder.IterableDataLoader takes a torch.utils.data.IterableDataset "
                f"(a stream), got {type(dataset).__name__}: use seeder.DataLoader for "
                "a map-style dataset (with __getitem__ and __len__)"
            )
        given = TorchArgs.bind("seeder.IterableDataLoader", args, kwargs)
        if given.shuffle or given.sampler is not None or given.batch_sampler is not None:
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
        given.check()
        batch_size = given.batch_size
        if batch_size is not None:
            batch_size = check_int(batch_size, "batch_size", low=1)
        num_workers, drop_last = int(given.num_workers), bool(given.drop_last)
        task = check_int(task, "task", low=0)
        collate_fn = given.collate_fn
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None else default_convert
        warn_threaded_maps(dataset)
        shards = shards_of(dataset, by_shard, sample_rngs)
        layout = (batch_size, drop_last, collate_fn, num_workers)
        self._stream = worker_stream(dataset, seeder, layout, task, shards, sample_rngs)
        if shards is not None:
            self.seeder_elastic = True  # a gathered state moves to any world (seeder._state)
        self._shards = shards
        self._seeder, self._task = seeder, task
        last = seeder.last_reseed
        self._epoch = last[1] if last is not None and last[0] == task else 0
        #: Where the loader stands: the round robin's position as of the batches handed out.
        self.cursor = StreamCursor(self._fresh(self._epoch))
        self._generation = 0
        generator = given.generator
        if generator is None:
            generator = dataloader_generator(seeder=seeder)
        super().__init__(
            self._stream,
            **given.passed(
                batch_size=None, drop_last=False, collate_fn=keep_batch, generator=generator
            ),
        )
        # what users read; torch's loop batches nothing itself
        self._show(dataset=dataset, batch_size=batch_size, drop_last=drop_last)
        seeder.join(self)

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> s.reseed(1, 3); IterableDataLoader(Count(), seeder=s).epoch
            3
        """
        return self._epoch

    @property
    def batches_done(self) -> int:
        """Batches of epoch :attr:`epoch` handed out so far, those before a resume's stop included.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> it = iter(loader); _ = next(it); loader.batches_done
            1
        """
        progress = self.cursor.current()
        return progress["batch"] if progress["epoch"] == self._epoch else 0

    @property
    def num_batches(self) -> None:
        """``None``: a stream's batches are known only by reading it (it has no length)."""
        return None

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next (what ``seeder.reseed(task, epoch)`` does).

        Args:
            epoch: an int >= 0.

        Raises:
            TypeError, ValueError: ``epoch`` is not an int >= 0.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = IterableDataLoader(Count(), seeder=s)
            >>> loader.set_epoch(2); loader.epoch
            2
        """
        self._epoch = check_int(epoch, "epoch", low=0)

    def __iter__(self) -> Any:
        epoch = self._epoch
        progress, token = self.cursor.start(epoch, lambda: self._fresh(epoch))
        self._generation += 1
        stream = self._stream
        stream.control.copy_(torch.tensor([epoch, self._generation], dtype=torch.int64))
        set_epoch_of(
            stream.dataset, epoch
        )  # before the workers start: they read it, and need not write it
        arm(stream, self._generation, progress)
        if progress["complete"]:
            logger.info(
                "seeder.IterableDataLoader: epoch %d was complete in the loaded state; nothing "
                "left to yield",
                epoch,
            )
        # torch's iterators read loader.dataset: give them the worker stream
        with self._showing(self._stream):
            inner = super().__iter__()
        return StreamIter(self, inner, progress, token)

    # --------------------------------------------------------------- seeder
    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook of ``seeder.reseed``: ``reseed(task, epoch)`` of this loader's task
        starts ``epoch``.

        Args:
            seeder: the seeder that reseeds.
            task_id: the reseed's task.
            epoch: the reseed's epoch.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = IterableDataLoader(Count(), seeder=s)
            >>> s.reseed(1, 4); loader.epoch  # the seeder called loader.seeder_reseed(s, 1, 4)
            4
        """
        if task_id == self._task:
            self._epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """Epoch, round-robin position and, per worker, the dataset's state as of the last batch
        handed out.

        Returns:
            A dict of plain values and the datasets' own states, for :meth:`load_state_dict`.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = seeder.IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> it = iter(loader); _ = next(it)
            >>> st = loader.state_dict(); st["batch"], st["workers"]
            (1, [{'produced': 1, 'state': None, 'done': False}])
        """
        progress = self.cursor.current()
        if progress["epoch"] != self._epoch:
            progress = self._fresh(self._epoch)
        return self._state_of(progress)

    def state_dict_at(self, batches_done: int) -> dict[str, Any]:
        """:meth:`state_dict` as it was when ``batches_done`` batches of this epoch had been handed
        out.

        For a training loop that fetches ahead (Lightning prefetches a batch from a loader with no
        length): the state of what it trained, not of what it fetched.

        Args:
            batches_done: batches of the current epoch the training loop has trained on.

        Returns:
            The state at that position.

        Raises:
            StateError: the position is older than the last ``KEPT_POSITIONS`` of the live iterator.
            TypeError, ValueError: ``batches_done`` is not an int >= 0.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = seeder.IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> it = iter(loader); _ = next(it); _ = next(it)
            >>> loader.state_dict_at(1)["batch"], loader.state_dict()["batch"]
            (1, 2)
        """
        batches_done = check_int(batches_done, "batches_done", low=0)
        kept = self.cursor.kept_at(self._epoch, batches_done)
        if kept is not None:
            return self._state_of(kept)
        if self.batches_done == batches_done:
            return self.state_dict()
        raise StateError(
            f"seeder.IterableDataLoader: the position after {batches_done} batch(es) of epoch "
            f"{self._epoch} is not kept (it stands at {self.batches_done}; the last "
            f"{KEPT_POSITIONS} positions of the live iterator are); save the state within that "
            f"many batches of the newest one handed out"
        )

    def _fresh(self, epoch: int) -> dict[str, Any]:
        """The position at the start of ``epoch``: nothing handed out (the fresh deal of shards)."""
        return fresh_for(self._stream, self._shards, epoch)

    def _state_of(self, progress: dict[str, Any]) -> dict[str, Any]:
        state = {
            "format": "seeder.stream_loader" if self._shards is None else SHARD_FORMAT,
            "version": STREAM_STATE_VERSION,
            **progress,
            "workers": [dict(r) for r in progress["workers"]],
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "world_size": self._stream.world_size,
        }
        if self._shards is not None:
            state.update(shard_fields(self._stream, self._shards, progress))
        return state

    def check_state_dict(self, state: Any, load: Optional[LoadContext] = None) -> None:
        """Raise :class:`seeder.StateError` unless this loader can continue from ``state``; change
        nothing.

        Checked whole: the layout (``num_workers``, ``batch_size``, ``drop_last``, world size), the
        position (one of the round robin), the epoch (the one the run's last reseed puts this
        loader in) and each worker's dataset state (:mod:`seeder.data._stream_state`).

        Args:
            state: what :meth:`state_dict` returned.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: what is wrong with the state, and what to do.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> loader.check_state_dict({**loader.state_dict(), "batch": -5})  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            seeder.StateError: ...['batch'] is -5, but its workers produced 0 batch(es) ...
        """
        self._check(state, load)

    def _check(self, state: Any, load: Optional[LoadContext]) -> _Resume:
        """Check ``state`` whole; for a sharded stream, return the position it resumes from."""
        layout = {
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "world_size": self._stream.world_size,
        }
        epoch = run_epoch(self._seeder, self._task, load)
        return _check_loader_state(state, self._stream, self._shards, layout, epoch, load)

    def load_state_dict(self, state: dict[str, Any], load: Optional[LoadContext] = None) -> None:
        """Continue from ``state``: the next ``iter(loader)`` yields exactly the batches not yet
        handed out.

        An iterator started before the load raises at its next batch (call ``iter(loader)`` again);
        persistent workers already running are stopped (they hold the old position).

        Args:
            state: what :meth:`state_dict` returned.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: the state does not fit (see :meth:`check_state_dict`); nothing changed.
            RuntimeError: called inside a DataLoader worker.

        Example:
            >>> import torch, seeder
            >>> class Count(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(5))
            >>> s = seeder.Seeder(); s.init(0)
            >>> loader = IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> it = iter(loader); _ = next(it); state = loader.state_dict()
            >>> again = IterableDataLoader(Count(), batch_size=2, seeder=s)
            >>> again.load_state_dict(state); [b.tolist() for b in again]
            [[2, 3], [4]]
        """
        refuse_in_worker("seeder.IterableDataLoader.load_state_dict()")
        progress = _loaded(state, self._check(state, load), self._stream)
        self._epoch = int(state["epoch"])
        self.cursor.loaded(progress)
        self._iterator = None  # torch's persistent iterator holds workers with the old position
        resume = getattr(self._stream.dataset, "resume_lanes", None)
        if self._shards is not None and callable(resume):  # a mix changes weights at the stops
            resume(self._epoch, shard_stops(state))

    def elastic_step(self, state: dict[str, Any]) -> int:
        """The global step of a sharded stream's ``state`` (rank 0's batches), for a world change.

        >>> IterableDataLoader.elastic_step(None, {"format": "seeder.shard_stream", "batch": 4})
        4"""
        return int(state["step"] if state.get("format") == MERGED_FORMAT else state["batch"])

    def __repr__(self) -> str:
        return (
            f"seeder.IterableDataLoader(<{type(self.dataset).__name__}>, "
            f"batch_size={self.batch_size}, num_workers={self.num_workers}, epoch={self._epoch})"
        )
