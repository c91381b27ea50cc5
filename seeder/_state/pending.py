"""Loading a checkpoint before its loaders exist: their states wait until each one is built.

A common resume loads the checkpoint first and builds the data loaders after it.
``seeder.load_state_dict`` then restores what exists (the master seed, the global RNGs,
the loaders and generators already there) and keeps each missing part pending: a
``seeder.DataLoader``, ``seeder.DistributedSampler``, DALI pipeline or registered
generator built afterwards receives its own state as it joins (keys follow join order,
as in :meth:`seeder.Seeder.state_dict`). A part nothing claimed by the next ``reseed``
(the training loop starting) or ``state_dict`` is an error naming it.

Example:
    >>> import torch, seeder
    >>> s = seeder.Seeder(); s.init(3); s.reseed(1, 0)
    >>> loader = seeder.DataLoader(torch.arange(8.0), batch_size=2, shuffle=True, seeder=s)
    >>> it = iter(loader); _ = next(it); saved = s.state_dict(); rest = list(it)
    >>> t = seeder.Seeder(); t.init(3); t.load_state_dict(saved)      # no loader yet
    >>> t.pending.names()
    ['seeder.DataLoader loader.0']
    >>> data = torch.arange(8.0)
    >>> again = seeder.DataLoader(data, batch_size=2, shuffle=True, seeder=t)  # claims it
    >>> t.reseed(1, 0); all(torch.equal(a, b) for a, b in zip(again, rest))
    True
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Protocol

from seeder._errors import StateError
from seeder._seeding.participant import validates_state
from seeder._state.world import Streams, global_step, rederive_streams

__all__ = ["Claims", "PendingParts", "part_name", "part_names"]

logger = logging.getLogger("seeder")

_KINDS = {
    "loader": "seeder.DataLoader",
    "sampler": "seeder.DistributedSampler",
    "dali": "DALI pipeline",
}


def part_name(key: str) -> str:
    """How messages name a participant's key: ``seeder.DataLoader loader.0``, ``registered generator
    2``.

    >>> part_name("loader.1"), part_name("generator.2")
    ('seeder.DataLoader loader.1', 'registered generator 2')
    """
    kind, _, n = key.partition(".")
    if kind == "generator":
        return f"registered generator {n}"
    return f"{_KINDS.get(kind, kind)} {key}"


def part_names(keys: Any) -> str:
    """:func:`part_name` of each of ``keys``, comma-separated (``nothing`` for none).

    >>> part_names(["loader.0", "generator.1"]), part_names([])
    ('seeder.DataLoader loader.0, registered generator 1', 'nothing')
    """
    return ", ".join(part_name(k) for k in keys) or "nothing"


class Claims(Streams, Protocol):
    """What :meth:`PendingParts.claim` reads of a seeder: its stateful participants, and what
    re-deriving this rank's streams reads."""

    def stateful(self) -> dict[str, Any]: ...


class PendingParts:
    """The parts of a loaded state whose owners were not built yet, by key (``<kind>.<n>``,
    ``generator.<n>``)."""

    def __init__(self) -> None:
        self.parts: dict[str, Any] = {}
        self.moved: Optional[dict[str, Any]] = (
            None  # the entry of another world whose elastic loaders are pending
        )

    def names(self) -> list[str]:
        """The pending parts, named as messages name them."""
        return [part_name(k) for k in self.parts]

    def claim(self, seeder: Claims) -> None:
        """Give each participant that joined its pending part (checked first)."""
        if not self.parts:
            return
        stateful = seeder.stateful()
        for key in [k for k in self.parts if k in stateful]:
            obj, part = stateful[key], self.parts[key]
            try:
                if validates_state(obj):
                    obj.check_state_dict(part)
                obj.load_state_dict(part)
            except (StateError, TypeError, ValueError, KeyError) as exc:
                raise StateError(
                    f"the checkpoint's state for {part_name(key)} does not fit the one just built: "
                    f"{exc}; build it with the same dataset, batch size and options as the run "
                    f"that saved it"
                ) from None
            del self.parts[key]
            logger.info("%s resumed from the loaded seeder state", part_name(key))
        # every elastic loader of another world's state joined
        if self.moved is not None and not self.parts:
            entry, self.moved = self.moved, None
            parts = entry["participants"]
            moved = {k: stateful[k] for k in parts if not str(k).startswith("generator.")}
            rederive_streams(entry, seeder, global_step(moved, parts))

    def require_claimed(self, call: str, args: tuple[int, ...]) -> None:
        """Raise :class:`StateError` if a loaded part is still waiting for its loader or generator
        (at ``call(*args)``)."""
        if self.parts:
            raise StateError(
                f"{call}{args}: the loaded checkpoint holds the state of "
                f"{part_names(self.parts)}, which this process has not "
                "built; build every seeder.DataLoader (and register every generator) of the saved "
                "run before the training loop starts, in the same order"
            )
