"""A ``seeder.data.Mix`` resumed with other weights: where the run stopped, and the weights after.

A mix's state keeps its weights' history and its stop: ``(epoch, position)`` of the first
position the loader reading it in order had not handed out (:func:`reader_stop`). A mix built
with plain weights (a dict) that loads a state saved with others follows the saved history up to
the stop and its own weights from there on (:func:`resumed_history`): the past as it was; a mix
of streams from each lane's stop (:func:`continued` with a point per lane). A mix built with a
history keeps it, which must start with the saved one.

Example:
    >>> old = [[0, 0, {"a": 1.0}]]
    >>> state = {"format": "seeder.mix", "version": 3, "epoch": 0, "names": ["a"], "length": 9,
    ...          "weights": old, "stop": [0, 4]}
    >>> resumed_history(state, [[0, 0, {"a": 2.0}]], True, ["a"], 9, streams=False)
    [[0, 0, {'a': 1.0}], [0, 4, {'a': 2.0}]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from seeder._checks import is_int
from seeder._errors import StateError
from seeder._seeding.derive import MAX_KEY
from seeder._seeding.participant import is_elastic
from seeder.data._mix_weights import Point, at_lane, check_point, plain_point, weight_history

__all__ = [
    "STATE_VERSION",
    "reader_stop",
    "check_history",
    "resumed_history",
    "continued",
    "history_hint",
]

#: The mix state's version (1: no stop; 2: no change point per lane).
STATE_VERSION = 3
_KEYS = frozenset({"format", "version", "epoch", "names", "length", "weights"})


def reader_stop(
    mix: Any, epoch: int, length: int, participants: Sequence[Any]
) -> Optional[tuple[int, int]]:
    """``(epoch, position)`` of the first position of ``mix`` the participants reading it in
    order have not handed out (over all ranks); ``None`` when none reads it, several stand at
    different positions, one shuffles, or one is in another epoch than the mix.

    A participant reads ``mix`` when its ``dataset`` is ``mix`` (a sampler of a loader that
    does is left to the loader); its ``seeder_position()`` is global when it is elastic
    (:class:`seeder.ElasticDataLoader`), else its rank's samples, over its sampler's
    ``num_replicas`` ranks whose samples interleave (:class:`seeder.DataLoader`,
    :class:`seeder.DistributedSampler`).

    Args:
        mix: the mix.
        epoch: the epoch it reads.
        length: its length (the most a position can be).
        participants: the participants of the mix's seeder.

    Returns:
        The stop, or ``None``.

    >>> reader_stop(None, 0, 9, [])
    """
    stops = set()
    owned = {id(getattr(p, "sampler", None)) for p in participants}  # a loader's: it counts
    for reader in participants:
        if getattr(reader, "dataset", None) is not mix or id(reader) in owned:
            continue
        where = getattr(reader, "seeder_position", None)
        sampler = getattr(reader, "sampler", reader)  # a loader's sampler, or a sampler itself
        if not callable(where) or getattr(sampler, "shuffle", True) is not False:
            return None
        at = where()
        if int(at["epoch"]) != epoch:  # it follows other reseeds than the mix: no common stop
            return None
        position = int(at["position"])
        if not is_elastic(reader):
            position *= int(getattr(sampler, "num_replicas", 1))
        stops.add((int(at["epoch"]), min(position, length)))
    return stops.pop() if len(stops) == 1 else None


def check_history(history: Any, names: Sequence[str]) -> None:
    """Raise :class:`StateError` unless ``history`` is a mix's saved weights: ``[[epoch,
    point, {name: weight}], ...]`` from ``(0, 0)``, increasing
    (:func:`seeder.data._mix_weights.weight_history`; a point is a position or a list by lane).

    >>> check_history([[0, 1, {"a": 1}]], ["a"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder.StateError: the checkpoint's Mix weights [[0, 1, {'a': 1}]] are no history ...
    """
    entries = history if isinstance(history, list) and history else [None]
    pairs: list[Any] = [
        ((e[0], e[1]), e[2]) if isinstance(e, (list, tuple)) and len(e) == 3 else e for e in entries
    ]
    try:
        weight_history(pairs, names)
    except (TypeError, ValueError) as exc:
        raise StateError(
            f"the checkpoint's Mix weights {history!r:.120} are no history of [epoch, "
            f"position, {{source: weight}}] from (0, 0) on ({exc}): the state is corrupt"
        ) from None


def _stop(state: dict[str, Any], length: int) -> Optional[tuple[int, int]]:
    """The state's stop (checked), ``None`` where it has none."""
    stop = state.get("stop")
    if stop is None:
        return None
    if not (
        isinstance(stop, (list, tuple))
        and len(stop) == 2
        and all(is_int(v) and 0 <= v <= MAX_KEY for v in stop)
        and stop[0] == state["epoch"]
        and stop[1] <= length
    ):
        raise StateError(
            f"the checkpoint's Mix stop {stop!r} is no (epoch {state['epoch']!r}, position in "
            f"[0, {length}]): the state is corrupt"
        )
    return int(stop[0]), int(stop[1])


def resumed_history(
    state: Any,
    given: list[list[Any]],
    plain: bool,
    names: list[str],
    length: int,
    *,
    streams: bool,
) -> list[list[Any]]:
    """The weights history a mix built with ``given`` follows once ``state`` is loaded.

    ``given`` that starts with the saved history (a later change in or after the saved epoch)
    is kept. Otherwise plain weights (``plain``: ``given`` is one entry at ``(0, 0)``) follow the
    saved history up to the state's stop and ``given``'s weights from there (:func:`continued`);
    a mix of streams (``streams``), whose lanes stop at different positions, from the next
    epoch's start on, until the loader reading it says where each lane stopped
    (:meth:`seeder.data._mix_streams.StreamMix.resume_lanes`).

    Args:
        state: a mix's ``state_dict()``.
        given: the mix's history as built, ``[[epoch, position, {name: weight}], ...]``.
        plain: whether the mix was built with plain weights.
        names, length: the mix's sources and length.
        streams: whether the mix is one of streams (the loader reading it refines the stop to
            each lane's: :meth:`seeder.data._mix_streams.StreamMix.resume_lanes`).

    Returns:
        The history.

    Raises:
        StateError: not a mix state; other sources or length; a corrupt history or stop; other
            weights the mix cannot follow (naming the ``weights=`` history to pass).
    """
    version = state.get("version") if isinstance(state, dict) else None
    want = _KEYS if version == 1 else _KEYS | {"stop"}
    if not (
        isinstance(state, dict)
        and set(state) == want
        and state["format"] == "seeder.mix"
        and version in (1, 2, STATE_VERSION)
    ):
        raise StateError(f"not a seeder.data.Mix state ({state!r:.80}): pass Mix.state_dict()")
    for key, have in (("names", names), ("length", length)):
        if state[key] != have:
            raise StateError(
                f"the checkpoint's Mix has {key}={state[key]!r}, this one {have!r}: build the "
                "mix as the saved run did"
            )
    old, epoch = state["weights"], state["epoch"]
    if not (is_int(epoch) and 0 <= epoch <= MAX_KEY):
        raise StateError(f"the checkpoint's Mix epoch {epoch!r} is no epoch: the state is corrupt")
    if given[: len(old)] == old and not any(e < epoch for e, _, _ in given[len(old) :]):
        if not streams:  # a stream's lanes stop apart: StreamMix.resume_lanes checks them
            _check_after_stop(given[len(old) :], _stop(state, length))
        return given
    if plain:
        check_history(old, names)
        stop = (int(epoch) + 1, 0) if streams else _stop(state, length)
        if stop is not None:
            return continued(old, given[0][2], stop)
    why = "explicit" if not plain else "no stop"
    raise StateError(history_hint(old, epoch, given, why))


def _check_after_stop(added: list[list[Any]], stop: Optional[tuple[int, int]]) -> None:
    """Refuse an added change before the state's stop: those positions were read already."""
    for e, position, _ in added:
        if stop is not None and isinstance(position, int) and (e, position) < stop:
            raise StateError(
                f"the weights= history changes the weights at position {position} of epoch {e}, "
                f"before the checkpoint's stop (position {stop[1]} of epoch {stop[0]}): the run "
                f"read those positions with the saved weights; start the change at {stop[1]} or "
                "later"
            )


def continued(
    old: list[list[Any]], weights: dict[str, float], stop: tuple[int, Point]
) -> list[list[Any]]:
    """The checked history ``old`` up to ``stop``, ``weights`` from there on (none added where
    they are the weights at the stop).

    ``stop`` is ``(epoch, point)``, the point a position or one per lane: a change of ``old``
    in that epoch keeps each lane's position up to the stop's (what it changed before the stop
    stays; what it planned after is dropped), and one at the stop in every lane gives way.

    >>> continued([[0, 0, {"a": 1.0}], [0, 8, {"a": 3.0}]], {"a": 2.0}, (0, 5))
    [[0, 0, {'a': 1.0}], [0, 5, {'a': 2.0}]]
    >>> continued([[0, 0, {"a": 1.0}], [1, [2, 9], {"a": 3.0}]], {"a": 2.0}, (1, (4, 6)))
    [[0, 0, {'a': 1.0}], [1, [2, 6], {'a': 3.0}], [1, [4, 6], {'a': 2.0}]]
    """
    epoch, at = stop
    kept: list[list[Any]] = []
    for e, point, w in old:
        if e > epoch:
            break
        point = check_point(point, "weights")
        if e == epoch:
            point = _clipped(point, at)
            if point == at:
                continue
        kept.append([e, plain_point(point), w])
    if kept and kept[-1][2] == weights:
        return kept
    return kept + [[epoch, plain_point(at), dict(weights)]]


def _clipped(point: Point, stop: Point) -> Point:
    """``point`` no later than ``stop`` in any lane."""
    if isinstance(point, int) and isinstance(stop, int):
        return min(point, stop)
    lanes = len(stop) if isinstance(stop, tuple) else len(point)  # type: ignore[arg-type]
    return check_point([min(at_lane(point, n), at_lane(stop, n)) for n in range(lanes)], "stop")


def history_hint(old: Any, epoch: int, new: Any, why: str) -> str:
    """The refusal of a resume with other weights (``why``: ``"explicit"`` or ``"no stop"``),
    naming the ``weights=`` history that continues.

    >>> history_hint([[0, 0, {"a": 1.0}]], 0, [[0, 0, {"a": 2.0}]], "no stop").split("pass ")[-1]
    "weights=[((0, 0), {'a': 1.0})] + [((E, P), new weights)]"
    """
    pairs = [((e, p), w) for e, p, w in old]
    reason = {
        "explicit": "a mix keeps its past only with the saved weights as the start of its own",
        "no stop": "the state says nowhere where the run stopped (no loader read the mix in "
        "order when it was saved)",
    }[why]
    return (
        f"the checkpoint's Mix (epoch {epoch}) has the weights {old!r}, this one {new!r}: "
        f"{reason}. To change them from position P of epoch E on (P: where the run stopped), "
        f"pass weights={pairs!r} + [((E, P), new weights)]"
    )
