"""What a loader's batches hold, which are skipped, and which dataset a state belongs to.

Three pure parts that :class:`seeder.DataLoader`, :class:`seeder.ElasticDataLoader` and
``seeder data show`` share, so that a batch's indices computed from a live loader and from a
checkpoint file are one computation:

* the indices of a batch at any (epoch, batch): :func:`loader_batch` (one shard per rank, as
  :class:`seeder.DistributedSampler`) and :func:`elastic_batch` (a rank's slice of a global
  batch), in O(batch size) for the default ``"feistel"`` order;
* :class:`Ranges` and :class:`SkipList`: the batches a loader never hands out, by epoch, as
  sorted disjoint ranges (batch indices for a loader, positions of the global order for an
  elastic loader), and their state;
* :func:`dataset_identity` and :func:`check_identity`: the dataset's class, length and
  fingerprint, and the refusal of a state saved with another dataset.

Example:
    >>> skips = SkipList(); skips.add(0, [3, 4, 9])
    >>> skips.state(), 4 in skips.ranges(0), skips.ranges(0).next_outside(3)
    ([[0, 3, 5], [0, 9, 10]], True, 5)
    >>> loader_batch(10, 1, 0, False, 4, "feistel", None, 2)   # sequential order, batch 2
    [8, 9]
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import logging
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import numpy as np
import torch

from seeder._checks import is_int
from seeder._errors import SeederWarning, StateError
from seeder._internals import require
from seeder._seeding.derive import MAX_KEY, check_key
from seeder.data._order import positions, shard_sizes
from seeder.data._permutation import Permutation, keyed_permutation

__all__ = [
    "Ranges",
    "SkipList",
    "batch_list",
    "num_batches",
    "rank_indices",
    "loader_batch",
    "elastic_batch",
    "elastic_origin",
    "step_ranges",
    "dataset_identity",
    "check_identity",
    "describe_identity",
    "FINGERPRINT_ATTR",
    "SamplerAnswers",
]

logger = logging.getLogger("seeder")

#: The attribute (or method) a dataset defines to name its content in the loader's state.
FINGERPRINT_ATTR = "seeder_fingerprint"
#: Longest fingerprint kept as it is; a longer one is kept as its SHA-256.
_MAX_FINGERPRINT = 200


class Ranges:
    """Sorted disjoint half-open integer ranges ``[lo, hi)``: membership and counts by bisection.

    >>> r = Ranges([(2, 4), (7, 8)])
    >>> 3 in r, 4 in r, r.count(0, 10), r.next_outside(2), r.next_outside(5)
    (True, False, 3, 4, 5)
    """

    __slots__ = ("_lo", "_hi")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()):
        pairs = sorted((int(lo), int(hi)) for lo, hi in ranges if hi > lo)
        merged: list[list[int]] = []
        for lo, hi in pairs:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._lo = [lo for lo, _ in merged]
        self._hi = [hi for _, hi in merged]

    def __bool__(self) -> bool:
        return bool(self._lo)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._lo, self._hi))

    def __repr__(self) -> str:
        return f"Ranges({list(self)})"

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._lo, x) - 1
        return i >= 0 and x < self._hi[i]

    def next_outside(self, x: int) -> int:
        """The first integer ``>= x`` in no range."""
        i = bisect.bisect_right(self._lo, x) - 1
        return self._hi[i] if i >= 0 and x < self._hi[i] else x

    def count(self, lo: int, hi: int) -> int:
        """How many integers of ``[lo, hi)`` lie in a range."""
        return sum(max(0, min(b, hi) - max(a, lo)) for a, b in self)


def batch_list(batches: Any) -> list[int]:
    """``batches`` (an int, a ``range`` or an iterable of ints) as a list of ints.

    Args:
        batches: what ``loader.skip`` takes.

    Returns:
        The ints, in the order given.

    Raises:
        TypeError: not an int, a range or an iterable of ints.

    >>> batch_list(3), batch_list(range(2, 5)), batch_list([7, 1])
    ([3], [2, 3, 4], [7, 1])
    """
    if is_int(batches):
        return [int(batches)]
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(
            f"batches must be a batch index, a range or a list of batch indices, got "
            f"{type(batches).__name__} {batches!r}"
        )
    out = list(batches)
    bad = [b for b in out if not is_int(b)]
    if bad:
        raise TypeError(f"batches must be ints, got {bad[0]!r} ({type(bad[0]).__name__})")
    return [int(b) for b in out]


class SkipList:
    """The batches a loader never hands out: per epoch, :class:`Ranges` of batch indices (or, for an
    elastic loader, of positions of the global order), with their state.

    >>> skips = SkipList(); skips.add(2, range(5, 8)); skips.state()
    [[2, 5, 8]]
    >>> SkipList.from_state([[2, 5, 8]], 10, "batch").ranges(2)
    Ranges([(5, 8)])
    """

    def __init__(self, by_epoch: Optional[dict[int, Ranges]] = None):
        self._by_epoch: dict[int, Ranges] = dict(by_epoch or {})

    def __bool__(self) -> bool:
        return bool(self._by_epoch)

    def epochs(self) -> list[int]:
        """The epochs with skipped batches, sorted."""
        return sorted(self._by_epoch)

    def ranges(self, epoch: int) -> Ranges:
        """The skipped ranges of ``epoch`` (empty when none)."""
        return self._by_epoch.get(epoch) or Ranges()

    def add(self, epoch: int, items: Iterable[int]) -> None:
        """Add single items (batch indices or positions) of ``epoch``."""
        self.add_ranges(epoch, ((i, i + 1) for i in items))

    def add_ranges(self, epoch: int, ranges: Iterable[tuple[int, int]]) -> None:
        """Add ranges ``[lo, hi)`` of ``epoch``."""
        merged = Ranges([*self.ranges(epoch), *ranges])
        if merged:
            self._by_epoch[epoch] = merged

    def copy(self) -> SkipList:
        """An independent copy."""
        return SkipList(self._by_epoch)

    def state(self) -> list[list[int]]:
        """``[[epoch, lo, hi], ...]``, sorted: plain ints for the loader's state."""
        return [[e, lo, hi] for e in sorted(self._by_epoch) for lo, hi in self._by_epoch[e]]

    @staticmethod
    def check_state(value: Any, bound: int, unit: str, what: str = "loader") -> None:
        """Raise :class:`seeder.StateError` unless ``value`` is what :meth:`state` returns, with
        ranges within ``[0, bound]``.

        >>> SkipList.check_state([[0, 4, 2]], 10, "batch")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder.StateError: loader state['skips'][0] must be [epoch, first, end) with ...
        """
        if not isinstance(value, list):
            raise StateError(
                f"{what} state['skips'] must be a list of [epoch, first {unit}, end {unit}], got "
                f"{type(value).__name__}"
            )
        prev: Optional[tuple[int, int]] = None
        for i, item in enumerate(value):
            ok = (
                isinstance(item, list)
                and len(item) == 3
                and all(type(x) is int for x in item)
                and 0 <= item[0] <= MAX_KEY
                and 0 <= item[1] < item[2] <= bound
            )
            if not ok:
                raise StateError(
                    f"{what} state['skips'][{i}] must be [epoch, first, end) with "
                    f"0 <= first < end <= {bound} ({unit}s), got {item!r}; the state is corrupt"
                )
            if prev is not None and (item[0], item[1]) <= prev:
                raise StateError(
                    f"{what} state['skips'] is not sorted into disjoint ranges at item {i} "
                    f"({item!r}); the state is corrupt"
                )
            prev = (item[0], item[2])

    @staticmethod
    def from_state(value: list[list[int]], bound: int, unit: str) -> SkipList:
        """The skip list of a checked state (:meth:`check_state`)."""
        SkipList.check_state(value, bound, unit)
        out = SkipList()
        for epoch, lo, hi in value:
            out.add_ranges(epoch, [(lo, hi)])
        return out


