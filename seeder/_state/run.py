"""A seeder's bookkeeping of its run: the master seed, the last reseed, the pending resume.

:class:`RunState` is what a state saves of it (with :mod:`seeder._state.format`);
:func:`start_reseed` and :func:`tear` change it as ``reseed`` runs. A reseed reads only what
:class:`Reseeding` names of the seeder.

Example:
    >>> run = RunState(master=1); run.open_reseed((1, 0)); run.close_reseed((1, 0))
    >>> run.last, run.resumes((1, 0))
    ((1, 0), False)
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Any, Optional, Protocol

from seeder._errors import SeederWarning
from seeder._seeding.participant import describe
from seeder._seeding.rngbase import RNGAdapter
from seeder._state.resumecheck import ResumeCheck

__all__ = ["RunState", "Reseeding", "start_reseed", "tear"]

logger = logging.getLogger("seeder")


@dataclasses.dataclass
class RunState:
    """A seeder's bookkeeping: the master seed, the last reseed, the pending resume, the reseeds
    seen.

    ``torn`` says why the random streams are in no single ``(task, epoch)``: a reseed is running,
    or one raised half way. :meth:`seeder.Seeder.state_dict` refuses while it is set.
    """

    master: Optional[int] = None
    last: Optional[tuple[int, int]] = None
    resume_pending: Optional[tuple[int, int]] = None
    seen: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    torn: Optional[str] = None
    unseeded_resume: bool = False  # the loaded state stands inside an epoch and has no last reseed

    def resumes(self, key: tuple[int, int]) -> bool:
        """Whether ``reseed(*key)`` is the ``(task, epoch)`` a loaded state stopped inside (so it
        must not seed)."""
        return self.resume_pending is not None and key == self.resume_pending

    def open_reseed(self, key: tuple[int, int]) -> None:
        """Mark the run as inside ``reseed(*key)`` until :meth:`close_reseed`; warn if ``key`` was
        seeded before."""
        if key in self.seen:
            warnings.warn(
                f"seeder.reseed{key} was already called in this process: its random streams "
                f"repeat. Pass a new epoch (or task id) to get fresh randomness.",
                SeederWarning,
                stacklevel=4,
            )
        self.resume_pending = None
        self.torn = f"seeder.reseed{key} did not finish"

    def close_reseed(self, key: tuple[int, int]) -> None:
        """Record that ``reseed(*key)`` seeded every stream."""
        self.last = key
        self.seen.add(key)
        self.torn = None

    def copy(self) -> RunState:
        """An independent copy (the ``seen`` set is copied)."""
        return dataclasses.replace(self, seen=set(self.seen))


class Reseeding(Protocol):
    """What :func:`start_reseed` reads of a seeder: its run, its resume check, its seeds, its
    global RNGs and its participants."""

    run: RunState

    @property
    def resume_check(self) -> ResumeCheck: ...

    def stream_seed(self, task_id: int, epoch: int, *, shared: bool, stream: int) -> int: ...

    def global_adapters(self) -> list[RNGAdapter]: ...

    def participants(self) -> list[Any]: ...


def start_reseed(seeder: Reseeding, key: tuple[int, int]) -> Optional[list[Any]]:
    """``seeder.reseed(*key)`` up to the participants: seed the global RNGs and return the
    participants to reseed.

    ``None`` when the reseed resumes the ``(task, epoch)`` a loaded state stopped inside (nothing
    to seed). Until :meth:`RunState.close_reseed` the run is marked torn (see :func:`tear`).
    """
    run = seeder.run
    if run.unseeded_resume:  # a reseed the saved run did not make before that epoch's data
        seeder.resume_check.refuse_reseed(key)
        run.unseeded_resume = False
    if run.resumes(key):
        run.resume_pending = None
        logger.info("reseed%s skipped: resuming inside it from the loaded state", key)
        return None
    seed = seeder.stream_seed(key[0], key[1], shared=False, stream=0)
    run.open_reseed(key)
    try:
        for adapter in seeder.global_adapters():
            adapter.seed(seed)
    except BaseException as exc:
        tear(run, key, "the global RNGs", exc)
        raise
    run.last = key  # participants that read last_reseed see the new (task, epoch)
    return seeder.participants()


def tear(run: RunState, key: tuple[int, int], where: Any, exc: BaseException) -> None:
    """Record in ``run.torn`` that ``reseed(*key)`` raised ``exc`` in ``where``: its streams are in
    no one epoch."""
    run.torn = (
        f"seeder.reseed{key} raised {type(exc).__name__} in "
        f"{describe(getattr(where, 'gen', where))}, so its random streams are partly in {key} and "
        f"partly in the (task, epoch) before; call seeder.reseed{key} again (it seeds every stream "
        f"from the start) before saving a state"
    )
