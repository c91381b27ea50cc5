"""The data path: the sampler, its keyed permutation, ``DataLoader``, worker seeding and DALI pipelines."""
from typing import Any

__all__ = ["DataLoader"]


def __getattr__(name: str) -> Any:
    if name == "DataLoader":  # lazy: importing seeder.data loads no torch
        from .loader import DataLoader

        return DataLoader
    raise AttributeError(f"module 'seeder.data' has no attribute {name!r}")
