"""A verdict over everything a run leaves: the objects after each step and the files at the end.

The checks of :mod:`seeder.verify._analysis` compare the runs' per-step values. This adds,
for each pair of runs a check compares, the objects the runs held after each step
(:mod:`seeder.verify._states`: every module's parameters and buffers, every optimizer and
scheduler, every object the checkpoint holds) and the files each run wrote
(:mod:`seeder.verify._outputs`). A difference makes the check FAIL with a reason that
names the object and the first step it differs at, or the file. The report's
``compared`` says what was compared and what was left out by design.

Example:
    >>> rep = {"checks": [{"name": "reproducible", "status": "PASS", "reasons": []}]}
    >>> import pathlib, tempfile
    >>> judge_leftovers(rep, pathlib.Path(tempfile.mkdtemp()), repeats=2, resume_runs=0)
    >>> rep["compared"]["objects"], rep["checks"][0]["status"]
    ({}, 'PASS')
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seeder.verify._outputs import first_file_difference, left_out, run_files
from seeder.verify._seederstops import STEPS_NAME
from seeder.verify._states import (
    compared_names,
    first_difference,
    read_states,
    state_words,
)

__all__ = ["judge_leftovers", "compared_notes"]

_PAIRS = {
    "resume": ("half", "resume", "(2)", "(3)"),
    "resume-mid-epoch": ("mid", "resume-mid", "(2b)", "(3b)"),
}


def _fail(check: dict[str, Any], reason: str, what: str) -> None:
    """Make ``check`` FAIL for ``reason``; its summary says ``what`` differs."""
    if check["status"] == "PASS":
        check["summary"] = f"{check.get('summary', '')}; but {what}"
    check["status"] = "FAIL"
    check.setdefault("reasons", []).append(reason)


def _ignore_hint(path: str) -> str:
    """How to leave a file out that differs by design."""
    return (
        f" (a file that differs by design, a log of times or of the resume, is left out with "
        f"--ignore-output '{path}')"
    )


def judge_leftovers(
    report: dict[str, Any],
    out: Path,
    repeats: int,
    resume_runs: int,
    ignore: Sequence[str] = (),
) -> None:
    """Compare the objects and files the runs of ``out/runs`` left, for each check of
    ``report`` that ran; a difference makes the check FAIL naming it. Adds ``report["compared"]``.

    Args:
        report: ``analyze_verify``'s report (its ``checks`` are changed in place).
        out: verify's output folder.
        repeats: repeats of runs (1) and (4).
        resume_runs: repeats of the stopped and resumed runs.
        ignore: file patterns (``--ignore-output``) left out of the file comparison.
    """
    runs = Path(out) / "runs"
    checks = {c["name"]: c for c in report.get("checks", [])}
    states: dict[str, dict[int, dict[str, str]]] = {}

    def state(name: str) -> dict[int, dict[str, str]]:
        if name not in states:
            states[name] = read_states(runs / name / STEPS_NAME)
        return states[name]

    objects: dict[str, str] = {}
    files: set[str] = set()
    omitted: dict[str, str] = {}
    rep = checks.get("reproducible")
    if rep is not None and rep["status"] in ("PASS", "FAIL"):
        ref = state("full-0")
        objects.update(compared_names(ref))
        files.update(run_files(runs / "full-0", ignore))
        omitted.update(left_out(runs / "full-0", ignore))
        for k in range(1, repeats):
            other = f"full-{k}"
            diff = first_difference(ref, state(other))
            if diff is not None:
                step, name, kind = diff
                _fail(
                    rep,
                    f"seeded run {other} differs from full-0 in {state_words(name, kind)} from "
                    f"step {step} on: the same seed does not give the same run",
                    f"{name!r} differs from step {step} on",
                )
                break
            found = first_file_difference(
                runs / "full-0", runs / other, runs, ignore
            ) or first_file_difference(runs / other, runs / "full-0", runs, ignore)
            if found is not None:
                _fail(
                    rep,
                    f"seeded runs full-0 and {other} leave {found[0]} otherwise ({found[1]}): the "
                    f"same seed does not give the same files{_ignore_hint(found[0])}",
                    f"{found[0]} differs",
                )
                break
    for check_name, (stop, resume, stop_label, resume_label) in _PAIRS.items():
        check = checks.get(check_name)
        if check is None or check["status"] not in ("PASS", "FAIL"):
            continue
        for r in range(resume_runs):
            full = state(f"full-{r}")
            stopped, resumed = state(f"{stop}-{r}"), state(f"{resume}-{r}")
            if not (runs / f"{resume}-{r}").is_dir():
                continue
            prefix = "" if check_name == "resume" else "mid-epoch stop, "
            diff = first_difference(full, stopped)
            label, other = stop_label, "stopped"
            if diff is None:
                diff = first_difference(full, resumed)
                label, other = resume_label, "resumed"
            if diff is not None:
                step, name, kind = diff
                first = min(resumed) if resumed else None
                after = f" (resumed after step {first - 1})" if other == "resumed" and first else ""
                _fail(
                    check,
                    f"{prefix}repeat {r}: the {other} run {label} differs from the uninterrupted "
                    f"run (1) in {state_words(name, kind)} from step {step} on{after}: the "
                    f"checkpoint does not save or restore it, or the loop changes it after a "
                    f"resume",
                    f"{name!r} differs from step {step} on",
                )
                break
            found = first_file_difference(runs / f"full-{r}", runs / f"{resume}-{r}", runs, ignore)
            if found is not None:
                _fail(
                    check,
                    f"{prefix}repeat {r}: the resumed run {resume_label} leaves {found[0]} other "
                    f"than the uninterrupted run (1) ({found[1]}): what the run writes after a "
                    f"resume differs{_ignore_hint(found[0])}",
                    f"{found[0]} differs",
                )
                break
    report["compared"] = {
        "objects": objects,
        "files": sorted(files),
        "left_out": omitted,
    }


def compared_notes(compared: dict[str, Any]) -> list[str]:
    """The report's notes on what the verdict covers beyond the per-step values.

    >>> compared_notes({"objects": {"ema": "nn.Module Linear"}, "files": [], "left_out": {}})
    ["compared after every step: 'ema' (nn.Module Linear: parameters and buffers)"]
    """
    notes = []
    objects = compared.get("objects") or {}
    if objects:
        notes.append(
            "compared after every step: "
            + ", ".join(state_words(n, k) for n, k in sorted(objects.items()))
        )
    else:
        notes.append(
            "no object was compared after each step (seeder records them at seeder.Checkpoint's "
            "step()): the verdict covers the per-step values, the final digest and the files"
        )
    files = compared.get("files") or []
    if files:
        shown = ", ".join(files[:8]) + (f" and {len(files) - 8} more" if len(files) > 8 else "")
        notes.append(f"compared at the end of the runs, the files they wrote: {shown}")
    left = compared.get("left_out") or {}
    if left:
        notes.append(
            "left out by design: "
            + "; ".join(f"{path} ({why})" for path, why in sorted(left.items())[:8])
        )
    return notes
