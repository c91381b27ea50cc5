"""The participant protocol: the one way samplers, loaders, pipelines and generators join a seeder.

A participant is reseeded by every :meth:`seeder.Seeder.reseed` (after the global
RNGs) and, when it keeps state, saved by :meth:`seeder.Seeder.state_dict` under
``participants["<seeder_kind>.<n>"]`` and restored by ``load_state_dict`` after
``check_state_dict`` accepted it. Inside :meth:`seeder.Seeder.load_state_dict` both calls
get the run the state describes as ``load=`` (a :class:`LoadContext`) when the method
takes a ``load`` argument (:func:`check_part`, :func:`load_part`). Anything with these
members is a participant (duck typing; subclassing :class:`Participant` is optional). It joins with
``seeder.join(obj, weak=True)``; :func:`participant_for` turns objects of other
libraries into participants through the factories added with :func:`add_factory`
(:mod:`seeder.data.dali` adds the one for DALI pipelines; ``import seeder`` loads it
with the core, so a pipeline joins whatever the user imported first).

Registered generators (``register_generator(f)``) are :class:`GeneratorParticipant`:
a callable ``f(seed)`` or an RNG object with an adapter from :mod:`seeder._seeding.rngs`.

Three optional parts, each its own protocol: :class:`Stands` (a participant that stands
for another object, which ``unregister_generator(obj)`` and ``leave(obj)`` then find),
:class:`Positioned` (a participant that reports its epoch and position to
``seeder verify``'s trace without side effects) and :class:`Elastic` (a participant whose
state is global, so that it loads on another world size). :func:`participant_keys` names
participants in states and traces.

Example:
    >>> import random, seeder
    >>> class Noise:
    ...     seeder_kind = "noise"
    ...     def __init__(self): self.rng = random.Random()
    ...     def seeder_reseed(self, seeder, task_id, epoch):
    ...         self.rng.seed(seeder.get_seed(task_id, epoch, stream=99))
    ...     def state_dict(self): return {"state": list(self.rng.getstate()[1])}
    ...     def check_state_dict(self, state): pass
    ...     def load_state_dict(self, state): self.rng.setstate((3, tuple(state["state"]), None))
    >>> isinstance(Noise(), Participant)
    True
    >>> s = seeder.Seeder(); s.init(1); n = Noise(); s.join(n); s.reseed(1, 0)
    >>> sorted(s.state_dict()["participants"])
    ['noise.0']
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, NamedTuple, Optional, Protocol, runtime_checkable

import torch

from seeder._errors import SeederWarning, StateError
from seeder._seeding.rngbase import RNGAdapter
from seeder._seeding.rngs import adapter_for

__all__ = [
    "Seeds",
    "LoadContext",
    "check_part",
    "load_part",
    "Participant",
    "Stands",
    "Positioned",
    "Elastic",
    "is_elastic",
    "GeneratorParticipant",
    "participant_for",
    "participant_keys",
    "describe",
    "saves_state",
    "validates_state",
    "owner_saves_state",
    "require_participant",
    "add_factory",
    "Factory",
    "warn_unsaved_generators",
]


class Seeds(Protocol):
    """What a participant's ``seeder_reseed`` reads of the seeder that reseeds: its seeds."""

    def get_seed(
        self, task_id: int, epoch: int = 0, *, shared: bool = False, stream: int = 0
    ) -> int: ...

    def stream_seed(self, task_id: int, epoch: int, *, shared: bool, stream: int) -> int: ...


class LoadContext(NamedTuple):
    """The run a state being loaded by :meth:`seeder.Seeder.load_state_dict` describes: what a
    participant checks its part against (a sampler's shuffle key, a loader's epoch).

    A participant's ``check_state_dict(state, load=None)`` and ``load_state_dict(state,
    load=None)`` get it during a seeder load; ``None`` (a direct call) means the seeder's own run.

    Attributes:
        master: the master seed of the saved run.
        last: its last ``reseed`` as ``(task, epoch)``, ``None`` before any.

    >>> LoadContext(master=3, last=(1, 0)).last
    (1, 0)
    """

    master: int
    last: Optional[tuple[int, int]]


