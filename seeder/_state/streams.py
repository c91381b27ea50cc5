"""Shard positions of a sharded stream: one rank's, and every rank's of a gathered state in one.

A :class:`seeder.IterableDataLoader` over a sharded stream (:mod:`seeder.data._shards`) keeps, per
worker of its rank, the shards dealt to it (``assignment``: ``[shard, start]`` pairs, read in that
order) and how far it has read them (``{"cursor": c, "pos": p}``: the shards before ``c`` ended,
shard ``c`` at position ``p``, the later ones at their start). :func:`rank_positions` turns that
into positions by shard; :func:`merge_ranks` joins the ranks of a gathered state into one state that
loads on any world size and worker count (what :func:`seeder._state.format.own_entry` hands the
loader when the world changed).

Example:
    >>> one = {"format": SHARD_FORMAT, "version": 1, "epoch": 0, "batch": 2, "num_shards": 2,
    ...        "ended": [], "assignment": [[[0, 0], [1, 0]]],
    ...        "workers": [{"produced": 2, "done": False, "state": {"cursor": 1, "pos": 3}}],
    ...        "batch_size": 2, "drop_last": False, "world_size": 1, "rank": 0}
    >>> rank_positions(one)
    ({1: 3}, [0])
"""

from __future__ import annotations

from typing import Any

from seeder._errors import StateError

__all__ = [
    "SHARD_FORMAT",
    "MERGED_FORMAT",
    "GATHERED_STOPS",
    "rank_positions",
    "merge_ranks",
    "merge_entries",
    "with_gathered_stops",
]

#: ``format`` of one rank's state of a sharded stream.
SHARD_FORMAT = "seeder.shard_stream"
#: ``format`` of every rank's shard positions joined (:func:`merge_ranks`).
MERGED_FORMAT = "seeder.shard_stream.gathered"
#: The key one rank's state of a sharded stream gets from a gathered state loaded on the same
#: world size: every rank's shard positions, ``{"positions", "ended"}``
#: (:func:`with_gathered_stops`), for a stream that changes where each shard stopped (a
#: ``seeder.data.Mix`` of streams changes its weights there).
GATHERED_STOPS = "gathered_stops"

_FIX = (
    "gather the state on every rank with seeder.gather_state_dict() at the same step (rank 0 "
    "writes it) and load that"
)


def rank_positions(state: dict[str, Any]) -> tuple[dict[int, int], list[int]]:
    """``({shard: position}, ended shards)`` of one rank's checked-shape state.

    The position of a shard is how many of its examples the training loop got (from its start).

    Args:
        state: one rank's :data:`SHARD_FORMAT` state.

    Returns:
        The positions of the shards not ended, and the ended shards (earlier deals' included).

    Raises:
        StateError: a worker's cursor lies outside its shards.
    """
    positions: dict[int, int] = {}
    ended = list(state["ended"])
    for w, (shards, record) in enumerate(zip(state["assignment"], state["workers"])):
        cursor, pos = record["state"]["cursor"], record["state"]["pos"]
        if not (0 <= cursor <= len(shards)):
            raise StateError(
                f"seeder.IterableDataLoader state: worker {w}'s cursor {cursor} is outside its "
                f"{len(shards)} shard(s); the state is corrupt: load the state the loader saved"
            )
        for k, (shard, start) in enumerate(shards):
            if k < cursor:
                ended.append(shard)
            else:
                positions[shard] = pos if k == cursor else start
    return positions, ended


