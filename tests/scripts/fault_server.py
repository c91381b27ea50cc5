#!/usr/bin/env python
"""Runs the segments of a run that is SIGKILLed again and again, each in a forked child of one process.

    python tests/scripts/fault_server.py '<JSON list of argument lists>'

Imports torch, seeder and ``examples/train.py`` (through ``train_faults.py``) once; each
segment is a child forked from here, in its own session, that runs ``train_faults.py``'s
``main`` with its arguments (hooks included) and usually SIGKILLs itself at a planned point;
its DataLoader workers are killed with it. Prints ``SEGMENT <i> <how it ended>`` per segment.
Forking spares each segment the seconds of a Python start with torch.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_faults  # noqa: E402


def segment(argv: list) -> str:
    """Run one segment in a forked child; ``"killed"``, ``"exit <code>"`` or ``"signal <n>"``."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: a fresh session, so that its workers go with it
        code = 1
        try:
            os.setsid()
            hooks, rest = train_faults.HOOKS.parse_known_args(argv)
            train_faults.install(hooks)
            code = train_faults.train.main(rest)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code or 0)
    _, status = os.waitpid(pid, 0)
    try:
        os.killpg(pid, signal.SIGKILL)  # the DataLoader workers of a killed child
    except (ProcessLookupError, PermissionError):
        pass
    if os.WIFSIGNALED(status):
        return "killed" if os.WTERMSIG(status) == signal.SIGKILL else f"signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}"


def main() -> int:
    for i, argv in enumerate(json.loads(sys.argv[1])):
        print(f"SEGMENT {i} {segment(argv)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
