"""Run training commands: in parallel, in dependency order, each with its own log.

Every run is a child process in its own process group (its own session), with
stdout and stderr in ``<run dir>/log.txt`` and a ``run.json`` beside it. Up to
``jobs`` runs go at once; a run with ``after`` waits until that run succeeded
(and is skipped if it failed). A run's ``prepare`` is called just before it starts
and may complete its argv or return a reason not to start it (status ``omitted``,
not a failure; runs after it are omitted too). Every run starts with the tools' hooks
installed (:mod:`seeder._run.bootstrap`: its ``sitecustomize`` first on ``PYTHONPATH``). The
first failure cancels the rest unless ``keep_going``. Ctrl-C (SIGINT) or SIGTERM sends SIGINT
to every child's group, then SIGTERM, then SIGKILL after grace periods, and raises
``KeyboardInterrupt``.

Example:
    >>> import sys, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> hello = RunSpec("hello", [sys.executable, "-c", "print('hi')"], d / "hello")
    >>> res = run_all([hello], progress=False)
    >>> res[0].status, (d / "hello" / "log.txt").read_text().strip()
    ('ok', 'hi')
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from seeder._checks import is_int
from seeder._run.bootstrap import run_environment
from seeder._safefile import open_log, write_file
from seeder.env._redact import file_redactor, redact_json

__all__ = ["RunSpec", "RunResult", "RunFailed", "run_all", "child_environment", "log_tail"]

logger = logging.getLogger("seeder")

#: Variables removed from every child's environment: a stray SEEDER_SEED would seed the unseeded
#: runs, a stray SEEDER_TRACE would trace runs that asked for no trace.
_SCRUBBED = ("SEEDER_SEED", "SEEDER_TRACE")


@dataclass
class RunSpec:
    """One command to run: its name, argv, extra environment and run directory.

    Attributes:
        name: unique among the runs of one :func:`run_all`.
        argv: the command.
        workdir: the run's directory; it gets ``log.txt`` and ``run.json``.
        env: variables added to the run's environment.
        after: the name of an earlier run this one waits for (and is skipped if it failed).
        prepare: called just before the start; it may change ``argv`` and returns ``None`` to
            start the run or a reason (a string) to leave it out.
        cwd: the working directory (``workdir`` when ``None``).
        info: facts recorded with the result (``run.json``).

    Example:
        >>> import pathlib, sys
        >>> spec = RunSpec("hello", [sys.executable, "-c", "print('hi')"], pathlib.Path("runs/a"))
        >>> spec.log
        PosixPath('runs/a/log.txt')
    """

    name: str
    argv: list[str]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    after: Optional[str] = None
    prepare: Optional[Callable[[], Optional[str]]] = None
    cwd: Optional[Path] = None
    info: dict[str, object] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        """The run's output (stdout and stderr)."""
        return Path(self.workdir) / "log.txt"


@dataclass
class RunResult:
    """How a run ended.

    Attributes:
        name: the run's name.
        status: ``ok``, ``failed``, ``skipped``, ``cancelled``, ``interrupted`` or ``omitted``
            (left out on purpose by its ``prepare``).
        returncode: the exit code, ``None`` if it never ended on its own.
        duration: seconds it ran.
        log: its output.
        reason: why it did not end ``ok``.
        info: its :attr:`RunSpec.info`.

    Example:
        >>> import pathlib
        >>> RunResult("a", "failed", 1, 0.5, pathlib.Path("log.txt"), "exit code 1").ok
        False
    """

    name: str
    status: str
    returncode: Optional[int]
    duration: float
    log: Path
    reason: str = ""
    info: dict[str, object] = field(default_factory=dict)
    started: Optional[float] = None  # wall-clock start (time.time()), None if never started

    @property
    def ok(self) -> bool:
        """Whether the run ended with status ``ok``."""
        return self.status == "ok"


class RunFailed(RuntimeError):
    """A run failed; ``results`` holds every run's outcome, ``failed`` the failures.

    Args:
        results: every run's result.

    Example:
        >>> import pathlib
        >>> bad = RunResult("a", "failed", 1, 0.5, pathlib.Path("log.txt"), "exit code 1")
        >>> str(RunFailed([bad]))
        'a: exit code 1'
    """

    def __init__(self, results: list[RunResult]):
        self.results = results
        self.failed = [r for r in results if r.status == "failed"]
        super().__init__("; ".join(f"{r.name}: {r.reason}" for r in self.failed) or "a run failed")


