"""Who takes part in a :class:`seeder.Seeder`: who is reseeded and saved, in join order.

Participants that joined (``seeder.join``) are held weakly by default and stay
across ``init``; generators added by ``register_generator`` are held strongly,
numbered by their place since ``init`` (their stream), and dropped by ``init``.
:class:`Registry` keeps them; :class:`Membership` is the seeder's API for them
(``register_generator``, ``unregister_generator``, ``join``, ``leave``, ``participants``,
``generators``, ``stateful``), a base class of :class:`seeder.Seeder`.

Example:
    >>> import random
    >>> r = Registry(); g = r.add_generator(random.Random(), shared=False)
    >>> g.stream, [p.stream for p in r.generators()]
    (1, [1])
"""

from __future__ import annotations

import inspect
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Union, cast

from seeder._checks import check_bool
from seeder._seeding.participant import (
    GeneratorParticipant,
    Seeds,
    Stands,
    describe,
    participant_for,
    participant_keys,
    require_participant,
    saves_state,
)
from seeder._seeding.rngs import adapter_for
from seeder._state.pending import Claims

if TYPE_CHECKING:
    import threading

    from seeder._seeding.distributed import Topology
    from seeder._state.pending import PendingParts

__all__ = [
    "Registering",
    "Member",
    "Registry",
    "Membership",
    "GeneratorLike",
    "add_optional_kind",
    "optional_part",
    "optional_reason",
]


class Registering(Seeds, Protocol):
    """What registering a generator reads of its seeder: the last reseed, and the seeds that
    seed the generator for it."""

    @property
    def last_reseed(self) -> Optional[tuple[int, int]]: ...


class Member(Registering, Claims, Protocol):
    """What :class:`Membership` hands on of the seeder it is a base of: to registering, and to
    the parts that wait for their participants."""


#: What ``register_generator`` takes: a callable ``f(seed)`` or an RNG object (or a participant).
GeneratorLike = Union[Callable[[int], Any], Any]


#: Participant kinds that a tool adds to some runs of a program only (``seeder_kind`` values), each
#: with what a checkpoint that holds no part of the kind means for a run that has one.
_OPTIONAL_KINDS: dict[str, str] = {}


def add_optional_kind(kind: str, without: str) -> None:
    """Declare ``kind`` a participant kind that only some runs of a program have (a tool adds it).

    A checkpoint's part of such a kind loads into a process that has no participant of the
    kind by being left out, where any other missing participant is an error; so does a part
    whose state names its tool (``{"tool": name, ...}``: a process that never loaded the tool
    knows no kind of it). A checkpoint without such a part is refused by a process that has
    one, with ``without`` as the reason.

    Args:
        kind: the participant's ``seeder_kind``.
        without: what a checkpoint without a part of the kind means, and what to do.

    >>> add_optional_kind("example_tool", "it was saved without the example tool")
    >>> optional_part("example_tool.0")
    True
    """
    _OPTIONAL_KINDS[kind] = without


def optional_reason(key: str) -> str:
    """What a checkpoint without a part like ``key`` means, as its tool declared it ("" for none).

    Args:
        key: a participant's key (``<kind>.<n>``).

    Returns:
        The ``without`` text of :func:`add_optional_kind`, or ``""``.

    >>> optional_reason("loader.0")
    ''
    """
    return _OPTIONAL_KINDS.get(key.partition(".")[0], "")


def optional_part(key: str, part: Any = None) -> bool:
    """Whether the key ``key`` (``<kind>.<n>``) is of a kind :func:`add_optional_kind` declared,
    or ``part``, its saved state, names the tool that added it (``{"tool": name, ...}``).

    Args:
        key: a key of a state's ``participants``.
        part: its state, when there is one.

    Returns:
        ``True`` for a part a process may lack.

    >>> optional_part("loader.0"), optional_part("counter.0", {"tool": "seeder verify"})
    (False, True)
    """
    named = isinstance(part, dict) and isinstance(part.get("tool"), str)
    return named or key.partition(".")[0] in _OPTIONAL_KINDS


def _resolve(member: Any) -> Any:
    return member() if isinstance(member, weakref.ref) else member