def num_batches(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches of ``samples`` samples.

    >>> num_batches(10, 4, False), num_batches(10, 4, True)
    (3, 2)
    """
    return samples // batch_size if drop_last else -(-samples // batch_size)


_TORCH_PERM: dict[tuple[int, int], np.ndarray] = {}


def _torch_perm(n: int, key: int) -> np.ndarray:
    """``torch.randperm(n)`` seeded with ``key`` (``"torch"`` mode's order); the last one kept."""
    perm = _TORCH_PERM.get((n, key))
    if perm is None:
        g = torch.Generator()
        g.manual_seed(key)
        perm = torch.randperm(n, generator=g).numpy()
        _TORCH_PERM.clear()
        _TORCH_PERM[(n, key)] = perm
    return perm


def rank_indices(
    mode: str, n: int, replicas: int, rank: int, key: Optional[int], lo: int, hi: int
) -> list[int]:
    """Dataset indices of ``rank``'s samples ``lo:hi`` of an epoch (``key=None``: sequential).

    O(hi - lo) in ``"feistel"`` mode; ``"torch"`` draws the epoch's ``torch.randperm`` (O(n)).

    >>> rank_indices("feistel", 7, 2, 1, None, 0, 4)
    [1, 3, 5, 0]
    """
    pos = positions(n, replicas, rank, lo, hi)
    if key is None:
        return pos.view(np.int64).tolist()
    if mode == "torch":
        return _torch_perm(n, key)[pos.view(np.int64)].tolist()
    return _permutation(n, key).apply_unchecked(pos).tolist()


@functools.lru_cache(maxsize=8)
def _permutation(n: int, key: int) -> Permutation:
    """:func:`keyed_permutation`, kept for the next batch of the same epoch (its setup costs more
    than a batch's indices)."""
    return keyed_permutation(n, key)


class SamplerAnswers:
    """Mixin of :class:`seeder.DistributedSampler`: its indices at any position of any epoch."""

    num_samples: int
    num_replicas: int
    rank: int
    shuffle: bool
    mode: str
    _n: int

    def _key(self, epoch: int) -> int:
        raise NotImplementedError  # the sampler's

    def indices_at(
        self, epoch: int, start: int, stop: int, *, rank: Optional[int] = None
    ) -> list[int]:
        """Dataset indices of this rank's samples ``start:stop`` of ``epoch``, without iterating.

        What iteration yields at those positions (as plain ints), for any epoch, past or future,
        in O(stop - start) (``mode="torch"``: O(len(dataset)), torch's ``randperm``). The epoch's
        shuffle key is the loaded one for a loaded epoch, else derived as iteration derives it.

        Args:
            epoch: the epoch.
            start, stop: positions in the rank's shard, ``0 <= start <= stop <= num_samples``.
            rank: another rank's shard (same ``num_replicas``); this sampler's rank if ``None``.

        Returns:
            The indices, in iteration order.

        Raises:
            ValueError: positions or rank out of range.
            RuntimeError: a shuffled order and a seeder without a master seed.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.init(0)
            >>> sampler = seeder.DistributedSampler(range(10), num_replicas=2, rank=0, seeder=s)
            >>> s.reseed(1, 3); sampler.indices_at(3, 1, 4) == list(sampler)[1:4]
            True
        """
        epoch = check_key(epoch, "epoch")
        if not (is_int(start) and is_int(stop) and 0 <= start <= stop <= self.num_samples):
            raise ValueError(
                f"start and stop must be ints with 0 <= start <= stop <= {self.num_samples} (the "
                f"rank's samples per epoch), got {start!r}, {stop!r}"
            )
        rank = self.rank if rank is None else rank
        if not is_int(rank) or not 0 <= rank < self.num_replicas:
            raise ValueError(f"rank must be an int in [0, {self.num_replicas}), got {rank!r}")
        key = self._key(epoch) if self.shuffle else None
        return rank_indices(
            self.mode, self._n, self.num_replicas, int(rank), key, int(start), int(stop)
        )


def _check_batch(batch: Any, count: int, epoch: int, where: str) -> int:
    if not is_int(batch) or not 0 <= batch < count:
        raise ValueError(
            f"batch must be an int in [0, {count}): epoch {epoch} has {count} batches {where}, got "
            f"{batch!r}"
        )
    return int(batch)


def loader_batch(
    n: int,
    replicas: int,
    rank: int,
    drop_last_shards: bool,
    batch_size: int,
    mode: str,
    key: Optional[int],
    batch: int,
    drop_last: bool = False,
    epoch: int = 0,
) -> list[int]:
    """Dataset indices of ``rank``'s batch ``batch`` (one shard per rank, as
    :class:`seeder.DistributedSampler` and :class:`seeder.DataLoader` cut them).

    Args:
        n: the dataset's length.
        replicas, rank: the world size and the rank whose batch to compute.
        drop_last_shards: the sampler's ``drop_last`` (shards cut to equal sizes).
        batch_size: samples per batch.
        mode: the sampler's mode, ``"feistel"`` or ``"torch"``.
        key: the epoch's shuffle key; ``None`` for sequential order.
        batch: the batch index in the epoch.
        drop_last: the loader's ``drop_last`` (no short last batch).
        epoch: named in the error only.

    Returns:
        The indices, in the order the batch holds them.

    Raises:
        ValueError: ``batch`` is not a batch of the epoch.

    >>> loader_batch(10, 2, 1, False, 2, "feistel", None, 1)
    [5, 7]
    """
    samples = shard_sizes(n, replicas, drop_last_shards)[0]
    count = num_batches(samples, batch_size, drop_last)
    batch = _check_batch(batch, count, epoch, f"on each of {replicas} rank(s)")
    lo = batch * batch_size
    return rank_indices(mode, n, replicas, rank, key, lo, min(lo + batch_size, samples))


def elastic_origin(epoch: int, saved_epoch: int, position: int, global_batch: int, n: int) -> int:
    """The origin (position of global step 0) of ``epoch`` for an elastic state at ``position`` of
    ``saved_epoch``: ``position % global_batch`` inside that epoch, else 0.

    >>> elastic_origin(0, 0, 6, 4, 10), elastic_origin(1, 0, 6, 4, 10)
    (2, 0)
    """
    return position % global_batch if epoch == saved_epoch and position < n else 0


def elastic_batch(
    n: int,
    key: Optional[int],
    global_batch: int,
    origin: int,
    world: int,
    rank: Optional[int],
    drop_last: bool,
    step: int,
    epoch: int = 0,
) -> list[int]:
    """Dataset indices of global step ``step`` of an elastic epoch: ``rank``'s slice, or the whole
    global batch for ``rank=None``.

    Args:
        n: the dataset's length.
        key: the epoch's shuffle key; ``None`` for sequential order.
        global_batch: samples per global step.
        origin: the position of step 0's first sample (:func:`elastic_origin`).
        world: the ranks the global batch is split over.
        rank: the rank whose slice to compute, or ``None``.
        drop_last: no short last global batch.
        step: the global step of the epoch.
        epoch: named in the error only.

    Returns:
        The indices, in the order of the global order.

    Raises:
        ValueError: ``step`` is not a global step of the epoch (or holds nothing for ``rank``).

    >>> elastic_batch(10, None, 4, 0, 2, 1, False, 2)
    [9]
    >>> elastic_batch(10, None, 4, 0, 2, None, False, 0)
    [0, 1, 2, 3]
    """
    left = max(n - origin, 0)
    steps = left // global_batch if drop_last else -(-left // global_batch)
    step = _check_batch(step, steps, epoch, f"of {global_batch} samples from position {origin}")
    start = origin + step * global_batch
    size = min(global_batch, n - start)
    if rank is None:
        lo, hi = start, start + size
    else:
        lo, hi = start + rank * size // world, start + (rank + 1) * size // world
        if lo == hi:
            raise ValueError(
                f"rank {rank} has no samples in global step {step} of epoch {epoch}: its last, "
                f"short global batch of {size} sample(s) is split over {world} ranks"
            )
    pos = np.arange(lo, hi, dtype=np.uint64)
    if key is None:
        return pos.astype(np.int64).tolist()
    return keyed_permutation(n, key).apply_unchecked(pos).tolist()


def step_ranges(skipped: Ranges, origin: int, global_batch: int) -> Ranges:
    """The global steps (from ``origin``, ``global_batch`` samples each) that overlap the skipped
    position ranges.

    >>> step_ranges(Ranges([(4, 8), (9, 10)]), 0, 4), step_ranges(Ranges([(4, 8)]), 2, 4)
    (Ranges([(1, 3)]), Ranges([(0, 2)]))
    """
    out = []
    for lo, hi in skipped:
        if hi <= origin:
            continue
        first = max(0, (lo - origin) // global_batch)
        out.append((first, -(-(hi - origin) // global_batch)))
    return Ranges(out)


# --------------------------------------------------------------------------- identity
def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _qualname(name: str) -> str:
    """The class's name without its module: a script's class is ``__main__``'s when it runs and
    its module's when imported."""
    return name.rpartition(":")[2]


def _plain_repr(dataset: Any) -> Optional[str]:
    """The dataset's ``repr`` when its class defines one that names it rather than its content or
    its memory address; else ``None``."""
    cls = type(dataset)
    if cls.__repr__ is object.__repr__ or cls.__module__.split(".")[0] in (
        "builtins",
        "torch",
        "numpy",
    ):
        return None  # the default repr, or a container's whole content
    try:
        text = repr(dataset)
    except Exception:  # a repr that fails names nothing
        return None
    if " at 0x" in text or " object at " in text:
        return None  # differs between processes
    return text


def _fingerprint(dataset: Any) -> Optional[str]:
    own = getattr(dataset, FINGERPRINT_ATTR, None)
    if own is not None:
        value = own() if callable(own) else own
        if not isinstance(value, (str, int, bytes)) or isinstance(value, bool):
            raise TypeError(
                f"{type(dataset).__name__}.{FINGERPRINT_ATTR} must be a str, int or bytes (or a "
                f"method returning one) naming the dataset's content, got "
                f"{type(value).__name__} {value!r}"
            )
        text = value.hex() if isinstance(value, bytes) else str(value)
    else:
        text = _library_fingerprint(dataset) or _repr_digest(dataset) or ""
        if not text:
            return None
    if len(text) > _MAX_FINGERPRINT:
        text = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


def _library_fingerprint(dataset: Any) -> Optional[str]:
    """A Hugging Face ``datasets.Dataset``'s own fingerprint (the hash of its content and
    transforms)."""
    cls = type(dataset)
    if cls.__module__.split(".")[0] != "datasets" or not hasattr(dataset, "_fingerprint"):
        return None
    if not require("datasets:Dataset._fingerprint", dataset):
        return None
    value = dataset._fingerprint
    return f"datasets:{value}"


def _repr_digest(dataset: Any) -> Optional[str]:
    text = _plain_repr(dataset)
    if text is None:
        return None
    # a repr may name paths or options: only its hash reaches the state
    return "repr:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def dataset_identity(dataset: Any) -> dict[str, Any]:
    """The dataset's class, length and fingerprint, for the loader's state.

    The fingerprint is, in this order: the dataset's ``seeder_fingerprint`` (an attribute, or a
    method called with no argument: a str, int or bytes naming its content, e.g. a hash of its
    file list or a data version); a Hugging Face ``datasets.Dataset``'s own fingerprint; the
    SHA-256 of its ``repr`` when its class defines one that is neither the default nor a
    container's content nor a memory address; else ``None``.

    Args:
        dataset: the loader's dataset.

    Returns:
        ``{"class": "module:Qualname", "len": len(dataset), "fingerprint": str or None}``.

    Raises:
        TypeError: ``seeder_fingerprint`` is not a str, int or bytes.

    >>> class Shards(list):
    ...     seeder_fingerprint = "shards-v3"
    >>> ident = dataset_identity(Shards([1, 2]))
    >>> ident["len"], ident["fingerprint"], ident["class"].endswith("Shards")
    (2, 'shards-v3', True)
    """
    return {
        "class": _class_name(dataset),
        "len": len(dataset),
        "fingerprint": _fingerprint(dataset),
    }


def describe_identity(identity: Any) -> str:
    """One line naming a dataset identity.

    >>> describe_identity({"class": "m:Images", "len": 10, "fingerprint": "v2"})
    "m:Images of length 10, fingerprint 'v2'"
    """
    if not isinstance(identity, dict):
        return "an unknown dataset"
    fp = identity.get("fingerprint")
    tail = f", fingerprint {fp!r}" if fp is not None else " (no fingerprint)"
    return f"{identity.get('class')} of length {identity.get('len')}{tail}"


def _check_identity_value(saved: Any, what: str) -> None:
    ok = (
        isinstance(saved, dict)
        and set(saved) == {"class", "len", "fingerprint"}
        and isinstance(saved["class"], str)
        and is_int(saved["len"])
        and saved["len"] >= 0
        and (saved["fingerprint"] is None or isinstance(saved["fingerprint"], str))
    )
    if not ok:
        raise StateError(
            f"{what} state['dataset'] must be {{'class': str, 'len': int, 'fingerprint': str or "
            f"None}}, got {saved!r}; the state is corrupt"
        )


def check_identity(saved: Any, have: dict[str, Any], allow: bool, what: str) -> None:
    """Raise :class:`seeder.StateError` naming both datasets unless ``saved`` (a state's
    ``dataset``) is ``have`` or ``allow`` says another is meant.

    Another class (by name: its module is not compared, since a script's classes belong to
    ``__main__`` when it runs), length or fingerprint (one on one side only included) is another
    dataset; except that a fingerprint taken from a ``repr`` (which may name a machine's paths)
    differing from another such or none warns (:class:`seeder.SeederWarning`) instead.
    ``allow`` accepts another class or fingerprint; another length stays refused (the sampler's
    positions would point elsewhere).

    >>> have = {"class": "m:A", "len": 4, "fingerprint": None}
    >>> check_identity({**have, "class": "__main__:A"}, have, False, "seeder.DataLoader")
    >>> check_identity({**have, "class": "m:B"}, have, False, "seeder.DataLoader")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: the seeder.DataLoader state was saved with the dataset m:B of length 4 ...
    """
    _check_identity_value(saved, what)
    same_class = _qualname(saved["class"]) == _qualname(have["class"])
    fps = (saved["fingerprint"], have["fingerprint"])
    if same_class and saved["len"] == have["len"] and fps[0] != fps[1] and not allow:
        if all(fp is None or fp.startswith("repr:") for fp in fps):
            warnings.warn(
                f"{what}: the dataset's repr differs from the one the state was saved with "
                f"({describe_identity(saved)}; this loader has {describe_identity(have)}): "
                f"resuming, but if the data changed, the saved positions point at other samples. "
                f"Give the dataset a seeder_fingerprint naming its content to make this "
                f"an error, or a stable one to silence it "
                f"(see docs/provenance.md#the-datasets-identity)",
                SeederWarning,
                stacklevel=5,
            )
            return
    if same_class and (saved["len"], fps[0]) == (have["len"], fps[1]):
        return
    if not allow or saved["len"] != have["len"]:
        fix = (
            "pass allow_dataset_change=True to the loader if the new dataset is meant to continue "
            "the run"
            if saved["len"] == have["len"]
            else "another length cannot continue the saved positions"
        )
        raise StateError(
            f"the {what} state was saved with the dataset {describe_identity(saved)}, this loader "
            f"has {describe_identity(have)}: a resume would pair the saved positions with other "
            f"samples. Build the loader over the dataset the checkpoint was saved with, or {fix}"
        )
    logger.info(
        "%s: loading a state of %s into a loader of %s (allow_dataset_change=True)",
        what,
        describe_identity(saved),
        describe_identity(have),
    )
