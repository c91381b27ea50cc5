"""One adapter per RNG family: seed it, read its state, validate a state, set it.

States are made only of tensors and plain Python values, so that a checkpoint
holding them loads with ``torch.load(weights_only=True)``.

Every adapter reads and writes its RNG through the library's public state API only:
``random.Random.getstate``/``setstate``, NumPy's ``RandomState.get_state``/``set_state`` and
``bit_generator.state``, ``torch.Generator.get_state``/``set_state``; the checkpoint path and the
loaders' per-batch paths (``keep``, ``watcher``) alike.

Example:
    >>> from seeder._seeding.rngs import global_adapters
    >>> for adapter in global_adapters():
    ...     adapter.seed(1234)
"""

from __future__ import annotations

import random
import struct
from typing import Any, Callable, Optional, cast

import numpy as np
import torch

from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.derive import numpy_seed
from seeder._seeding.rngbase import (
    CPU_FIX,
    RNGAdapter,
    check_cached_float,
    check_exact_int,
    check_mt_key,
    check_mt_words,
    expect,
    on_cpu,
)
from seeder._seeding.rngs_torch import AcceleratorAdapter, TorchGeneratorAdapter, accelerator_types

__all__ = [
    "PythonRandomAdapter",
    "NumpyRandomStateAdapter",
    "NumpyGeneratorAdapter",
    "global_adapters",
    "adapter_for",
    "MTState",
    "mt_state",
    "pcg64_state",
    "fast_seeding_state",
]


# 625 unsigned 32-bit words: packing checks each is an int in [0, 2**32)
_MT_WORDS = struct.Struct("=625I")
_KEY = struct.Struct("=624I")  # getstate()'s words as bytes: 6x faster than numpy.array(tuple)
_NUMPY_KEYS = frozenset({"kind", "key", "pos", "has_gauss", "cached_gaussian"})
_PYTHON_KEYS = frozenset({"version", "key", "pos", "gauss_next"})
_PYTHON_TUPLE_KEYS = frozenset({"version", "state", "gauss_next"})


def _key_words(key: torch.Tensor) -> list[int]:
    """A checked Mersenne Twister key tensor's 624 words as ints, as ``setstate`` takes them."""
    return on_cpu(key).contiguous().numpy().view(np.uint32).tolist()


_BASE_SEEDING: list[bool] = []


def _base_seeding_matches() -> bool:
    """Whether seeding through ``random.Random``'s base class gives ``random.Random.seed``'s states
    (probe seeds, checked once).

    >>> _base_seeding_matches()
    True
    """
    if not _BASE_SEEDING:
        want, got = random.Random(), random.Random()
        ok = True
        for probe in (0, 1, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 - 1):
            want.gauss(0, 1)
            got.gauss(0, 1)  # a Gaussian cached: seeding empties it
            want.seed(probe)
            super(random.Random, got).seed(probe)
            got.gauss_next = None  # type: ignore[attr-defined]  # random.py sets it; typeshed omits it
            ok = ok and want.getstate() == got.getstate()
        _BASE_SEEDING.append(ok)
    return _BASE_SEEDING[0]


