"""Pure seed derivation: no global state, no torch import.

Every seed seeder hands out is a pure function of
``(master_seed, domain, task_id, epoch, rank, stream)`` computed with
:class:`numpy.random.SeedSequence` (``entropy = master_seed``,
``spawn_key = (domain, task_id, epoch, rank, stream)``).

The spawn key always has exactly five 32-bit words, so keys of different
domains, tasks, epochs, ranks and streams can never alias each other, and the
master seed (padded by NumPy to the 128-bit pool) can never alias a spawn key.

Derivation version 1 is pinned by golden vectors in ``tests/test_derive.py``
and in the README. Changing anything here is a new derivation version.

Example:
    >>> derive_seed(42, Domain.RANK, task_id=1, epoch=3, rank=0)
    7196025296689398411
"""
from __future__ import annotations

import enum
import numbers
from typing import Any

import numpy as np

__all__ = [
    "DERIVATION_VERSION",
    "MAX_MASTER_SEED",
    "MAX_KEY",
    "Domain",
    "derive_seed",
    "numpy_seed",
    "check_master_seed",
    "check_key",
]

#: Version of the derivation function. Bump it for any change of output.
DERIVATION_VERSION = 1
#: Largest accepted master seed (it travels as an int64 tensor between ranks).
MAX_MASTER_SEED = 2**63 - 1
#: Largest accepted task id, epoch, rank or stream (one 32-bit spawn-key word).
MAX_KEY = 2**32 - 1


class Domain(enum.IntEnum):
    """What a seed is for. Each domain is its own family of streams."""

    RANK = 0  #: per-rank seeds for the global RNGs and registered generators
    SHARED = 1  #: the same on every rank (``shared=True`` generators)
    WORKER = 2  #: DataLoader workers
    SAMPLER = 3  #: data-order permutation keys (shared by all ranks)
    SAMPLE = 4  #: per-sample augmentation seeds
    DALI = 5  #: DALI pipeline seeds


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_master_seed(value: Any, what: str = "master_seed") -> int:
    """Return ``value`` as an ``int`` if it is a valid master seed, else raise.

    >>> check_master_seed(42)
    42
    """
    if not _is_int(value):
        raise TypeError(
            f"{what} must be an int in [0, 2**63 - 1], got {type(value).__name__} {value!r}; "
            "pass an integer such as 42, or None to draw one."
        )
    value = int(value)
    if not 0 <= value <= MAX_MASTER_SEED:
        raise ValueError(
            f"{what} must be in [0, 2**63 - 1], got {value}; "
            "pick a non-negative integer below 2**63."
        )
    return value


def check_key(value: Any, what: str) -> int:
    """Return ``value`` as an ``int`` if it is a valid key word (0 <= v < 2**32), else raise.

    >>> check_key(3, "epoch")
    3
    """
    if not _is_int(value):
        raise TypeError(
            f"{what} must be a non-negative int, got {type(value).__name__} {value!r}; "
            f"pass an integer such as 0."
        )
    value = int(value)
    if not 0 <= value <= MAX_KEY:
        raise ValueError(f"{what} must be in [0, 2**32 - 1], got {value}.")
    return value


def derive_seed(
    master_seed: int,
    domain: int,
    task_id: int = 0,
    epoch: int = 0,
    rank: int = 0,
    stream: int = 0,
) -> int:
    """Derive a 64-bit seed (``0 <= seed < 2**64``) from the master seed and a key.

    Inputs are validated; the result depends on nothing else.

    >>> derive_seed(0, Domain.SHARED, 0, 0) == derive_seed(0, Domain.SHARED, 0, 0)
    True
    """
    entropy = check_master_seed(master_seed)
    key = (
        check_key(int(domain), "domain"),
        check_key(task_id, "task_id"),
        check_key(epoch, "epoch"),
        check_key(rank, "rank"),
        check_key(stream, "stream"),
    )
    return _derive_unchecked(entropy, key)


def _derive_unchecked(entropy: int, key: tuple) -> int:
    state = np.random.SeedSequence(entropy, spawn_key=key).generate_state(1, np.uint64)
    return int(state[0])


def numpy_seed(seed: int) -> int:
    """Fold a 64-bit seed into the 32-bit range of ``numpy.random.seed``.

    The two 32-bit halves are xor-ed, so every bit of the seed matters.

    >>> numpy_seed(2**32 + 1)
    0
    """
    return (seed ^ (seed >> 32)) & 0xFFFFFFFF
