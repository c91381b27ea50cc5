"""Rank and world discovery, master-seed agreement across ranks.

Imports nothing of the package. ``torch.distributed`` is used only when a
process group is initialised; otherwise the launcher's environment
(``RANK``/``WORLD_SIZE``, set by ``torchrun``) or the caller's arguments decide.

Example:
    >>> discover(rank=None, world_size=None, local_rank=None)
    Topology(rank=0, world_size=1, local_rank=0)
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional, Tuple

import torch

__all__ = ["Topology", "discover", "process_group_active", "agree_master_seed"]


class Topology(NamedTuple):
    """Where this process stands: global rank, world size, rank on its node."""

    rank: int
    world_size: int
    local_rank: int


def process_group_active() -> bool:
    """Whether a default ``torch.distributed`` process group exists.

    >>> process_group_active()
    False
    """
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _env_int(name: str) -> Optional[int]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer; unset it or fix the launcher") from None


def discover(rank: Optional[int], world_size: Optional[int], local_rank: Optional[int]) -> Topology:
    """Resolve the global rank and world size.

    Rank: the explicit ``rank``, else the process group's rank, else ``RANK``,
    else ``local_rank`` (single-node launchers), else 0. World size: the process
    group's, else ``WORLD_SIZE``, else ``world_size`` (NVIDIA's ``ngpus``), else 1.
    A process group always wins over the environment; an explicit value that
    contradicts it is an error.
    """
    pg = process_group_active()
    env_local = _env_int("LOCAL_RANK")
    local = local_rank if local_rank is not None else (env_local if env_local is not None else None)

    if pg:
        pg_rank, pg_world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        if rank is not None and rank != pg_rank:
            raise ValueError(f"rank={rank} contradicts the process group's rank {pg_rank}; omit rank= to use the process group's")
        if world_size is not None and world_size != pg_world:
            raise ValueError(
                f"ngpus={world_size} contradicts the process group's world size {pg_world}; "
                "pass the world size (number of processes in all nodes) or omit it")
        g_rank, world = pg_rank, pg_world
    else:
        env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
        g_rank = rank if rank is not None else env_rank if env_rank is not None else local if local is not None else 0
        world = env_world if env_world is not None else world_size if world_size is not None else 1
        if world_size is not None and env_world is not None and world_size != env_world:
            raise ValueError(f"ngpus={world_size} contradicts WORLD_SIZE={env_world}; pass the total number of processes")
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if not 0 <= g_rank < world:
        raise ValueError(f"rank {g_rank} is outside the world of {world} process(es); check rank/ngpus/local_rank")
    return Topology(int(g_rank), int(world), int(local if local is not None else g_rank))


def agree_master_seed(seed: int, explicit: bool) -> Tuple[int, bool]:
    """Make every rank use rank 0's master seed; raise if explicit seeds disagree.

    Every rank learns every other rank's value, so either all ranks return the
    same seed or all raise the same error (no rank is left waiting).
    Returns ``(seed, explicit_on_any_rank)``. Without a process group it returns its input.
    """
    if not process_group_active():
        return seed, explicit
    dist = torch.distributed
    world = dist.get_world_size()
    gathered = [None] * world
    dist.all_gather_object(gathered, (int(seed), bool(explicit)))
    explicit_values = {r: s for r, (s, e) in enumerate(gathered) if e}
    if len(set(explicit_values.values())) > 1:
        detail = ", ".join(f"rank {r}: {s}" for r, s in sorted(explicit_values.items()))
        raise RuntimeError(
            f"ranks were given different master seeds ({detail}); every rank must get the same "
            "--seed, or None on all ranks to let rank 0 draw one")
    if explicit_values:
        return next(iter(explicit_values.values())), True
    return int(gathered[0][0]), False