class PythonRandomAdapter(RNGAdapter):
    """A :class:`random.Random` (the module's by default), through ``getstate``/``setstate``.

    The state is ``{"version": 3, "key": int32 tensor (624 words' bits), "pos": int, "gauss_next":
    float | None}``: ``random.getstate()``'s words as one tensor (loaded by
    ``torch.load(weights_only=True)``).
    ``random.getstate()``'s own form, ``{"version": 3, "state": (625 ints), "gauss_next": ...}``,
    loads too.

    Args:
        rng: the generator; ``None``: the one behind the :mod:`random` module's functions.
    """

    name = "python"

    def __init__(self, rng: Optional[random.Random] = None):
        # The global Random: the random module's functions are its bound methods (random.seed may be
        # wrapped by seeder._seeding.foreign; getstate is not).
        if rng is None:
            # typeshed types random.getstate as a function; it is a method of the global Random
            rng = random.getstate.__self__  # type: ignore[attr-defined]
        self.rng: random.Random = rng

    def seed(self, seed: int) -> None:
        self.rng.seed(seed)

    def seed_function(self) -> Callable[[int], Any]:
        """``rng.seed`` for an int: the C seeding of ``random.Random``'s base class, then the
        Gaussian cache emptied, as ``random.Random.seed`` does past its Python checks (checked
        against ``seed`` once; a subclass of ``random.Random`` gets its own ``seed``)."""
        rng = self.rng
        if type(rng) is not random.Random or not _base_seeding_matches():
            return rng.seed
        base = super(random.Random, rng).seed

        def seed(value: int) -> None:
            base(value)
            rng.gauss_next = None  # type: ignore[attr-defined]

        return seed

    def watcher(self) -> Optional[Callable[[], Any]]:
        """``getstate``: any draw changes the position or the key, or empties ``gauss_next``
        (:mod:`seeder.data._elastic`)."""
        return self.rng.getstate

    def copy_state(self) -> Any:
        return self.rng.getstate()

    def put_back(self, kept: Any) -> None:
        self.rng.setstate(kept)

    def get_state(self) -> dict[str, Any]:
        version, internal, gauss_next = self.rng.getstate()
        key = torch.frombuffer(bytearray(_KEY.pack(*internal[:624])), dtype=torch.int32)
        return {"version": version, "key": key, "pos": internal[624], "gauss_next": gauss_next}

    def check_state(self, state: Any, where: str) -> None:
        expect(
            isinstance(state, dict) and state.keys() in (_PYTHON_KEYS, _PYTHON_TUPLE_KEYS),
            where,
            "expected a dict with keys version, key, pos, gauss_next",
        )
        if type(state["version"]) is not int or state["version"] != 3:
            raise StateError(
                f"{where}: unsupported random state version {state['version']!r} (Python's is "
                f"the int 3)"
            )
        check_cached_float(state["gauss_next"], where, "gauss_next", optional=True)
        if "state" in state:  # random.getstate()'s own form: 625 ints (624 words and the position)
            words = state["state"]
            expect(
                isinstance(words, (list, tuple)) and len(words) == 625,
                where,
                "expected a tuple of 625 ints (624 Mersenne Twister words and the position)",
            )
            try:  # one C loop checks that every word is an int in [0, 2**32)
                _MT_WORDS.pack(*words)
            except struct.error as exc:
                raise StateError(
                    f"{where}: Mersenne Twister words must be ints in [0, 2**32) ({exc})"
                ) from None
            expect(words[-1] <= 624, where, f"position {words[-1]} out of range [0, 624]")
            check_mt_words(words, where)
            return
        key = check_mt_key(state, where)
        check_mt_words(on_cpu(key).numpy(), where)

    def set_state(self, state: dict[str, Any]) -> None:
        if "state" in state:
            words = state["state"]
            self.rng.setstate(
                (
                    state["version"],
                    words if type(words) is tuple else tuple(words),
                    state["gauss_next"],
                )
            )
            return
        self.rng.setstate((3, (*_key_words(state["key"]), state["pos"]), state["gauss_next"]))


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


