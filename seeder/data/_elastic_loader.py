"""``seeder.ElasticDataLoader``: the same data whatever the world size, and a mid-epoch resume on
another one.

* One global order per epoch (a one-replica :class:`seeder.DistributedSampler`'s), cut into
  global batches of ``batch_size * world_size`` samples; each rank fetches its slice of each
  (:mod:`seeder.data._elastic`).
* Each sample's randomness is seeded from its position in the global order, so a sample gets
  the same augmentation on 1 or 8 ranks, with 0 or 8 workers.
* The state is global (epoch, position in the global order, global batch size): a checkpoint saved
  on ``W`` ranks loads on ``W'`` ranks and the next epoch's samples not yet trained follow, each
  once.

Example:
    >>> import torch, seeder; s = seeder.Seeder(); s.init(7); s.reseed(1, 0)
    >>> loader = seeder.ElasticDataLoader(torch.arange(10), batch_size=4, shuffle=True, seeder=s)
    >>> it = iter(loader); first = next(it); state = loader.state_dict()
    >>> state["position"], state["global_batch_size"]
    (4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
import torch.utils.data

from seeder._checks import check_bool, check_int, is_int
from seeder._errors import StateError
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._seeding.participant import LoadContext
from seeder.data._answers import PROVENANCE_KEYS, ElasticAnswers
from seeder.data._elastic import ElasticBatches, ElasticView, check_sample_rngs
from seeder.data._loader import LOADER_STATE_VERSION, DataLoader
from seeder.data._sampler import DistributedSampler
from seeder.data._torchargs import TorchArgs, torch_signature
from seeder.data._workers import FETCH_SEEDED, SeedSource

__all__ = ["ElasticDataLoader", "ELASTIC_STATE_VERSION"]

#: Version of the layout of :meth:`ElasticDataLoader.state_dict`.
ELASTIC_STATE_VERSION = 3
_KEYS_V2 = frozenset(
    {
        "format",
        "version",
        "epoch",
        "position",
        "global_batch_size",
        "dataset_len",
        "drop_last",
        "shuffle",
        "world_size",
        "sampler",
    }
)
# version 3 adds the skipped positions, the dataset's identity and the sampler's seed
_KEYS = _KEYS_V2 | PROVENANCE_KEYS


def _world(num_replicas: Optional[int], rank: Optional[int]) -> tuple[int, int]:
    active = process_group_active()
    world = check_int(
        num_replicas
        if num_replicas is not None
        else (torch.distributed.get_world_size() if active else 1),
        "num_replicas",
        low=1,
    )
    rank = check_int(
        rank if rank is not None else (torch.distributed.get_rank() if active else 0), "rank", low=0
    )
    if rank >= world:
        raise ValueError(f"rank must be in [0, {world - 1}] for num_replicas={world}, got {rank}")
    return world, rank


class ElasticDataLoader(ElasticAnswers, DataLoader):
    """A :class:`seeder.DataLoader` whose order and samples do not depend on the world size:
    ``batch_size`` per rank, global batch ``batch_size * world_size``; its state resumes mid-epoch
    on another world size.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``); ``__getitem__`` runs once
            per sample.
        batch_size: samples per rank and step.
        shuffle: the epoch's global order is shuffled (else sequential).
        num_workers, collate_fn, pin_memory, **kwargs: as torch's ``DataLoader``.
        drop_last: drop the last, short global batch; otherwise it is split evenly over the ranks (a
            rank whose share is empty yields one batch less: use ``drop_last=True`` under DDP when
            ``len(dataset) % global batch size`` may be below the world size).
        seeder: a :class:`seeder.Seeder` other than the default one.
        num_replicas, rank: default to the process group's (one replica without one).
        allow_global_batch_change: accept a state saved with another global batch size: the samples
            not yet trained follow, in the same order, in batches of the new size.
        sample_rngs: the global RNGs seeded from each sample's position before it is fetched, out of
            ``("python", "numpy", "torch")`` (all three by default). Each costs about 1-3 us a
            sample whether or not the sample draws; ``sample_rngs=()`` suits a dataset that draws
            from none (tokenised text), ``("torch",)`` torchvision's transforms. A sample that draws
            from a global RNG left out warns (:class:`seeder.SeederWarning`) and that RNG is seeded
            from then on.

    Raises:
        TypeError: ``sampler=``, ``batch_sampler=`` or ``elastic=`` given (the order is the
            loader's), an ``IterableDataset``, or ``sample_rngs`` a string or not iterable.
        ValueError: ``rank`` outside ``[0, num_replicas)``, a ``sample_rngs`` name not one of the
            three.

    Example:
        >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
        >>> two = [
        ...     seeder.ElasticDataLoader(
        ...         torch.arange(8), batch_size=2, num_replicas=2, rank=r, seeder=s
        ...     )
        ...     for r in (0, 1)
        ... ]
        >>> [b.tolist() for b in two[0]], [b.tolist() for b in two[1]]
        ([[0, 1], [4, 5]], [[2, 3], [6, 7]])
    """

    seeder_elastic = True  # seeder._seeding.participant.Elastic: a global state, any world size
    batch_sampler: ElasticBatches
    joins_when_built = False  # joins at the end of __init__, once its batch sampler is in place

    @torch_signature
    def __init__(
        self,
        dataset: Any,
        *args: Any,
        seeder: Optional[Seeder] = None,
        allow_dataset_change: bool = False,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        allow_global_batch_change: bool = False,
        sample_rngs: Sequence[str] = FETCH_SEEDED,
        **kwargs: Any,
    ) -> None:
        if "elastic" in kwargs:
            raise TypeError(
                f"seeder.ElasticDataLoader is the elastic loader: drop "
                f"elastic={kwargs['elastic']!r}"
            )
        given = TorchArgs.bind("seeder.ElasticDataLoader", args, kwargs)
        if given.sampler is not None or given.batch_sampler is not None:
            raise TypeError(
                "seeder.ElasticDataLoader owns the order (one global order per epoch): drop "
                "sampler= and batch_sampler=, pass shuffle= and batch_size= (per rank)"
            )
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError(
                f"seeder.ElasticDataLoader needs a map-style dataset (with __getitem__ and "
                f"__len__), got the IterableDataset {type(dataset).__name__}"
            )
        seeder = resolve_seeder(seeder)
        shuffle = given.check()
        batch_size = check_int(given.batch_size, "batch_size", low=1)
        world, self_rank = _world(num_replicas, rank)
        self.allow_global_batch_change = check_bool(
            allow_global_batch_change, "allow_global_batch_change"
        )
        rngs = check_sample_rngs(sample_rngs)
        self._origin_pending: Optional[tuple[int, int]] = None  # (epoch, origin) from a load
        # (token, epoch, origin) of the live iterator
        self._origin_live: tuple[Any, int, int] = (None, 0, 0)
        # the base class's state, while load_state_dict runs
        self._translated: Optional[dict[str, Any]] = None
        order = DistributedSampler(
            dataset,
            num_replicas=1,
            rank=0,
            shuffle=bool(shuffle),
            seeder=seeder,
            join=False,
            with_epoch=False,
        )
        super().__init__(
            dataset,
            **given.passed(shuffle=None, sampler=order),
            seeder=seeder,
            allow_dataset_change=allow_dataset_change,
        )
        self._show(
            batch_sampler=ElasticBatches(order, batch_size, self.drop_last, self, world, self_rank)
        )
        # what the base class's fetchers see
        self._wrapped = ElasticView(dataset, SeedSource(seeder), rngs)
        seeder.join(self)

    # ------------------------------------------------------------ positions
    @property
    def world_size(self) -> int:
        """The number of ranks the global batch is split over.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> ElasticDataLoader(torch.arange(8), num_replicas=4, rank=1, seeder=s).world_size
            4
        """
        return self.batch_sampler.world

    @property
    def rank(self) -> int:
        """The rank whose slice of each global batch this loader yields.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> ElasticDataLoader(torch.arange(8), num_replicas=4, rank=1, seeder=s).rank
            1
        """
        return self.batch_sampler.rank

    @property
    def global_batch_size(self) -> int:
        """Samples per global step: ``batch_size * world_size``.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = ElasticDataLoader(torch.arange(8), 2, num_replicas=4, rank=1, seeder=s)
            >>> loader.global_batch_size
            8
        """
        return self.batch_sampler.global_batch

    def origin(self) -> int:
        """Position of global step 0's first sample in this epoch.

        Returns:
            0, unless a resume changed the global batch size: then the position the saved run had
            reached, from which the new global batches start.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> ElasticDataLoader(torch.arange(8), batch_size=2, seeder=s).origin()
            0
        """
        epoch = self.sampler.epoch
        if self._origin_pending is not None and self._origin_pending[0] == epoch:
            return self._origin_pending[1]
        token, live_epoch, origin = self._origin_live
        return (
            origin
            if token is not None and token is self.cursor.live_token and live_epoch == epoch
            else 0
        )

    def take_origin(self, epoch: int, token: object) -> int:
        """The origin of the iterator starting now (read by the batch sampler); a loaded one is used
        once.

        Args:
            epoch: the epoch the iterator runs.
            token: identifies the iterator (``cursor.live_token``).

        Returns:
            The position of its global step 0's first sample.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = ElasticDataLoader(torch.arange(8), batch_size=2, seeder=s)
            >>> loader.take_origin(0, object())
            0
        """
        origin = 0
        if self._origin_pending is not None and self._origin_pending[0] == epoch:
            origin = self._origin_pending[1]
        self._origin_pending = None
        self._origin_live = (token, epoch, origin)
        return origin

    def samples_before(self, batch: int) -> int:
        """Samples of the epoch's global order in the global steps before this rank's batch
        ``batch``.

        Args:
            batch: a batch index of this rank's epoch.

        Returns:
            The position in the global order (at most the epoch's length).

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = ElasticDataLoader(torch.arange(10), 2, num_replicas=2, rank=0, seeder=s)
            >>> loader.samples_before(1), loader.samples_before(3)
            (4, 10)
        """
        origin, g, n = self.origin(), self.global_batch_size, self.sampler.num_samples
        if batch >= len(self.batch_sampler):  # everything this rank takes part in was handed out
            return min(origin + self.batch_sampler.steps(origin) * g, n)
        return min(origin + batch * g, n)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position (samples of the global order done) and global batch size: the same on
        every rank, any world size.

        Returns:
            A dict of plain values (``format``, ``version``, ``epoch``, ``position``,
            ``global_batch_size``, ``dataset_len``, ``drop_last``, ``shuffle``, ``world_size``,
            ``sampler``, the skipped positions ``skips``, the dataset's identity ``dataset`` and
            the sampler's ``seed``) for :meth:`load_state_dict`.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = ElasticDataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> it = iter(loader); _ = next(it)
            >>> st = loader.state_dict(); st["position"], st["epoch"]
            (3, 0)
        """
        return self.state_dict_at(self.batches_done)

    def state_dict_at(self, batches_done: int) -> dict[str, Any]:
        """:meth:`state_dict` at the position after this rank's first ``batches_done`` batches of
        epoch :attr:`epoch`.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = ElasticDataLoader(torch.arange(10), batch_size=3, seeder=s)
            >>> loader.state_dict_at(2)["position"]
            6
        """
        base = super().state_dict_at(batches_done)
        return {
            "format": "seeder.elastic_loader",
            "version": ELASTIC_STATE_VERSION,
            "epoch": base["epoch"],
            "position": base["position"],
            "global_batch_size": self.global_batch_size,
            "dataset_len": self.sampler.num_samples,
            "drop_last": self.drop_last,
            "shuffle": self.sampler.shuffle,
            "world_size": self.world_size,
            "sampler": base["sampler"],
            **self._answers_state(),
        }

    def check_state_dict(self, state: Any, load: Optional[LoadContext] = None) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this loader (any world size
        fits); change nothing.

        Args:
            state: what :meth:`state_dict` returned, on any world size.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: not an elastic loader state; another dataset, ``shuffle`` or ``drop_last``;
                another global batch size without ``allow_global_batch_change=True``; a corrupt
                position; a sampler state that does not fit.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = seeder.ElasticDataLoader(torch.arange(4), seeder=s)
            >>> loader.check_state_dict({"format": "seeder.loader"})  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            seeder.StateError: not a seeder.ElasticDataLoader state: pass the dict ...
        """
        if (
            state is not None and state is self._translated
        ):  # load_state_dict's own call of the base class
            return super().check_state_dict(state, load)
        # a version 2 state (no skips, dataset identity or seed) is accepted as it is
        self._check_header(state, "seeder.elastic_loader", {2: _KEYS_V2, 3: _KEYS})
        n = self.sampler.num_samples
        for name, have in (
            ("dataset_len", n),
            ("drop_last", self.drop_last),
            ("shuffle", self.sampler.shuffle),
        ):
            if state[name] != have or type(state[name]) is not type(have):
                raise StateError(
                    f"the seeder.ElasticDataLoader state was saved with {name}={state[name]!r}, "
                    f"this loader has {have!r}; resume with the same dataset, shuffle and drop_last"
                )
        _check_global_batch(state["global_batch_size"], self)
        done = state["position"]
        if not is_int(done) or not 0 <= done <= n:
            raise StateError(
                f"elastic loader state['position'] must be an int in [0, {n}], got {done!r}"
            )
        self.sampler.check_state_dict(state["sampler"], load)
        if state["epoch"] != state["sampler"]["epoch"] or not is_int(state["epoch"]):
            raise StateError(
                f"elastic loader state epoch {state['epoch']!r} differs from its sampler's "
                f"{state['sampler']['epoch']!r}; the state is corrupt"
            )

    def load_state_dict(self, state: dict[str, Any], load: Optional[LoadContext] = None) -> None:
        """Continue from ``state`` (saved on any world size): the next ``iter(loader)`` yields this
        rank's part of the global batches not yet trained.

        Args:
            state: what :meth:`state_dict` returned, on any world size.
            load: the run a seeder state being loaded describes; ``None``: the seeder's own.

        Raises:
            StateError: the state does not fit (see :meth:`check_state_dict`); nothing changed.
            RuntimeError: called inside a DataLoader worker.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> one = ElasticDataLoader(torch.arange(8), batch_size=4, seeder=s)
            >>> it = iter(one); _ = next(it); state = one.state_dict()  # saved on 1 rank
            >>> two = [ElasticDataLoader(torch.arange(8), 2, num_replicas=2, rank=r, seeder=s)
            ...        for r in (0, 1)]
            >>> for loader in two: loader.load_state_dict(state)
            >>> [b.tolist() for loader in two for b in loader]  # resumed on 2 ranks
            [[4, 5], [6, 7]]
        """
        self.check_state_dict(state, load)
        done, g = int(state["position"]), self.global_batch_size
        before = self._origin_pending
        complete = done >= self.sampler.num_samples  # the epoch's steps from 0, all done
        self._origin_pending = (int(state["epoch"]), 0 if complete else done % g)
        try:
            batch = len(self.batch_sampler) if complete else min(done // g, len(self.batch_sampler))
            self._translated = {
                "format": "seeder.loader",
                "version": LOADER_STATE_VERSION,
                "epoch": state["epoch"],
                "batch": batch,
                "position": self.samples_before(batch),
                "batch_size": self.batch_size,
                "drop_last": self.drop_last,
                "num_batches": len(self.batch_sampler),
                "sampler": state["sampler"],
                "skips": [],  # the elastic state's own, taken below
                "dataset": self.dataset_identity(),
                "seed": self.sampler.seed,
            }
            super().load_state_dict(self._translated, load)
            self._load_answers(state)
        except BaseException:
            self._origin_pending = before
            raise
        finally:
            self._translated = None

    def elastic_step(self, state: dict[str, Any]) -> int:
        """The global step ``state`` stands at: its position over its global batch size.

        :class:`~seeder._seeding.participant.Elastic`: the seeder keys the rank streams it
        re-derives after a world change by this step.

        Args:
            state: what :meth:`state_dict` returned.

        Returns:
            The number of global steps done in the state's epoch.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> loader = ElasticDataLoader(torch.arange(8), seeder=s)
            >>> loader.elastic_step({"position": 6, "global_batch_size": 4})
            1
        """
        return int(state["position"]) // int(state["global_batch_size"])

    def __repr__(self) -> str:
        return (
            f"seeder.ElasticDataLoader(batch_size={self.batch_size}, world_size={self.world_size}, "
            f"num_workers={self.num_workers}, epoch={self.sampler.epoch})"
        )


def _check_global_batch(saved: Any, loader: ElasticDataLoader) -> None:
    """Refuse a saved global batch size that is not a positive int, or another one than
    ``loader``'s without ``allow_global_batch_change=True``."""
    g, world = loader.global_batch_size, loader.world_size
    if not is_int(saved) or saved < 1:
        raise StateError(
            f"elastic loader state['global_batch_size'] must be a positive int, got {saved!r}"
        )
    if saved != g and not loader.allow_global_batch_change:
        keep = (
            f"pass batch_size={saved // world} to keep it"
            if saved % world == 0
            else f"{saved} samples do not split over {world} ranks"
        )
        raise StateError(
            f"the checkpoint's global batch size is {saved} samples per step, this loader's is "
            f"{g} (batch_size={loader.batch_size} x {world} ranks); {keep}, or pass "
            f"allow_global_batch_change=True to the loader to continue the same order in steps "
            f"of the new size"
        )
