"""Seeder state: the run's bookkeeping, the state format, and reading and checking a state.

:class:`RunState` is a seeder's bookkeeping (master seed, last reseed, pending resume);
:func:`start_reseed` and :func:`tear` change it as ``reseed`` runs. :func:`make_state` and
:func:`gather` write one process's state and every rank's; :func:`own_entry`,
:func:`check_header` and :func:`check_entry` read one back and check it, changing nothing.
Loading (plan, validate, apply or roll back) is :mod:`seeder._state.plan`.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
    >>> st = s.state_dict(); st["format"], st["version"]
    ('seeder', 1)
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import TYPE_CHECKING, Any, Optional

import torch

from seeder._checks import check_bool, is_int
from seeder._errors import SeederWarning, StateError
from seeder._seeding import derive
from seeder._seeding.distributed import process_group_active
from seeder._seeding.participant import describe, validates_state
from seeder._seeding.rngbase import RNGAdapter
from seeder._state.streams import merge_entries
from seeder._state.world import world_message

if TYPE_CHECKING:
    from seeder._seeding.core import Seeder

__all__ = [
    "STATE_FORMAT_VERSION",
    "GATHERED_FORMAT",
    "STATE_KEYS",
    "RunState",
    "start_reseed",
    "tear",
    "make_state",
    "gather",
    "own_entry",
    "check_header",
    "described_run",
    "check_entry",
]

logger = logging.getLogger("seeder")

#: Version of the layout of :meth:`seeder.Seeder.state_dict`.
STATE_FORMAT_VERSION = 1
#: ``format`` tag of :meth:`seeder.Seeder.gather_state_dict` (every rank's state in one dict).
GATHERED_FORMAT = "seeder-gathered"
#: The keys of one process's state.
STATE_KEYS = frozenset(
    {
        "format",
        "version",
        "derivation_version",
        "master_seed",
        "world_size",
        "rank",
        "last_reseed",
        "rngs",
        "participants",
    }
)
_WHERE: dict[str, str] = {}  # how messages name an RNG's state, by its name


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


def start_reseed(seeder: Seeder, key: tuple[int, int]) -> Optional[list[Any]]:
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


def make_state(
    run: RunState, world_size: int, rank: int, adapters: list[RNGAdapter], stateful: dict[str, Any]
) -> dict[str, Any]:
    """One process's state: header, every global RNG, every stateful participant by key (refused for
    a torn run)."""
    if run.torn is not None:
        raise RuntimeError(f"seeder.state_dict() refused: {run.torn}")
    return {
        "format": "seeder",
        "version": STATE_FORMAT_VERSION,
        "derivation_version": derive.DERIVATION_VERSION,
        "master_seed": run.master,
        "world_size": world_size,
        "rank": rank,
        "last_reseed": list(run.last) if run.last is not None else None,
        "rngs": {a.name: a.get_state() for a in adapters},
        "participants": {k: p.state_dict() for k, p in stateful.items()},
    }


def gather(own: dict[str, Any], world: int, rank: int, dst: int) -> Optional[dict[str, Any]]:
    """Every rank's ``own`` state in one dict on rank ``dst`` (``None`` elsewhere); a collective
    under a process group."""
    if process_group_active():
        gathered: Optional[list[Any]] = [None] * world if rank == dst else None
        torch.distributed.gather_object(own, gathered, dst=dst)
        if rank != dst:
            return None
        assert gathered is not None  # rank dst received every rank's state
        ranks = list(gathered)
    elif world == 1:
        ranks = [own]
    else:
        raise RuntimeError(
            f"gather_state_dict() needs a torch.distributed process group for a world of {world} "
            f"processes; call torch.distributed.init_process_group() first, or save "
            f"seeder.state_dict() in one file per rank"
        )
    return {
        "format": GATHERED_FORMAT,
        "version": STATE_FORMAT_VERSION,
        "world_size": world,
        "ranks": ranks,
    }


def _unsupported(what: str, version: Any) -> StateError:
    return StateError(
        f"{what} format {version!r} is not supported by this version (which reads format "
        f"{STATE_FORMAT_VERSION}); load it with the seeder version that wrote it"
    )


def own_entry(
    state: Any, world_size: int, rank: int, allow_world_change: bool
) -> tuple[dict[str, Any], bool]:
    """This rank's single-process state in ``state`` (one process's, or gathered) and whether the
    world changed."""
    if type(allow_world_change) is not bool:
        allow_world_change = check_bool(allow_world_change, "allow_world_change")
    if isinstance(state, dict) and state.get("format") == GATHERED_FORMAT:
        # not True, not 1.0
        if not (type(state.get("version")) is int and state["version"] == STATE_FORMAT_VERSION):
            raise _unsupported("gathered seeder state", state.get("version"))
        if set(state) != {"format", "version", "world_size", "ranks"}:
            raise StateError(
                "gathered seeder state must have exactly the keys format, version, "
                "world_size, ranks"
            )
        ranks, world = state["ranks"], state["world_size"]
        if not is_int(world) or world < 1:
            raise StateError(f"gathered state['world_size'] must be a positive int, got {world!r}")
        if not isinstance(ranks, list) or len(ranks) != world:
            raise StateError(f"gathered state['ranks'] must be a list of {world} rank states")
        for i, entry in enumerate(ranks):
            if (
                not isinstance(entry, dict)
                or entry.get("format") != "seeder"
                or entry.get("rank") != i
                or entry.get("world_size") != world
            ):
                raise StateError(
                    f"gathered state['ranks'][{i}] is not rank {i}'s seeder state in a world "
                    f"of {world}"
                )
            if entry.get("master_seed") != ranks[0].get("master_seed"):
                raise StateError(
                    f"gathered state['ranks'][{i}] has master seed {entry.get('master_seed')!r}, "
                    f"rank 0 has {ranks[0].get('master_seed')!r}; the file mixes states of "
                    f"different runs"
                )
        if world != world_size:
            if allow_world_change:
                return merge_entries(ranks), True
            raise StateError(world_message(world, world_size))
        return ranks[rank], False
    if not isinstance(state, dict) or state.get("format") != "seeder":
        raise StateError(
            "not a seeder state: pass the dict returned by seeder.state_dict() or "
            "seeder.gather_state_dict()"
        )
    changed = state.get("world_size") != world_size
    return state, bool(changed and allow_world_change)


def _as_state_error(check: Any, *args: Any) -> None:
    try:
        check(*args)
    except (TypeError, ValueError) as exc:
        raise StateError(str(exc)) from None


def check_header(entry: dict[str, Any]) -> None:
    """Raise :class:`StateError` unless ``entry``'s format, keys, master seed, world, rank and last
    reseed are valid."""
    version, derivation = entry.get("version"), entry.get("derivation_version")
    # True == 1, 1.0 == 1: a version is an int
    if not (type(version) is int and version == STATE_FORMAT_VERSION):
        raise _unsupported("seeder state", version)
    if not (type(derivation) is int and derivation == derive.DERIVATION_VERSION):
        raise StateError(
            f"the checkpoint used seed derivation v{entry.get('derivation_version')!r}, this "
            f"seeder derives v{derive.DERIVATION_VERSION}; install the seeder version that wrote "
            f"it to continue the same streams"
        )
    if entry.keys() != STATE_KEYS:
        raise StateError(
            f"seeder state keys differ: missing {sorted(STATE_KEYS - set(entry))}, "
            f"unexpected {sorted(set(entry) - STATE_KEYS)}"
        )
    master = entry["master_seed"]
    # fast path; the full check words it
    if not (type(master) is int and 0 <= master <= derive.MAX_MASTER_SEED):
        _as_state_error(derive.check_master_seed, master, "state['master_seed']")
    for name in ("world_size", "rank"):
        value = entry[name]
        if not (type(value) is int and value >= 0) and (not is_int(value) or value < 0):
            raise StateError(f"state[{name!r}] must be a non-negative int, got {value!r}")
    last = entry["last_reseed"]
    if last is not None:
        if not (isinstance(last, list) and len(last) == 2):
            raise StateError("state['last_reseed'] must be None or [task_id, epoch]")
        for i, word in enumerate(last):
            if not (type(word) is int and 0 <= word <= derive.MAX_KEY):
                _as_state_error(derive.check_key, word, f"state['last_reseed'][{i}]")


def described_run(entry: dict[str, Any]) -> RunState:
    """The bookkeeping a header-checked ``entry`` describes: its master seed and last reseed."""
    last = entry["last_reseed"]
    return RunState(
        master=int(entry["master_seed"]),
        last=(int(last[0]), int(last[1])) if last is not None else None,
    )


def check_entry(
    entry: dict[str, Any],
    *,
    world_size: int,
    rank: int,
    adapters: list[RNGAdapter],
    stateful: dict[str, Any],
) -> None:
    """Raise :class:`StateError` unless a header-checked ``entry`` of this world loads into this
    process; change nothing."""
    if entry["world_size"] != world_size:
        raise StateError(world_message(entry["world_size"], world_size))
    if entry["rank"] != rank:
        raise StateError(
            f"this is rank {entry['rank']}'s state but this process is rank {rank}; load each "
            f"rank's own entry"
        )
    rngs = entry["rngs"]
    if not isinstance(rngs, dict):
        raise StateError("state['rngs'] must be a dict")
    for adapter in adapters:
        name = adapter.name
        if name not in rngs or len(rngs) != len(adapters):
            _other_rngs(rngs, adapters)
        adapter.check_state(
            rngs[name], _WHERE.get(name) or _WHERE.setdefault(name, f"state['rngs'][{name!r}]")
        )
    if rngs and not adapters:
        _other_rngs(rngs, adapters)
    parts = entry["participants"]
    if not isinstance(parts, dict):
        raise StateError("state['participants'] must be a dict")
    if parts.keys() != stateful.keys():
        raise StateError(
            f"the checkpoint holds state for {sorted(parts)} but this process has "
            f"{sorted(stateful)} registered; register the same generators, samplers, loaders and "
            f"pipelines in the same order before load_state_dict"
        )
    for key, obj in stateful.items():
        if validates_state(obj):
            try:
                obj.check_state_dict(parts[key])
            except StateError as exc:
                raise StateError(f"state['participants'][{key!r}]: {exc}") from None


def _other_rngs(rngs: dict[str, Any], adapters: list[RNGAdapter]) -> None:
    raise StateError(
        f"the checkpoint has RNG states for {sorted(rngs)} but this process has "
        f"{sorted(a.name for a in adapters)}; resume on the same kind of machine (same "
        f"accelerators visible)"
    )
