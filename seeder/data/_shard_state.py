"""The states of :class:`seeder.IterableDataLoader` over a sharded stream, and where each resumes.

Three states load (each checked whole before anything changes):

* one rank's state of the same world size, rank, ``num_workers``, ``batch_size`` and
  ``drop_last``: the round robin continues exactly where it stopped (the same order, bit for bit);
* one rank's state of the same world size with other workers or batches: this rank's shards not
  ended are dealt again over its workers, each from its position;
* every rank's positions joined (a gathered state loaded on another world size,
  :func:`seeder._state.streams.merge_ranks`): every shard not ended is dealt again over the new
  world's processes, each from its position.

A re-dealt epoch yields every example not yet handed out exactly once, each drawing what it drew
in an uninterrupted run; the order after the stop follows the new deal.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Callable, Optional

from seeder._checks import check_state_header, is_int
from seeder._errors import StateError
from seeder._seeding.derive import MAX_KEY
from seeder._state.streams import GATHERED_STOPS, MERGED_FORMAT, SHARD_FORMAT, rank_positions
from seeder.data._shards import check_positions, deal, redeal, shard_count
from seeder.data._stream_state import STREAM_STATE_KEYS

__all__ = [
    "SHARD_STATE_VERSION",
    "SHARD_STATE_KEYS",
    "MERGED_KEYS",
    "fresh_progress",
    "shard_progress",
    "shard_stops",
    "shard_fields",
    "refuse_sharded",
    "log_redeal",
    "shards_of",
]

logger = logging.getLogger("seeder")

#: Version of the layout of a sharded stream's state.
SHARD_STATE_VERSION = 1
#: The keys of one rank's state.
SHARD_STATE_KEYS = STREAM_STATE_KEYS | {"rank", "num_shards", "assignment", "ended", "source"}
#: The keys of every rank's positions joined.
MERGED_KEYS = frozenset(
    {
        "format",
        "version",
        "epoch",
        "num_shards",
        "positions",
        "ended",
        "step",
        "world_size",
        "batch_size",
        "drop_last",
        "source",
    }
)
_NAME = "seeder.IterableDataLoader"
_CORRUPT = "the state is corrupt: load the state the loader saved"


def fresh_progress(
    epoch: int,
    assignment: list[list[list[int]]],
    ended: Optional[list[int]] = None,
) -> dict[str, Any]:
    """The position at the start of a deal: no batch handed out, each worker at its first shard.

    >>> p = fresh_progress(0, [[[3, 5]], []])
    >>> [r["state"] for r in p["workers"]], p["complete"]
    ([{'cursor': 0, 'pos': 5}, {'cursor': 0, 'pos': 0}], False)
    """
    return {
        "epoch": epoch,
        "batch": 0,
        "next_worker": 0,
        "complete": False,
        "workers": [
            {
                "produced": 0,
                "state": {"cursor": 0, "pos": shards[0][1] if shards else 0},
                "done": False,
            }
            for shards in assignment
        ],
        "assignment": assignment,
        "ended": list(ended or []),
    }


def _check_assignment(state: dict[str, Any], workers: int, num_shards: int) -> None:
    assignment = state["assignment"]
    ok = isinstance(assignment, list) and len(assignment) == workers
    for shards in assignment if ok else ():
        ok = ok and isinstance(shards, list)
        for pair in shards if ok else ():
            ok = ok and (
                isinstance(pair, list)
                and len(pair) == 2
                and is_int(pair[0])
                and is_int(pair[1])
                and 0 <= pair[0] < num_shards
                and 0 <= pair[1] <= MAX_KEY
            )
    ended = state["ended"]
    ok = ok and isinstance(ended, list) and all(is_int(s) and 0 <= s < num_shards for s in ended)
    if not ok:
        raise StateError(
            f"{_NAME} state['assignment'] must list, per worker ({workers}), [shard, start] pairs "
            f"of the {num_shards} shards, and 'ended' shards; {_CORRUPT}"
        )
    for w, (shards, record) in enumerate(zip(assignment, state["workers"])):
        cursor = record.get("state", {}) if isinstance(record, dict) else None
        if not (
            isinstance(cursor, dict)
            and set(cursor) == {"cursor", "pos"}
            and is_int(cursor["cursor"])
            and is_int(cursor["pos"])
            and 0 <= cursor["cursor"] <= len(shards)
            and 0 <= cursor["pos"] <= MAX_KEY
        ):
            raise StateError(
                f"{_NAME} state: worker {w}'s progress {cursor!r:.100} is no "
                f"{{'cursor': c, 'pos': p}} over its {len(shards)} shard(s); {_CORRUPT}"
            )


def shard_progress(
    state: Any,
    layout: dict[str, Any],
    epoch: Optional[int],
    check_round_robin: Callable[[Any, dict[str, Any], Optional[int]], None],
    check_source: Callable[[Any, int, dict[int, Optional[int]]], None] = lambda s, e, at: None,
) -> tuple[dict[str, Any], str]:
    """Check ``state`` whole and return the position it resumes from, and how (module docs).

    Args:
        state: a sharded stream's state (one rank's, or every rank's joined).
        layout: this loader's ``num_workers``, ``batch_size``, ``drop_last``, ``world_size``,
            ``rank`` and ``num_shards``.
        epoch: the epoch the run stands in (``None``: any).
        check_round_robin: checks one rank's state of this layout as
            :func:`seeder.data._iterable.check_stream_state` does.
        check_source: ``check_source(source, epoch, stops)`` raises ``StateError`` unless the
            stream continues from what it said of itself (``state["source"]``, its
            ``stream_state()``) in the state's epoch, at the shards' stops
            (:func:`shard_stops`).

    Returns:
        ``(progress, how)``: ``how`` is ``"exact"``, ``"workers"`` (re-dealt over this rank's
        workers) or ``"world"`` (re-dealt over the new world).

    Raises:
        StateError: what is wrong, and what to do; nothing changes.
    """
    workers, count = max(layout["num_workers"], 1), layout["num_shards"]
    fmt = state.get("format") if isinstance(state, dict) else None
    if fmt == SHARD_FORMAT and GATHERED_STOPS in state:  # from a gathered state, same world
        check_positions(
            *_gathered(state), count, f"{_NAME} state['{GATHERED_STOPS}'] (every rank's shards)"
        )
        state = {k: v for k, v in state.items() if k != GATHERED_STOPS}
    if fmt == MERGED_FORMAT:
        check_state_header(state, MERGED_FORMAT, SHARD_STATE_VERSION, MERGED_KEYS, _NAME)
        _same_stream(state, count, epoch)
        positions = check_positions(state["positions"], state["ended"], count, f"{_NAME} state")
        check_source(state["source"], int(state["epoch"]), shard_stops(state))
        assignment = redeal(positions, layout["rank"], layout["world_size"], workers)
        return fresh_progress(int(state["epoch"]), assignment, state["ended"]), "world"
    if fmt != SHARD_FORMAT:
        raise StateError(
            f"not a state of {_NAME} over a sharded stream: pass the dict its state_dict() "
            "returned (a state of the loader over a stream without shards, or of another "
            "loader, does not load here)"
        )
    check_state_header(state, SHARD_FORMAT, SHARD_STATE_VERSION, SHARD_STATE_KEYS, _NAME)
    _same_stream(state, count, epoch)
    if state["world_size"] != layout["world_size"] or state["rank"] != layout["rank"]:
        raise StateError(
            f"this {_NAME} state holds the shards of rank {state['rank']!r} of a world of "
            f"{state['world_size']!r} only (this is rank {layout['rank']} of "
            f"{layout['world_size']}): a state missing shards. Gather the state on every rank "
            "with seeder.gather_state_dict() at the same step (rank 0 writes it) and load that"
        )
    saved_workers = max(state["num_workers"], 1) if is_int(state["num_workers"]) else 0
    if not (is_int(state["num_workers"]) and state["num_workers"] >= 0):
        raise StateError(f"{_NAME} state['num_workers'] must be an int >= 0; {_CORRUPT}")
    if not isinstance(state["workers"], list) or len(state["workers"]) != saved_workers:
        raise StateError(
            f"{_NAME} state['workers'] must list {saved_workers} record(s); {_CORRUPT}"
        )
    _check_assignment(state, saved_workers, count)
    check_source(state["source"], int(state["epoch"]), shard_stops(state))
    same = all(
        state[k] == layout[k] and type(state[k]) is type(layout[k])
        for k in ("num_workers", "batch_size", "drop_last")
    )
    if same:
        check_round_robin(state, layout, epoch)
        progress = {k: state[k] for k in ("epoch", "batch", "next_worker", "complete")}
        progress["workers"] = [dict(r) for r in state["workers"]]
        progress["assignment"] = [[list(p) for p in shards] for shards in state["assignment"]]
        progress["ended"] = list(state["ended"])
        return progress, "exact"
    positions, ended = rank_positions(state)
    assignment = [
        [[s, positions[s]] for s in shards] for shards in deal(sorted(positions), workers)
    ]
    return fresh_progress(int(state["epoch"]), assignment, ended), "workers"


def shard_stops(state: dict[str, Any]) -> dict[int, Optional[int]]:
    """``{shard: position}`` where a checked-shape state says each shard it knows stood, an
    ended shard ``None``: every shard for a joined state, one rank's of a world of one, or one
    rank's from a gathered state (:data:`GATHERED_STOPS`); this rank's for one rank's state of
    several.

    >>> shard_stops({"format": MERGED_FORMAT, "positions": [[1, 4]], "ended": [0]})
    {1: 4, 0: None}
    """
    if state["format"] == MERGED_FORMAT or GATHERED_STOPS in state:
        pairs, ended = _gathered(state)
        positions = {int(s): int(p) for s, p in pairs}
    else:
        positions, ended = rank_positions(state)
    stops: dict[int, Optional[int]] = dict(positions)
    stops.update((int(s), None) for s in ended)
    return stops


def _gathered(state: dict[str, Any]) -> tuple[Any, Any]:
    """Every rank's ``positions`` and ``ended`` shards in a joined state or one rank's state with
    :data:`GATHERED_STOPS` (not checked)."""
    where = state.get(GATHERED_STOPS, state)
    if not isinstance(where, dict):
        return None, None
    return where.get("positions"), where.get("ended")


def _same_stream(state: dict[str, Any], count: int, epoch: Optional[int]) -> None:
    if state["num_shards"] != count:
        raise StateError(
            f"the {_NAME} state was saved over a stream of {state['num_shards']!r} shards, this "
            f"loader's has {count}: resume with the stream the state was saved with"
        )
    e = state["epoch"]
    if not (is_int(e) and 0 <= e <= MAX_KEY):
        raise StateError(f"{_NAME} state['epoch'] must be an int in [0, {MAX_KEY}]; {_CORRUPT}")
    if epoch is not None and e != epoch:
        raise StateError(
            f"the {_NAME} state is in epoch {e} but the run's last reseed is epoch {epoch} of the "
            "loader's task: the two come from different points of a run (save both at the same "
            "step, with seeder.state_dict(), and load that)"
        )


def shard_fields(stream: Any, shards: int, progress: dict[str, Any]) -> dict[str, Any]:
    """The keys a sharded stream's state adds: its rank, shards, deal and ended shards, and what
    the stream says of itself (its ``stream_state()``, e.g. a mix's weights)."""
    own = getattr(stream.dataset, "stream_state", None)
    return {
        "source": own() if callable(own) else None,
        "rank": stream.rank,
        "num_shards": shards,
        "assignment": [[list(p) for p in mine] for mine in progress["assignment"]],
        "ended": list(progress["ended"]),
    }


def refuse_sharded(state: Any, dataset: Any) -> None:
    """A sharded stream's state does not load into a loader that reads its stream by rank."""
    if isinstance(state, dict) and state.get("format") in (SHARD_FORMAT, MERGED_FORMAT):
        raise StateError(
            f"this state was saved by {_NAME} over a sharded stream, this loader's stream "
            f"({type(dataset).__name__}) is read without shards: build the loader the "
            "same way (by_shard=True for a datasets stream)"
        )


def log_redeal(progress: dict[str, Any], how: str, workers: int, world: int) -> None:
    logger.info(
        "seeder.IterableDataLoader: epoch %d continues on another %s: the %d shard(s) not ended "
        "are dealt again over %d worker(s) of %d rank(s), each from its position; every example "
        "left is read once, drawing what it drew before, in the new deal's order",
        progress["epoch"],
        "number of workers" if how == "workers" else "world size",
        sum(len(a) for a in progress["assignment"]),
        workers,
        world,
    )


def shards_of(
    dataset: Any, by_shard: Optional[bool], sample_rngs: Optional[Sequence[str]]
) -> Optional[int]:
    """The shards the loader deals (:mod:`seeder.data._shards`), or ``None`` to read by rank."""
    if by_shard is not None and not isinstance(by_shard, bool):
        raise TypeError(f"by_shard must be True, False or None, got {by_shard!r}")
    count = None
    datasets_stream = type(dataset).__module__.startswith("datasets.")
    if by_shard or (by_shard is None and not datasets_stream):
        count = shard_count(dataset)
    if by_shard and count is None:
        raise ValueError(
            f"by_shard=True needs a stream that declares its shards: {type(dataset).__name__} has "
            "no num_shards and iter_shard(shard, start) (see seeder.IterableDataLoader)"
        )
    if count is None and sample_rngs is not None:
        raise ValueError(
            "sample_rngs applies to a sharded stream (its examples are seeded one by one); this "
            "stream is seeded per batch: leave sample_rngs out"
        )
    return count
