"""The :class:`Seeder`: the run (master seed, rank, world), ``reseed``, and the state of the run.

``core`` imports no feature. Samplers, loaders, DALI pipelines and generators join
a seeder through one protocol (:mod:`seeder._seeding.participant`); the methods about who
takes part (``register_generator``, ``join``, ``participants``, ...) are those of
:class:`seeder._seeding.registry.Membership`; those about its state (``state_dict``,
``gather_state_dict``, ``check_state_dict``, ``load_state_dict``) are those of
:class:`Persistence`. The state format lives in :mod:`seeder._state.format`, loading in
:mod:`seeder._state.plan`.

Example:
    >>> s = Seeder()
    >>> s.init(master_seed=42)
    >>> s.reseed(0, 0)
    >>> s.get_master_seed()
    42
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Optional, cast

from seeder import _hooks as hooks
from seeder._checks import check_bool, check_int, is_bool
from seeder._errors import SeederWarning
from seeder._seeding import derive, foreign
from seeder._seeding.announce import show_drawn_seed
from seeder._seeding.derive import Domain, check_key
from seeder._seeding.determinism import enforce_determinism
from seeder._seeding.distributed import Topology, agree_master_seed, discover, refuse_in_worker
from seeder._seeding.participant import warn_unsaved_generators
from seeder._seeding.registry import Membership, Registry
from seeder._seeding.rngbase import RNGAdapter
from seeder._seeding.rngs import global_adapters
from seeder._state import format as state
from seeder._state import rollback
from seeder._state.pending import PendingParts
from seeder._state.plan import check_state, load_state
from seeder._state.resumecheck import ResumeCheck
from seeder._state.run import RunState, start_reseed, tear

__all__ = ["Seeder", "Persistence", "ENV_SEED", "ENV_DETERMINISTIC", "ENV_SNAPSHOT_DIR"]

if TYPE_CHECKING:
    from seeder._seeding.participant import GeneratorParticipant

logger = logging.getLogger("seeder")

ENV_SEED = derive.ENV_SEED
#: Environment variable that turns on deterministic mode when ``init`` gets ``deterministic=None``.
ENV_DETERMINISTIC = "SEEDER_DETERMINISTIC"
#: The environment variable of a snapshot directory: the tools' hook takes the snapshot at ``init``
#: in the runs they start (``seeder run``); a run without it warns.
ENV_SNAPSHOT_DIR = "SEEDER_SNAPSHOT_DIR"


class Persistence:
    """The part of :class:`Seeder` about its state: save it, gather every rank's, check, load.

    A base class of ``Seeder``, which provides the run, its lock, its participants and
    ``_require_init``, as for :class:`seeder._seeding.registry.Membership` (who takes part).

    Example:
        >>> s = Seeder(); s.init(1); isinstance(s, Persistence)
        True
    """

    if TYPE_CHECKING:  # provided by Seeder, the one subclass
        run: RunState
        pending: PendingParts
        _lock: threading.RLock

        def _require_init(self, what: str) -> Topology: ...

        def global_adapters(self) -> list[RNGAdapter]: ...

        def stateful(self) -> dict[str, Any]: ...

        def generators(self) -> list[GeneratorParticipant]: ...

    def _seeder(self) -> Seeder:
        """``self`` as the :class:`Seeder` it is (``Persistence`` is only its base)."""
        return cast("Seeder", self)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue this process's randomness as if never stopped.

        Returns:
            The master seed, world, rank, last reseed, every global and accelerator RNG,
            registered generators and participants (samplers, loaders, pipelines): plain values
            and tensors that load with ``torch.load(weights_only=True)``.

        Raises:
            RuntimeError: :meth:`init` was not called, or the last :meth:`reseed` raised.
            seeder.StateError: a loaded part is still waiting for a loader or generator that
                was not built.

        Example:
            >>> s = Seeder(); s.init(1); s.reseed(1, 0)
            >>> sorted(s.state_dict())[:3]
            ['derivation_version', 'format', 'last_reseed']
        """
        topo = self._require_init("state_dict")
        foreign.check_torch_seed(self._seeder(), "seeder.state_dict()")
        with self._lock:  # make_state refuses a torn run (a reseed that raised)
            if self.pending.parts:
                self.pending.require_claimed("seeder.state_dict", ())
            made = state.make_state(
                self.run, topo.world_size, topo.rank, self.global_adapters(), self.stateful()
            )
            generators = self.generators()
            if generators:
                warn_unsaved_generators(generators)
            return made

    def gather_state_dict(self, dst: int = 0) -> Optional[dict[str, Any]]:
        """Every rank's :meth:`state_dict` in one dict on rank ``dst`` (a collective).

        Args:
            dst: the rank that receives the states.

        Returns:
            On rank ``dst``, ``{"world_size": ..., "ranks": [...], ...}``; ``None`` on the others.

        Raises:
            RuntimeError: :meth:`init` was not called.
            ValueError: ``dst`` is not a rank of this world.

        Example:
            >>> s = Seeder(); s.init(1); s.reseed(1, 0)
            >>> g = s.gather_state_dict(); g["world_size"], len(g["ranks"])
            (1, 1)
            >>> s.load_state_dict(g)
        """
        topo = self._require_init("gather_state_dict")
        check_int(dst, "dst", low=0, high=topo.world_size - 1)
        return state.gather(self.state_dict(), topo.world_size, topo.rank, dst)

    def check_state_dict(self, state_: Any, *, allow_world_change: bool = False) -> None:
        """Check that :meth:`load_state_dict` would accept ``state_``; change nothing.

        Args:
            state_: a :meth:`state_dict` or :meth:`gather_state_dict`.
            allow_world_change: accept a state of another world size (see
                :meth:`load_state_dict`).

        Raises:
            seeder.StateError: what cannot be loaded, and what to do.

        Example:
            >>> s = Seeder(); s.init(1); st = s.state_dict(); st["version"] = 99
            >>> s.check_state_dict(st)
            Traceback (most recent call last):
            ...
            seeder.StateError: seeder state format 99 is not supported by this version ...
        """
        with self._lock:
            check_state(self._seeder(), state_, allow_world_change)

    def load_state_dict(self, state_: dict[str, Any], *, allow_world_change: bool = False) -> None:
        """Validate ``state_`` completely, then restore every RNG and participant.

        Takes one process's :meth:`state_dict` or a :meth:`gather_state_dict` (this rank's entry
        is used). Raises before changing anything. Parts for loaders or generators not built yet
        wait for them (:mod:`seeder._state.pending`). The next :meth:`reseed` of the saved
        ``(task, epoch)`` is skipped, so a run stopped mid-epoch continues exactly. With
        ``allow_world_change=True`` a state from another world size gives only the master seed
        and the last ``(task, epoch)``: continue from the next epoch boundary.

        Args:
            state_: a :meth:`state_dict` or :meth:`gather_state_dict`.
            allow_world_change: accept a state of another world size.

        Raises:
            seeder.StateError: what cannot be loaded, and what to do; nothing was changed.
            RuntimeError: called in a ``DataLoader`` worker process.

        Example:
            >>> s = Seeder(); s.init(1); s.reseed(1, 0); st = s.state_dict()
            >>> s.load_state_dict(st)
        """
        refuse_in_worker("seeder.load_state_dict()")
        with self._lock:
            load_state(self._seeder(), state_, allow_world_change)


