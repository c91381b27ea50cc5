"""NumPy's ``SeedSequence`` (``numpy/random/bit_generator.pyx``) in Python and vectorised NumPy:
seeder's one copy.

The primitives carry NumPy's names: :func:`hashmix`, :func:`mix`, :func:`mix_entropy` (the pool) and
:func:`generate_state` (the output words). Each works on a Python int and, unchanged, on a
``uint32`` array of many keys at once. :class:`StreamSeeds` mixes a fixed key prefix once and then
only the last key word per stream: one stream at a time, a vector of streams, or from a cached block
of consecutive streams (O(1) to any stream, one block in memory). Everything here is checked against
NumPy's own
``SeedSequence`` on first use (:func:`matches_numpy`); where it differs, :class:`StreamSeeds` calls
NumPy.

Example:
    >>> import numpy as np
    >>> pool = mix_entropy(entropy_words(5))
    >>> generate_state(pool, 2) == np.random.SeedSequence(5).generate_state(2).tolist()
    True
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "POOL_SIZE",
    "hashmix",
    "mix",
    "hash_constants",
    "entropy_words",
    "mix_entropy",
    "absorb",
    "generate_state",
    "seed_sequence_words",
    "StreamSeeds",
    "matches_numpy",
]

M32 = 0xFFFFFFFF
POOL_SIZE = 4
INIT_A, MULT_A, INIT_B, MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
MIX_MULT_L, MIX_MULT_R, XSHIFT = 0xCA01F9DD, 0x4973F715, 16
#: Streams per cached block of :meth:`StreamSeeds.at` (the first blocks of a deriver are smaller).
BLOCK = 4096


def hashmix(value: Any, hash_const: int) -> tuple[Any, int]:
    """NumPy's ``hashmix``: ``(mixed value, next hash constant)``; ``value`` an int or a uint32
    array.

    >>> hashmix(0, INIT_A)[1] == INIT_A * MULT_A & M32
    True
    """
    value = value ^ hash_const
    hash_const = hash_const * MULT_A & M32
    value = value * hash_const & M32
    return value ^ (value >> XSHIFT), hash_const


def mix(x: Any, y: Any) -> Any:
    """NumPy's ``mix`` of two 32-bit words (ints or uint32 arrays).

    >>> mix(1, 1) == mix(1, 1) != mix(1, 2)
    True
    """
    result = ((MIX_MULT_L * x & M32) - (MIX_MULT_R * y & M32)) & M32
    return result ^ (result >> XSHIFT)


def hash_constants(init: int, mult: int, count: int) -> list[tuple[int, int]]:
    """The ``(xor, multiplier)`` of the first ``count`` hashmix-style steps from ``init``:
    data-independent.

    >>> hash_constants(INIT_A, MULT_A, 1) == [(INIT_A, INIT_A * MULT_A & M32)]
    True
    """
    out, h = [], init
    for _ in range(count):
        nxt = h * mult & M32
        out.append((h, nxt))
        h = nxt
    return out


def entropy_words(entropy: int) -> list[int]:
    """NumPy's coercion of a non-negative int to 32-bit words, least significant first (``[0]`` for
    0).

    >>> entropy_words(2**32 + 5)
    [5, 1]
    """
    words = [entropy & M32]
    entropy >>= 32
    while entropy:
        words.append(entropy & M32)
        entropy >>= 32
    return words


def mix_entropy(words: Sequence[Any]) -> list[Any]:
    """NumPy's ``mix_entropy``: the 4-word pool from the assembled entropy (run entropy padded to 4,
    spawn key).

    >>> len(mix_entropy([1, 2]))
    4
    """
    hash_const = INIT_A
    pool = []
    for i in range(POOL_SIZE):
        value, hash_const = hashmix(words[i] if i < len(words) else 0, hash_const)
        pool.append(value)
    for src in range(POOL_SIZE):
        for dst in range(POOL_SIZE):
            if src != dst:
                value, hash_const = hashmix(pool[src], hash_const)
                pool[dst] = mix(pool[dst], value)
    return absorb(pool, words[POOL_SIZE:], 16)


def absorb(pool: Sequence[Any], words: Sequence[Any], step: int) -> list[Any]:
    """The pool after mixing in ``words`` beyond the first 4, the first of them being hashmix step
    ``step``.

    >>> mix_entropy([1, 2, 3, 4, 5]) == absorb(mix_entropy([1, 2, 3, 4]), [5], 16)
    True
    """
    pool = list(pool)
    consts = _step_constants(step + POOL_SIZE * len(words))
    for word in words:
        for dst in range(POOL_SIZE):
            pool[dst] = mix(pool[dst], hashmix(word, consts[step][0])[0])
            step += 1
    return pool


_STEPS: list[tuple[int, int]] = []


def _step_constants(count: int) -> list[tuple[int, int]]:
    """The hash constants of the first ``count`` hashmix steps of ``mix_entropy`` (cached)."""
    if len(_STEPS) < count:
        _STEPS[:] = hash_constants(INIT_A, MULT_A, max(count, 64))
    return _STEPS


def generate_state(pool: Sequence[Any], n_words: int) -> list[Any]:
    """NumPy's ``generate_state(n_words)`` (uint32 words) from a pool; a 64-bit word is two of them,
    low first.

    >>> generate_state(mix_entropy([0]), 1) == np.random.SeedSequence(0).generate_state(1).tolist()
    True
    """
    out = []
    for i, (xor, mul) in enumerate(hash_constants(INIT_B, MULT_B, n_words)):
        value = (pool[i % POOL_SIZE] ^ xor) * mul & M32
        out.append(value ^ (value >> XSHIFT))
    return out


def seed_sequence_words(entropy: int, n: int) -> list[int]:
    """``numpy.random.SeedSequence(entropy).generate_state(n)`` (uint32 words).

    >>> seed_sequence_words(0, 2) == np.random.SeedSequence(0).generate_state(2).tolist()
    True
    """
    return generate_state(mix_entropy(entropy_words(entropy)), n)


@functools.lru_cache(maxsize=64)
def _head_pool(entropy: int, head: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """The pool after the entropy (padded to 4 words, as with a spawn key) and the spawn-key words
    ``head``, and the number of hashmix steps taken (cached: a run has one entropy and few ``head``
    values)."""
    words = entropy_words(entropy)
    words += [0] * (POOL_SIZE - len(words))
    return tuple(mix_entropy(words + list(head))), 16 + POOL_SIZE * (
        len(words) - POOL_SIZE + len(head)
    )


class StreamSeeds:
    """The first ``words`` 64-bit words of ``SeedSequence(entropy, spawn_key=prefix + (stream,))``
    for any stream.

    The prefix is mixed once; per stream only the last word's ``hashmix``/``mix`` and the output
    remain, with constants that depend on the prefix's length only.

    >>> d = StreamSeeds(7, (4, 1, 0, 0), words=2)
    >>> numpys = np.random.SeedSequence(7, spawn_key=(4, 1, 0, 0, 9)).generate_state(2, np.uint64)
    >>> d.seed(9) == [int(w) for w in numpys]
    True
    """

    def __init__(self, entropy: int, prefix: tuple[int, ...], words: int = 1):
        self.entropy, self.prefix, self.words = entropy, tuple(prefix), words
        # The head of the prefix (domain, task) is the same for a whole run: its pool is cached.
        head, step = _head_pool(entropy, self.prefix[:2])
        self._pool = absorb(head, self.prefix[2:], step)
        step += POOL_SIZE * len(self.prefix[2:])
        self._tail = _step_constants(step + POOL_SIZE)[step : step + POOL_SIZE]
        self._out = hash_constants(INIT_B, MULT_B, 2 * words)
        # One word (reseed's case) needs pool words 0 and 1 only: their constants folded for
        # seed()'s inline path.
        (x0, m0), (x1, m1) = self._tail[:2]
        (y0, n0), (y1, n1) = self._out[:2]
        self._one = (
            words == 1,
            MIX_MULT_L * self._pool[0] & M32,
            x0,
            m0,
            MIX_MULT_L * self._pool[1] & M32,
            x1,
            m1,
            y0,
            n0,
            y1,
            n1,
        )
        self._block: tuple[int, list[int]] = (0, [])
        self._grow = 16
        self.exact = matches_numpy()

    def reference(self, stream: int) -> list[int]:
        """The same words from NumPy's ``SeedSequence`` (the slow path, and the check)."""
        ss = np.random.SeedSequence(self.entropy, spawn_key=self.prefix + (stream,))
        return [int(w) for w in ss.generate_state(self.words, np.uint64)]

    def _stream_pool(self, stream: Any) -> list[Any]:
        return [
            mix(base, hashmix(stream, xor)[0]) for base, (xor, _) in zip(self._pool, self._tail)
        ]

    def seed(self, stream: int) -> list[int]:
        """The seed words of ``stream``, computed alone (reseed's hot path)."""
        if not self.exact:
            return self.reference(stream)
        one, l0, x0, m0, l1, x1, m1, y0, n0, y1, n1 = self._one
        # generate_state(2) of the pool words 0 and 1, each mixed with hashmix(stream): inlined
        if one:
            v = (stream ^ x0) * m0 & M32
            r = (l0 - MIX_MULT_R * (v ^ (v >> 16))) & M32
            v = ((r ^ (r >> 16)) ^ y0) * n0 & M32
            lo = v ^ (v >> 16)
            v = (stream ^ x1) * m1 & M32
            r = (l1 - MIX_MULT_R * (v ^ (v >> 16))) & M32
            v = ((r ^ (r >> 16)) ^ y1) * n1 & M32
            return [lo | (v ^ (v >> 16)) << 32]
        return self._words(generate_state(self._stream_pool(stream), 2 * self.words))

    @staticmethod
    def _words(halves: list[Any]) -> list[Any]:
        return [halves[i] | halves[i + 1] << 32 for i in range(0, len(halves), 2)]

    def seeds(self, streams: Any) -> np.ndarray:
        """:meth:`seed` for a vector of streams in one NumPy pass: shape ``(len(streams), words)``,
        uint64."""
        streams = np.asarray(streams, dtype=np.uint32)
        if not self.exact:
            return np.array([self.reference(int(s)) for s in streams], dtype=np.uint64).reshape(
                len(streams), self.words
            )
        halves = [
            h.astype(np.uint64) for h in generate_state(self._stream_pool(streams), 2 * self.words)
        ]
        return (
            np.stack(self._words(halves), axis=1)
            if halves
            else np.empty((len(streams), 0), np.uint64)
        )

    def at(self, stream: int) -> list[int]:
        """:meth:`seed` through a cached block of consecutive streams: what a loader asks for, batch
        after batch.

        The block is one flat list of ints (no per-row lists: thousands of new containers would wake
        the garbage collector's full passes).
        """
        first, flat = self._block
        w = self.words
        i = (stream - first) * w
        if 0 <= i < len(flat):
            return flat[i : i + w]
        count = min(self._grow, M32 + 1 - stream)
        self._grow = min(4 * self._grow, BLOCK)
        flat = self.seeds(np.arange(stream, stream + count, dtype=np.uint64)).ravel().tolist()
        self._block = (stream, flat)
        return flat[:w]


_EXACT: list[bool] = []


def matches_numpy() -> bool:
    """Whether this module reproduces NumPy's ``SeedSequence`` (checked once on probe keys).

    >>> matches_numpy()
    True
    """
    if not _EXACT:
        _EXACT.append(True)
        probes = [(2**63 - 1, (4, 7, M32, 3), s) for s in (0, 1, M32)] + [
            (0, (0, 0, 0, 0), 5),
            (2**96 + 3, (1,), 2),
        ]
        ok = all(
            seed_sequence_words(e, 5) == np.random.SeedSequence(e).generate_state(5).tolist()
            for e in (0, 1, M32, 2**64 - 1, 2**127 + 9)
        )
        for entropy, prefix, stream in probes:
            for words in (1, 2, 3):
                d = StreamSeeds(entropy, prefix, words)
                d.exact = True
                want = d.reference(stream)
                ok = ok and d.seed(stream) == want and d.seeds([stream]).tolist() == [want]
        _EXACT[0] = ok
    return _EXACT[0]
