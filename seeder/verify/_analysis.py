"""Verdicts: what ``seeder verify`` and ``seeder compare`` decide from the losses.

``analyze_verify`` takes the metrics of the run kinds of the methodology (``full``,
``half``, ``resume``, ``unseeded``, and for the mid-epoch stop ``mid`` and
``resume-mid``; one of each per repeat) and makes four checks:

* **reproducible**: every seeded uninterrupted run (1) equals the first one, step by
  step, bit for bit (or within ``atol``), and so do their final digests.
* **resume** (stop at an epoch boundary) and **resume-mid-epoch** (stop inside an
  epoch): for each repeat, the stopped run (2)/(2b) equals run (1) on its steps, the
  resumed run (3)/(3b) equals run (1) on the remaining steps, together they log every
  step of (1) exactly once, and the resumed run's final digest equals (1)'s. A check
  whose runs were not part of the session is SKIP, with the reason.
* **variance**: the seeded runs vary less than the unseeded runs (4): a one-sided F
  test on one value per run (the mean loss of the last epoch), significant at
  ``alpha``. Identical unseeded runs fail it: nothing random is left for a seed to fix.

The verdict is FAIL when a check FAILs, INCOMPLETE when none FAILs but a check was
SKIP that the user did not allow to be (``allow_skip``), and PASS when every check ran
and passed (or was skipped with the user's leave).

``analyze_compare`` pairs runs of two configurations by seed and gives t intervals
for the mean paired difference.

Example:
    >>> import numpy as np
    >>> from seeder.verify import Metrics
    >>> def m(v, keys=range(4)):
    ...     return Metrics([(k,) for k in keys], np.array(v, float), [k // 2 for k in keys])
    >>> runs = {"full": [m([4, 3, 2, 1])] * 2, "half": [m([4, 3], range(2))] * 2,
    ...         "resume": [m([2, 1], range(2, 4))] * 2,
    ...         "unseeded": [m([4, 3, 2, 1.5]), m([4, 3.1, 2, 1.2])]}
    >>> rep = analyze_verify(runs)
    >>> rep["verdict"]
    'INCOMPLETE'
    >>> [(c["name"], c["status"]) for c in rep["checks"]]  # doctest: +NORMALIZE_WHITESPACE
    [('reproducible', 'PASS'), ('resume', 'PASS'), ('resume-mid-epoch', 'SKIP'),
     ('variance', 'PASS')]
    >>> analyze_verify(runs, allow_skip=True)["verdict"]
    'PASS'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from seeder.verify import _stats as stats
from seeder.verify._contract import Metrics, StepKey, format_step_key
from seeder.verify._verdict import verdict

__all__ = [
    "analyze_verify",
    "analyze_compare",
    "stop_point",
    "RUN_KINDS",
    "MID_KINDS",
    "ALL_KINDS",
    "RESUME_CHECKS",
]

#: Run kinds of the methodology, with the numbers NVIDIA seeder's README gives them and what they
#: are.
RUN_KINDS = {
    "full": "1: seeded, X epochs",
    "half": "2: seeded, X/2 epochs, checkpoint",
    "resume": "3: seeded, resumed from (2) to X",
    "unseeded": "4: unseeded, X epochs",
}
#: The mid-epoch stop: run kinds added where the script takes a step stop flag.
MID_KINDS = {
    "mid": "2b: seeded, stopped mid-epoch at step S, checkpoint",
    "resume-mid": "3b: seeded, resumed from (2b) to X",
}
ALL_KINDS = {**RUN_KINDS, **MID_KINDS}

#: ``diagnose(check name, repeat)``: why a resumed run diverged, as a dict with a ``message``, or
#: ``None``.
Diagnose = Callable[[str, int], Optional[dict[str, Any]]]


def _grouped(found: Sequence[tuple[int, str, str]], label: str) -> list[str]:
    """One reason per kind of failure: the first occurrence's message, naming the others.

    ``label`` formats a repeat number, e.g. ``"repeat {}"``.
    """
    out: list[str] = []
    seen: dict[str, list[tuple[int, str]]] = {}
    for r, kind, msg in found:
        seen.setdefault(kind, []).append((r, msg))
    for items in seen.values():
        (r0, msg), others = items[0], [label.format(r) for r, _ in items[1:]]
        also = f" (also {', '.join(others)})" if others else ""
        out.append(f"{label.format(r0)}: {msg}{also}")
    return out


def _check(
    name: str, ok: bool, summary: str, details: dict[str, Any], reasons: Optional[list[str]] = None
) -> dict[str, Any]:
    return {
        "name": name,
        "status": "PASS" if ok else "FAIL",
        "summary": summary,
        "reasons": reasons or [],
        "details": details,
    }


def _from_step(key: Optional[StepKey]) -> str:
    """`` from step K on`` for the first differing step, empty when no compared step differs."""
    return f" from step {format_step_key(key)} on" if key is not None else ""


def _close(d: stats.Difference, atol: float) -> bool:
    return d.identical or (atol > 0 and d.within(atol))


def _check_reproducible(full: Sequence[Metrics], atol: float) -> dict[str, Any]:
    ref = full[0]
    diffs = [stats.difference(ref, m) for m in full[1:]]
    # Steps of the reference that a later run never logged count as a difference too.
    missing = [sorted(set(ref.keys) - set(m.keys)) for m in full[1:]]
    bitwise = all(d.identical for d in diffs) and not any(missing)
    max_diff = max((d.max_abs_diff for d in diffs), default=0.0)
    digests = [m.digest for m in full]
    digest_ok = None if any(g is None for g in digests) else len(set(digests)) == 1
    # Digests are bitwise by nature: with a tolerance they are reported, not voted on.
    ok = (
        all(_close(d, atol) for d in diffs)
        and not any(missing)
        and (digest_ok is not False or atol > 0)
    )
    found: list[tuple[int, str, str]] = []
    for r, (d, miss) in enumerate(zip(diffs, missing), 1):
        if miss or d.missing:
            found.append(
                (
                    r,
                    "steps",
                    f"logged different steps than full-0 ({len(miss)} missing, "
                    f"{len(d.missing)} extra)",
                )
            )
        elif not _close(d, atol):
            found.append(
                (
                    r,
                    "diff",
                    f"differs from seeded run full-0{_from_step(d.first_diff)} "
                    f"(largest |{full[0].quantity} difference| {d.max_abs_diff:.3g}): the same "
                    f"seed does not give the same run",
                )
            )
    reasons = _grouped(found, "seeded run full-{}")
    if digest_ok is False and not reasons and atol == 0:
        reasons.append(
            f"seeded runs end with different model digests ({len(set(digests))} distinct) although "
            f"their losses agree"
        )
    summary = f"{len(full)} seeded runs " + (
        "bitwise identical"
        if bitwise
        else f"agree within {atol:g}"
        if ok
        else f"differ (largest |{full[0].quantity} difference| {max_diff:.3g})"
    )
    return _check(
        "reproducible",
        ok,
        summary,
        {
            "runs": len(full),
            "bitwise": bitwise,
            "max_abs_diff": max_diff,
            "digests_equal": digest_ok,
        },
        reasons,
    )


def stop_point(stopped: Metrics, full: Metrics) -> dict[str, Any]:
    """Where a stopped run ended: its last step, that step's epoch, how far into the epoch, and
    whether it ends it.

    >>> import numpy as np
    >>> f = Metrics([(k,) for k in range(8)], np.zeros(8), [k // 4 for k in range(8)])
    >>> stop_point(Metrics(f.keys[:6], np.zeros(6), f.epochs[:6]), f)["text"]
    'mid-epoch at step 5 (2 of 4 steps into epoch 1)'
    """
    if not len(stopped):
        return {
            "step": None,
            "epoch": None,
            "into_epoch": None,
            "epoch_steps": None,
            "epoch_boundary": None,
            "text": "before its first step",
        }
    last, epoch = stopped.keys[-1], stopped.epochs[-1]
    if len(set(full.epochs)) < 2:  # iteration-based: no epoch to be inside of
        return {
            "step": list(last),
            "epoch": epoch,
            "into_epoch": None,
            "epoch_steps": None,
            "epoch_boundary": None,
            "text": f"at step {format_step_key(last)} of {len(full)} (no epochs)",
        }
    into = sum(1 for e in stopped.epochs if e == epoch) if epoch is not None else None
    per = sum(1 for e in full.epochs if e == epoch) if epoch is not None else None
    boundary = None if into is None or not per else into >= per
    if boundary:
        text = f"at the end of epoch {epoch} (step {format_step_key(last)})"
    elif boundary is False:
        text = (
            f"mid-epoch at step {format_step_key(last)} ({into} of {per} steps into epoch {epoch})"
        )
    else:
        text = f"at step {format_step_key(last)}"
    return {
        "step": list(last),
        "epoch": epoch,
        "into_epoch": into,
        "epoch_steps": per,
        "epoch_boundary": boundary,
        "text": text,
    }


#: Names of the two resume checks, and the run labels each one uses.
RESUME_CHECKS = {"resume": ("(2)", "(3)"), "resume-mid-epoch": ("(2b)", "(3b)")}
_GENERIC_CAUSE = (
    "the checkpoint does not restore everything (RNG/seeder state, optimizer, sampler position)"
)


@dataclass
class _Repeat:
    """One repeat of a resume check: the stopped run (2) and the resumed run (3) against (1)."""

    full: Metrics
    stopped: Metrics
    resumed: Metrics
    before: stats.Difference  # (2) against (1)
    after: stats.Difference  # (3) against (1)
    overlap: list[StepKey]  # steps both (2) and (3) logged
    uncovered: list[StepKey]  # steps of (1) neither logged
    digest_ok: Optional[bool]


def _repeat(f: Metrics, h: Metrics, s: Metrics) -> _Repeat:
    done = set(h.keys) | set(s.keys)
    return _Repeat(
        f,
        h,
        s,
        stats.difference(f, h),
        stats.difference(f, s),
        sorted(set(h.keys) & set(s.keys)),
        [k for k in f.keys if k not in done],
        None if (f.digest is None or s.digest is None) else f.digest == s.digest,
    )


def _repeat_record(r: int, p: _Repeat, atol: float) -> dict[str, Any]:
    """The JSON record of repeat ``r``: whether it is bitwise, ok, where it stopped, and its
    differences."""
    dh, ds = p.before, p.after
    clean = not p.overlap and not p.uncovered
    first_resumed = p.resumed.keys[0] if len(p.resumed) else None
    return {
        "repeat": r,
        "bitwise": dh.identical and ds.identical and clean and p.digest_ok is not False,
        "ok": _close(dh, atol)
        and _close(ds, atol)
        and clean
        and (p.digest_ok is not False or atol > 0),
        "stopped_at": stop_point(p.stopped, p.full),
        "max_abs_diff": max(dh.max_abs_diff, ds.max_abs_diff),
        "max_abs_diff_before_checkpoint": dh.max_abs_diff,
        "max_abs_diff_after_resume": ds.max_abs_diff,
        "first_resumed_step": list(first_resumed) if first_resumed else None,
        "first_diff": list(ds.first_diff) if ds.first_diff else None,
        "digests_equal": p.digest_ok,
        "overlap_steps": len(p.overlap),
        "missing_steps": len(p.uncovered),
        "diagnosis": None,
    }


def _before_resume(p: _Repeat, labels: tuple[str, str], atol: float) -> Optional[tuple[str, str]]:
    """``(kind, message)`` of a failure that shows before the resumed steps are compared: a run
    that logged nothing, steps logged twice, a stopped run that already differs."""
    stopped_label, resumed_label = labels
    dh = p.before
    if not len(p.resumed):
        return "empty", f"the resumed run {resumed_label} logged no steps"
    if p.overlap:
        return (
            "overlap",
            f"the resumed run {resumed_label} logged {len(p.overlap)} step(s) the stopped "
            f"run {stopped_label} had already done (from step "
            f"{format_step_key(p.overlap[0])}): it did not continue from the checkpoint",
        )
    if not len(p.stopped):
        return "empty", f"the stopped run {stopped_label} logged no steps"
    if dh.first_diff is not None and not _close(dh, atol):
        # A run (2) that only logged steps (1) lacks is reported as such by _after_resume.
        return (
            "before",
            f"the stopped run {stopped_label} already differs from (1) at step "
            f"{format_step_key(dh.first_diff)} (largest |loss difference| "
            f"{dh.max_abs_diff:.3g}), before any checkpoint was loaded",
        )
    return None


def _after_resume(
    p: _Repeat, labels: tuple[str, str], atol: float, cause: Optional[str]
) -> Optional[tuple[str, str]]:
    """``(kind, message)`` of a failure of the resumed steps: steps (1) lacks, values that differ,
    steps nobody logged, a final digest that differs; ``cause`` is the diagnosis."""
    stopped_label, resumed_label = labels
    dh, ds = p.before, p.after
    because = f": {cause}" if cause else ""
    first = (
        f" from step {format_step_key(ds.first_diff)} on (largest |loss difference| "
        f"{ds.max_abs_diff:.3g}; resumed at step {format_step_key(p.resumed.keys[0])})"
        if ds.first_diff is not None  # a compared step: run (3) logged one
        else ""
    )
    if ds.missing or dh.missing:
        also = f"; the resumed run differs from (1){first}" if first else ""
        return (
            "extra",
            f"runs {stopped_label}+{resumed_label} logged steps the uninterrupted run (1) "
            f"does not have (first {format_step_key((ds.missing or dh.missing)[0])}){also}"
            f"{because}",
        )
    if not _close(ds, atol):
        return (
            "after",
            f"the resumed run {resumed_label} differs from the uninterrupted run "
            f"(1){first}: {cause or _GENERIC_CAUSE}",
        )
    if p.uncovered:
        return (
            "uncovered",
            f"{len(p.uncovered)} step(s) of (1) were logged by neither {stopped_label} nor "
            f"{resumed_label}, first {format_step_key(p.uncovered[0])}",
        )
    if p.digest_ok is False:
        return (
            "digest",
            f"the resumed run {resumed_label} ends with a different model digest than (1) "
            f"although the losses agree{because}",
        )
    return None


def _resume_summary(name: str, per_repeat: list[dict[str, Any]], atol: float) -> str:
    ok = all(p["ok"] for p in per_repeat)
    bitwise = all(p["bitwise"] for p in per_repeat)
    max_diff = max((p["max_abs_diff"] for p in per_repeat), default=0.0)
    where = per_repeat[0]["stopped_at"]["text"] if per_repeat else "nowhere"
    if name == "resume-mid-epoch" and per_repeat and per_repeat[0]["stopped_at"]["epoch_boundary"]:
        where += ", an epoch boundary, not mid-epoch"
    return f"stopped {where}: " + (
        "resumed runs bitwise identical to uninterrupted runs"
        if bitwise
        else f"resumed runs agree within {atol:g} (largest difference {max_diff:.3g})"
        if ok
        else f"resumed runs differ from uninterrupted runs (largest |loss difference| "
        f"{max_diff:.3g})"
    )


def _check_resume(
    name: str,
    full: Sequence[Metrics],
    half: Sequence[Metrics],
    resume: Sequence[Metrics],
    atol: float,
    diagnose: Optional[Diagnose] = None,
) -> dict[str, Any]:
    labels = RESUME_CHECKS[name]
    found: list[tuple[int, str, str]] = []  # (repeat, kind of failure, message)
    per_repeat: list[dict[str, Any]] = []  # one JSON record per repeat
    for r, (f, h, s) in enumerate(zip(full, half, resume)):
        p = _repeat(f, h, s)
        rec = _repeat_record(r, p, atol)
        per_repeat.append(rec)
        if rec["ok"]:
            continue
        cause = None
        if len(s) and _close(p.before, atol) and not p.overlap and diagnose is not None:
            rec["diagnosis"] = diagnose(name, r)  # the divergence is after the checkpoint
            cause = rec["diagnosis"]["message"] if rec["diagnosis"] is not None else None
        failure = _before_resume(p, labels, atol) or _after_resume(p, labels, atol, cause)
        if failure is not None:
            found.append((r, *failure))
    ok = all(p["ok"] for p in per_repeat)
    reasons = [
        ("" if name == "resume" else "mid-epoch stop, ") + x for x in _grouped(found, "repeat {}")
    ]
    details = {
        "bitwise": all(p["bitwise"] for p in per_repeat),
        "max_abs_diff": max((p["max_abs_diff"] for p in per_repeat), default=0.0),
        "repeats": per_repeat,
    }
    return _check(name, ok, _resume_summary(name, per_repeat, atol), details, reasons)


def _skipped(name: str, why: str) -> dict[str, Any]:
    return {
        "name": name,
        "status": "SKIP",
        "summary": f"not tested: {why}",
        "reasons": [],
        "details": {"skipped": why},
    }


def _check_variance(
    full: Sequence[Metrics], unseeded: Sequence[Metrics], alpha: float
) -> dict[str, Any]:
    s = np.array([stats.summary_value(m) for m in full])
    u = np.array([stats.summary_value(m) for m in unseeded])
    t = stats.variance_test(s, u)
    quantity = full[0].quantity if full else "loss"
    details = {
        "statistic": f"mean {quantity} of the last epoch, one value per run",
        "alpha": alpha,
        "seeded_values": s.tolist(),
        "unseeded_values": u.tolist(),
        "std_seeded": math.sqrt(t["var_seeded"]),
        "std_unseeded": math.sqrt(t["var_unseeded"]),
        "variance_ratio": t["ratio"],
        "p_value": t["p_value"],
    }
    bad = [
        f"{kind}-{i}"
        for kind, vals in (("full", s), ("unseeded", u))
        for i, v in enumerate(vals)
        if not math.isfinite(v)
    ]
    if bad:
        return _check(
            "variance",
            False,
            f"last-epoch {quantity} is not a finite number in {len(bad)} run(s)",
            details,
            [
                f"the last-epoch {quantity} of run(s) {', '.join(bad)} is not a finite number (NaN "
                f"or infinite): the training diverged or the logged values are not losses, so no "
                f"spread can be compared"
            ],
        )
    if t["var_unseeded"] == 0.0:
        return _check(
            "variance",
            False,
            "unseeded runs are identical",
            details,
            [
                "the unseeded runs (4) are identical to each other: the script seeds itself when "
                "--seed is absent (or has no randomness), so the seed cannot be shown to "
                "control the run"
            ],
        )
    ok = t["p_value"] < alpha
    summary = (
        f"last-epoch {quantity}: seeded std {details['std_seeded']:.3g} vs unseeded std "
        f"{details['std_unseeded']:.3g} (variance ratio {t['ratio']:.3g}, p = {t['p_value']:.3g})"
    )
    reasons = (
        []
        if ok
        else [
            f"seeded runs are not less spread than unseeded runs (variance ratio {t['ratio']:.3g}, "
            f"one-sided F test p = {t['p_value']:.3g} >= {alpha:g}): the seed does not "
            f"control the run"
        ]
    )
    return _check("variance", ok, summary, details, reasons)


def _per_step(
    full: Sequence[Metrics], resume: Sequence[Metrics], unseeded: Sequence[Metrics]
) -> dict[str, Any]:
    keys, fm = stats.align(list(full) + list(unseeded))
    seeded_m, unseeded_m = fm[: len(full)], fm[len(full) :]
    sd_s, sd_u = stats.step_spread(seeded_m), stats.step_spread(unseeded_m)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(sd_u > 0, sd_s**2 / np.where(sd_u > 0, sd_u**2, 1.0), np.nan)
    corr = {}
    if len(keys) >= 3:
        corr["seeded_vs_seeded"] = stats.residual_correlation(seeded_m)
        corr["unseeded_vs_unseeded"] = stats.residual_correlation(unseeded_m)
        corr["seeded_vs_unseeded"] = stats.residual_correlation(seeded_m, unseeded_m)
        # Resumed runs against their own uninterrupted run, on the resumed steps.
        rs = []
        index = {k: i for i, k in enumerate(keys)}
        for r, s in enumerate(resume):
            ks = [k for k in s.keys if k in index]
            if len(ks) >= 3:
                cols = [index[k] for k in ks]
                sv = np.array([s.as_dict()[k] for k in ks])
                rs.append(stats.residual_correlation(fm[r, cols][None], sv[None]))
        corr["full_vs_resumed"] = (
            float(np.nanmean(rs)) if rs and not all(math.isnan(v) for v in rs) else math.nan
        )
    finite = ratio[np.isfinite(ratio)]
    return {
        "keys": [list(k) for k in keys],
        "std_seeded": sd_s.tolist(),
        "std_unseeded": sd_u.tolist(),
        "variance_ratio": ratio.tolist(),
        "median_variance_ratio": float(np.median(finite)) if len(finite) else math.nan,
        "max_std_seeded": float(np.nanmax(sd_s)) if len(keys) else math.nan,
        "mean_std_unseeded": float(np.nanmean(sd_u)) if len(keys) else math.nan,
        "correlation": corr,
    }


def _validate(runs: Mapping[str, Sequence[Metrics]], atol: float, alpha: float) -> None:
    """Raise ``ValueError`` unless :func:`analyze_verify` can take ``runs``, ``atol`` and
    ``alpha``."""
    if not isinstance(atol, (int, float)) or atol < 0 or math.isnan(atol):
        raise ValueError(f"atol must be a number >= 0, got {atol!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    missing = [k for k in ("full", "unseeded") if k not in runs]
    for pair in (("half", "resume"), ("mid", "resume-mid")):
        if (pair[0] in runs) != (pair[1] in runs):
            missing.append(pair[1] if pair[0] in runs else pair[0])
    if missing:
        raise ValueError(f"runs lacks the kinds {missing}")
    n = {k: len(v) for k, v in runs.items() if k in ALL_KINDS}
    if n["full"] != n["unseeded"] or n["full"] < 2:
        raise ValueError(f"runs (1) and (4) need the same number of repeats, at least 2; got {n}")
    for stop_kind, resume_kind in (("half", "resume"), ("mid", "resume-mid")):
        if stop_kind in n and (
            n[stop_kind] != n[resume_kind] or not 1 <= n[stop_kind] <= n["full"]
        ):
            raise ValueError(
                f"{stop_kind!r} and {resume_kind!r} need the same number of repeats, from 1 to the "
                f"repeats of 'full'; got {n}"
            )


def analyze_verify(
    runs: Mapping[str, Sequence[Metrics]],
    *,
    atol: float = 0.0,
    alpha: float = 0.05,
    diagnose: Optional[Diagnose] = None,
    skipped: Optional[dict[str, str]] = None,
    allow_skip: Union[bool, Sequence[str]] = False,
) -> dict[str, Any]:
    """Checks and per-step statistics for the runs of one verify session.

    ``runs`` maps run kinds (:data:`RUN_KINDS`, :data:`MID_KINDS`) to one :class:`Metrics`
    per repeat. ``full`` and ``unseeded`` are needed, at least two repeats each; ``half`` +
    ``resume`` and ``mid`` + ``resume-mid`` come in pairs (repeat r resumes run ``full`` r;
    a pair may have fewer repeats, at least one), and a missing pair makes its check SKIP
    with the reason ``skipped[check name]``. ``diagnose(check, repeat)``
    may explain a resume failure (a :class:`seeder.verify._diagnose.Diagnosis` as a
    dict). Returns a dict with ``verdict`` (:func:`verdict`: FAIL, INCOMPLETE or PASS;
    ``allow_skip`` names the checks that may be SKIP, ``True`` all), ``reasons``, ``checks``,
    ``skipped`` (the names of the checks that were SKIP) and ``per_step``.
    """
    _validate(runs, atol, alpha)
    skipped = skipped or {}
    full, unseeded = list(runs["full"]), list(runs["unseeded"])
    checks = [_check_reproducible(full, atol)]
    for name, (stop_kind, resume_kind) in (
        ("resume", ("half", "resume")),
        ("resume-mid-epoch", ("mid", "resume-mid")),
    ):
        if stop_kind in runs:
            checks.append(
                _check_resume(
                    name, full, list(runs[stop_kind]), list(runs[resume_kind]), atol, diagnose
                )
            )
        else:
            checks.append(
                _skipped(name, skipped.get(name, "its runs were not part of this session"))
            )
    checks.append(_check_variance(full, unseeded, alpha))
    decided, reasons = verdict(checks, allow_skip)
    return {
        "verdict": decided,
        "reasons": reasons,
        "checks": checks,
        "skipped": [c["name"] for c in checks if c["status"] == "SKIP"],
        "per_step": _per_step(full, list(runs.get("resume", [])), unseeded),
    }


def analyze_compare(
    a: Sequence[Metrics], b: Sequence[Metrics], levels: Sequence[float] = (0.95, 0.99)
) -> dict[str, Any]:
    """Paired comparison of configuration B against A (``a[i]`` and ``b[i]`` share a seed).

    The decision uses one value per run (mean loss of the last epoch): the paired
    differences ``b[i] - a[i]`` get Student-t intervals at each level; the first level
    decides ``differs``. The spread of A and B across seeds is the spread unseeded runs
    would have, from which the runs an unpaired comparison needs for the same interval
    width follow (:func:`stats.unpaired_runs_needed`).
    """
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(
            f"a paired comparison needs the same number of runs per configuration, at least 2; got "
            f"{len(a)} and {len(b)}"
        )
    va = np.array([stats.summary_value(m) for m in a])
    vb = np.array([stats.summary_value(m) for m in b])
    d = vb - va
    intervals = {}
    for lv in levels:
        lo, hi = stats.paired_interval(d, lv)
        half_width = (hi - lo) / 2
        sd_a, sd_b = math.sqrt(float(stats.sample_var(va))), math.sqrt(float(stats.sample_var(vb)))
        intervals[f"{lv:g}"] = {
            "low": lo,
            "high": hi,
            "contains_zero": bool(lo <= 0.0 <= hi),
            "half_width": half_width,
            "unpaired_runs_needed": stats.unpaired_runs_needed(sd_a, sd_b, half_width, lv),
        }
    first = intervals[f"{levels[0]:g}"]
    keys, ma = stats.align(list(a) + list(b))
    am, bm = ma[: len(a)], ma[len(a) :]
    dm = bm - am
    step_ci = {}
    for lv in levels:
        lo_hi = [stats.paired_interval(dm[:, j], lv) for j in range(dm.shape[1])]
        step_ci[f"{lv:g}"] = {"low": [x[0] for x in lo_hi], "high": [x[1] for x in lo_hi]}
    differs = not first["contains_zero"]
    var_d = float(stats.sample_var(d))
    unpaired_var = float(stats.sample_var(va) + stats.sample_var(vb))
    reduction = unpaired_var / var_d if var_d > 0 else (math.inf if unpaired_var > 0 else 1.0)
    mean_d = float(d.mean())
    summary = f"B - A = {mean_d:+.4g} (95% CI [{first['low']:.4g}, {first['high']:.4g}]): " + (
        "B differs from A" if differs else "no difference detected"
    )
    return {
        "differs": differs,
        "summary": summary,
        "statistic": "mean loss of the last epoch, one value per run",
        "pairs": len(a),
        "values_a": va.tolist(),
        "values_b": vb.tolist(),
        "paired_differences": d.tolist(),
        "mean_difference": mean_d,
        "std_difference": math.sqrt(float(stats.sample_var(d))),
        "std_a": math.sqrt(float(stats.sample_var(va))),
        "std_b": math.sqrt(float(stats.sample_var(vb))),
        "variance_reduction": reduction,
        "intervals": intervals,
        "per_step": {
            "keys": [list(k) for k in keys],
            "mean_a": am.mean(axis=0).tolist(),
            "mean_b": bm.mean(axis=0).tolist(),
            "mean_difference": dm.mean(axis=0).tolist(),
            "ci": step_ci,
        },
    }
