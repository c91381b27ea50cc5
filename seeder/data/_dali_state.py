"""A DALI pipeline's resumable state: its entry in seeder's state (``participants["dali.<n>"]``),
its keys and checks, finding it in a saved state, and what seeder reads of DALI's pipeline and
iterator objects to take it (the checkpointing flag, the pipelines an iterator drives).

Example:
    >>> entry = {"pipeline_id": 0, "shared": False, "seed": 7, "checkpointing": False,
    ...          "checkpoints": None}
    >>> pipeline_entry({"format": "seeder", "participants": {"dali.0": entry}}, 0)["seed"]
    7
"""

from __future__ import annotations

from typing import Any

from seeder._checks import is_bool, is_int
from seeder._errors import StateError
from seeder._internals import require
from seeder._seeding.derive import check_key

__all__ = [
    "SEEDER_KIND",
    "STATE_KEYS",
    "check_entry",
    "pipeline_entry",
    "checkpointing_enabled",
    "check_iterator",
    "pipeline_count",
]

#: ``seeder_kind`` of tracked pipelines: their entries are ``participants["dali.<n>"]``.
SEEDER_KIND = "dali"
#: Keys of one pipeline's entry in ``seeder.state_dict()["participants"]``.
STATE_KEYS = frozenset({"pipeline_id", "shared", "seed", "checkpointing", "checkpoints"})


def check_entry(state: Any, where: str) -> None:
    """Raise :class:`seeder.StateError` unless ``state`` is one well-formed pipeline entry.

    Args:
        state: the entry, as loaded.
        where: how the message names it (``state['participants']['dali.0']``).

    Raises:
        StateError: other keys, an id, flag, seed or checkpoint list of the wrong kind.

    Example:
        >>> check_entry({"pipeline_id": 0}, "entry")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder.StateError: entry is not a DALI pipeline state (expected keys [...], got [...])
    """
    if not isinstance(state, dict) or set(state) != STATE_KEYS:
        have = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise StateError(
            f"{where} is not a DALI pipeline state (expected keys {sorted(STATE_KEYS)}, got {have})"
        )
    try:
        check_key(state["pipeline_id"], f"{where}['pipeline_id']")
    except (TypeError, ValueError) as exc:
        raise StateError(str(exc)) from None
    for name in ("shared", "checkpointing"):
        if not is_bool(state[name]):
            raise StateError(f"{where}[{name!r}] must be True or False")
    seed = state["seed"]
    if seed is not None and (not is_int(seed) or seed < 0):
        raise StateError(f"{where}['seed'] must be None or a non-negative int")
    _check_checkpoints(state, where)


def _check_checkpoints(state: dict[str, Any], where: str) -> None:
    """Raise :class:`seeder.StateError` unless the checkpoints fit the checkpointing flag."""
    cks = state["checkpoints"]
    if cks is None:
        return
    if not (
        isinstance(cks, list)
        and cks
        and all(isinstance(c, (bytes, str)) and len(c) > 0 for c in cks)
    ):
        raise StateError(
            f"{where}['checkpoints'] must be None or a non-empty list of DALI checkpoints (bytes)"
        )
    if not state["checkpointing"]:
        raise StateError(f"{where} has checkpoints but says checkpointing was off")


def pipeline_entry(state: Any, pipeline_id: int) -> dict[str, Any]:
    """The checked entry of pipeline ``pipeline_id`` in one rank's saved ``seeder.state_dict()``.

    Args:
        state: one rank's seeder state.
        pipeline_id: the id the pipeline was tracked with.

    Returns:
        The entry (keys :data:`STATE_KEYS`).

    Raises:
        StateError: ``state`` is not a seeder state, holds no such pipeline, or an entry is
            malformed.

    Example:
        >>> pipeline_entry({"format": "seeder", "participants": {}}, 3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder.StateError: the seeder state holds no DALI pipeline 3 (it has: none); ...
    """
    if (
        not isinstance(state, dict)
        or state.get("format") != "seeder"
        or not isinstance(state.get("participants"), dict)
    ):
        raise StateError(
            "not a seeder state: pass the dict returned by seeder.state_dict() (e.g. "
            "checkpoint['seeder'])"
        )
    found = []
    for key, entry in state["participants"].items():
        if isinstance(key, str) and key.startswith(SEEDER_KIND + "."):
            check_entry(entry, f"state['participants'][{key!r}]")
            found.append(entry["pipeline_id"])
            if entry["pipeline_id"] == pipeline_id:
                return entry
    have = ", ".join(str(i) for i in found) or "none"
    raise StateError(
        f"the seeder state holds no DALI pipeline {pipeline_id} (it has: {have}); "
        f"track the pipeline with seeder.data.dali.track(pipe, {pipeline_id}) before saving"
    )


def checkpointing_enabled(pipeline: Any) -> bool:
    """Whether ``pipeline`` was built with ``enable_checkpointing=True``.

    DALI has no public accessor; its own PyTorch iterator reads the same attribute (checked by
    ``seeder.data.dali.track``: ``nvidia-dali:Pipeline._enable_checkpointing``).
    """
    return bool(pipeline._enable_checkpointing)


def check_iterator(iterator: Any) -> None:
    """Raise ``TypeError`` unless ``iterator`` is ``None`` or a DALI framework iterator.

    Args:
        iterator: what ``track(..., iterator=)`` was given.

    Raises:
        TypeError: it has no ``checkpoints()``.

    Example:
        >>> check_iterator(object())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: iterator must be a DALI framework iterator (e.g. DALIGenericIterator) ...
    """
    if iterator is None:
        return
    if not callable(getattr(iterator, "checkpoints", None)):
        raise TypeError(
            f"iterator must be a DALI framework iterator (e.g. DALIGenericIterator) with "
            f"checkpoints(), got {type(iterator).__name__}"
        )
    require("nvidia-dali:_DaliBaseIterator._pipes", iterator)  # its pipelines are kept there


def pipeline_count(iterator: Any) -> int:
    """The pipelines ``iterator`` drives (one checkpoint each); 1 without an iterator.

    >>> pipeline_count(None)
    1
    """
    if iterator is None:
        return 1
    pipes = iterator._pipes  # checked by check_iterator
    return len(pipes) if isinstance(pipes, (list, tuple)) and pipes else 1
