"""Rank and world discovery, master-seed agreement across ranks.

Imports only :mod:`seeder._seeding.derive` of the package. ``torch.distributed`` is used only when a
process group is initialised; otherwise the caller's arguments and the
launcher's environment decide, in this order (the first that has a value wins):

====  =========================  =================================================================
1     explicit arguments         ``rank=``, ``ngpus=`` (world size), ``local_rank=``
2     a process group            ``torch.distributed.get_rank()`` / ``get_world_size()``
3     torchrun                   ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``
4     Open MPI (``mpirun``)      ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
                                 ``OMPI_COMM_WORLD_LOCAL_RANK``
5     MPICH / Intel MPI (Hydra)  ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``
6     SLURM (``srun``)           ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``
7     defaults                   rank = ``local_rank`` (one node) else 0, world size 1
====  =========================  =================================================================

Only one launcher is read: the first whose rank *and* size variables are both
set (an ``salloc`` shell has ``SLURM_NTASKS`` without ``SLURM_PROCID``; a batch
script may have ``SLURM_PROCID`` without ``SLURM_NTASKS``: neither is a launch).
Inner launchers come first: ``torchrun`` or ``mpirun`` inside a SLURM job wins
over the job's ``SLURM_*`` variables. With a process group, explicit values
must agree with it. See ``docs/distributed.md``.

Example:
    >>> t = discover(rank=None, world_size=None, local_rank=None)
    >>> t.rank, t.world_size, t.local_rank, t.rank_from
    (0, 1, 0, 'default')
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple, Optional, cast

import torch

from seeder._seeding.derive import MAX_KEY, parse_decimal

__all__ = [
    "refuse_in_worker",
    "Topology",
    "Launcher",
    "LAUNCHERS",
    "LAUNCHER_VARIABLES",
    "discover",
    "check_topology",
    "process_group_active",
    "agree_master_seed",
    "MAX_RANK",
    "MAX_WORLD_SIZE",
]

logger = logging.getLogger("seeder")

#: Largest global or local rank: the rank is one 32-bit word of every derived seed's key.
MAX_RANK = MAX_KEY
#: Largest world size (ranks ``0 .. MAX_RANK``).
MAX_WORLD_SIZE = MAX_KEY + 1


class Topology(NamedTuple):
    """Where this process stands: global rank, world size, rank on its node, and where each value
    came from.

    ``*_from`` is ``"rank="`` / ``"ngpus="`` / ``"local_rank="`` (an argument), ``"process group"``,
    an environment variable's name (``"SLURM_PROCID"``), ``"rank"`` (local rank taken as the rank)
    or ``"default"``.

    >>> Topology(2, 4, 0, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID").describe()
    'rank 2 (SLURM_PROCID) of 4 (SLURM_NTASKS), local rank 0 (SLURM_LOCALID)'
    """

    rank: int
    world_size: int
    local_rank: int
    rank_from: str = "default"
    world_from: str = "default"
    local_from: str = "default"

    def describe(self) -> str:
        """One line for the log: each value with its source."""
        return (
            f"rank {self.rank} ({self.rank_from}) of {self.world_size} ({self.world_from}), "
            f"local rank {self.local_rank} ({self.local_from})"
        )


class Launcher(NamedTuple):
    """The environment variables one launcher sets in every process it starts."""

    name: str
    rank: str
    size: str
    local: str


LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    Launcher(
        "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"
    ),
    Launcher("MPICH/Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    Launcher("SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)
"""Launchers in the order they are read (inner launchers before SLURM)."""

LAUNCHER_VARIABLES: tuple[str, ...] = tuple(v for launcher in LAUNCHERS for v in launcher[1:])
"""Every variable :func:`discover` reads: clear these for a process that must see no launcher."""


class _Found(NamedTuple):
    launcher: Launcher
    rank: int
    size: int
    local: Optional[int]


def process_group_active() -> bool:
    """Whether a default ``torch.distributed`` process group exists.

    >>> process_group_active()
    False
    """
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _env_int(name: str, low: int = 0, high: int = MAX_RANK) -> Optional[int]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    negative = (
        raw.strip().startswith("-") and raw.strip()[1:].isascii() and raw.strip()[1:].isdigit()
    )
    try:
        value = -1 if negative else parse_decimal(raw, f"environment variable {name}")
    except ValueError as exc:
        raise ValueError(f"{exc}; unset it or fix the launcher that set it") from None
    if not low <= value <= high:
        raise ValueError(
            f"environment variable {name}={raw!r} must be >= {low} and <= {high} (a rank is one "
            f"32-bit word of every seed's derivation key); unset it or fix the launcher that set it"
        )
    return value


LIGHTNING = Launcher("Lightning", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_RANK")
"""Lightning's ddp subprocess launcher on one node: the global rank is LOCAL_RANK when NODE_RANK is
0."""


def _lightning_launch() -> Optional[_Found]:
    node, local, size = (
        _env_int("NODE_RANK"),
        _env_int("LOCAL_RANK"),
        _env_int("WORLD_SIZE", 1, MAX_WORLD_SIZE),
    )
    if local is None:
        return None
    if node != 0:
        raise ValueError(
            f"NODE_RANK={node}, LOCAL_RANK={local} and WORLD_SIZE={size} are set but RANK is not "
            "(Lightning's multi-node ddp launcher): pass the global rank to seeder.init(rank=...)"
        )
    assert size is not None  # the caller saw WORLD_SIZE set
    if local >= size:
        raise ValueError(
            f"LOCAL_RANK={local} is not below WORLD_SIZE={size}; fix the launch, or pass rank= "
            f"and ngpus="
        )
    return _Found(LIGHTNING, local, size, local)


def _launcher() -> Optional[_Found]:
    """The first launcher whose rank and size variables are both set, its values checked."""
    for launcher in LAUNCHERS:
        has_rank = os.environ.get(launcher.rank, "").strip() != ""
        has_size = os.environ.get(launcher.size, "").strip() != ""
        if launcher.name == "SLURM" and not (has_rank and has_size):
            continue  # salloc/sbatch shells set one of the two: not a task launch
        if (
            launcher.name == "torchrun"
            and has_size
            and not has_rank
            and os.environ.get("NODE_RANK", "").strip()
        ):
            # Lightning's ddp launcher sets WORLD_SIZE, NODE_RANK, LOCAL_RANK, no RANK
            found = _lightning_launch()
            if found is not None:
                return found
        if has_rank != has_size:
            have, miss = (
                (launcher.rank, launcher.size) if has_rank else (launcher.size, launcher.rank)
            )
            raise ValueError(
                f"{have} is set but {miss} is not ({launcher.name} sets both); set {miss} too, "
                f"or unset {have}"
            )
        if not has_rank:
            continue
        rank, size, local = (
            _env_int(launcher.rank),
            _env_int(launcher.size, 1, MAX_WORLD_SIZE),
            _env_int(launcher.local),
        )
        assert rank is not None and size is not None
        if rank >= size:
            raise ValueError(
                f"{launcher.rank}={rank} is not below {launcher.size}={size}: the {launcher.name} "
                "variables disagree; fix the launch, or pass rank= and ngpus= to seeder.init"
            )
        if local is not None and local >= size:
            raise ValueError(
                f"{launcher.local}={local} is not below {launcher.size}={size}: the "
                f"{launcher.name} variables disagree; fix the launch, or pass local_rank= to "
                f"seeder.init"
            )
        return _Found(launcher, rank, size, local)
    return None


def discover(rank: Optional[int], world_size: Optional[int], local_rank: Optional[int]) -> Topology:
    """Resolve the global rank, world size and local rank, each with its source.

    ``world_size`` is NVIDIA's ``ngpus``. The order is in the module's doc. An
    explicit ``ngpus`` that differs from a launcher's size > 1, or an explicit
    ``local_rank`` that differs from the launcher's, means the launcher did not
    start this process as one of its ranks (``mp.spawn`` inside an ``sbatch``
    script): that raises, unless ``rank=`` is given too. A launcher of size 1
    with ``ngpus > 1`` (``srun -n1`` spawning its own processes) is ignored.
    Logs the result once at INFO (logger ``seeder``) when it changes.

    >>> discover(rank=3, world_size=4, local_rank=1).describe()
    'rank 3 (rank=) of 4 (ngpus=), local rank 1 (local_rank=)'
    """
    if process_group_active():
        topology = _from_process_group(rank, world_size, local_rank)
    else:
        topology = _from_environment(rank, world_size, local_rank)
    check_topology(topology)
    global _LAST
    if topology != _LAST:
        logger.info("seeder topology: %s", topology.describe())
    _LAST = topology
    return topology


_LAST: Optional[Topology] = None  # the topology discover() returned last in this process


def check_topology(topology: Topology) -> None:
    """Raise ``ValueError`` unless rank, world size and local rank fit the derivation, naming each
    value's source.

    A rank is one 32-bit word of every derived seed's key: a rank of ``2**32`` would
    silently take rank 0's seeds, so every source (arguments, process group, launcher
    variables) is held to ``0 <= rank < world_size <= 2**32`` and ``0 <= local_rank < 2**32``.

    >>> check_topology(Topology(2**32, 2**32 + 1, 0, "RANK", "WORLD_SIZE"))
    Traceback (most recent call last):
    ...
    ValueError: world size 4294967297 (from WORLD_SIZE) is outside [1, 4294967296]: a rank is ...
    """
    fix = "fix the launcher's variables or pass rank= and ngpus="
    for what, value, source, high, low in (
        ("world size", topology.world_size, topology.world_from, MAX_WORLD_SIZE, 1),
        ("rank", topology.rank, topology.rank_from, MAX_RANK, 0),
        ("local rank", topology.local_rank, topology.local_from, MAX_RANK, 0),
    ):
        if not low <= value <= high:
            raise ValueError(
                f"{what} {value} (from {source}) is outside [{low}, {high}]: a rank is one 32-bit "
                f"word of every seed's derivation key; {fix}"
            )
    if not topology.rank < topology.world_size:
        raise ValueError(
            f"rank {topology.rank} (from {topology.rank_from}) is outside the world of "
            f"{topology.world_size} process(es) (from {topology.world_from}); pass rank= below "
            f"ngpus=, or fix the launcher's variables"
        )


def _from_process_group(
    rank: Optional[int], world_size: Optional[int], local_rank: Optional[int]
) -> Topology:
    pg_rank, pg_world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if rank is not None and rank != pg_rank:
        raise ValueError(
            f"rank={rank} contradicts the process group's rank {pg_rank}; omit rank= to use the "
            "process group's"
        )
    if world_size is not None and world_size != pg_world:
        raise ValueError(
            f"ngpus={world_size} contradicts the process group's world size {pg_world}; "
            "pass the world size (number of processes in all nodes) or omit it"
        )
    if local_rank is not None:
        local, local_from = local_rank, "local_rank="
    else:
        found = _launcher()
        if found is not None and found.local is not None and found.size == pg_world:
            local, local_from = found.local, found.launcher.local
        else:
            env_local = _env_int("LOCAL_RANK")
            local, local_from = (
                (env_local, "LOCAL_RANK") if env_local is not None else (pg_rank, "rank")
            )
    return Topology(pg_rank, pg_world, local, "process group", "process group", local_from)


def _checked_launcher(
    rank: Optional[int], world_size: Optional[int], local_rank: Optional[int]
) -> Optional[_Found]:
    """The launcher whose variables describe this process, or ``None``; an error where the
    arguments contradict it."""
    found = None if rank is not None and world_size is not None else _launcher()
    if found is not None and world_size is not None and world_size != found.size:
        if found.size > 1:
            raise ValueError(
                f"ngpus={world_size} contradicts {found.launcher.size}={found.size} "
                f"({found.launcher.name}): if {found.launcher.name} started every process, pass "
                f"ngpus={found.size} or omit it; if you start processes yourself, pass each one's "
                f"global rank= as well"
            )
        # one task that starts its own processes: its variables describe the task, not them
        return None
    if found is None or rank is not None or local_rank is None or found.local is None:
        return found
    if local_rank != found.local:
        raise ValueError(
            f"local_rank={local_rank} contradicts {found.launcher.local}={found.local} "
            f"({found.launcher.name}): if {found.launcher.name} started every process, pass "
            f"local_rank={found.local} or omit it; if you start processes yourself, pass each "
            f"one's global rank= and ngpus= as well"
        )
    return found


def _local_rank(local_rank: Optional[int], found: Optional[_Found]) -> tuple[Optional[int], str]:
    """``(local rank or None, its source)``: the argument, the launcher's, ``LOCAL_RANK``."""
    if local_rank is not None:
        return local_rank, "local_rank="
    if found is not None and found.local is not None:
        return found.local, found.launcher.local
    env_local = _env_int("LOCAL_RANK")
    if env_local is not None:
        return env_local, "LOCAL_RANK"
    return None, "rank"


