"""Pure seed derivation: every seed a function of its key alone (the caches only keep results), no torch import.

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
import functools
from typing import Any, List, Sequence, Tuple

import numpy as np

from .checks import is_int

__all__ = [
    "DERIVATION_VERSION",
    "MAX_MASTER_SEED",
    "MAX_KEY",
    "seed_from_key",
    "parse_decimal",
    "parse_master_seed",
    "StreamSeeds",
    "stream_seeds",
    "Domain",
    "derive_seed",
    "numpy_seed",
    "check_master_seed",
    "check_key",
    "seed_stream_block",
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
    ELASTIC = 7  #: per-sample seeds of the elastic loader (position in the epoch's global order as rank, stream)
    ELASTIC_RANK = 8  #: a rank's main-process streams after a world-size change (global step as the stream)


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
    """The non-negative integer written in ``text`` (the value of the variable ``source``) in plain ASCII digits.

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
    """The master seed written in ``text`` (the value of the variable ``source``), else a ``ValueError``.

    Only plain ASCII digits are a seed (:func:`parse_decimal`: no sign, ``_``, ``0x`` or
    other scripts' digits). The error names ``source``, the value and the fix. An empty
    value is an error too: treat an empty variable as unset before calling this.

    >>> parse_master_seed(" 42\\n")
    42
    >>> parse_master_seed("1_000")
    Traceback (most recent call last):
    ...
    ValueError: SEEDER_SEED='1_000' is not an integer written in plain ASCII digits 0-9; unset it or set it to a seed such as 42
    """
    try:
        value = parse_decimal(text, source)
    except ValueError as exc:
        raise ValueError(f"{exc}; unset it or set it to a seed such as 42") from None
    return check_master_seed(value, source)


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
    return seed_from_key(entropy, key)


def seed_from_key(entropy: int, key: tuple) -> int:
    """:func:`derive_seed` for an already validated master seed and 5-word key, without checks (hot paths).

    >>> seed_from_key(0, (1, 0, 0, 0, 0)) == derive_seed(0, Domain.SHARED)
    True
    """
    state = np.random.SeedSequence(entropy, spawn_key=key).generate_state(1, np.uint64)
    return int(state[0])


def numpy_seed(seed: int) -> int:
    """Fold a 64-bit seed into the 32-bit range of ``numpy.random.seed``.

    The two 32-bit halves are xor-ed, so every bit of the seed matters.

    >>> numpy_seed(2**32 + 1)
    0
    """
    return (seed ^ (seed >> 32)) & 0xFFFFFFFF


_M32 = 0xFFFFFFFF

# --------------------------------------------------------------------------- fast derivation of many streams
# SeedSequence (NumPy's seed_seq_fe) constants. derive_seed(master, d, t, e, r, stream) hashes
# 4 words of master seed, then d, t, e, r, then stream: everything up to the stream word is the
# same for a whole epoch, so it is done once and only the last word's mixing runs per sample.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> 16)


def _hash_constants(skip: int, count: int) -> List[Tuple[int, int]]:
    """The (xor, multiplier) pairs of hashmix calls ``skip`` .. ``skip + count - 1`` of the pool mixing."""
    hc, out = _INIT_A, []
    for _ in range(skip):
        hc = (hc * _MULT_A) & _M32
    for _ in range(count):
        xor = hc
        hc = (hc * _MULT_A) & _M32
        out.append((xor, hc))
    return out


# After the master seed's 4 words (4 + 12 hashmix calls), each spawn-key word takes 4: domain, task, then
# epoch and rank (mixed in Python onto the cached pool of master, domain, task), then the stream word.
_EPOCH_RANK = _hash_constants(4 + 12 + 8, 8)
_TAIL = _hash_constants(4 + 12 + 16, 4)


@functools.lru_cache(maxsize=64)
def _task_pool(master: int, domain: int, task: int) -> Tuple[int, ...]:
    """SeedSequence's pool after the master seed, domain and task: the same for every epoch and rank."""
    return tuple(int(w) for w in np.random.SeedSequence(master, spawn_key=(domain, task)).pool)


def _prefix_pool(master: int, domain: int, task: int, epoch: int, rank: int) -> List[int]:
    """SeedSequence's pool after the 4 prefix words: the cached task pool with epoch and rank mixed in."""
    pool = list(_task_pool(master, domain, task))
    for i, (xor, mul) in enumerate(_EPOCH_RANK):
        v = (((rank if i >= 4 else epoch) ^ xor) * mul) & _M32
        pool[i & 3] = _mix(pool[i & 3], v ^ (v >> 16))
    return pool


_OUTPUT: dict = {}
_EXACT: List[bool] = []


def _output_constants(words: int) -> List[Tuple[int, int, int]]:
    if words not in _OUTPUT:
        out, hb = [], _INIT_B
        for i in range(2 * words):
            xor = hb
            hb = (hb * _MULT_B) & _M32
            out.append((i % 4, xor, hb))
        _OUTPUT[words] = out
    return _OUTPUT[words]


def _exact() -> bool:
    """Whether the fast path matches NumPy's SeedSequence (checked once; if NumPy ever changed, stay correct)."""
    if not _EXACT:
        _EXACT.append(True)
        probes = [(2**63 - 1, 4, 7, 0xFFFFFFFF, 3, s) for s in (0, 1, 0xFFFFFFFF)] + [(0, 0, 0, 0, 0, 5)]
        fast = [StreamSeeds(m, d, t, e, r, 2).seed(s) for m, d, t, e, r, s in probes]
        fast1 = [StreamSeeds(m, d, t, e, r, 1).seed(s) for m, d, t, e, r, s in probes]  # the inlined 1-word path
        ref = [[int(w) for w in np.random.SeedSequence(m, spawn_key=(d, t, e, r, s)).generate_state(2, np.uint64)]
               for m, d, t, e, r, s in probes]
        _EXACT[0] = fast == ref and fast1 == [words[:1] for words in ref]
    return _EXACT[0]


