"""``seeder locate``: two runs with one seed; name the first operation or input that differs.

1. Unless the step is given, two runs with per-step records (``$SEEDER_STEPS``, as under
   ``seeder verify``) give the first optimizer step whose parameters differ.
2. Two localisation runs (``$SEEDER_LOCATE``) fingerprint every tensor operation from
   ``seeder.init`` to the end of that step (:mod:`seeder._run.record`), and end there.
3. Their records, walked side by side, give the first difference
   (:mod:`seeder.verify._compare`); where a set's or dict's order could be the cause and
   ``PYTHONHASHSEED`` is not fixed, two more localisation runs with it fixed tell.
4. A few lines say where and what, and the fix (:mod:`seeder.verify._advice`); they are
   printed and written to ``OUT/report.md`` and ``OUT/report.json``.

Each run has its own directory ``OUT/runs/<name>/`` (its log, its records) and starts there,
as under ``seeder verify``. Fingerprinting costs only in the localisation runs.

Example:
    >>> import sys
    >>> cfg = LocateConfig(command=[sys.executable, "train.py"], step=3)
    >>> cfg.validate(); cfg.step
    3
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from seeder._checks import is_int
from seeder._safefile import write_file
from seeder.env._redact import redact_json
from seeder.verify._advice import HASH_SEED_CAUSES, explain
from seeder.verify._compare import Difference, first_difference, read_records
from seeder.verify._runner import RunFailed, RunSpec, run_all
from seeder.verify._seederstops import STEPS_NAME
from seeder.verify._workdirs import absolute_command, base_environment

__all__ = ["LocateConfig", "locate", "first_differing_step", "locate_after_verify", "MARKER"]

#: The file that marks an output directory as seeder locate's (a later run may replace it).
MARKER = ".seeder-locate"
_HASH_SEED = "0"  # the fixed PYTHONHASHSEED of the check runs (any fixed value does)


@dataclass
class LocateConfig:
    """What ``seeder locate`` runs.

    Args:
        command: the training command (a script that calls ``seeder.init``).
        out: the output directory.
        seed: the master seed of both runs (``$SEEDER_SEED``; a script passing its own keeps it).
        step: the first optimizer step that differs, when known (``seeder verify`` knows it);
            ``None``: found by two runs first.
        env: more environment variables for every run.
        cwd: the directory paths in ``command`` are relative to (default: the current one).
        timeout: fail a run that takes longer (seconds).
        hash_check: re-run with a fixed ``PYTHONHASHSEED`` where a set's order could be the cause.
        step_differs: the runs are known to differ at ``step`` (``seeder verify``'s seeded runs
            did): records that agree there mean a difference the recorder does not see, not runs
            that do not part.
    """

    command: list[str]
    out: Path = Path("seeder-locate")
    seed: int = 42
    step: Optional[int] = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: Optional[Path] = None
    timeout: Optional[float] = None
    hash_check: bool = True
    step_differs: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        if not self.command or not all(isinstance(w, str) for w in self.command):
            raise ValueError(
                "no command given; usage: seeder locate [--seed N] [--step S] -- COMMAND [ARG ...]"
            )
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {self.seed!r}")
        if self.step is not None and (not is_int(self.step) or self.step < 1):
            raise ValueError(f"--step must be an optimizer step >= 1, got {self.step!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"--timeout must be > 0 seconds, got {self.timeout!r}")


def _prepare_out(out: Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output path {out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise ValueError(
                f"output directory {out} is not empty and was not written by seeder locate; "
                "choose another --out (or empty it)"
            )
        shutil.rmtree(out / "runs", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    write_file(out, MARKER, b"{}\n", 0o644)
    return out.resolve()  # each run starts in its own folder: its paths must not be relative


def _specs(
    cfg: LocateConfig, out: Path, names: tuple[str, str], extra: dict[str, str]
) -> list[RunSpec]:
    base = Path(cfg.cwd or Path.cwd()).resolve()
    specs = []
    for name in names:
        workdir = out / "runs" / name
        env = {**base_environment(base), **cfg.env, "SEEDER_SEED": str(cfg.seed), **extra}
        env = {k: v.replace("{workdir}", str(workdir)) for k, v in env.items()}
        specs.append(
            RunSpec(name, absolute_command(cfg.command, base), workdir, env=env, cwd=workdir)
        )
    return specs


def _run_pair(
    cfg: LocateConfig, out: Path, names: tuple[str, str], extra: dict[str, str]
) -> list[Path]:
    specs = _specs(cfg, out, names, extra)
    for s in specs:
        s.workdir.mkdir(parents=True, exist_ok=True)
    results = run_all(specs, jobs=2, progress=False, timeout=cfg.timeout, desc="seeder locate")
    if any(not r.ok for r in results):
        raise RunFailed(results)
    return [s.workdir for s in specs]


def _steps(path: Path) -> tuple[list[float], Optional[str]]:
    values, digest = [], None
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if "digest" in rec:
                digest = rec["digest"]
            elif "step" in rec:
                values.append(rec["loss"])
    return values, digest


def first_differing_step(a: Path, b: Path) -> tuple[Optional[int], str, bool]:
    """The first optimizer step whose per-step record differs between two ``$SEEDER_STEPS`` files.

    Args:
        a: run A's records.
        b: run B's records.

    Returns:
        ``(step, why, identical)``: the step (1-based) or ``None``, why, and whether the runs
        agree throughout.
    """
    (va, da), (vb, db) = _steps(a), _steps(b)
    if not va and not vb:
        return None, "no optimizer step was recorded", False
    for i, (x, y) in enumerate(zip(va, vb)):
        if x != y:
            return i + 1, f"the parameters differ after step {i + 1}", False
    if len(va) != len(vb):
        return (
            min(len(va), len(vb)) + 1,
            f"one run made {len(va)} steps, the other {len(vb)}",
            False,
        )
    if da != db:
        return (
            len(va),
            f"every step agrees but the final digests differ (of {len(va)} steps)",
            False,
        )
    return (
        None,
        f"the runs agree at each of {len(va)} steps and end with the same parameters and optimizer "
        "state",
        True,
    )


def _compare(dirs: list[Path]) -> Difference:
    paths = [d / "ops.rank0.jsonl" for d in dirs]
    for p in paths:
        if not p.is_file():
            raise RuntimeError(
                f"{p.parent.name} recorded no operations ({p} is missing): the command must call "
                "seeder.init (the recorder starts there)"
            )
    return first_difference(read_records(str(paths[0])), read_records(str(paths[1])))


def locate(cfg: LocateConfig) -> dict[str, Any]:
    """Run the localisation and return its report (also written to ``cfg.out``).

    Args:
        cfg: what to run.

    Returns:
        ``{"differs": bool, "step": ..., "kind": ..., "lines": [...], "record": {...}, ...}``.

    Raises:
        ValueError: a bad configuration or output directory.
        RunFailed: a run exited with an error (its log is in ``OUT/runs/<name>/log.txt``).
    """
    cfg.validate()
    out = _prepare_out(cfg.out)
    report: dict[str, Any] = {
        "command": list(cfg.command),
        "seed": cfg.seed,
        "step": cfg.step,
        "step_from": "given" if cfg.step is not None else None,
    }
    step = cfg.step
    if step is None:
        dirs = _run_pair(
            cfg, out, ("steps-a", "steps-b"), {"SEEDER_STEPS": "{workdir}/steps.jsonl"}
        )
        step, why, identical = first_differing_step(
            dirs[0] / "steps.jsonl", dirs[1] / "steps.jsonl"
        )
        report.update(step=step, step_from=why)
        if identical:
            report.update(
                differs=False,
                kind="identical",
                lines=[f"the two runs are identical: {why}; nothing to locate"],
            )
            return _finish(out, report)
    stop = {} if step is None else {"SEEDER_LOCATE_STOP": str(step)}
    located = {"SEEDER_LOCATE": "{workdir}", **stop}
    d = _compare(_run_pair(cfg, out, ("ops-a", "ops-b"), located))
    hash_seed = None
    env_hash = cfg.env.get("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED"))
    if cfg.hash_check and d.kind in HASH_SEED_CAUSES and env_hash in (None, "random"):
        fixed = _compare(
            _run_pair(cfg, out, ("hash-a", "hash-b"), {**located, "PYTHONHASHSEED": _HASH_SEED})
        )
        hash_seed = fixed.kind == "none" or fixed.index > d.index
    lines = explain(d, hash_seed)
    # with --step (or no step recorded) nothing says the runs differ: agreeing records say they
    # do not part; only runs whose per-step records differed and whose operations agree part
    # where the recorder does not see
    parted = d.kind != "none" or (
        step is not None and (report["step_from"] != "given" or cfg.step_differs)
    )
    kind = d.kind
    if d.kind == "none" and not parted:
        kind = "identical"
        upto = f"up to the end of step {step}" if step is not None else "to the end of the run"
        lines = [
            f"the runs do not part: the {d.records} operations both recorded {upto} agree; "
            "nothing to locate"
            + (
                " (a later step may differ: run without --step to compare every step)"
                if step
                else ""
            )
        ]
    report.update(
        differs=parted,
        kind=kind,
        hash_seed=hash_seed,
        lines=lines,
        operation=d.index + 1 if d.kind != "none" else None,
        at_step=d.step if d.kind != "none" else None,
        record=d.record,
        other=d.other,
    )
    return _finish(out, report)


def _finish(out: Path, report: dict[str, Any]) -> dict[str, Any]:
    """Write the report, as it is returned and printed: through the redaction every tool's output
    goes through (:mod:`seeder.env._redact`; the command keeps only what is shown harmless)."""
    report = redact_json(json.loads(json.dumps(report, default=str)))
    text = "# seeder locate\n\n" + "\n".join(f"- {line}" for line in report["lines"]) + "\n"
    write_file(out, "report.md", text.encode(), 0o644)
    write_file(out, "report.json", (json.dumps(report, indent=1) + "\n").encode(), 0o644)
    return report


def locate_after_verify(
    report: dict[str, Any], out: Path, timeout: Optional[float] = None
) -> list[str]:
    """``seeder verify``'s localisation: when the seeded runs differ, locate their first difference.

    The first differing optimizer step comes from the seeded runs' per-step records; the
    localisation runs go to ``OUT/locate/``. The lines are added to ``report.json``
    (``"locate"``) and to ``report.md``. A localisation that cannot run (a run that fails, a
    script that records nothing) gives one line saying why; the verdict stays as it is.

    Args:
        report: what :func:`seeder.verify.verify` returned.
        out: its output directory.
        timeout: fail a localisation run that takes longer (seconds).

    Returns:
        The lines of the localisation (none when the reproducible check did not fail).
    """
    check = next((c for c in report.get("checks", []) if c["name"] == "reproducible"), None)
    if check is None or check["status"] != "FAIL":
        return []
    runs = {r["name"]: r for r in report.get("runs", [])}
    where = Path(out) / "locate"
    try:
        result = locate(_after_verify_config(runs, Path(out), where, timeout))
    except (RunFailed, RuntimeError, ValueError, OSError, KeyError, json.JSONDecodeError) as exc:
        if isinstance(exc, RunFailed):
            why = "; ".join(
                f"run {r.name} failed: {r.reason} (its log: {r.log})" for r in exc.failed
            )
        else:
            why = str(exc) or type(exc).__name__
        result = redact_json(
            {
                "differs": None,
                "kind": "error",
                "command": list(runs.get("full-0", {}).get("argv") or []),
                "lines": [
                    f"seeder locate could not name the first difference: {why}; run it yourself: "
                    "seeder locate -- COMMAND (docs/locate.md)"
                ],
            }
        )
    report["locate"] = result
    from seeder.verify._session import (
        write_json,  # the report's own writer (strict JSON, secrets redacted)
    )

    write_json(Path(out) / "report.json", report)
    md = (Path(out) / "report.md").read_text(encoding="utf-8")
    md += (
        "\n## The first difference (seeder locate)\n\n"
        + "\n".join(f"- {line}" for line in result["lines"])
        + "\n"
    )
    write_file(Path(out), "report.md", md.encode(), 0o644)
    return list(result["lines"])


def _after_verify_config(
    runs: dict[str, dict[str, Any]], out: Path, where: Path, timeout: Optional[float]
) -> LocateConfig:
    """The localisation of verify's seeded runs: their command, seed, environment and first
    differing step."""
    full = [out / "runs" / name for name in sorted(runs) if name.startswith("full-")]
    if len(full) < 2:
        raise ValueError("fewer than two seeded runs to compare")
    step = None
    for other in full[1:]:
        step, _, identical = first_differing_step(full[0] / STEPS_NAME, other / STEPS_NAME)
        if step is not None or not identical:
            break
    recorded = json.loads((full[0] / "run.json").read_text(encoding="utf-8"))
    env = {
        k: v.replace(str(full[0]), "{workdir}")
        for k, v in (recorded.get("env") or {}).items()
        if k not in ("SEEDER_STEPS", "SEEDER_TRACE")
    }  # verify's own records: not needed once the step is known
    seed = runs["full-0"].get("master_seed")
    return LocateConfig(
        command=list(runs["full-0"]["argv"]),
        out=where,
        seed=seed if seed is not None else 42,
        step=step,
        env=env,
        timeout=timeout,
        step_differs=step is not None,
    )
