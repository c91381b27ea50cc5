"""The handoff server of the tests, a local opt-in (``SEEDER_TEST_FORKSERVER=1``, never under
``CI``): Python interpreters that a tool under test or a launcher starts (``seeder verify``'s runs,
torchrun's ranks) hand their script over to a child forked from one process that imported torch once
(``tests/scripts/handoff_server.py``, ``tests/scripts/handoff_site/sitecustomize.py``). By default
they run their scripts themselves."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Union

from helpers import REPO_ROOT, child_env, fork_servers, stop_server


class HandOffServer:
    """A ``tests/scripts/handoff_server.py`` process: interpreters started with :meth:`env` in their
    environment as ``python SCRIPT ARGS`` hand the script over to a child forked from it (torch
    imported once, not per run).

    For commands a tool under test starts itself (``seeder verify``'s runs): each stays a real
    process, with the argv, directory, environment, output and exit status it has without this.
    ``preload``: modules imported once.
    """

    def __init__(self, tmp: Path, preload: Sequence[str] = ()):
        self.socket = tmp / "handoff.sock"
        self.log = open(tmp / "handoff_server.err", "w+")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO_ROOT / "tests" / "scripts" / "handoff_server.py"),
                str(self.socket),
                *preload,
            ],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=str(REPO_ROOT),
        )
        if self.proc.stdout.readline() != "ready\n":
            self.close()
            raise AssertionError(
                f"the handoff server did not "
                f"start:\n{(tmp / 'handoff_server.err').read_text()[-3000:]}"
            )

    def env(self) -> dict[str, str]:
        """The variables that make a Python started with them hand its script over
        (for :func:`child_env`)."""
        return {
            "PYTHONPATH": os.pathsep.join(
                [str(REPO_ROOT / "tests" / "scripts" / "handoff_site"), child_env()["PYTHONPATH"]]
            ),
            "SEEDER_TEST_HANDOFF": str(self.socket),
        }

    def close(self) -> None:
        stop_server(self.proc)
        self.proc.stdout.close()
        self.log.close()


#: What a first optimizer step and ``torch.use_deterministic_algorithms`` import (over a second
#: each).
TORCH_PRELOAD = ("torch._dynamo", "torch._inductor.config")
#: The frameworks' modules a framework server imports too, those installed (each import takes
#: seconds).
FRAMEWORKS = {
    "lightning": ("lightning.pytorch",),
    "transformers": ("transformers", "seeder.integrations.transformers"),
    "accelerate": ("accelerate",),
}
_SERVERS: dict[tuple[int, bool], HandOffServer] = {}


class NoHandOff:
    """What :func:`handoff_server` gives where fork servers are off (the default, and always under
    ``CI``): an empty
    :meth:`env`, so that every Python a tool or launcher starts runs its script itself, a fresh
    interpreter."""

    def env(self) -> dict[str, str]:
        return {}


def handoff_server(
    frameworks: bool = False, start_is_subject: bool = True
) -> Union[HandOffServer, NoHandOff]:
    """This process's handoff server where :func:`helpers.fork_servers` opts in
    (``SEEDER_TEST_FORKSERVER=1``, locally), started on first use and closed at exit: torch imported
    once, and with ``frameworks`` the installed frameworks too (only for their scripts: the others
    run without them imported). Else :class:`NoHandOff`.

    ``start_is_subject=False``: the server in CI too, for the tests whose subject is not the
    interpreters' start (what ``seeder verify`` names in a script's records), so that the suite
    stays under 5 minutes on 2 cores.
    """
    if start_is_subject and not fork_servers():
        return NoHandOff()
    key = (os.getpid(), frameworks)
    if key not in _SERVERS:
        import atexit
        import shutil
        import tempfile

        preload = TORCH_PRELOAD + (
            tuple(
                m
                for name, modules in FRAMEWORKS.items()
                if importlib.util.find_spec(name)
                for m in modules
            )
            if frameworks
            else ()
        )
        tmp = Path(tempfile.mkdtemp(prefix="seeder-handoff-"))
        server = _SERVERS[key] = HandOffServer(tmp, preload=preload)

        def close(pid: int = os.getpid()) -> None:
            if os.getpid() == pid:  # not in a forked copy of this process
                server.close()
                shutil.rmtree(tmp, ignore_errors=True)

        atexit.register(close)
    return _SERVERS[key]
