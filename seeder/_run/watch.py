"""What ``seeder.init`` of the module-level seeder starts watching in the process.

* seeding calls (:mod:`seeder._seeding.foreign`): a framework's later ``seed_everything`` /
  ``set_seed`` is routed through seeder; other ``random.seed`` / ``np.random.seed`` /
  ``torch.manual_seed`` calls seed as they say, the user's own warned about once;
* under ``seeder verify`` (:mod:`seeder._run.steps`): optimizer steps are counted and recorded;
* under ``seeder locate`` (``$SEEDER_LOCATE``): every tensor operation is fingerprinted.

Example:
    >>> import seeder
    >>> seeder.init(1)  # calls after_init
    >>> after_init(seeder.default_seeder())  # a second call changes nothing
    >>> seeder.default_seeder().reset()
"""

from __future__ import annotations

import os
from typing import Protocol

from seeder._run import steps as stepwatch
from seeder._seeding import foreign

__all__ = ["Watched", "after_init"]


class Watched(foreign.Routes, stepwatch.Joins, Protocol):
    """What the watches read of the seeder whose ``init`` starts them: whether it is the
    module-level one, and what each watch reads of it."""

    @property
    def is_default(self) -> bool: ...


def after_init(seeder: Watched) -> None:
    """Start the watches for ``seeder`` if it is the module-level seeder (``seeder.is_default``)."""
    if not seeder.is_default:
        return
    foreign.watch(seeder)
    stepwatch.watch(seeder)
    if os.environ.get("SEEDER_LOCATE"):  # seeder locate's runs only: torch imported only then
        from seeder._run.record import start

        start(seeder)
