"""Fast, exact shortcuts for NumPy RNG state and seeding, each checked against NumPy before it is used.

:mod:`seeder.rngs` uses them on its hot paths (``state_dict``, ``load_state_dict``,
``reseed``). Every shortcut is verified once, on first use, against NumPy's own
(slow) path on probe objects; if anything differs (another NumPy, another Python
implementation) it reports itself unavailable and the callers take the slow path.

- :class:`LegacyAccess`: a legacy ``RandomState``'s MT19937 key and position through
  the bit generator's public ctypes interface (``bit_generator.ctypes.state_address``
  points at ``struct {uint32 key[624]; int pos;}``), and its Gaussian cache
  (``has_gauss``, ``cached_gaussian``), read where NumPy keeps it in the RandomState.
  No public API reads the cache without copying the whole key word by word,
  which is what makes ``get_state()`` slow; its place in the object is found once by
  setting distinctive values with the public ``set_state`` and checked on 3 states of
  2 objects. The cache is only ever written through the public ``set_state``.
- :func:`seed_sequence_words`: ``SeedSequence(entropy).generate_state(n)`` in pure Python.
- :func:`pcg64_state`: the state ``PCG64(SeedSequence(seed))`` starts in.

Example:
    >>> import numpy as np
    >>> seed_sequence_words(5, 4) == np.random.SeedSequence(5).generate_state(4).tolist()
    True
"""
from __future__ import annotations

import ctypes
import platform
import struct
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .internals import degrade

__all__ = ["KEY_WORDS", "KEY_BYTES", "LegacyAccess", "legacy_access", "seed_sequence_words", "pcg64_state",
           "fast_seeding_state"]

#: Words and bytes of the MT19937 key.
KEY_WORDS = 624
KEY_BYTES = 4 * KEY_WORDS

_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_GAUSS = struct.Struct("i4xd")  # aug_bitgen_t's has_gauss (int, padded) and gauss (double)


def _hash_constants(count: int, init: int, mult: int) -> List[Tuple[int, int]]:
    out, h = [], init
    for _ in range(count):
        nxt = (h * mult) & _M32
        out.append((h, nxt))
        h = nxt
    return out


_HASH_A = _hash_constants(4 + 12, _INIT_A, _MULT_A)
_PAIRS = [(s, d) for s in range(4) for d in range(4) if s != d]
_HASH_B: List[Tuple[int, int]] = []


def seed_sequence_words(entropy: int, n: int) -> List[int]:
    """``numpy.random.SeedSequence(entropy).generate_state(n)`` (uint32 words) for ``0 <= entropy < 2**128``.

    >>> seed_sequence_words(0, 2) == np.random.SeedSequence(0).generate_state(2).tolist()
    True
    """
    words = [(entropy >> (32 * i)) & _M32 for i in range(4)]
    pool = []
    for value, (xor, mul) in zip(words, _HASH_A):
        v = ((value ^ xor) * mul) & _M32
        pool.append(v ^ (v >> 16))
    for (src, dst), (xor, mul) in zip(_PAIRS, _HASH_A[4:]):
        v = ((pool[src] ^ xor) * mul) & _M32
        r = (_MIX_L * pool[dst] - _MIX_R * (v ^ (v >> 16))) & _M32
        pool[dst] = r ^ (r >> 16)
    if len(_HASH_B) < n:
        _HASH_B[:] = _hash_constants(max(n, 8), _INIT_B, _MULT_B)
    out = []
    for i in range(n):
        xor, mul = _HASH_B[i]
        v = ((pool[i & 3] ^ xor) * mul) & _M32
        out.append(v ^ (v >> 16))
    return out


_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341
_M128 = (1 << 128) - 1


def pcg64_state(seed: int) -> Dict[str, Any]:
    """``numpy.random.PCG64(numpy.random.SeedSequence(seed)).state`` for ``0 <= seed < 2**128``, computed directly.

    >>> pcg64_state(7) == np.random.PCG64(np.random.SeedSequence(7)).state
    True
    """
    w = seed_sequence_words(seed, 8)
    init_state = (w[1] << 96) | (w[0] << 64) | (w[3] << 32) | w[2]
    init_seq = (w[5] << 96) | (w[4] << 64) | (w[7] << 32) | w[6]
    inc = ((init_seq << 1) | 1) & _M128
    state = ((inc + init_state) * _PCG_MULT + inc) & _M128  # from state 0: one step gives inc, add, one step
    return {"bit_generator": "PCG64", "state": {"state": state, "inc": inc}, "has_uint32": 0, "uinteger": 0}


_FAST_SEEDING: Dict[type, Any] = {}


