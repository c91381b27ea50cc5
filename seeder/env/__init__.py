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
    "enforce_determinism": "seeder._seeding.determinism",
    "enforce_reproducibility": "seeder._seeding.determinism",
    "DeterminismReport": "seeder._seeding.determinism",
    "python_hash_seed": "seeder._seeding.determinism",
    "capture_environment": "seeder.env._capture",
    "default_snapshot_dir": "seeder.env._capture",
    "load_snapshot": "seeder.env._capture",
    "diff_environments": "seeder.env._diff",
    "EnvDiff": "seeder.env._diff",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'seeder.env' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
