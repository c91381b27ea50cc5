"""``seeder verify`` and ``seeder compare``: show that a training script is seeded and resumes bit
for bit.

The methodology (NVIDIA seeder's README): with one seed, (1) train X epochs, (2) train X/2 epochs
and checkpoint, (3) resume from (2) to X; without a seed, (4) train X epochs; repeat;
then compare the losses. :func:`verify` runs it and decides PASS/FAIL, :func:`compare`
runs a paired A/B comparison, :func:`load` reads an output directory back for plots.

The statistics need scipy and the figures matplotlib (the ``plot`` extra); they are
imported on first use, so ``import seeder.verify`` needs only numpy.

Example:
    >>> from seeder.verify import Contract
    >>> Contract().args(seed=1, epochs=2)
    ['--seed', '1', '--epochs', '2']
"""

from __future__ import annotations

import importlib
from typing import Any

from seeder.verify._contract import (
    METRICS_ENV,
    Contract,
    Metrics,
    default_command,
    parse_metrics,
    read_metrics,
)
from seeder.verify._runner import RunFailed, RunResult, RunSpec, run_all

__all__ = [
    "Contract",
    "Metrics",
    "METRICS_ENV",
    "parse_metrics",
    "read_metrics",
    "default_command",
    "RunSpec",
    "RunResult",
    "RunFailed",
    "run_all",
    "VerifyConfig",
    "CompareConfig",
    "verify",
    "compare",
    "load",
    "VerifyData",
    "difference",
]

# The session imports scipy (its analysis): these load on first use, so that `import seeder.verify`
# stays light.
_LAZY = {
    "VerifyConfig": "_plan",
    "CompareConfig": "_plan",
    "verify": "_session",
    "compare": "_session",
    "load": "_session",
    "VerifyData": "_session",
    "difference": "_stats",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"seeder.verify.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'seeder.verify' has no attribute {name!r}")