class NumpyRandomStateAdapter(RNGAdapter):
    """A legacy :class:`numpy.random.RandomState` (NumPy's global one by default).

    Read and written through ``get_state``/``set_state``.

    Seeded with the 64-bit seed folded to 32 bits (:func:`seeder._seeding.derive.numpy_seed`).

    Args:
        rng: the RandomState; ``None``: NumPy's global one (``numpy.random.seed`` and friends).
    """

    name = "numpy"

    def __init__(self, rng: Optional[np.random.RandomState] = None):
        if rng is None:
            require("numpy:random.mtrand._rand")
        self._rng = rng

    @property
    def rng(self) -> np.random.RandomState:
        # np.random.seed may be rebound by users; resolve the global instance each time.
        return self._rng if self._rng is not None else np.random.mtrand._rand

    def seed_function(self) -> Callable[[int], Any]:
        """``seed`` with the RandomState bound once (the global one in place now)."""
        seed = self.rng.seed

        def fold_and_seed(value: int) -> None:
            seed(numpy_seed(value))

        return fold_and_seed

    def seed(self, seed: int) -> None:
        self.rng.seed(numpy_seed(seed))

    def get_state(self) -> dict[str, Any]:
        kind, key, pos, has_gauss, cached = mt_state(self.rng)
        return {
            "kind": str(kind),
            # the 624 words' bits as int32: every value is valid
            "key": torch.from_numpy(key.view(np.int32)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }

    def check_state(self, state: Any, where: str) -> None:
        expect(
            isinstance(state, dict) and state.keys() == _NUMPY_KEYS,
            where,
            "expected a dict with keys kind, key, pos, has_gauss, cached_gaussian",
        )
        if type(state["kind"]) is not str or state["kind"] != "MT19937":
            raise StateError(f"{where}: unsupported NumPy bit generator {state['kind']!r}")
        key = check_mt_key(state, where)
        check_exact_int(state["has_gauss"], where, "has_gauss", 0, 1)
        check_cached_float(state["cached_gaussian"], where, "cached_gaussian")
        check_mt_words(on_cpu(key).numpy(), where)

    def set_state(self, state: dict[str, Any]) -> None:
        # A list, not an array: NumPy copies the key word by word, which is ~30x faster from a list.
        # NumPy's stub asks for an array; set_state takes any sequence of 624 words.
        self.rng.set_state(
            (  # type: ignore[arg-type]
                state["kind"],
                _key_words(state["key"]),
                state["pos"],
                int(state["has_gauss"]),
                state["cached_gaussian"],
            )
        )

    def copy_state(self) -> Any:
        return self.rng.get_state()

    def put_back(self, kept: Any) -> None:
        kind, key, pos, has_gauss, cached = kept  # a list: set_state copies an array 40x slower
        self.rng.set_state((kind, key.tolist(), pos, has_gauss, cached))

    def watcher(self) -> Optional[Callable[[], Any]]:
        """The fields of ``get_state()`` (of the global RNG in place at each call, for ``None``):
        any draw changes the position, the key or the Gaussian cache (:mod:`seeder.data._elastic`).
        """
        mine = self._rng

        def public() -> Any:
            kind, key, pos, has, cached = mt_state(mine)
            return kind, key.tobytes(), pos, has, cached

        return public


_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341
_M128 = (1 << 128) - 1


def pcg64_state(seed: int) -> dict[str, Any]:
    """``numpy.random.PCG64(numpy.random.SeedSequence(seed)).state``, from the sequence's 8 words.

    PCG64's seeding is arithmetic on them (no object is read); :func:`fast_seeding_state` checks
    it against NumPy once.

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


class NumpyGeneratorAdapter(RNGAdapter):
    """A :class:`numpy.random.Generator`; reseeding replaces its bit generator's state in place."""

    name = "numpy_generator"

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def seed(self, seed: int) -> None:
        bitgen = self.rng.bit_generator
        fast = fast_seeding_state(type(bitgen)) if 0 <= seed < 2**128 else None
        bitgen.state = (
            fast(seed) if fast is not None else type(bitgen)(np.random.SeedSequence(seed)).state
        )

    def get_state(self) -> dict[str, Any]:
        return _plain(self.rng.bit_generator.state)

    def check_state(self, state: Any, where: str) -> None:
        expect(isinstance(state, dict), where, "expected a dict")
        want = type(self.rng.bit_generator).__name__
        expect(
            state.get("bit_generator") == want,
            where,
            f"state is for bit generator {state.get('bit_generator')!r}, this generator uses "
            f"{want!r}",
        )
        probe = _probe_bit_generator(type(self.rng.bit_generator))
        _check_like(state, _plain(probe.state), where)
        if "has_uint32" in state:
            check_exact_int(state["has_uint32"], where, "has_uint32", 0, 1)
            check_exact_int(state["uinteger"], where, "uinteger", 0, 2**32 - 1)
        inner = state["state"]
        if want in ("PCG64", "PCG64DXSM"):
            expect(
                inner["inc"] % 2 == 1,
                where,
                "the PCG64 increment 'inc' must be odd (NumPy always makes it odd)",
            )
        elif want == "MT19937":
            check_mt_words(on_cpu(inner["key"]["__ndarray__"]).numpy(), where)
        try:
            probe.state = _unplain(state)
        except Exception as exc:  # whatever NumPy rejects, reported the same way
            raise StateError(
                f"{where}: not a valid {want} state ({type(exc).__name__}: {exc})"
            ) from None

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = _unplain(state)


_BITGEN_PROBES: dict[type, Any] = {}


def _check_like(value: Any, like: Any, where: str) -> None:
    """Refuse ``value`` unless it has the keys, Python types, tensor dtypes and shapes of ``like``
    (a :func:`_plain` state)."""
    if isinstance(like, dict):
        expect(
            isinstance(value, dict) and value.keys() == like.keys(),
            where,
            f"expected a dict with keys {sorted(like)}, got "
            f"{sorted(value) if isinstance(value, dict) else type(value).__name__}",
        )
        for k in like:
            _check_like(value[k], like[k], f"{where}[{k!r}]")
    elif isinstance(like, torch.Tensor):
        expect(
            isinstance(value, torch.Tensor)
            and value.dtype == like.dtype
            and value.shape == like.shape
            and value.layout == torch.strided
            and value.device.type != "meta",
            where,
            f"expected a {like.dtype} tensor of shape {tuple(like.shape)}; {CPU_FIX} and pass the "
            f"state on unchanged",
        )
    else:
        expect(
            type(value) is type(like),
            where,
            f"expected {type(like).__name__}, got {type(value).__name__} {value!r}",
        )
        if isinstance(like, str):
            expect(value == like, where, f"expected {like!r}, got {value!r}")


def _probe_bit_generator(kind: type) -> Any:
    """One spare bit generator per type, to validate states on (making one draws OS entropy:
    slow)."""
    if kind not in _BITGEN_PROBES:
        _BITGEN_PROBES[kind] = kind(0)
    return _BITGEN_PROBES[kind]


def _plain(obj: Any) -> Any:
    """NumPy bit-generator state -> tensors and plain values (round trip with :func:`_unplain`)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        if obj.dtype == np.uint64:
            return {"__uint64__": torch.from_numpy(obj.view(np.int64).copy())}
        # uint32/uint16 widened to int64: torch before 2.3 has no such tensors; the dtype tag
        # restores them.
        wide = obj.astype(np.int64) if obj.dtype in (np.uint32, np.uint16) else obj.copy()
        return {"__ndarray__": torch.from_numpy(wide), "dtype": str(obj.dtype)}
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _unplain(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__uint64__" in obj:
            return on_cpu(obj["__uint64__"]).numpy().view(np.uint64).copy()
        if "__ndarray__" in obj:
            arr = on_cpu(obj["__ndarray__"]).numpy()
            dtype: np.dtype[Any] = np.dtype(obj["dtype"])
            if dtype.kind in "ui" and arr.size:
                info = np.iinfo(dtype)
                if arr.min() < info.min or arr.max() > info.max:
                    raise ValueError(f"values out of range for {dtype}")
            return arr.astype(dtype)
        return {k: _unplain(v) for k, v in obj.items()}
    return obj


def global_adapters() -> list[RNGAdapter]:
    """Adapters for the process-global RNGs: python, numpy, torch CPU, then each accelerator.

    >>> [a.name for a in global_adapters()][:3]
    ['python', 'numpy', 'torch']
    """
    adapters: list[RNGAdapter] = [
        PythonRandomAdapter(),
        NumpyRandomStateAdapter(),
        TorchGeneratorAdapter(),
    ]
    adapters.extend(AcceleratorAdapter(t) for t in accelerator_types())
    return adapters


def adapter_for(obj: Any) -> Optional[RNGAdapter]:
    """The adapter for a generator object, or ``None`` if ``obj`` is not one seeder knows.

    >>> adapter_for(random.Random(0)).name
    'python'
    """
    if isinstance(obj, random.Random):
        return PythonRandomAdapter(obj)
    if isinstance(obj, np.random.RandomState):
        return NumpyRandomStateAdapter(obj)
    if isinstance(obj, np.random.Generator):
        return NumpyGeneratorAdapter(obj)
    if isinstance(obj, torch.Generator):
        return TorchGeneratorAdapter(obj)
    return None
