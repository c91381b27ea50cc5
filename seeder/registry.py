"""The participant registry of a :class:`seeder.Seeder`: who is reseeded and saved, in join order.

Participants that joined (``seeder.join``) are held weakly by default and stay
across ``init``; generators added by ``register_generator`` are held strongly,
numbered by their place since ``init`` (their stream), and dropped by ``init``.

Example:
    >>> import random
    >>> r = Registry(); g = r.add_generator(random.Random(), shared=False)
    >>> g.stream, [p.stream for p in r.generators()]
    (1, [1])
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from .participant import GeneratorParticipant, Stands, describe, participant_for, participant_keys, saves_state
from .rngs import adapter_for

__all__ = ["Registry"]


def _resolve(member: Any) -> Any:
    return member() if isinstance(member, weakref.ref) else member


def _check_arity(gen: Any) -> None:
    """A ``TypeError`` now, not at the next reseed, for a callable that cannot be called as ``f(seed)``."""
    try:
        inspect.signature(gen).bind(0)
    except TypeError as exc:
        raise TypeError(f"register_generator() needs a callable f(seed: int) that takes the seed as its one "
                        f"argument; {describe(gen)} cannot be called with one argument ({exc})") from None
    except ValueError:  # no signature to read (some builtins): found out at the first reseed
        pass


class Registry:
    """Ordered participants: ``(participant or weakref, added by register_generator?)``."""

    def __init__(self) -> None:
        self._members: List[Tuple[Any, bool]] = []
        self._next_stream = 1

    def add_generator(self, gen: Any, shared: bool) -> GeneratorParticipant:
        """Register ``gen`` on the next stream (strongly held, dropped by :meth:`drop_registered`)."""
        member = GeneratorParticipant(gen, shared, self._next_stream)
        self._next_stream += 1
        self._members.append((member, True))
        return member

    def register(self, gen: Any, shared: bool, make: Callable[[], Optional[Any]]) -> Optional[GeneratorParticipant]:
        """``register_generator``: a new :class:`GeneratorParticipant` for ``gen``; or, for an object that is no
        RNG, the participant ``make()`` returns for it (:func:`seeder.participant.participant_for`), added strongly."""
        if self.find(gen) is not None:
            raise ValueError(f"{describe(gen)} is already registered; register each generator once")
        if adapter_for(gen) is None:
            participant = make()
            if participant is not None:  # e.g. a DALI pipeline: joins at the next reseed, not called now
                self.add(participant, weak=False, registered=True)
                return None
            if callable(gen):
                _check_arity(gen)
            else:
                raise TypeError(
                    f"register_generator() needs a callable f(seed: int), a random.Random, numpy Generator/"
                    f"RandomState, torch.Generator or a participant (an object with seeder_reseed, or a DALI "
                    f"pipeline); got {type(gen).__name__} {gen!r}")
        return self.add_generator(gen, shared)

    def mark(self) -> Tuple[List[Tuple[Any, bool]], int]:
        """What :meth:`rollback` returns to: the members and the next stream number, as they are now."""
        return list(self._members), self._next_stream

    def rollback(self, mark: Tuple[List[Tuple[Any, bool]], int]) -> None:
        """Return to a :meth:`mark` (a registration that raised leaves nothing behind)."""
        self._members, self._next_stream = mark

    def register_or_nothing(self, seeder: Any, gen: Any, shared: bool) -> None:
        """``seeder.register_generator(gen)``: :meth:`register`, and seed it for the last reseed; on any raise, no trace.

        A generator that raises when it is seeded (a bug, the wrong arity) stays out of the registry,
        so later reseeds do not call it.
        """
        mark = self.mark()
        try:
            member = self.register(gen, shared, lambda: participant_for(gen, seeder, shared))
            if member is not None and seeder.run.last is not None:
                member.seeder_reseed(seeder, *seeder.run.last)
        except BaseException as exc:
            self.rollback(mark)
            if isinstance(exc, Exception) and seeder.run.last is not None and hasattr(exc, "add_note"):
                exc.add_note(f"register_generator(): {describe(gen)} was not registered (seeding it for "
                             f"reseed{seeder.run.last} raised); fix it and register it again")
            raise

    def add(self, participant: Any, *, weak: bool, registered: bool = False) -> None:
        """Add ``participant`` (a weak reference if ``weak``) unless it is already there."""
        if self.find(participant) is None:
            self._members.append((weakref.ref(participant) if weak else participant, registered))

    def drop_registered(self) -> int:
        """Forget what ``register_generator`` added and restart stream numbering (``init``); return how many."""
        before = len(self._members)
        self._members = [(m, registered) for m, registered in self._members if not registered]
        self._next_stream = 1
        return before - len(self._members)

    def find(self, obj: Any) -> Optional[Any]:
        """The participant for ``obj``: itself, the generator wrapping it, or the one that :class:`~seeder.participant.Stands`
        for it."""
        for member, _ in self._members:
            p = _resolve(member)
            if p is None:
                continue
            if p is obj or (isinstance(p, GeneratorParticipant) and p.matches(obj)) \
                    or (isinstance(p, Stands) and p.seeder_target is obj):
                return p
        return None

    def find_or_raise(self, gen: Any) -> Any:
        """:meth:`find`, or a ``ValueError`` saying ``gen`` is not registered (``unregister_generator``)."""
        found = self.find(gen)
        if found is None:
            raise ValueError(f"{describe(gen)} is not registered; nothing to unregister")
        return found

    def discard(self, participant: Any) -> None:
        """Remove the participant for ``participant`` if there is one (``leave``)."""
        found = self.find(participant)
        if found is not None:
            self.remove(found)

    def remove(self, participant: Any) -> None:
        """Remove ``participant`` (and dead weak references)."""
        self._members = [(m, r) for m, r in self._members if _resolve(m) is not None and _resolve(m) is not participant]

    def participants(self) -> List[Any]:
        """Live participants in the order they joined."""
        return [p for p in (_resolve(m) for m, _ in self._members) if p is not None]

    def generators(self) -> List[GeneratorParticipant]:
        """Registered generators in registration order."""
        return [p for p in self.participants() if isinstance(p, GeneratorParticipant)]

    def stateful(self) -> Dict[str, Any]:
        """Participants whose state is saved, by key (:func:`seeder.participant.participant_keys`)."""
        return participant_keys([p for p in self.participants() if saves_state(p)])
