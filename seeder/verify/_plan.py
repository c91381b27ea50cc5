"""The settings of a verify or compare session, and the runs they plan: commands, environments
and directories.

Example (planning only; :func:`seeder.verify._session.verify` runs these)::

    >>> from seeder.verify._plan import VerifyConfig
    >>> cfg = VerifyConfig(command=["python", "train.py"], out=Path("v"), epochs=4, repeats=2)
    >>> specs = plan_verify(cfg, Path("/tmp/v"))
    >>> [(s.name, s.after) for s in specs[:4]]
    [('half-0', None), ('full-0', None), ('unseeded-0', None), ('resume-0', 'half-0')]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from seeder._checks import is_int
from seeder._run.steps import ENV_CKPT_DIR, ENV_RESUME
from seeder._run.variables import ENV_STEPS, ENV_TRACE
from seeder._seeding.derive import MAX_MASTER_SEED
from seeder.verify._contract import Contract, read_metrics
from seeder.verify._diagnose import TRACE_NAME
from seeder.verify._midepoch import StepStopSupport, mid_epoch_step
from seeder.verify._runner import RunSpec
from seeder.verify._seederstops import STEPS_NAME, stop_env, stop_steps
from seeder.verify._workdirs import (
    absolute_command,
    base_environment,
    copy_run_dir,
    mirror_user_dir,
)


@dataclass(frozen=True)
class SessionConfig:
    """What :class:`VerifyConfig` and :class:`CompareConfig` share (see :class:`VerifyConfig`)."""

    command: list[str]
    out: Path
    epochs: int = 2
    seed: int = 42
    contract: Contract = field(default_factory=Contract)
    jobs: int = 1
    keep_going: bool = False
    timeout: Optional[float] = None
    progress: bool = True
    figures: Union[bool, Path] = True  # True: into out; a Path: there; False: none
    cwd: Optional[Path] = None
    #: Copy dotfiles and credential files (``.env``, ``.netrc``, ``*.pem``) into the runs' folders.
    include_secret_files: bool = False

    def _validate(self) -> None:
        if not isinstance(self.include_secret_files, bool):
            kind = type(self.include_secret_files).__name__
            raise TypeError(f"include_secret_files must be a bool, got {kind}")
        if not self.command or not all(isinstance(w, str) for w in self.command):
            raise ValueError(f"command must be a non-empty list of strings, got {self.command!r}")
        for name in ("epochs", "seed", "jobs"):
            v = getattr(self, name)
            if not is_int(v) or v < (0 if name == "seed" else 1):
                raise ValueError(
                    f"{name} must be an integer >= {0 if name == 'seed' else 1}, got {v!r}"
                )
        if self.seed > MAX_MASTER_SEED:
            raise ValueError(
                f"seed must be at most 2**63 - 1 (what seeder.init takes), got {self.seed}; "
                "pick a non-negative integer below 2**63"
            )
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {self.timeout!r}")
        if not isinstance(self.contract, Contract):
            raise TypeError(f"contract must be a Contract, got {type(self.contract).__name__}")


@dataclass(frozen=True)
class VerifyConfig(SessionConfig):
    """Settings of ``seeder verify``: X = ``epochs``, ``repeats`` of the runs, one ``seed``.

    Run (2) stops at the epoch boundary after ``epochs // 2`` epochs. With ``mid_epoch``
    (default) runs (2b)/(3b) also stop inside an epoch and resume, where the command
    takes the contract's step stop flag (:mod:`seeder.verify._midepoch`): at global step
    ``stop_after_steps``, or by default at a step near the middle of run (2)'s last
    epoch. ``atol`` > 0 accepts loss differences up to it (for nondeterministic
    kernels); ``alpha`` is the significance level of the variance test.
    ``resume_repeats`` (default ``None``: ``repeats``) is how many repeats run the two
    resume checks' stopped and resumed runs, (2)/(3) and (2b)/(3b); runs (1) and (4)
    keep ``repeats``.

    The fields shared with :class:`CompareConfig`: ``command`` (the training command),
    ``out`` (the output directory), ``epochs``, ``seed``, ``contract`` (how the command is
    driven), ``jobs`` (runs at once), ``keep_going``, ``timeout`` (seconds per run),
    ``progress``, ``figures`` (``True``: into ``out``, a path: there, ``False``: none),
    ``cwd`` (where the command runs from; the working directory when ``None``) and
    ``include_secret_files`` (copy dotfiles and credential files into the runs' folders).

    Example:
        >>> from pathlib import Path
        >>> cfg = VerifyConfig(command=["python", "train.py"], out=Path("v"), resume_repeats=1)
        >>> cfg.validate()
        >>> cfg.repeats, cfg.resume_runs
        (3, 1)
    """

    repeats: int = 3
    stop_after_steps: Optional[int] = None
    atol: float = 0.0
    alpha: float = 0.05
    mid_epoch: bool = True
    resume_repeats: Optional[int] = None
    allow_skip: bool = False
    #: File patterns (``fnmatch``, on paths in a run's folder) that differ by design (a log with
    #: times): left out of the comparison of the files the runs write, and named in the report.
    ignore_output: tuple[str, ...] = ()

    def check_epochs(self, takes_epochs: bool) -> None:
        """Refuse ``epochs`` below 2 for a command that takes ``--epochs`` (run 2 stops at X/2);
        a command that runs its own number of epochs takes any.

        Raises:
            ValueError: ``epochs`` < 2 and the command takes ``--epochs`` (and no
                ``stop_after_steps`` is given).
        """
        if takes_epochs and self.epochs < 2 and self.stop_after_steps is None:
            raise ValueError(
                f"epochs (X) must be >= 2 so that run 2 can stop at X/2, got {self.epochs}"
            )

    @property
    def resume_runs(self) -> int:
        """Repeats of the stopped and resumed runs: ``resume_repeats``, or ``repeats`` when it is
        ``None``."""
        return self.repeats if self.resume_repeats is None else self.resume_repeats

    def validate(self) -> None:
        """Check every field; :func:`verify` calls it before anything runs.

        Raises:
            ValueError, TypeError: a field is out of range or of the wrong type (the message
                names it and what it takes).
        """
        self._validate()
        if not isinstance(self.ignore_output, (tuple, list)) or not all(
            isinstance(p, str) and p for p in self.ignore_output
        ):
            raise TypeError(
                f"ignore_output must be a tuple of file patterns (str), got {self.ignore_output!r}"
            )
        if not is_int(self.repeats) or self.repeats < 2:
            raise ValueError(
                f"repeats must be >= 2 (the variance test compares spreads), got {self.repeats!r}"
            )
        if self.resume_repeats is not None and (
            not is_int(self.resume_repeats) or not 1 <= self.resume_repeats <= self.repeats
        ):
            raise ValueError(
                f"resume_repeats must be an integer from 1 to repeats ({self.repeats!r}), "
                f"got {self.resume_repeats!r}"
            )
        if self.stop_after_steps is not None and (
            not is_int(self.stop_after_steps) or self.stop_after_steps < 1
        ):
            raise ValueError(
                f"stop_after_steps must be a positive integer, got {self.stop_after_steps!r}"
            )
        for name in ("mid_epoch", "allow_skip"):  # written to JSON: Python's bool only
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.stop_after_steps is not None and not self.mid_epoch:
            raise ValueError(
                "stop_after_steps sets the mid-epoch stop (run 2b); it cannot go with "
                "mid_epoch=False"
            )
        if not (isinstance(self.atol, (int, float)) and self.atol >= 0):
            raise ValueError(f"atol must be >= 0, got {self.atol!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")


@dataclass(frozen=True)
class CompareConfig(SessionConfig):
    """Settings of ``seeder compare``: ``runs`` seeds (``seed``, ``seed + 1``, ...) for A and for B.

    ``a_args`` and ``b_args`` are appended to the command of configuration A and B;
    ``levels`` are the confidence levels of the paired intervals. The other fields are
    :class:`VerifyConfig`'s.

    Example:
        >>> from pathlib import Path
        >>> cfg = CompareConfig(command=["python", "train.py"], out=Path("c"), b_args=["--amp"])
        >>> cfg.validate()
        >>> cfg.runs, cfg.levels
        (5, (0.95, 0.99))
    """

    a_args: list[str] = field(default_factory=list)
    b_args: list[str] = field(default_factory=list)
    runs: int = 5
    levels: tuple[float, ...] = (0.95, 0.99)

    def validate(self) -> None:
        """Check every field; :func:`compare` calls it before anything runs.

        Raises:
            ValueError, TypeError: a field is out of range or of the wrong type.
        """
        self._validate()
        if not is_int(self.runs) or self.runs < 2:
            raise ValueError(
                f"runs must be >= 2 (a paired interval needs two pairs), got {self.runs!r}"
            )
        if is_int(self.runs) and self.seed + self.runs - 1 > MAX_MASTER_SEED:
            raise ValueError(
                f"seed + runs - 1 must be at most 2**63 - 1 (the runs take seeds seed, seed + 1, "
                f"...; seeder.init takes up to 2**63 - 1), got seed {self.seed}"
            )
        if not self.levels or not all(0 < lv < 1 for lv in self.levels):
            raise ValueError(f"levels must be confidence levels in (0, 1), got {self.levels!r}")


#: What a run does before it starts: ``None``, or why it is left out.
Prepare = Callable[[], Optional[str]]

#: The variable ``seeder.init`` reads the master seed from (``seeder._seeding.derive.ENV_SEED``;
#: verify imports no Seeder).
ENV_SEED = "SEEDER_SEED"

__all__ = [
    "SessionConfig",
    "VerifyConfig",
    "CompareConfig",
    "driven_by",
    "DRIVING_VARIABLES",
    "metrics_path",
    "run_argv",
    "make_spec",
    "with_mirror",
    "prepare_mid",
    "plan_verify",
    "plan_compare",
    "seeder_stops",
    "first_run_gates",
]


def seeder_stops(cfg: SessionConfig) -> bool:
    """Whether seeder stops the runs (the command has no stop
    flag; :mod:`seeder.verify._seederstops`)."""
    return not cfg.contract.stop_after_epochs and not cfg.contract.stop_after_steps


#: The variables through which verify drives a run that takes none of its flags.
DRIVING_VARIABLES = ("SEEDER_SEED", "SEEDER_STOP_AFTER_STEP", "SEEDER_RESUME")


def driven_by(spec: RunSpec) -> str:
    """How a run was asked for its seed, stop and resume: the flags verify added and seeder's
    variables it set."""
    added = spec.argv[int(spec.info.get("command_words", len(spec.argv))) :]  # type: ignore[call-overload]
    env = [f"{k}={spec.env[k]}" for k in DRIVING_VARIABLES if k in spec.env]
    parts = ([f"flags {' '.join(added)}"] if added else []) + (
        [f"environment {' '.join(env)}"] if env else []
    )
    return "; ".join(parts) or "nothing (the script's own defaults)"


def metrics_path(out: Path, name: str) -> Path:
    return out / "runs" / name / "metrics.jsonl"


def run_argv(
    cfg: SessionConfig, out: Path, name: str, extra: Sequence[str] = (), **kw: Any
) -> list[str]:
    return (
        list(cfg.command)
        + cfg.contract.args(metrics=str(metrics_path(out, name)), **kw)
        + list(extra)
    )


def make_spec(
    cfg: SessionConfig,
    out: Path,
    name: str,
    extra: Sequence[str] = (),
    after: Optional[str] = None,
    prepare: Optional[Prepare] = None,
    **kw: Any,
) -> RunSpec:
    workdir = out / "runs" / name
    base = Path(cfg.cwd or Path.cwd()).resolve()
    env = {
        **base_environment(base),
        **cfg.contract.env(str(metrics_path(out, name))),
        ENV_STEPS: str(workdir / STEPS_NAME),
    }  # seeder's own per-step records (seeder._run.steps)
    if kw.get("seed") is not None:  # seeded runs leave a trace where their data path records one
        env[ENV_TRACE] = str(workdir / TRACE_NAME)
        if not cfg.contract.seed:  # no --seed flag: seeder.init reads it
            env[ENV_SEED] = str(kw["seed"])
    if kw.get("ckpt_dir") is not None:
        env[ENV_CKPT_DIR] = str(kw["ckpt_dir"])
    spec = RunSpec(
        name,
        run_argv(cfg, out, name, extra, **kw),
        workdir,
        env=env,
        after=after,
        prepare=with_mirror(prepare, base, workdir, out, cfg.include_secret_files),
        cwd=workdir,
    )
    spec.info.update(
        seed=kw.get("seed"), command_words=len(cfg.command)
    )  # the flags verify adds come after
    spec.argv = absolute_command(
        spec.argv, base
    )  # each run in its own directory (seeder.verify._workdirs)
    return spec


def with_mirror(
    prepare: Optional[Prepare], base: Path, workdir: Path, out: Path, secret_files: bool = False
) -> Prepare:
    """``prepare``, then the run's folder mirrors the user's
    (:func:`seeder.verify._workdirs.mirror_user_dir`)."""

    def run() -> Optional[str]:
        left_out = prepare() if prepare is not None else None
        if not left_out:
            mirror_user_dir(base, workdir, keep_out=[out], secret_files=secret_files)
        return left_out

    return run


def prepare_mid(
    cfg: VerifyConfig, out: Path, r: int, support: Optional[StepStopSupport]
) -> RunSpec:
    """Run (2b)'s prepare: leave it out where the command has no step stop, else fill in its stop
    step."""

    def prepare() -> Optional[str]:
        if support is not None:
            supported, why = support.result()
            if not supported:
                return why
        steps, where = cfg.stop_after_steps, "given with --stop-after-steps"
        if steps is None:
            half = read_metrics(
                metrics_path(out, f"half-{r}"), out / "runs" / f"half-{r}" / "log.txt", cfg.contract
            )
            steps, where = mid_epoch_step(half, cfg.epochs // 2, after_first=True)
            if steps is None:
                return where
        spec.argv = absolute_command(
            run_argv(
                cfg,
                out,
                spec.name,
                seed=cfg.seed,
                epochs=cfg.epochs,
                ckpt_dir=str(ckpt),
                stop_after_steps=steps,
            ),
            Path(cfg.cwd or Path.cwd()).resolve(),
        )
        spec.info.update(stop_after_steps=steps, stop_where=where)
        return None

    ckpt = out / "runs" / f"mid-{r}" / "ckpt"
    spec = make_spec(
        cfg,
        out,
        f"mid-{r}",
        after=f"half-{r}" if cfg.stop_after_steps is None else None,
        prepare=prepare,
        seed=cfg.seed,
        epochs=cfg.epochs,
        ckpt_dir=str(ckpt),
        stop_after_steps=cfg.stop_after_steps,
    )
    return spec


class _SeederStops:
    """The stop steps of runs (2) and (2b), found once from run (1) of repeat 0 when the first of
    them is about to start, and written into each stopped run's environment."""

    def __init__(self, cfg: VerifyConfig, out: Path):
        self.cfg, self.out = cfg, out
        self.steps: Optional[tuple[tuple[Optional[int], str], tuple[Optional[int], str]]] = None
        self.by_name: dict[str, RunSpec] = {}

    def find(self) -> tuple[tuple[Optional[int], str], tuple[Optional[int], str]]:
        if self.steps is None:
            full_dir = self.out / "runs" / "full-0"
            try:
                full = read_metrics(
                    metrics_path(self.out, "full-0"),
                    full_dir / "log.txt",
                    self.cfg.contract,
                    full_dir / STEPS_NAME,
                )
            except ValueError:  # the verdict says what run (1) logged; nothing to stop at
                why = "run (1) logged no per-step values to find its epochs in"
                self.steps = ((None, why), (None, why))
            else:
                self.steps = stop_steps(full, getattr(self.cfg, "stop_after_steps", None))
        return self.steps

    def prepare(self, name: str, which: int) -> Prepare:
        """``prepare`` of the stopped run ``name``: ``which`` 0 is run (2), 1 run (2b)."""

        def prepare() -> Optional[str]:
            steps, where = self.find()[which]
            if steps is None:
                return where
            self.by_name[name].env.update(stop_env(steps))
            self.by_name[name].info.update(stop_after_steps=steps, stop_where=where)
            return None

        return prepare


def _stopped_and_resumed(
    cfg: VerifyConfig, out: Path, stops: _SeederStops, r: int
) -> list[RunSpec]:
    """Runs (2), (3) and, with the mid-epoch stop, (2b), (3b) of repeat ``r``."""
    run = {k: out / "runs" / f"{k}-{r}" for k in ("half", "resume", "mid", "resume-mid")}
    pairs = [("half", "resume", 0)] + ([("mid", "resume-mid", 1)] if cfg.mid_epoch else [])
    specs: list[RunSpec] = []
    for stop, resume, which in pairs:
        stops.by_name[f"{stop}-{r}"] = make_spec(
            cfg,
            out,
            f"{stop}-{r}",
            after="full-0",
            prepare=stops.prepare(f"{stop}-{r}", which),
            seed=cfg.seed,
            epochs=cfg.epochs,
            ckpt_dir=str(run[stop] / "ckpt"),
        )
        resumed = make_spec(
            cfg,
            out,
            f"{resume}-{r}",
            after=f"{stop}-{r}",
            prepare=copy_run_dir(run[stop], run[resume]),
            seed=cfg.seed,
            epochs=cfg.epochs,
            ckpt_dir=str(run[resume] / "ckpt"),
            resume=bool(cfg.contract.resume),
        )
        resumed.env[ENV_RESUME] = "1"
        specs += [stops.by_name[f"{stop}-{r}"], resumed]
    return specs


def _plan_seeder_stops(cfg: VerifyConfig, out: Path) -> list[RunSpec]:
    """Per repeat (1), (4), (2) and (2b) after run (1) of repeat 0 (their stop steps come from it),
    (3), (3b).

    Runs (2), (3), (2b), (3b) are in the first ``cfg.resume_runs`` repeats only.
    """
    specs: list[RunSpec] = []
    stops = _SeederStops(cfg, out)
    for r in range(cfg.repeats):
        specs += [
            make_spec(cfg, out, f"full-{r}", seed=cfg.seed, epochs=cfg.epochs),
            make_spec(cfg, out, f"unseeded-{r}", epochs=cfg.epochs),
        ]
        if r < cfg.resume_runs:  # the resume checks run fewer repeats (--resume-repeats)
            specs += _stopped_and_resumed(cfg, out, stops, r)
    for s in specs:
        kind, rep = s.name.rsplit("-", 1)
        s.info.update(kind=kind, repeat=int(rep))
    return specs


def plan_verify(
    cfg: VerifyConfig, out: Path, support: Optional[StepStopSupport] = None
) -> list[RunSpec]:
    """The runs of the methodology, in launch order: per repeat (2), (1), (4), (3) after (2), (2b),
    (3b) after (2b).

    Runs (2)/(3) need X >= 2; (2b)/(3b) need ``cfg.mid_epoch``, and are left out at
    start time when ``support`` says the command has no step stop flag. All four are in
    the first ``cfg.resume_runs`` repeats only (``--resume-repeats``).
    """
    if seeder_stops(cfg):
        return _plan_seeder_stops(cfg, out)
    x, specs = cfg.epochs, []
    for r in range(cfg.repeats):
        resumes = r < cfg.resume_runs
        half_ckpt, res_ckpt = (
            out / "runs" / f"half-{r}" / "ckpt",
            out / "runs" / f"resume-{r}" / "ckpt",
        )
        res_mid_ckpt = out / "runs" / f"resume-mid-{r}" / "ckpt"
        if cfg.contract.stop_after_epochs:
            stop: dict[str, Any] = {"epochs": x, "stop_after_epochs": x // 2}
        else:  # no stop flag: NVIDIA's way, a run of X/2 epochs
            stop = {"epochs": x // 2}
        if x >= 2 and resumes:
            specs.append(
                make_spec(cfg, out, f"half-{r}", seed=cfg.seed, ckpt_dir=str(half_ckpt), **stop)
            )
        specs += [
            make_spec(cfg, out, f"full-{r}", seed=cfg.seed, epochs=x),
            make_spec(cfg, out, f"unseeded-{r}", epochs=x),
        ]
        if x >= 2 and resumes:
            specs.append(
                make_spec(
                    cfg,
                    out,
                    f"resume-{r}",
                    after=f"half-{r}",
                    prepare=copy_run_dir(half_ckpt.parent, res_ckpt.parent),
                    seed=cfg.seed,
                    epochs=x,
                    ckpt_dir=str(res_ckpt),
                    resume=True,
                )
            )
        if cfg.mid_epoch and resumes:
            specs += [
                prepare_mid(cfg, out, r, support),
                make_spec(
                    cfg,
                    out,
                    f"resume-mid-{r}",
                    after=f"mid-{r}",
                    prepare=copy_run_dir(
                        res_mid_ckpt.parent.parent / f"mid-{r}", res_mid_ckpt.parent
                    ),
                    seed=cfg.seed,
                    epochs=x,
                    ckpt_dir=str(res_mid_ckpt),
                    resume=True,
                ),
            ]
    for s in specs:
        kind, rep = s.name.rsplit("-", 1)
        s.info.update(kind=kind, repeat=int(rep))
    return specs


def plan_compare(cfg: CompareConfig, out: Path) -> list[RunSpec]:
    """Runs a-i and b-i with seed ``seed + i``, interleaved."""
    specs = []
    for i in range(cfg.runs):
        for cfgname, extra in (("a", cfg.a_args), ("b", cfg.b_args)):
            s = make_spec(cfg, out, f"{cfgname}-{i}", extra, seed=cfg.seed + i, epochs=cfg.epochs)
            s.info.update(kind=cfgname, repeat=i, seed=cfg.seed + i)
            specs.append(s)
    return specs


def first_run_gates(specs: list[RunSpec], out: Path, contract: Contract) -> list[RunSpec]:
    """``specs`` with run (1) of repeat 0 first and every other run waiting for it: a command whose
    first run records no per-step value seeder can read is said to be so after that run, and the
    others are left out, saying why.

    Args:
        specs: a session's runs (:func:`plan_verify`).
        out: the session's output folder.
        contract: how the command reports its steps.

    Returns:
        The runs in launch order.

    Example:
        >>> cfg = VerifyConfig(command=["python", "train.py"], out=Path("v"), epochs=4, repeats=2)
        >>> specs = first_run_gates(plan_verify(cfg, Path("/tmp/v")), Path("/tmp/v"), Contract())
        >>> [(s.name, s.after) for s in specs[:3]]
        [('full-0', None), ('half-0', 'full-0'), ('unseeded-0', 'full-0')]
    """
    first = next((s for s in specs if s.name == "full-0"), None)
    if first is None:
        return specs

    def gate(prepare: Optional[Prepare]) -> Prepare:
        def run() -> Optional[str]:
            why = _no_steps(first, out, contract)
            if why is not None:
                return f"run full-0 recorded no per-step value seeder could read: {why}"
            return prepare() if prepare is not None else None

        return run

    ordered = [first] + [s for s in specs if s is not first]
    for spec in ordered[1:]:
        if spec.after is None:
            spec.after = first.name
            spec.prepare = gate(spec.prepare)
    return ordered


def _no_steps(first: RunSpec, out: Path, contract: Contract) -> Optional[str]:
    """Why run ``first`` has no per-step value to compare, or ``None``."""
    from seeder.verify._verdict import unreadable

    try:
        m = read_metrics(
            metrics_path(out, first.name), first.log, contract, Path(first.workdir) / STEPS_NAME
        )
    except (ValueError, OSError) as exc:
        return str(exc)
    return unreadable(m)
