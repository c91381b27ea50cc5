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

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(42)
    >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, seeder=s)
    >>> s.reseed(1, 0); order0 = list(sampler)
    >>> s.reseed(1, 1); order1 = list(sampler)     # follows the epoch, no set_epoch needed
    >>> len(order0), order0 != order1
    (5, True)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np
import torch
import torch.utils.data.distributed

from seeder._checks import check_bool, is_int
from seeder._run.trace import record_step
from seeder._seeding.core import Seeder
from seeder._seeding.default import UsesSeeder, resolve_seeder
from seeder._seeding.derive import TRAIN_TASK, check_key
from seeder._seeding.distributed import refuse_in_worker
from seeder.data._audit import LoaderWatch
from seeder.data._order import index_blocks, shard_sizes, shuffle_key
from seeder.data._sampler_checks import (
    SAMPLER_STATE_VERSION,
    check_advance,
    check_sampler_args,
    check_sampler_state,
    run_constraints,
)
from seeder.data._sampler_iter import Progress, SamplerIterator
from seeder.data._workers import SeededDataset

__all__ = ["DistributedSampler"]

logger = logging.getLogger("seeder")


def _check_not_stopped(progress: Progress) -> None:
    if progress.stopped:
        raise RuntimeError(
            "this iterator of the sampler was started before sampler.load_state_dict(): it stops "
            "here instead of yielding indices that the loaded state does not continue; call "
            "iter(sampler) again (or iter() on the DataLoader around it) to continue from the "
            "loaded position"
        )


