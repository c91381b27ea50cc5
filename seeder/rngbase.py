"""The RNG adapter interface and the checks shared by every adapter (no adapter lives here).

Example:
    >>> import torch
    >>> on_cpu(torch.zeros(1, dtype=torch.uint8)).device.type
    'cpu'
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import torch

from .errors import StateError

__all__ = ["RNGAdapter", "expect", "check_uint8_tensor", "on_cpu", "CPU_FIX", "save_states", "put_back_states"]


def expect(cond: bool, where: str, msg: str) -> None:
    """Raise :class:`StateError` ``"<where>: <msg>"`` unless ``cond``."""
    if not cond:
        raise StateError(f"{where}: {msg}")


CPU_FIX = "load the checkpoint with torch.load(..., map_location='cpu')"


def check_uint8_tensor(value: Any, where: str) -> None:
    """Raise :class:`StateError` unless ``value`` is a 1-d ``torch.uint8`` tensor holding data (a generator state)."""
    if not isinstance(value, torch.Tensor):
        raise StateError(f"{where}: expected a torch.uint8 tensor, got {type(value).__name__}")
    if value.dtype != torch.uint8 or value.dim() != 1:
        raise StateError(f"{where}: expected a 1-d torch.uint8 tensor, got {value.dtype} with shape "
                         f"{tuple(value.shape)}; {CPU_FIX} and pass its RNG states on unchanged")
    if value.device.type == "meta":
        raise StateError(f"{where}: the tensor is on the meta device and holds no values; {CPU_FIX}")


def on_cpu(value: torch.Tensor) -> torch.Tensor:
    """``value`` itself if it is on the CPU, else a CPU copy.

    A checkpoint loaded with ``torch.load(..., map_location="cuda")`` has its RNG
    states on the GPU, where ``torch.Generator.set_state`` refuses them ("RNG state
    must be a torch.ByteTensor"); the adapters move them back with this.

    >>> t = torch.zeros(2, dtype=torch.uint8); on_cpu(t) is t
    True
    """
    return value if value.device.type == "cpu" else value.cpu()


class RNGAdapter:
    """Base class: ``name``, ``seed(seed)``, ``get_state()``, ``check_state(s)``, ``set_state(s)``.

    ``snapshot()`` / ``put_back(s)`` save and restore the state within this process (around a fetch,
    a ``fork_rng`` block) in the adapter's cheapest exact form; by default the state itself.
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

    def snapshot(self) -> Any:
        """This RNG's state for :meth:`put_back` in this process (not a checkpoint: no format promised)."""
        return self.get_state()

    def put_back(self, snapshot: Any) -> None:
        """Restore a :meth:`snapshot`."""
        self.set_state(snapshot)


def save_states(adapters: Sequence[RNGAdapter]) -> List[Tuple[RNGAdapter, Any]]:
    """``(adapter, snapshot)`` of each adapter: the one way seeder saves RNGs around a fetch or a block.

    >>> import random
    >>> from seeder.rngs import global_adapters
    >>> saved = save_states(global_adapters()); a = random.random()
    >>> put_back_states(saved), random.random() == a
    ([], True)
    """
    return [(adapter, adapter.snapshot()) for adapter in adapters]


def put_back_states(saved: Sequence[Tuple[RNGAdapter, Any]], strict: bool = False) -> List[str]:
    """Put every :func:`save_states` snapshot back, going on past failures; return ``"<name> (<error>)"`` of each.

    ``strict=True`` raises ``RuntimeError`` naming them instead (after trying every one).
    """
    failed = []
    for adapter, snapshot in saved:
        try:
            adapter.put_back(snapshot)
        except Exception as exc:  # keep restoring the others
            failed.append(f"{adapter.name} ({exc})")
    if failed and strict:
        raise RuntimeError(f"seeder could not restore these RNGs: {'; '.join(failed)}")
    return failed
