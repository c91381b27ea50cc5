"""Exact shortcuts for the per-batch paths: RNG state as raw bytes; and PCG64 seeding.

The checkpoint path (``state_dict``, ``load_state_dict``, their validation and rollback copies)
uses the libraries' public state APIs only. Two paths that run once a batch or once a sample
use what is here:

- the copy of Python's and NumPy's global RNGs that a loader fetching in the main process puts
  back after each batch (:meth:`seeder._seeding.rngbase.RNGAdapter.keep`), and the elastic loader's
  watch of the RNGs it does not seed (:meth:`seeder._seeding.rngbase.RNGAdapter.watcher`), read a
  Mersenne
  Twister's key and position, and NumPy's Gaussian cache, in place through ``ctypes`` views:
  :func:`python_mt_view` (CPython's ``random.Random``) and :func:`legacy_access` (a legacy
  ``RandomState``). ``random.getstate`` builds 625 ints and NumPy's ``get_state`` copies the
  key word by word, 10-50 times the cost of a 2.5 KB copy. Each layout is an entry of
  :data:`seeder._internals.INTERNALS`, found and checked against ``getstate``/``get_state`` on
  probe objects at first use; where the check fails, a :class:`seeder.SeederWarning` says so
  once and the callers take the public API.
- :func:`pcg64_state` is arithmetic, no layout: the state ``PCG64(SeedSequence(seed))`` starts
  in, for reseeding a registered ``numpy.random.Generator``.
- :func:`mt_state` is NumPy's public ``get_state`` of a legacy ``RandomState``, typed as the tuple
  it returns (NumPy's stub says a dict).

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
from typing import Any, Optional, cast

import numpy as np

from seeder._internals import degrade

__all__ = [
    "KEY_WORDS",
    "KEY_BYTES",
    "MT_BYTES",
    "MARK_BYTES",
    "GAUSS_CACHE",
    "PYTHON_MT",
    "NUMPY_GAUSS",
    "LegacyAccess",
    "legacy_access",
    "pcg64_state",
    "fast_seeding_state",
    "python_mt_view",
    "MTState",
    "mt_state",
]

#: Words and bytes of the MT19937 key.
KEY_WORDS = 624
KEY_BYTES = 4 * KEY_WORDS
#: Bytes of a Mersenne Twister's key and position, as ``_random.Random`` and NumPy's MT19937 keep
#: them.
MT_BYTES = 4 + KEY_BYTES
#: Bytes of a Mersenne Twister's mark: its position and two key words, which together change on
#: every draw (a draw of a multiple of 624 words leaves the position and regenerates the key).
MARK_BYTES = 12

#: A legacy ``RandomState``'s Gaussian cache as NumPy keeps it: ``has_gauss`` (int, padded), the
#: double.
GAUSS_CACHE = struct.Struct("i4xd")

#: The :data:`seeder._internals.INTERNALS` keys of the two layouts.
PYTHON_MT = "python:random.Random Mersenne Twister layout"
NUMPY_GAUSS = "numpy:RandomState gauss cache offset"

#: A legacy NumPy state of an MT19937: kind, the 624 key words, position, has_gauss, the cached
#: Gaussian.
MTState = tuple[str, "np.ndarray[Any, np.dtype[np.uint32]]", int, int, float]


def mt_state(rs: Optional[np.random.RandomState] = None) -> MTState:
    """``rs.get_state()`` (the global RandomState's for ``None``): the legacy tuple of an MT19937.

    NumPy's stub types a plain ``get_state()`` as its ``legacy=False`` dict; NumPy returns the
    tuple (``legacy=True`` is the default), which this names.

    Args:
        rs: a ``RandomState`` over an MT19937, or ``None`` for ``numpy.random``'s global one.

    Returns:
        ``(kind, key, pos, has_gauss, cached_gaussian)``.

    Example:
        >>> rs = np.random.RandomState(3); kind, key, pos, _, _ = mt_state(rs)
        >>> kind, len(key), pos
        ('MT19937', 624, 624)
    """
    state = np.random.get_state() if rs is None else rs.get_state()
    return cast(MTState, state)


_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341
_M128 = (1 << 128) - 1


def pcg64_state(seed: int) -> dict[str, Any]:
    """``numpy.random.PCG64(numpy.random.SeedSequence(seed)).state``, from the sequence's 8 words.

    Args:
        seed: an int in ``[0, 2**128)``.

    Returns:
        The state dict NumPy's ``PCG64.state`` holds.

    >>> pcg64_state(7) == np.random.PCG64(np.random.SeedSequence(7)).state
    True
    """
    w = np.random.SeedSequence(seed).generate_state(8).tolist()
    init_state = (w[1] << 96) | (w[0] << 64) | (w[3] << 32) | w[2]
    init_seq = (w[5] << 96) | (w[4] << 64) | (w[7] << 32) | w[6]
    inc = ((init_seq << 1) | 1) & _M128
    # from state 0: one step gives inc; add init_state; one more step
    state = ((inc + init_state) * _PCG_MULT + inc) & _M128
    return {
        "bit_generator": "PCG64",
        "state": {"state": state, "inc": inc},
        "has_uint32": 0,
        "uinteger": 0,
    }


_FAST_SEEDING: dict[type, Any] = {}


def fast_seeding_state(kind: type) -> Optional[Any]:
    """``f(seed) -> state`` equal to ``kind(SeedSequence(seed)).state``, or ``None`` if none is.

    Args:
        kind: a NumPy bit generator class.

    Returns:
        :func:`pcg64_state` for ``PCG64`` (checked against NumPy on probe seeds once), else
        ``None``.

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
    """``ctypes`` views of a legacy ``RandomState``'s MT19937 key and position and Gaussian cache.

    ``gauss_offset`` is where ``has_gauss`` (int) and the cached double are in the RandomState
    object. Use :func:`legacy_access` to get one; the cache is only ever written through the
    public ``set_state``.
    """

    def __init__(self, gauss_offset: int):
        self.gauss_offset = gauss_offset
        self.zeros = [0] * KEY_WORDS  # set_state's key argument when only the cache is written

    def views(self, rs: np.random.RandomState, bitgen: Any) -> tuple[Any, Any]:
        """Views of ``bitgen``'s key and position and of ``rs``'s Gaussian cache (``.raw`` reads).

        Args:
            rs: the RandomState.
            bitgen: its MT19937 (``rs.__reduce__()[1][0]``, or ``np.random.get_bit_generator()``).

        Returns:
            ``(key and position view, Gaussian cache view)``. They do not keep ``rs`` and ``bitgen``
            alive: hold them too.
        """
        return (
            (ctypes.c_char * MT_BYTES).from_address(bitgen.ctypes.state_address),
            (ctypes.c_char * GAUSS_CACHE.size).from_address(id(rs) + self.gauss_offset),
        )

    @staticmethod
    def mark_view(bitgen: Any) -> Any:
        """A view of ``bitgen``'s :data:`MARK_BYTES`: the key's last two words and the position.

        Args:
            bitgen: an MT19937 (held by the caller: the view does not keep it alive).

        Returns:
            A ``ctypes`` char array; ``.raw`` reads it.

        >>> bitgen = np.random.MT19937(0); view = LegacyAccess.mark_view(bitgen); before = view.raw
        >>> _ = bitgen.random_raw(624)  # the position comes back, the key does not
        >>> view.raw[8:] == before[8:], view.raw != before
        (True, True)
        """
        return (ctypes.c_char * MARK_BYTES).from_address(
            bitgen.ctypes.state_address + MT_BYTES - MARK_BYTES
        )

    def put_back(
        self, rs: np.random.RandomState, key_view: Any, gauss_view: Any, mt: bytes, gauss: bytes
    ) -> None:
        """Write key, position and Gaussian cache bytes read from :meth:`views` back.

        Hold ``bitgen.lock``.

        The cache is written through ``set_state``, and only when it differs.
        """
        if gauss != gauss_view.raw:
            rs.set_state(("MT19937", self.zeros, 0, *GAUSS_CACHE.unpack(gauss)))
        key_view.raw = mt

    @staticmethod
    def as_state(kept: tuple[bytes, bytes]) -> tuple[Any, ...]:
        """``(key and position, Gaussian cache)`` bytes as ``RandomState.set_state`` takes.

        >>> access = legacy_access(); rs = np.random.RandomState(3); bitgen = rs.__reduce__()[1][0]
        >>> kept = [v.raw for v in access.views(rs, bitgen)] if access else None
        >>> access is None or LegacyAccess.as_state(kept)[2] == 624
        True
        """
        mt, gauss = kept
        key = np.frombuffer(mt, dtype=np.uint32, count=KEY_WORDS).tolist()
        return (
            "MT19937",
            key,
            struct.unpack_from("i", mt, KEY_BYTES)[0],
            *GAUSS_CACHE.unpack(gauss),
        )


_LEGACY: list[Optional[LegacyAccess]] = []


def _find_gauss_offset() -> Optional[int]:
    """The Gaussian cache's offset in a RandomState, found with distinctive values set through
    ``set_state`` on 2 objects, and the views checked against ``get_state``/``set_state``; ``None``
    where they disagree."""
    if platform.python_implementation() != "CPython" or not hasattr(
        np.random.BitGenerator, "ctypes"
    ):
        return None
    size = np.random.RandomState.__basicsize__
    probes = [
        np.random.RandomState(np.random.MT19937(1)),
        np.random.RandomState(np.random.MT19937(2)),
    ]
    values = [(1, 0.12345678901234567), (0, -7.25e11), (1, -3.0e-300)]
    key = list(range(7, 7 + KEY_WORDS))
    candidates: Optional[set] = None
    for rs in probes:
        for has, gauss in values:
            rs.set_state(("MT19937", np.array(key, dtype=np.uint32), 5, has, gauss))
            raw = ctypes.string_at(id(rs), size)
            found = {
                off - 8
                for off in range(8, size - 7, 4)
                if raw[off - 8 : off + 8] == GAUSS_CACHE.pack(has, gauss)
            }
            candidates = found if candidates is None else candidates & found
    if not candidates or len(candidates) != 1:
        return None
    access = LegacyAccess(candidates.pop())
    for rs in probes:  # reads, then a put back, against NumPy's own get_state
        bitgen = rs.__reduce__()[1][0]
        if type(bitgen) is not np.random.MT19937:
            return None
        rs.random_sample(3)
        rs.standard_normal(1)
        key_view, gauss_view = access.views(rs, bitgen)
        mt, gauss = key_view.raw, gauss_view.raw
        want = mt_state(rs)
        if LegacyAccess.as_state((mt, gauss))[1:] != (want[1].tolist(), *want[2:]):
            return None
        rs.standard_normal(3)
        access.put_back(rs, key_view, gauss_view, mt, gauss)
        got = mt_state(rs)
        if got[1].tolist() != want[1].tolist() or got[2:] != want[2:]:
            return None
    return access.gauss_offset


def legacy_access() -> Optional[LegacyAccess]:
    """The checked access to legacy ``RandomState`` states, or ``None`` where it does not match.

    Returns:
        A :class:`LegacyAccess`; ``None`` (after one :class:`seeder.SeederWarning` on CPython) where
        the probe found no single place of the Gaussian cache or the views disagreed with
        ``get_state``.

    >>> access = legacy_access()
    >>> rs = np.random.RandomState(0)
    >>> access is None or access.views(rs, np.random.MT19937(0))[1].raw[:4] == bytes(4)
    True
    """
    if not _LEGACY:
        offset = _find_gauss_offset()
        if offset is None and platform.python_implementation() == "CPython":
            degrade(
                NUMPY_GAUSS,
                "the probe found no single place of the Gaussian cache in a "
                "RandomState, or the views disagreed with get_state()",
            )
        _LEGACY.append(LegacyAccess(offset) if offset is not None else None)
    return _LEGACY[0]


_PY_MT: list[Optional[int]] = []


def _find_python_mt_offset() -> Optional[int]:
    """Where CPython keeps a ``random.Random``'s position and key, found with distinctive states set
    through ``setstate`` on 2 objects and checked against ``getstate``; ``None`` where that does not
    match."""
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
            hits = {i for i in range(0, size - MT_BYTES + 1, 4) if raw[i : i + MT_BYTES] == pattern}
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
    """A ``ctypes`` view of the position and key inside ``rng``, or ``None``.

    Reading ``view.raw`` copies the generator's state; assigning it puts one back. The place in
    the object is found once and checked against ``getstate``/``setstate``; where that fails, one
    :class:`seeder.SeederWarning` says so and this returns ``None`` (callers use ``getstate``).

    Args:
        rng: a :class:`random.Random`; only exact ones get a view (``gauss_next`` stays a Python
            attribute, and a subclass may keep its state elsewhere).
        size: bytes to view: :data:`MT_BYTES` (position and key), or :data:`MARK_BYTES` (position
            and the first two words).

    Returns:
        The view (it does not keep ``rng`` alive: hold both), or ``None``.

    Raises:
        ValueError: ``size`` is not in ``[1, MT_BYTES]``.

    >>> view = python_mt_view(random.Random(0))
    >>> view is None or len(view.raw) == MT_BYTES
    True
    """
    if not 0 < size <= MT_BYTES:
        raise ValueError(f"size must be in [1, {MT_BYTES}], got {size}")
    if not _PY_MT:
        offset = _find_python_mt_offset()
        if offset is None and platform.python_implementation() == "CPython":
            degrade(
                PYTHON_MT,
                "the probe found no single place of the Mersenne Twister's position "
                "and key in a random.Random, or writing them disagreed with getstate()",
            )
        _PY_MT.append(offset)
    if _PY_MT[0] is None or type(rng) is not random.Random:
        return None
    return (ctypes.c_char * size).from_address(id(rng) + _PY_MT[0])
