"""Loading a state saved on another number of processes: what elastic loaders carry over and what is
re-derived.

An elastic loader (``seeder.ElasticDataLoader``, :mod:`seeder.data._elastic_loader`) keeps a
global state (epoch, samples done): it loads on any world size. When every participant of a
process is an elastic loader or a registered generator, a state of another world size loads:
the loaders continue at the saved global step, and this rank's global RNGs and registered
generators are seeded from ``derive(ELASTIC_RANK, task, epoch, rank, stream=global step)``.
Anything else per rank (a default-mode loader or sampler, a DALI pipeline) keeps the state tied
to its world size.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Protocol

from seeder._errors import StateError
from seeder._seeding import derive
from seeder._seeding.participant import (
    GeneratorParticipant,
    LoadContext,
    check_part,
    is_elastic,
    load_part,
)
from seeder._seeding.rngbase import RNGAdapter
from seeder._state.rollback import capture, restore

__all__ = [
    "Streams",
    "world_change_allowed",
    "elastic_keys",
    "per_rank_keys",
    "check_moved",
    "move_world",
    "rederive_streams",
    "world_message",
    "WORLD_DOCS",
    "global_step",
]

logger = logging.getLogger("seeder")

#: The page that lists every way to resume on another world size (elastic loaders, streams).
WORLD_DOCS = "docs/checkpoints.md#another-world-size"


class Streams(Protocol):
    """What re-deriving a rank's streams reads of a seeder: its place in the world, its global RNGs
    and its registered generators."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def global_adapters(self) -> list[RNGAdapter]: ...

    def generators(self) -> list[GeneratorParticipant]: ...


def world_message(saved: int, now: int) -> str:
    """The error text for a checkpoint of another world size: the two ways on, and the page that
    lists the others.

    >>> world_message(2, 1).split("; ")[0]
    'the checkpoint was saved by a world of 2 process(es), this run has 1'
    """
    return (
        f"the checkpoint was saved by a world of {saved} process(es), this run has {now}; "
        f"resume with {saved} processes for an exact continuation, or pass "
        "allow_world_change=True to load_state_dict to continue from the next epoch boundary "
        f"(see {WORLD_DOCS})"
    )


def elastic_keys(stateful: dict[str, Any]) -> list[str]:
    """Keys of the elastic participants, if they and registered generators are all there is; else
    ``[]``.

    >>> elastic_keys({})
    []
    """
    if not stateful:
        return []
    keys = [k for k, p in stateful.items() if is_elastic(p)]
    rest = [
        k for k, p in stateful.items() if k not in keys and not isinstance(p, GeneratorParticipant)
    ]
    return keys if keys and not rest else []


def per_rank_keys(stateful: dict[str, Any]) -> list[str]:
    """Keys of the participants whose state belongs to one rank of one world size: neither elastic
    loaders nor registered generators (a default-mode loader, a sampler, a stream, a DALI pipeline).

    >>> per_rank_keys({})
    []
    """
    return [
        k
        for k, p in stateful.items()
        if not is_elastic(p) and not isinstance(p, GeneratorParticipant)
    ]


def world_change_allowed(stateful: dict[str, Any], allow_world_change: Any) -> Any:
    """``allow_world_change`` as loading takes it: ``True`` as well when the state is elastic
    (:func:`elastic_keys`).

    >>> world_change_allowed({}, False)
    False
    """
    return (
        True
        if allow_world_change is False and stateful and elastic_keys(stateful)
        else allow_world_change
    )


def check_moved(
    entry: dict[str, Any], stateful: dict[str, Any], load: Optional[LoadContext] = None
) -> None:
    """Raise :class:`StateError` unless every elastic loader of this process finds a valid state in
    ``entry`` (checked against the run ``load``)."""
    parts = entry["participants"]
    if not isinstance(parts, dict):
        raise StateError("state['participants'] must be a dict")
    for key in elastic_keys(stateful):
        if key not in parts:
            raise StateError(
                f"the checkpoint holds no state for {key!r} (an elastic loader of this process); "
                "create the same loaders in the same order before load_state_dict"
            )
        try:
            check_part(stateful[key], parts[key], load)
        except StateError as exc:
            raise StateError(f"state['participants'][{key!r}]: {exc}") from None


