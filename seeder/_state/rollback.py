"""Copies of the states of RNGs and participants, putting them back, and holding Ctrl-C back while
that runs.

What makes a failed ``load_state_dict`` change nothing and what ``fork_rng`` restores:
:func:`capture` takes states, :func:`restore` sets them again (as much as possible, and
says what it could not), :func:`interrupts_deferred` keeps a Ctrl-C from cutting a restore
in half (it is delivered when the block ends).

Example:
    >>> import random
    >>> from seeder._seeding.rngs import PythonRandomAdapter
    >>> rng = random.Random(1); saved = capture([PythonRandomAdapter(rng)], [])
    >>> first = rng.random(); failed = restore(saved); rng.random() == first, failed
    (True, [])
"""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import threading
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

from seeder._errors import SeederWarning
from seeder._seeding import foreign
from seeder._seeding.participant import GeneratorParticipant, describe, validates_state
from seeder._seeding.rngbase import RNGAdapter
from seeder._state.run import RunState

__all__ = [
    "Saved",
    "capture",
    "saved_state",
    "restore",
    "interrupts_deferred",
    "Forks",
    "fork_rng",
]

logger = logging.getLogger("seeder")


class Saved(NamedTuple):
    """What :func:`capture` took: global RNG states and participant states, each with its owner."""

    rngs: list[tuple[RNGAdapter, Any]]
    participants: list[tuple[Any, Any]]


def saved_state(participant: Any) -> Any:
    """A copy of ``participant``'s state to put back later (its checkpoint advice warnings are not
    shown).

    States of participants that validate what they load are fresh values already; others are
    deep-copied.

    >>> import random
    >>> saved_state(GeneratorParticipant(random.Random(0), shared=False, stream=1))["version"]
    3
    """
    if isinstance(participant, GeneratorParticipant) and participant.adapter is not None:
        return participant.state_dict()
    # a copy to put back is no checkpoint: participants' checkpoint advice does not apply
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)
        st = participant.state_dict()
    return st if validates_state(participant) else copy.deepcopy(st)


def capture(adapters: list[RNGAdapter], members: list[Any]) -> Saved:
    """A :class:`Saved` copy of ``adapters``' RNGs and ``members``' states."""
    return Saved([(a, a.copy_state()) for a in adapters], [(p, saved_state(p)) for p in members])


def restore(saved: Saved) -> list[str]:
    """Put a :func:`capture` back, participants first, each in reverse order; return what could not
    be restored.

    Runs with Ctrl-C held back (:func:`interrupts_deferred`), so an impatient second Ctrl-C
    cannot leave the restore half done.
    """
    failed = []
    with interrupts_deferred():
        for obj, st in reversed(saved.participants):
            try:
                obj.load_state_dict(st)
            except Exception as exc:  # keep restoring the others
                failed.append(f"{describe(getattr(obj, 'gen', obj))} ({exc})")
        for adapter, st in reversed(saved.rngs):
            try:
                adapter.put_back(st)
            except Exception as exc:
                failed.append(f"{adapter.name} ({exc})")
    if failed:
        logger.error("seeder could not restore the state of: %s", "; ".join(failed))
    return failed


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[list[int]]:
    """Hold SIGINT (Ctrl-C) back while the block runs; deliver it, to the handler installed before,
    when it ends.

    Only the main thread receives Python signal handlers, so elsewhere (and where the handler
    was installed outside Python) this does nothing. Yields the list of signals held back.

    >>> with interrupts_deferred() as held:
    ...     pass
    >>> held
    []
    """
    held: list[int] = []
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is None
    ):
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


class Forks(Protocol):
    """What :func:`fork_rng` reads and puts back of a seeder: its run, its global RNGs and its
    participants."""

    run: RunState

    def global_adapters(self) -> list[RNGAdapter]: ...

    def stateful(self) -> dict[str, Any]: ...

    def generators(self) -> list[GeneratorParticipant]: ...


@contextlib.contextmanager
def fork_rng(seeder: Forks) -> Iterator[None]:
    """Run a block with every RNG ``seeder`` knows isolated; restore them all afterwards (see
    ``Seeder.fork_rng``)."""
    members = [p for p in seeder.stateful().values() if isinstance(p, GeneratorParticipant)]
    saved, run = capture(seeder.global_adapters(), members), seeder.run.copy()
    try:
        with foreign.restored(("python", "numpy", "torch", "accelerator")):
            yield
    finally:
        reseeded = (
            seeder.run.last != run.last
            or seeder.run.seen != run.seen
            or seeder.run.torn != run.torn
        )
        failed = restore(saved)
        seeder.run = run
        if failed:
            warnings.warn(
                f"fork_rng() could not restore: {'; '.join(failed)}", SeederWarning, stacklevel=3
            )
        if reseeded:
            for member in seeder.generators():
                if not member.saves_state:
                    warnings.warn(
                        f"fork_rng(): the block reseeded, and registered generator "
                        f"{describe(member.gen)} is a plain callable whose state cannot be "
                        f"restored; register the RNG object itself or give its owner "
                        f"state_dict()/load_state_dict()",
                        SeederWarning,
                        stacklevel=3,
                    )