def child_environment(jobs: int = 1, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment for a run: ours without SEEDER_SEED, unbuffered, threads split over jobs.

    ``OMP_NUM_THREADS`` is set (when unset) to the CPU count divided by ``jobs``, so
    parallel runs do not oversubscribe the cores; every run gets the same value.

    >>> env = child_environment(jobs=2, extra={"A": "1"})
    >>> env["A"], "SEEDER_SEED" in env, env["PYTHONUNBUFFERED"]
    ('1', False, '1')
    """
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env["PYTHONUNBUFFERED"] = "1"
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    if extra:
        env.update(extra)
    return env


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' if there is none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class _Progress:
    """A tqdm bar on a terminal (when installed), else one stderr line per finished run."""

    def __init__(self, total: int, enabled: bool, desc: str):
        self.total, self.enabled, self.count = total, enabled, 0
        self.bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is optional (the "plot" extra)
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(
                    total=total,
                    desc=desc,
                    unit="run",
                    file=sys.stderr,
                    dynamic_ncols=True,
                    leave=True,
                )

    def update(self, result: RunResult, running: Sequence[str]) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.set_postfix_str(
                f"{result.name} {result.status}"
                + (f" | running {', '.join(running)}" if running else ""),
                refresh=False,
            )
            self.bar.update(1)
        elif self.enabled:
            print(
                f"seeder: [{self.count}/{self.total}] {result.name} {result.status} "
                f"({result.duration:.1f}s)",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(procs: Sequence[subprocess.Popen], grace: float) -> None:
    """SIGINT each child's group, then SIGTERM, then SIGKILL, waiting ``grace`` seconds between.

    A second Ctrl-C while waiting goes straight to SIGKILL.
    """
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            alive = [p for p in procs if p.poll() is None]
            if not alive:
                break
            for p in alive:
                _signal_group(p, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None for p in alive):
                time.sleep(0.02)
    finally:
        for p in procs:
            # The leader may be gone while its group still holds grandchildren (DataLoader workers).
            _signal_group(p, signal.SIGKILL)
            if p.poll() is None:
                p.wait()


def _write_record(spec: RunSpec, result: RunResult, env_extra: dict[str, str]) -> None:
    if not Path(spec.workdir).is_dir():  # never started: nothing to describe beside
        return
    record = {
        "name": spec.name,
        "argv": spec.argv,
        "env": env_extra,
        "cwd": str(spec.cwd) if spec.cwd else None,
        "status": result.status,
        "returncode": result.returncode,
        "duration_s": round(result.duration, 3),
        "started": result.started,
        "ended": None if result.started is None else result.started + result.duration,
        "reason": result.reason,
        **{k: v for k, v in spec.info.items() if isinstance(v, (str, int, float, type(None)))},
    }
    try:
        write_file(
            spec.workdir,
            "run.json",
            (json.dumps(redact_json(record), indent=1) + "\n").encode(),
            0o644,
        )
        _redact_log(spec)
    except OSError as exc:  # the run's outcome still reaches the report
        logger.warning("could not write %s/run.json: %s", spec.workdir, exc)


def _redact_log(spec: RunSpec) -> None:
    """Replace the run's log by its redacted text (secrets the command was given or printed) once
    the run ended."""
    try:
        with open(spec.log, "rb") as fh:
            text = fh.read().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return
    clean = file_redactor([spec.argv]).text(text)
    if clean != text:
        write_file(
            spec.workdir, spec.log.name, clean.encode("utf-8", errors="surrogateescape"), 0o644
        )


def run_all(
    specs: Sequence[RunSpec],
    *,
    jobs: int = 1,
    progress: bool = True,
    keep_going: bool = False,
    timeout: Optional[float] = None,
    grace: float = 10.0,
    desc: str = "runs",
    on_finish: Optional[Callable[[RunResult], None]] = None,
) -> list[RunResult]:
    """Run ``specs`` (up to ``jobs`` at once) and return their results in the order given.

    A failed run is returned with status ``failed`` and its reason; callers decide
    what to do (see :class:`RunFailed`).

    Args:
        specs: the runs; a run's ``after`` names an earlier one.
        jobs: how many run at once.
        progress: show progress on stderr (a tqdm bar on a terminal).
        keep_going: go on after a run failed (else the others are stopped and cancelled).
        timeout: seconds a run may take before it is stopped and fails; ``None``: no limit.
        grace: seconds between SIGINT, SIGTERM and SIGKILL when runs are stopped.
        desc: what the progress line calls the runs.
        on_finish: called with each result as its run ends.

    Returns:
        One result per spec, in the order given.

    Raises:
        ValueError: ``jobs`` is not a positive integer, names repeat, or ``after`` names no
            earlier run.
        KeyboardInterrupt: interrupted; every child was stopped first.

    Example:
        >>> import pathlib, sys, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> hello = RunSpec("hello", [sys.executable, "-c", "print('hi')"], d / "hello")
        >>> [r.status for r in run_all([hello], progress=False)]
        ['ok']
    """
    if not is_int(jobs) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique, got {names}")
    for s in specs:
        if s.after is not None and s.after not in names[: names.index(s.name)]:
            raise ValueError(f"run {s.name!r} waits for {s.after!r}, which is not an earlier run")
    runs = _Runs(specs, jobs, keep_going, _Progress(len(specs), progress, desc), on_finish)
    old_term = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        old_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        runs.go(timeout, grace)
    except KeyboardInterrupt:
        runs.end_running(grace, "interrupted", "interrupted")
        raise
    finally:
        runs.bar.close()
        if in_main:
            signal.signal(signal.SIGTERM, old_term if old_term is not None else signal.SIG_DFL)
    return [runs.results[n] for n in names if n in runs.results]


class _Runs:
    """The state of one :func:`run_all`: the runs waiting, running and done."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        jobs: int,
        keep_going: bool,
        bar: _Progress,
        on_finish: Optional[Callable[[RunResult], None]],
    ):
        self.pending: list[RunSpec] = list(specs)
        self.jobs, self.keep_going, self.bar, self.on_finish = jobs, keep_going, bar, on_finish
        self.base_env = child_environment(jobs)
        self.running: dict[str, tuple[RunSpec, subprocess.Popen, float, Any]] = {}
        self.results: dict[str, RunResult] = {}
        self.starts: dict[str, float] = {}
        self.stopping = False

    def finish(self, res: RunResult, spec: RunSpec) -> None:
        res.started = self.starts.get(res.name)
        self.results[res.name] = res
        _write_record(spec, res, spec.env)
        self.bar.update(res, list(self.running))
        if self.on_finish is not None:
            self.on_finish(res)

    def not_run(self, spec: RunSpec, status: str, reason: str) -> None:
        """End ``spec`` without a process: ``omitted``, ``skipped`` or ``failed``."""
        self.finish(RunResult(spec.name, status, None, 0.0, spec.log, reason, spec.info), spec)
        if status == "failed" and not self.keep_going:
            self.stopping = True

    def go(self, timeout: Optional[float], grace: float) -> None:
        """Start and reap runs until every one ended (or the first failure stopped the rest)."""
        while self.pending or self.running:
            self.start_ready()
            self.reap(timeout, grace)
            if self.stopping:
                self.end_running(grace, "cancelled", "cancelled after another run failed")
                for spec in self.pending:
                    self.not_run(spec, "skipped", "not started: another run failed")
                self.pending = []
                return
            if self.running:
                time.sleep(0.02)

    def start_ready(self) -> None:
        """Start every run that is ready, in order, up to ``jobs``."""
        i = 0
        while i < len(self.pending) and len(self.running) < self.jobs and not self.stopping:
            spec = self.pending[i]
            dep = self.results.get(spec.after) if spec.after else None
            if spec.after and dep is None:
                i += 1  # its dependency has not finished yet
                continue
            self.pending.pop(i)
            if dep is not None and dep.status == "omitted":
                self.not_run(spec, "omitted", f"{spec.after} was left out: {dep.reason}")
            elif dep is not None and not dep.ok:
                self.not_run(spec, "skipped", f"{spec.after} did not succeed")
            else:
                self.start(spec)

    def start(self, spec: RunSpec) -> None:
        """Prepare ``spec`` and start its process (or end it as omitted or failed)."""
        Path(spec.workdir).mkdir(parents=True, exist_ok=True)
        try:
            left_out = spec.prepare() if spec.prepare is not None else None
        except Exception as exc:  # never leave the other runs behind on a bug in prepare
            self.not_run(spec, "failed", f"could not prepare the run: {type(exc).__name__}: {exc}")
            return
        if left_out:
            self.not_run(spec, "omitted", str(left_out))
            return
        fh = os.fdopen(open_log(spec.log), "wb")
        try:
            proc = subprocess.Popen(
                spec.argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=run_environment({**self.base_env, **spec.env}),  # the tools' hooks
                cwd=str(spec.cwd) if spec.cwd else None,
                start_new_session=True,
            )
        except OSError as exc:
            fh.close()
            self.not_run(spec, "failed", f"could not start {spec.argv[0]!r}: {exc}")
            return
        self.running[spec.name] = (spec, proc, time.monotonic(), fh)
        self.starts[spec.name] = time.time()

    def reap(self, timeout: Optional[float], grace: float) -> None:
        """End the runs whose process exited (or ran past ``timeout``)."""
        for name in list(self.running):
            spec, proc, t0, fh = self.running[name]
            rc = proc.poll()
            elapsed = time.monotonic() - t0
            if rc is None and timeout is not None and elapsed > timeout:
                _stop([proc], grace=min(grace, 5.0))
                rc = proc.returncode
                reason = f"timed out after {timeout:g}s"
            elif rc is None:
                continue
            else:
                reason = "" if rc == 0 else f"exited with status {rc}"
            fh.close()
            del self.running[name]
            status = "ok" if rc == 0 and not reason else "failed"
            self.finish(RunResult(name, status, rc, elapsed, spec.log, reason, spec.info), spec)
            if status == "failed" and not self.keep_going:
                self.stopping = True

    def end_running(self, grace: float, status: str, reason: str) -> None:
        """Stop every running process and end its run with ``status``."""
        if not self.running:
            return
        _stop([r[1] for r in self.running.values()], grace)
        for name in list(self.running):
            spec, proc, t0, fh = self.running.pop(name)
            fh.close()
            self.finish(
                RunResult(
                    name,
                    status,
                    proc.returncode,
                    time.monotonic() - t0,
                    spec.log,
                    reason,
                    spec.info,
                ),
                spec,
            )