def _from_environment(
    rank: Optional[int], world_size: Optional[int], local_rank: Optional[int]
) -> Topology:
    found = _checked_launcher(rank, world_size, local_rank)
    local, local_from = _local_rank(local_rank, found)
    if rank is not None:
        g_rank, rank_from = rank, "rank="
    elif found is not None:
        g_rank, rank_from = found.rank, found.launcher.rank
    elif local is not None:
        g_rank, rank_from = local, local_from
    else:
        g_rank, rank_from = 0, "default"
    if world_size is not None:
        world, world_from = world_size, "ngpus="
    elif found is not None:
        world, world_from = found.size, found.launcher.size
    else:
        world, world_from = 1, "default"
    if local is None:
        local = g_rank
    return Topology(int(g_rank), int(world), int(local), rank_from, world_from, local_from)


def agree_master_seed(
    seed: int, explicit: bool, topology: Optional[Topology] = None
) -> tuple[int, bool]:
    """Make every rank use rank 0's master seed; raise if explicit seeds disagree.

    With a process group every rank learns every other rank's value, so either
    all ranks return the same seed or all raise the same error (no rank is left
    waiting). Returns ``(seed, explicit_on_any_rank)``.

    Without a process group ranks cannot agree on a *drawn* seed: if the world
    (``topology``, else the one :func:`discover` returned last) has more than one
    process and ``explicit`` is false, this raises ``RuntimeError`` naming the
    fixes (``master_seed=``, ``SEEDER_SEED``, or a process group first).

    >>> agree_master_seed(42, True, Topology(1, 4, 1))
    (42, True)
    """
    if not process_group_active():
        topology = topology if topology is not None else _LAST
        if not explicit and topology is not None and topology.world_size > 1:
            raise RuntimeError(
                f"no master seed was given and there is no torch.distributed process group, but "
                f"this is {topology.describe()}: each process would draw its own seed. Pass the "
                f"same master_seed= to every process, set SEEDER_SEED (seeder run --seed N does), "
                f"or call torch.distributed.init_process_group() before seeder.init()"
            )
        return seed, explicit
    dist = torch.distributed
    world = dist.get_world_size()
    slots: list[object] = [None] * world
    dist.all_gather_object(slots, (int(seed), bool(explicit)))
    gathered = [cast("tuple[int, bool]", pair) for pair in slots]  # each rank's (seed, explicit)
    explicit_values = {r: s for r, (s, e) in enumerate(gathered) if e}
    if len(set(explicit_values.values())) > 1:
        detail = ", ".join(f"rank {r}: {s}" for r, s in sorted(explicit_values.items()))
        raise RuntimeError(
            f"ranks were given different master seeds ({detail}); every rank must get the same "
            "--seed, or None on all ranks to let rank 0 draw one"
        )
    if explicit_values:
        return next(iter(explicit_values.values())), True
    return int(gathered[0][0]), False


def refuse_in_worker(what: str) -> None:
    """Raise ``RuntimeError`` inside a ``DataLoader`` worker process: states are loaded in the main
    process.

    A worker holds a copy of the sampler and the loader; loading a state there changes only the
    copy (and the batches that worker fetches), never the run.

    >>> refuse_in_worker("DistributedSampler.load_state_dict()")  # the main process: no refusal
    """
    info = torch.utils.data.get_worker_info()
    if info is not None:
        raise RuntimeError(
            f"{what} was called inside DataLoader worker {info.id}: a worker holds a copy of the "
            f"sampler and loader, so the load would change only the batches that worker fetches. "
            f"Load states in the main process, before iter(loader)"
        )
