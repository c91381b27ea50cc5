#!/usr/bin/env python
"""Runs Python scripts as forked children of one process that has imported torch once.

    python tests/scripts/fork_server.py [MODULE ...]     (MODULEs imported once too, e.g.
    lightning.pytorch)

Reads one JSON request per line on stdin, ``{"argv": [script, args...], "stdout": path, "stderr":
path}`` (and optionally ``"cwd": path`` and ``"env": {name: value}``, added to the child's
environment), and runs ``script`` as ``__main__`` (``runpy``, as ``python script`` would: spawned
processes re-import it) in a child forked from here, in its own session, with its output in the two
files. Answers each request with two lines on stdout: ``{"pid": N}`` when the child starts and
``{"rc": RC}`` when it has ended (RC negative: the signal that ended it). The child's DataLoader
workers are killed with its session. A run costs a fork instead of a Python start with torch (about
2 s here).

A local option for fast iteration (``SEEDER_TEST_FORKSERVER=1``, ignored where ``CI`` is set): by
default the tests start fresh interpreters (tests/helpers.py's ``fork_servers``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback

import numpy  # noqa: F401  (imported once here, inherited by every child)
import torch  # noqa: F401
from script_main import (  # tests/scripts is this script's directory
    exit_as_interpreter,
    install_tools,
    run_as_main,
)

import seeder  # noqa: F401


def child(argv: list, stdout: str, stderr: str, cwd: str, env: dict) -> None:
    """The forked child: a fresh session, its output in files, ``argv[0]`` run as ``__main__``;
    never returns."""
    code = 1
    try:
        os.setsid()
        argv = [os.path.abspath(argv[0]), *argv[1:]]  # a script named from the server's directory
        os.chdir(cwd)
        os.environ.update(env)
        install_tools()
        for fd, path in ((1, stdout), (2, stderr)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        code = run_as_main(argv[0])
    except BaseException:  # noqa: BLE001 - reported in the child's stderr file and its exit status
        traceback.print_exc()
    finally:
        exit_as_interpreter(code)


def main() -> int:
    for name in sys.argv[
        1:
    ]:  # heavy imports the children share (a framework's import takes seconds)
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child(
                request["argv"],
                request["stdout"],
                request["stderr"],
                request.get("cwd", os.getcwd()),
                request.get("env", {}),
            )
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        try:
            os.killpg(
                pid, signal.SIGKILL
            )  # what is left of its session: DataLoader workers of a killed child
        except (ProcessLookupError, PermissionError):
            pass
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"rc": rc}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
