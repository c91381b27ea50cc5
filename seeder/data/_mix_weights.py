"""A ``seeder.data.Mix``'s weights: checked, as a history of changes, and as quotas per block.

Weights are ``{source name: weight}``: finite numbers >= 0, not all 0, one for each source
(:func:`check_weights`). A mix follows a history of them, ``[((0, 0), w0), ((epoch, position),
w1), ...]``: each from its (epoch, position) on (:func:`weight_history`). Every block of
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

__all__ = ["BLOCK", "Weights", "check_weights", "weight_history", "quotas"]

#: Positions per block: each block holds every source's quota.
BLOCK = 1024

Weights = Mapping[str, float]


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
    weights: Union[Weights, Sequence[tuple[tuple[int, int], Weights]]], names: Sequence[str]
) -> tuple[list[tuple[int, int]], list[dict[str, float]]]:
    """``weights`` (plain, or a history) as the positions where each weights start, and the
    checked weights.

    Args:
        weights: ``{name: weight}``, or ``[((0, 0), weights), ((epoch, position), weights), ...]``
            (increasing, the first ``(0, 0)``).
        names: the sources' names.

    Returns:
        ``(changes, weights)``: ``[(epoch, position), ...]`` and ``[{name: float}, ...]``.

    Raises:
        ValueError: an empty history, a change that is not ``((epoch, position), weights)``, one
            that does not start at ``(0, 0)`` and increase, bad weights (:func:`check_weights`).

    >>> weight_history([((0, 0), {"a": 1}), ((0, 0), {"a": 2})], ["a"])
    Traceback (most recent call last):
    ...
    ValueError: Mix weights' (epoch, position) must start at (0, 0) and increase, got (0, 0) at 1
    """
    history = [((0, 0), weights)] if isinstance(weights, Mapping) else list(weights)
    if not history:
        raise ValueError("Mix weights: give a dict, or a list of ((epoch, position), weights)")
    changes: list[tuple[int, int]] = []
    checked: list[dict[str, float]] = []
    for i, pair in enumerate(history):
        at = pair[0] if isinstance(pair, (tuple, list)) and len(pair) == 2 else None
        if not (
            isinstance(at, (tuple, list))
            and len(at) == 2
            and all(is_int(v) and 0 <= v <= MAX_KEY for v in at)
        ):
            raise ValueError(
                f"Mix weights[{i}] must be ((epoch, position), weights), got {pair!r:.80}"
            )
        start = (int(at[0]), int(at[1]))
        if (i == 0 and start != (0, 0)) or (i and start <= changes[-1]):
            raise ValueError(
                f"Mix weights' (epoch, position) must start at (0, 0) and increase, got "
                f"{start} at {i}"
            )
        changes.append(start)
        checked.append(check_weights(pair[1], names))
    return changes, checked
