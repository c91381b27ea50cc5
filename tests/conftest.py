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
def fresh_default():
    """The module-level default seeder, reset before and after the test."""
    import seeder
    from seeder._seeding.default import default_seeder

    default_seeder().reset()
    yield seeder
    default_seeder().reset()


@pytest.fixture(scope="session")
def forks(tmp_path_factory):
    """One :class:`helpers.ForkServer` for the session's training scripts: torch, and what a first
    optimizer step and ``torch.use_deterministic_algorithms`` import (``torch._dynamo``,
    ``torch._inductor.config``: over a second each), are imported once, not once per run."""
    from helpers import ForkServer

    server = ForkServer(
        tmp_path_factory.mktemp("forks"), preload=["torch._dynamo", "torch._inductor.config"]
    )
    yield server
    server.close()


@pytest.fixture(scope="session")
def framework_forks(tmp_path_factory):
    """:func:`forks` with Lightning and transformers imported too, those installed (Lightning's
    import alone takes seconds)."""
    import importlib.util

    from helpers import ForkServer

    frameworks = {
        "lightning": ["lightning.pytorch"],
        "transformers": ["transformers", "seeder.integrations.transformers"],
    }
    preload = [
        m for name, modules in frameworks.items() if importlib.util.find_spec(name) for m in modules
    ]
    server = ForkServer(
        tmp_path_factory.mktemp("framework_forks"), preload=["torch._dynamo", *preload]
    )
    yield server
    server.close()


@pytest.fixture(scope="session")
def handoff():
    """The session's :class:`handoff.HandOffServer` for the torch scripts that ``seeder verify`` and
    ``compare`` start in tests: with :meth:`~handoff.HandOffServer.env` in their environment, each
    run is the interpreter verify started, running its script forked from a process that imported
    torch (and ``handoff.TORCH_PRELOAD``) once."""
    from handoff import handoff_server

    return handoff_server()