def fast_seeding_state(kind: type) -> Optional[Any]:
    """``f(seed) -> state`` equal to ``kind(SeedSequence(seed)).state``, or ``None`` when no checked shortcut exists.

    >>> fast_seeding_state(np.random.PCG64)(3) == np.random.PCG64(np.random.SeedSequence(3)).state
    True
    """
    if kind not in _FAST_SEEDING:
        fn = pcg64_state if kind is np.random.PCG64 else None
        probes = (0, 1, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 - 1)
        if fn is not None and any(fn(s) != kind(np.random.SeedSequence(s)).state for s in probes):
            fn = None
        _FAST_SEEDING[kind] = fn
    return _FAST_SEEDING[kind]


class LegacyAccess:
    """Reads and writes a legacy ``RandomState``'s MT19937 state without NumPy's word-by-word copies.

    ``gauss_offset`` is where the Gaussian cache's ``has_gauss`` (int) and ``gauss`` (double) are in the
    RandomState object; ``gauss_offset + 8`` is the double. Use :func:`legacy_access` to get one.
    """

    def __init__(self, gauss_offset: int):
        self.gauss_offset = gauss_offset
        self.zeros = [0] * KEY_WORDS  # set_state's key argument when only the cache is written

    def read_gauss(self, rs: np.random.RandomState) -> Tuple[int, float]:
        """``(has_gauss, cached_gaussian)`` exactly as ``rs.get_state()`` reports them."""
        return _GAUSS.unpack(ctypes.string_at(id(rs) + self.gauss_offset, _GAUSS.size))

    @staticmethod
    def read(bitgen: Any, key_ptr: int) -> int:
        """Copy the key into ``KEY_BYTES`` bytes at ``key_ptr``; return the position."""
        address = bitgen.ctypes.state_address
        ctypes.memmove(key_ptr, address, KEY_BYTES)
        return ctypes.c_int.from_address(address + KEY_BYTES).value

    def write(self, rs: np.random.RandomState, bitgen: Any, key_ptr: int, pos: int, has_gauss: int,
              gauss: float) -> None:
        """Set key, position and Gaussian cache (the cache through ``set_state``, only when it differs)."""
        if _GAUSS.pack(has_gauss, gauss) != ctypes.string_at(id(rs) + self.gauss_offset, _GAUSS.size):
            rs.set_state(("MT19937", self.zeros, pos, has_gauss, gauss))
        address = bitgen.ctypes.state_address
        ctypes.memmove(address, key_ptr, KEY_BYTES)
        ctypes.c_int.from_address(address + KEY_BYTES).value = pos


_LEGACY: List[Optional[LegacyAccess]] = []


def _find_gauss_offset() -> Optional[int]:
    if platform.python_implementation() != "CPython" or not hasattr(np.random.BitGenerator, "ctypes"):
        return None
    size = np.random.RandomState.__basicsize__
    probes = [np.random.RandomState(np.random.MT19937(1)), np.random.RandomState(np.random.MT19937(2))]
    values = [(1, 0.12345678901234567), (0, -7.25e11), (1, -3.0e-300)]
    key = list(range(7, 7 + KEY_WORDS))
    candidates: Optional[set] = None
    for rs in probes:
        for has, gauss in values:
            rs.set_state(("MT19937", key, 5, has, gauss))
            raw = ctypes.string_at(id(rs), size)
            found = {off - 8 for off in range(8, size - 7, 4)
                     if raw[off - 8:off + 8] == _GAUSS.pack(has, gauss)}
            candidates = found if candidates is None else candidates & found
    if not candidates or len(candidates) != 1:
        return None
    offset = candidates.pop()
    access = LegacyAccess(offset)
    for rs in probes:  # the whole fast path against NumPy's: reads, then writes
        bitgen = rs.__reduce__()[1][0]
        if type(bitgen) is not np.random.MT19937:
            return None
        rs.random_sample(3)
        rs.standard_normal(1)
        buf = (ctypes.c_uint32 * KEY_WORDS)()
        pos = access.read(bitgen, ctypes.addressof(buf))
        kind, want_key, want_pos, has, gauss = rs.get_state()
        if list(buf) != want_key.tolist() or pos != want_pos or access.read_gauss(rs) != (has, gauss):
            return None
        access.write(rs, bitgen, ctypes.addressof(buf), 17, 0, 0.0)
        state = rs.get_state()
        if state[1].tolist() != list(buf) or state[2:] != (17, 0, 0.0):
            return None
    return offset


def legacy_access() -> Optional[LegacyAccess]:
    """The checked fast access to legacy ``RandomState`` states, or ``None`` where it does not match NumPy.

    >>> access = legacy_access()
    >>> access is None or access.read_gauss(np.random.RandomState(0)) == (0, 0.0)
    True
    """
    if not _LEGACY:
        offset = _find_gauss_offset()
        if offset is None and platform.python_implementation() == "CPython":
            degrade("numpy:RandomState gauss cache offset", "the probe found no single place of the Gaussian cache in "
                    "a RandomState, or the fast state access disagreed with get_state()")
        _LEGACY.append(LegacyAccess(offset) if offset is not None else None)
    return _LEGACY[0]
