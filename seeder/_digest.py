"""A stable digest of tensors, modules, optimizers and nested state, to compare runs bit for bit.

Pure: no state, no RNG touched. Two objects get the same digest exactly when
they hold the same values: tensors by dtype, shape and bytes (not by device,
memory layout or ``requires_grad``), objects with a ``state_dict()`` (modules,
optimizers, schedulers, grad scalers) as that state (so a live model and
the ``state_dict`` loaded from its checkpoint digest alike), dicts by their items
whatever their insertion order, lists and tuples alike by their items in order.

Example:
    >>> import torch
    >>> digest(torch.zeros(3)) == digest(torch.zeros(3))
    True
    >>> digest(torch.zeros(3)) == digest(torch.zeros(3, dtype=torch.float64))
    False
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["digest"]


def digest(*objects: Any) -> str:
    """The SHA-256 hex digest of ``objects``, stable across processes, machines and releases.

    Accepts tensors, NumPy arrays and scalars, ``nn.Module``, optimizers and
    anything with ``state_dict()``, dicts, lists, tuples, sets, ``str``,
    ``bytes``, ``int``, ``float``, ``bool``, ``None``, ``torch.dtype``/``device``.

    Args:
        objects: what to digest, in order.

    Returns:
        64 hex digits.

    Raises:
        TypeError: an object of another type; the message names it and where it was found.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(2, 2)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> len(digest(model, opt))
        64
        >>> digest({"a": 1, "b": 2.0}) == digest({"b": 2.0, "a": 1})
        True
    """
    h = hashlib.sha256(b"seeder-digest-v1")
    h.update(b"L" + struct.pack("<Q", len(objects)))
    for i, obj in enumerate(objects):
        _feed(h.update, obj, f"argument {i}")
    return h.hexdigest()


def _frame(update: Callable[[bytes], None], tag: bytes, payload: bytes) -> None:
    update(tag + struct.pack("<Q", len(payload)) + payload)


def _encode(obj: Any, where: str) -> bytes:
    parts: list[bytes] = []
    _feed(parts.append, obj, where)
    return b"".join(parts)


def _feed(update: Callable[[bytes], None], obj: Any, where: str) -> None:  # noqa: C901 - one dispatch table
    if obj is None:
        update(b"N")
    elif isinstance(obj, bool):
        update(b"T" if obj else b"F")
    elif isinstance(obj, torch.Tensor):
        _tensor(update, obj, where)
    elif isinstance(obj, np.ndarray):
        _tensor(update, _from_numpy(obj, where), where)
    elif isinstance(obj, np.generic):
        _tensor(update, _from_numpy(np.asarray(obj), where), where)
    elif isinstance(obj, int):
        _frame(update, b"I", str(int(obj)).encode())
    elif isinstance(obj, float):
        # float.hex is exact; normalise NaN payloads so that every NaN digests alike.
        _frame(update, b"D", b"nan" if math.isnan(obj) else float(obj).hex().encode())
    elif isinstance(obj, complex):
        _frame(update, b"C", (obj.real.hex() + "," + obj.imag.hex()).encode())
    elif isinstance(obj, str):
        _frame(update, b"S", obj.encode("utf-8", "surrogatepass"))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        _frame(update, b"B", bytes(obj))
    elif isinstance(obj, (torch.dtype, torch.device)):
        _frame(update, b"Y", str(obj).encode())
    elif isinstance(obj, dict):
        items = sorted(
            (_encode(k, f"{where} key"), _encode(v, f"{where}[{k!r}]")) for k, v in obj.items()
        )
        update(b"M" + struct.pack("<Q", len(items)))
        for k, v in items:
            update(k)
            update(v)
    elif isinstance(obj, (list, tuple)):
        update(b"L" + struct.pack("<Q", len(obj)))
        for i, item in enumerate(obj):
            _feed(update, item, f"{where}[{i}]")
    elif isinstance(obj, (set, frozenset)):
        members = sorted(_encode(item, f"{where} item") for item in obj)
        update(b"E" + struct.pack("<Q", len(members)))
        for member in members:
            update(member)
    elif callable(getattr(obj, "state_dict", None)):
        _feed(update, obj.state_dict(), f"{where}.state_dict()")
    else:
        raise TypeError(
            f"digest() cannot hash {type(obj).__module__}.{type(obj).__qualname__} at {where}; "
            f"pass tensors, modules, optimizers, objects with state_dict(), dicts, lists, numbers "
            f"or strings"
        )


def _from_numpy(arr: np.ndarray, where: str) -> torch.Tensor:
    if arr.dtype == object or arr.dtype.kind in "USVMm":
        raise TypeError(f"digest() cannot hash a NumPy array of dtype {arr.dtype} at {where}")
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return torch.from_numpy(np.array(arr, order="C", copy=True))  # keeps 0-d arrays 0-d


def _tensor(update: Callable[[bytes], None], t: torch.Tensor, where: str) -> None:
    if t.is_sparse or t.layout != torch.strided:
        t = t.to_dense()
    if t.is_quantized or t.device.type == "meta":
        raise TypeError(
            f"digest() cannot hash a {'quantized' if t.is_quantized else 'meta'} tensor at {where}"
        )
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    flat = t.cpu().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    header = f"{t.dtype}|{tuple(t.shape)}".encode()
    _frame(update, b"A", header)
    _frame(update, b"a", data)
