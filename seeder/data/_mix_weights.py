"""A ``seeder.data.Mix``'s weights: checked, as a history of changes, and as quotas per block.

Weights are ``{source name: weight}``: finite numbers >= 0, not all 0, one for each source
(:func:`check_weights`). A mix follows a history of them, ``[((0, 0), w0), ((epoch, position),
w1), ...]``: each from its (epoch, position) on (:func:`weight_history`). A mix of streams may
change them at a position per lane, ``(epoch, {lane: position, ...})`` (or ``(epoch, [position of
lane 0, ...])``): a change point (:func:`check_point`) is an int, or a tuple of one int per lane.
Every block of
:data:`BLOCK` positions gives each source its quota, ``BLOCK * w / sum(w)`` rounded by largest
remainder (:func:`quotas`).

Example:
    >>> changes, weights = weight_history({"web": 3, "code": 1}, ["web", "code"])
    >>> changes, quotas(list(weights[0].values())).tolist()
    ([(0, 0)], [768, 256])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np

from seeder._checks import is_int
from seeder._seeding.derive import MAX_KEY

__all__ = [
    "BLOCK",
    "Weights",
    "Point",
    "check_weights",
    "weight_history",
    "quotas",
    "check_point",
    "at_lane",
    "after",
    "plain_point",
]

#: Positions per block: each block holds every source's quota.
BLOCK = 1024

Weights = Mapping[str, float]
#: Where in an epoch weights change: a position (every lane's), or one position per lane.
Point = Union[int, tuple[int, ...]]


def check_weights(weights: Any, names: Sequence[str]) -> dict[str, float]:
    """``weights`` as ``{name: float}``; raise naming what is wrong.

    Args:
        weights: a mapping of every source name to a finite weight >= 0, not all 0.
        names: the sources' names.

    Returns:
        The weights as floats, in the order of ``names``.

    Raises:
        ValueError: a name that is no source or a source without weight, a weight that is
            negative, NaN or infinite, or all weights 0.
        TypeError: ``weights`` is not a mapping.

    >>> check_weights({"a": -1, "b": 1}, ["a", "b"])
    Traceback (most recent call last):
    ...
    ValueError: Mix weights must be finite numbers >= 0: 'a': -1
    """
    if not isinstance(weights, Mapping):
        raise TypeError(f"Mix weights must be a dict of source name to weight, got {weights!r:.80}")
    unknown = sorted(str(k) for k in weights if k not in names)
    missing = [n for n in names if n not in weights]
    if unknown or missing:
        raise ValueError(
            "Mix weights must name each source once: "
            + "; ".join(
                part
                for part in (
                    f"no source named {unknown}" if unknown else "",
                    f"no weight for {missing}" if missing else "",
                )
                if part
            )
            + f" (sources: {list(names)})"
        )
    bad = []
    for n in names:
        w = weights[n]
        ok = isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0
        if not ok:
            bad.append(f"{n!r}: {w!r}")
    if bad:
        raise ValueError(f"Mix weights must be finite numbers >= 0: {', '.join(bad)}")
    if not any(weights[n] > 0 for n in names):
        raise ValueError(f"Mix weights are all 0 ({dict(weights)}): give some source a weight > 0")
    return {n: float(weights[n]) for n in names}


def quotas(weights: Sequence[float], block: int = BLOCK) -> np.ndarray:
    """Each source's positions per block: ``block * w / sum(w)`` by largest remainder, a positive
    weight at least 1.

    >>> quotas([0.7, 0.3, 0.0]).tolist()
    [717, 307, 0]
    """
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * block
    q = np.floor(exact).astype(np.int64)
    q[(w > 0) & (q == 0)] = 1
    rest = block - int(q.sum())
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    if rest > 0:
        q[order[:rest]] += 1
    while rest < 0:  # minimums taken from the largest
        q[int(np.argmax(q))] -= 1
        rest += 1
    return q


def weight_history(
    weights: Union[Weights, Sequence[tuple[tuple[int, Any], Weights]]], names: Sequence[str]
) -> tuple[list[tuple[int, Point]], list[dict[str, float]]]:
    """``weights`` (plain, or a history) as the points where each weights start, and the
    checked weights.

    Args:
        weights: ``{name: weight}``, or ``[((0, 0), weights), ((epoch, position), weights), ...]``
            (increasing, the first ``(0, 0)``; a position may be one per lane:
            :func:`check_point`).
        names: the sources' names.

    Returns:
        ``(changes, weights)``: ``[(epoch, point), ...]`` and ``[{name: float}, ...]``.

    Raises:
        ValueError: an empty history, a change that is not ``((epoch, position), weights)``, one
            that does not start at ``(0, 0)`` and increase (:func:`after`), bad weights
            (:func:`check_weights`).

    >>> weight_history([((0, 0), {"a": 1}), ((0, 0), {"a": 2})], ["a"])
    Traceback (most recent call last):
    ...
    ValueError: Mix weights' (epoch, position) must start at (0, 0) and increase, got (0, 0) at 1
    """
    history = [((0, 0), weights)] if isinstance(weights, Mapping) else list(weights)
    if not history:
        raise ValueError("Mix weights: give a dict, or a list of ((epoch, position), weights)")
    changes: list[tuple[int, Point]] = []
    checked: list[dict[str, float]] = []
    for i, pair in enumerate(history):
        at = pair[0] if isinstance(pair, (tuple, list)) and len(pair) == 2 else None
        if not (
            isinstance(at, (tuple, list))
            and len(at) == 2
            and is_int(at[0])
            and 0 <= at[0] <= MAX_KEY
        ):
            raise ValueError(
                f"Mix weights[{i}] must be ((epoch, position), weights), got {pair!r:.80}"
            )
        start = (int(at[0]), check_point(at[1], f"Mix weights[{i}]"))
        if (i == 0 and start != (0, 0)) or (i and not after(changes[-1], start)):
            raise ValueError(
                f"Mix weights' (epoch, position) must start at (0, 0) and increase, got "
                f"{start} at {i}"
            )
        changes.append(start)
        checked.append(check_weights(pair[1], names))
    return changes, checked


def check_point(at: Any, what: str) -> Point:
    """A change point: a position (an int), or one per lane: ``{lane: position}`` naming the lanes
    ``0, 1, ...`` once, or a list of positions by lane. All lanes at 0 is ``0``.

    Args:
        at: the point as given.
        what: names it in messages.

    Returns:
        An int, or a tuple of one int per lane.

    Raises:
        ValueError: not an int >= 0, nor positions by lane.

    >>> check_point({1: 7, 0: 3}, "w"), check_point([0, 0], "w")
    ((3, 7), 0)
    """
    if is_int(at) and 0 <= at <= MAX_KEY:
        return int(at)
    if isinstance(at, Mapping):
        lanes = sorted(at) if all(is_int(k) for k in at) else []
        if lanes != list(range(len(at))) or not at:
            raise ValueError(
                f"{what}: a per-lane change point {{lane: position, ...}} names each lane 0, 1, "
                f"... once, got {dict(at)!r:.80}"
            )
        at = [at[k] for k in lanes]
    if isinstance(at, (list, tuple)) and at and all(is_int(v) and 0 <= v <= MAX_KEY for v in at):
        points = tuple(int(v) for v in at)
        return points if any(points) else 0
    raise ValueError(
        f"{what}: a change point is a position (an int >= 0) or one per lane "
        f"({{lane: position, ...}}), got {at!r:.80}"
    )


def at_lane(point: Point, lane: int) -> int:
    """Lane ``lane``'s position of ``point``.

    >>> at_lane(5, 1), at_lane((3, 7), 1)
    (5, 7)
    """
    return point if isinstance(point, int) else point[lane]


def after(first: tuple[int, Point], then: tuple[int, Point]) -> bool:
    """Whether the change ``then`` comes after ``first``: in a later epoch, or in the same one
    with no lane earlier and some lane later.

    Raises:
        ValueError: two per-lane points of other lane counts.

    >>> after((0, 0), (0, (0, 4))), after((1, (2, 5)), (1, (3, 4))), after((0, 9), (1, 0))
    (True, False, True)
    """
    if first[0] != then[0]:
        return then[0] > first[0]
    a, b = first[1], then[1]
    lanes = {len(p) for p in (a, b) if isinstance(p, tuple)}
    if len(lanes) > 1:
        raise ValueError(
            f"Mix weights' per-lane change points {plain_point(a)!r:.60} and "
            f"{plain_point(b)!r:.60} name other lanes: give every change a position for each "
            "lane of the mix"
        )
    n = lanes.pop() if lanes else 1
    pa = a if isinstance(a, tuple) else (a,) * n
    pb = b if isinstance(b, tuple) else (b,) * n
    return all(x <= y for x, y in zip(pa, pb)) and pa != pb


def plain_point(point: Point) -> Union[int, list[int]]:
    """``point`` as a state keeps it: an int, or a list by lane.

    >>> plain_point((3, 7)), plain_point(0)
    ([3, 7], 0)
    """
    return point if isinstance(point, int) else list(point)
