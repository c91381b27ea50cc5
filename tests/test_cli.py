"""The `seeder` command: derive, run (environment, signals, exit codes, torchrun), env, help and
errors."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Optional

import pytest
from helpers import REPO_ROOT, child_env, free_port, json_lines, run_python, seeder_main

from seeder import _cli as cli
from seeder._seeding import derive
from seeder._seeding.determinism import python_hash_seed

CHILD = str(REPO_ROOT / "tests" / "scripts" / "env_child.py")
LAUNCHER = [sys.executable, "-m", "seeder", "run"]


# ------------------------------------------------------------------ in-process: parser, derive,
# errors


def test_help_for_the_command_and_every_subcommand(capsys):
    for argv in ([], ["derive"], ["run"], ["env"], ["env", "snapshot"], ["env", "diff"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv + ["--help"])
        assert exc.value.code == 0
        assert "usage: seeder" in capsys.readouterr().out


def test_python_dash_m_seeder_lists_the_subcommands():
    out = run_python(["-m", "seeder", "--help"]).stdout
    for name in ("derive", "run", "env"):
        assert re.search(rf"^\s+{name}\s", out, re.M), out


def test_missing_or_unknown_subcommand_is_usage_error(capsys):
    assert cli.main([]) == 2
    assert cli.main(["env"]) == 2
    assert "ENV_COMMAND" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2


def test_derive_prints_the_derived_seed(capsys):
    assert cli.main(["derive", "--seed", "42", "--task", "1", "--epoch", "3"]) == 0
    assert (
        int(capsys.readouterr().out)
        == 7196025296689398411
        == derive.derive_seed(42, derive.Domain.RANK, 1, 3, 0)
    )
    assert (
        cli.main(
            [
                "derive",
                "--seed",
                "42",
                "--task",
                "1",
                "--rank",
                "3",
                "--domain",
                "worker",
                "--stream",
                "2",
            ]
        )
        == 0
    )
    assert int(capsys.readouterr().out) == derive.derive_seed(42, derive.Domain.WORKER, 1, 0, 3, 2)


def test_derive_bad_seed_is_an_error_on_stderr(capsys):
    assert cli.main(["derive", "--seed", "-5"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == "" and "seeder derive: error:" in captured.err and "2**63" in captured.err
    )


def test_run_print_env_gives_shell_exports(capsys, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert cli.main(["run", "--seed", "42", "--deterministic", "--print-env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "export SEEDER_SEED=42",
        f"export PYTHONHASHSEED={python_hash_seed(42)}",
        "export CUBLAS_WORKSPACE_CONFIG=:4096:8",
        "export SEEDER_DETERMINISTIC=1",
        "export HOROVOD_FUSION_THRESHOLD=0",
    ]


def test_run_print_env_under_a_snapshot_dir_exports_the_hooks_pythonpath(
    capsys, monkeypatch, tmp_path
):
    """The exports, evaluated in a shell, start runs with the hook that takes the snapshot at
    init, as `seeder run -- COMMAND` gives its command (without it, no snapshot and no word)."""
    from seeder._run.bootstrap import SITE_DIR

    monkeypatch.setenv("SEEDER_SNAPSHOT_DIR", str(tmp_path / "snap"))
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    assert cli.main(["run", "--seed", "42", "--print-env"]) == 0
    out = capsys.readouterr().out
    assert f"export PYTHONPATH={shlex.quote(SITE_DIR + os.pathsep + '/somewhere')}" in out


def test_run_errors(capsys, monkeypatch):
    assert cli.main(["run", "--seed", "1"]) == 2
    assert "no command given" in capsys.readouterr().err
    assert cli.main(["run", "--seed", "-1", "--", "true"]) == 2
    assert "--seed must be in" in capsys.readouterr().err
    monkeypatch.setenv("SEEDER_SEED", "abc")
    assert cli.main(["run", "--", "true"]) == 2
    assert "SEEDER_SEED='abc' is not an integer" in capsys.readouterr().err
    monkeypatch.setenv("SEEDER_SEED", str(2**63))
    assert cli.main(["run", "--", "true"]) == 2
    assert "SEEDER_SEED must be in [0, 2**63 - 1]" in capsys.readouterr().err
    monkeypatch.delenv("SEEDER_SEED")
    assert cli.main(["run", "-q", "--", "/nonexistent/seeder-test-command"]) == 127
    assert "command not found" in capsys.readouterr().err


def test_run_passes_exit_codes_through(capsys):
    assert cli.main(["run", "-q", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert cli.main(["run", "-q", "--", sys.executable, "-c", "pass"]) == 0
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert cli.main(["run", "-q", "--", sys.executable, "-c", kill_self]) == 128 + signal.SIGKILL


def test_run_seed_comes_from_seeder_seed_or_is_drawn_and_shown(capsys, monkeypatch):
    monkeypatch.setenv(
        "SEEDER_SEED", " 99\n"
    )  # whitespace around the value is ignored, as seeder.init does
    assert cli.main(["run", "--print-env"]) == 0
    assert "export SEEDER_SEED=99" in capsys.readouterr().out
    monkeypatch.delenv("SEEDER_SEED")
    seeds = set()
    for _ in range(2):
        assert cli.main(["run", "--", sys.executable, "-c", "pass"]) == 0
        seeds.add(re.search(r"SEEDER_SEED=(\d+)", capsys.readouterr().err).group(1))
    assert len(seeds) == 2  # drawn from OS entropy, printed so that the run can be repeated


# ------------------------------------------------------------------ real processes


class Launch:
    """A `seeder run ...` process whose stdout lines are collected by a thread."""

    def __init__(self, argv: list[str], env: Optional[dict] = None, **popen):
        self.proc = subprocess.Popen(
            argv,
            env=child_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO_ROOT),
            **popen,
        )
        self.lines: list[str] = []
        self.err = ""
        self._changed = threading.Condition()  # notified on every new line and when stdout closes
        self._closed = False
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 90) -> None:
        """Block until ``count`` lines match ``pattern`` (woken by each line the reader thread
        gets)."""

        def seen() -> bool:
            return (
                self._closed or sum(bool(re.match(pattern, line)) for line in self.lines) >= count
            )

        with self._changed:
            self._changed.wait_for(seen, timeout)
            found = sum(bool(re.match(pattern, line)) for line in self.lines) >= count
        if not found:
            self.finish(kill=True)
            raise AssertionError(
                f"no {count}x {pattern!r} in output {self.lines}\nstderr: {self.err[-3000:]}"
            )

    def finish(self, timeout: float = 60, kill: bool = False) -> int:
        if kill and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL) if self._own_group() else self.proc.kill()
        try:
            self.err = self.proc.stderr.read() if self.proc.stderr else ""
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._t.join(5)
        return rc

    def _own_group(self) -> bool:
        try:
            return os.getpgid(self.proc.pid) == self.proc.pid
        except OSError:
            return False


def _probes(launch_lines: list[str]) -> list[dict]:
    return json_lines("\n".join(launch_lines), "PROBE ")


@pytest.mark.slow
def test_run_fixes_hash_and_sets_variables_before_start():
    """hash("abc") is fixed by the seed across runs and changes with it; seeder.init() in the child
    finds the seed."""
    env = {"CUBLAS_WORKSPACE_CONFIG": "", "PYTHONHASHSEED": "random"}
    first = run_python(
        [
            "-m",
            "seeder",
            "run",
            "--seed",
            "7",
            "--deterministic",
            "--",
            sys.executable,
            CHILD,
            "--init",
        ],
        env=env,
    )
    again = run_python(
        ["-m", "seeder", "run", "-q", "--seed", "7", "--", sys.executable, CHILD], env=env
    )
    other = run_python(
        ["-m", "seeder", "run", "-q", "--seed", "8", "--", sys.executable, CHILD], env=env
    )
    (p1,), (p2,), (p3,) = (json_lines(r.stdout, "PROBE ") for r in (first, again, other))
    assert p1["hash"] == p2["hash"] != p3["hash"]
    assert p1["PYTHONHASHSEED"] == str(python_hash_seed(7)) and p3["PYTHONHASHSEED"] == str(
        python_hash_seed(8)
    )
    assert p1["SEEDER_SEED"] == "7" and p1["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert (
        p1["master_seed"] == 7 and p1["deterministic"] is True and p1["SEEDER_DETERMINISTIC"] == "1"
    )
    assert p2["SEEDER_DETERMINISTIC"] is None and p2["HOROVOD_FUSION_THRESHOLD"] is None
    assert f"SEEDER_SEED=7 PYTHONHASHSEED={python_hash_seed(7)}" in first.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, handled, expected",
    [
        (signal.SIGTERM, True, 42),  # the child sees SIGTERM and chooses its exit code
        (signal.SIGTERM, False, 128 + 15),  # the child dies of SIGTERM: 143, as a shell reports it
        (
            signal.SIGINT,
            False,
            128 + 2,
        ),  # kill -INT: KeyboardInterrupt in the child, which dies of SIGINT
        (signal.SIGUSR1, True, 7),  # SLURM's pre-emption warning (--signal=USR1) reaches the child
    ],
)
def test_run_forwards_signals_and_passes_exit_code(sig, handled, expected):
    extra = ["--handle", "--exit-code", str(expected)] if handled else []
    launch = Launch(LAUNCHER + ["-q", "--seed", "1", "--", sys.executable, CHILD, "--wait", *extra])
    launch.wait_for(r"READY 0")
    launch.proc.send_signal(sig)
    assert launch.finish() == expected, (launch.lines, launch.err)
    if handled:
        assert f"GOT {sig.name} 0" in launch.lines


@pytest.mark.slow
def test_handler_fallback_forwards_signals_too():
    """The path used where sigtimedwait is missing (macOS), run here for real."""
    code = (
        "import os, sys; from seeder.env._launcher import _run_handlers; "
        f"sys.exit(_run_handlers([sys.executable, {CHILD!r}, '--wait', '--handle', '--exit-code', "
        f"'5'], dict(os.environ)))"
    )
    launch = Launch([sys.executable, "-c", code])
    launch.wait_for(r"READY 0")
    launch.proc.send_signal(signal.SIGTERM)
    assert launch.finish() == 5 and "GOT SIGTERM 0" in launch.lines


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="si_code values are Linux's")
def test_terminal_signals_to_our_group_are_not_sent_twice():
    from seeder.env._launcher import _is_duplicate

    def info(
        code: int, pid: int = 0
    ) -> signal.struct_siginfo:  # (signo, code, errno, pid, uid, status, band)
        return signal.struct_siginfo((signal.SIGINT, code, 0, pid, 0, 0, 0))

    same_group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    own_group = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        assert _is_duplicate(
            info(0x80), same_group.pid
        )  # Ctrl-C: the terminal signalled the command too
        assert not _is_duplicate(
            info(0, os.getpid()), same_group.pid
        )  # kill -INT <launcher>: forward it
        assert not _is_duplicate(
            info(0x80), own_group.pid
        )  # the command left our group: it did not get it
    finally:
        for p in (same_group, own_group):
            p.kill()
            p.wait()


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_reaches_the_command_once(tmp_path):
    """Ctrl-C on a terminal signals the whole foreground group: the launcher must not send a second
    SIGINT."""
    master, slave = os.openpty()

    # runs in the child after setsid(): take the pty as controlling terminal
    def become_terminal_owner():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        LAUNCHER + ["-q", "--", sys.executable, CHILD, "--count-sigint"],
        env=child_env(),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=become_terminal_owner,
        cwd=str(REPO_ROOT),
    )
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 90
        while b"READY" not in out and time.monotonic() < deadline:
            out += os.read(master, 4096)
        assert b"READY" in out, out
        os.write(master, b"\x03")  # the terminal's VINTR: SIGINT to the foreground process group
        while b"SIGINTS" not in out and time.monotonic() < deadline:
            try:
                out += os.read(master, 4096)
            except OSError:  # EIO once the session leader is gone
                break
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    got = json.loads(re.search(rb"SIGINTS (\[.*\])", out).group(1))
    assert got == [[0x80, 0]], (
        f"expected one SIGINT, from the terminal (si_code 0x80); got [si_code, si_pid] {got}"
    )


@pytest.mark.slow
def test_run_with_torchrun_sets_every_rank_and_forwards_sigterm():
    port = free_port()
    argv = LAUNCHER + [
        "--seed",
        "11",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        CHILD,
        "--init",
        "--wait",
        "--handle",
        "--exit-code",
        "0",
    ]
    launch = Launch(argv, start_new_session=True)  # own group: only the launcher gets our signal
    launch.wait_for(r"READY \d", count=2)
    probes = sorted(_probes(launch.lines), key=lambda p: p["rank"])
    assert [p["rank"] for p in probes] == [0, 1]
    assert probes[0]["hash"] == probes[1]["hash"]
    for p in probes:
        assert p["SEEDER_SEED"] == "11" and p["master_seed"] == 11
        assert (
            p["PYTHONHASHSEED"] == str(python_hash_seed(11))
            and p["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        )
    os.kill(
        launch.proc.pid, signal.SIGTERM
    )  # to the launcher only; torchrun passes it on to its workers
    rc = launch.finish()
    assert sorted(line for line in launch.lines if line.startswith("GOT")) == [
        "GOT SIGTERM 0",
        "GOT SIGTERM 1",
    ], (launch.lines, launch.err[-3000:])
    assert "Received 15 death signal" in launch.err, launch.err[
        -3000:
    ]  # torchrun itself got our SIGTERM
    assert rc == 1  # torchrun's exit code after a death signal, passed through unchanged


# ------------------------------------------------------------------ env diff exit codes and output


def _fake_snapshot(tmp: Path, name: str, environment: dict) -> Path:
    from seeder.env._capture import SNAPSHOT_FORMAT, SNAPSHOT_VERSION

    d = tmp / name
    d.mkdir()
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "format": SNAPSHOT_FORMAT,
                "version": SNAPSHOT_VERSION,
                "environment": environment,
                "run": {"hostname": name},
            }
        )
    )
    return d


def test_env_diff_exit_codes_table_and_json(tmp_path, capsys):
    a = _fake_snapshot(tmp_path, "a", {"HOME": "/root", "OMP_NUM_THREADS": "4", "SHLVL": "1"})
    b = _fake_snapshot(tmp_path, "b", {"HOME": "/home/x", "OMP_NUM_THREADS": "8", "SHLVL": "2"})
    assert cli.main(["env", "diff", str(a), str(a)]) == 0
    assert "no differences" in capsys.readouterr().out
    assert cli.main(["env", "diff", str(a), str(b)]) == 1
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("  ~")]
    assert rows[0].startswith("  ~!OMP_NUM_THREADS") and "HOME" in rows[1], table
    assert "SHLVL" not in "\n".join(rows) and "ignored: SHLVL" in table
    assert cli.main(["env", "diff", "--json", "--all", str(a), str(b)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["equal"] is False
    assert [c["key"] for c in data["sections"]["environment"]] == [
        "OMP_NUM_THREADS",
        "HOME",
        "SHLVL",
    ]
    assert cli.main(["env", "diff", "--ignore", "HOME", "--ignore", "OMP_*", str(a), str(b)]) == 0
    capsys.readouterr()


def test_env_diff_errors_exit_2(tmp_path, capsys):
    a = _fake_snapshot(tmp_path, "a", {})
    assert cli.main(["env", "diff", str(a), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seeder env diff: error:") and "manifest.json" in err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text('{"format": "other"}')
    assert cli.main(["env", "diff", str(a), str(tmp_path / "bad")]) == 2
    assert "not a seeder environment snapshot" in capsys.readouterr().err


@pytest.mark.parametrize(
    "hidden, says",
    [
        ("scipy", "needs scipy, which this Python lacks: pip install 'seeder[plot]'"),
        (
            "matplotlib",
            "needs matplotlib, which this Python lacks: pip install 'seeder[plot]' (or pass "
            "--no-figures)",
        ),
    ],
)
def test_verify_and_compare_without_the_plot_extra_say_so_before_any_run(
    tmp_path, monkeypatch, capsys, hidden, says
):
    # in this process, the package hidden as an interpreter without it sees it (find_spec: None)
    monkeypatch.setitem(sys.modules, hidden, None)
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    for sub in ("verify", "compare"):
        argv = [sub, "--out", str(tmp_path / sub), "--", sys.executable, str(script)]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert f"seeder {sub} {says}" in err, err
    assert not marker.exists()  # nothing ran, not even the parser probe


def test_verify_with_no_figures_needs_no_matplotlib(tmp_path, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = ["verify", "--no-figures", "--out", str(tmp_path / "nf")]
    proc = seeder_main(
        [*argv, "--", sys.executable, "-c", "raise SystemExit(5)"], monkeypatch, capfd
    )
    assert "lacks" not in proc.stderr  # the runs start (and fail here)
    assert proc.returncode == 3 and "run " in proc.stderr, proc.stderr
