"""Keyed bijective permutations of ``range(n)``: pure functions of ``(n, key)``, NumPy only.

:class:`FeistelPermutation` maps any block of positions to their values in O(block)
time and memory, with no per-``n`` setup: an epoch starts, and a resume jumps to
any position, in O(1). It is an unbalanced Feistel network on the smallest
``b``-bit domain holding ``n`` (``b = bit_length(n - 1)``, so ``2**b < 2n``), with
cycle walking: a value ``>= n`` is encrypted again until it falls in range. Each
round XORs one half with a keyed multiply-add-shift hash of the other half
(``(a*v + c) >> (W - w)`` in ``W``-bit words, ``W = 32`` for ``b <= 32`` else 64),
which is invertible whatever the hash, so the whole map is a bijection of
``range(n)`` for every key. Eight rounds: four fail the consecutive-value tests
at ``n = 10**6``, six pass, eight leave a margin (``tests/test_permutation.py``).

Feistel networks over tiny domains reach only a sliver of the ``n!`` orders, so
:func:`keyed_permutation` draws an exact Fisher-Yates shuffle (NumPy PCG64 keyed
by ``key``) for ``n <= SMALL_N``: a table of at most ``SMALL_N`` entries, a
constant cost.

Example:
    >>> import numpy as np
    >>> p = FeistelPermutation(10, key=42)
    >>> sorted(p(np.arange(10)).tolist()) == list(range(10))
    True
    >>> p.inverse(p(np.arange(10))).tolist() == list(range(10))
    True
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from seeder._checks import check_int, is_int

__all__ = [
    "FeistelPermutation",
    "TablePermutation",
    "keyed_permutation",
    "SMALL_N",
    "ROUNDS",
    "MAX_N",
]

#: Datasets up to this size get an exact Fisher-Yates table instead of the Feistel network.
SMALL_N = 4096
#: Feistel rounds (alternating halves).
ROUNDS = 8
#: Largest supported ``n``: positions travel as int64.
MAX_N = 2**63 - 1

_M64 = (1 << 64) - 1
# Rounds run on chunks of this many words (they stay in cache); cycle walking runs on whole
# blocks, so that its shrinking passes pay NumPy's per-call overhead once per block.
_CHUNK = 1 << 16


def _splitmix64(state: int, count: int) -> list[int]:
    """``count`` words of SplitMix64 started at ``state`` (key expansion)."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        out.append(z ^ (z >> 31))
    return out


def _check_n_key(n: Any, key: Any) -> tuple[int, int]:
    return check_int(n, "n", low=0, high=MAX_N), check_int(key, "key", low=0, high=_M64)


