"""One adapter per RNG family: seed it, read its state, validate a state, set it.

States are made only of tensors and plain Python values, so that a checkpoint
holding them loads with ``torch.load(weights_only=True)``.

Each adapter of Python's and NumPy's Mersenne Twister has two kinds of methods. The checkpoint
path (``get_state``, ``check_state``, ``set_state``, ``copy_state``, ``put_back``) uses the
library's public state API only. The per-batch paths (``keep``, ``watcher``) read the state in
place through :mod:`seeder._seeding.fastrng` where its layout checked out at first use, and fall
back to the public API (the base class's methods) where it did not.

Example:
    >>> from seeder._seeding.rngs import global_adapters
    >>> for adapter in global_adapters():
    ...     adapter.seed(1234)
"""

from __future__ import annotations

import random
import struct
from typing import Any, Callable, Optional

import numpy as np
import torch

from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.derive import numpy_seed
from seeder._seeding.fastrng import (
    MARK_BYTES,
    LegacyAccess,
    fast_seeding_state,
    legacy_access,
    mt_state,
    python_mt_view,
)
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
        # python_mt_view(rng), looked up at the first per-batch use: False until then, None where
        # CPython's layout did not check out (the public getstate is used then)
        self._view: Any = False

    def seed(self, seed: int) -> None:
        self.rng.seed(seed)

    # Per-batch paths: keep and watcher read the Mersenne Twister in place (fastrng).

    def _mt_view(self) -> Any:
        """The view of the generator's key and position, or ``None`` (looked up once)."""
        if self._view is False:
            self._view = python_mt_view(self.rng)
        return self._view

    def keep(self) -> Callable[[], None]:
        """The generator's position and key as 2.5 KB of bytes and ``gauss_next``
        (``random.getstate`` builds 625 ints: 10-40x slower), where CPython's layout checked out;
        else ``getstate``."""
        # the cached view read inline: keep runs once a batch
        view, rng = self._view if self._view is not False else self._mt_view(), self.rng
        if view is None:
            return super().keep()
        # CPython's Random keeps its cached Gaussian in gauss_next; typeshed leaves it out
        raw, gauss_next = view.raw, rng.gauss_next  # type: ignore[attr-defined]

        def restore() -> None:
            view.raw = raw
            rng.gauss_next = gauss_next  # type: ignore[attr-defined]

        return restore

    def watcher(self) -> Optional[Callable[[], Any]]:
        """The position, first two key words (:data:`seeder._seeding.fastrng.MARK_BYTES`) and
        ``gauss_next`` where CPython's layout checked out, else ``getstate()``. Any draw changes
        them (:mod:`seeder.data._elastic`)."""
        rng = self.rng
        mark = python_mt_view(rng, MARK_BYTES) if self._mt_view() is not None else None
        if mark is None:
            return rng.getstate
        return lambda: (mark.raw, rng.gauss_next)  # type: ignore[attr-defined]  # see keep()

    # Checkpoint path: random's public getstate and setstate only.

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
        self._bitgen: Any = None
        self._fast: Any = None  # (rng, bit generator, key view, gauss view, access): per-batch path

    @property
    def rng(self) -> np.random.RandomState:
        # np.random.seed may be rebound by users; resolve the global instance each time.
        return self._rng if self._rng is not None else np.random.mtrand._rand

    def seed(self, seed: int) -> None:
        self.rng.seed(numpy_seed(seed))

    # Checkpoint path: NumPy's public get_state and set_state only.

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

    # Per-batch paths: keep and watcher read the key and the Gaussian cache in place (fastrng).

    def _views(self) -> Any:
        """``(rng, bit generator, key view, gauss view, access)`` where
        :func:`seeder._seeding.fastrng.legacy_access` checked out and the RNG is an exact
        RandomState over an MT19937; else ``None``."""
        # self.rng, without a call
        rng = self._rng if self._rng is not None else np.random.mtrand._rand
        if self._rng is None:
            # set_bit_generator may swap the global one. get_bit_generator is public (NumPy 1.25);
            # NumPy's stub does not export it.
            bitgen = np.random.get_bit_generator()  # type: ignore[attr-defined]
        else:
            if self._bitgen is None:
                # pickling's public way to name a RandomState's bit generator
                self._bitgen = rng.__reduce__()[1][0]
            bitgen = self._bitgen
        views = self._fast
        if views is not None and views[0] is rng and views[1] is bitgen:
            return views
        # a subclass may override get_state/set_state; another bit generator has another layout
        if type(rng) is not np.random.RandomState or type(bitgen) is not np.random.MT19937:
            return None
        access = legacy_access()
        if access is None:
            return None
        self._fast = views = (rng, bitgen, *access.views(rng, bitgen), access)
        return views

    def keep(self) -> Callable[[], None]:
        """The key and position and the Gaussian cache as 2.5 KB of bytes (NumPy's ``get_state``
        copies the key word by word: 20-50x slower)
        where :func:`seeder._seeding.fastrng.legacy_access` checked out; else ``get_state``."""
        views = self._views()
        if views is None:
            return super().keep()
        rng, bitgen, key_view, gauss_view, access = views
        with bitgen.lock:
            mt, gauss = key_view.raw, gauss_view.raw

        def restore() -> None:
            if self._views() is views:
                with bitgen.lock:
                    access.put_back(rng, key_view, gauss_view, mt, gauss)
            else:  # the global bit generator was replaced since: into the one in place now
                self.rng.set_state(LegacyAccess.as_state((mt, gauss)))

        return restore

    def watcher(self) -> Optional[Callable[[], Any]]:
        """The key's last two words and the position
        (:meth:`seeder._seeding.fastrng.LegacyAccess.mark_view`), the Gaussian cache and, for the
        global RNG, the bit generator (one swapped in changes it),
        where :func:`seeder._seeding.fastrng.legacy_access` checked out; else the fields of
        ``get_state()``. Any draw changes them (:mod:`seeder.data._elastic`)."""
        views = self._views()
        if views is None:
            mine = self._rng

            def public() -> Any:
                rng = mine if mine is not None else np.random.mtrand._rand
                kind, key, pos, has, cached = mt_state(rng)
                return kind, key.tobytes(), pos, has, cached

            return public
        mark, gauss = views[4].mark_view(views[1]), views[3]
        # a RandomState keeps its own bit generator; the global one may be swapped
        current: Callable[[], Any] = (
            np.random.get_bit_generator  # type: ignore[attr-defined]  # see _views()
            if self._rng is None
            else lambda: None
        )

        def marks(_held: Any = views) -> tuple[Any, bytes, bytes]:
            """The bit generator, the mark and the Gaussian cache (``_held``: what the views read
            stays alive)."""
            return current(), mark.raw, gauss.raw

        return marks


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
