"""The test harness itself: a hung child fails its test with the stacks of every process it started,
the fresh runner and the fork server (a local option) report each run's output and exit status as a
process of its own would, a script handed over to the handoff server runs as the interpreter that
handed it over, and CI never forks."""

import os
import select
import signal
import subprocess
import sys

import pytest
from helpers import (
    REPO_ROOT,
    ForkServer,
    child_env,
    communicate,
    run_python,
    sigint_as_in_a_terminal,
)

HANG = """
import subprocess, sys, threading
child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
threading.Event().wait()
"""


def test_a_hung_child_fails_with_the_stack_of_every_process_it_started():
    with pytest.raises(AssertionError, match="hung for 3 s") as info:
        run_python(["-c", HANG], timeout=3)
    text = str(info.value)
    child, grandchild = (
        text.index('File "<string>", line 4 in <module>'),
        text.index('File "<string>", line 1 in <module>'),
    )
    assert (
        child < grandchild
    )  # one process after the other, parents first: the stacks do not interleave


SCRIPT = """
import os, signal, sys, threading
print("argv", sys.argv[1:], flush=True)
print("to stderr", file=sys.stderr)
how = sys.argv[1]
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "hang":
    threading.Event().wait()
raise SystemExit(int(how))
"""


@pytest.fixture(params=["fork server", "fresh interpreters"])
def runner(request, tmp_path, monkeypatch):
    """Each runner of scripts the suite has, as :meth:`ForkServer.or_fresh` picks it outside CI:
    ``ForkServer`` with the local option (``SEEDER_TEST_FORKSERVER=1``), else ``FreshRuns``."""
    monkeypatch.delenv("CI", raising=False)
    if request.param == "fork server":
        monkeypatch.setenv("SEEDER_TEST_FORKSERVER", "1")
    else:
        monkeypatch.delenv("SEEDER_TEST_FORKSERVER", raising=False)
    server = ForkServer.or_fresh(tmp_path)
    assert isinstance(server, ForkServer) == (request.param == "fork server")
    yield server
    server.close()


IMPORTS = "import sys\nprint(sorted({'torch', 'seeder'} & set(sys.modules)))\n"


def test_the_runners_report_output_exit_status_signals_and_hangs(tmp_path, runner):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    server = runner
    try:
        ok = server.run([script, "0"])
        assert ok.returncode == 0 and ok.stdout == "argv ['0']\n" and ok.stderr == "to stderr\n"
        assert server.run([script, "3"], check=False).returncode == 3
        with pytest.raises(AssertionError, match="exited 3"):
            server.run([script, "3"])
        assert server.run([script, "kill"], check=False).returncode == -signal.SIGKILL
        with pytest.raises(AssertionError, match="hung for 2 s") as info:
            server.run([script, "hang"], timeout=2)
        assert "in <module>" in str(info.value)  # the hung run's stack, from faulthandler
        assert server.run([script, "0"]).returncode == 0  # the server goes on after a hung run
        (tmp_path / "imports.py").write_text(IMPORTS)
        imported = server.run([tmp_path / "imports.py"]).stdout
        # forked: the server's imports inherited; a fresh interpreter: nothing imported
        assert imported == ("['seeder', 'torch']\n" if server.forks else "[]\n")
    finally:
        server.close()


HANDED = """
import os, sys, threading
print("pid", os.getpid(), "cwd", os.getcwd(), "argv", sys.argv[1:], "X", os.getenv("X"), flush=1)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "hang":
    threading.Event().wait()
raise SystemExit(int(sys.argv[1]))
"""