def _check_arity(gen: Any) -> None:
    """A ``TypeError`` now, not at the next reseed, for a callable that cannot be called as
    ``f(seed)``."""
    try:
        inspect.signature(gen).bind(0)
    except TypeError as exc:
        raise TypeError(
            f"register_generator() needs a callable f(seed: int) that takes the seed as its one "
            f"argument; {describe(gen)} cannot be called with one argument ({exc})"
        ) from None
    except ValueError:  # no signature to read (some builtins): found out at the first reseed
        pass


class Registry:
    """Ordered participants: ``(participant or weakref, added by register_generator?)``."""

    def __init__(self) -> None:
        self._members: list[tuple[Any, bool]] = []
        self._next_stream = 1
        self._roster: Optional[tuple[tuple[tuple[str, Any], ...], tuple[Any, ...], bool]] = (
            None  # see _named
        )

    def add_generator(self, gen: Any, shared: bool) -> GeneratorParticipant:
        """Register ``gen`` on the next stream (strongly held, dropped
        by :meth:`drop_registered`)."""
        member = GeneratorParticipant(gen, shared, self._next_stream)
        self._next_stream += 1
        self._members.append((member, True))
        self._roster = None
        return member

    def register(
        self, gen: Any, shared: bool, make: Callable[[], Optional[Any]]
    ) -> Optional[GeneratorParticipant]:
        """``register_generator``: a new :class:`GeneratorParticipant` for ``gen``; or, for an
        object that is no RNG, the participant ``make()`` returns for it
        (:func:`seeder._seeding.participant.participant_for`), added strongly."""
        if self.find(gen) is not None:
            raise ValueError(f"{describe(gen)} is already registered; register each generator once")
        if adapter_for(gen) is None:
            participant = make()
            # e.g. a DALI pipeline: joins at the next reseed, not called now
            if participant is not None:
                self.add(participant, weak=False, registered=True)
                return None
            if callable(gen):
                _check_arity(gen)
            else:
                raise TypeError(
                    f"register_generator() needs a callable f(seed: int), a random.Random, numpy "
                    f"Generator/RandomState, torch.Generator or a participant (an object with "
                    f"seeder_reseed, or a DALI pipeline); got {type(gen).__name__} {gen!r}"
                )
        return self.add_generator(gen, shared)

    def mark(self) -> tuple[list[tuple[Any, bool]], int]:
        """What :meth:`rollback` returns to: the members and the next stream number, as they are
        now."""
        return list(self._members), self._next_stream

    def rollback(self, mark: tuple[list[tuple[Any, bool]], int]) -> None:
        """Return to a :meth:`mark` (a registration that raised leaves nothing behind)."""
        self._members, self._next_stream, self._roster = mark[0], mark[1], None

    def register_or_nothing(self, seeder: Registering, gen: Any, shared: bool) -> None:
        """``seeder.register_generator(gen)``: :meth:`register`, and seed it for the last reseed; on
        any raise, no trace.

        A generator that raises when it is seeded (a bug, the wrong arity) stays out of the
        registry, so later reseeds do not call it.
        """
        mark = self.mark()
        try:
            member = self.register(gen, shared, lambda: participant_for(gen, seeder, shared))
            last = seeder.last_reseed
            if member is not None and last is not None:
                member.seeder_reseed(seeder, *last)
        except BaseException as exc:
            self.rollback(mark)
            if (
                isinstance(exc, Exception)
                and seeder.last_reseed is not None
                and hasattr(exc, "add_note")
            ):
                exc.add_note(
                    f"register_generator(): {describe(gen)} was not registered (seeding it for "
                    f"reseed{seeder.last_reseed} raised); fix it and register it again"
                )
            raise

    def add(self, participant: Any, *, weak: bool, registered: bool = False) -> None:
        """Add ``participant`` (a weak reference if ``weak``) unless it is already there."""
        if self.find(participant) is None:
            self._members.append((weakref.ref(participant) if weak else participant, registered))
            self._roster = None

    def drop_registered(self) -> int:
        """Forget what ``register_generator`` added and restart stream numbering (``init``); return
        how many."""
        before = len(self._members)
        self._members = [(m, registered) for m, registered in self._members if not registered]
        self._roster = None
        self._next_stream = 1
        return before - len(self._members)

    def find(self, obj: Any) -> Optional[Any]:
        """The participant for ``obj``: itself, the generator wrapping it, or the one
        that :class:`~seeder._seeding.participant.Stands` for it."""
        for member, _ in self._members:
            p = _resolve(member)
            if p is None:
                continue
            if (
                p is obj
                or (isinstance(p, GeneratorParticipant) and p.matches(obj))
                or (isinstance(p, Stands) and p.seeder_target is obj)
            ):
                return p
        return None

    def find_or_raise(self, gen: Any) -> Any:
        """:meth:`find`, or a ``ValueError`` saying ``gen`` is not registered
        (``unregister_generator``)."""
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
        self._members = [
            (m, r)
            for m, r in self._members
            if _resolve(m) is not None and _resolve(m) is not participant
        ]
        self._roster = None

    def participants(self) -> list[Any]:
        """Live participants in the order they joined."""
        return [p for p in (_resolve(m) for m, _ in self._members) if p is not None]

    def _named(self) -> tuple[tuple[tuple[str, Any], ...], tuple[Any, ...], bool]:
        """``(stateful, generators, weak)``: :meth:`stateful`'s keys and :meth:`generators` with
        members as stored (participants or weak references), and whether any is a weak reference.
        Found again after each change of the members (a participant's kind and whether it saves
        state are read then)."""
        roster = self._roster
        if roster is None:
            live = [
                (m, p) for m, p in ((m, _resolve(m)) for m, _ in self._members) if p is not None
            ]
            stored = {id(p): m for m, p in live}
            named = participant_keys([p for _, p in live if saves_state(p)])
            roster = self._roster = (
                tuple((k, stored[id(p)]) for k, p in named.items()),
                tuple(m for m, p in live if isinstance(p, GeneratorParticipant)),
                any(isinstance(m, weakref.ref) for m, _ in live),
            )
        return roster

    def generators(self) -> list[GeneratorParticipant]:
        """Registered generators in registration order."""
        _, gens, weak = self._named()
        if not weak:
            return list(gens)
        found = [_resolve(m) for m in gens]
        if any(p is None for p in found):  # one held weakly is gone: the roster is found again
            self._roster = None
            return self.generators()
        return found

    def stateful(self) -> dict[str, Any]:
        """Participants whose state is saved, by key
        (:func:`seeder._seeding.participant.participant_keys`)."""
        named, _, weak = self._named()
        if not weak:
            return dict(named)
        found = {k: _resolve(m) for k, m in named}
        # one held weakly is gone: the keys of the others may change
        if any(p is None for p in found.values()):
            self._roster = None
            return self.stateful()
        return found


