"""Render a verify/compare report: the terminal table and ``report.md``.

Example:
    >>> rep = {"kind": "verify", "verdict": "PASS", "reasons": [], "checks": [
    ...     {"name": "resume", "status": "PASS", "summary": "bitwise", "reasons": [],
    ...      "details": {}}]}
    >>> print(table(rep))
    check   result  summary
    ------  ------  -------
    resume  PASS    bitwise
    <BLANKLINE>
    verdict: PASS
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from seeder.env._redact import command_text

__all__ = ["table", "markdown", "VERIFY_METHOD", "COMPARE_METHOD"]

VERIFY_METHOD = """\
With one seed ({seed}) for runs 1-3 and none for run 4,
each repeated {repeats} times{resume_repeats} with X = {epochs} epochs:

- (1) **full**: seeded, X epochs without interruption;
- (2) **half**: seeded, stopped at an epoch boundary, {stop}, with a checkpoint;
- (3) **resume**: seeded, resumed from that checkpoint to epoch X;
- (2b) **mid**: seeded, stopped inside an epoch, {mid}, with a checkpoint;
- (3b) **resume-mid**: seeded, resumed from (2b)'s checkpoint to epoch X;
- (4) **unseeded**: no seed, X epochs.

Four checks decide the verdict: PASS when every check ran and passed, FAIL when one
FAILs, INCOMPLETE when none FAILs but one could not run (SKIP, with the reason and the
fix), unless `--allow-skip` accepts that (`--no-mid-epoch` accepts it for the mid-epoch check).

* **reproducible**: every seeded run (1) logs the same steps with the same losses as
  the first one, compared as float64 with `==` (bit for bit; `--atol` {atol} relaxes this
  to an absolute tolerance), and ends with the same digest when the script reports one.
  The same seed must give the same run.
