"""Adapters for torch's generators: one ``torch.Generator``, and all devices of one accelerator type.

Example:
    >>> import torch
    >>> a = TorchGeneratorAdapter(torch.Generator()); a.seed(1); a.check_state(a.get_state(), "x")
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch

from .rngbase import RNGAdapter, check_uint8_tensor, expect, on_cpu

__all__ = ["TorchGeneratorAdapter", "AcceleratorAdapter", "accelerator_types"]


class TorchGeneratorAdapter(RNGAdapter):
    """A :class:`torch.Generator` (torch's CPU default generator by default).

    Seeds only this generator: unlike ``torch.manual_seed`` it does not visit
    every device type, which is what makes it cheap.
    """

    name = "torch"

    def __init__(self, generator: Optional[torch.Generator] = None):
        self.generator = generator if generator is not None else torch.default_generator
        self._size: Optional[int] = None  # bytes in this generator's state (fixed per device type)

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def get_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def check_state(self, state: Any, where: str) -> None:
        check_uint8_tensor(state, where)
        want = self._size if self._size is not None else self.generator.get_state().numel()
        self._size = want
        expect(state.numel() == want, where, f"expected {want} bytes for a {self.generator.device} generator, got {state.numel()}")

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(on_cpu(state))  # CPU and CUDA generators both take their state as a CPU tensor

    def put_back(self, snapshot: torch.Tensor) -> None:
        self.generator.set_state(snapshot)  # get_state() gave a CPU tensor



class AcceleratorAdapter(RNGAdapter):
    """All devices of one accelerator type (``cuda``, ``xpu``, ``mps``, ``mtia`` or a custom backend).

    Seeding goes through the device module's ``manual_seed_all`` which, for a
    device that is not initialised yet, queues the seed until it starts.
    The state is one tensor per device, for every device, not only the current one.
    Once the backend has started, states are read and written through the devices'
    ``default_generators``: the same generators and bytes as ``get_rng_state_all`` /
    ``set_rng_state_all``, without their per-device lookups (the CUDA part of a
    capture + restore is then about two C++ calls per device).
    """

    def __init__(self, device_type: str):
        self.name = device_type
        self.module = torch.get_device_module(device_type) if hasattr(torch, "get_device_module") else getattr(torch, device_type)
        self._sizes: Optional[List[int]] = None  # bytes of each device's state (fixed once the backend started)

    def started_generators(self) -> Optional[Sequence[torch.Generator]]:
        """The devices' default generators once the backend has started in this process, else ``None``.

        Before it starts (or in a forked child, where it cannot), torch's own calls are used: they
        queue seeds and states until the backend starts.
        """
        generators = getattr(self.module, "default_generators", None)
        started = getattr(self.module, "is_initialized", None)
        if generators and started is not None and started():
            return generators
        return None

    def seed(self, seed: int) -> None:
        if hasattr(self.module, "manual_seed_all"):
            self.module.manual_seed_all(seed)
        else:
            self.module.manual_seed(seed)

    def get_state(self) -> List[torch.Tensor]:
        generators = self.started_generators()
        if generators is not None:
            return [g.get_state() for g in generators]
        if hasattr(self.module, "get_rng_state_all"):
            return [s.cpu() for s in self.module.get_rng_state_all()]
        return [self.module.get_rng_state().cpu()]

    def check_state(self, state: Any, where: str) -> None:
        expect(isinstance(state, list), where, "expected a list with one state tensor per device")
        sizes = self._sizes
        if sizes is None:
            sizes = [c.numel() for c in self.get_state()]
            if self.started_generators() is not None:  # the device count and state sizes are fixed from now on
                self._sizes = sizes
        expect(len(state) == len(sizes), where,
               f"the checkpoint has {len(state)} {self.name} device state(s), this process sees {len(sizes)}; "
               f"make the same devices visible (CUDA_VISIBLE_DEVICES) as when it was saved")
        for i, (s, size) in enumerate(zip(state, sizes)):
            check_uint8_tensor(s, f"{where}[{i}]")
            expect(s.numel() == size, f"{where}[{i}]", f"expected {size} bytes, got {s.numel()}")

    def set_state(self, state: List[torch.Tensor]) -> None:
        state = [on_cpu(s) for s in state]  # states loaded with map_location="cuda" go back to the CPU
        generators = self.started_generators()
        if generators is not None:
            for g, s in zip(generators, state):
                g.set_state(s.contiguous())
        elif hasattr(self.module, "set_rng_state_all"):
            self.module.set_rng_state_all(state)
        else:
            self.module.set_rng_state(state[0])


_ACCELERATORS: Optional[List[str]] = None


def accelerator_types() -> List[str]:
    """Device types with at least one device present, found once and cached.

    Asks each backend whether it is available, which does not initialise it.

    >>> isinstance(accelerator_types(), list)
    True
    """
    global _ACCELERATORS
    if _ACCELERATORS is None:
        found = []
        names = ["cuda", "xpu", "mps", "mtia"]
        custom = torch._C._get_privateuse1_backend_name()
        if custom != "privateuseone":
            names.append(custom)
        for name in names:
            module = getattr(torch, name, None)
            try:
                if module is not None and module.is_available():
                    found.append(name)
            except Exception:  # a broken backend is a missing backend
                continue
        _ACCELERATORS = found
    return list(_ACCELERATORS)
