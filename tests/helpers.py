"""Shared test utilities: real subprocesses and torchrun launches (loopback, gloo)."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

REPO_ROOT = Path(__file__).resolve().parent.parent
#: ``SEEDER_TEST_FORKSERVER=1``: a local opt-in for fast iteration (scripts forked from servers that
#: imported torch once); ignored where ``CI`` is set, so that CI starts every script in a fresh
#: interpreter.
FORKSERVER_VARIABLE = "SEEDER_TEST_FORKSERVER"


def fork_servers() -> bool:
    """Whether the tests' scripts run forked from servers (:class:`ForkServer`,
    ``tests/handoff.py``) instead of fresh interpreters: only with ``SEEDER_TEST_FORKSERVER=1`` and
    never where ``CI`` is set (as CI services set it).

    A forked script inherits its server's imported modules (seeder, torch) and ``str`` hash seed,
    which a fresh interpreter does not: for a reproducibility library the fresh process is what a
    resume meets.
    """
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return os.environ.get(FORKSERVER_VARIABLE) == "1" and not ci


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment for a child Python: this checkout first on PYTHONPATH, one thread, no stray
    seeds."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONFAULTHANDLER"] = "1"  # a child stopped by stop_hung() prints every thread's stack
    from seeder._seeding.distributed import LAUNCHER_VARIABLES

    for var in (
        "SEEDER_SEED",
        "SEEDER_DETERMINISTIC",
        "SEEDER_SNAPSHOT_DIR",
        "SEEDER_METRICS",
        "SEEDER_TRACE",
        "MASTER_ADDR",
        "MASTER_PORT",
        *LAUNCHER_VARIABLES,
    ):
        env.pop(var, None)
    if extra:
        env.update(extra)
    return with_tools(env)


#: The variables through which seeder verify and seeder locate drive a run.
TOOL_VARIABLES = ("SEEDER_STEPS", "SEEDER_TRACE", "SEEDER_LOCATE")


def with_tools(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the tools give it to the runs they start, where it names one of their variables
    (a test that drives a run as ``seeder verify`` does): ``seeder._run.bootstrap.SITE_DIR`` first
    on ``PYTHONPATH``, then this checkout. ``env`` itself otherwise."""
    if not any(env.get(v) for v in TOOL_VARIABLES):
        return env
    from seeder._run.bootstrap import run_environment

    rest = env.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")
    paths = [str(REPO_ROOT), *(p for p in rest.split(os.pathsep) if p and p != str(REPO_ROOT))]
    return run_environment({**env, "PYTHONPATH": os.pathsep.join(paths)})


def sigint_as_in_a_terminal() -> None:
    """``preexec_fn`` of a child a test stops with SIGINT (Ctrl-C): SIGINT at its default, as a
    terminal starts it, even where the suite itself was started ignoring it (``pytest &`` in a shell
    without job control)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid``, read from ``/proc`` (empty without it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _state(pid: int) -> str:
    """The process's state letter from ``/proc`` (``"X"`` when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _abort_one_by_one(pids: Sequence[int], within: float = 5.0) -> None:
    """SIGABRT each process, parents first, waiting (up to ``within`` s) until it has died before
    the next, so that the stacks the processes print to a shared stderr do not interleave."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGABRT)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + within
        while _state(pid) not in ("Z", "X") and time.monotonic() < deadline:
            time.sleep(0.02)  # polls for the death of a process that is not ours to wait on


def communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; on a hang, fail with every stuck Python process's stacks.

    Each process of the tree gets SIGABRT in turn: with ``PYTHONFAULTHANDLER=1`` (set by
    :func:`child_env`) Python prints all its threads' stacks to stderr first, so the failure
    names the line each one hung on.
    """
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = [proc.pid, *descendants(proc.pid)]
        output: dict[str, tuple[str, str]] = {}

        def drain() -> (
            None
        ):  # read the pipes while the processes print, so that none blocks on a full pipe
            try:
                output["done"] = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                output["done"] = ("", "(the pipes stayed open 60 s after SIGABRT)")

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            _abort_one_by_one(tree)
        finally:
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        reader.join()
        out, err = output.get("done", ("", ""))
        raise AssertionError(
            f"{' '.join(map(str, proc.args))[:300]} hung for {timeout} s; the stacks of its "
            f"processes (SIGABRT, faulthandler) follow\n--- stdout\n{(out or '')[-3000:]}\n--- "
            f"stderr\n{(err or '')[-20000:]}"
        ) from None