def _takes_load(method: Any) -> bool:
    """Whether ``method`` has a parameter ``load`` that can be given by keyword."""
    try:
        param = inspect.signature(method).parameters.get("load")
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def check_part(participant: Any, state: Any, load: Optional[LoadContext]) -> None:
    """``participant.check_state_dict(state)``, with ``load=load`` when the method takes it.

    >>> class Part:
    ...     def check_state_dict(self, state, load=None): print(state, load.last)
    >>> check_part(Part(), {}, LoadContext(1, (1, 2)))
    {} (1, 2)
    """
    method = participant.check_state_dict
    if load is not None and _takes_load(method):
        method(state, load=load)
    else:
        method(state)


def load_part(participant: Any, state: Any, load: Optional[LoadContext]) -> None:
    """``participant.load_state_dict(state)``, with ``load=load`` when the method takes it.

    >>> class Part:
    ...     def load_state_dict(self, state): print(state)
    >>> load_part(Part(), {"a": 1}, LoadContext(1, None))
    {'a': 1}
    """
    method = participant.load_state_dict
    if load is not None and _takes_load(method):
        method(state, load=load)
    else:
        method(state)


@runtime_checkable
class Participant(Protocol):
    """What a sampler, loader, pipeline or generator wrapper implements to join
    a :class:`seeder.Seeder`.

    Subclassing is optional: any object with these members is a participant.

    Attributes:
        seeder_kind: the first word of the participant's key in a state (``"sampler"``,
            ``"loader"``, ...).

    Example:
        >>> import random, seeder
        >>> class Noise:
        ...     seeder_kind = "noise"
        ...     def __init__(self): self.rng = random.Random()
        ...     def seeder_reseed(self, seeder, task_id, epoch):
        ...         self.rng.seed(seeder.get_seed(task_id, epoch, stream=99))
        ...     def state_dict(self): return {"draws": 0}
        ...     def check_state_dict(self, state): pass
        ...     def load_state_dict(self, state): pass
        >>> isinstance(Noise(), seeder.Participant)
        True
    """

    seeder_kind: str

    def seeder_reseed(self, seeder: Seeds, task_id: int, epoch: int) -> None:
        """Follow ``seeder.reseed(task_id, epoch)``.

        Args:
            seeder: the seeder that reseeds; its ``get_seed`` gives the seeds to use.
            task_id: the task.
            epoch: the epoch.
        """

    def state_dict(self) -> Any:
        """This participant's state.

        Returns:
            Tensors and plain values only (they load with ``torch.load(weights_only=True)``),
            or ``None`` for a participant that keeps no state: it is not saved.
        """

    def check_state_dict(self, state: Any) -> None:
        """Check that :meth:`load_state_dict` would accept ``state``; change nothing.

        A method that also takes ``load`` gets the :class:`LoadContext` of a seeder load.

        Args:
            state: what :meth:`state_dict` returned in the run that saved it.

        Raises:
            seeder.StateError: what does not fit, and what to do.
        """

    def load_state_dict(self, state: Any) -> None:
        """Restore a state that :meth:`check_state_dict` accepted.

        A method that also takes ``load`` gets the :class:`LoadContext` of a seeder load.

        Args:
            state: what :meth:`state_dict` returned in the run that saved it.
        """


@runtime_checkable
class Stands(Protocol):
    """Optional: a participant made for another object (a DALI
    pipeline's :class:`~seeder.data.dali.TrackedPipeline`).

    ``seeder_target`` is that object: ``seeder.unregister_generator(obj)`` and ``seeder.leave(obj)``
    find the participant through it.
    """

    seeder_target: Any


@runtime_checkable
class Positioned(Protocol):
    """Optional: a participant that counts samples (samplers, loaders) and tells ``seeder verify``'s
    trace where it is.

    ``seeder_position()`` returns ``{"epoch": int, "position": int}`` (samples of the epoch
    consumed) and changes nothing: no RNG, no warning used up, no iteration started.
    """

    def seeder_position(self) -> dict[str, int]:
        """The epoch and the samples of it consumed, read without side effects."""


@runtime_checkable
class Elastic(Protocol):
    """Optional: a participant whose state is the same on every rank (an elastic
    ``seeder.DataLoader``).

    ``seeder_elastic`` is ``True``: its state loads on any world size, and a process whose
    participants are all elastic (or registered generators) loads a state of another world
    size (:mod:`seeder._state.world`).
    """

    seeder_elastic: bool


