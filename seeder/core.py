"""The :class:`Seeder`: master seed, rank/world, registry of participants, reseed, state.

``core`` imports no feature. Samplers, DALI pipelines and generator objects
join a seeder through one small protocol (see :class:`Participant`), so a new
kind of participant is a new file, not a new branch here.

Example:
    >>> s = Seeder()
    >>> s.init(master_seed=42)
    >>> s.reseed(0, 0)
    >>> s.get_master_seed()
    42
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import secrets
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch

from . import derive
from .derive import Domain, check_key, check_master_seed
from .distributed import Topology, agree_master_seed, discover, process_group_active
from .errors import SeederWarning, StateError
from .rngs import RNGAdapter, adapter_for, global_adapters

__all__ = ["Seeder", "Participant", "STATE_FORMAT_VERSION", "GATHERED_FORMAT", "ENV_SEED", "ENV_DETERMINISTIC",
           "ENV_SNAPSHOT_DIR", "add_participant_factory"]

logger = logging.getLogger("seeder")

#: Version of the layout of :meth:`Seeder.state_dict`.
STATE_FORMAT_VERSION = 1
#: ``format`` tag of :meth:`Seeder.gather_state_dict` (every rank's state in one dict).
GATHERED_FORMAT = "seeder-gathered"
#: Environment variable that supplies the master seed when ``init`` gets none.
ENV_SEED = "SEEDER_SEED"
#: Environment variable that turns on deterministic mode when ``init`` gets ``deterministic=None``.
ENV_DETERMINISTIC = "SEEDER_DETERMINISTIC"
#: Environment variable naming the snapshot directory when ``init`` gets ``snapshot_dir=None``.
ENV_SNAPSHOT_DIR = "SEEDER_SNAPSHOT_DIR"


class Participant:
    """What a sampler, pipeline or generator implements to join a :class:`Seeder`.

    ``seeder_reseed(seeder, task_id, epoch)`` is called by every :meth:`Seeder.reseed`
    after the global RNGs are seeded. A participant that keeps state also offers
    ``state_dict()``, ``load_state_dict(state)`` and ``check_state_dict(state)``
    (raise :class:`StateError` without changing anything); :meth:`Seeder.state_dict`
    then saves it under ``"<kind>.<n>"``, ``n`` counting live participants of that
    kind in the order they joined (registered generators use their stream number,
    so a checkpoint made with other registrations does not load silently).
    Subclassing is optional (duck typing is enough).
    """

    seeder_kind: str = "participant"

    def seeder_reseed(self, seeder: "Seeder", task_id: int, epoch: int) -> None:  # pragma: no cover
        raise NotImplementedError


GeneratorLike = Union[Callable[[int], Any], Any]

#: Functions ``factory(obj, seeder, shared) -> participant or None`` that turn objects a
#: feature knows (e.g. DALI pipelines) into participants for ``register_generator``.
_participant_factories: List[Callable[[Any, "Seeder", bool], Any]] = []


def add_participant_factory(factory: Callable[[Any, "Seeder", bool], Any]) -> None:
    """Let a feature module make participants for objects handed to :meth:`Seeder.register_generator`.

    ``factory(obj, seeder, shared)`` returns a participant for ``obj`` (with a
    ``seeder_target`` attribute naming ``obj``, so ``unregister_generator(obj)`` finds
    it), or ``None`` for objects it does not know. Core imports no feature; features register here.
    Adding the same factory twice has no effect.
    """
    if not callable(factory):
        raise TypeError(f"add_participant_factory() needs a callable factory(obj, seeder, shared), got {type(factory).__name__}")
    if factory not in _participant_factories:
        _participant_factories.append(factory)


class _Generator(Participant):
    """A registered generator: a callable ``f(seed)`` or an RNG object with an adapter."""

    seeder_kind = "generator"

    def __init__(self, gen: GeneratorLike, shared: bool, stream: int):
        self.gen = gen
        self.shared = shared
        self.stream = stream
        self.adapter: Optional[RNGAdapter] = adapter_for(gen)
        owner = getattr(gen, "__self__", None)
        self.owner = owner if _has_state_protocol(owner) else None
        self.warned = False

    def matches(self, gen: Any) -> bool:
        # Bound methods are new objects on every attribute access but compare equal.
        return self.gen is gen or (callable(gen) and hasattr(gen, "__self__") and self.gen == gen)

    def seed(self, seed: int) -> None:
        if self.adapter is not None:
            self.adapter.seed(seed)
        else:
            self.gen(seed)

    def seeder_reseed(self, seeder: "Seeder", task_id: int, epoch: int) -> None:
        self.seed(seeder._stream_seed(task_id, epoch, self.shared, self.stream))

    @property
    def has_state(self) -> bool:
        return self.adapter is not None or self.owner is not None

    def state_dict(self) -> Any:
        if self.adapter is not None:
            return self.adapter.get_state()
        return self.owner.state_dict()

    def check_state_dict(self, state: Any, where: str) -> None:
        if self.adapter is not None:
            self.adapter.check_state(state, where)
        elif hasattr(self.owner, "check_state_dict"):
            self.owner.check_state_dict(state)

    def load_state_dict(self, state: Any) -> None:
        if self.adapter is not None:
            self.adapter.set_state(state)
        else:
            self.owner.load_state_dict(state)


def _has_state_protocol(obj: Any) -> bool:
    """Whether the owner of a registered callable saves its generator's state.

    Modules and optimizers have ``state_dict`` too, but theirs holds weights, not
    the RNG the callable seeds, so they do not count.
    """
    if obj is None or isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
        return False
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _describe(gen: Any) -> str:
    return getattr(gen, "__qualname__", None) or type(gen).__name__


class Seeder:
    """One master seed and everything derived from it, for one process.

    The module-level functions of :mod:`seeder` are the methods of one default
    instance; create your own ``Seeder()`` to keep state apart (tests, libraries).

    >>> s = Seeder()
    >>> s.init(7)
    >>> s.get_seed(1, 2) == s.get_seed(1, 2)
    True
    """

    def __init__(self) -> None:
        self._master: Optional[int] = None
        self._explicit = False
        self._topology: Optional[Topology] = None
        self._last: Optional[Tuple[int, int]] = None
        self._resume_pending: Optional[Tuple[int, int]] = None
        self._seen: set = set()
        self._adapters: Optional[List[RNGAdapter]] = None
        # ordered registry: (participant or weakref to it, strong?)
        self._members: List[Any] = []
        self._next_stream = 1
        self._snapshots: set = set()  # directories captured by init(snapshot_dir=...) in this process

    # ------------------------------------------------------------------ init
    def init(
        self,
        master_seed: Optional[int] = None,
        ngpus: Optional[int] = None,
        local_rank: Optional[int] = None,
        *,
        rank: Optional[int] = None,
        deterministic: Optional[bool] = None,
        snapshot_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> None:
        """Set the master seed and find this process's global rank.

        ``master_seed=None`` takes ``$SEEDER_SEED`` if set, else draws a seed from OS
        entropy. With a ``torch.distributed`` process group every rank ends with rank
        0's seed; ranks given different explicit seeds raise ``RuntimeError``.
        ``ngpus`` is the world size (processes over all nodes) and ``local_rank``
        the rank on this node, as in NVIDIA's seeder; seeds use the *global* rank
        (process group, else ``$RANK``, else ``local_rank``), so two nodes never
        share seeds. Calling ``init`` again starts over; registered generators stay.

        ``deterministic=True`` (``None``: ``$SEEDER_DETERMINISTIC``, which ``seeder run
        --deterministic`` sets) calls :func:`seeder.determinism.enforce_determinism` on every
        rank; ``False`` leaves torch as it is. ``snapshot_dir`` (``None``: ``$SEEDER_SNAPSHOT_DIR``)
        captures the environment there with :func:`seeder.environment.capture_environment`,
        once per directory and process, on global rank 0 only.

        >>> s = Seeder(); s.init(1234, ngpus=1, local_rank=0); s.get_master_seed()
        1234
        """
        if master_seed is not None:
            seed, explicit = check_master_seed(master_seed), True
        else:
            env = os.environ.get(ENV_SEED)
            if env not in (None, ""):
                try:
                    parsed = int(env.strip())
                except ValueError:
                    raise ValueError(f"{ENV_SEED}={env!r} is not an integer; unset it or set it to a seed such as 42") from None
                seed, explicit = check_master_seed(parsed, ENV_SEED), True
            else:
                seed, explicit = secrets.randbelow(derive.MAX_MASTER_SEED + 1), False
        for name, value in (("ngpus", ngpus), ("local_rank", local_rank), ("rank", rank)):
            if value is not None:
                check_key(value, name)
        if ngpus is not None and ngpus < 1:
            raise ValueError(f"ngpus must be >= 1 (the number of processes in all nodes), got {ngpus}")
        deterministic = _flag(deterministic, "deterministic", ENV_DETERMINISTIC)
        if snapshot_dir is None:
            snapshot_dir = os.environ.get(ENV_SNAPSHOT_DIR) or None
        elif not isinstance(snapshot_dir, (str, os.PathLike)):
            raise TypeError(f"snapshot_dir must be a directory path (str or os.PathLike) or None, got "
                            f"{type(snapshot_dir).__name__} {snapshot_dir!r}")
        elif not os.fspath(snapshot_dir):
            raise ValueError("snapshot_dir is empty; pass a directory path, or None for $SEEDER_SNAPSHOT_DIR")
        topology = discover(rank, ngpus, local_rank)
        seed, explicit = agree_master_seed(seed, explicit)

        self._master, self._explicit, self._topology = seed, explicit, topology
        self._last, self._resume_pending = None, None
        self._seen.clear()
        if topology.rank == 0:
            how = "given" if explicit else "drawn from OS entropy"
            logger.info("Using seed: %d (%s; rank 0 of %d)", seed, how, topology.world_size)
        if deterministic:
            from .env.determinism import enforce_determinism  # lazy: core does not depend on the feature

            enforce_determinism()
        if snapshot_dir is not None and topology.rank == 0:
            self._snapshot(os.path.abspath(os.fspath(snapshot_dir)))

    def _snapshot(self, directory: str) -> None:
        if directory in self._snapshots:
            return
        from .env.environment import capture_environment  # lazy: core does not depend on the feature

        try:
            capture_environment(directory, extra={"master_seed": self._master, "world_size": self.world_size})
        except FileExistsError as exc:
            warnings.warn(f"environment snapshot not taken: {exc}", SeederWarning, stacklevel=3)
        self._snapshots.add(directory)

    def reset(self) -> None:
        """Forget the master seed, the last reseed and every registered participant."""
        self.__init__()  # type: ignore[misc]

    @property
    def initialized(self) -> bool:
        """Whether :meth:`init` has been called."""
        return self._master is not None

    def _require_init(self, what: str) -> None:
        if self._master is None:
            raise RuntimeError(f"seeder.{what}() called before seeder.init(); call seeder.init(master_seed=...) first")

    def get_master_seed(self) -> int:
        """The master seed of this run (given, from ``$SEEDER_SEED``, or drawn)."""
        self._require_init("get_master_seed")
        return self._master  # type: ignore[return-value]

    @property
    def rank(self) -> int:
        """Global rank used in derivation."""
        self._require_init("rank")
        return self._topology.rank  # type: ignore[union-attr]

    @property
    def world_size(self) -> int:
        """Number of processes over all nodes."""
        self._require_init("world_size")
        return self._topology.world_size  # type: ignore[union-attr]

    @property
    def local_rank(self) -> int:
        """Rank on this node (informational; not used in derivation)."""
        self._require_init("local_rank")
        return self._topology.local_rank  # type: ignore[union-attr]

    @property
    def last_reseed(self) -> Optional[Tuple[int, int]]:
        """``(task_id, epoch)`` of the last :meth:`reseed`, or ``None``."""
        return self._last

    # ------------------------------------------------------------- derivation
    def get_seed(self, task_id: int, epoch: int = 0, *, shared: bool = False, stream: int = 0) -> int:
        """The 64-bit seed that :meth:`reseed` uses, touching no RNG.

        ``shared=True`` gives the rank-independent seed. ``stream`` 0 is the global
        RNGs'; registered generator ``k`` (from 1, in registration order) uses ``k``.

        >>> s = Seeder(); s.init(42)
        >>> s.get_seed(1, 0) != s.get_seed(1, 1)
        True
        """
        self._require_init("get_seed")
        domain = Domain.SHARED if shared else Domain.RANK
        rank = 0 if shared else self._topology.rank  # type: ignore[union-attr]
        return derive.derive_seed(self._master, domain, task_id, epoch, rank, stream)  # type: ignore[arg-type]

    def derive(self, domain: int, task_id: int = 0, epoch: int = 0, *, rank: Optional[int] = None, stream: int = 0) -> int:
        """A seed of any domain (``seeder.derive.Domain``) for this master seed; rank defaults to this process's.

        >>> s = Seeder(); s.init(42)
        >>> s.derive(Domain.WORKER, 1, 0, stream=3) == s.derive(Domain.WORKER, 1, 0, stream=3)
        True
        """
        self._require_init("derive")
        r = self._topology.rank if rank is None else rank  # type: ignore[union-attr]
        return derive.derive_seed(self._master, domain, task_id, epoch, r, stream)  # type: ignore[arg-type]

    def _stream_seed(self, task_id: int, epoch: int, shared: bool, stream: int) -> int:
        """:meth:`get_seed` without validation, for keys already checked (the hot path of :meth:`reseed`)."""
        rank = 0 if shared else self._topology.rank  # type: ignore[union-attr]
        domain = Domain.SHARED if shared else Domain.RANK
        return derive._derive_unchecked(self._master, (int(domain), task_id, epoch, rank, stream))

    # ----------------------------------------------------------------- reseed
    def reseed(self, task_id: int, epoch: int = 0) -> None:
        """Seed ``random``, NumPy, torch CPU, every accelerator, then every participant.

        Call it at the start of each task: ``reseed(0, 0)`` before building the
        model, ``reseed(1, epoch)`` at each epoch start. Right after
        :meth:`load_state_dict`, a reseed of the saved ``(task, epoch)`` is
        skipped, because the restored RNG states already continue that epoch.
        Reseeding a ``(task, epoch)`` already used in this process otherwise repeats
        its random streams; that warns once with :class:`SeederWarning`.

        >>> import random
        >>> s = Seeder(); s.init(3); s.reseed(1, 0); a = random.random()
        >>> t = Seeder(); t.init(3); t.reseed(1, 0); a == random.random()
        True
        """
        self._require_init("reseed")
        key = (check_key(task_id, "task_id"), check_key(epoch, "epoch"))
        if self._resume_pending is not None:
            pending, self._resume_pending = self._resume_pending, None
            if key == pending:
                logger.info("reseed%s skipped: resuming inside it from the loaded state", key)
                return
        if key in self._seen:
            warnings.warn(
                f"seeder.reseed{key} was already called in this process: its random streams repeat. "
                "Pass a new epoch (or task id) to get fresh randomness.",
                SeederWarning,
                stacklevel=2,
            )
        self._seen.add(key)
        seed = self._stream_seed(key[0], key[1], False, 0)
        for adapter in self._global_adapters():
            adapter.seed(seed)
        self._last = key
        for member in self.participants():
            member.seeder_reseed(self, key[0], key[1])

    # --------------------------------------------------------------- registry
    def register_generator(self, gen: GeneratorLike, shared: bool = False) -> None:
        """Reseed ``gen`` at every :meth:`reseed`.

        ``gen`` is a callable ``f(seed: int)`` (e.g. a bound ``reseed_rng`` method) or a
        ``random.Random``, ``numpy.random.Generator``/``RandomState`` or ``torch.Generator``.
        Each gets its own stream: the per-rank seed, or with ``shared=True`` one seed
        equal on all ranks. If a reseed already happened, ``gen`` is seeded at once
        for that ``(task, epoch)``. Seeds are 64-bit; fold with ``seed % 2**32`` for
        an RNG that takes 32 bits. A participant (an object with ``seeder_reseed``, or
        an object a feature knows, such as a DALI pipeline once :mod:`seeder.dali` is
        imported) is held and called from the next reseed on, not at once.

        >>> import random
        >>> s = Seeder(); s.init(5); rng = random.Random()
        >>> s.register_generator(rng); s.reseed(1, 0)
        """
        if not isinstance(shared, bool):
            raise TypeError(f"shared must be True or False, got {type(shared).__name__} {shared!r}")
        if self._find_generator(gen) is not None:
            raise ValueError(f"{_describe(gen)} is already registered; register each generator once")
        if adapter_for(gen) is None:
            participant = self._participant_for(gen, shared)
            if participant is not None:
                # Participants (e.g. DALI pipelines) join at the next reseed; they are not called now.
                self._members.append(participant)
                return
            if not callable(gen):
                raise TypeError(
                    f"register_generator() needs a callable f(seed: int), a random.Random, numpy Generator/"
                    f"RandomState, torch.Generator or a participant (an object with seeder_reseed, or a DALI "
                    f"pipeline); got {type(gen).__name__} {gen!r}")
        member = _Generator(gen, shared, self._next_stream)
        self._next_stream += 1
        self._members.append(member)
        if self._last is not None:
            member.seeder_reseed(self, *self._last)

    def unregister_generator(self, gen: GeneratorLike) -> None:
        """Stop reseeding ``gen`` (the same object or bound method given to :meth:`register_generator`)."""
        member = self._find_generator(gen)
        if member is None:
            raise ValueError(f"{_describe(gen)} is not registered; nothing to unregister")
        self._members.remove(member)

    def _find_generator(self, gen: Any) -> Any:
        for member in self._members:
            if isinstance(member, _Generator):
                if member.matches(gen):
                    return member
            elif member is gen or getattr(member, "seeder_target", None) is gen:
                return member
        return None

    def _participant_for(self, obj: Any, shared: bool) -> Any:
        """``obj`` itself if it is a participant, else what a feature's factory makes of it, else ``None``."""
        if callable(getattr(obj, "seeder_reseed", None)):
            return obj
        for factory in _participant_factories:
            participant = factory(obj, self, shared)
            if participant is not None:
                return participant
        return None

    def attach(self, participant: Any, *, weak: bool = True) -> None:
        """Add a participant (sampler, pipeline, ...); see :class:`Participant`.

        Held through a weak reference by default, so a discarded sampler leaves.
        """
        if not callable(getattr(participant, "seeder_reseed", None)):
            raise TypeError(f"{type(participant).__name__} has no seeder_reseed(seeder, task_id, epoch) method")
        if participant in self.participants():
            return
        self._members.append(weakref.ref(participant) if weak else participant)

    def detach(self, participant: Any) -> None:
        """Remove a participant added with :meth:`attach`; unknown ones are ignored."""
        self._members = [m for m in self._members if _resolve(m) is not participant and _resolve(m) is not None]

    def generators(self) -> List[Any]:
        """Registered generators in registration order; each has ``gen``, ``shared``, ``stream`` and ``seed(seed)``.

        >>> import random
        >>> s = Seeder(); s.register_generator(random.Random()); [g.stream for g in s.generators()]
        [1]
        """
        return [m for m in self.participants() if isinstance(m, _Generator)]

    def participants(self) -> List[Any]:
        """Live participants in the order they joined (registered generators included)."""
        live = []
        for m in self._members:
            obj = _resolve(m)
            if obj is not None:
                live.append(obj)
        return live

    def _stateful(self) -> Dict[str, Any]:
        """Participants whose state is saved, by key: ``generator.<stream>`` or ``<kind>.<n>``."""
        counts: Dict[str, int] = {}
        named: Dict[str, Any] = {}
        for obj in self.participants():
            if isinstance(obj, _Generator):
                if obj.has_state:
                    named[f"generator.{obj.stream}"] = obj
                continue
            if not callable(getattr(obj, "state_dict", None)):
                continue
            kind = getattr(obj, "seeder_kind", type(obj).__name__.lower())
            n = counts.get(kind, 0)
            counts[kind] = n + 1
            named[f"{kind}.{n}"] = obj
        return named

    def _stateless_generators(self) -> List[_Generator]:
        return [m for m in self.participants() if isinstance(m, _Generator) and not m.has_state]

    def _global_adapters(self) -> List[RNGAdapter]:
        if self._adapters is None:
            self._adapters = global_adapters()
        return self._adapters

    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to continue this process's randomness as if never stopped.

        Holds the master seed, world size, rank, last ``(task, epoch)``, the states of
        Python ``random``, NumPy, torch CPU, every device of every accelerator, of
        registered generator objects (and of callables whose owner has
        ``state_dict``/``load_state_dict``) and of attached participants such as
        samplers. Only tensors and plain Python values: it loads with
        ``torch.load(weights_only=True)``. A registered plain callable has no state
        to save; that warns once, because a resume in the middle of an epoch cannot
        continue its stream.

        >>> s = Seeder(); s.init(1); s.reseed(1, 0)
        >>> sorted(s.state_dict())[:3]
        ['derivation_version', 'format', 'last_reseed']
        """
        self._require_init("state_dict")
        for member in self._stateless_generators():
            if not member.warned:
                member.warned = True
                owner = getattr(member.gen, "__self__", None)
                hint = (f"give {type(owner).__name__} state_dict()/load_state_dict() methods that save its RNG"
                        if owner is not None and not isinstance(owner, (torch.nn.Module, torch.optim.Optimizer))
                        else "register the RNG object itself (random.Random, numpy Generator/RandomState or torch.Generator)")
                warnings.warn(
                    f"registered generator {_describe(member.gen)} is a plain callable with no state to save: a run "
                    f"resumed from a checkpoint taken inside an epoch will not continue its random stream; {hint}",
                    SeederWarning,
                    stacklevel=2,
                )
        topo = self._topology
        return {
            "format": "seeder",
            "version": STATE_FORMAT_VERSION,
            "derivation_version": derive.DERIVATION_VERSION,
            "master_seed": self._master,
            "world_size": topo.world_size,  # type: ignore[union-attr]
            "rank": topo.rank,  # type: ignore[union-attr]
            "last_reseed": list(self._last) if self._last is not None else None,
            "rngs": {a.name: a.get_state() for a in self._global_adapters()},
            "participants": {k: p.state_dict() for k, p in self._stateful().items()},
        }

    def gather_state_dict(self, dst: int = 0) -> Optional[Dict[str, Any]]:
        """Every rank's :meth:`state_dict` in one dict on rank ``dst``, ``None`` on the others.

        A collective: every rank of the process group must call it. Save the result
        on rank ``dst`` in one file; every rank later passes that whole dict to
        :meth:`load_state_dict`, which picks its own entry. Without a process group
        (one process) it returns this process's state in the same form.

        >>> s = Seeder(); s.init(1); s.reseed(1, 0)
        >>> g = s.gather_state_dict(); g["world_size"], len(g["ranks"])
        (1, 1)
        >>> s.load_state_dict(g)
        """
        self._require_init("gather_state_dict")
        world, rank = self._topology.world_size, self._topology.rank  # type: ignore[union-attr]
        if not isinstance(dst, int) or isinstance(dst, bool) or not 0 <= dst < world:
            raise ValueError(f"dst must be a rank in [0, {world}), got {dst!r}")
        own = self.state_dict()
        if process_group_active():
            gathered: Optional[List[Any]] = [None] * world if rank == dst else None
            torch.distributed.gather_object(own, gathered, dst=dst)
            if rank != dst:
                return None
            ranks = list(gathered)  # type: ignore[arg-type]
        elif world == 1:
            ranks = [own]
        else:
            raise RuntimeError(
                f"gather_state_dict() needs a torch.distributed process group for a world of {world} processes; "
                "call torch.distributed.init_process_group() first, or save seeder.state_dict() in one file per rank")
        return {"format": GATHERED_FORMAT, "version": STATE_FORMAT_VERSION, "world_size": world, "ranks": ranks}

    def _own_entry(self, state: Any, allow_world_change: bool) -> Tuple[Dict[str, Any], bool]:
        """This rank's single-process state in ``state`` and whether the world size changed (and that is allowed)."""
        if not isinstance(allow_world_change, bool):
            raise TypeError(f"allow_world_change must be True or False, got {allow_world_change!r}")
        topo = self._topology
        if isinstance(state, dict) and state.get("format") == GATHERED_FORMAT:
            if state.get("version") != STATE_FORMAT_VERSION:
                raise StateError(
                    f"gathered seeder state format {state.get('version')!r} is not supported by this version "
                    f"(which reads format {STATE_FORMAT_VERSION}); load it with the seeder version that wrote it")
            if set(state) != {"format", "version", "world_size", "ranks"}:
                raise StateError("gathered seeder state must have exactly the keys format, version, world_size, ranks")
            ranks, world = state["ranks"], state["world_size"]
            if not isinstance(world, int) or isinstance(world, bool) or world < 1:
                raise StateError(f"gathered state['world_size'] must be a positive int, got {world!r}")
            if not isinstance(ranks, list) or len(ranks) != world:
                raise StateError(f"gathered state['ranks'] must be a list of {world} rank states")
            for i, entry in enumerate(ranks):
                if not isinstance(entry, dict) or entry.get("format") != "seeder" or entry.get("rank") != i \
                        or entry.get("world_size") != world:
                    raise StateError(f"gathered state['ranks'][{i}] is not rank {i}'s seeder state in a world of {world}")
                if entry.get("master_seed") != ranks[0].get("master_seed"):
                    raise StateError(
                        f"gathered state['ranks'][{i}] has master seed {entry.get('master_seed')!r}, rank 0 has "
                        f"{ranks[0].get('master_seed')!r}; the file mixes states of different runs")
            if world != topo.world_size:  # type: ignore[union-attr]
                if allow_world_change:
                    return ranks[0], True
                raise StateError(_world_message(world, topo.world_size))  # type: ignore[union-attr]
            return ranks[topo.rank], False  # type: ignore[union-attr]
        if not isinstance(state, dict) or state.get("format") != "seeder":
            raise StateError("not a seeder state: pass the dict returned by seeder.state_dict() or seeder.gather_state_dict()")
        changed = state.get("world_size") != topo.world_size  # type: ignore[union-attr]
        return state, bool(changed and allow_world_change)

    def check_state_dict(self, state: Any, *, allow_world_change: bool = False) -> None:
        """Raise :class:`StateError` (or ``TypeError``) if ``state`` cannot be loaded here; change nothing.

        Takes what :meth:`load_state_dict` takes.

        >>> s = Seeder(); s.init(1); st = s.state_dict(); st["version"] = 99
        >>> s.check_state_dict(st)
        Traceback (most recent call last):
        ...
        seeder.errors.StateError: seeder state format 99 is not supported by this version (which reads format 1); load it with the seeder version that wrote it
        """
        self._require_init("load_state_dict")
        self._check(state, allow_world_change)

    def _check(self, state: Any, allow_world_change: bool) -> Tuple[Dict[str, Any], bool]:
        state, changed = self._own_entry(state, allow_world_change)
        if state.get("version") != STATE_FORMAT_VERSION:
            raise StateError(
                f"seeder state format {state.get('version')!r} is not supported by this version "
                f"(which reads format {STATE_FORMAT_VERSION}); load it with the seeder version that wrote it")
        if state.get("derivation_version") != derive.DERIVATION_VERSION:
            raise StateError(
                f"the checkpoint used seed derivation v{state.get('derivation_version')!r}, this seeder derives "
                f"v{derive.DERIVATION_VERSION}; install the seeder version that wrote it to continue the same streams")
        if state.keys() != _STATE_KEYS:
            raise StateError(f"seeder state keys differ: missing {sorted(_STATE_KEYS - set(state))}, "
                             f"unexpected {sorted(set(state) - _STATE_KEYS)}")
        master = state["master_seed"]
        if not (type(master) is int and 0 <= master <= derive.MAX_MASTER_SEED):  # fast path; the full check words the error
            try:
                check_master_seed(master, "state['master_seed']")
            except (TypeError, ValueError) as exc:
                raise StateError(str(exc)) from None
        for name in ("world_size", "rank"):
            value = state[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StateError(f"state[{name!r}] must be a non-negative int, got {value!r}")
        last = state["last_reseed"]
        if last is not None:
            if not (isinstance(last, list) and len(last) == 2):
                raise StateError("state['last_reseed'] must be None or [task_id, epoch]")
            for i, word in enumerate(last):
                if not (type(word) is int and 0 <= word <= derive.MAX_KEY):
                    try:
                        check_key(word, f"state['last_reseed'][{i}]")
                    except (TypeError, ValueError) as exc:
                        raise StateError(str(exc)) from None
        if changed:
            return state, True
        topo = self._topology
        if state["world_size"] != topo.world_size:  # type: ignore[union-attr]
            raise StateError(_world_message(state["world_size"], topo.world_size))  # type: ignore[union-attr]
        if state["rank"] != topo.rank:  # type: ignore[union-attr]
            raise StateError(f"this is rank {state['rank']}'s state but this process is rank {topo.rank}; load each rank's own entry")  # type: ignore[union-attr]
        rngs = state["rngs"]
        if not isinstance(rngs, dict):
            raise StateError("state['rngs'] must be a dict")
        adapters = self._global_adapters()
        names = [a.name for a in adapters]
        if set(rngs) != set(names):
            raise StateError(
                f"the checkpoint has RNG states for {sorted(rngs)} but this process has {sorted(names)}; "
                "resume on the same kind of machine (same accelerators visible)")
        for adapter in adapters:
            adapter.check_state(rngs[adapter.name], f"state['rngs'][{adapter.name!r}]")
        parts = state["participants"]
        if not isinstance(parts, dict):
            raise StateError("state['participants'] must be a dict")
        live = self._stateful()
        if set(parts) != set(live):
            raise StateError(
                f"the checkpoint holds state for {sorted(parts)} but this process has {sorted(live)} registered; "
                "register the same generators, samplers and pipelines in the same order before load_state_dict")
        for key, obj in live.items():
            check = getattr(obj, "check_state_dict", None)
            if callable(check):
                if isinstance(obj, _Generator):
                    check(parts[key], f"state['participants'][{key!r}]")
                else:
                    check(parts[key])
        return state, False

    def load_state_dict(self, state: Dict[str, Any], *, allow_world_change: bool = False) -> None:
        """Validate ``state`` completely, then restore every RNG and participant.

        ``state`` is one process's :meth:`state_dict` or the dict of
        :meth:`gather_state_dict` (this rank's entry is used). On any problem it
        raises before changing anything (and should a participant's own
        ``load_state_dict`` still fail midway, everything is put back as it was).
        The next :meth:`reseed` of the saved ``(task, epoch)`` is skipped, so a run
        stopped mid-epoch continues exactly.

        A state from another world size is an error. With ``allow_world_change=True``
        only the master seed and the last ``(task, epoch)`` are taken from it (RNG,
        generator and sampler states are not, since the ranks no longer match):
        continue from the next epoch boundary with ``reseed(1, next_epoch)``, whose
        streams are derived afresh for the new world.

        >>> s = Seeder(); s.init(1); s.reseed(1, 0); st = s.state_dict()
        >>> s.load_state_dict(st)
        """
        self._require_init("load_state_dict")
        entry, changed = self._check(state, allow_world_change)
        saved_master = entry["master_seed"]
        if self._explicit and saved_master != self._master:
            warnings.warn(
                f"init() got master seed {self._master} but the checkpoint was made with {saved_master}; "
                "continuing with the checkpoint's seed",
                SeederWarning,
                stacklevel=2,
            )
        if saved_master != self._master and self._topology.rank == 0:  # type: ignore[union-attr]
            logger.info("Using seed: %d (from checkpoint)", saved_master)
        last = entry["last_reseed"]
        if changed:
            self._master = saved_master
            self._last = tuple(last) if last is not None else None  # type: ignore[assignment]
            self._resume_pending = None
            logger.info(
                "seeder state from a world of %d loaded into a world of %d: master seed %d and last reseed %s restored, "
                "RNG and participant states left as they are; continue with reseed() of the next epoch",
                entry["world_size"], self._topology.world_size, saved_master, self._last)  # type: ignore[union-attr]
            return
        # Order: participants whose state nothing validated (a registered callable's owner without
        # check_state_dict) first, each snapshotted and put back if anything fails; then participants that
        # validated their state (their check_state_dict, or seeder's adapters); then the global RNGs, validated
        # field by field, where nothing can fail any more. Snapshots only where needed: one is not free (NumPy's
        # get_state) and a participant's state_dict may have side effects (a DALI pipeline checkpoints itself).
        live = self._stateful()
        unchecked = [k for k, p in live.items() if not _validates(p)]
        snapshot = self._capture([live[k] for k in unchecked], rngs=False)
        applied: List[str] = []
        try:
            for key in unchecked + [k for k in live if k not in unchecked]:
                live[key].load_state_dict(entry["participants"][key])
                applied.append(key)
            for adapter in self._global_adapters():
                adapter.set_state(entry["rngs"][adapter.name])
        except Exception as exc:
            stuck = [f"{k} (already loaded)" for k in applied if k not in unchecked] + self._restore(snapshot)
            kept = "every RNG and participant was put back as it was before load_state_dict"
            if stuck:
                kept += f", except {'; '.join(stuck)}"
            raise StateError(f"loading the seeder state failed ({type(exc).__name__}: {exc}); {kept}") from exc
        self._master = saved_master
        self._last = tuple(last) if last is not None else None  # type: ignore[assignment]
        self._resume_pending = self._last
        if self._last is not None:
            self._seen.add(self._last)

    # -------------------------------------------------------------- fork_rng
    def _capture(self, members: List[Any], rngs: bool = True) -> Tuple[Any, ...]:
        """A snapshot for :meth:`_restore`: the global RNGs (if ``rngs``), ``members``' states, bookkeeping."""
        globals_ = [(a, a.get_state()) for a in self._global_adapters()] if rngs else []
        if not members:
            return globals_, [], self._master, self._last, self._resume_pending, set(self._seen)
        with warnings.catch_warnings():  # a snapshot is no checkpoint: participants' checkpoint advice does not apply
            warnings.simplefilter("ignore", SeederWarning)
            parts = [(p, p.state_dict() if isinstance(p, _Generator) and p.adapter is not None
                      else copy.deepcopy(p.state_dict())) for p in members]
        return globals_, parts, self._master, self._last, self._resume_pending, set(self._seen)

    def _restore(self, snapshot: Tuple[Any, ...]) -> List[str]:
        """Put a :meth:`_capture` back, as much as possible; return what could not be restored."""
        rngs, parts, self._master, self._last, self._resume_pending, self._seen = snapshot
        failed = []
        for obj, st in [(a, s) for a, s in rngs] + parts:
            try:
                if isinstance(obj, RNGAdapter):
                    obj.set_state(st)
                else:
                    obj.load_state_dict(st)
            except Exception as exc:  # keep restoring the others
                failed.append(f"{getattr(obj, 'name', None) or _describe(getattr(obj, 'gen', obj))} ({exc})")
        if failed:
            logger.error("seeder could not restore the state of: %s", "; ".join(failed))
        return failed

    @contextlib.contextmanager
    def fork_rng(self) -> Iterator[None]:
        """Run a block with every RNG this seeder knows isolated; restore them all afterwards.

        Python ``random``, NumPy, torch CPU, every accelerator device and the registered
        generators (objects, and callables whose owner has ``state_dict``/``load_state_dict``)
        are saved on entry and put back on exit, also when the block raises; so are the
        last reseed and the resume marker. Samplers and DALI pipelines are not RNGs: they
        keep their positions. Works before :meth:`init` too. A registered plain callable
        has no state to restore: if the block reseeds, that warns.

        >>> import random
        >>> s = Seeder(); s.init(1); s.reseed(1, 0)
        >>> with s.fork_rng():
        ...     inside = random.random()
        >>> inside == random.random()
        True
        """
        snapshot = self._capture([p for p in self._stateful().values() if isinstance(p, _Generator)])
        try:
            yield
        finally:
            reseeded = self._last != snapshot[3] or self._seen != snapshot[5]
            failed = self._restore(snapshot)
            if failed:
                warnings.warn(f"fork_rng() could not restore: {'; '.join(failed)}", SeederWarning, stacklevel=3)
            if reseeded:
                for member in self._stateless_generators():
                    warnings.warn(
                        f"fork_rng(): the block reseeded, and registered generator {_describe(member.gen)} is a plain "
                        "callable whose state cannot be restored; register the RNG object itself or give its owner "
                        "state_dict()/load_state_dict()",
                        SeederWarning,
                        stacklevel=3,
                    )


_STATE_KEYS = frozenset({"format", "version", "derivation_version", "master_seed", "world_size", "rank", "last_reseed",
                         "rngs", "participants"})


def _validates(participant: Any) -> bool:
    """Whether ``participant``'s state was checked by :meth:`Seeder.check_state_dict` (so loading it cannot fail)."""
    if isinstance(participant, _Generator):
        return participant.adapter is not None or callable(getattr(participant.owner, "check_state_dict", None))
    return callable(getattr(participant, "check_state_dict", None))


def _world_message(saved: int, now: int) -> str:
    return (f"the checkpoint was saved by a world of {saved} process(es), this run has {now}; resume with the same "
            f"world size for an exact continuation, or pass allow_world_change=True to load_state_dict to keep the "
            f"master seed and epoch position and continue from the next epoch boundary")


def _flag(value: Any, name: str, env_name: str) -> bool:
    """A bool argument, or when it is None the boolean in ``$env_name`` (1/true/yes/on, 0/false/no/off)."""
    if value is not None:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True, False or None (read ${env_name}), got {type(value).__name__} {value!r}")
        return value
    raw = os.environ.get(env_name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{env_name}={raw!r} is not a boolean; set it to 1 or 0, or unset it")


def _resolve(member: Any) -> Any:
    return member() if isinstance(member, weakref.ref) else member
