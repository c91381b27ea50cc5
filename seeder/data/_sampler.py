"""A drop-in ``DistributedSampler`` whose order comes from the seeder, with O(1) mid-epoch resume.

The shuffle key of epoch ``e`` is ``derive(Domain.SAMPLER, task, e, rank=0, stream)``:
the same on every rank, new every epoch, and unrelated between epochs and
master seeds (no ``seed + epoch`` arithmetic). Rank ``r`` of ``R`` takes positions
``r, r + R, r + 2R, ...`` of the shuffled (and padded or cut) index list, exactly
as :class:`torch.utils.data.DistributedSampler` does.

Two modes:

* ``"feistel"`` (default): a keyed bijection of ``range(N)``
  (:mod:`seeder.data._permutation`) evaluated in vectorised blocks. Starting an epoch
  or resuming at any position costs O(1) time and memory.
* ``"torch"``: ``torch.randperm`` as torch's sampler does it, O(N) per epoch. With
  ``seed=s`` it yields exactly what ``torch.utils.data.DistributedSampler(seed=s)``
  yields, for migrating existing experiments.

Here too: the checks of its arguments (each raises before anything changes); its state's checks
are :mod:`seeder.data._sampler_state`'s, its iterator :mod:`seeder.data._sampler_iter`'s.

Example:
    >>> import seeder; s = seeder.Seeder(); s.init(42)
    >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, seeder=s)
    >>> s.reseed(1, 0); order0 = list(sampler)
    >>> s.reseed(1, 1); order1 = list(sampler)     # follows the epoch, no set_epoch needed
    >>> len(order0), order0 != order1
    (5, True)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Optional, cast

import numpy as np
import torch
import torch.distributed
import torch.utils.data.distributed

from seeder import _hooks as hooks
from seeder._checks import check_bool, is_int
from seeder._seeding.core import Seeder
from seeder._seeding.default import UsesSeeder, resolve_seeder
from seeder._seeding.derive import MAX_MASTER_SEED, TRAIN_TASK, check_key
from seeder._seeding.distributed import MAX_WORLD_SIZE, process_group_active, refuse_in_worker
from seeder._seeding.participant import LoadContext
from seeder.data._audit import LoaderWatch
from seeder.data._order import MODES, index_blocks, shard_sizes, shuffle_key
from seeder.data._provenance import SamplerAnswers
from seeder.data._sampler_iter import Progress, SamplerIterator, check_not_stopped
from seeder.data._sampler_state import (
    SAMPLER_STATE_VERSION,
    check_sampler_state,
    run_constraints,
)
from seeder.data._workers import SeededDataset

__all__ = ["DistributedSampler", "check_sampler_args", "check_advance"]

logger = logging.getLogger("seeder")


def check_sampler_args(
    dataset: Any,
    num_replicas: Any,
    rank: Any,
    shuffle: Any,
    seed: Any,
    drop_last: Any,
    mode: Any,
    task: Any,
    stream: Any,
    with_epoch: Any,
) -> tuple[int, int, int, bool, Optional[int], bool, int, int, Optional[bool]]:
    """The sampler's arguments in plain types.

    Returns ``(len(dataset), num_replicas, rank, shuffle, seed, drop_last, task, stream,
    with_epoch)``; ``num_replicas``/``rank`` ``None`` take the process group's (one replica without
    one).

    >>> check_sampler_args(range(5), 2, 2, True, None, False, "feistel", 1, 0, None)
    Traceback (most recent call last):
    ...
    ValueError: Invalid rank 2: rank must be in [0, 1] for num_replicas=2
    """
    n = _dataset_length(dataset)
    num_replicas, rank = _check_world(num_replicas, rank)
    shuffle = check_bool(shuffle, "shuffle")
    drop_last = check_bool(drop_last, "drop_last")
    seed = _check_seed(seed)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    task, stream = check_key(task, "task"), check_key(stream, "stream")
    if with_epoch is not None:
        with_epoch = check_bool(with_epoch, "with_epoch")
    return n, num_replicas, rank, shuffle, seed, drop_last, task, stream, with_epoch


def _dataset_length(dataset: Any) -> int:
    """``len(dataset)``, or an error that says what a sampler's dataset needs."""
    try:
        return int(len(dataset))
    except TypeError:
        raise TypeError(
            f"DistributedSampler needs a dataset with __len__, got {type(dataset).__name__}"
        ) from None
    except OverflowError:
        raise ValueError(
            f"the dataset's __len__ returned more than Python's len() can hold (sys.maxsize = "
            f"2**63 - 1); seeder.DistributedSampler takes datasets of up to 2**63 - 1 items: split "
            f"{type(dataset).__name__} into several datasets"
        ) from None


