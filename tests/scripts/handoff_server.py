#!/usr/bin/env python
"""Runs the scripts that real Python interpreters hand over, each in a child forked from here (torch
imported once).

    python tests/scripts/handoff_server.py SOCKET [MODULE ...]     (MODULEs imported once too)

An interpreter started as ``python [-u] SCRIPT ARGS`` with ``tests/scripts/handoff_site`` on
``PYTHONPATH`` and ``SEEDER_TEST_HANDOFF=SOCKET`` in its environment
(``handoff_site/sitecustomize.py``) connects here before it runs SCRIPT and sends its stdin, stdout
and stderr, its argv, working directory and environment. A child forked from here takes them over as
a fresh interpreter would have them (a new session, fresh stdio buffering, the global RNGs of a
fresh process, ``sys.path`` from that ``PYTHONPATH``) and runs SCRIPT as ``__main__``. The
interpreter stays: it forwards the signals it gets to the child's session and exits as the script
did; when it dies (SIGKILL), the child's session is killed. A run costs a fork instead of importing
torch (about 2 s here).

Prints ``ready`` once it listens; ends when its stdin closes.

A local option for fast iteration (``SEEDER_TEST_FORKSERVER=1``, ignored where ``CI`` is set): by
default the tests start fresh interpreters (tests/helpers.py's ``fork_servers``).
"""

from __future__ import annotations

import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback

import numpy
import torch
from script_main import (  # tests/scripts is this script's directory
    exit_as_interpreter,
    install_tools,
    run_as_main,
)

#: The state of torch's global generator a new interpreter starts with: drawn from the OS (torch
#: seeds it with a nondeterministic seed at start), or torch's fixed default seed's (builds that
#: start from 67280421310721).
FRESH_TORCH_RNG = (
    None if torch.initial_seed() != 67280421310721 else torch.random.default_generator.get_state()
)

import seeder  # noqa: E402,F401  (imported once here, inherited by every child)

#: ``sys.path`` without the script directory and this server's ``PYTHONPATH``: what every
#: interpreter starts with.
_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
_BASE_PATH = [p for p in sys.path[1:] if p not in _PYTHONPATH]
_SERVER_STDIO = (
    sys.stdin,
    sys.stdout,
    sys.stderr,
)  # kept: collecting them would close fds 0-2 of a child


def _fresh_stdio(unbuffered: bool) -> None:
    """``sys.stdin/stdout/stderr`` over fds 0-2 as a new interpreter builds them
    (``PYTHONUNBUFFERED`` included)."""

    def text(fd: int, mode: str, line_buffering: bool, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        writing = mode == "wb"
        buffered = (
            raw
            if writing and unbuffered
            else (io.BufferedWriter(raw) if writing else io.BufferedReader(raw))
        )
        return io.TextIOWrapper(
            buffered,
            encoding=_SERVER_STDIO[1].encoding,
            errors=errors,
            line_buffering=line_buffering,
            write_through=writing and unbuffered,
        )

    sys.stdin = sys.__stdin__ = text(0, "rb", False, _SERVER_STDIO[0].errors)
    sys.stdout = sys.__stdout__ = text(1, "wb", os.isatty(1), _SERVER_STDIO[1].errors)
    sys.stderr = sys.__stderr__ = text(2, "wb", True, "backslashreplace")


def _run(request: dict, fds: list) -> None:
    """The forked child: takes over the interpreter's fds, directory and environment, runs the
    script; never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        env = request["env"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        _fresh_stdio(bool(request.get("unbuffered") or env.get("PYTHONUNBUFFERED")))
        for name, ignored in request[
            "signals"
        ].items():  # as the interpreter started: ignored, or Python's default
            sig = getattr(signal, name)
            signal.signal(
                sig,
                signal.SIG_IGN
                if ignored
                else signal.default_int_handler
                if sig == signal.SIGINT
                else signal.SIG_DFL,
            )
        import faulthandler

        faulthandler.disable()  # enabled in this server, it would not install its handlers again
        if env.get("PYTHONFAULTHANDLER"):
            faulthandler.enable()
        argv = request["argv"]
        pythonpath = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.path.dirname(os.path.abspath(argv[0]))] + pythonpath + _BASE_PATH
        sys.argv, sys.orig_argv = list(argv), list(request["orig_argv"])
        install_tools()
        # a new interpreter seeds NumPy's global RNG from the OS; Python's random reseeds at fork
        numpy.random.seed()
        if FRESH_TORCH_RNG is None:
            torch.seed()
        else:
            torch.random.default_generator.set_state(FRESH_TORCH_RNG)
        if env.get("OMP_NUM_THREADS", "").isdigit():
            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        try:
            code = run_as_main(argv[0])
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT  # an interpreter ends on an uncaught KeyboardInterrupt by SIGINT
        threading._shutdown()  # noqa: SLF001 - what an interpreter's exit does: wait for non-daemon threads
    except BaseException:  # noqa: BLE001 - reported on the run's stderr and in its exit status
        traceback.print_exc()
    finally:
        exit_as_interpreter(code)


def _signal_session(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # before the child's setsid: no session yet, only the child
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _request(conn: socket.socket) -> tuple[list[int], bytes, bytes]:
    """The interpreter's stdio fds, its request line and what it sent after it (signals)."""
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    buf = b""
    while b"\n" not in buf:
        data = conn.recv(1 << 16)
        if not data:
            raise EOFError("the interpreter closed the connection before its request")
        buf += data
    line, buf = buf.split(b"\n", 1)
    return fds, line, buf


def _forward_signals(conn: socket.socket, pid: int, buf: bytes) -> None:
    """Until the run ``pid`` ends, signal its session with what the interpreter forwards; kill it
    when the interpreter is gone (SIGKILL)."""
    ended = os.pidfd_open(pid)
    while True:
        *lines, buf = buf.split(b"\n")
        for line in lines:
            _signal_session(pid, json.loads(line)["signal"])
        ready, _, _ = select.select([conn, ended], [], [])
        if ended in ready:
            return
        data = conn.recv(4096)
        if not data:
            _signal_session(pid, signal.SIGKILL)
            return
        buf += data


def _supervise(conn: socket.socket) -> None:
    """One connection, in a process forked for it: start the run, forward signals, answer its exit
    status."""
    try:
        fds, line, buf = _request(conn)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run(json.loads(line), fds)
        for fd in fds:
            os.close(fd)
        _forward_signals(conn, pid, buf)
        _, status = os.waitpid(pid, 0)
        _signal_session(
            pid, signal.SIGKILL
        )  # what is left of its session: DataLoader workers of a killed run
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
        except OSError:
            pass
    except BaseException:  # noqa: BLE001 - in the server's stderr; the interpreter sees the connection close
        traceback.print_exc()
    finally:
        os._exit(0)


def main() -> int:
    path = sys.argv[1]
    for name in sys.argv[2:]:  # heavy imports the runs share
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([listener, stdin], [], [])
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap the supervisors that ended
                pass
        except ChildProcessError:
            pass
        if stdin in ready and not os.read(stdin, 4096):
            break
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                _supervise(conn)
            conn.close()
    listener.close()
    os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
