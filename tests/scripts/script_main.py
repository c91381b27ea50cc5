"""Running a script as ``__main__`` in a process forked from a server, as ``python SCRIPT`` would
run it."""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import traceback


def run_as_main(path: str) -> int:
    """Run the script at ``path`` as ``__main__``; its exit status as ``python`` gives it for
    ``sys.exit``.

    Other exceptions propagate (the caller reports them, as an interpreter does).
    """
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as stop:
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def exit_as_interpreter(code: int) -> None:
    """End this process as an interpreter's exit does: the ``atexit`` functions, the streams
    flushed, then exit ``code`` (a negative ``code``: killed by that signal). Never returns."""
    try:
        # what an interpreter's exit runs (seeder verify's digest at exit, say)
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - reported like an exception at exit
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed stream: nothing left to write
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def install_tools() -> None:
    """In a forked run: install the tools' hooks where its ``PYTHONPATH`` starts with their
    ``sitecustomize`` (``seeder._run.bootstrap.SITE_DIR``), as that file does at an interpreter's
    start (the server that forked the run started before it)."""
    from seeder._run.bootstrap import SITE_DIR, install

    if SITE_DIR in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        install()