def _check_world(num_replicas: Any, rank: Any) -> tuple[int, int]:
    """``(num_replicas, rank)`` as ints, ``None`` taking the process group's (one replica without
    one)."""
    if num_replicas is None:
        num_replicas = torch.distributed.get_world_size() if process_group_active() else 1
    if rank is None:
        rank = torch.distributed.get_rank() if process_group_active() else 0
    if not is_int(num_replicas):
        raise TypeError(
            f"num_replicas must be an int (the number of ranks), got {type(num_replicas).__name__} "
            f"{num_replicas!r}"
        )
    if not 1 <= num_replicas <= MAX_WORLD_SIZE:
        raise ValueError(
            f"num_replicas must be in [1, 2**32] (the number of ranks; a rank is one 32-bit word "
            f"of the batch seeds' key), got {num_replicas}"
        )
    if not is_int(rank):
        raise TypeError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"Invalid rank {rank}: rank must be in [0, {num_replicas - 1}] for "
            f"num_replicas={num_replicas}"
        )
    return int(num_replicas), int(rank)


def _check_seed(seed: Any) -> Optional[int]:
    """``seed`` as an int, or ``None`` (the seeder's master seed)."""
    if seed is None:
        return None
    if not is_int(seed):
        raise TypeError(
            f"seed must be None (use the seeder's master seed) or an int, got "
            f"{type(seed).__name__} {seed!r}"
        )
    if not 0 <= seed <= MAX_MASTER_SEED:
        raise ValueError(
            f"seed must be None (use the seeder's master seed) or an int in [0, 2**63 - 1], "
            f"got {seed!r}"
        )
    return int(seed)


def check_advance(n: Any, consumed: int, handed: int, num_samples: int, epoch: int) -> int:
    """``n`` as an int if ``consumed + n`` samples stay within the ``handed`` ones, else
    ``ValueError`` naming the fix.

    >>> check_advance(3, 0, 4, 8, 0)
    3
    """
    if not is_int(n) or n < 0:
        raise ValueError(f"advance() takes the number of samples consumed (an int >= 0), got {n!r}")
    if consumed + n > handed:
        raise ValueError(
            f"advance({n}) would count {consumed + n} samples consumed in epoch {epoch}, more than "
            f"the {handed} (of {num_samples}) this sampler has handed out; pass the size of the "
            f"batch actually trained on (e.g. len(labels)), once per batch"
        )
    return int(n)


_TorchSampler = torch.utils.data.distributed.DistributedSampler


