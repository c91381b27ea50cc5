import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# a hung child is stopped with SIGABRT to get its stacks (helpers.communicate): no core files in the
# checkout
try:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
except (ImportError, ValueError, OSError):
    pass


def pytest_collection_finish(session):
    """Every test module imported (torch, the frameworks: about half a million objects): the cyclic
    garbage collector no longer walks them (``gc.freeze``), so that each ``gc.collect()`` of a
    test, and each automatic collection, walks only what the tests made (tenths of a CPU-second
    each otherwise). Reference counting still frees a frozen object; only cycles among them stay."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _clean_seeder_env(monkeypatch):
    """No test sees a stray SEEDER_SEED or launcher rank from the calling shell."""
    from seeder._seeding.distributed import LAUNCHER_VARIABLES

    for var in (
        "SEEDER_SEED",
        "SEEDER_DETERMINISTIC",
        "SEEDER_SNAPSHOT_DIR",
        "SEEDER_TRACE",
        *LAUNCHER_VARIABLES,
    ):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def tool_hooks():
    """The callbacks seeder verify and seeder locate install in the runs they start
    (``seeder._run.bootstrap``), installed in this process; each acts only where its variable
    (``$SEEDER_STEPS``, ``$SEEDER_TRACE``) is set, as in those runs."""
    from seeder._run import bootstrap

    bootstrap.uninstall()
    bootstrap.install({"SEEDER_STEPS": "1", "SEEDER_TRACE": "1"})
    yield
    bootstrap.uninstall()


@pytest.fixture
def fresh_default():
    """The module-level default seeder, reset before and after the test."""
    import seeder
    from seeder._seeding.default import default_seeder

    default_seeder().reset()
    yield seeder
    default_seeder().reset()


#: What a first optimizer step and ``torch.use_deterministic_algorithms`` import (over a second
#: each): a fork server imports them once.
TORCH_PRELOAD = ["torch._dynamo", "torch._inductor.config"]


def pytest_report_header(config):
    """Says how the session starts its scripts, so that a log shows whether its processes were
    fresh."""
    from helpers import FORKSERVER_VARIABLE, fork_servers

    if fork_servers():
        return (
            f"scripts: forked from servers ({FORKSERVER_VARIABLE}=1, a local option; CI ignores it)"
        )
    return "scripts: fresh interpreters"


@pytest.fixture(scope="session")
def scripts(tmp_path_factory):
    """The session's runner of training scripts (:meth:`helpers.ForkServer.kept`): a run whose start
    is the subject (a resume in a new process, a kill; the default) is a fresh interpreter unless
    ``SEEDER_TEST_FORKSERVER=1`` (locally); a run marked ``start_is_subject=False`` (a reference,
    the run before a stop) forks from a server that imported torch once."""
    from helpers import ForkServer

    runner = ForkServer.kept(tmp_path_factory.mktemp("scripts"), preload=TORCH_PRELOAD)
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def framework_scripts(tmp_path_factory):
    """:func:`scripts` for the frameworks' scripts: a fork server imports Lightning and transformers
    too, those installed (Lightning's import alone takes seconds)."""
    import importlib.util

    from helpers import ForkServer

    frameworks = {
        "lightning": ["lightning.pytorch"],
        "transformers": ["transformers", "seeder.integrations.transformers"],
    }
    preload = [
        m for name, modules in frameworks.items() if importlib.util.find_spec(name) for m in modules
    ]
    runner = ForkServer.kept(
        tmp_path_factory.mktemp("framework_scripts"), preload=["torch._dynamo", *preload]
    )
    yield runner
    runner.close()


@pytest.fixture
def fresh_runs(tmp_path):
    """A :class:`helpers.FreshRuns`: each script in a fresh interpreter, whatever
    ``SEEDER_TEST_FORKSERVER`` says."""
    from helpers import FreshRuns

    return FreshRuns(tmp_path)


@pytest.fixture(scope="session")
def handoff():
    """The environment switch for the Python interpreters that ``seeder verify``, ``compare`` and
    launchers start in tests: :func:`handoff.handoff_server`. Its :meth:`env` is empty by default
    (each runs its script itself); with ``SEEDER_TEST_FORKSERVER=1`` (locally) it hands each script
    to a server that imported torch once."""
    from handoff import handoff_server

    return handoff_server()


@pytest.fixture(scope="session")
def handoff_kept():
    """:func:`handoff` for the tests whose subject is not the interpreters' start (which cause
    ``seeder verify`` names in a toy script's records): the handoff server in CI too
    (``handoff_server(start_is_subject=False)``), as a fresh Python per run would put minutes on the
    suite."""
    from handoff import handoff_server

    return handoff_server(start_is_subject=False)


@pytest.fixture(scope="session")
def handoff_server_process(tmp_path_factory):
    """A running :class:`handoff.HandOffServer` whatever the switch says: for the tests of the
    server itself."""
    from handoff import HandOffServer

    server = HandOffServer(tmp_path_factory.mktemp("handoff"))
    yield server
    server.close()


@pytest.fixture
def started_in_tmp(tmp_path, monkeypatch):
    """An empty folder of the test's own as the working directory: ``seeder verify``, ``compare``
    and ``locate`` mirror the folder they are started in into every run's folder (and snapshot it
    before and after), and started in the repository each run would copy hundreds of its files.
    Tests of what a run sees of the user's folder make their own (``user_dir``)."""
    folder = tmp_path / "started-in"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def python_sigint():
    """SIGINT at Python's own handler (``KeyboardInterrupt``) for a test that sends this process a
    real Ctrl-C, even where the suite was started ignoring SIGINT (``pytest &`` or a script run in
    the background of a shell without job control); put back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