class StreamSeeds:
    """``derive_seed(master, domain, task, epoch, rank, stream)[:words]`` for any ``stream``, computed fast.

    Bitwise equal to :func:`seeder.derive.derive_seed` (checked on construction; if NumPy's
    SeedSequence ever changed, it falls back to calling SeedSequence).
    """

    def __init__(self, master: int, domain: int, task: int, epoch: int, rank: int, words: int = 1):
        self.prefix = (master, int(domain), task, epoch, rank)
        self.words = words
        # NumPy mixes the master seed's words (padded to 4) and the 4 prefix words into its pool (the first 6
        # in C, cached per task; see _prefix_pool); the stream word's mixing is what remains, with
        # data-independent constants (_TAIL).
        pool = _prefix_pool(master, int(domain), task, epoch, rank)
        self._tail = [(int(base), xor, mul) for base, (xor, mul) in zip(pool, _TAIL)]
        self._out = _output_constants(words)
        # One word (reseed's case) needs only pool words 0 and 1: constants folded for seed()'s inlined path.
        (b0, x0, m0), (b1, x1, m1) = self._tail[:2]
        (_, y0, n0), (_, y1, n1) = _output_constants(1)
        self._one = (words == 1, (_MIX_L * b0) & _M32, x0, m0, (_MIX_L * b1) & _M32, x1, m1, y0, n0, y1, n1)
        self.exact = _exact()

    def _reference(self, stream: int) -> List[int]:
        ss = np.random.SeedSequence(self.prefix[0], spawn_key=self.prefix[1:] + (stream,))
        return [int(w) for w in ss.generate_state(self.words, np.uint64)]

    def seed(self, stream: int) -> List[int]:
        """The first ``words`` 64-bit words of the SeedSequence for ``stream``."""
        if not self.exact:
            return self._reference(stream)
        one, l0, x0, m0, l1, x1, m1, y0, n0, y1, n1 = self._one
        if one:
            v = ((stream ^ x0) * m0) & _M32
            r = (l0 - _MIX_R * (v ^ (v >> 16))) & _M32
            v = (((r ^ (r >> 16)) ^ y0) * n0) & _M32
            lo = v ^ (v >> 16)
            v = ((stream ^ x1) * m1) & _M32
            r = (l1 - _MIX_R * (v ^ (v >> 16))) & _M32
            v = (((r ^ (r >> 16)) ^ y1) * n1) & _M32
            return [lo | ((v ^ (v >> 16)) << 32)]
        pool = []
        for base, xor, mul in self._tail:
            v = ((stream ^ xor) * mul) & _M32
            pool.append(_mix(base, v ^ (v >> 16)))
        halves = []
        for src, xor, mul in self._out:
            v = ((pool[src] ^ xor) * mul) & _M32
            halves.append(v ^ (v >> 16))
        return [halves[i] | (halves[i + 1] << 32) for i in range(0, len(halves), 2)]

    def seeds(self, streams: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`seed` for a uint32 array of streams: shape ``(len(streams), words)``, uint64."""
        streams = np.asarray(streams, dtype=np.uint32)
        if not self.exact:
            return np.array([self._reference(int(s)) for s in streams], dtype=np.uint64).reshape(len(streams), self.words)
        pool = []
        for base, xor, mul in self._tail:
            v = (streams ^ np.uint32(xor)) * np.uint32(mul)
            v ^= v >> np.uint32(16)
            r = np.uint32(_MIX_L * base & _M32) - np.uint32(_MIX_R) * v
            r ^= r >> np.uint32(16)
            pool.append(r)
        halves = []
        for src, xor, mul in self._out:
            v = (pool[src] ^ np.uint32(xor)) * np.uint32(mul)
            v ^= v >> np.uint32(16)
            halves.append(v.astype(np.uint64))
        out = np.empty((len(streams), self.words), dtype=np.uint64)
        for w in range(self.words):
            out[:, w] = halves[2 * w] | (halves[2 * w + 1] << np.uint64(32))
        return out


@functools.lru_cache(maxsize=16)
def stream_seeds(master: int, domain: int, task: int, epoch: int, rank: int) -> StreamSeeds:
    """A cached :class:`StreamSeeds` (one 64-bit word per stream) for checked arguments: ``reseed``'s hot path.

    >>> stream_seeds(7, 0, 1, 2, 0).seed(3)[0] == derive_seed(7, Domain.RANK, 1, 2, 0, 3)
    True
    """
    return StreamSeeds(master, domain, task, epoch, rank)


def seed_stream_block(master: int, domain: int, task: int, epoch: int, rank: int, streams: Sequence[int]) -> np.ndarray:
    """``derive_seed(master, domain, task, epoch, rank, s)`` for every ``s`` in ``streams``, vectorised (uint64).

    >>> from seeder.derive import derive_seed, Domain
    >>> int(seed_stream_block(7, Domain.SAMPLE, 1, 0, 0, [5])[0]) == derive_seed(7, Domain.SAMPLE, 1, 0, 0, 5)
    True
    """
    check_master_seed(master)
    for name, value in (("domain", int(domain)), ("task", task), ("epoch", epoch), ("rank", rank)):
        check_key(value, name)
    arr = np.asarray(streams)
    if arr.size and (arr.dtype.kind not in "iu" or int(arr.min()) < 0 or int(arr.max()) > _M32):
        raise ValueError("streams must be integers in [0, 2**32 - 1]")
    return StreamSeeds(master, domain, task, epoch, rank).seeds(arr.astype(np.uint32))[:, 0]
