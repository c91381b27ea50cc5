"""What :class:`seeder.integrations.lightning.SeederCallback` reads of seeder's loaders inside
Lightning's fit loop.

A loader's position as the fit loop trained it: Lightning fetches one batch ahead of a loader
with no length (a stream), so a stream's state is taken as of the batches trained
(``IterableDataLoader.state_dict_at``); an elastic loader's position is global (the same on any
world size). No Lightning import: the trainer is read through its public attributes.

Example:
    >>> list(flatten({"a": [1, 2], "b": (3,)}))
    [1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from seeder.data._elastic_loader import ElasticDataLoader
from seeder.data._iterable import IterableDataLoader
from seeder.data._loader import DataLoader

__all__ = [
    "SEEDER_LOADERS",
    "LOADER_FORMATS",
    "trained",
    "loader_state",
    "position",
    "epoch_done",
    "movable",
    "flatten",
]

#: seeder's loaders: ``seeder.DataLoader`` (map-style, elastic or not), ``IterableDataLoader``.
SEEDER_LOADERS = (DataLoader, IterableDataLoader)
#: The ``format`` of those loaders' states, as Lightning's loop state holds them.
LOADER_FORMATS = ("seeder.loader", "seeder.elastic_loader", "seeder.stream_loader")


def trained(trainer: Any) -> int:
    """Batches of this epoch the fit loop has taken from its data fetcher (those it fetched ahead
    are not counted)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)


def loader_state(loader: Any, trainer: Any) -> dict[str, Any]:
    """The state of ``loader`` as of what the fit loop trained: Lightning fetches a batch ahead of a
    stream."""
    if isinstance(loader, IterableDataLoader):
        return loader.state_dict_at(trained(trainer))
    return loader.state_dict()


def position(loader: Any, trainer: Any) -> list[Any]:
    """``[epoch, batches trained, batches in the epoch]`` of a seeder loader; a stream's length is
    ``None``; an elastic loader's ``[epoch, samples of the global order done, "global"]`` (the same
    on any world size)."""
    if isinstance(loader, IterableDataLoader):
        return [loader.epoch, trained(trainer), None]
    if isinstance(loader, ElasticDataLoader):
        return [loader.epoch, loader.state_dict()["position"], "global"]
    return [loader.epoch, loader.batches_done, len(loader.batch_sampler)]


def epoch_done(loader: Any, trainer: Any) -> bool:
    """Whether the fit loop has trained ``loader``'s whole epoch (a stream: it has seen the end, and
    trained all)."""
    if isinstance(loader, IterableDataLoader):
        return bool(loader_state(loader, trainer)["complete"])
    return loader.batches_done >= len(loader.batch_sampler)


def movable(gathered: dict[str, Any], checkpoint: dict[str, Any]) -> bool:
    """Whether a checkpoint loads on another world size: its train loaders are all elastic and the
    rest of its seeder state is registered generators (``generator.<n>``), whose streams are
    re-derived."""
    fit_loop = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
    loaders = fit_loop.get("combined_loader") or []
    parts = gathered["ranks"][0].get("participants")
    return (
        bool(loaders)
        and all(
            isinstance(st, dict) and st.get("format") == "seeder.elastic_loader" for st in loaders
        )
        and isinstance(parts, dict)
        and all(str(k).startswith("generator.") for k in parts)
    )


def flatten(obj: Any) -> Iterator[Any]:
    """The loaders in what ``trainer.train_dataloader`` returns (a loader, or lists/tuples/dicts of
    them)."""
    if isinstance(obj, dict):
        for value in obj.values():
            yield from flatten(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from flatten(value)
    elif obj is not None:
        yield obj
