"""Adapters for torch's generators: one ``torch.Generator``, and all devices of one accelerator
type.

Example:
    >>> import torch
    >>> a = TorchGeneratorAdapter(torch.Generator()); a.seed(1); a.check_state(a.get_state(), "x")
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, Optional

import numpy as np
import torch

from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.rngbase import RNGAdapter, check_mt_words, check_uint8_tensor, expect, on_cpu

__all__ = [
    "TorchGeneratorAdapter",
    "AcceleratorAdapter",
    "accelerator_types",
    "check_cpu_state",
    "note_default_seed",
    "noted_default_seed",
]

#: The initial seed torch's default generator had when seeder last seeded or restored it, or when a
#: seeding call seeder watches last ran (``None``: not yet). ``seeder._seeding.foreign`` compares it
#: with the generator's own to see a reseed made by a call it cannot watch.
_NOTED: list[Optional[int]] = [None]


def note_default_seed(seed: Optional[int] = None) -> None:
    """Record ``seed`` (torch's default generator's initial seed when ``None``) as one seeder knows.

    >>> note_default_seed(); noted_default_seed() == torch.initial_seed()
    True
    """
    _NOTED[0] = torch.initial_seed() if seed is None else seed


def noted_default_seed() -> Optional[int]:
    """The initial seed :func:`note_default_seed` recorded last, or ``None``.

    >>> note_default_seed(5); noted_default_seed()
    5
    """
    return _NOTED[0]


# torch's CPU generator state (aten CPUGeneratorImplState, 5056 bytes): the_initial_seed u64, left
# i32, seeded i32, next u64, 624 Mersenne-Twister words in u64 slots, normal_x/normal_y/normal_rho
# f64, normal_is_valid i32 (+4), next_float_normal_sample f32, is_next_float_normal_sample_valid
# bool (+3). Listed in seeder/_internals.py. Read from the bytes of the state tensor, to refuse
# contents torch's own check (a spare generator's
# set_state) lets through: validation (a loaded state no run produces changes every later draw), not
# a speed path.
CPU_STATE_BYTES = 5056
_HEAD = struct.Struct("<QiiQ8xQQ")  # the_initial_seed, left, seeded, next, (word 0), words 1 and 2
# (normal_x), normal_y, (normal_rho), normal_is_valid, next_float_normal_sample, flag
_TAIL = struct.Struct("<8xd8xi4xfB")
_WORDS_AT, _TAIL_AT = 24, 24 + 624 * 8
_NO_HIGH_HALVES = bytes(4 * 624)  # the words' upper 32 bits


def check_cpu_state(state: torch.Tensor, where: str) -> None:
    """Refuse a torch CPU generator state whose content no generator reaches (``state``: 5056
    contiguous CPU bytes).

    torch itself only checks the ``seeded``/``left``/``next`` fields; an all-zero Mersenne-Twister
    key (every draw 0), a word over 32 bits, a flag other than 0/1 or a NaN/inf cached normal sample
    loads there and silently changes every later draw.

    >>> g = torch.Generator().manual_seed(3)
    >>> check_cpu_state(g.get_state(), "x")
    >>> bad = g.get_state(); bad[24:24 + 624 * 8] = 0
    >>> check_cpu_state(bad, "x")
    Traceback (most recent call last):
    ...
    seeder.StateError: x: the Mersenne Twister key has 0 nonzero word(s) of 624: a ...
    """
    raw = state.numpy().data  # the tensor's own bytes, through torch's public API
    _, left, seeded, nxt, w1, w2 = _HEAD.unpack_from(raw, 0)
    normal, normal_valid, cached_float, float_valid = _TAIL.unpack_from(raw, _TAIL_AT)
    if (
        seeded == 1
        and 0 < left <= 624
        and 0 <= nxt <= 624
        and w1
        and w2
        and np.frombuffer(raw, "<u4", 2 * 624, _WORDS_AT)[1::2].tobytes() == _NO_HIGH_HALVES
        and normal_valid in (0, 1)
        and float_valid in (0, 1)
        and (not normal_valid or math.isfinite(normal))
        and (not float_valid or math.isfinite(cached_float))
    ):
        # a state a generator reaches: every check passed (messages are built only for a refusal)
        return
    words = np.frombuffer(raw, "<u8", 624, _WORDS_AT)
    expect(
        seeded == 1 and 0 < left <= 624 and 0 <= nxt <= 624,
        where,
        f"torch's generator fields are out of range (seeded={seeded}, left={left}, next={nxt}); "
        f"the checkpoint is corrupt",
    )
    expect(
        not words.max() >> 32,
        where,
        "a Mersenne Twister word does not fit in 32 bits; the checkpoint is corrupt",
    )
    check_mt_words(words, where)
    expect(
        normal_valid in (0, 1) and float_valid in (0, 1),
        where,
        f"a cached-normal flag is neither 0 nor 1 ({normal_valid}, {float_valid}); the checkpoint "
        f"is corrupt",
    )
    expect(
        not normal_valid or math.isfinite(normal),
        where,
        f"the cached normal sample (double) is {normal} (the next torch.randn would return it); "
        f"the checkpoint is corrupt",
    )
    expect(
        not float_valid or math.isfinite(cached_float),
        where,
        f"the cached normal sample (float) is {cached_float} (the next torch.randn would return "
        f"it); the checkpoint is corrupt",
    )


class TorchGeneratorAdapter(RNGAdapter):
    """A :class:`torch.Generator` (torch's CPU default generator by default).

    Seeds only this generator: unlike ``torch.manual_seed`` it does not visit
    every device type, which is what makes it cheap.
    """

    name = "torch"

    def __init__(self, generator: Optional[torch.Generator] = None):
        self.generator = generator if generator is not None else torch.default_generator
        self._size: Optional[int] = None  # bytes in this generator's state (fixed per device type)
        self._probe: Optional[torch.Generator] = (
            None  # a spare generator of the same device that states are tried on
        )
        self._cpu_layout: Optional[bool] = (
            None  # whether check_cpu_state applies (found at the first check)
        )

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)
        self._noted()

    def _noted(self) -> None:
        """Seeder seeded or restored torch's default generator: its initial seed is a known one."""
        if self.generator is torch.default_generator:
            note_default_seed()

    def seed_function(self) -> Callable[[int], Any]:
        """The generator's own ``manual_seed``."""
        return self.generator.manual_seed

    def get_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def watcher(self) -> Optional[Callable[[], Any]]:
        """A CPU generator's whole state as bytes (5 KB; two reads a batch cost less than seeding
        each of its samples); ``None`` for an accelerator's generator."""
        if self.generator.device.type != "cpu":
            return None
        get_state = self.generator.get_state
        return lambda: get_state().numpy().tobytes()

    def check_state(self, state: Any, where: str) -> None:
        check_uint8_tensor(state, where)
        want = self._size if self._size is not None else self.generator.get_state().numel()
        self._size = want
        if state.numel() != want:
            raise StateError(
                f"{where}: expected {want} bytes for a {self.generator.device} generator, got "
                f"{state.numel()}"
            )
        if self._cpu_layout is None:  # whether its states have the layout check_cpu_state reads
            self._cpu_layout = (
                self.generator.device.type == "cpu"
                and want == CPU_STATE_BYTES
                and require("torch:CPUGeneratorImplState")
            )
        if self._cpu_layout and state.device.type == "cpu":
            # every check torch makes on this layout, and the content ones it does not
            check_cpu_state(state, where)
            return
        if self._probe is None:
            self._probe = torch.Generator(device=self.generator.device)
        # torch's own content checks (e.g. an all-zero state is "Invalid mt19937 state"), on a spare
        # generator
        try:
            self._probe.set_state(on_cpu(state))
        except (RuntimeError, TypeError, ValueError) as exc:
            raise StateError(
                f"{where}: torch refuses this generator state ({exc}); the checkpoint is corrupt"
            ) from None

    def set_state(self, state: torch.Tensor) -> None:
        # CPU and CUDA generators: a CPU tensor
        self.generator.set_state(state if state.is_cpu else state.cpu())
        self._noted()

    def copy_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def put_back(self, kept: torch.Tensor) -> None:
        self.generator.set_state(kept)  # get_state() gave a CPU tensor
        self._noted()


class AcceleratorAdapter(RNGAdapter):
    """All devices of one accelerator type (``cuda``, ``xpu``, ``mps``, ``mtia`` or a custom
    backend).

    Seeding goes through the device module's ``manual_seed_all`` which, for a
    device that is not initialised yet, queues the seed until it starts.
    The state is one tensor per device, for every device, not only the current one,
    read and written with ``get_rng_state_all`` / ``set_rng_state_all``.
    """

    def __init__(self, device_type: str):
        self.name = device_type
        self.module = (
            torch.get_device_module(device_type)
            if hasattr(torch, "get_device_module")
            else getattr(torch, device_type)
        )
        self._sizes: Optional[list[int]] = (
            None  # bytes of each device's state (fixed once the backend started)
        )

    def _started(self) -> bool:
        """Whether the backend has started in this process (device count and state sizes fixed)."""
        started = getattr(self.module, "is_initialized", None)
        return bool(started is not None and started())

    def seed(self, seed: int) -> None:
        if hasattr(self.module, "manual_seed_all"):
            self.module.manual_seed_all(seed)
        else:
            self.module.manual_seed(seed)

    def get_state(self) -> list[torch.Tensor]:
        if hasattr(self.module, "get_rng_state_all"):
            return [s.cpu() for s in self.module.get_rng_state_all()]
        return [self.module.get_rng_state().cpu()]

    def check_state(self, state: Any, where: str) -> None:
        expect(isinstance(state, list), where, "expected a list with one state tensor per device")
        sizes = self._sizes
        if sizes is None:
            sizes = [c.numel() for c in self.get_state()]
            if self._started():  # the device count and state sizes are fixed from now on
                self._sizes = sizes
        expect(
            len(state) == len(sizes),
            where,
            f"the checkpoint has {len(state)} {self.name} device state(s), this process sees "
            f"{len(sizes)}; make the same devices visible (CUDA_VISIBLE_DEVICES) as when it "
            f"was saved",
        )
        for i, (s, size) in enumerate(zip(state, sizes)):
            check_uint8_tensor(s, f"{where}[{i}]")
            expect(s.numel() == size, f"{where}[{i}]", f"expected {size} bytes, got {s.numel()}")

    def set_state(self, state: list[torch.Tensor]) -> None:
        # states loaded with map_location="cuda" go back to the CPU
        state = [on_cpu(s) for s in state]
        if hasattr(self.module, "set_rng_state_all"):
            self.module.set_rng_state_all(state)
        else:
            self.module.set_rng_state(state[0])


_ACCELERATORS: Optional[list[str]] = None


def accelerator_types() -> list[str]:
    """Device types with at least one device present, found once and cached.

    Asks each backend whether it is available, which does not initialise it.

    >>> isinstance(accelerator_types(), list)
    True
    """
    global _ACCELERATORS
    if _ACCELERATORS is None:
        found = []
        names = ["cuda", "xpu", "mps", "mtia"]
        custom = (
            torch._C._get_privateuse1_backend_name()
            if require("torch:_C._get_privateuse1_backend_name")
            else "privateuseone"
        )
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
