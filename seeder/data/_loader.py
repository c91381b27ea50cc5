"""``seeder.DataLoader``: a torch ``DataLoader`` whose resume is exact by construction.

* The order comes from :class:`seeder.DistributedSampler` (sharded by global rank under a
  process group), the position from the batches the loader has handed to the training
  loop: no ``advance()``, no ``set_epoch``.
* Before batch ``b`` of epoch ``e`` is fetched, the process that fetches it (a worker, or
  the main process with ``num_workers=0``) seeds ``random``, NumPy's global RNG, torch's
  CPU generator and the seeder's registered generators from
  :func:`seeder._seeding.derive.batch_seeds` ``(master, task, e, rank, b)``. What a batch
  holds is a pure function of (master seed, epoch, position): the same with 0 or 8
  workers, persistent or not, fork or spawn, before and after a resume.
* With ``num_workers=0`` the main process's global RNG states are put back after each
  fetch, so the training loop's own randomness is the same whatever ``num_workers`` is.
* It joins the seeder: ``seeder.state_dict()`` holds its position under
  ``participants["loader.<n>"]``; it has ``state_dict()`` / ``load_state_dict()`` itself too
  (torchdata's ``Stateful`` names, which Lightning's fit loop saves). Resume is O(1).

Example:
    >>> import torch, seeder; s = seeder.Seeder(); s.init(42); s.reseed(1, 0)
    >>> data = torch.arange(10.0)
    >>> loader = DataLoader(data, batch_size=4, shuffle=True, seeder=s)
    >>> it = iter(loader); first = next(it)
    >>> state = loader.state_dict()
    >>> rest = [b for b in it]
    >>> again = DataLoader(data, batch_size=4, shuffle=True, seeder=s); again.load_state_dict(state)
    >>> all(torch.equal(a, b) for a, b in zip(again, rest)), state["position"]
    (True, 4)
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
import torch.utils.data

from seeder._checks import check_int, is_int
from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.derive import MAX_KEY, check_key
from seeder._seeding.distributed import refuse_in_worker
from seeder._seeding.participant import LoadContext
from seeder.data._answers import PROVENANCE_KEYS, BatchAnswers
from seeder.data._batches import BatchKeys, BatchSeedingDataset, rebuilt_error
from seeder.data._loader_iter import Cursor, LoaderIter, reseeded
from seeder.data._sampler import DistributedSampler
from seeder.data._seederloader import SeederLoader
from seeder.data._torchargs import TorchArgs, torch_signature
from seeder.data._workers import SeedSource, dataloader_generator

__all__ = [
    "DataLoader",
    "LOADER_STATE_VERSION",
    "check_batch_count",
    "refuse_elastic",
    "refuse_iterable",
    "refuse_unordered",
]

logger = logging.getLogger("seeder")


def refuse_elastic(kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming :class:`seeder.ElasticDataLoader` if ``kwargs`` hold ``elastic=``.

    Args:
        kwargs: the keyword arguments given to ``seeder.DataLoader``.

    Raises:
        TypeError: ``elastic=`` was given (the elastic loader is its own class).

    >>> refuse_elastic({"elastic": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: seeder.DataLoader takes no elastic= argument: build ...
    """
    if "elastic" not in kwargs:
        return
    if kwargs["elastic"] is True:
        raise TypeError(
            "seeder.DataLoader takes no elastic= argument: build seeder.ElasticDataLoader(dataset, "
            "batch_size=..., shuffle=...) for one global order whatever the world size "
            "(docs/elastic.md)"
        )
    raise TypeError(
        f"seeder.DataLoader takes no elastic= argument, got elastic={kwargs['elastic']!r}: drop it "
        "(seeder.ElasticDataLoader is the elastic loader)"
    )