class DistributedSampler(SamplerAnswers, UsesSeeder, _TorchSampler):
    """Shard and shuffle a dataset across ranks; the order comes from the seeder.

    A drop-in for :class:`torch.utils.data.DistributedSampler` (a subclass) that follows every
    ``reseed(task, epoch)`` of its ``task`` until you call :meth:`set_epoch`. Mid-epoch resume:
    :meth:`advance` after each finished batch, :meth:`state_dict`, :meth:`load_state_dict`.

    Args:
        dataset: anything with ``__len__``.
        num_replicas, rank: given, else the process group's, else one replica (rank 0).
        shuffle: shuffle each epoch (else sequential order).
        seed: ``None`` takes the master seed of the seeder; an int makes the order independent of
            the seeder (in ``mode="torch"`` it is torch's ``seed``).
        drop_last: cut the index list to a multiple of ``num_replicas`` (else pad it), as torch.
        mode: ``"feistel"`` (O(1) start and resume) or ``"torch"`` (``torch.randperm``, torch's
            order for a given ``seed``).
        task: the reseed task whose epochs it follows (1, the training loop).
        stream: tells apart samplers of the same task, e.g. two datasets.
        with_epoch: yield ``(epoch, index)`` pairs; ``None`` does so over a
            :class:`seeder.data.SeededDataset`, so that workers can seed each sample.
        seeder: the :class:`seeder.Seeder` to join and take the order from; the default one if
            ``None``.
        join: ``False``: the sampler does not join the seeder (no reseed following, no state in
            ``seeder.state_dict()``); the object that owns it does that
            (:class:`seeder.DataLoader`).

    Raises:
        TypeError: a dataset without ``__len__``, or an argument of the wrong type.
        ValueError: ``rank`` outside ``[0, num_replicas)``, an unknown ``mode``, or a number out of
            range.

    Example:
        >>> import seeder; s = seeder.Seeder(); s.init(0)
        >>> a = DistributedSampler(range(7), num_replicas=2, rank=0, seeder=s)
        >>> b = DistributedSampler(range(7), num_replicas=2, rank=1, seeder=s)
        >>> sorted(set(a) | set(b)) == list(range(7)), len(a)
        (True, 4)
    """

    seeder_kind = "sampler"
    # torch types seed as int; None here takes the seeder's master seed.
    seed: Optional[int]  # type: ignore[assignment]

    def __init__(
        self,
        dataset: Any,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: Optional[int] = None,
        drop_last: bool = False,
        *,
        mode: str = "feistel",
        task: int = TRAIN_TASK,
        stream: int = 0,
        with_epoch: Optional[bool] = None,
        seeder: Optional[Seeder] = None,
        join: bool = True,
    ) -> None:
        given = (num_replicas, rank, shuffle, seed, drop_last, mode, task, stream, with_epoch)
        n, num_replicas, rank, shuffle, seed, drop_last, task, stream, with_epoch = (
            check_sampler_args(dataset, *given)
        )
        seeder = resolve_seeder(seeder)
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.mode, self.task, self.stream = mode, task, stream
        self._n = n
        self.num_samples, self.total_size = shard_sizes(self._n, self.num_replicas, drop_last)
        self.with_epoch = isinstance(dataset, SeededDataset) if with_epoch is None else with_epoch
        self._seeder = seeder
        last = seeder.last_reseed
        self.epoch = last[1] if last is not None and last[0] == task else 0
        self._manual = False  # set_epoch was called: stop following reseed
        self._loaded: Optional[tuple[int, int]] = None  # (epoch, key) from load_state_dict
        self._resume = 0  # where the next __iter__ starts
        self._consumed = 0
        self._token = object()  # identifies the live iteration; a new one orphans the old
        self._handed = 0  # end of the last block handed to the DataLoader (>= indices it pulled)
        self._finished = False  # the live iteration has handed out its last block
        #: What this sampler is told of the loader that iterates it
        #: (:func:`seeder.data.watch_loader`), and its warnings.
        self.loader_watch = LoaderWatch()
        # where the pending (loaded) or live iteration starts: len() is what is left from there
        self._left_from = 0
        # the live iteration's progress, until it hands out its last block
        self._live: Optional[Progress] = None
        if check_bool(join, "join"):
            seeder.join(self)

    # ------------------------------------------------------------- epochs
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration; from now on the sampler ignores ``reseed``.

        Setting the epoch it already has keeps a position loaded by :meth:`load_state_dict`.

        Args:
            epoch: an int in ``[0, 2**32)``.

        Raises:
            TypeError, ValueError: ``epoch`` is not such an int.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(4), seeder=s)
            >>> sampler.set_epoch(3); s.reseed(1, 7); sampler.epoch
            3
        """
        epoch = check_key(epoch, "epoch")
        self._manual = True
        self._switch(epoch, "set_epoch")

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook of ``seeder.reseed``: follow ``reseed(task, epoch)`` of this sampler's
        task until :meth:`set_epoch` is used.

        Args:
            seeder: the seeder that reseeds.
            task_id: the reseed's task.
            epoch: the reseed's epoch.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(4), seeder=s)
            >>> s.reseed(1, 5); sampler.epoch  # the seeder called sampler.seeder_reseed(s, 1, 5)
            5
        """
        if task_id == self.task and not self._manual:
            # a reseed that runs takes this run's key (the same as a loaded one of this run)
            self._loaded = None
            self._switch(epoch, "reseed")

    def _switch(self, epoch: int, how: str) -> None:
        if epoch == self.epoch:
            return
        if self._resume:
            dropped = (epoch, how, self._resume, self.epoch)
            logger.info(
                "sampler: epoch %d via %s drops the loaded position %d of epoch %d", *dropped
            )
        self.epoch, self._loaded = epoch, None
        self._resume = self._consumed = self._handed = self._left_from = 0
        self._token, self._finished, self._live = object(), False, None

    def _key(self, epoch: int) -> int:
        """The shuffle key of ``epoch``: the loaded one, ``seed + epoch`` (torch mode), or
        derived."""
        if self._loaded is not None and self._loaded[0] == epoch:
            return self._loaded[1]
        return shuffle_key(self._seeder, self.seed, self.mode, self.task, epoch, self.stream)

    # --------------------------------------------------------- iteration
    def __len__(self) -> int:
        """Indices the next (or live) iteration yields: after :meth:`load_state_dict`, what is left
        of the epoch."""
        return self.num_samples - self._left_from

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self.epoch, self._resume
        key = self._key(epoch) if self.shuffle else 0
        self._resume = 0
        token = object()
        self._token, self._consumed, self._handed, self._finished = token, start, start, False
        # the tools' callbacks only (seeder verify's trace)
        hooks.batch(self._seeder, "sampler", epoch=epoch, step=None, position=start)
        progress = Progress(start)
        self._live, self._left_from = progress, start
        # typeshed's chain.from_iterable returns chain, not the subclass it is called on
        it = cast(
            SamplerIterator, SamplerIterator.from_iterable(self._iters(key, token, progress, epoch))
        )
        it.progress, it.sampler = progress, self
        return it

    def blocks(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        """This rank's indices of ``epoch`` from its sample ``start`` on, as int64 arrays; no
        bookkeeping.

        The order :meth:`__iter__` yields, as plain indices, for an owner that counts the position
        itself (:class:`seeder.DataLoader`). O(1) to start anywhere.

        Args:
            epoch: the epoch whose order to yield.
            start: the first of this rank's samples to yield, in ``[0, num_samples]``.

        Returns:
            An iterator over consecutive blocks of indices.

        Raises:
            TypeError, ValueError: ``epoch`` or ``start`` out of range.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(10), seeder=s)
            >>> s.reseed(1, 0); full = list(sampler)
            >>> [int(i) for b in sampler.blocks(0, 4) for i in b] == full[4:]
            True
        """
        epoch = check_key(epoch, "epoch")
        if not is_int(start) or not 0 <= start <= self.num_samples:
            raise ValueError(f"start must be an int in [0, {self.num_samples}], got {start!r}")
        return self._blocks(self._key(epoch) if self.shuffle else 0, int(start))

    def _blocks(self, key: int, start: int) -> Iterator[np.ndarray]:
        return index_blocks(
            self.mode,
            self._n,
            self.num_samples,
            self.num_replicas,
            self.rank,
            key if self.shuffle else None,
            start,
        )

    def _iters(
        self, key: int, token: object, progress: Progress, epoch: int
    ) -> Iterator[Iterator[Any]]:
        """One C-level iterator per block (list iterators: they know how much is left); records how
        far the DataLoader got."""
        progress.started = True
        self.loader_watch.iterating(epoch, progress.start)
        if self._token is token:
            self._handed = progress.start
        for end, items in progress.draw(
            self._blocks(key, progress.start), epoch if self.with_epoch else None
        ):
            check_not_stopped(progress)
            if self._token is token:
                self._handed = end
            yield items
        check_not_stopped(progress)
        if self._token is token:
            self._finished, self._live, self._left_from = True, None, 0

    def seeder_position(self) -> dict[str, int]:
        """The sampler's position for the seeder's records
        (:class:`~seeder._seeding.participant.Positioned`); unlike :meth:`state_dict`, never warns.

        Returns:
            ``{"epoch": ..., "position": samples consumed}``.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> DistributedSampler(range(4), seeder=s).seeder_position()
            {'epoch': 0, 'position': 0}
        """
        return {"epoch": self.epoch, "position": self._consumed}

    @property
    def consumed(self) -> int:
        """Samples of the current epoch reported with :meth:`advance` (or restored by
        :meth:`load_state_dict`).

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(8), seeder=s); it = iter(sampler); _ = next(it)
            >>> sampler.advance(1); sampler.consumed
            1
        """
        return self._consumed

    def advance(self, n: int) -> None:
        """Record that the training loop has finished ``n`` more samples of this epoch.

        Call it after each step with the batch's real size (``len(labels)``): :meth:`state_dict`
        saves this count, not the indices the DataLoader has prefetched.

        Args:
            n: the samples of the batch just trained on.

        Raises:
            ValueError: ``n`` is not an int >= 0, or the count would pass the indices the sampler
                has handed out (or the epoch's end).

        Example:
            >>> import seeder, torch; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(8), seeder=s)
            >>> gen = seeder.data.dataloader_generator(seeder=s)
            >>> loader = seeder.data.watch_loader(torch.utils.data.DataLoader(
            ...     range(8), batch_size=3, sampler=sampler, generator=gen))
            >>> for batch in loader:
            ...     sampler.advance(len(batch)); break
            >>> sampler.state_dict()["position"]
            3
        """
        self._consumed += check_advance(
            n, self._consumed, self._handed, self.num_samples, self.epoch
        )
        # the tools' callbacks only (seeder verify's trace)
        hooks.batch(self._seeder, "sampler", epoch=self.epoch, step=None, position=self._consumed)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, shuffle key and layout.

        Warns (:class:`seeder.SeederWarning`) once per thing in the loader that would make the
        resume diverge (see :func:`seeder.data.watch_loader`).

        Returns:
            A dict of ints, bools and strings for :meth:`load_state_dict`.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> st = DistributedSampler(range(8), seeder=s).state_dict()
            >>> st["epoch"], st["position"], st["dataset_len"]
            (0, 0, 8)
        """
        self.loader_watch.check(self, handed=self._handed, finished=self._finished)
        return {
            "format": "seeder.sampler",
            "version": SAMPLER_STATE_VERSION,
            "epoch": self.epoch,
            "position": self._consumed,
            "key": self._key(self.epoch) if self.shuffle else 0,
            **self._layout(),
        }

    def _layout(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "dataset_len": self._n,
            "num_replicas": self.num_replicas,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "task": self.task,
            "stream": self.stream,
        }

    def check_state_dict(self, state: Any, load: Optional[LoadContext] = None) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this sampler; change nothing.

        A state with another shuffle key or epoch than the run implies is refused too.

        Args:
            state: what :meth:`state_dict` returned.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: what does not fit, and what to do.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = DistributedSampler(range(8), seeder=s)
            >>> sampler.check_state_dict({**sampler.state_dict(), "dataset_len": 9})
            ... # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            seeder.StateError: the sampler state was saved with a dataset of length 9, ...
        """
        run = (self.seed, self.mode, self.task, self.stream, self.shuffle, self._manual, load)
        key_of, epoch = run_constraints(self._seeder, *run)
        check_sampler_state(state, self._layout(), self.num_samples, key_of, epoch)

    def load_state_dict(self, state: dict[str, Any], load: Optional[LoadContext] = None) -> None:
        """Continue from ``state``: the next iteration yields exactly the samples after its
        position.

        The epoch comes from the state, and its shuffle key too (so a resumed epoch keeps its
        order).

        Args:
            state: what :meth:`state_dict` returned.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: the state does not fit (see :meth:`check_state_dict`); nothing changed.
            RuntimeError: called inside a DataLoader worker.

        Example:
            >>> import seeder, torch; s = seeder.Seeder(); s.init(0)
            >>> def loader(sampler):
            ...     return seeder.data.watch_loader(torch.utils.data.DataLoader(
            ...         range(10), batch_size=2, sampler=sampler,
            ...         generator=seeder.data.dataloader_generator(seeder=s)))
            >>> a = DistributedSampler(range(10), seeder=s); loader_a = loader(a)
            >>> full = list(loader_a); a.advance(4)
            >>> b = DistributedSampler(range(10), seeder=s); b.load_state_dict(a.state_dict())
            >>> loader_b = loader(b)  # a sampler holds its loader weakly: keep the loader
            >>> [x.tolist() for x in loader_b] == [x.tolist() for x in full[2:]]
            True
        """
        refuse_in_worker("DistributedSampler.load_state_dict()")
        self.check_state_dict(state, load)
        # the live iteration stops at its next index instead of going on in the old order
        if self._live is not None:
            self._live.stop()
        self.epoch = int(state["epoch"])
        self._loaded = (self.epoch, int(state["key"]))
        self._resume = self._consumed = self._handed = self._left_from = int(state["position"])
        self._token, self._finished, self._live = object(), False, None
        self.loader_watch.resuming(self._seeder, self.epoch, self._resume, self.num_samples)

    def __repr__(self) -> str:
        return (
            f"seeder.DistributedSampler(len={self._n}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, mode={self.mode!r}, epoch={self.epoch})"
        )
