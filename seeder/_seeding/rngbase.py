"""The RNG adapter interface and the checks shared by every adapter (no adapter lives here).

Example:
    >>> import torch
    >>> on_cpu(torch.zeros(1, dtype=torch.uint8)).device.type
    'cpu'
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import torch

from seeder._errors import StateError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "RNGAdapter",
    "expect",
    "check_uint8_tensor",
    "check_mt_words",
    "check_mt_key",
    "check_cached_float",
    "check_exact_int",
    "on_cpu",
    "CPU_FIX",
    "save_states",
    "put_back_states",
    "keep_states",
    "restore_states",
]


def expect(cond: bool, where: str, msg: str) -> None:
    """Raise :class:`StateError` ``"<where>: <msg>"`` unless ``cond``."""
    if not cond:
        raise StateError(f"{where}: {msg}")


CPU_FIX = "load the checkpoint with torch.load(..., map_location='cpu')"


def check_uint8_tensor(value: Any, where: str) -> None:
    """Raise :class:`StateError` unless ``value`` is a 1-d ``torch.uint8`` tensor holding data (a
    generator state)."""
    if not isinstance(value, torch.Tensor):
        raise StateError(f"{where}: expected a torch.uint8 tensor, got {type(value).__name__}")
    if value.dtype != torch.uint8 or value.dim() != 1:
        raise StateError(
            f"{where}: expected a 1-d torch.uint8 tensor, got {value.dtype} with shape "
            f"{tuple(value.shape)}; {CPU_FIX} and pass its RNG states on unchanged"
        )
    if value.is_meta:
        raise StateError(
            f"{where}: the tensor is on the meta device and holds no values; {CPU_FIX}"
        )
    if value.layout != torch.strided or not value.is_contiguous():
        raise StateError(
            f"{where}: the state tensor is a non-contiguous view (or not strided); pass the tensor "
            f"that get_state()/state_dict() returned, unchanged"
        )


def check_mt_words(words: Union[Sequence[int], np.ndarray], where: str) -> None:
    """Refuse a Mersenne Twister key with fewer than two nonzero words (all zero: every draw is 0).

    A seeded Mersenne Twister never comes near that (the chance is about 2**-19900), so such a
    key is a corrupt state, not one a run produced. ``words`` starts with the 624 key words (ints or
    NumPy ints).

    >>> check_mt_words([0] * 624, "x")
    Traceback (most recent call last):
    ...
    seeder.StateError: x: the Mersenne Twister key has 0 nonzero word(s) of 624: a ...
    """
    if words[1] and words[2]:  # a seeded key: two nonzero words (the count is for the message)
        return
    nonzero = sum(1 for w in words[:624] if w)
    if nonzero < 2:
        raise StateError(
            f"{where}: the Mersenne Twister key has {nonzero} nonzero word(s) of 624: a degenerate "
            "state (every draw would be 0 or nearly), not one a seeded generator reaches; the "
            "checkpoint is corrupt"
        )


_KEY_SHAPE = (624,)


def check_mt_key(state: dict[str, Any], where: str) -> torch.Tensor:
    """``state["key"]`` (a Mersenne Twister's 624 words as an int32 tensor) and ``state["pos"]``
    checked; the key.

    The words themselves (degenerate or not) are the caller's to check.

    >>> check_mt_key({"key": torch.zeros(624, dtype=torch.int32), "pos": 624}, "x").shape
    torch.Size([624])
    """
    key = state["key"]
    if not (
        isinstance(key, torch.Tensor)
        and key.dtype == torch.int32
        and tuple(key.shape) == _KEY_SHAPE
    ):
        raise StateError(
            f"{where}: expected an int32 tensor of shape (624,) (the Mersenne Twister words' "
            f"bits); {CPU_FIX} and pass its RNG states on unchanged"
        )
    expect(
        not key.is_meta, where, f"the tensor is on the meta device and holds no values; {CPU_FIX}"
    )
    expect(key.layout == torch.strided, where, "the key must be a plain (strided) tensor")
    check_exact_int(state["pos"], where, "pos", 0, 624)
    return key


def check_cached_float(value: Any, where: str, name: str, *, optional: bool = False) -> None:
    """Refuse a cached sample that is not a finite Python float (``None`` too when ``optional``).

    >>> check_cached_float(float("nan"), "x", "gauss_next")
    Traceback (most recent call last):
    ...
    seeder.StateError: x: gauss_next must be a finite float, got nan
    """
    if optional and value is None:
        return
    if type(value) is not float or not math.isfinite(value):
        kind = "None or a finite float" if optional else "a finite float"
        got = repr(value) if type(value) is float else f"{type(value).__name__} {value!r}"
        raise StateError(f"{where}: {name} must be {kind}, got {got}")


def check_exact_int(value: Any, where: str, name: str, low: int, high: int) -> None:
    """Refuse anything but a Python ``int`` in ``[low, high]`` (``True``, ``1.0`` and NumPy ints
    included).

    >>> check_exact_int(True, "x", "has_gauss", 0, 1)
    Traceback (most recent call last):
    ...
    seeder.StateError: x: has_gauss must be an int in [0, 1], got bool True
    """
    if type(value) is not int or not low <= value <= high:
        raise StateError(
            f"{where}: {name} must be an int in [{low}, {high}], got {type(value).__name__} "
            f"{value!r}"
        )


def on_cpu(value: torch.Tensor) -> torch.Tensor:
    """``value`` itself if it is on the CPU, else a CPU copy.

    A checkpoint loaded with ``torch.load(..., map_location="cuda")`` has its RNG
    states on the GPU, where ``torch.Generator.set_state`` refuses them ("RNG state
    must be a torch.ByteTensor"); the adapters move them back with this.

    >>> t = torch.zeros(2, dtype=torch.uint8); on_cpu(t) is t
    True
    """
    return value if value.is_cpu else value.cpu()


class RNGAdapter:
    """Base class: ``name``, ``seed(seed)``, ``get_state()``, ``check_state(s)``, ``set_state(s)``.

    Every method uses the RNG library's public state API. ``copy_state()`` / ``put_back(kept)``
    save and restore the state within this process (the rollback copies of a load, a ``fork_rng``
    block). :meth:`keep` and :meth:`watcher` serve the loaders' per-batch paths.
    """

    name: str = ""

    def seed(self, seed: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def get_state(self) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def check_state(self, state: Any, where: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def set_state(self, state: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def copy_state(self) -> Any:
        """A copy of this RNG's state for :meth:`put_back` in this process (not a checkpoint: no
        format promised)."""
        return self.get_state()

    def put_back(self, kept: Any) -> None:
        """Restore a :meth:`copy_state`."""
        self.set_state(kept)

    def keep(self) -> Callable[[], None]:
        """A function that puts this RNG's current state back: what a loader fetching in the main
        process runs after each batch. By default :meth:`copy_state` and :meth:`put_back`.

        Returns:
            A function of no arguments.

        >>> import random
        >>> from seeder._seeding.rngs import PythonRandomAdapter
        >>> restore = PythonRandomAdapter().keep(); a = random.random(); restore()
        >>> a == random.random()
        True
        """
        kept = self.copy_state()
        return lambda: self.put_back(kept)

    def seed_function(self) -> Callable[[int], Any]:
        """A callable that does what :meth:`seed` does, with the fewest Python calls (a loop over
        samples binds it once).

        >>> import random
        >>> from seeder._seeding.rngs import PythonRandomAdapter
        >>> rng = random.Random(); PythonRandomAdapter(rng).seed_function()(7)
        >>> rng.random() == random.Random(7).random()
        True
        """
        return self.seed

    def watcher(self) -> Optional[Callable[[], Any]]:
        """A function whose result changes when this RNG draws (or is set); ``None`` when no such
        function is cheaper than seeding (callers then seed instead of comparing)."""
        return None


def save_states(adapters: Sequence[RNGAdapter]) -> list[tuple[RNGAdapter, Any]]:
    """``(adapter, copy_state())`` of each adapter: the one way seeder saves RNGs around a fetch or
    a block.

    >>> import random
    >>> from seeder._seeding.rngs import global_adapters
    >>> saved = save_states(global_adapters()); a = random.random()
    >>> put_back_states(saved), random.random() == a
    ([], True)
    """
    return [(adapter, adapter.copy_state()) for adapter in adapters]


def put_back_states(saved: Sequence[tuple[RNGAdapter, Any]], strict: bool = False) -> list[str]:
    """Put every :func:`save_states` copy back, going on past failures; return ``"<name>
    (<error>)"`` of each.

    ``strict=True`` raises ``RuntimeError`` naming them instead (after trying every one).
    """
    failed = []
    for adapter, kept in saved:
        try:
            adapter.put_back(kept)
        except Exception as exc:  # keep restoring the others
            failed.append(f"{adapter.name} ({exc})")
    if failed and strict:
        raise RuntimeError(f"seeder could not restore these RNGs: {'; '.join(failed)}")
    return failed


def keep_states(adapters: Sequence[RNGAdapter]) -> list[tuple[RNGAdapter, Callable[[], None]]]:
    """``(adapter, adapter.keep())`` of each adapter: the per-batch save around a fetch.

    Args:
        adapters: the RNGs to put back later with :func:`restore_states`.

    Returns:
        The pairs :func:`restore_states` takes.

    >>> import random
    >>> from seeder._seeding.rngs import global_adapters
    >>> kept = keep_states(global_adapters()); a = random.random()
    >>> restore_states(kept), random.random() == a
    ([], True)
    """
    return [(adapter, adapter.keep()) for adapter in adapters]


def restore_states(
    kept: Sequence[tuple[RNGAdapter, Callable[[], None]]], strict: bool = False
) -> list[str]:
    """Run every :func:`keep_states` restore, going on past failures.

    Args:
        kept: what :func:`keep_states` returned.
        strict: raise instead of returning the failures (after trying every one).

    Returns:
        ``"<name> (<error>)"`` of each failure, ``[]`` when every RNG is back.

    Raises:
        RuntimeError: ``strict`` and some RNG could not be put back; the message names them.
    """
    failed = []
    for adapter, restore in kept:
        try:
            restore()
        except Exception as exc:  # keep restoring the others
            failed.append(f"{adapter.name} ({exc})")
    if failed and strict:
        raise RuntimeError(f"seeder could not restore these RNGs: {'; '.join(failed)}")
    return failed


def next_keeping(adapters: Sequence[RNGAdapter], iterator: Iterator[Any]) -> Any:
    """``next(iterator)`` with the RNGs of ``adapters`` put back afterwards, whatever it drew (none:
    a plain ``next``).

    What a loader that fetches in the main process does, so that the training loop's global streams
    are untouched.

    >>> import random
    >>> from seeder._seeding.rngs import PythonRandomAdapter
    >>> random.seed(1); first = random.random(); random.seed(1)
    >>> drawn = next_keeping([PythonRandomAdapter()], (random.random() for _ in range(1)))
    >>> drawn == first, random.random() == first
    (True, True)
    """
    if not adapters:
        return next(iterator)
    kept = keep_states(adapters)
    try:
        return next(iterator)
    finally:
        restore_states(kept, strict=True)
