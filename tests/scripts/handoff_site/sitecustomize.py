"""Hands ``python SCRIPT ARGS`` to ``tests/scripts/handoff_server.py`` where
``$SEEDER_TEST_HANDOFF`` names its socket.

On ``PYTHONPATH``, Python imports this at start. An interpreter started with a script and no option
but ``-u`` (as torchrun starts its workers) sends the server its stdin, stdout and stderr, argv,
working directory and environment; a child forked from the server (torch imported there once) runs
the script with them. This interpreter stays the process its parent started: it forwards the signals
it gets to the run (SIGABRT too, in place of printing its own faulthandler stacks), which ignores
those this interpreter started ignoring (``cmd &`` in a shell without job control starts it ignoring
SIGINT), and exits as the script did (by the same signal where a signal ended it). Any other start
(``-m``, ``-c``, other options) runs as usual.
"""

import os
import sys

VARIABLE = "SEEDER_TEST_HANDOFF"
#: SIGABRT too: a test that stops a hung process tree with it (helpers.communicate) gets the stacks
#: of the run.
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGABRT")


def _hand_off(path: str, unbuffered: bool) -> None:
    import json
    import signal
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    early = []  # signals that came before the request went: forwarded right after it

    def forward(signum, _frame):
        if early is not None:
            early.append(signum)
        else:
            conn.sendall(json.dumps({"signal": signum}).encode() + b"\n")

    ignored = [
        name for name in FORWARDED if signal.getsignal(getattr(signal, name)) == signal.SIG_IGN
    ]
    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    try:
        conn.connect(path)
    except OSError as exc:
        sys.stderr.write(f"sitecustomize: the handoff server at {path} does not answer: {exc}\n")
        os._exit(1)
    socket.send_fds(conn, [b"\0"], [0, 1, 2])
    conn.sendall(
        json.dumps(
            {
                "argv": sys.argv,
                "orig_argv": sys.orig_argv,
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "unbuffered": unbuffered,
                "signals": {name: name in ignored for name in FORWARDED},
            }
        ).encode()
        + b"\n"
    )
    signals, early = early, None
    for signum in signals:
        forward(signum, None)
    buf = b""
    while b"\n" not in buf:
        data = conn.recv(4096)
        if not data:
            sys.stderr.write(
                "sitecustomize: the handoff server closed the connection without an exit status\n"
            )
            os._exit(1)
        buf += data
    rc = json.loads(buf.split(b"\n", 1)[0])["rc"]
    if rc < 0:
        if -rc != signal.SIGKILL:
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    os._exit(rc)


_OPTIONS = sys.orig_argv[1 : len(sys.orig_argv) - len(sys.argv)]
if (
    os.environ.get(VARIABLE)
    and _OPTIONS in ([], ["-u"])
    and sys.orig_argv[1 + len(_OPTIONS) :] == sys.argv
    and sys.argv[0].endswith(".py")
    and os.path.isfile(sys.argv[0])
):
    _hand_off(os.environ[VARIABLE], unbuffered=_OPTIONS == ["-u"])