class ForkedRun:
    """One run of a :class:`ForkServer`: its pid (the leader of its own session) and output
    files."""

    def __init__(self, server: ForkServer, args: Sequence[str], pid: int, out: Path, err: Path):
        self.server, self.args, self.pid, self.out, self.err = server, list(args), pid, out, err
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        """The exit status if the run has ended (negative: the signal), else None."""
        if self.returncode is None:
            ended = self.server.answer(0)
            if ended is not None:
                self.returncode = ended["rc"]
        return self.returncode

    def wait(self, timeout: float) -> int:
        """Wait for the end; on a hang, fail with every stack of the run's process tree
        (as :func:`communicate`)."""
        if self.returncode is None:
            ended = self.server.answer(timeout)
            if ended is None:
                _abort_one_by_one([self.pid, *descendants(self.pid)])
                aborted = self.server.answer(60)
                if aborted is not None:
                    self.returncode = aborted["rc"]
                raise AssertionError(
                    f"{' '.join(self.args)[:300]} hung for {timeout} s; the stacks of its "
                    f"processes (SIGABRT, faulthandler) follow\n--- "
                    f"stdout\n{self.out.read_text()[-3000:]}\n--- "
                    f"stderr\n{self.err.read_text()[-20000:]}"
                )
            self.returncode = ended["rc"]
        return self.returncode

    def kill(self) -> int:
        """SIGKILL the run's session (the script and its DataLoader workers); its exit status."""
        if self.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (
                ProcessLookupError
            ):  # killed right after the fork, before its setsid: no session yet, only the child
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return self.wait(60)

    def stdout(self) -> str:
        return self.out.read_text() if self.out.exists() else ""


class FreshRun:
    """One run of :class:`FreshRuns`: ``python SCRIPT ARGS``, a fresh interpreter leading its own
    session, with its output in files; the same interface as :class:`ForkedRun`."""

    def __init__(self, proc: subprocess.Popen, args: Sequence[str], out: Path, err: Path):
        self.proc, self.args, self.pid, self.out, self.err = proc, list(args), proc.pid, out, err
        self.returncode: Optional[int] = None

    def _ended(self) -> int:
        """Record the exit status and kill what is left of the run's session (DataLoader workers of
        a killed run)."""
        self.returncode = self.proc.returncode
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.returncode

    def poll(self) -> Optional[int]:
        """The exit status if the run has ended (negative: the signal), else None."""
        if self.returncode is None and self.proc.poll() is not None:
            self._ended()
        return self.returncode

    def wait(self, timeout: float) -> int:
        """Wait for the end; on a hang, fail with every stack of the run's process tree
        (as :func:`communicate`)."""
        if self.returncode is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _abort_one_by_one([self.pid, *descendants(self.pid)])
                self.kill()
                raise AssertionError(
                    f"{' '.join(self.args)[:300]} hung for {timeout} s; the stacks of its "
                    f"processes (SIGABRT, faulthandler) follow\n--- "
                    f"stdout\n{self.stdout()[-3000:]}\n--- stderr\n{self.err.read_text()[-20000:]}"
                ) from None
            self._ended()
        return self.returncode

    def kill(self) -> int:
        """SIGKILL the run's session (the script and its DataLoader workers); its exit status."""
        if self.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self._ended()
        return self.returncode

    def stdout(self) -> str:
        return self.out.read_text() if self.out.exists() else ""