class DistributedSampler(UsesSeeder, torch.utils.data.distributed.DistributedSampler):
    """Shard and shuffle a dataset across ranks; the order comes from the seeder.

    Accepted wherever :class:`torch.utils.data.DistributedSampler` is (it is a
    subclass): ``DataLoader(sampler=...)``, ``set_epoch``, ``len``.

    * ``num_replicas``/``rank``: given, else the process group's, else one replica (rank 0).
    * ``seed``: ``None`` (default) takes the master seed of the seeder; an int makes the
      order independent of the seeder (in ``mode="torch"`` it is torch's ``seed``).
    * The sampler joins ``seeder`` (the default one unless given) and follows every
      ``reseed(task, epoch)`` of its ``task`` (1, the training loop): forgetting
      ``set_epoch`` is harmless. Once you call :meth:`set_epoch` yourself, your calls
      alone decide the epoch.
    * Mid-epoch resume: call :meth:`advance` with the size of each batch your loop has
      *finished*; :meth:`state_dict` saves that count, and after :meth:`load_state_dict`
      the next iteration yields exactly the remaining indices (O(1) in ``"feistel"`` mode).
    * ``join=False``: the sampler does not join the seeder (no reseed following, no state in
      ``seeder.state_dict()``); the object that owns it does that (:class:`seeder.DataLoader`).
    * Over a :class:`seeder.data.SeededDataset` it yields ``(epoch, index)`` pairs, so that
      workers can seed each sample (``with_epoch`` overrides the detection).

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(0)
    >>> a = DistributedSampler(range(7), num_replicas=2, rank=0, seeder=s)
    >>> b = DistributedSampler(range(7), num_replicas=2, rank=1, seeder=s)
    >>> sorted(set(a) | set(b)) == list(range(7)), len(a)
    (True, 4)
    """

    seeder_kind = "sampler"

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
        n, num_replicas, rank, shuffle, seed, drop_last, task, stream, with_epoch = (
            check_sampler_args(
                dataset,
                num_replicas,
                rank,
                shuffle,
                seed,
                drop_last,
                mode,
                task,
                stream,
                with_epoch,
            )
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
        self._live: Optional[Progress] = (
            None  # the live iteration's progress, until it hands out its last block
        )
        if check_bool(join, "join"):
            seeder.join(self)

    # ------------------------------------------------------------- epochs
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration; from now on the sampler ignores ``reseed``.

        Setting the epoch it already has keeps a position loaded by :meth:`load_state_dict`.
        """
        epoch = check_key(epoch, "epoch")
        self._manual = True
        self._switch(epoch, "set_epoch")

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook: follow ``reseed(task, epoch)`` of this sampler's task
        until :meth:`set_epoch` is used."""
        if task_id == self.task and not self._manual:
            # a reseed that runs takes this run's key (the same as a loaded one of this run)
            self._loaded = None
            self._switch(epoch, "reseed")

    def _switch(self, epoch: int, how: str) -> None:
        if epoch == self.epoch:
            return
        if self._resume:
            logger.info(
                "sampler: epoch %d via %s drops the loaded position %d of epoch %d",
                epoch,
                how,
                self._resume,
                self.epoch,
            )
        self.epoch, self._loaded = epoch, None
        self._resume = self._consumed = self._handed = self._left_from = 0
        self._token, self._finished, self._live = object(), False, None

    # ------------------------------------------------------------ keys
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
        record_step(
            self._seeder, "sampler", epoch=epoch, step=None, position=start
        )  # $SEEDER_TRACE only
        progress = Progress(start)
        self._live, self._left_from = progress, start
        it = SamplerIterator.from_iterable(self._iters(key, token, progress, epoch))
        it.progress, it.sampler = progress, self
        return it

    def blocks(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        """This rank's indices of ``epoch`` from its sample ``start`` on, as int64 arrays; no
        bookkeeping.

        The order :meth:`__iter__` yields, without ``(epoch, index)`` pairs, and without
        touching the position that :meth:`advance` and :meth:`state_dict` keep: for an owner
        that counts the position itself (:class:`seeder.DataLoader`). O(1) to start anywhere.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
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
            _check_not_stopped(progress)
            if self._token is token:
                self._handed = end
            yield items
        _check_not_stopped(progress)
        if self._token is token:
            self._finished, self._live, self._left_from = True, None, 0

    def seeder_position(self) -> dict[str, int]:
        """:class:`~seeder._seeding.participant.Positioned`: epoch and samples consumed;
        unlike :meth:`state_dict`, never warns."""
        return {"epoch": self.epoch, "position": self._consumed}

    @property
    def consumed(self) -> int:
        """Samples of the current epoch reported with :meth:`advance` (or restored
        by :meth:`load_state_dict`)."""
        return self._consumed

    def advance(self, n: int) -> None:
        """Record that the training loop has finished ``n`` more samples of this epoch.

        Call it after each step with the batch's real size (``len(labels)``):
        :meth:`state_dict` saves this count, not the indices the DataLoader has
        prefetched. Counting past the blocks the sampler has handed out (or past the
        epoch's end) raises ``ValueError``.

        >>> import seeder, torch
        >>> s = seeder.Seeder(); s.init(0)
        >>> sampler = DistributedSampler(range(8), seeder=s)
        >>> loader = seeder.data.watch_loader(torch.utils.data.DataLoader(
        ...     range(8), batch_size=3, sampler=sampler, generator=seeder.data.dataloader_generator(seeder=s)))
        >>> for batch in loader:
        ...     sampler.advance(len(batch)); break
        >>> sampler.state_dict()["position"]
        3
        """
        self._consumed += check_advance(
            n, self._consumed, self._handed, self.num_samples, self.epoch
        )
        record_step(
            self._seeder, "sampler", epoch=self.epoch, step=None, position=self._consumed
        )  # $SEEDER_TRACE only

    # ------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, shuffle key and layout: ints, bools and strings only.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
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

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this sampler, or has another
        shuffle key or epoch than the run it is loaded into implies
        (:func:`.sampler_checks.run_constraints`); change nothing."""
        key_of, epoch = run_constraints(
            self._seeder, self.seed, self.mode, self.task, self.stream, self.shuffle, self._manual
        )
        check_sampler_state(state, self._layout(), self.num_samples, key_of, epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields exactly the samples after its
        position.

        The epoch comes from the state, and its shuffle key too (so a resumed epoch keeps
        its order). Validates first; a bad state raises and changes nothing.

        >>> import seeder, torch
        >>> s = seeder.Seeder(); s.init(0)
        >>> def loader(sampler):
        ...     return seeder.data.watch_loader(torch.utils.data.DataLoader(
        ...         range(10), batch_size=2, sampler=sampler, generator=seeder.data.dataloader_generator(seeder=s)))
        >>> a = DistributedSampler(range(10), seeder=s); full = list(loader(a)); a.advance(4)
        >>> b = DistributedSampler(range(10), seeder=s); b.load_state_dict(a.state_dict())
        >>> [x.tolist() for x in loader(b)] == [x.tolist() for x in full[2:]]
        True
        """
        refuse_in_worker("DistributedSampler.load_state_dict()")
        self.check_state_dict(state)
        if (
            self._live is not None
        ):  # the live iteration stops at its next index instead of going on in the old order
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