def _positions(x: Any, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"positions must be an integer array, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
        raise ValueError(
            f"positions must lie in [0, {n}), got values in [{int(arr.min())}, {int(arr.max())}]"
        )
    return arr


class FeistelPermutation:
    """A keyed bijection of ``range(n)`` evaluated on blocks of positions.

    ``p(positions)`` returns the values at those positions (int64), ``p.inverse(values)``
    their positions. Both are vectorised; memory is O(len(positions)).

    >>> import numpy as np
    >>> p = FeistelPermutation(1000, key=7)
    >>> len(set(p(np.arange(1000)).tolist()))
    1000
    """

    def __init__(self, n: int, key: int, rounds: int = ROUNDS):
        n, key = _check_n_key(n, key)
        if not is_int(rounds) or rounds < 1:
            raise ValueError(f"rounds must be a positive int, got {rounds!r}")
        self.n, self.key, self.rounds = n, key, int(rounds)
        bits = max(1, (n - 1).bit_length())
        self._left = bits // 2  # high half width
        self._right = bits - self._left  # low half width (>= left)
        word = 32 if bits <= 32 else 64
        self._dtype = np.uint32 if word == 32 else np.uint64
        wmask = (1 << word) - 1
        words = _splitmix64(key, 2 * rounds)
        self._round_keys = []
        for i in range(rounds):
            width = self._right if i % 2 == 0 else self._left
            mul = self._dtype((words[2 * i] | 1) & wmask)
            add = self._dtype(words[2 * i + 1] & wmask)
            self._round_keys.append((mul, add, self._dtype(word - width), width))
        self._shift = np.uint64(self._right)
        self._mask = np.uint64((1 << self._right) - 1)

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, key={self.key}, rounds={self.rounds})"

    def _rounds(self, x: np.ndarray, order: range) -> np.ndarray:
        """Apply the rounds in ``order`` to uint64 words ``x`` (< 2**bits), in cache-sized
        chunks."""
        if x.size <= _CHUNK:
            return self._rounds_chunk(x, order)
        out = np.empty_like(x)
        for start in range(0, x.size, _CHUNK):
            out[start : start + _CHUNK] = self._rounds_chunk(x[start : start + _CHUNK], order)
        return out

    def _rounds_chunk(self, x: np.ndarray, order: range) -> np.ndarray:
        left = (x >> self._shift).astype(self._dtype)
        right = (x & self._mask).astype(self._dtype)
        tmp = np.empty_like(left)
        for i in order:
            mul, add, shift, width = self._round_keys[i]
            if width == 0:
                continue
            src, dst = (left, right) if i % 2 == 0 else (right, left)
            np.multiply(src, mul, out=tmp)
            np.add(tmp, add, out=tmp)
            np.right_shift(tmp, shift, out=tmp)
            np.bitwise_xor(dst, tmp, out=dst)
        out = left.astype(np.uint64)
        out <<= self._shift
        out |= right
        return out

    def _walk(self, x: np.ndarray, order: range) -> np.ndarray:
        y = self._rounds(x, order)
        todo = np.flatnonzero(y >= self.n)
        while todo.size:
            z = self._rounds(y[todo], order)
            y[todo] = z
            todo = todo[z >= self.n]
        return y.view(np.int64)

    def apply_unchecked(self, positions: np.ndarray) -> np.ndarray:
        """Values at ``positions`` (uint64 in [0, n)), no validation: the sampler's fast path."""
        return self._walk(positions, range(self.rounds))

    def __call__(self, positions: Any) -> np.ndarray:
        pos = _positions(positions, self.n)
        return self.apply_unchecked(pos.astype(np.uint64).ravel()).reshape(pos.shape)

    def inverse(self, values: Any) -> np.ndarray:
        """Positions of ``values`` (the inverse permutation)."""
        val = _positions(values, self.n)
        return self._walk(val.astype(np.uint64).ravel(), range(self.rounds - 1, -1, -1)).reshape(
            val.shape
        )


class TablePermutation:
    """An exact Fisher-Yates permutation of ``range(n)`` (NumPy PCG64 keyed by ``key``), held as a
    table.

    >>> import numpy as np
    >>> perm = TablePermutation(5, key=1)
    >>> perm(np.arange(5)).tolist() == perm.table.tolist()
    True
    """

    def __init__(self, n: int, key: int):
        n, key = _check_n_key(n, key)
        self.n, self.key = n, key
        self.table = np.random.Generator(np.random.PCG64(key)).permutation(n).astype(np.int64)

    def __repr__(self) -> str:
        return f"TablePermutation(n={self.n}, key={self.key})"

    def apply_unchecked(self, positions: np.ndarray) -> np.ndarray:
        """Values at ``positions`` (uint64 in [0, n)), no validation: the sampler's fast path."""
        return self.table[positions.astype(np.int64)]

    def __call__(self, positions: Any) -> np.ndarray:
        return self.apply_unchecked(_positions(positions, self.n))

    def inverse(self, values: Any) -> np.ndarray:
        inv = np.empty_like(self.table)
        inv[self.table] = np.arange(self.n, dtype=np.int64)
        return inv[_positions(values, self.n).astype(np.int64)]


Permutation = Union[FeistelPermutation, TablePermutation]


def keyed_permutation(n: int, key: int) -> Permutation:
    """The permutation seeder's O(1) sampler mode uses: a table for ``n <= SMALL_N``, else Feistel.

    >>> keyed_permutation(10, 3)
    TablePermutation(n=10, key=3)
    >>> keyed_permutation(10**9, 3)
    FeistelPermutation(n=1000000000, key=3, rounds=8)
    """
    n, key = _check_n_key(n, key)
    return TablePermutation(n, key) if n <= SMALL_N else FeistelPermutation(n, key)