def rederive_streams(entry: dict[str, Any], seeder: Streams, step: int) -> tuple[int, int]:
    """Seed this rank's global RNGs and registered generators from ``derive(ELASTIC_RANK, task,
    epoch, rank, stream=step)``, ``(task, epoch)`` the last reseed of the checked ``entry`` (shared
    generators: rank ``2**32 - 1``); return ``(task, epoch)``. What :func:`move_world` does after
    moving the loaders, for a framework that moved them.

    >>> import seeder
    >>> s = seeder.Seeder(); s.init(5); s.reseed(1, 0)
    >>> rederive_streams({"master_seed": 5, "last_reseed": (1, 0)}, s, 3)
    (1, 0)
    """
    task, epoch = entry["last_reseed"] if entry["last_reseed"] is not None else (0, 0)
    gens = seeder.generators()
    words = 1 + max((g.stream for g in gens), default=0)
    master, rank, domain = entry["master_seed"], seeder.rank, int(derive.Domain.ELASTIC_RANK)
    own, shared = (
        derive.stream_seeds(master, domain, task, epoch, r, words).seed(step)
        for r in (rank, derive.MAX_KEY)
    )
    for adapter in seeder.global_adapters():
        adapter.seed(own[0])
    for gen in gens:
        gen.seed((shared if gen.shared else own)[gen.stream])
    return task, epoch


def global_step(participants: dict[str, Any], parts: dict[str, Any]) -> int:
    """The global step of a state of elastic participants: the first one's that has a step (a
    ``seeder.data.Mix`` has none of its own).

    Args:
        participants: the elastic participants, by key, in join order.
        parts: their states, by key.

    Returns:
        The step.

    Raises:
        StateError: none of them gives a step.

    >>> class Loader:
    ...     def elastic_step(self, state): return state["step"]
    >>> global_step({"loader.0": Loader()}, {"loader.0": {"step": 3}})
    3
    """
    for key, participant in participants.items():
        step = participant.elastic_step(parts[key])
        if step is not None:
            return int(step)
    raise StateError(
        f"the checkpoint's elastic parts {sorted(participants)} give no global step: build the "
        "elastic loader of the saved run too"
    )


def move_world(
    entry: dict[str, Any],
    loaders: dict[str, Any],
    seeder: Streams,
    load: Optional[LoadContext] = None,
) -> None:
    """Load a checked ``entry`` of another world size: the elastic loaders' global states, then
    this rank's global RNGs and registered generators seeded from
    ``derive(ELASTIC_RANK, task, epoch, rank, stream=global step)`` (shared generators: rank
    ``2**32 - 1``). Whatever stops it half way puts the loaders and global RNGs back.

    Args:
        entry: the checked state of one rank of the other world.
        loaders: the elastic loaders that move, by key, in join order (the first one's state
            gives the global step).
        seeder: the seeder loading it.
        load: the run ``entry`` describes, which the loaders check their parts against.

    Raises:
        StateError: a loader failed to load (the loaders and global RNGs are put back).
    """
    moving = list(loaders)
    adapters = seeder.global_adapters()
    saved = capture(adapters, list(loaders.values()))
    try:
        for key in moving:
            load_part(loaders[key], entry["participants"][key], load)
        step = global_step(loaders, entry["participants"])
        task, epoch = rederive_streams(entry, seeder, step)
    except BaseException as exc:
        failed = restore(saved)
        if not isinstance(exc, Exception):
            raise
        raise StateError(
            f"loading the elastic loader state failed ({type(exc).__name__}: {exc}); loaders and "
            f"global RNGs put back" + (f" except {', '.join(failed)}" if failed else "")
        ) from exc
    logger.info(
        "seeder state from a world of %d loaded into a world of %d: elastic loader(s) %s continue "
        "at global step %d of (task, epoch) %s; this rank's RNG streams re-derived from (master, "
        "task, epoch, rank %d, step)",
        entry["world_size"],
        seeder.world_size,
        ", ".join(moving),
        step,
        (task, epoch),
        seeder.rank,
    )
