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
from typing import Any, Optional

from seeder.verify._outputs import first_file_difference, left_out, only_in, run_files
from seeder.verify._seederstops import STEPS_NAME
from seeder.verify._states import (
    States,
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


#: Why a file only the resumed runs leave is no difference: their stopped run left it too.
_LEFT_BY_STOP = (
    "left only by the resumed runs, which start from a copy of their stopped run's folder: the "
    "checkpoint the resume loaded, or what the stopped run wrote"
)


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


class _Runs:
    """The runs' folders under ``out/runs``, their step states read once each."""

    def __init__(self, out: Path, ignore: Sequence[str]):
        self.root, self.ignore = Path(out) / "runs", tuple(ignore)
        self._states: dict[str, States] = {}

    def state(self, name: str) -> States:
        if name not in self._states:
            self._states[name] = read_states(self.root / name / STEPS_NAME)
        return self._states[name]

    def files_differ(self, ref: str, other: str) -> Optional[tuple[str, str]]:
        """The first file ``ref`` left that ``other`` left otherwise or not at all."""
        return first_file_difference(self.root / ref, self.root / other, self.root, self.ignore)


def _judge_reproducible(check: dict[str, Any], runs: _Runs, repeats: int) -> None:
    """Each seeded run against full-0: its objects after each step, then its files (both ways)."""
    ref = runs.state("full-0")
    for k in range(1, repeats):
        other = f"full-{k}"
        diff = first_difference(ref, runs.state(other))
        if diff is not None:
            step, name, kind = diff
            _fail(
                check,
                f"seeded run {other} differs from full-0 in {state_words(name, kind)} from "
                f"step {step} on: the same seed does not give the same run",
                f"{name!r} differs from step {step} on",
            )
            return
        found = runs.files_differ("full-0", other) or runs.files_differ(other, "full-0")
        if found is not None:
            _fail(
                check,
                f"seeded runs full-0 and {other} leave {found[0]} otherwise ({found[1]}): the "
                f"same seed does not give the same files{_ignore_hint(found[0])}",
                f"{found[0]} differs",
            )
            return


def _objects_fail(
    check: dict[str, Any], runs: _Runs, pair: tuple[str, str, str, str], r: int
) -> bool:
    """Make ``check`` FAIL when the stopped or resumed run of repeat ``r`` holds an object after a
    step other than the uninterrupted run; whether it did."""
    stop, resume, stop_label, resume_label = pair
    full = runs.state(f"full-{r}")
    resumed = runs.state(f"{resume}-{r}")
    diff = first_difference(full, runs.state(f"{stop}-{r}"))
    label, other = stop_label, "stopped"
    if diff is None:
        diff = first_difference(full, resumed)
        label, other = resume_label, "resumed"
    if diff is None:
        return False
    step, name, kind = diff
    first = min(resumed) if resumed else None
    after = f" (resumed after step {first - 1})" if other == "resumed" and first else ""
    _fail(
        check,
        f"{_prefix(check)}repeat {r}: the {other} run {label} differs from the uninterrupted "
        f"run (1) in {state_words(name, kind)} from step {step} on{after}: the "
        f"checkpoint does not save or restore it, or the loop changes it after a "
        f"resume",
        f"{name!r} differs from step {step} on",
    )
    return True


def _files_fail(
    check: dict[str, Any],
    runs: _Runs,
    pair: tuple[str, str, str, str],
    r: int,
    notes: dict[str, str],
) -> bool:
    """Make ``check`` FAIL when the resumed run of repeat ``r`` leaves a file other than the
    uninterrupted run, or one that run does not leave; whether it did. A file only the resumed run
    holds that its stopped run left too (the checkpoint the resume loaded) goes to ``notes``."""
    stop, resume, stop_label, resume_label = pair
    full, resumed = f"full-{r}", f"{resume}-{r}"
    found = runs.files_differ(full, resumed)
    if found is not None:
        _fail(
            check,
            f"{_prefix(check)}repeat {r}: the resumed run {resume_label} leaves {found[0]} other "
            f"than the uninterrupted run (1) ({found[1]}): what the run writes after a "
            f"resume differs{_ignore_hint(found[0])}",
            f"{found[0]} differs",
        )
        return True
    for rel in only_in(runs.root / resumed, runs.root / full, runs.ignore):
        if (runs.root / f"{stop}-{r}" / rel).is_file():
            notes.setdefault(rel, _LEFT_BY_STOP)
            continue
        _fail(
            check,
            f"{_prefix(check)}repeat {r}: the resumed run {resume_label} leaves {rel}, which "
            f"the uninterrupted run (1) does not write: the run writes another file after a "
            f"resume{_ignore_hint(rel)}",
            f"{rel} is left by the resumed run only",
        )
        return True
    return False


def _prefix(check: dict[str, Any]) -> str:
    return "" if check["name"] == "resume" else "mid-epoch stop, "


def judge_leftovers(
    report: dict[str, Any],
    out: Path,
    repeats: int,
    resume_runs: int,
    ignore: Sequence[str] = (),
) -> None:
    """Compare the objects and files the runs of ``out/runs`` left, for each check of
    ``report`` that ran; a difference makes the check FAIL naming it. Adds ``report["compared"]``.

    A file only a resumed run leaves is a difference too, unless its stopped run left it as well
    (the checkpoint the resume loaded, the stopped run's own logs): such a file is named in
    ``compared["left_out"]``.

    Args:
        report: ``analyze_verify``'s report (its ``checks`` are changed in place).
        out: verify's output folder.
        repeats: repeats of runs (1) and (4).
        resume_runs: repeats of the stopped and resumed runs.
        ignore: file patterns (``--ignore-output``) left out of the file comparison.
    """
    runs = _Runs(out, ignore)
    checks = {c["name"]: c for c in report.get("checks", [])}
    objects: dict[str, str] = {}
    files: set[str] = set()
    omitted: dict[str, str] = {}
    rep = checks.get("reproducible")
    if rep is not None and rep["status"] in ("PASS", "FAIL"):
        objects.update(compared_names(runs.state("full-0")))
        files.update(run_files(runs.root / "full-0", ignore))
        omitted.update(left_out(runs.root / "full-0", ignore))
        _judge_reproducible(rep, runs, repeats)
    for check_name, pair in _PAIRS.items():
        check = checks.get(check_name)
        if check is None or check["status"] not in ("PASS", "FAIL"):
            continue
        for r in range(resume_runs):
            if not (runs.root / f"{pair[1]}-{r}").is_dir():
                continue
            if _objects_fail(check, runs, pair, r) or _files_fail(check, runs, pair, r, omitted):
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
            "step() and at each step of a Lightning or Hugging Face Trainer): the verdict covers "
            "the per-step values, the final digest and the files"
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