class Seeder(Membership, Persistence):
    """One master seed and everything derived from it, for one process.

    The module-level functions of :mod:`seeder` are the methods of one default
    instance; create your own ``Seeder()`` to keep state apart (tests, libraries).

    Example:
        >>> s = Seeder()
        >>> s.init(7, ngpus=1, local_rank=0)
        >>> s.get_seed(1, 2) == s.get_seed(1, 2)
        True
        >>> s.rank, s.world_size, s.local_rank, s.last_reseed
        (0, 1, 0, None)
    """

    def __init__(self) -> None:
        self.run = RunState()
        self.explicit = False  # whether the master seed was given (argument or $SEEDER_SEED)
        self._topology: Optional[Topology] = None
        self._adapters: Optional[list[RNGAdapter]] = None
        self.registry = Registry()
        self.pending = PendingParts()  # loaded state for loaders and generators not built yet
        #: The global RNGs as the last load left them, for a participant resuming inside an epoch to
        #: compare.
        self.resume_check = ResumeCheck()
        # one call at a time changes or reads the streams (no torn state_dict)
        self._lock = threading.RLock()
        #: Whether this is the module-level seeder (:func:`seeder.default_seeder`): only its
        #: ``init`` watches the process (frameworks' seeding routed) and emits
        #: :data:`seeder._hooks.INIT` (the tools' callbacks, in the runs they start).
        self.is_default = False

    def init(
        self,
        master_seed: Optional[int] = None,
        ngpus: Optional[int] = None,
        local_rank: Optional[int] = None,
        *,
        rank: Optional[int] = None,
        deterministic: Optional[bool] = None,
        snapshot_dir: None = None,
    ) -> None:
        """Start a fresh run from one master seed.

        As in NVIDIA's seeder, registered generators are dropped; participants that joined stay
        and follow the new run. All ranks agree on the master seed; seeds use the global rank.
        An error leaves the seeder unchanged. See docs/quickstart.md.

        Args:
            master_seed: the run's master seed. ``None`` reads ``$SEEDER_SEED``, else draws one
                from OS entropy and logs it (rank 0 also writes it to stderr).
            ngpus: the world size (processes over all nodes); ``None`` discovers it.
            local_rank: the rank on this node (informational); ``None`` discovers it.
            rank: the global rank; ``None`` discovers it (docs/distributed.md).
            deterministic: turn on deterministic mode; ``None`` reads ``$SEEDER_DETERMINISTIC``.
            snapshot_dir: only ``None``: ``init`` takes no environment snapshot (take it with
                ``seeder.env.capture_environment(dir)``, ``seeder env snapshot DIR``, or run
                under ``seeder run`` with ``$SEEDER_SNAPSHOT_DIR``; a run that is not warns).

        Raises:
            TypeError: an argument of the wrong type, or a ``snapshot_dir``.
            ValueError: a value out of range, or a bad ``$SEEDER_SEED``,
                ``$SEEDER_DETERMINISTIC`` or ``$SEEDER_FOREIGN_SEEDING``.
            RuntimeError: ranks were given different master seeds, or several processes got no
                seed and have no process group to agree on one.

        Example:
            >>> s = Seeder(); s.init(1234, ngpus=1, local_rank=0); s.get_master_seed()
            1234
        """
        seed, explicit = _master_seed(master_seed)
        if self.is_default:  # its init watches seeding calls: a bad setting fails before any
            foreign.check_environment()
        deterministic = _init_options(ngpus, local_rank, rank, deterministic, snapshot_dir)
        topology = discover(rank, ngpus, local_rank)
        seed, explicit = agree_master_seed(seed, explicit, topology)
        with self._lock:
            # may raise: nothing set yet
            _announce(seed, explicit, topology, deterministic)
            run, mark, pending = RunState(master=seed), self.registry.mark(), PendingParts()
            try:
                dropped = self.registry.drop_registered()
            except BaseException:
                self.registry.rollback(mark)
                raise
            self.pending, self.run, self.explicit, self._topology = pending, run, explicit, topology
        if dropped:
            logger.debug(
                "init(): %d registered generator(s) dropped (a fresh run, as in NVIDIA's seeder)",
                dropped,
            )
        if self.is_default:  # frameworks' seeding routed; the tools' callbacks, where installed
            foreign.watch(self)
            hooks.emit(hooks.INIT, seeder=self)

    def reset(self) -> None:
        """Forget the master seed, the last reseed and every participant, as a new ``Seeder``.

        Example:
            >>> s = Seeder(); s.init(1); s.reset(); s.initialized
            False
        """
        is_default = self.is_default
        self.__init__()  # type: ignore[misc]  # mypy refuses __init__ called on an instance
        self.is_default = is_default

    @property
    def initialized(self) -> bool:
        """Whether :meth:`init` has been called (or :meth:`reset` since).

        Example:
            >>> s = Seeder(); s.initialized
            False
        """
        return self.run.master is not None

    def _require_init(self, what: str) -> Topology:
        """The run's topology; ``RuntimeError`` naming ``what`` if :meth:`init` was not called."""
        if self._topology is None:
            raise RuntimeError(
                f"seeder.{what}() called before seeder.init(); call "
                f"seeder.init(master_seed=...) first"
            )
        return self._topology

    def get_master_seed(self) -> int:
        """The master seed of this run.

        Returns:
            The seed given to :meth:`init`, read from ``$SEEDER_SEED``, drawn, or loaded with a
            state.

        Raises:
            RuntimeError: :meth:`init` was not called.

        Example:
            >>> s = Seeder(); s.init(42); s.get_master_seed()
            42
        """
        self._require_init("get_master_seed")
        master = self.run.master
        assert master is not None  # init and load_state_dict set it with the topology
        return master

    @property
    def rank(self) -> int:
        """The global rank used in derivation. ``RuntimeError`` before :meth:`init`."""
        return (self._topology or self._require_init("rank")).rank

    @property
    def world_size(self) -> int:
        """The processes over all nodes. ``RuntimeError`` before :meth:`init`."""
        return (self._topology or self._require_init("world_size")).world_size

    @property
    def local_rank(self) -> int:
        """The rank on this node (informational). ``RuntimeError`` before :meth:`init`."""
        return self._require_init("local_rank").local_rank

    @property
    def last_reseed(self) -> Optional[tuple[int, int]]:
        """``(task_id, epoch)`` of the last :meth:`reseed` (or a loaded state's), or ``None``."""
        return self.run.last

    def get_seed(
        self, task_id: int, epoch: int = 0, *, shared: bool = False, stream: int = 0
    ) -> int:
        """The 64-bit seed that :meth:`reseed` uses, touching no RNG.

        Args:
            task_id: the task (0 initialisation, 1 training, by NVIDIA's convention).
            epoch: the epoch.
            shared: ``True`` for the seed equal on all ranks, ``False`` for this rank's.
            stream: 0 for the global RNGs; registered generator ``k`` (from 1, in registration
                order since ``init``) uses ``k``.

        Returns:
            A seed in ``[0, 2**64)``.

        Raises:
            RuntimeError: :meth:`init` was not called.
            TypeError: an argument that is not an int (or a bool for ``shared``).
            ValueError: a negative or too large key word.

        Example:
            >>> s = Seeder(); s.init(42)
            >>> s.get_seed(1, 0) != s.get_seed(1, 1)
            True
        """
        self._require_init("get_seed")
        check_bool(shared, "shared")
        return self.stream_seed(
            check_key(task_id, "task_id"),
            check_key(epoch, "epoch"),
            shared=shared,
            stream=check_key(stream, "stream"),
        )

    def stream_seed(self, task_id: int, epoch: int, *, shared: bool, stream: int) -> int:
        """:meth:`get_seed` for arguments already checked (the hot path of :meth:`reseed`).

        Example:
            >>> s = Seeder(); s.init(42)
            >>> s.stream_seed(1, 0, shared=False, stream=0) == s.get_seed(1, 0)
            True
        """
        topology, master = self._topology, self.run.master
        assert topology is not None and master is not None  # the callers checked init
        domain, rank = (Domain.SHARED, 0) if shared else (Domain.RANK, topology.rank)
        return derive.stream_seeds(master, int(domain), task_id, epoch, rank).seed(stream)[0]

    def derive(
        self,
        domain: int,
        task_id: int = 0,
        epoch: int = 0,
        *,
        rank: Optional[int] = None,
        stream: int = 0,
    ) -> int:
        """A seed of any domain (:class:`seeder._seeding.derive.Domain`) for this master seed.

        Args:
            domain: what the seed is for.
            task_id: the task.
            epoch: the epoch.
            rank: the rank in the key; ``None`` for this process's.
            stream: the stream.

        Returns:
            A seed in ``[0, 2**64)``.

        Raises:
            RuntimeError: :meth:`init` was not called.

        Example:
            >>> s = Seeder(); s.init(42)
            >>> s.derive(Domain.WORKER, 1, 0, stream=3) == s.derive(Domain.WORKER, 1, 0, stream=3)
            True
        """
        topo, master = self._require_init("derive"), self.get_master_seed()
        return derive.derive_seed(
            master, domain, task_id, epoch, topo.rank if rank is None else rank, stream
        )

    def reseed(self, task_id: int, epoch: int = 0) -> None:
        """Seed ``random``, NumPy, torch CPU, every accelerator, then every participant.

        ``reseed(0, 0)`` before building the model, ``reseed(1, epoch)`` at each epoch
        start. Right after :meth:`load_state_dict` a reseed of the saved ``(task, epoch)``
        is skipped (the restored states already continue that epoch). Repeating a
        ``(task, epoch)`` in one process repeats its streams and warns once. If a participant
        raises, :meth:`state_dict` refuses until a reseed completes (docs/checkpoints.md).

        Args:
            task_id: the task (0 initialisation, 1 training, by NVIDIA's convention).
            epoch: the epoch.

        Raises:
            RuntimeError: :meth:`init` was not called.
            TypeError: an argument that is not an int.
            ValueError: a negative or too large argument.
            seeder.StateError: a loaded part is still waiting for a loader or generator that
                was not built.

        Example:
            >>> import random
            >>> s = Seeder(); s.init(3); s.reseed(1, 0); a = random.random()
            >>> t = Seeder(); t.init(3); t.reseed(1, 0); a == random.random()
            True
        """
        self._require_init("reseed")
        key = (check_key(task_id, "task_id"), check_key(epoch, "epoch"))
        foreign.check_torch_seed(self, f"seeder.reseed({key[0]}, {key[1]})")
        with self._lock:
            self.pending.require_claimed("seeder.reseed", key)
            # the global RNGs; None: resuming inside this (task, epoch)
            members = start_reseed(self, key)
            if members is None:
                return
            try:
                # here, so that participants' warnings point at the caller of reseed
                for member in members:
                    member.seeder_reseed(self, key[0], key[1])
            except BaseException as exc:
                tear(self.run, key, member, exc)
                raise
            self.run.close_reseed(key)

    def global_adapters(self) -> list[RNGAdapter]:
        """Adapters of the process-global RNGs: Python, NumPy, torch CPU, each accelerator present.

        Returns:
            One adapter per RNG, made at the first call.

        Example:
            >>> [a.name for a in Seeder().global_adapters()][:3]
            ['python', 'numpy', 'torch']
        """
        if self._adapters is None:
            self._adapters = global_adapters()
        return self._adapters

    def fork_rng(self) -> AbstractContextManager[None]:
        """Run a block with every RNG this seeder knows (global, accelerators, registered) restored
        afterwards.

        Returns:
            A context manager.

        Example:
            >>> import random; s = Seeder(); s.init(1); s.reseed(1, 0)
            >>> with s.fork_rng():
            ...     inside = random.random()
            >>> inside == random.random()
            True
        """
        return rollback.fork_rng(self)


