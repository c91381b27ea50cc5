"""The data path beyond the loaders: worker seeding, loader audits, stream shares, mixing.

The loaders and the sampler are ``seeder.DataLoader``, ``seeder.ElasticDataLoader``,
``seeder.IterableDataLoader`` and ``seeder.DistributedSampler``; DALI pipelines are
:mod:`seeder.data.dali`. Importing ``seeder.data`` loads no torch: each name is imported
on first use.

Example:
    >>> import seeder, seeder.data
    >>> seeder.init(0); seeder.reseed(0, 0)
    >>> gen = seeder.data.dataloader_generator()
    >>> type(gen).__name__
    'Generator'
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "watch_loader": "_audit",
    "stream_share": "_streams",
    "StreamShare": "_streams",
    "SeededDataset": "_workers",
    "WorkerInitFn": "_workers",
    "worker_init_fn": "_workers",
    "make_worker_init_fn": "_workers",
    "sample_seed": "_workers",
    "dataloader_generator": "_workers",
    "Mix": "_mix_streams",  # Mix (seeder.data._mix) with its mix of streams
}
__all__ = list(_LAZY)
#: The public submodules, imported on first attribute access.
_SUBMODULES = ("dali",)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # `import seeder.data`, then `seeder.data.dali.x`
        return importlib.import_module(f"seeder.data.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'seeder.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"seeder.data.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
