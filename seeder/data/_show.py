"""``seeder data show``: the dataset indices of any batch, from a checkpoint file alone.

The file is read with ``torch.load(weights_only=True)``: no dataset is built and no training code
imported. A seeder state (``seeder.state_dict()``, ``seeder.gather_state_dict()``, the ``"seeder"``
entry of a :class:`seeder.Checkpoint` file) or a loader's own state
(``loader.state_dict()``) is found wherever it lies in the saved dict; the indices come from the
same functions the loaders iterate with (:mod:`seeder.data._provenance`).

Example:
    >>> import os, tempfile, torch, seeder
    >>> s = seeder.Seeder(); s.init(5); s.reseed(1, 0)
    >>> loader = seeder.DataLoader(torch.arange(10), batch_size=4, shuffle=True, seeder=s)
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    >>> torch.save({"seeder": s.state_dict()}, path)
    >>> shown = show(path, epoch=3, batches=(1, 1))
    >>> s.reseed(1, 3); shown[0]["indices"] == list(loader)[1].tolist()
    True
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any, Optional

import torch

from seeder._checks import is_int
from seeder._errors import StateError
from seeder._seeding.derive import check_master_seed, shuffle_seed
from seeder.data._order import M64, shard_sizes
from seeder.data._provenance import SkipList as _SkipList
from seeder.data._provenance import (
    elastic_batch,
    elastic_origin,
    loader_batch,
    num_batches,
    step_ranges,
)

__all__ = ["show", "parse_batches", "read_file", "find_loader", "Found", "format_line"]

_LOADERS = ("seeder.loader", "seeder.elastic_loader")
_DEPTH = 8  # how deep into the saved dict a state is looked for


def parse_batches(text: str) -> tuple[int, int]:
    """``"B"`` or ``"FIRST-LAST"`` (both included) as ``(first, last)``.

    Raises:
        ValueError: not one of those forms.

    >>> parse_batches("7"), parse_batches("10-20")
    ((7, 7), (10, 20))
    """
    first, sep, last = text.partition("-")
    try:
        lo = int(first, 10) if first.isdigit() else None
        hi = (int(last, 10) if last.isdigit() else None) if sep else lo
    except ValueError:
        lo = hi = None
    if lo is None or hi is None or hi < lo:
        raise ValueError(
            f"--batch takes a batch index B or a range FIRST-LAST (both included, FIRST <= LAST), "
            f"got {text!r}"
        )
    return lo, hi


def read_file(path: str) -> Any:
    """The object saved in ``path``, loaded with ``torch.load(weights_only=True)``.

    Raises:
        ValueError: the file is missing, unreadable, or holds objects other than plain values
            and tensors (one line naming the file).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: a directory, not a checkpoint file") from None
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{path}: not loadable with torch.load(weights_only=True) (it holds objects other "
            f"than plain values and tensors, or is damaged): {first[:200]}"
        ) from None
    except (OSError, RuntimeError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a torch.save file ({first[:200]})") from None


class Found:
    """One loader state found in a file, with what it needs from around it.

    ``where`` names its place in the file; ``master`` is the master seed of the seeder state it
    came from (``None`` for a loader state on its own); ``rank`` the rank whose state it is
    (``None``: not known).
    """

    def __init__(self, where: str, state: dict[str, Any], master: Optional[int], rank: Any):
        self.where, self.state, self.master, self.rank = where, state, master, rank

    @property
    def elastic(self) -> bool:
        """An :class:`seeder.ElasticDataLoader`'s state."""
        return self.state.get("format") == "seeder.elastic_loader"


def _walk(obj: Any, where: str, depth: int) -> Iterator[tuple[str, dict[str, Any]]]:
    if depth > _DEPTH:
        return
    if isinstance(obj, dict):
        fmt = obj.get("format")
        if fmt in ("seeder", "seeder-gathered", *_LOADERS):
            yield where, obj
            return
        for key, value in obj.items():
            yield from _walk(value, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _walk(value, f"{where}[{i}]", depth + 1)


def _entries(where: str, state: dict[str, Any], rank: Optional[int]) -> Iterator[Found]:
    """The loader states under a seeder state, a gathered one (rank ``rank``'s, else rank 0's) or
    a loader state."""
    fmt = state.get("format")
    if fmt in _LOADERS:
        yield Found(where, state, None, None)
        return
    if fmt == "seeder-gathered":
        ranks = state.get("ranks")
        if not isinstance(ranks, list) or not ranks:
            raise StateError(f"{where}: a gathered seeder state without ranks")
        pick = rank if rank is not None and is_int(rank) and 0 <= rank < len(ranks) else 0
        where, state = f"{where}.ranks[{pick}]", ranks[pick]
        if not isinstance(state, dict):
            raise StateError(f"{where}: not a seeder state")
    master = state.get("master_seed")
    try:
        master = check_master_seed(master, "master_seed")
    except (TypeError, ValueError):
        raise StateError(f"{where}: the seeder state's master seed {master!r} is invalid") from None
    parts = state.get("participants")
    if not isinstance(parts, dict):
        raise StateError(f"{where}: a seeder state without participants")
    for key, part in parts.items():
        if isinstance(part, dict) and part.get("format") in _LOADERS:
            yield Found(f"{where}.participants.{key}", part, master, state.get("rank"))


def find_loader(obj: Any, loader: Optional[str], rank: Optional[int]) -> Found:
    """The one loader state in ``obj`` (a loaded checkpoint), or the one whose place ends with
    ``loader``.

    Raises:
        StateError: no loader state, or several and ``loader`` does not pick one.
    """
    found = [f for where, state in _walk(obj, "", 0) for f in _entries(where, state, rank)]
    if loader is not None:
        found = [f for f in found if f.where == loader or f.where.endswith(f".{loader}")]
    if not found:
        what = f" named {loader!r}" if loader is not None else ""
        raise StateError(
            f"the file holds no seeder.DataLoader or seeder.ElasticDataLoader state{what} (looked "
            f"for seeder.state_dict(), seeder.gather_state_dict() and loader.state_dict() in "
            f"every dict and list)"
        )
    if len(found) > 1:  # one loader saved twice (a framework's loop state and the seeder's)
        kept: list[Found] = []
        for f in sorted(found, key=lambda f: f.master is None):
            if not any(f.state == k.state for k in kept):
                kept.append(f)
        found = kept
    if len(found) > 1:
        names = ", ".join(f.where for f in found)
        raise StateError(f"the file holds several loader states ({names}): pick one with --loader")
    return found[0]


def _ints(state: Any, names: tuple[str, ...], where: str) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` holds ``names``, each an int >= 0."""
    bad = [k for k in names if not isinstance(state, dict) or not is_int(state.get(k))]
    bad = bad or [k for k in names if state[k] < 0]
    if bad:
        got = state.get(bad[0]) if isinstance(state, dict) else state
        raise StateError(f"{where}: state[{bad[0]!r}] must be an int >= 0, got {got!r}; corrupt")


def _sampler(found: Found) -> dict[str, Any]:
    """The sampler state inside ``found``'s loader state, checked for what :func:`show` reads."""
    state, where = found.state, found.where
    sampler: Any = state.get("sampler")
    _ints(sampler, ("dataset_len", "num_replicas", "task", "stream", "key", "epoch"), where)
    if sampler.get("mode") not in ("feistel", "torch") or not all(
        isinstance(sampler.get(k), bool) for k in ("shuffle", "drop_last")
    ):
        raise StateError(f"{where}: the loader's sampler state is corrupt")
    sizes = ("global_batch_size", "world_size") if found.elastic else ("batch_size",)
    _ints(state, (*sizes, "position", "epoch"), where)
    if not isinstance(state.get("drop_last"), bool) or min(state[k] for k in sizes) < 1:
        raise StateError(f"{where}: the loader state is corrupt")
    return dict(sampler)


def _key(found: Found, sampler: dict[str, Any], epoch: int) -> Optional[int]:
    """The shuffle key of ``epoch``, as the loader that saved ``found`` derives it."""
    if not sampler["shuffle"]:
        return None
    seed = found.state.get("seed")
    mode = "feistel" if found.elastic else sampler["mode"]
    task, stream, saved_epoch = sampler["task"], sampler["stream"], sampler["epoch"]
    if seed is not None:
        return (seed + epoch) & M64 if mode == "torch" else shuffle_seed(seed, task, epoch, stream)
    if found.master is not None:
        own_seed = shuffle_seed(found.master, task, saved_epoch, stream) != sampler["key"]
        if "seed" not in found.state and own_seed and epoch != saved_epoch:
            raise StateError(
                f"{found.where}: the sampler was built with its own seed=, which this (older) "
                f"state does not hold; only epoch {saved_epoch}'s order is known"
            )
        if not own_seed:
            return shuffle_seed(found.master, task, epoch, stream)
    if epoch == saved_epoch:
        return int(sampler["key"])
    raise StateError(
        f"{found.where}: a loader state on its own holds the shuffle key of epoch {saved_epoch} "
        f"only; for epoch {epoch} pass a file with the seeder state (seeder.state_dict(), or a "
        f"seeder.Checkpoint file), which holds the master seed"
    )


def _skips(state: dict[str, Any], bound: int, unit: str) -> _SkipList:
    if "skips" not in state:
        return _SkipList()
    return _SkipList.from_state(state["skips"], bound, unit)


def show(
    path: str,
    epoch: int,
    batches: tuple[int, int],
    rank: Optional[int] = None,
    loader: Optional[str] = None,
) -> list[dict[str, Any]]:
    """The indices of ``batches`` (first, last: both included) of ``epoch`` in the checkpoint
    ``path``.

    Args:
        path: a file written by ``torch.save`` holding a seeder state or a loader state.
        epoch: the epoch.
        batches: ``(first, last)`` batch indices (an elastic loader's: global steps).
        rank: the rank whose part to show; ``None``: the state's own rank (a
            :class:`seeder.DataLoader`'s, 0 when not known) or the whole global batch (an elastic
            loader's).
        loader: picks one of several loader states (its participant key, e.g. ``loader.2``).

    Returns:
        One dict per batch: ``epoch``, ``batch``, ``rank``, ``indices``, ``skipped``.

    Raises:
        ValueError: a bad file, state, epoch, batch or rank (:class:`seeder.StateError` for a
            state).
    """
    if not is_int(epoch) or epoch < 0:
        raise ValueError(f"--epoch must be an int >= 0, got {epoch!r}")
    found = find_loader(read_file(path), loader, rank)
    state = found.state
    sampler = _sampler(found)
    n, epoch = int(sampler["dataset_len"]), int(epoch)
    first, last = batches
    out = []
    if found.elastic:
        g, world = int(state["global_batch_size"]), int(state["world_size"])
        drop_last, position = bool(state["drop_last"]), int(state["position"])
        if rank is not None and not 0 <= rank < world:
            raise ValueError(f"--rank must be in [0, {world}) (the state's world size), got {rank}")
        key = _key(found, sampler, epoch)
        origin = elastic_origin(epoch, int(state["epoch"]), position, g, n)
        skipped = step_ranges(_skips(state, n, "position").ranges(epoch), origin, g)
        for b in range(first, last + 1):
            indices = elastic_batch(n, key, g, origin, world, rank, drop_last, b, epoch)
            out.append(_row(epoch, b, rank, indices, b in skipped))
        return out
    replicas = int(sampler["num_replicas"])
    own = found.rank if is_int(found.rank) else 0
    shown = own if rank is None else rank
    if not 0 <= shown < replicas:
        raise ValueError(f"--rank must be in [0, {replicas}) (the state's world size), got {rank}")
    key = _key(found, sampler, epoch)
    bs, drop_last = int(state["batch_size"]), bool(state["drop_last"])
    shard = shard_sizes(n, replicas, sampler["drop_last"])[0]
    # each rank's loader keeps its own skips: those of the state read
    skipped = _skips(state, num_batches(shard, bs, drop_last), "batch").ranges(epoch)
    mode, cut = sampler["mode"], sampler["drop_last"]
    for b in range(first, last + 1):
        indices = loader_batch(n, replicas, shown, cut, bs, mode, key, b, drop_last, epoch)
        out.append(_row(epoch, b, shown, indices, b in skipped))
    return out


def _row(epoch: int, batch: int, rank: Optional[int], indices: list[int], skipped: bool) -> dict:
    return {"epoch": epoch, "batch": batch, "rank": rank, "indices": indices, "skipped": skipped}


def format_line(row: dict[str, Any]) -> str:
    """One batch as a line of text.

    >>> format_line({"epoch": 1, "batch": 3, "rank": None, "indices": [4, 2], "skipped": True})
    'epoch 1 batch 3: [4, 2]  (skipped: never handed out)'
    """
    who = f" rank {row['rank']}" if row["rank"] is not None else ""
    mark = "  (skipped: never handed out)" if row["skipped"] else ""
    return f"epoch {row['epoch']} batch {row['batch']}{who}: {row['indices']}{mark}"
