"""The run's environment: deterministic mode, environment snapshots and their diff.

``seeder run`` and ``seeder env`` (the command line) are built on these. Importing
``seeder.env`` loads no torch: each name is imported on first use.

Example:
    >>> import seeder.env
    >>> seeder.env.python_hash_seed(42) == seeder.env.python_hash_seed(42)
    True
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "enforce_determinism": "_determinism",
    "enforce_reproducibility": "_determinism",
    "DeterminismReport": "_determinism",
    "python_hash_seed": "_determinism",
    "capture_environment": "_capture",
    "default_snapshot_dir": "_capture",
    "load_snapshot": "_capture",
    "diff_environments": "_diff",
    "EnvDiff": "_diff",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'seeder.env' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"seeder.env.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
