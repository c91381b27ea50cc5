"""The handoff server of the tests: Python interpreters that a tool under test starts (``seeder verify``'s runs) hand
their script over to a child forked from one process that imported torch once (``tests/scripts/handoff_server.py``,
``tests/scripts/handoff_site/sitecustomize.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Sequence

from helpers import REPO_ROOT, child_env


class HandOffServer:
    """A ``tests/scripts/handoff_server.py`` process: interpreters started with :meth:`env` in their environment as
    ``python SCRIPT ARGS`` hand the script over to a child forked from it (torch imported once, not per run).

    For commands a tool under test starts itself (``seeder verify``'s runs): each stays a real process, with the
    argv, directory, environment, output and exit status it has without this. ``preload``: modules imported once.
    """

    def __init__(self, tmp: Path, preload: Sequence[str] = ()):
        self.socket = tmp / "handoff.sock"
        self.log = open(tmp / "handoff_server.err", "w+")
        self.proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "tests" / "scripts" / "handoff_server.py"),
                                      str(self.socket), *preload], env=child_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=str(REPO_ROOT))
        if self.proc.stdout.readline() != "ready\n":
            self.close()
            self.log.seek(0)
            raise AssertionError(f"the handoff server did not start:\n{self.log.read()[-3000:]}")

    def env(self) -> Dict[str, str]:
        """The variables that make a Python started with them hand its script over (for :func:`child_env`)."""
        return {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "tests" / "scripts" / "handoff_site"),
                                               child_env()["PYTHONPATH"]]), "SEEDER_TEST_HANDOFF": str(self.socket)}

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
