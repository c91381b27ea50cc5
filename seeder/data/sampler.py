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
import operator
import sys
import warnings
import weakref
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch
import torch.utils.data.distributed

from ..checks import check_bool, is_int
from ..core import Seeder
from ..derive import MAX_KEY, MAX_MASTER_SEED, Domain, check_key, derive_seed
from ..distributed import process_group_active
from ..errors import SeederWarning, StateError
from .audit import audit_loader, find_loader, loader_on_stack
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


def _shard_sizes(n: int, replicas: int, drop_last: bool) -> Tuple[int, int]:
    """``(num_samples, total_size)`` exactly as torch's DistributedSampler computes them."""
    if drop_last and n % replicas != 0:
        num_samples = math.ceil((n - replicas) / replicas)
    else:
        num_samples = math.ceil(n / replicas)
    return num_samples, num_samples * replicas


class _Progress:
    """How far one ``iter(sampler)`` got: the block being drawn from and its list iterator."""

    def __init__(self, start: int):
        self.start = self.block_start = start
        self.current: Optional[Iterator[int]] = None
        self.current_len = 0
        self.started = False

    def yielded(self) -> int:
        if self.current is None:
            return self.block_start
        return self.block_start + self.current_len - operator.length_hint(self.current)


class _SamplerIterator(itertools.chain):
    """``iter(DistributedSampler)``: C-speed iteration, and torchdata's ``Stateful`` iterator protocol.

    torchdata's ``StatefulDataLoader`` saves ``state_dict()`` (the indices drawn so far) with
    the sampler's own state, and on resume calls ``load_state_dict`` on a fresh iterator
    before drawing from it: the iterator then starts there, in O(1).
    """

    progress: _Progress
    sampler: "DistributedSampler"

    def state_dict(self) -> Dict[str, Any]:
        return {"format": "seeder.sampler_iter", "yielded": self.progress.yielded()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != "seeder.sampler_iter":
            raise StateError("not a seeder sampler iterator state: pass the dict returned by iter(sampler).state_dict()")
        yielded = state.get("yielded")
        if not is_int(yielded) or not 0 <= yielded <= self.sampler.num_samples:
            raise StateError(f"sampler iterator state['yielded'] must be an int in [0, {self.sampler.num_samples}], "
                             f"got {yielded!r}")
        if self.progress.started:
            raise RuntimeError("load the sampler iterator's state before drawing from it")
        self.progress.start = self.progress.block_start = int(yielded)
        self.sampler.note_tracked()


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
    * ``join=False``: the sampler does not join the seeder (no reseed following, no state in
      ``seeder.state_dict()``); the object that owns it does that (:class:`seeder.DataLoader`).
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
        join: bool = True,
    ) -> None:
        try:
            n = len(dataset)
        except TypeError:
            raise TypeError(f"DistributedSampler needs a dataset with __len__, got {type(dataset).__name__}") from None
        if num_replicas is None:
            num_replicas = torch.distributed.get_world_size() if process_group_active() else 1
        if rank is None:
            rank = torch.distributed.get_rank() if process_group_active() else 0
        if not is_int(num_replicas):
            raise TypeError(f"num_replicas must be an int (the number of ranks), got {type(num_replicas).__name__} {num_replicas!r}")
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1 (the number of ranks), got {num_replicas}")
        if not is_int(rank):
            raise TypeError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}: rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}")
        shuffle = check_bool(shuffle, "shuffle")
        drop_last = check_bool(drop_last, "drop_last")
        if seed is not None:
            if not is_int(seed):
                raise TypeError(f"seed must be None (use the seeder's master seed) or an int, got {type(seed).__name__} {seed!r}")
            if not 0 <= seed <= MAX_MASTER_SEED:
                raise ValueError(f"seed must be None (use the seeder's master seed) or an int in [0, 2**63 - 1], got {seed!r}")
            seed = int(seed)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        task, stream = check_key(task, "task"), check_key(stream, "stream")
        if with_epoch is not None:
            with_epoch = check_bool(with_epoch, "with_epoch")
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
        self._audited: Optional[Any] = None  # weak reference to the DataLoader holding this sampler, once looked up
        self._warned_causes: set = set()
        self._under_loader = False  # a DataLoader iterator was seen drawing from this sampler
        self._tracked = False  # a loader that saves the iterator's position (torchdata) iterates this sampler
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
        progress = _Progress(start)
        it = _SamplerIterator.from_iterable(self._iters(key, token, progress, epoch))
        it.progress, it.sampler = progress, self
        return it

    def blocks(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        """This rank's indices of ``epoch`` from its sample ``start`` on, as int64 arrays; no bookkeeping.

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
        key = self._key(epoch) if self.shuffle else 0
        if self.mode == "torch":
            return self._torch_blocks(key, int(start))
        return self._feistel_blocks(key, int(start))

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
            yield perm.apply_unchecked(pos) if perm is not None else pos.view(np.int64)
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

    def _iters(self, key: int, token: object, progress: "_Progress", epoch: int) -> Iterator[Iterator[Any]]:
        """One C-level iterator per block (list iterators: they know how much is left); records how far the DataLoader got."""
        progress.started = True
        if self._audited is None:
            found = loader_on_stack(self)
            if found is True:
                self._audited = None  # a DataLoader iterates this sampler: look it up when the state is taken
                self._under_loader = True
            elif found is not None:
                self._audited = weakref.ref(found)
        start = progress.start
        if self._token is token:
            self._handed = start
        blocks = self._torch_blocks(key, start) if self.mode == "torch" else self._feistel_blocks(key, start)
        end = start
        for block in blocks:
            progress.block_start = end
            end += len(block)
            if self._token is token:
                self._handed = end
            items = block.tolist()
            progress.current, progress.current_len = iter(items), len(items)
            yield zip(itertools.repeat(epoch), progress.current) if self.with_epoch else progress.current
        progress.current = None
        progress.block_start = end
        if self._token is token:
            self._finished = True

    def note_tracked(self) -> None:
        """Record that the loader iterating this sampler saves its position itself (torchdata's ``StatefulDataLoader``).

        :meth:`state_dict` then no longer warns that no position was reported with :meth:`advance`.
        """
        self._tracked = True

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
        if not is_int(n) or n < 0:
            raise ValueError(f"advance() takes the number of samples consumed (an int >= 0), got {n!r}")
        if self._consumed + n > self._handed:
            raise ValueError(
                f"advance({n}) would count {self._consumed + n} samples consumed in epoch {self.epoch}, more than the "
                f"{self._handed} (of {self.num_samples}) this sampler has handed out; pass the size of the batch actually "
                "trained on (e.g. len(labels)), once per batch")
        self._consumed += int(n)

    # ------------------------------------------------------------- state
    def state_dict(self) -> Dict[str, Any]:
        """Epoch, samples consumed, shuffle key and layout: ints, bools and strings only.

        >>> import seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> st = DistributedSampler(range(8), seeder=s).state_dict()
        >>> st["epoch"], st["position"], st["dataset_len"]
        (0, 0, 8)
        """
        if sys._getframe(1).f_globals.get("__name__", "").startswith("torchdata."):
            self.note_tracked()  # torchdata's StatefulDataLoader saves the iterator's position with this state
        self._warn_inexact("state_dict")
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
            if not is_int(state[name]) or not 0 <= state[name] <= hi:
                raise StateError(f"sampler state[{name!r}] must be an int in [0, {hi}], got {state[name]!r}")
        pos = state["position"]
        if not is_int(pos) or not 0 <= pos <= self.num_samples:
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
        self._warn_inexact("load_state_dict")

    def _warn_inexact(self, what: str) -> None:
        """One :class:`SeederWarning` per way the loader around this sampler loses exactness (see :mod:`.audit`)."""
        if self._warned_epoch != self.epoch and not self._tracked and self._consumed == 0 and self._handed > 0:
            self._warned_epoch = self.epoch
            if self._finished:
                msg = (f"sampler.{what}(): the DataLoader drew every index of epoch {self.epoch} (it prefetches) but no "
                       "sample was reported consumed, so this state resumes at the start of the epoch; call "
                       "sampler.advance(len(batch)) after each training step (or use seeder.DataLoader)")
            else:
                msg = (f"sampler.{what}(): epoch {self.epoch} is being iterated but no sample was reported consumed, so "
                       "this state resumes at the start of the epoch; call sampler.advance(len(batch)) after each "
                       "training step to resume mid-epoch (or use seeder.DataLoader)")
            warnings.warn(msg, SeederWarning, stacklevel=3)
        if self._audited is None and self._under_loader:
            loader = find_loader(self)  # a gc scan, once: single-process loading leaves no DataLoader on the stack
            self._audited = weakref.ref(loader) if loader is not None else (lambda: None)
        mid = 0 < self._consumed < self.num_samples or (self._handed > 0 and self._consumed < self.num_samples)
        for problem in audit_loader(self._audited() if self._audited is not None else None, mid_epoch=mid):
            cause = problem.split(":")[0]
            if cause not in self._warned_causes:
                self._warned_causes.add(cause)
                warnings.warn(f"sampler.{what}(): {problem}", SeederWarning, stacklevel=3)

    def __repr__(self) -> str:
        return (f"seeder.DistributedSampler(len={self._n}, num_replicas={self.num_replicas}, rank={self.rank}, "
                f"shuffle={self.shuffle}, mode={self.mode!r}, epoch={self.epoch})")