class FreshRuns:
    """Runs each script in a fresh interpreter (``python SCRIPT ARGS``, its own session), with the
    interface of
    :class:`ForkServer`: ``run(args)`` is :func:`run_python` with the output in files,
    ``start(args)`` returns the
    :class:`FreshRun` at once. ``env``: added to every run's environment
    (over :func:`child_env`)."""

    forks = False  #: each run is a fresh interpreter; runs may overlap

    def __init__(self, tmp: Path, env: Optional[dict[str, str]] = None):
        self.tmp, self.env, self.count = tmp, dict(env or {}), 0

    def start(
        self,
        args: Sequence[str],
        timeout: float = 60,
        cwd: Optional[Path] = None,
        env: Optional[dict[str, str]] = None,
        start_is_subject: bool = True,
    ) -> FreshRun:
        """Start ``python ARGS`` (``ARGS[0]`` a script, relative to the repository) in ``cwd`` with
        ``env`` added to its environment. ``timeout`` and ``start_is_subject`` are unused: every run
        here is fresh."""
        self.count += 1
        out, err = (self.tmp / f"run{self.count}.{kind}" for kind in ("out", "err"))
        argv = [
            str(REPO_ROOT / args[0]),
            *map(str, args[1:]),
        ]  # REPO_ROOT / an absolute path: that path
        with open(out, "w") as stdout, open(err, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, *argv],
                env=child_env({**self.env, **(env or {})}),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=str(cwd or REPO_ROOT),
                start_new_session=True,
            )
        return FreshRun(proc, [str(a) for a in args], out, err)

    def run(
        self,
        args: Sequence[str],
        timeout: float = 120,
        check: bool = True,
        cwd: Optional[Path] = None,
        env: Optional[dict[str, str]] = None,
        start_is_subject: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run ``python ARGS`` in a fresh interpreter to its end; the finished process, output
        captured."""
        fresh = self.start(args, cwd=cwd, env=env)
        fresh.wait(timeout)
        return _completed(args, fresh.returncode, fresh.stdout(), fresh.err.read_text(), check)

    def close(self) -> None:
        """Nothing to stop: each run was its own process."""


def _completed(
    args: Sequence[str], rc: int, out: str, err: str, check: bool
) -> subprocess.CompletedProcess:
    proc = subprocess.CompletedProcess(list(args), rc, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"python {' '.join(map(str, args))} exited {proc.returncode}\n--- stdout\n"
            f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    """End a server that stops when its stdin closes (killed after 30 s)."""
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ForkServer:
    """Runs scripts as children forked from one ``tests/scripts/fork_server.py`` process that
    imported torch once.

    ``run(args)`` is :func:`run_python` for a script (same result), minus the Python start;
    ``start(args)`` returns the :class:`ForkedRun` at once. Runs are one at a time. ``preload``:
    modules the server imports too (``["lightning.pytorch"]``), so that each run does not.
    """

    @classmethod
    def or_fresh(
        cls, tmp: Path, env: Optional[dict[str, str]] = None, preload: Sequence[str] = ()
    ) -> Union[ForkServer, FreshRuns]:
        """A :class:`ForkServer` where :func:`fork_servers` opts in (locally),
        else :class:`FreshRuns`: the runner of a test whose subject is the process start in every
        run (a resume in a new process, a kill)."""
        return cls(tmp, env=env, preload=preload) if fork_servers() else FreshRuns(tmp, env=env)

    @classmethod
    def kept(
        cls, tmp: Path, env: Optional[dict[str, str]] = None, preload: Sequence[str] = ()
    ) -> ForkServer:
        """A server kept in CI too, for the runs whose start is not the subject
        (``start_is_subject=False``: a reference run, the run before a stop); every other run is a
        fresh interpreter unless :func:`fork_servers` opts in (locally). A fresh Python with torch
        costs seconds a run, minutes over the suite."""
        return cls(tmp, env=env, preload=preload, fresh_subjects=True)

    def __init__(
        self,
        tmp: Path,
        env: Optional[dict[str, str]] = None,
        preload: Sequence[str] = (),
        fresh_subjects: bool = False,
    ):
        self.tmp, self.count = tmp, 0
        self.fresh: Optional[FreshRuns] = (
            None  # where the runs whose start is the subject go, if not forked
        )
        if fresh_subjects and not fork_servers():
            (tmp / "fresh").mkdir(exist_ok=True)
            self.fresh = FreshRuns(tmp / "fresh", env=env)
        self.log = open(tmp / "fork_server.err", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "fork_server.py"), *preload],
            env=child_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=str(REPO_ROOT),
        )
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [self.answers.put(line) for line in self.proc.stdout], daemon=True
        ).start()

    def answer(self, timeout: float) -> Optional[dict]:
        """The server's next answer line, or None after ``timeout`` s."""
        try:
            return json.loads(
                self.answers.get(timeout=timeout) if timeout else self.answers.get_nowait()
            )
        except queue.Empty:
            return None

    @property
    def forks(self) -> bool:
        """Whether the runs whose start is the subject are forked too (else each is a fresh
        interpreter)."""
        return self.fresh is None

    def start(
        self,
        args: Sequence[str],
        timeout: float = 60,
        cwd: Optional[Path] = None,
        env: Optional[dict[str, str]] = None,
        start_is_subject: bool = True,
    ) -> Union[ForkedRun, FreshRun]:
        """Start ``python ARGS`` (``ARGS[0]`` a script) in a forked child, in ``cwd``, with ``env``
        added to its environment; returns once it runs. A server from :meth:`kept` starts a run
        whose start is the subject (``start_is_subject``) as a fresh interpreter instead."""
        if self.fresh is not None and start_is_subject:
            return self.fresh.start(args, cwd=cwd, env=env)
        self.count += 1
        out, err = (self.tmp / f"run{self.count}.{kind}" for kind in ("out", "err"))
        request = {
            "argv": [str(a) for a in args],
            "stdout": str(out),
            "stderr": str(err),
            "cwd": str(cwd or REPO_ROOT),
            "env": with_tools(dict(env or {})),
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        started = self.answer(timeout)
        if started is None:
            self.log.seek(0)
            raise AssertionError(
                f"the fork server did not start {list(args)}:\n{self.log.read()[-3000:]}"
            )
        return ForkedRun(self, [str(a) for a in args], started["pid"], out, err)

    def run(
        self,
        args: Sequence[str],
        timeout: float = 120,
        check: bool = True,
        cwd: Optional[Path] = None,
        env: Optional[dict[str, str]] = None,
        start_is_subject: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run ``python ARGS`` in a forked child to its end (as :meth:`start` chooses); the finished
        process, output captured. ``timeout`` bounds the server's answer too: its first waits for
        the server's imports (Lightning and transformers: a minute on a loaded machine)."""
        forked = self.start(
            args, timeout=timeout, cwd=cwd, env=env, start_is_subject=start_is_subject
        )
        forked.wait(timeout)
        return _completed(args, forked.returncode, forked.stdout(), forked.err.read_text(), check)

    def close(self) -> None:
        stop_server(self.proc)
        self.log.close()


def run_python(
    args: Sequence[str],
    env: Optional[dict[str, str]] = None,
    timeout: float = 120,
    check: bool = True,
    cwd: Optional[Path] = None,
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` and return the finished process (stdout/stderr captured as text)."""
    child = subprocess.Popen(
        [sys.executable, *args],
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(cwd or REPO_ROOT),
    )
    out, err = communicate(child, timeout)
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"python {' '.join(args)} exited {proc.returncode}\n--- "
            f"stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def seeder_main(
    argv: Sequence[str],
    monkeypatch,
    capfd,
    env: Optional[dict[str, str]] = None,
    cwd: Optional[Path] = None,
) -> subprocess.CompletedProcess:
    """``python -m seeder ARGV`` run in this process (``seeder._cli.main``): for a test whose
    subject is what the command does (the runs it starts, what it writes and prints), not the start
    of its process, which costs a Python and a torch import. The environment is :func:`child_env`'s
    (``env`` added), the working directory ``cwd`` (default the checkout), both restored after; the
    result is :func:`run_python`'s (stdout and stderr as the process would print them)."""
    from seeder._cli import main

    capfd.readouterr()  # what came before is not the command's
    with monkeypatch.context() as patch:
        wanted = child_env(env)
        for name in set(os.environ) - set(wanted):
            patch.delenv(name)
        for name, value in wanted.items():
            patch.setenv(name, value)
        patch.chdir(cwd or REPO_ROOT)
        try:
            rc = main(list(argv))
        except SystemExit as stop:  # argparse's exits
            rc = stop.code if isinstance(stop.code, int) else 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["seeder", *argv], rc, out, err)


_AGENTS: dict[int, ForkServer] = {}


def _agent_server() -> ForkServer:
    """This process's fork server for torchrun agents (``torch.distributed.run`` imported once, not
    per launch)."""
    if os.getpid() not in _AGENTS:
        import atexit
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="seeder-torchrun-"))
        server = _AGENTS[os.getpid()] = ForkServer(tmp, preload=["torch.distributed.run"])

        def close(pid: int = os.getpid()) -> None:
            if os.getpid() == pid:  # not in a forked copy of this process
                server.close()
                shutil.rmtree(tmp, ignore_errors=True)

        atexit.register(close)
    return _AGENTS[os.getpid()]


def torchrun(
    script_args: Sequence[str],
    nproc: int = 2,
    nnodes: int = 1,
    env: Optional[dict[str, str]] = None,
    timeout: float = 180,
    check: bool = True,
    extra_launcher_args: Sequence[str] = (),
    frameworks: bool = False,
) -> list[subprocess.CompletedProcess]:
    """Launch ``torchrun`` on loopback; with ``nnodes > 1`` one torchrun per node, all on this
    machine.

    Returns one finished process per node. Ranks on node ``n`` are ``n * nproc + local_rank``. Every
    rank is a fresh Python, as torchrun starts it (where :func:`fork_servers` opts in, locally, each
    hands its script over to this process's :func:`handoff.handoff_server`; ``frameworks``: the one
    that imported the frameworks too). Node 0's agent, whose start is not the subject, is forked
    from a server that imported
    ``torch.distributed.run`` once (in CI too: a second each launch); the other nodes' agents are
    their own Pythons.
    """
    from handoff import handoff_server

    env = {**handoff_server(frameworks).env(), **(env or {})}
    port = free_port()
    launcher_args = [
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        *extra_launcher_args,
    ]
    node_args = [
        launcher_args + (["--node-rank", str(node)] if nnodes > 1 else []) + list(script_args)
        for node in range(nnodes)
    ]
    agent = _agent_server().start(
        [REPO_ROOT / "tests" / "scripts" / "torchrun_agent.py", *node_args[0]], env=child_env(env)
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *args],
            env=child_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO_ROOT),
        )
        for args in node_args[1:]
    ]
    results = []
    try:
        agent.wait(timeout)
        results.append(
            subprocess.CompletedProcess(
                [sys.executable, "-m", "torch.distributed.run", *node_args[0]],
                agent.returncode,
                agent.stdout(),
                agent.err.read_text(),
            )
        )
        for p in procs:
            out, err = communicate(p, timeout)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        agent.kill()  # a no-op once it has ended
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if check:
        for r in results:
            if r.returncode != 0:
                raise AssertionError(
                    f"torchrun exited {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- "
                    f"stderr\n{r.stderr[-6000:]}"
                )
    return results


def kill_at_step(victim: subprocess.Popen, step: int, err: Path) -> list[dict]:
    """Read ``victim``'s ``STEP {json}`` lines up to ``step`` (the child prints it once that step's
    checkpoint is on disk), SIGKILL its process group, check the kill and the steps 1..``step``, and
    return the records read. ``err``: the child's stderr file, shown when the steps are not
    there."""
    seen: list[dict] = []
    try:
        for line in victim.stdout:
            if line.startswith("STEP"):
                seen.append(json.loads(line[len("STEP") :]))
                if seen[-1]["step"] == step:
                    break
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert [r["step"] for r in seen] == list(range(1, step + 1)), err.read_text()[-3000:]
    return seen


def json_lines(text: str, prefix: str = "") -> list[dict]:
    """Parse the lines of ``text`` that start with ``prefix`` and then hold a JSON object."""
    rows = []
    for line in text.splitlines():
        if line.startswith(prefix):
            body = line[len(prefix) :].strip()
            if body.startswith("{"):
                rows.append(json.loads(body))
    return rows


def step_records(path: Path) -> tuple[list[dict], list[str]]:
    """The per-step records seeder writes under ``$SEEDER_STEPS`` (``seeder._run.steps``), one per
    step in step order, and the digests written at exits.

    Runs that append to one file (a run, its kills, its resumes) record a redone step again: every
    record of a step must be equal (else AssertionError). A line a kill cut short is skipped.
    """
    by_step: dict[int, dict] = {}
    digests = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "digest" in rec:
            digests.append(rec["digest"])
        elif "loss" in rec:
            # The objects a Checkpoint step records are named by the calling script's variables:
            # a wrapper script (train_faults.py) names them otherwise than the script it runs.
            rec.pop("state", None)
            first = by_step.setdefault(rec["step"], rec)
            assert first == rec, f"step {rec['step']} recorded as {first} and as {rec} in {path}"
    return [by_step[k] for k in sorted(by_step)], digests


def global_rng_fingerprint() -> tuple:
    """Exact, comparable states of Python ``random``, NumPy's global RNG and torch's CPU
    generator."""
    import random

    import numpy as np
    import torch

    kind, key, pos, has_gauss, cached = np.random.get_state()
    return (
        random.getstate(),
        (kind, key.tobytes(), pos, has_gauss, cached),
        torch.get_rng_state().numpy().tobytes(),
    )


def trained_samples(paths, keep=None):
    """``({(epoch, index): tensor}, Counter of (epoch, index))`` from files of ``(epoch, step,
    indices, rows, ...)`` records (the elastic integration tests' ranks write them); ``keep(epoch,
    step)`` filters records."""
    import collections

    import torch

    got, count = {}, collections.Counter()
    for path in paths:
        for epoch, step, index, x, *_ in torch.load(path, weights_only=True):
            if keep is not None and not keep(epoch, step):
                continue
            for i, row in zip(index.tolist(), x):
                got[(epoch, i)] = row
                count[(epoch, i)] += 1
    return got, count


def cli(capsys, args: Sequence[str]) -> tuple[Any, str, str]:
    """``seeder`` with ``args`` in this process (its start is not the subject; the runs it starts
    are processes): ``(exit status, stdout, stderr)``; argparse's usage errors give their code."""
    from seeder._cli import main

    capsys.readouterr()
    try:
        rc = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
