"""What a loader answers about its batches: the indices at any (epoch, batch), the batches it skips,
and the dataset its state belongs to.

:class:`BatchAnswers` is the part of :class:`seeder.DataLoader` (and, through its hooks, of
:class:`seeder.ElasticDataLoader`) behind ``indices_at``, ``global_indices_at``, ``skip`` and
``skipped``, and the three entries of the loader's state they add (``skips``, ``dataset``,
``seed``). The computations are :mod:`seeder.data._provenance`'s, shared with ``seeder data show``.

Example:
    >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
    >>> loader = seeder.DataLoader(torch.arange(10), batch_size=4, shuffle=True, seeder=s)
    >>> loader.indices_at(0, 1) == next(b for i, b in enumerate(loader) if i == 1).tolist()
    True
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Optional

from seeder._checks import check_bool, check_state_header, is_int
from seeder._errors import SeederWarning, StateError
from seeder._seeding.derive import MAX_MASTER_SEED, check_key
from seeder.data._elastic import num_steps
from seeder.data._order import shuffle_key
from seeder.data._provenance import (
    Ranges,
    SkipList,
    batch_list,
    check_identity,
    dataset_identity,
    elastic_batch,
    step_ranges,
)

__all__ = ["BatchAnswers", "ElasticAnswers", "StreamAnswers", "PROVENANCE_KEYS"]

#: The entries of a loader's state this part adds.
PROVENANCE_KEYS = frozenset({"skips", "dataset", "seed"})


class BatchAnswers:
    """Mixin of :class:`seeder.DataLoader`: batch indices by position, skipped batches, the
    dataset's identity.

    The loader provides ``sampler``, ``batch_size``, ``batch_sampler``, ``dataset`` and
    ``batches_done``; :meth:`_init_answers` sets this part up. A subclass whose batches are not
    one shard per rank overrides the hooks :meth:`_batch_count`, :meth:`_rank_batch`,
    :meth:`_ranks`, :meth:`_skip_ranges` and :meth:`_skipped_ranges`.
    """

    sampler: Any
    batch_size: int
    batch_sampler: Any
    dataset: Any

    if TYPE_CHECKING:  # the loader's

        @property
        def batches_done(self) -> int: ...

    def _init_answers(self, allow_dataset_change: Any) -> None:
        #: Accept a state saved with another dataset (another class or fingerprint).
        self.allow_dataset_change = check_bool(allow_dataset_change, "allow_dataset_change")
        self._skips = SkipList()
        self._skip_version = 0  # moves at every skip(): a live iterator drops batches skipped late
        self._identity: Optional[dict[str, Any]] = None

    # ---------------------------------------------------------------- hooks
    def _batch_count(self, epoch: int) -> int:
        """Batches of ``epoch`` on this rank."""
        return len(self.batch_sampler)

    def _ranks(self) -> int:
        return int(self.sampler.num_replicas)

    def _rank_batch(self, epoch: int, batch: int, rank: Optional[int]) -> list[int]:
        count = self._batch_count(epoch)
        if not is_int(batch) or not 0 <= batch < count:
            raise ValueError(
                f"batch must be an int in [0, {count}): epoch {epoch} has {count} batches on "
                f"this rank, got {batch!r}"
            )
        lo = int(batch) * self.batch_size
        hi = min(lo + self.batch_size, self.sampler.num_samples)
        return list(self.sampler.indices_at(epoch, lo, hi, rank=rank))

    def _skip_ranges(self, epoch: int, batches: list[int]) -> list[tuple[int, int]]:
        """What :meth:`skip` records for ``batches`` of ``epoch``: batch indices."""
        return [(b, b + 1) for b in batches]

    def _skipped_ranges(self, epoch: int) -> Ranges:
        """The skipped batch indices of ``epoch``."""
        return self._skips.ranges(epoch)

    def _skip_bound(self) -> tuple[int, str]:
        """The bound of a recorded range and its unit, for the state's check."""
        return len(self.batch_sampler), "batch"

    # ------------------------------------------------------------ answers
    def indices_at(self, epoch: int, batch: int, *, rank: Optional[int] = None) -> list[int]:
        """Dataset indices of batch ``batch`` of ``epoch`` on this rank (or ``rank``), without
        iterating or touching the dataset.

        Equal to what iteration yields for that batch, for any epoch, past or future, any number
        of workers; O(batch size) (a sampler in ``mode="torch"``: O(len(dataset))). A skipped batch
        is answered too: what it holds, although it is never handed out (:meth:`skipped`).

        Args:
            epoch: the epoch.
            batch: the batch index in the epoch (``enumerate(loader,
                start=loader.batches_done)`` numbers them).
            rank: another rank's batch of the same step; this loader's rank if ``None``.

        Returns:
            The dataset indices, in the order the batch holds them.

        Raises:
            ValueError: ``batch`` is not a batch of the epoch, or ``rank`` is out of range.
            RuntimeError: a shuffled order and a seeder without a master seed.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(7); s.reseed(1, 2)
            >>> loader = seeder.DataLoader(torch.arange(10), batch_size=3, shuffle=True, seeder=s)
            >>> [loader.indices_at(2, b) for b in range(4)] == [b.tolist() for b in loader]
            True
        """
        epoch = check_key(epoch, "epoch")
        return self._rank_batch(epoch, batch, rank)

    def global_indices_at(self, epoch: int, batch: int) -> list[list[int]]:
        """Every rank's part of global step ``batch`` of ``epoch``, in rank order.

        Args:
            epoch: the epoch.
            batch: the batch index (the global step) in the epoch.

        Returns:
            One list of dataset indices per rank (an elastic loader's concatenated: the global
            batch).

        Raises:
            ValueError: ``batch`` is not a batch of the epoch.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(
            ...     torch.arange(8), batch_size=2, sampler=seeder.DistributedSampler(
            ...         range(8), num_replicas=2, rank=0, shuffle=False, seeder=s, join=False),
            ...     seeder=s)
            >>> loader.global_indices_at(0, 1)
            [[4, 6], [5, 7]]
        """
        epoch = check_key(epoch, "epoch")
        return [self._rank_batch(epoch, batch, r) for r in range(self._ranks())]

    def skip(self, epoch: int, batches: Any) -> None:
        """Never hand out ``batches`` of ``epoch``; every other batch stays bitwise what it is.

        The other batches keep their samples, augmentations and worker randomness (each batch's
        seeds are a function of its position, not of the batches before it). The skips are in
        :meth:`state_dict`, so they survive resumes (an elastic loader's, world-size changes too),
        and ``seeder data show`` marks them. An iterator running that epoch drops a batch skipped
        after it started (it may have fetched it already).

        Args:
            epoch: the epoch.
            batches: a batch index, a ``range`` or a list of batch indices of the epoch, none of
                them already handed out (a batch skipped already is no change).

        Raises:
            TypeError: ``batches`` is not an int, a range or a list of ints.
            ValueError: a batch outside the epoch, or one already handed out in the current
                epoch (load the checkpoint from before it first); nothing is recorded.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(torch.arange(10), batch_size=2, seeder=s)
            >>> loader.skip(0, range(1, 3)); [b.tolist() for b in loader]
            [[0, 1], [6, 7], [8, 9]]
            >>> loader.skipped(0)
            [1, 2]
        """
        epoch = check_key(epoch, "epoch")
        items = batch_list(batches)
        count = self._batch_count(epoch)
        bad = [b for b in items if not 0 <= b < count]
        if bad:
            raise ValueError(
                f"batch {bad[0]} is not a batch of epoch {epoch}, which has {count} batches on "
                f"this rank (0 to {count - 1}); nothing was skipped"
            )
        done = self.batches_done if epoch == self.sampler.epoch else 0
        already = self._skipped_ranges(epoch)
        early = [b for b in items if b < done and b not in already]
        if early:
            raise ValueError(
                f"batch {early[0]} of epoch {epoch} was already handed out ({done} batches of the "
                f"epoch are done); nothing was skipped. Load the checkpoint from before it "
                f"(load_state_dict), then skip"
            )
        if not items:
            return
        self._skips.add_ranges(epoch, self._skip_ranges(epoch, items))
        self._skip_version += 1

    def skipped(self, epoch: int) -> list[int]:
        """The batch indices of ``epoch`` this loader never hands out (:meth:`skip`).

        Args:
            epoch: the epoch.

        Returns:
            Sorted batch indices.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(torch.arange(10), batch_size=2, seeder=s)
            >>> loader.skip(3, [4, 0]); loader.skipped(3), loader.skipped(0)
            ([0, 4], [])
        """
        epoch = check_key(epoch, "epoch")
        return [b for lo, hi in self._skipped_ranges(epoch) for b in range(lo, hi)]

    # ---------------------------------------------------------------- state
    def dataset_identity(self) -> dict[str, Any]:
        """The dataset's class, length and fingerprint, as the state records them.

        See :func:`seeder.data._provenance.dataset_identity` for the fingerprint (a dataset's
        ``seeder_fingerprint``, a Hugging Face dataset's own, or its ``repr``'s hash).

        Returns:
            ``{"class": ..., "len": ..., "fingerprint": ...}``.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> seeder.DataLoader(torch.arange(4), seeder=s).dataset_identity()
            {'class': 'torch:Tensor', 'len': 4, 'fingerprint': None}
        """
        if self._identity is None:
            self._identity = dataset_identity(self.dataset)
        return dict(self._identity)

    def _answers_state(self) -> dict[str, Any]:
        return {
            "skips": self._skips.state(),
            "dataset": self.dataset_identity(),
            "seed": self.sampler.seed,
        }

    @property
    def skip_version(self) -> int:
        """Moves at every :meth:`skip` and :meth:`load_state_dict`: a running iterator that sees it
        move drops the batches skipped after it started.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(torch.arange(4), seeder=s); v = loader.skip_version
            >>> loader.skip(0, 1); loader.skip_version > v
            True
        """
        return self._skip_version

    def pending_skips(self, epoch: int) -> Ranges:
        """The batches of ``epoch`` the iterator being created leaves out (:meth:`skip`); read by
        the batch sampler and the loader's iterator as it starts.

        Args:
            epoch: the epoch the iterator runs (:meth:`pending_start`).

        Returns:
            The skipped batch indices (an elastic loader's: global steps), as ranges.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.DataLoader(torch.arange(4), seeder=s); loader.skip(0, 2)
            >>> loader.pending_skips(0)
            Ranges([(2, 3)])
        """
        return self._skipped_ranges(epoch)

    def _check_header(self, state: Any, fmt: str, versions: dict[int, frozenset[str]]) -> None:
        """Check ``state``'s header against the layout of its version (the newest when it names
        none known), then the entries :meth:`_answers_state` writes, where it has them."""
        what = f"seeder.{type(self).__name__}"
        version = state.get("version") if isinstance(state, dict) else None
        if type(version) is not int or version not in versions:
            version = max(versions)
        check_state_header(state, fmt, version, versions[version], what)
        if "skips" in state:
            self._check_answers(state, what)

    def _check_answers(self, state: dict[str, Any], what: str) -> None:
        bound, unit = self._skip_bound()
        SkipList.check_state(state["skips"], bound, unit, what)
        seed = state["seed"]
        if seed is not None and not (is_int(seed) and 0 <= seed <= MAX_MASTER_SEED):
            raise StateError(
                f"{what} state['seed'] must be None or the sampler's seed (an int in "
                f"[0, 2**63 - 1]), got {seed!r}; the state is corrupt"
            )
        if seed != self.sampler.seed:
            raise StateError(
                f"the {what} state was saved with a sampler of seed={seed!r}, this loader's "
                f"sampler has seed={self.sampler.seed!r}; resume with the same sampler arguments"
            )
        check_identity(state["dataset"], self.dataset_identity(), self.allow_dataset_change, what)

    def _load_answers(self, state: dict[str, Any]) -> None:
        """Take the skips of a checked state (none in a state without them)."""
        skips = SkipList()
        if "skips" in state:
            bound, unit = self._skip_bound()
            skips = SkipList.from_state(state["skips"], bound, unit)
        self._skips = skips
        self._skip_version += 1