def merge_ranks(states: list[Any]) -> dict[str, Any]:
    """One state holding every rank's shard positions: what a world of another size loads.

    Args:
        states: the same participant's state on each rank of a gathered state, by rank.

    Returns:
        A :data:`MERGED_FORMAT` state: ``epoch``, ``num_shards``, ``positions`` (``[shard, pos]``
        of the shards not ended), ``ended``, ``step`` (rank 0's batches), ``world_size``,
        ``batch_size``, ``drop_last``, ``source`` (what the stream says of itself).

    Raises:
        StateError: the ranks disagree on the epoch or the shards, or a shard is held by two
            ranks or by none (a state missing a shard), naming the fix.
    """
    first = states[0]
    positions: dict[int, int] = {}
    ended: set[int] = set()
    for rank, state in enumerate(states):
        if not (isinstance(state, dict) and state.get("format") == SHARD_FORMAT):
            raise StateError(
                f"rank {rank}'s stream state is not a sharded stream's while rank 0's is; {_FIX}"
            )
        for name in ("epoch", "num_shards", "version", "source"):
            if state.get(name) != first.get(name):
                raise StateError(
                    f"rank {rank}'s stream state has {name}={state.get(name)!r}, rank 0's "
                    f"{first.get(name)!r}: the ranks' states come from different points; {_FIX}"
                )
        try:
            held, gone = rank_positions(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(
                f"rank {rank}'s stream state is corrupt ({type(exc).__name__}: {exc}); {_FIX}"
            ) from None
        twice = sorted(set(held) & set(positions))
        if twice:
            raise StateError(
                f"shard(s) {twice[:10]} are read by rank {rank} and an earlier rank: the ranks' "
                f"states come from different runs or deals; {_FIX}"
            )
        positions.update(held)
        ended.update(gone)
    return {
        "format": MERGED_FORMAT,
        "version": first["version"],
        "epoch": first["epoch"],
        "num_shards": first["num_shards"],
        "positions": [[s, positions[s]] for s in sorted(positions) if s not in ended],
        "ended": sorted(ended),
        "step": first["batch"],
        "world_size": len(states),
        "batch_size": first["batch_size"],
        "drop_last": first["drop_last"],
        "source": first.get("source"),
    }


def merge_entries(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's entry of a gathered state, each sharded stream's state joined over the ranks.

    What a world of another size loads: a sharded stream continues from every rank's positions;
    any other participant's state is rank 0's, as without streams.

    Args:
        ranks: the gathered state's entries, by rank.

    Returns:
        Rank 0's entry (a shallow copy where a stream's state is replaced).

    >>> merge_entries([{"participants": {"loader.0": {"format": "x"}}}])["participants"]
    {'loader.0': {'format': 'x'}}
    """
    entry = ranks[0]
    parts = entry.get("participants")
    if not isinstance(parts, dict):
        return entry
    keys = [k for k, v in parts.items() if isinstance(v, dict) and v.get("format") == SHARD_FORMAT]
    if not keys:
        return entry
    merged = dict(parts)
    for key in keys:
        states = []
        for rank, other in enumerate(ranks):
            theirs = other.get("participants") if isinstance(other, dict) else None
            if not isinstance(theirs, dict) or key not in theirs:
                raise StateError(
                    f"rank {rank}'s state holds no {key!r} (a sharded stream on rank 0); {_FIX}"
                )
            states.append(theirs[key])
        merged[key] = merge_ranks(states)
    return {**entry, "participants": merged}


def with_gathered_stops(ranks: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    """Rank ``rank``'s entry of a gathered state of this world size, each sharded stream's state
    with every rank's shard positions added (:data:`GATHERED_STOPS`). A stream whose ranks' states
    do not join is left as it is: its own checks say what is wrong.

    Args:
        ranks: the gathered state's entries, by rank.
        rank: this process's rank.

    Returns:
        The entry (a shallow copy where a stream's state gains the positions).

    >>> with_gathered_stops([{"participants": {"loader.0": {"format": "x"}}}], 0)["participants"]
    {'loader.0': {'format': 'x'}}
    """
    entry = ranks[rank]
    parts = entry.get("participants")
    if not isinstance(parts, dict):
        return entry
    added = dict(parts)
    for key, part in parts.items():
        if not (isinstance(part, dict) and part.get("format") == SHARD_FORMAT):
            continue
        try:
            merged = merge_ranks([other["participants"][key] for other in ranks])
        except (StateError, KeyError, TypeError, AttributeError):
            continue
        stops = {"positions": merged["positions"], "ended": merged["ended"]}
        added[key] = {**part, GATHERED_STOPS: stops}
    return {**entry, "participants": added}
