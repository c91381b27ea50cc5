"""The verdict of ``seeder verify``: FAIL, INCOMPLETE or PASS, and the verdict on output it could
not read.

PASS means every check ran and passed. A check that FAILs makes the verdict FAIL; a check
that could not run (SKIP, with its reason) makes it INCOMPLETE, unless the user allowed
that check to be skipped (``--allow-skip``; ``--no-mid-epoch`` allows the mid-epoch check
it turns off). A session whose runs logged no per-step value seeder could read, or only
values that are not finite numbers, is a FAIL that says so and what to do, instead of
statistics over nothing.

Example:
    >>> checks = [{"name": "resume", "status": "SKIP", "summary": "not tested: no stop",
    ...            "reasons": []}]
    >>> verdict(checks)  # doctest: +NORMALIZE_WHITESPACE
    ('INCOMPLETE',
     ['resume was not tested: no stop (or pass --allow-skip to accept a verdict without it)'])
    >>> verdict(checks, allow_skip=["resume"])
    ('PASS', [])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional, Union

from seeder.verify._contract import Metrics

__all__ = [
    "verdict",
    "ALLOW_SKIP_HINT",
    "CHECK_NAMES",
    "unreadable",
    "unreadable_report",
    "EXIT_CODES",
]

#: How a user accepts a verdict without the checks that could not run.
ALLOW_SKIP_HINT = "or pass --allow-skip to accept a verdict without it"
#: The checks of a verify session, in the order the table shows them.
CHECK_NAMES = ("reproducible", "resume", "resume-mid-epoch", "variance")
#: The exit status of ``seeder verify`` for each verdict.
EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 4}


def verdict(
    checks: Sequence[dict[str, Any]], allow_skip: Union[bool, Sequence[str]] = False
) -> tuple[str, list[str]]:
    """The verdict of ``checks`` and the reasons for it: FAIL, INCOMPLETE (a SKIP not allowed) or
    PASS.

    Args:
        checks: the checks as ``analyze_verify`` makes them (``name``, ``status``, ``summary``,
            ``reasons``).
        allow_skip: ``True`` (every SKIP allowed) or the names of the checks that may be SKIP.

    Returns:
        ``(verdict, reasons)``: the reasons of the failed checks, or one per check that was not
        allowed to be skipped, with its reason and fix.
    """
    reasons = [r for c in checks for r in c["reasons"]]
    if any(c["status"] == "FAIL" for c in checks):
        return "FAIL", reasons
    if allow_skip is True:
        return "PASS", reasons
    missing = [c for c in checks if c["status"] == "SKIP" and c["name"] not in (allow_skip or ())]
    if missing:
        return "INCOMPLETE", [
            f"{c['name']} was {c['summary']} ({ALLOW_SKIP_HINT})" for c in missing
        ]
    return "PASS", reasons


def unreadable(metrics: Metrics) -> Optional[str]:
    """Why a run's per-step values cannot be judged (none is a finite number), or ``None``.

    >>> import numpy as np
    >>> unreadable(Metrics([(0,), (1,)], np.array([float("nan"), float("inf")]), [None, None]))
    'none of its 2 per-step values is a finite number (step 0: nan)'
    """
    finite = [math.isfinite(v) for v in metrics.losses.tolist()]
    if not finite or any(finite):
        return None
    return (
        f"none of its {len(finite)} per-step values is a finite number "
        f"(step {metrics.keys[0][0] if len(metrics.keys[0]) == 1 else metrics.keys[0]}: "
        f"{metrics.losses[0]})"
    )


_FIX = (
    "Let seeder record them (call seeder.init(), and ckpt.step() of a seeder.Checkpoint after "
    "each training step or step a torch optimizer: under seeder verify every step is recorded), "
    'or log JSON lines {"step": N, "loss": X} with finite '
    "losses to the "
    "metrics file ($SEEDER_METRICS) or to the output"
)


def unreadable_report(problems: dict[str, str]) -> dict[str, Any]:
    """The checks, verdict (FAIL) and reasons of a session whose runs ``problems`` (name -> what is
    wrong) logged no per-step value seeder could read.

    >>> rep = unreadable_report({"full-0": "no per-step values found in log.txt",
    ...                          "full-1": "the same"})
    >>> rep["verdict"], [c["status"] for c in rep["checks"]]
    ('FAIL', ['SKIP', 'SKIP', 'SKIP', 'SKIP'])
    >>> rep["reasons"][0][:75]
    'the output of run full-0 (and 1 other run) had no per-step values seeder co'
    """
    name, why = next(iter(problems.items()))
    others = len(problems) - 1
    also = f" (and {others} other run{'s' if others > 1 else ''})" if others else ""
    fix = "" if "seeder.init()" in why else f". {_FIX}"  # read_metrics says what to do already
    reason = f"the output of run {name}{also} had no per-step values seeder could read: {why}{fix}"
    skip = "no per-step values to compare"
    checks = [
        {
            "name": n,
            "status": "SKIP",
            "summary": f"not tested: {skip}",
            "reasons": [],
            "details": {"skipped": skip},
        }
        for n in CHECK_NAMES
    ]
    per_step = {
        "keys": [],
        "std_seeded": [],
        "std_unseeded": [],
        "variance_ratio": [],
        "median_variance_ratio": math.nan,
        "max_std_seeded": math.nan,
        "mean_std_unseeded": math.nan,
        "correlation": {},
    }
    return {
        "verdict": "FAIL",
        "reasons": [reason],
        "checks": checks,
        "skipped": list(CHECK_NAMES),
        "unreadable": problems,
        "per_step": per_step,
    }
