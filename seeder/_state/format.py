"""Seeder state: the state format, and reading and checking a state.

:func:`make_state` and :func:`gather` write one process's state and every rank's;
:func:`own_entry`, :func:`check_header` and :func:`check_entry` read one back and check it,
changing nothing. The run's bookkeeping a state holds is :mod:`seeder._state.run`; loading
(plan, validate, apply or roll back) is :mod:`seeder._state.plan`.

Example:
    >>> import seeder
    >>> s = seeder.Seeder(); s.init(1); s.reseed(1, 0)
    >>> st = s.state_dict(); st["format"], st["version"]
    ('seeder', 1)
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from seeder._checks import check_bool, is_int
from seeder._errors import StateError
from seeder._seeding import derive
from seeder._seeding.distributed import process_group_active
from seeder._seeding.participant import LoadContext, check_part, validates_state
from seeder._seeding.rngbase import RNGAdapter
from seeder._state.run import RunState
from seeder._state.streams import merge_entries, with_gathered_stops
from seeder._state.world import world_message

__all__ = [
    "STATE_FORMAT_VERSION",
    "GATHERED_FORMAT",
    "STATE_KEYS",
    "make_state",
    "gather",
    "own_entry",
    "check_header",
    "described_run",
    "check_entry",
]

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
        ranks = _gathered_ranks(state)
        world = len(ranks)
        if world != world_size:
            if allow_world_change:
                return merge_entries(ranks), True
            raise StateError(world_message(world, world_size))
        return with_gathered_stops(ranks, rank), False
    if not isinstance(state, dict) or state.get("format") != "seeder":
        raise StateError(
            "not a seeder state: pass the dict returned by seeder.state_dict() or "
            "seeder.gather_state_dict()"
        )
    changed = state.get("world_size") != world_size
    return state, bool(changed and allow_world_change)


def _gathered_ranks(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The rank entries of a gathered state, once its header and their order are checked."""
    # not True, not 1.0
    if not (type(state.get("version")) is int and state["version"] == STATE_FORMAT_VERSION):
        raise _unsupported("gathered seeder state", state.get("version"))
    if set(state) != {"format", "version", "world_size", "ranks"}:
        raise StateError(
            "gathered seeder state must have exactly the keys format, version, world_size, ranks"
        )
    ranks, world = state["ranks"], state["world_size"]
    if not is_int(world) or world < 1:
        raise StateError(f"gathered state['world_size'] must be a positive int, got {world!r}")
    if not isinstance(ranks, list) or len(ranks) != world:
        raise StateError(f"gathered state['ranks'] must be a list of {world} rank states")
    for i, entry in enumerate(ranks):
        _check_rank_entry(entry, i, world, ranks[0])
    return ranks


def _check_rank_entry(entry: Any, i: int, world: int, first: dict[str, Any]) -> None:
    """Raise :class:`StateError` unless ``entry`` is rank ``i``'s state of the run of ``first``."""
    if (
        not isinstance(entry, dict)
        or entry.get("format") != "seeder"
        or entry.get("rank") != i
        or entry.get("world_size") != world
    ):
        raise StateError(
            f"gathered state['ranks'][{i}] is not rank {i}'s seeder state in a world of {world}"
        )
    if entry.get("master_seed") != first.get("master_seed"):
        raise StateError(
            f"gathered state['ranks'][{i}] has master seed {entry.get('master_seed')!r}, rank 0 "
            f"has {first.get('master_seed')!r}; the file mixes states of different runs"
        )


def _as_state_error(check: Any, *args: Any) -> None:
    try:
        check(*args)
    except (TypeError, ValueError) as exc:
        raise StateError(str(exc)) from None


def check_header(entry: dict[str, Any]) -> None:
    """Raise :class:`StateError` unless ``entry``'s format, keys, master seed, world, rank and last
    reseed are valid."""
    _check_versions(entry)
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
    _check_last_reseed(entry["last_reseed"])


def _check_versions(entry: dict[str, Any]) -> None:
    """Raise :class:`StateError` unless ``entry`` has the state and derivation versions this
    seeder reads."""
    version, derivation = entry.get("version"), entry.get("derivation_version")
    # True == 1, 1.0 == 1: a version is an int
    if not (type(version) is int and version == STATE_FORMAT_VERSION):
        raise _unsupported("seeder state", version)
    if not (type(derivation) is int and derivation == derive.DERIVATION_VERSION):
        raise StateError(
            f"the checkpoint used seed derivation v{derivation!r}, this seeder derives "
            f"v{derive.DERIVATION_VERSION}; install the seeder version that wrote it to continue "
            "the same streams"
        )


def _check_last_reseed(last: Any) -> None:
    """Raise :class:`StateError` unless ``last`` is ``None`` or ``[task_id, epoch]``."""
    if last is None:
        return
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
    load: Optional[LoadContext] = None,
) -> None:
    """Raise :class:`StateError` unless a header-checked ``entry`` of this world loads into this
    process; change nothing. Participants check their parts against ``load``."""
    if entry["world_size"] != world_size:
        raise StateError(world_message(entry["world_size"], world_size))
    if entry["rank"] != rank:
        raise StateError(
            f"this is rank {entry['rank']}'s state but this process is rank {rank}; load each "
            f"rank's own entry"
        )
    _check_rngs(entry["rngs"], adapters)
    _check_parts(entry["participants"], stateful, load)


def _check_rngs(rngs: Any, adapters: list[RNGAdapter]) -> None:
    """Raise :class:`StateError` unless ``rngs`` holds a valid state for each of ``adapters`` and
    nothing else."""
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


def _check_parts(parts: Any, stateful: dict[str, Any], load: Optional[LoadContext]) -> None:
    """Raise :class:`StateError` unless ``parts`` holds a part for each of ``stateful`` and
    nothing else, each accepted by its participant (against the run ``load``)."""
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
                check_part(obj, parts[key], load)
            except StateError as exc:
                raise StateError(f"state['participants'][{key!r}]: {exc}") from None


def _other_rngs(rngs: dict[str, Any], adapters: list[RNGAdapter]) -> None:
    raise StateError(
        f"the checkpoint has RNG states for {sorted(rngs)} but this process has "
        f"{sorted(a.name for a in adapters)}; resume on the same kind of machine (same "
        f"accelerators visible)"
    )