class Membership:
    """The part of :class:`seeder.Seeder` about who takes part: registered generators and
    participants.

    A base class of ``Seeder``, which provides ``registry`` (a :class:`Registry`), ``pending``
    (:class:`seeder._state.pending.PendingParts`), ``run``, its lock and ``_require_init``.

    Example:
        >>> import seeder
        >>> s = seeder.Seeder(); s.init(1); isinstance(s, Membership), s.participants()
        (True, [])
    """

    registry: Registry
    if TYPE_CHECKING:  # provided by Seeder, the one subclass
        pending: PendingParts
        _lock: threading.RLock

        def _require_init(self, what: str) -> Topology: ...

    def _as_member(self) -> Member:
        """``self`` as the :class:`seeder.Seeder` it is (``Membership`` is only its base), seen
        through what registering and claiming read of it."""
        return cast("Member", self)

    def register_generator(self, gen: GeneratorLike, shared: bool = False) -> None:
        """Reseed ``gen`` at every :meth:`reseed` (NVIDIA's API); :meth:`init` drops it again.

        ``gen`` is a callable ``f(seed: int)`` or a ``random.Random``, NumPy
        ``Generator``/``RandomState`` or ``torch.Generator``, on its own stream: the per-rank
        seed, or with ``shared=True`` one seed equal on all ranks. After a reseed it is seeded
        at once for that ``(task, epoch)``. Seeds are 64-bit (fold with ``% 2**32`` for 32-bit
        RNGs). A participant or a DALI pipeline is joined (held strongly) instead. A generator
        that raises when it is seeded is not registered.

        Args:
            gen: the generator or seeding function.
            shared: ``True`` for the seed equal on all ranks, ``False`` for this rank's.

        Raises:
            RuntimeError: :meth:`init` was not called.
            TypeError: ``gen`` is neither a seeding function, an RNG seeder knows, nor a
                participant.
            seeder.StateError: a loaded state's part for this generator does not fit it.

        Example:
            >>> import random, seeder; s = seeder.Seeder(); s.init(5); rng = random.Random()
            >>> s.register_generator(rng); s.reseed(1, 0)
            >>> rng.random() == random.Random(s.get_seed(1, 0, stream=1)).random()
            True
        """
        self._require_init("register_generator")
        with self._lock:
            mark = self.registry.mark()
            self.registry.register_or_nothing(self._as_member(), gen, check_bool(shared, "shared"))
            try:
                self.pending.claim(self._as_member())
            except BaseException:
                self.registry.rollback(mark)
                raise

    def unregister_generator(self, gen: GeneratorLike) -> None:
        """Stop reseeding ``gen``.

        Args:
            gen: the object or bound method given to :meth:`register_generator`.

        Raises:
            ValueError: ``gen`` is not registered.

        Example:
            >>> import random, seeder; s = seeder.Seeder(); s.init(5); rng = random.Random()
            >>> s.register_generator(rng); s.unregister_generator(rng); s.generators()
            []
        """
        with self._lock:
            self.registry.remove(self.registry.find_or_raise(gen))

    def join(self, participant: Any, *, weak: bool = True) -> None:
        """Add a participant: a sampler, loader, DALI pipeline, or any :class:`seeder.Participant`.

        Participants that joined stay across :meth:`init` and follow the new run. Joining twice
        has no effect.

        Args:
            participant: the object to reseed at every :meth:`reseed` and save in the state.
            weak: hold it through a weak reference, so that a discarded sampler leaves.

        Raises:
            TypeError: ``participant`` is not a participant; the message says what it needs.
            seeder.StateError: a loaded state's part for it does not fit; it did not join.

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(1)
            >>> sampler = seeder.DistributedSampler(range(4), seeder=s)  # joins by itself
            >>> sampler in s.participants()
            True
        """
        check_bool(weak, "weak")
        made = require_participant(participant, self._as_member())
        with self._lock:
            mark = self.registry.mark()
            # a wrapper lives as long as the seeder
            self.registry.add(made, weak=weak and made is participant)
            try:
                self.pending.claim(self._as_member())
            except BaseException:
                # A refused participant leaves no trace: while its exception (and so the
                # participant) is referenced, a notebook's last traceback, it would take the key
                # of the one built next.
                self.registry.rollback(mark)
                raise

    def leave(self, participant: Any) -> None:
        """Remove a participant that joined; unknown ones are ignored.

        Args:
            participant: the object given to :meth:`join` (or the one a participant stands for).

        Example:
            >>> import seeder
            >>> s = seeder.Seeder(); s.init(1)
            >>> sampler = seeder.DistributedSampler(range(4), seeder=s)
            >>> s.leave(sampler); s.participants()
            []
        """
        with self._lock:
            self.registry.discard(participant)

    def participants(self) -> list[Any]:
        """Live participants in the order they joined (registered generators included).

        Returns:
            The participants.

        Example:
            >>> import seeder; s = seeder.Seeder(); s.participants()
            []
        """
        return self.registry.participants()

    def generators(self) -> list[GeneratorParticipant]:
        """Registered generators in registration order.

        Returns:
            Their :class:`seeder._seeding.participant.GeneratorParticipant` wrappers.

        Example:
            >>> import random, seeder; s = seeder.Seeder(); s.init(1)
            >>> s.register_generator(random.Random()); [g.stream for g in s.generators()]
            [1]
        """
        return self.registry.generators()

    def stateful(self) -> dict[str, Any]:
        """Participants whose state is saved, by key.

        Returns:
            ``{"generator.<stream>" or "<seeder_kind>.<n>": participant}``.

        Example:
            >>> import random, seeder; s = seeder.Seeder(); s.init(1)
            >>> s.register_generator(random.Random()); list(s.stateful())
            ['generator.1']
        """
        return self.registry.stateful()
