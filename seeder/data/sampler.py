"""A drop-in ``DistributedSampler`` whose order comes from the seeder, with O(1) mid-epoch resume.

The shuffle key of epoch ``e`` is ``derive(Domain.SAMPLER, task, e, rank=0, stream)``:
the same on every rank, new every epoch, and unrelated between epochs and
master seeds (no ``seed + epoch`` arithmetic). Rank ``r`` of ``R`` takes positions
``r, r + R, r + 2R, ...`` of the shuffled (and padded or cut) index list, exactly
as :class:`torch.utils.data.DistributedSampler` does.

Two modes:

* ``"feistel"`` (default): a keyed bijection of ``range(N)``
  (:mod:`seeder.permutation`) evaluated in vectorised blocks. Starting an epoch
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

import itertools
import logging
import math
import numbers
import warnings
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch
import torch.utils.data.distributed

from ..core import Seeder
from ..derive import MAX_KEY, MAX_MASTER_SEED, Domain, check_key, derive_seed
from ..distributed import process_group_active
from ..errors import SeederWarning, StateError
from ..trace import record_step
from .permutation import keyed_permutation

__all__ = ["DistributedSampler", "MODES", "SAMPLER_STATE_VERSION"]

logger = logging.getLogger("seeder")

#: Permutation modes: the O(1) keyed permutation and torch's ``randperm`` order.
MODES = ("feistel", "torch")
#: Version of the layout of :meth:`DistributedSampler.state_dict`.
SAMPLER_STATE_VERSION = 1

_FIRST_BLOCK = 1 << 10  # first block small: the first index comes fast
_BLOCK = 1 << 16  # largest block computed at once (a few MiB of temporaries)
_M64 = (1 << 64) - 1
_STATE_KEYS = frozenset({"format", "version", "mode", "epoch", "position", "key", "dataset_len", "num_replicas",
                         "shuffle", "drop_last", "task", "stream"})


def _default_seeder() -> Seeder:
    from .. import default_seeder  # the package imports this module: resolve at call time

    return default_seeder()


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _shard_sizes(n: int, replicas: int, drop_last: bool) -> Tuple[int, int]:
    """``(num_samples, total_size)`` exactly as torch's DistributedSampler computes them."""
    if drop_last and n % replicas != 0:
        num_samples = math.ceil((n - replicas) / replicas)
    else:
        num_samples = math.ceil(n / replicas)
    return num_samples, num_samples * replicas