def is_elastic(participant: Any) -> bool:
    """Whether ``participant`` is :class:`Elastic` and says so.

    >>> class Loader: seeder_elastic = True
    >>> is_elastic(Loader()), is_elastic(object())
    (True, False)
    """
    # isinstance() on a Protocol costs ~10 us a call
    return getattr(participant, "seeder_elastic", False) is True


def participant_keys(participants: list[Any]) -> dict[str, Any]:
    """The names of ``participants`` in states and traces: ``generator.<stream>``, else
    ``<seeder_kind>.<n>``.

    ``n`` counts the participants of that kind in the order given (join order), from 0.

    >>> import random
    >>> class Sampler: seeder_kind = "sampler"
    >>> a, b = Sampler(), Sampler()
    >>> g = GeneratorParticipant(random.Random(), shared=False, stream=2)
    >>> list(participant_keys([a, g, b]))
    ['sampler.0', 'generator.2', 'sampler.1']
    """
    counts: dict[str, int] = {}
    named: dict[str, Any] = {}
    for p in participants:
        if isinstance(p, GeneratorParticipant):
            named[f"generator.{p.stream}"] = p
            continue
        kind = getattr(p, "seeder_kind", type(p).__name__.lower())
        counts[kind] = counts.get(kind, 0) + 1
        named[f"{kind}.{counts[kind] - 1}"] = p
    return named


def describe(obj: Any) -> str:
    """A short name for ``obj`` in messages: its qualified name, else its type's name.

    >>> describe(len), describe(3)
    ('len', 'int')
    """
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def owner_saves_state(obj: Any) -> bool:
    """Whether ``obj`` (the owner of a registered bound method) saves its RNG with
    ``state_dict``/``load_state_dict``.

    Modules and optimizers have those methods too, but they hold weights, not the RNG, so they do
    not count.

    >>> owner_saves_state(None)
    False
    """
    if obj is None or isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
        return False
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


class GeneratorParticipant:
    """A registered generator: a callable ``f(seed)`` or an RNG object, with its own stream.

    ``stream`` is the generator's place among those registered since :meth:`seeder.Seeder.init`
    (from 1); ``shared=True`` takes the seed that is equal on every rank.

    >>> import random
    >>> g = GeneratorParticipant(random.Random(), shared=False, stream=1)
    >>> g.seed(5); g.saves_state, g.seeder_kind
    (True, 'generator')
    """

    seeder_kind = "generator"

    def __init__(self, gen: Any, shared: bool, stream: int):
        self.gen = gen
        self.shared = shared
        self.stream = stream
        self.adapter: Optional[RNGAdapter] = adapter_for(gen)
        owner = getattr(gen, "__self__", None)
        self.owner = owner if self.adapter is None and owner_saves_state(owner) else None
        self.seed: Callable[[int], Any] = self.adapter.seed if self.adapter is not None else gen
        self.warned = False

    def matches(self, gen: Any) -> bool:
        """Whether ``gen`` is this generator (bound methods are new objects on each access but
        compare equal)."""
        return self.gen is gen or (callable(gen) and hasattr(gen, "__self__") and self.gen == gen)

    def seeder_reseed(self, seeder: Seeds, task_id: int, epoch: int) -> None:
        self.seed(seeder.stream_seed(task_id, epoch, shared=self.shared, stream=self.stream))

    @property
    def saves_state(self) -> bool:
        """Whether this generator's state can be saved (an RNG object, or an owner with
        ``state_dict``)."""
        return self.adapter is not None or self.owner is not None

    @property
    def validates_state(self) -> bool:
        """Whether :meth:`check_state_dict` really checks (so loading a checked state cannot
        fail)."""
        return self.adapter is not None or callable(getattr(self.owner, "check_state_dict", None))

    def state_dict(self) -> Any:
        if self.adapter is not None:
            return self.adapter.get_state()
        return self.owner.state_dict() if self.owner is not None else None

    def check_state_dict(self, state: Any) -> None:
        if self.adapter is not None:
            self.adapter.check_state(state, f"generator {self.stream} ({describe(self.gen)})")
        elif self.owner is None:
            raise self._stateless()
        elif callable(getattr(self.owner, "check_state_dict", None)):
            self.owner.check_state_dict(state)

    def load_state_dict(self, state: Any) -> None:
        if self.adapter is not None:
            self.adapter.set_state(state)
        elif self.owner is None:
            raise self._stateless()
        else:
            self.owner.load_state_dict(state)

    def _stateless(self) -> StateError:
        """The refusal of a state for a plain callable, which has none."""
        return StateError(
            f"generator {self.stream} ({describe(self.gen)}) is a plain callable with no "
            f"state to load"
        )

    def __repr__(self) -> str:
        return (
            f"GeneratorParticipant({describe(self.gen)}, shared={self.shared}, "
            f"stream={self.stream})"
        )


