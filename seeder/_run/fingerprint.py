"""Fingerprints of tensors, operator arguments and generator states, for ``seeder locate``.

A fingerprint is a short hex string that is equal exactly when the bits are (up to a
hash collision): dtype, shape and every byte of a tensor; a generator's whole state. CPU
tensors are hashed over their bytes (no copy when contiguous) with xxHash's XXH3 when the
``xxhash`` package is installed (``datasets`` installs it; about ten times faster), else
with CRC-32; tensors on an
accelerator are reduced on the device to two 64-bit integer sums (plain and position
weighted) so that only 16 bytes cross to the host. Integer sums wrap, so the
fingerprint does not depend on the order the device adds in.

Example:
    >>> import torch
    >>> a = torch.arange(6.0).reshape(2, 3)
    >>> b = a.t().contiguous()
    >>> tensor_print(a) == tensor_print(a.clone()), tensor_print(a) == tensor_print(b)
    (True, False)
    >>> len(row_prints(a)), row_prints(a)[0] == tensor_print(a[0])
    (2, True)
"""

from __future__ import annotations

import zlib
from typing import Any, Optional

import torch

__all__ = [
    "tensor_print",
    "storage_print",
    "row_prints",
    "value_print",
    "generator_print",
    "default_generator",
]

try:
    import xxhash

    def _bytes_print(data: memoryview, head: bytes) -> str:
        return xxhash.xxh3_64_hexdigest(data, seed=zlib.crc32(head))
except ImportError:  # the standard library's CRC-32: the same guarantees, slower

    def _bytes_print(data: memoryview, head: bytes) -> str:
        return f"{zlib.crc32(data, zlib.crc32(head)):08x}"


#: Row fingerprints are taken for at most this many rows of a batch tensor (the first rows).
MAX_ROWS = 4096


def _header(t: torch.Tensor) -> bytes:
    return f"{t.dtype}{tuple(t.shape)}".encode()


def tensor_print(t: torch.Tensor) -> str:
    """The fingerprint of a tensor's dtype, shape and bytes.

    Args:
        t: any tensor (sparse, meta and other layouts: a fingerprint of the shape only).

    Returns:
        Hex digits on the CPU; ``'<header>:<sum>:<weighted sum>'`` on an accelerator.
    """
    head = _header(t)
    if t.layout != torch.strided or t.device.type == "meta" or t.is_quantized:
        return f"{zlib.crc32(head):08x}?"
    flat = t.detach()
    if flat.is_conj():
        flat = flat.resolve_conj()
    if flat.is_neg():
        flat = flat.resolve_neg()
    flat = flat.contiguous().reshape(-1)
    if flat.numel() == 0:
        return f"{zlib.crc32(head):08x}"
    raw = flat.view(torch.uint8) if flat.element_size() > 1 or flat.dtype != torch.uint8 else flat
    if t.device.type == "cpu":
        return _bytes_print(raw.numpy().data, head)
    return _device_print(raw, head)


def _device_print(raw: torch.Tensor, head: bytes) -> str:
    """Two wrapping 64-bit sums of the bytes, computed where the tensor lives (16 bytes copied)."""
    words = raw.to(torch.int64)
    weights = torch.arange(1, words.numel() + 1, device=words.device, dtype=torch.int64)
    weights.mul_(0x9E3779B1)  # odd, so distinct weights mod 2**64: a moved byte changes the sum
    pair = torch.stack([words.sum(), (words * weights).sum()]).tolist()
    return f"{zlib.crc32(head):08x}:{pair[0] & (2**64 - 1):x}:{pair[1] & (2**64 - 1):x}"


def storage_print(s: torch.UntypedStorage | torch.TypedStorage) -> str:
    """The fingerprint of a storage's bytes (what ``set_`` makes a tensor of).

    Args:
        s: an untyped or typed storage.

    Returns:
        The fingerprint of its bytes as a ``uint8`` tensor.
    """
    untyped = s.untyped() if isinstance(s, torch.TypedStorage) else s
    return tensor_print(torch.empty(0, dtype=torch.uint8, device=untyped.device).set_(untyped))


def row_prints(t: torch.Tensor) -> list[str]:
    """The fingerprints of a tensor's rows along its first dimension (for a batch: one per sample).

    Args:
        t: a tensor with at least one dimension.

    Returns:
        One fingerprint per row, at most :data:`MAX_ROWS` of them.
    """
    if t.dim() == 0:
        return []
    return [tensor_print(t[i]) for i in range(min(t.shape[0], MAX_ROWS))]


_SIMPLE = (
    int,
    float,
    bool,
    str,
    type(None),
    complex,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def value_print(v: Any) -> str:
    """A fingerprint of one non-tensor operator argument: its value when simple, else its type.

    Args:
        v: a number, string, dtype, device, list or tuple of those, or any other object.

    Returns:
        A short string, equal for equal arguments.
    """
    if isinstance(v, _SIMPLE):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(value_print(x) for x in v) + "]"
    if isinstance(v, torch.Tensor):
        return tensor_print(v)
    return type(v).__name__  # a Generator, a SymInt...: its state is fingerprinted separately


def default_generator(device: Optional[torch.device]) -> torch.Generator:
    """The default generator an operator on ``device`` draws from when given none.

    Args:
        device: the device of the operator's output (``None``: the CPU).

    Returns:
        ``torch.default_generator`` or the accelerator's default generator for that device.
    """
    if device is None or device.type == "cpu":
        return torch.default_generator
    if device.type == "cuda":
        return torch.cuda.default_generators[
            device.index if device.index is not None else torch.cuda.current_device()
        ]
    module = getattr(torch, device.type, None)
    gens = getattr(module, "default_generators", None)
    if gens:
        return gens[device.index or 0]
    return torch.default_generator


def generator_print(g: torch.Generator) -> str:
    """The fingerprint of a generator's whole state (seed, position, cached values).

    Args:
        g: a ``torch.Generator`` on any device.

    Returns:
        Eight hex digits.
    """
    return f"{zlib.crc32(g.get_state().numpy().data):08x}"