class DistributedSampler(torch.utils.data.distributed.DistributedSampler):
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
    * Over a :class:`seeder.SeededDataset` it yields ``(epoch, index)`` pairs, so that
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
        task: int = 1,
        stream: int = 0,
        with_epoch: Optional[bool] = None,
        seeder: Optional[Seeder] = None,
    ) -> None:
        try:
            n = len(dataset)
        except TypeError:
            raise TypeError(f"DistributedSampler needs a dataset with __len__, got {type(dataset).__name__}") from None
        if num_replicas is None:
            num_replicas = torch.distributed.get_world_size() if process_group_active() else 1
        if rank is None:
            rank = torch.distributed.get_rank() if process_group_active() else 0
        if not _is_int(num_replicas):
            raise TypeError(f"num_replicas must be an int (the number of ranks), got {type(num_replicas).__name__} {num_replicas!r}")
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1 (the number of ranks), got {num_replicas}")
        if not _is_int(rank):
            raise TypeError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}: rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}")
        shuffle = _check_bool(shuffle, "shuffle")
        drop_last = _check_bool(drop_last, "drop_last")
        if seed is not None:
            if not _is_int(seed):
                raise TypeError(f"seed must be None (use the seeder's master seed) or an int, got {type(seed).__name__} {seed!r}")
            if not 0 <= seed <= MAX_MASTER_SEED:
                raise ValueError(f"seed must be None (use the seeder's master seed) or an int in [0, 2**63 - 1], got {seed!r}")
            seed = int(seed)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        task, stream = check_key(task, "task"), check_key(stream, "stream")
        if with_epoch is not None:
            with_epoch = _check_bool(with_epoch, "with_epoch")
        if seeder is None:
            seeder = _default_seeder()
        elif not isinstance(seeder, Seeder):
            raise TypeError(f"seeder must be a seeder.Seeder, got {type(seeder).__name__}")

        self.dataset = dataset
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.mode, self.task, self.stream = mode, task, stream
        self._n = int(n)
        self.num_samples, self.total_size = _shard_sizes(self._n, self.num_replicas, drop_last)
        if with_epoch is None:
            with_epoch = getattr(type(dataset), "seeder_wants_epoch", False) is True
        self.with_epoch = with_epoch
        self._seeder = seeder
        last = seeder.last_reseed
        self.epoch = last[1] if last is not None and last[0] == task else 0
        self._manual = False  # set_epoch was called: stop following reseed
        self._loaded: Optional[Tuple[int, int]] = None  # (epoch, key) from load_state_dict
        self._resume = 0  # where the next __iter__ starts
        self._consumed = 0
        self._token = object()  # identifies the live iteration; a new one orphans the old
        self._handed = 0  # end of the last block handed to the DataLoader (>= indices it pulled)
        self._finished = False  # the live iteration has handed out its last block
        self._warned_epoch: Optional[int] = None
        seeder.attach(self)

    # ------------------------------------------------------------- epochs
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iteration; from now on the sampler ignores ``reseed``.

        Setting the epoch it already has keeps a position loaded by :meth:`load_state_dict`.
        """
        epoch = check_key(epoch, "epoch")
        self._manual = True
        self._switch(epoch, "set_epoch")

    def seeder_reseed(self, seeder: Seeder, task_id: int, epoch: int) -> None:
        """Participant hook: follow ``reseed(task, epoch)`` of this sampler's task until :meth:`set_epoch` is used."""
        if task_id == self.task and not self._manual:
            self._switch(epoch, "reseed")

    def _switch(self, epoch: int, how: str) -> None:
        if epoch == self.epoch:
            return
        if self._resume:
            logger.info("sampler: epoch %d via %s drops the loaded position %d of epoch %d", epoch, how, self._resume, self.epoch)
        self.epoch, self._loaded = epoch, None
        self._resume = self._consumed = self._handed = 0
        self._token, self._finished = object(), False

    # ------------------------------------------------------------ keys
    def _key(self, epoch: int) -> int:
        """The shuffle key of ``epoch``: the loaded one, ``seed + epoch`` (torch mode), or derived."""
        if self._loaded is not None and self._loaded[0] == epoch:
            return self._loaded[1]
        if self.seed is not None:
            if self.mode == "torch":
                return (self.seed + epoch) & _M64
            return derive_seed(self.seed, Domain.SAMPLER, self.task, epoch, 0, self.stream)
        if not self._seeder.initialized:
            raise RuntimeError("DistributedSampler takes its shuffle order from the seeder: call seeder.init(master_seed=...) "
                               "before iterating, or pass seed= to the sampler")
        return self._seeder.derive(Domain.SAMPLER, self.task, epoch, rank=0, stream=self.stream)

    # --------------------------------------------------------- iteration
    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self.epoch, self._resume
        self._resume = 0
        key = self._key(epoch) if self.shuffle else 0
        token = object()
        self._token, self._consumed, self._handed, self._finished = token, start, start, False
        record_step(self._seeder, "sampler", epoch=epoch, step=None, position=start)  # $SEEDER_TRACE only
        if self.mode == "torch":
            blocks = self._torch_blocks(key, start)
        else:
            blocks = self._feistel_blocks(key, start)
        return itertools.chain.from_iterable(self._iters(blocks, token, start, epoch))

    def _positions(self, start: int, stop: int) -> np.ndarray:
        """Global positions of this rank's samples ``start:stop``, wrapped into ``range(N)`` (torch's padding)."""
        pos = np.arange(start, stop, dtype=np.uint64)
        pos *= np.uint64(self.num_replicas)
        pos += np.uint64(self.rank)
        if stop > start and (stop - 1) * self.num_replicas + self.rank >= self._n:
            np.remainder(pos, np.uint64(self._n), out=pos)
        return pos

    def _feistel_blocks(self, key: int, start: int) -> Iterator[np.ndarray]:
        perm = keyed_permutation(self._n, key) if self.shuffle else None
        size, j = _FIRST_BLOCK, start
        while j < self.num_samples:
            stop = min(self.num_samples, j + size)
            pos = self._positions(j, stop)
            yield perm._apply(pos) if perm is not None else pos.view(np.int64)
            j, size = stop, min(size * 4, _BLOCK)

    def _torch_blocks(self, key: int, start: int) -> Iterator[np.ndarray]:
        if start >= self.num_samples:
            return
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(key)
            perm = torch.randperm(self._n, generator=g).numpy()
        else:
            perm = None
        for j in range(start, self.num_samples, _BLOCK):
            pos = self._positions(j, min(self.num_samples, j + _BLOCK))
            yield perm[pos.view(np.int64)] if perm is not None else pos.view(np.int64)

    def _iters(self, blocks: Iterator[np.ndarray], token: object, start: int, epoch: int) -> Iterator[Iterator[Any]]:
        """One C-level iterator per block (ints made as they are pulled); records how far the DataLoader got."""
        end = start
        for block in blocks:
            end += len(block)
            if self._token is token:
                self._handed = end
            view = memoryview(block)
            yield zip(itertools.repeat(epoch), view) if self.with_epoch else iter(view)
        if self._token is token:
            self._finished = True

    @property
    def consumed(self) -> int:
        """Samples of the current epoch reported with :meth:`advance` (or restored by :meth:`load_state_dict`)."""
        return self._consumed

    def advance(self, n: int) -> None:
        """Record that the training loop has finished ``n`` more samples of this epoch.

        Call it after each step with the batch's real size (``len(labels)``):
        :meth:`state_dict` saves this count, not the indices the DataLoader has
        prefetched. Counting past the blocks the sampler has handed out (or past the
        epoch's end) raises ``ValueError``.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> sampler = DistributedSampler(range(8), seeder=s); it = iter(sampler)
        >>> batch = [next(it) for _ in range(3)]; sampler.advance(len(batch))
        >>> sampler.state_dict()["position"]
        3
        """
        if not _is_int(n) or n < 0:
            raise ValueError(f"advance() takes the number of samples consumed (an int >= 0), got {n!r}")
        if self._consumed + n > self._handed:
            raise ValueError(
                f"advance({n}) would count {self._consumed + n} samples consumed in epoch {self.epoch}, more than the "
                f"{self._handed} (of {self.num_samples}) this sampler has handed out; pass the size of the batch actually "
                "trained on (e.g. len(labels)), once per batch")
        self._consumed += int(n)
        record_step(self._seeder, "sampler", epoch=self.epoch, step=None, position=self._consumed)  # $SEEDER_TRACE only

    # ------------------------------------------------------------- state
    def state_dict(self) -> Dict[str, Any]:
        """Epoch, samples consumed, shuffle key and layout: ints, bools and strings only.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> st = DistributedSampler(range(8), seeder=s).state_dict()
        >>> st["epoch"], st["position"], st["dataset_len"]
        (0, 0, 8)
        """
        if self._consumed == 0 and self._handed > 0 and not self._finished and self._warned_epoch != self.epoch:
            self._warned_epoch = self.epoch
            warnings.warn(
                f"sampler.state_dict(): epoch {self.epoch} is being iterated but no sample was reported "
                "consumed, so this state resumes at the start of the epoch; call sampler.advance(len(batch)) "
                "after each training step to resume mid-epoch",
                SeederWarning,
                stacklevel=2,
            )
        return {
            "format": "seeder.sampler",
            "version": SAMPLER_STATE_VERSION,
            "mode": self.mode,
            "epoch": self.epoch,
            "position": self._consumed,
            "key": self._key(self.epoch) if self.shuffle else 0,
            "dataset_len": self._n,
            "num_replicas": self.num_replicas,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "task": self.task,
            "stream": self.stream,
        }

    def check_state_dict(self, state: Any) -> None:
        """Raise :class:`seeder.StateError` if ``state`` does not fit this sampler; change nothing."""
        if not isinstance(state, dict) or state.get("format") != "seeder.sampler":
            raise StateError("not a sampler state: pass the dict returned by DistributedSampler.state_dict()")
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise StateError(f"sampler state version {state.get('version')!r} is not supported (this seeder reads "
                             f"version {SAMPLER_STATE_VERSION}); load it with the seeder version that wrote it")
        if set(state) != _STATE_KEYS:
            raise StateError(f"sampler state keys differ: missing {sorted(_STATE_KEYS - set(state))}, "
                             f"unexpected {sorted(set(state) - _STATE_KEYS)}")
        mine = {"mode": self.mode, "dataset_len": self._n, "num_replicas": self.num_replicas, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "task": self.task, "stream": self.stream}
        what = {"mode": "mode=", "dataset_len": "a dataset of length", "num_replicas": "num_replicas=",
                "shuffle": "shuffle=", "drop_last": "drop_last=", "task": "task=", "stream": "stream="}
        for name, have in mine.items():
            if state[name] != have or type(state[name]) is not type(have):
                raise StateError(
                    f"the sampler state was saved with {what[name]} {state[name]!r}, this sampler has {have!r}; "
                    f"resume with the same dataset, world size and sampler arguments")
        for name, hi in (("epoch", MAX_KEY), ("key", _M64)):
            if not _is_int(state[name]) or not 0 <= state[name] <= hi:
                raise StateError(f"sampler state[{name!r}] must be an int in [0, {hi}], got {state[name]!r}")
        pos = state["position"]
        if not _is_int(pos) or not 0 <= pos <= self.num_samples:
            raise StateError(f"sampler state['position'] must be an int in [0, {self.num_samples}], got {pos!r}")

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields exactly the samples not yet consumed.

        The epoch comes from the state, and its shuffle key too (so a resumed epoch keeps
        its order). Validates first; a bad state raises and changes nothing.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> a = DistributedSampler(range(10), seeder=s); full = list(a); a.advance(4)
        >>> b = DistributedSampler(range(10), seeder=s); b.load_state_dict(a.state_dict())
        >>> list(b) == full[4:]
        True
        """
        self.check_state_dict(state)
        self.epoch = int(state["epoch"])
        self._loaded = (self.epoch, int(state["key"]))
        self._resume = self._consumed = self._handed = int(state["position"])
        self._token, self._finished = object(), False
        self._warned_epoch = None

    def __repr__(self) -> str:
        return (f"seeder.DistributedSampler(len={self._n}, num_replicas={self.num_replicas}, rank={self.rank}, "
                f"shuffle={self.shuffle}, mode={self.mode!r}, epoch={self.epoch})")
