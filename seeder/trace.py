"""Per-step fingerprints for ``seeder verify``: which random state diverged first after a resume.

When ``$SEEDER_TRACE`` names a path prefix (``seeder verify`` sets it for the runs it
starts), the data path calls :func:`record_step` as it hands out each batch, and one
JSON line per step goes to ``<prefix>.rank<R>.jsonl``: the step, the loader position,
and a short hash of every RNG state the seeder knows. Without ``$SEEDER_TRACE`` it
costs one dictionary lookup. Nothing here changes any RNG.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
    >>> record_step(s, "loader", epoch=0, step=0, position=0)   # no-op: $SEEDER_TRACE unset
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_TRACE", "enabled", "record_step"]

#: Environment variable: path prefix of the per-rank trace files; unset means no tracing.
ENV_TRACE = "SEEDER_TRACE"


def enabled() -> bool:
    """Whether ``$SEEDER_TRACE`` asks for per-step fingerprints."""
    return bool(os.environ.get(ENV_TRACE))


def record_step(seeder: Any, source: str, *, epoch: int, step: int, position: int) -> None:
    """Append one fingerprint line for the batch ``step`` of ``epoch`` that ``source`` is handing out.

    ``position`` is the number of samples of the epoch consumed before this batch.
    A no-op unless :func:`enabled`.
    """
    if not enabled():
        return
    # Filled in by the verify work (issue 11, item 4): hashes of every RNG state and participant position.