def refuse_iterable(dataset: Any) -> None:
    """Raise ``TypeError`` naming :class:`seeder.IterableDataLoader` for an ``IterableDataset``.

    Args:
        dataset: the dataset given to ``seeder.DataLoader``.

    Raises:
        TypeError: ``dataset`` is a stream (it has its own loader class).

    >>> class Stream(torch.utils.data.IterableDataset):
    ...     def __iter__(self): return iter(range(3))
    >>> refuse_iterable(Stream())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: seeder.DataLoader takes a map-style dataset ...
    """
    if isinstance(dataset, torch.utils.data.IterableDataset):  # a stream has its own class
        name = type(dataset).__name__
        raise TypeError(
            f"seeder.DataLoader takes a map-style dataset (with __getitem__ and "
            f"__len__), got the IterableDataset {name}: use "
            f"seeder.IterableDataLoader({name}(...), batch_size=..., "
            "num_workers=...) for a stream (the same arguments, no shuffle or "
            "sampler), which resumes it exactly"
        )


def refuse_unordered(args: TorchArgs) -> None:
    """Raise ``ValueError`` for ``in_order=False`` with workers: the position would not be the first
    batches of the epoch.

    >>> refuse_unordered(TorchArgs(num_workers=2, in_order=False))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: seeder.DataLoader cannot resume in_order=False with num_workers > 0: ...
    """
    if not args.in_order and args.num_workers > 0:
        raise ValueError(
            "seeder.DataLoader cannot resume in_order=False with num_workers > 0: the batches "
            "handed out are not the first k of the epoch, so a resume would repeat some and skip "
            "others. Drop in_order=False, or use torch.utils.data.DataLoader (no exact resume) "
            "(see docs/dataloader.md#what-seederdataloader-refuses-and-why)"
        )


def check_batch_count(num_samples: int, batch_size: int, drop_last: bool) -> None:
    """Refuse more than ``2**32`` batches per epoch and rank: the batch index is one 32-bit word of
    the batch seeds' key.

    >>> check_batch_count(2**40, 1, False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: seeder.DataLoader would have 1099511627776 batches per epoch on this rank, ...
    """
    batches = num_samples // batch_size if drop_last else -(-num_samples // batch_size)
    if batches > MAX_KEY + 1:
        raise ValueError(
            f"seeder.DataLoader would have {batches} batches per epoch on this rank, more than "
            f"2**32: the batch index is one 32-bit word of each batch's seed key. Pass a larger "
            f"batch_size (or use more ranks)"
        )


LOADER_STATE_VERSION = 2
_STATE_KEYS_V1 = frozenset(
    {
        "format",
        "version",
        "epoch",
        "batch",
        "position",
        "batch_size",
        "drop_last",
        "num_batches",
        "sampler",
    }
)
# version 2 adds the skipped batches, the dataset's identity and the sampler's seed
_STATE_KEYS = _STATE_KEYS_V1 | PROVENANCE_KEYS


def _choose_sampler(
    dataset: Any, given: TorchArgs, shuffle: Optional[bool], seeder: Seeder
) -> tuple[DistributedSampler, int, bool]:
    """The loader's ``(sampler, batch_size, drop_last)`` from torch's arguments; refuses what seeder
    cannot resume."""
    batch_size, sampler, batch_sampler = given.batch_size, given.sampler, given.batch_sampler
    drop_last = bool(given.drop_last)
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                "drop_last"
            )
        inner = getattr(batch_sampler, "sampler", None)
        if not (
            type(batch_sampler) is torch.utils.data.BatchSampler
            and isinstance(inner, DistributedSampler)
        ):
            raise TypeError(
                f"seeder.DataLoader takes "
                f"batch_sampler=torch.utils.data.BatchSampler(seeder.DistributedSampler(...), ...) "
                f"only, got {type(batch_sampler).__name__}; seeder cannot restore the position of "
                f"another batch sampler. Pass sampler=/shuffle= instead, or use "
                f"torch.utils.data.DataLoader (resume will not be exact)"
            )
        sampler, batch_size, drop_last = inner, batch_sampler.batch_size, batch_sampler.drop_last
    if batch_size is None:
        raise ValueError(
            "seeder.DataLoader counts its position in batches: batch_size=None (no batching) is "
            "not supported; pass batch_size=1"
        )
    batch_size = check_int(batch_size, "batch_size", low=1)
    if sampler is not None:
        if shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if not isinstance(sampler, DistributedSampler):
            raise TypeError(
                f"seeder.DataLoader takes sampler=seeder.DistributedSampler(...) only, got "
                f"{type(sampler).__name__}; seeder cannot restore another sampler's position. Drop "
                f"sampler= (shuffle=True uses seeder's), or use torch.utils.data.DataLoader with "
                f"it (resume will not be exact; see docs/dataloader.md)"
            )
    else:
        sampler = DistributedSampler(dataset, shuffle=bool(shuffle), seeder=seeder, join=False)
    return sampler, batch_size, drop_last


