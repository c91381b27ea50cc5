"""Pure seed derivation: every seed a function of its key alone (the caches only keep results), no
torch import.

Every seed seeder hands out is a pure function of
``(master_seed, domain, task_id, epoch, rank, stream)``: NumPy's ``SeedSequence``
(``entropy = master_seed``, ``spawn_key = (domain, task_id, epoch, rank, stream)``),
computed by :mod:`seeder._seeding.seedseq` (checked against NumPy's on first use).

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
import functools
import secrets
from collections.abc import Mapping
from typing import Any

from seeder._checks import is_int
from seeder._seeding.seedseq import StreamSeeds

__all__ = [
    "ENV_SEED",
    "TRAIN_TASK",
    "resolve_master_seed",
    "DERIVATION_VERSION",
    "MAX_MASTER_SEED",
    "MAX_KEY",
    "parse_decimal",
    "parse_master_seed",
    "stream_seeds",
    "batch_seeds",
    "shuffle_seed",
    "index_words",
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
    LOADER = 6  #: per-batch seeds of seeder.DataLoader (batch index as the stream)
    STREAM = (
        7  #: per-batch seeds of seeder.IterableDataLoader (batch x workers + worker as the stream)
    )
    #: per-sample seeds of the elastic loader (position in the epoch's global order as rank, stream)
    ELASTIC = 8
    ELASTIC_RANK = (
        9  #: a rank's main-process streams after a world-size change (global step as the stream)
    )


def check_master_seed(value: Any, what: str = "master_seed") -> int:
    """Return ``value`` as an ``int`` if it is a valid master seed, else raise.

    >>> check_master_seed(42)
    42
    """
    if not is_int(value):
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
    if not is_int(value):
        raise TypeError(
            f"{what} must be a non-negative int, got {type(value).__name__} {value!r}; "
            f"pass an integer such as 0."
        )
    value = int(value)
    if not 0 <= value <= MAX_KEY:
        raise ValueError(f"{what} must be in [0, 2**32 - 1], got {value}.")
    return value


def parse_decimal(text: str, source: str) -> int:
    """The non-negative integer written in ``text`` (the value of the variable ``source``) in plain
    ASCII digits.

    Surrounding spaces, tabs and newlines are ignored. No sign, no ``_`` separators, no
    other scripts' digits, no ``0x`` prefix, although Python's ``int()`` takes all of
    those: launchers and ``seeder run`` write plain digits, anything else is a mistake.

    >>> parse_decimal(" 7\\n", "RANK")
    7
    >>> parse_decimal("+7", "RANK")
    Traceback (most recent call last):
    ...
    ValueError: RANK='+7' is not an integer written in plain ASCII digits 0-9
    """
    if not isinstance(text, str):
        raise TypeError(f"{source} must be given as text (str), got {type(text).__name__} {text!r}")
    digits = text.strip(" \t\n\r\v\f")
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{source}={text!r} is not an integer written in plain ASCII digits 0-9")
    return int(digits)


def parse_master_seed(text: str, source: str = "SEEDER_SEED") -> int:
    """The master seed written in ``text`` (the value of the variable ``source``), else a
    ``ValueError``.

    Only plain ASCII digits are a seed (:func:`parse_decimal`: no sign, ``_``, ``0x`` or
    other scripts' digits). The error names ``source``, the value and the fix. An empty
    value is an error too: treat an empty variable as unset before calling this.

    >>> parse_master_seed(" 42\\n")
    42
    >>> parse_master_seed("1_000")
    Traceback (most recent call last):
    ...
    ValueError: SEEDER_SEED='1_000' is not an integer written in plain ASCII digits 0-9; ...
    """
    try:
        value = parse_decimal(text, source)
    except ValueError as exc:
        raise ValueError(f"{exc}; unset it or set it to a seed such as 42") from None
    return check_master_seed(value, source)


#: The task id of the training loop (NVIDIA's convention: 0 initialisation, 1 training): each epoch
#: starts with ``reseed(TRAIN_TASK, epoch)``; samplers, datasets and the integrations follow this
#: task unless told another.
TRAIN_TASK = 1

#: Environment variable that supplies the master seed when none is given (``seeder.init``, ``seeder
#: run``).
ENV_SEED = "SEEDER_SEED"


def resolve_master_seed(
    master_seed: Any, environ: Mapping[str, str], what: str = "master_seed"
) -> tuple[int, bool]:
    """``(seed, explicit)``: ``master_seed``, else ``environ["SEEDER_SEED"]``, else one drawn from
    OS entropy.

    ``explicit`` is ``False`` only for a drawn seed. A variable that is empty or only
    whitespace counts as unset; any other value must be a valid master seed. ``what`` names
    the argument in errors.

    >>> resolve_master_seed(None, {"SEEDER_SEED": " 7\\n"})
    (7, True)
    >>> resolve_master_seed(3, {"SEEDER_SEED": "7"})
    (3, True)
    >>> resolve_master_seed(None, {"SEEDER_SEED": " "})[1]
    False
    """
    if master_seed is not None:
        return check_master_seed(master_seed, what), True
    text = environ.get(ENV_SEED, "")
    if isinstance(text, str) and not text.strip():
        return secrets.randbelow(MAX_MASTER_SEED + 1), False
    return parse_master_seed(text, ENV_SEED), True


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
    return stream_seeds(entropy, *key[:4]).seed(key[4])[0]


def numpy_seed(seed: int) -> int:
    """Fold a 64-bit seed into the 32-bit range of ``numpy.random.seed``.

    The two 32-bit halves are xor-ed, so every bit of the seed matters.

    >>> numpy_seed(2**32 + 1)
    0
    """
    return (seed ^ (seed >> 32)) & 0xFFFFFFFF


@functools.lru_cache(maxsize=32)
def stream_seeds(
    master: int, domain: int, task: int, epoch: int, rank: int, words: int = 1
) -> StreamSeeds:
    """``derive_seed(master, domain, task, epoch, rank, stream)`` (``words`` 64-bit words) for every
    stream, cached.

    The hot paths take their seeds from it, for checked arguments: ``.seed(stream)`` alone (reseed),
    ``.at(stream)`` from a cached block of consecutive streams (a loader's batches),
    ``.seeds(array)`` vectorised.

    >>> stream_seeds(7, 0, 1, 2, 0).seed(3)[0] == derive_seed(7, Domain.RANK, 1, 2, 0, 3)
    True
    """
    return StreamSeeds(master, (domain, task, epoch, rank), words)


def batch_seeds(
    master: int, task: int, epoch: int, rank: int, batch: int, words: int = 1
) -> list[int]:
    """The seed words of batch ``batch`` of ``epoch`` on ``rank`` of a ``seeder.DataLoader`` (domain
    ``LOADER``).

    Word 0 seeds the global RNGs, word ``k`` registered generator ``k``.

    >>> batch_seeds(1, 1, 0, 0, 5) == batch_seeds(1, 1, 0, 0, 5) != batch_seeds(1, 1, 0, 0, 6)
    True
    >>> batch_seeds(42, 1, 3, 0, 17)[0] == derive_seed(42, Domain.LOADER, 1, 3, 0, 17)
    True
    """
    return stream_seeds(master, int(Domain.LOADER), task, epoch, rank, words).at(batch)


def shuffle_seed(master: int, task: int, epoch: int, stream: int = 0) -> int:
    """The shuffle key of ``epoch`` for a sampler's ``stream`` (domain ``SAMPLER``, rank 0: every
    rank shares it).

    >>> shuffle_seed(42, 1, 3) == derive_seed(42, Domain.SAMPLER, 1, 3, 0, 0)
    True
    """
    return derive_seed(master, Domain.SAMPLER, task, epoch, 0, stream)


def index_words(index: int) -> tuple[int, int]:
    """A 64-bit index as the ``(rank, stream)`` words of a per-sample key (domains ``SAMPLE`` and
    ``ELASTIC``).

    >>> index_words(2**32 + 5)
    (1, 5)
    """
    return index >> 32, index & MAX_KEY
