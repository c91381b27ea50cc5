"""A run resumed inside an epoch draws nothing from the global RNGs between the load and the epoch's
data.

The run a checkpoint continues drew nothing between saving its state and its next batch, so a
resumed run continues it only if its global RNGs are, when the epoch's data starts again, where
the load put them. A ``torch.utils.data.DataLoader`` without ``generator=`` breaks this at every
``iter(loader)`` (it draws its workers' base seed from torch's global RNG), and so does a model
built, or anything else drawn, after the load.

A participant that loads a position inside an epoch asks for the check (:meth:`ResumeCheck.want`);
its seeder keeps a copy of its global RNGs once the whole load has been applied
(:meth:`ResumeCheck.arm`), and each participant that asked compares when its data starts
(:meth:`ResumeCheck.moved`), once per load.

Example:
    >>> import random
    >>> from seeder._seeding.rngs import global_adapters
    >>> class Loader: pass
    >>> loader = Loader(); check = ResumeCheck(); check.want(loader); check.arm(global_adapters())
    >>> _ = random.random(); check.moved(loader)
    ['python']
    >>> check.moved(loader)  # one comparison per load and participant
    []
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch

from seeder._errors import SeederWarning, StateError
from seeder._seeding.rngbase import RNGAdapter, save_states

__all__ = ["ResumeCheck", "moved_message"]


class ResumeCheck:
    """The global RNGs as the last load left them, kept while a participant that resumes inside an
    epoch has not checked them yet."""

    def __init__(self) -> None:
        #: Participants of the load being applied that resume inside an epoch (weak references).
        self.wanted: list[Callable[[], Any]] = []
        self._armed: list[
            Callable[[], Any]
        ] = []  # those of the last load that have not checked yet
        self._kept: Optional[list[tuple[RNGAdapter, Any]]] = None

    def want(self, owner: Any) -> None:
        """Called by ``owner`` (a loader or sampler) whose ``load_state_dict`` puts it inside an
        epoch."""
        if not any(ref() is owner for ref in self.wanted):
            self.wanted.append(weakref.ref(owner))

    def arm(self, adapters: Sequence[RNGAdapter]) -> None:
        """After a load is applied: keep a copy of ``adapters``' states for the participants that
        wanted the check."""
        self._armed, self.wanted = self.wanted, []
        self._kept = save_states(adapters) if self._armed else None

    def pending(self) -> bool:
        """Whether a participant of the last load resumes inside an epoch and has not started its
        data yet."""
        self._armed = [ref for ref in self._armed if ref() is not None]
        return bool(self._armed)

    def refuse_reseed(self, key: tuple[int, int]) -> None:
        """After loading a state saved inside an epoch before any reseed (``last_reseed`` is
        ``None``): raise :class:`seeder.StateError` for ``reseed(*key)`` of an epoch 0 before that
        epoch's data starts again (the saved run drew that data with no reseed, so reseeding would
        not continue it; nothing changes)."""
        if key[1] == 0 and self.pending():
            raise StateError(
                f"seeder.reseed{key} refused: the loaded state was saved inside an epoch before "
                "any reseed (its last_reseed is None), so reseeding would not continue it; nothing "
                "was changed. Iterate the resumed loader first, or call seeder.reseed(task, epoch) "
                "before each epoch's data in the run that saves"
            )

    def drop(self) -> None:
        """Forget the requests (a load that failed) and any copy kept."""
        self.wanted, self._armed, self._kept = [], [], None

    def warn_if_moved(self, owner: Any, where: str, epoch: int) -> None:
        """One :class:`seeder.SeederWarning` from ``where`` if :meth:`moved` names any RNG (at
        ``owner``'s resumed epoch's first batch)."""
        moved = self.moved(owner)
        if moved:
            warnings.warn(moved_message(where, moved, epoch), SeederWarning, stacklevel=4)

    def moved(self, owner: Any) -> list[str]:
        """Names of the global RNGs that drew (or were set) since the last load; ``[]`` unless
        ``owner`` asked for the check in that load and has not checked yet."""
        if not any(ref() is owner for ref in self._armed):
            return []
        kept = self._kept
        if kept is None:  # armed without a copy: nothing to compare
            return []
        self._armed = [ref for ref in self._armed if ref() is not owner and ref() is not None]
        if not self._armed:
            self._kept = None
        return [
            adapter.name for adapter, state in kept if not same_state(state, adapter.copy_state())
        ]


def same_state(a: Any, b: Any) -> bool:
    """Whether two ``RNGAdapter.copy_state()`` results are equal (tensors, arrays and nested tuples
    compared by value).

    >>> import torch
    >>> same_state((torch.ones(2), 1), (torch.ones(2), 1))
    True
    >>> same_state(torch.ones(2), torch.zeros(2))
    False
    """
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return (
            type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
        )
    return a is b or a == b


def moved_message(where: str, names: Sequence[str], epoch: int) -> str:
    """The warning of ``where`` (a loader or sampler) whose resumed epoch starts with ``names``
    moved since the load.

    >>> "generator=seeder.data.dataloader_generator()" in moved_message("sampler", ["torch"], 1)
    True
    """
    drew = ", ".join(f"{n}'s" for n in names)
    fixes = []
    if "torch" in names:
        fixes.append(
            "a torch DataLoader without generator= draws its base seed from torch's global RNG at "
            "every iter(loader): pass generator=seeder.data.dataloader_generator() (or use "
            "seeder.DataLoader)"
        )
    fixes.append(
        "build the model and anything else that draws before seeder.load_state_dict(), not after"
    )
    return (
        f"{where}: the resumed epoch {epoch} starts with {drew} global RNG moved since "
        f"seeder.load_state_dict(), so this run does not continue the one it resumes (that run "
        f"drew nothing between its checkpoint and its next batch); {'; '.join(fixes)}"
    )
