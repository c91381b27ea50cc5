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
- :func:`pcg64_state`: the state ``PCG64(SeedSequence(seed))`` starts in (``SeedSequence`` from
  :mod:`seeder.seedseq`).

Example:
    >>> import numpy as np
    >>> pcg64_state(5) == np.random.PCG64(np.random.SeedSequence(5)).state
    True
"""
from __future__ import annotations

import ctypes
import platform
import random
import struct
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .internals import degrade

__all__ = ["KEY_WORDS", "KEY_BYTES", "MT_BYTES", "MARK_BYTES", "GAUSS_CACHE", "LegacyAccess", "legacy_access", "pcg64_state",
           "fast_seeding_state", "python_mt_view"]

#: Words and bytes of the MT19937 key.
KEY_WORDS = 624
KEY_BYTES = 4 * KEY_WORDS
#: Bytes of a Mersenne Twister's key and position as ``_random.Random`` and NumPy's MT19937 keep them.
MT_BYTES = 4 + KEY_BYTES
#: Bytes of a Mersenne Twister's mark: its position and two key words, which together change on every draw (a draw
#: of a multiple of 624 words leaves the position where it was and regenerates the key).
MARK_BYTES = 12

#: A legacy ``RandomState``'s Gaussian cache as NumPy keeps it: ``has_gauss`` (int, padded) and the cached double.
GAUSS_CACHE = struct.Struct("i4xd")


_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341
_M128 = (1 << 128) - 1


def pcg64_state(seed: int) -> Dict[str, Any]:
    """``numpy.random.PCG64(numpy.random.SeedSequence(seed)).state`` for ``0 <= seed < 2**128``, computed directly
    from the sequence's eight words (NumPy's own ``SeedSequence``: in C, it is faster than the Python one for 8 words).

    >>> pcg64_state(7) == np.random.PCG64(np.random.SeedSequence(7)).state
    True
    """
    w = np.random.SeedSequence(seed).generate_state(8).tolist()
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
        return GAUSS_CACHE.unpack(ctypes.string_at(id(rs) + self.gauss_offset, GAUSS_CACHE.size))

    @staticmethod
    def read(bitgen: Any, key_ptr: int) -> int:
        """Copy the key into ``KEY_BYTES`` bytes at ``key_ptr``; return the position."""
        address = bitgen.ctypes.state_address
        ctypes.memmove(key_ptr, address, KEY_BYTES)
        return ctypes.c_int.from_address(address + KEY_BYTES).value

    def views(self, rs: np.random.RandomState, bitgen: Any) -> Tuple[Any, Any]:
        """``ctypes`` views of ``bitgen``'s key and position and of ``rs``'s Gaussian cache: ``.raw`` reads them.

        The views do not keep ``rs`` and ``bitgen`` alive: hold them too.
        """
        return ((ctypes.c_char * MT_BYTES).from_address(bitgen.ctypes.state_address),
                (ctypes.c_char * GAUSS_CACHE.size).from_address(id(rs) + self.gauss_offset))

    @staticmethod
    def mark_view(bitgen: Any) -> Any:
        """A ``ctypes`` view of ``bitgen``'s :data:`MARK_BYTES`: the key's last two words and the position after them.

        The view does not keep ``bitgen`` alive: hold it too.

        >>> bitgen = np.random.MT19937(0); view = LegacyAccess.mark_view(bitgen); before = view.raw
        >>> _ = bitgen.random_raw(624); view.raw[8:] == before[8:], view.raw != before  # position back, key not
        (True, True)
        """
        return (ctypes.c_char * MARK_BYTES).from_address(bitgen.ctypes.state_address + MT_BYTES - MARK_BYTES)

    def put_back(self, rs: np.random.RandomState, key_view: Any, gauss_view: Any, mt: bytes, gauss: bytes) -> None:
        """Write key and position, and Gaussian cache bytes read from :meth:`views` back (hold ``bitgen.lock``).

        The cache is written through ``set_state``, and only when it differs.
        """
        if gauss != gauss_view.raw:
            rs.set_state(("MT19937", self.zeros, 0, *GAUSS_CACHE.unpack(gauss)))
        key_view.raw = mt

    @staticmethod
    def as_state(kept: Tuple[bytes, bytes]) -> Tuple[Any, ...]:
        """``(key and position, Gaussian cache)`` bytes as the tuple ``RandomState.set_state`` takes.

        >>> access = legacy_access(); rs = np.random.RandomState(3); bitgen = rs.__reduce__()[1][0]
        >>> access is None or LegacyAccess.as_state([v.raw for v in access.views(rs, bitgen)])[2] == 624
        True
        """
        mt, gauss = kept
        key = np.frombuffer(mt, dtype=np.uint32, count=KEY_WORDS).tolist()
        return ("MT19937", key, struct.unpack_from("i", mt, KEY_BYTES)[0], *GAUSS_CACHE.unpack(gauss))

    def write(self, rs: np.random.RandomState, bitgen: Any, key_ptr: int, pos: int, has_gauss: int,
              gauss: float) -> None:
        """Set key, position and Gaussian cache (the cache through ``set_state``, only when it differs)."""
        if GAUSS_CACHE.pack(has_gauss, gauss) != ctypes.string_at(id(rs) + self.gauss_offset, GAUSS_CACHE.size):
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
                     if raw[off - 8:off + 8] == GAUSS_CACHE.pack(has, gauss)}
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


_PY_MT: List[Optional[int]] = []


def _find_python_mt_offset() -> Optional[int]:
    if platform.python_implementation() != "CPython":
        return None
    probes = [random.Random(1), random.Random(2)]
    size = type(probes[0]).__basicsize__
    found: Optional[set] = None
    for rng in probes:
        for pos, first in ((7, 1000), (624, 5), (0, 2**32 - 624)):
            words = tuple(range(first, first + KEY_WORDS))
            rng.setstate((3, words + (pos,), None))
            raw = ctypes.string_at(id(rng), size)
            pattern = struct.pack(f"=i{KEY_WORDS}I", pos, *words)
            hits = {i for i in range(0, size - MT_BYTES + 1, 4) if raw[i:i + MT_BYTES] == pattern}
            found = hits if found is None else found & hits
    if not found or len(found) != 1:
        return None
    offset = found.pop()
    for rng in probes:  # reads and writes against getstate/setstate
        rng.seed(11)
        rng.random()
        view = (ctypes.c_char * MT_BYTES).from_address(id(rng) + offset)
        saved, want = view.raw, rng.getstate()
        rng.random()
        view.raw = saved
        if rng.getstate() != want:
            return None
    return offset


def python_mt_view(rng: random.Random, size: int = MT_BYTES) -> Optional[Any]:
    """A ``ctypes`` view of the position and key inside ``rng`` (a :class:`random.Random`), or ``None``.

    Reading ``view.raw`` copies the generator's state (``random.getstate`` builds 625 ints instead);
    assigning it puts one back. ``size=MARK_BYTES`` views the position and the first two key words only. The place in the object is found once by writing distinctive states with
    ``setstate`` and checked against ``getstate`` on 2 objects; ``None`` where that does not match CPython's
    layout. Only exact ``random.Random`` objects get one (``gauss_next`` stays a Python attribute). The view
    does not keep ``rng`` alive: hold both.

    >>> view = python_mt_view(random.Random(0))
    >>> view is None or len(view.raw) == MT_BYTES
    True
    """
    if not 0 < size <= MT_BYTES:
        raise ValueError(f"size must be in [1, {MT_BYTES}], got {size}")
    if not _PY_MT:
        _PY_MT.append(_find_python_mt_offset())
    if _PY_MT[0] is None or type(rng) is not random.Random:
        return None
    return (ctypes.c_char * size).from_address(id(rng) + _PY_MT[0])
