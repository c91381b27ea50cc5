"""The one interface of seeder's loaders: what the integrations (and users) ask any of them.

:class:`SeederLoader` is the base class of :class:`seeder.DataLoader`,
:class:`seeder.ElasticDataLoader` and :class:`seeder.IterableDataLoader` (a
``torch.utils.data.DataLoader`` each): the epoch and how far it got (``epoch``, ``set_epoch``,
``batches_done``, ``num_batches``), how its data is split over ranks (``rank``, ``world_size``,
``global_batch_size``), its state at a position (``state_dict_at``, ``state_dict``,
``check_state_dict``, ``load_state_dict``) and what its batches hold (``indices_at``,
``global_indices_at``, ``skip``, ``skipped``). A loader that cannot answer a question (a stream
cannot compute a batch's indices) raises an error that says why, through the same method. A
framework integration asks these and never which class the loader is.

Example:
    >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
    >>> loader = seeder.DataLoader(torch.arange(10), batch_size=4, seeder=s)
    >>> isinstance(loader, SeederLoader), loader.num_batches, loader.global_batch_size
    (True, 3, 4)
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any, Optional

import torch.utils.data

from seeder._seeding.default import UsesSeeder
from seeder.data._batches import KeptByAccelerate

__all__ = ["SeederLoader"]


class SeederLoader(
    KeptByAccelerate, UsesSeeder, torch.utils.data.DataLoader, metaclass=abc.ABCMeta
):
    """A ``torch.utils.data.DataLoader`` whose position and batches seeder knows: the interface.

    Every member below is answered by each of seeder's loaders; ``isinstance(x, SeederLoader)``
    tells a seeder loader from any other.

    Example:
        >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 2)
        >>> loader = seeder.ElasticDataLoader(torch.arange(8), batch_size=2, seeder=s)
        >>> loader.epoch, loader.batches_done, loader.rank, loader.world_size
        (2, 0, 0, 1)
    """

    seeder_kind = "loader"
    #: :class:`~seeder._seeding.participant.Elastic`: ``True`` where the state loads on any world
    #: size (its position does not count this rank's batches).
    seeder_elastic = False

    # ------------------------------------------------------------ the epoch
    @property
    @abc.abstractmethod
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs."""

    @abc.abstractmethod
    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next (``seeder.reseed(1, epoch)`` does it for every loader)."""

    @property
    @abc.abstractmethod
    def batches_done(self) -> int:
        """Batches of :attr:`epoch` handed out so far, those before a resume's stop included."""

    @property
    @abc.abstractmethod
    def num_batches(self) -> Optional[int]:
        """Batches of :attr:`epoch` on this rank; ``None`` where only reading tells (a stream, which
        has no length)."""

    # ------------------------------------------------------------ the ranks
    @property
    def rank(self) -> int:
        """The rank whose share of the data this loader yields: the seeder's, where the loader's
        sampler does not say another.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> seeder.DataLoader(torch.arange(8), seeder=s).rank
            0
        """
        return self.seeder.rank

    @property
    def world_size(self) -> int:
        """The number of ranks the data is split over: the seeder's, where the loader's sampler
        does not say another.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> seeder.DataLoader(torch.arange(8), seeder=s).world_size
            1
        """
        return self.seeder.world_size

    @property
    def global_batch_size(self) -> int:
        """Samples of one step over all ranks: ``batch_size * world_size`` (a batch size of
        ``None`` counts as 1).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> seeder.DataLoader(torch.arange(8), batch_size=4, seeder=s).global_batch_size
            4
        """
        return (self.batch_size or 1) * self.world_size

    # ------------------------------------------------------------ the state
    def elastic_step(self, state: dict[str, Any]) -> Optional[int]:
        """The global step ``state`` stands at, where :attr:`seeder_elastic` (a state loaded on
        another world size re-derives the rank streams by it); ``None`` for any other loader.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = seeder.DataLoader(torch.arange(8), seeder=s)
            >>> loader.seeder_elastic, loader.elastic_step(loader.state_dict())
            (False, None)
        """
        return None

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The position (and what checks a state against the loader), for
        :meth:`load_state_dict`."""

    @abc.abstractmethod
    def state_dict_at(self, batches_done: int) -> dict[str, Any]:
        """:meth:`state_dict` as of ``batches_done`` batches of :attr:`epoch` handed out (a
        framework that fetched ahead saves what it trained)."""

    @abc.abstractmethod
    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` unless this loader continues from ``state``; change
        nothing."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next ``iter(loader)`` yields the batches not handed out."""

    # --------------------------------------------------------- the batches
    @abc.abstractmethod
    def indices_at(self, epoch: int, batch: int, *, rank: Optional[int] = None) -> list[int]:
        """The dataset indices of batch ``batch`` of ``epoch``, without iterating."""

    @abc.abstractmethod
    def global_indices_at(self, epoch: int, batch: int) -> list[list[int]]:
        """Every rank's part of step ``batch`` of ``epoch``, in rank order."""

    @abc.abstractmethod
    def skip(self, epoch: int, batches: Any) -> None:
        """Never hand out ``batches`` of ``epoch``."""

    @abc.abstractmethod
    def skipped(self, epoch: int) -> list[int]:
        """The batch indices of ``epoch`` this loader never hands out."""

    # ------------------------------------------------------ shared by all
    def _show(self, **attributes: Any) -> None:
        """Set what users (and frameworks) read, past torch's refusal to change them after
        ``__init__``."""
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    @contextlib.contextmanager
    def _showing(self, dataset: Any) -> Iterator[None]:
        """``self.dataset`` is ``dataset`` inside the block (torch's iterators read it), the user's
        dataset again after it."""
        user = self.__dict__["dataset"]
        object.__setattr__(self, "dataset", dataset)
        try:
            yield
        finally:
            object.__setattr__(self, "dataset", user)