* **resume** (epoch boundary) and **resume-mid-epoch**: in each repeat, the stopped run
  (2)/(2b) equals run (1) on the steps before the checkpoint, the resumed run (3)/(3b)
  equals run (1) on every remaining step, the two together log each step of (1) exactly
  once (a resumed run that starts over fails), and the resumed run's final digest equals
  (1)'s. Stopping and resuming must change nothing. A stop inside an epoch is where most
  resume bugs live: a sampler position that was not saved, a DataLoader that draws from
  torch's global RNG when its iterator restarts, worker seeds that restart with it. A
  FAIL names the first step that differs and, where the script's data path goes through
  seeder (the runs' traces), the first random state that differs after the resume.
* **variance**: the seeded runs must vary less than the unseeded runs. Each run is
  reduced to one number, its mean train loss over the last epoch (runs are independent,
  steps within a run are not), and a one-sided F test asks whether the ratio of the
  seeded to the unseeded sample variance is this small by chance; it passes when
  p < alpha = {alpha}. With identical seeded runs the ratio is 0 and p = 0. Identical
  unseeded runs fail: the script then seeds itself without `--seed` (or has no
  randomness), so the seed is not what controls the run.

Per-step standard deviations, their ratio and the correlation of runs (of each run's
fluctuation around its own moving average, since every loss curve falls) are reported
for reading, not voted on.
"""

COMPARE_METHOD = """\
Configurations A and B were each trained {runs} times with seeds {seed}..{last}, run i of
A and run i of B sharing seed {seed}+i, so that both see the same initial weights,
shuffles and augmentations. Each run is reduced to its mean train loss over the last
epoch; the differences B - A of the {runs} pairs get Student-t confidence intervals
(scipy.stats.t, n - 1 degrees of freedom). B differs from A when the 95% interval
excludes 0.

Across seeds, A's and B's values vary as unseeded runs would. An unpaired comparison of
unseeded runs with m runs per configuration has the interval half-width
t * sqrt((sd_A^2 + sd_B^2) / m) (Welch degrees of freedom); "unseeded runs per config for this
width" is the smallest m that matches the paired interval's half-width ("unbounded" when the paired
interval has zero width: A and B gave identical values for every seed). "Pairing divides the
variance by" is (sd_A^2 + sd_B^2) / sd_(B-A)^2.
"""


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return "unbounded" if v == float("inf") else f"{v:.{digits}g}"
    return str(v)


def _grid(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _compare_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = [
        ["level", "interval for B - A", "contains 0", "unseeded runs per config for this width"]
    ]
    for lv, ci in report["intervals"].items():
        rows.append(
            [
                f"{float(lv):.0%}",
                f"[{ci['low']:.4g}, {ci['high']:.4g}]",
                "yes" if ci["contains_zero"] else "no",
                _fmt(ci["unpaired_runs_needed"]),
            ]
        )
    return rows


def table(report: dict[str, Any]) -> str:
    """The verdict as a plain-text table (what the command prints)."""
    if report.get("kind") == "compare":
        return (
            _grid(_compare_rows(report)) + f"\n\n{report['summary']}\n"
            f"paired runs: {report['pairs']}; std of B - A {report['std_difference']:.3g}, "
            f"std across seeds A {report['std_a']:.3g}, B {report['std_b']:.3g}; pairing divides "
            f"the variance of the difference by {_fmt(report['variance_reduction'], 3)}"
        )
    rows = [["check", "result", "summary"]] + [
        [c["name"], c["status"], c["summary"]] for c in report["checks"]
    ]
    text = _grid(rows) + f"\n\nverdict: {report['verdict']}"
    for r in report.get("reasons", []):
        text += f"\n  - {r}"
    if report["verdict"] == "PASS" and report.get("skipped"):
        text += "\n  not tested, as allowed: " + ", ".join(report["skipped"])
    if report.get("notes"):
        text += "\n\nhow the command was driven:" + "".join(f"\n  - {n}" for n in report["notes"])
    return text


def _rel(path: str, out: Path) -> str:
    try:
        return os.path.relpath(path, out)
    except ValueError:
        return path


def _resume_repeats_text(cfg: dict[str, Any]) -> str:
    """`` (runs 2, 3, 2b, 3b: N times)`` where ``--resume-repeats`` gave fewer repeats, else
    nothing."""
    n = cfg.get("resume_repeats")
    return (
        ""
        if n is None or n == cfg["repeats"]
        else f" (runs 2, 3, 2b, 3b: {n} {'time' if n == 1 else 'times'})"
    )


def _stop_text(report: dict[str, Any]) -> tuple[str, str]:
    """How runs (2) and (2b) were stopped, for the method text."""
    cfg = report["config"]
    stop = f"after X/2 = {cfg['epochs'] // 2} epoch(s)" if cfg["epochs"] >= 2 else "not run (X < 2)"
    mid = next((c for c in report.get("checks", []) if c["name"] == "resume-mid-epoch"), None)
    run = next(
        (r for r in report.get("runs", []) if r.get("kind") == "mid" and r.get("stop_after_steps")),
        None,
    )
    if run is not None:
        mid_text = (
            f"after global step {run['stop_after_steps']} ({run.get('stop_where') or 'mid-epoch'})"
        )
    elif mid is not None and mid["status"] == "SKIP":
        mid_text = mid["summary"]
    else:
        mid_text = "at a step inside an epoch"
    return stop, mid_text


def _arguments(words: Sequence[str]) -> str:
    """Arguments without their program, as a command line shows them."""
    return command_text(["x", *words])[2:]


def markdown(report: dict[str, Any], out: Optional[Path] = None) -> str:
    """``report.md``: verdict, checks, statistics, runs, method and figures."""
    out = Path(out) if out is not None else Path(".")
    cfg = report["config"]
    cmd = command_text(cfg["command"])
    lines: list[str] = []
    if report.get("kind") == "compare":
        lines += [
            f"# seeder compare: "
            f"{'B differs from A' if report['differs'] else 'no difference detected'}",
            "",
            f"Command: `{cmd}`  ",
            f"A: `{_arguments(cfg['a_args']) or '(as is)'}`; B: "
            f"`{_arguments(cfg['b_args']) or '(as is)'}`",
            "",
            report["summary"],
            "",
            "| " + " | ".join(_compare_rows(report)[0]) + " |",
            "|" + "---|" * 4,
        ]
        lines += ["| " + " | ".join(r) + " |" for r in _compare_rows(report)[1:]]
        lines += ["", "| seed | A | B | B - A |", "|---|---|---|---|"]
        for i, (a, b, d) in enumerate(
            zip(report["values_a"], report["values_b"], report["paired_differences"])
        ):
            lines.append(f"| {cfg['seed'] + i} | {a:.6g} | {b:.6g} | {d:+.4g} |")
        lines += [
            "",
            "## How this is decided",
            "",
            COMPARE_METHOD.format(
                runs=cfg["runs"], seed=cfg["seed"], last=cfg["seed"] + cfg["runs"] - 1
            ),
        ]
    else:
        lines += [f"# seeder verify: {report['verdict']}", "", f"Command: `{cmd}`", ""]
        if report.get("reasons"):
            lines += ["Reasons:", ""] + [f"- {r}" for r in report["reasons"]] + [""]
        lines += ["| check | result | summary |", "|---|---|---|"]
        lines += [f"| {c['name']} | {c['status']} | {c['summary']} |" for c in report["checks"]]
        if report.get("notes"):
            lines += ["", "How the command was driven:", ""] + [f"- {n}" for n in report["notes"]]
        ps = report["per_step"]
        corr = ps.get("correlation", {})
        lines += [
            "",
            "## Statistics",
            "",
            f"- steps compared: {len(ps['keys'])}",
            f"- largest per-step std of seeded runs: {_fmt(ps['max_std_seeded'])}; "
            f"mean per-step std of unseeded runs: {_fmt(ps['mean_std_unseeded'])}",
            f"- median per-step variance ratio seeded/unseeded: "
            f"{_fmt(ps['median_variance_ratio'])}",
            "- correlation of runs (fluctuations around their own trend): "
            + ", ".join(f"{k.replace('_', ' ')} {_fmt(v, 3)}" for k, v in corr.items()),
        ]
        lines += [
            "",
            "## How this is decided",
            "",
            VERIFY_METHOD.format(
                seed=cfg["seed"],
                repeats=cfg["repeats"],
                epochs=cfg["epochs"],
                resume_repeats=_resume_repeats_text(cfg),
                stop=_stop_text(report)[0],
                mid=_stop_text(report)[1],
                atol=cfg["atol"],
                alpha=cfg["alpha"],
            ),
        ]
    lines += [
        "## Runs",
        "",
        "Master seed: given by verify, or drawn by an unseeded run and printed by seeder "
        "(replay that run with `SEEDER_SEED=<seed>`).",
        "",
        "| run | status | master seed | steps | seconds | digest | driven by | log |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        log = f"[{r['log']}]({r['log']})" if r["status"] != "omitted" else f"not run: {r['reason']}"
        seed = r.get("master_seed")
        lines.append(
            f"| {r['name']} | {r['status']} | {'not shown' if seed is None else seed} | "
            f"{_fmt(r['steps'])} | {r['duration_s']:.1f} | {(r['digest'] or '')[:12]} | "
            f"{r.get('driven_by') or ''} | {log} |"
        )
    if report.get("figures"):
        lines += ["", "## Figures", ""] + [
            f"![{Path(f).stem}]({_rel(f, out)})" for f in report["figures"]
        ]
    return "\n".join(lines) + "\n"
