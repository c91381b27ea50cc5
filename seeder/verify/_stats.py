"""Statistics for ``seeder verify`` and ``seeder compare`` (numpy and scipy.stats).

Pure functions over loss series: alignment by step, exact and tolerant
comparison, per-step spread, the variance F test, residual correlation, paired
t intervals, and the number of unpaired runs that would give the same interval.

Example:
    >>> import numpy as np
    >>> lo, hi = paired_interval(np.array([0.10, 0.12, 0.11, 0.13]), 0.95)
    >>> round(lo, 4), round(hi, 4)
    (0.0945, 0.1355)
    >>> variance_test(np.array([1.0, 1.0, 1.0]), np.array([0.9, 1.1, 1.3]))["p_value"]
    0.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
from scipy import stats as _st

from seeder.verify._contract import Metrics, StepKey

__all__ = [
    "align",
    "Difference",
    "difference",
    "step_spread",
    "variance_test",
    "residual_correlation",
    "detrend",
    "paired_interval",
    "unpaired_runs_needed",
    "summary_value",
    "sample_var",
]


def align(series: Sequence[Metrics]) -> tuple[list[StepKey], np.ndarray]:
    """The steps all series share (in the first series' order) and a runs x steps loss matrix.

    >>> a = Metrics([(0,), (1,), (2,)], np.array([3., 2., 1.]), [0, 0, 1])
    >>> b = Metrics([(1,), (2,)], np.array([2.5, 1.5]), [0, 1])
    >>> align([a, b])
    ([(1,), (2,)], array([[2. , 1. ],
           [2.5, 1.5]]))
    """
    if not series:
        return [], np.zeros((0, 0))
    common = set(series[0].keys)
    for m in series[1:]:
        common &= set(m.keys)
    keys = [k for k in series[0].keys if k in common]
    mat = np.array([[m.as_dict()[k] for k in keys] for m in series], dtype=np.float64).reshape(
        len(series), len(keys)
    )
    return keys, mat


@dataclass
class Difference:
    """How series ``b`` differs from ``a`` on the steps ``b`` logged."""

    compared: int  # steps present in both
    missing: list[StepKey]  # steps of b absent from a
    identical: bool  # bitwise equal on every compared step (and nothing missing)
    max_abs_diff: float  # largest |b - a| over compared steps (0.0 when none)
    first_diff: Optional[StepKey]  # first step (in b's order) where they are not bitwise equal

    def within(self, atol: float) -> bool:
        return not self.missing and self.compared > 0 and self.max_abs_diff <= atol


def difference(a: Metrics, b: Metrics) -> Difference:
    """Compare ``b`` with ``a`` on ``b``'s steps, bit for bit (``==`` on float64).

    Args:
        a: the reference run's metrics (run 1 of ``seeder verify``).
        b: the run compared with it (a half run, a resumed run).

    Returns:
        How many steps were compared, which of ``b``'s steps ``a`` lacks, whether all are bitwise
        equal, the largest absolute difference and the first step that differs.

    Example:
        >>> a = Metrics([(0,), (1,)], np.array([1.0, 0.5]), [0, 0])
        >>> d = difference(a, Metrics([(1,)], np.array([0.5 + 1e-12]), [0]))
        >>> d.identical, d.max_abs_diff < 1e-11, d.first_diff
        (False, True, (1,))
    """
    da = a.as_dict()
    missing = [k for k in b.keys if k not in da]
    pairs = [(k, da[k], v) for k, v in zip(b.keys, b.losses.tolist()) if k in da]
    diffs = np.array(
        [abs(v - u) if not (math.isnan(u) and math.isnan(v)) else 0.0 for _, u, v in pairs],
        dtype=np.float64,
    )
    first = next(
        (k for k, u, v in pairs if not (u == v or (math.isnan(u) and math.isnan(v)))), None
    )
    max_diff = float(np.nanmax(np.where(np.isnan(diffs), np.inf, diffs))) if len(diffs) else 0.0
    return Difference(
        len(pairs), missing, first is None and not missing and bool(pairs), max_diff, first
    )


def sample_var(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Sample variance (ddof=1), exactly 0 where all values are equal.

    numpy's two-pass formula can leave ~1e-33 for equal values ((a+a+a)/3 need not be a).

    >>> float(sample_var(np.array([0.1, 0.1, 0.1])))
    0.0
    """
    v = np.asarray(values, dtype=np.float64)
    return np.where(np.ptp(v, axis=axis) == 0, 0.0, np.var(v, axis=axis, ddof=1))


def step_spread(matrix: np.ndarray) -> np.ndarray:
    """Sample standard deviation across runs at each step (0 where equal); NaN with fewer than 2
    runs."""
    if matrix.shape[0] < 2:
        return np.full(matrix.shape[1], np.nan)
    return np.sqrt(sample_var(matrix, axis=0))


def variance_test(seeded: np.ndarray, unseeded: np.ndarray) -> dict[str, float]:
    """One-sided F test that the seeded runs vary less than the unseeded runs.

    ``seeded`` and ``unseeded`` hold one value per run (independent runs). Returns the
    two sample variances, their ratio F = var_seeded / var_unseeded and the p-value
    P(F' <= F) for F' ~ F(n_s - 1, n_u - 1), i.e. how likely a ratio this small is if
    seeding did not reduce the variance. Ratio and p-value are NaN when the unseeded
    runs do not vary at all.
    """
    s, u = np.asarray(seeded, dtype=np.float64), np.asarray(unseeded, dtype=np.float64)
    if len(s) < 2 or len(u) < 2:
        raise ValueError(
            f"the variance test needs at least 2 runs of each kind, got {len(s)} seeded and "
            f"{len(u)} unseeded"
        )
    vs, vu = float(sample_var(s)), float(sample_var(u))
    if vu == 0.0:
        return {"var_seeded": vs, "var_unseeded": vu, "ratio": math.nan, "p_value": math.nan}
    ratio = vs / vu
    return {
        "var_seeded": vs,
        "var_unseeded": vu,
        "ratio": ratio,
        "p_value": float(_st.f.cdf(ratio, len(s) - 1, len(u) - 1)),
    }


def detrend(x: np.ndarray, window: Optional[int] = None) -> np.ndarray:
    """A loss curve minus its own centred moving average (``window`` steps, default a tenth, odd, >=
    3).

    >>> detrend(np.arange(10.0), 3)[1:-1].tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    w = window or max(3, n // 10)
    w = min(w | 1, n if n % 2 else max(1, n - 1))
    kernel = np.ones(w)
    counts = np.convolve(np.ones(n), kernel, mode="same")
    return x - np.convolve(x, kernel, mode="same") / counts


def residual_correlation(
    a: np.ndarray, b: Optional[np.ndarray] = None, window: Optional[int] = None
) -> float:
    """Mean Pearson correlation between runs of their fluctuations around their own trend.

    Every loss curve falls, so raw curves always correlate; what a seed shares between
    runs is the step-to-step wiggle. Each run is detrended by its own moving average
    (:func:`detrend`), so runs are not coupled through a shared mean. With one matrix
    (runs x steps) the mean is over its distinct pairs of rows; with two, over all
    (row of a, row of b) pairs. Rows without variation are left out; NaN when no pair is left.

    >>> t = np.linspace(1, 0, 50); w = np.sin(np.arange(50.0))
    >>> round(residual_correlation(np.stack([t + w, t + w, t - w])), 3)
    -0.333
    """
    ra = np.array([detrend(r, window) for r in np.atleast_2d(np.asarray(a, dtype=np.float64))])
    rb = (
        ra
        if b is None
        else np.array([detrend(r, window) for r in np.atleast_2d(np.asarray(b, dtype=np.float64))])
    )
    vals = []
    for i in range(ra.shape[0]):
        for j in range(rb.shape[0]):
            if b is None and j <= i:
                continue
            x, y = ra[i], rb[j]
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
            vals.append(float(np.corrcoef(x, y)[0, 1]))
    return float(np.mean(vals)) if vals else math.nan


def paired_interval(diffs: np.ndarray, level: float) -> tuple[float, float]:
    """Two-sided Student-t confidence interval for the mean of paired differences.

    With no spread at all the interval is the single value of the mean.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError(f"a paired interval needs at least 2 pairs, got {len(d)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean, sd = float(d.mean()), math.sqrt(float(sample_var(d)))
    if sd == 0.0:
        return mean, mean
    lo, hi = _st.t.interval(level, len(d) - 1, loc=mean, scale=sd / math.sqrt(len(d)))
    return float(lo), float(hi)


def unpaired_runs_needed(
    sd_a: float, sd_b: float, half_width: float, level: float, limit: int = 10**9
) -> float:
    """Runs per configuration an unpaired (unseeded) comparison needs for a CI half-width.

    The unpaired interval for mean(b) - mean(a) with ``m`` runs each is
    ``t(level, df) * sqrt((sd_a**2 + sd_b**2) / m)`` with Welch's df; this returns the
    smallest ``m >= 2`` that brings it down to ``half_width`` (``inf`` past ``limit``).

    >>> unpaired_runs_needed(1.0, 1.0, 0.5, 0.95)
    32
    """
    var = sd_a**2 + sd_b**2
    if var == 0.0:
        return 2
    if half_width <= 0.0:
        return math.inf
    z = _st.norm.ppf(0.5 + level / 2)
    m = max(2, math.ceil(var * (z / half_width) ** 2))  # t >= z, so the answer is at least this
    if m > limit:
        return math.inf

    def enough(m: int) -> bool:
        df = var**2 / ((sd_a**4 + sd_b**4) / (m - 1))
        return _st.t.ppf(0.5 + level / 2, df) * math.sqrt(var / m) <= half_width

    lo = m - 1  # the answer is > lo
    while m <= limit and not enough(m):
        lo, m = m, m + max(1, m // 100)
    if m > limit:
        return math.inf
    while m - lo > 1:  # smallest m in (lo, m] that is enough
        mid = (lo + m) // 2
        lo, m = (lo, mid) if enough(mid) else (mid, m)
    return m
    return math.inf


def summary_value(m: Metrics) -> float:
    """The number that stands for a run: its mean loss over the last epoch."""
    mask = m.summary_mask()
    if not mask.any():
        raise ValueError("a run with no steps has no summary value")
    return float(m.losses[mask].mean())