def _init_options(
    ngpus: Any, local_rank: Any, rank: Any, deterministic: Any, snapshot_dir: Any
) -> bool:
    """Check ``init``'s arguments; return ``deterministic`` with the environment's default
    applied."""
    _no_snapshot(snapshot_dir)
    for name, value in (("ngpus", ngpus), ("local_rank", local_rank), ("rank", rank)):
        if value is not None:
            check_key(value, name)
    if ngpus is not None and ngpus < 1:
        raise ValueError(f"ngpus must be >= 1 (the number of processes in all nodes), got {ngpus}")
    return _flag(deterministic, "deterministic", ENV_DETERMINISTIC)


def _announce(seed: int, explicit: bool, topology: Topology, deterministic: bool) -> None:
    """``init``'s side effects, those that can fail first: deterministic mode, then the seed in the
    log (rank 0). Raises before changing anything of the seeder."""
    if deterministic:
        enforce_determinism()
    if topology.rank == 0:
        how = "given" if explicit else "drawn from OS entropy"
        logger.info("Using seed: %d (%s; rank 0 of %d)", seed, how, topology.world_size)
        if not explicit:
            show_drawn_seed(seed)


def _master_seed(master_seed: Optional[int]) -> tuple[int, bool]:
    """``(seed, explicit)``: the argument, else ``$SEEDER_SEED``, else one drawn from OS entropy."""
    return derive.resolve_master_seed(master_seed, os.environ)