def saves_state(participant: Any) -> bool:
    """Whether ``participant``'s state goes into :meth:`seeder.Seeder.state_dict`.

    >>> saves_state(GeneratorParticipant(print, shared=False, stream=1))
    False
    """
    if isinstance(participant, GeneratorParticipant):
        return participant.saves_state
    return callable(getattr(participant, "state_dict", None))


def validates_state(participant: Any) -> bool:
    """Whether ``participant`` checks a state before loading it (so a checked load cannot fail
    halfway)."""
    if isinstance(participant, GeneratorParticipant):
        return participant.validates_state
    return callable(getattr(participant, "check_state_dict", None))


#: ``factory(obj, seeder, shared)``: a participant made for ``obj`` (an object of another library),
#: or ``None``.
Factory = Callable[[Any, Any, bool], Optional[Any]]

_factories: list[Factory] = []


def add_factory(factory: Factory) -> None:
    """Let :func:`participant_for` turn objects of another library into participants with
    ``factory``.

    ``factory(obj, seeder, shared)`` returns a participant made for ``obj``, or ``None`` when
    ``obj`` is not its library's; factories are tried in the order added, and adding one twice has
    no effect. The module that defines a factory adds it when imported (:mod:`seeder.data.dali`).

    >>> import seeder.data.dali  # adds DALI's factory when imported
    >>> def nothing(obj, seeder, shared):
    ...     return None
    >>> add_factory(nothing)
    >>> add_factory(nothing)  # a second time: no effect
    >>> participant_for(object(), None) is None  # no factory makes a participant of it
    True
    """
    if factory not in _factories:
        _factories.append(factory)


def require_participant(obj: Any, seeder: Any) -> Any:
    """:func:`participant_for` ``obj``, or a ``TypeError`` that says what a participant needs.

    >>> require_participant(3, None)
    Traceback (most recent call last):
    ...
    TypeError: int is not a participant: it needs seeder_kind, seeder_reseed(seeder, task_id, ...
    """
    made = participant_for(obj, seeder)
    if made is None:
        raise TypeError(
            f"{type(obj).__name__} is not a participant: it needs seeder_kind, "
            "seeder_reseed(seeder, task_id, epoch), state_dict, check_state_dict and "
            "load_state_dict"
        )
    return made


def participant_for(obj: Any, seeder: Any, shared: bool = False) -> Optional[Any]:
    """``obj`` if it is a participant, a participant made for it by a factory (:func:`add_factory`),
    else ``None``. ``seeder`` is handed to the factories as it is.

    >>> participant_for(3, None) is None
    True
    """
    if callable(getattr(obj, "seeder_reseed", None)):
        return obj
    for factory in _factories:
        made = factory(obj, seeder, shared)
        if made is not None:
            return made
    return None


def warn_unsaved_generators(generators: list[GeneratorParticipant]) -> None:
    """Warn once per registered plain callable: its stream cannot be saved, so a mid-epoch resume
    cannot continue it."""
    for member in generators:
        if member.saves_state or member.warned:
            continue
        member.warned = True
        owner = getattr(member.gen, "__self__", None)
        frameworks = (torch.nn.Module, torch.optim.Optimizer)
        hint = (
            f"give {type(owner).__name__} state_dict()/load_state_dict() methods that save its RNG"
            if owner is not None and not isinstance(owner, frameworks)
            else "register the RNG object itself (random.Random, numpy Generator/RandomState "
            "or torch.Generator)"
        )
        warnings.warn(
            f"registered generator {describe(member.gen)} is a plain callable with no "
            "state to save: a run resumed from a checkpoint taken inside an epoch will "
            f"not continue its random stream; {hint}",
            SeederWarning,
            stacklevel=3,
        )