class ElasticAnswers(BatchAnswers):
    """The hooks of :class:`BatchAnswers` for :class:`seeder.ElasticDataLoader`: a batch is a global
    step, each rank's part a slice of it, and skips are recorded as positions of the epoch's global
    order, so that they hold on any world size.

    A global step after a change of the global batch size (``allow_global_batch_change``) is
    skipped whole when it overlaps a skipped range; the load warns when that skips more samples.
    """

    drop_last: bool

    if TYPE_CHECKING:  # the loader's

        @property
        def world_size(self) -> int: ...

        @property
        def global_batch_size(self) -> int: ...

    def origin(self) -> int:
        raise NotImplementedError  # the loader's

    def _origin_of(self, epoch: int) -> int:
        return self.origin() if epoch == self.sampler.epoch else 0

    def _batch_count(self, epoch: int) -> int:
        n = self.sampler.num_samples
        return num_steps(n, self._origin_of(epoch), self.global_batch_size, self.drop_last)

    def _ranks(self) -> int:
        return self.world_size

    def _key(self, epoch: int) -> Optional[int]:
        sampler = self.sampler
        if not sampler.shuffle:
            return None
        return shuffle_key(
            sampler.seeder, sampler.seed, "feistel", sampler.task, epoch, sampler.stream
        )

    def _rank_batch(self, epoch: int, batch: int, rank: Optional[int]) -> list[int]:
        world = self.world_size
        rank = self.batch_sampler.rank if rank is None else rank
        if not is_int(rank) or not 0 <= rank < world:
            raise ValueError(f"rank must be an int in [0, {world}), got {rank!r}")
        return self._step(epoch, batch, int(rank))

    def _step(self, epoch: int, batch: int, rank: Optional[int]) -> list[int]:
        return elastic_batch(
            self.sampler.num_samples,
            self._key(epoch),
            self.global_batch_size,
            self._origin_of(epoch),
            self.world_size,
            rank,
            self.drop_last,
            batch,
            epoch,
        )

    def global_indices_at(self, epoch: int, batch: int) -> list[list[int]]:
        """Every rank's part of global step ``batch`` of ``epoch``, in rank order; concatenated,
        the global batch (a rank with no part of a short last step gets ``[]``).

        Args:
            epoch: the epoch.
            batch: the global step in the epoch.

        Returns:
            One list of dataset indices per rank.

        Raises:
            ValueError: ``batch`` is not a global step of the epoch.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> loader = seeder.ElasticDataLoader(
            ...     torch.arange(10), batch_size=2, num_replicas=2, rank=0, seeder=s)
            >>> loader.global_indices_at(0, 2)
            [[8], [9]]
        """
        epoch = check_key(epoch, "epoch")
        whole = self._step(epoch, batch, None)
        size, world = len(whole), self.world_size
        return [whole[r * size // world : (r + 1) * size // world] for r in range(world)]

    def _skip_ranges(self, epoch: int, batches: list[int]) -> list[tuple[int, int]]:
        origin, g, n = self._origin_of(epoch), self.global_batch_size, self.sampler.num_samples
        return [(origin + b * g, min(origin + (b + 1) * g, n)) for b in batches]

    def _skipped_ranges(self, epoch: int) -> Ranges:
        origin, g = self._origin_of(epoch), self.global_batch_size
        return step_ranges(self._skips.ranges(epoch), origin, g)

    def _skip_bound(self) -> tuple[int, str]:
        return self.sampler.num_samples, "position"

    def _load_answers(self, state: dict[str, Any]) -> None:
        """Take the skips of a checked state; warn when steps of this global batch size skip more
        samples than the state's skips name."""
        super()._load_answers(state)
        n, g = self.sampler.num_samples, self.global_batch_size
        more = []
        for epoch in self._skips.epochs():
            named = self._skips.ranges(epoch)
            origin = self._origin_of(epoch)
            covered = [
                (origin + lo * g, min(origin + hi * g, n))
                for lo, hi in step_ranges(named, origin, g)
            ]
            extra = sum(hi - lo for lo, hi in covered) - named.count(0, n)
            if extra:
                more.append(f"{extra} in epoch {epoch}")
        if more:
            warnings.warn(
                f"seeder.ElasticDataLoader: the state's skipped samples do not fill whole global "
                f"steps of {g} samples, and a step that holds one is skipped whole: "
                f"{', '.join(more)} sample(s) more are skipped than the state names. Resume with "
                f"the global batch size that skipped them ({state.get('global_batch_size')}) to "
                f"skip exactly those",
                SeederWarning,
                stacklevel=4,
            )


_STREAM_WHY = (
    "seeder.IterableDataLoader reads a stream: what its batch {batch} of epoch {epoch} holds is "
    "known only by reading the stream up to it (an IterableDataset has no indices to compute). "
    "Use seeder.DataLoader over a map-style dataset for {what}, or record what each batch holds "
    "while training"
)


class StreamAnswers:
    """Mixin of :class:`seeder.IterableDataLoader`: the questions :class:`BatchAnswers` answers,
    refused with the reason (a stream's batches are known only by reading it)."""

    def indices_at(self, epoch: int, batch: int, *, rank: Optional[int] = None) -> list[int]:
        """Refused: a stream has no indices to compute.

        Raises:
            NotImplementedError: always, saying why and what to use.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0); s.reseed(1, 0)
            >>> class Stream(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(4))
            >>> seeder.IterableDataLoader(Stream(), seeder=s).indices_at(0, 1)
            ... # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            NotImplementedError: seeder.IterableDataLoader reads a stream: what its batch 1 ...
        """
        raise NotImplementedError(_STREAM_WHY.format(batch=batch, epoch=epoch, what="indices_at"))

    def global_indices_at(self, epoch: int, batch: int) -> list[list[int]]:
        """Refused: a stream has no indices to compute (see :meth:`indices_at`).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            _STREAM_WHY.format(batch=batch, epoch=epoch, what="global_indices_at")
        )

    def skip(self, epoch: int, batches: Any) -> None:
        """Refused: a stream's batches are not addressable by position ahead of reading it.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(_STREAM_WHY.format(batch=batches, epoch=epoch, what="skip"))

    def skipped(self, epoch: int) -> list[int]:
        """None: a stream skips no batch (:meth:`skip` is refused).

        Args:
            epoch: the epoch.

        Returns:
            ``[]``.

        Example:
            >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
            >>> class Stream(torch.utils.data.IterableDataset):
            ...     def __iter__(self): return iter(range(4))
            >>> seeder.IterableDataLoader(Stream(), seeder=s).skipped(0)
            []
        """
        check_key(epoch, "epoch")
        return []