def _no_snapshot(snapshot_dir: Any) -> None:
    """Refuse a ``snapshot_dir``; warn when ``$SEEDER_SNAPSHOT_DIR`` asks for a snapshot that no
    tool's hook takes (a run not started by ``seeder run``)."""
    fix = (
        "take it with seeder.env.capture_environment(dir) on rank 0, or start the run with "
        "`seeder run` (docs/environment.md)"
    )
    if snapshot_dir is not None:
        raise TypeError(
            f"init() takes no environment snapshot (snapshot_dir={snapshot_dir!r}): {fix}; the "
            "seeder was not changed"
        )
    if os.environ.get(ENV_SNAPSHOT_DIR) and not hooks.listening(hooks.INIT):
        warnings.warn(
            f"${ENV_SNAPSHOT_DIR} is set but this run takes no environment snapshot: {fix}",
            SeederWarning,
            stacklevel=4,
        )


def _flag(value: Any, name: str, env_name: str) -> bool:
    """A bool argument, or when it is None the boolean in ``$env_name`` (1/true/yes/on,
    0/false/no/off)."""
    if value is not None:
        if not is_bool(value):
            raise TypeError(
                f"{name} must be True, False or None (read ${env_name}), got "
                f"{type(value).__name__} {value!r}"
            )
        return bool(value)
    raw = os.environ.get(env_name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{env_name}={raw!r} is not a boolean; set it to 1 or 0, or unset it")
