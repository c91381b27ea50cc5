"""What the fault and property tests share: a seeder with every kind of RNG and participant, and its
whole state.

``World`` is one seeder with Python/NumPy/torch global RNGs, registered RNG objects
(``random.Random``, NumPy ``Generator``, ``torch.Generator``), a registered callable whose owner
saves its RNG, and a
``seeder.DataLoader`` stopped inside an epoch. ``World.everything()`` is all of it that a call could
change: every RNG, the seeder's bookkeeping, the registry and every participant's position.
``TALLY`` counts cases per class and outcome; the tests' session prints it.
"""

from __future__ import annotations

import collections
import random
import warnings
from typing import Any

import numpy as np
import torch

import seeder
from seeder import Seeder

#: (class, outcome) -> cases; classes "bad arguments", "bad states", "faults"; outcomes "clear
#: error", "exact", "state changed after rejection", "silent accept", "crash".
TALLY: collections.Counter[tuple] = collections.Counter()


def canon(obj: Any) -> Any:
    """A comparable, type-exact copy of a state: tensors and arrays as (dtype, shape, bytes); types
    kept."""
    if isinstance(obj, torch.Tensor):
        return (
            "tensor",
            str(obj.dtype),
            tuple(obj.shape),
            obj.detach().cpu().contiguous().numpy().tobytes(),
        )
    if isinstance(obj, np.ndarray):
        return ("ndarray", str(obj.dtype), obj.shape, obj.tobytes())
    if isinstance(obj, dict):
        return ("dict", tuple(sorted((str(k), canon(v)) for k, v in obj.items())))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(canon(v) for v in obj))
    if isinstance(obj, float) and obj != obj:
        return ("float", "nan")
    return (type(obj).__name__, obj)


class Gain:
    """A registered callable whose owner saves its RNG (``examples/train.py``'s ``Perturbation``),
    without a check."""

    def __init__(self) -> None:
        self.rng = random.Random()

    def reseed_rng(self, seed: int) -> None:
        self.rng.seed(seed)

    def state_dict(self) -> dict[str, Any]:
        version, words, gauss = self.rng.getstate()
        return {"version": version, "words": list(words), "gauss": gauss}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate((state["version"], tuple(state["words"]), state["gauss"]))


class World:
    """A seeder in the middle of epoch 1 of a run, with one of everything that it saves."""

    def __init__(self, master: int = 42, stop_after: int = 2, keep_iterator: bool = False):
        self.s = Seeder()
        self.s.init(master)
        self.gens: list[Any] = [
            random.Random(),
            np.random.default_rng(),
            torch.Generator(),
            np.random.RandomState(),
        ]
        for g in self.gens:
            self.s.register_generator(g)
        self.gain = Gain()
        self.s.register_generator(self.gain.reseed_rng)
        self.loader = seeder.DataLoader(torch.arange(24), batch_size=4, shuffle=True, seeder=self.s)
        self.s.reseed(1, 0)
        for _ in self.loader:
            pass
        self.s.reseed(1, 1)
        it = iter(self.loader)
        for _ in range(stop_after):
            next(it)
        self.it = (
            it if keep_iterator else None
        )  # the uninterrupted run goes on with it; others resume by loading
        del it
        self.draw()

    def draw(self) -> list[float]:
        """One draw from every RNG the world has (advances them all)."""
        out = [
            random.random(),
            float(np.random.random_sample()),
            float(torch.rand(1)),
            self.gain.rng.random(),
            self.gens[0].random(),
            float(self.gens[1].random()),
            float(torch.rand(1, generator=self.gens[2])),
            float(self.gens[3].random_sample()),
        ]
        return out

    def rest_of_epoch(self) -> list[Any]:
        """What training sees from here: the remaining batches (of the kept iterator, else a new
        one) and draws."""
        seen = []
        for batch in self.it if self.it is not None else self.loader:
            seen.append((batch.tolist(), self.draw()))
        return seen

    def state(self) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.s.state_dict()

    def everything(self) -> Any:
        """Every RNG, the bookkeeping, the registry and every participant's position, comparable
        with ``==``."""
        run = self.s.run
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts = {k: canon(p.state_dict()) for k, p in self.s.stateful().items()}
        return (
            canon(random.getstate()),
            canon(np.random.get_state()),
            canon(torch.get_rng_state()),
            parts,
            (
                run.master,
                run.last,
                run.resume_pending,
                frozenset(run.seen),
                getattr(run, "torn", None),
                self.s.explicit,
            ),
            [id(p) for p in self.s.participants()],
            [g.stream for g in self.s.generators()],
            canon(self.gain.state_dict()),
            canon(self.gens[1].bit_generator.state),
        )


def uninterrupted() -> list[Any]:
    """The rest of epoch 1 of :class:`World`'s run, never stopped (the reference of every
    resume)."""
    return World(keep_iterator=True).rest_of_epoch()