class DataLoader(BatchAnswers, SeederLoader):
    """A ``torch.utils.data.DataLoader`` that resumes bit for bit from any step; same arguments.

    The epoch is the sampler's: it follows ``seeder.reseed(task, epoch)`` (task 1) or
    :meth:`set_epoch`. Once every batch of an epoch was handed out, the state says so, and a resumed
    loader yields nothing more for that epoch. An iterator started before :meth:`load_state_dict`
    raises at its next batch; ``iter(loader)`` continues from the loaded position.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``).
        batch_size: samples per batch; ``None`` (no batching) is refused: pass 1.
        shuffle: ``True``: seeder's :class:`~seeder.DistributedSampler` (one shard per global rank
            under a process group, else one replica); ``False`` or ``None``: the same, in
            sequential order.
        sampler: ``None``, or a :class:`seeder.DistributedSampler`, used as it is.
        batch_sampler: ``None``, or a ``torch.utils.data.BatchSampler`` over a
            :class:`seeder.DistributedSampler`.
        num_workers, collate_fn, pin_memory, drop_last, timeout, multiprocessing_context,
            prefetch_factor, persistent_workers, pin_memory_device, in_order: as torch's
            ``DataLoader`` (``in_order=False`` only without workers).
        worker_init_fn: called in each worker after seeder's seeding, as torch's.
        generator: ``None`` gets a private generator, so iterating never draws from torch's global
            RNG; or a ``torch.Generator``.
        seeder: a :class:`seeder.Seeder` other than the default one.
        allow_dataset_change: accept a state of another dataset (:meth:`dataset_identity`).

    Raises:
        TypeError: an ``IterableDataset`` (its loader is :class:`seeder.IterableDataLoader`);
            ``elastic=`` (:class:`seeder.ElasticDataLoader` is the elastic loader); another
            sampler or batch sampler (seeder could not restore its position: use
            ``torch.utils.data.DataLoader`` for it, see ``docs/dataloader.md``); a non-bool
            ``shuffle`` or another argument of the wrong type.
        ValueError: what seeder cannot resume (``in_order=False`` with workers, ``batch_size=None``,
            more than ``2**32`` batches an epoch), or arguments torch refuses together.

    Example:
        >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
        >>> loader = DataLoader(torch.arange(6), batch_size=4, shuffle=True, seeder=s)
        >>> [len(b) for b in loader], len(loader)
        ([4, 2], 2)
    """

    # What torch types as any sampler: seeder's own, and the batch size resolved from them.
    sampler: DistributedSampler
    batch_sampler: torch.utils.data.BatchSampler
    batch_size: int
    #: Whether ``__init__`` joins the seeder; a subclass that finishes building after it joins it
    #: itself (a loaded state waiting for this loader is handed over as it joins).
    joins_when_built = True

    @torch_signature
    def __init__(
        self,
        dataset: Any,
        *args: Any,
        seeder: Optional[Seeder] = None,
        allow_dataset_change: bool = False,
        **kwargs: Any,
    ) -> None:
        refuse_elastic(kwargs)
        refuse_iterable(dataset)
        # what _get_iterator relies on
        require("torch:DataLoader._get_iterator") and require("torch:DataLoader.dataset")
        seeder = resolve_seeder(seeder)
        given = TorchArgs.bind(f"seeder.{type(self).__name__}", args, kwargs)
        shuffle = given.check()
        refuse_unordered(given)
        sampler, batch_size, drop_last = _choose_sampler(dataset, given, shuffle, seeder)
        check_batch_count(sampler.num_samples, batch_size, drop_last)
        generator = given.generator
        if generator is None:
            generator = dataloader_generator(seeder=seeder)
        self._seeder = seeder
        self._owns_sampler = sampler.seeder is seeder and not _joined(seeder, sampler)
        self._wrapped = BatchSeedingDataset(dataset, SeedSource(seeder))
        #: Where the loader stands: batches handed out, a loaded resume point, the newest iterator.
        self.cursor = Cursor(sampler.epoch)
        self._pending: Optional[tuple[int, int, object]] = None
        self._init_answers(allow_dataset_change)
        batches = BatchKeys(sampler, batch_size, drop_last, self)
        super().__init__(
            dataset,
            **given.passed(
                batch_size=1,
                shuffle=None,
                sampler=None,
                batch_sampler=batches,
                drop_last=False,
                generator=generator,
            ),
        )
        # What users (and Lightning) read: the seeder sampler, the batch size, drop_last.
        self._show(sampler=sampler, batch_size=batch_size, drop_last=drop_last)
        sampler.loader_watch.show(self)
        if self.joins_when_built:
            seeder.join(self)

    # ------------------------------------------------------------ positions
    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs (the sampler's).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 4)
            >>> DataLoader(torch.arange(4), seeder=s).epoch
            4
        """
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next: the sampler's ``set_epoch`` (from then on it ignores ``reseed``).

        Args:
            epoch: an int in ``[0, 2**32)``.

        Raises:
            TypeError, ValueError: ``epoch`` is not such an int.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = DataLoader(torch.arange(4), seeder=s); loader.set_epoch(3); loader.epoch
            3
        """
        self.sampler.set_epoch(epoch)

    @property
    def batches_done(self) -> int:
        """Batches of epoch :attr:`epoch` handed out so far; after a resume, those before the stop
        count too.

        ``enumerate(loader, start=loader.batches_done)`` numbers a resumed epoch's batches as the
        uninterrupted run did (a progress log prints ``[3/6]``, not ``[0/6]``).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = DataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> _ = next(iter(loader)); loader.batches_done
            1
        """
        return self.cursor.batches_done(self.sampler.epoch)

    @property
    def num_batches(self) -> int:
        """Batches of an epoch on this rank (skipped ones included).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> DataLoader(torch.arange(10), batch_size=3, seeder=s).num_batches
            4
        """
        return len(self.batch_sampler)

    @property
    def rank(self) -> int:
        """The sampler's rank (and :attr:`world_size` its ``num_replicas``).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = DataLoader(torch.arange(4), seeder=s); loader.rank, loader.world_size
            (0, 1)
        """
        return int(self.sampler.rank)

    @property
    def world_size(self) -> int:
        """The number of shards: the sampler's ``num_replicas``."""
        return int(self.sampler.num_replicas)

    def pending_start(self) -> tuple[int, int, object]:
        """Where the iterator being created starts; read by the batch sampler in ``iter(loader)``.

        Returns:
            ``(epoch, first batch, token)``; the token identifies the iterator
            (``loader.cursor.live_token``).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 2)
            >>> DataLoader(torch.arange(4), seeder=s).pending_start()  # not in iter(): an error
            Traceback (most recent call last):
            RuntimeError: this seeder.DataLoader was rebuilt into another DataLoader (...) ...
        """
        if self._pending is None:  # another loader iterates the batch sampler: not seeder's batches
            raise rebuilt_error(f"seeder.{type(self).__name__}")
        return self._pending

    def seeder_position(self) -> dict[str, int]:
        """The loader's position for the seeder's records
        (:class:`~seeder._seeding.participant.Positioned`); changes nothing.

        Returns:
            ``{"epoch": ..., "position": samples of it handed out}``.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = DataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> _ = next(iter(loader))
            >>> loader.seeder_position()
            {'epoch': 0, 'position': 3}
        """
        return {"epoch": self.sampler.epoch, "position": self.samples_before(self.batches_done)}

    def samples_before(self, batch: int) -> int:
        """Samples of this rank's epoch in the batches before ``batch``.

        Args:
            batch: a batch index of the epoch.

        Returns:
            ``batch * batch_size``, at most the rank's samples in the epoch.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = DataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> loader.samples_before(2), loader.samples_before(4)
            (6, 10)
        """
        return min(batch * self.batch_size, self.sampler.num_samples)

    def __iter__(self) -> Any:
        epoch = self.sampler.epoch
        if self.cursor.resuming(epoch):  # nothing drew from the global RNGs since the load
            self.seeder.resume_check.warn_if_moved(self, f"seeder.{type(self).__name__}", epoch)
        self._pending = self.cursor.start(epoch)
        epoch, start, token = self._pending
        try:
            if start >= len(self.batch_sampler):
                logger.info(
                    "seeder.DataLoader: epoch %d was complete in the loaded state; nothing left "
                    "to yield",
                    epoch,
                )
            inner = super().__iter__()
        finally:
            self._pending = None
        return LoaderIter(self, inner, epoch, start, token)

    def _get_iterator(self) -> Any:
        # torch's iterators read loader.dataset: give them the seeding view, keep the user's dataset
        # visible.
        with self._showing(self._wrapped):
            return super()._get_iterator()

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook of ``seeder.reseed``: an owned sampler follows ``reseed(task,
        epoch)``; a joined one does so itself.

        Args:
            seeder: the seeder that reseeds.
            task_id: the reseed's task.
            epoch: the reseed's epoch.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = DataLoader(torch.arange(4), seeder=s)
            >>> s.reseed(1, 5); loader.epoch  # the seeder called loader.seeder_reseed(s, 1, 5)
            5
        """
        reseeded(self, task_id)
        if self._owns_sampler:
            self.sampler.seeder_reseed(seeder, task_id, epoch)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position (batches and samples handed out) and the sampler's state.

        Returns:
            A dict of plain values (``format``, ``version``, ``epoch``, ``batch``, ``position``,
            ``batch_size``, ``drop_last``, ``num_batches``, ``sampler``, ``skips``, ``dataset``,
            ``seed``) for :meth:`load_state_dict`.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = DataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> it = iter(loader); _ = next(it)
            >>> st = loader.state_dict(); st["batch"], st["position"], st["num_batches"]
            (1, 3, 4)
        """
        return self.state_dict_at(self.batches_done)

    def state_dict_at(self, batches_done: int) -> dict[str, Any]:
        """:meth:`state_dict` at the position after ``batches_done`` batches of epoch :attr:`epoch`
        (a pure function of the position: any batch of the epoch).

        Args:
            batches_done: batches of the current epoch handed out, in ``[0, num_batches]``.

        Returns:
            The state at that position.

        Raises:
            TypeError, ValueError: ``batches_done`` is not an int in ``[0, num_batches]``.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = DataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> loader.state_dict_at(2)["position"]
            6
        """
        batch = check_int(batches_done, "batches_done", low=0, high=len(self.batch_sampler))
        return {
            "format": "seeder.loader",
            "version": LOADER_STATE_VERSION,
            "epoch": self.sampler.epoch,
            "batch": batch,
            "position": self.samples_before(batch),
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "num_batches": len(self.batch_sampler),
            "sampler": self.sampler.state_dict(),
            **self._answers_state(),
        }

    def check_state_dict(self, state: Any, load: Optional[LoadContext] = None) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this loader; change nothing.

        Args:
            state: what :meth:`state_dict` returned (in this run or a saved one).
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: not a loader state, another ``batch_size``, ``drop_last``, dataset
                (:meth:`dataset_identity`) or world size, a corrupt position, or a sampler state.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = DataLoader(torch.arange(4), seeder=s)
            >>> loader.check_state_dict({"format": "x"})  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            seeder.StateError: not a seeder.DataLoader state: pass the dict returned by ...
        """
        self._check_header(state, "seeder.loader", {1: _STATE_KEYS_V1, 2: _STATE_KEYS})
        for name in ("batch_size", "drop_last", "num_batches"):
            have = {
                "batch_size": self.batch_size,
                "drop_last": self.drop_last,
                "num_batches": len(self.batch_sampler),
            }[name]
            if state[name] != have or type(state[name]) is not type(have):
                raise StateError(
                    f"the seeder.DataLoader state was saved with {name}={state[name]!r}, this "
                    f"loader has {have!r}; resume with the same dataset, batch_size, drop_last and "
                    f"world size"
                )
        self.sampler.check_state_dict(state["sampler"], load)
        if state["epoch"] != state["sampler"]["epoch"] or not is_int(state["epoch"]):
            raise StateError(
                f"seeder.DataLoader state epoch {state['epoch']!r} differs from its sampler's "
                f"{state['sampler']['epoch']!r}; the state is corrupt"
            )
        batch = state["batch"]
        if not is_int(batch) or not 0 <= batch <= state["num_batches"]:
            raise StateError(
                f"seeder.DataLoader state['batch'] must be an int in [0, {state['num_batches']}], "
                f"got {batch!r}"
            )
        if state["position"] != self.samples_before(batch):
            raise StateError(
                f"seeder.DataLoader state['position'] {state['position']!r} does not match batch "
                f"{batch} of size {self.batch_size}; the state is corrupt"
            )

    def load_state_dict(self, state: dict[str, Any], load: Optional[LoadContext] = None) -> None:
        """Continue from ``state``: the next ``iter(loader)`` yields exactly the batches not yet
        handed out (O(1)).

        Loading the same state twice (seeder and a framework both restore it) is harmless.

        Args:
            state: what :meth:`state_dict` returned.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: the state does not fit (see :meth:`check_state_dict`); nothing changed.
            RuntimeError: called inside a DataLoader worker.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = DataLoader(torch.arange(6), batch_size=2, seeder=s)
            >>> it = iter(loader); _ = next(it); state = loader.state_dict()
            >>> again = DataLoader(torch.arange(6), batch_size=2, seeder=s)
            >>> again.load_state_dict(state)
            >>> [b.tolist() for b in again]
            [[2, 3], [4, 5]]
        """
        refuse_in_worker("seeder.DataLoader.load_state_dict()")
        self.check_state_dict(state, load)
        self.sampler.load_state_dict(state["sampler"], load)
        epoch = check_key(state["epoch"], "epoch")
        self.cursor.loaded(epoch, int(state["batch"]))
        # inside the epoch: its first batch checks the global RNGs
        if 0 < int(state["batch"]) < len(self.batch_sampler):
            self.seeder.resume_check.want(self)
        self._load_answers(state)

    def __repr__(self) -> str:
        return (
            f"seeder.DataLoader(batch_size={self.batch_size}, num_workers={self.num_workers}, "
            f"epoch={self.sampler.epoch}, sampler={self.sampler!r})"
        )


def _joined(seeder: Seeder, sampler: DistributedSampler) -> bool:
    return any(p is sampler for p in seeder.participants())
