"""Plan, run and judge a verify or compare session; write its output directory.

Output directory layout::

    OUT/.seeder-verify          marker: this directory belongs to seeder (reruns may clear it)
    OUT/report.json, report.md  verdict, checks, statistics, runs
    OUT/*.png                   figures (or --figures DIR)
    OUT/runs/<name>/            log.txt, run.json, metrics.jsonl, ckpt/ for each run, and
                                trace.rank<R>.jsonl for seeded runs whose data path records it
    OUT/runs/probe/             the command run up to its argument parser: parser.json, log.txt

Example (planning only; :func:`verify` runs these)::

    >>> from seeder.verify._plan import VerifyConfig
    >>> cfg = VerifyConfig(command=["python", "train.py"], out=Path("v"), epochs=4, repeats=2)
    >>> specs = plan_verify(cfg, Path("/tmp/v"))
    >>> [(s.name, s.after) for s in specs[:4]]
    [('half-0', None), ('full-0', None), ('unseeded-0', None), ('resume-0', 'half-0')]
    >>> specs[0].argv[2:]  # doctest: +NORMALIZE_WHITESPACE
    ['--seed', '42', '--epochs', '4', '--ckpt-dir', '/tmp/v/runs/half-0/ckpt',
     '--stop-after-epochs', '2', '--metrics', '/tmp/v/runs/half-0/metrics.jsonl']
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from seeder._run.steps import read_marks
from seeder._safefile import symlinks_in, write_file
from seeder._seeding.announce import parse_drawn_seed
from seeder.env._redact import file_redactor, redact_json
from seeder.verify._analysis import ALL_KINDS, analyze_compare, analyze_verify
from seeder.verify._contract import Contract, Metrics, read_metrics
from seeder.verify._diagnose import (
    diagnose_dirs,
    foreign_resumes,
    missing_reseed,
    preinit_hints,
)
from seeder.verify._escapes import PROBE_NAME, escapes, snapshot
from seeder.verify._flags import ParserProbe, adapt_contract, probe_parser
from seeder.verify._leftovers import compared_notes, judge_leftovers
from seeder.verify._midepoch import StepStopSupport
from seeder.verify._plan import (
    CompareConfig,
    SessionConfig,
    VerifyConfig,
    driven_by,
    first_run_gates,
    metrics_path,
    plan_compare,
    plan_verify,
    seeder_stops,
)
from seeder.verify._runner import RunFailed, RunResult, RunSpec, child_environment, run_all
from seeder.verify._seederstops import STEPS_NAME, no_stop, untested
from seeder.verify._verdict import unreadable, unreadable_report, verdict
from seeder.verify._workdirs import base_environment, mirror_user_dir, unmirror

__all__ = [
    "verify",
    "compare",
    "load",
    "VerifyData",
    "MARKER",
    "OutputDirError",
]

#: File that marks a directory as a seeder verify/compare output.
MARKER = ".seeder-verify"
#: The run kind whose stop a resumed run of each kind continues from.
_STOPPED_BY = {"resume": "half", "resume-mid": "mid"}
#: Layout version of report.json.
REPORT_VERSION = 1


class OutputDirError(ValueError):
    """The output directory cannot be used."""


def prepare_out(out: Path) -> Path:
    """Create ``out`` or clear a previous seeder output there; refuse any other non-empty
    directory."""
    out = Path(out).resolve()
    links = symlinks_in(out, depth=2)  # out/ and out/runs/ (rmtree never follows the deeper ones)
    if links:
        raise OutputDirError(
            f"output directory {out} holds a symbolic link ({', '.join(sorted(links)[:3])}); "
            f"seeder does not write through symbolic links: remove it or choose another --out"
        )
    if out.exists() and not out.is_dir():
        raise OutputDirError(
            f"output path {out} exists and is not a directory; choose another --out"
        )
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise OutputDirError(
                f"output directory {out} is not empty and was not written by seeder verify; "
                "choose another --out (or empty it)"
            )
        shutil.rmtree(out / "runs", ignore_errors=True)
        for name in ("report.json", "report.md"):
            (out / name).unlink(missing_ok=True)
        for png in out.glob("*.png"):
            png.unlink()
    out.mkdir(parents=True, exist_ok=True)
    write_file(out, MARKER, (json.dumps({"report_version": REPORT_VERSION}) + "\n").encode(), 0o644)
    return out


def _run_record(out: Path, spec: RunSpec, res: RunResult, m: Optional[Metrics]) -> dict[str, Any]:
    return {
        "name": spec.name,
        "kind": spec.info.get("kind"),
        "repeat": spec.info.get("repeat"),
        "status": res.status,
        "returncode": res.returncode,
        "duration_s": round(res.duration, 3),
        "reason": res.reason,
        "log": str(res.log.relative_to(out)),
        "metrics": str(metrics_path(out, spec.name).relative_to(out)),
        "steps": len(m) if m is not None else None,
        "digest": m.digest if m is not None else None,
        "argv": spec.argv,
        "stop_after_steps": spec.info.get("stop_after_steps"),
        "stop_where": spec.info.get("stop_where"),
        "master_seed": _run_seed(spec, res),
        "driven_by": driven_by(spec),
    }


def _run_seed(spec: RunSpec, res: RunResult) -> Optional[int]:
    """The run's master seed: the one verify gave, or the one an unseeded run drew and printed."""
    seed = spec.info.get("seed")
    if isinstance(seed, (int, str)):  # verify gives an int; a str is one read back from JSON
        return int(seed)
    try:
        return parse_drawn_seed(Path(res.log).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def _execute(
    cfg: SessionConfig, out: Path, specs: list[RunSpec], kind: str, desc: str
) -> tuple[dict[str, Metrics], dict[str, Any], dict[str, str]]:
    """Run the specs; read their metrics; raise RunFailed (after writing report.json) on any
    failure.

    Also returns the runs that exited 0 without a per-step value seeder could read (name -> why):
    for verify a FAIL that says so, for compare a failed run.
    """
    results = run_all(
        specs,
        jobs=cfg.jobs,
        progress=cfg.progress,
        keep_going=cfg.keep_going,
        timeout=cfg.timeout,
        desc=desc,
    )
    by_name = {r.name: r for r in results}
    by_spec = {s.name: s for s in specs}
    metrics: dict[str, Metrics] = {}
    unread: dict[str, str] = {}
    for spec in specs:
        res = by_name[spec.name]
        if res.ok:
            try:
                metrics[spec.name] = read_metrics(
                    metrics_path(out, spec.name),
                    res.log,
                    cfg.contract,
                    Path(spec.workdir) / STEPS_NAME,
                )
                why = unreadable(metrics[spec.name])
            except (ValueError, OSError) as exc:
                why = str(exc)
            if why is not None:
                unread[spec.name] = why
                if kind != "verify":
                    res.status, res.reason = (
                        "failed",
                        f"exited 0 but its metrics are unusable: {why}",
                    )
    base = {
        "seeder_verify": REPORT_VERSION,
        "kind": kind,
        "config": _config_dict(cfg),
        "runs": [_run_record(out, s, by_name[s.name], metrics.get(s.name)) for s in specs],
    }
    for r in results:  # a resume that failed because its stopped run never stopped: say so
        stop_name = _STOPPED_BY.get(str(by_spec[r.name].info.get("kind")))
        if r.status == "failed" and stop_name is not None:
            stop_spec = by_spec.get(f"{stop_name}-{by_spec[r.name].info.get('repeat')}")
            asked = stop_spec.info.get("stop_after_steps") if stop_spec is not None else None
            if (
                stop_spec is not None
                and isinstance(asked, int)
                and "stopped" not in read_marks(Path(stop_spec.workdir) / STEPS_NAME)
            ):
                r.reason = f"{r.reason}; its stopped run {stop_spec.name} was " + no_stop(
                    Path(stop_spec.workdir), asked
                )
    if any(
        r.status not in ("ok", "omitted") for r in results
    ):  # omitted: left out on purpose, not a failure
        base.update(
            verdict="ERROR",
            reasons=[f"{r.name}: {r.reason}" for r in results if r.status == "failed"],
        )
        write_json(out / "report.json", base)
        raise RunFailed(results)
    return metrics, base, unread


def _probe(cfg: SessionConfig, out: Path) -> tuple[ParserProbe, Path]:
    """The command's parser options (:func:`seeder.verify._flags.probe_parser`), run in a mirror of
    the user's folder."""
    base = Path(cfg.cwd or Path.cwd()).resolve()
    folder = (
        out / "runs" / PROBE_NAME
    )  # as deep as the runs' folders: its mirror's links are below out/runs/
    mirror_user_dir(base, folder, keep_out=[out], secret_files=cfg.include_secret_files)
    env = child_environment(cfg.jobs, base_environment(base))
    return probe_parser(cfg.command, base, folder, env), base


def _config_dict(cfg: SessionConfig) -> dict[str, Any]:
    d = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        d[f.name] = (
            dataclasses.asdict(v)
            if isinstance(v, Contract)
            else str(v)
            if isinstance(v, Path)
            else v
        )
    return d


def verify(cfg: VerifyConfig) -> dict[str, Any]:
    """Run the methodology and return the report (also written to ``cfg.out``).

    Args:
        cfg: the command and the settings.

    Returns:
        The report: ``verdict`` (PASS, FAIL or INCOMPLETE), ``reasons``, ``checks`` and the
        runs; ``report.json`` and ``report.md`` in ``cfg.out`` hold it too.

    Raises:
        ValueError, TypeError: ``cfg`` is not valid (nothing runs).
        ValueError: ``cfg.out`` holds something other than a seeder output.
        RunFailed: a run failed (report.json then says ERROR).
        KeyboardInterrupt: interrupted; the runs were stopped first.

    Example:
        >>> from pathlib import Path
        >>> verify(VerifyConfig(command=["python", "train.py"], out=Path("v"), repeats=1))
        Traceback (most recent call last):
        ...
        ValueError: repeats must be >= 2 (the variance test compares spreads), got 1
    """
    cfg.validate()
    out = prepare_out(cfg.out)
    home = Path(cfg.cwd or Path.cwd())
    before = snapshot(home, [out])
    done = None
    try:
        probe, base = _probe(cfg, out)
        contract, notes = adapt_contract(cfg.contract, probe)
        cfg.check_epochs(bool(contract.epochs))
        # report.json names the count
        cfg = dataclasses.replace(cfg, contract=contract, resume_repeats=cfg.resume_runs)
        support = None
        if cfg.mid_epoch and not seeder_stops(cfg) and not cfg.contract.stop_after_steps:
            # Said at once, runs nothing.
            support = StepStopSupport(cfg.contract, explicit_step=cfg.stop_after_steps is not None)
        specs = first_run_gates(plan_verify(cfg, out, support), out, cfg.contract)
        metrics, report, unread = _execute(cfg, out, specs, "verify", "seeder verify")
    finally:  # no link to the user's files, and no copy of one, stays in out
        done = unmirror(out / "runs", home, before)
    report["notes"] = notes + done.notes()
    report["probe"] = {"how": probe.how, "options": [a.get("options") for a in probe.actions or []]}
    found, changed = escapes(
        out, [s.name for s in specs], base, before, probe.actions or [], specs[0].argv
    )
    report["notes"] += changed
    # Runs that went on from another's checkpoint, or wrote into the copy all runs share.
    found += foreign_resumes(out, [s.name for s in specs]) + done.findings()
    if unread:
        report.update(unreadable_report(unread))
        report["reasons"] = found + report["reasons"]
        _finish(dataclasses.replace(cfg, figures=False), out, report, metrics)
        return report
    counts = {k: cfg.repeats if k in ("full", "unseeded") else cfg.resume_runs for k in ALL_KINDS}
    runs = {
        k: [metrics[f"{k}-{r}"] for r in range(n)]
        for k, n in counts.items()
        if all(f"{k}-{r}" in metrics for r in range(n))
    }
    skipped = {"resume": f"X = {cfg.epochs} epoch has no epoch boundary inside the run to stop at"}
    if not cfg.mid_epoch:
        skipped["resume-mid-epoch"] = "turned off (--no-mid-epoch)"
    else:
        omitted = next(
            (
                r["reason"]
                for r in report["runs"]
                if r["kind"] == "mid" and r["status"] == "omitted"
            ),
            None,
        )
        skipped["resume-mid-epoch"] = omitted or "its runs did not finish"
    if seeder_stops(cfg):  # a stop or resume that did not happen tests nothing: say so
        omitted = next(
            (
                r["reason"]
                for r in report["runs"]
                if r["kind"] == "half" and r["status"] == "omitted"
            ),
            None,
        )
        skipped["resume"] = omitted or skipped["resume"]
        for check, (stop, resume) in (
            ("resume", ("half", "resume")),
            ("resume-mid-epoch", ("mid", "resume-mid")),
        ):
            steps = {r["name"]: r.get("stop_after_steps") for r in report["runs"]}
            why = next(
                (
                    w
                    for w in (
                        untested(
                            out / "runs" / f"{stop}-{r}",
                            out / "runs" / f"{resume}-{r}",
                            steps.get(f"{stop}-{r}"),
                            bool(cfg.contract.resume),
                        )
                        for r in range(cfg.resume_runs)
                    )
                    if w
                ),
                None,
            )
            if why:
                runs.pop(stop, None), runs.pop(resume, None)
                skipped[check] = why

    def diagnose(check: str, r: int) -> Optional[dict[str, Any]]:
        stop, resume = ("half", "resume") if check == "resume" else ("mid", "resume-mid")
        runs_dir = out / "runs"
        d = diagnose_dirs(
            runs_dir / f"full-{r}",
            runs_dir / f"{stop}-{r}",
            runs_dir / f"{resume}-{r}",
            metrics.get(f"{stop}-{r}"),
            metrics.get(f"full-{r}"),
            metrics.get(f"{resume}-{r}"),
        )
        return d.as_dict() if d is not None else None

    allowed = (
        True if cfg.allow_skip else ([] if cfg.mid_epoch else ["resume-mid-epoch"])
    )  # --no-mid-epoch: asked for
    report.update(
        analyze_verify(
            runs,
            atol=cfg.atol,
            alpha=cfg.alpha,
            diagnose=diagnose,
            skipped=skipped,
            allow_skip=allowed,
        )
    )
    judge_leftovers(report, out, cfg.repeats, cfg.resume_runs, cfg.ignore_output)
    report["verdict"], report["reasons"] = verdict(report["checks"], allowed)
    report["notes"] += compared_notes(report["compared"])
    _own_epochs(cfg, report, runs.get("full", []), out / "runs" / "full-0")
    hints = preinit_hints([out / "runs" / f"full-{r}" for r in range(cfg.repeats)])
    if hints and report["verdict"] == "FAIL":
        report["reasons"] = hints + report["reasons"]
    if found:  # runs that shared a path outside their folders: no verdict on them can stand
        report["verdict"], report["reasons"] = "FAIL", found + report["reasons"]
        report["escapes"] = found
    _finish(cfg, out, report, metrics)
    return report


def compare(cfg: CompareConfig) -> dict[str, Any]:
    """Run configurations A and B with the same seeds and return the paired comparison.

    Args:
        cfg: the command, A's and B's arguments, and the settings.

    Returns:
        The report: the paired differences B - A, their confidence intervals and whether B
        differs from A; ``report.json`` and ``report.md`` in ``cfg.out`` hold it too.

    Raises:
        ValueError, TypeError: ``cfg`` is not valid (nothing runs).
        ValueError: ``cfg.out`` holds something other than a seeder output.
        RunFailed: a run failed.
        KeyboardInterrupt: interrupted; the runs were stopped first.

    Example:
        >>> from pathlib import Path
        >>> compare(CompareConfig(command=["python", "train.py"], out=Path("c"), runs=1))
        Traceback (most recent call last):
        ...
        ValueError: runs must be >= 2 (a paired interval needs two pairs), got 1
    """
    cfg.validate()
    out = prepare_out(cfg.out)
    try:
        probe, _ = _probe(cfg, out)
        contract, notes = adapt_contract(cfg.contract, probe)
        cfg = dataclasses.replace(cfg, contract=contract)
        specs = plan_compare(cfg, out)
        metrics, report, _ = _execute(cfg, out, specs, "compare", "seeder compare")
    finally:  # no link to the user's files, and no copy of one, stays in out
        done = unmirror(out / "runs", Path(cfg.cwd or Path.cwd()))
    report["notes"] = notes + done.notes() + done.findings()
    a = [metrics[f"a-{i}"] for i in range(cfg.runs)]
    b = [metrics[f"b-{i}"] for i in range(cfg.runs)]
    report.update(analyze_compare(a, b, cfg.levels))
    _finish(cfg, out, report, metrics)
    return report


def _own_epochs(
    cfg: VerifyConfig, report: dict[str, Any], full: list[Metrics], full_dir: Path
) -> None:
    """Where the script ran its own number of epochs (no ``--epochs`` passed), the reproducible
    check says how many (and, where it counts none, a loader iterated again with no reseed)."""
    if cfg.contract.epochs or not full or not len(full[0]):
        return
    ran = len(set(full[0].epochs)) if None not in full[0].epochs else 0
    report["epochs_run"] = ran if ran >= 2 else None  # fewer: iteration-based, steps and no epochs
    what = f"{ran} epochs" if ran >= 2 else f"{len(full[0])} steps (no epochs)"
    repeated = missing_reseed(full_dir) if ran < 2 else None
    if repeated is not None:
        what = (
            what[:-1] + f": its seeder.{repeated[0]} was iterated again with no seeder.reseed(1, "
        )
        what += "epoch))"
    check = next(c for c in report["checks"] if c["name"] == "reproducible")
    check["summary"] += (
        f" (the script ran its own {what}: it takes no --epochs, "
        f"so --epochs {cfg.epochs} was not passed)"
    )


def _finish(
    cfg: SessionConfig, out: Path, report: dict[str, Any], metrics: dict[str, Metrics]
) -> None:
    from seeder.verify import _report as rep

    figures: list[str] = []
    if cfg.figures is not False:
        from seeder.verify import _plots as plots

        fig_dir = out if cfg.figures is True else Path(cfg.figures)
        figures = [str(p) for p in plots.write_figures(report, metrics, fig_dir)]
    report["figures"] = figures
    write_json(out / "report.json", report)
    write_file(
        out,
        "report.md",
        file_redactor([cfg.command]).text(rep.markdown(report, out)).encode(),
        0o644,
    )


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Strict JSON (NaN as null, infinity as "inf"), secrets redacted, written without following a
    symbolic link."""
    text = json.dumps(redact_json(_clean(obj)), indent=1, allow_nan=False) + "\n"
    write_file(Path(path).parent, Path(path).name, text.encode("utf-8"), 0o644)


@dataclass
class VerifyData:
    """A verify or compare output directory read back: its report and each run's metrics.

    Attributes:
        out: the directory.
        report: ``report.json``.
        metrics: each run that ended ``ok``, by name (``full-0``, ``a-1``, ...).

    Example:
        >>> import json, pathlib, tempfile
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (out / "report.json").write_text(json.dumps({"config": {"contract": {}},
        ...                                                  "runs": []}))
        >>> load(out).metrics
        {}
    """

    out: Path
    report: dict[str, Any]
    metrics: dict[str, Metrics]

    def table(self) -> str:
        """The report as the text table ``seeder verify`` prints.

        Returns:
            One line a check or comparison, with its verdict.
        """
        from seeder.verify._report import table

        return table(self.report)

    def figures(self) -> dict[str, Any]:
        """The report's figures (matplotlib, the ``plot`` extra), by name.

        Returns:
            ``methodology`` and, for a verify report, ``loss_curves``, ``overlay`` and
            ``spread``; for a compare report, ``compare``.

        Raises:
            ImportError: matplotlib is not installed (``pip install 'seeder[plot]'``).
        """
        from seeder.verify import _plots as plots

        figures = {"methodology": plots.plot_methodology(self.report)}
        if self.report.get("kind") == "compare":
            figures["compare"] = plots.plot_compare(self.report, self.metrics)
        else:
            figures["loss_curves"] = plots.plot_loss_curves(self.report, self.metrics)
            figures["overlay"] = plots.plot_overlay(self.report, self.metrics)
            figures["spread"] = plots.plot_spread(self.report, self.metrics)
        return figures


def load(out: Union[str, Path]) -> VerifyData:
    """Read a ``seeder verify``/``seeder compare`` output directory (for plots and notebooks).

    Args:
        out: the directory (``--out``).

    Returns:
        Its report and the metrics of each run that ended ``ok``.

    Raises:
        FileNotFoundError: ``out`` has no ``report.json``.
        ValueError: a run's metrics cannot be read.

    Example:
        >>> load("/nonexistent")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        FileNotFoundError: /nonexistent/report.json not found: /nonexistent is not a seeder ...
    """
    out = Path(out)
    path = out / "report.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: {out} is not a seeder verify output directory (run `seeder verify "
            f"--out {out}`)"
        )
    report = json.loads(path.read_text(encoding="utf-8"))
    fields: dict[str, Any] = dict(report["config"]["contract"])
    if "loss_keys" in fields:  # JSON gives a list; the contract holds a tuple
        fields["loss_keys"] = tuple(fields["loss_keys"])
    contract = Contract(**fields)
    metrics = {}
    for run in report["runs"]:
        if run["status"] == "ok":
            metrics[run["name"]] = read_metrics(
                out / run["metrics"],
                out / run["log"],
                contract,
                out / "runs" / run["name"] / STEPS_NAME,
            )
    return VerifyData(out, report, metrics)