def test_a_handed_over_script_runs_as_its_interpreter_with_its_output_status_and_signals(
    tmp_path, handoff_server_process
):
    handoff = handoff_server_process
    script = tmp_path / "script.py"
    script.write_text(HANDED)

    def start(how):
        return subprocess.Popen(
            [sys.executable, str(script), how],
            env=child_env({**handoff.env(), "X": "y"}),
            cwd=str(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=sigint_as_in_a_terminal,
        )

    interpreter = start("3")
    out, err = communicate(interpreter, 60)
    run = int(out.split()[1])
    assert run != interpreter.pid  # run by a child of the server, not by the interpreter itself
    assert out == f"pid {run} cwd {tmp_path} argv ['3'] X y\n" and err == "to stderr\n"
    assert interpreter.returncode == 3

    interpreter = start("hang")
    assert interpreter.stdout.readline().startswith("pid ")
    os.killpg(
        interpreter.pid, signal.SIGINT
    )  # as seeder verify stops a run: the interpreter's process group
    _, err = communicate(interpreter, 60)
    assert interpreter.returncode == -signal.SIGINT and "KeyboardInterrupt" in err

    interpreter = start("hang")
    with pytest.raises(AssertionError, match="hung for 2 s") as info:
        communicate(interpreter, 2)
    assert "line 6 in <module>" in str(
        info.value
    )  # the hung run's stack (faulthandler), not only the interpreter's

    interpreter = start("hang")
    run = int(interpreter.stdout.readline().split()[1])
    ended = os.pidfd_open(run)
    try:
        interpreter.kill()
        interpreter.wait()
        assert select.select([ended], [], [], 60)[0], (
            "the run outlived the interpreter that handed it over"
        )
    finally:
        os.close(ended)


@pytest.mark.parametrize("ci", ["true"])
def test_ci_runs_every_script_in_a_fresh_interpreter_even_with_the_local_option(
    monkeypatch, tmp_path, ci
):
    # without CI the local option forks (the runners' test above, its "fork server" case)
    script = tmp_path / "script.py"
    script.write_text(IMPORTS)
    monkeypatch.setenv("SEEDER_TEST_FORKSERVER", "1")
    monkeypatch.setenv("CI", ci)
    runner = ForkServer.or_fresh(tmp_path)
    assert runner.run([script]).stdout == "[]\n"  # a fresh interpreter: nothing imported


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4" time="9.5">
<testcase classname="tests.test_helpers" name="a" time="2.0"/>
<testcase classname="tests.test_helpers" name="b" time="1.5"/>
<testcase classname="tests.test_verify_runs" name="c" time="6.0"/>
<testcase classname="seeder._seeding.derive" name="seeder._seeding.derive.derive_seed" time="0.5"/>
</testsuite></testsuites>
"""


def test_the_timing_script_sums_each_files_tests_and_the_run(tmp_path):
    """``tests/scripts/suite_times.py``: seconds and tests per file (a doctest's module included),
    largest first, the sum over 2 and the wall time; two runs side by side."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "scripts"))
    try:
        from suite_times import Run, report
    finally:
        sys.path.remove(str(REPO_ROOT / "tests" / "scripts"))
    (tmp_path / "a.xml").write_text(JUNIT)
    (tmp_path / "b.xml").write_text(JUNIT.replace('name="c" time="6.0"', 'name="c" time="1.0"'))
    run = Run(tmp_path / "a.xml")
    assert dict(run.seconds) == {
        "tests/test_verify_runs.py": 6.0,
        "tests/test_helpers.py": 3.5,
        "seeder/_seeding/derive.py": 0.5,
    }
    assert (run.total, run.wall, run.tests["tests/test_helpers.py"]) == (10.0, 9.5, 2)
    lines = report([run, Run(tmp_path / "b.xml")], top=2).splitlines()
    assert lines[1].split() == ["tests/test_verify_runs.py", "6.0", "(1)", "1.0", "(1)"]
    assert lines[2].split() == ["tests/test_helpers.py", "3.5", "(2)", "3.5", "(2)"]
    assert lines[3].split()[-2:] == ["10.0", "5.0"] and lines[4].split()[-2:] == ["5.0", "2.5"]
